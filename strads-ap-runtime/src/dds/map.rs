//! [`DMap`] and [`DMultiMap`]: distributed hash maps.
//!
//! Keys are hash-partitioned across ranks with a hash that is the same in every process:
//! in a job of several ranks, the rank a key hashes to owns its value. Every rank keeps
//! the map's structure (all keys, at the same dense *positions*, since driver code inserts
//! and removes keys identically on every rank) and a copy of every value, current for the
//! keys it owns and refreshed from the owners when an operator needs the others. The
//! planner and the views treat a map's values exactly like a DVector's elements: inside an `async_for!` body, `m[&k]`, `m.get(&k)`, `m.get_mut(&k)` and
//! `m[&k] += ..` read and write existing entries under the same conflict-free plan. Keys
//! cannot be added or removed inside a body; do that in driver code between operators.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::{Index, IndexMut};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::direct::DirectView;
use super::lock_view::LockView;
use super::table::{
    lookup_table, register_table, Aggregated, Snapshot, Spread, TableHandle, TableLock,
};
use super::view::{RecordVectorView, VectorView};
use super::{Aggregate, Aggregation, Element, Relaxed};
use crate::access::{raise, ExecCtx, Fault};
use crate::error::{Error, Result};
use crate::recon::{Recording, Writes};
use crate::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::util::KeySlice;
use crate::util::{stable_hash, StableHasher};

/// The hasher of a rank's key index: fast on strings (eight bytes a step; the
/// byte-at-a-time FNV of `StableHasher` made a `DMap<String, _>` lookup in a loop body
/// 1.2× the serial program's `HashMap`'s) and seeded with a constant, so that nothing
/// depends on a per-process random seed. The index is never sent nor iterated: where a key
/// lives and in which order keys are listed come from `stable_hash` and `keys`.
pub(crate) type Stable = foldhash::fast::FixedState;

/// A rank's entries of a map: `keys[i]` holds `values[i]`, and `index` finds `i`.
pub(crate) struct Entries<K, V> {
    index: HashMap<K, u32, Stable>,
    keys: Vec<K>,
    values: Vec<V>,
}

impl<K: Eq + Hash + Clone, V> Entries<K, V> {
    fn new() -> Self {
        Entries {
            index: HashMap::default(),
            keys: Vec::new(),
            values: Vec::new(),
        }
    }

    fn from_pairs(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut e = Entries::new();
        for (k, v) in pairs {
            e.insert(k, v);
        }
        e
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&i| &self.values[i as usize])
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.index.get(key).map(|&i| &mut self.values[i as usize])
    }

    /// Inserts; returns the replaced value, or `None` for a new key (a structural change).
    fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.index.get(&key) {
            Some(&i) => Some(std::mem::replace(&mut self.values[i as usize], value)),
            None => {
                self.index.insert(key.clone(), self.values.len() as u32);
                self.keys.push(key);
                self.values.push(value);
                None
            }
        }
    }

    /// Removes `key`, moving the last entry into its position.
    fn remove(&mut self, key: &K) -> Option<V> {
        let i = self.index.remove(key)? as usize;
        self.keys.swap_remove(i);
        let value = self.values.swap_remove(i);
        if let Some(moved) = self.keys.get(i) {
            self.index.insert(moved.clone(), i as u32);
        }
        Some(value)
    }

    fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.keys.iter().zip(&self.values)
    }
}

/// A map's entries lent read-only to driver code by [`DMap::read_all`] and
/// [`DMap::with_all`] (and the [`DMultiMap`] twins): look-ups, indexing and iteration as
/// on a `HashMap`, without a copy. Entries are listed in the map's own order (the order
/// keys were added, a removed key's place taken by the last), the same on every rank and
/// in a world of one. The map is locked against writes until it is dropped.
///
/// ```
/// use strads_ap_runtime::DMap;
/// let m = DMap::from_pairs(vec![("a".to_string(), 1.5), ("b".to_string(), 2.5)])?;
/// let (a, total) = m.with_all(|m| (m[&"a".to_string()], m.values().sum::<f64>()))?;
/// assert_eq!((a, total), (1.5, 4.0));
/// let all = m.read_all()?;
/// let mut seen = 0.0;
/// for (_key, value) in &all {
///     seen += value;
/// }
/// assert_eq!((seen, all.len()), (4.0, 2));
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
pub struct MapEntries<'a, K, V> {
    entries: RwLockReadGuard<'a, Entries<K, V>>,
}

impl<K: Eq + Hash + Clone, V> MapEntries<'_, K, V> {
    /// The value under `key`, if any.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.entries.index.contains_key(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// The entries, in the map's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&K, &V)> + '_ {
        self.entries.keys.iter().zip(&self.entries.values)
    }

    /// The keys, in the map's order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &K> + '_ {
        self.entries.keys.iter()
    }

    /// The values, in the map's order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &V> + '_ {
        self.entries.values.iter()
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for MapEntries<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self).finish()
    }
}

impl<'b, K, V> IntoIterator for &'b MapEntries<'_, K, V> {
    type Item = (&'b K, &'b V);
    type IntoIter = std::iter::Zip<std::slice::Iter<'b, K>, std::slice::Iter<'b, V>>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.keys.iter().zip(&self.entries.values)
    }
}

impl<K: Eq + Hash + Clone + std::fmt::Debug, V> Index<&K> for MapEntries<'_, K, V> {
    type Output = V;

    /// The value under `key`; panics, naming the key, when it is absent (as `HashMap`
    /// does).
    fn index(&self, key: &K) -> &V {
        match self.entries.get(key) {
            Some(v) => v,
            None => panic!("key {key:?} is not in the map"),
        }
    }
}

/// The write lock on a map's entries; when it ends it records the number of keys in the
/// table's `len`.
struct EntriesWrite<'a, K, V> {
    guard: RwLockWriteGuard<'a, Entries<K, V>>,
    len: &'a AtomicUsize,
}

impl<K, V> std::ops::Deref for EntriesWrite<'_, K, V> {
    type Target = Entries<K, V>;
    fn deref(&self) -> &Entries<K, V> {
        &self.guard
    }
}

impl<K, V> std::ops::DerefMut for EntriesWrite<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Entries<K, V> {
        &mut self.guard
    }
}

impl<K, V> Drop for EntriesWrite<'_, K, V> {
    fn drop(&mut self) {
        self.len.store(self.guard.values.len(), Ordering::Release);
    }
}

/// Storage of one map table on this rank.
pub(crate) struct MapTable<K, V> {
    id: u64,
    /// The rank that holds this copy.
    ctx: Arc<crate::cluster::RankCtx>,
    data: RwLock<Entries<K, V>>,
    /// The number of keys, recorded whenever a write lock on `data` ends (so
    /// [`DMap::len`] needs no lock, and never finds the map busy).
    len: AtomicUsize,
    /// Bumped whenever a key is added or removed (positions change): plans are keyed by it.
    version: AtomicU64,
    /// Holds writers back while a checkpoint reads the entries.
    gate: super::table::Gate,
    /// Declared relaxed: `async_for!` leaves the values out of conflict analysis and
    /// merges workers' replicas (see [`DMap::relaxed`]).
    relaxed: AtomicBool,
    /// How workers' updates of the values merge (`sync_for!`, relaxed maps).
    aggregation: RwLock<Option<Aggregation<V>>>,
    /// Workers' replicas of the values kept from one call to the next.
    spares: Arc<super::table::Spares>,
}

