//! Views: how a captured DVector is indexed inside a loop body.
//!
//! Generated code turns each captured value into a binding with two method calls:
//! `__strads_enter` (or `__strads_record` in reconnaissance) then `__strads_bind`. For a
//! DDS the inherent methods win and yield a view; for a plain value the fallback traits
//! yield an owned copy (so mutating it is a compile error rather than a lost update).

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::sync::atomic::Ordering;

use super::vector::VectorRef;
use crate::access::{raise, Binding, Conflict, Dirty, ExecCtx, Fault, LockWord, FREE, SHARED};
use crate::recon::Recorder;

/// A DVector as a loop body sees it: indexable like a `Vec`.
///
/// Every access is bounds-checked; in `async_for!` it is also checked against the
/// conflict-free plan (one load and compare), so a body can never race with another group
/// even if its accesses differ from what reconnaissance recorded. In a locking run (a loop
/// whose accesses change between calls, see [`Opts::recheck`](crate::Opts::recheck)) the
/// first access of a task to an element locks it and saves a copy, so that a task that
/// meets an element another worker holds can be undone and retried.
pub struct VectorView<'a, T> {
    ptr: *mut T,
    len: usize,
    tags: *const u32,
    allowed: u32,
    writable: bool,
    read_only_reason: &'static str,
    name: &'static str,
    /// The worker's note of written keys (a Hybrid replica), or null.
    dirty: *mut Dirty,
    /// Locking runs: the worker's per-key stamps (see [`Binding::stamps`]), or null.
    stamps: *mut u32,
    /// Locking runs: the shared lock words, or null.
    locks: *const LockWord,
    ctx: &'a ExecCtx,
    /// Locking runs: the elements as the running task found them.
    undo: UnsafeCell<Undo<T>>,
    _life: PhantomData<&'a mut [T]>,
}

impl<T: Clone> VectorRef<T> {
    /// Binds the captured DVector for the running group.
    #[doc(hidden)]
    #[inline]
    pub fn __strads_enter<'a>(&'a self, ctx: &'a ExecCtx, name: &'static str) -> VectorView<'a, T> {
        VectorView::bind(ctx, ctx.binding(self.table.id), name)
    }

    /// Binds the captured DVector for reconnaissance.
    #[doc(hidden)]
    pub fn __strads_record<'a>(
        &'a self,
        rec: &'a Recorder,
        name: &'static str,
    ) -> RecordVectorView<'a, T> {
        RecordVectorView::bind(rec, self.table.id, name)
    }
}

impl<'a, T: Clone> VectorView<'a, T> {
    /// A view of the elements a binding points to (a vector's, or a map's values).
    #[inline]
    pub(crate) fn bind(ctx: &'a ExecCtx, b: &Binding, name: &'static str) -> Self {
        VectorView {
            ptr: b.ptr as *mut T,
            len: b.len,
            tags: b.tags,
            allowed: b.allowed,
            writable: b.writable,
            read_only_reason: b.read_only_reason,
            name,
            dirty: b.dirty,
            stamps: b.stamps,
            locks: b.locks,
            ctx,
            undo: UnsafeCell::new(Undo::default()),
            _life: PhantomData,
        }
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, or `None` past the end.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| &self[i])
    }

    /// Element `i` mutably, or `None` past the end.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        (i < self.len).then(|| &mut self[i])
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }
}

impl<'a, T: Clone> VectorView<'a, T> {
    #[inline(always)]
    fn check(&self, i: usize, write: bool) {
        if i >= self.len {
            raise(Fault::OutOfBounds {
                table: self.name,
                index: i,
                len: self.len,
            });
        }
        if write && !self.writable {
            raise(Fault::Outside {
                table: self.name,
                key: i as u64,
                write,
                reason: self.read_only_reason,
            });
        }
        if !self.tags.is_null() {
            // SAFETY: `tags` has one entry per element (the planner sizes it to the
            // table), and `i < len` was checked above.
            let tag = unsafe { *self.tags.add(i) };
            if tag != self.allowed && (write || tag != SHARED) {
                self.outside(i, write, tag);
            }
        }
        if !self.stamps.is_null() {
            // SAFETY: `stamps` has one entry per element (`i < len`), owned by this worker.
            let stamp = unsafe { *self.stamps.add(i) };
            if stamp != self.ctx.epoch.get() {
                self.first_touch(i);
            }
        }
    }

