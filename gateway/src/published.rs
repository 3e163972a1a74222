//! Immutable state published by the control thread and picked up by workers between
//! bursts, RCU-style: a worker checks one version number per loop (a read of a cache line
//! that changes only on publish) and takes the new snapshot only when it moved.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

pub struct Published<T> {
    value: ArcSwap<T>,
    version: AtomicU64,
}

impl<T> Published<T> {
    pub fn new(value: Arc<T>) -> Self {
        Published {
            value: ArcSwap::new(value),
            version: AtomicU64::new(1),
        }
    }

    pub fn publish(&self, value: Arc<T>) {
        self.value.store(value);
        self.version.fetch_add(1, Ordering::Release);
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
}
