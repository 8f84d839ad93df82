//! Direct views: how a captured DVector is indexed when one worker runs a call alone (one
//! thread in a world of one, or one rank's only worker in a serial `sync_for!`).
//!
//! Nothing can race with a lone worker, so a direct view checks only what the serial
//! program's `Vec` checks (the bound) plus, on writes, whether the loop may write the table
//! at all (`sync_for!` refuses writes to its input and to tables it cannot merge, whatever
//! the thread count, so that a program does not change behaviour when given more threads).
//! The view keeps no state the compiler must reload: its fields are plain values it can
//! keep in registers, so `p[u][f]` in an inner loop costs what it costs over a
//! `Vec<Vec<f32>>`.

use super::body::Capturable;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use super::vector::VectorRef;
use crate::access::{raise, Binding, ExecCtx, Fault};

/// A DVector as a lone worker's loop body sees it: indexable like a `Vec`, with the
/// bound checked on every access and nothing else on reads.
pub struct DirectView<'a, T> {
    ptr: *mut T,
    len: usize,
    writable: bool,
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
}

impl<'a, T> DirectView<'a, T> {
    /// A direct view of the elements a binding points to (a vector's, or a map's values).
    ///
    /// The binding must have no per-key tags, locks or dirty note: the engine makes direct
    /// runs only from bindings of that kind (see `Binding::is_direct`).
    #[inline(always)]
    pub(crate) fn bind(b: &Binding, name: &'static str) -> Self {
        debug_assert!(b.is_direct(), "a direct view of a checked binding");
        DirectView {
            ptr: b.ptr as *mut T,
            len: b.len,
            writable: b.writable,
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
        // SAFETY: as in `index`, with the bound checked here.
        (i < self.len).then(|| unsafe { &*self.ptr.add(i) })
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

    #[cold]
    #[inline(never)]
    fn out_of_bounds(&self, i: usize) -> ! {
        raise(Fault::OutOfBounds {
            table: self.name,
            index: i,
            len: self.len,
        })
    }

    #[cold]
    #[inline(never)]
    fn read_only(&self, i: usize) -> ! {
        raise(Fault::Outside {
            table: self.name,
            key: i as u64,
            write: true,
            reason: self.read_only_reason,
        })
    }
}

impl<T> Index<usize> for DirectView<'_, T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        if i >= self.len {
            self.out_of_bounds(i);
        }
        // SAFETY: `i < len`, and `ptr` points to `len` initialised elements that the
        // engine keeps alive and locked for the operator. Only this worker runs the call
        // (the engine makes direct views for lone workers only), and the registry refuses
        // a table captured twice, so no other reference to element `i` exists but the
        // ones this view hands out under the borrow rules.
        unsafe { &*self.ptr.add(i) }
    }
}

impl<T> IndexMut<usize> for DirectView<'_, T> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        if i >= self.len {
            self.out_of_bounds(i);
        }
        if !self.writable {
            self.read_only(i);
        }
        // SAFETY: as for `index`; `&mut self` rules out a second reference from this view.
        unsafe { &mut *self.ptr.add(i) }
    }
}

/// Fallback of `__strads_direct` for captured plain values: an owned copy.
#[doc(hidden)]
pub trait DirectFallback {
    fn __strads_direct<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> super::Plain<Self>
    where
        Self: Sized;
}

impl<T: Capturable> DirectFallback for T {
    #[inline(always)]
    fn __strads_direct<C: ?Sized>(&self, _ctx: &C, _name: &'static str) -> super::Plain<Self> {
        super::Plain::new(Capturable::__strads_copy(self))
    }
}
