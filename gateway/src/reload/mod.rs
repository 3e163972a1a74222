//! Config reload: on SIGHUP or when the file changes and then stays quiet for a moment. The
//! new file is read whole, parsed and validated first; if it is bad, nothing changes. Settings that need a restart (EAL, pools, workers,
//! the set of interfaces) are reported and kept as they are; everything else applies.
//! The reading, parsing and compiling (category files can hold millions of domains) happen
//! on the `config-load` thread ([`Loader`]); the control thread only publishes the result, so
//! ARP and held packets are served meanwhile.

pub mod status;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use notify::{RecursiveMode, Watcher};
use pipeline::RouterConfig;
use serde_json::Value;

use crate::compile::router::router_config_with_kernel;
use crate::config::history::FileText;
use crate::config::store::ConfigStore;
use crate::config::{read_config_file, ConfigError, GatewayConfig};
use crate::control::netlink::KernelView;

/// Field paths whose change needs a restart, old -> new.
pub fn restart_required(running: &GatewayConfig, new: &GatewayConfig) -> Vec<String> {
    let mut fields = Vec::new();
    if running.eal != new.eal {
        fields.push("eal".to_string());
    }
    if running.mempool != new.mempool {
        fields.push("mempool".to_string());
    }
    if running.workers != new.workers {
        fields.push("workers".to_string());
    }
    // The whole section (size, timeouts, loose pickup, per-host and half-open limits) is
    // the flow tables' own settings, fixed when each worker's table is made.
    if running.conntrack != new.conntrack {
        fields.push("conntrack".to_string());
    }
    if running.nat.binding_capacity != new.nat.binding_capacity {
        fields.push("nat.binding_capacity".to_string());
    }
    if running.nat.host_ports != new.nat.host_ports {
        fields.push("nat.host_ports".to_string());
    }
    if running.nat.port_block_size != new.nat.port_block_size {
        fields.push("nat.port_block_size".to_string());
    }
    if running.nat.port_range != new.nat.port_range {
        fields.push("nat.port_range".to_string());
    }
    if running.nat.masquerade != new.nat.masquerade {
        fields.push("nat.masquerade".to_string());
    }
    // Each worker's event queue is made at start, and the sending thread with it.
    if running.nat.log != new.nat.log {
        fields.push("nat.log".to_string());
    }
    if running.firewall.log != new.firewall.log {
        fields.push("firewall.log".to_string());
    }
    // The control thread builds its neighbour table once, at start.
    if running.neighbors != new.neighbors {
        fields.push("neighbors".to_string());
    }
    // The twins are made at start; their punt budget applies on reload.
    if (
        running.kernel_twins.inside_by_default,
        &running.kernel_twins.netns,
    ) != (new.kernel_twins.inside_by_default, &new.kernel_twins.netns)
    {
        fields.push("kernel_twins.inside_by_default/netns".to_string());
    }
    if running.metrics != new.metrics {
        fields.push("metrics".to_string());
    }
    if running.ctl != new.ctl {
        fields.push("ctl".to_string());
    }
    // The file watcher is started, or not, with the gateway.
    if running.reload != new.reload {
        fields.push("reload".to_string());
    }
    // The snapshot is read at start and written where the running gateway started.
    if running.state != new.state {
        fields.push("state".to_string());
    }
    // Each worker's meter table is allocated at start.
    if running.traffic_meter.capacity != new.traffic_meter.capacity {
        fields.push("traffic_meter.capacity".to_string());
    }
    if running.interfaces.len() != new.interfaces.len() {
        fields.push("interfaces (count)".to_string());
    } else {
        for (i, (old, new)) in running.interfaces.iter().zip(&new.interfaces).enumerate() {
            if old.device != new.device || old.name != new.name {
                fields.push(format!("interfaces[{i}].device/name"));
            }
            // Which port a VLAN rides on and its tag are wired into the workers' I/O.
            if old.parent != new.parent || old.vlan != new.vlan {
                fields.push(format!("interfaces[{i}].parent/vlan"));
            }
            if old.rx_descriptors != new.rx_descriptors || old.tx_descriptors != new.tx_descriptors
            {
                fields.push(format!("interfaces[{i}].rx/tx_descriptors"));
            }
            if old.mtu() != new.mtu() {
                fields.push(format!("interfaces[{i}].mtu"));
            }
            // Bonds, the RSS key, promiscuous mode and VLAN offloads are set up with the port.
            if old.bond != new.bond
                || old.rss_key != new.rss_key
                || old.promiscuous != new.promiscuous
                || old.vlan_offload != new.vlan_offload
            {
                fields.push(format!(
                    "interfaces[{i}].bond/rss_key/promiscuous/vlan_offload"
                ));
            }
            // The NAT pools hand out ports on the addresses they started with.
            if old.address != new.address {
                fields.push(format!("interfaces[{i}].address"));
            }
            // Twins are made at start.
            if old.kernel_twin != new.kernel_twin || old.kernel_twin_name != new.kernel_twin_name {
                fields.push(format!("interfaces[{i}].kernel_twin"));
            }
            // A port takes all multicast (Neighbor Discovery's groups) only if it starts with
            // IPv6; what the table says applies on reload.
            if old.ipv6.is_some() != new.ipv6.is_some() {
                fields.push(format!("interfaces[{i}].ipv6"));
            } else if twin_ipv6(old) != twin_ipv6(new) {
                // The twin's IPv6 is set up at start.
                fields.push(format!(
                    "interfaces[{i}].ipv6.autoconfigure/delegated_prefix"
                ));
            }
        }
    }
    fields
}

