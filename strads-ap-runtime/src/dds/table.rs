//! Type-erased access to tables, for the engines: lock a table for an operator, bind it,
//! make per-worker replicas and merge them.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use rayon::prelude::*;

use crate::cluster::collective::Comm;
use crate::error::{Error, Result};
use crate::sync::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::util::KeySlice;
use crate::value::{Aggregate, Aggregation};

/// A rank's live tables by id, so that a handle deserialized from the wire finds its table
/// and checkpoints can save and restore tables by id (kept per rank, see
/// [`RankCtx::local`](crate::cluster::RankCtx::local)).
#[derive(Default)]
struct Tables(dashmap::DashMap<u64, LiveTable>);

/// One table, typed (for handles) and as engines see it.
struct LiveTable {
    typed: Weak<dyn Any + Send + Sync>,
    handle: Weak<dyn TableHandle>,
}

pub(crate) fn register_table<T: TableHandle + Any + Send + Sync>(id: u64, table: &Arc<T>) {
    let typed: Weak<dyn Any + Send + Sync> =
        Arc::downgrade(&(table.clone() as Arc<dyn Any + Send + Sync>));
    let handle: Weak<dyn TableHandle> = Arc::downgrade(&(table.clone() as Arc<dyn TableHandle>));
    let tables = crate::cluster::here().local::<Tables>();
    tables.0.retain(|_, t| t.handle.strong_count() > 0);
    tables.0.insert(id, LiveTable { typed, handle });
}

/// What one DDS table holds on this rank: see [`table_memory`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TableMemory {
    /// The table's id on this rank (tables are numbered in the order they are made).
    pub id: u64,
    /// `DVector` or `DMap` (a `DMultiMap` is a map of lists).
    pub kind: &'static str,
    /// The element (value) type.
    pub element: &'static str,
    /// Elements in the whole job.
    pub len: usize,
    /// Elements this rank holds as its own part.
    pub held: usize,
    /// Elements this rank holds besides its part: the other ranks' elements kept between
    /// distributed loops (the shadow). A loop that wrote a table of heap-backed elements
    /// (`Vec` rows) leaves none: their slots hold empty placeholders until the next loop.
    pub extra: usize,
    /// Estimated bytes of `held + extra` elements: each element's own size, plus for
    /// elements that own heap memory (a `Vec` row) its encoded size, from a sample; plus
    /// the inline size of each placeholder slot.
    pub bytes: usize,
}

/// What every live DDS table holds on this thread's rank, by table id: the measure of
/// how a job's data and model spread over its ranks. In a world of one a table holds all
/// its elements; across ranks each holds its part, plus what distributed loops keep.
///
/// # Examples
/// ```
/// use strads_ap_runtime::{cluster::simulate, dds::table_memory, DVector};
///
/// // Three ranks simulated in one process, each reporting its own tables.
/// let held = simulate(3, || {
///     let rows = DVector::from_fn(300, |i| vec![i as f32; 8])?;
///     let memory = table_memory();
///     drop(rows);
///     Ok::<_, strads_ap_runtime::Error>(memory)
/// });
/// for rank in held {
///     let tables = rank?;
///     assert_eq!((tables[0].len, tables[0].held, tables[0].extra), (300, 100, 0));
///     assert!(tables[0].bytes >= 100 * 8 * 4, "{:?}", tables[0]);
/// }
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
pub fn table_memory() -> Vec<TableMemory> {
    let tables = crate::cluster::here().local::<Tables>();
    let mut out: Vec<TableMemory> = tables
        .0
        .iter()
        .filter_map(|t| t.handle.upgrade())
        .map(|h| h.memory())
        .collect();
    out.sort_by_key(|m| m.id);
    out
}

/// Estimated bytes of `count` elements like `sample`'s: the element's size, plus its
/// encoded size when that is larger (the element owns heap memory, as a `Vec` row does).
pub(crate) fn estimate_bytes<T: serde::Serialize>(sample: &[T], count: usize) -> usize {
    let size = std::mem::size_of::<T>();
    let step = (sample.len() / 16).max(1);
    let encoded: Vec<usize> = sample
        .iter()
        .step_by(step)
        .take(16)
        .filter_map(|x| postcard::to_allocvec(x).ok().map(|b| b.len()))
        .collect();
    let mean = match encoded.len() {
        0 => 0,
        n => encoded.iter().sum::<usize>() / n,
    };
    let per = match mean > size {
        true => size + mean,
        false => size,
    };
    per.saturating_mul(count)
}

/// The live table `id` of this thread's rank, as engines see it.
pub(crate) fn lookup_handle(id: u64) -> Option<Arc<dyn TableHandle>> {
    let tables = crate::cluster::here().local::<Tables>();
    let handle = tables.0.get(&id)?.handle.upgrade();
    handle
}

pub(crate) fn lookup_table<T: Any + Send + Sync>(id: u64) -> std::result::Result<Arc<T>, String> {
    let tables = crate::cluster::here().local::<Tables>();
    let typed = tables.0.get(&id).and_then(|t| t.typed.upgrade());
    let any = typed.ok_or_else(|| format!("no live DDS table with id {id} in this process"))?;
    any.downcast::<T>()
        .map_err(|_| format!("DDS table {id} holds a different element type"))
}

/// A captured table as the engines see it: its identity and shape and exclusive use;
/// its supertraits say how it spreads across ranks ([`Spread`]) and how checkpoints save
/// it ([`Snapshot`]).
pub(crate) trait TableHandle: Spread + Snapshot + Send + Sync {
    fn id(&self) -> u64;
    fn is_relaxed(&self) -> bool;
    /// Whether the table is a map (maps are not merged by `sync_for!`).
    fn is_map(&self) -> bool {
        false
    }
    /// A number that changes when the table's key space changes (vector length, map
    /// version): cached plans are keyed by it.
    fn shape(&self) -> u64;
    /// Size of one element in the table's storage.
    fn elem_size(&self) -> usize;
    /// Whether an element may own memory elsewhere (a `Vec`, a `String`): the engine then
    /// prefetches what it points to as well as the element (see `access::Ahead`).
    fn owns_heap(&self) -> bool;
    /// Exclusive use for the duration of an operator.
    fn lock<'a>(&'a self, op: &'static str) -> Result<Box<dyn TableLock + 'a>>;
    /// What the table holds on this rank (see [`table_memory`]).
    fn memory(&self) -> TableMemory;
    /// Estimated bytes of this rank's own part (summed over the ranks: the whole table's).
    fn part_bytes(&self) -> u64 {
        self.memory().bytes as u64
    }
    /// Element `key` as a body indexes it, for messages: `[3]` (a map shows its key).
    fn describe_key(&self, key: u64) -> String {
        format!("[{key}]")
    }
    /// Moves the heap memory of the locked elements at `ptr` so that the elements at
    /// `keys`, in that order, own consecutive allocations: a plan that runs its tasks in
    /// that order then reads a task table's strings and rows sequentially rather than
    /// across the heap (see `engine::async_for::execute::lay_out_task_tables`). Values do
    /// not change; elements that own no heap memory, maps, and tables whose copy would not
    /// stay well inside the gather limit are left as they are. Returns whether it moved
    /// anything.
    ///
    /// # Safety
    /// `ptr` must point to the table's `len` initialised elements, locked by the caller,
    /// that no one else reads or writes during the call.
    unsafe fn lay_out(
        &self,
        _ptr: *mut u8,
        _len: usize,
        _keys: &mut dyn Iterator<Item = usize>,
    ) -> bool {
        false
    }
}

