//! `gateway bench`: the real worker loop (`WorkerLoop::poll_once`, with rx_burst, the
//! pipeline and tx_burst) on synthetic traffic, without a NIC. Two net_ring ports stand in for
//! LAN and WAN. Between polls, a generator on the same core turns what the gateway sent into
//! the next packets: outbound UDP from LAN hosts becomes, once masqueraded, a reply from the
//! remote end, and each reply delivered to the LAN becomes the next outbound packet. Only the
//! cycles inside `poll_once` are counted; the generator's are not.
//!
//! The I/O floor is the same traffic through a loop of the bench's own (`floor::IoFloor`):
//! the worker's rx_burst and tx_burst on ring ports of its own, with the pipeline left out.
//!
//! The same flows are then run again with every feature a router review switches on (QoS,
//! the traffic meter, keyword block, parental control), published to the worker the way a
//! reload publishes them: the difference is the features' cost per packet.
//!
//! Two labs with a second WAN port (`uplinks`) compare two uplinks sharing the default route
//! with one: the established flows' cost and a new flow's.
//!
//! Last, a SYN flood, on a table of its own holding the established flows alone: rounds of
//! the established flows alternate with rounds where a share of the replies from the WAN is
//! replaced by SYNs from random (spoofed) sources toward a TCP port forward, at a half-open
//! limit the flood soon reaches. The flood must leave the established flows at
//! least 95% of their packet rate per worker cycle, and refuse none of their packets.

mod capture;
mod floor;
mod lab;
mod series;
mod targets;
mod traffic;
mod uplinks;

use std::mem::size_of;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pipeline::pipeline::operator::flow_listing::FlowFilter;
use pipeline::state::conntrack::BYTES_PER_FLOW;
use pipeline::state::flow_data::FlowData;
use pipeline::{DropReason, WorkerCounters};

use crate::dataplane::ctl_link::SLOTS_PER_LOOP;
use crate::dataplane::handoff::HandoffLinks;
use crate::dpdk::{self, Eal, EalArgs, LcoreId, MbufBatch, Mempool, SocketId, BURST_SIZE};
use lab::{Lab, LabKind};
use traffic::{features, router_config, shaper_features, FRAME6_LEN, FRAME_LEN, HOSTS};

pub use series::SWEEP_FLOWS;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Concurrent established flows.
    pub flows: u32,
    /// Percent of outbound packets that open a brand-new flow in the mixed run.
    pub new_percent: u32,
    /// Seconds per measured run.
    pub seconds: f64,
    /// Percent of the replies from the WAN replaced by spoofed SYNs in the SYN-flood run (the
    /// replies are half the packets: 2 is 1% of all).
    pub syn_percent: u32,
    /// Only the flow setup and the SYN-flood pair of runs.
    pub syn_flood_only: bool,
    /// After the usual runs, the established runs again at each of these flow counts (the
    /// sweep; none when empty).
    pub flows_list: Vec<u32>,
    /// After the usual runs, the established flows through 1, 2, 4, ... up to this many
    /// workers on this core, with RSS misdirecting packets to non-owners (none when None).
    pub workers: Option<u16>,
    pub json: bool,
}

/// A row in `--json`: its name, packets, Mpps, ns and cycles per packet.
fn row_json(row: &Row, hz: u64) -> String {
    let cpp = row.cycles_per_packet();
    format!(
        "{{\"name\":\"{}\",\"packets\":{},\"mpps\":{:.3},\"ns_per_packet\":{:.2},\"cycles_per_packet\":{:.1}}}",
        row.name,
        row.packets,
        hz as f64 / cpp / 1e6,
        cpp * 1e9 / hz as f64,
        cpp
    )
}

const IN_FLIGHT: usize = 2048;

struct Row {
    name: &'static str,
    packets: u64,
    cycles: u64,
    /// Spoofed SYNs among `packets`.
    syns: u64,
    /// Of `packets`, those the receiving worker handed to the flow's owner.
    handoffs: u64,
    /// Packets waiting in the WAN RX rings when the run ended (summed over added runs):
    /// where the packets in flight sit decides how long after its outbound packet a reply
    /// comes, and so whether its flow is still in cache.
    wan_backlog: u32,
}

impl Row {
    fn cycles_per_packet(&self) -> f64 {
        self.cycles as f64 / self.packets.max(1) as f64
    }

    fn empty(name: &'static str) -> Row {
        Row {
            name,
            packets: 0,
            cycles: 0,
            syns: 0,
            handoffs: 0,
            wan_backlog: 0,
        }
    }

