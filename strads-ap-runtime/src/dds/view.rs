//! Views: how a captured DVector is indexed inside a loop body.
//!
//! Generated code turns each captured value into a binding with two method calls:
//! `__strads_enter` (or `__strads_record` in reconnaissance) then `__strads_bind`. For a
//! DDS the inherent methods win and yield a view; for a plain value the fallback traits
//! yield an owned copy (so mutating it is a compile error rather than a lost update).

use super::body::Capturable;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use super::vector::VectorRef;
use crate::access::{raise, Binding, Dirty, ExecCtx, Fault, SHARED};
use crate::recon::{Recorder, Recording, ToScratch, Writes};

/// A DVector as a loop body sees it: indexable like a `Vec`.
///
/// Every access is bounds-checked; in `async_for!` it is also checked against the
/// conflict-free plan (one load and compare), so a body can never race with another group
/// even if its accesses differ from what reconnaissance recorded. The view holds plain
/// values only (no reference to the worker's context, nothing it changes behind a shared
/// reference), so the compiler keeps them in registers across a body's inner loops.
/// Locking runs bind a [`LockView`](super::LockView) instead, and a lone worker a
/// [`DirectView`](super::DirectView).
///
/// `NOTE` views (bound by `sync_for!`) also note the keys a Hybrid worker writes in its
/// replica; `async_for!`'s views never do, so their writes test nothing more than the
/// check.
pub struct VectorView<'a, T, const NOTE: bool = false> {
    ptr: *mut T,
    len: usize,
    tags: *const u32,
    allowed: u32,
    writable: bool,
    read_only_reason: &'static str,
    name: &'static str,
    /// The worker's note of written keys (a Hybrid replica), or null.
    dirty: *mut Dirty,
    /// Keys the group holds alone (see `Binding::window_start`). Never changed while the
    /// view lives (see [`VectorView::check`]).
    window_start: usize,
    window_len: usize,
    _life: PhantomData<&'a mut [T]>,
}

impl<T: Clone> VectorRef<T> {
    /// Binds the captured DVector for the running group.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_enter<'a>(&'a self, ctx: &'a ExecCtx, name: &'static str) -> VectorView<'a, T> {
        VectorView::bind(ctx.binding(self.table.id), name)
    }

    /// Binds the captured DVector for a `sync_for!` worker, noting written keys.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_note<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> VectorView<'a, T, true> {
        VectorView::bind(ctx.binding(self.table.id), name)
    }

    /// Binds the captured DVector for reconnaissance.
    #[doc(hidden)]
    pub fn __strads_record<'a, R: Recording>(
        &'a self,
        rec: &'a R,
        name: &'static str,
    ) -> RecordVectorView<'a, T, R::Writes> {
        RecordVectorView::bind(rec.recorder(), self.table.id, name)
    }
}

impl<'a, T, const NOTE: bool> VectorView<'a, T, NOTE> {
    /// A view of the elements a binding points to (a vector's, or a map's values). A
    /// binding of a locking run (stamps, locks) needs a [`LockView`](super::LockView).
    #[inline(always)]
    pub(crate) fn bind(b: &Binding, name: &'static str) -> Self {
        debug_assert!(b.stamps.is_null(), "a checked view of a locking binding");
        // A write through a view that does not note would be lost to the replica's push.
        assert!(
            NOTE || b.dirty.is_null(),
            "strads-ap internal error: a binding that notes written keys bound to a view \
             that does not"
        );
        VectorView {
            ptr: b.ptr as *mut T,
            len: b.len,
            tags: b.tags,
            allowed: b.allowed,
            writable: b.writable,
            read_only_reason: b.read_only_reason,
            name,
            dirty: b.dirty,
            window_start: b.window_start,
            window_len: b.window_len.min(b.len.saturating_sub(b.window_start)),
            _life: PhantomData,
        }
    }

