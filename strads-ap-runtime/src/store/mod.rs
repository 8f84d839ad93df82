//! Where elements live across ranks, sans-IO: which rank owns which element, and the
//! batched requests an owner answers.
//!
//! What runs today: every DDS and engine places elements by these partitions (a DVector's
//! range per rank, a map key's owner, each rank's share of an `async_for!`'s tasks).
//! What does not, yet: no engine sends [`Request`]s. Across ranks a loop gathers whole
//! tables or moves exactly the elements its plan needs (`engine/async_for/exchange.rs`),
//! and driver operators gather or combine with collectives. [`Shard`] and [`Request`] are
//! the get/put/add protocol that partitioned storage (each rank holding only its share)
//! will move elements through; they are tested here and by property tests, not wired in.
//!
//! * A `DVector` of `len` elements is cut into contiguous ranges, one per rank, of sizes
//!   differing by at most one ([`RangePartition`]): no per-element hashing, and an
//!   `async_for!` over `0..len` gives each rank the indices whose input elements it holds.
//! * A map's keys go to ranks by a stable hash ([`HashPartition`]), the same on every rank
//!   and every run.
//! * Requests are batched per owner ([`split_by_owner`]) and carry many keys: `Get`, `Put`
//!   and `Add` (apply a delta with [`Aggregate::add_delta`]). Replies answer a `Get` in
//!   the order asked.
//!
//! ```
//! use strads_ap_runtime::store::{RangePartition, Request, Shard};
//!
//! let p = RangePartition::new(10, 3);
//! assert_eq!((p.range(0), p.range(1), p.range(2)), (0..4, 4..7, 7..10));
//! let mut shard = Shard::new(p.range(1), vec![1.0f64, 2.0, 3.0]);
//! let reply = shard.handle(&Request::encode_add(&[(5, 10.0f64)]).unwrap()).unwrap();
//! assert!(reply.is_empty());
//! let reply = shard.handle(&Request::encode_get(&[6, 5]).unwrap()).unwrap();
//! assert_eq!(Shard::<f64>::decode_values(&reply).unwrap(), vec![3.0, 12.0]);
//! ```

use std::hash::Hash;
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rank::Rank;
use crate::value::Aggregate;

/// Contiguous, balanced ranges of a vector's indices, one per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangePartition {
    len: usize,
    ranks: usize,
}

impl RangePartition {
    /// `len` elements over `ranks` ranks.
    ///
    /// # Panics
    /// If `ranks` is 0.
    pub fn new(len: usize, ranks: usize) -> Self {
        assert!(ranks > 0, "a partition needs at least one rank");
        RangePartition { len, ranks }
    }

    /// The indices rank `r` owns: the first `len % ranks` ranks hold one more.
    pub fn range(&self, r: Rank) -> Range<usize> {
        let (q, extra) = (self.len / self.ranks, self.len % self.ranks);
        let start = r * q + r.min(extra);
        start..start + q + usize::from(r < extra)
    }

