//! Port mappings that LAN hosts ask the gateway for: PCP (RFC 6887), NAT-PMP (RFC 6886) and
//! UPnP IGD, their table and its limits.
//!
//! Pure, like [`crate::pppoe`]: no socket and no clock. The gateway's `control::port_mapping`
//! thread owns a [`MappingTable`], answers each request with it ([`natpmp`], [`pcp`] and
//! [`upnp`] read and write the bytes), and hands its mappings to the router config, where they act as port
//! forwards of one port each: the firewall's rules still decide the flows they admit.
//!
//! The limits hold whatever the protocol: a host maps only its own address (the requests'
//! source; PCP's third-party option and UPnP's other internal clients are refused), at most `per_host` mappings each and
//! `total` in all, external ports only in `external_ports` and never one the gateway keeps
//! (a static forward, a service of its own: the caller's `kept`), lifetimes within
//! `lifetime`.

pub mod natpmp;
pub mod pcp;
pub mod upnp;

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// The port PCP and NAT-PMP servers listen on (RFC 6887 19.1, RFC 6886 3.1).
pub const SERVER_PORT: u16 = 5351;
/// The port clients listen on for announcements, multicast to all hosts (224.0.0.1).
pub const CLIENT_PORT: u16 = 5350;
/// TCP and UDP: the only protocols mapped.
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// Which protocol asked for a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    NatPmp,
    Pcp,
    Upnp,
}

impl Origin {
    pub const ALL: [Origin; 3] = [Origin::NatPmp, Origin::Pcp, Origin::Upnp];

    /// The label in metrics, `ctl show nat` and the snapshot.
    pub const fn label(self) -> &'static str {
        match self {
            Origin::NatPmp => "nat-pmp",
            Origin::Pcp => "pcp",
            Origin::Upnp => "upnp",
        }
    }

    pub fn from_label(label: &str) -> Option<Origin> {
        Origin::ALL
            .into_iter()
            .find(|origin| origin.label() == label)
    }
}

/// One mapping: the gateway's external `external_port` (on the mapping interface's address)
/// to `internal:internal_port`, for `protocol`, until `expires_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub protocol: u8,
    pub internal: Ipv4Addr,
    pub internal_port: u16,
    pub external_port: u16,
    /// In the caller's seconds (the gateway uses Unix time, so that the snapshot keeps it).
    pub expires_at: u64,
    pub origin: Origin,
    /// PCP's mapping nonce: only a request with the same nonce may renew or delete it
    /// (RFC 6887 11.2); zero for NAT-PMP.
    pub nonce: [u8; 12],
}

/// What a table allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub per_host: usize,
    pub total: usize,
    /// Seconds: a request's lifetime is brought into this range.
    pub lifetime: RangeInclusive<u32>,
    /// The external ports mappings may take.
    pub external_ports: RangeInclusive<u16>,
}

/// A request to create or renew a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub protocol: u8,
    pub internal: Ipv4Addr,
    pub internal_port: u16,
    /// The external port the client would like; 0: any.
    pub suggested_port: u16,
    /// Seconds; not 0 (a lifetime of 0 deletes: [`MappingTable::unmap`]).
    pub lifetime: u32,
    pub origin: Origin,
    pub nonce: [u8; 12],
    /// PCP's PREFER_FAILURE: the suggested port or nothing.
    pub prefer_failure: bool,
}

/// A mapping made or renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub external_port: u16,
    /// Seconds, as clamped.
    pub lifetime: u32,
    /// What the table gained and lost: a new mapping, and the one it replaced (a renewal
    /// whose external port a static forward took since); neither for a plain renewal.
    pub created: Option<Mapping>,
    pub replaced: Option<Mapping>,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The host holds `per_host` mappings already.
    HostQuota,
    /// The table holds `total`.
    TableFull,
    /// PREFER_FAILURE, and the suggested port is taken, kept or out of range.
    PortUnavailable,
    /// No external port in range is free.
    NoFreePort,
    /// A PCP mapping exists for the internal port under another nonce (or was made by
    /// NAT-PMP, which has none): another client on the host, or a forged request.
    NotOwner,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::HostQuota,
        Refusal::TableFull,
        Refusal::PortUnavailable,
        Refusal::NoFreePort,
        Refusal::NotOwner,
    ];

    /// The `result` label of `gateway_port_mapping_requests_total`.
    pub const fn label(self) -> &'static str {
        match self {
            Refusal::HostQuota => "host_quota",
            Refusal::TableFull => "table_full",
            Refusal::PortUnavailable => "port_unavailable",
            Refusal::NoFreePort => "no_free_port",
            Refusal::NotOwner => "not_owner",
        }
    }
}

