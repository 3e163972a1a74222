//! State snapshots: every worker's flows, with their NAT bindings and forward translations,
//! carried across a restart so that connections through NAT and port forwards survive it.
//!
//! # Format
//!
//! A snapshot file is a 24-byte header and a payload:
//!
//! | bytes  | what |
//! | ------ | ---- |
//! | 0..8   | [`MAGIC`], `GWSTATE` and a zero: anything else is not ours |
//! | 8..12  | [`FORMAT_VERSION`], little-endian: bumped whenever a record changes |
//! | 12..20 | the payload's length, little-endian |
//! | 20..24 | CRC-32 (IEEE) of bytes 0..20 and the payload, little-endian |
//! | 24..   | the [`Snapshot`], postcard-encoded |
//!
//! [`decode`] takes all of it or nothing: a short, foreign, other-version, corrupt or
//! undecodable file, or one with a single flow that the tracker could not have built, is
//! refused whole, before any table is touched. Builds of the same format version read each
//! other's snapshots, so an upgrade keeps sessions too.
//!
//! # Restore
//!
//! A flow is kept only where the current config would have made it the same: the same
//! forward translation, a route for it, the same masquerade (its NAT address still one of
//! ours), the firewall still admitting it. Its owner is derived again for the current
//! worker count with [`flow_owner`] from both of its tuples; where they differ (a
//! masqueraded flow whose external port's class now belongs to another worker than its
//! inside host), its replies could not meet it, so it is skipped. Each flow's time left is
//! shortened by the time the gateway was down. Its NAT binding is reserved in its worker's
//! pool ([`NatPool::restore`]), so a restored port is never handed out twice. Every skip is
//! counted by [`Skip`] reason in a [`RestoreReport`].
//!
//! [`NatPool::restore`]: crate::state::nat::NatPool::restore

use serde::{Deserialize, Serialize};

use crate::flow::{has_ports, reply_key};
use crate::pipeline::config::RouterConfig;
use crate::pipeline::stateful::{admit, flow_owner};
use crate::state::conntrack::ExportedFlow;
use crate::state::firewall::Action;
use crate::state::flow_data::{release, FlowData};
use crate::state::nat::Ownership;
use crate::Pipeline;

/// The first bytes of every snapshot file.
pub const MAGIC: [u8; 8] = *b"GWSTATE\0";
/// The version of the header and of every record in the payload (flow keys, TCP tracker,
/// [`FlowData`]).
pub const FORMAT_VERSION: u32 = 2;
const HEADER_LEN: usize = 24;

/// One flow of a snapshot.
pub type SavedFlow = ExportedFlow<FlowData>;

/// What a stopping gateway saves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Unix time in milliseconds when it was taken: the time until the restore is taken off
    /// every flow's time left.
    pub taken_unix_ms: u64,
    /// The worker count of the gateway that took it (ownership is derived again anyway).
    pub workers: u16,
    /// Who took it (the gateway's version), for the log.
    pub writer: String,
    pub flows: Vec<SavedFlow>,
}

/// Why [`decode`] refused a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Shorter than its header, or than the payload its header announces.
    #[error("truncated: {len} bytes, expected {expected}")]
    Truncated { len: usize, expected: usize },
    /// Does not start with [`MAGIC`].
    #[error("not a gateway state snapshot (bad magic)")]
    Foreign,
    /// Written by a build with another [`FORMAT_VERSION`].
    #[error("format version {found}, this build reads version {FORMAT_VERSION}")]
    Version { found: u32 },
    /// Longer than its header says.
    #[error("{extra} bytes beyond the announced payload")]
    TrailingBytes { extra: usize },
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): corrupt")]
    Checksum { stored: u32, computed: u32 },
    /// The checksum holds but the payload does not decode.
    #[error("payload does not decode: {0}")]
    Undecodable(postcard::Error),
    /// Flow number `index` is one the flow tracker could not have built.
    #[error("flow {index} is not one the flow tracker builds")]
    MalformedFlow { index: usize },
    /// Encoding failed (not expected for these types).
    #[error("encoding failed: {0}")]
    Encode(postcard::Error),
}

