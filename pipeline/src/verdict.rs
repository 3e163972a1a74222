//! What the worker does with a packet once the pipeline has seen it.

use std::net::Ipv4Addr;

/// The pipeline's answer for one packet. The packet's bytes may have been rewritten in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send on this port; the L2 header is already rewritten.
    Transmit { port: u16 },
    /// Like Transmit, but the packet exceeds the port's MTU with DF clear: split it first.
    Fragment { port: u16 },
    /// Free it, counted under the reason.
    Drop(DropReason),
    /// Slow-path work for the control thread.
    Control(ControlWork),
    /// The flow lives on another worker's core.
    Handoff { worker: u16 },
    /// For the kernel: hand the frame, unchanged, to the kernel twin of interface `port`
    /// (the punt path), where Linux's own services answer it.
    Punt { port: u16 },
}

impl Verdict {
    /// The port a forwarded packet leaves by, now or once its next hop resolves.
    pub fn egress_port(&self) -> Option<u16> {
        match *self {
            Verdict::Transmit { port }
            | Verdict::Fragment { port }
            | Verdict::Control(ControlWork::Resolve { port, .. })
            | Verdict::Control(ControlWork::Resolve6 { port }) => Some(port),
            _ => None,
        }
    }
}

/// Why a packet goes to the control thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlWork {
    /// An ARP request or reply.
    Arp,
    /// ICMP addressed to one of the gateway's own addresses (echo requests), IPv4 or IPv6.
    LocalIcmp,
    /// IPv6 Neighbor Discovery for the gateway (solicitations and advertisements): as
    /// urgent as ARP, since every IPv6 neighbour depends on it.
    Ndisc,
    /// Routed, but the next hop's MAC is unknown: hold the packet while ARP resolves it.
    /// The IP header is final; only the Ethernet header remains to be written.
    Resolve { port: u16, next_hop: Ipv4Addr },
    /// As `Resolve`, for IPv6 routed out of `port`: Neighbor Discovery resolves the next hop,
    /// which the control thread looks up again (an address would make every verdict larger).
    Resolve6 { port: u16 },
    /// PPPoE discovery, or a PPP control protocol (LCP, PAP, CHAP, IPCP) of the session, on
    /// an interface that runs a PPPoE client.
    Pppoe,
}

macro_rules! drop_reasons {
    ($($(#[doc = $doc:expr])* $variant:ident => $label:literal,)*) => {
        /// Every reason a packet is dropped. Each is one label value of the
        /// `gateway_dropped_packets_total{reason=...}` metric.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl DropReason {
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];
            pub const COUNT: usize = DropReason::ALL.len();

            /// The metric label: stable, snake_case.
            pub const fn label(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $label,)*
                }
            }
        }
    };
}

