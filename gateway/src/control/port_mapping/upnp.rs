//! UPnP IGD: SSDP searches (UDP 1900, the multicast group the workers punt by a rule) and
//! the description and SOAP actions over HTTP on each served address. Each connection reads
//! one request (at most `upnp::MAX_REQUEST` bytes, within `REQUEST_TIMEOUT`), is answered
//! and closed; at most `MAX_CONNECTIONS` at once (a new one evicts the oldest) and
//! `MAX_CONNECTIONS_PER_HOST` of one host (its oldest goes). A request must name the served
//! address in its Host header: a web page that rebinds a name of its own to the gateway's
//! address (DNS rebinding) sends its name there, and is refused.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use pipeline::portmap::upnp::{self, Action, Fault};

use super::*;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const MAX_CONNECTIONS: usize = 32;
const MAX_CONNECTIONS_PER_HOST: usize = 4;

/// The HTTP side: a listener per served address, and the connections being read.
pub(super) struct Http {
    pub listeners: Vec<TcpListener>,
    pub connections: Vec<Connection>,
    /// The device's UUID, the same across restarts of one box (`Setup::uuid`).
    pub uuid: String,
}

pub(super) struct Connection {
    pub stream: TcpStream,
    pub served: usize,
    pub peer: SocketAddrV4,
    request: Vec<u8>,
    opened: Instant,
}

/// One HTTP request, as far as the server reads it.
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    host: Option<&'a str>,
    soap_action: Option<&'a str>,
    body: &'a str,
}

/// The whole request once it is in (headers, and the body Content-Length announces); None
/// while more is to come; Err for what is no request.
fn parse_request(bytes: &[u8]) -> Result<Option<Request<'_>>, ()> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| ())?;
    let mut lines = head.split("\r\n");
    let mut start = lines.next().ok_or(())?.split(' ');
    let (method, path) = (start.next().ok_or(())?, start.next().ok_or(())?);
    let mut length = 0;
    let mut soap_action = None;
    let mut host = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse::<usize>().map_err(|_| ())?,
            "soapaction" => soap_action = Some(value.trim()),
            "host" => host = Some(value.trim()),
            // A body of unknown length: not read (SOAP requests carry Content-Length).
            "transfer-encoding" => return Err(()),
            _ => {}
        }
    }
    let body = &bytes[end + 4..];
    if body.len() < length {
        return Ok(None);
    }
    let body = std::str::from_utf8(&body[..length]).map_err(|_| ())?;
    Ok(Some(Request {
        method,
        path,
        host,
        soap_action,
        body,
    }))
}

fn http_response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/xml; charset=\"utf-8\"\r\n\
         Content-Length: {}\r\nConnection: close\r\nServer: Linux UPnP/1.1 gateway/1\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Connection {
    /// Sends the answer and closes.
    pub fn answer(mut self, response: &[u8]) {
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_write_timeout(Some(REQUEST_TIMEOUT));
        let _ = self.stream.write_all(response);
    }
}

impl Http {
    /// Takes the waiting connections of listener `served`: one host's oldest goes when it
    /// holds its share, the oldest of all when the table is full.
    pub fn accept(&mut self, served: usize, now: Instant) {
        while let Ok((stream, peer)) = self.listeners[served].accept() {
            let SocketAddr::V4(peer) = peer else { continue };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let oldest = |connections: &[Connection], of: Option<Ipv4Addr>| {
                (connections.iter().enumerate())
                    .filter(|(_, c)| of.is_none_or(|host| *c.peer.ip() == host))
                    .min_by_key(|(_, c)| c.opened)
                    .map(|(index, _)| index)
            };
            let own = self
                .connections
                .iter()
                .filter(|c| c.peer.ip() == peer.ip())
                .count();
            let evict = if own >= MAX_CONNECTIONS_PER_HOST {
                oldest(&self.connections, Some(*peer.ip()))
            } else if self.connections.len() >= MAX_CONNECTIONS {
                oldest(&self.connections, None)
            } else {
                None
            };
            if let Some(index) = evict {
                self.connections.swap_remove(index);
            }
            self.connections.push(Connection {
                stream,
                served,
                peer,
                request: Vec::new(),
                opened: now,
            });
        }
    }

