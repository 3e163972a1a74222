//! Neighbor Discovery (RFC 4861): the bodies of Router and Neighbor Solicitations and
//! Advertisements, their options, and the validity checks every receiver must apply before
//! it believes one (section 6.1 and 7.1): hop limit 255, code 0, a good checksum, no
//! zero-length option, no multicast target, and the rules on unspecified sources.
//!
//! Parsing never allocates: options are walked in place by [`Options`], which stops at the
//! first malformed one.

use std::net::Ipv6Addr;

use super::icmpv6::{self, msg_type};
use super::ipv6::{is_link_local, MIN_MTU, ND_HOP_LIMIT};
use super::EthernetAddress;

/// ND option types (RFC 4861 4.6, RFC 8106 for RDNSS).
pub mod option_type {
    pub const SOURCE_LINK_LAYER: u8 = 1;
    pub const TARGET_LINK_LAYER: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const REDIRECTED_HEADER: u8 = 4;
    pub const MTU: u8 = 5;
    pub const RDNSS: u8 = 25;
}

/// Why a Neighbor Discovery message is not believed. Each becomes a drop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdError {
    /// Hop limit below 255: the message crossed a router, so it is not from the link.
    HopLimit,
    /// A code other than 0.
    BadCode,
    BadChecksum,
    /// Shorter than the message's fixed part.
    Truncated,
    /// An option of length 0 (which would loop a parser forever) or running past the message.
    BadOptionLength,
    /// A known option whose length does not fit its kind (a link-layer address of other than
    /// 6 bytes, a prefix information option of other than 32).
    MalformedOption,
    /// A solicitation or advertisement about a multicast address.
    MulticastTarget,
    /// A solicitation from the unspecified address (duplicate address detection) carrying a
    /// source link-layer address, or not sent to a solicited-node group.
    BadDadProbe,
    /// An advertisement sent to a multicast group with the Solicited flag.
    SolicitedToMulticast,
    /// A Router Advertisement from other than a link-local address.
    RouterNotLinkLocal,
    /// Not an ND message this module reads (Redirect, or any other type).
    NotNd,
}

/// A Prefix Information option (RFC 4861 4.6.2): what SLAAC builds addresses from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixInfo {
    pub prefix: Ipv6Addr,
    pub len: u8,
    /// The L flag: addresses in the prefix are on this link.
    pub on_link: bool,
    /// The A flag: hosts may form addresses in it (SLAAC).
    pub autonomous: bool,
    pub valid_secs: u32,
    pub preferred_secs: u32,
}

const PREFIX_INFO_LEN: usize = 32;
const LINK_LAYER_LEN: usize = 8;
const MTU_LEN: usize = 8;

/// One ND option, as read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdOption<'a> {
    SourceLinkLayer(EthernetAddress),
    TargetLinkLayer(EthernetAddress),
    PrefixInfo(PrefixInfo),
    Mtu(u32),
    /// Recursive DNS servers (RFC 8106): a lifetime and 16 bytes per server.
    Rdnss {
        lifetime_secs: u32,
        servers: &'a [u8],
    },
    /// Any other kind, to be ignored (RFC 4861 says receivers skip what they do not know).
    Other {
        kind: u8,
        body: &'a [u8],
    },
}

/// The options of an ND message, in order. Yields an error and then ends at the first option
/// whose length is 0 or runs past the message; each step consumes at least 8 bytes, so the
/// walk is bounded by the message's length.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    pub fn new(area: &'a [u8]) -> Options<'a> {
        Options { rest: area }
    }

    /// Every option well-formed.
    pub fn check(&self) -> Result<(), NdError> {
        self.clone().try_for_each(|option| option.map(drop))
    }

    /// The link-layer address option of `kind`, if any (the first; a message with several
    /// is odd but not invalid).
    fn link_layer(&self, kind: u8) -> Option<EthernetAddress> {
        self.clone().find_map(|option| match option {
            Ok(NdOption::SourceLinkLayer(mac)) if kind == option_type::SOURCE_LINK_LAYER => {
                Some(mac)
            }
            Ok(NdOption::TargetLinkLayer(mac)) if kind == option_type::TARGET_LINK_LAYER => {
                Some(mac)
            }
            _ => None,
        })
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<NdOption<'a>, NdError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, after) = self.rest.split_first()?;
        let units = after.first().copied().unwrap_or(0);
        let len = usize::from(units) * 8;
        if len == 0 || len > self.rest.len() {
            self.rest = &[];
            return Some(Err(NdError::BadOptionLength));
        }
        let (option, rest) = self.rest.split_at(len);
        self.rest = rest;
        let parsed = parse_option(kind, option);
        if parsed.is_err() {
            self.rest = &[];
        }
        Some(parsed)
    }
}

