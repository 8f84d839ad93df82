//! Lock views: how a captured DVector is indexed in a locking run (a loop whose accesses
//! change between calls, see [`Opts::recheck`](crate::Opts::recheck)): the first access
//! of a task to an element locks it and saves a copy, so that a task that meets an element
//! another worker holds can be undone and retried.

use super::body::Capturable;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::sync::atomic::Ordering;

use super::vector::VectorRef;
use super::view::{put_copy, Plain};
use crate::access::{raise, Binding, Conflict, ExecCtx, Fault, LockWord, FREE};

/// A DVector as a locking run's loop body sees it: indexable like a `Vec`.
///
/// Every access is bounds-checked and writes to tables the run reads only are refused.
/// The first access of a task to an element of a written table locks it and saves a
/// copy, so that a task that meets an element another worker holds can be undone and
/// retried. (Locking runs bind no tags and no dirty note: there is no plan, and
/// `sync_for!` never locks.)
pub struct LockView<'a, T> {
    ptr: *mut T,
    len: usize,
    writable: bool,
    read_only_reason: &'static str,
    name: &'static str,
    /// Locking runs: the worker's per-key stamps (see [`Binding::stamps`]), or null.
    stamps: *mut u32,
    /// Locking runs: the shared lock words, or null.
    locks: *const LockWord,
    ctx: &'a ExecCtx,
    /// Locking runs: the elements as the running task found them. Boxed, so that
    /// handing it to [`first_touch`] hands out no address inside the view: the view's
    /// fields, [`LockView::touched`] among them, then stay in registers across the body's
    /// stores (with the undo inline, BPR's body ran 14% slower).
    undo: Box<UnsafeCell<Undo<T>>>,
    /// The keys of the running task's two latest first accesses in this view, and of its
    /// two latest first writes: an access to one of them was checked already (its bounds,
    /// its lock, its copy), so it costs a comparison or two, where the full check costs a
    /// bound, a flag and a stamp loaded anew after each of the body's stores. A task
    /// indexes the same few rows again and again (BPR's `q[i][f]` and `q[j][f]` for every
    /// factor `f`). Cleared at every task's start ([`LockView::__strads_task`]).
    touched: [Cell<usize>; 2],
    /// See [`LockView::touched`].
    copied: [Cell<usize>; 2],
    _life: PhantomData<&'a mut [T]>,
}

/// An entry of [`LockView::touched`] that no key below a view's length matches.
const NOT_RECENT: usize = usize::MAX;

impl<T: Clone> VectorRef<T> {
    /// Binds the captured DVector for a locking run.
    #[doc(hidden)]
    #[inline]
    pub fn __strads_lock<'a>(&'a self, ctx: &'a ExecCtx, name: &'static str) -> LockView<'a, T> {
        LockView::bind(ctx, ctx.binding(self.table.id), name)
    }
}

impl<'a, T: Clone> LockView<'a, T> {
    /// A view of the elements a binding points to (a vector's, or a map's values).
    #[inline]
    pub(crate) fn bind(ctx: &'a ExecCtx, b: &Binding, name: &'static str) -> Self {
        debug_assert!(
            b.tags.is_null() && b.dirty.is_null(),
            "a lock view of a planned or replicated binding"
        );
        LockView {
            ptr: b.ptr as *mut T,
            len: b.len,
            writable: b.writable,
            read_only_reason: b.read_only_reason,
            name,
            stamps: b.stamps,
            locks: b.locks,
            ctx,
            undo: Box::new(UnsafeCell::new(Undo::default())),
            touched: [const { Cell::new(NOT_RECENT) }; 2],
            copied: [const { Cell::new(NOT_RECENT) }; 2],
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

    /// Starts a task: none of its elements is touched yet. Called by generated code
    /// before each loop index's body.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_task(&mut self) {
        for r in self.touched.iter().chain(&self.copied) {
            r.set(NOT_RECENT);
        }
    }
}

impl<'a, T: Clone> LockView<'a, T> {
    #[inline(always)]
    fn check(&self, i: usize, write: bool) {
        let [a, b] = match write {
            true => &self.copied,
            false => &self.touched,
        };
        // An index of `usize::MAX` (a `-1` cast) matches the entries' empty mark, and must
        // still fail its bound. (A test of `i < len` here instead cost BPR's locking run
        // 9%; this compare with a constant costs nothing measurable.)
        if i == NOT_RECENT || (i != a.get() && i != b.get()) {
            self.first_check(i, write);
        } else {
            debug_assert!(
                self.stamps.is_null()
                    // SAFETY: a key noted in `touched` was checked below `len`.
                    || unsafe { *self.stamps.add(i) } | u32::from(!write)
                        == stamp_of(self.ctx.epoch.get(), true),
                "{}: a lock view's latest touch of {i} is not the running task's",
                self.name
            );
        }
    }

