//! Moving bytes between the ranks of a job.
//!
//! A [`Transport`] sends tagged messages to a rank and receives them by (sender, tag). Two
//! implementations share everything above the socket:
//!
//! * [`mem`]: every rank of a cluster inside one process (tests and simulations: a 4-rank
//!   cluster in one `#[test]`, deterministic, no sockets);
//! * [`quic`]: one QUIC connection per pair of ranks (quinn), authenticated by the job's
//!   secret, across processes and machines.
//!
//! Messages from one rank to another arrive in the order they were sent. Receiving blocks
//! until the message is there, the deadline passes ([`Error::Timeout`]) or some rank of the
//! job is lost ([`Error::PeerLost`]): a job whose rank died fails at once instead of
//! waiting forever.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

pub use bytes::Bytes;

use crate::error::{Error, Result};
use crate::sync::{Condvar, Mutex, MutexGuard};

pub mod mem;
pub mod quic;

pub use quic::{QuicOptions, QuicTransport};

pub use crate::rank::Rank;

/// The kind of traffic a tag belongs to (its top byte).
pub mod tags {
    /// Collectives (barrier, broadcast, allreduce, gather): low bits are a sequence number.
    pub const COLLECTIVE: u64 = 0x01 << 56;
    /// Store requests and replies.
    pub const STORE: u64 = 0x02 << 56;
    /// Operator entry checks (task name and call site).
    pub const OPERATOR: u64 = 0x03 << 56;
    /// The transport's own messages (rank table, goodbye).
    pub const SYSTEM: u64 = 0xff << 56;
    /// Rank 0 tells every rank where the others listen.
    pub const RANK_TABLE: u64 = SYSTEM | 1;
    /// A rank is done with the job and will send nothing more.
    pub const GOODBYE: u64 = SYSTEM | 2;
    /// "What are you waiting for?": a rank that has waited long for a peer asks it (the
    /// payload is a nonce); answered by the peer's mailbox, whatever its threads do.
    pub const STATUS_QUERY: u64 = SYSTEM | 3;
    /// The answer to [`STATUS_QUERY`]: the nonce and the peer's waits that nothing queued
    /// can end.
    pub const STATUS: u64 = SYSTEM | 4;
    /// Whether messages of `tag` are sent only by a rank's driver thread (collectives and
    /// operator entries): a driver blocked in a wait sends none of them meanwhile.
    pub fn from_driver(tag: u64) -> bool {
        matches!(tag >> 56, 0x01 | 0x03)
    }
}

/// A wait that lasts this long asks the awaited rank what it waits for, and again as often
/// afterwards; two ranks each waiting for the other's driver fail (see [`Mailbox::take`]).
pub(crate) const PROBE_AFTER: Duration = Duration::from_secs(2);

/// Sends and receives tagged messages between the ranks of one job.
pub trait Transport: Send + Sync {
    /// This process's rank.
    fn rank(&self) -> Rank;

    /// Number of ranks.
    fn world_size(&self) -> usize;

    /// Queues `payload` for rank `to` under `tag` (sending to oneself is allowed). Returns
    /// once the message is queued; messages to one rank arrive in the order sent.
    fn send(&self, to: Rank, tag: u64, payload: Vec<u8>) -> Result<()> {
        self.send_shared(to, tag, payload.into())
    }

    /// As [`Transport::send`], for bytes that may be shared: the same payload can go to
    /// several ranks (a broadcast), or again, without being copied for each send.
    fn send_shared(&self, to: Rank, tag: u64, payload: Bytes) -> Result<()>;

    /// The next message from rank `from` with `tag`, waiting until `deadline`.
    fn recv(&self, from: Rank, tag: u64, deadline: Instant) -> Result<Vec<u8>>;

    /// The next message with `tag` from any rank, waiting until `deadline`.
    fn recv_any(&self, tag: u64, deadline: Instant) -> Result<(Rank, Vec<u8>)>;

    /// Says goodbye to every rank, waits (up to `timeout`) until every message sent has been
    /// delivered, and closes the connections. Further sends fail.
    fn shutdown(&self, timeout: Duration) -> Result<()>;
}