impl<K: MapKey, V: Element> Aggregated<V> for MapTable<K, V> {
    fn aggregation(&self) -> Option<Aggregation<V>> {
        self.aggregation.read().clone()
    }
    fn describe(&self) -> String {
        format!("DMap {}", self.id)
    }
    fn spares(&self) -> &Arc<super::table::Spares> {
        &self.spares
    }
}

impl<K: MapKey, V: Element> MapTable<K, V> {
    fn create(data: Entries<K, V>) -> Arc<Self> {
        let ctx = crate::cluster::here();
        let id = ctx.new_table_id();
        let table = Arc::new(MapTable {
            id,
            ctx,
            len: AtomicUsize::new(data.len()),
            data: RwLock::new(data),
            version: AtomicU64::new(0),
            gate: Default::default(),
            relaxed: AtomicBool::new(false),
            aggregation: RwLock::new(None),
            spares: Arc::default(),
        });
        register_table(id, &table);
        table
    }

    fn read(&self, op: &'static str) -> Result<RwLockReadGuard<'_, Entries<K, V>>> {
        self.data.try_read().ok_or(Error::Busy { op })
    }

    fn write(&self, op: &'static str) -> Result<EntriesWrite<'_, K, V>> {
        self.gate.wait();
        let guard = self.data.try_write().ok_or(Error::Busy { op })?;
        Ok(EntriesWrite {
            guard,
            len: &self.len,
        })
    }

    /// Makes a table by `make` (a data operator `op`, called at `at`), or, when recovery
    /// replays the operator, loads the table it made the first time (see
    /// [`crate::checkpoint`]). With checkpoints on, a table made is checkpointed.
    #[track_caller]
    fn made_by_operator(
        op: &'static str,
        make: impl FnOnce() -> Result<Arc<Self>>,
    ) -> Result<Arc<Self>> {
        use super::persist::{self, Input};
        let at = std::panic::Location::caller();
        match persist::begin_input(op, at)? {
            Input::Off => make(),
            Input::Load { id, state, .. } => {
                let table = MapTable::create(Entries::new());
                persist::check_input_id(id, table.id, &persist::input_site(op, at))?;
                state.restore(op, &*table)?;
                Ok(table)
            }
            record @ Input::Record { .. } => {
                let table = make()?;
                record.made(table.clone(), Vec::new())?;
                Ok(table)
            }
        }
    }

    fn changed_keys(&self) {
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// The collectives, in a job of several ranks.
    fn dist(&self, op: &str) -> Result<Option<&crate::cluster::collective::Comm>> {
        if self.ctx.is_distributed() {
            self.ctx.comm_for(op).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl<K: MapKey, V: Element> MapTable<K, V> {
    /// The rank that owns `key`'s value.
    fn owner(&self, key: &K) -> usize {
        crate::store::HashPartition::new(self.ctx.world_size()).owner(key)
    }

    /// The entries whose values this rank owns, with their positions (every entry in a
    /// world of one, with no key hashed).
    fn own_entries<'a>(
        &'a self,
        entries: &'a Entries<K, V>,
    ) -> impl Iterator<Item = (usize, (&'a K, &'a V))> + 'a {
        let (me, all) = (self.ctx.rank(), !self.ctx.is_distributed());
        (entries.iter().enumerate()).filter(move |(_, (k, _))| all || self.owner(k) == me)
    }

    /// Copies of the values this rank owns, by position.
    fn owned(&self, entries: &Entries<K, V>) -> Vec<(u32, V)> {
        (self.own_entries(entries))
            .map(|(i, (_, v))| (i as u32, v.clone()))
            .collect()
    }

    /// A table of the entries `make` gives, checked to be the same on every rank (a
    /// divergence error naming `op` otherwise); made by the data operator `op` (see
    /// [`MapTable::made_by_operator`]).
    #[track_caller]
    fn made_alike(
        op: &'static str,
        make: impl FnOnce() -> Result<Entries<K, V>>,
    ) -> Result<Arc<Self>> {
        MapTable::made_by_operator(op, || {
            let table = MapTable::create(make()?);
            table.check_same(op)?;
            Ok(table)
        })
    }

    /// Makes every value current on every rank (a collective).
    fn refresh(&self, op: &'static str, comm: &crate::cluster::collective::Comm) -> Result<()> {
        let mut data = self.write(op)?;
        let mine = self.owned(&data);
        let len = data.values.len();
        // Every entry is owned by one rank: the parts hold `len` values in all, each
        // assigned in place as it is decoded.
        let mut outside = None;
        comm.allgather_each(&mine, len, |_, (i, v): (u32, V)| {
            match data.values.get_mut(i as usize) {
                Some(slot) => *slot = v,
                None => {
                    outside.get_or_insert(i);
                }
            }
        })?;
        if let Some(i) = outside {
            return Err(Error::Transport(format!(
                "{op}: a rank sent entry {i} of map {}, which has {len} entries here (the \
                 ranks' maps diverged)",
                self.id
            )));
        }
        Ok(())
    }

    /// Checks that every rank built the same structure (the same keys at the same
    /// positions) after `op`: a divergence error naming the operator otherwise.
    fn check_same(&self, op: &'static str) -> Result<()> {
        if let Some(comm) = self.dist(op)? {
            let data = self.read(op)?;
            let mut h = StableHasher::default();
            for k in &data.keys {
                std::hash::Hash::hash(k, &mut h);
            }
            let print = std::hash::Hasher::finish(&h);
            comm.enter_operator(
                op,
                &format!("{} keys, {print:016x}", data.len()),
                Vec::new(),
            )?;
        }
        Ok(())
    }

    /// `value` as the `owner` of its key holds it: whether it is `Some` is the same on
    /// every rank (the keys are), so only then do the ranks talk.
    fn owners_copy(&self, op: &'static str, owner: usize, value: Option<V>) -> Result<Option<V>> {
        match (self.dist(op)?, value) {
            (Some(comm), Some(v)) => comm.broadcast(owner, Some(v)),
            (_, value) => Ok(value),
        }
    }

    /// All entries, each from its owner, sorted by the stable hash of the key (the same
    /// order on every rank); fails on every rank past the gather limit.
    fn gathered(&self, op: &'static str) -> Result<Vec<(K, V)>> {
        let mut pairs: Vec<(K, V)> = {
            let data = self.read(op)?;
            let comm = self.dist(op)?;
            // Every rank holds every entry; each counts its share of the copy's size.
            let n = data.values.len();
            let whole = super::table::estimate_bytes(&data.values, n)
                + super::table::estimate_bytes(&data.keys, n);
            let share = whole / comm.map_or(1, |c| c.world_size());
            let what = format!("map {}", self.id);
            super::gather::check_gather(op, &what, n, share as u64, comm)?;
            match comm {
                None => data.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                Some(comm) => {
                    let mine: Vec<(K, V)> = (self.own_entries(&data))
                        .map(|(_, (k, v))| (k.clone(), v.clone()))
                        .collect();
                    drop(data);
                    comm.allgather_concat(mine.into(), n)?
                }
            }
        };
        pairs.sort_by_cached_key(|(k, _)| stable_hash(k));
        Ok(pairs)
    }

    /// Every entry, current (refreshed from the owners first in a job of several ranks),
    /// lent under the read lock.
    fn read_all(&self, op: &'static str) -> Result<MapEntries<'_, K, V>> {
        if let Some(comm) = self.dist(op)? {
            self.refresh(op, comm)?;
        }
        Ok(MapEntries {
            entries: self.read(op)?,
        })
    }

    /// The value under `key` from its owner (a collective across ranks).
    fn get_current(&self, op: &'static str, key: &K) -> Result<Option<V>> {
        let local = self.read(op)?.get(key).cloned();
        match self.dist(op)? {
            None => Ok(local),
            Some(comm) => {
                let owner = self.owner(key);
                comm.broadcast(owner, local)
            }
        }
    }
}

struct MapLock<'a, K, V>(EntriesWrite<'a, K, V>);

impl<K, V> TableLock for MapLock<'_, K, V> {
    fn ptr(&mut self) -> *mut u8 {
        self.0.values.as_mut_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.0.values.len()
    }
    fn index(&self) -> *const u8 {
        &self.0.index as *const HashMap<K, u32, Stable> as *const u8
    }
}

impl<K: MapKey, V: Element> TableHandle for MapTable<K, V> {
    fn id(&self) -> u64 {
        self.id
    }
    fn memory(&self) -> super::table::TableMemory {
        let data = self.data.read();
        let n = data.values.len();
        // Each entry: its value, its key (in the key list and the index) and a position.
        let bytes = super::table::estimate_bytes(&data.values, n)
            + 2 * super::table::estimate_bytes(&data.keys, n)
            + n * std::mem::size_of::<u32>();
        super::table::TableMemory {
            id: self.id,
            kind: "DMap",
            element: std::any::type_name::<V>(),
            len: n,
            held: n,
            extra: 0,
            bytes,
        }
    }
    fn is_relaxed(&self) -> bool {
        self.relaxed.load(Ordering::Relaxed)
    }
    fn is_map(&self) -> bool {
        true
    }
    fn shape(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }
    fn elem_size(&self) -> usize {
        std::mem::size_of::<V>()
    }
    fn owns_heap(&self) -> bool {
        std::mem::needs_drop::<V>()
    }
    fn lock<'a>(&'a self, op: &'static str) -> Result<Box<dyn TableLock + 'a>> {
        Ok(Box::new(MapLock(self.write(op)?)))
    }
    fn describe_key(&self, key: u64) -> String {
        // Keys are any serialisable type: JSON shows strings and numbers as a reader
        // writes them. The entries may be in use (a running operator): the position then.
        let Some(data) = self.data.try_read() else {
            return format!("[entry {key}]");
        };
        match data.keys.get(key as usize).map(serde_json::to_string) {
            Some(Ok(text)) => format!("[{text}]"),
            _ => format!("[entry {key}]"),
        }
    }
}

impl<K: MapKey, V: Element> Spread for MapTable<K, V> {
    fn gather_all(&self, op: &'static str, comm: &crate::cluster::collective::Comm) -> Result<()> {
        self.refresh(op, comm)
    }
    fn keep_own_range(&self) {}
    fn shadow_state(&self, _plan: Option<u64>) -> (bool, bool) {
        // Every rank keeps every entry; values it does not own may be stale.
        (true, false)
    }
    fn expand_from_shadow(&self, _op: &'static str) -> Result<()> {
        Ok(())
    }
    fn shrink_to_shadow(&self, _valid: super::table::ShadowValidity) {}
    fn owners(&self) -> Option<Vec<u16>> {
        let data = self.data.read();
        Some(data.keys.iter().map(|k| self.owner(k) as u16).collect())
    }
    unsafe fn pack(&self, ptr: *const u8, keys: KeySlice<'_>, out: &mut Vec<u8>) -> Result<()> {
        // SAFETY: the caller's guarantee, passed on (positions index the values).
        unsafe { super::table::pack_elements::<V>(self.id, ptr, keys, out) }
    }
    unsafe fn unpack(&self, ptr: *mut u8, keys: KeySlice<'_>, bytes: &mut &[u8]) -> Result<()> {
        // SAFETY: as above.
        unsafe { super::table::unpack_elements::<V>(self.id, ptr, keys, bytes) }
    }
}

impl<K: MapKey, V: Element> Snapshot for MapTable<K, V> {
    fn gate(&self) -> &super::table::Gate {
        &self.gate
    }
    fn snapshot_into(&self, out: &mut Vec<u8>) -> Result<()> {
        let data = self.data.read();
        *out =
            postcard::to_extend(&(&data.keys, &data.values), std::mem::take(out)).map_err(|e| {
                Error::Codec {
                    what: format!("a snapshot of map {}", self.id),
                    message: e.to_string(),
                }
            })?;
        Ok(())
    }
    fn restore(&self, op: &'static str, bytes: &[u8]) -> Result<()> {
        let (keys, values) = self.decode_snapshot(op, bytes)?;
        self.install(op, keys, values)
    }
    fn restore_parts(&self, op: &'static str, parts: &[&[u8]]) -> Result<()> {
        // Every rank kept every key, at the same positions, and a current value for the
        // keys it owned: each position takes its value from its old owner's part.
        let Some((first, others)) = parts.split_first() else {
            return Err(Error::invalid(
                op,
                format!("no snapshot parts of map {}", self.id),
            ));
        };
        let (keys, mut values) = self.decode_snapshot(op, first)?;
        let old = crate::store::HashPartition::new(parts.len());
        for (r, part) in others.iter().enumerate() {
            let (their_keys, their_values) = self.decode_snapshot(op, part)?;
            if their_keys != keys {
                return Err(Error::invalid(
                    op,
                    format!(
                        "the snapshot parts of map {} by ranks 0 and {} hold other keys",
                        self.id,
                        r + 1
                    ),
                ));
            }
            for (i, v) in their_values.into_iter().enumerate() {
                if old.owner(&keys[i]) == r + 1 {
                    values[i] = v;
                }
            }
        }
        self.install(op, keys, values)
    }
}

impl<K: MapKey, V: Element> MapTable<K, V> {
    /// Decodes a [`Snapshot::snapshot_into`] of this map: keys and values by position.
    fn decode_snapshot(&self, op: &'static str, bytes: &[u8]) -> Result<(Vec<K>, Vec<V>)> {
        let (keys, values): (Vec<K>, Vec<V>) =
            postcard::from_bytes(bytes).map_err(|e| Error::Codec {
                what: format!("a snapshot of map {}", self.id),
                message: e.to_string(),
            })?;
        if keys.len() != values.len() {
            return Err(Error::invalid(
                op,
                format!("the snapshot of map {} is inconsistent", self.id),
            ));
        }
        Ok((keys, values))
    }

    /// Replaces the entries with `keys[i]` → `values[i]`.
    fn install(&self, op: &'static str, keys: Vec<K>, values: Vec<V>) -> Result<()> {
        let mut data = self.write(op)?;
        let before: Vec<&K> = data.keys.iter().collect();
        let same_keys =
            before.len() == keys.len() && before.iter().zip(&keys).all(|(a, b)| *a == b);
        *data = Entries::from_pairs(keys.into_iter().zip(values));
        drop(data);
        if !same_keys {
            self.changed_keys();
        }
        Ok(())
    }
}

/// A distributed map from `K` to `V`: the strads-ap replacement for `HashMap<K, V>`.
///
/// # Examples
/// ```
/// use strads_ap_runtime::DMap;
/// let m = DMap::from_pairs(vec![("a".to_string(), 1), ("b".to_string(), 2)])?;
/// m.insert("c".to_string(), 3)?;
/// assert_eq!(m.get(&"b".to_string())?, Some(2));
/// assert!(m.contains_key(&"c".to_string())?);
/// assert_eq!(m.remove(&"a".to_string())?, Some(1));
/// assert_eq!(m.len(), 2);
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
pub struct DMap<K, V> {
    table: Arc<MapTable<K, V>>,
}

impl<K, V> Clone for DMap<K, V> {
    fn clone(&self) -> Self {
        DMap {
            table: self.table.clone(),
        }
    }
}

/// Key types of maps.
pub trait MapKey: Element + Eq + Hash {}
impl<K: Element + Eq + Hash> MapKey for K {}

impl<K: MapKey, V: Element> DMap<K, V> {
    /// An empty map.
    pub fn new() -> Result<Self> {
        let table = MapTable::create(Entries::new());
        table.check_same("DMap::new")?;
        Ok(DMap { table })
    }

    /// A map holding `pairs` (a later pair replaces an earlier one with the same key).
    ///
    /// In a job of several ranks every rank passes the same pairs (ranks that disagree
    /// fail with a divergence error). With checkpoints on, the map is checkpointed as an
    /// input (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn from_pairs(pairs: Vec<(K, V)>) -> Result<Self> {
        let op = "DMap::from_pairs";
        let table = MapTable::made_alike(op, || Ok(Entries::from_pairs(pairs)))?;
        Ok(DMap { table })
    }

    /// A map holding the entries of `map`: a `HashMap`, a `BTreeMap`, or any pairs (a
    /// later pair replaces an earlier one with the same key).
    ///
    /// The entries are put in the order of a fixed hash of their keys (the order `to_vec`
    /// lists them in), not in the order `map` yields them: a `HashMap`'s order differs from
    /// process to process, and this way every run, and every rank of a job, builds the
    /// same map from it.
    ///
    /// # Examples
    /// ```
    /// use std::collections::HashMap;
    /// use strads_ap_runtime::DMap;
    /// let serial: HashMap<String, f32> = [("the".to_string(), 0.5), ("a".to_string(), 0.25)].into();
    /// let weights = DMap::from_map(serial)?;
    /// assert_eq!(weights.get(&"the".to_string())?, Some(0.5));
    /// assert_eq!(weights.len(), 2);
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    #[track_caller]
    pub fn from_map(map: impl IntoIterator<Item = (K, V)>) -> Result<Self> {
        Self::from_pairs(in_key_order(map))
    }

    /// The table id.
    pub fn id(&self) -> u64 {
        self.table.id
    }

    /// Declares the map relaxed: `async_for!` leaves its values out of conflict analysis,
    /// each worker updates a replica of them, and the replicas' deltas are summed into the
    /// map after every group of tasks (as for [`DVector::relaxed`](super::DVector::relaxed)).
    /// For hot entries that many tasks update with small steps (a bag-of-words model's
    /// frequent tokens): the rest of the loop is planned as if the map were absent.
    ///
    /// Keys are still inserted in driver code only.
    ///
    /// ```
    /// use strads_ap_runtime::{DMap, Relaxed};
    /// let counts: DMap<String, u64> =
    ///     DMap::from_pairs(vec![("the".to_string(), 0), ("cat".to_string(), 0)])?
    ///         .relaxed(Relaxed::Sum);
    /// assert!(counts.is_relaxed());
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn relaxed(self, mode: Relaxed) -> Self
    where
        V: Aggregate,
    {
        match mode {
            Relaxed::Sum => {
                self.table.relaxed.store(true, Ordering::Relaxed);
                *self.table.aggregation.write() = Some(Aggregation::Sum);
            }
        }
        self
    }

    /// Registers how `sync_for!` merges workers' updates of the values (default:
    /// [`Aggregation::Average`]).
    pub fn aggregate_with(self, aggregation: Aggregation<V>) -> Self
    where
        V: Aggregate,
    {
        *self.table.aggregation.write() = Some(aggregation);
        self
    }

    /// Whether the map was declared relaxed.
    pub fn is_relaxed(&self) -> bool {
        self.table.relaxed.load(Ordering::Relaxed)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.table.len.load(Ordering::Acquire)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inserts `value` under `key`; returns the value it replaced.
    ///
    /// In a job of several ranks every rank inserts (driver code runs everywhere); adding
    /// a key needs no communication, replacing one returns the owner's value.
    pub fn insert(&self, key: K, value: V) -> Result<Option<V>> {
        let owner = self.table.owner(&key);
        super::persist::modified(&self.table);
        let old = self.table.write("DMap::insert")?.insert(key, value);
        if old.is_none() {
            self.table.changed_keys();
        }
        self.table.owners_copy("DMap::insert", owner, old)
    }

    /// A copy of the value under `key` (from the rank that owns it).
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        self.table.get_current("DMap::get", key)
    }

    /// Removes `key`; returns its value (the owner's).
    pub fn remove(&self, key: &K) -> Result<Option<V>> {
        let owner = self.table.owner(key);
        super::persist::modified(&self.table);
        let old = self.table.write("DMap::remove")?.remove(key);
        if old.is_some() {
            self.table.changed_keys();
        }
        self.table.owners_copy("DMap::remove", owner, old)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> Result<bool> {
        Ok(self
            .table
            .read("DMap::contains_key")?
            .index
            .contains_key(key))
    }

    /// All pairs, sorted by the stable hash of the key (the same order on every rank).
    ///
    /// Fails, on every rank, if that copy would be larger than the gather limit (by
    /// default half the machine's memory; see [`set_gather_limit`](super::set_gather_limit)).
    pub fn to_vec(&self) -> Result<Vec<(K, V)>> {
        self.table.gathered("DMap::to_vec")
    }

    /// Runs `f` on all entries, read-only and without a copy: look them up, index them
    /// (`m[&k]`) or iterate over them (in the map's order, the same on every rank). The
    /// cheap way to evaluate a model in driver code. In a job of several ranks every rank
    /// first brings the values it does not own up to date from their owners (a
    /// collective), and the map is locked meanwhile (an operator `f` calls on it fails as
    /// busy).
    ///
    /// ```
    /// use strads_ap_runtime::DMap;
    /// let counts = DMap::from_pairs(vec![("the".to_string(), 7u64), ("cat".to_string(), 2)])?;
    /// let the = "the".to_string();
    /// let (n, words) = counts.with_all(|c| (c[&the], c.values().sum::<u64>()))?;
    /// assert_eq!((n, words), (7, 9));
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn with_all<R>(&self, f: impl FnOnce(&MapEntries<'_, K, V>) -> R) -> Result<R> {
        Ok(f(&self.table.read_all("DMap::with_all")?))
    }

    /// Every entry, lent for reading in driver code: [`DMap::with_all`] without the
    /// closure. The result reads as a `HashMap` does (`m[&k]`, `m.get(&k)`, `m.len()`,
    /// `for (k, v) in &m`); every rank calls it (across ranks it first brings every value
    /// up to date from its owner), and while it lives a write to the map, or a loop over
    /// it, fails as busy: drop it first.
    pub fn read_all(&self) -> Result<MapEntries<'_, K, V>> {
        self.table.read_all("DMap::read_all")
    }

    /// Maps every entry with `map` and combines the results with `reduce` (associative
    /// and commutative). In a job of several ranks each rank reduces the entries it owns
    /// and the partial results are combined in rank order, so every rank gets the same
    /// value and only one value per rank moves. The order depends only on the map and the
    /// number of ranks, so repeated runs give the same bits.
    ///
    /// Fails with [`Error::Empty`] on an empty map.
    ///
    /// ```
    /// use strads_ap_runtime::DMap;
    /// let m = DMap::from_pairs((1..=4u32).map(|k| (k, f64::from(k))).collect())?;
    /// let squares = m.map_reduce(|_, v| v * v, |a, b| a + b)?;
    /// assert_eq!(squares, 30.0);
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn map_reduce<U, M, R>(&self, map: M, reduce: R) -> Result<U>
    where
        U: Element,
        M: Fn(&K, &V) -> U,
        R: Fn(U, U) -> U,
    {
        let op = "DMap::map_reduce";
        let partial = {
            let data = self.table.read(op)?;
            (self.table.own_entries(&data))
                .map(|(_, (k, v))| map(k, v))
                .reduce(&reduce)
        };
        super::gather::combine_in_rank_order(op, self.table.dist(op)?, partial, reduce)
    }

    /// A new map of the entries for which `keep` holds, in this map's order. In a job of
    /// several ranks each key's owner decides, and the ranks exchange only which entries
    /// stay. With checkpoints on, the result is checkpointed (see [`crate::checkpoint`]).
    ///
    /// ```
    /// use strads_ap_runtime::DMap;
    /// let m = DMap::from_pairs((0..10u32).map(|k| (k, k * k)).collect())?;
    /// let big = m.filter(|_, v| *v >= 50)?;
    /// assert_eq!(big.len(), 2);
    /// assert_eq!(big.get(&9)?, Some(81));
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    #[track_caller]
    pub fn filter<F: Fn(&K, &V) -> bool>(&self, keep: F) -> Result<DMap<K, V>> {
        let op = "DMap::filter";
        let table = MapTable::made_by_operator(op, || {
            let data = self.table.read(op)?;
            let kept: Vec<bool> = match self.table.dist(op)? {
                None => data.iter().map(|(k, v)| keep(k, v)).collect(),
                Some(comm) => {
                    let mine: Vec<u32> = (self.table.own_entries(&data))
                        .filter(|(_, (k, v))| keep(k, v))
                        .map(|(i, _)| i as u32)
                        .collect();
                    let mut kept = vec![false; data.len()];
                    for i in comm.allgather(mine)?.into_iter().flatten() {
                        match kept.get_mut(i as usize) {
                            Some(slot) => *slot = true,
                            None => {
                                return Err(Error::Transport(format!(
                                    "{op}: a rank kept entry {i} of map {}, which has {} \
                                     entries here (the ranks' maps diverged)",
                                    self.table.id,
                                    data.len()
                                )))
                            }
                        }
                    }
                    kept
                }
            };
            let pairs = data.iter().zip(kept).filter(|(_, keep)| *keep);
            Ok(MapTable::create(Entries::from_pairs(
                pairs.map(|((k, v), _)| (k.clone(), v.clone())),
            )))
        })?;
        Ok(DMap { table })
    }

    /// A new map with `f` applied to every value. With checkpoints on, the result is
    /// checkpointed (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn map_values<U: Element, F: Fn(&K, &V) -> U>(&self, f: F) -> Result<DMap<K, U>> {
        let op = "DMap::map_values";
        let table = MapTable::made_by_operator(op, || {
            let data = self.table.read(op)?;
            Ok(MapTable::create(Entries::from_pairs(
                data.iter().map(|(k, v)| (k.clone(), f(k, v))),
            )))
        })?;
        Ok(DMap { table })
    }

    /// Inner join on equal keys. With checkpoints on, the result is checkpointed (see
    /// [`crate::checkpoint`]).
    #[track_caller]
    pub fn join<W: Element>(&self, other: &DMap<K, W>) -> Result<DMap<K, (V, W)>>
    where
        (V, W): Element,
    {
        let op = "DMap::join";
        let table = MapTable::made_by_operator(op, || {
            let left = self.table.read(op)?;
            let out: Vec<(K, (V, W))> = other.with_read(op, |lookup| {
                left.iter()
                    .filter_map(|(k, v)| lookup.get(k).map(|w| (k.clone(), (v.clone(), w.clone()))))
                    .collect()
            })?;
            Ok(MapTable::create(Entries::from_pairs(out)))
        })?;
        Ok(DMap { table })
    }

    /// Writes the map to `path` (atomically). In a job of several ranks rank 0 writes it
    /// and every rank returns the same outcome.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let op = "DMap::save";
        save_pairs(
            op,
            self.table.dist(op)?,
            "DMap",
            path.as_ref(),
            &self.to_vec()?,
        )
    }

    /// Reads a map written by [`DMap::save`]. In a job of several ranks rank 0 reads the
    /// file and sends the pairs to the others. With checkpoints on, the map is
    /// checkpointed as an input (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let op = "DMap::load";
        let table = MapTable::made_alike(op, || {
            Ok(Entries::from_pairs(load_pairs(op, "DMap", path.as_ref())?))
        })?;
        Ok(DMap { table })
    }

