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
}

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

struct MailState {
    queues: HashMap<u64, Vec<VecDeque<Payload>>>,
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
                lost: None,
                finished: vec![false; world],
                world,
            }),
            arrived: Condvar::new(),
        }
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
    pub fn take(&self, from: Rank, tag: u64, deadline: Instant) -> Result<Vec<u8>> {
        let what = format!("a message from rank {from}");
        let mut left = false;
        let got = self.wait(deadline, &what, |st| {
            let message = st
                .queues
                .get_mut(&tag)
                .and_then(|q| q.get_mut(from))
                .and_then(|q| q.pop_front());
            if message.is_none() && st.finished.get(from).copied().unwrap_or(false) {
                left = true;
                return Some(None);
            }
            message.map(Some)
        })?;
        match got {
            Some(payload) => Ok(payload.into_vec()),
            None => {
                debug_assert!(left);
                Err(Error::PeerLeft {
                    rank: from,
                    what: "a message".into(),
                })
            }
        }
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
    fn a_rank_that_said_goodbye_is_not_lost() {
        let m = Mailbox::new(2);
        m.deliver(1, tags::GOODBYE, Vec::new());
        m.lose(1, "closed");
        assert!(m.lost().is_none());
        assert!(m.all_finished([1]));
    }
}
