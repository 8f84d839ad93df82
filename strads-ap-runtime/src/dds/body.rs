//! What a loop body may capture and do with what it captures, checked at compile time
//! with errors that say what to do instead:
//!
//! * [`Capturable`]: the values a body may capture (DDS handles by handle, plain
//!   serialisable values by copy), and [`capture`], which the macros call for each one.
//!   The copies a body binds are made by the `*Fallback` traits, bound by `Capturable`
//!   so that a value that cannot be captured is refused by the same error.
//! * [`MapMethods`]: `entry`, `insert` and `remove` exist on a map inside a body only to
//!   be refused with an error that says what to do (a body reads and updates the values
//!   of keys that exist; keys are inserted in driver code before the loop).

use std::ops::IndexMut;

use super::map::{MapKey, MapView};
use super::{DMap, DMultiMap, DVector, Element, MapRef, MultiMapRef, VectorRef};

/// A key type, refused as a key to insert inside a loop body (no type implements this).
#[diagnostic::on_unimplemented(
    message = "keys cannot be added to or removed from a `DMap` inside a loop body",
    label = "a loop body can only read and update the values of keys the map already has",
    note = "insert every key in driver code before the loop (`DMap::from_pairs`, \
            `DMap::insert`), then update values in the body: `m[&k] += ..`, \
            `m.get_mut(&k)`; `m.contains_key(&k)` says whether a key is there",
    note = "to collect new keys, push them to a list of a `DMultiMap` under a key that \
            exists (its lists can grow in a body), and insert them after the loop"
)]
pub trait InsertedBeforeTheLoop {}

/// An entry of [`MapMethods::entry`], which no loop body can reach: it type-checks the
/// usual `entry(k).or_insert(v)` chains so that the only error is the one that says why.
pub struct Entry<'a, V>(&'a mut V);

impl<'a, V> Entry<'a, V> {
    /// Never runs (see [`InsertedBeforeTheLoop`]).
    pub fn or_insert(self, _default: V) -> &'a mut V {
        self.0
    }
    /// Never runs (see [`InsertedBeforeTheLoop`]).
    pub fn or_insert_with(self, _default: impl FnOnce() -> V) -> &'a mut V {
        self.0
    }
    /// Never runs (see [`InsertedBeforeTheLoop`]).
    pub fn or_default(self) -> &'a mut V {
        self.0
    }
    /// Never runs (see [`InsertedBeforeTheLoop`]).
    pub fn and_modify(self, _f: impl FnOnce(&mut V)) -> Self {
        self
    }
}

/// `HashMap` methods that change a map's keys, refused inside loop bodies with an error
/// that says what to do (the macros bring this trait into scope in every body).
pub trait MapMethods<K, V> {
    /// Refused: keys are inserted before the loop.
    fn entry(&mut self, key: K) -> Entry<'_, V>
    where
        K: InsertedBeforeTheLoop;
    /// Refused: keys are inserted before the loop.
    fn insert(&mut self, key: K, value: V) -> Option<V>
    where
        K: InsertedBeforeTheLoop;
    /// Refused: keys are removed after the loop.
    fn remove(&mut self, key: &K) -> Option<V>
    where
        K: InsertedBeforeTheLoop;
}

impl<K: MapKey, W: IndexMut<usize>> MapMethods<K, W::Output> for MapView<'_, K, W>
where
    W::Output: Sized,
{
    fn entry(&mut self, _key: K) -> Entry<'_, W::Output>
    where
        K: InsertedBeforeTheLoop,
    {
        unreachable!("no key type implements InsertedBeforeTheLoop")
    }
    fn insert(&mut self, _key: K, _value: W::Output) -> Option<W::Output>
    where
        K: InsertedBeforeTheLoop,
    {
        unreachable!("no key type implements InsertedBeforeTheLoop")
    }
    fn remove(&mut self, _key: &K) -> Option<W::Output>
    where
        K: InsertedBeforeTheLoop,
    {
        unreachable!("no key type implements InsertedBeforeTheLoop")
    }
}

