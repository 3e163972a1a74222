//! 802.3ad (LACP) bonds on DPDK's bonding PMD. The bond itself is a vdev the EAL creates from
//! its arguments (`net_bonding0,mode=4,slave=...`); this module tunes it before it starts and
//! reads its members' state for metrics. DPDK 22.11's API says "slave" for a member.

use super::error::{check, DpdkError, Result};
use super::ids::PortId;

/// The actor/partner state bits of an LACPDU (IEEE 802.1AX).
pub mod lacp_state {
    pub const ACTIVE: u8 = 0x01;
    pub const SHORT_TIMEOUT: u8 = 0x02;
    pub const AGGREGATION: u8 = 0x04;
    pub const SYNCHRONIZATION: u8 = 0x08;
    pub const COLLECTING: u8 = 0x10;
    pub const DISTRIBUTING: u8 = 0x20;
    pub const DEFAULTED: u8 = 0x40;
    pub const EXPIRED: u8 = 0x80;
}

/// One member's LACP view, as the bonding PMD's state machines see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberLacp {
    pub selected: bool,
    pub actor_state: u8,
    pub partner_state: u8,
}

/// How often the gateway sends LACPDUs. Fast: about every second whatever the partner asks
/// (the periodic machine's slow period brought down next to its fast one; DPDK requires
/// fast < slow). Slow: 802.3ad's defaults (30 s unless the partner asks for short timeouts).
pub fn set_lacp_rate(bond: PortId, fast: bool) -> Result<()> {
    let mut conf = dpdk_sys::rte_eth_bond_8023ad_conf::default();
    // SAFETY: valid port and out-pointer.
    check("rte_eth_bond_8023ad_conf_get", unsafe {
        dpdk_sys::rte_eth_bond_8023ad_conf_get(bond.0, &mut conf)
    })?;
    if !fast {
        return Ok(());
    }
    conf.slow_periodic_ms = conf.fast_periodic_ms + 100;
    // SAFETY: valid port and a conf read from the PMD and then adjusted.
    check("rte_eth_bond_8023ad_setup", unsafe {
        dpdk_sys::rte_eth_bond_8023ad_setup(bond.0, &mut conf)
    })?;
    Ok(())
}

/// Moves LACP to a queue pair of its own on each member, away from data traffic. Needs a
/// flow rule on every member (ethertype 0x8809 to a queue), which the X550 accepts and
/// virtual devices mostly refuse. Call while the bond is stopped.
pub fn enable_dedicated_lacp_queues(bond: PortId) -> Result<()> {
    // SAFETY: valid, stopped bond port.
    check("rte_eth_bond_8023ad_dedicated_queues_enable", unsafe {
        dpdk_sys::rte_eth_bond_8023ad_dedicated_queues_enable(bond.0)
    })?;
    Ok(())
}

pub fn disable_dedicated_lacp_queues(bond: PortId) -> Result<()> {
    // SAFETY: valid, stopped bond port.
    check("rte_eth_bond_8023ad_dedicated_queues_disable", unsafe {
        dpdk_sys::rte_eth_bond_8023ad_dedicated_queues_disable(bond.0)
    })?;
    Ok(())
}

pub fn member_lacp(bond: PortId, member: PortId) -> Result<MemberLacp> {
    let mut info = dpdk_sys::rte_eth_bond_8023ad_slave_info::default();
    // SAFETY: valid ports and out-pointer.
    let ret = unsafe { dpdk_sys::rte_eth_bond_8023ad_slave_info(bond.0, member.0, &mut info) };
    if ret < 0 {
        return Err(DpdkError::from_errno("rte_eth_bond_8023ad_slave_info", ret));
    }
    Ok(MemberLacp {
        selected: info.selected == dpdk_sys::SELECTED,
        actor_state: info.actor_state,
        partner_state: info.partner_state,
    })
}