    /// Makes every value current on this rank (a collective in a job of several ranks;
    /// nothing in a world of one).
    pub(crate) fn refresh(&self, op: &'static str) -> Result<()> {
        match self.table.dist(op)? {
            Some(comm) => self.table.refresh(op, comm),
            None => Ok(()),
        }
    }

    /// Runs `f` on the map's contents, holding its read lock.
    pub(crate) fn with_read<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Entries<K, V>) -> R,
    ) -> Result<R> {
        let data = self.table.read(op)?;
        Ok(f(&data))
    }

    #[doc(hidden)]
    pub fn __strads_capture(&self) -> MapRef<K, V> {
        MapRef {
            table: self.table.clone(),
        }
    }
}

/// The captured form of a [`DMap`] inside a task (serialisable as its table id).
pub struct MapRef<K, V> {
    pub(crate) table: Arc<MapTable<K, V>>,
}

impl<K, V> Clone for MapRef<K, V> {
    fn clone(&self) -> Self {
        MapRef {
            table: self.table.clone(),
        }
    }
}

impl<K, V> serde::Serialize for MapRef<K, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.table.id.serialize(s)
    }
}

impl<'de, K: MapKey, V: Element> serde::Deserialize<'de> for MapRef<K, V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let id = u64::deserialize(d)?;
        Ok(MapRef {
            table: lookup_table(id).map_err(serde::de::Error::custom)?,
        })
    }
}

