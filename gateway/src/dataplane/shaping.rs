//! QoS in shaper mode on a worker: one [`Shaper`] per WAN link direction, holding the mbufs
//! the pipeline sends on that link while the worker's share of the rate is used up, and
//! releasing them from the poll loop against the worker's clock (no timer thread).
//!
//! The pipeline decides which packets are shaped (`Pipeline::shape_requests`); this module
//! queues them, sends what the rate allows each loop, marks CE or drops as CoDel says, and
//! reports back to the pipeline's QoS (its class counters, and the demand that the control
//! thread divides the link's rate by).

use std::sync::Arc;

use pipeline::features::qos::ShapeRequest;
use pipeline::features::qos::{Class, Link, QosStats};
use pipeline::features::shaper::{Outcome, Shaper, ShaperConfig};
use pipeline::pipeline::features::mark_congestion;
use pipeline::{DropReason, Pipeline, RouterConfig, WorkerCounters};

use crate::dataplane::egress::Egress;
use crate::dpdk::{Mbuf, Mempool};

/// Packets each shaper may send per loop: a loop at line rate is a few microseconds, so
/// this is far above what any share releases in one, yet bounds a loop's work.
const DEQUEUE_PER_LOOP: usize = 64;

/// The most packets one shaper holds when the mempool is large: about 50 ms of a 1 Gbit/s
/// share in full-sized frames; CoDel keeps the standing queue near its 5 ms target anyway.
const MAX_QUEUED_PER_LINK: usize = 4096;

/// Each shaper's bound for a pool of `mbufs` shared by `workers`: the shapers of all
/// workers together hold at most a quarter of the pool, so that queued packets never starve
/// the RX descriptors, the rings and the packets held for ARP of buffers.
pub fn queued_per_link(mbufs: u32, workers: usize) -> usize {
    let shapers = 2 * workers.max(1);
    (mbufs as usize / 4 / shapers).clamp(1, MAX_QUEUED_PER_LINK)
}

/// (packets, bytes) of one class since the last report.
#[derive(Clone, Copy, Default)]
struct Tally {
    sent: (u64, u64),
    dropped: (u64, u64),
}

impl Tally {
    fn send(&mut self, len: usize) {
        self.sent.0 += 1;
        self.sent.1 += len as u64;
    }

    fn drop(&mut self, len: usize) {
        self.dropped.0 += 1;
        self.dropped.1 += len as u64;
    }

    fn is_empty(&self) -> bool {
        self.sent.0 == 0 && self.dropped.0 == 0
    }
}

/// Where a shaped packet leaves: the worker's egress, and what fragmenting one takes.
pub struct Exit<'a> {
    pub egress: &'a mut Egress,
    pub pool: &'a Mempool,
    pub counters: &'a WorkerCounters,
    /// For the interfaces' MTUs.
    pub router: &'a RouterConfig,
}

/// Set in a queued mbuf's port field: the packet exceeds its interface's MTU and is split
/// as it leaves (the pipeline's `Fragment` verdict). Interface numbers stay far below it.
const FRAGMENT: u16 = 0x8000;

/// How a packet the pipeline decided leaves: by `port`, whole or in fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaving {
    Whole { port: u16 },
    Fragmented { port: u16 },
}

impl Leaving {
    fn tag(self) -> u16 {
        match self {
            Leaving::Whole { port } => port,
            Leaving::Fragmented { port } => port | FRAGMENT,
        }
    }
}

impl Exit<'_> {
    /// Sends `mbuf` as its port field says (see [`FRAGMENT`]).
    fn send(&mut self, mbuf: Mbuf) {
        let tag = mbuf.port().0;
        let port = tag & !FRAGMENT;
        if tag & FRAGMENT == 0 {
            self.egress.send(port, mbuf, self.counters);
            return;
        }
        match self.router.interfaces.get(usize::from(port)) {
            Some(interface) => {
                self.egress
                    .send_fragments(port, mbuf, interface.mtu, self.pool, self.counters)
            }
            None => self.counters.record_drop(DropReason::NotOurMac),
        }
    }
}

/// A worker's shapers, uplink and downlink, and what they did since the pipeline's QoS last
/// heard of it.
pub struct LinkShapers {
    shapers: [Shaper<Mbuf>; 2],
    /// Per link: bulk, then priority.
    tallies: [[Tally; 2]; 2],
    /// The pipeline's QoS statistics (`Pipeline::qos_stats`), where metrics read the
    /// shapers' marks, backlog and delays.
    stats: [Arc<QosStats>; 2],
}

impl LinkShapers {
    /// Shapers that hold at most `queued_per_link` packets each (their share of the mempool)
    /// and publish into the worker's QoS `stats`. Allocates: build it at start.
    pub fn new(queued_per_link: usize, stats: [Arc<QosStats>; 2]) -> Self {
        let config = ShaperConfig {
            packets: queued_per_link.max(1),
            ..ShaperConfig::default()
        };
        LinkShapers {
            shapers: [Shaper::new(config), Shaper::new(config)],
            tallies: [[Tally::default(); 2]; 2],
            stats,
        }
    }