fn read_u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_be_bytes(word)
}

fn read_ipv6_at(bytes: &[u8], at: usize) -> Ipv6Addr {
    let mut octets = [0; 16];
    octets.copy_from_slice(&bytes[at..at + 16]);
    Ipv6Addr::from(octets)
}

/// One option of `option.len()` bytes (a positive multiple of 8, its type and length first).
fn parse_option(kind: u8, option: &[u8]) -> Result<NdOption<'_>, NdError> {
    match kind {
        option_type::SOURCE_LINK_LAYER | option_type::TARGET_LINK_LAYER => {
            if option.len() != LINK_LAYER_LEN {
                return Err(NdError::MalformedOption);
            }
            let mac = EthernetAddress::from_field(&option[2..8]);
            Ok(if kind == option_type::SOURCE_LINK_LAYER {
                NdOption::SourceLinkLayer(mac)
            } else {
                NdOption::TargetLinkLayer(mac)
            })
        }
        option_type::PREFIX_INFO => {
            if option.len() != PREFIX_INFO_LEN || option[2] > 128 {
                return Err(NdError::MalformedOption);
            }
            Ok(NdOption::PrefixInfo(PrefixInfo {
                len: option[2],
                on_link: option[3] & 0x80 != 0,
                autonomous: option[3] & 0x40 != 0,
                valid_secs: read_u32_at(option, 4),
                preferred_secs: read_u32_at(option, 8),
                prefix: read_ipv6_at(option, 16),
            }))
        }
        option_type::MTU => {
            if option.len() != MTU_LEN {
                return Err(NdError::MalformedOption);
            }
            Ok(NdOption::Mtu(read_u32_at(option, 4)))
        }
        option_type::RDNSS => {
            // 8 bytes of header, then at least one 16-byte address (RFC 8106 5.1).
            if option.len() < 24 {
                return Err(NdError::MalformedOption);
            }
            Ok(NdOption::Rdnss {
                lifetime_secs: read_u32_at(option, 4),
                servers: &option[8..],
            })
        }
        _ => Ok(NdOption::Other {
            kind,
            body: &option[2..],
        }),
    }
}

/// A Neighbor Discovery message, checked as RFC 4861 asks of a receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdRepr<'a> {
    RouterSolicit {
        source_mac: Option<EthernetAddress>,
    },
    RouterAdvert {
        cur_hop_limit: u8,
        /// The M flag: addresses from DHCPv6.
        managed: bool,
        /// The O flag: other configuration from DHCPv6.
        other: bool,
        /// 0: not a default router.
        router_lifetime_secs: u16,
        reachable_ms: u32,
        retrans_ms: u32,
        source_mac: Option<EthernetAddress>,
        /// Every option (prefixes, MTU, RDNSS), already checked well-formed.
        options: Options<'a>,
    },
    NeighborSolicit {
        target: Ipv6Addr,
        source_mac: Option<EthernetAddress>,
    },
    NeighborAdvert {
        router: bool,
        solicited: bool,
        override_: bool,
        target: Ipv6Addr,
        target_mac: Option<EthernetAddress>,
    },
}

impl PartialEq for Options<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.rest == other.rest
    }
}

impl Eq for Options<'_> {}

