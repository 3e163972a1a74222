use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::error::{DpdkError, Result};
use super::ids::{LcoreId, SocketId};

/// What the EAL is started with. Built from the gateway's config; `to_argv` is the one place
/// that turns it into DPDK's command line.
#[derive(Clone, Debug, Default)]
pub struct EalArgs {
    /// Lcores the EAL may use; the first is the main (control) lcore, the rest run workers.
    pub lcores: Vec<LcoreId>,
    /// The CPU of each lcore, in the same order; empty means lcore N on CPU N.
    pub cpus: Vec<u32>,
    /// Run without hugepages (`--no-huge`), with `memory_mb` of ordinary memory.
    pub no_huge: bool,
    /// Memory to reserve in MiB (`-m`); 0 lets the EAL decide. Not passed when
    /// `socket_memory_mb` is (DPDK refuses the two together).
    pub memory_mb: u32,
    /// MiB per NUMA node, node 0 first (`--socket-mem`); with hugepages only.
    pub socket_memory_mb: Vec<u32>,
    /// Keep no files in /var/run or hugetlbfs (`--in-memory`), so nothing is left behind.
    pub in_memory: bool,
    /// Separates this process's shared files from another DPDK process's (`--file-prefix`).
    pub file_prefix: Option<String>,
    /// Virtual devices, e.g. `net_af_packet0,iface=veth0` (`--vdev`).
    pub vdevs: Vec<String>,
    /// PCI devices to use (`-a`); with none and `no_pci`, the PCI bus is not scanned.
    pub pci_allow: Vec<String>,
    pub no_pci: bool,
    /// EAL log level, e.g. `notice` or `lib.eal:debug`.
    pub log_level: Option<String>,
    /// Anything else, passed through verbatim after the above.
    pub extra: Vec<String>,
}

impl EalArgs {
    pub fn to_argv(&self) -> Vec<String> {
        let mut argv = vec!["gateway".to_string()];
        if !self.lcores.is_empty() {
            let list: Vec<String> = if self.cpus.len() == self.lcores.len() {
                self.lcores
                    .iter()
                    .zip(&self.cpus)
                    .map(|(lcore, cpu)| format!("{}@{cpu}", lcore.0))
                    .collect()
            } else {
                self.lcores.iter().map(|l| l.0.to_string()).collect()
            };
            argv.push(format!("--lcores={}", list.join(",")));
            argv.push(format!("--main-lcore={}", self.lcores[0].0));
        }
        if self.no_huge {
            argv.push("--no-huge".into());
        }
        if !self.socket_memory_mb.is_empty() && !self.no_huge {
            let per_node: Vec<String> = self.socket_memory_mb.iter().map(u32::to_string).collect();
            argv.push(format!("--socket-mem={}", per_node.join(",")));
        } else if self.memory_mb > 0 {
            argv.push(format!("-m{}", self.memory_mb));
        }
        if self.in_memory && self.no_huge {
            // --no-huge implies legacy memory, which --in-memory refuses; without hugepages
            // the only file left behind would be the shared config, so skip that instead.
            argv.push("--no-shconf".into());
        } else if self.in_memory {
            argv.push("--in-memory".into());
        }
        if let Some(prefix) = &self.file_prefix {
            argv.push(format!("--file-prefix={prefix}"));
        }
        if self.no_pci {
            argv.push("--no-pci".into());
        }
        argv.extend(self.pci_allow.iter().map(|dev| format!("-a{dev}")));
        argv.extend(self.vdevs.iter().map(|dev| format!("--vdev={dev}")));
        if let Some(level) = &self.log_level {
            argv.push(format!("--log-level={level}"));
        }
        argv.extend(self.extra.iter().cloned());
        argv
    }
}

/// The memory option pairs DPDK 22.11's EAL refuses to start with (`eal_check_common_options`
/// and the Linux EAL's memory init), checked before `rte_eal_init` so a config that would
/// trip them fails with the pair named instead of DPDK's log line. `--no-huge` implies
/// legacy memory.
pub fn check_option_rules(argv: &[String]) -> std::result::Result<(), String> {
    let has = |option: &str| argv.iter().any(|arg| gives_option(arg, option));
    let legacy = has("--legacy-mem") || has("--no-huge");
    let refused = [
        (
            has("-m") && has("--socket-mem"),
            "-m and --socket-mem cannot be given together",
        ),
        (
            has("--no-huge") && has("--socket-mem"),
            "--socket-mem needs hugepages, not --no-huge",
        ),
        (
            legacy && has("--socket-limit"),
            "--socket-limit needs dynamic memory, not --legacy-mem or --no-huge",
        ),
        (
            legacy && has("--in-memory"),
            "--in-memory is incompatible with --legacy-mem and --no-huge",
        ),
    ];
    match refused.iter().find(|(broken, _)| *broken) {
        Some((_, rule)) => Err(format!("EAL arguments {argv:?}: {rule}")),
        None => Ok(()),
    }
}