/// What an interface's twin does with IPv6: (autoconfigure, delegated_prefix).
fn twin_ipv6(iface: &crate::config::InterfaceConfig) -> Option<(bool, bool)> {
    let ipv6 = iface.ipv6.as_ref()?;
    Some((ipv6.autoconfigure, ipv6.delegated_prefix))
}

/// The config to run after a reload: `new` with every restart-only setting taken from
/// `running`, so the rest can apply now.
pub fn merge_for_reload(running: &GatewayConfig, new: GatewayConfig) -> GatewayConfig {
    let mut merged = new;
    merged.eal = running.eal.clone();
    merged.mempool = running.mempool.clone();
    merged.workers = running.workers.clone();
    merged.metrics = running.metrics.clone();
    merged.ctl = running.ctl.clone();
    merged.reload = running.reload.clone();
    merged.state = running.state.clone();
    merged.traffic_meter.capacity = running.traffic_meter.capacity;
    merged.conntrack = running.conntrack.clone();
    merged.nat.binding_capacity = running.nat.binding_capacity;
    merged.nat.log = running.nat.log.clone();
    merged.firewall.log = running.firewall.log.clone();
    merged.nat.host_ports = running.nat.host_ports;
    merged.nat.port_block_size = running.nat.port_block_size;
    merged.nat.port_range = running.nat.port_range;
    merged.nat.masquerade = running.nat.masquerade.clone();
    merged.neighbors = running.neighbors.clone();
    merged.kernel_twins.inside_by_default = running.kernel_twins.inside_by_default;
    merged.kernel_twins.netns = running.kernel_twins.netns.clone();
    // The running interfaces stay, in their order, until a restart; each takes what applies
    // now from the file's interface of the same name (the name is what zones, forwards and
    // masquerade resolve by), or stays as it runs where the file has none. Never by place: a
    // reordered or renamed list would hand one interface's zone to another.
    merged.interfaces = running
        .interfaces
        .iter()
        .map(|old| {
            let Some(new) = merged.interfaces.iter().find(|new| new.name == old.name) else {
                return old.clone();
            };
            let mut new = new.clone();
            new.device = old.device.clone();
            new.parent = old.parent.clone();
            new.vlan = old.vlan;
            new.rx_descriptors = old.rx_descriptors;
            new.tx_descriptors = old.tx_descriptors;
            new.configured_mtu = old.configured_mtu;
            new.address = old.address;
            new.bond = old.bond.clone();
            new.rss_key = old.rss_key.clone();
            new.promiscuous = old.promiscuous;
            new.vlan_offload = old.vlan_offload;
            new.kernel_twin = old.kernel_twin;
            new.kernel_twin_name = old.kernel_twin_name.clone();
            if new.ipv6.is_some() != old.ipv6.is_some() {
                new.ipv6 = old.ipv6.clone();
            }
            if let (Some(new), Some(old)) = (&mut new.ipv6, &old.ipv6) {
                new.autoconfigure = old.autoconfigure;
                new.delegated_prefix = old.delegated_prefix;
            }
            new
        })
        .collect();
    merged
}