/// How a table spreads across the ranks of a job for a loop, and moves between them.
pub(crate) trait Spread {
    /// In a job of several ranks: gathers every rank's part so that this rank holds all
    /// elements, for a loop that reads or writes any of them (a collective).
    fn gather_all(&self, op: &'static str, comm: &Comm) -> Result<()>;
    /// Drops the elements of other ranks again, after [`Spread::gather_all`].
    fn keep_own_range(&self);
    /// Whether this rank keeps a shadow (the other ranks' elements as the last distributed
    /// `async_for!` left them, possibly stale), and whether that shadow is fresh for
    /// `plan`: nothing wrote the table since, and every element `plan` reads is current in
    /// it.
    fn shadow_state(&self, _plan: Option<u64>) -> (bool, bool) {
        (false, false)
    }
    /// Makes the table full-length again from its shadow (this rank's range is moved
    /// in; other elements are the shadow's, possibly stale). Local, no communication.
    fn expand_from_shadow(&self, op: &'static str) -> Result<()> {
        Err(Error::invalid(op, "this DDS keeps no shadow copy"))
    }
    /// Keeps this rank's range as the table and the other elements as its shadow, noting
    /// which of them are current.
    fn shrink_to_shadow(&self, _valid: ShadowValidity) {
        self.keep_own_range()
    }
    /// Makes the table full-length for a planning call without gathering it: this rank's
    /// range is moved in, every other slot holds a filler (see [`filler`]) that
    /// reconnaissance never reads (it fetches what a task reads, see
    /// `engine::async_for::fetching`). Drops the shadow. Returns `false`, changing nothing,
    /// where the table cannot be so made (a map, or an element type no filler is made of).
    fn expand_hollow(&self, _op: &'static str) -> Result<bool> {
        Ok(false)
    }
    /// Puts a filler back at `keys` of the locked elements at `ptr` (after
    /// [`Spread::expand_hollow`]), dropping what was fetched there.
    ///
    /// # Safety
    /// As for [`Spread::unpack`].
    unsafe fn refill(&self, _ptr: *mut u8, _keys: &[u64]) {}
    /// In a job of several ranks: the owner of each key (position), when it is not the
    /// rank whose balanced range holds it (maps own keys by hash).
    fn owners(&self) -> Option<Vec<u16>> {
        None
    }
    /// Appends the encoded elements at `keys` of the locked elements at `ptr`.
    ///
    /// # Safety
    /// `ptr` must point to the table's initialised elements, more than any of `keys`, that
    /// no one writes during the call.
    unsafe fn pack(&self, _ptr: *const u8, _keys: KeySlice<'_>, _out: &mut Vec<u8>) -> Result<()> {
        Err(Error::Config(
            "this kind of DDS cannot be sent between ranks yet".to_string(),
        ))
    }
    /// Decodes elements for `keys` from the front of `bytes` into the locked elements at
    /// `ptr`, advancing `bytes` past them.
    ///
    /// # Safety
    /// As for [`Spread::pack`], and no one else reads or writes those elements during
    /// the call.
    unsafe fn unpack(&self, _ptr: *mut u8, _keys: KeySlice<'_>, _bytes: &mut &[u8]) -> Result<()> {
        Err(Error::Config(
            "this kind of DDS cannot be sent between ranks yet".to_string(),
        ))
    }
}

/// What checkpoints call: this rank's part of a table, saved and restored.
pub(crate) trait Snapshot {
    /// Appends this rank's part of the table to `out`, encoded for a checkpoint (with
    /// what identifies its shape, checked by [`Snapshot::restore`]). Waits for a
    /// writer to finish rather than failing (checkpoints run in the background). `out`
    /// is a reused buffer: encoding into it touches no fresh memory.
    fn snapshot_into(&self, out: &mut Vec<u8>) -> Result<()>;
    /// The gate that holds writers back while a checkpoint reads the table.
    fn gate(&self) -> &Gate;
    /// Replaces this rank's part of the table with a [`Snapshot::snapshot_into`].
    fn restore(&self, op: &'static str, bytes: &[u8]) -> Result<()>;
    /// Replaces this rank's part of the table with its share of a snapshot taken by a job
    /// of another size: `parts` holds every rank's [`Snapshot::snapshot_into`] of that
    /// job, in rank order (vectors take their new balanced range, maps the values each key's
    /// old owner held).
    fn restore_parts(&self, op: &'static str, parts: &[&[u8]]) -> Result<()>;
}

/// What a distributed loop leaves current in a table's shadow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShadowValidity {
    /// The loop wrote the table: other ranks' elements in the shadow are stale.
    Stale,
    /// The loop gathered the whole table and did not write it.
    All,
    /// The loop fetched what plan (fingerprint) reads and did not write the table.
    Plan(u64),
    /// The loop neither wrote nor fetched anything: the shadow stays as it was.
    Unchanged,
}

/// Holds writers back while a checkpoint in the background reads a table: set when the
/// checkpoint is taken (at the end of a loop), cleared when its copy is encoded. Readers
/// are not held back.
#[derive(Default)]
pub(crate) struct Gate {
    pending: Mutex<bool>,
    done: Condvar,
}

impl Gate {
    /// Marks the table as being checkpointed.
    pub fn close(&self) {
        *self.pending.lock() = true;
    }

    /// The checkpoint has its copy: writers may go on.
    pub fn open(&self) {
        *self.pending.lock() = false;
        self.done.notify_all();
    }

    /// Waits until no checkpoint is reading the table.
    pub fn wait(&self) {
        let mut pending = self.pending.lock();
        while *pending {
            pending = self.done.wait(pending);
        }
    }
}

/// How many elements ahead [`TableHandle::lay_out`] prefetches.
const LAY_OUT_AHEAD: usize = 16;
/// Keys [`TableHandle::lay_out`] clones in one piece on a worker.
const LAY_OUT_RUN: usize = 4096;

/// A table's shadow: what a rank keeps of the other ranks' elements between distributed
/// loops, so that the next call can make the table full-length without communication.
///
/// It has two forms. After a loop that wrote the table, the own range is cut out (the
/// *gap* form: the other ranks' elements only): the next call moves the own elements
/// back into their gap, a pass over their inline bytes, and each element is held once.
/// After a loop that only read it (a data table), the shadow is full-length and the own
/// elements also stay in a spare buffer beside it, so that the next call swaps buffers
/// and moves nothing: that table's own range is held twice, for calls that cost nothing
/// to enter and leave.
///
/// A gap form left by a loop that wrote the table is *hollow* where the element type owns
/// heap memory (a `Vec` row): its stale values are never read again (the next loop fetches
/// what its steps need, and `with_all` refreshes every element), so each is replaced by a
/// [`placeholder`] holding no heap memory, and a rank keeps only its own elements' values
/// between such loops.
pub(crate) struct Shadow<T> {
    /// Every element (`len`; its own range current when `own_current`), or in the gap
    /// form the elements before the own range, then those after it (`len - own`).
    full: Option<Vec<T>>,
    /// The table's version when the shadow was made.
    version: u64,
    /// Every element is current.
    all_valid: bool,
    /// Plans whose reads are current.
    valid_for: Vec<u64>,
    /// `full` is full-length and its elements in this rank's range equal the table's.
    own_current: bool,
    /// A buffer of this rank's range length, reused between loops so that expanding and
    /// shrinking move elements instead of allocating and cloning them (full-length form).
    spare: Vec<T>,
    /// `spare` holds the table's own elements (taken when the table was expanded).
    spare_current: bool,
    /// `full` (in the gap form) holds placeholders, not the other ranks' values.
    hollow: bool,
}

impl<T> Shadow<T> {
    /// Notes what a loop that only read the table (or replicated it) leaves current.
    fn note_validity(&mut self, valid: ShadowValidity) {
        match valid {
            ShadowValidity::All => {
                self.all_valid = true;
                self.valid_for.clear();
            }
            ShadowValidity::Plan(p) => {
                if !self.valid_for.contains(&p) {
                    self.valid_for.push(p);
                }
            }
            ShadowValidity::Unchanged | ShadowValidity::Stale => {}
        }
    }
}

impl<T> Default for Shadow<T> {
    fn default() -> Self {
        Shadow {
            full: None,
            version: 0,
            all_valid: false,
            valid_for: Vec::new(),
            own_current: false,
            spare: Vec::new(),
            spare_current: false,
            hollow: false,
        }
    }
}

/// A value of `T` that stands in a hollow shadow's slots (see [`Shadow`]): `T` decoded
/// from zero bytes (an empty `Vec` or `String`, zero numbers), which owns no heap memory.
/// `None` where there is nothing to save (`T` owns no heap memory), where zero bytes do
/// not decode to a `T`, or where the value decoded still looks heap-backed (encodes to more
/// bytes than its inline size, as a boxed array would): such shadows keep their values.
pub(crate) fn placeholder<T: super::Element>() -> Option<T> {
    if !std::mem::needs_drop::<T>() {
        return None;
    }
    let value = filler::<T>()?;
    let encoded = postcard::to_stdvec(&value).ok()?;
    (encoded.len() <= std::mem::size_of::<T>().max(1)).then_some(value)
}

/// A value of `T` to fill the slots of a table made full-length without its values (see
/// [`Spread::expand_hollow`]), and the base of a [`placeholder`]: `T` decoded from zero
/// bytes (zero numbers, empty rows). `None` where zero bytes do not decode to a `T` (a
/// `NonZeroU32`).
pub(crate) fn filler<T: super::Element>() -> Option<T> {
    let zeros = vec![0u8; 2 * std::mem::size_of::<T>() + 64];
    postcard::take_from_bytes::<T>(&zeros).ok().map(|(v, _)| v)
}

impl<T> Shadow<T> {
    /// Whether the shadow holds every other rank's element of a table of `len` elements of
    /// which this rank holds `own`, in either form.
    fn complete(&self, len: usize, own: usize) -> bool {
        self.full
            .as_ref()
            .is_some_and(|f| f.len() == len || f.len() + own == len)
    }
}

/// A locked table: where its elements are.
pub(crate) trait TableLock {
    fn ptr(&mut self) -> *mut u8;
    fn len(&self) -> usize;
    /// A map's key index; null for vectors.
    fn index(&self) -> *const u8 {
        std::ptr::null()
    }
}

/// The storage of a [`DVector`](super::DVector) on this rank.
pub(crate) struct VectorTable<T> {
    pub id: u64,
    /// Elements in the whole job.
    pub len: usize,
    /// Global index of `data[0]`.
    pub offset: usize,
    /// The rank that holds this part.
    pub ctx: Arc<crate::cluster::RankCtx>,
    /// The elements of this rank's partition (a world of one holds all of them).
    pub data: RwLock<Vec<T>>,
    pub relaxed: AtomicBool,
    pub aggregation: RwLock<Option<Aggregation<T>>>,
    /// Bumped whenever the elements are taken for writing.
    pub version: AtomicU64,
    /// The other ranks' elements kept between distributed loops (see
    /// [`Spread::shadow_state`]).
    pub shadow: Mutex<Shadow<T>>,
    /// Holds writers back while a checkpoint reads the elements.
    pub gate: Gate,
    /// Workers' replicas of this table kept from one call to the next (see [`Spares`]).
    pub spares: Arc<Spares>,
}

impl<T: super::Element> VectorTable<T> {
    /// A table of `len` elements of which this rank (`ctx`) holds `data`, starting at global
    /// index `offset`.
    pub fn new(
        ctx: Arc<crate::cluster::RankCtx>,
        len: usize,
        offset: usize,
        data: Vec<T>,
    ) -> Arc<Self> {
        let id = ctx.new_table_id();
        let table = Arc::new(VectorTable {
            id,
            len,
            offset,
            ctx,
            data: RwLock::new(data),
            relaxed: AtomicBool::new(false),
            aggregation: RwLock::new(None),
            version: AtomicU64::new(0),
            shadow: Mutex::new(Shadow::default()),
            gate: Gate::default(),
            spares: Arc::default(),
        });
        register_table(id, &table);
        table
    }

