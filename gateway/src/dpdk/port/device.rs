//! ethdev's device info and the small conversions the port's set-up needs.

use super::*;

/// The RX queues' config: the driver's defaults (thresholds, offloads it needs) with
/// drop-enable on. On ixgbe without it, a queue out of descriptors holds its packets in the
/// port's shared RX buffer, which fills and stops every queue of the port: one slow worker
/// would stall the others. With it, that queue alone drops, counted in `q_errors`.
pub(crate) fn rx_queue_conf(info: &dpdk_sys::rte_eth_dev_info) -> dpdk_sys::rte_eth_rxconf {
    let mut rxconf = info.default_rxconf;
    rxconf.rx_drop_en = 1;
    rxconf
}

/// A C string from a fixed buffer, up to its NUL or its end.
pub(crate) fn c_text(buffer: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(crate) fn device_info(id: PortId) -> Result<dpdk_sys::rte_eth_dev_info> {
    let mut info = dpdk_sys::rte_eth_dev_info::default();
    // SAFETY: valid out-pointer; an unknown port returns -ENODEV.
    check("rte_eth_dev_info_get", unsafe {
        dpdk_sys::rte_eth_dev_info_get(id.0, &mut info)
    })?;
    Ok(info)
}

pub(crate) fn driver_name(info: &dpdk_sys::rte_eth_dev_info) -> String {
    if info.driver_name.is_null() {
        return "unknown driver".into();
    }
    // SAFETY: driver_name points at the driver's static NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr(info.driver_name) }
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn check_descriptors(
    what: &str,
    asked: u16,
    lim: &dpdk_sys::rte_eth_desc_lim,
) -> std::result::Result<(), String> {
    let align = lim.nb_align.max(1);
    if asked < lim.nb_min || asked > lim.nb_max || !asked.is_multiple_of(align) {
        return Err(format!(
            "{asked} {what} asked, the device allows {}..={} in steps of {align}",
            lim.nb_min, lim.nb_max
        ));
    }
    Ok(())
}

pub(crate) const fn libc_enotsup() -> i32 {
    95 // ENOTSUP on Linux
}
