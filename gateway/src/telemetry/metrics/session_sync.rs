//! The HA pair's metrics: session sync's messages and flows each way, what was refused or
//! not installed, how long the peer has been silent, the takeovers, and which virtual
//! addresses this box holds.

use std::sync::atomic::Ordering;

use pipeline::pipeline::operator::session_sync::Refusal;
use pipeline::pipeline::operator::snapshot::Skip;

use super::*;
use crate::control::session_sync::{unix_ms, SessionSyncStats};
use crate::dataplane::sync_link::SyncQueues;

impl SessionSyncMetrics {
    pub(crate) fn new(registry: &Registry) -> Self {
        SessionSyncMetrics {
            messages: counter_vec(
                registry,
                "session_sync_messages_total",
                "Session sync messages, by direction: sent, send_failed, received (signed by the pair's key, fresh and well-formed).",
                &["direction"],
            ),
            flows: counter_vec(
                registry,
                "session_sync_flows_total",
                "Flows through session sync, by event: exported (handed out by the workers' sweeps), export_lost (their queue was full), sent, received, install_lost (a worker's queue was full), installed.",
                &["event"],
            ),
            sweeps: counter_vec(
                registry,
                "session_sync_sweeps_total",
                "Whole sweeps of the workers' flow tables for the peer.",
                &[],
            ),
            skipped: counter_vec(
                registry,
                "session_sync_skipped_flows_total",
                "The peer's flows not installed, by reason (the state snapshot's: expired, ownership, config, nat_port, table).",
                &["reason"],
            ),
            refused: counter_vec(
                registry,
                "session_sync_refused_messages_total",
                "Session sync datagrams refused, by reason: truncated, foreign, version, bad_tag (forged, another key, or this box's own message sent back), stale_epoch, replayed, malformed, and stranger (not from the peer's address, not read).",
                &["reason"],
            ),
            virtual_held: gauge_vec(
                registry,
                "ha_virtual_address_held",
                "1 while this box's twin holds the interface's virtual_address (keepalived made it the HA pair's VRRP master there), else 0; both boxes at 1 is a split brain.",
                &["interface"],
            ),
            takeovers: counter_vec(
                registry,
                "session_sync_takeovers_total",
                "Times this box took the pair's virtual addresses over (its twin gained one), each renewing the synced flows the peer was still refreshing.",
                &[],
            ),
            silence: prometheus::Gauge::new(
                "session_sync_peer_silence_seconds",
                "Seconds since the peer's last accepted message; -1 before the first.",
            )
            .expect("valid metric definition"),
        }
        .registered(registry)
    }

    fn registered(self, registry: &Registry) -> Self {
        registry
            .register(Box::new(self.silence.clone()))
            .expect("metric names are unique");
        self
    }

    /// Which virtual addresses this box holds.
    pub(crate) fn sync_held(
        &self,
        held: &crate::control::virtual_addresses::VirtualHeld,
        interfaces: &[String],
    ) {
        for (port, is_held) in held.interfaces() {
            if let Some(name) = interfaces.get(port) {
                self.virtual_held
                    .with_label_values(&[name])
                    .set(i64::from(is_held));
            }
        }
    }

    pub(crate) fn sync(&self, stats: &SessionSyncStats, workers: &[Arc<SyncQueues>]) {
        let read = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        let sum = |field: fn(&SyncQueues) -> &std::sync::atomic::AtomicU64| {
            workers
                .iter()
                .map(|queues| read(field(queues)))
                .sum::<u64>()
        };
        sync_counter(&self.messages, &["sent"], read(&stats.messages_sent));
        sync_counter(&self.messages, &["send_failed"], read(&stats.send_errors));
        sync_counter(
            &self.messages,
            &["received"],
            read(&stats.messages_received),
        );
        let flows = [
            ("exported", sum(|q| &q.stats.exported)),
            ("export_lost", sum(|q| &q.stats.export_lost)),
            ("sent", read(&stats.flows_sent)),
            ("received", read(&stats.flows_received)),
            ("install_lost", read(&stats.install_lost)),
            ("installed", sum(|q| &q.stats.installed)),
        ];
        for (event, count) in flows {
            sync_counter(&self.flows, &[event], count);
        }
        sync_counter(&self.sweeps, &[], sum(|q| &q.stats.sweeps));
        for (index, reason) in Skip::ALL.iter().enumerate() {
            let skipped = workers
                .iter()
                .map(|queues| read(&queues.stats.skipped[index]))
                .sum();
            sync_counter(&self.skipped, &[reason.label()], skipped);
        }
        for (counter, reason) in stats.refused.iter().zip(Refusal::ALL) {
            sync_counter(&self.refused, &[reason.label()], read(counter));
        }
        sync_counter(&self.refused, &["stranger"], read(&stats.strangers));
        let takeovers = workers
            .first()
            .map_or(0, |queues| queues.takeovers.load(Ordering::Relaxed));
        sync_counter(&self.takeovers, &[], u64::from(takeovers));
        let last = read(&stats.last_received_unix_ms);
        let now = unix_ms();
        self.silence.set(match last {
            0 => -1.0,
            last => now.saturating_sub(last) as f64 / 1000.0,
        });
    }
}
