//! What the shaper's queueing costs a packet, without DPDK, for valgrind to count:
//! `shaper_cost HOSTS PACKETS [idle]`. A saturated link: every host, with one flow as
//! `gateway bench`'s LAN hosts have, first gets two packets queued, then each poll takes a
//! burst of 32 packets in (the hosts in turn) and lets 32 out, the clock advancing by a little
//! more than 32 packets take at the rate, so that the backlog stays put with every host active. `scripts/instructions.sh` runs it at two lengths and reports the
//! difference over the packets between them: enqueue plus dequeue, per packet. With `idle`,
//! the link's rate is ten times what is offered, as in `gateway bench`'s feature rows, and
//! every packet is offered (`Shaper::offer`) and sent at once: the shaper's cost when the link
//! is not congested.

use pipeline::features::shaper::{Arrival, Outcome, Shaper, ShaperConfig};

const BURST: u64 = 32;
const LEN: u32 = 64;
/// 10 Gbit/s: 51.2 ns a 64-byte packet.
const RATE_BPS: u64 = 10_000_000_000;

/// Packet `id`'s arrival: the hosts in turn, one flow each.
fn arrival(id: u64, hosts: u64) -> Arrival {
    let host = id % hosts;
    Arrival {
        len: LEN,
        host,
        flow: host.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        ecn_capable: false,
    }
}

#[inline(never)]
fn measure(shaper: &mut Shaper<u64>, hosts: u64, packets: u64, mut now: u64, idle: bool) -> u64 {
    // Rounded up: the link could take a few more than 32, so `dequeue`'s cap decides.
    let per_poll_ns = (BURST * u64::from(LEN) * 8 * 1_000_000_000).div_ceil(RATE_BPS);
    if idle {
        return offer_below_the_rate(shaper, hosts, packets, now, 10 * per_poll_ns);
    }
    let mut next = 0;
    let mut sent = 0;
    while next < packets {
        for _ in 0..BURST {
            shaper.enqueue(next, arrival(next, hosts), now, drop);
            next += 1;
        }
        now += per_poll_ns;
        shaper.dequeue(now, BURST as usize, |item, outcome| {
            if outcome != Outcome::Drop {
                sent += 1;
            }
            std::hint::black_box(item);
        });
    }
    sent
}

/// Bursts of 32 offered every `per_poll_ns`: ten times slower than the link drains them.
fn offer_below_the_rate(
    shaper: &mut Shaper<u64>,
    hosts: u64,
    packets: u64,
    mut now: u64,
    per_poll_ns: u64,
) -> u64 {
    let mut sent = 0;
    for next in 0..packets {
        if next % BURST == 0 {
            now += per_poll_ns;
        }
        if let Some(item) = shaper.offer(next, arrival(next, hosts), now, drop) {
            std::hint::black_box(item);
            sent += 1;
        }
    }
    sent
}

fn main() {
    const USAGE: &str = "usage: shaper_cost HOSTS PACKETS [idle]";
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let idle = args.last().is_some_and(|arg| arg == "idle");
    if idle {
        args.pop();
    }
    let args: Vec<u64> = args.iter().map(|arg| arg.parse().expect(USAGE)).collect();
    let [hosts, packets] = args[..] else {
        panic!("{USAGE}");
    };
    let hosts = hosts.max(1);
    let mut shaper = Shaper::new(ShaperConfig {
        rate_bps: RATE_BPS,
        burst_bytes: BURST * u64::from(LEN),
        packets: 4 * hosts as usize + 1024,
        flow_queues: 4 * hosts as usize,
        host_buckets: 2 * hosts as usize,
        ..ShaperConfig::default()
    });
    // Every host with two packets waiting before the measured loop (none below the rate).
    let warm = if idle {
        measure(&mut shaper, hosts, hosts, 0, idle)
    } else {
        for id in 0..2 * hosts {
            shaper.enqueue(id, arrival(id, hosts), 0, drop);
        }
        0
    };
    let started = std::time::Instant::now();
    let sent = measure(&mut shaper, hosts, packets, 1_000_000, idle);
    let elapsed = started.elapsed();
    println!(
        "{packets} packets over {hosts} hosts: {sent} sent ({warm} in warm-up), {:.1} ns a packet, backlog {}",
        elapsed.as_nanos() as f64 / packets as f64,
        shaper.stats().backlog_packets
    );
}