    /// [`LockView::check`] of an element that is not among the task's latest first
    /// touches (of its latest writes, for a write).
    #[inline(always)]
    fn first_check(&self, i: usize, write: bool) {
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
        if !self.stamps.is_null() {
            // SAFETY: `stamps` has one entry per element (`i < len`), owned by this worker.
            let stamp = unsafe { *self.stamps.add(i) };
            // See `stamp`: a read needs the element locked in this task, a write also
            // copied (one comparison either way, `write` being known where this is inlined).
            let copied = stamp_of(self.ctx.epoch.get(), true);
            let touched = match write {
                true => stamp == copied,
                false => stamp | 1 == copied,
            };
            if !touched {
                let (ptr, stamps, locks) = (self.ptr, self.stamps, self.locks);
                // SAFETY: `i < len`, the length of `ptr`, `stamps` and (when not null)
                // `locks`; `undo` is this view's.
                unsafe { first_touch(i, (ptr, stamps, locks), self.ctx, &self.undo, write) };
            }
        }
        note(&self.touched, i);
        if write {
            note(&self.copied, i);
        }
    }
}

/// Notes `key` as the latest of `recent`, the older latest kept.
#[inline(always)]
fn note(recent: &[Cell<usize>; 2], key: usize) {
    if recent[0].get() != key {
        recent[1].set(recent[0].get());
        recent[0].set(key);
    }
}

/// The stamp of an element in task `epoch`: touched (locked) in that task, and `copied`
/// (saved for an abandoned task to put back) once the task first writes it. An element
/// the task only reads is not copied: its undo would put back what is there.
/// (`MAX_LOCKING_TASKS` keeps a worker's epochs below 2^31, so the stamps never wrap.)
#[inline(always)]
fn stamp_of(epoch: u32, copied: bool) -> u32 {
    epoch << 1 | u32::from(copied)
}

/// The running task's first access to element `i` in a locking run, or its first write
/// after reads: the first access takes the element's lock (or abandons the task if
/// another worker holds it); the first write saves the element as it was, for an
/// abandoned task to put back.
///
/// Out of line, and given the view's pointers rather than the view, so that no call is
/// handed the view's address and the fields each access tests may stay in registers (as
/// `refuse` does for checked views). A BPR body, three rows indexed per factor, spent 12%
/// fewer samples in its own code on two workers than with a method taking `&self`.
///
/// # Safety
/// `i` is below the length of the element, stamp and (when not null) lock arrays, which
/// are a lock view's, and `undo` is that view's.
#[inline(never)]
unsafe fn first_touch<T: Clone>(
    i: usize,
    (ptr, stamps, locks): (*mut T, *mut u32, *const LockWord),
    ctx: &ExecCtx,
    undo: &UnsafeCell<Undo<T>>,
    write: bool,
) {
    let epoch = ctx.epoch.get();
    // SAFETY: `i` is below the stamps' length (the caller's promise); the stamps are this
    // worker's alone.
    let stamp = unsafe { &mut *stamps.add(i) };
    let locked = *stamp | 1 == stamp_of(epoch, true);
    if !locked && !locks.is_null() {
        // SAFETY: the lock words are one per element (`i < len`) and outlive the call.
        let lock = unsafe { &*locks.add(i) };
        // Acquire: the previous holder's writes to the element (released with its lock)
        // happen before ours.
        if lock
            .0
            .compare_exchange(FREE, ctx.tag, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            ctx.aborting.set(true);
            std::panic::resume_unwind(Box::new(Conflict));
        }
        ctx.held.borrow_mut().push(lock);
    }
    *stamp = stamp_of(epoch, write);
    if write {
        // SAFETY: `undo` is used by its view's own methods and this function only, on one
        // thread, and no reference to it outlives this call.
        let undo = unsafe { &mut *undo.get() };
        // SAFETY: `i < len`, and this task now holds the element (its lock, or a replica
        // only this worker uses), so nothing writes it meanwhile; it is unchanged since
        // the task locked it (every write comes here first).
        undo.save(epoch, i, unsafe { &*ptr.add(i) });
    }
}

impl<T> Drop for LockView<'_, T> {
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

impl<T: Clone> Index<usize> for LockView<'_, T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        self.check(i, false);
        // SAFETY: `i < len` was checked, and `ptr` points to `len` initialised elements
        // that the engine keeps alive and locked for the operator. No other thread writes
        // element `i` now: `check` took the element's lock (a written table), or it is in
        // this worker's own replica (a relaxed table, no stamps' locks), or no task of the
        // run writes the table (no stamps: writes are refused).
        unsafe { &*self.ptr.add(i) }
    }
}

impl<T: Clone> IndexMut<usize> for LockView<'_, T> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.check(i, true);
        // SAFETY: as for `index`; `check` took the element's lock (or it is in this
        // worker's own replica), so no other thread holds a reference to element `i`, and
        // `&mut self` rules out a second reference from this thread.
        unsafe { &mut *self.ptr.add(i) }
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

/// Fallback of `__strads_lock` for captured plain values: an owned copy.
#[doc(hidden)]
pub trait LockFallback {
    fn __strads_lock<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> Plain<Self>
    where
        Self: Sized;
}

impl<T: Capturable> LockFallback for T {
    #[inline(always)]
    fn __strads_lock<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> Plain<Self> {
        Plain::new(Capturable::__strads_copy(self))
    }
}
