//! Session sync for an active/standby pair (issue 49): each box sends the other its flows,
//! with their NAT bindings and forward translations, so that the standby, once it takes the
//! addresses over, forwards the sessions the failed box carried.
//!
//! # How
//!
//! Each worker walks its flow table a slice at a time ([`Pipeline::export_flow_slots`]), a
//! whole sweep per refresh period, and the control thread sends what it hands out in
//! messages of at most [`FLOWS_PER_MESSAGE`] flows, each within one UDP datagram. There are
//! no per-packet hooks and no removal messages: the peer installs every flow with a lease
//! ([`Pipeline::install_synced`]), its time left no longer than a few refresh periods, and a
//! flow the sender has closed stops being refreshed and runs out on the peer. Once the peer
//! forwards the flow's packets itself, its own tracking sets the flow's time as for any
//! other. A TCP flow is installed as if picked up mid-stream (its windows not judged): the
//! copy lags the connection by up to a refresh period of sequence numbers.
//!
//! The peer installs a flow only where its own config would have made the same flow (the
//! snapshot's restore rules, owner derived for its own worker count): the pair's configs
//! must agree on addresses, forwards and rules.
//!
//! # Message
//!
//! | bytes   | what |
//! | ------- | ---- |
//! | 0..8    | [`SYNC_MAGIC`] |
//! | 8..12   | [`SYNC_VERSION`], little-endian, with the snapshot's record version in its high half |
//! | 12..20  | the sender's epoch, little-endian: its start time in Unix milliseconds |
//! | 20..28  | the message's sequence number in that epoch, little-endian, from 1 |
//! | 28..32  | the payload's length, little-endian |
//! | 32..    | the flows, postcard-encoded as the snapshot's records |
//! | last 32 | HMAC-SHA256 of everything before it, under the sender's key |
//!
//! Each direction has its own key, derived from the pair's shared secret and the sender's
//! address ([`SyncKey::for_sender`]): a box's own messages, of this run or any earlier one,
//! never pass for its peer's when sent back to it.
//!
//! [`SyncReceiver::open`] checks the tag before it reads anything else it would act on,
//! then refuses an epoch older than the one it follows (a replay of an earlier run), and a
//! sequence number it has seen or that lags the highest by [`REPLAY_WINDOW`] or more (UDP
//! may reorder, within the window), and a payload that does not decode to well-formed
//! flows. Every refusal is counted by [`Refusal`].

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::snapshot::{owner, RestoreReport, SavedFlow, Skip, FORMAT_VERSION};
use crate::flow::Direction;
use crate::state::flow_data::SYNCED_COPY;
use crate::Pipeline;

/// The first bytes of every sync message.
pub const SYNC_MAGIC: [u8; 8] = *b"GWSYNC\0\0";
/// The message format's version (low half) and the flow records' (high half): a pair whose
/// builds disagree on either refuses the other's messages rather than misread them.
pub const SYNC_VERSION: u32 = 1 | FORMAT_VERSION << 16;
const HEADER_LEN: usize = 32;
const TAG_LEN: usize = 32;
/// Flows in one message: with the largest records (a TCP flow with its tracker and a NAT
/// binding) the message stays within a 1,472-byte UDP payload, one 1,500-byte IP packet.
pub const FLOWS_PER_MESSAGE: usize = 8;
/// The largest message [`SyncSender::seal`] makes (checked by a test with the largest
/// records).
pub const MAX_MESSAGE: usize = 1472;
/// Sequence numbers this far below the highest seen are refused as replays; those within
/// it, once each.
pub const REPLAY_WINDOW: u64 = 64;
/// The shortest shared key taken: 128 bits.
pub const MIN_KEY_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The key one box signs with and its peer checks with, ready to use.
#[derive(Clone)]
pub struct SyncKey(HmacSha256);

/// Why a key was not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("the key is {len} bytes; at least {MIN_KEY_LEN} are needed")]
    TooShort { len: usize },
}

