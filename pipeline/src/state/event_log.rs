//! A worker's bounded, lock-free queue of events for a log off the workers (the NAT log, the
//! firewall log): the worker pushes, a logging thread drains. A full queue loses the event,
//! counted, and never holds up a packet. Events carry the worker's clock of the loop they
//! happened in, which the draining thread turns into wall-clock time.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;

/// One worker's queue of `E`, written by that worker only.
#[derive(Debug)]
pub struct EventLog<E> {
    queue: ArrayQueue<E>,
    lost: AtomicU64,
    /// The worker's clock at its current loop, which events are stamped with; the draining
    /// thread reads it beside the wall clock to date them.
    now_ns: AtomicU64,
}

impl<E> EventLog<E> {
    /// Room for `capacity` events between two drains (at least one). Allocates: at set-up.
    pub fn new(capacity: usize) -> Self {
        EventLog {
            queue: ArrayQueue::new(capacity.max(1)),
            lost: AtomicU64::new(0),
            now_ns: AtomicU64::new(0),
        }
    }

    /// The worker's clock now: once per poll loop, a store to a line only it writes.
    #[inline]
    pub fn set_now(&self, now_ns: u64) {
        self.now_ns.store(now_ns, Ordering::Relaxed);
    }

    /// The worker's clock at its latest loop: the stamp of an event pushed now.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Relaxed)
    }

    /// Queues the event, or counts it lost when the queue is full. Lock-free, no allocation.
    #[inline]
    pub fn push(&self, event: E) {
        if self.queue.push(event).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One more event lost before it was queued (over a budget).
    #[inline]
    pub fn count_lost(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes every queued event, oldest first.
    pub fn drain(&self, mut each: impl FnMut(E)) {
        while let Some(event) = self.queue.pop() {
            each(event);
        }
    }

    /// Events lost to a full queue, or counted lost, since start.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_counts_what_it_loses_and_drains_in_order() {
        let log = EventLog::new(2);
        for event in 1..=3 {
            log.push(event);
        }
        assert_eq!(log.lost(), 1);
        let mut drained = Vec::new();
        log.drain(|e| drained.push(e));
        assert_eq!(drained, [1, 2]);
        log.push(4);
        log.drain(|e| drained.push(e));
        assert_eq!(drained, [1, 2, 4]);
    }
}