    fn add(&mut self, other: &Row) {
        self.packets += other.packets;
        self.cycles += other.cycles;
        self.syns += other.syns;
        self.handoffs += other.handoffs;
        self.wan_backlog += other.wan_backlog;
    }

    /// Packets of established flows per worker cycle.
    fn established_per_cycle(&self) -> f64 {
        self.packets.saturating_sub(self.syns) as f64 / self.cycles.max(1) as f64
    }
}

/// The SYN-flood pair of runs and what the flood cost.
struct SynFlood {
    baseline: Row,
    flood: Row,
    /// SYNs the gateway refused (at the half-open limits, or a table with nothing to evict).
    refused_syns: u64,
    /// SYNs the SYN proxy answered with a cookie, keeping nothing (the half-open table full).
    cookies: u64,
    /// Packets dropped for any other reason during the flood: established ones.
    refused_established: u64,
    /// Every drop during the flood by reason (the SYNs' and any other), for the verdict's
    /// message.
    refused_by_reason: Vec<(DropReason, u64)>,
    /// Half-open flows in the table at the end, and the table's limit.
    half_open: u64,
    half_open_limit: usize,
    /// Per pair of adjacent rounds, the flood's established rate over the baseline's.
    round_ratios: Vec<f64>,
}

impl SynFlood {
    /// Over all rounds: the flood's established packets per cycle over the baseline's.
    fn established_ratio(&self) -> f64 {
        self.flood.established_per_cycle() / self.baseline.established_per_cycle()
    }

    /// Packets waiting in the WAN rings at the end of one of `row`'s rounds, on average. The
    /// two kinds of rounds compare only if they are alike: a round whose packets pile up in
    /// the WAN ring answers each outbound packet thousands of packets later, from DRAM.
    fn mean_wan_backlog(&self, row: &Row) -> f64 {
        f64::from(row.wan_backlog) / self.round_ratios.len().max(1) as f64
    }

    /// The median of the per-pair ratios: what the verdict uses, since a burst of load from
    /// elsewhere on a shared machine skews the pooled ratio but only one or two pairs.
    fn median_round_ratio(&self) -> f64 {
        let mut ratios = self.round_ratios.clone();
        ratios.sort_by(f64::total_cmp);
        match ratios.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => ratios[n / 2],
            n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
        }
    }
}

/// Baseline and flood rounds of this length alternate for `--seconds`: short, so that the
/// machine's drift falls on both alike and the median has many pairs to choose from (60 in
/// a 3-second run), long enough (about 100,000 packets) that a round's rate is not noise.
const SYN_FLOOD_ROUND: Duration = Duration::from_millis(25);
/// At least this many pairs of rounds, however short `--seconds`.
const SYN_FLOOD_MIN_PAIRS: u32 = 4;

/// An IPv4 TCP frame: in the bench's traffic, only the flood's SYNs are TCP.
fn is_tcp(frame: &[u8]) -> bool {
    frame.len() > 23 && frame[12..14] == [0x08, 0x00] && frame[23] == 6
}

/// Established IPv6 flows through the stateful firewall, on a lab of their own: the same
/// flow count and hosts as the IPv4 rows, IPv6's smallest UDP datagrams, one route (the
/// default: the remotes' addresses do not scatter over a FIB as IPv4's do). Nothing may be
/// dropped.
fn ipv6_established(
    eal: &Eal,
    pool: &Arc<Mempool>,
    flows: u32,
    seconds: Duration,
) -> anyhow::Result<Row> {
    let mut lab = Lab::new(eal, pool, flows, LabKind::Ipv6)?;
    lab.set_up_flows(flows)?;
    let row = lab.steady("ipv6 spi, established flows", seconds, 0)?;
    let dropped = lab.dropped_total();
    anyhow::ensure!(
        dropped == 0,
        "the IPv6 run dropped {dropped} packets: {:?}",
        lab.drops_by_reason()
    );
    Ok(row)
}

/// The flood's SYNs in a burst the gateway sent.
fn syns_in(batch: &MbufBatch) -> u64 {
    batch.packets().filter(|frame| is_tcp(frame)).count() as u64
}

pub fn run(options: &BenchOptions) -> anyhow::Result<()> {
    const MEMORY_MB: u32 = 256;
    let no_huge = !crate::dpdk::hugetlbfs::available(MEMORY_MB);
    let eal = Eal::init(&EalArgs {
        lcores: vec![LcoreId(0)],
        no_huge,
        memory_mb: MEMORY_MB,
        in_memory: true,
        file_prefix: Some("gateway-bench".into()),
        no_pci: true,
        log_level: Some("warning".into()),
        ..Default::default()
    })?;
    let result = bench(&eal, options, no_huge);
    drop(eal);
    result
}