    pub fn read(&self, op: &'static str) -> Result<RwLockReadGuard<'_, Vec<T>>> {
        self.data.try_read().ok_or(Error::Busy { op })
    }

    pub fn write(&self, op: &'static str) -> Result<RwLockWriteGuard<'_, Vec<T>>> {
        self.gate.wait();
        self.version.fetch_add(1, Ordering::AcqRel);
        self.data.try_write().ok_or(Error::Busy { op })
    }
}

/// Every element of a [`VectorTable`], lent for reading in driver code.
pub(crate) enum Whole<'a, T: super::Element> {
    /// This rank's own part, which in a world of one is every element.
    Local(RwLockReadGuard<'a, Vec<T>>),
    /// Across ranks, from [`VectorTable::whole`]: the rank's shadow, with the own
    /// elements in place.
    Lent(ShadowLease<'a, T>),
    /// Across ranks: a copy gathered from every rank.
    Gathered(Vec<T>),
}

impl<T: super::Element> std::ops::Deref for Whole<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Whole::Local(data) => data,
            Whole::Lent(lease) => &lease.full,
            Whole::Gathered(all) => all,
        }
    }
}

/// A rank's shadow of a table, lent whole with the own elements in place while the table
/// is locked. Dropping it (also while a panic unwinds) moves the own elements back and
/// returns the shadow, current, for the next loop or read.
pub(crate) struct ShadowLease<'a, T: super::Element> {
    table: &'a VectorTable<T>,
    data: RwLockWriteGuard<'a, Vec<T>>,
    full: Vec<T>,
    /// The table's version when lent (nothing is written meanwhile).
    version: u64,
    range: std::ops::Range<usize>,
    /// The own range's length in the gap form, 0 in the full-length form.
    gap: usize,
}

impl<T: super::Element> Drop for ShadowLease<'_, T> {
    fn drop(&mut self) {
        if self.gap != 0 {
            *self.data = self.full.drain(self.range.clone()).collect();
        }
        let mut shadow = self.table.shadow.lock();
        if shadow.full.is_none() {
            shadow.full = Some(std::mem::take(&mut self.full));
            shadow.hollow = false;
            shadow.version = self.version;
            shadow.all_valid = true;
            shadow.valid_for.clear();
            shadow.own_current = self.gap == 0;
        }
    }
}

struct VectorLock<'a, T>(RwLockWriteGuard<'a, Vec<T>>);

impl<T> TableLock for VectorLock<'_, T> {
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl<T: super::Element> TableHandle for VectorTable<T> {
    fn id(&self) -> u64 {
        self.id
    }
    fn part_bytes(&self) -> u64 {
        let data = self.data.read();
        estimate_bytes(&data, data.len()) as u64
    }
    fn memory(&self) -> TableMemory {
        let data = self.data.read();
        let shadow = self.shadow.lock();
        let full: &[T] = shadow.full.as_deref().unwrap_or(&[]);
        // A hollow shadow's slots hold no other rank's values: only their inline bytes.
        // Otherwise the shadow is sized by a sample of its own slots, which after a call
        // that fetched are other ranks' values where fetched and fillers elsewhere.
        let (extra, shadow_bytes) = match shadow.hollow {
            true => (shadow.spare.len(), std::mem::size_of_val(full)),
            false => (
                full.len() + shadow.spare.len(),
                estimate_bytes(full, full.len()),
            ),
        };
        let sample: &[T] = match data.is_empty() {
            true => full,
            false => &data,
        };
        TableMemory {
            id: self.id,
            kind: "DVector",
            element: std::any::type_name::<T>(),
            len: self.len,
            held: data.len(),
            extra,
            bytes: estimate_bytes(sample, data.len() + shadow.spare.len()) + shadow_bytes,
        }
    }
    fn is_relaxed(&self) -> bool {
        self.relaxed.load(Ordering::Relaxed)
    }
    fn shape(&self) -> u64 {
        self.len as u64
    }
    fn elem_size(&self) -> usize {
        std::mem::size_of::<T>()
    }
    fn owns_heap(&self) -> bool {
        std::mem::needs_drop::<T>()
    }
    fn lock<'a>(&'a self, op: &'static str) -> Result<Box<dyn TableLock + 'a>> {
        Ok(Box::new(VectorLock(self.write(op)?)))
    }
    unsafe fn lay_out(
        &self,
        ptr: *mut u8,
        len: usize,
        keys: &mut dyn Iterator<Item = usize>,
    ) -> bool {
        if !std::mem::needs_drop::<T>() {
            return false;
        }
        let data = ptr.cast::<T>();
        let keys: Vec<usize> = keys.filter(|&k| k < len).collect();
        // SAFETY: the caller's guarantee: `len` initialised elements, ours alone.
        let elems = unsafe { std::slice::from_raw_parts_mut(data, len) };
        let bytes = estimate_bytes(elems, keys.len()) as u64;
        if super::gather::gather_limit().is_some_and(|limit| bytes > limit / 2) {
            return false;
        }
        // Every clone first, so that the allocator hands out fresh memory in order (a
        // clone made after its old element was freed would reuse that element's place).
        // The reads follow the plan's order across the table, so the workers share them,
        // each cloning runs of consecutive keys (from its own arena, in order), with the
        // records prefetched a few ahead.
        let shared: &[T] = elems;
        let mut fresh: Vec<Option<T>> = Vec::with_capacity(keys.len());
        keys.par_iter()
            .enumerate()
            .with_min_len(LAY_OUT_RUN)
            .map(|(i, &k)| {
                if let Some(&next) = keys.get(i + LAY_OUT_AHEAD) {
                    crate::access::prefetch_read((&shared[next] as *const T).cast());
                }
                Some(shared[k].clone())
            })
            .collect_into_vec(&mut fresh);
        // Then each clone takes its element's place in key order, so that the old values
        // are freed in the order they were allocated (in plan order, every free would
        // touch another part of the heap).
        let mut at = vec![u32::MAX; len];
        for (i, &k) in keys.iter().enumerate() {
            // Plans number their tasks in `u32`s.
            at[k] = u32::try_from(i).unwrap_or(u32::MAX);
        }
        let placed: Vec<(usize, usize)> = at
            .iter()
            .enumerate()
            .filter(|&(_, &i)| i != u32::MAX)
            .map(|(k, &i)| (k, i as usize))
            .collect();
        drop(at);
        for (j, &(k, i)) in placed.iter().enumerate() {
            if let Some(&(_, next)) = placed.get(j + LAY_OUT_AHEAD) {
                crate::access::prefetch_read((&fresh[next] as *const Option<T>).cast());
            }
            if let Some(value) = fresh[i].take() {
                elems[k] = value;
            }
        }
        true
    }
}

