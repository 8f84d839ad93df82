//! [`DMap`] and [`DMultiMap`]: distributed hash maps.
//!
//! Keys are hash-partitioned across ranks with a hash that is the same in every process.
//! Inside loop bodies maps are read-only in this version ([`MapView`], [`MultiMapView`]):
//! index them, `get`, `contains_key`; update them in driver code between operators.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash};
use std::marker::PhantomData;
use std::ops::Index;
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::table::{lookup_table, register_table, TableHandle, TableLock};
use super::Element;
use crate::cluster::context;
use crate::engine::ctx::{raise, ExecCtx, Fault};
use crate::error::{Error, Result};
use crate::recon::Recorder;
use crate::util::{stable_hash, StableHasher};

pub(crate) type Stable = BuildHasherDefault<StableHasher>;

/// Storage of one map table on this rank.
pub(crate) struct MapTable<K, V> {
    id: u64,
    data: RwLock<HashMap<K, V, Stable>>,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> MapTable<K, V> {
    fn create(data: HashMap<K, V, Stable>) -> Arc<Self> {
        let id = context().new_table_id();
        let table = Arc::new(MapTable {
            id,
            data: RwLock::new(data),
        });
        register_table(id, &table);
        table
    }

    fn read(&self, op: &'static str) -> Result<RwLockReadGuard<'_, HashMap<K, V, Stable>>> {
        match self.data.try_read() {
            Ok(g) => Ok(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(Error::Busy { op }),
        }
    }

    fn write(&self, op: &'static str) -> Result<RwLockWriteGuard<'_, HashMap<K, V, Stable>>> {
        match self.data.try_write() {
            Ok(g) => Ok(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(Error::Busy { op }),
        }
    }
}

struct MapLock<'a, K, V>(RwLockReadGuard<'a, HashMap<K, V, Stable>>);

impl<K, V> TableLock for MapLock<'_, K, V> {
    fn ptr(&mut self) -> *mut u8 {
        &*self.0 as *const HashMap<K, V, Stable> as *mut u8
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> TableHandle for MapTable<K, V> {
    fn id(&self) -> u64 {
        self.id
    }
    fn key_space(&self) -> usize {
        0
    }
    fn is_relaxed(&self) -> bool {
        false
    }
    fn elem_size(&self) -> usize {
        0
    }
    fn lock<'a>(&'a self, op: &'static str) -> Result<Box<dyn TableLock + 'a>> {
        Ok(Box::new(MapLock(self.read(op)?)))
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
/// assert_eq!(m.len()?, 2);
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
        Ok(DMap {
            table: MapTable::create(HashMap::default()),
        })
    }

    /// A map holding `pairs` (a later pair replaces an earlier one with the same key).
    pub fn from_pairs(pairs: Vec<(K, V)>) -> Result<Self> {
        Ok(DMap {
            table: MapTable::create(pairs.into_iter().collect()),
        })
    }

    /// The table id.
    pub fn id(&self) -> u64 {
        self.table.id
    }

    /// Number of keys.
    pub fn len(&self) -> Result<usize> {
        Ok(self.table.read("DMap::len")?.len())
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Inserts `value` under `key`; returns the value it replaced.
    pub fn insert(&self, key: K, value: V) -> Result<Option<V>> {
        Ok(self.table.write("DMap::insert")?.insert(key, value))
    }

    /// A copy of the value under `key`.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        Ok(self.table.read("DMap::get")?.get(key).cloned())
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, key: &K) -> Result<Option<V>> {
        Ok(self.table.write("DMap::remove")?.remove(key))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> Result<bool> {
        Ok(self.table.read("DMap::contains_key")?.contains_key(key))
    }

    /// All pairs, sorted by the stable hash of the key (the same order on every rank).
    pub fn to_vec(&self) -> Result<Vec<(K, V)>> {
        let data = self.table.read("DMap::to_vec")?;
        let mut pairs: Vec<(K, V)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        pairs.sort_by_cached_key(|(k, _)| stable_hash(k));
        Ok(pairs)
    }

    /// A new map with `f` applied to every value.
    pub fn map_values<U: Element, F: Fn(&K, &V) -> U>(&self, f: F) -> Result<DMap<K, U>> {
        let data = self.table.read("DMap::map_values")?;
        Ok(DMap {
            table: MapTable::create(data.iter().map(|(k, v)| (k.clone(), f(k, v))).collect()),
        })
    }

    /// Inner join on equal keys.
    pub fn join<W: Element>(&self, other: &DMap<K, W>) -> Result<DMap<K, (V, W)>>
    where
        (V, W): Element,
    {
        let left = self.table.read("DMap::join")?;
        let out = other.with_read("DMap::join", |lookup| {
            left.iter()
                .filter_map(|(k, v)| lookup.get(k).map(|w| (k.clone(), (v.clone(), w.clone()))))
                .collect()
        })?;
        Ok(DMap {
            table: MapTable::create(out),
        })
    }

    /// Writes the map to `path` (atomically).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        super::io::save_snapshot(path.as_ref(), "DMap", &self.to_vec()?)
    }

    /// Reads a map written by [`DMap::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let pairs: Vec<(K, V)> = super::io::load_snapshot(path.as_ref(), "DMap")?;
        Self::from_pairs(pairs)
    }

    /// Runs `f` on the map's contents, holding its read lock.
    pub(crate) fn with_read<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&HashMap<K, V, Stable>) -> R,
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

/// A [`DMap`] inside a loop body: read-only, indexable like a `HashMap`.
pub struct MapView<'a, K, V> {
    map: &'a HashMap<K, V, Stable>,
    rec: Option<(&'a Recorder, usize)>,
    name: &'static str,
    _p: PhantomData<&'a ()>,
}

impl<K: MapKey, V: Element> MapRef<K, V> {
    #[doc(hidden)]
    pub fn __strads_enter<'a>(&'a self, ctx: &'a ExecCtx, name: &'static str) -> MapView<'a, K, V> {
        let b = ctx.binding(self.table.id);
        MapView {
            // SAFETY: the engine holds this map's read lock for the whole operator and
            // stored a pointer to the locked HashMap in the binding.
            map: unsafe { &*(b.ptr as *const HashMap<K, V, Stable>) },
            rec: None,
            name,
            _p: PhantomData,
        }
    }

    #[doc(hidden)]
    pub fn __strads_record<'a>(
        &'a self,
        rec: &'a Recorder,
        name: &'static str,
    ) -> MapView<'a, K, V> {
        let (slot, ptr, _) = rec.table(self.table.id);
        MapView {
            // SAFETY: as in `__strads_enter`; reconnaissance runs under the same lock.
            map: unsafe { &*(ptr as *const HashMap<K, V, Stable>) },
            rec: Some((rec, slot)),
            name,
            _p: PhantomData,
        }
    }
}

