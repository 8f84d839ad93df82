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
    /// A deadlock probe: a rank whose driver has waited long sends it to the rank it waits
    /// for, and a rank whose driver is stuck passes it on to the rank it waits for in turn
    /// (the payload: the rank that started it, a nonce, and the waits it has passed).
    /// Handled by the receiving mailbox, whatever that rank's threads do.
    pub const PROBE: u64 = SYSTEM | 3;
    /// The answer to a [`PROBE`] that came back to a rank it had passed: sent back along
    /// the probe's path, each rank confirming that it still waits as it did.
    pub const PROBE_BACK: u64 = SYSTEM | 4;
    /// Whether messages of `tag` are sent only by a rank's driver thread (collectives and
    /// operator entries): a driver blocked in a wait sends none of them meanwhile.
    pub fn from_driver(tag: u64) -> bool {
        matches!(tag >> 56, 0x01 | 0x03)
    }
}

/// A wait that lasts this long sends a deadlock probe to the awaited rank, and again as
/// often afterwards; ranks whose drivers wait for each other in a cycle fail (see
/// [`Mailbox::take`]).
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
    /// This rank, and how it sends deadlock probes on (none: waits are never probed).
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

/// One wait a deadlock probe passed: `rank`'s driver waits for a message with `tag` from
/// `awaited`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hop {
    pub rank: Rank,
    pub tag: u64,
    pub awaited: Rank,
}

/// A deadlock probe, or its way back: the rank that sent it first, that rank's nonce (its
/// wait's id in the high bits), and the waits it passed, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub origin: Rank,
    pub nonce: u64,
    pub hops: Vec<Hop>,
}

/// A probe this rank passed on: whom it came from and the wait it passed, so that its way
/// back can be checked (the wait has not ended) and sent on.
#[derive(Clone, Copy, Debug)]
struct Engaged {
    nonce: u64,
    sender: Rank,
    wait: u64,
    awaited: Rank,
}

/// Sends a transport-level message (a deadlock probe) to a rank without blocking: set by
/// the transport that owns the mailbox. Messages it sends to a rank arrive after every
/// message sent to that rank before.
pub type Replier = Box<dyn Fn(Rank, u64, Vec<u8>) + Send + Sync>;