    /// The running task's first access to element `i` in a locking run: takes the
    /// element's lock (or abandons the task if another worker holds it) and saves the
    /// element as it was, for an abandoned task to put back.
    #[inline(never)]
    fn first_touch(&self, i: usize) {
        let epoch = self.ctx.epoch.get();
        if !self.locks.is_null() {
            // SAFETY: the lock words are one per element (`i < len`) and outlive the call.
            let lock = unsafe { &*self.locks.add(i) };
            // Acquire: the previous holder's writes to the element (released with its
            // lock) happen before ours.
            if lock
                .0
                .compare_exchange(FREE, self.ctx.tag, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                self.ctx.aborting.set(true);
                std::panic::resume_unwind(Box::new(Conflict));
            }
            self.ctx.held.borrow_mut().push(lock);
        }
        // SAFETY: as in `check`; the stamps are this worker's alone.
        unsafe { *self.stamps.add(i) = epoch };
        // SAFETY: `undo` is used by this view's own methods only, on one thread, and no
        // reference to it outlives this call.
        let undo = unsafe { &mut *self.undo.get() };
        // SAFETY: `i < len`, and this task now holds the element (its lock, or a replica
        // only this worker uses), so nothing writes it meanwhile.
        undo.save(epoch, i, unsafe { &*self.ptr.add(i) });
    }

    #[cold]
    #[inline(never)]
    fn outside(&self, i: usize, write: bool, tag: u32) -> ! {
        let reason = match tag {
            crate::access::UNTOUCHED => "no task touched this element during reconnaissance",
            SHARED => "reconnaissance saw only reads of this element",
            _ => "the element belongs to another task group of the plan",
        };
        raise(Fault::Outside {
            table: self.name,
            key: i as u64,
            write,
            reason,
        })
    }
}

impl<T> Drop for VectorView<'_, T> {
    fn drop(&mut self) {
        if !self.stamps.is_null() && self.ctx.aborting.get() {
            let epoch = self.ctx.epoch.get();
            // SAFETY: the saved keys are below `len`, and the abandoned task still holds
            // their locks (the engine releases them after the unwind); no reference from
            // the body is alive once the view drops.
            unsafe { self.undo.get_mut().restore(epoch, self.ptr) };
        }
    }
}

impl<T: Clone> Index<usize> for VectorView<'_, T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        self.check(i, false);
        // SAFETY: `i < len` was checked, and `ptr` points to `len` initialised elements
        // that the engine keeps alive and locked for the operator. No other thread writes
        // element `i` now: the plan gives each written element to one group at a time and
        // `check` refused the access unless this group holds the element or it is shared
        // read-only (tag SHARED, which no group may write); in a locking run, `check`
        // took the element's lock.
        unsafe { &*self.ptr.add(i) }
    }
}

impl<T: Clone> IndexMut<usize> for VectorView<'_, T> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.check(i, true);
        if !self.dirty.is_null() {
            // SAFETY: a non-null `dirty` is the running worker's own note for this
            // replica, sized to the table (`i < len` was checked); only this thread uses
            // it while the body runs, and no reference to it outlives this call.
            unsafe { (*self.dirty).mark(i) };
        }
        // SAFETY: as for `index`; a write needs the element's tag to equal this group's, so
        // no other thread holds a reference to element `i`, and `&mut self` rules out a
        // second reference from this thread.
        unsafe { &mut *self.ptr.add(i) }
    }
}

/// A DVector as a body sees it during reconnaissance: reads return real values, writes
/// go to a scratch copy, every access is logged. In a recorded run (a first call run in
/// loop order on one worker) writes go to the table itself.
pub struct RecordVectorView<'a, T> {
    ptr: *mut T,
    len: usize,
    scratch: Scratch<T>,
    slot: usize,
    in_place: bool,
    rec: &'a Recorder,
    name: &'static str,
    _life: PhantomData<&'a mut [T]>,
}

