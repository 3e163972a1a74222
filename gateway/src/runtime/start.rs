//! `Gateway::start`: the ports, pools, bonds and steering, the twins and rings, the workers
//! (with the snapshot's flows restored), the control plane, PPPoE, netlink, metrics, the logs,
//! `ctl` and the config-load thread.

use super::*;

impl<'a> Gateway<'a> {
    /// Starts the ports, the workers (with the snapshot's flows restored), the control
    /// plane, the netlink, metrics and config-load threads. On an error the workers started
    /// so far stop before the ports and the pool go.
    pub(crate) fn start(
        LoadedFile {
            path: config_path,
            config,
            text: running_file,
        }: LoadedFile<'a>,
        web_config: crate::config::web::WebConfig,
        eal: &Eal,
        stop: Arc<AtomicBool>,
        events: &Sender<ControlEvent>,
    ) -> anyhow::Result<Gateway<'a>> {
        let worker_lcores: Vec<LcoreId> =
            config.workers.lcores.iter().map(|&l| LcoreId(l)).collect();
        let available = eal.worker_lcores();
        for lcore in &worker_lcores {
            if !available.contains(lcore) {
                bail!("workers.lcores: {lcore} is not available to the EAL (this machine has {available:?})");
            }
        }
        let workers = worker_lcores.len() as u16;
        let PortsUp {
            layout,
            socket,
            pool,
            mut ports,
            macs,
            steering,
            bond_watch,
        } = start_ports(eal, config, &worker_lcores, workers)?;
        let rule_hits = RuleHitRegistry::new(usize::from(workers));
        let mut first_router = Arc::new(router_config(config, &macs)?);
        rule_hits.attach(&mut first_router, &config.zone_names());
        let router = Arc::new(Published::new(first_router));
        let neighbors = Arc::new(Published::new(Arc::new(NeighborView::default())));
        let twins = Twins::start(eal, config, &macs, &pool)?;
        let mut punt_rings = Vec::new();
        let mut kernel_rings = Vec::new();
        // Before the workers: a key or address mistake stops the start with nothing running.
        let session_sync_bound = match &config.ha.sync {
            Some(sync) => Some(crate::control::session_sync::bind(
                sync,
                &config.state.directory,
            )?),
            None => None,
        };
        // The ports' counters and links, read by the control thread, the metrics and the ctl
        // thread through one watch; taken before the queues leave for the workers.
        let port_watch = Arc::new(PortWatch {
            ports: ports
                .iter()
                .map(|port| WatchedPort::new(port.name(), port.monitor(), usize::from(workers)))
                .collect(),
        });

        let WorkersUp {
            control_to_worker,
            from_workers,
            worker_counters,
            heartbeats,
            meters,
            qos_stats,
            snapshot_status,
            saved_flows,
            stopped_flows,
            running_workers,
            ctl_queries,
            trace_requests,
            drop_captures,
            mut nat_logs,
            firewall_logs,
            sync_queues,
        } = start_workers(
            WorkerStart {
                eal,
                config,
                worker_lcores: &worker_lcores,
                workers,
                socket,
                stop: &stop,
                events,
                twins: &twins,
                router: &router,
                neighbors: &neighbors,
                layout: &layout,
                pool: &pool,
            },
            &mut ports,
            (&mut punt_rings, &mut kernel_rings),
        )?;