/// Whether the argument `arg` is the EAL option `option`: `--name`, `--name=value`, or for
/// the short `-m` also `-m512`.
pub fn gives_option(arg: &str, option: &str) -> bool {
    let long = option.starts_with("--");
    arg == option
        || (long
            && arg
                .strip_prefix(option)
                .is_some_and(|rest| rest.starts_with('=')))
        || (!long && arg.starts_with(option) && !arg.starts_with("--"))
}

static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// The running EAL: the proof, required by every constructor of the safe layer (pools, rings,
/// ports, lcore launches), that `rte_eal_init` succeeded. There is at most one per process
/// and it cannot be cloned or built but by [`Eal::init`].
///
/// Everything made from it holds a share of it ([`EalHold`]), so `rte_eal_cleanup` runs when
/// the last of them is gone, whatever order the owner drops them in: after every port, ring
/// and pool, never under them.
///
/// ```compile_fail
/// // No EAL without rte_eal_init: the token's fields are private.
/// let eal = gateway::dpdk::Eal { guard: todo!() };
/// ```
pub struct Eal {
    guard: Arc<EalGuard>,
}

/// A share of the EAL, kept by each object made from it. Not public: only the layer's
/// constructors take one, from a borrowed [`Eal`].
#[derive(Clone)]
pub(crate) struct EalHold(#[allow(dead_code)] Arc<EalGuard>);

impl EalHold {
    /// Keeps the EAL up until the process exits: for an object that must not be freed (a
    /// pool with mbufs still out, an lcore that may still run), whose memory must stay mapped.
    pub(crate) fn keep_until_exit(self) {
        std::mem::forget(self);
    }
}

/// Runs `rte_eal_cleanup` when the last share is dropped.
struct EalGuard {
    main_lcore: u32,
}

impl Drop for EalGuard {
    fn drop(&mut self) {
        // DPDK wants cleanup from the main lcore. If the last share goes away on another
        // thread, leave the EAL to the process exit rather than tear it down from there.
        if Eal::current_lcore() != Some(LcoreId(self.main_lcore)) {
            tracing::warn!(
                main_lcore = self.main_lcore,
                "the EAL's last user went away off the main lcore; EAL cleanup left to the exit"
            );
            return;
        }
        // SAFETY: this is the last share of the EAL: every port, ring, pool and launched lcore
        // made from it is gone (each held a share), and we are on the main lcore. Runs once.
        let ret = unsafe { dpdk_sys::rte_eal_cleanup() };
        if ret < 0 {
            tracing::warn!(error = %DpdkError::from_errno("rte_eal_cleanup", ret), "EAL cleanup");
        }
    }
}

impl Eal {
    pub fn init(args: &EalArgs) -> Result<Eal> {
        let argv = args.to_argv();
        check_option_rules(&argv).map_err(|detail| DpdkError::Invalid {
            what: "EAL arguments",
            detail,
        })?;
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::Invalid {
                what: "EAL",
                detail: "already initialised in this process; DPDK allows one EAL per process"
                    .into(),
            });
        }
        tracing::info!(args = %argv.join(" "), "starting the DPDK EAL");
        // The EAL keeps pointers into argv (devargs, for one) for the life of the process,
        // so the strings are leaked on purpose: once per process, a few hundred bytes.
        let mut raw: Vec<*mut c_char> = argv
            .into_iter()
            .map(|arg| {
                CString::new(arg)
                    .map(CString::into_raw)
                    .map_err(|_| DpdkError::Invalid {
                        what: "EAL argument",
                        detail: "contains a NUL byte".into(),
                    })
            })
            .collect::<Result<_>>()?;
        let argc = raw.len() as c_int;
        raw.push(std::ptr::null_mut());
        let raw: &'static mut [*mut c_char] = raw.leak();
        // SAFETY: argv is a NULL-terminated array of valid, leaked C strings that outlive
        // the process, and the EAL is started at most once (guarded above).
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, raw.as_mut_ptr()) };
        if ret < 0 {
            return Err(DpdkError::last("rte_eal_init"));
        }
        // SAFETY: the EAL is up; reads a value set at init.
        let main_lcore = unsafe { dpdk_sys::rte_get_main_lcore() };
        Ok(Eal {
            guard: Arc::new(EalGuard { main_lcore }),
        })
    }

    /// A share for an object made from the EAL, which keeps the EAL up while it lives.
    pub(crate) fn hold(&self) -> EalHold {
        EalHold(self.guard.clone())
    }

    /// The NUMA node an lcore runs on; `ANY` when DPDK does not know.
    pub fn lcore_socket(&self, lcore: LcoreId) -> SocketId {
        // SAFETY: a read of EAL state set at init; an unknown lcore gives an invalid socket.
        let socket = unsafe { dpdk_sys::rte_lcore_to_socket_id(lcore.0) };
        if socket >= dpdk_sys::RTE_MAX_NUMA_NODES {
            return SocketId::ANY;
        }
        SocketId::from_raw(socket as i32)
    }

    /// The lcore the calling thread runs as, if it is an EAL thread.
    pub fn current_lcore() -> Option<LcoreId> {
        // SAFETY: reads a thread-local; returns LCORE_ID_ANY for non-EAL threads.
        let id = unsafe { dpdk_sys::shim_rte_lcore_id() };
        (id != dpdk_sys::LCORE_ID_ANY).then_some(LcoreId(id))
    }

    /// The worker lcores the EAL was given (every enabled lcore except the main one).
    pub fn worker_lcores(&self) -> Vec<LcoreId> {
        let mut lcores = Vec::new();
        // SAFETY: iterating enabled lcores is a read of EAL state set at init.
        let mut id = unsafe { dpdk_sys::rte_get_next_lcore(u32::MAX, 1, 0) };
        while id < dpdk_sys::RTE_MAX_LCORE {
            lcores.push(LcoreId(id));
            // SAFETY: as above.
            id = unsafe { dpdk_sys::rte_get_next_lcore(id, 1, 0) };
        }
        lcores
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcores_can_be_placed_on_cpus() {
        let args = EalArgs {
            lcores: vec![LcoreId(0), LcoreId(1), LcoreId(2)],
            cpus: vec![0, 1, 1],
            ..Default::default()
        };
        assert_eq!(args.to_argv()[1], "--lcores=0@0,1@1,2@1");
    }

    #[test]
    fn socket_memory_replaces_the_total_and_falls_back_to_it_without_hugepages() {
        let mut args = EalArgs {
            memory_mb: 2048,
            socket_memory_mb: vec![2048, 0],
            in_memory: true,
            ..Default::default()
        };
        let argv = args.to_argv();
        assert!(
            argv.contains(&"--socket-mem=2048,0".to_string()),
            "{argv:?}"
        );
        assert!(!argv.iter().any(|arg| arg.starts_with("-m")), "{argv:?}");
        assert_eq!(check_option_rules(&argv), Ok(()));
        args.no_huge = true;
        let argv = args.to_argv();
        assert!(argv.contains(&"-m2048".to_string()), "{argv:?}");
        assert_eq!(check_option_rules(&argv), Ok(()));
    }

    #[test]
    fn option_rules_refuse_what_dpdk_refuses() {
        let argv = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        for refused in [
            &["gateway", "-m2048", "--socket-mem=2048,0"][..],
            &["gateway", "-m", "2048", "--socket-mem", "2048"],
            &["gateway", "--no-huge", "--socket-mem=512"],
            &["gateway", "--no-huge", "--socket-limit=512"],
            &["gateway", "--legacy-mem", "--in-memory"],
        ] {
            assert!(check_option_rules(&argv(refused)).is_err(), "{refused:?}");
        }
        for accepted in [
            &["gateway", "-m2048", "--in-memory"][..],
            &[
                "gateway",
                "--socket-mem=2048,0",
                "--socket-limit=4096,0",
                "--in-memory",
            ],
            &[
                "gateway",
                "--no-huge",
                "-m256",
                "--no-shconf",
                "--match-allocations",
            ],
        ] {
            assert_eq!(check_option_rules(&argv(accepted)), Ok(()), "{accepted:?}");
        }
    }

    #[test]
    fn argv_comes_from_the_fields() {
        let args = EalArgs {
            lcores: vec![LcoreId(0), LcoreId(1)],
            no_huge: true,
            memory_mb: 256,
            in_memory: true,
            file_prefix: Some("gw1".into()),
            vdevs: vec!["net_null0".into()],
            no_pci: true,
            ..Default::default()
        };
        assert_eq!(
            args.to_argv(),
            [
                "gateway",
                "--lcores=0,1",
                "--main-lcore=0",
                "--no-huge",
                "-m256",
                "--no-shconf",
                "--file-prefix=gw1",
                "--no-pci",
                "--vdev=net_null0"
            ]
        );
    }
}
