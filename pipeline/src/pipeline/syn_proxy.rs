//! The SYN proxy in front of port forwards (RFC 4987 3.6; Linux's SYNPROXY target does the
//! same): while a worker's half-open table is full, a SYN toward a forward is answered by
//! the gateway itself with a SYN cookie ([`crate::state::syn_cookie`]) and leaves nothing
//! behind, so a flood of spoofed SYNs costs a hash and a reply each, never a flow slot,
//! an eviction or a write to the table. The handshake then goes on in three steps:
//!
//! 1. The client's ACK returns the cookie. Only now does the connection take a flow: the ACK
//!    is rewritten into the SYN the client sent (its ISN, its window, the MSS the cookie
//!    carries) and goes on to the server like any forwarded SYN.
//! 2. The server's SYN-ACK is answered by the gateway with the ACK the client would have sent,
//!    and the client, which our SYN-ACK offered a zero window (so it sends no data the
//!    server could not take yet), gets a window update with the server's window (a second
//!    frame, [`ExtraFrames`](crate::pipeline::stage::ExtraFrames)).
//! 3. From then on the server's sequence numbers are shifted into the client's view (the
//!    cookie is the client's idea of the server's ISN): `delta` is added to what the server
//!    sends and taken from what the client acknowledges, with the checksums patched. Such
//!    flows take the full path (no shortcut), which does this.
//!
//! Our SYN-ACK offers neither window scaling, SACK nor timestamps, and our SYN to the server
//! none either, so that no option needs rewriting afterwards: connections opened during a
//! flood do without them (as Linux's cookies without timestamps do). A segment the client
//! sends while the server has not answered is dropped (`syn_proxy_pending`), and it retries.

use crate::flow::{Direction, FlowKey};
use crate::packet::PacketBuf;
use crate::pipeline::requests::write_segment;
use crate::pipeline::stage::{CookieAnswer, Request, Splice, Stage, ACK_FRAME_LEN};
use crate::pipeline::stateful::StatefulStage;
use crate::pipeline::Pipeline;
use crate::state::conntrack::{FlowId, TcpSegment, Track};
use crate::state::flow_data::SynProxy;
use crate::state::syn_cookie::DEFAULT_MSS;
use crate::verdict::{DropReason, Verdict};
use crate::wire::tcp::{flags, option, walk_options};
use crate::wire::{checksum, ethernet, ipv4, tcp, EthernetFrame, Ipv4Packet, TcpPacket};

/// A TCP header with the MSS option alone: our SYN-ACK and the SYN we pass on.
const SYN_HEADER_LEN: usize = tcp::HEADER_LEN + 4;
/// The frame of a SYN or SYN-ACK the proxy writes.
const SYN_FRAME_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + SYN_HEADER_LEN;

impl StatefulStage {
    /// The answer to a SYN toward a forward while the half-open table is full (checksum
    /// already verified): a SYN-ACK with a cookie, and nothing kept.
    pub(crate) fn answer_with_cookie(
        &self,
        pkt: &PacketBuf,
        key: &FlowKey,
        segment: &TcpSegment,
        mss: u16,
        now_ns: u64,
    ) -> Stage {
        let client_mss = client_mss(pkt).unwrap_or(DEFAULT_MSS);
        let cookie = self.cookies.make(key, segment.seq, client_mss, now_ns);
        Stage::Request(Request::SynCookie(CookieAnswer {
            key: *key,
            client_isn: segment.seq,
            cookie,
            mss,
        }))
    }

    /// A bare ACK toward a forward that no flow holds: if it returns a cookie of ours, the
    /// packet becomes the client's SYN (returned, with the flow's proxy state); otherwise
    /// None and the packet is unchanged.
    pub(crate) fn open_by_cookie(
        &self,
        pkt: &mut PacketBuf,
        key: &FlowKey,
        segment: &TcpSegment,
        now_ns: u64,
    ) -> Option<(TcpSegment, SynProxy)> {
        const SIGNIFICANT: u8 = flags::SYN | flags::ACK | flags::FIN | flags::RST;
        if segment.flags & SIGNIFICANT != flags::ACK || pkt.capacity() < SYN_FRAME_LEN {
            return None;
        }
        let client_isn = segment.seq.wrapping_sub(1);
        let cookie = segment.ack.wrapping_sub(1);
        let mss = self.cookies.check(key, client_isn, cookie, now_ns)?;
        let syn = TcpSegment {
            flags: flags::SYN,
            seq: client_isn,
            ack: 0,
            window: segment.window,
            payload_len: 0,
            window_scale: None,
        };
        write_syn(pkt, key, &syn, mss);
        let state = SynProxy::AwaitingServer {
            cookie,
            client_window: segment.window,
        };
        Some((syn, state))
    }