/// Fixed parts after the ICMPv6 header: RA's reachable time and retransmit timer, NS's and
/// NA's target.
const RA_FIXED: usize = 8;
const TARGET_FIXED: usize = 16;

impl<'a> NdRepr<'a> {
    /// Reads and checks an ND message: `icmp` is the whole ICMPv6 message, `hop_limit`, `src`
    /// and `dst` the IPv6 header's.
    pub fn parse(
        icmp: &icmpv6::Packet<&'a [u8]>,
        hop_limit: u8,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) -> Result<NdRepr<'a>, NdError> {
        let kind = icmp.msg_type();
        if !matches!(
            kind,
            msg_type::ROUTER_SOLICIT
                | msg_type::ROUTER_ADVERT
                | msg_type::NEIGHBOR_SOLICIT
                | msg_type::NEIGHBOR_ADVERT
        ) {
            return Err(NdError::NotNd);
        }
        if hop_limit != ND_HOP_LIMIT {
            return Err(NdError::HopLimit);
        }
        if icmp.code() != 0 {
            return Err(NdError::BadCode);
        }
        if !icmp.verify_checksum(src, dst) {
            return Err(NdError::BadChecksum);
        }
        let rest = icmp.rest_of_header().to_be_bytes();
        let data: &'a [u8] = {
            let whole: &'a [u8] = icmp_bytes(icmp);
            &whole[icmpv6::HEADER_LEN..]
        };
        match kind {
            msg_type::ROUTER_SOLICIT => {
                let options = Options::new(data);
                options.check()?;
                let source_mac = options.link_layer(option_type::SOURCE_LINK_LAYER);
                if src.is_unspecified() && source_mac.is_some() {
                    return Err(NdError::BadDadProbe);
                }
                Ok(NdRepr::RouterSolicit { source_mac })
            }
            msg_type::ROUTER_ADVERT => {
                if !is_link_local(src) {
                    return Err(NdError::RouterNotLinkLocal);
                }
                let Some((fixed, area)) = data.split_at_checked(RA_FIXED) else {
                    return Err(NdError::Truncated);
                };
                let options = Options::new(area);
                options.check()?;
                Ok(NdRepr::RouterAdvert {
                    cur_hop_limit: rest[0],
                    managed: rest[1] & 0x80 != 0,
                    other: rest[1] & 0x40 != 0,
                    router_lifetime_secs: u16::from_be_bytes([rest[2], rest[3]]),
                    reachable_ms: read_u32_at(fixed, 0),
                    retrans_ms: read_u32_at(fixed, 4),
                    source_mac: options.link_layer(option_type::SOURCE_LINK_LAYER),
                    options,
                })
            }
            msg_type::NEIGHBOR_SOLICIT => {
                let Some((fixed, area)) = data.split_at_checked(TARGET_FIXED) else {
                    return Err(NdError::Truncated);
                };
                let target = read_ipv6_at(fixed, 0);
                if target.is_multicast() {
                    return Err(NdError::MulticastTarget);
                }
                let options = Options::new(area);
                options.check()?;
                let source_mac = options.link_layer(option_type::SOURCE_LINK_LAYER);
                // Duplicate address detection (RFC 4861 7.1.1): no link-layer address, and
                // to the target's solicited-node group.
                if src.is_unspecified()
                    && (source_mac.is_some() || dst != super::ipv6::solicited_node(target))
                {
                    return Err(NdError::BadDadProbe);
                }
                Ok(NdRepr::NeighborSolicit { target, source_mac })
            }
            _ => {
                let Some((fixed, area)) = data.split_at_checked(TARGET_FIXED) else {
                    return Err(NdError::Truncated);
                };
                let target = read_ipv6_at(fixed, 0);
                if target.is_multicast() {
                    return Err(NdError::MulticastTarget);
                }
                let solicited = rest[0] & 0x40 != 0;
                if dst.is_multicast() && solicited {
                    return Err(NdError::SolicitedToMulticast);
                }
                let options = Options::new(area);
                options.check()?;
                Ok(NdRepr::NeighborAdvert {
                    router: rest[0] & 0x80 != 0,
                    solicited,
                    override_: rest[0] & 0x20 != 0,
                    target,
                    target_mac: options.link_layer(option_type::TARGET_LINK_LAYER),
                })
            }
        }
    }
}