    /// Number of elements.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, or `None` past the end.
    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| &self[i])
    }

    /// Element `i` mutably, or `None` past the end.
    #[inline(always)]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        (i < self.len).then(|| &mut self[i])
    }

    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_bind(&mut self) -> &mut Self {
        self
    }

    /// Admits access `i` (a write if `write`) or raises the fault that refuses it.
    ///
    /// The window never changes while the view lives, so the compiler may fold the
    /// repeated checks of a key that does not change within a loop (`p[u][f]` for every
    /// factor `f`) into one. Keep it so: a window the body's loops could change kept every
    /// check of every access (docs/architecture.md, "No remembered element").
    #[inline(always)]
    fn check(&self, i: usize, write: bool) {
        // The group's own window: one comparison of values the compiler keeps in
        // registers (a rotated table's block, written by no other group meanwhile).
        if i.wrapping_sub(self.window_start) < self.window_len {
            return;
        }
        if i >= self.len {
            out_of_bounds(self.name, self.len, i);
        }
        if write && !self.writable {
            refuse(self.name, i, write, self.read_only_reason);
        }
        if !self.tags.is_null() {
            // SAFETY: `tags` has one entry per element (the planner sizes it to the
            // table), and `i < len` was checked above.
            let tag = unsafe { *self.tags.add(i) };
            if tag != self.allowed && (write || tag != SHARED) {
                refuse(self.name, i, write, outside_reason(tag));
            }
        }
    }
}

/// Raises the fault of an access the plan or the table's mode refuses. Out of line, and
/// given values rather than the view, so that no call is handed the view's address and
/// the view stays in registers.
#[cold]
#[inline(never)]
fn refuse(table: &'static str, i: usize, write: bool, reason: &'static str) -> ! {
    raise(Fault::Outside {
        table,
        key: i as u64,
        write,
        reason,
    })
}

/// Why the plan refuses a write to an element that reconnaissance saw tasks only read.
pub(crate) const ONLY_READ: &str = "reconnaissance saw only reads of this element";

/// Why the plan refuses an access to an element of tag `tag`.
pub(crate) fn outside_reason(tag: u32) -> &'static str {
    match tag {
        // Not "no task": plans that tag batch by batch leave elements of other steps so.
        crate::access::UNTOUCHED => {
            "reconnaissance saw no task of this step of the plan touch this element"
        }
        SHARED => ONLY_READ,
        // Another group holds it now, or (a dynamic loop, or a key left from an earlier
        // step) no group of this step does.
        _ => "the plan does not give this element to this task group at this step",
    }
}

impl<T, const NOTE: bool> Index<usize> for VectorView<'_, T, NOTE> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        self.check(i, false);
        // SAFETY: `i < len` was checked, and `ptr` points to `len` initialised elements
        // that the engine keeps alive and locked for the operator. No other thread writes
        // element `i` now: the plan gives each written element to one group at a time and
        // `check` refused the access unless this group holds the element (by its tag, or
        // in its window, a key range of a block no other group may touch while this one
        // runs) or it is shared read-only (tag SHARED, which no group may write); a table
        // without tags is read-only for this loop, or a replica of this worker's own.
        // The window lies within the table (`bind` clamps it to `len`).
        unsafe { &*self.ptr.add(i) }
    }
}