impl<'a, T> RecordVectorView<'a, T> {
    /// A recording view of the elements of table `id` (a vector's, or a map's values).
    pub(crate) fn bind(rec: &'a Recorder, id: u64, name: &'static str) -> Self {
        let (slot, ptr, len, _) = rec.table(id);
        RecordVectorView {
            ptr: ptr as *mut T,
            len,
            scratch: Scratch::default(),
            slot,
            in_place: rec.writes_in_place(),
            rec,
            name,
            _life: PhantomData,
        }
    }
}

impl<'a, T: Clone> RecordVectorView<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| &self[i])
    }

    /// Element `i` mutably, or `None` past the end.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        (i < self.len).then(|| &mut self[i])
    }

    #[doc(hidden)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }

    #[inline]
    fn bounds(&self, i: usize) {
        if i >= self.len {
            raise(Fault::OutOfBounds {
                table: self.name,
                index: i,
                len: self.len,
            });
        }
    }
}

impl<T: Clone> Index<usize> for RecordVectorView<'_, T> {
    type Output = T;

    #[inline]
    fn index(&self, i: usize) -> &T {
        self.bounds(i);
        self.rec.log(self.slot, i as u64, false);
        // SAFETY: `i < len`, and `ptr` points to `len` initialised elements that the
        // engine keeps alive and locked for the operator. In reconnaissance nothing
        // writes them (views write to scratch); in a recorded run only this thread's
        // views do, and `&self` rules out a mutable reference from this view.
        let element = unsafe { &*self.ptr.add(i) };
        if self.in_place {
            return element;
        }
        self.scratch
            .get(i, self.rec.task_epoch())
            .unwrap_or(element)
    }
}

impl<T: Clone> IndexMut<usize> for RecordVectorView<'_, T> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.bounds(i);
        self.rec.log(self.slot, i as u64, true);
        if self.in_place {
            // SAFETY: as in `index`; a recorded run is the only user of the table, on
            // this thread, and `&mut self` rules out a second reference from this view.
            return unsafe { &mut *self.ptr.add(i) };
        }
        self.scratch_copy(i)
    }
}

impl<T: Clone> RecordVectorView<'_, T> {
    /// The running task's scratch copy of element `i` (`i < len`), made on first use.
    #[inline(never)]
    fn scratch_copy(&mut self, i: usize) -> &mut T {
        let epoch = self.rec.task_epoch();
        // SAFETY: as in `index`: nothing writes the table during reconnaissance.
        self.scratch
            .get_or_copy(i, epoch, unsafe { &*self.ptr.add(i) })
    }
}

/// The elements a task of a locking run touched, as it found them. Slots are kept from
/// task to task and refilled with `clone_from`.
struct Undo<T> {
    items: Vec<(usize, T)>,
    live: usize,
    epoch: u32,
}

impl<T> Default for Undo<T> {
    fn default() -> Self {
        Undo {
            items: Vec::new(),
            live: 0,
            epoch: 0,
        }
    }
}

impl<T: Clone> Undo<T> {
    /// Saves element `key` as task `epoch` first touched it.
    #[inline]
    fn save(&mut self, epoch: u32, key: usize, src: &T) {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.live = 0;
        }
        put_copy(&mut self.items, self.live, key, src);
        self.live += 1;
    }
}

/// Stores a copy of `src` for `key` at position `at` of `items` (at most its length):
/// refilling the slot there with `clone_from`, which reuses its allocations, or adding one.
#[inline]
fn put_copy<T: Clone>(items: &mut Vec<(usize, T)>, at: usize, key: usize, src: &T) {
    match items.get_mut(at) {
        Some(slot) => {
            slot.0 = key;
            slot.1.clone_from(src);
        }
        None => items.push((key, src.clone())),
    }
}

impl<T> Undo<T> {
    /// Puts back the elements task `epoch` saved.
    ///
    /// # Safety
    /// `base` points to initialised elements beyond every saved key, which no one else
    /// reads or writes during the call.
    unsafe fn restore(&mut self, epoch: u32, base: *mut T) {
        if self.epoch != epoch {
            return;
        }
        for (key, saved) in self.items[..self.live].iter_mut().rev() {
            // SAFETY: guaranteed by the caller.
            std::mem::swap(unsafe { &mut *base.add(*key) }, saved);
        }
        self.live = 0;
    }
}

