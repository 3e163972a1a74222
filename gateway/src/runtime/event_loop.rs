//! `Gateway::run`: the control thread's loop until a stop or a worker's death, and what it
//! does between polls (QoS shares, the periodic report).

use super::*;

impl<'a> Gateway<'a> {
    /// Serves until told to stop (a signal, a failed metrics endpoint) or until a worker
    /// dies: the control plane, reloads, kernel updates, QoS rebalancing and bond sampling.
    /// Returns whether a worker died.
    pub(crate) fn run(&mut self, control_events: &Receiver<ControlEvent>) -> bool {
        let Gateway {
            config_path,
            stop,
            loader,
            meter_export,
            running,
            kernel_for_loads,
            netlink_view,
            pppoe_view,
            session_twins,
            port_mappings,
            uplink_health,
            uplink_links,
            control,
            router_published,
            reload_status,
            config_history,
            rule_hits,
            config_requests,
            awaiting_confirmation,
            qos_stats,
            bond_watch,
            port_watch,
            macs,
            worker_lcores,
            ..
        } = self;
        let mut next_link_sample = std::time::Instant::now();
        let mut next_stats_poll = std::time::Instant::now() + port_watch::STATS_INTERVAL;
        let qos_rates = |router: &Published<pipeline::RouterConfig>| {
            (router.load().0.qos.as_ref()).map(|q| [q.uplink_bps, q.downlink_bps])
        };
        let mut policed_rates = qos_rates(router_published);
        let mut next_qos_rebalance = std::time::Instant::now();
        let mut worker_died = false;
        while !stop.load(Ordering::Relaxed) {
            if let Some(rates) =
                policed_rates.filter(|_| std::time::Instant::now() >= next_qos_rebalance)
            {
                rebalance_qos(qos_stats, rates);
                next_qos_rebalance += Duration::from_millis(5);
            }
            let now = std::time::Instant::now();
            let mut uplink_link_changed = false;
            if now >= next_link_sample {
                port_watch.sample_links();
                bond_watch.sample();
                next_link_sample = now + port_watch::LINK_INTERVAL;
                let link_up = |port: usize| port_watch.ports.get(port).is_none_or(|p| p.link().0);
                uplink_link_changed = uplink_links.sample(link_up);
            }
            if now >= next_stats_poll {
                port_watch.poll_stats();
                next_stats_poll = now + port_watch::STATS_INTERVAL;
            }
            // Idle: wait for an event as long as the old sleep lasted, so ARP stays prompt.
            let event = match control.poll() {
                0 => control_events.recv_timeout(Duration::from_micros(200)).ok(),
                _ => control_events.try_recv().ok(),
            };
            // Merges the views, compiles the router config with them as `recompile` says, and
            // keeps the merge for the reloads.
            let apply_views = |running: &GatewayConfig,
                               netlink_view: &KernelView,
                               pppoe_view: &PppoeView,
                               port_mappings: &PortMappings,
                               recompile: Recompile| {
                let failed = uplink_health.failed(uplink_links);
                let merged = merged_view(netlink_view, pppoe_view, failed, port_mappings);
                if recompile != Recompile::No {
                    apply_kernel(
                        running,
                        macs,
                        &merged,
                        router_published,
                        (qos_stats, rule_hits),
                        recompile == Recompile::SameRules,
                    );
                }
                *kernel_for_loads
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = merged;
            };
            // A PPPoE session's view changed, or an uplink's carrier came or went (as a health
            // check's verdict would): the router config is compiled again.
            let pppoe = control.take_pppoe_view();
            if pppoe.is_some() || uplink_link_changed {
                if let Some(view) = pppoe {
                    session_twins.follow(&view);
                    *pppoe_view = view;
                }
                apply_views(
                    running,
                    netlink_view,
                    pppoe_view,
                    port_mappings,
                    Recompile::Yes,
                );
                policed_rates = qos_rates(router_published);
            }
            while let Ok(request) = config_requests.try_recv() {
                crate::ctl::config_apply::route(
                    request,
                    loader,
                    awaiting_confirmation,
                    config_history,
                );
            }
            crate::ctl::config_apply::expire(awaiting_confirmation, loader, config_history, now);
            match event {
                None => {}
                Some(ControlEvent::ReloadSignal | ControlEvent::FileChanged) => {
                    if matches!(event, Some(ControlEvent::FileChanged)) {
                        tracing::info!("{} changed and is quiet: reloading", config_path.display());
                    }
                    loader.request(reload::LoadRequest::File { reply: None });
                }
                Some(ControlEvent::Loaded(loaded)) => {
                    if let Some(applied) = apply_reload(
                        *loaded,
                        &ReloadTargets {
                            router: router_published,
                            qos: qos_stats,
                            meter: meter_export,
                            status: reload_status,
                            history: config_history,
                            rule_hits,
                        },
                        awaiting_confirmation,
                    ) {
                        *running = applied;
                        control.reconfigure_pppoe(running, macs);
                        // Compiled with the mappings of when the load began: a change
                        // since then is put back.
                        if router_published.load().0.stateful.port_mappings != *port_mappings {
                            let same = Recompile::SameRules;
                            apply_views(running, netlink_view, pppoe_view, port_mappings, same);
                        }
                    }
                    policed_rates = qos_rates(router_published);
                }
                Some(ControlEvent::Kernel(_) | ControlEvent::UplinkHealth) => {
                    // A takeover or a handover alone (keepalived moving a virtual address)
                    // changes nothing the workers route by: no new rules generation, so no
                    // flow loses its shortcut at the moment traffic moves to this box.
                    let mut router_changed = true;
                    if let Some(ControlEvent::Kernel(view)) = event {
                        let held_aside = KernelView {
                            virtual_held: view.virtual_held.clone(),
                            ..netlink_view.clone()
                        };
                        router_changed = !held_aside.same_as(&view);
                        *netlink_view = *view;
                    }
                    let recompile = if router_changed {
                        Recompile::Yes
                    } else {
                        Recompile::No
                    };
                    apply_views(running, netlink_view, pppoe_view, port_mappings, recompile);
                    control.follow_virtual_addresses(&netlink_view.virtual_held);
                    policed_rates = qos_rates(router_published);
                }
                Some(ControlEvent::PortMappings(mappings)) => {
                    *port_mappings = mappings;
                    let same = Recompile::SameRules;
                    apply_views(running, netlink_view, pppoe_view, port_mappings, same);
                }
                Some(ControlEvent::WorkerExited(WorkerExit { worker, panic })) => {
                    if panic.is_none() && stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let why = panic.map_or("returned unasked".to_string(), |message| {
                        format!("panicked: {message}")
                    });
                    tracing::error!(
                        worker,
                        lcore = worker_lcores[worker].0,
                        "worker {worker} {why}; its queues are unserved, so the gateway stops \
                         (exit status 1) for the service manager to restart it"
                    );
                    worker_died = true;
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
        worker_died
    }
}

/// Shares each link's rate among the workers by their measured demand (max-min fair), so the
/// aggregate holds the configured rate however flows fall across workers.
pub(crate) fn rebalance_qos(
    stats: &[[Arc<pipeline::features::qos::QosStats>; 2]],
    rates: [u64; 2],
) {
    for (link, &rate) in rates.iter().enumerate() {
        let demands: Vec<u64> = stats
            .iter()
            .map(|worker| worker[link].demand_bps())
            .collect();
        for (worker, share) in stats
            .iter()
            .zip(pipeline::features::qos::rebalance(rate, &demands))
        {
            worker[link].assign_share(share);
        }
    }
}

pub(crate) fn report(ports: &PortWatch, workers: &[Arc<WorkerCounters>], control: &WorkerCounters) {
    for port in &ports.ports {
        let stats = port.poll(|totals| totals.stats);
        tracing::info!(
            port = %port.name,
            rx = stats.rx_packets,
            tx = stats.tx_packets,
            rx_missed = stats.rx_missed,
            "port totals"
        );
    }
    for (index, counters) in workers.iter().enumerate() {
        tracing::info!(
            worker = index,
            rx = counters.rx_packets.get(),
            tx = counters.transmitted.get(),
            to_control = counters.to_control.get(),
            dropped = counters.dropped_total(),
            "worker totals"
        );
    }
    tracing::info!(
        tx = control.transmitted.get(),
        dropped = control.dropped_total(),
        "control totals"
    );
}
