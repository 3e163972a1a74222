//! PCP and NAT-PMP requests (UDP 5351): each answered from the table, with what it changed.

use super::*;

/// How long a refusal the client may overcome soon stands (a quota, a port, no external
/// address), and one it may not (a version, an option, authorisation): the lifetime field
/// of an error response (RFC 6887 7.4).
const SHORT_ERROR_S: u32 = 30;
const LONG_ERROR_S: u32 = 1800;

impl<P: Fn(PortMappings)> Server<P> {
    /// A NAT-PMP request from `host`.
    pub(super) fn natpmp(&mut self, bytes: &[u8], host: Ipv4Addr, kept: &Kept) -> Outcome {
        let epoch = self.epoch();
        let mut out = [0u8; natpmp::MAX_RESPONSE_LEN];
        let request = match natpmp::parse(bytes) {
            Ok(request) => request,
            Err(natpmp::Unanswered::Ignore) => return Outcome::silent("malformed"),
            Err(natpmp::Unanswered::UnsupportedOpcode(op)) => {
                let len = natpmp::write_unsupported_opcode(&mut out, op, epoch);
                return Outcome::answer(&out[..len], "unsupported");
            }
        };
        let external = self.external_address();
        let natpmp::Request::Map {
            protocol,
            internal_port,
            suggested_port,
            lifetime,
        } = request
        else {
            let (result, address) = match external {
                Some(address) => (natpmp::result::SUCCESS, address),
                None => (natpmp::result::NETWORK_FAILURE, Ipv4Addr::UNSPECIFIED),
            };
            let len = natpmp::write_address_response(&mut out, result, epoch, address);
            return Outcome::answer(&out[..len], "address");
        };
        let mut answer = |result, (external_port, lifetime): (u16, u32), label| {
            let granted = (internal_port, external_port, lifetime);
            let len = natpmp::write_map_response(&mut out, protocol, result, epoch, granted);
            Outcome::answer(&out[..len], label)
        };
        if lifetime == 0 {
            let deleted = match internal_port {
                0 => Ok(self.table.unmap_where(|m| {
                    m.protocol == protocol && m.internal == host && m.origin == Origin::NatPmp
                })),
                port => self
                    .table
                    .unmap(protocol, host, port, None)
                    .map(|gone| gone.into_iter().collect()),
            };
            return match deleted {
                Ok(gone) => answer(natpmp::result::SUCCESS, (0, 0), "deleted").deleting(gone),
                Err(refusal) => answer(natpmp::result::REFUSED, (0, 0), refusal.label()),
            };
        }
        if external.is_none() {
            return answer(
                natpmp::result::NETWORK_FAILURE,
                (0, 0),
                "no_external_address",
            );
        }
        if internal_port == 0 {
            return answer(natpmp::result::REFUSED, (0, 0), "malformed");
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
        match self.table.map(&ask, unix_now(), kept) {
            Ok(granted) => answer(
                natpmp::result::SUCCESS,
                (granted.external_port, granted.lifetime),
                "mapped",
            )
            .granting(&granted),
            Err(refusal) => {
                let result = match refusal {
                    Refusal::NotOwner => natpmp::result::REFUSED,
                    _ => natpmp::result::OUT_OF_RESOURCES,
                };
                answer(result, (0, 0), refusal.label())
            }
        }
    }

    /// A PCP request from `host`.
    pub(super) fn pcp(&mut self, bytes: &[u8], host: Ipv4Addr, kept: &Kept) -> Outcome {
        let epoch = self.epoch();
        let echo = |map: &pcp::Map| pcp::MapAnswer {
            nonce: map.nonce,
            protocol: map.protocol,
            internal_port: map.internal_port,
            external_port: map.suggested_port,
            external_address: map.suggested_address,
        };
        let refuse = |op, result, map: Option<&pcp::Map>, label| {
            let long = matches!(
                result,
                pcp::result::UNSUPP_VERSION
                    | pcp::result::NOT_AUTHORIZED
                    | pcp::result::UNSUPP_OPCODE
                    | pcp::result::UNSUPP_OPTION
                    | pcp::result::UNSUPP_PROTOCOL
                    | pcp::result::ADDRESS_MISMATCH
            );
            let lifetime = if long { LONG_ERROR_S } else { SHORT_ERROR_S };
            let answer = map.map(echo);
            let mut out = [0u8; pcp::MAX_RESPONSE_LEN];
            let len = pcp::write_response(&mut out, op, (result, lifetime, epoch), answer.as_ref());
            Outcome::answer(&out[..len], label)
        };
        let request = match pcp::parse(bytes) {
            Ok(request) => request,
            Err(pcp::Unanswered::Ignore) => return Outcome::silent("malformed"),
            Err(pcp::Unanswered::Error {
                opcode,
                result,
                map,
            }) => {
                let label = match result {
                    pcp::result::UNSUPP_VERSION
                    | pcp::result::UNSUPP_OPCODE
                    | pcp::result::UNSUPP_OPTION => "unsupported",
                    _ => "malformed",
                };
                return refuse(opcode, result, map.as_ref(), label);
            }
        };
        let op = request.opcode;
        if request.client != pcp::mapped(host) {
            let result = pcp::result::ADDRESS_MISMATCH;
            return refuse(op, result, request.map.as_ref(), "address_mismatch");
        }
        let Some(map) = request.map else {
            // ANNOUNCE: answered, so that a client can learn the epoch.
            let result = (pcp::result::SUCCESS, 0, epoch);
            let mut out = [0u8; pcp::MAX_RESPONSE_LEN];
            let len = pcp::write_response(&mut out, op, result, None);
            return Outcome::answer(&out[..len], "announce");
        };
        if map.third_party.is_some_and(|third| third != request.client) {
            return refuse(op, pcp::result::NOT_AUTHORIZED, Some(&map), "third_party");
        }
        let address = self.external_address();
        let granted = |external_port, lifetime, label| {
            let answer = pcp::MapAnswer {
                external_port,
                external_address: pcp::mapped(address.unwrap_or(Ipv4Addr::UNSPECIFIED)),
                ..echo(&map)
            };
            let result = (pcp::result::SUCCESS, lifetime, epoch);
            let mut out = [0u8; pcp::MAX_RESPONSE_LEN];
            let len = pcp::write_response(&mut out, op, result, Some(&answer));
            Outcome::answer(&out[..len], label)
        };
        if request.lifetime == 0 {
            // A delete, whatever the external address; internal port 0 deletes all of the
            // client's mappings of the protocol (0: of every protocol) made under its nonce
            // (RFC 6887 11.1, 15).
            let deleted = match map.internal_port {
                0 => Ok(self.table.unmap_where(|m| {
                    (map.protocol == 0 || m.protocol == map.protocol)
                        && (m.internal, m.origin, m.nonce) == (host, Origin::Pcp, map.nonce)
                })),
                port => (self.table.unmap(map.protocol, host, port, Some(map.nonce)))
                    .map(|gone| gone.into_iter().collect()),
            };
            return match deleted {
                Ok(gone) => granted(0, 0, "deleted").deleting(gone),
                Err(refusal) => {
                    refuse(op, pcp::result::NOT_AUTHORIZED, Some(&map), refusal.label())
                }
            };
        }
        if !matches!(map.protocol, TCP | UDP) {
            return refuse(op, pcp::result::UNSUPP_PROTOCOL, Some(&map), "unsupported");
        }
        let Some(address) = address else {
            let result = pcp::result::NETWORK_FAILURE;
            return refuse(op, result, Some(&map), "no_external_address");
        };
        let elsewhere =
            !pcp::is_any(map.suggested_address) && map.suggested_address != pcp::mapped(address);
        if elsewhere && map.prefer_failure {
            let result = pcp::result::CANNOT_PROVIDE_EXTERNAL;
            return refuse(op, result, Some(&map), Refusal::PortUnavailable.label());
        }
        if map.internal_port == 0 {
            return refuse(op, pcp::result::MALFORMED_REQUEST, Some(&map), "malformed");
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
        match self.table.map(&ask, unix_now(), kept) {
            Ok(made) => granted(made.external_port, made.lifetime, "mapped").granting(&made),
            Err(refusal) => {
                let result = match refusal {
                    Refusal::HostQuota => pcp::result::USER_EX_QUOTA,
                    Refusal::TableFull | Refusal::NoFreePort => pcp::result::NO_RESOURCES,
                    Refusal::PortUnavailable => pcp::result::CANNOT_PROVIDE_EXTERNAL,
                    Refusal::NotOwner => pcp::result::NOT_AUTHORIZED,
                };
                refuse(op, result, Some(&map), refusal.label())
            }
        }
    }
}