/// Messages received and not yet taken, per tag and sender; shared by the transports.
///
/// A lost rank poisons the mailbox: every later wait that cannot be satisfied from what
/// already arrived fails with [`Error::PeerLost`], so no rank waits for a message that will
/// never come.
pub struct Mailbox {
    state: Mutex<MailState>,
    arrived: Condvar,
    /// This rank, and how it answers status queries (none: waits are never probed).
    replier: std::sync::OnceLock<(Rank, Replier)>,
}

/// A message as it arrived: whole, or as the transport's receive chunks, which the taker
/// joins on its own thread (see [`Mailbox::deliver_chunks`]).
#[derive(Debug)]
enum Payload {
    Whole(Vec<u8>),
    Chunks(Vec<Bytes>),
}

impl Payload {
    fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Whole(v) => v,
            // A payload sent whole to this process: no copy when the sender kept no share.
            Payload::Chunks(mut chunks) if chunks.len() == 1 => {
                Vec::from(chunks.pop().expect("one chunk"))
            }
            Payload::Chunks(chunks) => {
                let mut v = Vec::with_capacity(chunks.iter().map(|c| c.len()).sum());
                for c in &chunks {
                    v.extend_from_slice(c);
                }
                v
            }
        }
    }
}

/// A rank's answer to a status query: the query's nonce, and the waits of its driver that
/// nothing queued could end, as (the rank waited for, tag).
type Status = (u64, Vec<(Rank, u64)>);

/// Sends a transport-level message (a status answer) to a rank without blocking: set by
/// the transport that owns the mailbox.
pub type Replier = Box<dyn Fn(Rank, u64, Vec<u8>) + Send + Sync>;

struct MailState {
    queues: HashMap<u64, Vec<VecDeque<Payload>>>,
    /// Driver waits in progress: (id, from, tag).
    waits: Vec<(u64, Rank, u64)>,
    next_wait: u64,
    /// Per rank: its last status answer.
    statuses: Vec<Option<Status>>,
    lost: Option<(Rank, String)>,
    /// Ranks that said goodbye (they send nothing more, and their loss is no failure).
    finished: Vec<bool>,
    world: usize,
}

impl Mailbox {
    /// An empty mailbox for a job of `world` ranks.
    pub fn new(world: usize) -> Self {
        Mailbox {
            state: Mutex::new(MailState {
                queues: HashMap::new(),
                waits: Vec::new(),
                next_wait: 0,
                statuses: vec![None; world],
                lost: None,
                finished: vec![false; world],
                world,
            }),
            arrived: Condvar::new(),
            replier: std::sync::OnceLock::new(),
        }
    }

    /// Lets this mailbox (of rank `me`) answer other ranks' status queries through
    /// `replier`, and probe the ranks its driver waits long for. Set once.
    pub fn set_replier(&self, me: Rank, replier: Replier) {
        let _ = self.replier.set((me, replier));
    }