drop_reasons! {
    /// Shorter than an Ethernet header.
    TruncatedFrame => "truncated_frame",
    /// 802.1Q tagged with an id no VLAN subinterface of the port has, or 802.1ad (QinQ).
    VlanTagged => "vlan_tagged",
    /// A second tag (802.1Q, 802.1ad) behind the one that decides a trunk frame's
    /// subinterface: a double-tagged frame, refused so that the outer tag of one VLAN cannot
    /// deliver it into another (VLAN hopping).
    VlanDoubleTagged => "vlan_double_tagged",
    /// A PPPoE session frame whose header is wrong (version, code, or a length past the
    /// frame or too short for the PPP protocol).
    PppoeMalformed => "pppoe_malformed",
    /// IPv4 in a PPPoE session frame of another session than the interface's own (or of none).
    PppoeSession => "pppoe_session",
    /// IPv4 in the session's frames from another MAC than the access concentrator's: a host
    /// on the same segment passing as the ISP.
    PppoeForeignSource => "pppoe_foreign_source",
    /// On a PPPoE interface, a frame that is neither PPPoE discovery nor session (plain
    /// IPv4, ARP, anything else): the link carries PPPoE alone.
    PppoeNotPppoe => "pppoe_not_pppoe",
    /// An IPv4 datagram to send or received on a PPPoE interface whose session is not up.
    PppoeDown => "pppoe_down",
    /// Unicast to a MAC address that is not the ingress port's.
    NotOurMac => "not_our_mac",
    /// An EtherType the gateway does not route (LLDP, ..., and IPv6 on an interface without
    /// an IPv6 address).
    UnsupportedEthertype => "unsupported_ethertype",
    /// Bad IPv6 version or a payload length past the frame.
    MalformedIpv6 => "malformed_ipv6",
    /// IPv6 extension headers a router refuses: a Type 0 routing header (RFC 5095), a chain
    /// longer than eight, hop-by-hop options not first, malformed options, a first fragment
    /// without the whole header chain (RFC 7112), a second fragment header.
    Ipv6ExtensionHeaders => "ipv6_extension_headers",
    /// IPv6 the gateway does not forward: to a multicast group beyond the link, from or to
    /// a link-local address (RFC 4291 2.5.6), or between interfaces without IPv6.
    Ipv6NotForwarded => "ipv6_not_forwarded",
    /// IPv6 to the gateway that it does not answer: ICMPv6 other than Neighbor and Router
    /// Solicitations and echo requests (advertisements, errors), TCP and UDP, fragments, a
    /// solicitation for another node's address.
    Ipv6LocalUnhandled => "ipv6_local_unhandled",
    /// Neighbor Discovery that fails RFC 4861's checks (hop limit below 255, bad checksum or
    /// code, a zero-length option, a multicast target, a bad duplicate address probe).
    MalformedNdisc => "malformed_ndisc",
    /// ARP that is not Ethernet/IPv4, or is truncated.
    MalformedArp => "malformed_arp",
    /// Bad IPv4 version, header length or total length.
    MalformedIpv4 => "malformed_ipv4",
    /// IPv4 header checksum mismatch.
    Ipv4Checksum => "ipv4_checksum",
    /// IPv4 options carrying a source route (LSRR, SSRR), refused as RFC 7126 advises.
    Ipv4SourceRoute => "ipv4_source_route",
    /// IPv4 options whose lengths run past the header or are too short to be an option.
    MalformedIpv4Options => "malformed_ipv4_options",
    /// Source or destination that must never be routed (loopback, multicast, broadcast source...).
    MartianAddress => "martian_address",
    /// A source address the interface it came in on must not see (RFC 3704: not routed back
    /// out that interface, or another interface's connected subnet).
    SourceValidation => "source_validation",
    /// A unicast IPv4 datagram sent to a link-layer broadcast or multicast address.
    LinkLayerBroadcast => "link_layer_broadcast",
    /// TTL ran out here; an ICMP time exceeded went back (rate permitting).
    TtlExpired => "ttl_expired",
    /// No route to the destination; an ICMP unreachable went back (rate permitting).
    NoRoute => "no_route",
    /// Too big for the egress MTU with DF set; ICMP fragmentation needed went back.
    FragmentationNeeded => "fragmentation_needed",
    /// IPv6 too big for the egress MTU (routers never fragment IPv6); ICMPv6 Packet Too Big
    /// went back.
    PacketTooBig => "packet_too_big",
    /// ARP about other hosts (learned from where useful, then consumed).
    ArpNotForUs => "arp_not_for_us",
    /// ARP whose sender address is not a host of the ingress interface's connected subnet
    /// (another port's subnet, a routed address, the subnet's network or broadcast address):
    /// neither learnt nor answered, so one port's hosts cannot claim another port's neighbours.
    ArpWrongInterface => "arp_wrong_interface",
    /// ARP from another MAC claiming the ingress interface's own address (an address conflict).
    ArpClaimsOurAddress => "arp_claims_our_address",
    /// ARP claiming another MAC for a neighbour confirmed less than `neighbors.locktime_ms` ago.
    ArpLocked => "arp_locked",
    /// ARP claiming another MAC for a known neighbour that no probe of ours has confirmed (one
    /// is sent to the MAC we know, unless a check is already under way).
    ArpMacChangeUnconfirmed => "arp_mac_change_unconfirmed",
    /// A Neighbor Advertisement (or solicitation) claiming another MAC for an IPv6 neighbour
    /// confirmed less than `neighbors.locktime_ms` ago: refused, as `arp_locked` for IPv4.
    NdiscLocked => "ndisc_locked",
    /// Another MAC for a confirmed IPv6 neighbour, believed only once a unicast solicitation
    /// to the MAC we have goes unanswered and a multicast one is answered.
    NdiscMacChangeUnconfirmed => "ndisc_mac_change_unconfirmed",
    /// A Neighbor Advertisement from another node for one of the gateway's own IPv6
    /// addresses (a duplicate address, or a claim on it), as `arp_claims_our_address`.
    NdiscClaimsOurAddress => "ndisc_claims_our_address",
    /// Addressed to the gateway on a protocol it does not serve.
    LocalDelivery => "local_delivery",
    /// A non-initial fragment: its ports are in another packet, so it cannot be tracked.
    UntrackedFragment => "untracked_fragment",
    /// A TCP, UDP or ICMP header that is truncated or inconsistent.
    MalformedL4 => "malformed_l4",
    /// A TCP, UDP or ICMP checksum mismatch on a packet that would change or create a flow
    /// (TCP SYN, FIN or RST; a flow's first packet), and that the NIC did not vouch for.
    L4Checksum => "l4_checksum",
    /// A packet that does not fit its flow's TCP state or window, or cannot start a flow.
    ConntrackInvalid => "conntrack_invalid",
    /// The worker's flow table is full and nothing could be evicted.
    ConntrackFull => "conntrack_full",
    /// The worker's NAT ports for this host's external address are all in use.
    NatPortsExhausted => "nat_ports_exhausted",
    /// The LAN host holds its limit of NAT ports on this worker (`nat.host_ports`).
    HostNatPortLimit => "host_nat_port_limit",
    /// The host that opened the flow holds its limit of flows on this worker
    /// (`conntrack.host_flows`).
    HostFlowLimit => "host_flow_limit",
    /// A new TCP flow from a host holding its limit of half-open flows
    /// (`conntrack.host_half_open`).
    HostHalfOpenLimit => "host_half_open_limit",
    /// A new TCP flow beyond the worker's half-open limit (`conntrack.half_open`) that no
    /// older half-open flow could make room for (not expected: the oldest is replaced).
    HalfOpenLimit => "half_open_limit",
    /// A client's segment on a flow the SYN proxy opened, before the server answered the SYN
    /// passed on for it (the client sends it again).
    SynProxyPending => "syn_proxy_pending",
    /// A new flow denied by a firewall rule or zone policy.
    FirewallDrop => "firewall_drop",
    /// A new flow rejected by the firewall (a TCP RST or ICMP unreachable went back).
    FirewallReject => "firewall_reject",
    /// An established flow denied by rules reloaded since it started.
    FirewallRecheck => "firewall_recheck",
    /// An ICMP error that quotes no flow the gateway knows.
    UnrelatedIcmpError => "unrelated_icmp_error",
    /// A flow whose DNS name, TLS server name or HTTP host/URL is blocked (keyword block or a
    /// parental category): the client got NXDOMAIN or a TCP reset.
    ContentBlocked => "content_blocked",
    /// A device outside its allowed hours, or paused, by parental control.
    ParentalBlocked => "parental_blocked",
    /// Over the QoS rate of its link and class (the policer; in shaper mode, priority
    /// traffic above the link's whole rate).
    QosPoliced => "qos_policed",
    /// Dropped by CoDel in the QoS shaper: its flow queue's delay stayed above target and
    /// the packet was not ECN-capable.
    QosCodel => "qos_codel",
    /// The QoS shaper's queues were full: dropped from the head of the fattest flow queue.
    QosQueueFull => "qos_queue_full",
    /// More than one mbuf segment (the gateway does not enable scatter).
    MultiSegment => "multi_segment",
    /// The held-packets queue of an unresolved next hop was full.
    NeighborQueueFull => "neighbor_queue_full",
    /// The next hop never answered ARP.
    NeighborUnreachable => "neighbor_unreachable",
    /// All unresolved next hops together already held `neighbors.pending_total` packets.
    NeighborHeldLimit => "neighbor_held_limit",
    /// Held for an unresolved next hop whose entry a full neighbour table evicted.
    NeighborEvicted => "neighbor_evicted",
    /// The control thread's ring was full.
    ControlRingFull => "control_ring_full",
    /// Over this worker's budget of slow-path work for echo requests to the gateway, or
    /// refused because the control ring is over half full: ARP keeps the rest.
    SlowPathPoliced => "slow_path_policed",
    /// The ring carrying the control thread's packets to worker 0 was full.
    ControlTxRingFull => "control_tx_ring_full",
    /// Another worker's handoff ring was full.
    HandoffRingFull => "handoff_ring_full",
    /// For the kernel, over this worker's punt budget (`kernel_twins.punt_per_sec`): a flood
    /// at the gateway's addresses costs a worker at most its budget.
    PuntPoliced => "punt_policed",
    /// For the kernel, but the worker's ring to the control thread's twins was full.
    PuntRingFull => "punt_ring_full",
    /// For the kernel, but its twin's queue refused it (the kernel side is slow or gone).
    TwinTxFull => "twin_tx_full",
    /// A frame of a connection the kernel opened, for the worker that owns its flow, but the
    /// control thread's ring to that worker was full.
    KernelRingFull => "kernel_ring_full",
    /// An ARP reply the kernel sent on a twin for the gateway's own address: the dataplane
    /// answers those itself, so its ARP guard stays the only one that decides.
    KernelArpReply => "kernel_arp_reply",
    /// A frame the kernel sent on a twin that is not the kernel's own: a source address the
    /// gateway does not have on that interface (the twins' namespace forwarding a datagram
    /// from another twin or one punted to it, or a spoof), or an EtherType other than ARP,
    /// IPv4 and IPv6 (other than IPv6 on a PPPoE interface's twin, which carries the
    /// session's IPv6 alone). Only the kernel's own traffic leaves by a twin.
    TwinForeignSource => "twin_foreign_source",
    /// Toward an interface that has no address yet (`address = "dhcp"` before its first
    /// lease): nothing can be sent from it, nor masqueraded to it.
    InterfaceUnaddressed => "interface_unaddressed",
    /// A packet of a flow masqueraded to an address the gateway no longer has (the DHCP
    /// lease moved): the flow is ended, so that new ones take the new address.
    NatAddressGone => "nat_address_gone",
    /// A packet of a flow kept on an uplink that went down (`routing.on_uplink_down =
    /// "end"`: the flow is ended, a TCP client reset), or a new flow whose policy's uplink is
    /// down with no fallback (`[[routing.policy]]`).
    UplinkDown => "uplink_down",
    /// The NIC's TX queue refused the packet.
    TxQueueFull => "tx_queue_full",
    /// No packet buffer was free to build a reply or a fragment, or a buffer had no
    /// headroom for a VLAN subinterface's 802.1Q tag.
    NoBuffer => "no_buffer",
}

