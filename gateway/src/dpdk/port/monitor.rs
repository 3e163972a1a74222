//! Reading a port's counters, extended stats, identity and link from any thread.

use super::*;

impl PortMonitor {
    pub fn id(&self) -> PortId {
        self.inner.id
    }

    pub fn stats(&self) -> Result<PortStats> {
        stats(self.inner.id)
    }

    /// The names of the port's extended statistics (at most [`MAX_XSTATS`]), in the order
    /// [`PortMonitor::xstats`] reads their values. Fixed once the port is started.
    pub fn xstat_names(&self) -> Result<Vec<String>> {
        // SAFETY: a NULL array with size 0 asks only for the count.
        let count =
            unsafe { dpdk_sys::rte_eth_xstats_get_names(self.inner.id.0, std::ptr::null_mut(), 0) };
        check("rte_eth_xstats_get_names", count)?;
        let mut names =
            vec![dpdk_sys::rte_eth_xstat_name::default(); (count as usize).min(MAX_XSTATS)];
        // SAFETY: the array holds names.len() entries, which the call fills at most.
        let filled = unsafe {
            dpdk_sys::rte_eth_xstats_get_names(
                self.inner.id.0,
                names.as_mut_ptr(),
                names.len() as u32,
            )
        };
        check("rte_eth_xstats_get_names", filled)?;
        names.truncate((filled as usize).min(names.len()));
        Ok(names.iter().map(|name| c_text(&name.name)).collect())
    }

    /// The extended statistics' values into `values`, one per name of
    /// [`PortMonitor::xstat_names`] (`values` is resized to that count).
    pub fn xstats(&self, values: &mut Vec<u64>, count: usize) -> Result<()> {
        let mut raw = vec![dpdk_sys::rte_eth_xstat::default(); count.min(MAX_XSTATS)];
        // SAFETY: the array holds raw.len() entries, which the call fills at most.
        let filled = unsafe {
            dpdk_sys::rte_eth_xstats_get(self.inner.id.0, raw.as_mut_ptr(), raw.len() as u32)
        };
        check("rte_eth_xstats_get", filled)?;
        values.clear();
        values.resize(raw.len(), 0);
        for stat in raw.iter().take(filled as usize) {
            if let Some(value) = values.get_mut(stat.id as usize) {
                *value = stat.value;
            }
        }
        Ok(())
    }

    /// The port's driver, firmware version and device name.
    pub fn info(&self) -> PortInfo {
        let id = self.inner.id.0;
        let driver =
            device_info(self.inner.id).map_or_else(|_| String::new(), |info| driver_name(&info));
        let mut firmware = [0 as std::ffi::c_char; 128];
        // SAFETY: the buffer's length is passed; the driver writes a NUL-terminated string
        // into it, or returns non-zero (no firmware to tell, or a longer one).
        let fw = unsafe {
            dpdk_sys::rte_eth_dev_fw_version_get(id, firmware.as_mut_ptr(), firmware.len())
        };
        let mut device = [0 as std::ffi::c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
        // SAFETY: the buffer is RTE_ETH_NAME_MAX_LEN long, as the call requires.
        let named = unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(id, device.as_mut_ptr()) };
        PortInfo {
            driver,
            firmware: if fw == 0 {
                c_text(&firmware)
            } else {
                String::new()
            },
            device: if named == 0 {
                c_text(&device)
            } else {
                String::new()
            },
        }
    }

    /// Link up, and speed in Mbit/s.
    pub fn link(&self) -> (bool, u32) {
        link_status(self.inner.id)
    }
}

/// A port's link: up, and its speed in Mbit/s (down and 0 when the driver cannot say). For
/// the ports the gateway started and for a bond's members, which the bonding PMD started.
pub fn link_status(id: PortId) -> (bool, u32) {
    let mut link = dpdk_sys::rte_eth_link::default();
    // SAFETY: a valid out-pointer; an unknown port returns an error; nowait never blocks.
    let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(id.0, &mut link) };
    if ret < 0 {
        return (false, 0);
    }
    (link.link_status() != 0, link.link_speed)
}

pub(crate) fn stats(id: PortId) -> Result<PortStats> {
    let mut raw = dpdk_sys::rte_eth_stats::default();
    // SAFETY: valid port and out-pointer.
    check("rte_eth_stats_get", unsafe {
        dpdk_sys::rte_eth_stats_get(id.0, &mut raw)
    })?;
    Ok(PortStats {
        rx_packets: raw.ipackets,
        tx_packets: raw.opackets,
        rx_bytes: raw.ibytes,
        tx_bytes: raw.obytes,
        rx_missed: raw.imissed,
        rx_errors: raw.ierrors,
        tx_errors: raw.oerrors,
        rx_nombuf: raw.rx_nombuf,
        rx_queue_packets: raw.q_ipackets,
        tx_queue_packets: raw.q_opackets,
        rx_queue_drops: raw.q_errors,
    })
}
