//! [`DVector`]: a distributed vector.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rayon::prelude::*;

use super::map::DMap;
use super::table::{lookup_table, VectorTable};
use super::Element;
use crate::cluster::collective::Comm;
use crate::cluster::{context, RankCtx};
use crate::error::{Error, Result};
use crate::store::RangePartition;
use crate::value::{Aggregate, Aggregation};

/// Elements per chunk of a parallel reduction.
const REDUCE_CHUNK: usize = 4096;

/// A distributed vector of `T`: the strads-ap replacement for `Vec<T>`.
///
/// The handle is cheap to clone (clones share the elements). Elements are partitioned by
/// contiguous index ranges across ranks; a world of one holds them all.
///
/// # Examples
/// ```
/// use strads_ap_runtime::DVector;
/// let v = DVector::from_fn(5, |i| i as f64 * 2.0)?;
/// assert_eq!(v.len(), 5);
/// v.set(1, 10.0)?;
/// assert_eq!(v.get(1)?, 10.0);
/// let doubled = v.map(|x| x * 2.0)?;
/// assert_eq!(doubled.to_vec()?, vec![0.0, 20.0, 8.0, 12.0, 16.0]);
/// assert_eq!(v.reduce(|a, b| a + b)?, 0.0 + 10.0 + 4.0 + 6.0 + 8.0);
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
pub struct DVector<T> {
    pub(crate) table: Arc<VectorTable<T>>,
}

impl<T> Clone for DVector<T> {
    fn clone(&self) -> Self {
        DVector {
            table: self.table.clone(),
        }
    }
}

impl<T: Element> std::fmt::Debug for DVector<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DVector")
            .field("id", &self.table.id)
            .field("len", &self.table.len)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

/// How conflicting updates of a relaxed table are merged (see [`DVector::relaxed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Relaxed {
    /// Each worker keeps a replica; a worker adds its replica's changes to the table
    /// (summed with the other workers') after each group of tasks it runs (a rotation
    /// cell's slice, a components group, a dynamic round's share), then reads the table's
    /// values back. A loop whose written tables are all relaxed runs as 4 × threads
    /// groups, so its replicas merge only that often.
    Sum,
}

// Shape and identity need no bound on the element type, so that a vector of a type that
// is not an element is refused once, where it is made, not again at each use.
impl<T> DVector<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.table.len
    }

    /// Whether the DVector has no elements.
    pub fn is_empty(&self) -> bool {
        self.table.len == 0
    }

    /// The table id (the same on every rank of a job).
    pub fn id(&self) -> u64 {
        self.table.id
    }
}

impl<T: Element> DVector<T> {
    /// A DVector made by every rank from the same full `data` (SPMD): each keeps its range.
    pub(crate) fn from_data(data: Vec<T>) -> Self {
        let ctx = crate::cluster::here();
        let part = RangePartition::new(data.len(), ctx.world_size());
        let range = part.range(ctx.rank());
        let (len, offset) = (data.len(), range.start);
        let local = if ctx.is_distributed() {
            let mut data = data;
            data.truncate(range.end);
            data.drain(..range.start);
            data
        } else {
            data
        };
        DVector {
            table: VectorTable::new(ctx, len, offset, local),
        }
    }

    /// A DVector of `len` elements of which this rank holds `local`, its range.
    fn from_local(ctx: Arc<RankCtx>, len: usize, local: Vec<T>) -> Self {
        let range = RangePartition::new(len, ctx.world_size()).range(ctx.rank());
        debug_assert_eq!(range.len(), local.len());
        DVector {
            table: VectorTable::new(ctx, len, range.start, local),
        }
    }