impl<T: super::Element> Spread for VectorTable<T> {
    fn gather_all(&self, op: &'static str, comm: &Comm) -> Result<()> {
        let mut data = self.write(op)?;
        // The own elements move into the whole copy.
        let local = std::mem::take(&mut *data);
        let all = comm
            .allgather_concat(local.into(), self.len)
            .map_err(|e| match e {
                Error::Transport(m) => {
                    Error::Transport(format!("{op}: gathering DVector {}: {m}", self.id))
                }
                other => other,
            })?;
        *data = all;
        Ok(())
    }
    fn keep_own_range(&self) {
        self.gate.wait();
        let mut data = self.data.write();
        if data.len() == self.len {
            let range = self.own_range();
            data.truncate(range.end);
            data.drain(..range.start);
        }
    }
    fn shadow_state(&self, plan: Option<u64>) -> (bool, bool) {
        let own = self.own_range().len();
        let shadow = self.shadow.lock();
        let has = shadow.complete(self.len, own);
        let clean = shadow.version == self.version.load(Ordering::Acquire);
        let current = shadow.all_valid || plan.is_some_and(|p| shadow.valid_for.contains(&p));
        (has, has && clean && current)
    }
    fn expand_from_shadow(&self, op: &'static str) -> Result<()> {
        let range = self.own_range();
        let mut shadow = self.shadow.lock();
        let clean = shadow.version == self.version.load(Ordering::Acquire);
        if !clean {
            // Written since: other ranks' elements may have changed.
            shadow.all_valid = false;
            shadow.valid_for.clear();
        }
        let mut data = self.write(op)?;
        let whole = data.len() == range.len();
        match shadow.full.take() {
            Some(mut full) if whole && full.len() == self.len => {
                // The own elements go into the shadow (moved, unless it holds them
                // already); what they displace is kept as the spare buffer.
                let current = clean && shadow.own_current;
                if !current {
                    full[range].swap_with_slice(&mut data);
                }
                shadow.spare = std::mem::replace(&mut *data, full);
                shadow.spare_current = current;
                shadow.own_current = false;
                Ok(())
            }
            Some(mut full) if whole && full.len() + range.len() == self.len => {
                // The gap form: the own elements move into their gap (`hollow` stays for
                // the shadow the loop leaves, if it leaves the gap form: see
                // `shrink_to_shadow`).
                full.splice(range.start..range.start, data.drain(..));
                *data = full;
                shadow.spare = Vec::new();
                shadow.spare_current = false;
                shadow.own_current = false;
                Ok(())
            }
            full => {
                shadow.full = full;
                Err(Error::invalid(
                    op,
                    format!("DVector {} has no shadow to expand from", self.id),
                ))
            }
        }
    }
    fn shrink_to_shadow(&self, valid: ShadowValidity) {
        self.gate.wait();
        let mut data = self.data.write();
        if data.len() != self.len {
            return;
        }
        let range = self.own_range();
        let mut shadow = self.shadow.lock();
        // The gap form, where the loop wrote the table or it is as large as a planning
        // call fetches rather than gathers: the own elements move out, so none is kept
        // twice. Written, the others' stale values make way for placeholders; read, they
        // stay (still `hollow` where they were and no loop fetched since, unless every
        // element is current).
        let written = matches!(valid, ShadowValidity::Stale);
        // Sized by the own range: after a planning call that fetched, the other slots are
        // mostly fillers, which would make a large table look small.
        let large =
            estimate_bytes(&data[range.clone()], self.len) as u64 > super::gather::fetch_above();
        if written || large {
            let own: Vec<T> = data.drain(range).collect();
            let mut gap = std::mem::replace(&mut *data, own);
            if written {
                shadow.hollow = match placeholder::<T>() {
                    Some(p) => {
                        gap.iter_mut().for_each(|x| *x = p.clone());
                        true
                    }
                    None => false,
                };
                shadow.all_valid = false;
                shadow.valid_for.clear();
            } else {
                shadow.hollow &= valid != ShadowValidity::All;
                shadow.note_validity(valid);
            }
            shadow.full = Some(gap);
            shadow.spare = Vec::new();
            shadow.spare_current = false;
            shadow.own_current = false;
            shadow.version = self.version.load(Ordering::Acquire);
            return;
        }
        // Read (or replicated), otherwise: the own elements leave the full-length copy by
        // the cheapest way: the spare buffer already holds them if the loop did not write the table; otherwise
        // they are swapped into it; without a spare of the right length they are cloned.
        let unwritten = matches!(valid, ShadowValidity::Unchanged | ShadowValidity::Plan(_));
        let mut own = std::mem::take(&mut shadow.spare);
        if own.len() == range.len() && unwritten && shadow.spare_current {
            shadow.own_current = true;
        } else if own.len() == range.len() {
            own.swap_with_slice(&mut data[range]);
            shadow.own_current = false;
        } else {
            own = data[range].to_vec();
            shadow.own_current = true;
        }
        shadow.spare_current = false;
        let full = std::mem::replace(&mut *data, own);
        shadow.note_validity(valid);
        shadow.full = Some(full);
        shadow.hollow = false;
        shadow.version = self.version.load(Ordering::Acquire);
    }
    fn expand_hollow(&self, op: &'static str) -> Result<bool> {
        let Some(fill) = filler::<T>() else {
            return Ok(false);
        };
        let range = self.own_range();
        let mut data = self.write(op)?;
        if data.len() != range.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "DVector {} holds {} elements here, expected its range of {}",
                    self.id,
                    data.len(),
                    range.len()
                ),
            ));
        }
        // The shadow's values would be stale or unread: the loop fetches what it reads.
        *self.shadow.lock() = Shadow::default();
        let mut full = Vec::with_capacity(self.len);
        full.resize(range.start, fill.clone());
        full.append(&mut data);
        full.resize(self.len, fill);
        *data = full;
        Ok(true)
    }
    unsafe fn refill(&self, ptr: *mut u8, keys: &[u64]) {
        let Some(fill) = filler::<T>() else { return };
        let elems = ptr as *mut T;
        for &k in keys {
            // SAFETY: the caller guarantees exclusive access to initialised elements, more
            // than any key.
            unsafe { *elems.add(k as usize) = fill.clone() };
        }
    }
    unsafe fn pack(&self, ptr: *const u8, keys: KeySlice<'_>, out: &mut Vec<u8>) -> Result<()> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { pack_elements::<T>(self.id, ptr, keys, out) }
    }
    unsafe fn unpack(&self, ptr: *mut u8, keys: KeySlice<'_>, bytes: &mut &[u8]) -> Result<()> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { unpack_elements::<T>(self.id, ptr, keys, bytes) }
    }
}

