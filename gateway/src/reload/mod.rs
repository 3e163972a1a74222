//! Config reload: on SIGHUP or when the file changes and then stays quiet for a moment. The
//! new file is read whole, parsed and validated first; if it is bad, nothing changes. Settings that need a restart (EAL, pools, workers,
//! the set of interfaces) are reported and kept as they are; everything else applies.
//! The reading, parsing and compiling (category files can hold millions of domains) happen
//! on the `config-load` thread ([`Loader`]); the control thread only publishes the result, so
//! ARP and held packets are served meanwhile.
//!
//! Here: `load` (read, parse, validate, compile), `watch` (the file), `diff` (what needs a
//! restart), `loader` (the thread), `status` (for the metrics). Publishing what loaded is the
//! running gateway's: `crate::runtime` (`apply`), which also answers `gateway ctl config`.

mod diff;
mod load;
mod loader;
pub mod status;
mod watch;

pub use diff::*;
pub use load::*;
pub use loader::*;
pub use watch::*;

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

#[cfg(test)]
mod tests;