/// A [`DMap`] inside a loop body, indexable like a `HashMap`: `m[&k]`, `m.get(&k)`,
/// `m.get_mut(&k)`, `m[&k] += ..` on keys that exist. `W` is the view of the values
/// (a [`VectorView`] when running, a [`RecordVectorView`] in reconnaissance).
pub struct MapView<'a, K, W> {
    index: &'a HashMap<K, u32, Stable>,
    values: W,
    name: &'static str,
}

impl<K: MapKey, V: Element> MapRef<K, V> {
    /// A view of the map in a loop body: its key index (from the binding or the recorder)
    /// and `values`, a view of its values of whatever kind the pass binds.
    #[inline(always)]
    fn view<'a, W>(&'a self, index: *const u8, values: W, name: &'static str) -> MapView<'a, K, W> {
        MapView {
            // SAFETY: the engine holds this map's lock for the whole operator (and
            // reconnaissance runs under the same lock) and stored a pointer to its key
            // index in the binding; nothing changes keys meanwhile.
            index: unsafe { &*(index as *const HashMap<K, u32, Stable>) },
            values,
            name,
        }
    }

    #[doc(hidden)]
    pub fn __strads_enter<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MapView<'a, K, VectorView<'a, V>> {
        let b = ctx.binding(self.table.id);
        self.view(b.index, VectorView::bind(b, name), name)
    }

