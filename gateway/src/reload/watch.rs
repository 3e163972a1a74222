//! Watching the config file: a reload once it was written and then stayed quiet.

use super::*;

/// How long the config file must go without a write before it is read: long enough for an
/// editor or a slow copy that writes in chunks to finish, short enough to feel immediate.
/// Writers that cannot promise to finish in time replace the file atomically (docs/operations.md, Reload).
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
pub(crate) fn debounce(written: &Receiver<()>, quiet: Duration, on_quiet: impl Fn()) {
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
