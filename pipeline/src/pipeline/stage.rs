//! What the stages hand each other: how a packet arrived ([`Ingress`]), what the stateful
//! stage decided ([`Stage`]) or asks for ([`Request`]), how it translated a packet
//! ([`Translation`]), what the burst learnt of a flow before the full path ([`FlowProbe`]),
//! where the full path sent a packet ([`Route`]), and the frames made beside a burst
//! ([`ExtraFrames`]). A leaf of the `pipeline` layer: every stage imports it, and it imports
//! none of them.

use std::net::Ipv4Addr;

use crate::flow::{Direction, FlowKey, FlowKey6};
use crate::l3::icmp_error::IcmpError;
use crate::l3::icmpv6_error::Icmpv6Error;
use crate::packet::PacketBuf;
use crate::state::conntrack::{FlowHash, FlowId, Probe, TcpSegment};
use crate::state::nat::{self, Ownership};
use crate::verdict::{DropReason, Verdict};
use crate::wire::{ethernet, ipv4, tcp};

/// The most packets [`Pipeline::process_burst`] takes at once: a worker's rx burst.
pub const MAX_BURST: usize = 32;

/// Wall-clock time on the per-packet path, which must not ask the OS for it: the Unix
/// second at the worker clock's `now_ns == 0`, told once at start (`set_wall_clock`), for
/// parental time windows and the rules' last match.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WallClock {
    unix_at_zero: i64,
}

impl WallClock {
    /// The clock for which `now_ns` is Unix second `unix_seconds`.
    pub(crate) fn at(unix_seconds: i64, now_ns: u64) -> Self {
        WallClock {
            unix_at_zero: unix_seconds - (now_ns / 1_000_000_000) as i64,
        }
    }

    /// The Unix second at `now_ns`.
    #[inline]
    pub(crate) fn unix_seconds(self, now_ns: u64) -> i64 {
        self.unix_at_zero + (now_ns / 1_000_000_000) as i64
    }
}

/// How a packet reached this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ingress {
    /// The interface it arrived on.
    pub port: u16,
    /// Handed over by another worker, which already decided this worker owns it.
    pub handed_off: bool,
}

impl Ingress {
    /// The worker that owns what this packet is about (`owner` names it), when that is not
    /// `worker` and the packet must still be handed to it: not with one worker, and not for
    /// a packet handed over already, whose sender decided.
    #[inline]
    pub(crate) fn foreign_owner(
        self,
        worker: u16,
        ownership: Ownership,
        owner: impl FnOnce(Ownership) -> u16,
    ) -> Option<u16> {
        if ownership.workers() <= 1 || self.handed_off {
            return None;
        }
        let owner = owner(ownership);
        (owner != worker).then_some(owner)
    }
}

/// What a stateful stage decided, either family's: `R` is what it may ask the pipeline for
/// ([`Request`] for IPv4, [`Request6`] for IPv6). IPv6 translates nothing: its `Forward` and
/// `Established` carry no translation.
pub(crate) enum Stage<R = Request> {
    /// Headers are final (translated if need be); route and send. A translated packet says
    /// how, so that an ICMP error about it can be about what its sender sent.
    Forward(Option<Translation>),
    /// As `Forward`, for a packet of an established flow: the forwarding stage may leave
    /// the flow a [`Shortcut`](crate::state::flow_data::Shortcut) for the next packets of
    /// its direction.
    Established {
        translation: Option<Translation>,
        flow: FlowId,
        direction: Direction,
    },
    Done(Verdict),
    /// What the stage needs the pipeline to do with the packet, which owns the budgets and
    /// the routing an answer takes.
    Request(R),
}

/// An answer the stateful stage asks the pipeline to send in place of the packet.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Request {
    /// The packet, as received, answered with this ICMP error.
    IcmpError(IcmpError),
    /// The TCP `segment` of flow `key` answered with a reset toward its sender; the segment
    /// itself counts as dropped for `reason`.
    Reset {
        key: FlowKey,
        segment: TcpSegment,
        reason: DropReason,
    },
    /// The TCP `segment` the server of flow `key` (the flow's tuple as its client sent it)
    /// sent when the flow ended: its client gets the reset, from the server's address and
    /// port at the segment's sequence number, where the client expects the server's next
    /// byte; the segment itself counts as dropped for `reason`.
    ResetReceiver {
        key: FlowKey,
        segment: TcpSegment,
        reason: DropReason,
    },
    /// A SYN toward a port forward answered by the SYN proxy with a cookie.
    SynCookie(CookieAnswer),
    /// A server's SYN-ACK to a proxied client, answered by the proxy for the client.
    Splice(Splice),
}

/// What the IPv6 stateful stage decides.
pub(crate) type Stage6 = Stage<Request6>;