fn icmp_bytes<'a>(icmp: &icmpv6::Packet<&'a [u8]>) -> &'a [u8] {
    icmp.clone().into_inner()
}

/// Writes a Neighbor Solicitation for `target` (ICMPv6 header, target, and the source
/// link-layer option unless `source_mac` is `None`, as for duplicate address detection) into
/// `buf`, checksum left to fill once the addresses are known. Returns its length, or `None`
/// if `buf` is too short.
pub fn emit_neighbor_solicit(
    buf: &mut [u8],
    target: Ipv6Addr,
    source_mac: Option<EthernetAddress>,
) -> Option<usize> {
    let len = icmpv6::HEADER_LEN + TARGET_FIXED + source_mac.map_or(0, |_| LINK_LAYER_LEN);
    let message = buf.get_mut(..len)?;
    message.fill(0);
    message[0] = msg_type::NEIGHBOR_SOLICIT;
    message[8..24].copy_from_slice(&target.octets());
    if let Some(mac) = source_mac {
        write_link_layer(&mut message[24..32], option_type::SOURCE_LINK_LAYER, mac);
    }
    Some(len)
}

/// Writes a Neighbor Advertisement for `target` with its link-layer address into `buf`
/// (checksum left to fill). Returns its length, or `None` if `buf` is too short.
pub fn emit_neighbor_advert(
    buf: &mut [u8],
    target: Ipv6Addr,
    target_mac: EthernetAddress,
    router: bool,
    solicited: bool,
    override_: bool,
) -> Option<usize> {
    let len = icmpv6::HEADER_LEN + TARGET_FIXED + LINK_LAYER_LEN;
    let message = buf.get_mut(..len)?;
    message.fill(0);
    message[0] = msg_type::NEIGHBOR_ADVERT;
    message[4] = u8::from(router) << 7 | u8::from(solicited) << 6 | u8::from(override_) << 5;
    message[8..24].copy_from_slice(&target.octets());
    write_link_layer(
        &mut message[24..32],
        option_type::TARGET_LINK_LAYER,
        target_mac,
    );
    Some(len)
}

/// Writes a Router Solicitation with the source link-layer option into `buf` (checksum left
/// to fill). Returns its length, or `None` if `buf` is too short.
pub fn emit_router_solicit(buf: &mut [u8], source_mac: EthernetAddress) -> Option<usize> {
    let len = icmpv6::HEADER_LEN + LINK_LAYER_LEN;
    let message = buf.get_mut(..len)?;
    message.fill(0);
    message[0] = msg_type::ROUTER_SOLICIT;
    write_link_layer(
        &mut message[8..16],
        option_type::SOURCE_LINK_LAYER,
        source_mac,
    );
    Some(len)
}

/// What a Router Advertisement the gateway sends says (RFC 4861 4.2, RFC 8106).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterAdvert<'a> {
    pub cur_hop_limit: u8,
    pub managed: bool,
    pub other: bool,
    pub router_lifetime_secs: u16,
    pub source_mac: EthernetAddress,
    /// Announced when it is not Ethernet's 1500 (RFC 4861 recommends it on links of mixed
    /// MTU); must be at least [`MIN_MTU`].
    pub mtu: Option<u32>,
    pub prefixes: &'a [PrefixInfo],
    pub dns_servers: &'a [Ipv6Addr],
    pub dns_lifetime_secs: u32,
}