/// A set of drop reasons, one bit each: what a drop capture or the drop log asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasonSet(u128);

const _: () = assert!(DropReason::COUNT <= 128, "a ReasonSet has a bit per reason");

impl DropReason {
    /// The reasons only the gateway decides, before the pipeline (a VLAN or PPPoE frame, a
    /// chained mbuf), after it (a full queue or ring, the shaper) or on the control thread
    /// (a neighbour that never answered): a burst's verdicts never carry them, so the drop
    /// log and the drop capture cannot see them. `pipeline/tests/verdict_reasons.rs` holds
    /// the list to the pipeline's source.
    pub const OUTSIDE_PIPELINE: &'static [DropReason] = &[
        DropReason::VlanDoubleTagged,
        DropReason::PppoeMalformed,
        DropReason::PppoeSession,
        DropReason::PppoeForeignSource,
        DropReason::PppoeNotPppoe,
        DropReason::PppoeDown,
        DropReason::QosCodel,
        DropReason::QosQueueFull,
        DropReason::MultiSegment,
        DropReason::NeighborUnreachable,
        DropReason::NeighborEvicted,
        DropReason::ControlRingFull,
        DropReason::ControlTxRingFull,
        DropReason::HandoffRingFull,
        DropReason::PuntRingFull,
        DropReason::TwinTxFull,
        DropReason::KernelRingFull,
        DropReason::TxQueueFull,
    ];

    /// Whether the pipeline's verdicts can carry this reason (see [`Self::OUTSIDE_PIPELINE`]).
    pub fn decided_by_pipeline(self) -> bool {
        !DropReason::OUTSIDE_PIPELINE.contains(&self)
    }
}

