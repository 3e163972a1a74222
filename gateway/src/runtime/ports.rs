//! Start-up's port helpers: the NUMA socket of the NICs, bonds' dedicated LACP queues, and the
//! flow rules that steer NAT replies to the worker owning the mapping.

use super::*;

/// The NUMA node for the pool and rings: the NICs'. Logs when the NICs sit on different
/// nodes (one pool serves them all, on the first's) and when a worker lcore runs on another
/// node than a NIC it polls, which costs a cross-node access per packet.
pub(crate) fn nic_socket(
    eal: &Eal,
    config: &GatewayConfig,
    port_interfaces: &[usize],
    port_ids: &[PortId],
    worker_lcores: &[LcoreId],
) -> SocketId {
    let sockets: Vec<SocketId> = port_ids.iter().map(|&id| Port::socket(eal, id)).collect();
    let socket = sockets
        .iter()
        .copied()
        .find(|socket| socket.node().is_some())
        .unwrap_or(SocketId::ANY);
    let ports = port_interfaces
        .iter()
        .map(|&index| &config.interfaces[index]);
    for (iface, &port_socket) in ports.zip(&sockets) {
        let Some(port_node) = port_socket.node() else {
            continue;
        };
        if port_socket != socket {
            tracing::warn!(
                interface = %iface.name,
                "{} is on NUMA node {port_node}, the packet pool on {socket}: its packets cross \
                 nodes",
                iface.name
            );
        }
        for &lcore in worker_lcores {
            let lcore_socket = eal.lcore_socket(lcore);
            if lcore_socket.node().is_some_and(|node| node != port_node) {
                tracing::warn!(
                    interface = %iface.name,
                    lcore = lcore.0,
                    "worker {lcore} runs on {lcore_socket} but polls {} on NUMA node \
                     {port_node}: pin workers to CPUs of the NIC's node (eal.cpus)",
                    iface.name
                );
            }
        }
    }
    tracing::info!(%socket, "packet pool and rings on the NICs' NUMA node");
    socket
}

/// On devices with rte_flow (the X550's flow director), NAT replies go straight to the queue
/// of the worker owning their port class. A refused rule is logged once per port; the
/// handoff rings then carry those replies, as they always do for ICMP and fragments.
/// Only ports' own interfaces are steered: a masqueraded VLAN's rules would need a VLAN
/// pattern item, and its replies reach their owners by the handoff rings.
pub(crate) fn steer_nat_replies(
    config: &GatewayConfig,
    port_interfaces: &[usize],
    ports: &[Port],
    workers: u16,
) -> Vec<FlowRule> {
    let mut rules = Vec::new();
    if workers < 2 {
        return rules;
    }
    let ownership = Ownership::new(workers);
    let port_ifaces = port_interfaces
        .iter()
        .map(|&index| &config.interfaces[index]);
    for (iface, port) in port_ifaces.zip(ports) {
        if !config.nat.masquerade.contains(&iface.name) {
            continue;
        }
        // The rules match the address; one from DHCP may change, so the handoff rings
        // bring those replies to their owners.
        let Some(address) = iface.address.cidr() else {
            continue;
        };
        let before = rules.len();
        let attempt = (0..=ownership.mask()).try_for_each(|class| {
            for protocol in [6, 17] {
                let queue = RxQueueId(ownership.port_owner(class));
                let rule = dpdk::flow::steer_port_class(
                    port,
                    address.addr,
                    protocol,
                    class,
                    ownership.mask(),
                    queue,
                )?;
                rules.push(rule);
            }
            Ok::<(), dpdk::DpdkError>(())
        });
        match attempt {
            Ok(()) => tracing::info!(
                port = iface.name,
                rules = rules.len() - before,
                "NAT replies steered to their owners' queues by rte_flow"
            ),
            Err(err) => tracing::info!(
                port = iface.name,
                "rte_flow steering refused ({err}); handoff rings bring NAT replies to their owners"
            ),
        }
    }
    rules
}

/// LACP settings that must be made while the bond is stopped. Returns whether LACP got
/// dedicated queues.
pub(crate) fn prepare_bond(id: PortId, name: &str, bond: &BondConfig) -> anyhow::Result<bool> {
    dpdk::bond::set_lacp_rate(id, bond.lacp_rate == LacpRate::Fast)
        .with_context(|| format!("bond {name}: LACP rate"))?;
    match dpdk::bond::enable_dedicated_lacp_queues(id) {
        Ok(()) => {
            tracing::info!(bond = name, "LACP on dedicated queues");
            Ok(true)
        }
        Err(err) => {
            tracing::info!(
                bond = name,
                "dedicated LACP queues unavailable on these members ({err}); LACP runs in the \
                 data path, kept alive by tx bursts every 10 ms even when idle"
            );
            Ok(false)
        }
    }
}

/// The ports up: what start-up keeps of them.
pub(crate) struct PortsUp {
    pub(crate) layout: PortLayout,
    pub(crate) socket: SocketId,
    pub(crate) pool: Arc<Mempool>,
    pub(crate) ports: Vec<Port>,
    /// Per interface (a VLAN subinterface has its port's).
    pub(crate) macs: Vec<[u8; 6]>,
    pub(crate) steering: Vec<FlowRule>,
    pub(crate) bond_watch: Arc<BondWatch>,
}

/// Brings up the pool and the ports (bonds with their LACP queues where the members allow),
/// the NAT replies' steering and the bonds' watch. On an error what is up so far goes, the
/// ports before the pool.
pub(crate) fn start_ports(
    eal: &Eal,
    config: &GatewayConfig,
    worker_lcores: &[LcoreId],
    workers: u16,
) -> anyhow::Result<PortsUp> {
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
    let socket = nic_socket(eal, config, &port_interfaces, &port_ids, worker_lcores);
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
            // solicited-node), an HA pair's VRRP adverts to 224.0.0.18, UPnP's searches to
            // 239.255.255.250: the port, or a VLAN on it, with IPv6, a virtual address or
            // UPnP served takes them.
            all_multicast: config.interfaces.iter().enumerate().any(|(index, other)| {
                let upnp =
                    config.port_mapping.upnp && config.port_mapping_interfaces().contains(&index);
                (other.ipv6.is_some() || other.virtual_address.is_some() || upnp)
                    && (other.name == iface.name
                        || other.parent.as_deref() == Some(iface.name.as_str()))
            }),
            vlan_offloads: layout.port_has_vlans(port_index) && iface.vlan_offload.unwrap_or(true),
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
    Ok(PortsUp {
        layout,
        socket,
        pool,
        ports,
        macs,
        steering,
        bond_watch,
    })
}