/// The snapshot as the bytes of a file (see the module doc).
pub fn encode(snapshot: &Snapshot) -> Result<Vec<u8>, SnapshotError> {
    let payload = postcard::to_allocvec(snapshot).map_err(SnapshotError::Encode)?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes);
    crc.update(&payload);
    bytes.extend_from_slice(&crc.finalize().to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// The snapshot in `bytes`, whole and checked, or why not (see the module doc).
pub fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    if bytes.len() < HEADER_LEN {
        // Too short to tell: say foreign if even the magic is wrong.
        if !MAGIC.starts_with(bytes) && !bytes.starts_with(&MAGIC) {
            return Err(SnapshotError::Foreign);
        }
        return Err(SnapshotError::Truncated {
            len: bytes.len(),
            expected: HEADER_LEN,
        });
    }
    let (header, payload) = bytes.split_at(HEADER_LEN);
    if header[..8] != MAGIC {
        return Err(SnapshotError::Foreign);
    }
    let word = |range: std::ops::Range<usize>| {
        header[range]
            .iter()
            .rev()
            .fold(0u64, |acc, &b| acc << 8 | u64::from(b))
    };
    let version = word(8..12) as u32;
    if version != FORMAT_VERSION {
        return Err(SnapshotError::Version { found: version });
    }
    let announced = word(12..20);
    let expected = (HEADER_LEN as u64).saturating_add(announced);
    if (bytes.len() as u64) < expected {
        return Err(SnapshotError::Truncated {
            len: bytes.len(),
            expected: usize::try_from(expected).unwrap_or(usize::MAX),
        });
    }
    if (bytes.len() as u64) > expected {
        return Err(SnapshotError::TrailingBytes {
            extra: (bytes.len() as u64 - expected) as usize,
        });
    }
    let stored = word(20..24) as u32;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[..20]);
    crc.update(payload);
    let computed = crc.finalize();
    if stored != computed {
        return Err(SnapshotError::Checksum { stored, computed });
    }
    let (snapshot, rest): (Snapshot, _) =
        postcard::take_from_bytes(payload).map_err(SnapshotError::Undecodable)?;
    if !rest.is_empty() {
        return Err(SnapshotError::TrailingBytes { extra: rest.len() });
    }
    if let Some(index) = snapshot
        .flows
        .iter()
        .position(|flow| !flow.is_well_formed())
    {
        return Err(SnapshotError::MalformedFlow { index });
    }
    Ok(snapshot)
}

/// Why a flow of a snapshot was not restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// Its time ran out while the gateway was down.
    Expired,
    /// The current config would not make this flow so: its forward, route, masquerade or NAT
    /// address changed, or the firewall no longer admits it.
    Config,
    /// Its two directions would reach different workers under the current worker count.
    Ownership,
    /// Its NAT port is not free on its worker: taken, reserved for a forward, over its
    /// host's limit, or no binding entry left.
    NatPort,
    /// Its worker's flow table refused it: full, a host or half-open limit, a duplicate.
    Table,
}

impl Skip {
    pub const COUNT: usize = 5;
    pub const ALL: [Skip; Skip::COUNT] = [
        Skip::Expired,
        Skip::Config,
        Skip::Ownership,
        Skip::NatPort,
        Skip::Table,
    ];

    /// For logs and metric labels.
    pub fn label(self) -> &'static str {
        match self {
            Skip::Expired => "expired",
            Skip::Config => "config",
            Skip::Ownership => "ownership",
            Skip::NatPort => "nat_port",
            Skip::Table => "table",
        }
    }
}

/// What a restore did with a snapshot's flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub restored: u64,
    /// Indexed by the position in [`Skip::ALL`].
    pub skipped: [u64; Skip::COUNT],
}

impl RestoreReport {
    pub fn skipped(&self, reason: Skip) -> u64 {
        self.skipped[reason as usize]
    }

    pub fn skipped_total(&self) -> u64 {
        self.skipped.iter().sum()
    }

    pub fn add(&mut self, other: &RestoreReport) {
        self.restored += other.restored;
        for (total, more) in self.skipped.iter_mut().zip(other.skipped) {
            *total += more;
        }
    }