impl SyncKey {
    /// The key for what `sender` sends (its sync address, written the same on both boxes:
    /// one's `listen` is the other's `peer`): HMAC-SHA256 of the sender under the pair's
    /// shared secret.
    pub fn for_sender(secret: &[u8], sender: &str) -> Result<SyncKey, KeyError> {
        if secret.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort { len: secret.len() });
        }
        let too_short = |_| KeyError::TooShort { len: secret.len() };
        // HMAC takes a key of any length; the length is checked above.
        let mut derive = HmacSha256::new_from_slice(secret).map_err(too_short)?;
        derive.update(b"gateway session sync, sent by ");
        derive.update(sender.as_bytes());
        let derived = derive.finalize().into_bytes();
        Ok(SyncKey(
            HmacSha256::new_from_slice(&derived).map_err(too_short)?,
        ))
    }

    fn tag(&self, signed: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = self.0.clone();
        mac.update(signed);
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` is `signed`'s, compared in constant time.
    fn verifies(&self, signed: &[u8], tag: &[u8]) -> bool {
        let mut mac = self.0.clone();
        mac.update(signed);
        mac.verify_slice(tag).is_ok()
    }
}

/// What a box sends: its epoch and the next sequence number.
pub struct SyncSender {
    key: SyncKey,
    epoch: u64,
    next_seq: u64,
}

/// Why [`SyncSender::seal`] made no message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("{count} flows in one message; at most {FLOWS_PER_MESSAGE}")]
    TooManyFlows { count: usize },
    #[error("the flows could not be encoded")]
    Encode,
}

impl SyncSender {
    /// `epoch` must grow from one run of the sender to the next (its start time in Unix
    /// milliseconds does): the peer refuses an older epoch than the one it follows.
    pub fn new(key: SyncKey, epoch: u64) -> SyncSender {
        SyncSender {
            key,
            epoch,
            next_seq: 1,
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// One message carrying `flows` (at most [`FLOWS_PER_MESSAGE`]), signed, with the next
    /// sequence number.
    pub fn seal(&mut self, flows: &[SavedFlow]) -> Result<Vec<u8>, SealError> {
        if flows.len() > FLOWS_PER_MESSAGE {
            return Err(SealError::TooManyFlows { count: flows.len() });
        }
        let payload = postcard::to_allocvec(flows).map_err(|_| SealError::Encode)?;
        Ok(self.seal_payload(&payload))
    }

    /// A message of an already encoded payload, signed, with the next sequence number:
    /// [`seal`](Self::seal)'s second half, and how the fuzz target signs payloads of its own.
    pub fn seal_payload(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut message = Vec::with_capacity(HEADER_LEN + payload.len() + TAG_LEN);
        message.extend_from_slice(&SYNC_MAGIC);
        message.extend_from_slice(&SYNC_VERSION.to_le_bytes());
        message.extend_from_slice(&self.epoch.to_le_bytes());
        message.extend_from_slice(&self.next_seq.to_le_bytes());
        message.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        message.extend_from_slice(payload);
        let tag = self.key.tag(&message);
        message.extend_from_slice(&tag);
        self.next_seq += 1;
        message
    }
}

/// Why [`SyncReceiver::open`] refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Shorter than a header and a tag, or than the payload its header announces.
    Truncated,
    /// Not a sync message (bad magic).
    Foreign,
    /// Another format or record version.
    Version,
    /// The tag is not the shared key's: forged, corrupt, or the peer has another key.
    BadTag,
    /// From an earlier epoch than the one followed: a replay from an earlier run.
    StaleEpoch,
    /// A sequence number already seen, or too far behind the highest.
    Replayed,
    /// Signed, but its payload is not well-formed flows.
    Malformed,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::Truncated,
        Refusal::Foreign,
        Refusal::Version,
        Refusal::BadTag,
        Refusal::StaleEpoch,
        Refusal::Replayed,
        Refusal::Malformed,
    ];
    pub const COUNT: usize = Refusal::ALL.len();

    /// Its label in metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Truncated => "truncated",
            Refusal::Foreign => "foreign",
            Refusal::Version => "version",
            Refusal::BadTag => "bad_tag",
            Refusal::StaleEpoch => "stale_epoch",
            Refusal::Replayed => "replayed",
            Refusal::Malformed => "malformed",
        }
    }

    fn index(self) -> usize {
        Refusal::ALL
            .iter()
            .position(|&refusal| refusal == self)
            .unwrap_or(0)
    }
}

/// The receiving end: the key, the epoch followed and the sequence numbers seen in it.
pub struct SyncReceiver {
    key: SyncKey,
    /// The epoch followed, once a message has been taken.
    epoch: Option<u64>,
    highest: u64,
    /// Bit i: sequence number `highest - i` has been taken.
    seen: u64,
    accepted: u64,
    refused: [u64; Refusal::COUNT],
}

impl SyncReceiver {
    /// `key`: the peer's sending key ([`SyncKey::for_sender`] of the peer's address).
    pub fn new(key: SyncKey) -> SyncReceiver {
        SyncReceiver {
            key,
            epoch: None,
            highest: 0,
            seen: 0,
            accepted: 0,
            refused: [0; Refusal::COUNT],
        }
    }

    /// The flows of a message, if it is the peer's, fresh and well-formed; else why not
    /// (counted).
    pub fn open(&mut self, message: &[u8]) -> Result<Vec<SavedFlow>, Refusal> {
        let opened = self.check(message);
        match &opened {
            Ok(_) => self.accepted += 1,
            Err(refusal) => self.refused[refusal.index()] += 1,
        }
        opened
    }

    fn check(&mut self, message: &[u8]) -> Result<Vec<SavedFlow>, Refusal> {
        if message.len() < HEADER_LEN + TAG_LEN {
            return Err(Refusal::Truncated);
        }
        if message[..8] != SYNC_MAGIC {
            return Err(Refusal::Foreign);
        }
        let word = |at: usize| u32::from_le_bytes(message[at..at + 4].try_into().unwrap_or([0; 4]));
        let long = |at: usize| u64::from_le_bytes(message[at..at + 8].try_into().unwrap_or([0; 8]));
        if word(8) != SYNC_VERSION {
            return Err(Refusal::Version);
        }
        let payload_len = word(28) as usize;
        if message.len() != HEADER_LEN + payload_len + TAG_LEN {
            return Err(Refusal::Truncated);
        }
        let (signed, tag) = message.split_at(HEADER_LEN + payload_len);
        if !self.key.verifies(signed, tag) {
            return Err(Refusal::BadTag);
        }
        let (epoch, seq) = (long(12), long(20));
        self.fresh(epoch, seq)?;
        let flows: Vec<SavedFlow> =
            postcard::from_bytes(&signed[HEADER_LEN..]).map_err(|_| Refusal::Malformed)?;
        if flows.len() > FLOWS_PER_MESSAGE || !flows.iter().all(SavedFlow::is_well_formed) {
            return Err(Refusal::Malformed);
        }
        self.take(epoch, seq);
        Ok(flows)
    }

    /// Whether `(epoch, seq)` may be taken: not from an older epoch, not seen, not too old.
    fn fresh(&self, epoch: u64, seq: u64) -> Result<(), Refusal> {
        let Some(followed) = self.epoch else {
            return Ok(());
        };
        if epoch < followed {
            return Err(Refusal::StaleEpoch);
        }
        if epoch > followed || seq > self.highest {
            return Ok(());
        }
        let behind = self.highest - seq;
        if behind >= REPLAY_WINDOW || self.seen & 1 << behind != 0 {
            return Err(Refusal::Replayed);
        }
        Ok(())
    }

    fn take(&mut self, epoch: u64, seq: u64) {
        if self.epoch != Some(epoch) {
            (self.epoch, self.highest, self.seen) = (Some(epoch), seq, 1);
        } else if seq > self.highest {
            let ahead = seq - self.highest;
            self.seen = if ahead >= REPLAY_WINDOW {
                1
            } else {
                self.seen << ahead | 1
            };
            self.highest = seq;
        } else {
            self.seen |= 1 << (self.highest - seq);
        }
    }

    /// Messages taken.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Messages refused for `reason`.
    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refused[reason.index()]
    }

    /// The epoch followed (the peer's current run), once a message has been taken.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }
}

impl Pipeline {
    /// Arena slots in this worker's IPv4 flow table: what one sweep of
    /// [`export_flow_slots`](Self::export_flow_slots) covers.
    pub fn flow_slots(&self) -> usize {
        self.stateful.flows.capacity()
    }

    /// Hands `out` the live flows in the `count` arena slots from `from` (their forwarding
    /// shortcuts left out, as the snapshot leaves them), and returns where the next slice
    /// starts: 0 again after the last slot. Allocates nothing; a few slots a call keep the
    /// worker's loop short.
    pub fn export_flow_slots(
        &self,
        from: usize,
        count: usize,
        now_ns: u64,
        mut out: impl FnMut(SavedFlow),
    ) -> usize {
        let slots = self.flow_slots();
        let end = from.saturating_add(count).min(slots);
        for slot in from..end {
            // The peer's own copies are not sent back to it.
            if let Some((_, mut flow)) = self.stateful.flows.exported_at(slot, now_ns) {
                if !flow.data.is_synced_copy() {
                    flow.data.shortcuts = Default::default();
                    out(flow);
                }
            }
        }
        if end >= slots {
            0
        } else {
            end
        }
    }

    /// After this box took over from its peer (its twin took the pair's virtual address):
    /// the copies in the `count` arena slots from `from` that have at least `min_left_ns` to
    /// live get the time their state's timeout gives instead of what is left of their lease,
    /// which no refresh from the peer will renew now, so that a connection idle through the
    /// takeover (an iperf3 control connection, an idle SSH session) is still there when it
    /// speaks again. `min_left_ns` picks the copies the peer still refreshed in its last
    /// sweeps and whose time the lease cut short: one the peer stopped refreshing (ended
    /// there) or whose own time was shorter runs out as it would have. Returns where the
    /// next slice starts: 0 again after the last slot.
    pub fn renew_synced_copies(
        &mut self,
        from: usize,
        count: usize,
        now_ns: u64,
        min_left_ns: u64,
    ) -> usize {
        let slots = self.flow_slots();
        let end = from.saturating_add(count).min(slots);
        let flows = &mut self.stateful.flows;
        for slot in from..end {
            if let Some(id) = flows.live_at(slot, now_ns) {
                let recent = flows.deadline_ns(id).saturating_sub(now_ns) >= min_left_ns;
                if recent && flows.data(id).is_synced_copy() {
                    flows.renew(id, now_ns);
                }
            }
        }
        if end >= slots {
            0
        } else {
            end
        }
    }

    /// Installs flows the peer synced, this worker's own (by the owner derived for this
    /// worker count) among them, each with at most `lease_ns` to live unless refreshed or
    /// forwarded, TCP judged as picked up mid-stream, marked as a copy ([`SYNCED_COPY`]). A
    /// copy already here is refreshed in place (its tracker, time and data; its binding is
    /// the same, as its tuples are); a flow this box forwards itself is never touched
    /// (skipped as `table`, a duplicate). Each is checked against this box's config as a snapshot's flows are,
    /// and a flow that does not fit is skipped and counted.
    pub fn install_synced(
        &mut self,
        flows: &[SavedFlow],
        now_ns: u64,
        lease_ns: u64,
    ) -> RestoreReport {
        let mut report = RestoreReport::default();
        for flow in flows {
            match self.install_one(flow, now_ns, lease_ns) {
                Ok(()) => report.restored += 1,
                Err(reason) => report.skip(reason),
            }
        }
        self.publish_table_stats();
        report
    }

    fn install_one(&mut self, flow: &SavedFlow, now_ns: u64, lease_ns: u64) -> Result<(), Skip> {
        if owner(&self.router, self.stateful.ownership.workers(), flow)? != self.stateful.worker {
            return Err(Skip::Ownership);
        }
        let leased = SavedFlow {
            remaining_ns: flow.remaining_ns.min(lease_ns),
            tcp: flow.tcp.map(|tcp| tcp.picked_up()),
            ..*flow
        };
        let flows = &mut self.stateful.flows;
        let Some((id, direction)) = flows.lookup(&flow.original) else {
            return self.restore_flow(&leased, now_ns, true);
        };
        let same =
            direction == Direction::Original && flows.key(id, Direction::Reply) == flow.reply;
        if !same || !flows.data(id).is_synced_copy() {
            return Err(Skip::Table);
        }
        // Still a flow this box's config makes (a reload may have changed that), with what
        // the peer decided since (the content verdict, the SYN proxy's splice, the zones);
        // its tuples, and so its binding, are the same.
        let mut data = self.fits_config(&leased)?;
        let flows = &mut self.stateful.flows;
        if data.binding != flows.data(id).binding {
            return Err(Skip::NatPort);
        }
        data.generation = SYNCED_COPY;
        flows
            .refresh(id, &leased, now_ns)
            .map_err(|_| Skip::Table)?;
        *flows.data_mut(id) = data;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SyncKey {
        SyncKey::for_sender(b"a shared key of the pair", "192.0.2.1:7440").unwrap()
    }

    #[test]
    fn short_keys_are_refused() {
        assert_eq!(
            SyncKey::for_sender(b"short", "192.0.2.1:7440").err(),
            Some(KeyError::TooShort { len: 5 })
        );
    }

    #[test]
    fn a_message_opens_once_and_replays_and_forgeries_are_refused() {
        let mut sender = SyncSender::new(key(), 1000);
        let mut receiver = SyncReceiver::new(key());
        let first = sender.seal(&[]).unwrap();
        assert_eq!(receiver.open(&first), Ok(Vec::new()));
        assert_eq!(receiver.open(&first), Err(Refusal::Replayed));
        // Another key's message, and one bit changed anywhere.
        let other_key = SyncKey::for_sender(b"not the pair's key!!", "192.0.2.1:7440").unwrap();
        let mut other = SyncSender::new(other_key, 1000);
        assert_eq!(
            receiver.open(&other.seal(&[]).unwrap()),
            Err(Refusal::BadTag)
        );
        let second = sender.seal(&[]).unwrap();
        for at in [12, 20, 28, second.len() - 1] {
            let mut forged = second.clone();
            forged[at] ^= 1;
            let refusal = receiver.open(&forged).unwrap_err();
            assert!(
                matches!(refusal, Refusal::BadTag | Refusal::Truncated),
                "byte {at}: {refusal:?}"
            );
        }
        assert_eq!(receiver.open(&second), Ok(Vec::new()));
        assert_eq!(receiver.open(&second[..40]), Err(Refusal::Truncated));
        let mut foreign = second.clone();
        foreign[0] = b'X';
        assert_eq!(receiver.open(&foreign), Err(Refusal::Foreign));
        assert_eq!(receiver.accepted(), 2);
        assert_eq!(receiver.refused(Refusal::Replayed), 1);
        // The other key's and three flipped bits; the flipped length and the cut message.
        assert_eq!(receiver.refused(Refusal::BadTag), 4);
        assert_eq!(receiver.refused(Refusal::Truncated), 2);
    }

    #[test]
    fn reordering_within_the_window_is_taken_and_older_epochs_are_refused() {
        let mut sender = SyncSender::new(key(), 1000);
        let messages: Vec<Vec<u8>> = (0..100).map(|_| sender.seal(&[]).unwrap()).collect();
        let mut receiver = SyncReceiver::new(key());
        // 90 first, then 40 (50 behind, in the window), then 20 (70 behind: too old).
        assert!(receiver.open(&messages[89]).is_ok());
        assert!(receiver.open(&messages[39]).is_ok());
        assert_eq!(receiver.open(&messages[39]), Err(Refusal::Replayed));
        assert_eq!(receiver.open(&messages[19]), Err(Refusal::Replayed));
        assert!(receiver.open(&messages[99]).is_ok());
        // The peer restarts: a later epoch starts again from 1, and the old run's messages
        // are refused from then on.
        let mut restarted = SyncSender::new(key(), 2000);
        assert!(receiver.open(&restarted.seal(&[]).unwrap()).is_ok());
        assert_eq!(receiver.epoch(), Some(2000));
        assert_eq!(receiver.open(&messages[98]), Err(Refusal::StaleEpoch));
        // The receiver's own messages (the other direction's key), sent back to it.
        let own_key = SyncKey::for_sender(b"a shared key of the pair", "192.0.2.2:7440").unwrap();
        let mut own = SyncSender::new(own_key, 3000);
        assert_eq!(receiver.open(&own.seal(&[]).unwrap()), Err(Refusal::BadTag));
    }
}
