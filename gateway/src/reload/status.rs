//! The outcome of config reloads, for the metrics (`gateway_config_reload_*`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The outcome of config reloads, written by the control thread.
#[derive(Debug, Default)]
pub struct ReloadStatus {
    pub last_success: AtomicBool,
    pub last_timestamp_seconds: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
}

impl ReloadStatus {
    pub fn new() -> Self {
        let status = ReloadStatus::default();
        status.last_success.store(true, Ordering::Relaxed);
        status
    }

    pub fn record(&self, success: bool) {
        self.last_success.store(success, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.last_timestamp_seconds.store(now, Ordering::Relaxed);
        let counter = if success {
            &self.succeeded
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