    pub(super) fn skip(&mut self, reason: Skip) {
        self.skipped[reason as usize] += 1;
    }
}

/// The worker that owns `flow` under `workers` workers: [`flow_owner`] of both its tuples,
/// which must agree.
pub fn owner(router: &RouterConfig, workers: u16, flow: &SavedFlow) -> Result<u16, Skip> {
    let ownership = Ownership::new(workers);
    let owner = flow_owner(router, ownership, &flow.original);
    if flow_owner(router, ownership, &flow.reply) != owner {
        return Err(Skip::Ownership);
    }
    Ok(owner)
}

/// Sorts a snapshot's flows by the worker that owns each now, with `elapsed_ns` (the time
/// since the snapshot was taken) taken off their time left. Expired flows and flows whose
/// directions would part are counted in `report` and dropped.
pub fn distribute(
    router: &RouterConfig,
    workers: u16,
    flows: Vec<SavedFlow>,
    elapsed_ns: u64,
    report: &mut RestoreReport,
) -> Vec<Vec<SavedFlow>> {
    let mut per_worker = vec![Vec::new(); usize::from(workers.max(1))];
    for mut flow in flows {
        flow.remaining_ns = flow.remaining_ns.saturating_sub(elapsed_ns);
        if flow.remaining_ns == 0 {
            report.skip(Skip::Expired);
            continue;
        }
        match owner(router, workers.max(1), &flow) {
            Ok(worker) => per_worker[usize::from(worker)].push(flow),
            Err(reason) => report.skip(reason),
        }
    }
    per_worker
}

impl Pipeline {
    /// Appends this worker's live flows, with their time left at `now_ns`, to `out`.
    /// Allocates: for shutdown, not for the packet path.
    /// The flows' forwarding shortcuts are a cache, not state: they are left out.
    pub fn export_flows(&self, now_ns: u64, out: &mut Vec<SavedFlow>) {
        self.stateful.flows.export(now_ns, |mut flow| {
            flow.data.shortcuts = Default::default();
            out.push(flow)
        });
    }

    /// Puts back the flows [`distribute`] gave this worker, before it forwards anything,
    /// `now_ns` being its clock now. Each is checked against the current config, its NAT
    /// binding reserved in this worker's pool, and then imported into its flow table; a flow
    /// that does not fit is skipped and counted, never half-restored.
    pub fn restore_flows(&mut self, flows: &[SavedFlow], now_ns: u64) -> RestoreReport {
        let mut report = RestoreReport::default();
        for flow in flows {
            // A copy synced from the HA peer (its generation says so) stays one.
            match self.restore_flow(flow, now_ns, flow.data.is_synced_copy()) {
                Ok(()) => report.restored += 1,
                Err(reason) => report.skip(reason),
            }
        }
        self.publish_table_stats();
        report
    }

    /// One flow put back, if it fits; a copy synced from the HA peer (`synced_copy`) is
    /// marked as one ([`SYNCED_COPY`]).
    ///
    /// [`SYNCED_COPY`]: crate::state::flow_data::SYNCED_COPY
    pub(super) fn restore_flow(
        &mut self,
        flow: &SavedFlow,
        now_ns: u64,
        synced_copy: bool,
    ) -> Result<(), Skip> {
        if flow.remaining_ns == 0 {
            return Err(Skip::Expired);
        }
        if owner(&self.router, self.stateful.ownership.workers(), flow)? != self.stateful.worker {
            return Err(Skip::Ownership);
        }
        let mut data = self.fits_config(flow)?;
        if synced_copy {
            data.generation = crate::state::flow_data::SYNCED_COPY;
        }
        if let (Some((protocol, address, port)), Some(pool)) =
            (data.binding, self.stateful.nat.as_mut())
        {
            let internal = (flow.original.src, flow.original.src_port);
            pool.restore(protocol, internal, (address, port))
                .map_err(|_| Skip::NatPort)?;
        }
        let restored = ExportedFlow { data, ..*flow };
        match self.stateful.flows.import(&restored, now_ns) {
            Ok(id) => {
                // The content inspector's partial stream did not come along.
                self.stateful.inspector.forget(id.as_u32());
                Ok(())
            }
            Err(_) => {
                release(&mut self.stateful.nat, &data);
                Err(Skip::Table)
            }
        }
    }

