//! Hybrid workers' bookkeeping: which keys each worker wrote and pushed, which it must
//! refresh, and a lock per stripe of elements so that workers merging different parts of
//! a table do not wait for each other.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::access::Dirty;
use crate::dds::table::{Merger, Replica};

/// Tables of at most this many elements are pushed whole by Hybrid workers (see
/// [`Tracked::whole`]): a push then costs at most this many elements' deltas.
pub(super) const WHOLE_KEYS: usize = 256;

/// A Hybrid worker's bookkeeping for one replica when there is no reconnaissance: the
/// keys it wrote since its last push (noted by its views), how much of the call's push log
/// it has caught up with (a worker that starts late replays what others pushed meanwhile;
/// refreshing is idempotent), and which keys it refreshed for the current mini-batch (a
/// key others pushed several times is refreshed once).
pub(super) struct Tracked {
    /// Owned (from `Box::into_raw`, freed on drop); a raw pointer rather than a field so
    /// that the views' copies of it stay valid while the worker holds `&mut Tracked`.
    pub dirty: *mut Dirty,
    seen: usize,
    stamps: Vec<u32>,
    /// The keys to refresh before the current mini-batch (kept to reuse its buffer).
    fresh: Vec<usize>,
    /// A small table pushed whole (see [`Tracked::whole`]): the views note nothing, and
    /// every key counts as written.
    whole: bool,
    /// Pushed whole and merged without locks (see [`Merger::lock_free`]).
    lock_free: bool,
    /// Pushed whole under the table's one lock (see [`Tracked::bulk`]).
    bulk: bool,
    /// Keys pushed by noted writes, and pushes: how densely the mini-batches write the
    /// table (see `Minibatches::learn_density`).
    pub pushed_keys: u64,
    pub pushes: u64,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // SAFETY: `dirty` came from `Box::into_raw` in `new` and is freed only here; the
        // views that copied it live no longer than the worker's loop, which owns `self`.
        drop(unsafe { Box::from_raw(self.dirty) });
    }
}

impl Tracked {
    /// Bookkeeping for a replica of `len` elements whose views note the keys they write.
    pub fn new(len: usize) -> Self {
        Tracked {
            dirty: Box::into_raw(Box::new(Dirty::new(len))),
            seen: 0,
            stamps: vec![u32::MAX; len],
            fresh: Vec::new(),
            whole: false,
            lock_free: false,
            bulk: false,
            pushed_keys: 0,
            pushes: 0,
        }
    }

    /// Bookkeeping for a small replica of `len` elements pushed whole after every
    /// mini-batch, whose views note nothing: a mini-batch of k-means reads every centre
    /// in its inner loop, and views that note writes check every access, where views
    /// that do not cost what a `Vec` costs (`zoo kmeans`, 2 threads: 13.5 → 9.7 ms an
    /// epoch, serial 19.9 ms). Only for tables whose unchanged keys push nothing
    /// ([`Merger::zero_change_is_neutral`]). Every key is noted as written once, here,
    /// and stays noted: no view writes the note, and [`Tracked::announce`] keeps it.
    ///
    /// With `lock_free` (the merger's [`Merger::lock_free`]), pushes and refreshes take no
    /// lock: every worker of the call reaches the master through the merger's atomic
    /// methods alone.
    pub fn whole(len: usize, lock_free: bool) -> Self {
        let mut t = Tracked::new(len);
        t.whole = true;
        t.lock_free = lock_free;
        // SAFETY: `dirty` was just made by `new`; nothing else holds it yet.
        let dirty = unsafe { &mut *t.dirty };
        for i in 0..len {
            dirty.mark(i);
        }
        t
    }

    /// Bookkeeping for a large replica every mini-batch writes densely (a layer's weights
    /// kept as a flat table of scalars): pushed whole, as [`Tracked::whole`], but merged
    /// element by element in one pass under the table's one lock (see
    /// [`KeyLocks::whole`]), not word by word with atomic operations or under a lock per
    /// element. A new user's MLP layers (2,000 weights in four flat tables) merged per
    /// element ran at 0.58x serial on two workers, at 1.15x word by word.
    pub fn bulk(len: usize) -> Self {
        let mut t = Tracked::whole(len, false);
        t.bulk = true;
        t
    }