impl RouterAdvert<'_> {
    /// The message's length.
    pub fn message_len(&self) -> usize {
        icmpv6::HEADER_LEN
            + RA_FIXED
            + LINK_LAYER_LEN
            + self.mtu.map_or(0, |_| MTU_LEN)
            + self.prefixes.len() * PREFIX_INFO_LEN
            + if self.dns_servers.is_empty() {
                0
            } else {
                8 + 16 * self.dns_servers.len()
            }
    }

    /// Writes the advertisement into `buf` (checksum left to fill). Returns its length, or
    /// `None` if `buf` is too short, an MTU is below [`MIN_MTU`] or there are more DNS servers
    /// than one option holds (127).
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let len = self.message_len();
        if self.mtu.is_some_and(|mtu| mtu < MIN_MTU as u32) || self.dns_servers.len() > 127 {
            return None;
        }
        let message = buf.get_mut(..len)?;
        message.fill(0);
        message[0] = msg_type::ROUTER_ADVERT;
        message[4] = self.cur_hop_limit;
        message[5] = u8::from(self.managed) << 7 | u8::from(self.other) << 6;
        message[6..8].copy_from_slice(&self.router_lifetime_secs.to_be_bytes());
        // Reachable time and retransmit timer: 0, unspecified by this router.
        let mut at = icmpv6::HEADER_LEN + RA_FIXED;
        write_link_layer(
            &mut message[at..at + LINK_LAYER_LEN],
            option_type::SOURCE_LINK_LAYER,
            self.source_mac,
        );
        at += LINK_LAYER_LEN;
        if let Some(mtu) = self.mtu {
            let option = &mut message[at..at + MTU_LEN];
            option[0] = option_type::MTU;
            option[1] = 1;
            option[4..8].copy_from_slice(&mtu.to_be_bytes());
            at += MTU_LEN;
        }
        for prefix in self.prefixes {
            let option = &mut message[at..at + PREFIX_INFO_LEN];
            option[0] = option_type::PREFIX_INFO;
            option[1] = (PREFIX_INFO_LEN / 8) as u8;
            option[2] = prefix.len;
            option[3] = u8::from(prefix.on_link) << 7 | u8::from(prefix.autonomous) << 6;
            option[4..8].copy_from_slice(&prefix.valid_secs.to_be_bytes());
            option[8..12].copy_from_slice(&prefix.preferred_secs.to_be_bytes());
            option[16..32].copy_from_slice(&prefix.prefix.octets());
            at += PREFIX_INFO_LEN;
        }
        if !self.dns_servers.is_empty() {
            let option_len = 8 + 16 * self.dns_servers.len();
            let option = &mut message[at..at + option_len];
            option[0] = option_type::RDNSS;
            option[1] = (option_len / 8) as u8;
            option[4..8].copy_from_slice(&self.dns_lifetime_secs.to_be_bytes());
            for (server, slot) in self
                .dns_servers
                .iter()
                .zip(option[8..].chunks_exact_mut(16))
            {
                slot.copy_from_slice(&server.octets());
            }
        }
        Some(len)
    }
}

fn write_link_layer(option: &mut [u8], kind: u8, mac: EthernetAddress) {
    option[0] = kind;
    option[1] = 1;
    option[2..8].copy_from_slice(&mac.0);
}

#[cfg(test)]
mod tests {
    use etherparse::{Icmpv6Type, PacketBuilder};
    use proptest::prelude::*;

    use super::*;
    use crate::wire::ipv6::{link_local, solicited_node, ALL_NODES};
    use crate::wire::{Icmpv6Packet, Ipv6Packet};