    fn lock(&self) -> MutexGuard<'_, MailState> {
        self.state.lock()
    }

    /// Delivers a message from rank `from`.
    pub fn deliver(&self, from: Rank, tag: u64, payload: Vec<u8>) {
        self.put(from, tag, Payload::Whole(payload));
    }

    /// Delivers a message received as `chunks` (in order) without joining them here: the
    /// taker joins them into one buffer on its own thread. A network thread thus hands
    /// over a large message without copying it or allocating its buffer; the allocation
    /// happens where the message is used, whose allocator can reuse the memory of the
    /// messages it freed (fresh pages would be faulted in and zeroed instead).
    pub fn deliver_chunks(&self, from: Rank, tag: u64, chunks: Vec<Bytes>) {
        self.put(from, tag, Payload::Chunks(chunks));
    }

    fn put(&self, from: Rank, tag: u64, payload: Payload) {
        let mut st = self.lock();
        if tag == tags::STATUS_QUERY {
            // Answered at once, from whatever thread delivers: the waits of this rank's
            // driver that nothing already queued can end.
            let nonce = status_nonce(&payload.into_vec());
            let stuck: Vec<(Rank, u64)> = st
                .waits
                .iter()
                .filter(|&&(_, f, t)| {
                    st.queues
                        .get(&t)
                        .and_then(|q| q.get(f))
                        .is_none_or(|q| q.is_empty())
                })
                .map(|&(_, f, t)| (f, t))
                .collect();
            drop(st);
            if let (Some(nonce), Some((_, reply))) = (nonce, self.replier.get()) {
                reply(from, tags::STATUS, encode_status(nonce, &stuck));
            }
            return;
        }
        if tag == tags::STATUS {
            if let (Some(status), Some(slot)) = (
                decode_status(&payload.into_vec()),
                st.statuses.get_mut(from),
            ) {
                *slot = Some(status);
            }
            drop(st);
            self.arrived.notify_all();
            return;
        }
        if tag == tags::GOODBYE {
            if let Some(f) = st.finished.get_mut(from) {
                *f = true;
            }
        } else {
            let world = st.world;
            st.queues
                .entry(tag)
                .or_insert_with(|| (0..world).map(|_| VecDeque::new()).collect())[from]
                .push_back(payload);
        }
        drop(st);
        self.arrived.notify_all();
    }

    /// Records that rank `rank` is lost (unless it said goodbye first); wakes every waiter.
    pub fn lose(&self, rank: Rank, reason: impl Into<String>) {
        self.lose_then(rank, reason, || {});
    }

    /// As [`Mailbox::lose`], running `then` after the loss is recorded but before any
    /// waiter wakes (a transport closes the peer's connection there, so that the close
    /// it sends is not overtaken by a woken rank shutting everything down).
    pub fn lose_then(&self, rank: Rank, reason: impl Into<String>, then: impl FnOnce()) {
        let mut st = self.lock();
        if !(st.finished.get(rank).copied().unwrap_or(false) || st.lost.is_some()) {
            st.lost = Some((rank, reason.into()));
        }
        then();
        drop(st);
        self.arrived.notify_all();
    }

    /// The first rank lost, if any.
    pub fn lost(&self) -> Option<(Rank, String)> {
        self.lock().lost.clone()
    }

    /// Whether every rank in `ranks` said goodbye.
    pub fn all_finished(&self, ranks: impl IntoIterator<Item = Rank>) -> bool {
        let st = self.lock();
        ranks.into_iter().all(|r| st.finished[r])
    }

    /// Waits until every rank in `ranks` said goodbye (or one is lost, or the deadline).
    pub fn wait_finished(&self, ranks: &[Rank], deadline: Instant) -> Result<()> {
        self.wait(deadline, "goodbyes from the other ranks", |st| {
            ranks.iter().all(|&r| st.finished[r]).then_some(())
        })
    }

    /// Takes the next message from `from` with `tag`. Fails with [`Error::PeerLeft`] once
    /// `from` has said goodbye without sending it (messages from a rank arrive in order,
    /// so nothing it sent can come after its goodbye).
    ///
    /// A driver's wait (a collective or an operator entry, see [`tags::from_driver`]) that
    /// lasts asks `from` what it waits for. If `from` answers that its driver waits for
    /// this rank's (and the message still has not come, although everything `from` sent
    /// before answering has), neither can go on: the wait fails with [`Error::Deadlock`].
    pub fn take(&self, from: Rank, tag: u64, deadline: Instant) -> Result<Vec<u8>> {
        let me = match self.replier.get() {
            Some(&(me, _)) if tags::from_driver(tag) && from != me => me,
            _ => return self.take_until(from, tag, deadline),
        };
        let started = Instant::now();
        let id = {
            let mut st = self.lock();
            let id = st.next_wait;
            st.next_wait += 1;
            st.waits.push((id, from, tag));
            id
        };
        struct Done<'a>(&'a Mailbox, u64);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                let id = self.1;
                self.0.lock().waits.retain(|w| w.0 != id);
            }
        }
        let _done = Done(self, id);
        let mut asked: Option<u64> = None;
        for round in 1u64.. {
            match self.take_until(from, tag, deadline.min(deadline_in(PROBE_AFTER))) {
                Err(Error::Timeout { what, .. }) => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout {
                            what,
                            secs: started.elapsed().as_secs_f64(),
                        });
                    }
                }
                other => return other,
            }
            if let Some(theirs) = asked.and_then(|n| self.waits_for(from, tag, me, n)) {
                return Err(Error::Deadlock {
                    rank: from,
                    mine: describe_tag(tag),
                    theirs: describe_tag(theirs),
                });
            }
            let nonce = (id << 20) | (round & 0xf_ffff);
            asked = Some(nonce);
            if let Some((_, reply)) = self.replier.get() {
                reply(from, tags::STATUS_QUERY, nonce.to_le_bytes().to_vec());
            }
        }
        unreachable!("the rounds of a wait end by returning")
    }

    /// The tag `from`'s driver waits for from `me`, by `from`'s answer to query `nonce`,
    /// if the message from `from` with `tag` still has not come.
    fn waits_for(&self, from: Rank, tag: u64, me: Rank, nonce: u64) -> Option<u64> {
        let st = self.lock();
        let queued = st
            .queues
            .get(&tag)
            .and_then(|q| q.get(from))
            .is_some_and(|q| !q.is_empty());
        if queued || st.finished.get(from).copied().unwrap_or(true) {
            return None;
        }
        match st.statuses.get(from) {
            Some(Some((n, stuck))) if *n == nonce => stuck
                .iter()
                .find(|&&(f, t)| f == me && tags::from_driver(t))
                .map(|&(_, t)| t),
            _ => None,
        }
    }

    /// As [`Mailbox::take`], without asking `from` anything.
    fn take_until(&self, from: Rank, tag: u64, deadline: Instant) -> Result<Vec<u8>> {
        let what = format!("a message from rank {from}");
        let got = self.wait(deadline, &what, |st| {
            let message = st
                .queues
                .get_mut(&tag)
                .and_then(|q| q.get_mut(from))
                .and_then(|q| q.pop_front());
            if message.is_none() && st.finished.get(from).copied().unwrap_or(false) {
                return Some(None);
            }
            message.map(Some)
        })?;
        got.map(Payload::into_vec).ok_or_else(|| Error::PeerLeft {
            rank: from,
            what: "a message".into(),
        })
    }

    /// Takes the next message with `tag` from any rank (lowest rank first).
    pub fn take_any(&self, tag: u64, deadline: Instant) -> Result<(Rank, Vec<u8>)> {
        self.wait(deadline, "a message from any rank", |st| {
            let queues = st.queues.get_mut(&tag)?;
            queues
                .iter_mut()
                .enumerate()
                .find_map(|(r, q)| q.pop_front().map(|m| (r, m)))
        })
        .map(|(r, m)| (r, m.into_vec()))
    }

    fn wait<T>(
        &self,
        deadline: Instant,
        what: &str,
        mut ready: impl FnMut(&mut MailState) -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        let mut st = self.lock();
        loop {
            if let Some(v) = ready(&mut st) {
                return Ok(v);
            }
            if let Some((rank, reason)) = &st.lost {
                return Err(Error::PeerLost {
                    rank: *rank,
                    reason: reason.clone(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: what.to_string(),
                    secs: (now - start).as_secs_f64(),
                });
            }
            st = self.arrived.wait_timeout(st, deadline - now).0;
        }
    }
}

