//! What a reload or a change in the kernel's addresses and routes publishes to the running
//! gateway: the new router config, the meter, the reload status and history, the answers to
//! `gateway ctl config`.

use super::*;

/// What a reload publishes to.
pub(crate) struct ReloadTargets<'a> {
    pub(crate) router: &'a Published<pipeline::RouterConfig>,
    pub(crate) qos: &'a [[Arc<pipeline::features::qos::QosStats>; 2]],
    pub(crate) meter: &'a Published<MeterExport>,
    pub(crate) status: &'a ReloadStatus,
    pub(crate) history: &'a ConfigHistory,
    pub(crate) rule_hits: &'a RuleHitRegistry,
}

/// Publishes a reload the `config-load` thread made ready, or reports its refusal, and
/// answers whoever asked (`gateway ctl config`). A file that does not load, validate or
/// compile changes nothing; the failure is logged with its field and counted. Returns the
/// config now in force when it applied.
pub(crate) fn apply_reload(
    result: reload::LoadResult,
    targets: &ReloadTargets,
    awaiting: &mut Option<AwaitingConfirmation>,
) -> Option<GatewayConfig> {
    let ReloadTargets {
        router,
        qos,
        meter,
        status,
        history,
        rule_hits,
    } = targets;
    let reload::LoadResult {
        loaded,
        source: asked_by,
        confirm,
        replies,
        previous,
    } = result;
    let source = asked_by.to_string();
    match loaded {
        reload::Loaded::Ready {
            config,
            router: router_config,
            restart,
            file,
            changed,
        } => {
            if !restart.is_empty() {
                tracing::warn!(
                    "reload: {} changed and need a restart; applying the rest",
                    restart.join(", ")
                );
            }
            for warning in config.warnings() {
                tracing::warn!("reload: {warning}");
            }
            meter.publish(Arc::new(MeterExport::from(&config.traffic_meter)));
            warn_refused_kernel_routes(&config, &router.load().0, &router_config);
            publish_router(
                router,
                qos,
                (rule_hits, &config.zone_names()),
                router_config,
            );
            status.record(true);
            if !changed.is_empty() {
                tracing::info!("reload: changed {}", changed.join(", "));
            }
            let answer = serde_json::json!({
                "source": source,
                "sha256": file.sha256,
                "changed": changed,
                "restart_required": restart,
                "confirm_within_secs": confirm.map(|within| within.as_secs()),
            });
            let version = history.applied(&source, &file.sha256, changed, restart);
            crate::ctl::config_apply::applied(
                awaiting,
                history,
                (version, &asked_by),
                confirm,
                previous,
            );
            tracing::info!(
                version,
                %source,
                "reload applied: new flows follow the new config, established flows continue"
            );
            let mut answer = answer;
            answer["version"] = version.into();
            for reply in replies {
                let _ = reply.send(Ok(answer.clone()));
            }
            Some(*config)
        }
        reload::Loaded::Refused(err) => {
            tracing::error!(%source, "reload refused, keeping the running config: {err}");
            if matches!(asked_by, reload::Source::NotConfirmed(_)) {
                tracing::error!(
                    "the rollback of an unconfirmed apply was refused: the unconfirmed \
                     config stays in force; `gateway ctl config rollback` or a restart"
                );
            }
            status.record(false);
            history.refused(&source, &err);
            for reply in replies {
                let _ = reply.send(Err(err.clone()));
            }
            None
        }
    }
}

/// The router's dynamic half: the twins' addresses and routes from netlink, and the PPPoE
/// sessions' (an interface has one or the other; the sessions' routes go first), with the
/// uplinks' health checks' verdicts.
pub(crate) fn merged_view(
    netlink: &KernelView,
    pppoe: &PppoeView,
    uplinks_failed: Vec<bool>,
    port_mappings: &PortMappings,
) -> KernelView {
    let interfaces = netlink.addresses.len().max(pppoe.addresses.len());
    KernelView {
        addresses: (0..interfaces)
            .map(|i| {
                netlink
                    .address(i)
                    .or(pppoe.addresses.get(i).copied().flatten())
            })
            .collect(),
        routes: pppoe
            .routes
            .iter()
            .chain(&netlink.routes)
            .copied()
            .collect(),
        mtus: pppoe.mtus.clone(),
        addresses6: netlink.addresses6.clone(),
        leases6: netlink.leases6.clone(),
        routes6: netlink.routes6.clone(),
        virtual_held: netlink.virtual_held.clone(),
        uplinks_failed,
        port_mappings: port_mappings.clone(),
        link_locals6: pppoe.link_locals6(),
    }
}