    /// Whether the views note nothing for this replica.
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Notes the keys pushed into the master (`log`) since this worker last looked, for
    /// [`Tracked::catch_up`] to refresh.
    ///
    /// A replica pushed whole needs no news: every push reads back every key, and
    /// [`Tracked::catch_up`] refreshes every key.
    pub fn news(&mut self, log: &[usize]) {
        if self.whole {
            return;
        }
        self.fresh.clear();
        self.fresh
            .extend_from_slice(&log[self.seen.min(log.len())..]);
        self.seen = log.len();
    }

    /// Before mini-batch `b`: refreshes in `replica` the keys others pushed into `master`
    /// (noted by [`Tracked::news`]; every key of a replica pushed whole), each once, under
    /// its stripe's lock.
    ///
    /// # Safety
    /// As for [`Merger::refresh_keys`], every writer of an element holding its stripe's
    /// lock in `locks`.
    pub unsafe fn catch_up(
        &mut self,
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        b: usize,
        locks: &KeyLocks,
    ) {
        if self.lock_free {
            // SAFETY: the caller's guarantee, and every worker of a table pushed whole
            // merges it lock-free (the choice is the table's, made alike for all).
            unsafe { merger.refresh_lock_free(master, replica) };
            return;
        }
        if self.bulk {
            let _table = locks.whole();
            // SAFETY: every worker of a table pushed in bulk reaches its master only under
            // the table's lock, held here (the choice is the table's, made alike for all).
            unsafe { merger.refresh(master, replica) };
            return;
        }
        let len = self.stamps.len();
        let stamps = &mut self.stamps;
        let mut new = |&key: &usize| {
            let new = stamps[key] != b as u32;
            stamps[key] = b as u32;
            new
        };
        match self.whole {
            true => {
                let once = (0..len).filter(|k| new(k));
                // SAFETY: the caller's guarantee; keys below the replica's length.
                unsafe { merger.refresh_keys(master, replica, &mut locks.each(once)) };
            }
            false => {
                let once = self.fresh.iter().copied().filter(|k| new(k));
                // SAFETY: the caller's guarantee; logged keys were pushed, so below the
                // length.
                unsafe { merger.refresh_keys(master, replica, &mut locks.each(once)) };
            }
        }
    }

    /// After a mini-batch: pushes the keys the worker wrote into `master`, each under its
    /// lock. [`Tracked::announce`] then tells the other workers.
    ///
    /// # Safety
    /// As for [`Merger::push_keys`], every reader and writer of an element holding its
    /// stripe's lock in `locks`; and no view of the worker is alive (it writes the note
    /// the views write).
    pub unsafe fn push(
        &mut self,
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        locks: &KeyLocks,
    ) {
        if self.lock_free {
            // SAFETY: as in `catch_up`.
            unsafe { merger.push_lock_free(master, replica) };
            return;
        }
        if self.bulk {
            let _table = locks.whole();
            // SAFETY: as in `catch_up`.
            unsafe { merger.push(master, replica) };
            return;
        }
        // SAFETY: `dirty` is valid (see `new`), and no view is alive to write it now (the
        // caller's guarantee).
        let dirty = unsafe { &*self.dirty };
        self.count(dirty.keys().len());
        let keys = dirty.keys().iter().copied();
        // SAFETY: the caller's guarantee; noted keys passed the views' bounds checks.
        unsafe { merger.push_keys(master, replica, &mut locks.each(keys)) };
    }

    /// Counts a push of `keys` noted keys (a replica pushed whole counts none).
    fn count(&mut self, keys: usize) {
        if !self.whole {
            self.pushed_keys += keys as u64;
            self.pushes += 1;
        }
    }

