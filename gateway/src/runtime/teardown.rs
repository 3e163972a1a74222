//! `Gateway::teardown`: workers stop, their flows are saved, rings drain, ports stop.

use super::*;

impl<'a> Gateway<'a> {
    /// Takes the gateway down in order: the netlink thread and the workers stop (each sends
    /// its flows back), the config-load thread ends, the snapshot is written, the control
    /// plane's last packets go out, the metrics thread ends, the counters are reported, then
    /// the control plane, the NIC flow rules, the ports and last the pool are dropped.
    pub(crate) fn teardown(self, worker_died: bool) -> anyhow::Result<()> {
        let Gateway {
            config_path: _,
            config,
            stop: _stop,
            loader,
            metrics_thread,
            metrics_stop,
            ctl_server,
            nat_logger,
            firewall_logger,
            metrics_failed,
            meter_export: _meter_export,
            netlink_thread,
            port_mapping_thread,
            uplink_health: _uplink_health,
            uplink_links: _uplink_links,
            uplink_threads,
            session_sync,
            running: _running,
            kernel_for_loads: _kernel_for_loads,
            netlink_view: _netlink_view,
            pppoe_view: _pppoe_view,
            session_twins: _session_twins,
            port_mappings: _port_mappings,
            mut control,
            router_published: _router_published,
            reload_status: _reload_status,
            control_counters,
            mut running_workers,
            saved_flows,
            stopped_flows,
            qos_stats: _qos_stats,
            worker_counters,
            config_history: _,
            rule_hits: _,
            config_requests: _,
            awaiting_confirmation: _,
            bond_watch: _bond_watch,
            port_watch,
            steering,
            macs: _macs,
            ports,
            pool,
            worker_lcores: _worker_lcores,
            workers,
        } = self;
        // While worker 0 still sends what the control thread queues: the access
        // concentrator hears the session end instead of timing it out.
        control.stop_pppoe();
        tracing::info!("stopping workers");
        // Before the workers: a query under way would wait for them in vain.
        if let Some(server) = ctl_server {
            server.stop();
        }
        if let Some(thread) = netlink_thread {
            let _ = thread.join();
        }
        if let Some(thread) = port_mapping_thread {
            let _ = thread.join();
        }
        for thread in uplink_threads {
            let _ = thread.join();
        }
        let mut failures = running_workers.stop_and_join();
        // After the workers: the peer keeps its copies until their lease runs out.
        drop(session_sync);
        drop(nat_logger);
        drop(firewall_logger);
        drop(loader);
        if worker_died && failures.is_empty() {
            failures.push("a worker stopped without being told to".into());
        }
        drop(saved_flows);
        // `[state]` needs a restart (reload keeps it): the start-up config's is the one in force.
        if config.state.snapshot && failures.is_empty() && !worker_died && !metrics_failed {
            crate::dataplane::flow_snapshot::save_stopped(&config.state, workers, stopped_flows);
        }
        control.poll();
        metrics_stop.store(true, Ordering::Relaxed);
        if let Some(thread) = metrics_thread {
            let _ = thread.join();
        }
        report(&port_watch, &worker_counters, &control_counters);
        drop(control);
        drop(steering);
        drop(ports);
        if pool.in_use() != 0 {
            tracing::warn!(
                in_use = pool.in_use(),
                "mbufs still out of the pool at shutdown"
            );
        }
        drop(pool);
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        if metrics_failed {
            bail!(
                "the metrics endpoint could not start (metrics.listen {})",
                config.metrics.listen
            );
        }
        Ok(())
    }
}