impl<T: super::Element> Snapshot for VectorTable<T> {
    fn gate(&self) -> &Gate {
        &self.gate
    }
    fn snapshot_into(&self, out: &mut Vec<u8>) -> Result<()> {
        let data = self.data.read();
        *out = postcard::to_extend(
            &(self.len as u64, self.offset as u64, &*data),
            std::mem::take(out),
        )
        .map_err(|e| Error::Codec {
            what: format!("a snapshot of DVector {}", self.id),
            message: e.to_string(),
        })?;
        Ok(())
    }
    fn restore(&self, op: &'static str, bytes: &[u8]) -> Result<()> {
        let what = format!("DVector {}", self.id);
        self.install(
            op,
            &what,
            decode_range_snapshot::<T>(op, &what, bytes, &self.ctx)?,
        )
    }
    fn restore_parts(&self, op: &'static str, parts: &[&[u8]]) -> Result<()> {
        let what = format!("DVector {}", self.id);
        self.install(op, &what, decode_parts::<T>(op, &what, parts, &self.ctx)?)
    }
}

impl<T: super::Element> VectorTable<T> {
    /// This rank's range of the table's elements.
    fn own_range(&self) -> std::ops::Range<usize> {
        crate::store::RangePartition::new(self.len, self.ctx.world_size()).range(self.ctx.rank())
    }

    /// Every element of the table across ranks (a collective), for reading in driver code.
    ///
    /// Where every rank keeps a shadow from a distributed loop, the result lends the shadow
    /// with the own elements in place (moved into the gap form's gap, or copied into the
    /// full-length form's range): the elements other ranks changed since are refreshed in
    /// place from their owners first (nothing is refreshed when every rank's shadow is
    /// current). No second copy is made, and once the lease is dropped the shadow stays
    /// current for the next call, which then needs no transfer for it. Meanwhile the table
    /// is locked: an operator called on this same table fails as busy. Otherwise every rank
    /// gathers a copy (within the gather limit).
    pub(crate) fn whole(&self, op: &'static str, comm: &Comm) -> Result<Whole<'_, T>> {
        let range = self.own_range();
        let mine = {
            let shadow = self.shadow.lock();
            let has = shadow.complete(self.len, range.len());
            let clean = shadow.version == self.version.load(Ordering::Acquire);
            (has, has && clean && shadow.all_valid)
        };
        let states = comm.allgather(mine)?;
        let (has, current) = (states.iter().all(|s| s.0), states.iter().all(|s| s.1));
        if !has {
            let data = self.read(op)?;
            let bytes = estimate_bytes(&data, data.len()) as u64;
            let what = format!("DVector {}", self.id);
            super::gather::check_gather(op, &what, self.len, bytes, Some(comm))?;
            let whole = comm.allgather_concat(std::borrow::Cow::Borrowed(&data), self.len)?;
            return Ok(Whole::Gathered(whole));
        }
        // The table's lock (without a new version: nothing is written) is held until the
        // lease is dropped; the shadow's is not (an operator called on this table meanwhile
        // finds no shadow, and fails as busy). A checkpoint still reading the table in the
        // background is waited for, as writers wait.
        self.gate.wait();
        let mut data = self.data.try_write().ok_or(Error::Busy { op })?;
        let version = self.version.load(Ordering::Acquire);
        let (full, own_current) = {
            let mut shadow = self.shadow.lock();
            let own_current = shadow.own_current && shadow.version == version;
            (shadow.full.take(), own_current)
        };
        let Some(mut full) = full.filter(|_| data.len() == range.len()) else {
            return Err(Error::Busy { op });
        };
        // The full-length form holds the own range too; the gap form leaves it out.
        let gap = match full.len() == self.len {
            true => 0,
            false => range.len(),
        };
        if !current {
            // A failure drops the shadow, partly refreshed (the next loop gathers whole).
            comm.allgather_each(&data, self.len, |i, value| {
                // Indices past the own range sit `gap` lower in the gap form.
                let at = if i < range.start { i } else { i - gap };
                full[at] = value;
            })?;
        }
        match gap {
            0 if !own_current => full[range.clone()].clone_from_slice(&data),
            0 => {}
            // The own elements move into their gap and, when the lease ends, back out.
            _ => drop(full.splice(range.start..range.start, data.drain(..))),
        }
        Ok(Whole::Lent(ShadowLease {
            table: self,
            data,
            full,
            version,
            range,
            gap,
        }))
    }

    /// Makes this rank's elements `data`, decoded from a snapshot of `len` elements of
    /// `what`, which must be the table's length.
    fn install(&self, op: &'static str, what: &str, (len, data): (usize, Vec<T>)) -> Result<()> {
        if len != self.len {
            return Err(Error::invalid(
                op,
                format!(
                    "the snapshot of {what} has {len} elements, the DVector {}",
                    self.len
                ),
            ));
        }
        *self.write(op)? = data;
        Ok(())
    }
}

/// Decodes a DVector's snapshot ([`TableHandle::snapshot_into`]): its length and this
/// rank's elements, checked to be this rank's range of that length (`what` names the
/// DVector in errors).
pub(crate) fn decode_range_snapshot<T: super::Element>(
    op: &'static str,
    what: &str,
    bytes: &[u8],
    ctx: &crate::cluster::RankCtx,
) -> Result<(usize, Vec<T>)> {
    let (len, offset, data): (u64, u64, Vec<T>) =
        postcard::from_bytes(bytes).map_err(|e| Error::Codec {
            what: format!("a snapshot of {what}"),
            message: e.to_string(),
        })?;
    let len = len as usize;
    let own = crate::store::RangePartition::new(len, ctx.world_size()).range(ctx.rank());
    if offset as usize != own.start || data.len() != own.len() {
        return Err(Error::invalid(
            op,
            format!(
                "the snapshot of {what} holds {} elements from {offset} of {len}; this rank \
                 holds {} from {}",
                data.len(),
                own.len(),
                own.start
            ),
        ));
    }
    Ok((len, data))
}

/// Decodes a DVector's snapshot taken by a job of another size: `parts` holds every rank's
/// [`TableHandle::snapshot_into`] of that job, in rank order. Returns the length and this
/// rank's elements under this job's balanced ranges.
///
/// Each part's header (length, first index, element count) is read first; only the parts
/// whose range meets this rank's are decoded whole, so a rank holds at most its own range
/// and one old part at a time. The parts must cover the table exactly, each being its
/// rank's balanced range of the same length, or the checkpoint is refused (`what` names
/// the DVector).
pub(crate) fn decode_parts<T: super::Element>(
    op: &'static str,
    what: &str,
    parts: &[&[u8]],
    ctx: &crate::cluster::RankCtx,
) -> Result<(usize, Vec<T>)> {
    let codec = |e: postcard::Error| Error::Codec {
        what: format!("a snapshot of {what}"),
        message: e.to_string(),
    };
    // A part's header: the length, its first index, and its count of elements (a varint,
    // as a `u64`'s).
    let header = |part: &[u8]| -> Result<(usize, usize, usize)> {
        let ((len, offset, count), _): ((u64, u64, u64), _) =
            postcard::take_from_bytes(part).map_err(codec)?;
        Ok((len as usize, offset as usize, count as usize))
    };
    let first = parts
        .first()
        .ok_or_else(|| Error::invalid(op, format!("no snapshot parts of {what}")))?;
    let len = header(first)?.0;
    let own = crate::store::RangePartition::new(len, ctx.world_size()).range(ctx.rank());
    let mut out: Vec<T> = Vec::with_capacity(own.len());
    for (r, part) in parts.iter().enumerate() {
        let (part_len, offset, count) = header(part)?;
        // The parts tile the table, each its old rank's range: then `out` ends with
        // exactly this rank's range.
        let want = crate::store::RangePartition::new(len, parts.len()).range(r);
        if part_len != len || offset != want.start || count != want.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "the snapshot of {what} by rank {r} of {} holds {count} elements from \
                     {offset} of {part_len}; that rank held {} from {} of {len}",
                    parts.len(),
                    want.len(),
                    want.start
                ),
            ));
        }
        let (from, to) = (want.start.max(own.start), want.end.min(own.end));
        if from < to {
            let (_, _, data): (u64, u64, Vec<T>) = postcard::from_bytes(part).map_err(codec)?;
            out.extend(data.into_iter().skip(from - want.start).take(to - from));
        }
    }
    Ok((len, out))
}