    /// Closes the connections past their deadline.
    pub fn expire(&mut self, now: Instant) {
        self.connections
            .retain(|c| now < c.opened + REQUEST_TIMEOUT);
    }
}

impl<P: Fn(PortMappings)> Server<P> {
    /// Reads connection `index`; once its request is whole, takes the connection out with
    /// its answer and what the request did (the caller applies that, then answers).
    pub(super) fn serve_connection(
        &mut self,
        index: usize,
        kept: &Kept,
    ) -> Option<(Connection, Vec<u8>, Option<Outcome>)> {
        let http = self.http.as_mut()?;
        let connection = &mut http.connections[index];
        let mut chunk = [0u8; 2048];
        let mut closed = false;
        loop {
            match connection.stream.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(len) => connection.request.extend_from_slice(&chunk[..len]),
                Err(_) => break,
            }
            if connection.request.len() > upnp::MAX_REQUEST {
                closed = true;
                break;
            }
        }
        let (served, peer) = (connection.served, connection.peer);
        let request = std::mem::take(&mut connection.request);
        let parsed = parse_request(&request);
        let whole = matches!(parsed, Ok(Some(_)));
        if !whole && !closed && parsed.is_ok() {
            // More to come.
            self.http.as_mut()?.connections[index].request = request;
            return None;
        }
        let connection = self.http.as_mut()?.connections.swap_remove(index);
        let Ok(Some(request)) = parsed else {
            self.status.count(Origin::Upnp, "malformed");
            return None;
        };
        let (status, body, outcome) = self.http_request(&request, served, peer, kept);
        if let Some(outcome) = &outcome {
            self.status.count(Origin::Upnp, outcome.result);
        }
        Some((connection, http_response(status, &body), outcome))
    }

    fn http_request(
        &mut self,
        request: &Request<'_>,
        served: usize,
        peer: SocketAddrV4,
        kept: &Kept,
    ) -> (&'static str, String, Option<Outcome>) {
        let host = *peer.ip();
        if !self.on_served_link(served, host) {
            self.status.count(Origin::Upnp, "foreign");
            return ("403 Forbidden", String::new(), None);
        }
        // The served address, with or without the port: anything else is a name the page
        // that sent the request chose (DNS rebinding).
        let (_, address, _) = &self.setup.served[served];
        let port = self.setup.upnp_http_port.unwrap_or_default();
        let named = request.host.is_some_and(|named| {
            named == address.to_string() || named == format!("{address}:{port}")
        });
        if !named {
            self.status.count(Origin::Upnp, "foreign");
            return ("403 Forbidden", String::new(), None);
        }
        let uuid = self
            .http
            .as_ref()
            .map_or("", |http| http.uuid.as_str())
            .to_string();
        match (request.method, request.path) {
            ("GET", upnp::DESCRIPTION_PATH) => ("200 OK", upnp::description(&uuid), None),
            ("GET", upnp::IP_CONNECTION_SCPD_PATH) => {
                ("200 OK", upnp::scpd(upnp::WAN_IP_CONNECTION), None)
            }
            ("GET", upnp::COMMON_SCPD_PATH) => ("200 OK", upnp::scpd(upnp::WAN_COMMON), None),
            ("POST", upnp::IP_CONNECTION_PATH | upnp::COMMON_PATH) => {
                if !self.take_budget(host) {
                    self.status.count(Origin::Upnp, "policed");
                    return ("503 Service Unavailable", String::new(), None);
                }
                let action = upnp::parse_action(request.soap_action.unwrap_or(""), request.body);
                let outcome = match action {
                    Ok(action) => self.upnp_action(&action, host, kept),
                    Err(fault) => Err((
                        fault,
                        if fault.code == 401 {
                            "unsupported"
                        } else {
                            "malformed"
                        },
                    )),
                };
                match outcome {
                    Ok((body, outcome)) => ("200 OK", body, Some(outcome)),
                    Err((fault, label)) => {
                        self.status.count(Origin::Upnp, label);
                        ("500 Internal Server Error", upnp::fault(fault), None)
                    }
                }
            }
            _ => ("404 Not Found", String::new(), None),
        }
    }

    /// One SOAP action from `host`: the response's body and what it changed, or the fault
    /// with the result it is counted under.
    fn upnp_action(
        &mut self,
        action: &Action,
        host: Ipv4Addr,
        kept: &Kept,
    ) -> Result<(String, Outcome), (Fault, &'static str)> {
        const ACTION_FAILED: Fault = Fault {
            code: 501,
            description: "Action Failed",
        };
        let external = self.external_address();
        let now = unix_now();
        let left = |mapping: &Mapping| mapping.expires_at.saturating_sub(now).to_string();
        let entry = |mapping: &Mapping| {
            vec![
                ("NewInternalPort", mapping.internal_port.to_string()),
                ("NewInternalClient", mapping.internal.to_string()),
                ("NewEnabled", "1".to_string()),
                (
                    "NewPortMappingDescription",
                    mapping.origin.label().to_string(),
                ),
                ("NewLeaseDuration", left(mapping)),
            ]
        };
        let ok = |outputs: Vec<(&str, String)>, label| {
            Ok((upnp::response(action, &outputs), Outcome::silent(label)))
        };
        match action {
            Action::GetExternalIPAddress => ok(
                vec![(
                    "NewExternalIPAddress",
                    external.map_or(String::new(), |a| a.to_string()),
                )],
                "query",
            ),
            Action::GetStatusInfo => ok(
                vec![
                    (
                        "NewConnectionStatus",
                        if external.is_some() {
                            "Connected"
                        } else {
                            "Disconnected"
                        }
                        .into(),
                    ),
                    ("NewLastConnectionError", "ERROR_NONE".into()),
                    ("NewUptime", self.started.elapsed().as_secs().to_string()),
                ],
                "query",
            ),
            Action::GetConnectionTypeInfo => ok(
                vec![
                    ("NewConnectionType", "IP_Routed".into()),
                    ("NewPossibleConnectionTypes", "IP_Routed".into()),
                ],
                "query",
            ),
            Action::GetCommonLinkProperties => ok(
                vec![
                    ("NewWANAccessType", "Ethernet".into()),
                    ("NewLayer1UpstreamMaxBitRate", "0".into()),
                    ("NewLayer1DownstreamMaxBitRate", "0".into()),
                    (
                        "NewPhysicalLinkStatus",
                        if external.is_some() { "Up" } else { "Down" }.into(),
                    ),
                ],
                "query",
            ),
            Action::GetSpecificPortMappingEntry {
                protocol,
                external_port,
            } => match self.table.by_external(*protocol, *external_port) {
                Some(mapping) => ok(entry(mapping), "query"),
                None => Err((upnp::NO_SUCH_ENTRY, "query")),
            },
            Action::GetGenericPortMappingEntry { index } => match self.table.mappings().get(*index)
            {
                Some(mapping) => {
                    let mut outputs = vec![
                        ("NewRemoteHost", String::new()),
                        ("NewExternalPort", mapping.external_port.to_string()),
                        ("NewProtocol", upnp::protocol_name(mapping.protocol).into()),
                    ];
                    outputs.extend(entry(mapping));
                    ok(outputs, "query")
                }
                None => Err((upnp::INVALID_INDEX, "query")),
            },
            Action::DeletePortMapping {
                protocol,
                external_port,
            } => match self.table.unmap_external(*protocol, *external_port, host) {
                Ok(Some(gone)) => {
                    let body = upnp::response(action, &[]);
                    Ok((body, Outcome::silent("deleted").deleting(vec![gone])))
                }
                Ok(None) => Err((upnp::NO_SUCH_ENTRY, "no_such_entry")),
                Err(refusal) => Err((upnp::NOT_AUTHORIZED, refusal.label())),
            },
            Action::AddPortMapping(add) => {
                if add.internal_client != host {
                    return Err((upnp::NOT_AUTHORIZED, "third_party"));
                }
                if external.is_none() {
                    return Err((ACTION_FAILED, "no_external_address"));
                }
                // IGD v1 maps exactly the port asked for; one internal port, one mapping.
                if (self
                    .table
                    .by_internal(add.protocol, host, add.internal_port))
                .is_some_and(|m| m.external_port != add.external_port)
                {
                    return Err((upnp::CONFLICT, Refusal::PortUnavailable.label()));
                }
                // The host's own external port to another of its ports: moved (as
                // miniupnpd does), not refused.
                let mut moved = Vec::new();
                if let Some(own) = (self.table.by_external(add.protocol, add.external_port))
                    .filter(|m| m.internal == host && m.internal_port != add.internal_port)
                    .copied()
                {
                    match self
                        .table
                        .unmap(own.protocol, host, own.internal_port, None)
                    {
                        Ok(gone) => moved.extend(gone),
                        Err(refusal) => return Err((upnp::CONFLICT, refusal.label())),
                    }
                }
                let ask = Ask {
                    protocol: add.protocol,
                    internal: host,
                    internal_port: add.internal_port,
                    suggested_port: add.external_port,
                    // 0 asks for a permanent mapping: the longest allowed.
                    lifetime: if add.lease == 0 { u32::MAX } else { add.lease },
                    origin: Origin::Upnp,
                    nonce: [0; 12],
                    prefer_failure: true,
                };
                match self.table.map(&ask, now, kept) {
                    Ok(granted) => {
                        let body = upnp::response(action, &[]);
                        let outcome = Outcome::silent("mapped").deleting(moved).granting(&granted);
                        Ok((body, outcome))
                    }
                    Err(refusal) => {
                        let fault = match refusal {
                            Refusal::HostQuota | Refusal::TableFull | Refusal::NoFreePort => {
                                upnp::NO_PORT_MAPS_AVAILABLE
                            }
                            Refusal::PortUnavailable | Refusal::NotOwner => upnp::CONFLICT,
                        };
                        Err((fault, refusal.label()))
                    }
                }
            }
        }
    }

    /// An SSDP datagram on served link `served`: an M-SEARCH for what this gateway is gets
    /// the description's location.
    pub(super) fn ssdp(&mut self, served: usize, datagram: &[u8], from: SocketAddrV4) {
        if !self.on_served_link(served, *from.ip()) {
            self.status.count(Origin::Upnp, "foreign");
            return;
        }
        let Some(uuid) = self.http.as_ref().map(|http| http.uuid.clone()) else {
            return;
        };
        let Ok(text) = std::str::from_utf8(datagram) else {
            return;
        };
        let Some(target) = upnp::search_target(text, &uuid) else {
            return;
        };
        if !self.take_budget(*from.ip()) {
            self.status.count(Origin::Upnp, "policed");
            return;
        }
        let (_, address, _) = &self.setup.served[served];
        let Some(port) = self.setup.upnp_http_port else {
            return;
        };
        let location = format!("http://{address}:{port}{}", upnp::DESCRIPTION_PATH);
        let response = upnp::search_response(target, &uuid, &location);
        if let Some(socket) = self.ssdp.get(served) {
            let _ = socket.send_to(response.as_bytes(), from);
        }
        self.status.count(Origin::Upnp, "search");
    }
}