    /// The rank that owns index `i` (`i < len`).
    pub fn owner(&self, i: usize) -> Rank {
        debug_assert!(i < self.len);
        let (q, extra) = (self.len / self.ranks, self.len % self.ranks);
        let big = extra * (q + 1);
        if i < big {
            i / (q + 1)
        } else {
            extra + (i - big) / q.max(1)
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Map keys spread over ranks by a hash that is stable across processes and runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashPartition {
    ranks: usize,
}

impl HashPartition {
    /// Keys over `ranks` ranks.
    ///
    /// # Panics
    /// If `ranks` is 0.
    pub fn new(ranks: usize) -> Self {
        assert!(ranks > 0, "a partition needs at least one rank");
        HashPartition { ranks }
    }

    /// The rank that owns `key`.
    pub fn owner<K: Hash + ?Sized>(&self, key: &K) -> Rank {
        (crate::util::stable_hash(key) % self.ranks as u64) as usize
    }
}

/// Groups `items` by the rank that owns each, keeping their order within a rank.
pub fn split_by_owner<T>(
    items: impl IntoIterator<Item = T>,
    ranks: usize,
    owner: impl Fn(&T) -> Rank,
) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = (0..ranks).map(|_| Vec::new()).collect();
    for item in items {
        let r = owner(&item);
        out[r].push(item);
    }
    out
}

/// A batched request to the shard that owns the keys. Values are postcard bytes of the
/// table's element type, so one message type serves every table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// The values of these indices, in this order.
    Get(Vec<u64>),
    /// Overwrite these elements.
    Put(Vec<(u64, Vec<u8>)>),
    /// Add these deltas to these elements.
    Add(Vec<(u64, Vec<u8>)>),
}

fn codec(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Codec {
        what: what.to_string(),
        message: e.to_string(),
    }
}

impl Request {
    /// A `Get` of `keys`, encoded.
    pub fn encode_get(keys: &[u64]) -> Result<Vec<u8>> {
        postcard::to_stdvec(&Request::Get(keys.to_vec())).map_err(|e| codec("a get request", e))
    }

    /// A `Put` of `items`, encoded.
    pub fn encode_put<T: Serialize>(items: &[(u64, T)]) -> Result<Vec<u8>> {
        Self::encode_items(items, Request::Put)
    }

    /// An `Add` of `items` (deltas), encoded.
    pub fn encode_add<T: Serialize>(items: &[(u64, T)]) -> Result<Vec<u8>> {
        Self::encode_items(items, Request::Add)
    }

