//! NAT-PMP's bytes (RFC 6886): the two requests (the external address; a UDP or TCP
//! mapping) and their responses. Version 0; a request with another version is PCP's
//! ([`super::pcp`]) on the same port.

use std::net::Ipv4Addr;

pub const VERSION: u8 = 0;

/// Opcodes; a response's is 128 + the request's.
pub mod opcode {
    pub const EXTERNAL_ADDRESS: u8 = 0;
    pub const MAP_UDP: u8 = 1;
    pub const MAP_TCP: u8 = 2;
    pub const RESPONSE: u8 = 128;
}

/// Result codes (RFC 6886 3.5).
pub mod result {
    pub const SUCCESS: u16 = 0;
    pub const UNSUPPORTED_VERSION: u16 = 1;
    /// Not authorized or refused (the port mapping feature is off, or a limit).
    pub const REFUSED: u16 = 2;
    /// The gateway has no external address yet (no DHCP lease, no PPPoE session).
    pub const NETWORK_FAILURE: u16 = 3;
    /// Out of resources: a quota, no free port.
    pub const OUT_OF_RESOURCES: u16 = 4;
    pub const UNSUPPORTED_OPCODE: u16 = 5;
}

const MAP_REQUEST_LEN: usize = 12;
/// The longest response: a mapping's.
pub const MAX_RESPONSE_LEN: usize = 16;

/// A NAT-PMP request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    ExternalAddress,
    /// `protocol`: 6 or 17. Lifetime 0 deletes the mapping (with internal port 0: all of
    /// the host's for the protocol).
    Map {
        protocol: u8,
        internal_port: u16,
        suggested_port: u16,
        lifetime: u32,
    },
}

/// What to do with a datagram that is not a request this server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// A response (opcode 128 and up), or too short to be a request: dropped without a
    /// word, so that two servers never answer each other.
    Ignore,
    /// An opcode NAT-PMP does not have: answered with UNSUPPORTED_OPCODE.
    UnsupportedOpcode(u8),
}

/// Reads a datagram whose first byte is [`VERSION`].
pub fn parse(bytes: &[u8]) -> Result<Request, Unanswered> {
    let [VERSION, op, ..] = *bytes else {
        return Err(Unanswered::Ignore);
    };
    match op {
        opcode::EXTERNAL_ADDRESS => Ok(Request::ExternalAddress),
        opcode::MAP_UDP | opcode::MAP_TCP => {
            let body = bytes.get(..MAP_REQUEST_LEN).ok_or(Unanswered::Ignore)?;
            let u16_at = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
            Ok(Request::Map {
                protocol: if op == opcode::MAP_UDP {
                    super::UDP
                } else {
                    super::TCP
                },
                internal_port: u16_at(4),
                suggested_port: u16_at(6),
                lifetime: u32::from_be_bytes([body[8], body[9], body[10], body[11]]),
            })
        }
        op if op >= opcode::RESPONSE => Err(Unanswered::Ignore),
        op => Err(Unanswered::UnsupportedOpcode(op)),
    }
}

fn write_header(out: &mut [u8], op: u8, result: u16, epoch: u32) {
    out[0] = VERSION;
    out[1] = opcode::RESPONSE | op;
    out[2..4].copy_from_slice(&result.to_be_bytes());
    out[4..8].copy_from_slice(&epoch.to_be_bytes());
}

/// The answer to an external address request (0.0.0.0 with an error); returns its length.
pub fn write_address_response(
    out: &mut [u8; MAX_RESPONSE_LEN],
    result: u16,
    epoch: u32,
    address: Ipv4Addr,
) -> usize {
    write_header(out, opcode::EXTERNAL_ADDRESS, result, epoch);
    out[8..12].copy_from_slice(&address.octets());
    12
}

/// The answer to a mapping request: on success the external port and lifetime granted, on
/// an error the request's internal port and zeros (RFC 6886 3.3). Returns its length.
pub fn write_map_response(
    out: &mut [u8; MAX_RESPONSE_LEN],
    protocol: u8,
    result: u16,
    epoch: u32,
    (internal_port, external_port, lifetime): (u16, u16, u32),
) -> usize {
    let op = if protocol == super::UDP {
        opcode::MAP_UDP
    } else {
        opcode::MAP_TCP
    };
    write_header(out, op, result, epoch);
    out[8..10].copy_from_slice(&internal_port.to_be_bytes());
    out[10..12].copy_from_slice(&external_port.to_be_bytes());
    out[12..16].copy_from_slice(&lifetime.to_be_bytes());
    16
}

/// The answer to an opcode NAT-PMP does not have: the header alone. Returns its length.
pub fn write_unsupported_opcode(out: &mut [u8; MAX_RESPONSE_LEN], op: u8, epoch: u32) -> usize {
    write_header(out, op, result::UNSUPPORTED_OPCODE, epoch);
    8
}

/// The announcement sent to 224.0.0.1:5350 when the gateway starts or its external address
/// changes (RFC 6886 3.2.1): an external address response nobody asked for.
pub fn write_announcement(
    out: &mut [u8; MAX_RESPONSE_LEN],
    epoch: u32,
    address: Ipv4Addr,
) -> usize {
    write_address_response(out, result::SUCCESS, epoch, address)
}