    /// Before the tracker sees a segment of a flow the proxy opened: the packet's sequence
    /// numbers moved between the two views, and the segment as the tracker must see it (in
    /// the client's view throughout). Err: what becomes of the packet instead.
    pub(crate) fn splice(
        &mut self,
        pkt: &mut PacketBuf,
        id: FlowId,
        direction: Direction,
        segment: Option<TcpSegment>,
        now_ns: u64,
    ) -> Result<Option<TcpSegment>, Stage> {
        let Some(mut segment) = segment else {
            return Ok(None);
        };
        let state = self.flows.data(id).syn_proxy;
        // The server's (a client's SYN-ACK, which no handshake has, goes to the tracker).
        let syn_ack = direction == Direction::Reply
            && segment.flags & (flags::SYN | flags::ACK) == flags::SYN | flags::ACK;
        let rst = segment.flags & flags::RST != 0;
        let delta = match (state, direction) {
            (SynProxy::Off, _) => return Ok(Some(segment)),
            (SynProxy::AwaitingServer { cookie, .. }, _) if syn_ack => {
                cookie.wrapping_sub(segment.seq)
            }
            // The server refused (a closed port): the client takes a reset only at the
            // sequence number it expects.
            (SynProxy::AwaitingServer { cookie, .. }, Direction::Reply) if rst => {
                cookie.wrapping_add(1).wrapping_sub(segment.seq)
            }
            (SynProxy::AwaitingServer { .. }, Direction::Original) if rst => {
                return Ok(Some(segment));
            }
            (SynProxy::AwaitingServer { .. }, _) => {
                return Err(Stage::Done(Verdict::Drop(DropReason::SynProxyPending)))
            }
            (SynProxy::Spliced { delta, .. }, _) => delta,
        };
        if syn_ack {
            return Err(self.server_answered(id, &segment, delta, now_ns));
        }
        let tcp_bytes = tcp_bytes(pkt);
        match direction {
            Direction::Reply => {
                segment.seq = segment.seq.wrapping_add(delta);
                shift(tcp_bytes, tcp::field::SEQ, delta);
            }
            Direction::Original if segment.flags & flags::ACK != 0 => {
                shift(tcp_bytes, tcp::field::ACK, delta.wrapping_neg());
            }
            Direction::Original => {}
        }
        Ok(Some(segment))
    }

    /// The server's SYN-ACK (first or retransmitted): the flow is spliced, the tracker
    /// sees both the SYN-ACK and the ACK the proxy sends for the client, and the pipeline
    /// is asked to send that ACK and the client's window update.
    fn server_answered(
        &mut self,
        id: FlowId,
        syn_ack: &TcpSegment,
        delta: u32,
        now_ns: u64,
    ) -> Stage {
        let (cookie, client_window) = match self.flows.data(id).syn_proxy {
            SynProxy::AwaitingServer {
                cookie,
                client_window,
            } => {
                let cookie_view = TcpSegment {
                    seq: cookie,
                    ..*syn_ack
                };
                let ack = TcpSegment {
                    flags: flags::ACK,
                    seq: syn_ack.ack,
                    ack: cookie.wrapping_add(1),
                    window: client_window,
                    payload_len: 0,
                    window_scale: None,
                };
                for (direction, segment) in
                    [(Direction::Reply, cookie_view), (Direction::Original, ack)]
                {
                    if let Track::Invalid(_) =
                        self.flows.track(id, direction, Some(&segment), now_ns)
                    {
                        return Stage::Done(Verdict::Drop(DropReason::ConntrackInvalid));
                    }
                }
                (cookie, client_window)
            }
            // A retransmission (our ACK was lost, or is on its way): answered again, the
            // tracker having seen both already.
            SynProxy::Spliced { client_window, .. } => {
                (syn_ack.seq.wrapping_add(delta), client_window)
            }
            SynProxy::Off => return Stage::Done(Verdict::Drop(DropReason::ConntrackInvalid)),
        };
        self.flows.data_mut(id).syn_proxy = SynProxy::Spliced {
            delta,
            client_window,
        };
        Stage::Request(Request::Splice(Splice {
            client: self.flows.key(id, Direction::Original),
            server: self.flows.key(id, Direction::Reply),
            client_next: syn_ack.ack,
            server_next: syn_ack.seq.wrapping_add(1),
            client_window,
            server_window: syn_ack.window,
            cookie,
        }))
    }
}