    #[doc(hidden)]
    pub fn __strads_note<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MapView<'a, K, VectorView<'a, V, true>> {
        let b = ctx.binding(self.table.id);
        self.view(b.index, VectorView::bind(b, name), name)
    }

    #[doc(hidden)]
    pub fn __strads_lock<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MapView<'a, K, LockView<'a, V>> {
        let b = ctx.binding(self.table.id);
        self.view(b.index, LockView::bind(ctx, b, name), name)
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_direct<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MapView<'a, K, DirectView<'a, V>> {
        let b = ctx.binding(self.table.id);
        self.view(b.index, DirectView::bind(b, name), name)
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_window<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MapView<'a, K, DirectView<'a, V, true>> {
        let b = ctx.binding(self.table.id);
        self.view(b.index, DirectView::bind(b, name), name)
    }

    #[doc(hidden)]
    pub fn __strads_record<'a, R: Recording>(
        &'a self,
        rec: &'a R,
        name: &'static str,
    ) -> MapView<'a, K, RecordVectorView<'a, V, R::Writes>> {
        let rec = rec.recorder();
        let (_, _, _, index) = rec.table(self.table.id);
        self.view(
            index,
            RecordVectorView::bind(rec, self.table.id, name),
            name,
        )
    }
}

impl<K: MapKey, W: IndexMut<usize>> MapView<'_, K, W> {
    /// The value under `key`.
    pub fn get(&self, key: &K) -> Option<&W::Output> {
        let i = *self.index.get(key)?;
        Some(&self.values[i as usize])
    }