impl ReasonSet {
    /// The set `labels` name, as the metrics' `reason` label writes them, of reasons the
    /// pipeline decides; Err: the first label that is no reason's, or one of
    /// [`DropReason::OUTSIDE_PIPELINE`]'s (with the reason).
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = &'a str>,
    ) -> Result<ReasonSet, (&'a str, Option<DropReason>)> {
        let mut set = ReasonSet::default();
        for label in labels {
            let reason = DropReason::ALL
                .iter()
                .find(|reason| reason.label() == label)
                .ok_or((label, None))?;
            if !reason.decided_by_pipeline() {
                return Err((label, Some(*reason)));
            }
            set.insert(*reason);
        }
        Ok(set)
    }

    pub fn insert(&mut self, reason: DropReason) {
        self.0 |= 1 << reason as u8;
    }

    #[inline]
    pub fn contains(self, reason: DropReason) -> bool {
        self.0 & (1 << reason as u8) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Why the flow tracker refused a packet: it did not fit its flow, or could not start one.
/// Each is counted in the tracker's statistics and is one label value of the
/// `gateway_conntrack_invalid_packets_total{reason=...}` metric (the packet itself is dropped
/// as [`DropReason::ConntrackInvalid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidReason {
    /// A flag combination no endpoint sends: SYN with FIN or RST, FIN without ACK, none.
    InvalidFlags,
    /// A new TCP flow must start with a bare SYN (or, in loose mode, a plain ACK).
    NotSyn,
    /// Valid flags that do not fit the state, e.g. data before the handshake's reply, or a
    /// SYN from the reply direction after the connection closed.
    UnexpectedFlags,
    /// A SYN with a new sequence number on a connection past its handshake.
    SynOnEstablished,
    /// The sequence number lies outside the window the receiver allowed, or behind it by
    /// more than one window.
    OutOfWindow,
    /// The acknowledgement is for data never sent, or older than one window.
    AckOutOfWindow,
    /// A TCP flow was given no parsed segment.
    NoTcpSegment,
    /// The flow id refers to a removed flow.
    NoSuchFlow,
}

