//! A one-slot mailbox from the ctl thread to a worker. The sender raises a flag beside the
//! item; the worker reads the flag once per poll loop, a load of a line only the ctl thread
//! writes (and rarely), and touches the channel only when it is raised. Polling the channel
//! itself cost an idle loop about 20 cycles (`gateway bench`, `trace_unarmed`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError};

/// The ctl thread's end.
pub struct MailboxSender<T> {
    slot: Sender<T>,
    pending: Arc<AtomicBool>,
}

impl<T> MailboxSender<T> {
    /// Leaves `item` for the worker; refused (the item handed back) while the slot holds one
    /// it has not taken yet.
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        self.slot.try_send(item)?;
        // After the item: a worker that sees the flag finds the item.
        self.pending.store(true, Ordering::Release);
        Ok(())
    }
}

/// The worker's end.
pub struct Mailbox<T> {
    slot: Receiver<T>,
    pending: Arc<AtomicBool>,
}

impl<T> Mailbox<T> {
    pub fn pair() -> (MailboxSender<T>, Mailbox<T>) {
        let (slot_in, slot) = crossbeam_channel::bounded(1);
        let pending = Arc::new(AtomicBool::new(false));
        (
            MailboxSender {
                slot: slot_in,
                pending: pending.clone(),
            },
            Mailbox { slot, pending },
        )
    }

    /// Whether an item may be waiting: one relaxed load, for every loop.
    #[inline]
    pub fn has_mail(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// The waiting item, if any.
    pub fn take(&self) -> Option<T> {
        if !self.pending.swap(false, Ordering::Acquire) {
            return None;
        }
        self.slot.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_taken_once_and_a_second_waits_for_the_slot() {
        let (sender, mailbox) = Mailbox::pair();
        assert!(!mailbox.has_mail() && mailbox.take().is_none());
        sender.try_send(1).unwrap();
        assert!(sender.try_send(2).is_err(), "one slot");
        assert!(mailbox.has_mail());
        assert_eq!(mailbox.take(), Some(1));
        assert!(!mailbox.has_mail() && mailbox.take().is_none());
        sender.try_send(3).unwrap();
        assert_eq!(mailbox.take(), Some(3));
    }

    #[test]
    fn items_sent_from_another_thread_all_arrive() {
        let (sender, mailbox) = Mailbox::pair();
        let sending = std::thread::spawn(move || {
            for item in 0..1000 {
                let mut item = item;
                loop {
                    match sender.try_send(item) {
                        Ok(()) => break,
                        Err(refused) => item = refused.into_inner(),
                    }
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < 1000 {
            if mailbox.has_mail() {
                if let Some(item) = mailbox.take() {
                    assert_eq!(item, next);
                    next += 1;
                }
            }
            std::hint::spin_loop();
        }
        sending.join().unwrap();
    }
}