    /// Makes a DVector by `make` (a data operator `op`, input or derived, with an extra
    /// outcome `M`), or, when recovery replays the operator, loads the DVector it made the
    /// first time (see [`crate::checkpoint`]). With checkpoints on, a DVector made is
    /// checkpointed. The maps' counterpart is `MapTable::made_by_operator`.
    #[track_caller]
    pub(crate) fn made_by_operator<M>(
        op: &'static str,
        make: impl FnOnce() -> Result<(Self, M)>,
    ) -> Result<(Self, M)>
    where
        M: serde::Serialize + serde::de::DeserializeOwned,
    {
        use super::persist::{self, Input};
        let at = std::panic::Location::caller();
        let codec = |e: postcard::Error| Error::Codec {
            what: format!("the outcome of {op}"),
            message: e.to_string(),
        };
        match persist::begin_input(op, at)? {
            Input::Off => make(),
            Input::Load { id, state, meta } => {
                let v = Self::from_snapshot(op, &state)?;
                persist::check_input_id(id, v.id(), &persist::input_site(op, at))?;
                Ok((v, postcard::from_bytes(&meta).map_err(codec)?))
            }
            record @ Input::Record { .. } => {
                let (v, meta) = make()?;
                let bytes = postcard::to_stdvec(&meta).map_err(codec)?;
                record.made(v.table.clone(), bytes)?;
                Ok((v, meta))
            }
        }
    }

    /// [`DVector::made_by_operator`] for an operator with no extra outcome.
    #[track_caller]
    pub(crate) fn made(op: &'static str, make: impl FnOnce() -> Result<Self>) -> Result<Self> {
        Ok(Self::made_by_operator(op, || Ok((make()?, ())))?.0)
    }

    /// A DVector made from a checkpoint of this rank's range
    /// ([`super::table::TableHandle::snapshot_into`]).
    fn from_snapshot(op: &'static str, saved: &super::persist::Saved) -> Result<Self> {
        use super::persist::Saved;
        let ctx = crate::cluster::here();
        let what = format!("the DVector made by {op}");
        let (len, data) = match saved {
            Saved::Own(bytes) => super::table::decode_range_snapshot::<T>(op, &what, bytes, &ctx)?,
            Saved::Parts(parts) => {
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                super::table::decode_parts::<T>(op, &what, &parts, &ctx)?
            }
        };
        Ok(Self::from_local(ctx, len, data))
    }

    /// The DVector whose elements are every rank's `part`, in rank order (a collective):
    /// each rank sends every other just the elements that fall in its balanced range.
    pub(crate) fn from_rank_parts(comm: &Comm, part: Vec<T>) -> Result<Self> {
        let (me, world) = (comm.rank(), comm.world_size());
        let counts: Vec<usize> = comm.allgather(part.len())?;
        // The counts come from other ranks: their sum must be a length.
        let mut len = 0usize;
        let mut start = 0;
        for (r, &c) in counts.iter().enumerate() {
            if r == me {
                start = len;
            }
            len = len.checked_add(c).ok_or_else(|| Error::BadPeerData {
                rank: r,
                what: "count of elements for a DVector".into(),
                message: format!("{c} elements, more than a DVector can hold with the others'"),
            })?;
        }
        let end = start + part.len();
        let balanced = RangePartition::new(len, world);
        let mut items = part.into_iter();
        let out: Vec<Vec<T>> = (0..world)
            .map(|r| {
                let dest = balanced.range(r);
                let n = dest.end.min(end).saturating_sub(dest.start.max(start));
                items.by_ref().take(n).collect()
            })
            .collect();
        // Each rank sends the elements of its part that fall in this rank's range.
        let mine = balanced.range(me);
        let mut from = 0;
        let got = comm.all_to_all(out)?;
        for (r, (items, &c)) in got.iter().zip(&counts).enumerate() {
            let n = mine.end.min(from + c).saturating_sub(mine.start.max(from));
            if items.len() != n {
                return Err(Error::BadPeerData {
                    rank: r,
                    what: "part of a DVector".into(),
                    message: format!("{} elements for this rank, expected {n}", items.len()),
                });
            }
            from += c;
        }
        Ok(Self::from_local(
            crate::cluster::here(),
            len,
            join_parts(got),
        ))
    }

    /// The collectives when the job has several ranks; `None` in a world of one.
    fn dist(&self, op: &str) -> Result<Option<&Comm>> {
        let ctx = &self.table.ctx;
        if ctx.is_distributed() {
            ctx.comm_for(op).map(Some)
        } else {
            Ok(None)
        }
    }

    fn partition(&self) -> RangePartition {
        RangePartition::new(self.table.len, self.table.ctx.world_size())
    }

