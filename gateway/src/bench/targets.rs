//! Issue 47's per-core targets, checked against one run's figures, and the host's last-level
//! cache, which decides the sweep's headline row: the first flow count whose table the cache
//! cannot hold, so that the headline measures DRAM misses on every host, not cache hits on
//! the hosts with the biggest L3.

use super::series::SweepPoint;
use super::Row;

/// One target: what the run measured beside the bound it should keep.
pub(super) struct Target {
    pub name: String,
    pub measured: f64,
    pub bound: f64,
    /// The measured figure must be at most the bound (else at least).
    pub at_most: bool,
}

impl Target {
    pub fn met(&self) -> bool {
        if self.at_most {
            self.measured <= self.bound
        } else {
            self.measured >= self.bound
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"name\":\"{}\",\"measured\":{:.3},\"bound\":{},\"at_most\":{},\"met\":{}}}",
            self.name,
            self.measured,
            self.bound,
            self.at_most,
            self.met()
        )
    }
}

/// The figures of one `gateway bench` run the targets read.
pub(super) struct Figures<'a> {
    pub floor: &'a Row,
    /// NAT44+SPI established, at the run's `--flows`.
    pub established: &'a Row,
    /// IPv6 through the stateful firewall, at the same flow count.
    pub ipv6: &'a Row,
    pub setup_rate: f64,
    pub bytes_per_flow: usize,
    pub sweep: &'a [SweepPoint],
    pub headline: Option<usize>,
}

/// The targets of issue 47 that this run's figures can answer: a sweep point's target only
/// where the sweep has that flow count.
pub(super) fn evaluate(figures: &Figures) -> Vec<Target> {
    let mut targets = Vec::new();
    let at_flows = |flows: u32| figures.sweep.iter().find(|p| p.flows == flows);
    for (flows, bound) in [(4_000_000, 150.0), (10_000, 100.0)] {
        if let Some(point) = at_flows(flows) {
            targets.push(Target {
                name: format!("NAT44+SPI cycles above the floor, {flows} flows"),
                measured: point.cycles_above_floor(figures.floor),
                bound,
                at_most: true,
            });
        }
    }
    if let Some(point) = figures.headline.and_then(|i| figures.sweep.get(i)) {
        targets.push(Target {
            name: format!("every feature's Mpps over plain, {} flows", point.flows),
            measured: point.features_ratio(),
            bound: 0.95,
            at_most: false,
        });
    }
    targets.push(Target {
        name: "new flows per second, one core (M)".into(),
        measured: figures.setup_rate / 1e6,
        bound: 3.0,
        at_most: false,
    });
    targets.push(Target {
        name: "bytes per flow".into(),
        measured: figures.bytes_per_flow as f64,
        bound: 128.0,
        at_most: true,
    });
    // Above the floor, as the bench's IPv6 line compares them: the floor is I/O both pay.
    let above_floor = |row: &Row| row.cycles_per_packet() - figures.floor.cycles_per_packet();
    targets.push(Target {
        name: "IPv6 cycles above the floor over IPv4's".into(),
        measured: above_floor(figures.ipv6) / above_floor(figures.established),
        bound: 1.10,
        at_most: true,
    });
    targets
}

pub(super) fn print(targets: &[Target], l3_bytes: Option<u64>) {
    let l3 = l3_bytes.map_or_else(
        || "unknown".to_string(),
        |bytes| format!("{} MiB", bytes >> 20),
    );
    println!("targets (issue 47; the host's L3: {l3}):");
    for target in targets {
        println!(
            "  {:<52} {:>10.2} {} {:<8} {}",
            target.name,
            target.measured,
            if target.at_most { "<=" } else { ">=" },
            target.bound,
            if target.met() { "met" } else { "missed" }
        );
    }
}

pub(super) fn json(targets: &[Target]) -> String {
    let items: Vec<String> = targets.iter().map(Target::json).collect();
    format!("[{}]", items.join(","))
}

/// The largest cache of CPU 0 (sysfs), in bytes: on x86 its L3, shared by the cores.
pub(super) fn host_last_level_cache() -> Option<u64> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    std::fs::read_dir(base)
        .ok()?
        .filter_map(|entry| {
            let size = std::fs::read_to_string(entry.ok()?.path().join("size")).ok()?;
            parse_cache_size(&size)
        })
        .max()
}

/// sysfs writes a cache's size as "32768K" (or "1024M"): bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, scale) = match text.chars().last()? {
        'K' => (&text[..text.len() - 1], 1 << 10),
        'M' => (&text[..text.len() - 1], 1 << 20),
        'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok().map(|n| n * scale)
}

/// The sweep's headline point: the first whose flows' table outgrows the cache (the
/// largest when none does, or when the cache's size is unknown).
pub(super) fn headline(
    flows: impl IntoIterator<Item = u32>,
    bytes_per_flow: usize,
    cache_bytes: Option<u64>,
) -> Option<usize> {
    let flows: Vec<u32> = flows.into_iter().collect();
    let last = flows.len().checked_sub(1)?;
    let Some(cache) = cache_bytes else {
        return Some(last);
    };
    flows
        .iter()
        .position(|&n| u64::from(n) * bytes_per_flow as u64 > cache)
        .or(Some(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("lots"), None);
    }

    #[test]
    fn the_headline_is_the_first_table_the_cache_cannot_hold() {
        let sweep = [10_000, 1_000_000, 4_000_000, 16_000_000];
        // 32 MiB holds 10k flows of 224 bytes (2.2 MB), not 1M (224 MB).
        assert_eq!(headline(sweep, 224, Some(32 << 20)), Some(1));
        // A 300 MiB L3 holds 1M flows: the headline moves to 4M.
        assert_eq!(headline(sweep, 224, Some(300 << 20)), Some(2));
        // A cache larger than every table, or none known: the largest count.
        assert_eq!(headline(sweep, 224, Some(1 << 40)), Some(3));
        assert_eq!(headline(sweep, 224, None), Some(3));
        assert_eq!(headline([], 224, Some(1)), None);
    }

    #[test]
    fn a_target_is_met_on_its_side_of_the_bound() {
        let target = |measured, at_most| Target {
            name: String::new(),
            measured,
            bound: 100.0,
            at_most,
        };
        assert!(target(100.0, true).met());
        assert!(!target(100.5, true).met());
        assert!(target(100.0, false).met());
        assert!(!target(99.5, false).met());
    }
}
