//! Two uplinks in the bench (issue 48): what sharing the default route between two WAN ports
//! costs, against the same lab with the second port idle. Two labs of three ports each
//! (LAN, WAN, WAN2) and the same flows: in one the default route leaves by the first WAN
//! port alone; in the other the two ports are uplinks of equal weight, each new flow's
//! uplink chosen by a hash of its source (`routing.hash = "source"`), and each reply comes
//! back by the port its flow left from. The established rounds alternate between the labs
//! (ABBA, as the SYN flood's), so a slow phase of the host weighs on both alike.

use std::sync::Arc;
use std::time::Duration;

use crate::dpdk::{Eal, Mempool};

use super::lab::{Lab, LabKind};
use super::Row;

/// Shortest round of established traffic; with short runs, more pairs of shorter rounds.
const ROUND: Duration = Duration::from_millis(250);
const MIN_PAIRS: u32 = 4;
/// The second WAN port's number in the uplinks' labs.
const SECOND_WAN: usize = 2;

pub(super) struct UplinksCost {
    /// Established flows, the second WAN port idle.
    pub one: Row,
    /// Established flows over the two uplinks.
    pub two: Row,
    /// Cycles the loop spent per new flow while each lab opened its flows.
    pub setup_one: f64,
    pub setup_two: f64,
    /// Of the packets the two-uplink lab sent upstream in its timed rounds, the second
    /// uplink's share.
    pub second_share: f64,
}

impl UplinksCost {
    pub fn measure(
        eal: &Eal,
        pool: &Arc<Mempool>,
        flows: u32,
        seconds: Duration,
    ) -> anyhow::Result<UplinksCost> {
        let mut one = Lab::new(eal, pool, flows, LabKind::Uplinks { shared: false })?;
        let mut two = Lab::new(eal, pool, flows, LabKind::Uplinks { shared: true })?;
        let per_flow = |cycles: u64| cycles as f64 / f64::from(flows.max(1));
        let setup_one = per_flow(one.set_up_flows(flows)?);
        let setup_two = per_flow(two.set_up_flows(flows)?);
        let most_in_use = pool.capacity() * 3 / 4;
        one.warm_up(most_in_use)?;
        two.warm_up(most_in_use)?;
        let (one_name, two_name) = ("one uplink, established", "two uplinks, established");
        let mut one_row = Row::empty(one_name);
        let mut two_row = Row::empty(two_name);
        let pairs = (seconds.as_millis() / (2 * ROUND.as_millis())).max(MIN_PAIRS.into()) as u32;
        let round = seconds / (2 * pairs);
        for pair in 0..pairs {
            let two_first = pair % 2 == 1;
            for shared in [two_first, !two_first] {
                if shared {
                    two_row.add(&two.steady_with_syns(two_name, round, 0, 0, most_in_use)?);
                } else {
                    one_row.add(&one.steady_with_syns(one_name, round, 0, 0, most_in_use)?);
                }
            }
        }
        for (lab, name) in [(&one, one_name), (&two, two_name)] {
            let dropped = lab.dropped_total();
            anyhow::ensure!(
                dropped == 0,
                "the {name} lab dropped {dropped} packets: {:?}",
                lab.drops_by_reason()
            );
        }
        anyhow::ensure!(
            one.sent_by_port[SECOND_WAN] == 0,
            "the idle second uplink sent {} packets",
            one.sent_by_port[SECOND_WAN]
        );
        let upstream = two.sent_by_port[1] + two.sent_by_port[SECOND_WAN];
        let second_share = two.sent_by_port[SECOND_WAN] as f64 / upstream.max(1) as f64;
        // 1,000 hosts by equal weights: about half each (the e2e test checks the share itself).
        anyhow::ensure!(
            (0.35..0.65).contains(&second_share),
            "the second of two equal uplinks carried {:.1}% of the upstream packets",
            100.0 * second_share
        );
        Ok(UplinksCost {
            one: one_row,
            two: two_row,
            setup_one,
            setup_two,
            second_share,
        })
    }

    /// Its fields in `--json`, against the I/O floor's row (two ports; these labs have three).
    pub fn json(&self, floor: &Row) -> String {
        format!(
            "\"uplinks_one_cycles_above_floor\":{:.1},\"uplinks_two_cycles_above_floor\":{:.1},\"uplinks_established_cycles\":{:.1},\"uplinks_setup_cycles_one\":{:.0},\"uplinks_setup_cycles_two\":{:.0},\"uplinks_second_share\":{:.3}",
            self.one.cycles_per_packet() - floor.cycles_per_packet(),
            self.two.cycles_per_packet() - floor.cycles_per_packet(),
            self.two.cycles_per_packet() - self.one.cycles_per_packet(),
            self.setup_one,
            self.setup_two,
            self.second_share,
        )
    }

    pub fn summary(&self, floor: &Row) -> String {
        format!(
            "two uplinks sharing the default route by source (a third port; against the same lab with it idle): established {:.1} vs {:.1} cycles/packet above the I/O floor ({:+.1}); a new flow {:.0} vs {:.0} cycles ({:+.0}); the second uplink carried {:.1}% of the upstream packets",
            self.two.cycles_per_packet() - floor.cycles_per_packet(),
            self.one.cycles_per_packet() - floor.cycles_per_packet(),
            self.two.cycles_per_packet() - self.one.cycles_per_packet(),
            self.setup_two,
            self.setup_one,
            self.setup_two - self.setup_one,
            100.0 * self.second_share,
        )
    }
}
