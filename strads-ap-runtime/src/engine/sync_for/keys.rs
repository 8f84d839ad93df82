//! Hybrid workers' bookkeeping: which keys each worker wrote and pushed, which it must
//! refresh, and one lock per element so that workers merging different elements do not
//! wait for each other.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::access::Dirty;
use crate::dds::table::{Merger, Replica};

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
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // SAFETY: `dirty` came from `Box::into_raw` in `new` and is freed only here; the
        // views that copied it live no longer than the worker's loop, which owns `self`.
        drop(unsafe { Box::from_raw(self.dirty) });
    }
}

impl Tracked {
    pub fn new(len: usize) -> Self {
        Tracked {
            dirty: Box::into_raw(Box::new(Dirty::new(len))),
            seen: 0,
            stamps: vec![u32::MAX; len],
        }
    }

    /// The keys pushed into the master (`log`) since this worker last looked.
    pub fn news(&mut self, log: &[usize]) -> Vec<usize> {
        let new = log[self.seen.min(log.len())..].to_vec();
        self.seen = log.len();
        new
    }

    /// Before mini-batch `b`: refreshes in `replica` the `keys` others pushed into
    /// `master` (each once), each under its lock.
    ///
    /// # Safety
    /// As for [`Merger::refresh_keys`], every writer of an element holding its lock in
    /// `locks`.
    pub unsafe fn catch_up(
        &mut self,
        keys: &[usize],
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        b: usize,
        locks: &KeyLocks,
    ) {
        let stamps = &mut self.stamps;
        let once = keys.iter().copied().filter(|&key| {
            let new = stamps[key] != b as u32;
            stamps[key] = b as u32;
            new
        });
        // SAFETY: the caller's guarantee; logged keys were pushed, so below the length.
        unsafe { merger.refresh_keys(master, replica, &mut locks.each(once)) };
    }

    /// After a mini-batch: pushes the keys the worker wrote into `master`, each under its
    /// lock. [`Tracked::announce`] then tells the other workers.
    ///
    /// # Safety
    /// As for [`Merger::push_keys`], every reader and writer of an element holding its lock
    /// in `locks`; and no view of the worker is alive (it writes the note the views write).
    pub unsafe fn push(
        &mut self,
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        locks: &KeyLocks,
    ) {
        // SAFETY: `dirty` is valid (see `new`), and no view is alive to write it now (the
        // caller's guarantee).
        let dirty = unsafe { &*self.dirty };
        let keys = dirty.keys().iter().copied();
        // SAFETY: the caller's guarantee; noted keys passed the views' bounds checks.
        unsafe { merger.push_keys(master, replica, &mut locks.each(keys)) };
    }

    /// Appends the keys pushed by [`Tracked::push`] to the window's `log` and forgets them.
    pub fn announce(&mut self, log: &mut Vec<usize>) {
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

/// One lock per element of a table that Hybrid workers merge into: workers merging
/// different elements do not wait for each other.
pub(super) struct KeyLocks(Vec<AtomicBool>);

impl KeyLocks {
    pub fn new(len: usize) -> Self {
        KeyLocks((0..len).map(|_| AtomicBool::new(false)).collect())
    }

    fn lock(&self, k: usize) {
        let mut spins = 0u32;
        // Acquire: the previous holder's merge of the element happens before ours.
        while self.0[k]
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

    fn unlock(&self, k: usize) {
        self.0[k].store(false, Ordering::Release);
    }

    /// `keys`, each locked from when it is yielded until the next is asked for (or the
    /// iterator dropped): what a merger needs (see [`Merger::refresh_keys`]).
    pub fn each<I: Iterator<Item = usize>>(&self, keys: I) -> LockedKeys<'_, I> {
        LockedKeys {
            keys,
            locks: self,
            held: None,
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
        if let Some(k) = self.held.take() {
            self.locks.unlock(k);
        }
        let k = self.keys.next()?;
        self.locks.lock(k);
        self.held = Some(k);
        Some(k)
    }
}

impl<I> Drop for LockedKeys<'_, I> {
    fn drop(&mut self) {
        if let Some(k) = self.held.take() {
            self.locks.unlock(k);
        }
    }
}