    /// A DVector of `len` elements, element `i` being `f(i)`; built in parallel. In a job
    /// of several ranks each rank computes its own range.
    #[track_caller]
    pub fn from_fn<F>(len: usize, f: F) -> Result<Self>
    where
        F: Fn(usize) -> T + Send + Sync,
    {
        Self::made("DVector::from_fn", || Self::compute_fn(len, f))
    }

    fn compute_fn<F>(len: usize, f: F) -> Result<Self>
    where
        F: Fn(usize) -> T + Send + Sync,
    {
        let ctx = crate::cluster::here();
        let range = RangePartition::new(len, ctx.world_size()).range(ctx.rank());
        if ctx.is_distributed() {
            ctx.comm_for("DVector::from_fn")?.enter_operator(
                "DVector::from_fn",
                &format!("len {len}"),
                Vec::new(),
            )?;
        }
        let threads = context().config().threads;
        let data = if threads == 1 {
            // On the calling thread: its allocator arena is the one the serial program
            // would use, which keeps rows allocated here close together.
            range.map(&f).collect()
        } else {
            crate::cluster::here()
                .pool(threads)
                .install(|| range.into_par_iter().map(&f).collect())
        };
        Ok(Self::from_local(ctx, len, data))
    }

    /// A DVector holding the elements of `v`. In a job of several ranks every rank passes
    /// the same `v` (it is computed by the same program) and keeps its range; ranks passing
    /// vectors of different lengths fail with [`Error::Divergence`].
    #[track_caller]
    pub fn from_vec(v: Vec<T>) -> Result<Self> {
        let op = "DVector::from_vec";
        Self::made(op, || {
            let ctx = crate::cluster::here();
            if ctx.is_distributed() {
                ctx.comm_for(op)?
                    .enter_operator(op, &format!("len {}", v.len()), Vec::new())?;
            }
            Ok(Self::from_data(v))
        })
    }

    fn check_index(&self, op: &'static str, i: usize) -> Result<()> {
        if i >= self.table.len {
            return Err(Error::IndexOutOfBounds {
                op,
                index: i,
                len: self.table.len,
            });
        }
        Ok(())
    }

    /// A copy of element `i` (on every rank: its owner sends it).
    pub fn get(&self, i: usize) -> Result<T> {
        self.check_index("DVector::get", i)?;
        let local = {
            let data = self.table.read("DVector::get")?;
            i.checked_sub(self.table.offset)
                .and_then(|j| data.get(j))
                .cloned()
        };
        match self.dist("DVector::get")? {
            None => local.ok_or(Error::IndexOutOfBounds {
                op: "DVector::get",
                index: i,
                len: self.table.len,
            }),
            Some(comm) => {
                let owner = self.partition().owner(i);
                comm.broadcast(owner, local)?.ok_or_else(|| {
                    Error::Transport(format!("rank {owner} did not send element {i}"))
                })
            }
        }
    }

    /// Replaces element `i` (its owner does; every rank calls it with the same value).
    pub fn set(&self, i: usize, value: T) -> Result<()> {
        self.check_index("DVector::set", i)?;
        super::persist::modified(&self.table);
        let mut data = self.table.write("DVector::set")?;
        if let Some(slot) = i
            .checked_sub(self.table.offset)
            .and_then(|j| data.get_mut(j))
        {
            *slot = value;
        }
        Ok(())
    }