impl InvalidReason {
    pub const COUNT: usize = 8;
    pub const ALL: [InvalidReason; InvalidReason::COUNT] = [
        InvalidReason::InvalidFlags,
        InvalidReason::NotSyn,
        InvalidReason::UnexpectedFlags,
        InvalidReason::SynOnEstablished,
        InvalidReason::OutOfWindow,
        InvalidReason::AckOutOfWindow,
        InvalidReason::NoTcpSegment,
        InvalidReason::NoSuchFlow,
    ];

    /// The reason's position in [`InvalidReason::ALL`] and the tracker's per-reason counts.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The metric label: stable, snake_case.
    pub const fn label(self) -> &'static str {
        match self {
            InvalidReason::InvalidFlags => "invalid_flags",
            InvalidReason::NotSyn => "not_syn",
            InvalidReason::UnexpectedFlags => "unexpected_flags",
            InvalidReason::SynOnEstablished => "syn_on_established",
            InvalidReason::OutOfWindow => "out_of_window",
            InvalidReason::AckOutOfWindow => "ack_out_of_window",
            InvalidReason::NoTcpSegment => "no_tcp_segment",
            InvalidReason::NoSuchFlow => "no_such_flow",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_unique_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for reason in DropReason::ALL {
            let label = reason.label();
            assert!(
                label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{label}"
            );
            assert!(seen.insert(label), "{label} twice");
        }
        assert_eq!(
            DropReason::ALL[DropReason::NoRoute as usize],
            DropReason::NoRoute
        );
    }

    #[test]
    fn invalid_reasons_are_listed_in_index_order_with_unique_labels() {
        let mut seen = std::collections::HashSet::new();
        for (index, reason) in InvalidReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), index, "{reason:?}");
            assert!(seen.insert(reason.label()), "{} twice", reason.label());
        }
    }
}