    /// The value under `key`, mutably (keys cannot be added inside a loop body).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut W::Output> {
        let i = *self.index.get(key)?;
        Some(&mut self.values[i as usize])
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    #[doc(hidden)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }
}

/// `pairs` in the order of their keys' [`stable_hash`], the order `to_vec` lists a map in
/// (a stable sort: pairs of one key keep their order), whatever order the collection they
/// come from has.
fn in_key_order<K: Hash, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Vec<(K, V)> {
    let mut pairs: Vec<(K, V)> = pairs.into_iter().collect();
    pairs.sort_by_cached_key(|(k, _)| stable_hash(k));
    pairs
}

/// `key` is not in map `table`. (Given the name, not the view, so that no call is handed
/// a view's address: see `RecordVectorView::note`.)
#[cold]
#[inline(never)]
fn missing<K: std::fmt::Debug>(table: &'static str, key: &K) -> ! {
    raise(Fault::MissingKey {
        table,
        key: format!("{key:?}"),
    })
}

impl<K, V: Clone, W: Writes> MapView<'_, K, RecordVectorView<'_, V, W>> {
    /// Starts a task (see `RecordVectorView::__strads_task`).
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_task(&mut self) {
        self.values.__strads_task();
    }
}

impl<K, V: Clone> MapView<'_, K, LockView<'_, V>> {
    /// Starts a task (see `LockView::__strads_task`).
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_task(&mut self) {
        self.values.__strads_task();
    }
}

impl<K: MapKey + std::fmt::Debug, W: IndexMut<usize>> Index<&K> for MapView<'_, K, W> {
    type Output = W::Output;
    fn index(&self, key: &K) -> &W::Output {
        match self.index.get(key) {
            Some(&i) => &self.values[i as usize],
            None => missing(self.name, key),
        }
    }
}

impl<K: MapKey + std::fmt::Debug, W: IndexMut<usize>> IndexMut<&K> for MapView<'_, K, W> {
    fn index_mut(&mut self, key: &K) -> &mut W::Output {
        match self.index.get(key) {
            Some(&i) => &mut self.values[i as usize],
            None => missing(self.name, key),
        }
    }
}

/// A distributed multimap: several values per key.
///
/// # Examples
/// ```
/// use strads_ap_runtime::DMultiMap;
/// let m = DMultiMap::new()?;
/// m.insert(1u32, "x".to_string())?;
/// m.insert(1u32, "y".to_string())?;
/// assert_eq!(m.get_all(&1)?, vec!["x".to_string(), "y".to_string()]);
/// assert_eq!(m.len()?, 2);
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
pub struct DMultiMap<K, V> {
    table: Arc<MapTable<K, Vec<V>>>,
}

/// Writes `pairs` to `path` as a snapshot of `kind` (atomically): rank 0 writes it and
/// every rank returns the same outcome.
fn save_pairs<K: MapKey, V: Element>(
    op: &'static str,
    comm: Option<&crate::cluster::collective::Comm>,
    kind: &str,
    path: &Path,
    pairs: &[(K, V)],
) -> Result<()> {
    super::snapshot::on_driver(comm, op, || {
        super::snapshot::save_snapshot(path, kind, pairs)
    })
}

