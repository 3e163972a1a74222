//! PCP's bytes (RFC 6887): the common header, the MAP opcode, the options MAP takes
//! (THIRD_PARTY, PREFER_FAILURE, FILTER), the responses, and the ANNOUNCE the gateway
//! multicasts when it starts. Addresses are IPv6 on the wire, IPv4 as IPv4-mapped ones.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const VERSION: u8 = 2;
/// Longest PCP message (RFC 6887 7).
pub const MAX_LEN: usize = 1100;
const HEADER_LEN: usize = 24;
const MAP_LEN: usize = 36;
/// A response to MAP: the header and the MAP body, no options.
pub const MAX_RESPONSE_LEN: usize = HEADER_LEN + MAP_LEN;
const RESPONSE_BIT: u8 = 0x80;

pub mod opcode {
    pub const ANNOUNCE: u8 = 0;
    pub const MAP: u8 = 1;
    pub const PEER: u8 = 2;
}

pub mod option {
    pub const THIRD_PARTY: u8 = 1;
    pub const PREFER_FAILURE: u8 = 2;
    pub const FILTER: u8 = 3;
    /// Codes from 128 on are optional to process: an unknown one is skipped.
    pub const OPTIONAL: u8 = 128;
}

/// Result codes (RFC 6887 7.4).
pub mod result {
    pub const SUCCESS: u8 = 0;
    pub const UNSUPP_VERSION: u8 = 1;
    pub const NOT_AUTHORIZED: u8 = 2;
    pub const MALFORMED_REQUEST: u8 = 3;
    pub const UNSUPP_OPCODE: u8 = 4;
    pub const UNSUPP_OPTION: u8 = 5;
    pub const MALFORMED_OPTION: u8 = 6;
    pub const NETWORK_FAILURE: u8 = 7;
    pub const NO_RESOURCES: u8 = 8;
    pub const UNSUPP_PROTOCOL: u8 = 9;
    pub const USER_EX_QUOTA: u8 = 10;
    pub const CANNOT_PROVIDE_EXTERNAL: u8 = 11;
    pub const ADDRESS_MISMATCH: u8 = 12;
}

/// A MAP request's body and the options that bear on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Map {
    pub nonce: [u8; 12],
    pub protocol: u8,
    pub internal_port: u16,
    pub suggested_port: u16,
    pub suggested_address: Ipv6Addr,
    /// THIRD_PARTY: the internal address the client asks for, if not its own.
    pub third_party: Option<Ipv6Addr>,
    pub prefer_failure: bool,
}

/// A request this server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub opcode: u8,
    pub lifetime: u32,
    /// The PCP client's address as it wrote it: must be the datagram's source.
    pub client: Ipv6Addr,
    /// MAP's body; None for ANNOUNCE.
    pub map: Option<Map>,
}

/// A datagram not answered with a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// Too short, or a response (R bit): dropped without a word.
    Ignore,
    /// Answered with this result; `opcode` and `map` (when its body was readable) are
    /// echoed in the response.
    Error {
        opcode: u8,
        result: u8,
        map: Option<Map>,
    },
}