/// The scratch copies of the elements a task wrote during reconnaissance: a short list
/// (tasks usually write a few elements), indexed by a map once it grows. Slots are kept
/// from task to task and refilled with `clone_from`, so recording does not allocate per
/// task.
struct Scratch<T> {
    items: Vec<(usize, T)>,
    live: usize,
    epoch: u64,
    index: Option<HashMap<usize, usize>>,
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch {
            items: Vec::new(),
            live: 0,
            epoch: u64::MAX,
            index: None,
        }
    }
}

impl<T: Clone> Scratch<T> {
    const LINEAR: usize = 16;

    #[inline]
    fn position(&self, key: usize) -> Option<usize> {
        match &self.index {
            Some(map) => map.get(&key).copied(),
            None => self.items[..self.live].iter().position(|(k, _)| *k == key),
        }
    }

    /// The task `epoch`'s copy of `key`, if it wrote one.
    #[inline]
    fn get(&self, key: usize, epoch: u64) -> Option<&T> {
        if self.epoch != epoch {
            return None;
        }
        self.position(key).map(|p| &self.items[p].1)
    }

    /// The task `epoch`'s copy of `key`, made from `src` on first use.
    #[inline]
    fn get_or_copy(&mut self, key: usize, epoch: u64, src: &T) -> &mut T {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.live = 0;
            if let Some(map) = &mut self.index {
                map.clear();
            }
        }
        let p = match self.position(key) {
            Some(p) => p,
            None => {
                let p = self.live;
                put_copy(&mut self.items, p, key, src);
                self.live += 1;
                match &mut self.index {
                    Some(map) => {
                        map.insert(key, p);
                    }
                    None if self.live > Self::LINEAR => {
                        self.index = Some(
                            self.items[..self.live]
                                .iter()
                                .enumerate()
                                .map(|(p, (k, _))| (*k, p))
                                .collect(),
                        );
                    }
                    None => {}
                }
                p
            }
        };
        &mut self.items[p].1
    }
}

/// A captured plain value on its way to its binding in a loop body.
#[doc(hidden)]
pub struct Plain<T>(Option<T>);

impl<T> Plain<T> {
    #[inline(always)]
    pub(crate) fn new(v: T) -> Self {
        Plain(Some(v))
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_bind(&mut self) -> T {
        match self.0.take() {
            Some(v) => v,
            None => unreachable!("a capture is bound once"),
        }
    }
}

/// Fallback of `__strads_enter` for captured plain values: an owned copy.
#[doc(hidden)]
pub trait EnterFallback: Clone {
    #[inline(always)]
    fn __strads_enter(&self, _ctx: &ExecCtx, _name: &'static str) -> Plain<Self> {
        Plain(Some(self.clone()))
    }
}

impl<T: Clone> EnterFallback for T {}

/// Fallback of `__strads_record` for captured plain values: an owned copy.
#[doc(hidden)]
pub trait RecordFallback: Clone {
    fn __strads_record(&self, _rec: &Recorder, _name: &'static str) -> Plain<Self> {
        Plain(Some(self.clone()))
    }
}

impl<T: Clone> RecordFallback for T {}

#[cfg(test)]
mod tests {
    use super::Scratch;

    #[test]
    fn scratch_keeps_the_first_copy_and_switches_to_a_map() {
        let mut s = Scratch::default();
        for k in 0..40usize {
            *s.get_or_copy(k, 1, &(k * 10)) += 1;
        }
        // A second write of a key in the same task updates the same copy.
        *s.get_or_copy(3, 1, &999) += 1;
        *s.get_or_copy(33, 1, &999) += 1;
        assert!(s.index.is_some());
        assert_eq!(s.get(3, 1), Some(&32));
        assert_eq!(s.get(33, 1), Some(&332));
        assert_eq!(s.get(39, 1), Some(&391));
        assert_eq!(s.get(40, 1), None);
        // The next task starts empty and reuses the slots.
        assert_eq!(s.get(3, 2), None);
        assert_eq!(*s.get_or_copy(3, 2, &7), 7);
        assert_eq!(s.get(33, 2), None);
        assert_eq!(s.live, 1);
    }
}