impl<T, const NOTE: bool> IndexMut<usize> for VectorView<'_, T, NOTE> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.check(i, true);
        if NOTE && !self.dirty.is_null() {
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
/// loop order on one worker) writes go to the table itself: `W` is
/// [`ToTables`](crate::recon::ToTables) there, a type rather than a flag so that the
/// recorded run's body version has no scratch path on its accesses.
pub struct RecordVectorView<'a, T, W: Writes = ToScratch> {
    ptr: *mut T,
    len: usize,
    /// Behind a box, so that no call is handed the view's own address: the view then
    /// stays in registers, and `mark` with it (see [`RecordVectorView::note`]).
    scratch: Box<Scratch<T>>,
    slot: usize,
    rec: &'a Recorder,
    name: &'static str,
    /// Which elements are here, where only some are (see `Recorder::with_presence`).
    present: Option<crate::recon::Presence>,
    /// The running task's last accesses logged through this view, kept by the recorder
    /// (see `Recorder::last_logged`).
    last: &'a crate::recon::Logged,
    /// The running task's last access through this view (`key << 1 | written`), logged
    /// or known to be; [`NO_MARK`] at the start of each task (see `__strads_task`).
    mark: Cell<usize>,
    /// Whether accesses are logged (not for a recorded run's relaxed tables: see
    /// `Recorder::unlogged`).
    logs: bool,
    _life: PhantomData<(&'a mut [T], W)>,
}

/// No access through a view yet in the running task: no mark is this large.
const NO_MARK: usize = usize::MAX;

impl<'a, T, W: Writes> RecordVectorView<'a, T, W> {
    /// A recording view of the elements of table `id` (a vector's, or a map's values).
    pub(crate) fn bind(rec: &'a Recorder, id: u64, name: &'static str) -> Self {
        assert_eq!(
            rec.writes_in_place(),
            W::IN_PLACE,
            "strads-ap internal error: a recording view and its recorder disagree on where \
             writes go"
        );
        let (slot, ptr, len, _) = rec.table(id);
        RecordVectorView {
            ptr: ptr as *mut T,
            len,
            scratch: Box::default(),
            slot,
            rec,
            name,
            present: rec.presence(slot),
            last: rec.last_logged(slot),
            mark: Cell::new(NO_MARK),
            logs: rec.logs(slot),
            _life: PhantomData,
        }
    }

    /// Logs an access of element `i`, unless the task's last access through this view
    /// was to the same element and logged as much (a write covers a read).
    ///
    /// The view's own `mark` answers an inner loop over one element (`v[j][f]` for every
    /// `f`) with a compare of registers: the view is a local of the body whose address no
    /// call is given, so the compiler keeps it out of memory and can hoist the check,
    /// where the recorder's state (which the body's stores may alias, as far as the
    /// compiler knows) costs a load per access. Generated code starts each task with
    /// `__strads_task`, which forgets `mark`.
    ///
    /// Returns the element to read: `i`, or where element `i` is not here (a planning call
    /// across ranks) a stand-in the recorder names, after noting the miss (the task's log
    /// is then dropped and the task run again once the element is fetched).
    #[inline(always)]
    fn note(&self, i: usize, write: bool) -> usize {
        if !self.logs {
            return i;
        }
        let mark = (i << 1) | usize::from(write);
        let last = self.mark.get();
        // A read of the element last noted (read or written) or a write of the element last
        // written: one comparison either way (`write` is known where this is inlined).
        let noted = match write {
            true => mark == last,
            false => mark | 1 == last | 1,
        };
        if noted {
            return i;
        }
        // A recorded run has every element here (presence is reconnaissance's, across
        // ranks): no test, and no returning call on the path, which would make the
        // compiler keep the body's floating-point locals in memory around it.
        if !W::IN_PLACE {
            if let Some(p) = self.present {
                if !p.has(i) {
                    return self.rec.missed(self.slot, i);
                }
            }
        }
        self.mark.set(mark);
        self.rec.note(self.last, self.slot, i as u64, write);
        i
    }

    /// Starts a task: its accesses are logged anew. Called by generated code before
    /// each loop index's body.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_task(&mut self) {
        self.mark.set(NO_MARK);
    }
}

impl<'a, T: Clone, W: Writes> RecordVectorView<'a, T, W> {
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

    #[inline(always)]
    fn bounds(&self, i: usize) {
        if i >= self.len {
            out_of_bounds(self.name, self.len, i);
        }
    }
}

/// Index `i` of table `name` (of length `len`) is out of bounds. (Given values, not the
/// view: see [`RecordVectorView::scratch`] and [`refuse`].)
#[cold]
#[inline(never)]
fn out_of_bounds(name: &'static str, len: usize, i: usize) -> ! {
    raise(Fault::OutOfBounds {
        table: name,
        index: i,
        len,
    })
}

impl<T: Clone, W: Writes> Index<usize> for RecordVectorView<'_, T, W> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        self.bounds(i);
        let at = self.note(i, false);
        // SAFETY: `at < len` (`i`, or a stand-in below the length), and `ptr` points to
        // `len` initialised elements that the engine keeps alive and locked for the
        // operator. In reconnaissance nothing writes them (views write to scratch); in a
        // recorded run only this thread's views do, and `&self` rules out a mutable
        // reference from this view.
        let element = unsafe { &*self.ptr.add(at) };
        if W::IN_PLACE {
            return element;
        }
        // Looked up inline, with no call: see `Scratch::get`.
        self.scratch
            .get(i, self.rec.task_epoch())
            .unwrap_or(element)
    }
}

