//! A request the ctl thread arms on every worker until it is done: `gateway ctl trace` and
//! `gateway ctl capture --drops`. The worker takes the request from its mailbox, keeps it
//! while it sends records back over the request's bounded channel (whose slots crossbeam
//! allocated when the ctl thread made it, so the worker allocates nothing), and lets it go
//! when it has sent its count, when nobody reads its records any more, or when the ctl
//! thread says it is done (it has what it waited for, or gave up). Unarmed, a worker's loop
//! pays one load of a flag nobody writes ([`Mailbox::has_mail`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::mailbox::{Mailbox, MailboxSender};

/// What every armed request carries.
pub struct Arming<T> {
    /// Records the worker has still to send.
    pub count: usize,
    pub records: Sender<T>,
    /// Set by the ctl thread when it is done: the worker disarms at its next loop.
    pub done: Arc<AtomicBool>,
}

/// A request with its [`Arming`]: the trace's filter, the drop capture's reasons.
pub trait ArmedRequest {
    type Record;
    fn arming(&mut self) -> &mut Arming<Self::Record>;
}

/// The worker's end: the request in force, if any.
pub struct Armed<R> {
    requests: Mailbox<R>,
    active: Option<R>,
}

impl<R: ArmedRequest> Armed<R> {
    pub fn pair() -> (MailboxSender<R>, Armed<R>) {
        let (requests_in, requests) = Mailbox::pair();
        (
            requests_in,
            Armed {
                requests,
                active: None,
            },
        )
    }

    /// Once per poll loop: disarms a request the ctl thread is done with, and takes a new
    /// one if none is armed. Idle, one load of the pending flag.
    #[inline]
    pub fn poll(&mut self) {
        if self.active.is_none() && !self.requests.has_mail() {
            return;
        }
        self.take_or_disarm();
    }

    #[cold]
    fn take_or_disarm(&mut self) {
        if let Some(active) = self.active.as_mut() {
            if active.arming().done.load(Ordering::Relaxed) {
                self.active = None;
            }
        }
        if self.active.is_none() {
            self.active = self.requests.take();
        }
    }

    #[inline]
    pub fn is_armed(&self) -> bool {
        self.active.is_some()
    }

    pub fn active(&self) -> Option<&R> {
        self.active.as_ref()
    }

    /// Sends `record` back (not if the channel has no room) and disarms once the request
    /// has its count or nobody reads its records; false when it is disarmed.
    pub fn deliver(&mut self, record: R::Record) -> bool {
        let Some(active) = self.active.as_mut() else {
            return false;
        };
        let arming = active.arming();
        match arming.records.try_send(record) {
            Ok(()) => arming.count = arming.count.saturating_sub(1),
            Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => arming.count = 0,
        }
        if arming.count == 0 {
            self.active = None;
            return false;
        }
        true
    }
}

/// The ctl thread's end: arms every worker with the request `make` builds from an
/// [`Arming`] for `count` records, and collects what they send for at most `timeout`.
/// `what` names the request in the error a worker still busy with an earlier one gives.
pub fn arm_and_collect<R, T>(
    workers: &[MailboxSender<R>],
    count: usize,
    timeout: Duration,
    what: &str,
    make: impl Fn(Arming<T>) -> R,
) -> Result<Vec<T>, String> {
    let (records_in, records) = crossbeam_channel::bounded(count);
    let done = Arc::new(AtomicBool::new(false));
    for (worker, requests) in workers.iter().enumerate() {
        let request = make(Arming {
            count,
            records: records_in.clone(),
            done: done.clone(),
        });
        if requests.try_send(request).is_err() {
            done.store(true, Ordering::Relaxed);
            return Err(format!(
                "worker {worker} is still {what} for an earlier request"
            ));
        }
    }
    drop(records_in);
    let collected = collect(&records, count, Instant::now() + timeout);
    done.store(true, Ordering::Relaxed);
    Ok(collected)
}

/// Up to `count` records, waiting until `deadline` at the most.
fn collect<T>(records: &Receiver<T>, count: usize, deadline: Instant) -> Vec<T> {
    let mut collected = Vec::new();
    while collected.len() < count {
        match records.recv_deadline(deadline) {
            Ok(record) => collected.push(record),
            Err(_) => break,
        }
    }
    collected
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ask(Arming<u32>);

    impl ArmedRequest for Ask {
        type Record = u32;
        fn arming(&mut self) -> &mut Arming<u32> {
            &mut self.0
        }
    }

    #[test]
    fn every_worker_is_armed_and_what_they_send_is_collected_up_to_the_count() {
        let (first_in, mut first) = Armed::<Ask>::pair();
        let (second_in, mut second) = Armed::<Ask>::pair();
        let workers = std::thread::spawn(move || {
            while !(first.is_armed() && second.is_armed()) {
                first.poll();
                second.poll();
            }
            assert!(first.deliver(1), "armed until its count");
            assert!(
                !first.deliver(2),
                "the second record is its count: disarmed"
            );
            assert!(!first.is_armed());
            assert!(second.is_armed(), "each worker counts its own");
        });
        let got = arm_and_collect(
            &[first_in, second_in],
            2,
            Duration::from_secs(10),
            "asking",
            Ask,
        )
        .unwrap();
        workers.join().unwrap();
        assert_eq!(got, [1, 2]);
    }

    #[test]
    fn a_worker_still_armed_by_an_earlier_request_is_named() {
        let (busy_in, _busy) = Armed::<Ask>::pair();
        let (records, _) = crossbeam_channel::bounded(1);
        let earlier = Ask(Arming {
            count: 1,
            records,
            done: Arc::new(AtomicBool::new(false)),
        });
        assert!(busy_in.try_send(earlier).is_ok());
        let (idle_in, _idle) = Armed::<Ask>::pair();
        let error = arm_and_collect(
            &[idle_in, busy_in],
            1,
            Duration::from_millis(1),
            "asking",
            Ask,
        )
        .unwrap_err();
        assert_eq!(error, "worker 1 is still asking for an earlier request");
    }
}