    const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x10]);
    const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
    const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
    const GW: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);

    /// `message` with its checksum filled for `src` to `dst`.
    fn filled(mut message: Vec<u8>, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        Icmpv6Packet::new_unchecked(&mut message[..]).fill_checksum(src, dst);
        message
    }

    fn parse(
        message: &[u8],
        hop_limit: u8,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) -> Result<NdRepr<'_>, NdError> {
        NdRepr::parse(
            &Icmpv6Packet::new_checked(message).unwrap(),
            hop_limit,
            src,
            dst,
        )
    }

    #[test]
    fn a_solicitation_built_by_etherparse_reads_back() {
        // etherparse writes the ICMPv6 header; the target and option are the body.
        let mut body = GW.octets().to_vec();
        body.extend([option_type::SOURCE_LINK_LAYER, 1]);
        body.extend(HOST_MAC.0);
        let mut frame = Vec::new();
        PacketBuilder::ipv6(HOST.octets(), solicited_node(GW).octets(), 255)
            .icmpv6(Icmpv6Type::Unknown {
                type_u8: msg_type::NEIGHBOR_SOLICIT,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut frame, &body)
            .unwrap();
        let ip = Ipv6Packet::new_checked(&frame[..]).unwrap();
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let repr = NdRepr::parse(&icmp, ip.hop_limit(), ip.src_addr(), ip.dst_addr()).unwrap();
        assert_eq!(
            repr,
            NdRepr::NeighborSolicit {
                target: GW,
                source_mac: Some(HOST_MAC)
            }
        );
        // Ours, emitted the same way, is the same message.
        let mut ours = [0u8; 64];
        let len = emit_neighbor_solicit(&mut ours, GW, Some(HOST_MAC)).unwrap();
        let ours = filled(ours[..len].to_vec(), HOST, solicited_node(GW));
        assert_eq!(ours[..], ip.payload()[..]);
    }

    #[test]
    fn advertisements_round_trip() {
        let mut buf = [0u8; 64];
        let len = emit_neighbor_advert(&mut buf, GW, GW_MAC, true, true, true).unwrap();
        let message = filled(buf[..len].to_vec(), GW, HOST);
        assert_eq!(
            parse(&message, 255, GW, HOST),
            Ok(NdRepr::NeighborAdvert {
                router: true,
                solicited: true,
                override_: true,
                target: GW,
                target_mac: Some(GW_MAC),
            })
        );
        // Solicited, to all nodes: refused.
        let to_all = filled(buf[..len].to_vec(), GW, ALL_NODES);
        assert_eq!(
            parse(&to_all, 255, GW, ALL_NODES),
            Err(NdError::SolicitedToMulticast)
        );

        let len = emit_router_solicit(&mut buf, HOST_MAC).unwrap();
        let from = link_local(HOST_MAC);
        let rs = filled(buf[..len].to_vec(), from, crate::wire::ipv6::ALL_ROUTERS);
        assert_eq!(
            parse(&rs, 255, from, crate::wire::ipv6::ALL_ROUTERS),
            Ok(NdRepr::RouterSolicit {
                source_mac: Some(HOST_MAC)
            })
        );
    }

    #[test]
    fn a_router_advertisement_round_trips() {
        let prefixes = [PrefixInfo {
            prefix: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
            len: 64,
            on_link: true,
            autonomous: true,
            valid_secs: 86_400,
            preferred_secs: 14_400,
        }];
        let dns = [GW, Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 53)];
        let ra = RouterAdvert {
            cur_hop_limit: 64,
            managed: false,
            other: true,
            router_lifetime_secs: 1800,
            source_mac: GW_MAC,
            mtu: Some(1492),
            prefixes: &prefixes,
            dns_servers: &dns,
            dns_lifetime_secs: 600,
        };
        let mut buf = [0u8; 256];
        let len = ra.emit(&mut buf).unwrap();
        assert_eq!(len, ra.message_len());
        let src = link_local(GW_MAC);
        let message = filled(buf[..len].to_vec(), src, ALL_NODES);
        let Ok(NdRepr::RouterAdvert {
            cur_hop_limit,
            managed,
            other,
            router_lifetime_secs,
            source_mac,
            options,
            ..
        }) = parse(&message, 255, src, ALL_NODES)
        else {
            panic!("not read back");
        };
        assert_eq!((cur_hop_limit, managed, other), (64, false, true));
        assert_eq!((router_lifetime_secs, source_mac), (1800, Some(GW_MAC)));
        let options: Vec<NdOption<'_>> = options.map(Result::unwrap).collect();
        assert_eq!(options[0], NdOption::SourceLinkLayer(GW_MAC));
        assert_eq!(options[1], NdOption::Mtu(1492));
        assert_eq!(options[2], NdOption::PrefixInfo(prefixes[0]));
        let NdOption::Rdnss {
            lifetime_secs,
            servers,
        } = options[3]
        else {
            panic!("no RDNSS option");
        };
        assert_eq!(lifetime_secs, 600);
        assert_eq!(servers.len(), 32);
        assert_eq!(servers[16..], dns[1].octets());
        // The same advertisement from a global address is not believed.
        let global = filled(buf[..len].to_vec(), GW, ALL_NODES);
        assert_eq!(
            parse(&global, 255, GW, ALL_NODES),
            Err(NdError::RouterNotLinkLocal)
        );
        // An MTU below IPv6's minimum is not sent.
        let low = RouterAdvert {
            mtu: Some(1200),
            ..ra
        };
        assert_eq!(low.emit(&mut buf), None);
    }

    #[test]
    fn what_a_receiver_must_refuse() {
        let mut buf = [0u8; 64];
        let len = emit_neighbor_solicit(&mut buf, GW, Some(HOST_MAC)).unwrap();
        let dst = solicited_node(GW);
        let good = filled(buf[..len].to_vec(), HOST, dst);
        assert!(parse(&good, 255, HOST, dst).is_ok());
        // From beyond a router.
        assert_eq!(parse(&good, 254, HOST, dst), Err(NdError::HopLimit));
        // A flipped bit.
        let mut bad = good.clone();
        bad[20] ^= 1;
        assert_eq!(parse(&bad, 255, HOST, dst), Err(NdError::BadChecksum));
        // A non-zero code.
        let mut coded = buf[..len].to_vec();
        coded[1] = 1;
        let coded = filled(coded, HOST, dst);
        assert_eq!(parse(&coded, 255, HOST, dst), Err(NdError::BadCode));
        // A zero-length option.
        let mut zero = buf[..len].to_vec();
        zero[25] = 0;
        let zero = filled(zero, HOST, dst);
        assert_eq!(parse(&zero, 255, HOST, dst), Err(NdError::BadOptionLength));
        // A multicast target.
        let len = emit_neighbor_solicit(&mut buf, ALL_NODES, None).unwrap();
        let multicast = filled(buf[..len].to_vec(), HOST, dst);
        assert_eq!(
            parse(&multicast, 255, HOST, dst),
            Err(NdError::MulticastTarget)
        );
        // A DAD probe carrying a link-layer address.
        let unspecified = Ipv6Addr::UNSPECIFIED;
        let len = emit_neighbor_solicit(&mut buf, GW, Some(HOST_MAC)).unwrap();
        let probe = filled(buf[..len].to_vec(), unspecified, dst);
        assert_eq!(
            parse(&probe, 255, unspecified, dst),
            Err(NdError::BadDadProbe)
        );
        // Without one it is fine.
        let len = emit_neighbor_solicit(&mut buf, GW, None).unwrap();
        let probe = filled(buf[..len].to_vec(), unspecified, dst);
        assert!(parse(&probe, 255, unspecified, dst).is_ok());
        // Cut inside the target.
        let cut = filled(buf[..20].to_vec(), HOST, dst);
        assert_eq!(parse(&cut, 255, HOST, dst), Err(NdError::Truncated));
        // Not an ND message.
        let echo = filled(vec![128, 0, 0, 0, 0, 0, 0, 0], HOST, dst);
        assert_eq!(parse(&echo, 255, HOST, dst), Err(NdError::NotNd));
    }

    proptest! {
        /// Any body behind any ND type: parsed or refused, never a panic, and an option walk
        /// that ends within the message.
        #[test]
        fn arbitrary_messages_never_panic(
            kind in 133u8..=136,
            body in prop::collection::vec(any::<u8>(), 4..120),
            src_unspecified in any::<bool>(),
        ) {
            let src = if src_unspecified { Ipv6Addr::UNSPECIFIED } else { link_local(HOST_MAC) };
            let mut message = vec![kind, 0, 0, 0];
            message.extend(&body);
            let message = filled(message, src, ALL_NODES);
            let _ = parse(&message, 255, src, ALL_NODES);
            prop_assert!(Options::new(&message[8..]).count() <= message.len() / 8 + 1);
        }
    }
}