/// A status answer's bytes: the nonce, then each wait as (rank, tag).
fn encode_status(nonce: u64, stuck: &[(Rank, u64)]) -> Vec<u8> {
    let mut out = nonce.to_le_bytes().to_vec();
    for &(rank, tag) in stuck {
        out.extend((rank as u64).to_le_bytes());
        out.extend(tag.to_le_bytes());
    }
    out
}

/// A status answer from its bytes; `None` for bytes that are not one (a peer's garbage is
/// ignored: it only delays a deadlock's detection).
fn decode_status(bytes: &[u8]) -> Option<Status> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(i..i + 8)?.try_into().ok()?))
    };
    let nonce = word(0)?;
    let rest = bytes.len() - 8;
    if rest % 16 != 0 || rest / 16 > 1 << 16 {
        return None;
    }
    let stuck = (0..rest / 16)
        .map(|k| Some((usize::try_from(word(8 + 16 * k)?).ok()?, word(16 + 16 * k)?)))
        .collect::<Option<Vec<_>>>()?;
    Some((nonce, stuck))
}

/// A status query's nonce.
fn status_nonce(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// What a driver waits for, by its tag: `collective 12`, `operator entry 3`.
fn describe_tag(tag: u64) -> String {
    let number = tag & ((1 << 56) - 1);
    match tag >> 56 {
        0x01 => format!("collective number {number}"),
        0x03 => format!("operator entry number {number}"),
        kind => format!("a message of kind {kind:#x}, number {number}"),
    }
}

/// A deadline `timeout` from now (saturating far in the future).
pub fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailbox_keeps_order_per_sender_and_tag() {
        let m = Mailbox::new(3);
        m.deliver(1, 5, vec![1]);
        m.deliver(2, 5, vec![2]);
        m.deliver(1, 5, vec![3]);
        m.deliver(1, 6, vec![4]);
        let soon = deadline_in(Duration::from_millis(10));
        assert_eq!(m.take(1, 5, soon).unwrap(), vec![1]);
        assert_eq!(m.take(1, 5, soon).unwrap(), vec![3]);
        assert_eq!(m.take_any(5, soon).unwrap(), (2, vec![2]));
        assert_eq!(m.take(1, 6, soon).unwrap(), vec![4]);
        match m.take(0, 5, soon) {
            Err(Error::Timeout { what, .. }) => assert!(what.contains("rank 0")),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn a_lost_rank_wakes_waiters_with_its_reason() {
        let m = std::sync::Arc::new(Mailbox::new(2));
        let m2 = m.clone();
        let waiter =
            std::thread::spawn(move || m2.take(1, 9, deadline_in(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(20));
        m.lose(1, "connection reset");
        match waiter.join().unwrap() {
            Err(Error::PeerLost { rank: 1, reason }) => assert_eq!(reason, "connection reset"),
            other => panic!("expected PeerLost, got {other:?}"),
        }
    }

    #[test]
    fn a_shared_payload_reaches_every_rank_and_an_unshared_one_is_not_copied() {
        let ranks = mem::MemCluster::new(3).into_transports();
        let soon = deadline_in(Duration::from_secs(1));
        let shared = Bytes::from(vec![5u8; 1000]);
        for to in 0..3 {
            ranks[0].send_shared(to, 4, shared.clone()).unwrap();
        }
        drop(shared);
        for (r, rank) in ranks.iter().enumerate() {
            assert_eq!(rank.recv(0, 4, soon).unwrap(), vec![5u8; 1000], "rank {r}");
        }
        // A `Vec` sent whole comes out as the same allocation.
        let v = vec![1u8; 64];
        let at = v.as_ptr();
        ranks[1].send(2, 8, v).unwrap();
        let got = ranks[2].recv(1, 8, soon).unwrap();
        assert_eq!((got.as_ptr(), got.len()), (at, 64));
    }

    #[test]
    fn waiting_for_a_rank_that_said_goodbye_fails_after_what_it_sent() {
        let m = std::sync::Arc::new(Mailbox::new(3));
        m.deliver(1, 5, vec![1]);
        m.deliver(1, tags::GOODBYE, Vec::new());
        let forever = deadline_in(Duration::MAX);
        // What it sent before its goodbye is still taken.
        assert_eq!(m.take(1, 5, forever).unwrap(), vec![1]);
        match m.take(1, 5, forever) {
            Err(Error::PeerLeft { rank: 1, .. }) => {}
            other => panic!("expected PeerLeft, got {other:?}"),
        }
        // A waiter is woken by the goodbye.
        let m2 = m.clone();
        let waiter = std::thread::spawn(move || m2.take(2, 7, deadline_in(Duration::MAX)));
        std::thread::sleep(Duration::from_millis(20));
        m.deliver(2, tags::GOODBYE, Vec::new());
        match waiter.join().unwrap() {
            Err(e @ Error::PeerLeft { rank: 2, .. }) => {
                assert!(e.to_string().contains("rank 2 has finished the job"), "{e}")
            }
            other => panic!("expected PeerLeft, got {other:?}"),
        }
    }

    #[test]
    fn status_answers_decode_or_are_ignored() {
        let bytes = encode_status(7, &[(1, tags::COLLECTIVE | 3), (0, 5)]);
        assert_eq!(
            decode_status(&bytes),
            Some((7, vec![(1, tags::COLLECTIVE | 3), (0, 5)]))
        );
        for bad in [&bytes[..7], &bytes[..9], &[][..]] {
            assert_eq!(decode_status(bad), None);
        }
        assert_eq!(status_nonce(&9u64.to_le_bytes()), Some(9));
        assert_eq!(status_nonce(&[1, 2]), None);
    }

    #[test]
    fn a_rank_that_said_goodbye_is_not_lost() {
        let m = Mailbox::new(2);
        m.deliver(1, tags::GOODBYE, Vec::new());
        m.lose(1, "closed");
        assert!(m.lost().is_none());
        assert!(m.all_finished([1]));
    }
}