/// Whether a change of the views compiles the router config again, and whether its rules
/// stay those in force (only the port mappings changed: no new rules generation, so no flow
/// is checked against the rules again for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recompile {
    No,
    Yes,
    SameRules,
}

/// The kernel's addresses or routes on the twins changed: the running config is built again
/// with them and published, as a reload does (new flows use the new address and routes;
/// flows masqueraded to an address that went end on their next packet, `nat_address_gone`).
pub(crate) fn apply_kernel(
    running: &GatewayConfig,
    macs: &[[u8; 6]],
    kernel: &KernelView,
    router: &Published<pipeline::RouterConfig>,
    (qos, rule_hits): (
        &[[Arc<pipeline::features::qos::QosStats>; 2]],
        &RuleHitRegistry,
    ),
    same_rules: bool,
) {
    match router_config_with_kernel(running, macs, kernel) {
        Ok(mut config) => {
            if same_rules {
                // Only the port mappings changed: the flows were admitted under these rules.
                config.stateful.generation = router.load().0.stateful.generation;
            }
            for (iface, (index, new)) in running
                .interfaces
                .iter()
                .zip(config.interfaces.iter().enumerate())
            {
                if !matches!(iface.address, InterfaceAddress::Static(_)) {
                    let old = router
                        .load()
                        .0
                        .interfaces
                        .get(index)
                        .map(|i| (i.addr, i.prefix_len));
                    if old != Some((new.addr, new.prefix_len)) {
                        let address = format!("{}/{}", new.addr, new.prefix_len);
                        if iface.address.is_pppoe() {
                            tracing::info!(
                                interface = %iface.name,
                                %address,
                                "address from the PPPoE session applied"
                            );
                        } else {
                            tracing::info!(
                                interface = %iface.name,
                                %address,
                                "address from the kernel twin (dhcp) applied"
                            );
                        }
                    }
                }
            }
            warn_refused_kernel_routes(running, &router.load().0, &config);
            tracing::info!(
                kernel_routes = kernel.routes.len(),
                refused = config.refused_kernel_routes.len(),
                kernel_routes6 = kernel.routes6.len(),
                kernel_addresses6 = ?kernel.addresses6,
                "kernel addresses and routes applied to the router config"
            );
            publish_router(
                router,
                qos,
                (rule_hits, &running.zone_names()),
                Arc::new(config),
            );
        }
        Err(err) => tracing::error!(
            "the kernel's addresses and routes were not applied: {:#}",
            anyhow::Error::from(err)
        ),
    }
}

/// Warns of each kernel route `new` refuses that `old` did not (so once per change, not on
/// every rebuild): the route, the interface whose twin has it, why, and the interface whose
/// subnet it would have cut into. `gateway_kernel_routes_refused` counts them.
pub(crate) fn warn_refused_kernel_routes(
    config: &GatewayConfig,
    old: &pipeline::RouterConfig,
    new: &pipeline::RouterConfig,
) {
    let name = |port: u16| {
        config
            .interfaces
            .get(usize::from(port))
            .map_or("?", |iface| iface.name.as_str())
    };
    for refused in &new.refused_kernel_routes {
        if old.refused_kernel_routes.contains(refused) {
            continue;
        }
        let route = format!("{}/{}", refused.destination, refused.len);
        let via = refused
            .via
            .map_or("on-link".to_string(), |via| via.to_string());
        match refused.reason {
            pipeline::RouteRefusal::OverlapsConnected { interface } => tracing::warn!(
                %route,
                %via,
                interface = name(refused.port),
                connected = name(interface),
                "a kernel route inside an interface's own subnet was refused: it would take \
                 part of that link's traffic from its connected route"
            ),
            pipeline::RouteRefusal::NotAllowed => tracing::warn!(
                %route,
                %via,
                interface = name(refused.port),
                "a kernel route outside kernel_twins.route_allow was refused"
            ),
        }
    }
}