pub use super::{DirectFallback, EnterFallback, LockFallback, NoteFallback, RecordFallback};

/// Values a loop body may capture, and the form the task stores them in.
#[diagnostic::on_unimplemented(
    message = "a loop body cannot capture a value of type `{Self}`",
    label = "captured by the loop body here",
    note = "captured values are copied to every worker and rank, so they must be owned \
            (not a reference such as `&Vec<T>`: capture the value itself, or an `Arc` of \
            it) and Serialize + Deserialize + Clone + Send + Sync + 'static; DDS handles \
            (DVector, DMap, DMultiMap) are captured by handle",
    note = "a DDS inside another value (a nested DDS, e.g. Vec<DVector<f32>>) is not \
            supported: capture each DDS as its own variable",
    note = "a plain value is copied into every group of tasks a call runs: share a large \
            read-only one as an `Arc` (`let table = Arc::new(table);` before the loop), or keep it \
            in a DVector made once, before the loops",
    note = "a random-number generator cannot be captured and advanced: seed one inside the \
            body from the seed, the pass and the loop index (the manual's \"Random numbers\")"
)]
pub trait Capturable {
    /// What the task struct stores.
    type Captured: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static;
    /// Makes the stored form.
    fn __strads_capture_value(&self) -> Self::Captured;
    /// A copy of a plain value, for the bodies' bindings of plain captures (DDS handles
    /// bind views through their own methods and never call this).
    fn __strads_copy(&self) -> Self
    where
        Self: Sized,
    {
        unreachable!("only plain captured values are copied into a body")
    }
}

impl<X> Capturable for X
where
    X: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    type Captured = X;
    fn __strads_capture_value(&self) -> X {
        self.clone()
    }
    #[inline(always)]
    fn __strads_copy(&self) -> X {
        self.clone()
    }
}

impl<T: Element> Capturable for DVector<T> {
    type Captured = VectorRef<T>;
    fn __strads_capture_value(&self) -> VectorRef<T> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for DMap<K, V> {
    type Captured = MapRef<K, V>;
    fn __strads_capture_value(&self) -> MapRef<K, V> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for DMultiMap<K, V> {
    type Captured = MultiMapRef<K, V>;
    fn __strads_capture_value(&self) -> MultiMapRef<K, V> {
        self.__strads_capture()
    }
}

/// A borrowed DVector (a function's `&DVector` parameter) is captured by handle, like
/// the DVector itself.
impl<T: Element> Capturable for &DVector<T> {
    type Captured = VectorRef<T>;
    fn __strads_capture_value(&self) -> VectorRef<T> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for &DMap<K, V> {
    type Captured = MapRef<K, V>;
    fn __strads_capture_value(&self) -> MapRef<K, V> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for &DMultiMap<K, V> {
    type Captured = MultiMapRef<K, V>;
    fn __strads_capture_value(&self) -> MultiMapRef<K, V> {
        self.__strads_capture()
    }
}

/// Marker with no implementations: names the nested-DDS mistake in the error.
#[diagnostic::on_unimplemented(
    message = "a loop body cannot capture `{Self}`: a collection of DDS handles is a nested DDS",
    label = "captured by the loop body here",
    note = "nested DDSs are not supported: capture each DVector/DMap as its own variable, or \
            keep the rows in one DVector whose elements are Vecs"
)]
pub trait NestedDdsIsNotCapturable {}

impl<T: Element> Capturable for Vec<DVector<T>>
where
    Vec<DVector<T>>: NestedDdsIsNotCapturable,
{
    type Captured = ();
    fn __strads_capture_value(&self) {}
}

/// Captures a variable for a task.
#[inline]
pub fn capture<X: Capturable + ?Sized>(x: &X) -> X::Captured {
    x.__strads_capture_value()
}