/// Appends the encoded elements at `keys` of the `T`s at `ptr` (table `id`, for errors).
///
/// # Safety
/// `ptr` must point to initialised `T`s, more than any of `keys`, that no one writes
/// during the call.
pub(crate) unsafe fn pack_elements<T: super::Element>(
    id: u64,
    ptr: *const u8,
    keys: KeySlice<'_>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let elems = ptr as *const T;
    keys.try_for_each(|k| {
        // SAFETY: the caller guarantees `ptr` points to initialised elements, more than
        // any key, that no one writes now.
        let value = unsafe { &*elems.add(k as usize) };
        let encoded =
            postcard::to_extend(value, std::mem::take(out)).map_err(|e| Error::Codec {
                what: format!("element {k} of DDS {id}"),
                message: e.to_string(),
            })?;
        *out = encoded;
        Ok(())
    })
}

/// Decodes `T`s for `keys` from the front of `bytes` into the `T`s at `ptr`, advancing
/// `bytes` past them.
///
/// # Safety
/// As for [`pack_elements`], and no one else reads or writes those elements meanwhile.
pub(crate) unsafe fn unpack_elements<T: super::Element>(
    id: u64,
    ptr: *mut u8,
    keys: KeySlice<'_>,
    bytes: &mut &[u8],
) -> Result<()> {
    let elems = ptr as *mut T;
    keys.try_for_each(|k| {
        let (value, rest) = postcard::take_from_bytes::<T>(bytes).map_err(|e| Error::Codec {
            what: format!("element {k} of DDS {id} from another rank"),
            message: e.to_string(),
        })?;
        // SAFETY: the caller guarantees exclusive access to initialised elements, more
        // than any key.
        unsafe { *elems.add(k as usize) = value };
        *bytes = rest;
        Ok(())
    })
}

/// Per-worker copies of an aggregatable table and the merging of their deltas.
pub(crate) trait Merger: Send + Sync {
    /// Whether pushing a key whose replica value did not change leaves its master as it
    /// was: the table's aggregation adds deltas (sum, average), and a zero delta adds
    /// nothing. (A custom aggregation may do something with a zero delta.)
    fn zero_change_is_neutral(&self) -> bool;
    /// Whether [`Merger::push_lock_free`] and [`Merger::refresh_lock_free`] serve this
    /// table: its elements are machine words (numbers, or arrays of them) and its
    /// aggregation adds deltas.
    fn lock_free(&self) -> bool;
    /// Adds the whole replica's delta to the master with an atomic add per word, then
    /// refreshes the replica with the master's values just after each add. Workers that
    /// reach the master only through this and [`Merger::refresh_lock_free`] need no lock.
    ///
    /// # Safety
    /// [`Merger::lock_free`] holds; `master` points to the replica's length of initialised
    /// elements, which no one reads or writes during the call other than through these
    /// two methods.
    unsafe fn push_lock_free(&self, master: *mut u8, replica: &mut Replica);
    /// Copies the master's values into the replica (both its copies), reading each word
    /// atomically.
    ///
    /// # Safety
    /// As for [`Merger::push_lock_free`].
    unsafe fn refresh_lock_free(&self, master: *mut u8, replica: &mut Replica);
    /// A replica: a copy of `len` elements at `master`.
    ///
    /// # Safety
    /// `master` must point to `len` initialised elements of the table's type that no one
    /// writes during the call.
    unsafe fn replica(&self, master: *const u8, len: usize) -> Replica;
    /// Adds the replica's delta since its last refresh to the master, then refreshes it.
    ///
    /// # Safety
    /// `master` as for [`Merger::replica`], and no one else reads or writes it during the
    /// call.
    unsafe fn push(&self, master: *mut u8, replica: &mut Replica);
    /// Copies the master's values into the replica (both its copies).
    ///
    /// # Safety
    /// As for [`Merger::replica`], with the replica's length.
    unsafe fn refresh(&self, master: *const u8, replica: &mut Replica);
    /// Copies the master's values at `keys` into the replica (both its copies). Keys are
    /// taken one at a time: the merger is done with a key's element when it asks `keys`
    /// for the next, and it touches no other element of the master (so a caller may lock
    /// each key as `keys` yields it).
    ///
    /// # Safety
    /// `master` points to the table's initialised elements, `keys` are below its length,
    /// and no one writes a key's element while the merger works on it.
    unsafe fn refresh_keys(
        &self,
        master: *const u8,
        replica: &mut Replica,
        keys: &mut dyn Iterator<Item = usize>,
    );
    /// Adds the replica's deltas at `keys` to the master, then refreshes those keys; keys
    /// are taken one at a time, as by [`Merger::refresh_keys`].
    ///
    /// # Safety
    /// As for [`Merger::refresh_keys`], and no one reads a key's element either while the
    /// merger works on it.
    unsafe fn push_keys(
        &self,
        master: *mut u8,
        replica: &mut Replica,
        keys: &mut dyn Iterator<Item = usize>,
    );
    /// Aggregates the deltas of all replicas (each started from the same master values)
    /// into the master with the table's [`Aggregation`], then refreshes them all.
    ///
    /// # Safety
    /// As for [`Merger::push`].
    unsafe fn merge_all(&self, master: *mut u8, replicas: &mut [Replica]);
    /// A copy of the `len` elements at `master`, to combine ranks' deltas against later.
    ///
    /// # Safety
    /// As for [`Merger::replica`].
    unsafe fn snapshot(&self, master: *const u8, len: usize) -> Box<dyn Any + Send>;
    /// Combines the ranks' changes since `start` (a [`Merger::snapshot`]): every rank's
    /// master becomes `start` plus the table's aggregation of the ranks' deltas, each rank's
    /// delta standing for `count` workers' (a collective over `comm`). With `count` `None`
    /// the deltas are summed whatever the aggregation (relaxed tables of `async_for!`,
    /// whose replicas add their deltas).
    ///
    /// # Safety
    /// As for [`Merger::push`]; `start` is a snapshot of this table's master.
    unsafe fn combine_ranks(
        &self,
        comm: &Comm,
        master: *mut u8,
        start: &(dyn Any + Send),
        count: Option<usize>,
    ) -> Result<()>;
    /// Appends this rank's change to the master since `start` (a [`Merger::snapshot`]),
    /// encoded for [`Merger::add_changes`]: the master less the snapshot, element by
    /// element.
    ///
    /// # Safety
    /// As for [`Merger::replica`], with the snapshot's length.
    unsafe fn encode_change(
        &self,
        master: *const u8,
        start: &(dyn Any + Send),
        out: &mut Vec<u8>,
    ) -> Result<()>;
    /// Makes the master `start` plus the sum of `changes`, every rank's
    /// [`Merger::encode_change`] in rank order: ranks that add the same changes in the
    /// same order end with the same values, bit for bit. A change that does not decode
    /// is an error naming its position as the rank that sent it.
    ///
    /// # Safety
    /// As for [`Merger::push`]; `start` is a snapshot of this table's master.
    unsafe fn add_changes(
        &self,
        master: *mut u8,
        start: &(dyn Any + Send),
        changes: &[&[u8]],
    ) -> Result<()>;
}

/// A worker's copy of a table: the values it started from and the values it works on.
pub(crate) struct Replica {
    buf: Box<dyn Any + Send>,
    /// First element of the working copy (its buffer never reallocates: merges copy
    /// element by element into it).
    work: *mut u8,
    /// Where the buffers go when the replica is dropped, for the table's next call.
    spares: Option<Arc<Spares>>,
}