impl Pipeline {
    /// Sends the SYN-ACK with the cookie back to the client, in place of its SYN.
    #[cold]
    pub(crate) fn send_cookie(&mut self, pkt: &mut PacketBuf, answer: &CookieAnswer) -> Verdict {
        if pkt.capacity() < SYN_FRAME_LEN {
            return Verdict::Drop(DropReason::MalformedL4);
        }
        let CookieAnswer {
            key,
            client_isn,
            cookie,
            mss,
        } = *answer;
        let syn_ack = TcpSegment {
            flags: flags::SYN | flags::ACK,
            seq: cookie,
            ack: client_isn.wrapping_add(1),
            // No data until the server has answered: the window update opens it.
            window: 0,
            payload_len: 0,
            window_scale: None,
        };
        write_syn(pkt, &key.reversed(), &syn_ack, mss);
        match self.send_generated(pkt, key.src) {
            Some(verdict) => {
                self.counters.syn_cookies_sent.inc();
                verdict
            }
            None => Verdict::Drop(DropReason::NoRoute),
        }
    }

    /// Sends the ACK the client owes the server, in place of the server's SYN-ACK, and the
    /// client its window update beside it.
    #[cold]
    pub(crate) fn send_splice(&mut self, pkt: &mut PacketBuf, splice: &Splice) -> Verdict {
        let Splice {
            client,
            server,
            client_next,
            server_next,
            client_window,
            server_window,
            cookie,
        } = *splice;
        let to_client = TcpSegment {
            flags: flags::ACK,
            seq: cookie.wrapping_add(1),
            ack: client_next,
            window: server_window,
            payload_len: 0,
            window_scale: None,
        };
        let mut room = [0u8; ACK_FRAME_LEN];
        // A frame of our own: its EtherType too (the MACs are the routing's).
        EthernetFrame::new_unchecked(&mut room[..]).set_ethertype(ethernet::ethertype::IPV4);
        let mut update = PacketBuf::new(&mut room, 0);
        write_ack(&mut update, &client.reversed(), &to_client);
        let queued = match self.send_generated(&mut update, client.src) {
            Some(Verdict::Transmit { port }) => self.extra_frames.push(port, update.bytes()),
            _ => false,
        };
        if !queued {
            // The client learns the window from its next zero-window probe instead.
            self.counters.syn_proxy_updates_lost.inc();
        }
        let to_server = TcpSegment {
            flags: flags::ACK,
            seq: client_next,
            ack: server_next,
            window: client_window,
            payload_len: 0,
            window_scale: None,
        };
        write_ack(pkt, &server.reversed(), &to_server);
        self.send_generated(pkt, server.src)
            .unwrap_or(Verdict::Drop(DropReason::NoRoute))
    }
}

/// The MSS option of the packet's SYN.
fn client_mss(pkt: &PacketBuf) -> Option<u16> {
    let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
    let segment = TcpPacket::new_checked(ip.payload()).ok()?;
    let mss = walk_options(segment.options()).find_map(|(_, kind, data)| match (kind, data) {
        (option::MSS, &[high, low]) => Some(u16::from_be_bytes([high, low])),
        _ => None,
    });
    mss
}

/// The TCP header and data of the packet (an IPv4 TCP packet the flow key validated).
fn tcp_bytes<'a>(pkt: &'a mut PacketBuf) -> &'a mut [u8] {
    let ip_start = ethernet::HEADER_LEN;
    let header_len = usize::from(Ipv4Packet::new_unchecked(&pkt.bytes()[ip_start..]).header_len());
    &mut pkt.bytes_mut()[ip_start + header_len..]
}

/// Adds `delta` to the 32-bit sequence or acknowledgement number at `field`, patching the
/// checksum.
fn shift(segment: &mut [u8], field: std::ops::Range<usize>, delta: u32) {
    let old = u32::from_be_bytes(segment[field.clone()].try_into().unwrap_or_default());
    let new = old.wrapping_add(delta);
    segment[field].copy_from_slice(&new.to_be_bytes());
    let mut header = TcpPacket::new_unchecked(segment);
    let patched = checksum::update32(header.checksum(), old, new);
    header.set_checksum(patched);
}

/// Writes a SYN (or SYN-ACK) from `key.src` to `key.dst` carrying the MSS option alone over
/// the packet's IPv4 and TCP headers (Ethernet's is the caller's).
fn write_syn(pkt: &mut PacketBuf, key: &FlowKey, segment: &TcpSegment, mss: u16) {
    write_segment(pkt, key, segment, &mss_option(mss));
}

/// Writes a bare ACK (no options, no data) from `key.src` to `key.dst`.
fn write_ack(pkt: &mut PacketBuf, key: &FlowKey, segment: &TcpSegment) {
    write_segment(pkt, key, segment, &[]);
}

fn mss_option(mss: u16) -> [u8; 4] {
    let [high, low] = mss.to_be_bytes();
    [option::MSS, 4, high, low]
}