    /// All elements, in order, as a `Vec` (on every rank).
    ///
    /// Fails, on every rank, if that copy would be larger than the gather limit (by
    /// default half the machine's memory; see [`set_gather_limit`](super::set_gather_limit)).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.gathered("DVector::to_vec")
    }

    /// [`DVector::to_vec`] for operator `op`.
    fn gathered(&self, op: &'static str) -> Result<Vec<T>> {
        let comm = self.dist(op)?;
        let data = self.table.read(op)?;
        let bytes = super::table::estimate_bytes(&data, data.len()) as u64;
        let what = format!("DVector {}", self.table.id);
        super::gather::check_gather(op, &what, self.table.len, bytes, comm)?;
        match comm {
            None => Ok(data.clone()),
            // Encoded and copied straight from the table: no copy of the part first.
            Some(comm) => comm.allgather_concat(std::borrow::Cow::Borrowed(&data), self.table.len),
        }
    }

    /// Runs `f` on all elements, read-only, without copying them in a world of one (the
    /// cheap way to evaluate a model in driver code). In a job of several ranks, after a
    /// distributed `async_for!` over the table, `f` reads the other ranks' elements each
    /// rank keeps between loops with its own part in place, refreshed in place with what
    /// other ranks changed (nothing moves when they are current, as on a second `with_all`
    /// with no write between), and the table is locked meanwhile (an operator `f` calls on
    /// it fails as busy); otherwise every rank first gathers a copy of all elements, which
    /// fails as [`DVector::to_vec`] does past the gather limit.
    ///
    /// ```
    /// use strads_ap_runtime::DVector;
    /// let w = DVector::from_fn(3, |i| vec![i as f32; 2])?;
    /// let norm: f32 = w.with_all(|rows| rows.iter().flatten().map(|x| x * x).sum())?;
    /// assert_eq!(norm, 0.0 + 2.0 + 8.0);
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn with_all<R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        Ok(f(&self.elements("DVector::with_all")?))
    }

    /// All elements, read in place, for driver code between loops: index the result as
    /// the serial program indexes its `Vec` (`w[i]`, `w.len()`, `w.iter()`, any slice
    /// method). The same as [`DVector::with_all`] without the closure; every rank calls
    /// it (across ranks it is a collective), and while the result lives the table is
    /// locked: a loop or an operator that writes it, or reads it across ranks, fails as
    /// busy, so drop the result (or end its scope) before the next loop.
    ///
    /// ```
    /// use strads_ap_runtime::DVector;
    /// let w = DVector::from_fn(3, |i| vec![i as f32; 2])?;
    /// {
    ///     let rows = w.read_all()?;
    ///     assert_eq!(rows[2][1], 2.0);
    ///     assert_eq!(rows.len(), 3);
    ///     let norm: f32 = rows.iter().flatten().map(|x| x * x).sum();
    ///     assert_eq!(norm, 0.0 + 2.0 + 8.0);
    /// } // the table is free again
    /// w.set(0, vec![1.0; 2])?;
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn read_all(&self) -> Result<VectorElements<'_, T>> {
        self.elements("DVector::read_all")
    }

    /// [`DVector::read_all`] for operator `op`.
    fn elements(&self, op: &'static str) -> Result<VectorElements<'_, T>> {
        Ok(VectorElements(match self.dist(op)? {
            Some(comm) => self.table.whole(op, comm)?,
            None => super::table::Whole::Local(self.table.read(op)?),
        }))
    }

    /// An iterator over copies of the elements (a snapshot taken now; past the gather
    /// limit, an error as for [`DVector::to_vec`]).
    pub fn iter(&self) -> Result<std::vec::IntoIter<T>> {
        Ok(self.gathered("DVector::iter")?.into_iter())
    }

    /// A new DVector with `f` applied to every element (in parallel; each rank maps its
    /// range). With checkpoints on, the result is checkpointed (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn map<U, F>(&self, f: F) -> Result<DVector<U>>
    where
        U: Element,
        F: Fn(&T) -> U + Send + Sync,
    {
        DVector::made("DVector::map", || {
            let data = self.table.read("DVector::map")?;
            let out = self.install(|| data.par_iter().map(&f).collect());
            Ok(DVector::from_local(
                self.table.ctx.clone(),
                self.table.len,
                out,
            ))
        })
    }

    /// Combines all elements with `f` (associative and commutative), in parallel.
    ///
    /// Fails with [`Error::Empty`] on an empty DVector.
    pub fn reduce<F>(&self, f: F) -> Result<T>
    where
        F: Fn(T, T) -> T + Send + Sync,
    {
        self.map_reduce(T::clone, f)
    }

    /// Maps every element with `map` and combines the results with `reduce`. In a job of
    /// several ranks each rank reduces its range and the partial results are combined in
    /// rank order, so every rank gets the same value. The order of combination depends
    /// only on the data (fixed chunks, in order), so repeated runs give the same bits.
    ///
    /// Fails with [`Error::Empty`] on an empty DVector.
    pub fn map_reduce<U, M, R>(&self, map: M, reduce: R) -> Result<U>
    where
        U: Element,
        M: Fn(&T) -> U + Send + Sync,
        R: Fn(U, U) -> U + Send + Sync,
    {
        // Fixed chunks, combined in order: the result does not depend on the thread count
        // or on timing (floating-point sums repeat bit for bit, which recovery relies on).
        let partial = {
            let data = self.table.read("DVector::map_reduce")?;
            let parts: Vec<Option<U>> = self.install(|| {
                data.par_chunks(REDUCE_CHUNK)
                    .map(|chunk| chunk.iter().map(&map).reduce(&reduce))
                    .collect()
            });
            parts.into_iter().flatten().reduce(&reduce)
        };
        let op = "DVector::map_reduce";
        super::gather::combine_in_rank_order(op, self.dist(op)?, partial, reduce)
    }

    /// Applies `f` to every element in place, with its (global) index, in parallel.
    pub fn transform<F>(&self, f: F) -> Result<()>
    where
        F: Fn(usize, &mut T) + Send + Sync,
    {
        let offset = self.table.offset;
        super::persist::modified(&self.table);
        let mut guard = self.table.write("DVector::transform")?;
        let data: &mut Vec<T> = &mut guard;
        self.install(|| {
            data.par_iter_mut()
                .enumerate()
                .for_each(|(i, x)| f(offset + i, x))
        });
        Ok(())
    }

    /// A new DVector of the elements for which `keep` is true, in order. In a job of
    /// several ranks the kept elements are spread again over balanced ranges. With
    /// checkpoints on, the result is checkpointed (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn filter<F>(&self, keep: F) -> Result<DVector<T>>
    where
        F: Fn(&T) -> bool + Send + Sync,
    {
        DVector::made("DVector::filter", || {
            let kept: Vec<T> = {
                let data = self.table.read("DVector::filter")?;
                self.install(|| data.par_iter().filter(|x| keep(x)).cloned().collect())
            };
            match self.dist("DVector::filter")? {
                None => Ok(DVector::from_local(
                    self.table.ctx.clone(),
                    kept.len(),
                    kept,
                )),
                Some(comm) => DVector::from_rank_parts(comm, kept),
            }
        })
    }

    /// Inner join with a map: each element whose key (by `key`) is in `map` is paired with
    /// a copy of the map's value; elements without a match are dropped. Order is kept.
    ///
    /// In a job of several ranks each rank joins its range against the map's current
    /// values, and the result is spread again over balanced ranges. With checkpoints on,
    /// the result is checkpointed (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn join<K, V, F>(&self, map: &DMap<K, V>, key: F) -> Result<DVector<(T, V)>>
    where
        K: Element + Eq + std::hash::Hash,
        V: Element,
        (T, V): Element,
        F: Fn(&T) -> K + Send + Sync,
    {
        let op = "DVector::join";
        DVector::made(op, || {
            // Every rank joins its own range against current values of the whole map.
            map.refresh(op)?;
            let kept: Vec<(T, V)> = {
                let data = self.table.read(op)?;
                map.with_read(op, |lookup| {
                    self.install(|| {
                        data.par_iter()
                            .filter_map(|x| lookup.get(&key(x)).map(|v| (x.clone(), v.clone())))
                            .collect()
                    })
                })?
            };
            match self.dist(op)? {
                None => Ok(DVector::from_data(kept)),
                Some(comm) => DVector::from_rank_parts(comm, kept),
            }
        })
    }

    /// Writes the elements to `path` (atomically: a temporary file, fsync, rename).
    ///
    /// In a job of several ranks rank 0 writes the file, asking each rank for its range
    /// in turn, so no rank holds more than its own range and one other's; every rank
    /// returns the same outcome.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let op = "DVector::save";
        let path = path.as_ref();
        match self.dist(op)? {
            None => super::snapshot::save_snapshot(path, "DVector", &self.table.read(op)?),
            Some(comm) => {
                use super::snapshot::{on_driver, SnapshotWriter};
                // Rank 0 makes its file first; if it cannot, its sink fails at once and
                // the others are told to stop. Its outcome reaches every rank through its
                // broadcast.
                let mut file = (comm.rank() == 0)
                    .then(|| SnapshotWriter::create::<T>(path, "DVector", self.table.len));
                let streamed = {
                    let data = self.table.read(op)?;
                    comm.gather_encoded(0, &data, self.table.len, |bytes| match &mut file {
                        Some(Ok(file)) => file.write(bytes),
                        _ => Err(Error::Config(format!("{op}: rank 0 has no file to write"))),
                    })
                };
                on_driver(Some(comm), op, || {
                    let file = file.expect("rank 0 made its file")?;
                    streamed?;
                    file.finish()
                })
            }
        }
    }

    /// Reads a DVector written by [`DVector::save`]; checks the element type and checksum.
    ///
    /// In a job of several ranks rank 0 reads the file a piece at a time and sends each
    /// rank its range as it comes, so no rank holds more than its range and one other's.
    #[track_caller]
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        use super::snapshot::{on_driver, SnapshotReader};
        let op = "DVector::load";
        let path = path.as_ref();
        Self::made(op, || {
            let ctx = crate::cluster::here();
            if !ctx.is_distributed() {
                let data = super::snapshot::load_snapshot(path, "DVector")?;
                return Ok(Self::from_data(data));
            }
            let comm = ctx.comm_for(op)?;
            let mut file = None;
            // Every rank learns the length (or rank 0's error)...
            let len = on_driver(Some(comm), op, || {
                let (opened, len) = SnapshotReader::open::<T>(path, "DVector")?;
                file = Some(opened);
                Ok(len)
            })?;
            // ...then its range, read for it in turn...
            let partition = RangePartition::new(len, comm.world_size());
            let local = comm.scatter_parts(0, len, |r| match &mut file {
                Some(file) => file.take::<T>(partition.range(r).len()),
                None => Err(Error::Config(format!("{op}: rank 0 has no file open"))),
            });
            // ...and whether the whole file checked out (its checksum is known only once
            // every part has gone).
            let (local, failed) = match (comm.rank(), local) {
                (_, Ok(local)) => (local, None),
                (0, Err(e)) => (Vec::new(), Some(e)),
                (_, Err(e)) => return Err(e),
            };
            on_driver(Some(comm), op, || match (failed, file) {
                (Some(e), _) => Err(e),
                (None, Some(file)) => file.finish(),
                (None, None) => Err(Error::Config(format!("{op}: rank 0 has no file open"))),
            })?;
            let own = partition.range(comm.rank());
            if local.len() != own.len() {
                return Err(Error::BadPeerData {
                    rank: 0,
                    what: format!("the range of {} loaded for this rank", path.display()),
                    message: format!("{} elements; this rank holds {}", local.len(), own.len()),
                });
            }
            Ok(Self::from_local(ctx, len, local))
        })
    }

    /// Declares the table relaxed: `async_for!` ignores its conflicts and merges workers'
    /// updates by summing their deltas at sub-round ends (e.g. LDA's topic totals; see
    /// [`Relaxed::Sum`] for when).
    ///
    /// Between merges each worker reads its own replica: the other workers' updates are
    /// missing from it. That suits totals the body mostly adds to (topic counts, a loss);
    /// a value the body also reads to correct itself (a bias moved toward the data) is
    /// corrected by every worker at once and can overshoot, so check the metric against
    /// the serial program before relaxing such a value.
    pub fn relaxed(self, mode: Relaxed) -> Self
    where
        T: Aggregate,
    {
        match mode {
            Relaxed::Sum => {
                self.table.relaxed.store(true, Ordering::Relaxed);
                *self.table.aggregation.write() = Some(Aggregation::Sum);
            }
        }
        self
    }

    /// Registers how `sync_for!` merges workers' updates of this table (default:
    /// [`Aggregation::Average`]).
    pub fn aggregate_with(self, aggregation: Aggregation<T>) -> Self
    where
        T: Aggregate,
    {
        *self.table.aggregation.write() = Some(aggregation);
        self
    }

    /// Whether the table was declared relaxed.
    pub fn is_relaxed(&self) -> bool {
        self.table.relaxed.load(Ordering::Relaxed)
    }

    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        crate::cluster::here()
            .pool(context().config().threads)
            .install(f)
    }

    /// The serialisable handle a loop body captures.
    #[doc(hidden)]
    pub fn __strads_capture(&self) -> VectorRef<T> {
        VectorRef {
            table: self.table.clone(),
        }
    }
}