fn bench(eal: &Eal, options: &BenchOptions, no_huge: bool) -> anyhow::Result<()> {
    let hz = dpdk::tsc_hz();
    // The one packet pool, for every lab in turn (each lab's ports hold it).
    let pool = Arc::new(Mempool::new(
        eal,
        "bench_pool",
        16383,
        256,
        2048,
        SocketId::ANY,
    )?);
    let seconds = Duration::from_secs_f64(options.seconds);
    // The I/O floor first, on ports of its own: the same traffic, the same rx/tx bursts, no
    // pipeline.
    if options.syn_flood_only {
        let flood = syn_flood_on_own_lab(eal, &pool, options, seconds)?;
        print_syn_flood(&flood, options, hz);
        return syn_flood_verdict(&flood);
    }
    let floor = {
        let mut floor_lab = Lab::new(eal, &pool, options.flows, LabKind::Floor)?;
        floor_lab.steady("io_floor (pipeline bypassed)", seconds, 0)?
    };

    let mut lab = Lab::new(eal, &pool, options.flows, LabKind::Workers(1))?;
    // Flow setup: every packet opens a flow; nothing is reflected.
    let setup_cycles = lab.set_up_flows(options.flows)?;
    let setup_rate = options.flows as f64 / (setup_cycles as f64 / hz as f64);

    // Each run with the features on follows the same run without them, on the same table.
    let plain = Arc::new(router_config(&lab.traffic, None)?);
    let featured = Arc::new(router_config(&lab.traffic, Some(&features()?))?);
    let established = lab.steady("nat44+spi, established flows", seconds, 0)?;
    let drop_capture_armed = capture::drop_capture_armed(&mut lab, seconds)?;
    let pdump_copy = capture::PdumpCopy::measure(eal, &mut lab)?;
    lab.publish(&featured);
    let established_features = lab.steady("+ all features, established", seconds, 0)?;
    let shaping = Arc::new(router_config(&lab.traffic, Some(&shaper_features()?))?);
    lab.publish(&shaping);
    let established_shaper = lab.steady("+ all, QoS shaper, established", seconds, 0)?;
    lab.publish(&plain);
    let mixed = lab.steady(
        "nat44+spi, mix with new flows",
        seconds,
        options.new_percent,
    )?;
    lab.publish(&featured);
    let mixed_features = lab.steady("+ all features, mix", seconds, options.new_percent)?;
    // The features were on, and cost what they do without refusing the bench's traffic.
    let metered = lab.metered_hosts();
    anyhow::ensure!(
        metered > 0,
        "the traffic meter counted no host while it was on"
    );
    let policed = lab.dropped(DropReason::QosPoliced)
        + lab.dropped(DropReason::QosCodel)
        + lab.dropped(DropReason::QosQueueFull);
    let refused = lab.dropped(DropReason::ParentalBlocked);
    anyhow::ensure!(
        policed == 0 && refused == 0,
        "QoS policed {policed} and parental control refused {refused} of the bench's packets"
    );
    let handoff_cycles = handoff_cycles_per_packet(eal, &lab)?;
    let vlan_cycles = vlan_software_cycles_per_packet(&lab)?;
    let pppoe_cycles = pppoe_cycles_per_packet(&lab)?;
    let ctl_walk = CtlWalk::measure(&lab);
    let trace_idle = TraceIdle::measure();
    let rows = [
        floor,
        established,
        established_features,
        mixed,
        mixed_features,
    ];
    let drops = lab.dropped_total();
    drop(lab);
    let ipv6 = ipv6_established(eal, &pool, options.flows, seconds)?;
    let uplinks = uplinks::UplinksCost::measure(eal, &pool, options.flows, seconds)?;
    let flood = syn_flood_on_own_lab(eal, &pool, options, seconds)?;
    // Each point of a series on a lab of its own, the one before it dropped (4M flows take
    // 1.3 GB).
    let sweep = options
        .flows_list
        .iter()
        .map(|&flows| series::SweepPoint::measure(eal, &pool, flows.max(1), seconds, hz))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let scaling = match options.workers {
        Some(most) => series::worker_counts(most)
            .into_iter()
            .map(|workers| {
                series::WorkersPoint::measure(eal, &pool, workers, options.flows, seconds)
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => Vec::new(),
    };

    let memory_per_flow = BYTES_PER_FLOW + size_of::<FlowData>();
    // NICs cannot hash inside PPPoE, so a session's downstream lands on one queue, and its
    // worker spreads it by the inner flow: per packet it pays the I/O floor, the framing and
    // a handoff (an estimate from the three measurements; the framing's transmit half is
    // the owners', so it errs low).
    let pppoe_distribute =
        hz as f64 / (rows[0].cycles_per_packet() + pppoe_cycles + handoff_cycles);
    let ns_per_cycle = 1e9 / hz as f64;
    // The shaper in place of the policer, every other feature on: the shaper row less the
    // all-features row.
    let shaper_cycles = established_shaper.cycles_per_packet() - rows[2].cycles_per_packet();
    let drop_capture_cycles = drop_capture_armed.cycles_per_packet() - rows[1].cycles_per_packet();
    let cache_bytes = targets::host_last_level_cache();
    let headline = targets::headline(sweep.iter().map(|p| p.flows), memory_per_flow, cache_bytes);
    let targets = if sweep.is_empty() {
        Vec::new()
    } else {
        targets::evaluate(&targets::Figures {
            floor: &rows[0],
            established: &rows[1],
            ipv6: &ipv6,
            setup_rate,
            bytes_per_flow: memory_per_flow,
            sweep: &sweep,
            headline,
        })
    };
    if options.json {
        let rows_json: Vec<String> = rows
            .iter()
            .chain([&flood.baseline, &flood.flood, &ipv6])
            .map(|row| row_json(row, hz))
            .collect();
        let mut series = String::new();
        if !sweep.is_empty() {
            let points: Vec<String> = sweep.iter().map(|p| p.json(&rows[0], hz)).collect();
            series += &format!(",\"sweep\":[{}]", points.join(","));
            series += &format!(
                ",\"sweep_headline_flows\":{},\"last_level_cache_bytes\":{},\"targets\":{}",
                headline.map_or_else(|| "null".to_string(), |i| sweep[i].flows.to_string()),
                cache_bytes.map_or_else(|| "null".to_string(), |b| b.to_string()),
                targets::json(&targets)
            );
        }
        if let Some(one) = scaling.first() {
            let points: Vec<String> = scaling.iter().map(|p| p.json(one, hz)).collect();
            series += &format!(",\"handoff_scaling\":[{}]", points.join(","));
            if let Some(model) = series::ScalingModel::from_points(&scaling, hz) {
                series += &format!(",\"scaling_model\":{}", model.json());
            }
        }
        println!(
            "{{\"tsc_hz\":{hz},\"no_huge\":{no_huge},\"flows\":{},\"new_percent\":{},\"rows\":[{}],\"cycles_above_floor\":{:.1},\"feature_cycles_established\":{:.1},\"feature_cycles_mixed\":{:.1},\"flow_setups_per_second\":{:.0},\"bytes_per_flow\":{memory_per_flow},\"drops\":{drops},\"handoff_cycles_per_packet\":{handoff_cycles:.1},\"vlan_software_cycles_per_packet\":{vlan_cycles:.1},\"pppoe_cycles_per_packet\":{pppoe_cycles:.1},\"pppoe_distribute_packets_per_second\":{pppoe_distribute:.0},\"shaper_cycles_established\":{:.1},\"ipv6_cycles_above_floor\":{:.1},\"drop_capture_armed_cycles_established\":{drop_capture_cycles:.1},{},{},{},{},{}{series}}}",
            options.flows,
            options.new_percent,
            rows_json.join(","),
            rows[1].cycles_per_packet() - rows[0].cycles_per_packet(),
            rows[2].cycles_per_packet() - rows[1].cycles_per_packet(),
            rows[4].cycles_per_packet() - rows[3].cycles_per_packet(),
            setup_rate,
            shaper_cycles,
            ipv6.cycles_per_packet() - rows[0].cycles_per_packet(),
            syn_flood_json(&flood),
            ctl_walk.json(hz),
            trace_idle.json(),
            pdump_copy.json(),
            uplinks.json(&rows[0]),
        );
        return syn_flood_verdict(&flood);
    }
    println!(
        "gateway bench: 1 worker, {} flows over {HOSTS} LAN hosts, {FRAME_LEN}+4 byte UDP, TSC {:.2} GHz{}",
        options.flows,
        hz as f64 / 1e9,
        if no_huge { ", no hugepages" } else { "" }
    );
    println!(
        "{:<34} {:>12} {:>8} {:>10} {:>12}",
        "run", "packets", "Mpps", "ns/pkt", "cycles/pkt"
    );
    let more_rows = [
        &flood.baseline,
        &flood.flood,
        &ipv6,
        &uplinks.one,
        &uplinks.two,
    ];
    for row in rows.iter().chain(more_rows) {
        let cpp = row.cycles_per_packet();
        println!(
            "{:<34} {:>12} {:>8.2} {:>10.1} {:>12.1}",
            row.name,
            row.packets,
            hz as f64 / cpp / 1e6,
            cpp * ns_per_cycle,
            cpp
        );
    }
    println!(
        "NAT44+SPI cost above the I/O floor: {:.1} cycles/packet (established flows)",
        rows[1].cycles_per_packet() - rows[0].cycles_per_packet()
    );
    println!(
        "all features on (QoS, traffic meter, keyword block, parental control): {:+.1} cycles/packet established, {:+.1} in the mix",
        rows[2].cycles_per_packet() - rows[1].cycles_per_packet(),
        rows[4].cycles_per_packet() - rows[3].cycles_per_packet()
    );
    println!(
        "IPv6 through the stateful firewall (no NAT66, {FRAME6_LEN}+4 byte UDP): {:.1} cycles/packet above the I/O floor, established flows ({:.2} of NAT44+SPI's)",
        ipv6.cycles_per_packet() - rows[0].cycles_per_packet(),
        (ipv6.cycles_per_packet() - rows[0].cycles_per_packet())
            / (rows[1].cycles_per_packet() - rows[0].cycles_per_packet())
    );
    println!("{}", uplinks.summary(&rows[0]));
    println!(
        "QoS as a shaper instead of the policer ({}, every host's share above its load): {shaper_cycles:+.1} cycles/packet established",
        established_shaper.name
    );
    println!(
        "new-flow setup: {:.2} M flows/s per core ({:.0} cycles per flow, each with a NAT binding lookup)",
        setup_rate / 1e6,
        setup_cycles as f64 / options.flows as f64
    );
    println!(
        "memory per flow: {memory_per_flow} bytes (conntrack {BYTES_PER_FLOW} + flow data {}); dropped during the runs: {drops}",
        size_of::<FlowData>()
    );
    println!(
        "handing a packet to another worker: {handoff_cycles:.1} cycles/packet (send, flush, the owner's receive; bursts of {BURST_SIZE}, one core)"
    );
    println!(
        "802.1Q tags in software: {vlan_cycles:.1} cycles/packet (the tag taken off and the frame mapped to its VLAN on receipt, a tag put on to transmit; bursts of {BURST_SIZE})"
    );
    println!(
        "PPPoE session framing: {pppoe_cycles:.1} cycles/packet (the session checked and its 8 bytes taken off on receipt, put on to transmit; bursts of {BURST_SIZE}); one worker taking a session's downstream off its one queue and handing it to the flows' owners: {:.2} M packets/s (the I/O floor, the framing and a handoff per packet)",
        pppoe_distribute / 1e6
    );
    println!(
        "ctl capture --drops, armed: {drop_capture_cycles:+.1} cycles/packet established (every frame copied as it arrives, up to {} bytes; none of the run's packets dropped for the armed reason)",
        crate::dataplane::drop_tap::SNAPLEN
    );
    println!("{}", pdump_copy.summary());
    println!("{}", syn_flood_summary(&flood));
    println!("{}", ctl_walk.summary(hz));
    println!("{}", trace_idle.summary());
    if !sweep.is_empty() {
        series::print_sweep(&sweep, &rows[0], hz, headline);
        targets::print(&targets, cache_bytes);
    }
    if !scaling.is_empty() {
        series::print_workers(&scaling, options.flows, hz);
        if let Some(model) = series::ScalingModel::from_points(&scaling, hz) {
            model.print();
        }
    }
    syn_flood_verdict(&flood)
}

/// The SYN-flood rounds on a lab of their own, its table holding the established flows alone:
/// the mix rows leave the main lab's table full of their one-way flows (a 3-second mix opens
/// about a million), where every SYN would first have to evict one of them.
fn syn_flood_on_own_lab(
    eal: &Eal,
    pool: &Arc<Mempool>,
    options: &BenchOptions,
    seconds: Duration,
) -> anyhow::Result<SynFlood> {
    let mut lab = Lab::new(eal, pool, options.flows, LabKind::Workers(1))?;
    lab.set_up_flows(options.flows)?;
    lab.syn_flood(seconds, options.syn_percent)
}

/// Bursts through the handoff path in [`handoff_cycles_per_packet`].
const HANDOFF_BURSTS: u32 = 200_000;

/// What handing a packet to another worker adds, per packet: one worker's `send` and
/// `flush` (its batch for the owner, one SPSC rte_ring enqueue per burst) and the owner's
/// `receive` (the dequeue), in bursts of 32, both ends on this core. Across cores each burst
/// also moves the ring's cache lines and the mbufs' headers to the other core; the pipeline's
/// own decision to hand off is counted by `make instructions`.
fn handoff_cycles_per_packet(eal: &Eal, lab: &Lab) -> anyhow::Result<f64> {
    let mut links = HandoffLinks::mesh(eal, 2, SocketId::ANY)?.into_iter();
    let (mut sender, mut owner) = (
        links.next().context("link 0")?,
        links.next().context("link 1")?,
    );
    let mut batch = MbufBatch::new();
    while !batch.is_full() {
        let _ = batch.push(lab.alloc()?);
    }
    let counters = WorkerCounters::default();
    let start = dpdk::rdtsc();
    for _ in 0..HANDOFF_BURSTS {
        for mbuf in batch.drain() {
            sender.send(1, mbuf, &counters);
        }
        sender.flush(&counters);
        owner.receive(&mut batch);
    }
    let cycles = dpdk::rdtsc() - start;
    let packets = u64::from(HANDOFF_BURSTS) * BURST_SIZE as u64;
    anyhow::ensure!(
        batch.len() == BURST_SIZE && counters.dropped_total() == 0,
        "the handoff path lost packets"
    );
    batch.free_all();
    Ok(cycles as f64 / packets as f64)
}

/// Bursts through the VLAN tagging in [`vlan_software_cycles_per_packet`].
const VLAN_BURSTS: u32 = 200_000;

/// What a VLAN subinterface costs a packet where the NIC does not tag: on receipt
/// `PortLayout::ingress` takes the tag out (12 address bytes move by 4) and finds the
/// subinterface, and on transmit the tag goes back in, as `Egress::send` does. Each round
/// trip is one packet's receive and transmit.
fn vlan_software_cycles_per_packet(lab: &Lab) -> anyhow::Result<f64> {
    let config = crate::config::GatewayConfig::from_text(
        std::path::Path::new("bench-vlans.toml"),
        r#"
[workers]
lcores = [1]
[[interfaces]]
name = "trunk"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "vlan10"
parent = "trunk"
vlan = 10
address = "192.168.10.1/24"
"#,
    )?;
    let layout = crate::dataplane::port_layout::PortLayout::new(&config);
    let mut batch = MbufBatch::new();
    while !batch.is_full() {
        let mut mbuf = lab.alloc()?;
        mbuf.set_len(FRAME_LEN)?;
        mbuf.data_mut().fill(0);
        mbuf.data_mut()[12..14].copy_from_slice(&0x0800_u16.to_be_bytes());
        anyhow::ensure!(mbuf.push_vlan_tag(10), "no headroom for a tag");
        let _ = batch.push(mbuf);
    }
    let mut mapped = 0_u64;
    let start = dpdk::rdtsc();
    for _ in 0..VLAN_BURSTS {
        for mbuf in batch.iter_mut() {
            if let Ok(ingress) = layout.ingress(0, mbuf) {
                mapped += u64::from(ingress.port);
            }
            mbuf.push_vlan_tag(10);
        }
    }
    let cycles = dpdk::rdtsc() - start;
    let packets = u64::from(VLAN_BURSTS) * BURST_SIZE as u64;
    anyhow::ensure!(
        mapped == packets,
        "VLAN 10 frames did not all map to the subinterface"
    );
    batch.free_all();
    Ok(cycles as f64 / packets as f64)
}

/// Bursts through the PPPoE framing in [`pppoe_cycles_per_packet`].
const PPPOE_BURSTS: u32 = 200_000;

/// What a PPPoE session costs a packet: on receipt `PortLayout::ingress` checks the session
/// header against the live session and takes the 8 bytes of PPPoE and PPP out (12 address
/// bytes move by 8), and on transmit `pppoe::encapsulate` puts them back, as `Egress::send`
/// does. Each round trip is one packet's receive and transmit.
fn pppoe_cycles_per_packet(lab: &Lab) -> anyhow::Result<f64> {
    const SESSION_ID: u16 = 0x2a;
    let config = crate::config::GatewayConfig::from_text(
        std::path::Path::new("bench-pppoe.toml"),
        r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "isp"
device = "net_ring1"
address = "pppoe"
[interfaces.pppoe]
username = "bench"
password = "bench"
"#,
    )?;
    let layout = crate::dataplane::port_layout::PortLayout::new(&config);
    // The generated frames' source MAC (all zeros) stands for the access concentrator's.
    let live = crate::dataplane::pppoe_frames::SessionState::new(Some(SESSION_ID), true)
        .from_access_concentrator([0; 6]);
    layout.sessions().set(1, live);
    let mut batch = MbufBatch::new();
    while !batch.is_full() {
        let mut mbuf = lab.alloc()?;
        mbuf.set_len(FRAME_LEN)?;
        mbuf.data_mut().fill(0);
        mbuf.data_mut()[12..14].copy_from_slice(&0x0800_u16.to_be_bytes());
        // A 20-byte datagram: what follows it in the frame is padding to cut.
        mbuf.data_mut()[16..18].copy_from_slice(&20_u16.to_be_bytes());
        crate::dataplane::pppoe_frames::encapsulate(live, &mut mbuf)
            .map_err(|reason| anyhow::anyhow!("encapsulating: {}", reason.label()))?;
        let _ = batch.push(mbuf);
    }
    let mut decapsulated = 0_u64;
    let start = dpdk::rdtsc();
    for _ in 0..PPPOE_BURSTS {
        for mbuf in batch.iter_mut() {
            if layout
                .ingress(1, mbuf)
                .is_ok_and(|ingress| ingress.port == 1)
            {
                decapsulated += 1;
            }
            let _ = crate::dataplane::pppoe_frames::encapsulate(live, mbuf);
        }
    }
    let cycles = dpdk::rdtsc() - start;
    let packets = u64::from(PPPOE_BURSTS) * BURST_SIZE as u64;
    anyhow::ensure!(
        decapsulated == packets,
        "PPPoE session frames were not all taken off on the PPPoE interface"
    );
    batch.free_all();
    Ok(cycles as f64 / packets as f64)
}

/// The SYN-flood fields of `--json`, beside the others.
fn syn_flood_json(flood: &SynFlood) -> String {
    format!(
        "\"syn_percent_of_packets\":{:.2},\"syn_flood_syns\":{},\"syn_flood_refused_syns\":{},\"syn_flood_half_open\":{},\"syn_flood_half_open_limit\":{},\"syn_flood_established_ratio\":{:.3},\"syn_flood_refused_established\":{},\"syn_flood_round_pairs\":{},\"syn_flood_established_ratio_median\":{:.3},\"syn_flood_baseline_wan_backlog\":{:.0},\"syn_flood_wan_backlog\":{:.0},\"syn_flood_cookies\":{}",
        100.0 * flood.flood.syns as f64 / flood.flood.packets.max(1) as f64,
        flood.flood.syns,
        flood.refused_syns,
        flood.half_open,
        flood.half_open_limit,
        flood.established_ratio(),
        flood.refused_established,
        flood.round_ratios.len(),
        flood.median_round_ratio(),
        flood.mean_wan_backlog(&flood.baseline),
        flood.mean_wan_backlog(&flood.flood),
        flood.cookies,
    )
}

fn syn_flood_summary(flood: &SynFlood) -> String {
    format!(
        "SYN flood at a port forward: {} spoofed SYNs ({:.1}% of packets), {} answered with a SYN cookie, {} refused, {} of {} half-open at the end; established flows kept {:.1}% of their packet rate per cycle (median of {} pairs of rounds; {:.1}% over all), {} of their packets refused; packets waiting in the WAN ring at a round's end: {:.0} without the flood, {:.0} with it",
        flood.flood.syns,
        100.0 * flood.flood.syns as f64 / flood.flood.packets.max(1) as f64,
        flood.cookies,
        flood.refused_syns,
        flood.half_open,
        flood.half_open_limit,
        100.0 * flood.median_round_ratio(),
        flood.round_ratios.len(),
        100.0 * flood.established_ratio(),
        flood.refused_established,
        flood.mean_wan_backlog(&flood.baseline),
        flood.mean_wan_backlog(&flood.flood),
    )
}

/// The flood's requirement: established flows keep >= 95% of their rate (said, since a
/// shared or loaded machine can push any ratio of two runs below it) and none of their
/// packets is refused (an error: that is the pipeline's doing, not the machine's).
fn syn_flood_verdict(flood: &SynFlood) -> anyhow::Result<()> {
    anyhow::ensure!(
        flood.refused_established == 0,
        "the SYN flood refused {} packets of established flows: {:?}",
        flood.refused_established,
        flood.refused_by_reason
    );
    if flood.median_round_ratio() < 0.95 {
        eprintln!(
            "warning: established flows kept only {:.1}% of their packet rate under the SYN flood (target 95%); on a loaded machine, run again",
            100.0 * flood.median_round_ratio()
        );
    }
    Ok(())
}

fn print_syn_flood(flood: &SynFlood, options: &BenchOptions, hz: u64) {
    if options.json {
        println!(
            "{{\"tsc_hz\":{hz},\"flows\":{},\"baseline_cycles_per_packet\":{:.1},\"flood_cycles_per_packet\":{:.1},{}}}",
            options.flows,
            flood.baseline.cycles_per_packet(),
            flood.flood.cycles_per_packet(),
            syn_flood_json(flood)
        );
        return;
    }
    for row in [&flood.baseline, &flood.flood] {
        println!(
            "{:<34} {:>12} {:>8.2} {:>12.1}",
            row.name,
            row.packets,
            hz as f64 / row.cycles_per_packet() / 1e6,
            row.cycles_per_packet()
        );
    }
    println!("{}", syn_flood_summary(flood));
}

/// What `gateway ctl trace` costs a worker while no trace is armed: the poll of its request
/// flag once per loop (the channel is read only when the flag is set) and the armed check once
/// per burst, timed over many loops of the hook alone, in cache as it is in the worker loop.
struct TraceIdle {
    loops: u64,
    cycles: u64,
}

impl TraceIdle {
    const LOOPS: u64 = 10_000_000;

    fn measure() -> TraceIdle {
        let (_requests, mut link) = crate::dataplane::trace_link::TraceLink::pair(0);
        let mut armed = 0u64;
        let start = dpdk::rdtsc();
        for _ in 0..Self::LOOPS {
            link.poll();
            armed += u64::from(std::hint::black_box(&link).is_armed());
        }
        let cycles = dpdk::rdtsc() - start;
        assert_eq!(armed, 0, "nobody armed the bench's trace link");
        TraceIdle {
            loops: Self::LOOPS,
            cycles,
        }
    }

    fn cycles_per_loop(&self) -> f64 {
        self.cycles as f64 / self.loops as f64
    }

    fn summary(&self) -> String {
        format!(
            "ctl trace, unarmed: {:.1} cycles per worker loop (the pending flag and the armed check), {:.2} cycles/packet at full {BURST_SIZE}-packet bursts",
            self.cycles_per_loop(),
            self.cycles_per_loop() / BURST_SIZE as f64
        )
    }

    fn json(&self) -> String {
        format!(
            "\"trace_unarmed\":{{\"cycles_per_loop\":{:.2},\"cycles_per_packet_full_bursts\":{:.3}}}",
            self.cycles_per_loop(),
            self.cycles_per_loop() / BURST_SIZE as f64
        )
    }
}

/// What `gateway ctl show flows` costs the worker: one listing over the whole table, a slice
/// of [`SLOTS_PER_LOOP`] slots at a time as the worker walks it between bursts, timed slice by
/// slice. Its filter names one of the bench's LAN hosts, so most flows are looked at and
/// passed over, as in a real query.
struct CtlWalk {
    flows: usize,
    matched: usize,
    slices: u64,
    total_cycles: u64,
    longest_slice_cycles: u64,
}

impl CtlWalk {
    fn measure(lab: &Lab) -> CtlWalk {
        let host = traffic::Traffic::host(0);
        let filter = FlowFilter {
            host: Some(host),
            ..FlowFilter::default()
        };
        let mut walk = CtlWalk {
            flows: lab.flow_count(),
            matched: 0,
            slices: 0,
            total_cycles: 0,
            longest_slice_cycles: 0,
        };
        let mut out = Vec::with_capacity(crate::ctl::DEFAULT_FLOW_LIMIT);
        for worker in lab.workers() {
            let pipeline = worker.pipeline();
            let now_ns = worker.now_ns();
            let mut from = Some(0);
            while let Some(slot) = from {
                let start = dpdk::rdtsc();
                let step = pipeline.list_flows(&filter, slot, SLOTS_PER_LOOP, now_ns, &mut out);
                let spent = dpdk::rdtsc() - start;
                walk.slices += 1;
                walk.total_cycles += spent;
                walk.longest_slice_cycles = walk.longest_slice_cycles.max(spent);
                walk.matched += step.matched;
                from = step.next;
            }
        }
        walk
    }

    fn summary(&self, hz: u64) -> String {
        let us = |cycles: u64| cycles as f64 * 1e6 / hz as f64;
        format!(
            "ctl show flows --host over {} flows: {:.1} ms of walking in {} slices of {SLOTS_PER_LOOP} slots, the longest {:.1} us, the mean {:.1} us ({} flows matched)",
            self.flows,
            us(self.total_cycles) / 1e3,
            self.slices,
            us(self.longest_slice_cycles),
            us(self.total_cycles / self.slices.max(1)),
            self.matched
        )
    }

    fn json(&self, hz: u64) -> String {
        format!(
            "\"ctl_walk\":{{\"flows\":{},\"matched\":{},\"slices\":{},\"slots_per_slice\":{SLOTS_PER_LOOP},\"total_ms\":{:.2},\"longest_slice_us\":{:.1}}}",
            self.flows,
            self.matched,
            self.slices,
            self.total_cycles as f64 * 1e3 / hz as f64,
            self.longest_slice_cycles as f64 * 1e6 / hz as f64
        )
    }
}
