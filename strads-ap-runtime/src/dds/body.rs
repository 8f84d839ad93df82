//! What a loop body may not do with a captured [`DMap`](super::DMap), said at compile
//! time: `entry`, `insert` and `remove` exist on a map inside a body only to be refused
//! with an error that says what to do instead (a body reads and updates the values of
//! keys that exist; keys are inserted in driver code before the loop).

use std::ops::IndexMut;

use super::map::{MapKey, MapView};

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
