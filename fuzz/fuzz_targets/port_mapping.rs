//! Port mapping (`pipeline::portmap`): the three protocols' parsers on the input's bytes, and
//! the table driven by what they read, as the gateway's server uses them. The input is a
//! sequence of steps, each a step byte `S` (the asking host is one of four, `(S >> 2) & 3`)
//! and what its kind reads after it:
//!
//! - `S & 3 == 0`: a NAT-PMP datagram (a u16 length, the bytes; the version byte forced to
//!   0): mapped, renewed or deleted as the request says;
//! - `S & 3 == 1`: a PCP datagram (the same, version 2, the client field the host's own):
//!   MAP mapped or deleted under its nonce, with PREFER_FAILURE as sent;
//! - `S & 3 == 2`: a UPnP action (a byte picking the action's name, a u16 length, the body's
//!   text): AddPortMapping mapped exactly as asked, DeletePortMapping by external port; the
//!   text is also read as an SSDP datagram;
//! - `S & 3 == 3`: the clock moves a u16 of seconds on, and the table expires.
//!
//! Checked after every step, besides "no panic": no host holds more than its quota, the table
//! no more than its total; each (protocol, external port) is mapped once and each (host,
//! protocol, internal port) once; external ports stay in range and off the kept ones; every
//! mapping's lifetime is within the limits from when it was last granted, and none outlives
//! the clock after an expiry; the responses' writers fit their buffers.
#![no_main]

use std::collections::HashSet;
use std::net::Ipv4Addr;

use gateway_fuzz::Bytes;
use libfuzzer_sys::fuzz_target;
use pipeline::portmap::{natpmp, pcp, upnp, Ask, Limits, MappingTable, Origin};

const HOSTS: [Ipv4Addr; 4] = [
    Ipv4Addr::new(192, 168, 10, 2),
    Ipv4Addr::new(192, 168, 10, 3),
    Ipv4Addr::new(192, 168, 10, 4),
    Ipv4Addr::new(192, 168, 10, 5),
];
const PER_HOST: usize = 6;
const TOTAL: usize = 16;
const LIFETIMES: std::ops::RangeInclusive<u32> = 10..=3600;
/// A narrow range, so that ports run out and collide.
const PORTS: std::ops::RangeInclusive<u16> = 1000..=1031;
/// A static forward's port inside the range.
fn kept(protocol: u8, port: u16) -> bool {
    protocol == 6 && port == 1010
}

const ACTIONS: [&str; 4] = [
    "AddPortMapping",
    "DeletePortMapping",
    "GetSpecificPortMappingEntry",
    "GetGenericPortMappingEntry",
];

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let mut table = MappingTable::new(Limits {
        per_host: PER_HOST,
        total: TOTAL,
        lifetime: LIFETIMES,
        external_ports: PORTS,
    });
    let mut now = 1_000u64;
    while !input.is_empty() {
        let step = input.u8();
        let host = HOSTS[usize::from((step >> 2) & 3)];
        match step & 3 {
            0 => {
                let mut bytes = input.slice(64).to_vec();
                if let Some(first) = bytes.first_mut() {
                    *first = natpmp::VERSION;
                }
                natpmp_step(&mut table, &bytes, host, now);
            }
            1 => {
                let mut bytes = input.slice(255).to_vec();
                if bytes.len() >= 24 {
                    bytes[0] = pcp::VERSION;
                    bytes[8..24].copy_from_slice(&pcp::mapped(host).octets());
                }
                pcp_step(&mut table, &bytes, host, now);
            }
            2 => {
                let action = input.pick(&ACTIONS);
                let body = String::from_utf8_lossy(input.slice(255)).into_owned();
                let _ = upnp::search_target(&body, "uuid");
                upnp_step(&mut table, action, &body, host, now);
            }
            _ => {
                now += u64::from(input.u16());
                for gone in table.expire(now) {
                    assert!(gone.expires_at <= now);
                }
                assert!(table.mappings().iter().all(|m| m.expires_at > now));
            }
        }
        check(&table, now);
    }
});