/// What a reload came to, ready for the control thread to publish or report.
#[derive(Debug)]
pub enum Loaded {
    /// The config now in force (restart-only settings kept as they run) and its compiled
    /// router config; `restart` names the changed settings that wait for a restart.
    Ready {
        config: Box<GatewayConfig>,
        router: Arc<RouterConfig>,
        restart: Vec<String>,
        /// The file as read, and the settings in it that differ from the one before.
        file: FileText,
        changed: Vec<String>,
    },
    /// The file did not load, validate or compile; nothing changes. The reason names the field.
    Refused(String),
}

/// Reads the config file once, and loads and digests that one text: the digest (`gateway ctl
/// show config`) is of what loaded, whatever is written to the file meanwhile.
pub fn load_file(path: &Path) -> Result<(GatewayConfig, FileText), ConfigError> {
    let text = read_config_file(path)?;
    Ok((GatewayConfig::from_text(path, &text)?, FileText::new(&text)))
}

/// Validates and compiles `text` (named `label` in messages) as a reload of `running`, read
/// from `running_file`. `kernel` is what the twins' kernel side says (addresses from DHCP,
/// routes): the reload compiles with it, as the control thread does when it changes.
pub fn load_for_reload(
    label: &Path,
    text: &str,
    running: &GatewayConfig,
    running_file: &FileText,
    macs: &[[u8; 6]],
    kernel: &KernelView,
) -> Loaded {
    let new = match GatewayConfig::from_text(label, text) {
        Ok(new) => new,
        Err(err) => return Loaded::Refused(err.to_string()),
    };
    let file = FileText::new(text);
    let restart = restart_required(running, &new);
    let merged = merge_for_reload(running, new);
    // The file was valid alone; what would run is the file with its restart-only settings
    // kept as they run, which must be valid as a whole too: a policy, rule or forward that
    // names an interface or zone the restart has yet to bring is refused, never resolved to
    // another one.
    if let Err(err) = merged.validate() {
        let waiting = if restart.is_empty() {
            String::new()
        } else {
            format!(
                " (kept as they run until a restart: {}; reload the rest without what \
                 depends on them, or restart)",
                restart.join(", ")
            )
        };
        return Loaded::Refused(format!(
            "the file with its restart-only settings kept as they run: {err}{waiting}"
        ));
    }
    match router_config_with_kernel(&merged, macs, kernel) {
        Ok(router) => Loaded::Ready {
            config: Box::new(merged),
            router: Arc::new(router),
            restart,
            changed: file.changed_since(running_file),
            file,
        },
        Err(err) => Loaded::Refused(format!("{err:#}")),
    }
}

/// Where the answer to an operator's request goes: the JSON `gateway ctl` prints, or the
/// refusal naming the field.
pub type Reply = Sender<Result<Value, String>>;

/// What a load was asked for by, as `ctl show config` records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The config file: SIGHUP, the watcher, `ctl config reload`.
    File,
    /// `ctl config apply` of the file at this path.
    Apply(PathBuf),
    /// `ctl config rollback`, this many configs back.
    Rollback(usize),
    /// The config before an apply (this version) that was not confirmed in time.
    NotConfirmed(u64),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File => f.write_str("file"),
            Source::Apply(path) => write!(f, "ctl config apply {}", path.display()),
            Source::Rollback(steps) => write!(f, "ctl config rollback {steps}"),
            Source::NotConfirmed(version) => {
                write!(f, "rollback: version {version} was not confirmed in time")
            }
        }
    }
}