    /// Between mini-batches: pushes the keys the worker wrote, as [`Tracked::push`] (which
    /// refreshes them), then refreshes for mini-batch `next` the keys others pushed (noted by
    /// [`Tracked::news`] before this call) that the push did not refresh already, as
    /// [`Tracked::catch_up`]. Each key is locked once.
    ///
    /// # Safety
    /// As for [`Tracked::push`].
    pub unsafe fn push_catch_up(
        &mut self,
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        next: usize,
        locks: &KeyLocks,
    ) {
        if self.lock_free {
            // SAFETY: as in `catch_up`. The push reads back every key: nothing is left
            // to catch up with.
            unsafe { merger.push_lock_free(master, replica) };
            return;
        }
        if self.bulk {
            let _table = locks.whole();
            // SAFETY: as in `catch_up`; the push reads back every key.
            unsafe { merger.push(master, replica) };
            return;
        }
        // SAFETY: `dirty` is valid (see `new`), and no view is alive to write it now (the
        // caller's guarantee).
        let dirty = unsafe { &*self.dirty };
        self.count(dirty.keys().len());
        let stamps = &mut self.stamps;
        let keys = dirty.keys().iter().copied().inspect(|&key| {
            stamps[key] = next as u32;
        });
        // SAFETY: the caller's guarantee; noted keys passed the views' bounds checks.
        unsafe { merger.push_keys(master, replica, &mut locks.each(keys)) };
        // SAFETY: the caller's guarantee; the keys just pushed are stamped `next`, so
        // skipped: their push read the master after the news were.
        unsafe { self.catch_up(merger, master, replica, next, locks) };
    }

    /// Appends the keys pushed by [`Tracked::push`] to the window's `log` and forgets them.
    /// A replica pushed whole announces nothing (no worker reads its news) and keeps every
    /// key noted.
    pub fn announce(&mut self, log: &mut Vec<usize>) {
        if self.whole {
            return;
        }
        // SAFETY: as in `push`: no view is alive between the mini-batches.
        let dirty = unsafe { &mut *self.dirty };
        // Nobody pushed since this worker looked: its replica holds what the log says.
        let caught_up = self.seen == log.len();
        log.extend_from_slice(dirty.keys());
        if caught_up {
            self.seen = log.len();
        }
        dirty.clear();
    }
}

/// The elements one lock of [`KeyLocks`] covers: one. A merge keeps a lock while the
/// keys that follow share it. Stripes of 64 (one lock for all of `pegasos`'s 21 weights)
/// cut its merging share from 27% to 18%, yet measured alone they slowed it at 2 threads
/// (`bench --app zoo --program pegasos --threads 2 --reps 2`, six alternated runs: 0.91x
/// serial against 1.17x with one element a lock; `kmeans` 1.50x against 1.47x): with the
/// whole table under one lock, the workers' merges wait for each other instead of
/// running side by side.
const STRIPE: usize = 1;

/// The locks of a table that Hybrid workers merge into, one per [`STRIPE`] of elements.
pub(super) struct KeyLocks(Vec<AtomicBool>);

impl KeyLocks {
    pub fn new(len: usize) -> Self {
        KeyLocks(
            (0..len.div_ceil(STRIPE))
                .map(|_| AtomicBool::new(false))
                .collect(),
        )
    }

    fn lock(&self, stripe: usize) {
        let mut spins = 0u32;
        // Acquire: the previous holder's merge of the element happens before ours.
        while self.0[stripe]
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn unlock(&self, stripe: usize) {
        self.0[stripe].store(false, Ordering::Release);
    }

    /// The whole table, locked until the guard is dropped: its first stripe stands for all
    /// of it, for a table whose every worker merges it whole under this lock (see
    /// [`Tracked::bulk`]) and never by [`KeyLocks::each`].
    pub fn whole(&self) -> WholeTable<'_> {
        if !self.0.is_empty() {
            self.lock(0);
        }
        WholeTable(self)
    }