    /// A packet the pipeline sends (`leaving`) and asked to shape: priority is sent at once
    /// and charged to the link (dropped as `qos_policed` above its share of the link);
    /// bulk is sent at once while nothing waits and the share allows, else queued (which may
    /// drop the fattest queue's head as `qos_queue_full`).
    #[inline]
    pub fn shape(
        &mut self,
        leaving: Leaving,
        mut mbuf: Mbuf,
        request: ShapeRequest,
        now_ns: u64,
        exit: &mut Exit,
    ) {
        let link = request.link as usize;
        let shaper = &mut self.shapers[link];
        let [bulk, priority] = &mut self.tallies[link];
        let len = mbuf.len();
        mbuf.set_port(leaving.tag());
        match request.class {
            Class::Priority => {
                if shaper.charge(request.arrival.len, now_ns) {
                    priority.send(len);
                    exit.send(mbuf);
                } else {
                    priority.drop(len);
                    exit.counters.record_drop(DropReason::QosPoliced);
                }
            }
            Class::Bulk => {
                let counters = exit.counters;
                let sent_now = shaper.offer(mbuf, request.arrival, now_ns, |dropped| {
                    bulk.drop(dropped.len());
                    counters.record_drop(DropReason::QosQueueFull);
                });
                if let Some(mbuf) = sent_now {
                    bulk.send(len);
                    exit.send(mbuf);
                }
            }
        }
    }

    /// Once per loop: each shaper sends what its link's share allows by now (at this
    /// worker's current share, which the control thread moves with demand), CE-marked or
    /// dropped as CoDel decides, and the pipeline's QoS hears what happened. With shaping
    /// turned off (a reload), whatever still waits is sent at once.
    #[inline]
    pub fn poll(
        &mut self,
        pipeline: &mut Pipeline,
        now_ns: u64,
        egress: &mut Egress,
        pool: &Mempool,
        counters: &WorkerCounters,
    ) {
        let shaping = pipeline.shaping();
        let mut busy = false;
        {
            let mut exit = Exit {
                egress,
                pool,
                counters,
                router: pipeline.router(),
            };
            for (index, link) in [Link::Uplink, Link::Downlink].into_iter().enumerate() {
                let shaper = &mut self.shapers[index];
                let [bulk, priority] = &mut self.tallies[index];
                if shaping {
                    // Before the idle test: an idle link's next packet is sent at this rate.
                    shaper.set_rate(pipeline.qos_share_bps(link), now_ns);
                }
                if shaper.is_idle() && bulk.is_empty() && priority.is_empty() {
                    continue;
                }
                busy = true;
                if !shaping {
                    send_all(shaper, bulk, &mut exit);
                } else {
                    shaper.dequeue(now_ns, DEQUEUE_PER_LOOP, |mut mbuf, outcome| {
                        let len = mbuf.len();
                        match outcome {
                            Outcome::Send => {}
                            Outcome::MarkAndSend => {
                                mark_congestion(mbuf.data_mut());
                            }
                            Outcome::Drop => {
                                bulk.drop(len);
                                exit.counters.record_drop(DropReason::QosCodel);
                                return;
                            }
                        }
                        bulk.send(len);
                        exit.send(mbuf);
                    });
                }
                self.stats[index].shaper.publish(&shaper.stats());
            }
        }
        if busy {
            self.report(pipeline);
        }
    }

    /// At the worker's stop: whatever still waits is sent, as a reload that ends shaping does.
    pub fn flush(
        &mut self,
        pipeline: &mut Pipeline,
        egress: &mut Egress,
        pool: &Mempool,
        counters: &WorkerCounters,
    ) {
        {
            let mut exit = Exit {
                egress,
                pool,
                counters,
                router: pipeline.router(),
            };
            for (index, shaper) in self.shapers.iter_mut().enumerate() {
                send_all(shaper, &mut self.tallies[index][0], &mut exit);
                self.stats[index].shaper.publish(&shaper.stats());
            }
        }
        self.report(pipeline);
    }

    /// Tells the pipeline's QoS what the shapers did since the last report.
    fn report(&mut self, pipeline: &mut Pipeline) {
        for (index, link) in [Link::Uplink, Link::Downlink].into_iter().enumerate() {
            let backlog = !self.shapers[index].is_idle();
            let [bulk, priority] = &mut self.tallies[index];
            pipeline.qos_shaped(link, Class::Bulk, bulk.sent, bulk.dropped, backlog);
            pipeline.qos_shaped(
                link,
                Class::Priority,
                priority.sent,
                priority.dropped,
                false,
            );
            *bulk = Tally::default();
            *priority = Tally::default();
        }
    }
}

/// Sends everything `shaper` holds at once, ignoring the rate (shaping ended, or the worker
/// stops), counted in `bulk`: only bulk packets are ever queued.
fn send_all(shaper: &mut Shaper<Mbuf>, bulk: &mut Tally, exit: &mut Exit) {
    shaper.drain(|mbuf| {
        bulk.send(mbuf.len());
        exit.send(mbuf);
    });
}
