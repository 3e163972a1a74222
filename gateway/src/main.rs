use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gateway::config::GatewayConfig;

/// A DPDK gateway: routing, stateful firewall and NAT44 at line rate.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the gateway with a config file.
    Run {
        #[arg(short, long, default_value = "configs/lab.toml")]
        config: PathBuf,
    },
    /// Validate a config file without starting anything.
    CheckConfig { config: PathBuf },
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
        /// Percent of generated packets that are spoofed SYNs at a port forward in the
        /// SYN-flood run.
        #[arg(long, default_value_t = 2)]
        syn_percent: u32,
        /// Run only the flow setup and the SYN-flood runs.
        #[arg(long)]
        syn_flood_only: bool,
        /// After the usual runs, the established runs (NAT44+SPI, and with every feature)
        /// again at each of these flow counts, a table of their own (`sweep` in --json).
        #[arg(long, value_delimiter = ',', value_name = "FLOWS,...")]
        flows_list: Vec<u32>,
        /// The CSIT-like sweep: --flows-list 65536,1000000,4000000.
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
        Command::Run { config } => gateway::app::run(&config),
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
        Command::CheckConfig { config } => GatewayConfig::load(&config)
            .map_err(anyhow::Error::from)
            .and_then(|loaded| gateway::pipeline_config::check_startable(&loaded))
            .map(|()| println!("{}: ok", config.display())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
