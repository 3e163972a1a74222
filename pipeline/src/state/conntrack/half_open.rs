//! A table's half-open TCP flows in the order they became half-open: an intrusive
//! doubly-linked list over arena slots, so that the table finds the oldest one in O(1)
//! wherever it sits in the arena, and a flow joins or leaves in O(1). 8 bytes per slot,
//! allocated with the table.

const NONE: u32 = u32::MAX;

pub(super) struct HalfOpenList {
    /// Per arena slot: the previous (older) and next (newer) half-open slot.
    links: Vec<[u32; 2]>,
    head: u32,
    tail: u32,
    len: usize,
}

impl HalfOpenList {
    pub(super) fn new(capacity: usize) -> Self {
        HalfOpenList {
            links: vec![[NONE; 2]; capacity],
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot that has been half-open longest.
    pub(super) fn oldest(&self) -> Option<usize> {
        (self.head != NONE).then_some(self.head as usize)
    }

    /// The half-open slots, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let mut next = self.head;
        std::iter::from_fn(move || {
            let slot = (next != NONE).then_some(next as usize)?;
            next = self.links[slot][1];
            Some(slot)
        })
    }

    /// The slot that became half-open right after `slot` (which must be in the list).
    pub(super) fn newer(&self, slot: usize) -> Option<usize> {
        let next = self.links.get(slot)?[1];
        (next != NONE).then_some(next as usize)
    }

    /// Where `slot`'s links are: what joining or leaving the list reads and writes, for a
    /// caller to prefetch.
    pub(super) fn links_address(&self, slot: usize) -> Option<*const u8> {
        self.links
            .get(slot)
            .map(|links| links as *const [u32; 2] as *const u8)
    }

    /// `slot` became half-open (it must not be in the list).
    pub(super) fn push(&mut self, slot: usize) {
        let slot32 = slot as u32;
        self.links[slot] = [self.tail, NONE];
        match self.tail {
            NONE => self.head = slot32,
            tail => self.links[tail as usize][1] = slot32,
        }
        self.tail = slot32;
        self.len += 1;
    }

    /// `slot` is half-open no more (it must be in the list).
    pub(super) fn remove(&mut self, slot: usize) {
        let [prev, next] = self.links[slot];
        match prev {
            NONE => self.head = next,
            prev => self.links[prev as usize][1] = next,
        }
        match next {
            NONE => self.tail = prev,
            next => self.links[next as usize][0] = prev,
        }
        self.links[slot] = [NONE; 2];
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_first_with_removals_anywhere() {
        let mut list = HalfOpenList::new(8);
        for slot in [5, 2, 7, 0] {
            list.push(slot);
        }
        assert_eq!((list.oldest(), list.len()), (Some(5), 4));
        list.remove(2);
        list.remove(5);
        assert_eq!(list.oldest(), Some(7));
        list.push(5);
        list.remove(0);
        assert_eq!(list.oldest(), Some(7));
        list.remove(7);
        assert_eq!((list.oldest(), list.len()), (Some(5), 1));
        list.remove(5);
        assert_eq!((list.oldest(), list.len()), (None, 0));
        list.push(3);
        assert_eq!(list.oldest(), Some(3));
    }

    #[test]
    fn iterates_oldest_first() {
        let mut list = HalfOpenList::new(8);
        assert_eq!(list.iter().count(), 0);
        for slot in [5, 2, 7, 0] {
            list.push(slot);
        }
        list.remove(7);
        assert_eq!(list.iter().collect::<Vec<_>>(), [5, 2, 0]);
    }
}