/// Reads the pairs [`save_pairs`] wrote: rank 0 reads the file and sends them to the
/// others.
fn load_pairs<K: MapKey, V: Element>(
    op: &'static str,
    kind: &str,
    path: &Path,
) -> Result<Vec<(K, V)>> {
    let ctx = crate::cluster::here();
    let comm = match ctx.is_distributed() {
        true => Some(ctx.comm_for(op)?),
        false => None,
    };
    super::snapshot::on_driver(comm, op, || super::snapshot::load_snapshot(path, kind))
}

/// The entries of a multimap holding `pairs`: each key's values in the order given.
fn grouped<K: Eq + Hash + Clone, V>(pairs: Vec<(K, V)>) -> Entries<K, Vec<V>> {
    let mut entries: Entries<K, Vec<V>> = Entries::new();
    for (k, v) in pairs {
        match entries.get_mut(&k) {
            Some(list) => list.push(v),
            None => {
                entries.insert(k, vec![v]);
            }
        }
    }
    entries
}

impl<K, V> Clone for DMultiMap<K, V> {
    fn clone(&self) -> Self {
        DMultiMap {
            table: self.table.clone(),
        }
    }
}

impl<K: MapKey, V: Element> DMultiMap<K, V> {
    /// An empty multimap.
    pub fn new() -> Result<Self> {
        let table = MapTable::create(Entries::new());
        table.check_same("DMultiMap::new")?;
        Ok(DMultiMap { table })
    }

    /// A multimap holding `pairs`; values of one key keep their order.
    ///
    /// In a job of several ranks every rank passes the same pairs. With checkpoints on,
    /// the multimap is checkpointed as an input (see [`crate::checkpoint`]).
    #[track_caller]
    pub fn from_pairs(pairs: Vec<(K, V)>) -> Result<Self> {
        let op = "DMultiMap::from_pairs";
        let table = MapTable::made_alike(op, || Ok(grouped(pairs)))?;
        Ok(DMultiMap { table })
    }

    /// A multimap holding the lists of `map` (a `HashMap<K, Vec<V>>`, a `BTreeMap`, or
    /// any pairs of a key and its values), each list in its order; keys in the order of a
    /// fixed hash, as for [`DMap::from_map`], so that every run and every rank builds the
    /// same multimap from a `HashMap`.
    ///
    /// # Examples
    /// ```
    /// use std::collections::HashMap;
    /// use strads_ap_runtime::DMultiMap;
    /// let serial: HashMap<u32, Vec<u32>> = [(1, vec![2, 3]), (4, vec![5])].into();
    /// let in_links = DMultiMap::from_map(serial)?;
    /// assert_eq!(in_links.get_all(&1)?, vec![2, 3]);
    /// assert_eq!(in_links.keys_len(), 2);
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    #[track_caller]
    pub fn from_map(map: impl IntoIterator<Item = (K, Vec<V>)>) -> Result<Self> {
        let pairs = in_key_order(map)
            .into_iter()
            .flat_map(|(k, vs)| vs.into_iter().map(move |v| (k.clone(), v)))
            .collect();
        Self::from_pairs(pairs)
    }

    /// Removes `key` and returns its values, in insertion order (empty if none; in a job
    /// of several ranks, the owner's).
    pub fn remove(&self, key: &K) -> Result<Vec<V>> {
        let op = "DMultiMap::remove";
        let owner = self.table.owner(key);
        super::persist::modified(&self.table);
        let old = self.table.write(op)?.remove(key);
        if old.is_some() {
            self.table.changed_keys();
        }
        Ok(self.table.owners_copy(op, owner, old)?.unwrap_or_default())
    }

    /// All `(key, value)` pairs: keys sorted by their stable hash (the same order on
    /// every rank), each key's values in insertion order.
    ///
    /// Fails, on every rank, if that copy would be larger than the gather limit (see
    /// [`set_gather_limit`](super::set_gather_limit)).
    ///
    /// ```
    /// use strads_ap_runtime::DMultiMap;
    /// let m = DMultiMap::from_pairs(vec![(1u8, 'a'), (2, 'b'), (1, 'c')])?;
    /// let mut pairs = m.to_vec()?;
    /// pairs.sort_by_key(|(k, _)| *k); // a stable sort keeps each key's values in order
    /// assert_eq!(pairs, vec![(1, 'a'), (1, 'c'), (2, 'b')]);
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn to_vec(&self) -> Result<Vec<(K, V)>> {
        let lists = self.table.gathered("DMultiMap::to_vec")?;
        Ok(lists
            .into_iter()
            .flat_map(|(k, vs)| vs.into_iter().map(move |v| (k.clone(), v)))
            .collect())
    }

    /// Runs `f` on all entries (each key with its list of values), read-only and
    /// without a copy, as [`DMap::with_all`] does.
    ///
    /// ```
    /// use strads_ap_runtime::DMultiMap;
    /// let m = DMultiMap::from_pairs(vec![(1u8, 'a'), (2, 'b'), (1, 'c')])?;
    /// let ones = m.with_all(|m| m[&1].iter().collect::<String>())?;
    /// assert_eq!(ones, "ac");
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn with_all<R>(&self, f: impl FnOnce(&MapEntries<'_, K, Vec<V>>) -> R) -> Result<R> {
        Ok(f(&self.table.read_all("DMultiMap::with_all")?))
    }

    /// Every entry, lent for reading in driver code: [`DMultiMap::with_all`] without the
    /// closure. The result reads as a `HashMap` does (`m[&k]`, `m.get(&k)`, `m.len()`,
    /// `for (k, v) in &m`); every rank calls it (across ranks it first brings every value
    /// up to date from its owner), and while it lives a write to the map, or a loop over
    /// it, fails as busy: drop it first.
    pub fn read_all(&self) -> Result<MapEntries<'_, K, Vec<V>>> {
        self.table.read_all("DMultiMap::read_all")
    }

