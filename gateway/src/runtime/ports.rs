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