    /// The flow's data as the current config would have made it (zones, rules generation),
    /// if the current config makes the same flow: what `new_flow` decides for its first
    /// packet must give the same reply tuple, with the NAT binding it holds.
    pub(super) fn fits_config(&self, flow: &SavedFlow) -> Result<FlowData, Skip> {
        let router = &*self.router;
        let stateful = &router.stateful;
        let interfaces = &router.interfaces;
        let key = flow.original;
        let data = flow.data;
        let forward = stateful.port_forward(interfaces, key.protocol, key.dst, key.dst_port);
        let dnat = forward.map(|forward| (forward.to, forward.translate(key.dst_port)));
        if dnat.is_some() != data.forwarded {
            return Err(Skip::Config);
        }
        // Nor is a connection the kernel opened: its twin, and so its socket, did not
        // outlive the gateway.
        if dnat.is_none() && router.local_port(key.dst).is_some()
            || router.local_port(key.src).is_some()
        {
            return Err(Skip::Config);
        }
        let (dst, dst_port) = dnat.unwrap_or((key.dst, key.dst_port));
        // A forward's flow that came in by an uplink came in there (and is answered by it);
        // any other's first packet came in where the route back to its source leaves.
        let came_by_uplink = router
            .local_port(key.dst)
            .filter(|&port| data.forwarded && router.uplinks.on_port(port).is_some());
        let ingress = match came_by_uplink {
            Some(port) => port,
            None => router.routes.lookup(key.src).ok_or(Skip::Config)?.port,
        };
        let (route, from_default) = router.routes.lookup_from_default(dst).ok_or(Skip::Config)?;
        // With several uplinks, a flow toward the default route left by the one whose address
        // it was masqueraded to, and keeps it.
        let left_by_uplink = from_default
            .then(|| {
                // A protocol without ports holds no binding: its reply names the address.
                let portless = (!has_ports(key.protocol)).then_some(flow.reply.dst);
                let external = data.binding.map(|(_, address, _)| address).or(portless)?;
                let port = router.local_port(external)?;
                router.uplinks.on_port(port).is_some().then_some(port)
            })
            .flatten();
        let egress = left_by_uplink.unwrap_or(route.port);
        let zone = |port: u16| stateful.zones.get(usize::from(port)).copied();
        let masquerades = |port: u16| stateful.masquerade.get(usize::from(port)) == Some(&true);
        let (Some(from), Some(to)) = (zone(ingress), zone(egress)) else {
            return Err(Skip::Config);
        };
        let (action, _) = admit(
            stateful,
            from,
            to,
            &key,
            (dst, dst_port),
            dnat.is_some(),
            data.icmp_type,
        );
        if action != Action::Accept {
            return Err(Skip::Config);
        }
        let hairpin = dnat.is_some() && !masquerades(ingress);
        let snat_address = if masquerades(egress) {
            Some(None)
        } else if hairpin {
            Some(Some(interfaces[usize::from(egress)].masquerade_addr()))
        } else {
            None
        };
        let source = match (snat_address, self.stateful.nat.as_ref(), data.binding) {
            (None, _, None) => (key.src, key.src_port),
            (Some(fixed), Some(pool), Some((protocol, external, port)))
                if has_ports(key.protocol) && protocol == key.protocol =>
            {
                if !pool.addresses().contains(&external) {
                    return Err(Skip::Config);
                }
                (fixed.unwrap_or(external), port)
            }
            // Masqueraded to the address of the interface it leaves by, as `new_flow` does.
            (Some(fixed), Some(_), None) if !has_ports(key.protocol) => (
                fixed.unwrap_or(interfaces[usize::from(egress)].masquerade_addr()),
                0,
            ),
            _ => return Err(Skip::Config),
        };
        if reply_key(key.protocol, (dst, dst_port), source) != flow.reply {
            return Err(Skip::Config);
        }
        Ok(FlowData {
            from_zone: from.0,
            to_zone: to.0,
            generation: stateful.generation,
            ..data
        })
    }
}
