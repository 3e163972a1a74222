//! `[ha]`: the other box of an active/standby pair. `[ha.sync]` streams this gateway's flows
//! to the peer and installs the peer's (`crate::control::session_sync`; what is installed
//! and for how long: `pipeline::pipeline::operator::session_sync`).

use pipeline::pipeline::operator::session_sync::SyncKey;

use super::*;

/// `[ha]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HaConfig {
    /// Session sync with the peer; omitted: none.
    pub sync: Option<SessionSyncConfig>,
}

/// `[ha.sync]`: where the sync link's two ends are, the pair's shared key, and how often
/// every flow is sent again.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionSyncConfig {
    /// This box's end of the sync link: a UDP address on a link of the pair's own (or a
    /// management network), in the gateway's namespace, not a dataplane port.
    pub listen: SocketAddr,
    /// The peer's end.
    pub peer: SocketAddr,
    /// A file holding the pair's shared key: at least 16 bytes (trailing whitespace is not
    /// part of it), readable by its owner alone (mode 600). Read at start.
    pub key_file: PathBuf,
    /// Every flow is sent again this often (a sweep of every worker's table spread over the
    /// period). Shorter: a new flow reaches the peer sooner, for more traffic on the link.
    #[serde(default = "default_refresh_ms")]
    pub refresh_ms: u64,
    /// How long a synced flow lives on the peer unless the next sweep refreshes it or the
    /// peer forwards it: how long a flow the sender has closed lingers there. Omitted: three
    /// refresh periods, at least 30 s.
    #[serde(default)]
    pub lease_ms: Option<u64>,
}

fn default_refresh_ms() -> u64 {
    10_000
}

/// The refresh periods allowed: a sweep per 100 ms at most, one per 10 minutes at least.
const REFRESH_MS: std::ops::RangeInclusive<u64> = 100..=600_000;
/// The shortest default lease.
const MIN_DEFAULT_LEASE_MS: u64 = 30_000;
/// The longest lease: a day (a flow the sender closed lingers on the peer as long).
const MAX_LEASE_MS: u64 = 86_400_000;

impl SessionSyncConfig {
    /// The lease in force: as configured, else three refresh periods and at least 30 s.
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
            .unwrap_or((3 * self.refresh_ms).max(MIN_DEFAULT_LEASE_MS))
    }

    /// The two keys (this box's sending key, the peer's) derived from the shared secret in
    /// `key_file`, which nobody but its owner may read.
    pub fn read_keys(&self) -> Result<(SyncKey, SyncKey), ConfigError> {
        use std::os::unix::fs::PermissionsExt;

        use crate::config::validate::invalid;
        let field = "ha.sync.key_file";
        let path = self.key_file.display();
        let mode = std::fs::metadata(&self.key_file)
            .map_err(|err| invalid(field, format!("{path}: {err}")))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(invalid(
                field,
                format!(
                    "{path} is readable by others than its owner (mode {:o}): chmod 600 it",
                    mode & 0o777
                ),
            ));
        }
        let text = std::fs::read(&self.key_file)
            .map_err(|err| invalid(field, format!("{path}: {err}")))?;
        let end = text
            .iter()
            .rposition(|byte| !byte.is_ascii_whitespace())
            .map_or(0, |last| last + 1);
        let key = |sender: SocketAddr| {
            SyncKey::for_sender(&text[..end], &sender.to_string())
                .map_err(|err| invalid(field, format!("{path}: {err}")))
        };
        Ok((key(self.listen)?, key(self.peer)?))
    }
}

impl GatewayConfig {
    /// `[ha]`: the sync link's ends and periods (the key file is read at start).
    pub(crate) fn validate_ha(&self) -> Result<(), ConfigError> {
        use crate::config::validate::invalid;
        let Some(sync) = &self.ha.sync else {
            return Ok(());
        };
        if sync.listen.ip().is_unspecified() || sync.listen.port() == 0 {
            return Err(invalid(
                "ha.sync.listen",
                format!(
                    "{} is no address of this box's own: each direction's key is derived from the sender's address as both boxes write it (the peer's ha.sync.peer)",
                    sync.listen
                ),
            ));
        }
        if sync.listen == sync.peer {
            return Err(invalid(
                "ha.sync.peer",
                format!("{} is this box's own end (ha.sync.listen)", sync.peer),
            ));
        }
        if sync.peer.port() == 0 || sync.peer.ip().is_unspecified() {
            return Err(invalid(
                "ha.sync.peer",
                format!(
                    "{} names no peer: an address and a port are needed",
                    sync.peer
                ),
            ));
        }
        if !REFRESH_MS.contains(&sync.refresh_ms) {
            return Err(invalid(
                "ha.sync.refresh_ms",
                format!(
                    "{} is outside {}-{}",
                    sync.refresh_ms,
                    REFRESH_MS.start(),
                    REFRESH_MS.end()
                ),
            ));
        }
        if sync.lease_ms() < sync.refresh_ms {
            return Err(invalid(
                "ha.sync.lease_ms",
                format!(
                    "{} is shorter than ha.sync.refresh_ms ({}): every synced flow would run out before its refresh",
                    sync.lease_ms(),
                    sync.refresh_ms
                ),
            ));
        }
        if sync.lease_ms() > MAX_LEASE_MS {
            return Err(invalid(
                "ha.sync.lease_ms",
                format!("{} is more than a day ({MAX_LEASE_MS})", sync.lease_ms()),
            ));
        }
        if sync.key_file.as_os_str().is_empty() {
            return Err(invalid("ha.sync.key_file", "a key file is needed"));
        }
        Ok(())
    }
}