/// An answer the IPv6 stateful stage asks the pipeline to send in place of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request6 {
    /// The packet, as received, answered with this ICMPv6 error.
    IcmpError(Icmpv6Error),
    /// A DNS query for a blocked name: answered (NXDOMAIN) or dropped, as the policy says.
    DnsBlocked,
    /// A TCP flow whose content is blocked, reset toward the client, whose segment this is
    /// (`key` being the segment's).
    Reset { key: FlowKey6, segment: TcpSegment },
}

/// A packet's tuple as received and as the stateful stage rewrote it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Translation {
    pub(crate) received: FlowKey,
    pub(crate) sent: FlowKey,
}

impl Translation {
    /// Rewrites the packet back to what its sender sent, so that an ICMP error the gateway
    /// raises about it (fragmentation needed, no route) goes to that sender and quotes what it
    /// sent. False, with the packet unchanged, if the rewrite fails.
    pub(crate) fn undo(&self, pkt: &mut PacketBuf) -> bool {
        !matches!(translate(pkt, &self.sent, &self.received), Stage::Done(_))
    }
}

/// What the burst learnt of a packet's flow before the full path: its key as the frame gave
/// it, the key's hash, and, when the fast path looked the key up, the table's answer. The
/// full path's stateful stage uses them for the same key instead of hashing and looking up
/// again: a new flow's packet (a SYN in a flood) would otherwise pay for three lookups.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowProbe {
    pub(crate) key: FlowKey,
    pub(crate) hash: FlowHash,
    pub(crate) found: Option<Probe>,
}

/// Where the full path sent a packet: its egress interface and the next hop it resolved.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    pub(crate) egress: u16,
    pub(crate) next_hop: Ipv4Addr,
}

/// The frame of a bare ACK the proxy writes.
pub(crate) const ACK_FRAME_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + tcp::HEADER_LEN;

/// A SYN the proxy answers with a cookie: its tuple as received, and what the SYN-ACK says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CookieAnswer {
    pub(crate) key: FlowKey,
    pub(crate) client_isn: u32,
    pub(crate) cookie: u32,
    /// The MSS our SYN-ACK announces: what the server's side can carry.
    pub(crate) mss: u16,
}

/// The server's SYN-ACK, which the proxy answers for the client.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Splice {
    /// The client's tuple as it sent it (to the forward's address and port).
    pub(crate) client: FlowKey,
    /// The server's tuple as it sent the SYN-ACK (to the client).
    pub(crate) server: FlowKey,
    pub(crate) client_next: u32,
    pub(crate) server_next: u32,
    pub(crate) client_window: u16,
    pub(crate) server_window: u16,
    pub(crate) cookie: u32,
}

/// Frames the pipeline makes beside the packets it was given (the SYN proxy's window
/// updates), for the worker to send after the burst. Bounded; allocated once.
pub struct ExtraFrames {
    frames: Vec<(u16, [u8; ACK_FRAME_LEN])>,
}

/// Extra frames one burst may leave: one per packet of a full burst.
const EXTRA_FRAMES: usize = MAX_BURST;

impl Default for ExtraFrames {
    fn default() -> Self {
        ExtraFrames {
            frames: Vec::with_capacity(EXTRA_FRAMES),
        }
    }
}

impl ExtraFrames {
    /// Keeps a frame to send on `port`; false if there is no room (or it is not the size
    /// of a bare ACK).
    pub(crate) fn push(&mut self, port: u16, frame: &[u8]) -> bool {
        if self.frames.len() == EXTRA_FRAMES {
            return false;
        }
        let Ok(frame) = <[u8; ACK_FRAME_LEN]>::try_from(frame) else {
            return false;
        };
        self.frames.push((port, frame));
        true
    }

    /// The frames kept since the last call, each with the port it leaves by.
    pub fn drain(&mut self) -> impl Iterator<Item = (u16, [u8; ACK_FRAME_LEN])> + '_ {
        self.frames.drain(..)
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// Rewrites the packet's tuple from `current` to `target`.
pub(crate) fn translate(pkt: &mut PacketBuf, current: &FlowKey, target: &FlowKey) -> Stage {
    let ip = &mut pkt.bytes_mut()[ethernet::HEADER_LEN..];
    let new_source = (current.src, current.src_port) != (target.src, target.src_port);
    if new_source && nat::rewrite_source(ip, target.src, target.src_port).is_err() {
        return Stage::Done(Verdict::Drop(DropReason::MalformedL4));
    }
    let new_destination = (current.dst, current.dst_port) != (target.dst, target.dst_port);
    if new_destination && nat::rewrite_destination(ip, target.dst, target.dst_port).is_err() {
        return Stage::Done(Verdict::Drop(DropReason::MalformedL4));
    }
    Stage::Forward((new_source || new_destination).then_some(Translation {
        received: *current,
        sent: *target,
    }))
}