    /// Writes the multimap to `path` (atomically). In a job of several ranks rank 0 writes
    /// it and every rank returns the same outcome.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let op = "DMultiMap::save";
        save_pairs(
            op,
            self.table.dist(op)?,
            "DMultiMap",
            path.as_ref(),
            &self.to_vec()?,
        )
    }

    /// Reads a multimap written by [`DMultiMap::save`]. In a job of several ranks rank 0
    /// reads the file and sends the pairs to the others. With checkpoints on, the
    /// multimap is checkpointed as an input (see [`crate::checkpoint`]).
    ///
    /// ```
    /// use strads_ap_runtime::DMultiMap;
    /// let path = std::env::temp_dir().join(format!("doc-multimap-{}", std::process::id()));
    /// DMultiMap::from_pairs(vec![(1u8, 'a'), (1, 'c')])?.save(&path)?;
    /// let back: DMultiMap<u8, char> = DMultiMap::load(&path)?;
    /// assert_eq!(back.get_all(&1)?, vec!['a', 'c']);
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    #[track_caller]
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let op = "DMultiMap::load";
        let table = MapTable::made_alike(op, || {
            Ok(grouped(load_pairs(op, "DMultiMap", path.as_ref())?))
        })?;
        Ok(DMultiMap { table })
    }

    /// Adds `value` under `key`, after the values already there.
    pub fn insert(&self, key: K, value: V) -> Result<()> {
        super::persist::modified(&self.table);
        let mut entries = self.table.write("DMultiMap::insert")?;
        match entries.get_mut(&key) {
            Some(list) => list.push(value),
            None => {
                entries.insert(key, vec![value]);
                self.table.changed_keys();
            }
        }
        Ok(())
    }

    /// Copies of all values under `key`, in insertion order (empty if none).
    pub fn get_all(&self, key: &K) -> Result<Vec<V>> {
        Ok(self
            .table
            .get_current("DMultiMap::get_all", key)?
            .unwrap_or_default())
    }

    /// Total number of values (summed over the owners in a job of several ranks).
    pub fn len(&self) -> Result<usize> {
        let op = "DMultiMap::len";
        let mine: usize = {
            let data = self.table.read(op)?;
            (self.table.own_entries(&data))
                .map(|(_, (_, v))| v.len())
                .sum()
        };
        match self.table.dist(op)? {
            None => Ok(mine),
            Some(comm) => comm.allreduce(mine, |a, b| a.saturating_add(b)),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Number of distinct keys.
    pub fn keys_len(&self) -> usize {
        self.table.len.load(Ordering::Acquire)
    }

    /// The table id.
    pub fn id(&self) -> u64 {
        self.table.id
    }

    #[doc(hidden)]
    pub fn __strads_capture(&self) -> MultiMapRef<K, V> {
        MultiMapRef(MapRef {
            table: self.table.clone(),
        })
    }
}

/// The captured form of a [`DMultiMap`] inside a task: the map of value lists.
pub struct MultiMapRef<K, V>(pub(crate) MapRef<K, Vec<V>>);

impl<K, V> Clone for MultiMapRef<K, V> {
    fn clone(&self) -> Self {
        MultiMapRef(self.0.clone())
    }
}

impl<K, V> serde::Serialize for MultiMapRef<K, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, K: MapKey, V: Element> serde::Deserialize<'de> for MultiMapRef<K, V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        MapRef::deserialize(d).map(MultiMapRef)
    }
}

/// A [`DMultiMap`] inside a loop body: `get_all(&k)` as a slice; `get_mut(&k)` gives the
/// list of an existing key to change in place.
pub struct MultiMapView<'a, K, W>(MapView<'a, K, W>);

impl<K, V: Clone, W: Writes> MultiMapView<'_, K, RecordVectorView<'_, Vec<V>, W>> {
    /// Starts a task (see `RecordVectorView::__strads_task`).
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_task(&mut self) {
        self.0.__strads_task();
    }
}

impl<K, V: Clone> MultiMapView<'_, K, LockView<'_, Vec<V>>> {
    /// Starts a task (see `LockView::__strads_task`).
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_task(&mut self) {
        self.0.__strads_task();
    }
}

impl<K: MapKey, V: Element> MultiMapRef<K, V> {
    #[doc(hidden)]
    pub fn __strads_enter<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MultiMapView<'a, K, VectorView<'a, Vec<V>>> {
        MultiMapView(self.0.__strads_enter(ctx, name))
    }

    #[doc(hidden)]
    pub fn __strads_note<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MultiMapView<'a, K, VectorView<'a, Vec<V>, true>> {
        MultiMapView(self.0.__strads_note(ctx, name))
    }

    #[doc(hidden)]
    pub fn __strads_lock<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MultiMapView<'a, K, LockView<'a, Vec<V>>> {
        MultiMapView(self.0.__strads_lock(ctx, name))
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_direct<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MultiMapView<'a, K, DirectView<'a, Vec<V>>> {
        MultiMapView(self.0.__strads_direct(ctx, name))
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_window<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MultiMapView<'a, K, DirectView<'a, Vec<V>, true>> {
        MultiMapView(self.0.__strads_window(ctx, name))
    }

    #[doc(hidden)]
    pub fn __strads_record<'a, R: Recording>(
        &'a self,
        rec: &'a R,
        name: &'static str,
    ) -> MultiMapView<'a, K, RecordVectorView<'a, Vec<V>, R::Writes>> {
        MultiMapView(self.0.__strads_record(rec, name))
    }
}

impl<K: MapKey, V, W: IndexMut<usize, Output = Vec<V>>> MultiMapView<'_, K, W> {
    /// All values under `key` (empty if none).
    pub fn get_all(&self, key: &K) -> &[V] {
        self.0.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The values under `key`, or `None` if it has none: what `get` on the serial
    /// program's `HashMap<K, Vec<V>>` returns, so its body compiles unchanged.
    pub fn get(&self, key: &K) -> Option<&Vec<V>> {
        self.0.get(key)
    }

    /// The values under an existing `key`, to change in place.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut Vec<V>> {
        self.0.get_mut(key)
    }

    /// Whether `key` has values.
    pub fn contains_key(&self, key: &K) -> bool {
        self.0.contains_key(key)
    }

    /// Number of distinct keys.
    pub fn keys_len(&self) -> usize {
        self.0.len()
    }

    #[doc(hidden)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }
}

/// `m[&k]`: the values under `key`, as indexing the serial program's `HashMap<K, Vec<V>>`
/// gives them; a missing key fails the call with an error naming the map and the key.
impl<K: MapKey + std::fmt::Debug, V, W: IndexMut<usize, Output = Vec<V>>> Index<&K>
    for MultiMapView<'_, K, W>
{
    type Output = Vec<V>;
    fn index(&self, key: &K) -> &Vec<V> {
        &self.0[key]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::simulate;

    /// A map checkpointed by a job of one size loads on a job of another: every rank kept
    /// every key, but only its own keys' values were current, and each value is taken from
    /// the part of its old owner.
    #[test]
    fn a_snapshot_repartitions_to_another_number_of_ranks() {
        let pairs =
            || -> Vec<(String, u64)> { (0..40u64).map(|k| (format!("key {k}"), k * 10)).collect() };
        for (from, to) in [(3, 2), (2, 3), (1, 2), (3, 1)] {
            let parts = simulate(from, || {
                let m = DMap::from_pairs(pairs()).unwrap();
                // What a rank holds for keys it does not own may be stale.
                {
                    let mut data = m.table.data.write();
                    let Entries { keys, values, .. } = &mut *data;
                    for (k, v) in keys.iter().zip(values.iter_mut()) {
                        if m.table.owner(k) != m.table.ctx.rank() {
                            *v = u64::MAX;
                        }
                    }
                }
                let mut out = Vec::new();
                m.table.snapshot_into(&mut out).unwrap();
                out
            });
            let got = simulate(to, || {
                let m =
                    DMap::from_pairs(pairs().into_iter().map(|(k, _)| (k, 0)).collect()).unwrap();
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                m.table.restore_parts("test", &parts).unwrap();
                let data = m.table.data.read();
                data.keys
                    .iter()
                    .cloned()
                    .zip(data.values.iter().copied())
                    .collect::<Vec<_>>()
            });
            for (rank, entries) in got.into_iter().enumerate() {
                assert_eq!(entries, pairs(), "{from} ranks to {to}, rank {rank}");
            }
        }
    }
}
