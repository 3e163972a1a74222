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
        // Ports are the interfaces with a device; VLAN subinterfaces ride on their parents'.
        let layout = PortLayout::new(config);
        let port_interfaces: Vec<usize> = layout.port_interfaces().collect();
        let port_ids = port_interfaces
            .iter()
            .map(|&index| {
                let iface = &config.interfaces[index];
                Port::find(eal, &iface.device)
                    .with_context(|| format!("interfaces[{index}].device {:?}", iface.device))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let socket = nic_socket(eal, config, &port_interfaces, &port_ids, &worker_lcores);
        let pool = Arc::new(
            Mempool::new(
                eal,
                "gateway_pool",
                config.mempool.mbufs,
                config.mempool.cache,
                config.mempool.data_room,
                socket,
            )
            .context("mempool: lower mempool.mbufs or give the EAL more memory (eal.memory_mb)")?,
        );
        let mut ports = Vec::new();
        for (port_index, (&index, &id)) in port_interfaces.iter().zip(&port_ids).enumerate() {
            let iface = &config.interfaces[index];
            let port_config = PortConfig {
                rx_queues: workers,
                tx_queues: workers,
                rx_descriptors: iface.rx_descriptors,
                tx_descriptors: iface.tx_descriptors,
                mtu: Some(iface.port_mtu()),
                rss_key: iface.rss_key.as_deref().and_then(parse_hex),
                promiscuous: iface.promiscuous,
                // IPv6 Neighbor Discovery comes to multicast groups (all nodes, all routers,
                // solicited-node): the port, or a VLAN on it, with IPv6 takes them.
                all_multicast: config.interfaces.iter().any(|other| {
                    other.ipv6.is_some()
                        && (other.name == iface.name
                            || other.parent.as_deref() == Some(iface.name.as_str()))
                }),
                vlan_offloads: layout.port_has_vlans(port_index)
                    && iface.vlan_offload.unwrap_or(true),
                ..PortConfig::default()
            };
            let dedicated_lacp = match &iface.bond {
                Some(bond) => prepare_bond(id, &iface.name, bond)?,
                None => false,
            };
            let started = match Port::start(eal, id, &iface.name, &port_config, &pool) {
                Err(err) if dedicated_lacp => {
                    // Enabling checks the rule in principle; some members (tap) still refuse it
                    // when the bond starts. Fall back to LACP in the data path.
                    tracing::info!(
                        bond = iface.name,
                        "members refused the dedicated LACP queue rule at start ({err}); LACP runs \
                         in the data path, kept alive by tx bursts every 10 ms even when idle"
                    );
                    dpdk::bond::disable_dedicated_lacp_queues(id)?;
                    Port::start(eal, id, &iface.name, &port_config, &pool)
                }
                other => other,
            };
            let port = started.with_context(|| {
                format!(
                    "interfaces[{index}] ({}, {})",
                    iface.name,
                    device_name(&iface.device)
                )
            })?;
            ports.push(port);
        }
        let port_macs = ports
            .iter()
            .map(|port| port.mac_address())
            .collect::<Result<Vec<_>, _>>()?;
        // A VLAN subinterface answers with its port's MAC, as Linux's do.
        let macs: Vec<[u8; 6]> = layout
            .links()
            .iter()
            .map(|link| port_macs[usize::from(link.port)])
            .collect();
        let steering = steer_nat_replies(config, &port_interfaces, &ports, workers);
        let mut bond_watch = BondWatch::default();
        for (iface, port) in port_interfaces
            .iter()
            .map(|&index| &config.interfaces[index])
            .zip(&ports)
        {
            if let Some(bond) = &iface.bond {
                let members = bond
                    .members
                    .iter()
                    .map(|member| Ok((device_name(member).to_string(), Port::find(eal, member)?)))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                bond_watch.add(&iface.name, port.id(), members);
            }
        }
        let bond_watch = Arc::new(bond_watch);
        for (iface, mac) in config.interfaces.iter().zip(&macs) {
            tracing::info!(interface = %iface.name, address = %iface.address, mac = %EthernetAddress(*mac), "interface up");
        }
        let rule_hits = RuleHitRegistry::new(usize::from(workers));
        let mut first_router = Arc::new(router_config(config, &macs)?);
        rule_hits.attach(&mut first_router, &config.zone_names());
        let router = Arc::new(Published::new(first_router));
        let neighbors = Arc::new(Published::new(Arc::new(NeighborView::default())));
        let twins = Twins::start(eal, config, &macs, &pool)?;
        let mut punt_rings = Vec::new();
        let mut kernel_rings = Vec::new();
        // The ports' counters and links, read by the control thread, the metrics and the ctl
        // thread through one watch; taken before the queues leave for the workers.
        let port_watch = Arc::new(PortWatch {
            ports: ports
                .iter()
                .map(|port| WatchedPort::new(port.name(), port.monitor(), usize::from(workers)))
                .collect(),
        });

        let (control_to_worker, worker_from_control) =
            MbufRing::create(eal, "control_to_worker0", 1024, socket)?;
        let mut worker_from_control = Some(worker_from_control);
        let mut from_workers = Vec::new();
        let mut worker_counters = Vec::new();
        let mut heartbeats = Vec::new();
        let mut handoff_links = HandoffLinks::mesh(eal, worker_lcores.len(), socket)?.into_iter();
        let mut meters = Vec::new();
        let mut qos_stats = Vec::new();
        let panic_on_purpose = PanicOnPurpose::from_env();
        // The state snapshot's flows go into each worker's tables before it polls; each stopped
        // worker sends its flows back for the next one.
        let snapshot_status = Arc::new(SnapshotStatus::default());
        let mut restore =
            Restore::prepare(&config.state, &router.load().0, workers, &snapshot_status);
        let (saved_flows, stopped_flows) = crossbeam_channel::unbounded();
        // Declared after the ports, rings and pool: dropped first, on every path out of here.
        let mut running_workers = Workers::new(stop.clone());
        let mut ctl_queries = Vec::new();
        let mut trace_requests = Vec::new();
        let mut nat_logs = Vec::new();
        let mut firewall_logs = Vec::new();
        for (index, &lcore) in worker_lcores.iter().enumerate() {
            let (to_control, from_worker) = MbufRing::create(
                eal,
                &format!("to_control_{index}"),
                crate::dataplane::worker::CONTROL_RING_CAPACITY,
                socket,
            )?;
            from_workers.push(from_worker);
            let (punt, from_kernel) = if twins.any() {
                let (link, from_worker) = crate::dataplane::punt::punt_ring(eal, index, socket)?;
                punt_rings.push(from_worker);
                let (to_worker, from_kernel) =
                    crate::dataplane::punt::kernel_ring(eal, index, socket)?;
                kernel_rings.push(to_worker);
                (Some(link), Some(from_kernel))
            } else {
                (None, None)
            };
            let counters = Arc::new(WorkerCounters::default());
            worker_counters.push(counters.clone());
            // Allocated even while the meter is off, so that a reload can switch it on.
            let meter = Arc::new(HostMeter::new(config.traffic_meter.capacity));
            meters.push(meter.clone());
            let nat_log = config.nat.log.enabled().then(|| {
                Arc::new(pipeline::state::nat::NatLog::new(
                    config.nat.log.queue_events,
                ))
            });
            nat_logs.extend(nat_log.clone());
            let mut setup = worker_setup(config, index as u16, workers, Some(meter), nat_log);
            let log_config = &config.firewall.log;
            if log_config.enabled() {
                let log = Arc::new(FirewallLog::new(log_config.queue_events));
                firewall_logs.push(log.clone());
                setup.firewall_log = Some(FirewallLogger::new(
                    log,
                    log_config.per_sec,
                    log_config.burst,
                ));
            }
            let pipeline =
                Pipeline::for_worker(router.load().0, neighbors.load().0, counters.clone(), setup)
                    .map_err(|err| anyhow::anyhow!("worker {index}: NAT pool: {err:?}"))?;
            qos_stats.push(pipeline.qos_stats());
            let mut pipeline = pipeline;
            if let Some(restore) = restore.as_mut() {
                restore.apply(index, &mut pipeline);
            }
            let advice = crate::dataplane::worker::back_tables_with_huge_pages(&pipeline);
            tracing::info!(
                worker = index,
                mib = advice.covered >> 20,
                collapsed = advice.collapsed,
                "flow table on transparent huge pages"
            );
            let unix_now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            // Workers' clocks start at zero when they start; close enough for minute windows.
            pipeline.set_wall_clock(unix_now, 0);
            // Worker i polls and transmits on queue i of every port, and nobody else does.
            let rx = ports
                .iter_mut()
                .map(|port| port.take_rx_queue(RxQueueId(index as u16)))
                .collect::<Result<Vec<_>, _>>()?;
            let tx = ports
                .iter_mut()
                .map(|port| port.take_tx_queue(TxQueueId(index as u16)))
                .collect::<Result<Vec<_>, _>>()?;
            let worker = Worker {
                index: index as u16,
                rx,
                handoff: handoff_links.next().expect("one set of links per worker"),
                egress: Egress::new(tx, layout.links().to_vec(), layout.sessions().clone()),
                shapers: LinkShapers::new(
                    crate::dataplane::shaping::queued_per_link(
                        config.mempool.mbufs,
                        worker_lcores.len(),
                    ),
                    pipeline.qos_stats(),
                ),
                layout: layout.clone(),
                pool: pool.clone(),
                to_control,
                from_control: worker_from_control.take(),
                punt,
                from_kernel,
                router: router.clone(),
                neighbors: neighbors.clone(),
                counters,
                stop: stop.clone(),
                ctl: Some({
                    let (queries, link) = crate::dataplane::ctl_link::CtlLink::pair();
                    ctl_queries.push(queries);
                    link
                }),
                trace: Some({
                    let (requests, link) =
                        crate::dataplane::trace_link::TraceLink::pair(index as u16);
                    trace_requests.push(requests);
                    link
                }),
            };
            let heartbeat = Arc::new(Heartbeat::new());
            heartbeats.push(heartbeat.clone());
            let panic_at = panic_on_purpose.and_then(|hook| hook.deadline_tsc(index));
            let exits = events.clone();
            let saved_flows = saved_flows.clone();
            let work = dpdk::launch_watched(
                eal,
                lcore,
                move || {
                    let (pipeline, now_ns) = worker.run(pipeline, heartbeat, panic_at);
                    let mut flows = Vec::new();
                    pipeline.export_flows(now_ns, &mut flows);
                    let _ = saved_flows.send(flows);
                },
                move |panic| {
                    let _ = exits.send(ControlEvent::WorkerExited(WorkerExit {
                        worker: index,
                        panic,
                    }));
                },
            )?;
            running_workers.push(index, work);
        }
        if std::env::var_os(FAIL_START_ON_PURPOSE_VAR).is_some() {
            bail!(
                "start-up fails on purpose ({FAIL_START_ON_PURPOSE_VAR}) with {} workers running",
                running_workers.len()
            );
        }
        if let Some(restore) = restore.take() {
            restore.finish(&snapshot_status);
        }

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
        let control = ControlPlane::new(
            control_to_worker,
            from_workers,
            pool.clone(),
            router,
            neighbors,
            control_counters.clone(),
            neighbor_config,
        )
        .with_twins(twins.with_rings(punt_rings, kernel_rings));
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
            let send = move |view| events.send(ControlEvent::Kernel(view)).is_ok();
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
        let meter_export = Arc::new(Published::new(Arc::new(MeterExport::from(
            &config.traffic_meter,
        ))));
        let nat_logger = crate::telemetry::nat_log::spawn(&config.nat.log, nat_logs)?;
        let interface_names = config.interfaces.iter().map(|i| i.name.clone()).collect();
        let firewall_logger = crate::telemetry::firewall_log::spawn(
            &config.firewall.log,
            firewall_logs,
            interface_names,
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
                tracing::error!("{err:#}");
                None
            }
        };
        let metrics_failed = metrics_thread.is_none();
        let ctl_server = crate::ctl::server::serve(
            &config.ctl,
            crate::ctl::server::Sources {
                queries: ctl_queries,
                traces: trace_requests,
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
            },
        )
        .map_err(|err| tracing::warn!("no ctl socket: {err:#}"))
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
            running,
            kernel_for_loads,
            netlink_view: KernelView::default(),
            pppoe_view: PppoeView::default(),
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