struct MailState {
    /// Messages not yet taken, by (tag, sender); a queue is dropped when emptied (every
    /// collective has a tag of its own, so a long job would otherwise keep one per call).
    queues: HashMap<(u64, Rank), VecDeque<Payload>>,
    /// Driver waits in progress: (id, from, tag).
    waits: Vec<(u64, Rank, u64)>,
    next_wait: u64,
    /// Probes passed on and not yet back, by the rank that sent them first.
    engaged: HashMap<Rank, Engaged>,
    /// A probe of this rank's that came back: a cycle of waits through its driver's wait.
    cycle: Option<Probe>,
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
                engaged: HashMap::new(),
                cycle: None,
                lost: None,
                finished: vec![false; world],
                world,
            }),
            arrived: Condvar::new(),
            replier: std::sync::OnceLock::new(),
        }
    }

    /// Lets this mailbox (of rank `me`) pass other ranks' deadlock probes on through
    /// `replier`, and probe the ranks its driver waits long for. Set once.
    pub fn set_replier(&self, me: Rank, replier: Replier) {
        let _ = self.replier.set((me, replier));
    }

    fn lock(&self) -> MutexGuard<'_, MailState> {
        self.state.lock()
    }

    /// Registers a driver wait as `take` would, without waiting (tests of the probes).
    #[cfg(test)]
    pub(crate) fn pretend_waiting(&self, id: u64, from: Rank, tag: u64) {
        self.lock().waits.push((id, from, tag));
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
        if tag == tags::PROBE || tag == tags::PROBE_BACK {
            // Handled at once, from whatever thread delivers; a probe that does not decode
            // (a peer's garbage) is dropped: it only delays a deadlock's detection.
            let (Some(probe), Some((me, send))) = (
                decode_probe(&payload.into_vec(), st.world),
                self.replier.get(),
            ) else {
                return;
            };
            let out = if tag == tags::PROBE {
                st.on_probe(*me, from, probe)
            } else {
                st.on_probe_back(*me, from, probe)
            };
            let found = st.cycle.is_some();
            drop(st);
            if found {
                self.arrived.notify_all();
            }
            if let Some((to, tag, probe)) = out {
                send(to, tag, encode_probe(&probe));
            }
            return;
        }
        if tag == tags::GOODBYE {
            if let Some(f) = st.finished.get_mut(from) {
                *f = true;
            }
        } else {
            st.queues.entry((tag, from)).or_default().push_back(payload);
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
    /// lasts sends a probe to `from`. A rank whose driver waits without anything queued to
    /// end the wait passes the probe on to the rank it waits for, and so on; a probe that
    /// comes back to a rank it passed travels back along its path, each rank checking that
    /// its wait has not ended meanwhile. Messages between two ranks arrive in order, so a
    /// probe coming back behind everything the awaited rank sent proves the wait can never
    /// end: the wait fails with [`Error::Deadlock`], naming the cycle. (This is the
    /// edge-chasing detection of Chandy, Misra and Haas, for drivers that wait for one
    /// message at a time.)
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
                let mut st = self.0.lock();
                st.waits.retain(|w| w.0 != id);
                st.cycle = None;
            }
        }
        let _done = Done(self, id);
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
            if let Some(cycle) = self.cycle_through(id) {
                return Err(deadlock(me, &cycle));
            }
            let probe = Probe {
                origin: me,
                nonce: (id << 20) | (round & 0xf_ffff),
                hops: vec![Hop {
                    rank: me,
                    tag,
                    awaited: from,
                }],
            };
            if let Some((_, send)) = self.replier.get() {
                send(from, tags::PROBE, encode_probe(&probe));
            }
        }
        unreachable!("the rounds of a wait end by returning")
    }

    /// The cycle a probe of wait `id` came back with, if that wait still cannot end.
    fn cycle_through(&self, id: u64) -> Option<Probe> {
        let mut st = self.lock();
        let cycle = st.cycle.take()?;
        (cycle.nonce >> 20 == id && st.stuck_in(id)).then_some(cycle)
    }

    /// As [`Mailbox::take`], without asking `from` anything.
    fn take_until(&self, from: Rank, tag: u64, deadline: Instant) -> Result<Vec<u8>> {
        let what = format!("a message from rank {from}");
        let got = self.wait(deadline, &what, |st| {
            let message = st.pop(tag, from);
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
            (0..st.world).find_map(|r| st.pop(tag, r).map(|m| (r, m)))
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

impl MailState {
    /// The next message from `from` with `tag`, if one is queued.
    fn pop(&mut self, tag: u64, from: Rank) -> Option<Payload> {
        let queue = self.queues.get_mut(&(tag, from))?;
        let message = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&(tag, from));
        }
        message
    }

    /// This rank's driver wait that nothing queued can end, as (id, awaited rank, tag).
    fn stuck(&self) -> Option<(u64, Rank, u64)> {
        self.waits.iter().copied().find(|&(_, from, tag)| {
            let queued = self.queues.contains_key(&(tag, from));
            !queued && !self.finished.get(from).copied().unwrap_or(true)
        })
    }

    /// Whether wait `id` is still in progress with nothing queued to end it.
    fn stuck_in(&self, id: u64) -> bool {
        self.stuck().is_some_and(|(w, ..)| w == id)
    }

    /// A probe from `from` arrived at rank `me`: what to send, and to whom.
    fn on_probe(&mut self, me: Rank, from: Rank, mut probe: Probe) -> Option<(Rank, u64, Probe)> {
        let (id, awaited, tag) = self.stuck()?;
        if probe.origin == me {
            // Back where it started, while the wait that sent it lasts: back along its path.
            return (probe.nonce >> 20 == id).then_some((from, tags::PROBE_BACK, probe));
        }
        if let Some(e) = self.engaged.get(&probe.origin) {
            if e.nonce == probe.nonce && e.wait == id {
                // Passed here before: a cycle that does not reach the origin, which waits
                // for it all the same.
                return Some((from, tags::PROBE_BACK, probe));
            }
        }
        if probe.hops.len() >= self.world {
            return None;
        }
        self.engaged.insert(
            probe.origin,
            Engaged {
                nonce: probe.nonce,
                sender: from,
                wait: id,
                awaited,
            },
        );
        probe.hops.push(Hop {
            rank: me,
            tag,
            awaited,
        });
        Some((awaited, tags::PROBE, probe))
    }

    /// A probe came back to rank `me` from `from`: recorded if `me` sent it first, passed
    /// back if `me`'s wait it passed still cannot end.
    fn on_probe_back(&mut self, me: Rank, from: Rank, probe: Probe) -> Option<(Rank, u64, Probe)> {
        if probe.origin == me {
            let (id, awaited, _) = self.stuck()?;
            if probe.nonce >> 20 == id && awaited == from {
                self.cycle = Some(probe);
            }
            return None;
        }
        let e = *self.engaged.get(&probe.origin)?;
        if e.nonce != probe.nonce || e.awaited != from || !self.stuck_in(e.wait) {
            return None;
        }
        self.engaged.remove(&probe.origin);
        Some((e.sender, tags::PROBE_BACK, probe))
    }
}

/// A probe's bytes: the origin, the nonce, then each hop as (rank, tag, awaited rank).
pub(crate) fn encode_probe(probe: &Probe) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 24 * probe.hops.len());
    out.extend((probe.origin as u64).to_le_bytes());
    out.extend(probe.nonce.to_le_bytes());
    for hop in &probe.hops {
        out.extend((hop.rank as u64).to_le_bytes());
        out.extend(hop.tag.to_le_bytes());
        out.extend((hop.awaited as u64).to_le_bytes());
    }
    out
}

