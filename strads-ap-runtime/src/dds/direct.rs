//! Direct views: how a captured DVector is indexed when one worker runs a call alone (one
//! thread in a world of one, or one rank's only worker in a serial `sync_for!`), and in the
//! groups of a rotation plan whose written tables are reached only inside each cell's
//! blocks.
//!
//! Nothing can race with a lone worker, so a direct view checks only what the serial
//! program's `Vec` checks (the bound) plus, on writes, whether the loop may write the table
//! at all (`sync_for!` refuses writes to its input and to tables it cannot merge, whatever
//! the thread count, so that a program does not change behaviour when given more threads).
//! In a rotation cell the bound is the cell's block of the table (its *window*): a key
//! outside it belongs to another cell, and the view refuses it as a checked view's tags
//! would. The view keeps no state the compiler must reload: its fields are plain values it
//! can keep in registers, and every refusal ends the body, so the one comparison of
//! `p[u][f]` in an inner loop is made once per `u` and the loop costs what it costs over a
//! `Vec<Vec<f32>>`.

use super::body::Capturable;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use super::vector::VectorRef;
use super::view::outside_reason;
use crate::access::{raise, Binding, ExecCtx, Fault};

/// A DVector as a lone worker's loop body sees it: indexable like a `Vec`, with the
/// bound checked on every access and nothing else on reads.
///
/// `WINDOW` says whether the view admits a window of the table (a rotation group's
/// block) or the whole of it (a lone worker's): two body versions, so that a lone
/// worker's check is the one `i < len` of a `Vec`, which the compiler merges with the
/// slice's own, while a group's is one more subtraction.
pub struct DirectView<'a, T, const WINDOW: bool = false> {
    ptr: *mut T,
    len: usize,
    /// The keys admitted, `start..start + span`: the whole table, or a rotation cell's
    /// block of a table whose every access lies in its cell's block
    /// (`Binding::window_only`). Inside `0..len` either way.
    start: usize,
    span: usize,
    writable: bool,
    /// The plan's tags where the window stands in for them, only to say why a key outside
    /// it is refused; null otherwise.
    tags: *const u32,
    read_only_reason: &'static str,
    name: &'static str,
    _life: PhantomData<&'a mut [T]>,
}

impl<T: Clone> VectorRef<T> {
    /// Binds the captured DVector for a lone worker.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_direct<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> DirectView<'a, T> {
        DirectView::bind(ctx.binding(self.table.id), name)
    }

    /// Binds the captured DVector for a rotation group whose checked tables are
    /// reached only in their windows.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __strads_window<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        name: &'static str,
    ) -> DirectView<'a, T, true> {
        DirectView::bind(ctx.binding(self.table.id), name)
    }
}

impl<'a, T, const WINDOW: bool> DirectView<'a, T, WINDOW> {
    /// A direct view of the elements a binding points to (a vector's, or a map's values).
    ///
    /// The binding must have no per-key tags, locks or dirty note, or be a rotated table
    /// whose window covers every access the plan allows, bound as `WINDOW`: the engine
    /// makes direct runs only from bindings of those kinds (see `Binding::is_direct`,
    /// `Binding::window_only`).
    #[inline(always)]
    pub(crate) fn bind(b: &Binding, name: &'static str) -> Self {
        debug_assert!(
            b.is_direct() || (b.window_only && b.stamps.is_null() && b.dirty.is_null()),
            "a direct view of a checked binding"
        );
        // Once per body run, not per access: a window-only binding in a lone worker's
        // body would admit keys outside its window.
        assert!(
            WINDOW || !b.window_only,
            "a window-only binding of `{name}` in a body without windows"
        );
        let (start, span) = match b.window_only {
            true => (
                b.window_start,
                b.window_len.min(b.len.saturating_sub(b.window_start)),
            ),
            false => (0, b.len),
        };
        DirectView {
            ptr: b.ptr as *mut T,
            len: b.len,
            start,
            span,
            writable: b.writable,
            tags: if b.window_only {
                b.tags
            } else {
                std::ptr::null()
            },
            read_only_reason: b.read_only_reason,
            name,
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

    /// Whether access `i` (a write if `write`) is admitted: one comparison of values the
    /// compiler keeps in registers, combined without branches so that the only branch
    /// is to a refusal, which ends the body.
    #[inline(always)]
    fn admits(&self, i: usize, write: bool) -> bool {
        let inside = match WINDOW {
            true => i.wrapping_sub(self.start) < self.span,
            false => i < self.len,
        };
        inside & (!write | self.writable)
    }

    /// Raises the fault of an access [`DirectView::admits`] refused, as a checked view
    /// would: past the end, a write to a table the loop may not write, or a key outside
    /// the group's window.
    #[cold]
    #[inline(never)]
    fn refuse(&self, i: usize, write: bool) -> ! {
        if i >= self.len {
            raise(Fault::OutOfBounds {
                table: self.name,
                index: i,
                len: self.len,
            })
        }
        let outside = i.wrapping_sub(self.start) >= self.span;
        let reason = match (outside, self.tags.is_null()) {
            (false, _) => self.read_only_reason,
            // SAFETY: `tags` has one entry per element (the planner sizes it to the
            // table), and `i < len`.
            (true, false) => outside_reason(unsafe { *self.tags.add(i) }),
            (true, true) => outside_reason(crate::access::UNTOUCHED),
        };
        raise(Fault::Outside {
            table: self.name,
            key: i as u64,
            write,
            reason,
        })
    }
}

impl<T, const WINDOW: bool> Index<usize> for DirectView<'_, T, WINDOW> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        if !self.admits(i, false) {
            self.refuse(i, false);
        }
        // SAFETY: `i` is in the window, which lies in `0..len`, and `ptr` points to `len`
        // initialised elements that the engine keeps alive and locked for the operator.
        // Either only this worker runs the call (a lone worker: the window is the whole
        // table) or the window is the running group's block of a rotated table, which the
        // plan gives to no other group while this one runs, and every task of the group
        // reached only its block in reconnaissance (`Binding::window_only`); the registry
        // refuses a table captured twice. So no other reference to element `i` exists but
        // the ones this view hands out under the borrow rules.
        unsafe { &*self.ptr.add(i) }
    }
}

impl<T, const WINDOW: bool> IndexMut<usize> for DirectView<'_, T, WINDOW> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        if !self.admits(i, true) {
            self.refuse(i, true);
        }
        // SAFETY: as for `index`; `&mut self` rules out a second reference from this view.
        unsafe { &mut *self.ptr.add(i) }
    }
}

/// Fallback of `__strads_direct` and `__strads_window` for captured plain values: an
/// owned copy.
#[doc(hidden)]
pub trait DirectFallback {
    fn __strads_direct<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> super::Plain<Self>
    where
        Self: Sized;

    fn __strads_window<C: ?Sized>(&self, ctx: &C, name: &'static str) -> super::Plain<Self>
    where
        Self: Sized,
    {
        self.__strads_direct(ctx, name)
    }
}

impl<T: Capturable> DirectFallback for T {
    #[inline(always)]
    fn __strads_direct<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> super::Plain<Self> {
        super::Plain::new(Capturable::__strads_copy(self))
    }
}