impl<T: Clone, W: Writes> IndexMut<usize> for RecordVectorView<'_, T, W> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.bounds(i);
        let at = self.note(i, true);
        if W::IN_PLACE {
            // SAFETY: as in `index`; a recorded run is the only user of the table, on
            // this thread, and `&mut self` rules out a second reference from this view.
            return unsafe { &mut *self.ptr.add(i) };
        }
        let epoch = self.rec.task_epoch();
        // SAFETY: as in `index`: nothing writes the table during reconnaissance.
        let src = unsafe { &*self.ptr.add(at) };
        scratch_copy(&mut self.scratch, i, epoch, src)
    }
}

/// The running task's (`epoch`) scratch copy of element `i`, made from `src` on first use.
#[cold]
#[inline(never)]
fn scratch_copy<'s, T: Clone>(
    scratch: &'s mut Scratch<T>,
    i: usize,
    epoch: u64,
    src: &T,
) -> &'s mut T {
    scratch.get_or_copy(i, epoch, src)
}

/// Stores a copy of `src` for `key` at position `at` of `items` (at most its length):
/// refilling the slot there with `clone_from`, which reuses its allocations, or adding one.
#[inline]
pub(super) fn put_copy<T: Clone>(items: &mut Vec<(usize, T)>, at: usize, key: usize, src: &T) {
    match items.get_mut(at) {
        Some(slot) => {
            slot.0 = key;
            slot.1.clone_from(src);
        }
        None => items.push((key, src.clone())),
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
    index: Option<KeyIndex>,
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

    #[inline(always)]
    fn position(&self, key: usize) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key),
            None => self.items[..self.live].iter().position(|(k, _)| *k == key),
        }
    }

    /// The task `epoch`'s copy of `key`, if it wrote one. Inline and with no call (not
    /// even to a hasher): the read path of a recording view, where a call (however
    /// rarely taken, and a recorded run never takes it) makes the compiler keep the
    /// body's values in memory across its inner loops.
    #[inline(always)]
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
            if let Some(index) = &mut self.index {
                index.clear();
            }
        }
        let p = match self.position(key) {
            Some(p) => p,
            None => {
                let p = self.live;
                put_copy(&mut self.items, p, key, src);
                self.live += 1;
                match &mut self.index {
                    Some(index) => index.insert(key, p),
                    None if self.live > Self::LINEAR => {
                        let mut index = KeyIndex::default();
                        for (p, (k, _)) in self.items[..self.live].iter().enumerate() {
                            index.insert(*k, p);
                        }
                        self.index = Some(index);
                    }
                    None => {}
                }
                p
            }
        };
        &mut self.items[p].1
    }
}

/// Positions of a scratch's keys once it holds many: open addressing with linear probing
/// over a power-of-two table at most half full, hashed by a multiply, so that a lookup
/// is a few instructions and no call (see [`Scratch::get`]).
#[derive(Default)]
struct KeyIndex {
    /// `(key + 1, position)`; a zero key marks an empty slot (keys are element indices,
    /// below a table's length, so `key + 1` never wraps to zero).
    slots: Vec<(usize, usize)>,
    len: usize,
}