/// What the `config-load` thread is asked to do.
#[derive(Debug)]
pub enum LoadRequest {
    /// Load the config file (SIGHUP and the watcher without a reply; `ctl config reload`
    /// with one).
    File { reply: Option<Reply> },
    /// Load this text: `ctl config apply`'s (with its confirmation time), or the one an
    /// unconfirmed apply returns to.
    Text {
        text: Arc<str>,
        label: PathBuf,
        source: Source,
        confirm: Option<Duration>,
        reply: Option<Reply>,
    },
    /// Answer what loading this text would change and need a restart for; apply nothing.
    Diff {
        text: String,
        label: PathBuf,
        reply: Reply,
    },
    /// Load the config kept `steps` before the running one (`crate::config::store`).
    Rollback { steps: usize, reply: Reply },
}

/// A load's outcome, for the control thread to publish or report, and to answer.
#[derive(Debug)]
pub struct LoadResult {
    pub loaded: Loaded,
    pub source: Source,
    /// Roll back unless confirmed within this time (`ctl config apply --confirm`).
    pub confirm: Option<Duration>,
    pub replies: Vec<Reply>,
    /// The config in force before this load: what an unconfirmed apply returns to.
    pub previous: FileText,
}

/// The `config-load` thread: loads on request, off the control thread, and hands each result
/// to `on_loaded`. File requests that arrive while a load runs are served by one more load,
/// which reads the file as it is by then. It keeps the config in force itself (the last one
/// it handed over ready): results are applied in the order they are handed over, so each
/// reload is merged onto the one before. Each config it hands over ready is kept whole in the
/// state directory (`crate::config::store`), the one the gateway started with first. Dropping
/// the `Loader` ends the thread after its current load. Started from the control thread, it
/// inherits the main lcore's CPU: a load shares that CPU with the mostly idle control
/// thread, which the scheduler still runs whenever it wakes, and takes nothing from the
/// workers' CPUs.
pub struct Loader {
    requests: Option<Sender<LoadRequest>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the `config-load` thread works from.
pub struct LoaderSetup {
    pub path: PathBuf,
    pub running: GatewayConfig,
    pub running_file: FileText,
    pub macs: Vec<[u8; 6]>,
    pub kernel: Arc<Mutex<KernelView>>,
    pub store: ConfigStore,
}

impl Loader {
    pub fn start(
        setup: LoaderSetup,
        on_loaded: impl Fn(LoadResult) + Send + 'static,
    ) -> std::io::Result<Loader> {
        let (requests, requested) = crossbeam_channel::unbounded::<LoadRequest>();
        let thread = std::thread::Builder::new()
            .name("config-load".into())
            .spawn(move || serve_loads(setup, &requested, on_loaded))?;
        Ok(Loader {
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// Asks for a load; returns at once. A request the thread can no longer take (it is
    /// gone) is logged; its reply, if any, answers at once (its sender is dropped).
    pub fn request(&self, request: LoadRequest) {
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|requests| requests.send(request).is_ok());
        if !sent {
            tracing::error!(
                "the config-load thread is gone: the reload, apply or rollback is lost"
            );
        }
    }
}

fn serve_loads(
    setup: LoaderSetup,
    requested: &Receiver<LoadRequest>,
    on_loaded: impl Fn(LoadResult),
) {
    let LoaderSetup {
        path,
        mut running,
        mut running_file,
        macs,
        kernel,
        store,
    } = setup;
    let keep = |file: &FileText| {
        if let Err(err) = store.record(file) {
            tracing::warn!(
                "not keeping the config in {} for rollbacks: {err}",
                store.directory().display()
            );
        }
    };
    keep(&running_file);
    let mut waiting: Option<LoadRequest> = None;
    loop {
        let Some(request) = waiting.take().or_else(|| requested.recv().ok()) else {
            return;
        };
        let view = kernel
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let load = |label: &Path, text: &str| {
            load_for_reload(label, text, &running, &running_file, &macs, &view)
        };
        let (loaded, source, confirm, replies) = match request {
            LoadRequest::File { reply } => {
                // One load of the file answers every file request made in a row so far.
                let mut replies: Vec<Reply> = reply.into_iter().collect();
                while let Ok(next) = requested.try_recv() {
                    match next {
                        LoadRequest::File { reply } => replies.extend(reply),
                        other => {
                            waiting = Some(other);
                            break;
                        }
                    }
                }
                let loaded = match read_config_file(&path) {
                    Ok(text) => load(&path, &text),
                    Err(err) => Loaded::Refused(err.to_string()),
                };
                (loaded, Source::File, None, replies)
            }
            LoadRequest::Text {
                text,
                label,
                source,
                confirm,
                reply,
            } => (
                load(&label, &text),
                source,
                confirm,
                reply.into_iter().collect(),
            ),
            LoadRequest::Diff { text, label, reply } => {
                let _ = reply.send(match load(&label, &text) {
                    Loaded::Ready {
                        config,
                        restart,
                        changed,
                        ..
                    } => Ok(serde_json::json!({
                        "changed": changed,
                        "restart_required": restart,
                        "warnings": config.warnings(),
                    })),
                    Loaded::Refused(err) => Err(err),
                });
                continue;
            }
            LoadRequest::Rollback { steps, reply } => match store.back(steps) {
                Ok((kept, text)) => (
                    load(&kept.path, &text),
                    Source::Rollback(steps),
                    None,
                    vec![reply],
                ),
                Err(err) => {
                    let _ = reply.send(Err(err));
                    continue;
                }
            },
        };
        let previous = running_file.clone();
        if let Loaded::Ready { config, file, .. } = &loaded {
            running = (**config).clone();
            running_file = file.clone();
            keep(file);
        }
        on_loaded(LoadResult {
            loaded,
            source,
            confirm,
            replies,
            previous,
        });
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How long the config file must go without a write before it is read: long enough for an
/// editor or a slow copy that writes in chunks to finish, short enough to feel immediate.
/// Writers that cannot promise to finish in time replace the file atomically (README, Reload).
pub const QUIET_BEFORE_RELOAD: Duration = Duration::from_millis(500);

/// Watches the config file and calls `on_quiet` once it has been written, renamed over or
/// recreated and then left alone for `quiet`. Editors and config-management tools replace
/// files in several ways, so the directory is watched. Dropping the `FileWatch` ends it.
pub struct FileWatch {
    /// Owns the sender the debouncer listens to: dropped first, it ends the debouncer.
    watcher: Option<notify::RecommendedWatcher>,
    debouncer: Option<std::thread::JoinHandle<()>>,
}

pub fn watch_file(
    path: &Path,
    quiet: Duration,
    on_quiet: impl Fn() + Send + 'static,
) -> notify::Result<FileWatch> {
    let file: PathBuf = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let name = file.file_name().map(|n| n.to_os_string());
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let (writes, written) = crossbeam_channel::unbounded::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if !(event.kind.is_modify() || event.kind.is_create()) {
            return;
        }
        if event
            .paths
            .iter()
            .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        {
            let _ = writes.send(());
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    let debouncer = std::thread::Builder::new()
        .name("config-watch".into())
        .spawn(move || debounce(&written, quiet, on_quiet))
        .map_err(|err| notify::Error::generic(&format!("starting the debounce thread: {err}")))?;
    Ok(FileWatch {
        watcher: Some(watcher),
        debouncer: Some(debouncer),
    })
}

/// Calls `on_quiet` once per burst of writes, `quiet` after the last one. Returns when the
/// watcher is gone.
fn debounce(written: &Receiver<()>, quiet: Duration, on_quiet: impl Fn()) {
    while written.recv().is_ok() {
        loop {
            match written.recv_timeout(quiet) {
                Ok(()) => continue,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        on_quiet();
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        drop(self.watcher.take());
        if let Some(debouncer) = self.debouncer.take() {
            let _ = debouncer.join();
        }
    }
}

#[cfg(test)]
mod tests;
