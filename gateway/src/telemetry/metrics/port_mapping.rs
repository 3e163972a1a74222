//! `gateway_port_mapping_*`: the mappings hosts hold by PCP and NAT-PMP, and the requests
//! by result (`crate::control::port_mapping`).

use super::*;
use crate::control::port_mapping::PortMappingStatus;

impl PortMappingMetrics {
    pub(crate) fn new(registry: &Registry) -> Self {
        PortMappingMetrics {
            mappings: gauge_vec(
                registry,
                "port_mappings",
                "Port mappings hosts hold now, by the protocol that made them (pcp, nat-pmp).",
                &["origin"],
            ),
            requests: counter_vec(
                registry,
                "port_mapping_requests_total",
                "Port mapping requests, by protocol (pcp, nat-pmp, upnp) and result: mapped (made or renewed), deleted, address (NAT-PMP's external address), announce, query and search (UPnP's), refused ones by reason (host_quota, table_full, port_unavailable, no_free_port, not_owner, third_party, address_mismatch, no_external_address, no_such_entry), unsupported, malformed, foreign (not from a host on the served link, or naming another host in HTTP) and policed (over the request budget).",
                &["origin", "result"],
            ),
        }
    }

    pub(crate) fn sync(&self, status: &PortMappingStatus) {
        let held = status
            .mappings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for origin in pipeline::portmap::Origin::ALL {
            let count = held.iter().filter(|m| m.origin == origin).count();
            self.mappings
                .with_label_values(&[origin.label()])
                .set(count as i64);
        }
        let requests = status
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for ((origin, result), count) in requests {
            sync_counter(&self.requests, &[origin, result], count);
        }
    }
}