/// The mappings, in creation order. Control-plane work: requests are few, so lookups scan.
#[derive(Debug)]
pub struct MappingTable {
    limits: Limits,
    mappings: Vec<Mapping>,
    /// (protocol, external port) of every mapping, for the port search.
    taken: HashSet<(u8, u16)>,
}

impl MappingTable {
    pub fn new(limits: Limits) -> Self {
        MappingTable {
            limits,
            mappings: Vec::new(),
            taken: HashSet::new(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    fn find(&self, protocol: u8, internal: Ipv4Addr, internal_port: u16) -> Option<usize> {
        self.mappings.iter().position(|m| {
            m.protocol == protocol && m.internal == internal && m.internal_port == internal_port
        })
    }

    /// Creates the mapping `ask` describes, or renews the host's mapping of the same internal
    /// port (keeping its external port). `kept(protocol, port)`: an external port the
    /// gateway keeps for itself. `now` in the mappings' seconds.
    pub fn map(
        &mut self,
        ask: &Ask,
        now: u64,
        kept: impl Fn(u8, u16) -> bool,
    ) -> Result<Granted, Refusal> {
        let lifetime = ask
            .lifetime
            .clamp(*self.limits.lifetime.start(), *self.limits.lifetime.end());
        let mut replaced = None;
        if let Some(index) = self.find(ask.protocol, ask.internal, ask.internal_port) {
            let mapping = &mut self.mappings[index];
            if mapping.origin == Origin::Pcp && mapping.nonce != ask.nonce {
                return Err(Refusal::NotOwner);
            }
            if kept(mapping.protocol, mapping.external_port) {
                // A static forward took the port since: the mapping goes, and a new one is
                // made below.
                let gone = self.mappings.remove(index);
                self.taken.remove(&(gone.protocol, gone.external_port));
                replaced = Some(gone);
            } else {
                mapping.expires_at = now + u64::from(lifetime);
                mapping.origin = ask.origin;
                mapping.nonce = ask.nonce;
                return Ok(Granted {
                    external_port: mapping.external_port,
                    lifetime,
                    created: None,
                    replaced: None,
                });
            }
        }
        let held = self
            .mappings
            .iter()
            .filter(|m| m.internal == ask.internal)
            .count();
        if held >= self.limits.per_host {
            return Err(Refusal::HostQuota);
        }
        if self.mappings.len() >= self.limits.total {
            return Err(Refusal::TableFull);
        }
        let external_port = self.pick_port(ask, &kept)?;
        self.taken.insert((ask.protocol, external_port));
        let mapping = Mapping {
            protocol: ask.protocol,
            internal: ask.internal,
            internal_port: ask.internal_port,
            external_port,
            expires_at: now + u64::from(lifetime),
            origin: ask.origin,
            nonce: ask.nonce,
        };
        self.mappings.push(mapping);
        Ok(Granted {
            external_port,
            lifetime,
            created: Some(mapping),
            replaced,
        })
    }

    /// The suggested port if it is free, else (without PREFER_FAILURE) the next free one in
    /// range from the suggested or the internal port on, wrapping around.
    fn pick_port(&self, ask: &Ask, kept: &impl Fn(u8, u16) -> bool) -> Result<u16, Refusal> {
        let range = &self.limits.external_ports;
        let free = |port: u16| {
            range.contains(&port)
                && !self.taken.contains(&(ask.protocol, port))
                && !kept(ask.protocol, port)
        };
        if ask.suggested_port != 0 && free(ask.suggested_port) {
            return Ok(ask.suggested_port);
        }
        if ask.prefer_failure {
            return Err(Refusal::PortUnavailable);
        }
        let (first, last) = (u32::from(*range.start()), u32::from(*range.end()));
        let span = last - first + 1;
        let hint = match ask.suggested_port {
            0 => ask.internal_port,
            port => port,
        };
        let start = u32::from(hint).clamp(first, last) - first;
        (0..span)
            .map(|step| (first + (start + step) % span) as u16)
            .find(|&port| free(port))
            .ok_or(Refusal::NoFreePort)
    }

    /// Deletes the host's mapping of `internal_port` (a request with lifetime 0). `nonce`:
    /// PCP's, which must match a PCP mapping's; None for NAT-PMP and UPnP. Returns the
    /// mapping deleted, None if there was none.
    pub fn unmap(
        &mut self,
        protocol: u8,
        internal: Ipv4Addr,
        internal_port: u16,
        nonce: Option<[u8; 12]>,
    ) -> Result<Option<Mapping>, Refusal> {
        let Some(index) = self.find(protocol, internal, internal_port) else {
            return Ok(None);
        };
        let mapping = self.mappings[index];
        if mapping.origin == Origin::Pcp && nonce != Some(mapping.nonce) {
            return Err(Refusal::NotOwner);
        }
        self.mappings.remove(index);
        self.taken
            .remove(&(mapping.protocol, mapping.external_port));
        Ok(Some(mapping))
    }

    /// Deletes the mappings `gone` picks, returning them: the host's NAT-PMP mappings of a
    /// protocol (its request with internal port 0 and lifetime 0, RFC 6886 3.4), a PCP
    /// client's of a protocol under its nonce (RFC 6887 15), those whose port the gateway
    /// keeps now.
    pub fn unmap_where(&mut self, gone: impl Fn(&Mapping) -> bool) -> Vec<Mapping> {
        let (removed, kept): (Vec<Mapping>, Vec<Mapping>) =
            self.mappings.iter().partition(|m| gone(m));
        for mapping in &removed {
            self.taken
                .remove(&(mapping.protocol, mapping.external_port));
        }
        self.mappings = kept;
        removed
    }

    /// The mapping of `protocol` on `external_port`, if any.
    pub fn by_external(&self, protocol: u8, external_port: u16) -> Option<&Mapping> {
        (self.mappings.iter()).find(|m| m.protocol == protocol && m.external_port == external_port)
    }

    /// The host's mapping of `internal_port`, if any.
    pub fn by_internal(
        &self,
        protocol: u8,
        internal: Ipv4Addr,
        internal_port: u16,
    ) -> Option<&Mapping> {
        let index = self.find(protocol, internal, internal_port)?;
        self.mappings.get(index)
    }

    /// Deletes the mapping of `external_port` (UPnP's DeletePortMapping), if `requester`
    /// made it and not by PCP (whose mappings answer to their nonce alone). Ok(None): none.
    pub fn unmap_external(
        &mut self,
        protocol: u8,
        external_port: u16,
        requester: Ipv4Addr,
    ) -> Result<Option<Mapping>, Refusal> {
        let Some(mapping) = self.by_external(protocol, external_port).copied() else {
            return Ok(None);
        };
        if mapping.internal != requester || mapping.origin == Origin::Pcp {
            return Err(Refusal::NotOwner);
        }
        self.unmap(protocol, mapping.internal, mapping.internal_port, None)
    }

    /// Drops the mappings whose lifetime ended by `now`; returns them.
    pub fn expire(&mut self, now: u64) -> Vec<Mapping> {
        self.unmap_where(|m| m.expires_at <= now)
    }

    /// Puts back mappings from before a restart, each checked again against the limits (the
    /// config may have changed): those expired by `now`, out of range, over a kept port, a
    /// duplicate or beyond a quota are left out. Returns how many were left out.
    pub fn restore(
        &mut self,
        mappings: impl IntoIterator<Item = Mapping>,
        now: u64,
        kept: impl Fn(u8, u16) -> bool,
    ) -> usize {
        let mut left_out = 0;
        let longest = u64::from(*self.limits.lifetime.end());
        for mapping in mappings {
            let per_host = self
                .mappings
                .iter()
                .filter(|m| m.internal == mapping.internal)
                .count();
            let usable = mapping.expires_at > now
                && matches!(mapping.protocol, TCP | UDP)
                && self.limits.external_ports.contains(&mapping.external_port)
                && !kept(mapping.protocol, mapping.external_port)
                && !self
                    .taken
                    .contains(&(mapping.protocol, mapping.external_port))
                && self
                    .find(mapping.protocol, mapping.internal, mapping.internal_port)
                    .is_none()
                && per_host < self.limits.per_host
                && self.mappings.len() < self.limits.total;
            if !usable {
                left_out += 1;
                continue;
            }
            self.taken.insert((mapping.protocol, mapping.external_port));
            self.mappings.push(Mapping {
                expires_at: mapping.expires_at.min(now + longest),
                ..mapping
            });
        }
        left_out
    }
}

#[cfg(test)]
mod tests;