fn natpmp_step(table: &mut MappingTable, bytes: &[u8], host: Ipv4Addr, now: u64) {
    let mut out = [0u8; natpmp::MAX_RESPONSE_LEN];
    let Ok(natpmp::Request::Map {
        protocol,
        internal_port,
        suggested_port,
        lifetime,
    }) = natpmp::parse(bytes)
    else {
        return;
    };
    if lifetime == 0 {
        if internal_port == 0 {
            table.unmap_where(|m| {
                m.protocol == protocol && m.internal == host && m.origin == Origin::NatPmp
            });
        } else {
            let _ = table.unmap(protocol, host, internal_port, None);
        }
        return;
    }
    if internal_port == 0 {
        return;
    }
    let ask = Ask {
        protocol,
        internal: host,
        internal_port,
        suggested_port,
        lifetime,
        origin: Origin::NatPmp,
        nonce: [0; 12],
        prefer_failure: false,
    };
    if let Ok(granted) = table.map(&ask, now, kept) {
        assert!(LIFETIMES.contains(&granted.lifetime));
        let len = natpmp::write_map_response(
            &mut out,
            protocol,
            0,
            0,
            (internal_port, granted.external_port, granted.lifetime),
        );
        assert_eq!(natpmp::parse(&out[..len]), Err(natpmp::Unanswered::Ignore));
    }
}

fn pcp_step(table: &mut MappingTable, bytes: &[u8], host: Ipv4Addr, now: u64) {
    let mut out = [0u8; pcp::MAX_RESPONSE_LEN];
    let request = match pcp::parse(bytes) {
        Ok(request) => request,
        Err(pcp::Unanswered::Error {
            opcode,
            result,
            map,
        }) => {
            let answer = map.map(|map| pcp::MapAnswer {
                nonce: map.nonce,
                protocol: map.protocol,
                internal_port: map.internal_port,
                external_port: map.suggested_port,
                external_address: map.suggested_address,
            });
            let len = pcp::write_response(&mut out, opcode, (result, 30, 0), answer.as_ref());
            // An answer is never taken for a request.
            assert_eq!(pcp::parse(&out[..len]), Err(pcp::Unanswered::Ignore));
            return;
        }
        Err(pcp::Unanswered::Ignore) => return,
    };
    assert_eq!(request.client, pcp::mapped(host));
    let Some(map) = request.map else { return };
    if !matches!(map.protocol, 6 | 17) || map.internal_port == 0 || map.third_party.is_some() {
        return;
    }
    if request.lifetime == 0 {
        let _ = table.unmap(map.protocol, host, map.internal_port, Some(map.nonce));
        return;
    }
    let ask = Ask {
        protocol: map.protocol,
        internal: host,
        internal_port: map.internal_port,
        suggested_port: map.suggested_port,
        lifetime: request.lifetime,
        origin: Origin::Pcp,
        nonce: map.nonce,
        prefer_failure: map.prefer_failure,
    };
    if let Ok(granted) = table.map(&ask, now, kept) {
        if map.prefer_failure && granted.created.is_some() {
            assert_eq!(granted.external_port, map.suggested_port);
        }
    }
}

fn upnp_step(table: &mut MappingTable, action: &str, body: &str, host: Ipv4Addr, now: u64) {
    let soap_action = format!("\"{}#{action}\"", upnp::WAN_IP_CONNECTION);
    let Ok(parsed) = upnp::parse_action(&soap_action, body) else {
        return;
    };
    let _ = upnp::response(&parsed, &[("NewExternalIPAddress", body.to_string())]);
    match parsed {
        upnp::Action::AddPortMapping(add) if add.internal_client == host => {
            let ask = Ask {
                protocol: add.protocol,
                internal: host,
                internal_port: add.internal_port,
                suggested_port: add.external_port,
                lifetime: if add.lease == 0 { u32::MAX } else { add.lease },
                origin: Origin::Upnp,
                nonce: [0; 12],
                prefer_failure: true,
            };
            if let Ok(granted) = table.map(&ask, now, kept) {
                if granted.created.is_some() {
                    assert_eq!(granted.external_port, add.external_port);
                }
            }
        }
        upnp::Action::DeletePortMapping {
            protocol,
            external_port,
        } => {
            if let Ok(Some(gone)) = table.unmap_external(protocol, external_port, host) {
                assert_eq!(gone.internal, host);
                assert_ne!(gone.origin, Origin::Pcp);
            }
        }
        _ => {}
    }
}

fn check(table: &MappingTable, now: u64) {
    let mappings = table.mappings();
    assert!(mappings.len() <= TOTAL);
    let mut external = HashSet::new();
    let mut internal = HashSet::new();
    for mapping in mappings {
        let held = mappings
            .iter()
            .filter(|m| m.internal == mapping.internal)
            .count();
        assert!(held <= PER_HOST, "{} holds {held}", mapping.internal);
        assert!(external.insert((mapping.protocol, mapping.external_port)));
        assert!(internal.insert((mapping.internal, mapping.protocol, mapping.internal_port)));
        assert!(PORTS.contains(&mapping.external_port));
        assert!(!kept(mapping.protocol, mapping.external_port));
        assert!(mapping.internal_port != 0);
        assert!(mapping.expires_at <= now + u64::from(*LIFETIMES.end()));
    }
}
