//! A scrape: reading the workers', ports' and control thread's counters into the registry
//! (`Metrics::collect`), and rendering it as Prometheus text.

use super::*;
use crate::config::OTHER_RULES;
use pipeline::state::firewall::Action;

/// A log's events by result: sent, send_failed, lost.
pub(crate) fn export_log_stats<E>(
    family: &IntCounterVec,
    stats: &crate::telemetry::nat_log::EventLogStats<E>,
) {
    let results = [
        ("sent", stats.sent.load(Ordering::Relaxed)),
        ("send_failed", stats.send_failed.load(Ordering::Relaxed)),
        ("lost", stats.lost()),
    ];
    for (result, count) in results {
        sync_counter(family, &[result], count);
    }
}

/// Counters only grow; bring the registry's copy up to the source's value.
pub(crate) fn sync_counter(vec: &IntCounterVec, labels: &[&str], value: u64) {
    let counter = vec.with_label_values(labels);
    counter.inc_by(value.saturating_sub(counter.get()));
}

impl Metrics {
    /// Reads every source and renders the Prometheus text exposition.
    pub fn render(&self) -> String {
        self.collect();
        let mut families = self.registry.gather();
        families.push(self.queue_delay_family());
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("text encoding into a Vec cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    pub(crate) fn collect(&self) {
        for (index, name) in self.sources.interfaces.iter().enumerate() {
            let total = |read: fn(&pipeline::counters::InterfaceCounters) -> u64| {
                self.sources
                    .workers
                    .iter()
                    .filter_map(|worker| worker.interface(index as u16))
                    .map(read)
                    .sum::<u64>()
            };
            let name = name.as_str();
            let families = [
                (&self.interface_packets, "rx", total(|c| c.rx_packets.get())),
                (&self.interface_packets, "tx", total(|c| c.tx_packets.get())),
                (&self.interface_bytes, "rx", total(|c| c.rx_bytes.get())),
                (&self.interface_bytes, "tx", total(|c| c.tx_bytes.get())),
            ];
            for (family, direction, value) in families {
                sync_counter(family, &[name, direction], value);
            }
        }
        for port in &self.sources.ports.ports {
            let name = port.name.as_str();
            port.poll(|totals| {
                for family in &self.port_counters {
                    sync_counter(&family.vec, &[name], (family.read)(&totals.stats));
                }
                for queue in 0..port.queues.min(QUEUE_STAT_COUNTERS) {
                    let q = queue.to_string();
                    let stats = &totals.stats;
                    sync_counter(
                        &self.queue_packets,
                        &[name, &q, "rx"],
                        stats.rx_queue_packets[queue],
                    );
                    sync_counter(
                        &self.queue_packets,
                        &[name, &q, "tx"],
                        stats.tx_queue_packets[queue],
                    );
                    sync_counter(&self.queue_drops, &[name, &q], stats.rx_queue_drops[queue]);
                }
                for (stat, &value) in port.xstat_names.iter().zip(&totals.xstats) {
                    sync_counter(&self.xstats, &[name, stat], value);
                }
            });
            let (up, speed_mbps) = port.link();
            self.port_link_up
                .with_label_values(&[name])
                .set(i64::from(up));
            self.port_speed
                .with_label_values(&[name])
                .set(bytes_per_second(speed_mbps));
            sync_counter(&self.link_flaps, &[name], port.link_flaps());
        }
        if let Some(pool) = &self.sources.pool {
            self.mempool_in_use
                .with_label_values(&["packets"])
                .set(i64::from(pool.in_use()));
        }
        let workers = self
            .sources
            .workers
            .iter()
            .enumerate()
            .map(|(i, c)| (i.to_string(), c));
        let control = std::iter::once(("control".to_string(), &self.sources.control));
        for (worker, counters) in workers.chain(control) {
            for family in &self.worker_counters {
                sync_counter(&family.vec, &[&worker], (family.read)(counters));
            }
            for family in &self.worker_gauges {
                family
                    .vec
                    .with_label_values(&[&worker])
                    .set((family.read)(counters) as i64);
            }
            for &reason in DropReason::ALL {
                sync_counter(
                    &self.drops,
                    &[&worker, reason.label()],
                    counters.dropped(reason),
                );
                // Only reasons that dropped IPv6, so IPv4-only hosts get no second set.
                let ipv6 = counters.dropped_ipv6(reason);
                if ipv6 > 0 {
                    sync_counter(&self.ipv6_drops, &[&worker, reason.label()], ipv6);
                }
            }
            for reason in InvalidReason::ALL {
                sync_counter(
                    &self.conntrack_invalid,
                    &[&worker, reason.label()],
                    counters.conntrack_invalid[reason.index()].get(),
                );
            }
            let tuple_refusals = [
                ("tuple_exists", &counters.conntrack_tuple_exists),
                ("ambiguous_tuple", &counters.conntrack_ambiguous_tuple),
            ];
            for (reason, count) in tuple_refusals {
                sync_counter(&self.conntrack_invalid, &[&worker, reason], count.get());
            }
        }
        let (now_tsc, hz) = (crate::dpdk::rdtsc(), crate::dpdk::tsc_hz());
        for (worker, heartbeat) in self.sources.heartbeats.iter().enumerate() {
            self.heartbeat_age
                .with_label_values(&[&worker.to_string()])
                .set(heartbeat.age_seconds(now_tsc, hz));
        }
        self.collect_qos();
        let meter = &self.sources.meter;
        let (export, _) = meter.export.load();
        if export.enabled {
            let hosts = meter.hosts();
            self.meter_hosts.set(hosts.len() as i64);
            let sum = |f: fn(&HostUsage) -> u64| hosts.iter().map(f).sum::<u64>();
            sync_counter(&self.meter_bytes, &["up"], sum(|h| h.up_bytes));
            sync_counter(&self.meter_bytes, &["down"], sum(|h| h.down_bytes));
            sync_counter(&self.meter_packets, &["up"], sum(|h| h.up_packets));
            sync_counter(&self.meter_packets, &["down"], sum(|h| h.down_packets));
            let mut shown: Vec<&HostUsage> = hosts.iter().collect();
            shown.sort_by_key(|h| std::cmp::Reverse(h.total_bytes()));
            shown.truncate(export.top_hosts);
            shown.extend(hosts.iter().filter(|h| export.named_hosts.contains(&h.ip)));
            for host in shown {
                let ip = host.ip.to_string();
                sync_counter(&self.meter_host_bytes, &[&ip, "up"], host.up_bytes);
                sync_counter(&self.meter_host_bytes, &[&ip, "down"], host.down_bytes);
            }
            let unattributed = meter.unattributed();
            let unattributed_bytes = &self.meter_unattributed_bytes;
            sync_counter(unattributed_bytes, &["up"], unattributed.up_bytes);
            sync_counter(unattributed_bytes, &["down"], unattributed.down_bytes);
        }
        for bond in &self.sources.bonds.bonds {
            let name = bond.name.as_str();
            self.bond_members
                .with_label_values(&[name])
                .set(bond.members.len() as i64);
            self.bond_active_members
                .with_label_values(&[name])
                .set(bond.active.load(Ordering::Relaxed) as i64);
            sync_counter(
                &self.bond_state_changes,
                &[name],
                bond.state_changes.load(Ordering::Relaxed),
            );
            for member in &bond.members {
                let state = member.sample.get();
                let labels = [name, member.name.as_str()];
                self.member_link_up
                    .with_label_values(&labels)
                    .set(i64::from(state.link_up));
                self.member_speed
                    .with_label_values(&labels)
                    .set(bytes_per_second(state.speed_mbps));
                self.member_selected
                    .with_label_values(&labels)
                    .set(i64::from(state.selected));
                for (side, partner) in [("actor", false), ("partner", true)] {
                    let labels = [name, member.name.as_str(), side];
                    self.member_collecting
                        .with_label_values(&labels)
                        .set(i64::from(state.collecting(partner)));
                    self.member_distributing
                        .with_label_values(&labels)
                        .set(i64::from(state.distributing(partner)));
                }
            }
        }
        if let Some(router) = &self.sources.router {
            let (router, _) = router.load();
            for label in pipeline::RouteRefusal::LABELS {
                let refused = router
                    .refused_kernel_routes
                    .iter()
                    .filter(|route| route.reason.label() == label)
                    .count();
                self.kernel_routes_refused
                    .with_label_values(&[label])
                    .set(refused as i64);
            }
            // The rules in force now: a rule a reload removed goes from the scrape.
            let firewall = &router.stateful.firewall;
            let names = crate::compile::rule_hits::counter_names(firewall.rules());
            self.firewall_rule_hits.reset();
            self.firewall_rule_last_match.reset();
            let rules = names.iter().zip(firewall.rules()).zip(firewall.hits());
            // Past the first `rule_series` rules, one series per action for all the rest.
            let mut others = Vec::<(Action, u64)>::new();
            let mut others_last = None;
            for (index, ((name, rule), hits)) in rules.enumerate() {
                if index >= self.sources.rule_series {
                    match others.iter_mut().find(|(action, _)| *action == rule.action) {
                        Some((_, total)) => *total += hits.total(),
                        None => others.push((rule.action, hits.total())),
                    }
                    others_last = others_last.max(hits.last_matched());
                    continue;
                }
                self.firewall_rule_hits
                    .with_label_values(&[name.as_str(), rule.action.name()])
                    .inc_by(hits.total());
                if let Some(last) = hits.last_matched() {
                    self.firewall_rule_last_match
                        .with_label_values(&[name.as_str()])
                        .set(last as i64);
                }
            }
            for (action, total) in others {
                self.firewall_rule_hits
                    .with_label_values(&[OTHER_RULES, action.name()])
                    .inc_by(total);
            }
            if let Some(last) = others_last {
                self.firewall_rule_last_match
                    .with_label_values(&[OTHER_RULES])
                    .set(last as i64);
            }
            self.firewall_default_hits.reset();
            self.firewall_default_last_match.reset();
            for pair in firewall.pair_hits() {
                let action = firewall.policy().default_for(pair.from.0, pair.to.0);
                let count = pair.hits.total();
                if count > 0 {
                    self.firewall_default_hits
                        .with_label_values(&[&pair.from.1, &pair.to.1, action.name()])
                        .inc_by(count);
                }
                if let Some(last) = pair.hits.last_matched() {
                    self.firewall_default_last_match
                        .with_label_values(&[&pair.from.1, &pair.to.1])
                        .set(last as i64);
                }
            }
            self.port_forward_hits.reset();
            self.port_forward_last_match.reset();
            let forwards = crate::compile::rule_hits::forward_names(&router.stateful.port_forwards);
            for (name, hits) in forwards.iter().zip(firewall.forward_hits()) {
                self.port_forward_hits
                    .with_label_values(&[name.as_str()])
                    .inc_by(hits.total());
                if let Some(last) = hits.last_matched() {
                    self.port_forward_last_match
                        .with_label_values(&[name.as_str()])
                        .set(last as i64);
                }
            }
        }
        let reload = &self.sources.reload;
        self.reload_success
            .set(i64::from(reload.last_success.load(Ordering::Relaxed)));
        self.reload_timestamp
            .set(reload.last_timestamp_seconds.load(Ordering::Relaxed) as i64);
        sync_counter(
            &self.reloads,
            &["success"],
            reload.succeeded.load(Ordering::Relaxed),
        );
        sync_counter(
            &self.reloads,
            &["failure"],
            reload.failed.load(Ordering::Relaxed),
        );
        let snapshot = &self.sources.snapshot;
        self.snapshot_restored
            .set(snapshot.restored.load(Ordering::Relaxed) as i64);
        self.snapshot_refused
            .set(i64::from(snapshot.refused.load(Ordering::Relaxed)));
        if let Some(pppoe) = &self.sources.pppoe {
            self.pppoe.sync(pppoe);
        }
        if let (Some(health), Some(router)) = (&self.sources.uplinks, &self.sources.router) {
            self.uplinks.sync(health, &router.load().0);
        }
        if let Some(held) = &self.sources.virtual_held {
            self.session_sync.sync_held(held, &self.sources.interfaces);
        }
        if let Some(status) = &self.sources.port_mapping {
            self.port_mapping.sync(status);
        }
        if let Some((stats, workers)) = &self.sources.session_sync {
            self.session_sync.sync(stats, workers);
        }
        if let Some(nat_log) = &self.sources.nat_log {
            export_log_stats(&self.nat_log_events, nat_log);
        }
        if let Some(firewall_log) = &self.sources.firewall_log {
            export_log_stats(&self.firewall_log_events, firewall_log);
        }
        for (reason, skipped) in pipeline::pipeline::operator::snapshot::Skip::ALL
            .iter()
            .zip(&snapshot.skipped)
        {
            self.snapshot_skipped
                .with_label_values(&[reason.label()])
                .set(skipped.load(Ordering::Relaxed) as i64);
        }
    }
}

impl Metrics {
    /// `gateway_qos_queue_delay_seconds`: how long packets waited in the shapers, a histogram
    /// per link over all workers. Built here from the workers' bucket counts, which the
    /// registry's own histograms (observed one value at a time) could not take.
    pub(crate) fn queue_delay_family(&self) -> prometheus::proto::MetricFamily {
        use pipeline::features::shaper::DELAY_BUCKETS_NS;
        use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
        let mut family = MetricFamily::default();
        family.set_name("gateway_qos_queue_delay_seconds".into());
        family.set_help(
            "QoS shaper: time packets waited in the queues (sent, marked or dropped by CoDel), by link."
                .into(),
        );
        family.set_field_type(MetricType::HISTOGRAM);
        for (index, link) in ["uplink", "downlink"].into_iter().enumerate() {
            let exports = self.sources.qos.iter().map(|links| &links[index].shaper);
            let mut counts = [0u64; DELAY_BUCKETS_NS.len() + 1];
            let mut sum_ns = 0u64;
            for export in exports {
                for (total, gauge) in counts.iter_mut().zip(&export.delay_counts) {
                    *total += gauge.get();
                }
                sum_ns = sum_ns.wrapping_add(export.delay_sum_ns.get());
            }
            let mut histogram = Histogram::default();
            let mut cumulative = 0;
            let buckets = DELAY_BUCKETS_NS
                .iter()
                .zip(&counts)
                .map(|(&bound, &count)| {
                    cumulative += count;
                    let mut bucket = Bucket::default();
                    bucket.set_upper_bound(bound as f64 / 1e9);
                    bucket.set_cumulative_count(cumulative);
                    bucket
                })
                .collect();
            histogram.set_bucket(buckets);
            histogram.set_sample_count(counts.iter().sum());
            histogram.set_sample_sum(sum_ns as f64 / 1e9);
            let mut label = LabelPair::default();
            label.set_name("link".into());
            label.set_value(link.into());
            let mut metric = Metric::default();
            metric.set_label(vec![label]);
            metric.set_histogram(histogram);
            family.mut_metric().push(metric);
        }
        family
    }

