//! Which of the interfaces' virtual addresses (an HA pair's, `interfaces[].virtual_address`)
//! this box's twins hold, that is where keepalived made this box VRRP master: written by the
//! control thread as netlink reports it, read by the ARP answers and by the metrics
//! (`gateway_ha_virtual_address_held`, which shows a split brain as both boxes at 1).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::GatewayConfig;

/// Per interface: None without a virtual address, else whether this box holds it.
#[derive(Debug, Default)]
pub struct VirtualHeld {
    held: Vec<Option<AtomicBool>>,
}

impl VirtualHeld {
    pub fn from_config(config: &GatewayConfig) -> Self {
        VirtualHeld {
            held: config
                .interfaces
                .iter()
                .map(|iface| iface.virtual_address.map(|_| AtomicBool::new(false)))
                .collect(),
        }
    }

    /// Whether any interface has a virtual address.
    pub fn any(&self) -> bool {
        self.held.iter().any(Option::is_some)
    }

    /// Whether this box holds interface `port`'s virtual address.
    pub fn is_held(&self, port: usize) -> bool {
        self.held
            .get(port)
            .and_then(Option::as_ref)
            .is_some_and(|held| held.load(Ordering::Relaxed))
    }

    /// Records whether interface `port`'s virtual address is held now; returns whether it
    /// was before. Nothing for an interface without one.
    pub(crate) fn set(&self, port: usize, held: bool) -> bool {
        match self.held.get(port).and_then(Option::as_ref) {
            Some(flag) => flag.swap(held, Ordering::Relaxed),
            None => false,
        }
    }

    /// The interfaces with a virtual address, by index, and whether each is held.
    pub fn interfaces(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.held.iter().enumerate().filter_map(|(port, flag)| {
            flag.as_ref()
                .map(|flag| (port, flag.load(Ordering::Relaxed)))
        })
    }
}