/// Replicas' buffers a table keeps after a call, for the next call's workers: a relaxed
/// table or a `sync_for!` table is replicated by every worker at every call, and making a
/// replica anew costs two copies of the table allocated afresh (for rows of their own,
/// two allocations a row: a factorisation machine's 100,000 factor rows took 17% of a
/// two-worker run), where refilling a kept one copies values into place. The buffers
/// live as long as the table, at most [`MAX_SPARES`] of them.
#[derive(Default)]
pub(crate) struct Spares(Mutex<Vec<Box<dyn Any + Send>>>);

/// The most replicas' buffers a table keeps between calls (one per worker of a call).
const MAX_SPARES: usize = 64;

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(spares) = self.spares.take() {
            let buf = std::mem::replace(&mut self.buf, Box::new(()));
            let mut kept = spares.0.lock();
            if kept.len() < MAX_SPARES {
                kept.push(buf);
            }
        }
    }
}

// SAFETY: `work` points into `buf`, which the replica owns; moving the replica to another
// thread moves the ownership of both.
unsafe impl Send for Replica {}

struct ReplicaBuf<T> {
    base: Vec<T>,
    work: Vec<T>,
}

impl Replica {
    /// A placeholder while a replica is moved out.
    pub fn empty() -> Self {
        Replica {
            buf: Box::new(()),
            work: std::ptr::null_mut(),
            spares: None,
        }
    }

    /// The first element of the working copy.
    pub fn ptr(&self) -> *mut u8 {
        self.work
    }

    fn buf<T: 'static>(&mut self) -> &mut ReplicaBuf<T> {
        self.buf
            .downcast_mut::<ReplicaBuf<T>>()
            .expect("strads-ap internal error: replica of another element type")
    }
}

/// A table whose elements (a vector's, or a map's values) a [`VectorMerger`] merges: how
/// they aggregate, and its name for errors.
pub(crate) trait Aggregated<T>: Send + Sync {
    /// The aggregation the table was given, if any.
    fn aggregation(&self) -> Option<Aggregation<T>>;
    /// `DVector 3`, `DMap 5`.
    fn describe(&self) -> String;
    /// The replicas' buffers kept between calls.
    fn spares(&self) -> &Arc<Spares>;
}

impl<T: super::Element> Aggregated<T> for VectorTable<T> {
    fn aggregation(&self) -> Option<Aggregation<T>> {
        self.aggregation.read().clone()
    }
    fn describe(&self) -> String {
        format!("DVector {}", self.id)
    }
    fn spares(&self) -> &Arc<Spares> {
        &self.spares
    }
}

/// Merges replicas of a table whose elements lie in one array: a vector's elements, or a
/// map's values (in the order of its entries, the same on every rank).
pub(crate) struct VectorMerger<T> {
    table: Arc<dyn Aggregated<T>>,
    /// The table's aggregation, read once: a merger lives for one call, during which no
    /// driver code can change it, and a Hybrid worker merges after every mini-batch
    /// (reading it under the table's lock each time cost `pegasos` a contended atomic
    /// and a clone per merge).
    aggregation: Aggregation<T>,
    /// How the elements lie as machine words, where the lock-free merge serves them (see
    /// [`Merger::lock_free`]).
    words: Option<(crate::value::Word, usize)>,
}

impl<T: Aggregate> VectorMerger<T> {
    /// The merger of `table`'s replicas for one call.
    pub fn new(table: Arc<dyn Aggregated<T>>) -> Self {
        let aggregation = table.aggregation().unwrap_or(Aggregation::Average);
        let adds = matches!(aggregation, Aggregation::Sum | Aggregation::Average);
        let words = T::__inline_words()
            .filter(|&(word, count)| adds && super::word_merge::fits::<T>(word, count));
        VectorMerger {
            table,
            aggregation,
            words,
        }
    }

    /// The replica's two copies, `(work, base)`, as word pointers, and its length in
    /// words; `None` where the lock-free merge does not serve the table.
    fn word_copies(
        &self,
        replica: &mut Replica,
    ) -> Option<(crate::value::Word, *mut u8, *mut u8, usize)> {
        let (word, count) = self.words?;
        let buf = replica.buf::<T>();
        let words = buf.work.len() * count;
        let work = buf.work.as_mut_ptr().cast::<u8>();
        let base = buf.base.as_mut_ptr().cast::<u8>();
        Some((word, work, base, words))
    }

    /// The error for combining ranks' changes under a custom aggregation.
    fn custom_across_ranks(&self) -> Error {
        Error::Config(format!(
            "{} has a custom aggregation, which is not supported across ranks yet (use \
             Average or Sum)",
            self.table.describe()
        ))
    }
}

impl<T: Aggregate> Merger for VectorMerger<T> {
    fn zero_change_is_neutral(&self) -> bool {
        matches!(self.aggregation, Aggregation::Sum | Aggregation::Average)
    }

    fn lock_free(&self) -> bool {
        self.words.is_some()
    }

    unsafe fn push_lock_free(&self, master: *mut u8, replica: &mut Replica) {
        let (word, work, base, words) = self
            .word_copies(replica)
            .expect("strads-ap internal error: a lock-free push of a table that is not of words");
        // SAFETY: the caller's guarantee; the replica's copies are two buffers of the
        // replica's length, its own.
        unsafe { super::word_merge::push(word, master, work, base, words) };
    }

    unsafe fn refresh_lock_free(&self, master: *mut u8, replica: &mut Replica) {
        let (word, work, base, words) = self.word_copies(replica).expect(
            "strads-ap internal error: a lock-free refresh of a table that is not of words",
        );
        // SAFETY: as in `push_lock_free`.
        unsafe { super::word_merge::refresh(word, master, work, base, words) };
    }

    unsafe fn replica(&self, master: *const u8, len: usize) -> Replica {
        // SAFETY: the caller guarantees `master` points to `len` initialised `T`s that are
        // not written while we copy them.
        let master = unsafe { std::slice::from_raw_parts(master as *const T, len) };
        let spares = self.table.spares();
        let kept = spares.0.lock().pop();
        let mut buf = match kept.map(|b| b.downcast::<ReplicaBuf<T>>()) {
            // A kept replica of this length: refilled in place (rows of their own keep
            // their allocations where their lengths agree).
            Some(Ok(mut buf)) if buf.work.len() == len => {
                buf.base.clone_from_slice(master);
                buf.work.clone_from_slice(master);
                buf
            }
            // None kept, or one of another length (a map that has grown since): made anew.
            _ => Box::new(ReplicaBuf {
                base: master.to_vec(),
                work: master.to_vec(),
            }),
        };
        let work = buf.work.as_mut_ptr() as *mut u8;
        Replica {
            buf,
            work,
            spares: Some(spares.clone()),
        }
    }

    unsafe fn push(&self, master: *mut u8, replica: &mut Replica) {
        let buf = replica.buf::<T>();
        // SAFETY: the caller guarantees exclusive access to `len` initialised `T`s.
        let master = unsafe { std::slice::from_raw_parts_mut(master as *mut T, buf.work.len()) };
        let aggregation = &self.aggregation;
        for ((m, w), b) in master.iter_mut().zip(&mut buf.work).zip(&mut buf.base) {
            aggregation.apply_change(m, w, b);
            w.clone_from(m);
            b.clone_from(m);
        }
    }

    unsafe fn refresh(&self, master: *const u8, replica: &mut Replica) {
        let buf = replica.buf::<T>();
        // SAFETY: the caller guarantees `master` points to as many initialised `T`s as the
        // replica holds, which no one writes while we copy them.
        let master = unsafe { std::slice::from_raw_parts(master as *const T, buf.work.len()) };
        buf.work.clone_from_slice(master);
        buf.base.clone_from_slice(master);
    }

    unsafe fn refresh_keys(
        &self,
        master: *const u8,
        replica: &mut Replica,
        keys: &mut dyn Iterator<Item = usize>,
    ) {
        let buf = replica.buf::<T>();
        let master = master as *const T;
        for k in keys {
            assert!(
                k < buf.work.len(),
                "strads-ap internal error: key {k} past the end"
            );
            // SAFETY: `k` is below the length, and no one writes element `k` while we work
            // on it (the caller's guarantee); only this element is referenced.
            let m = unsafe { &*master.add(k) };
            buf.work[k].clone_from(m);
            buf.base[k].clone_from(m);
        }
    }