/// Reads a PCP request (a datagram whose first byte is not NAT-PMP's version 0).
pub fn parse(bytes: &[u8]) -> Result<Request, Unanswered> {
    let [version, op, ..] = *bytes else {
        return Err(Unanswered::Ignore);
    };
    if op & RESPONSE_BIT != 0 {
        return Err(Unanswered::Ignore);
    }
    let error = |result, map| {
        Err(Unanswered::Error {
            opcode: op,
            result,
            map,
        })
    };
    if version != VERSION {
        return error(result::UNSUPP_VERSION, None);
    }
    if bytes.len() < HEADER_LEN || bytes.len() > MAX_LEN || !bytes.len().is_multiple_of(4) {
        return error(result::MALFORMED_REQUEST, None);
    }
    let lifetime = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let client = ipv6_at(bytes, 8);
    let (map, options) = match op {
        opcode::ANNOUNCE => (None, &bytes[HEADER_LEN..]),
        opcode::MAP => {
            let Some(body) = bytes.get(HEADER_LEN..HEADER_LEN + MAP_LEN) else {
                return error(result::MALFORMED_REQUEST, None);
            };
            let mut nonce = [0; 12];
            nonce.copy_from_slice(&body[..12]);
            let map = Map {
                nonce,
                protocol: body[12],
                internal_port: u16::from_be_bytes([body[16], body[17]]),
                suggested_port: u16::from_be_bytes([body[18], body[19]]),
                suggested_address: ipv6_at(body, 20),
                third_party: None,
                prefer_failure: false,
            };
            (Some(map), &bytes[HEADER_LEN + MAP_LEN..])
        }
        _ => return error(result::UNSUPP_OPCODE, None),
    };
    let mut map = map;
    let mut rest = options;
    while !rest.is_empty() {
        let Some(&[code, _, high, low]) = rest.first_chunk::<4>() else {
            return error(result::MALFORMED_OPTION, map);
        };
        let len = usize::from(u16::from_be_bytes([high, low]));
        let padded = len.div_ceil(4) * 4;
        let Some(data) = rest.get(4..4 + len) else {
            return error(result::MALFORMED_OPTION, map);
        };
        rest = rest.get(4 + padded..).unwrap_or_default();
        let Some(body) = map.as_mut() else {
            // ANNOUNCE takes no options.
            if code < option::OPTIONAL {
                return error(result::UNSUPP_OPTION, map);
            }
            continue;
        };
        match code {
            option::THIRD_PARTY if len == 16 && body.third_party.is_none() => {
                body.third_party = Some(ipv6_at(data, 0));
            }
            option::PREFER_FAILURE if len == 0 && !body.prefer_failure => {
                body.prefer_failure = true;
            }
            option::THIRD_PARTY | option::PREFER_FAILURE => {
                return error(result::MALFORMED_OPTION, map);
            }
            // FILTER (admit only some remote peers) is not supported: refused rather than
            // ignored, since ignoring it would open the mapping wider than asked.
            code if code < option::OPTIONAL => return error(result::UNSUPP_OPTION, map),
            _ => {}
        }
    }
    Ok(Request {
        opcode: op,
        lifetime,
        client,
        map,
    })
}

fn ipv6_at(bytes: &[u8], at: usize) -> Ipv6Addr {
    let mut octets = [0; 16];
    octets.copy_from_slice(&bytes[at..at + 16]);
    Ipv6Addr::from(octets)
}

/// An IPv4 address as PCP carries it.
pub fn mapped(address: Ipv4Addr) -> Ipv6Addr {
    address.to_ipv6_mapped()
}

/// Whether a suggested external address says "any": all zeros, or IPv4-mapped 0.0.0.0.
pub fn is_any(address: Ipv6Addr) -> bool {
    address.is_unspecified() || address == mapped(Ipv4Addr::UNSPECIFIED)
}

/// What a response to MAP says of the mapping: the request's nonce, protocol and internal
/// port, and the external port and address assigned (the suggested ones with an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapAnswer {
    pub nonce: [u8; 12],
    pub protocol: u8,
    pub internal_port: u16,
    pub external_port: u16,
    pub external_address: Ipv6Addr,
}

/// A response: the header, and MAP's body where `map` is given. Returns its length.
pub fn write_response(
    out: &mut [u8; MAX_RESPONSE_LEN],
    op: u8,
    (result, lifetime, epoch): (u8, u32, u32),
    map: Option<&MapAnswer>,
) -> usize {
    out.fill(0);
    out[0] = VERSION;
    out[1] = RESPONSE_BIT | op;
    out[3] = result;
    out[4..8].copy_from_slice(&lifetime.to_be_bytes());
    out[8..12].copy_from_slice(&epoch.to_be_bytes());
    let Some(map) = map else {
        return HEADER_LEN;
    };
    let body = &mut out[HEADER_LEN..];
    body[..12].copy_from_slice(&map.nonce);
    body[12] = map.protocol;
    body[16..18].copy_from_slice(&map.internal_port.to_be_bytes());
    body[18..20].copy_from_slice(&map.external_port.to_be_bytes());
    body[20..36].copy_from_slice(&map.external_address.octets());
    HEADER_LEN + MAP_LEN
}

/// The unsolicited ANNOUNCE (RFC 6887 14.1.3) sent to 224.0.0.1:5350 when the gateway
/// starts: clients renew their mappings on hearing it. Returns its length.
pub fn write_announcement(out: &mut [u8; MAX_RESPONSE_LEN], epoch: u32) -> usize {
    write_response(out, opcode::ANNOUNCE, (result::SUCCESS, 0, epoch), None)
}
