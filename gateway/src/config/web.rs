//! The metrics endpoint's optional TLS and basic auth, read from a file in the Prometheus
//! exporter-toolkit's web-config format (`metrics.web_config`), so the one file a node
//! exporter uses serves here too:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: gateway.crt          # relative paths are relative to this file
//!   key_file: gateway.key
//!   client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default), VerifyClientCertIfGiven
//!   client_ca_file: prometheus-ca.crt
//!   min_version: TLS12               # TLS12 (default) or TLS13; max_version likewise
//! basic_auth_users:
//!   prometheus: $2y$10$...           # bcrypt
//! ```
//!
//! What exporter-toolkit has and rustls cannot do (TLS 1.0 and 1.1, client certificates
//! accepted unverified) or this gateway does not (cipher and curve lists, `http_server_config`,
//! SAN filters) is refused by name rather than ignored: a file that asks for it does not get
//! less than it asked for in silence. The file is read at start (a change needs a restart).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::config::{ConfigError, MetricsConfig};

/// A web-config field that is wrong, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct WebConfigError {
    pub field: String,
    pub reason: String,
}

impl fmt::Display for WebConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for WebConfigError {}

fn wrong(field: &str, reason: impl fmt::Display) -> WebConfigError {
    WebConfigError {
        field: field.to_string(),
        reason: reason.to_string(),
    }
}

/// The file as written. Unknown keys are refused (a typo would otherwise turn TLS off).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerFile>,
    http_server_config: Option<serde_yaml::Value>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    // exporter-toolkit's, refused when set (see the module doc).
    cert: Option<serde_yaml::Value>,
    key: Option<serde_yaml::Value>,
    cipher_suites: Option<serde_yaml::Value>,
    curve_preferences: Option<serde_yaml::Value>,
    prefer_server_cipher_suites: Option<serde_yaml::Value>,
    client_allowed_sans: Option<serde_yaml::Value>,
}

/// What the metrics server speaks: plain HTTP without either.
#[derive(Clone, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<ServerConfig>>,
    pub basic_auth: Option<Arc<BasicAuth>>,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field(
                "basic_auth",
                &self.basic_auth.as_ref().map(|a| a.users.len()),
            )
            .finish()
    }
}

/// `metrics.web_config` loaded, or plain HTTP when it is not set. The error names the config
/// field, the file, and the field in the file.
pub fn for_metrics(metrics: &MetricsConfig) -> Result<WebConfig, ConfigError> {
    let Some(path) = &metrics.web_config else {
        return Ok(WebConfig::default());
    };
    load(path).map_err(|err| ConfigError::Invalid {
        field: "metrics.web_config".into(),
        reason: format!("{}: {err}", path.display()),
    })
}

/// Reads and checks a web-config file: the certificate, key and CA files read and parsed,
/// the key matched to the certificate, every bcrypt hash parsed.
pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
    let text = std::fs::read_to_string(path).map_err(|err| wrong("(file)", err))?;
    let file: Option<WebConfigFile> = serde_path_to_error::deserialize(
        serde_yaml::Deserializer::from_str(&text),
    )
    .map_err(|err| {
        let field = err.path().to_string();
        let field = if field == "." { "(file)".into() } else { field };
        wrong(&field, err.into_inner())
    })?;
    // An empty file (or comments only) is plain HTTP, as in exporter-toolkit.
    let file = file.unwrap_or_default();
    if file.http_server_config.is_some() {
        return Err(wrong("http_server_config", "not supported by this gateway"));
    }
    let directory = path.parent().unwrap_or(Path::new("."));
    let tls = file
        .tls_server_config
        .map(|tls| tls_config(&tls, directory).map(Arc::new))
        .transpose()?;
    let basic_auth = if file.basic_auth_users.is_empty() {
        None
    } else {
        Some(Arc::new(BasicAuth::new(file.basic_auth_users)?))
    };
    Ok(WebConfig { tls, basic_auth })
}