    unsafe fn push_keys(
        &self,
        master: *mut u8,
        replica: &mut Replica,
        keys: &mut dyn Iterator<Item = usize>,
    ) {
        let aggregation = &self.aggregation;
        let buf = replica.buf::<T>();
        let master = master as *mut T;
        for k in keys {
            assert!(
                k < buf.work.len(),
                "strads-ap internal error: key {k} past the end"
            );
            // SAFETY: `k` is below the length, and no one else reads or writes element `k`
            // while we work on it (the caller's guarantee); only this element is referenced.
            let m = unsafe { &mut *master.add(k) };
            aggregation.apply_change(m, &buf.work[k], &buf.base[k]);
            buf.work[k].clone_from(m);
            buf.base[k].clone_from(m);
        }
    }

    unsafe fn snapshot(&self, master: *const u8, len: usize) -> Box<dyn Any + Send> {
        // SAFETY: the caller guarantees `len` initialised `T`s that no one writes now.
        let master = unsafe { std::slice::from_raw_parts(master as *const T, len) };
        Box::new(master.to_vec())
    }

    unsafe fn combine_ranks(
        &self,
        comm: &Comm,
        master: *mut u8,
        start: &(dyn Any + Send),
        count: Option<usize>,
    ) -> Result<()> {
        let start = start
            .downcast_ref::<Vec<T>>()
            .expect("strads-ap internal error: snapshot of another element type");
        // SAFETY: the caller guarantees exclusive access to the master's initialised `T`s,
        // as many as the snapshot holds.
        let master = unsafe { std::slice::from_raw_parts_mut(master as *mut T, start.len()) };
        let average = match self.aggregation {
            Aggregation::Average => count.is_some(),
            Aggregation::Sum => false,
            Aggregation::Custom(_) => return Err(self.custom_across_ranks()),
        };
        // This rank's delta, weighted by its workers for an average.
        let delta: Vec<T> = master
            .iter()
            .zip(start)
            .map(|(m, s)| {
                let mut d = m.clone();
                d.sub_delta(s);
                if average {
                    d.scale(count.unwrap_or(1) as f64);
                }
                d
            })
            .collect();
        let (total, mut sum) =
            comm.allreduce((count.unwrap_or(1), delta), |(c1, mut a), (c2, b)| {
                for (x, y) in a.iter_mut().zip(&b) {
                    x.add_delta(y);
                }
                (c1.saturating_add(c2), a)
            })?;
        if sum.len() != master.len() {
            return Err(Error::Transport(format!(
                "sync_for!: ranks hold {} with different lengths",
                self.table.describe()
            )));
        }
        for ((m, s), d) in master.iter_mut().zip(start).zip(&mut sum) {
            if average && total > 0 {
                d.scale(1.0 / total as f64);
            }
            m.clone_from(s);
            m.add_delta(d);
        }
        Ok(())
    }

    unsafe fn encode_change(
        &self,
        master: *const u8,
        start: &(dyn Any + Send),
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let start = start
            .downcast_ref::<Vec<T>>()
            .expect("strads-ap internal error: snapshot of another element type");
        // SAFETY: the caller guarantees as many initialised `T`s as the snapshot holds,
        // which no one writes now.
        let master = unsafe { std::slice::from_raw_parts(master as *const T, start.len()) };
        let change: Vec<T> = master
            .iter()
            .zip(start)
            .map(|(m, s)| {
                let mut d = m.clone();
                d.sub_delta(s);
                d
            })
            .collect();
        *out = postcard::to_extend(&change, std::mem::take(out)).map_err(|e| Error::Codec {
            what: format!("the changes to {}", self.table.describe()),
            message: e.to_string(),
        })?;
        Ok(())
    }

    unsafe fn add_changes(
        &self,
        master: *mut u8,
        start: &(dyn Any + Send),
        changes: &[&[u8]],
    ) -> Result<()> {
        if let Aggregation::Custom(_) = self.aggregation {
            return Err(self.custom_across_ranks());
        }
        let start = start
            .downcast_ref::<Vec<T>>()
            .expect("strads-ap internal error: snapshot of another element type");
        let decoded = changes
            .iter()
            .enumerate()
            .map(|(rank, bytes)| {
                let change: Vec<T> =
                    postcard::from_bytes(bytes).map_err(|e| Error::BadPeerData {
                        rank,
                        what: format!("the changes to {}", self.table.describe()),
                        message: e.to_string(),
                    })?;
                match change.len() == start.len() {
                    true => Ok(change),
                    false => Err(Error::BadPeerData {
                        rank,
                        what: format!("the changes to {}", self.table.describe()),
                        message: format!(
                            "{} elements; the table has {}",
                            change.len(),
                            start.len()
                        ),
                    }),
                }
            })
            .collect::<Result<Vec<Vec<T>>>>()?;
        // SAFETY: the caller guarantees exclusive access to the master's initialised `T`s,
        // as many as the snapshot holds.
        let master = unsafe { std::slice::from_raw_parts_mut(master as *mut T, start.len()) };
        for (i, (m, s)) in master.iter_mut().zip(start).enumerate() {
            m.clone_from(s);
            for change in &decoded {
                m.add_delta(&change[i]);
            }
        }
        Ok(())
    }

    unsafe fn merge_all(&self, master: *mut u8, replicas: &mut [Replica]) {
        let Some(first) = replicas.first_mut() else {
            return;
        };
        let len = first.buf::<T>().work.len();
        // SAFETY: the caller guarantees exclusive access to `len` initialised `T`s.
        let master = unsafe { std::slice::from_raw_parts_mut(master as *mut T, len) };
        let aggregation = &self.aggregation;
        let bufs: Vec<&mut ReplicaBuf<T>> = replicas.iter_mut().map(|r| r.buf::<T>()).collect();
        match aggregation {
            Aggregation::Average | Aggregation::Sum => {
                let scale = match aggregation {
                    Aggregation::Average if bufs.len() > 1 => Some(1.0 / bufs.len() as f64),
                    _ => None,
                };
                for (i, m) in master.iter_mut().enumerate() {
                    let mut total = bufs[0].work[i].clone();
                    total.sub_delta(&bufs[0].base[i]);
                    for b in &bufs[1..] {
                        total.add_delta(&b.work[i]);
                        total.sub_delta(&b.base[i]);
                    }
                    if let Some(f) = scale {
                        total.scale(f);
                    }
                    m.add_delta(&total);
                }
            }
            Aggregation::Custom(_) => {
                let mut deltas: Vec<T> = Vec::with_capacity(bufs.len());
                for (i, m) in master.iter_mut().enumerate() {
                    deltas.clear();
                    for b in &bufs {
                        let mut d = b.work[i].clone();
                        d.sub_delta(&b.base[i]);
                        deltas.push(d);
                    }
                    let refs: Vec<&T> = deltas.iter().collect();
                    aggregation.apply(m, &refs);
                }
            }
        }
        for b in bufs {
            b.work.clone_from_slice(master);
            b.base.clone_from_slice(master);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::placeholder;

    /// Placeholders stand in for heap-backed elements only, and hold no heap memory.
    #[test]
    fn placeholders_are_empty_values_of_heap_backed_types() {
        let row = placeholder::<Vec<f32>>().expect("a Vec row has one");
        assert_eq!((row.len(), row.capacity()), (0, 0));
        assert_eq!(placeholder::<String>().as_deref(), Some(""));
        let pair = placeholder::<(u32, Vec<u64>)>().expect("a tuple with a Vec has one");
        assert_eq!(pair, (0, Vec::new()));
        // Nothing to save: no heap memory.
        assert_eq!(placeholder::<f64>(), None);
        assert_eq!(placeholder::<[f32; 8]>(), None);
        // Zero bytes that decode to a heap-backed value (a boxed array) save nothing.
        assert_eq!(placeholder::<Box<[f32; 32]>>(), None);
        // Zero bytes that do not decode at all.
        assert_eq!(placeholder::<(Vec<u8>, std::num::NonZeroU32)>(), None);
    }
}