        let control_counters = Arc::new(WorkerCounters::default());
        let reload_status = Arc::new(ReloadStatus::new());
        let config_history = ConfigHistory::start(config_path, &running_file);
        let kept_configs = ConfigStore::new(&config.state.directory);
        let (config_request_sender, config_requests) = crossbeam_channel::unbounded();
        let neighbor_config = NeighborConfig {
            capacity: config.neighbors.capacity,
            pending_per_neighbor: config.neighbors.pending_per_neighbor,
            reachable_ns: config.neighbors.reachable_secs * 1_000_000_000,
            pending_total: config.neighbors.pending_total,
            locktime_ns: config.neighbors.locktime_ms * 1_000_000,
            ..NeighborConfig::default()
        };
        let router_published = router.clone();
        let neighbors_published = neighbors.clone();
        let virtual_held = Arc::new(VirtualHeld::from_config(config));
        let control = ControlPlane::new(
            control_to_worker,
            from_workers,
            pool.clone(),
            router,
            neighbors,
            control_counters.clone(),
            neighbor_config,
        )
        .with_twins(twins.with_rings(punt_rings, kernel_rings))
        .with_session_sync(sync_queues.clone())
        .with_virtual_held(virtual_held.clone());
        let pppoe = PppoeLinks::new(config, &macs, layout.sessions().clone(), pppoe_seed());
        let pppoe_status = (!pppoe.is_empty()).then(|| pppoe.status());
        let mut control = control.with_pppoe(pppoe);
        control.announce();
        // The twins' addresses ("dhcp") and routes, followed on a thread of its own.
        // What the kernel says, for the config-load thread, which compiles reloads with it.
        let kernel_for_loads = Arc::new(Mutex::new(KernelView::default()));
        // The config in force: the last reload applied (kernel updates are compiled onto it).
        let running = config.clone();
        let followed = Followed::from_config(config);
        let netlink_thread = if followed.any() {
            let events = events.clone();
            let send = move |view| events.send(ControlEvent::Kernel(Box::new(view))).is_ok();
            let netns = config.kernel_twins.netns.clone();
            Some(crate::control::netlink::spawn(
                followed,
                netns,
                stop.clone(),
                send,
            )?)
        } else {
            None
        };
        // PCP and NAT-PMP, on the served twins' addresses; the mappings come back as events.
        let (port_mapping_thread, port_mapping_status) =
            match crate::control::port_mapping::Setup::from_config(config) {
                Some(setup) => {
                    nat_logs.extend(setup.nat_log.clone());
                    let status =
                        Arc::new(crate::control::port_mapping::PortMappingStatus::default());
                    let events = events.clone();
                    let publish = move |mappings| {
                        let _ = events.send(ControlEvent::PortMappings(mappings));
                    };
                    let thread = crate::control::port_mapping::spawn(
                        setup,
                        router_published.clone(),
                        status.clone(),
                        stop.clone(),
                        publish,
                    )?;
                    (Some(thread), Some(status))
                }
                None => (None, None),
            };
        let uplink_health = Arc::new(crate::control::uplink_health::UplinkHealth::for_config(
            config,
        ));
        let uplink_links = crate::control::uplink_health::UplinkLinks::new(
            (config.uplinks.iter())
                // One per uplink, in order (validation resolved every name; a port that is no
                // port reads as up).
                .map(|uplink| {
                    (config.interfaces.iter())
                        .position(|i| i.name == uplink.interface)
                        .and_then(|iface| layout.links().get(iface))
                        .map_or(usize::MAX, |link| usize::from(link.port))
                })
                .collect(),
        );
        let uplink_threads = {
            let events = events.clone();
            let changed = move |_, _| {
                let _ = events.send(ControlEvent::UplinkHealth);
            };
            crate::control::uplink_health::spawn(
                config,
                uplink_health.clone(),
                stop.clone(),
                changed,
            )?
        };
        let session_sync = match session_sync_bound {
            Some(bound) => Some(bound.spawn(sync_queues, router_published.clone())?),
            None => None,
        };
        let meter_export = Arc::new(Published::new(Arc::new(MeterExport::from(
            &config.traffic_meter,
        ))));
        let nat_logger = crate::telemetry::nat_log::spawn(&config.nat.log, nat_logs)?;
        let interface_names = config.interfaces.iter().map(|i| i.name.clone()).collect();
        let firewall_logger = crate::telemetry::firewall_log::spawn(
            &config.firewall.log,
            firewall_logs,
            interface_names,
            router_published.clone(),
        )?;
        let metrics = Metrics::new(Sources {
            interfaces: config.interfaces.iter().map(|i| i.name.clone()).collect(),
            ports: port_watch.clone(),
            pool: Some(pool.clone()),
            bonds: bond_watch.clone(),
            qos: qos_stats.clone(),
            meter: MeterSource {
                workers: meters,
                export: meter_export.clone(),
            },
            workers: worker_counters.clone(),
            heartbeats,
            control: control_counters.clone(),
            reload: reload_status.clone(),
            snapshot: snapshot_status.clone(),
            nat_log: nat_logger.as_ref().map(|logger| logger.stats.clone()),
            firewall_log: firewall_logger.as_ref().map(|logger| logger.stats.clone()),
            pppoe: pppoe_status,
            router: Some(router_published.clone()),
            uplinks: (!config.uplinks.is_empty()).then(|| uplink_health.clone()),
            session_sync: session_sync
                .as_ref()
                .map(|sync| (sync.stats.clone(), sync.workers.clone())),
            virtual_held: virtual_held.any().then_some(virtual_held),
            port_mapping: port_mapping_status.clone(),
            rule_series: config.metrics.rule_series,
        });
        let metrics_stop = Arc::new(AtomicBool::new(false));
        let metrics_thread = match metrics::serve(
            config.metrics.listen,
            metrics,
            web_config,
            metrics_stop.clone(),
        ) {
            Ok(thread) => Some(thread),
            Err(err) => {
                stop.store(true, Ordering::Relaxed);
                tracing::error!("{:#}", anyhow::Error::from(err));
                None
            }
        };
        let metrics_failed = metrics_thread.is_none();
        let ctl_server = crate::ctl::server::serve(
            &config.ctl,
            crate::ctl::server::Sources {
                queries: ctl_queries,
                traces: trace_requests,
                drop_captures,
                workers: worker_counters.clone(),
                control: control_counters.clone(),
                interface_names: config.interfaces.iter().map(|i| i.name.clone()).collect(),
                interface_links: layout.links().to_vec(),
                ports: port_watch.clone(),
                router: router_published.clone(),
                neighbors: neighbors_published,
                config: config_history.clone(),
                kept_configs: kept_configs.clone(),
                config_requests: config_request_sender,
                pdump_file_prefix: config.eal.pdump.then(|| config.eal.file_prefix.clone()),
                uplink_health: uplink_health.clone(),
                port_mapping: port_mapping_status.clone(),
            },
        )
        .map_err(|err| tracing::warn!("no ctl socket: {:#}", anyhow::Error::from(err)))
        .ok()
        .flatten();
        if !metrics_failed {
            tracing::info!(
                workers,
                "gateway running; SIGINT or SIGTERM stops it, SIGHUP reloads"
            );
        }
        let loader = {
            let loads = events.clone();
            reload::Loader::start(
                reload::LoaderSetup {
                    path: config_path.to_path_buf(),
                    running: config.clone(),
                    running_file,
                    macs: macs.clone(),
                    kernel: kernel_for_loads.clone(),
                    store: kept_configs,
                },
                move |loaded| {
                    let _ = loads.send(ControlEvent::Loaded(Box::new(loaded)));
                },
            )
            .context("starting the config-load thread")?
        };
        Ok(Gateway {
            config_path,
            config,
            stop,
            loader,
            metrics_thread,
            metrics_stop,
            ctl_server,
            nat_logger,
            firewall_logger,
            metrics_failed,
            meter_export,
            netlink_thread,
            port_mapping_thread,
            uplink_health,
            uplink_links,
            uplink_threads,
            session_sync,
            running,
            kernel_for_loads,
            netlink_view: KernelView::default(),
            pppoe_view: PppoeView::default(),
            session_twins: crate::control::twins::session_link::SessionTwins::start(config),
            port_mappings: PortMappings::default(),
            control,
            router_published,
            reload_status,
            config_history,
            rule_hits,
            config_requests,
            awaiting_confirmation: None,
            control_counters,
            running_workers,
            saved_flows,
            stopped_flows,
            qos_stats,
            worker_counters,
            bond_watch,
            port_watch,
            steering,
            macs,
            ports,
            pool,
            worker_lcores,
            workers,
        })
    }
}

/// A seed for the PPPoE clients' magic numbers and Host-Uniq: different on every start, so
/// that a restarted gateway's LCP is not taken for a looped-back one.
pub(crate) fn pppoe_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}
