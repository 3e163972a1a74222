//! The worker's tables over time: bounded upkeep between bursts (expiry, the policers'
//! ticks), their figures for metrics, and their memory, for the gateway to back with huge
//! pages.

use crate::pipeline::stateful::StatefulStage;
use crate::pipeline::Pipeline;

impl Pipeline {
    /// Bounded per-loop upkeep: expire a few flows (releasing their NAT ports) and publish
    /// table fill for metrics.
    pub fn housekeeping(&mut self, now_ns: u64, budget: usize) {
        let StatefulStage { flows, nat, .. } = &mut self.stateful;
        flows.expire(now_ns, budget, |data| {
            crate::state::flow_data::release(nat, &data)
        });
        self.stateful6.flows.expire(now_ns, budget, |_| {});
        if let Some(policers) = self.qos.as_mut() {
            for policer in policers {
                policer.tick(now_ns);
            }
        }
        self.publish_table_stats();
    }

    pub(crate) fn publish_table_stats(&self) {
        let stats = self.stateful.flows.stats();
        self.counters
            .conntrack_entries
            .set(self.stateful.flows.len() as u64);
        self.counters
            .conntrack_ipv6_entries
            .set(self.stateful6.flows.len() as u64);
        self.counters.conntrack_setups.set(stats.setups);
        self.counters.conntrack_expirations.set(stats.expirations);
        self.counters.conntrack_evictions.set(stats.evictions);
        for (gauge, count) in self
            .counters
            .conntrack_invalid
            .iter()
            .zip(stats.invalid_by_reason)
        {
            gauge.set(count);
        }
        self.counters
            .conntrack_tuple_exists
            .set(stats.refused_exists);
        self.counters
            .conntrack_ambiguous_tuple
            .set(stats.refused_ambiguous);
        self.counters
            .conntrack_stale_segments
            .set(stats.stale_segments);
        let (_, at_flow_limit, at_half_open_limit) = self.stateful.flows.hosts_at_limit();
        self.counters
            .conntrack_half_open
            .set(self.stateful.flows.half_open_len() as u64);
        self.counters.hosts_at_flow_limit.set(at_flow_limit as u64);
        self.counters
            .hosts_at_half_open_limit
            .set(at_half_open_limit as u64);
        if let Some(nat) = &self.stateful.nat {
            self.counters
                .hosts_at_nat_port_limit
                .set(nat.hosts_at_limit() as u64);
            self.counters.nat_ports_in_use.set(nat.in_use() as u64);
            self.counters
                .nat_ports_available
                .set(nat.available() as u64);
            let (blocks_held, blocks) = nat.blocks_in_use();
            self.counters.nat_port_blocks_in_use.set(blocks_held as u64);
            self.counters.nat_port_blocks.set(blocks as u64);
        }
    }

    /// The large arrays of this worker's tables (start, bytes), for the gateway to back
    /// with huge pages.
    pub fn table_memory(&self) -> impl Iterator<Item = (*const u8, usize)> {
        let v6 = self.stateful6.flows.memory_regions();
        let hosts6 = &self.stateful6.feature_hosts;
        let hosts6 = (
            hosts6.as_ptr().cast::<u8>(),
            std::mem::size_of_val(&hosts6[..]),
        );
        let v4 = self.stateful.flows.memory_regions();
        v4.into_iter().chain(v6).chain(std::iter::once(hosts6))
    }

    /// Flows in this worker's table.
    pub fn flow_count(&self) -> usize {
        self.stateful.flows.len()
    }

    /// Flows in this worker's IPv6 table.
    pub fn ipv6_flow_count(&self) -> usize {
        self.stateful6.flows.len()
    }

    /// The most half-open TCP flows the worker's table holds (`conntrack.half_open`).
    pub fn flow_half_open_limit(&self) -> usize {
        self.stateful.flows.config().half_open
    }
}