/// Every element of a [`DVector`], lent for reading in driver code by
/// [`DVector::read_all`]: it dereferences to a slice, so `w[i]`, `w.len()`, `w.iter()`
/// and `for x in &w` read as they do on the serial program's `Vec`. The table stays locked
/// until it is dropped.
pub struct VectorElements<'a, T: Element>(super::table::Whole<'a, T>);

impl<T: Element> std::ops::Deref for VectorElements<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<'b, T: Element> IntoIterator for &'b VectorElements<'_, T> {
    type Item = &'b T;
    type IntoIter = std::slice::Iter<'b, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Element + std::fmt::Debug> std::fmt::Debug for VectorElements<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The captured form of a [`DVector`] inside a loop operator's task: serialisable as its
/// table id and length. Generated code binds it to a [`VectorView`](super::VectorView).
pub struct VectorRef<T> {
    pub(crate) table: Arc<VectorTable<T>>,
}

impl<T> Clone for VectorRef<T> {
    fn clone(&self) -> Self {
        VectorRef {
            table: self.table.clone(),
        }
    }
}

impl<T> VectorRef<T> {
    /// The table id.
    pub fn id(&self) -> u64 {
        self.table.id
    }
}

impl<T> serde::Serialize for VectorRef<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        (self.table.id, self.table.len as u64).serialize(s)
    }
}