/// A probe from its bytes, in a job of `world` ranks; `None` for bytes that are not one.
pub(crate) fn decode_probe(bytes: &[u8], world: usize) -> Option<Probe> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(i..i + 8)?.try_into().ok()?))
    };
    let rank = |i: usize| -> Option<Rank> { usize::try_from(word(i)?).ok().filter(|&r| r < world) };
    let rest = bytes.len().checked_sub(16)?;
    if rest % 24 != 0 || rest / 24 > world {
        return None;
    }
    let hops = (0..rest / 24)
        .map(|k| {
            let at = 16 + 24 * k;
            Some(Hop {
                rank: rank(at)?,
                tag: word(at + 8)?,
                awaited: rank(at + 16)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Probe {
        origin: rank(0)?,
        nonce: word(8)?,
        hops,
    })
}

/// The error of rank `me`, whose probe came back with `cycle`.
fn deadlock(me: Rank, cycle: &Probe) -> Error {
    let name = |r: Rank| match r == me {
        true => "this rank".to_string(),
        false => format!("rank {r}"),
    };
    let first = cycle.hops.first();
    let others = cycle
        .hops
        .iter()
        .skip(1)
        .map(|h| {
            format!(
                "rank {} waits for {} in {}",
                h.rank,
                name(h.awaited),
                describe_tag(h.tag)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    Error::Deadlock {
        rank: first.map_or(me, |h| h.awaited),
        mine: first.map_or_else(String::new, |h| describe_tag(h.tag)),
        others,
    }
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
    fn emptied_queues_are_dropped() {
        let m = Mailbox::new(2);
        let soon = deadline_in(Duration::from_millis(10));
        for tag in 0..1000 {
            m.deliver(1, tag, vec![1]);
            m.deliver(0, tag, vec![0]);
            assert_eq!(m.take(1, tag, soon).unwrap(), vec![1]);
            assert_eq!(m.take_any(tag, soon).unwrap(), (0, vec![0]));
        }
        assert!(m.lock().queues.is_empty());
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
    fn probes_decode_or_are_ignored() {
        let probe = Probe {
            origin: 2,
            nonce: 7,
            hops: vec![
                Hop {
                    rank: 2,
                    tag: tags::COLLECTIVE | 3,
                    awaited: 0,
                },
                Hop {
                    rank: 0,
                    tag: 5,
                    awaited: 1,
                },
            ],
        };
        let bytes = encode_probe(&probe);
        assert_eq!(decode_probe(&bytes, 3), Some(probe));
        // Cut short, empty, or naming a rank outside the job.
        for bad in [&bytes[..15], &bytes[..17], &bytes[..41], &[][..]] {
            assert_eq!(decode_probe(bad, 3), None);
        }
        assert_eq!(decode_probe(&bytes, 2), None);
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
