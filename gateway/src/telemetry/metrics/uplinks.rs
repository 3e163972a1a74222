//! The uplinks' metrics: whether each takes new flows, and what its health checks found.

use super::*;

impl UplinkMetrics {
    pub(crate) fn new(registry: &Registry) -> Self {
        UplinkMetrics {
            usable: gauge_vec(
                registry,
                "uplink_usable",
                "1 while the uplink may take new flows (addressed, with a next hop, its health checks passing), else 0.",
                &["uplink"],
            ),
            failed: gauge_vec(
                registry,
                "uplink_health_failed",
                "1 while the uplink's health checks have taken it down, else 0.",
                &["uplink"],
            ),
            probes: counter_vec(
                registry,
                "uplink_probes_total",
                "Health-check probes sent through the uplink, by result: answered, lost.",
                &["uplink", "result"],
            ),
            rtt: prometheus::GaugeVec::new(
                prometheus::Opts::new(
                    "uplink_probe_rtt_seconds",
                    "The round trip of the uplink's last answered probe.",
                ),
                &["uplink"],
            )
            .expect("valid metric definition"),
            changes: counter_vec(
                registry,
                "uplink_state_changes_total",
                "Times the uplink's health checks took it down or brought it back.",
                &["uplink"],
            ),
        }
        .registered(registry)
    }

    fn registered(self, registry: &Registry) -> Self {
        registry
            .register(Box::new(self.rtt.clone()))
            .expect("metric names are unique");
        self
    }

    pub(crate) fn sync(
        &self,
        health: &crate::control::uplink_health::UplinkHealth,
        router: &pipeline::RouterConfig,
    ) {
        let running = router.uplinks.uplinks();
        for (uplink, stats) in running.iter().zip(&health.uplinks) {
            let name = stats.interface.as_str();
            let usable = uplink.up && uplink.gateway.is_some();
            self.usable
                .with_label_values(&[name])
                .set(i64::from(usable));
            if !stats.checked {
                continue;
            }
            self.failed
                .with_label_values(&[name])
                .set(i64::from(stats.failed()));
            sync_counter(&self.probes, &[name, "answered"], stats.answered());
            sync_counter(&self.probes, &[name, "lost"], stats.lost());
            if let Some(rtt) = stats.last_rtt() {
                self.rtt.with_label_values(&[name]).set(rtt.as_secs_f64());
            }
            sync_counter(&self.changes, &[name], stats.changes());
        }
    }
}
