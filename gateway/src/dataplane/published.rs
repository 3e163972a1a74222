//! Immutable state published by the control thread and picked up by workers between
//! bursts, RCU-style: a worker checks one version number per loop (a read of a cache line
//! that changes only on publish) and takes the new snapshot only when it moved.
//!
//! Old snapshots are freed by the publisher, never by a worker: a router config holds a
//! 32 MiB route table, and a worker that dropped the last reference would stall in `munmap`.
//! The publisher keeps every replaced snapshot until only it holds it
//! ([`Published::free_retired`]), so a worker's drop is never the last.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

pub struct Published<T> {
    value: ArcSwap<T>,
    version: AtomicU64,
    /// Replaced snapshots that a worker may still hold. Locked by the publisher's thread
    /// only (publish, free_retired), never on a worker's path.
    retired: Mutex<Vec<Arc<T>>>,
}

impl<T> Published<T> {
    pub fn new(value: Arc<T>) -> Self {
        Published {
            value: ArcSwap::new(value),
            version: AtomicU64::new(1),
            retired: Mutex::new(Vec::new()),
        }
    }

    pub fn publish(&self, value: Arc<T>) {
        let old = self.value.swap(value);
        self.version.fetch_add(1, Ordering::Release);
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(old);
        self.free_retired();
    }

    /// Frees the replaced snapshots no worker holds any more, on the caller's thread: the
    /// publisher calls it now and then (the control thread's upkeep).
    pub fn free_retired(&self) {
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        retired.retain(|snapshot| Arc::strong_count(snapshot) > 1);
    }

    /// Replaced snapshots still held by someone besides the publisher.
    pub fn retired_len(&self) -> usize {
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The current snapshot and its version.
    pub fn load(&self) -> (Arc<T>, u64) {
        let version = self.version.load(Ordering::Acquire);
        (self.value.load_full(), version)
    }

    /// The new snapshot if it changed since `seen`, updating `seen`.
    #[inline]
    pub fn changed_since(&self, seen: &mut u64) -> Option<Arc<T>> {
        let version = self.version.load(Ordering::Acquire);
        if version == *seen {
            return None;
        }
        *seen = version;
        Some(self.value.load_full())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_each_publish_once() {
        let published = Published::new(Arc::new(1));
        let (first, mut seen) = published.load();
        assert_eq!(*first, 1);
        assert!(published.changed_since(&mut seen).is_none());
        published.publish(Arc::new(2));
        assert_eq!(published.changed_since(&mut seen).as_deref(), Some(&2));
        assert!(published.changed_since(&mut seen).is_none());
    }

    #[test]
    fn a_worker_never_drops_the_last_reference_to_an_old_snapshot() {
        let published = Published::new(Arc::new(vec![1u8; 1024]));
        let (held_by_worker, _) = published.load();
        let old = Arc::downgrade(&held_by_worker);
        published.publish(Arc::new(vec![2u8; 1024]));
        assert_eq!(published.retired_len(), 1);
        // The worker moves on: its drop is not the last, the publisher still holds it.
        drop(held_by_worker);
        assert!(old.upgrade().is_some());
        published.free_retired();
        assert!(old.upgrade().is_none());
        assert_eq!(published.retired_len(), 0);
    }

    #[test]
    fn a_snapshot_nobody_held_is_freed_at_the_next_publish() {
        let published = Published::new(Arc::new(1));
        let first = Arc::downgrade(&published.load().0);
        published.publish(Arc::new(2));
        assert!(first.upgrade().is_none());
        assert_eq!(published.retired_len(), 0);
    }
}
