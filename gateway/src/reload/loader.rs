//! The `config-load` thread: loads (file changes, SIGHUP, `gateway ctl config` diffs, applies
//! and rollbacks) off the control thread, one at a time, each answered with a `LoadResult`.

use super::*;

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

pub(crate) fn serve_loads(
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