impl KeyIndex {
    #[inline(always)]
    fn home(&self, key: usize) -> usize {
        // Fibonacci hashing: the high bits of the product, as many as the table needs.
        let bits = self.slots.len().trailing_zeros();
        let h = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - bits)) as usize
    }

    #[inline(always)]
    fn get(&self, key: usize) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(key);
        loop {
            let (k, p) = self.slots[at];
            if k == key.wrapping_add(1) {
                return Some(p);
            }
            if k == 0 {
                return None;
            }
            at = (at + 1) & mask;
        }
    }

    fn insert(&mut self, key: usize, position: usize) {
        if 2 * (self.len + 1) > self.slots.len() {
            let room = (2 * self.slots.len()).max(64);
            let old = std::mem::replace(&mut self.slots, vec![(0, 0); room]);
            self.len = 0;
            for (k, p) in old.into_iter().filter(|&(k, _)| k != 0) {
                self.insert(k - 1, p);
            }
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(key);
        while self.slots[at].0 != 0 && self.slots[at].0 != key.wrapping_add(1) {
            at = (at + 1) & mask;
        }
        if self.slots[at].0 == 0 {
            self.len += 1;
        }
        self.slots[at] = (key.wrapping_add(1), position);
    }

    fn clear(&mut self) {
        self.slots.fill((0, 0));
        self.len = 0;
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
pub trait EnterFallback {
    fn __strads_enter<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized;
}

impl<T: Capturable> EnterFallback for T {
    #[inline(always)]
    fn __strads_enter<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> Plain<Self> {
        Plain(Some(Capturable::__strads_copy(self)))
    }
}

/// Fallback of `__strads_note` for captured plain values: an owned copy.
#[doc(hidden)]
pub trait NoteFallback {
    fn __strads_note<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized;
}

impl<T: Capturable> NoteFallback for T {
    #[inline(always)]
    fn __strads_note<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> Plain<Self> {
        Plain(Some(Capturable::__strads_copy(self)))
    }
}

/// Fallback of `__strads_record` for captured plain values: an owned copy.
#[doc(hidden)]
pub trait RecordFallback {
    fn __strads_record<C: ?Sized>(&self, _rec: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized;
}

impl<T: Capturable> RecordFallback for T {
    fn __strads_record<C: ?Sized>(&self, _rec: &C, _name: &'static str) -> Plain<Self> {
        Plain(Some(Capturable::__strads_copy(self)))
    }
}

/// `__strads_task` for the bindings of a recording body that are not recording views (plain
/// values): nothing to start.
#[doc(hidden)]
pub trait TaskFallback {
    #[inline(always)]
    fn __strads_task(&self) {}
}

impl<T: ?Sized> TaskFallback for T {}

/// The bodies' binding of a capture whose type cannot be captured at all. Its capture is
/// refused already, with the error that says why; the fallbacks above need the type to
/// be [`Capturable`], so without this last choice (found after them: it takes `&mut
/// self`) each version of the body would refuse it a second time.
#[doc(hidden)]
pub trait CaptureRefused {
    fn __strads_enter<C: ?Sized>(&mut self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized,
    {
        refused()
    }
    fn __strads_note<C: ?Sized>(&mut self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized,
    {
        refused()
    }
    fn __strads_record<C: ?Sized>(&mut self, _rec: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized,
    {
        refused()
    }
    fn __strads_direct<C: ?Sized>(&mut self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized,
    {
        refused()
    }
    fn __strads_window<C: ?Sized>(&mut self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized,
    {
        refused()
    }
    fn __strads_lock<C: ?Sized>(&mut self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized,
    {
        refused()
    }
}

impl<T> CaptureRefused for T {}

/// What [`CaptureRefused`] would bind, were the body to compile.
fn refused<T>() -> Plain<T> {
    unreachable!("a body that captures a value it cannot capture does not compile")
}

#[cfg(test)]
mod tests {
    use super::{Scratch, VectorView};
    use crate::access::{Binding, Fault, SHARED};
    use crate::dds::DirectView;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// Whether `access` raised `Fault::Outside` for `key`.
    fn refused(key: u64, access: impl FnOnce()) -> bool {
        match catch_unwind(AssertUnwindSafe(access)) {
            Ok(()) => false,
            Err(payload) => match payload.downcast_ref::<Fault>() {
                Some(Fault::Outside { key: k, .. }) => *k == key,
                other => panic!("unexpected payload {other:?}"),
            },
        }
    }

    #[test]
    fn a_group_view_admits_what_its_group_holds_and_reads_what_is_shared() {
        // Group 7's view of four elements: it holds 0 and 2; 1 is shared read-only; 3
        // belongs to group 8.
        let mut data = vec![0u32; 4];
        let tags = [7, SHARED, 7, 8];
        let b = Binding {
            tags: tags.as_ptr(),
            allowed: 7,
            ..Binding::direct(1, data.as_mut_ptr().cast(), 4, std::ptr::null())
        };
        let mut v: VectorView<'_, u32> = VectorView::bind(&b, "v");
        for _ in 0..3 {
            v[0] += 1;
        }
        // A shared element is read, and refused for writing.
        assert_eq!(v[1], 0);
        assert!(refused(1, || v[1] += 1));
        // Another group's element is refused, read or written.
        v[2] += 1;
        assert!(refused(3, || v[3] += 1));
        assert!(refused(3, || {
            let _ = v[3];
        }));
        assert!(!refused(0, || v[0] += 1));
        assert_eq!(data, [4, 0, 1, 0]);
    }

    #[test]
    fn a_windowed_view_admits_its_block_and_checks_every_other_key() {
        // Group 3's view of eight elements with the window 2..5 (a rotated block): tags
        // inside the window are not read (they say 9 here), and outside it every access
        // is checked against its tag, however often the same key comes again.
        let mut data = vec![0u32; 8];
        let tags = [3, SHARED, 9, 9, 9, 3, 8, 8];
        let b = Binding {
            tags: tags.as_ptr(),
            allowed: 3,
            window_start: 2,
            window_len: 3,
            ..Binding::direct(1, data.as_mut_ptr().cast(), 8, std::ptr::null())
        };
        let mut v: VectorView<'_, u32> = VectorView::bind(&b, "v");
        for k in 2..5 {
            v[k] += 1;
        }
        for _ in 0..2 {
            v[5] += 1;
            assert!(refused(6, || v[6] += 1));
            assert!(refused(1, || v[1] += 1));
        }
        assert_eq!(v[1], 0);
        assert!(refused(7, || {
            let _ = v[7];
        }));
        assert_eq!(data, [0, 0, 1, 1, 1, 2, 0, 0]);
    }

    #[test]
    fn a_direct_view_of_a_window_only_table_admits_its_window_alone() {
        // Cell 3's block 2..5 of a rotated table whose tasks reach nothing else: inside
        // the block, reads and writes; outside it, every access is refused with the reason
        // the tags give (another group's block, or no task's), and past the end too.
        let mut data = vec![0u32; 8];
        let tags = [2, 2, 3, 3, 3, 4, 4, crate::access::UNTOUCHED];
        let b = Binding {
            tags: tags.as_ptr(),
            allowed: 3,
            window_start: 2,
            window_len: 3,
            window_only: true,
            ..Binding::direct(1, data.as_mut_ptr().cast(), 8, std::ptr::null())
        };
        let mut v: DirectView<'_, u32, true> = DirectView::bind(&b, "v");
        for k in 2..5 {
            v[k] += 1;
            v[k] += v[k];
        }
        for k in [0, 1, 5, 6, 7] {
            assert!(refused(k as u64, || v[k] += 1), "write of {k}");
            assert!(refused(k as u64, || _ = v[k]), "read of {k}");
        }
        let why = |k: usize| match std::panic::catch_unwind(AssertUnwindSafe(|| _ = v[k])) {
            Err(p) => match p.downcast_ref::<Fault>() {
                Some(Fault::Outside { reason, .. }) => *reason,
                other => panic!("unexpected payload {other:?}"),
            },
            Ok(()) => panic!("{k} admitted"),
        };
        assert_eq!(why(6), super::outside_reason(4));
        assert_eq!(why(7), super::outside_reason(crate::access::UNTOUCHED));
        assert!(matches!(
            std::panic::catch_unwind(AssertUnwindSafe(|| _ = v[8])).map_err(|p| p
                .downcast_ref::<Fault>()
                .map(|f| matches!(
                    f,
                    Fault::OutOfBounds {
                        index: 8,
                        len: 8,
                        ..
                    }
                ))),
            Err(Some(true))
        ));
        assert_eq!(v.get(8), None);
        assert_eq!(data, [0, 0, 2, 2, 2, 0, 0, 0]);

        // The same binding without `window_only` (a lone worker's) admits the whole table.
        let lone = Binding {
            tags: std::ptr::null(),
            window_only: false,
            ..b
        };
        let mut v: DirectView<'_, u32> = DirectView::bind(&lone, "v");
        for k in 0..8 {
            v[k] += 1;
        }
        assert_eq!(data, [1, 1, 3, 3, 3, 1, 1, 1]);

        // A window-only binding is never bound as a whole table (the lone worker's body):
        // refused when bound, before any access.
        let bound = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _: DirectView<'_, u32> = DirectView::bind(&b, "v");
        }));
        assert!(bound.is_err(), "a window-only binding bound whole");
    }

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