/// The TLS versions rustls speaks, oldest first.
const VERSIONS: [(&str, &SupportedProtocolVersion); 2] = [
    ("TLS12", &rustls::version::TLS12),
    ("TLS13", &rustls::version::TLS13),
];

/// Where a version name sits in [`VERSIONS`].
fn version(field: &str, name: &str) -> Result<usize, WebConfigError> {
    if let Some(at) = VERSIONS.iter().position(|(known, _)| *known == name) {
        return Ok(at);
    }
    let reason = match name {
        "TLS10" | "TLS11" => format!("{name} is not supported (TLS12 and TLS13 are)"),
        _ => format!("{name:?} is not a TLS version (TLS12 or TLS13)"),
    };
    Err(wrong(field, reason))
}

/// How far client certificates are checked.
enum ClientAuth {
    None,
    IfGiven,
    Required,
}

fn tls_config(tls: &TlsServerFile, directory: &Path) -> Result<ServerConfig, WebConfigError> {
    for (field, set) in [
        ("cert", tls.cert.is_some()),
        ("key", tls.key.is_some()),
        ("cipher_suites", tls.cipher_suites.is_some()),
        ("curve_preferences", tls.curve_preferences.is_some()),
        (
            "prefer_server_cipher_suites",
            tls.prefer_server_cipher_suites.is_some(),
        ),
        ("client_allowed_sans", tls.client_allowed_sans.is_some()),
    ] {
        if set {
            let hint = if field == "cert" || field == "key" {
                " (use cert_file and key_file)"
            } else {
                " (rustls's defaults apply)"
            };
            return Err(wrong(
                &format!("tls_server_config.{field}"),
                format!("not supported by this gateway{hint}"),
            ));
        }
    }
    let resolve = |p: &Path| directory.join(p);
    let cert_file = tls
        .cert_file
        .as_deref()
        .map(resolve)
        .ok_or_else(|| wrong("tls_server_config.cert_file", "is required with TLS"))?;
    let key_file = tls
        .key_file
        .as_deref()
        .map(resolve)
        .ok_or_else(|| wrong("tls_server_config.key_file", "is required with TLS"))?;
    let min = version(
        "tls_server_config.min_version",
        tls.min_version.as_deref().unwrap_or("TLS12"),
    )?;
    let max = version(
        "tls_server_config.max_version",
        tls.max_version.as_deref().unwrap_or("TLS13"),
    )?;
    if max < min {
        return Err(wrong(
            "tls_server_config.max_version",
            "is below min_version",
        ));
    }
    let versions: Vec<&'static SupportedProtocolVersion> =
        VERSIONS[min..=max].iter().map(|(_, v)| *v).collect();

    let client_auth = match tls.client_auth_type.as_deref().unwrap_or("NoClientCert") {
        "NoClientCert" => ClientAuth::None,
        "VerifyClientCertIfGiven" => ClientAuth::IfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::Required,
        other @ ("RequestClientCert" | "RequireAnyClientCert") => {
            return Err(wrong(
                "tls_server_config.client_auth_type",
                format!(
                    "{other} (a client certificate taken unverified) is not supported: use \
                     RequireAndVerifyClientCert or VerifyClientCertIfGiven with client_ca_file"
                ),
            ))
        }
        other => {
            return Err(wrong(
                "tls_server_config.client_auth_type",
                format!(
                    "{other:?} is not one of NoClientCert, VerifyClientCertIfGiven, \
                     RequireAndVerifyClientCert"
                ),
            ))
        }
    };
    if matches!(client_auth, ClientAuth::None) != tls.client_ca_file.is_none() {
        let reason = if tls.client_ca_file.is_some() {
            "is set but client_auth_type is NoClientCert: say how client certificates are checked"
        } else {
            "is required to verify client certificates"
        };
        return Err(wrong("tls_server_config.client_ca_file", reason));
    }
    // The settings are sound: now the files.
    let certs = read_certs("tls_server_config.cert_file", &cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&key_file).map_err(|err| {
        wrong(
            "tls_server_config.key_file",
            format!("{}: {}", key_file.display(), pem_reason(err)),
        )
    })?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|err| wrong("tls_server_config.min_version", err))?;
    // The check above paired a CA file with every client_auth_type but NoClientCert.
    let builder = match (&client_auth, &tls.client_ca_file) {
        (_, None) => builder.with_no_client_auth(),
        (auth, Some(ca_file)) => {
            let ca_file = resolve(ca_file);
            let mut roots = RootCertStore::empty();
            for cert in read_certs("tls_server_config.client_ca_file", &ca_file)? {
                roots.add(cert).map_err(|err| {
                    wrong(
                        "tls_server_config.client_ca_file",
                        format!("{}: {err}", ca_file.display()),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::IfGiven => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|err| wrong("tls_server_config.client_ca_file", err))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|err| {
        wrong(
            "tls_server_config.key_file",
            format!(
                "{} does not go with {}: {err}",
                key_file.display(),
                cert_file.display()
            ),
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A PEM error in words (pki-types' Debug-ish ones name no file).
fn pem_reason(err: rustls::pki_types::pem::Error) -> String {
    match err {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the right kind in it".into(),
        other => format!("not valid PEM: {other:?}"),
    }
}

fn read_certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
    let at = |reason: String| wrong(field, format!("{}: {reason}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|err| at(pem_reason(err)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| at(pem_reason(err)))?;
    if certs.is_empty() {
        return Err(at("no CERTIFICATE in it".into()));
    }
    Ok(certs)
}

/// Checks of one bcrypt hash at a time, at most: a flood of wrong passwords costs one core's
/// bcrypt, never the runtime's thread (bcrypt runs on the blocking pool) nor more threads.
const BCRYPT_AT_ONCE: usize = 1;

/// How long a request waits for its bcrypt check before it is answered 503: a flood of wrong
/// passwords delays a new client's first check by at most this (a known one is cached).
pub const BCRYPT_WAIT: Duration = Duration::from_secs(2);

/// Credentials remembered as verified; past this many the memory is cleared.
const VERIFIED_CAPACITY: usize = 64;

/// An unknown user's password is checked against this (the password "unknown", cost 10) so
/// that an unknown user takes as long as a wrong password: exporter-toolkit does the same.
const UNKNOWN_USER_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// `basic_auth_users`: user names and their bcrypt hashes, and a memory of credentials that
/// checked out, so that each scrape after the first costs a SHA-256, not a bcrypt (tens of
/// milliseconds at cost 10). Only a hash of user and password is kept, and only good ones.
pub struct BasicAuth {
    users: HashMap<String, String>,
    verified: Mutex<HashSet<[u8; 32]>>,
    bcrypt_slots: Semaphore,
    bcrypt_runs: AtomicU64,
}

/// What the auth check says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthVerdict {
    Allowed,
    /// No credentials, unknown user or wrong password: 401.
    Denied,
    /// No bcrypt slot within [`BCRYPT_WAIT`]: 503.
    Busy,
}

impl BasicAuth {
    fn new(users: BTreeMap<String, String>) -> Result<Self, WebConfigError> {
        for (user, hash) in &users {
            let field = format!("basic_auth_users.{user}");
            if user.contains(':') {
                return Err(wrong(&field, "a user name cannot contain ':'"));
            }
            let parts: bcrypt::HashParts = hash.parse().map_err(|err| {
                wrong(
                    &field,
                    format!("not a bcrypt hash ($2y$10$ and 53 more characters): {err}"),
                )
            })?;
            if !(4..=31).contains(&parts.get_cost()) {
                return Err(wrong(
                    &field,
                    format!("bcrypt cost {} is not 4..=31", parts.get_cost()),
                ));
            }
        }
        Ok(BasicAuth {
            users: users.into_iter().collect(),
            verified: Mutex::new(HashSet::new()),
            bcrypt_slots: Semaphore::new(BCRYPT_AT_ONCE),
            bcrypt_runs: AtomicU64::new(0),
        })
    }

    /// How many bcrypt checks ran (the cache spares the rest).
    pub fn bcrypt_runs(&self) -> u64 {
        self.bcrypt_runs.load(Ordering::Relaxed)
    }

    /// Checks an `Authorization` header's value.
    pub async fn check(&self, authorization: Option<&[u8]>) -> AuthVerdict {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return AuthVerdict::Denied;
        };
        let key = remembered(&user, &password);
        let verified = || self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified().contains(&key) {
            return AuthVerdict::Allowed;
        }
        let Ok(Ok(_slot)) = tokio::time::timeout(BCRYPT_WAIT, self.bcrypt_slots.acquire()).await
        else {
            return AuthVerdict::Busy;
        };
        let (hash, known) = match self.users.get(&user) {
            Some(hash) => (hash.clone(), true),
            None => (UNKNOWN_USER_HASH.to_string(), false),
        };
        self.bcrypt_runs.fetch_add(1, Ordering::Relaxed);
        let matches =
            tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false);
        if !(matches && known) {
            return AuthVerdict::Denied;
        }
        let mut verified = verified();
        if verified.len() >= VERIFIED_CAPACITY {
            verified.clear();
        }
        verified.insert(key);
        AuthVerdict::Allowed
    }
}

/// User and password of a `Basic` authorization.
fn credentials(header: &[u8]) -> Option<(String, Vec<u8>)> {
    let header = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// What is kept of credentials that checked out: user and password hashed together.
fn remembered(user: &str, password: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(user.as_bytes());
    hasher.update([0]);
    hasher.update(password);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> Vec<u8> {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}").into_bytes()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_good_password_is_checked_by_bcrypt_once_and_then_remembered() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let auth = BasicAuth::new(BTreeMap::from([("prom".to_string(), hash)])).unwrap();
        let runtime = runtime();
        let check = |header: &[u8]| runtime.block_on(auth.check(Some(header)));
        assert_eq!(check(&basic("prom", "secret")), AuthVerdict::Allowed);
        assert_eq!(auth.bcrypt_runs(), 1);
        for _ in 0..5 {
            assert_eq!(check(&basic("prom", "secret")), AuthVerdict::Allowed);
        }
        assert_eq!(auth.bcrypt_runs(), 1, "the later checks came from memory");
        // Wrong passwords are never remembered: each costs a bcrypt.
        assert_eq!(check(&basic("prom", "wrong")), AuthVerdict::Denied);
        assert_eq!(check(&basic("prom", "wrong")), AuthVerdict::Denied);
        assert_eq!(auth.bcrypt_runs(), 3);
        // An unknown user is checked too (as long as a wrong password), and denied.
        assert_eq!(check(&basic("other", "secret")), AuthVerdict::Denied);
        assert_eq!(auth.bcrypt_runs(), 4);
        assert_eq!(
            runtime.block_on(auth.check(None)),
            AuthVerdict::Denied,
            "no header"
        );
        assert_eq!(check(b"Bearer abc"), AuthVerdict::Denied);
        assert_eq!(check(b"Basic !!!"), AuthVerdict::Denied);
    }

    #[test]
    fn the_unknown_user_hash_is_a_bcrypt_hash_of_cost_10() {
        let parts: bcrypt::HashParts = UNKNOWN_USER_HASH.parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
    }

    #[test]
    fn bad_hashes_and_user_names_are_refused_naming_the_user() {
        for (user, hash) in [
            ("prom", "plaintext"),
            ("prom", "$2y$10$tooshort"),
            (
                "a:b",
                "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi",
            ),
        ] {
            let err = BasicAuth::new(BTreeMap::from([(user.to_string(), hash.to_string())]))
                .err()
                .unwrap_or_else(|| panic!("{user}: {hash} accepted"));
            assert_eq!(err.field, format!("basic_auth_users.{user}"));
        }
    }
}
