//! Watching 802.3ad bonds: the control thread samples every member's link and LACP state
//! every 100 ms and counts changes; metrics read the samples. Sampling in one place means a
//! member flapping between scrapes is still counted.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::dpdk::bond::{self, lacp_state};
use crate::dpdk::{link_status, PortId};

/// One member's last sample, packed so it is read and written as one atomic word:
/// link (bit 0), selected (bit 1), actor state (bits 8-15), partner state (bits 16-23),
/// link speed in Mbit/s (bits 32-63).
#[derive(Debug, Default)]
pub struct MemberSample(AtomicU64);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberState {
    pub link_up: bool,
    pub selected: bool,
    pub actor: u8,
    pub partner: u8,
    /// Mbit/s: 802.3ad aggregates only members of one speed, and an X550-T2's
    /// auto-negotiation can quietly settle one member lower.
    pub speed_mbps: u32,
}

impl MemberState {
    fn pack(self) -> u64 {
        u64::from(self.link_up)
            | u64::from(self.selected) << 1
            | u64::from(self.actor) << 8
            | u64::from(self.partner) << 16
            | u64::from(self.speed_mbps) << 32
    }

    fn unpack(word: u64) -> MemberState {
        MemberState {
            link_up: word & 1 != 0,
            selected: word & 2 != 0,
            actor: (word >> 8) as u8,
            partner: (word >> 16) as u8,
            speed_mbps: (word >> 32) as u32,
        }
    }

    pub fn collecting(self, partner: bool) -> bool {
        let state = if partner { self.partner } else { self.actor };
        state & lacp_state::COLLECTING != 0
    }

    pub fn distributing(self, partner: bool) -> bool {
        let state = if partner { self.partner } else { self.actor };
        state & lacp_state::DISTRIBUTING != 0
    }

    /// Link up and the gateway distributing on it: DPDK's own active list follows link
    /// interrupts only, which some members never raise, while LACP's distributing state
    /// follows what the partner says too.
    pub fn carries_traffic(self) -> bool {
        self.link_up && self.distributing(false)
    }

    /// What counts as a state change: link, selection, and whether either side collects
    /// and distributes. Timer bits (expired, defaulted) alone are not worth an event.
    fn significant(self) -> (bool, bool, bool, bool, bool, bool) {
        (
            self.link_up,
            self.selected,
            self.collecting(false),
            self.distributing(false),
            self.collecting(true),
            self.distributing(true),
        )
    }
}

pub struct Member {
    pub name: String,
    pub port: PortId,
    pub sample: MemberSample,
}

pub struct Bond {
    pub name: String,
    pub port: PortId,
    pub members: Vec<Member>,
    /// Members carrying traffic, see `MemberState::carries_traffic`.
    pub active: AtomicU64,
    pub state_changes: AtomicU64,
}

#[derive(Default)]
pub struct BondWatch {
    pub bonds: Vec<Bond>,
}

impl BondWatch {
    pub fn add(&mut self, name: &str, port: PortId, members: Vec<(String, PortId)>) {
        self.bonds.push(Bond {
            name: name.to_string(),
            port,
            members: members
                .into_iter()
                .map(|(name, port)| Member {
                    name,
                    port,
                    sample: MemberSample::default(),
                })
                .collect(),
            active: AtomicU64::new(0),
            state_changes: AtomicU64::new(0),
        });
    }

    /// Takes a sample of every member. Called by the control thread.
    pub fn sample(&self) {
        for bond in &self.bonds {
            let mut active = 0;
            for member in &bond.members {
                let lacp = bond::member_lacp(bond.port, member.port).unwrap_or_default();
                let (link_up, speed_mbps) = link_status(member.port);
                let now = MemberState {
                    link_up,
                    speed_mbps,
                    selected: lacp.selected,
                    actor: lacp.actor_state,
                    partner: lacp.partner_state,
                };
                let before =
                    MemberState::unpack(member.sample.0.swap(now.pack(), Ordering::Relaxed));
                if before.significant() != now.significant() {
                    bond.state_changes.fetch_add(1, Ordering::Relaxed);
                }
                active += usize::from(now.carries_traffic());
            }
            bond.active.store(active as u64, Ordering::Relaxed);
        }
    }
}

impl MemberSample {
    pub fn get(&self) -> MemberState {
        MemberState::unpack(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_through_one_word() {
        let state = MemberState {
            link_up: true,
            selected: false,
            actor: lacp_state::COLLECTING | lacp_state::ACTIVE,
            partner: lacp_state::DISTRIBUTING,
            speed_mbps: 10_000,
        };
        let back = MemberState::unpack(state.pack());
        assert_eq!(back, state);
        assert!(back.collecting(false) && !back.distributing(false));
        assert!(back.distributing(true) && !back.collecting(true));
    }
}
