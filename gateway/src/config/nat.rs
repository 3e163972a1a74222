//! `[nat]`: masquerading, port forwards, port blocks and the NAT log.

use super::*;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NatConfig {
    /// Interfaces whose outgoing flows are masqueraded (SNAT) to the interface's address.
    pub masquerade: Vec<String>,
    /// Source ports (and ICMP ids) handed out, split among workers by port class.
    pub port_range: PortRange,
    /// NAT bindings (internal endpoint -> external port) per worker.
    pub binding_capacity: usize,
    /// NAT bindings (so external ports) one internal host may hold per worker.
    pub host_ports: u32,
    /// Hand each internal host its ports in blocks of this many (a multiple of 64), logged
    /// once per block instead of once per mapping; 0: port by port.
    pub port_block_size: u32,
    pub port_forwards: Vec<PortForwardConfig>,
    /// The NAT log: each mapping's creation and deletion, to syslog.
    pub log: NatLogConfig,
}

/// `[nat.log]`: mapping events (`crate::telemetry::nat_log`) as RFC 5424 syslog messages.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NatLogConfig {
    /// Send each event as one UDP datagram (RFC 5426) to this syslog receiver.
    pub syslog_udp: Option<SocketAddr>,
    /// Send each event as one datagram to this Unix socket (`/dev/log`: the host's syslog).
    pub syslog_unix: Option<PathBuf>,
    /// The syslog facility: 16 (local0) to 23 (local7), or any of 0-23.
    pub facility: u8,
    /// Send the events as IPFIX (RFC 8158 NAT44 BIB records) to this collector over UDP.
    pub ipfix_udp: Option<SocketAddr>,
    /// The IPFIX observation domain id the messages carry.
    pub ipfix_domain: u32,
    /// Events each worker may hold between two sends (every 100 ms); beyond, they are lost
    /// and counted (`gateway_nat_log_events_total{result="lost"}`).
    pub queue_events: usize,
}

impl Default for NatLogConfig {
    fn default() -> Self {
        NatLogConfig {
            syslog_udp: None,
            syslog_unix: None,
            facility: 16,
            ipfix_udp: None,
            ipfix_domain: 1,
            queue_events: 65536,
        }
    }
}

impl NatLogConfig {
    pub fn enabled(&self) -> bool {
        self.syslog_udp.is_some() || self.syslog_unix.is_some() || self.ipfix_udp.is_some()
    }
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            masquerade: Vec::new(),
            port_range: PortRange {
                first: 1024,
                last: 65535,
            },
            binding_capacity: 65536,
            host_ports: pipeline::pipeline::DEFAULT_HOST_PORTS,
            port_block_size: 0,
            port_forwards: Vec::new(),
            log: NatLogConfig::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortForwardConfig {
    /// The interface whose address receives the forwarded port.
    pub interface: String,
    pub protocol: L4Protocol,
    /// "80" or "8000-8010".
    pub port: PortRange,
    /// The LAN host.
    pub to: Ipv4Addr,
    /// The LAN port (the first, for a range); defaults to the same port.
    #[serde(default)]
    pub to_port: Option<u16>,
    /// Log each first packet this forward decides (no rule matched it), as a rule's
    /// `log = true` does (`[firewall.log]`), under the forward's name (`forward tcp 8080 ->
    /// 192.168.10.5:80`).
    #[serde(default)]
    pub log: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum L4Protocol {
    Tcp,
    Udp,
}
