use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use gateway::config::{GatewayConfig, DEFAULT_CTL_SOCKET};
use gateway::ctl::{FilterSpec, Request, DEFAULT_FLOW_LIMIT};

/// Where `run`, `check-config` and `healthcheck` read the config unless told otherwise: the
/// path the systemd unit, the container and docs/deployment.md install it at.
const DEFAULT_CONFIG: &str = "/etc/gateway/gateway.toml";

/// A DPDK gateway: routing, stateful firewall and NAT44 at line rate.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the gateway with a config file (the lab's: `run -c configs/lab.toml`).
    Run {
        #[arg(short, long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Validate a config file without starting anything: `check-config FILE` or
    /// `check-config -c FILE`, as `run` takes it.
    #[command(group(clap::ArgGroup::new("file_or_config").args(["file", "config"])))]
    CheckConfig {
        /// The config file (default: /etc/gateway/gateway.toml, as for `run`).
        #[arg(value_name = "CONFIG")]
        file: Option<PathBuf>,
        /// The config file, as `run -c` takes it.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Exit 0 if the gateway this config describes serves its metrics (at metrics.listen),
    /// 1 if not: for a container's HEALTHCHECK.
    Healthcheck {
        #[arg(short, long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Ask the running gateway (over its ctl.socket): show flows, drops, workers, interfaces,
    /// routes, uplinks, neighbors, config, rules or nat; trace packets; clear flows; change
    /// the config (diff, apply, confirm, rollback, reload); capture packets.
    Ctl {
        /// The running gateway's `ctl.socket`.
        #[arg(long, default_value = DEFAULT_CTL_SOCKET)]
        socket: PathBuf,
        /// Print the gateway's JSON answer instead of a table.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: CtlCommand,
    },
    /// Measure the worker loop on synthetic traffic (no NIC): Mpps, cycles per packet, flow
    /// setup rate and memory per flow.
    Bench {
        /// Concurrent established flows.
        #[arg(long, default_value_t = 1_000_000)]
        flows: u32,
        /// Percent of outbound packets that open a new flow in the mixed run.
        #[arg(long, default_value_t = 10)]
        new_percent: u32,
        /// Seconds per measured run.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Percent of the replies from the WAN replaced by spoofed SYNs at a port forward in
        /// the SYN-flood run (replies are half the packets: 2 is 1% of all).
        #[arg(long, default_value_t = 2)]
        syn_percent: u32,
        /// Run only the flow setup and the SYN-flood runs.
        #[arg(long)]
        syn_flood_only: bool,
        /// After the usual runs, the established runs (NAT44+SPI, and with every feature)
        /// again at each of these flow counts, a table of their own (`sweep` in --json).
        #[arg(long, value_delimiter = ',', value_name = "FLOWS,...")]
        flows_list: Vec<u32>,
        /// The sweep: --flows-list 10000,1000000,4000000,16000000, then issue 47's targets
        /// (`targets` in --json).
        #[arg(long, conflicts_with = "flows_list")]
        sweep: bool,
        /// After the usual runs, the established flows through 1, 2, 4, ... up to N worker
        /// loops on this one core, packets on the queue RSS picks, handed to the flow's owner
        /// when it is another worker (`handoff_scaling` in --json).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
        workers: Option<u16>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Show flows, drops, workers, interfaces, routes, uplinks, neighbors, config, rules or
    /// nat.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Follow the next COUNT packets matching the filter through the pipeline: their flow or
    /// the firewall's decision on a new one, the NAT rewrite, the verdict.
    Trace {
        #[arg(default_value_t = 1)]
        count: usize,
        #[command(flatten)]
        filter: FlowFilterArgs,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
    },
    /// End flows (their NAT ports are released; their next packet is a new flow).
    Clear {
        #[command(subcommand)]
        what: Clear,
    },
    /// Change the running config safely: diff, apply (with commit-confirm), confirm,
    /// rollback, reload.
    Config {
        #[command(subcommand)]
        what: ConfigCommand,
    },
    /// Capture an interface's packets, received and sent, into a pcapng file, with DPDK's
    /// dpdk-dumpcap (needs eal.pdump = true); or, with --drops, the packets the workers
    /// drop for those reasons, as they arrived, on any interface. Stops at the first of
    /// --count, --seconds and --max-kib.
    Capture {
        /// The interface, as the config names it (a VLAN subinterface: its port, its tag).
        #[arg(long, required_unless_present = "drops", conflicts_with = "drops")]
        interface: Option<String>,
        /// A libpcap filter, e.g. 'host 192.168.10.5 and tcp port 443'.
        #[arg(long, conflicts_with = "drops")]
        filter: Option<String>,
        /// Capture dropped packets instead: drop reasons as `show drops` names them,
        /// comma-separated (e.g. conntrack_invalid,firewall_drop); at most 1,000 packets.
        #[arg(long, value_delimiter = ',')]
        drops: Option<Vec<String>>,
        #[arg(long, default_value_t = 1000)]
        count: u64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 100 * 1024)]
        max_kib: u64,
        /// The pcapng file to write.
        #[arg(short = 'w', long = "write")]
        output: PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// What applying FILE would change, setting by setting, and what would wait for a
    /// restart; nothing is applied. Exits 1 if FILE would be refused, naming the field.
    Diff { file: PathBuf },
    /// Apply FILE to the running gateway, validated whole, or nothing (exit 1 and the field).
    /// The file on disk is not touched: the gateway keeps what it applies in its state
    /// directory, and a restart reads its config file again.
    Apply {
        file: PathBuf,
        /// Roll back unless `gateway ctl config confirm` comes within SECONDS.
        #[arg(long, value_name = "SECONDS")]
        confirm: Option<u64>,
    },
    /// Keep the config an `apply --confirm` put in force.
    Confirm,
    /// Back to the config applied STEPS changes before the running one (`show config`
    /// lists those kept).
    Rollback {
        #[arg(default_value_t = 1)]
        steps: usize,
    },
    /// Reload the config file and wait for the verdict: exit 0 if it applied, 1 if it was
    /// refused (systemd's ExecReload).
    Reload,
}

#[derive(Subcommand)]
enum Show {
    /// The flows matching every filter given, on every worker.
    Flows {
        #[command(flatten)]
        filter: FlowFilterArgs,
        /// List at most this many (all matches are counted).
        #[arg(long, default_value_t = DEFAULT_FLOW_LIMIT)]
        limit: usize,
    },
    /// Dropped packets by worker and reason (the non-zero ones).
    Drops,
    /// Each worker's packets, busy share, handoffs and flow table.
    Workers,
    /// Each interface's address, MAC, MTU, link and counters.
    Interfaces,
    /// The routing table (connected, static and kernel routes).
    Routes,
    /// The uplinks ([[uplinks]]): next hop, share, state and health checks.
    Uplinks,
    /// The resolved neighbours (ARP).
    Neighbors,
    /// The running config (version, SHA-256) and what the latest reloads changed.
    Config,
    /// The firewall rules in force, in order, with the first packets each decided.
    Rules,
    /// NAT bindings and how many each internal host holds (who holds the NAT ports).
    Nat {
        /// Only this internal host's bindings.
        #[arg(long)]
        host: Option<std::net::Ipv4Addr>,
        /// List at most this many (all matches are counted).
        #[arg(long, default_value_t = DEFAULT_FLOW_LIMIT)]
        limit: usize,
    },
}

#[derive(Subcommand)]
enum Clear {
    /// The flows matching every filter given; --all for every flow.
    Flows {
        #[command(flatten)]
        filter: FlowFilterArgs,
        /// Every flow on every worker.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Args)]
struct FlowFilterArgs {
    /// An address either tuple names (a host, its NAT address, or its peer).
    #[arg(long)]
    host: Option<std::net::Ipv4Addr>,
    /// A port either tuple names.
    #[arg(long)]
    port: Option<u16>,
    /// tcp, udp, icmp or a protocol number.
    #[arg(long)]
    protocol: Option<String>,
    /// A TCP state: syn_sent, syn_recv, established, fin_wait, close_wait, last_ack,
    /// time_wait, close.
    #[arg(long)]
    state: Option<String>,
}

impl FlowFilterArgs {
    fn spec(self) -> FilterSpec {
        FilterSpec {
            host: self.host,
            port: self.port,
            protocol: self.protocol,
            state: self.state,
        }
    }
}

fn ctl(socket: &std::path::Path, json: bool, command: CtlCommand) -> anyhow::Result<()> {
    let request = match command {
        CtlCommand::Capture {
            drops: Some(reasons),
            count,
            seconds,
            output,
            ..
        } => {
            let request = Request::CaptureDrops {
                reasons,
                count: usize::try_from(count).unwrap_or(usize::MAX),
                timeout_ms: seconds.saturating_mul(1000),
            };
            let reply = gateway::ctl::client::request(socket, &request)?;
            let written = gateway::ctl::drop_capture::write_pcapng(&reply, &output)?;
            eprintln!("{written} dropped packets written to {}", output.display());
            return Ok(());
        }
        // clap requires one of the two.
        CtlCommand::Capture {
            interface: None, ..
        } => anyhow::bail!("capture: name --interface, or --drops"),
        CtlCommand::Capture {
            interface: Some(interface),
            filter,
            count,
            seconds,
            max_kib,
            output,
            ..
        } => {
            let target =
                gateway::ctl::client::request(socket, &Request::CaptureTarget { interface })?;
            let capture = gateway::ctl::capture::Capture {
                filter,
                count,
                seconds,
                max_kib,
                output,
            };
            return Ok(gateway::ctl::capture::run(&target, &capture)?);
        }
        CtlCommand::Show { what } => match what {
            Show::Flows { filter, limit } => Request::ShowFlows {
                filter: filter.spec(),
                limit,
            },
            Show::Drops => Request::ShowDrops,
            Show::Workers => Request::ShowWorkers,
            Show::Interfaces => Request::ShowInterfaces,
            Show::Routes => Request::ShowRoutes,
            Show::Uplinks => Request::ShowUplinks,
            Show::Neighbors => Request::ShowNeighbors,
            Show::Config => Request::ShowConfig,
            Show::Rules => Request::ShowRules,
            Show::Nat { host, limit } => Request::ShowNat { host, limit },
        },
        CtlCommand::Trace {
            count,
            filter,
            timeout,
        } => Request::Trace {
            filter: filter.spec(),
            count,
            timeout_ms: timeout.saturating_mul(1000),
        },
        CtlCommand::Clear {
            what: Clear::Flows { filter, all },
        } => {
            let filter = filter.spec();
            if filter.is_empty() != all {
                anyhow::bail!("clear flows needs a filter (--host, --port, --protocol, --state) or --all, not both");
            }
            Request::ClearFlows { filter }
        }
        CtlCommand::Config { what } => match what {
            ConfigCommand::Diff { file } => {
                let (path, text) = read_for_ctl(&file)?;
                Request::ConfigDiff { path, text }
            }
            ConfigCommand::Apply { file, confirm } => {
                let (path, text) = read_for_ctl(&file)?;
                Request::ConfigApply {
                    path,
                    text,
                    confirm_secs: confirm,
                }
            }
            ConfigCommand::Confirm => Request::ConfigConfirm,
            ConfigCommand::Rollback { steps } => Request::ConfigRollback { steps },
            ConfigCommand::Reload => Request::ConfigReload,
        },
    };
    let answer = gateway::ctl::client::request(socket, &request)?;
    gateway::ctl::client::print(&request, &answer, json)
}

/// A config file for `ctl config diff | apply`: its absolute path (for messages and the
/// record) and its text, sent to the gateway, which may not see the operator's files.
fn read_for_ctl(file: &std::path::Path) -> anyhow::Result<(PathBuf, String)> {
    let text = std::fs::read_to_string(file)
        .map_err(|err| anyhow::anyhow!("reading {}: {err}", file.display()))?;
    let path = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    Ok((path, text))
}

/// `gateway check-config`: refuse what start would refuse; warn of what starts but is
/// probably not meant (on stderr, the file still passes).
fn check_config(path: &std::path::Path) -> anyhow::Result<()> {
    let loaded = GatewayConfig::load(path)?;
    gateway::compile::router::check_startable(&loaded)?;
    for warning in loaded.warnings() {
        eprintln!("warning: {warning}");
    }
    println!("{}: ok", path.display());
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => gateway::runtime::run(&config),
        Command::Bench {
            flows,
            new_percent,
            seconds,
            syn_percent,
            syn_flood_only,
            flows_list,
            sweep,
            workers,
            json,
        } => gateway::bench::run(&gateway::bench::BenchOptions {
            flows: flows.max(1),
            new_percent: new_percent.min(100),
            seconds,
            syn_percent: syn_percent.min(100),
            syn_flood_only,
            flows_list: if sweep {
                gateway::bench::SWEEP_FLOWS.to_vec()
            } else {
                flows_list
            },
            workers,
            json,
        }),
        Command::Ctl {
            socket,
            json,
            command,
        } => ctl(&socket, json, command),
        Command::Healthcheck { config } => GatewayConfig::load(&config)
            .map_err(anyhow::Error::from)
            .and_then(|loaded| Ok(gateway::telemetry::healthcheck::check(&loaded.metrics)?)),
        Command::CheckConfig { file, config } => check_config(
            &file
                .or(config)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG)),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// A command's help names each of its subcommands (clap lists them itself; the `about`
    /// line, which the parent's help shows alone, must not fall behind).
    fn about_names_every_subcommand(path: &[&str]) {
        let mut command = Cli::command();
        for name in path {
            command = command
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {name}"))
                .clone();
        }
        let about = command.get_about().expect("an about line").to_string();
        let missing: Vec<&str> = command
            .get_subcommands()
            .map(|sub| sub.get_name())
            .filter(|name| !about.contains(name))
            .collect();
        assert!(
            missing.is_empty(),
            "`{}`'s help does not name {missing:?}: {about}",
            path.join(" ")
        );
    }

    #[test]
    fn the_ctl_help_names_every_subcommand() {
        about_names_every_subcommand(&["ctl"]);
        about_names_every_subcommand(&["ctl", "show"]);
        about_names_every_subcommand(&["ctl", "config"]);
    }

    #[test]
    fn every_subcommand_reads_one_default_config() {
        let command = Cli::command();
        for name in ["run", "healthcheck"] {
            let sub = command.find_subcommand(name).unwrap();
            let config = sub
                .get_arguments()
                .find(|a| a.get_id() == "config")
                .unwrap();
            let defaults: Vec<_> = config.get_default_values().iter().collect();
            assert_eq!(defaults, [super::DEFAULT_CONFIG], "{name}");
        }
        Cli::command().debug_assert();
    }
}