impl<K: MapKey, V> MapView<'_, K, V> {
    fn log(&self, key: &K) {
        if let Some((rec, slot)) = self.rec {
            rec.log(slot, stable_hash(key), false);
        }
    }

    /// The value under `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.log(key);
        self.map.get(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.log(key);
        self.map.contains_key(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    #[doc(hidden)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }
}

impl<K: MapKey + std::fmt::Debug, V> Index<&K> for MapView<'_, K, V> {
    type Output = V;
    fn index(&self, key: &K) -> &V {
        match self.get(key) {
            Some(v) => v,
            None => raise(Fault::MissingKey {
                table: self.name,
                key: format!("{key:?}"),
            }),
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
        Ok(DMultiMap {
            table: MapTable::create(HashMap::default()),
        })
    }

    /// A multimap holding `pairs`; values of one key keep their order.
    pub fn from_pairs(pairs: Vec<(K, V)>) -> Result<Self> {
        let mut map: HashMap<K, Vec<V>, Stable> = HashMap::default();
        for (k, v) in pairs {
            map.entry(k).or_default().push(v);
        }
        Ok(DMultiMap {
            table: MapTable::create(map),
        })
    }

    /// Adds `value` under `key`, after the values already there.
    pub fn insert(&self, key: K, value: V) -> Result<()> {
        self.table
            .write("DMultiMap::insert")?
            .entry(key)
            .or_default()
            .push(value);
        Ok(())
    }

    /// Copies of all values under `key`, in insertion order (empty if none).
    pub fn get_all(&self, key: &K) -> Result<Vec<V>> {
        Ok(self
            .table
            .read("DMultiMap::get_all")?
            .get(key)
            .cloned()
            .unwrap_or_default())
    }

    /// Total number of values.
    pub fn len(&self) -> Result<usize> {
        Ok(self
            .table
            .read("DMultiMap::len")?
            .values()
            .map(Vec::len)
            .sum())
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Number of distinct keys.
    pub fn keys_len(&self) -> Result<usize> {
        Ok(self.table.read("DMultiMap::keys_len")?.len())
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

/// A [`DMultiMap`] inside a loop body: read-only.
pub struct MultiMapView<'a, K, V> {
    inner: MapView<'a, K, Vec<V>>,
}

impl<K: MapKey, V: Element> MultiMapRef<K, V> {
    #[doc(hidden)]
    pub fn __strads_enter<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> MultiMapView<'a, K, V> {
        MultiMapView {
            inner: self.0.__strads_enter(ctx, name),
        }
    }

    #[doc(hidden)]
    pub fn __strads_record<'a>(
        &'a self,
        rec: &'a Recorder,
        name: &'static str,
    ) -> MultiMapView<'a, K, V> {
        MultiMapView {
            inner: self.0.__strads_record(rec, name),
        }
    }
}

impl<K: MapKey, V> MultiMapView<'_, K, V> {
    /// All values under `key` (empty if none).
    pub fn get_all(&self, key: &K) -> &[V] {
        self.inner.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether `key` has values.
    pub fn contains_key(&self, key: &K) -> bool {
        self.inner.contains_key(key)
    }

    /// Number of distinct keys.
    pub fn keys_len(&self) -> usize {
        self.inner.len()
    }

    #[doc(hidden)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }
}