    fn encode_items<T: Serialize>(
        items: &[(u64, T)],
        kind: fn(Vec<(u64, Vec<u8>)>) -> Request,
    ) -> Result<Vec<u8>> {
        let values = items
            .iter()
            .map(|(k, v)| {
                Ok((
                    *k,
                    postcard::to_stdvec(v).map_err(|e| codec("a store value", e))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        postcard::to_stdvec(&kind(values)).map_err(|e| codec("a store request", e))
    }
}

/// One rank's part of a vector table: the elements of its range.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard<T> {
    range: Range<usize>,
    data: Vec<T>,
}

impl<T: Serialize + DeserializeOwned + Aggregate> Shard<T> {
    /// The shard holding `data` for the indices `range`.
    ///
    /// # Panics
    /// If `data` does not have one element per index of `range`.
    pub fn new(range: Range<usize>, data: Vec<T>) -> Self {
        assert_eq!(range.len(), data.len(), "one element per index");
        Shard { range, data }
    }

    /// The indices held.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The elements held.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    fn slot(&self, key: u64) -> Result<usize> {
        usize::try_from(key)
            .ok()
            .filter(|k| self.range.contains(k))
            .map(|k| k - self.range.start)
            .ok_or_else(|| {
                Error::Transport(format!(
                    "store request for index {key}, which this shard ({:?}) does not hold",
                    self.range
                ))
            })
    }

    /// Serves one encoded request; the reply is the encoded values of a `Get` (empty for
    /// `Put` and `Add`). A malformed request or a key this shard does not hold is an error
    /// naming it, and changes nothing.
    pub fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        let request: Request =
            postcard::from_bytes(request).map_err(|e| codec("a store request", e))?;
        match request {
            Request::Get(keys) => {
                let values = keys
                    .iter()
                    .map(|&k| Ok(&self.data[self.slot(k)?]))
                    .collect::<Result<Vec<&T>>>()?;
                postcard::to_stdvec(&values).map_err(|e| codec("store values", e))
            }
            Request::Put(items) | Request::Add(items) if items.is_empty() => Ok(Vec::new()),
            Request::Put(items) => {
                let decoded = self.decode_items(&items)?;
                for (slot, v) in decoded {
                    self.data[slot] = v;
                }
                Ok(Vec::new())
            }
            Request::Add(items) => {
                let decoded = self.decode_items(&items)?;
                for (slot, d) in decoded {
                    self.data[slot].add_delta(&d);
                }
                Ok(Vec::new())
            }
        }
    }

    /// Decodes every item before any is applied, so a bad batch changes nothing.
    fn decode_items(&self, items: &[(u64, Vec<u8>)]) -> Result<Vec<(usize, T)>> {
        items
            .iter()
            .map(|(k, bytes)| {
                let slot = self.slot(*k)?;
                let v = postcard::from_bytes(bytes)
                    .map_err(|e| codec(&format!("the value for index {k}"), e))?;
                Ok((slot, v))
            })
            .collect()
    }

    /// Decodes a `Get` reply.
    pub fn decode_values(reply: &[u8]) -> Result<Vec<T>> {
        postcard::from_bytes(reply).map_err(|e| codec("store values", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ranges_cover_every_index_once_and_owner_agrees(len in 0usize..500, ranks in 1usize..9) {
            let p = RangePartition::new(len, ranks);
            let mut next = 0;
            for r in 0..ranks {
                let range = p.range(r);
                prop_assert_eq!(range.start, next);
                prop_assert!(range.len() == len / ranks || range.len() == len / ranks + 1);
                for i in range.clone() {
                    prop_assert_eq!(p.owner(i), r);
                }
                next = range.end;
            }
            prop_assert_eq!(next, len);
        }
    }

    #[test]
    fn hash_partition_is_stable_and_spreads_keys() {
        let p = HashPartition::new(4);
        let owners: Vec<Rank> = (0..1000u64).map(|k| p.owner(&k)).collect();
        assert_eq!(
            owners,
            (0..1000u64).map(|k| p.owner(&k)).collect::<Vec<_>>()
        );
        for r in 0..4 {
            let n = owners.iter().filter(|&&o| o == r).count();
            assert!((150..350).contains(&n), "rank {r} owns {n} of 1000 keys");
        }
        assert_eq!(p.owner("word"), HashPartition::new(4).owner("word"));
    }

    #[test]
    fn requests_split_by_owner_keep_order() {
        let p = RangePartition::new(10, 3);
        let parts = split_by_owner([9u64, 0, 5, 1, 8, 4], 3, |&k| p.owner(k as usize));
        assert_eq!(parts, vec![vec![0, 1], vec![5, 4], vec![9, 8]]);
    }

    #[test]
    fn shards_get_put_and_add() {
        let mut s = Shard::new(10..13, vec![1.0f32, 2.0, 3.0]);
        s.handle(&Request::encode_put(&[(10, 5.0f32)]).unwrap())
            .unwrap();
        s.handle(&Request::encode_add(&[(12, 0.5f32), (12, 0.5)]).unwrap())
            .unwrap();
        let got = s
            .handle(&Request::encode_get(&[12, 10, 11]).unwrap())
            .unwrap();
        assert_eq!(
            Shard::<f32>::decode_values(&got).unwrap(),
            vec![4.0, 5.0, 2.0]
        );
    }

    #[test]
    fn bad_requests_are_errors_that_change_nothing() {
        let mut s = Shard::new(0..2, vec![1u64, 2]);
        let before = s.clone();
        let err = s
            .handle(&Request::encode_add(&[(1, 5u64), (7, 1)]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("index 7"), "{err}");
        assert_eq!(s, before, "a batch with a bad key is not half applied");
        let err = s.handle(&[0xff, 0xff, 0xff]).unwrap_err().to_string();
        assert!(err.contains("a store request"), "{err}");
        let bad_value = postcard::to_stdvec(&Request::Put(vec![(0, vec![0xff; 11])])).unwrap();
        let err = s.handle(&bad_value).unwrap_err().to_string();
        assert!(err.contains("the value for index 0"), "{err}");
        assert_eq!(s, before);
        let err = s
            .handle(&Request::encode_get(&[2]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not hold"), "{err}");
    }
}