    pub(crate) fn collect_qos(&self) {
        let links = ["uplink", "downlink"];
        // [link][class][passed bytes, passed packets, dropped bytes, dropped packets]
        let mut totals = [[[0u64; 4]; 2]; 2];
        let mut shaped = [[0u64; 2]; 2];
        for (worker, policers) in self.sources.qos.iter().enumerate() {
            for (link, stats) in policers.iter().enumerate() {
                shaped[link][0] += stats.shaper.ecn_marks.get();
                shaped[link][1] += stats.shaper.backlog_packets.get();
                self.qos_share
                    .with_label_values(&[&worker.to_string(), links[link]])
                    .set((stats.share_bps() / 8) as i64);
                for (class, counts) in [&stats.priority, &stats.bulk].into_iter().enumerate() {
                    let total = &mut totals[link][class];
                    total[0] += counts.passed_bytes.get();
                    total[1] += counts.passed_packets.get();
                    total[2] += counts.dropped_bytes.get();
                    total[3] += counts.dropped_packets.get();
                }
            }
        }
        for (link, [marks, backlog]) in shaped.into_iter().enumerate() {
            sync_counter(&self.qos_ecn_marks, &[links[link]], marks);
            self.qos_backlog
                .with_label_values(&[links[link]])
                .set(backlog as i64);
        }
        for (link, per_class) in totals.iter().enumerate() {
            for (class, t) in per_class.iter().enumerate() {
                let labels = |result| [links[link], ["priority", "bulk"][class], result];
                sync_counter(&self.qos_bytes, &labels("passed"), t[0]);
                sync_counter(&self.qos_packets, &labels("passed"), t[1]);
                sync_counter(&self.qos_bytes, &labels("dropped"), t[2]);
                sync_counter(&self.qos_packets, &labels("dropped"), t[3]);
            }
        }
    }
}
