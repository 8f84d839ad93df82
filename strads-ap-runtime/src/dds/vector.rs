//! [`DVector`]: a distributed vector.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rayon::prelude::*;

use super::aggregate::{Aggregate, Aggregation};
use super::map::DMap;
use super::table::{lookup_table, VectorTable};
use super::Element;
use crate::cluster::context;
use crate::error::{Error, Result};

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
    /// Each worker keeps a replica; replicas' deltas are summed into the table at
    /// sub-round ends.
    Sum,
}

impl<T: Element> DVector<T> {
    pub(crate) fn from_data(data: Vec<T>) -> Self {
        let id = context().new_table_id();
        DVector {
            table: VectorTable::new(id, data),
        }
    }

    /// A DVector of `len` elements, element `i` being `f(i)`; built in parallel.
    pub fn from_fn<F>(len: usize, f: F) -> Result<Self>
    where
        F: Fn(usize) -> T + Send + Sync,
    {
        crate::cluster::local_only("DVector::from_fn")?;
        let threads = context().config().threads;
        let data = if threads == 1 {
            // On the calling thread: its allocator arena is the one the serial program
            // would use, which keeps rows allocated here close together.
            (0..len).map(&f).collect()
        } else {
            context()
                .pool(threads)
                .install(|| (0..len).into_par_iter().map(&f).collect())
        };
        Ok(Self::from_data(data))
    }

    /// A DVector holding the elements of `v`.
    pub fn from_vec(v: Vec<T>) -> Result<Self> {
        crate::cluster::local_only("DVector::from_vec")?;
        Ok(Self::from_data(v))
    }

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

    /// A copy of element `i`.
    pub fn get(&self, i: usize) -> Result<T> {
        let data = self.table.read("DVector::get")?;
        data.get(i).cloned().ok_or(Error::IndexOutOfBounds {
            op: "DVector::get",
            index: i,
            len: data.len(),
        })
    }

    /// Replaces element `i`.
    pub fn set(&self, i: usize, value: T) -> Result<()> {
        let mut data = self.table.write("DVector::set")?;
        let len = data.len();
        let slot = data.get_mut(i).ok_or(Error::IndexOutOfBounds {
            op: "DVector::set",
            index: i,
            len,
        })?;
        *slot = value;
        Ok(())
    }

    /// All elements, in order, as a `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.table.read("DVector::to_vec")?.clone())
    }

    /// Runs `f` on all elements, read-only, without copying them in a world of one (the
    /// cheap way to evaluate a model in driver code).
    ///
    /// ```
    /// use strads_ap_runtime::DVector;
    /// let w = DVector::from_fn(3, |i| vec![i as f32; 2])?;
    /// let norm: f32 = w.with_all(|rows| rows.iter().flatten().map(|x| x * x).sum())?;
    /// assert_eq!(norm, 0.0 + 2.0 + 8.0);
    /// # Ok::<(), strads_ap_runtime::Error>(())
    /// ```
    pub fn with_all<R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        let data = self.table.read("DVector::with_all")?;
        Ok(f(&data))
    }

    /// An iterator over copies of the elements (a snapshot taken now).
    pub fn iter(&self) -> Result<std::vec::IntoIter<T>> {
        Ok(self.to_vec()?.into_iter())
    }

    /// A new DVector with `f` applied to every element (in parallel).
    pub fn map<U, F>(&self, f: F) -> Result<DVector<U>>
    where
        U: Element,
        F: Fn(&T) -> U + Send + Sync,
    {
        let data = self.table.read("DVector::map")?;
        let out = self.install(|| data.par_iter().map(&f).collect());
        Ok(DVector::from_data(out))
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

    /// Maps every element with `map` and combines the results with `reduce`.
    ///
    /// Fails with [`Error::Empty`] on an empty DVector.
    pub fn map_reduce<U, M, R>(&self, map: M, reduce: R) -> Result<U>
    where
        U: Send,
        M: Fn(&T) -> U + Send + Sync,
        R: Fn(U, U) -> U + Send + Sync,
    {
        let data = self.table.read("DVector::map_reduce")?;
        self.install(|| data.par_iter().map(&map).reduce_with(&reduce))
            .ok_or(Error::Empty {
                op: "DVector::map_reduce",
            })
    }

    /// Applies `f` to every element in place, with its index (in parallel).
    pub fn transform<F>(&self, f: F) -> Result<()>
    where
        F: Fn(usize, &mut T) + Send + Sync,
    {
        let mut guard = self.table.write("DVector::transform")?;
        let data: &mut Vec<T> = &mut guard;
        self.install(|| data.par_iter_mut().enumerate().for_each(|(i, x)| f(i, x)));
        Ok(())
    }

    /// A new DVector of the elements for which `keep` is true, in order.
    pub fn filter<F>(&self, keep: F) -> Result<DVector<T>>
    where
        F: Fn(&T) -> bool + Send + Sync,
    {
        let data = self.table.read("DVector::filter")?;
        let out = self.install(|| data.par_iter().filter(|x| keep(x)).cloned().collect());
        Ok(DVector::from_data(out))
    }

    /// Inner join with a map: each element whose key (by `key`) is in `map` is paired with
    /// a copy of the map's value; elements without a match are dropped. Order is kept.
    pub fn join<K, V, F>(&self, map: &DMap<K, V>, key: F) -> Result<DVector<(T, V)>>
    where
        K: Element + Eq + std::hash::Hash,
        V: Element,
        (T, V): Element,
        F: Fn(&T) -> K + Send + Sync,
    {
        let data = self.table.read("DVector::join")?;
        let out = map.with_read("DVector::join", |lookup| {
            self.install(|| {
                data.par_iter()
                    .filter_map(|x| lookup.get(&key(x)).map(|v| (x.clone(), v.clone())))
                    .collect()
            })
        })?;
        Ok(DVector::from_data(out))
    }

    /// Writes the elements to `path` (atomically: a temporary file, fsync, rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let data = self.table.read("DVector::save")?;
        super::io::save_snapshot(path.as_ref(), "DVector", &data)
    }

    /// Reads a DVector written by [`DVector::save`]; checks the element type and checksum.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let data: Vec<T> = super::io::load_snapshot(path.as_ref(), "DVector")?;
        Ok(Self::from_data(data))
    }

    /// Declares the table relaxed: `async_for!` ignores its conflicts and merges workers'
    /// updates by summing their deltas at sub-round ends (e.g. LDA's topic totals).
    pub fn relaxed(self, mode: Relaxed) -> Self
    where
        T: Aggregate,
    {
        match mode {
            Relaxed::Sum => {
                self.table.relaxed.store(true, Ordering::Relaxed);
                *self
                    .table
                    .aggregation
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = Some(Aggregation::Sum);
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
        *self
            .table
            .aggregation
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(aggregation);
        self
    }

    /// Whether the table was declared relaxed.
    pub fn is_relaxed(&self) -> bool {
        self.table.relaxed.load(Ordering::Relaxed)
    }

    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        context().pool(context().config().threads).install(f)
    }

    /// The serialisable handle a loop body captures.
    #[doc(hidden)]
    pub fn __strads_capture(&self) -> VectorRef<T> {
        VectorRef {
            table: self.table.clone(),
        }
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
