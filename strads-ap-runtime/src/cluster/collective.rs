//! Collectives over a [`Transport`]: every rank calls the same collectives in the same
//! order, and each call leaves every rank with the same result.
//!
//! Each collective takes the next sequence number as its message tag, so messages of
//! consecutive collectives never mix. Values travel as postcard; reductions are folded on
//! rank 0 in rank order and broadcast, so every rank gets bit-identical results even for
//! floating point.
//!
//! ```
//! use std::thread;
//! use strads_ap_runtime::cluster::collective::Comm;
//! use strads_ap_runtime::transport::mem::MemCluster;
//!
//! let handles: Vec<_> = MemCluster::new(4)
//!     .into_transports()
//!     .into_iter()
//!     .map(|t| {
//!         thread::spawn(move || {
//!             let comm = Comm::new(t);
//!             let sum = comm.allreduce(comm.rank() as u64 + 1, |a, b| a + b).unwrap();
//!             let names = comm.allgather(format!("rank {}", comm.rank())).unwrap();
//!             (sum, names.len())
//!         })
//!     })
//!     .collect();
//! for h in handles {
//!     assert_eq!(h.join().unwrap(), (10, 4));
//! }
//! ```

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{site_with_arguments, Error, Result};
use crate::transport::{deadline_in, tags, Rank, Transport};

/// What the lean gathers call what they move, in errors.
const GATHERED: &str = "a gathered part of a table";

/// About the most bytes of elements one message of a lean gather carries: a part is sent
/// as several messages, each freed once sent, and decoded message by message, so a gather's
/// transient memory is a few messages, not a part encoded whole.
const GATHER_CHUNK: usize = 4 << 20;

/// The first byte of a lean gather's message of elements.
const PART_ELEMENTS: u8 = 0;
/// The first byte of the message ending a rank's part, followed by its element count.
const PART_END: u8 = 1;

/// The collectives of one job, over its transport.
pub struct Comm {
    transport: Arc<dyn Transport>,
    seq: AtomicU64,
    timeout: Duration,
}

/// What a rank says when it enters an operator.
#[derive(Serialize, Deserialize)]
struct Entry {
    site: String,
    task: String,
}

/// Rank 0's answer to the entries of an operator.
#[derive(Serialize, Deserialize)]
enum Verdict {
    Go {
        captures: Vec<u8>,
    },
    Diverged {
        rank: usize,
        driver: String,
        here: String,
    },
}

/// Encodes `items` one after another into chunks of about [`GATHER_CHUNK`] bytes, each
/// starting with `head`, and hands each chunk to `each` as it fills; the last one too if it
/// holds any element. `what` names the items in an encoding error.
pub(crate) fn encode_in_chunks<T: Serialize>(
    items: &[T],
    head: &[u8],
    what: &str,
    mut each: impl FnMut(Vec<u8>) -> Result<()>,
) -> Result<()> {
    let mut chunk = head.to_vec();
    for item in items {
        chunk = postcard::to_extend(item, chunk).map_err(|e| Error::Codec {
            what: what.to_string(),
            message: e.to_string(),
        })?;
        if chunk.len() >= GATHER_CHUNK {
            each(std::mem::replace(&mut chunk, head.to_vec()))?;
        }
    }
    match chunk.len() > head.len() {
        true => each(chunk),
        false => Ok(()),
    }
}