    /// `keys`, each locked (its stripe) from when it is yielded until the next is asked for
    /// (or the iterator dropped): what a merger needs (see [`Merger::refresh_keys`]). A
    /// stripe stays locked while the keys that follow fall in it; only one is ever held,
    /// so two workers cannot deadlock.
    pub fn each<I: Iterator<Item = usize>>(&self, keys: I) -> LockedKeys<'_, I> {
        LockedKeys {
            keys,
            locks: self,
            held: None,
        }
    }
}

/// See [`KeyLocks::whole`].
pub(super) struct WholeTable<'a>(&'a KeyLocks);

impl Drop for WholeTable<'_> {
    fn drop(&mut self) {
        if !self.0 .0.is_empty() {
            self.0.unlock(0);
        }
    }
}

/// See [`KeyLocks::each`].
pub(super) struct LockedKeys<'a, I> {
    keys: I,
    locks: &'a KeyLocks,
    held: Option<usize>,
}

impl<I: Iterator<Item = usize>> Iterator for LockedKeys<'_, I> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let Some(k) = self.keys.next() else {
            self.release();
            return None;
        };
        let stripe = k / STRIPE;
        if self.held != Some(stripe) {
            self.release();
            self.locks.lock(stripe);
            self.held = Some(stripe);
        }
        Some(k)
    }
}

impl<I> LockedKeys<'_, I> {
    fn release(&mut self) {
        if let Some(stripe) = self.held.take() {
            self.locks.unlock(stripe);
        }
    }
}

impl<I> Drop for LockedKeys<'_, I> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::UnsafeCell;

    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Counters written only under [`KeyLocks`], as a merger writes a master's elements.
    struct Guarded(Vec<UnsafeCell<u64>>);

    // SAFETY: every access to an element holds its stripe's lock (the test's loops go
    // through `KeyLocks::each`), so no two threads touch one element at once.
    unsafe impl Sync for Guarded {}

    /// Keys yielded by `each` come in their order, each under its stripe's lock; keys of
    /// one stripe in a row share one locking, and the lock is free once the iterator ends
    /// or is dropped early.
    #[test]
    fn each_holds_the_stripe_of_the_key_it_yields() {
        let locks = KeyLocks::new(6 * STRIPE);
        assert_eq!(locks.0.len(), 6);
        let held = |locks: &KeyLocks| -> Vec<usize> {
            (0..locks.0.len())
                .filter(|&s| locks.0[s].load(Ordering::Relaxed))
                .collect()
        };
        let keys = [3, 5, STRIPE + 2, 3 * STRIPE, 0];
        let mut seen = Vec::new();
        for k in locks.each(keys.iter().copied()) {
            assert_eq!(held(&locks), vec![k / STRIPE], "key {k}");
            seen.push(k);
        }
        assert_eq!(seen, keys);
        assert!(held(&locks).is_empty());
        let mut each = locks.each([STRIPE + 1, 3 * STRIPE].into_iter());
        assert_eq!(each.next(), Some(STRIPE + 1));
        drop(each);
        assert!(held(&locks).is_empty());
    }

    /// Threads adding to shared elements through `each`, in shuffled orders that cross
    /// stripes back and forth, lose no addition.
    #[test]
    fn striped_locks_exclude_each_other() {
        let len = 5 * STRIPE + 7;
        let locks = KeyLocks::new(len);
        let cells = Guarded((0..len).map(|_| UnsafeCell::new(0)).collect());
        let (threads, rounds) = (4, 300);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (locks, cells) = (&locks, &cells);
                scope.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(t);
                    let mut keys: Vec<usize> = (0..len).collect();
                    for _ in 0..rounds {
                        keys.shuffle(&mut rng);
                        for k in locks.each(keys.iter().copied()) {
                            // SAFETY: `k`'s stripe is locked until the next key is asked for.
                            unsafe { *cells.0[k].get() += 1 };
                        }
                    }
                });
            }
        });
        let totals: Vec<u64> = cells.0.into_iter().map(UnsafeCell::into_inner).collect();
        assert_eq!(totals, vec![threads * rounds; len]);
    }
}