impl<'de, T: Element> serde::Deserialize<'de> for VectorRef<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let (id, len) = <(u64, u64)>::deserialize(d)?;
        let table: Arc<VectorTable<T>> = lookup_table(id).map_err(serde::de::Error::custom)?;
        if table.len as u64 != len {
            return Err(serde::de::Error::custom(format!(
                "DVector {id} has {} elements here but {len} at the sender",
                table.len
            )));
        }
        Ok(VectorRef { table })
    }
}

/// Parts joined in order by moving their elements (a `concat` would clone each), each
/// part's buffer freed once it is emptied.
fn join_parts<T>(parts: Vec<Vec<T>>) -> Vec<T> {
    let mut all = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for mut part in parts {
        all.append(&mut part);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{here, simulate};
    use crate::dds::table::Snapshot;

    /// A rank claiming `usize::MAX` elements overflowed the sum of the counts (a panic in
    /// debug builds, a wrapped length in release); it is refused, naming the rank.
    #[test]
    fn counts_from_other_ranks_must_add_up_to_a_length() {
        let outcomes = simulate(2, || {
            let here = here();
            let comm = here.comm().expect("two ranks");
            match here.rank() {
                0 => DVector::from_rank_parts(comm, vec![1u64, 2])
                    .map(|v| v.len())
                    .map_err(|e| e.to_string()),
                _ => {
                    comm.allgather(usize::MAX).unwrap();
                    Ok(0)
                }
            }
        });
        assert_eq!(
            outcomes[0],
            Err(format!(
                "rank 1 sent a malformed count of elements for a DVector: {} elements, more \
                 than a DVector can hold with the others'",
                usize::MAX
            ))
        );
    }

    /// Each rank's snapshot of a DVector on `from` ranks.
    fn parts(from: usize, len: usize) -> Vec<Vec<u8>> {
        simulate(from, || {
            let v = DVector::from_fn(len, |i| vec![i as u32; 3]).unwrap();
            let mut out = Vec::new();
            v.table.snapshot_into(&mut out).unwrap();
            out
        })
    }

    /// A checkpoint of a job of one size loads on a job of another: each rank takes its
    /// balanced range from the old ranks' parts, whether ranks were lost or added.
    #[test]
    fn a_snapshot_repartitions_to_another_number_of_ranks() {
        for (from, to) in [(3, 2), (2, 3), (1, 4), (4, 1), (5, 2)] {
            let parts = parts(from, 23);
            let got = simulate(to, || {
                let v = DVector::from_fn(23, |_| Vec::<u32>::new()).unwrap();
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                v.table.restore_parts("test", &parts).unwrap();
                v.to_vec().unwrap()
            });
            let want: Vec<Vec<u32>> = (0..23).map(|i| vec![i; 3]).collect();
            for (rank, all) in got.into_iter().enumerate() {
                assert_eq!(all, want, "{from} ranks to {to}, rank {rank}");
            }
        }
    }

    /// Parts that do not cover the DVector as its old ranks held it are refused, saying
    /// which part is wrong; so is a length other than the DVector's.
    #[test]
    fn parts_that_do_not_tile_the_dvector_are_refused() {
        let three = parts(3, 23);
        let got = simulate(2, || {
            let v = DVector::from_fn(23, |_| Vec::<u32>::new()).unwrap();
            let missing: Vec<&[u8]> = vec![&three[0], &three[2]];
            let swapped: Vec<&[u8]> = vec![&three[1], &three[0], &three[2]];
            let other = parts(2, 24);
            let longer: Vec<&[u8]> = other.iter().map(Vec::as_slice).collect();
            [missing, swapped, longer]
                .map(|p| v.table.restore_parts("test", &p).unwrap_err().to_string())
        });
        let [missing, swapped, longer] = &got[0];
        assert!(
            missing.contains("by rank 0 of 2 holds 8 elements from 0 of 23; that rank held 12"),
            "{missing}"
        );
        assert!(
            swapped.contains("by rank 0 of 3 holds 8 elements from 8 of 23"),
            "{swapped}"
        );
        assert!(
            longer.contains("has 24 elements, the DVector 23"),
            "{longer}"
        );
    }

    /// Laying a table out in a plan's order moves every element's heap memory (each
    /// element gets a fresh allocation, made while the old ones still live) and changes no
    /// value; elements without heap memory, and tables past half the gather limit, are
    /// left alone.
    #[test]
    fn laying_out_moves_heap_memory_and_keeps_values() {
        use crate::dds::table::TableHandle;
        let names: Vec<String> = (0..10_000).map(|i| format!("id{i}")).collect();
        let v = DVector::from_vec(names.clone()).unwrap();
        let before: Vec<usize> = v
            .table
            .read("test")
            .unwrap()
            .iter()
            .map(|s| s.as_ptr() as usize)
            .collect();
        // A plan's order: every 7th key, then the next residue, ...
        let order: Vec<usize> = (0..7).flat_map(|r| (r..10_000).step_by(7)).collect();
        let moved = {
            let mut data = v.table.write("test").unwrap();
            let (ptr, len) = (data.as_mut_ptr().cast::<u8>(), data.len());
            // SAFETY: the write guard holds the table's elements for this call alone.
            unsafe { v.table.lay_out(ptr, len, &mut order.iter().copied()) }
        };
        assert!(moved);
        let data = v.table.read("test").unwrap();
        assert_eq!(*data, names);
        assert!(data
            .iter()
            .zip(&before)
            .all(|(s, &p)| s.as_ptr() as usize != p));
        drop(data);

        let plain = DVector::from_vec((0..100u64).collect()).unwrap();
        let mut data = plain.table.write("test").unwrap();
        let (ptr, len) = (data.as_mut_ptr().cast::<u8>(), data.len());
        // SAFETY: as above.
        assert!(!unsafe { plain.table.lay_out(ptr, len, &mut (0..100).rev()) });
        drop(data);

        // The limit is the rank's: set on a simulated one, not on the test process.
        let moved = simulate(1, || {
            let v = DVector::from_vec(names.clone()).unwrap();
            crate::dds::set_gather_limit(Some(1000));
            let mut data = v.table.write("test").unwrap();
            let (ptr, len) = (data.as_mut_ptr().cast::<u8>(), data.len());
            // SAFETY: as above.
            unsafe { v.table.lay_out(ptr, len, &mut order.iter().copied()) }
        });
        assert_eq!(
            moved,
            vec![false],
            "a table past half the gather limit is left alone"
        );
    }
}