impl Comm {
    /// Collectives over `transport`, waiting without a deadline (a lost rank still ends
    /// every wait with [`Error::PeerLost`]).
    pub fn new<T: Transport + 'static>(transport: Arc<T>) -> Self {
        Comm {
            transport,
            seq: AtomicU64::new(0),
            timeout: Duration::MAX,
        }
    }

    /// Makes every wait fail with [`Error::Timeout`] after `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.transport.rank()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.transport.world_size()
    }

    /// The transport underneath.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// The next sequence number, as a tag of `kind` (a top byte of [`tags`]).
    fn next_tag_of(&self, kind: u64) -> u64 {
        kind | (self.seq.fetch_add(1, Ordering::SeqCst) & ((1 << 56) - 1))
    }

    fn next_tag(&self) -> u64 {
        self.next_tag_of(tags::COLLECTIVE)
    }

    fn encode<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>> {
        postcard::to_stdvec(value).map_err(|e| Error::Codec {
            what: what.to_string(),
            message: e.to_string(),
        })
    }

    fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str, from: Rank) -> Result<T> {
        postcard::from_bytes(bytes).map_err(|e| Error::Codec {
            what: format!("{what} from rank {from}"),
            message: e.to_string(),
        })
    }

    /// Every rank's bytes at `root` (in rank order); `None` elsewhere.
    fn gather_bytes(&self, root: Rank, tag: u64, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        let t = &self.transport;
        if t.rank() != root {
            t.send(root, tag, mine)?;
            return Ok(None);
        }
        let deadline = deadline_in(self.timeout);
        let mut all = Vec::with_capacity(t.world_size());
        for r in 0..t.world_size() {
            if r == root {
                all.push(Vec::new());
            } else {
                all.push(self.recv(r, tag, deadline)?);
            }
        }
        all[root] = mine;
        Ok(Some(all))
    }

    /// The next message from `from` with `tag`. A wait for a rank that has left the job, or
    /// that waits for this one in another collective, is noted for the launcher (see
    /// [`env::LEFT_EARLY_FILE`](super::env::LEFT_EARLY_FILE)), and so is a rank lost
    /// ([`env::LOST_FILE`](super::env::LOST_FILE)).
    fn recv(&self, from: Rank, tag: u64, deadline: std::time::Instant) -> Result<Vec<u8>> {
        self.transport.recv(from, tag, deadline).inspect_err(|e| {
            let Some(dir) = std::env::var_os(super::env::OUTPUT_DIR) else {
                return;
            };
            let dir = std::path::Path::new(&dir);
            match e {
                Error::PeerLeft { .. } | Error::Deadlock { .. } => {
                    let path = dir.join(super::env::LEFT_EARLY_FILE);
                    let _ = std::fs::write(path, format!("rank {}: {e}\n", self.rank()));
                }
                Error::PeerLost { rank, .. } => {
                    let _ = std::fs::write(dir.join(super::env::LOST_FILE), format!("{rank}\n"));
                }
                _ => {}
            }
        })
    }

    /// Root's bytes on every rank.
    fn broadcast_bytes(&self, root: Rank, tag: u64, mine: Option<Vec<u8>>) -> Result<Vec<u8>> {
        let t = &self.transport;
        if t.rank() == root {
            // One buffer shared by every send; the root's own copy is taken back at the end
            // (a copy only if a send still holds it).
            let bytes = Bytes::from(mine.expect("the root has the value"));
            for r in (0..t.world_size()).filter(|&r| r != root) {
                t.send_shared(r, tag, bytes.clone())?;
            }
            Ok(Vec::from(bytes))
        } else {
            self.recv(root, tag, deadline_in(self.timeout))
        }
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<()> {
        let tag = self.next_tag();
        let gathered = self.gather_bytes(0, tag, Vec::new())?;
        self.broadcast_bytes(0, tag, gathered.map(|_| Vec::new()))?;
        Ok(())
    }

    /// `root`'s `value` on every rank (the others' values are ignored).
    pub fn broadcast<T: Serialize + DeserializeOwned>(&self, root: Rank, value: T) -> Result<T> {
        let tag = self.next_tag();
        let mine = (self.rank() == root)
            .then(|| Self::encode(&value, "a broadcast value"))
            .transpose()?;
        let bytes = self.broadcast_bytes(root, tag, mine)?;
        if self.rank() == root {
            Ok(value)
        } else {
            Self::decode(&bytes, "a broadcast value", root)
        }
    }

    /// Every rank's `value`, in rank order, at `root`; `None` on the other ranks.
    pub fn gather<T: Serialize + DeserializeOwned>(
        &self,
        root: Rank,
        value: T,
    ) -> Result<Option<Vec<T>>> {
        let tag = self.next_tag();
        let mine = Self::encode(&value, "a gathered value")?;
        match self.gather_bytes(root, tag, mine)? {
            None => Ok(None),
            Some(all) => {
                let mut out = Vec::with_capacity(all.len());
                let mut own = Some(value);
                for (r, bytes) in all.iter().enumerate() {
                    if r == root {
                        out.push(own.take().expect("own value once"));
                    } else {
                        out.push(Self::decode(bytes, "a gathered value", r)?);
                    }
                }
                Ok(Some(out))
            }
        }
    }

    /// Every rank's `value`, in rank order, on every rank.
    ///
    /// Each rank sends its value straight to every other rank (one hop, no root).
    pub fn allgather<T: Serialize + DeserializeOwned>(&self, value: T) -> Result<Vec<T>> {
        let (me, world) = (self.rank(), self.world_size());
        let bytes = Bytes::from(Self::encode(&value, "a gathered value")?);
        let out = (0..world)
            .map(|r| if r == me { Bytes::new() } else { bytes.clone() })
            .collect();
        drop(bytes);
        let mut mine = Some(value);
        self.exchange_shared(out)?
            .into_iter()
            .enumerate()
            .map(|(r, b)| match r == me {
                true => Ok(mine.take().expect("one own value")),
                false => Self::decode(&b, "a gathered value", r),
            })
            .collect()
    }

    /// Every rank's elements joined in rank order into one `Vec` of `total` elements, the
    /// lean way to gather a partitioned table whole: `mine` is encoded once and shared by
    /// every send, each peer's part is decoded element by element straight into the result
    /// (no `Vec` per rank, nothing cloned to join them) and its bytes are dropped before the
    /// next part is read, and this rank's elements are moved into their place (`mine`
    /// owned) or cloned there (borrowed). At most one peer's bytes and the result are alive
    /// at once, beside the caller's own part.
    ///
    /// A peer that sends more elements than `total` leaves room for, bytes that do not
    /// decode, or parts that do not add up to `total` are errors naming the rank.
    ///
    /// ```
    /// use std::thread;
    /// use strads_ap_runtime::cluster::collective::Comm;
    /// use strads_ap_runtime::transport::mem::MemCluster;
    ///
    /// let handles: Vec<_> = MemCluster::new(3)
    ///     .into_transports()
    ///     .into_iter()
    ///     .map(|t| {
    ///         thread::spawn(move || {
    ///             let comm = Comm::new(t);
    ///             let part: Vec<String> = (0..=comm.rank()).map(|i| format!("{}.{i}", comm.rank())).collect();
    ///             comm.allgather_concat(part.into(), 6).unwrap()
    ///         })
    ///     })
    ///     .collect();
    /// for h in handles {
    ///     assert_eq!(h.join().unwrap(), ["0.0", "1.0", "1.1", "2.0", "2.1", "2.2"]);
    /// }
    /// ```
    pub fn allgather_concat<T: Serialize + DeserializeOwned + Clone>(
        &self,
        mine: Cow<'_, [T]>,
        total: usize,
    ) -> Result<Vec<T>> {
        let tag = self.send_part(&mine)?;
        self.join_parts(tag, mine, total)
    }

    /// The other ranks' parts of collective `tag` and this rank's (`mine`, moved or cloned
    /// into its place), joined in rank order.
    fn join_parts<T: DeserializeOwned + Clone>(
        &self,
        tag: u64,
        mine: Cow<'_, [T]>,
        total: usize,
    ) -> Result<Vec<T>> {
        let mut all = Vec::with_capacity(total);
        let own_len = mine.len();
        let mut own = Some(mine);
        let mut put_own = |all: &mut Vec<T>| match own.take() {
            Some(Cow::Borrowed(part)) => all.extend_from_slice(part),
            Some(Cow::Owned(mut part)) => all.append(&mut part),
            None => {}
        };
        self.recv_parts(tag, own_len, total, |at, value| {
            // Own elements come in their place, before the next peer's.
            if at > all.len() {
                put_own(&mut all);
            }
            all.push(value);
        })?;
        if all.len() + own_len == total {
            put_own(&mut all);
        }
        Ok(all)
    }

    /// Every other rank's elements, by their index in the joined sequence of every rank's
    /// `mine` in rank order (`total` in all): `put(index, element)` is called once for each,
    /// in order, as its part is decoded; this rank's own indices are skipped. The collective
    /// under [`Comm::allgather_concat`], and what refreshes the other ranks' elements a
    /// rank keeps of a table in place. Each peer's bytes are dropped before the next part is read.
    ///
    /// A peer that sends more elements than `total` leaves room for, bytes that do not
    /// decode, or parts that do not add up to `total` are errors naming the rank.
    pub fn allgather_each<T: Serialize + DeserializeOwned>(
        &self,
        mine: &[T],
        total: usize,
        put: impl FnMut(usize, T),
    ) -> Result<()> {
        let tag = self.send_part(mine)?;
        self.recv_parts(tag, mine.len(), total, put)
    }

    /// [`Comm::allgather_each`]'s first half: sends `mine` to every other rank as messages
    /// of about [`GATHER_CHUNK`] bytes (each encoded once and shared by the sends, and freed
    /// once sent), then an end message with the count; returns the collective's tag.
    fn send_part<T: Serialize>(&self, mine: &[T]) -> Result<u64> {
        let t = &self.transport;
        self.send_part_to(
            mine,
            (0..t.world_size()).filter(|&r| r != t.rank()).collect(),
        )
    }

    /// [`Comm::send_part`] to the ranks `to` only.
    fn send_part_to<T: Serialize>(&self, mine: &[T], to: Vec<Rank>) -> Result<u64> {
        let tag = self.next_tag();
        self.send_part_tagged(mine, &to, tag)?;
        Ok(tag)
    }

    /// [`Comm::send_part`] to the ranks `to`, as collective `tag`.
    fn send_part_tagged<T: Serialize>(&self, mine: &[T], to: &[Rank], tag: u64) -> Result<()> {
        let t = &self.transport;
        let send = |bytes: Vec<u8>| -> Result<()> {
            let bytes = Bytes::from(bytes);
            for &r in to {
                t.send_shared(r, tag, bytes.clone())?;
            }
            Ok(())
        };
        encode_in_chunks(mine, &[PART_ELEMENTS], GATHERED, &send)?;
        let end = postcard::to_extend(&mine.len(), vec![PART_END]).map_err(|e| Error::Codec {
            what: GATHERED.to_string(),
            message: e.to_string(),
        })?;
        send(end)
    }

    /// [`Comm::allgather_each`]'s second half: every other rank's part, decoded into `put`
    /// message by message (`own_len`: this rank's part's length).
    fn recv_parts<T: DeserializeOwned>(
        &self,
        tag: u64,
        own_len: usize,
        total: usize,
        mut put: impl FnMut(usize, T),
    ) -> Result<()> {
        let t = &self.transport;
        let deadline = deadline_in(self.timeout);
        let mut at = 0;
        for r in 0..t.world_size() {
            if r == t.rank() {
                let room = total.saturating_sub(at);
                if own_len > room {
                    return Err(Error::Transport(format!(
                        "allgather: this rank's part of {own_len} elements leaves room for at \
                         most {room} of the {total} expected"
                    )));
                }
                at += own_len;
                continue;
            }
            self.recv_part(r, tag, deadline, total, &mut at, |at, _, value| {
                put(at, value)
            })?;
        }
        if at != total {
            return Err(Error::Transport(format!(
                "allgather: the ranks' parts hold {at} elements, expected {total}"
            )));
        }
        Ok(())
    }

    /// Rank `r`'s part of collective `tag`, message by message: `put(index, bytes, element)`
    /// for each element as it is decoded (`bytes`: its encoding), from index `*at` on, which
    /// it advances. More elements than `total` leaves room for, bytes that do not decode, or
    /// a count that does not match are errors naming the rank.
    fn recv_part<T: DeserializeOwned>(
        &self,
        r: Rank,
        tag: u64,
        deadline: std::time::Instant,
        total: usize,
        at: &mut usize,
        mut put: impl FnMut(usize, &[u8], T),
    ) -> Result<()> {
        let bad = |message: String| Error::BadPeerData {
            rank: r,
            what: "part of a gathered table".into(),
            message,
        };
        let first = *at;
        loop {
            let message = self.recv(r, tag, deadline)?;
            match message.split_first() {
                Some((&PART_ELEMENTS, mut rest)) => {
                    while !rest.is_empty() {
                        if *at == total {
                            return Err(bad(format!(
                                "more elements than the {total} expected in all"
                            )));
                        }
                        let (value, after) =
                            postcard::take_from_bytes::<T>(rest).map_err(|e| bad(e.to_string()))?;
                        put(*at, &rest[..rest.len() - after.len()], value);
                        *at += 1;
                        rest = after;
                    }
                }
                Some((&PART_END, rest)) => {
                    let (count, _) =
                        postcard::take_from_bytes::<usize>(rest).map_err(|e| bad(e.to_string()))?;
                    if count != *at - first {
                        return Err(bad(format!(
                            "a part said to hold {count} elements holds {}",
                            *at - first
                        )));
                    }
                    return Ok(());
                }
                _ => return Err(bad("a message that is not part of a gather".into())),
            }
        }
    }

    /// Every rank's elements (`total` in all), encoded, handed to `sink` at `root` in rank
    /// order, one rank's part at a time: the root asks a rank for its part only once it has
    /// handed the previous one on, so no rank ever holds more than its own part and one
    /// other (a table written to a file that no rank holds whole). Each element is checked
    /// to decode as a `T` before `sink` sees its bytes. The other ranks return once they
    /// have sent their part, or once the root told them it stopped after a failure, which
    /// is the root's to report.
    pub fn gather_encoded<T: Serialize + DeserializeOwned>(
        &self,
        root: Rank,
        mine: &[T],
        total: usize,
        mut sink: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        const GO: u8 = 1;
        const STOP: u8 = 0;
        let t = &self.transport;
        let tag = self.next_tag();
        if t.rank() != root {
            let asked = self.recv(root, tag, deadline_in(self.timeout))?;
            return match asked[..] {
                [GO] => self.send_part_tagged(mine, &[root], tag),
                _ => Ok(()),
            };
        }
        let deadline = deadline_in(self.timeout);
        let mut at = 0;
        let mut outcome = Ok(());
        for r in 0..t.world_size() {
            if r == root {
                outcome =
                    outcome.and_then(|()| encode_in_chunks(mine, &[], GATHERED, |c| sink(&c)));
                at += mine.len();
            } else if outcome.is_ok() {
                outcome = t.send(r, tag, vec![GO]).and_then(|()| {
                    let mut failed = Ok(());
                    self.recv_part(r, tag, deadline, total, &mut at, |_, bytes, _: T| {
                        if failed.is_ok() {
                            failed = sink(bytes);
                        }
                    })?;
                    failed
                });
            } else {
                // Told to stop, a rank returns rather than waiting for ever.
                let _ = t.send(r, tag, vec![STOP]);
            }
        }
        outcome?;
        if at != total {
            return Err(Error::Transport(format!(
                "gather: the ranks' parts hold {at} elements, expected {total}"
            )));
        }
        Ok(())
    }

    /// Each rank's part, made at `root` one rank at a time in rank order (`next(r)`: rank
    /// `r`'s elements, of `total` in all) and sent as it is made, so the root holds one
    /// part besides its own (a table read from a file that no rank holds whole). After a
    /// failure of `next` the root sends the remaining ranks empty parts and returns the
    /// failure; the others cannot tell an empty part from a failed one, so the caller
    /// tells them (as `DVector::load` does, with the root's outcome).
    pub fn scatter_parts<T: Serialize + DeserializeOwned>(
        &self,
        root: Rank,
        total: usize,
        mut next: impl FnMut(Rank) -> Result<Vec<T>>,
    ) -> Result<Vec<T>> {
        let t = &self.transport;
        let tag = self.next_tag();
        if t.rank() != root {
            let mut part = Vec::new();
            let mut at = 0;
            self.recv_part(
                root,
                tag,
                deadline_in(self.timeout),
                total,
                &mut at,
                |_, _, v| part.push(v),
            )?;
            return Ok(part);
        }
        let mut own = Vec::new();
        let mut failed = None;
        for r in 0..t.world_size() {
            let part = match failed {
                None => next(r).map_err(|e| failed = Some(e)).unwrap_or_default(),
                Some(_) => Vec::new(),
            };
            if r == root {
                own = part;
            } else if let Err(e) = self.send_part_tagged(&part, &[r], tag) {
                // The ranks after `r` still get their (empty) parts rather than waiting.
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(own),
        }
    }

    /// Typed personalised all-to-all: `out[r]` goes to rank `r`; returns what every rank
    /// sent here, in rank order (`out[self]` is returned as is, not encoded).
    pub fn all_to_all<T: Serialize + DeserializeOwned>(&self, out: Vec<T>) -> Result<Vec<T>> {
        let me = self.rank();
        let mut own = None;
        let mut bytes = Vec::with_capacity(out.len());
        for (r, value) in out.into_iter().enumerate() {
            if r == me {
                own = Some(value);
                bytes.push(Vec::new());
            } else {
                bytes.push(Self::encode(&value, "an exchanged value")?);
            }
        }
        self.exchange(bytes)?
            .into_iter()
            .enumerate()
            .map(|(r, b)| match r == me {
                true => own.take().ok_or_else(|| {
                    Error::Transport("all_to_all: no value for this rank".to_string())
                }),
                false => Self::decode(&b, "an exchanged value", r),
            })
            .collect()
    }

    /// Personalised all-to-all: sends `out[r]` to every rank `r` and returns what every
    /// rank sent here, in rank order (`out[self]` is returned as is). Every rank must call
    /// it with one buffer per rank.
    ///
    /// # Examples
    /// ```
    /// use std::thread;
    /// use strads_ap_runtime::cluster::collective::Comm;
    /// use strads_ap_runtime::transport::mem::MemCluster;
    ///
    /// let handles: Vec<_> = MemCluster::new(3)
    ///     .into_transports()
    ///     .into_iter()
    ///     .map(|t| {
    ///         thread::spawn(move || {
    ///             let comm = Comm::new(t);
    ///             let me = comm.rank() as u8;
    ///             let out = (0..3u8).map(|to| vec![me, to]).collect();
    ///             comm.exchange(out).unwrap()
    ///         })
    ///     })
    ///     .collect();
    /// for (me, h) in handles.into_iter().enumerate() {
    ///     let got = h.join().unwrap();
    ///     assert_eq!(got, (0..3u8).map(|from| vec![from, me as u8]).collect::<Vec<_>>());
    /// }
    /// ```
    pub fn exchange(&self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        self.exchange_shared(out.into_iter().map(Bytes::from).collect())
    }

    /// [`Comm::exchange`] of shared buffers (one buffer may go to several ranks uncopied).
    fn exchange_shared(&self, out: Vec<Bytes>) -> Result<Vec<Vec<u8>>> {
        let t = &self.transport;
        let (me, world) = (t.rank(), t.world_size());
        if out.len() != world {
            return Err(Error::Transport(format!(
                "exchange: {} buffers for {world} ranks",
                out.len()
            )));
        }
        let tag = self.next_tag();
        let mut mine = Bytes::new();
        for (r, bytes) in out.into_iter().enumerate() {
            if r == me {
                mine = bytes;
            } else {
                t.send_shared(r, tag, bytes)?;
            }
        }
        let mut mine = Some(mine);
        let deadline = deadline_in(self.timeout);
        let mut all = Vec::with_capacity(world);
        for r in 0..world {
            if r == me {
                all.push(Vec::from(mine.take().expect("one own buffer")));
            } else {
                all.push(self.recv(r, tag, deadline)?);
            }
        }
        Ok(all)
    }

    /// Every rank's value in rank order once every rank succeeded: an all-gather of
    /// outcomes. If some rank failed, every rank fails alike: a failing rank with its own
    /// error, the others with [`Error::RemoteFailure`] naming the first rank that failed.
    pub fn gather_outcomes<T: Serialize + DeserializeOwned>(
        &self,
        mine: Result<T>,
    ) -> Result<Vec<T>> {
        let (sent, own) = match mine {
            Ok(v) => (Ok(v), None),
            Err(e) => (Err(e.to_string()), Some(e)),
        };
        let all: Vec<std::result::Result<T, String>> = self.allgather(sent)?;
        if let Some(e) = own {
            return Err(e);
        }
        all.into_iter()
            .enumerate()
            .map(|(rank, r)| r.map_err(|message| Error::RemoteFailure { rank, message }))
            .collect()
    }

    /// `op` folded over every rank's `value` in rank order (on rank 0), on every rank.
    pub fn allreduce<T: Serialize + DeserializeOwned>(
        &self,
        value: T,
        op: impl Fn(T, T) -> T,
    ) -> Result<T> {
        let reduced = self
            .gather(0, value)?
            .map(|all| all.into_iter().reduce(&op).expect("at least one rank"));
        match reduced {
            Some(v) => self.broadcast(0, v),
            None => {
                // Non-roots receive rank 0's result; their argument is ignored.
                let tag = self.next_tag();
                let bytes = self.broadcast_bytes(0, tag, None)?;
                Self::decode(&bytes, "a reduced value", 0)
            }
        }
    }

    /// Entering operator `site` running task `task`: checks that every rank reached the
    /// same operator, and returns the driver's serialized `captures` on every rank.
    ///
    /// A rank at a different operator makes every rank fail with [`Error::Divergence`]
    /// naming both call sites.
    pub fn enter_operator(&self, site: &str, task: &str, captures: Vec<u8>) -> Result<Vec<u8>> {
        let tag = self.next_tag_of(tags::OPERATOR);
        let entry = Self::encode(
            &Entry {
                site: site.to_string(),
                task: task.to_string(),
            },
            "an operator entry",
        )?;
        let verdict = match self.gather_bytes(0, tag, entry)? {
            Some(all) => {
                let mut verdict = Verdict::Go { captures };
                for (r, bytes) in all.iter().enumerate().skip(1) {
                    let e: Entry = Self::decode(bytes, "an operator entry", r)?;
                    if e.site != site || e.task != task {
                        // The same operator with other arguments: say which.
                        let (driver, here) = match e.site == site {
                            true => (
                                site_with_arguments(site, &arguments(task, true)),
                                site_with_arguments(&e.site, &arguments(&e.task, false)),
                            ),
                            false => (site.to_string(), e.site),
                        };
                        verdict = Verdict::Diverged {
                            rank: r,
                            driver,
                            here,
                        };
                        break;
                    }
                }
                Some(Self::encode(&verdict, "an operator verdict")?)
            }
            None => None,
        };
        let bytes = self.broadcast_bytes(0, tag, verdict)?;
        match Self::decode::<Verdict>(&bytes, "an operator verdict", 0)? {
            Verdict::Go { captures } => Ok(captures),
            Verdict::Diverged { rank, driver, here } => {
                Err(Error::Divergence { rank, driver, here })
            }
        }
    }
}

/// What an operator entry's task says, for a divergence message: a loop's generated task
/// name says only which build of the body a rank runs.
fn arguments(task: &str, driver: bool) -> String {
    match (task.starts_with("__Strads"), driver) {
        (true, true) => "its loop body as built on rank 0".into(),
        (true, false) => "another build of that loop body".into(),
        (false, _) => task.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::transport::mem;

    /// Runs `job(rank, comm)` on each rank of a 2-rank mem cluster; results in rank order,
    /// within 60 s.
    fn on_two<T: Send + 'static>(job: impl Fn(Rank, &Comm) -> T + Send + Sync + 'static) -> Vec<T> {
        on_ranks(2, job)
    }

    /// As `on_two`, on `world` ranks.
    fn on_ranks<T: Send + 'static>(
        world: usize,
        job: impl Fn(Rank, &Comm) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let job = std::sync::Arc::new(job);
        let (tx, rx) = std::sync::mpsc::channel();
        for t in mem::MemCluster::new(world).into_transports() {
            let (job, tx) = (job.clone(), tx.clone());
            std::thread::spawn(move || {
                let rank = t.rank();
                let out = job(rank, &Comm::new(t.clone()));
                t.leave();
                let _ = tx.send((rank, out));
            });
        }
        let mut out: Vec<(Rank, T)> = (0..world)
            .map(|_| rx.recv_timeout(Duration::from_secs(60)).expect("no hang"))
            .collect();
        out.sort_by_key(|o| o.0);
        out.into_iter().map(|o| o.1).collect()
    }

    /// A gathered table arrives whole and in rank order however the ranks' parts are
    /// sized (one empty), and is the same as an `allgather` of the parts joined.
    #[test]
    fn allgather_concat_joins_parts_in_rank_order() {
        let out = on_ranks(3, |rank, comm| {
            let part: Vec<Vec<u32>> = (0..[2usize, 0, 3][rank])
                .map(|i| vec![rank as u32; i + 1])
                .collect();
            let lean = comm.allgather_concat(Cow::Borrowed(&part), 5).unwrap();
            // At rank 1, the encoded elements: postcard's sequence once its length is put
            // in front.
            let mut at_one = postcard::to_stdvec(&5usize).unwrap();
            comm.gather_encoded(1, &part, 5, |bytes| {
                at_one.extend_from_slice(bytes);
                Ok(())
            })
            .unwrap();
            let joined = comm.allgather(part).unwrap().concat();
            (rank, lean, at_one, joined)
        });
        for (rank, lean, at_one, joined) in out {
            assert_eq!(lean.len(), 5);
            assert_eq!(lean, joined);
            match rank {
                1 => assert_eq!(
                    postcard::from_bytes::<Vec<Vec<u32>>>(&at_one).unwrap(),
                    joined
                ),
                _ => assert_eq!(at_one.len(), 1, "only the root's sink runs"),
            }
        }
    }

    /// A root whose sink fails stops asking: the ranks it had not asked yet return
    /// instead of waiting, the ones it asked have sent their part, and only the root
    /// reports the failure. Bytes that do not decode as the element type are an error
    /// naming the rank that sent them.
    #[test]
    fn a_gather_to_a_failing_sink_stops_every_rank() {
        let out = on_ranks(4, |rank, comm| {
            let part = vec![rank as u64; 2];
            let mut calls = 0;
            let outcome = comm.gather_encoded(0, &part, 8, |_| {
                calls += 1;
                match calls {
                    3 => Err(Error::Config("the disk is full".into())),
                    _ => Ok(()),
                }
            });
            (outcome.map_err(|e| e.to_string()), calls)
        });
        assert_eq!(out[0], (Err("configuration: the disk is full".into()), 3));
        for other in &out[1..] {
            assert_eq!(*other, (Ok(()), 0));
        }
        let garbage = on_two(|rank, comm| match rank {
            0 => comm
                .gather_encoded(0, &[1u64], 2, |_| Ok(()))
                .map_err(|e| e.to_string()),
            // u128::MAX is a varint of 19 bytes, longer than any u64's.
            _ => comm
                .gather_encoded(0, &[u128::MAX], 2, |_| Ok(()))
                .map_err(|e| e.to_string()),
        });
        let message = garbage[0].clone().unwrap_err();
        assert!(message.contains("rank 1"), "{message}");
        assert_eq!(garbage[1], Ok(()));
    }

    /// A peer whose part does not fit what the call expects, or does not decode, is an
    /// error naming it, on the rank that reads it.
    #[test]
    fn allgather_concat_refuses_parts_that_do_not_add_up() {
        let too_many = on_two(|rank, comm| {
            let part = vec![rank as u64; 3];
            comm.allgather_concat(Cow::Owned(part), 4)
                .unwrap_err()
                .to_string()
        });
        for message in too_many {
            assert!(
                message.contains("more elements than the 4 expected in all")
                    || message.contains("part of 3 elements leaves room for at most 1"),
                "{message}"
            );
        }
        let too_few = on_two(|_, comm| {
            comm.allgather_concat(Cow::Borrowed(&[1u64][..]), 3)
                .unwrap_err()
                .to_string()
        });
        for message in too_few {
            assert!(message.contains("hold 2 elements, expected 3"), "{message}");
        }
    }

    /// A peer whose gather messages are garbage (an element that does not decode, a count
    /// that does not match, a message of another kind, more elements than expected) is an
    /// error naming it, never a panic or a hang.
    #[test]
    fn a_lean_gather_refuses_a_peer_that_speaks_garbage() {
        let garbage: Vec<Vec<Vec<u8>>> = vec![
            vec![vec![PART_ELEMENTS, 200, 1, b'a']],
            vec![vec![PART_ELEMENTS, 1, b'a'], vec![PART_END, 2]],
            vec![vec![7, 1, 2]],
            vec![vec![PART_ELEMENTS, 1, b'a', 1, b'b', 1, b'c']],
        ];
        let expected = [
            "rank 1 sent a malformed part of a gathered table",
            "a part said to hold 2 elements holds 1",
            "a message that is not part of a gather",
            "more elements than the 3 expected in all",
        ];
        for (messages, expected) in garbage.into_iter().zip(expected) {
            let out = on_two(move |rank, comm| {
                if rank == 1 {
                    let tag = comm.next_tag();
                    for m in &messages {
                        comm.transport().send(0, tag, m.clone()).unwrap();
                    }
                    return None;
                }
                let mine = vec!["x".to_string()];
                let err = comm
                    .allgather_each(&mine, 3, |_, _: String| {})
                    .unwrap_err();
                Some(err.to_string())
            });
            let message = out[0].clone().expect("rank 0's error");
            assert!(message.contains(expected), "{message}");
            assert!(message.contains("rank 1"), "{message}");
        }
    }

    #[test]
    fn ranks_waiting_for_each_other_in_different_collectives_fail_naming_both() {
        let out = on_two(|rank, comm| match rank {
            0 => comm.allreduce(1u64, |a, b| a + b).map(|_| ()),
            _ => comm.broadcast(0, 5u64).map(|_| ()),
        });
        let deadlocks = out
            .iter()
            .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
            .count();
        assert!(deadlocks >= 1, "{out:?}");
        for r in &out {
            match r {
                Err(e @ Error::Deadlock { .. }) => {
                    let m = e.to_string();
                    assert!(m.contains("collective number 0"), "{m}");
                    assert!(m.contains("driver code differs"), "{m}");
                }
                // The other may learn first that the one which detected it has left.
                Err(Error::PeerLeft { .. }) => {}
                other => panic!("expected a deadlock, got {other:?}"),
            }
        }
    }

    #[test]
    fn ranks_waiting_in_a_cycle_of_three_fail_naming_it() {
        // Each rank waits for the next one's broadcast: no two wait for each other.
        let out = on_ranks(3, |rank, comm| {
            comm.broadcast((rank + 1) % 3, 5u64).map(|_| ())
        });
        let mut cycles = 0;
        for (rank, r) in out.iter().enumerate() {
            match r {
                Err(e @ Error::Deadlock { .. }) => {
                    cycles += 1;
                    let m = e.to_string();
                    let (next, last) = ((rank + 1) % 3, (rank + 2) % 3);
                    let whole = format!(
                        "this rank waits for rank {next} in collective number 0, while rank \
                         {next} waits for rank {last} in collective number 0, rank {last} \
                         waits for this rank in collective number 0"
                    );
                    assert!(m.contains(&whole), "{m}");
                }
                Err(Error::PeerLeft { .. }) => {}
                other => panic!("expected a deadlock, got {other:?}"),
            }
        }
        assert!(cycles >= 1, "{out:?}");
    }

    #[test]
    fn a_rank_waiting_for_a_deadlocked_pair_fails_too() {
        // Ranks 1 and 2 wait for each other; rank 0 waits for rank 1.
        let out = on_ranks(3, |rank, comm| match rank {
            0 => comm.broadcast(1, 5u64).map(|_| ()),
            1 => comm.broadcast(2, 5u64).map(|_| ()),
            _ => comm.broadcast(1, 5u64).map(|_| ()),
        });
        for r in &out {
            assert!(
                matches!(r, Err(Error::Deadlock { .. } | Error::PeerLeft { .. })),
                "{out:?}"
            );
        }
    }

    #[test]
    fn a_long_wait_for_a_busy_rank_is_no_deadlock() {
        // Rank 1 works for longer than two probes before joining the collective: its
        // driver waits for nothing, so rank 0 keeps waiting.
        let out = on_two(|rank, comm| {
            if rank == 1 {
                std::thread::sleep(2 * crate::transport::PROBE_AFTER + Duration::from_millis(500));
            }
            comm.allreduce(rank as u64 + 1, |a, b| a + b)
        });
        for r in out {
            assert_eq!(r.unwrap(), 3);
        }
    }
}
