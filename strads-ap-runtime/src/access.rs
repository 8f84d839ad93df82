//! What a loop body sees while it runs: the bindings of its captured DDSs, and the
//! faults a view raises.
//!
//! This layer sits below the DDS views and the engines and imports neither: an engine
//! hands each view a [`Binding`] (where the table's elements are, and the mode the plan
//! gives the table: read-only, tag-checked, locked, replicated), and the view checks every
//! access against it.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// Tag of a key that any group may read and none may write.
pub(crate) const SHARED: u32 = u32::MAX;
/// Tag of a key that reconnaissance execution saw no task touch.
pub(crate) const UNTOUCHED: u32 = u32::MAX - 1;

/// How one captured table is bound for the group that is running.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    pub id: u64,
    /// Element 0 of the table's storage (type-erased `*mut T`).
    pub ptr: *mut u8,
    pub len: usize,
    /// A map's key index, or null for a vector.
    pub index: *const u8,
    /// Per-key tags to check against `allowed`, or null for no check.
    pub tags: *const u32,
    pub allowed: u32,
    pub writable: bool,
    /// Why writes are refused when `writable` is false.
    pub read_only_reason: &'static str,
    /// Where a worker's replica notes the keys it writes (Hybrid `sync_for!`), or null.
    pub dirty: *mut Dirty,
    /// Locking runs (`engine/async_for/locking.rs`): per key, the task epoch in which this
    /// worker last touched it (first touches lock and save the element), or null.
    pub stamps: *mut u32,
    /// Locking runs: per-key lock words shared by the workers (0 free, else the holder's
    /// tag), or null for a table no other worker writes (a replica).
    pub locks: *const LockWord,
    /// Keys `window_start..window_start + window_len` the running group holds alone (a
    /// rotated table's block in a world of one): views admit reads and writes there with
    /// one comparison, and check other keys by their tags. Empty for no window.
    pub window_start: usize,
    pub window_len: usize,
    /// Whether every access the plan allows lies in the window (a rotated table no task
    /// reaches outside its cell's block): a [`DirectView`](crate::dds::DirectView) may
    /// then admit the window alone and leave the tags unread.
    pub window_only: bool,
}

impl Binding {
    /// A binding that reads and writes the table at `ptr` (`len` elements; `index`, a
    /// map's key index or null) directly, unchecked: no tags, note, locks or window.
    pub fn direct(id: u64, ptr: *mut u8, len: usize, index: *const u8) -> Self {
        Binding {
            id,
            ptr,
            len,
            index,
            tags: std::ptr::null(),
            allowed: 0,
            writable: true,
            read_only_reason: "",
            dirty: std::ptr::null_mut(),
            stamps: std::ptr::null_mut(),
            locks: std::ptr::null(),
            window_start: 0,
            window_len: 0,
            window_only: false,
        }
    }

    /// Whether a lone worker may use the table through a
    /// [`DirectView`](crate::dds::DirectView): no tags to check, no locks, no dirty note.
    #[inline]
    pub fn is_direct(&self) -> bool {
        self.tags.is_null() && self.stamps.is_null() && self.locks.is_null() && self.dirty.is_null()
    }
}

/// The lock of one element in a locking run. (Padding each to its own cache line, against
/// false sharing, made no measurable difference to TransE.)
pub(crate) struct LockWord(pub AtomicU32);

/// A lock word no worker holds.
pub(crate) const FREE: u32 = 0;

/// Payload of the unwind that abandons a task whose element another worker holds (a
/// locking run retries the task later).
pub(crate) struct Conflict;

/// The keys a worker wrote in its replica since its last push, each once.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    flags: Vec<u64>,
    keys: Vec<usize>,
}

impl Dirty {
    /// Room for keys below `len`.
    pub fn new(len: usize) -> Self {
        Dirty {
            flags: vec![0; len.div_ceil(64)],
            keys: Vec::new(),
        }
    }

    /// Notes a write of key `i` (below the length given to [`Dirty::new`]).
    #[inline(always)]
    pub fn mark(&mut self, i: usize) {
        let (word, bit) = (i >> 6, 1u64 << (i & 63));
        if self.flags[word] & bit == 0 {
            self.flags[word] |= bit;
            self.keys.push(i);
        }
    }

    /// The keys noted, in first-write order.
    pub fn keys(&self) -> &[usize] {
        &self.keys
    }

    /// Forgets the keys noted.
    pub fn clear(&mut self) {
        for &i in &self.keys {
            self.flags[i >> 6] = 0;
        }
        self.keys.clear();
    }
}

// SAFETY: a `Binding` is a description (pointers as values); it is dereferenced only by
// views and mergers, whose own SAFETY arguments cover concurrent use.
unsafe impl Send for Binding {}
// SAFETY: as above.
unsafe impl Sync for Binding {}

/// Why a loop body stopped early; carried as a panic payload by views so that the engine
/// can turn it into an [`Error`](crate::Error) with the call site and loop index.
#[derive(Debug)]
pub(crate) enum Fault {
    OutOfBounds {
        table: &'static str,
        index: usize,
        len: usize,
    },
    MissingKey {
        table: &'static str,
        key: String,
    },
    Outside {
        table: &'static str,
        key: u64,
        write: bool,
        reason: &'static str,
    },
}

/// The execution context of one worker thread running a loop body.
///
/// Generated code passes it to each captured DDS to obtain a view; users never name it.
pub struct ExecCtx {
    pub(crate) bindings: Vec<Binding>,
    pub(crate) current: Cell<usize>,
    /// The tables to prefetch at the loop index, those whose elements' memory is
    /// followed ([`Ahead::owned`]) first.
    pub(crate) prefetch: Vec<Ahead>,
    /// Locking runs: this worker's lock tag (non-zero), or 0 when not locking.
    pub(crate) tag: u32,
    /// Locking runs: the running task's number (from 1), which views compare with their
    /// stamps.
    pub(crate) epoch: Cell<u32>,
    /// Locking runs: the lock words the running task holds.
    pub(crate) held: RefCell<Vec<*const LockWord>>,
    /// Locking runs: set while a conflicting task unwinds, so that views put back the
    /// elements it changed.
    pub(crate) aborting: Cell<bool>,
    /// The key of the unit of work being run, under which reductions keep their partials
    /// (see `engine::reduce`); 0 for runs in loop order on one worker.
    pub(crate) unit: Cell<u64>,
    /// The worker's count for the call's progress bar, while one is on.
    pub(crate) progress: Option<std::sync::Arc<crate::progress::Slot>>,
    /// Views borrow raw pointers from the bindings; the context is tied to one thread.
    _not_send: PhantomData<*const ()>,
}

impl ExecCtx {
    /// Counts `n` units of work (indices, data items) started, for the progress bar.
    #[inline]
    pub(crate) fn count(&self, n: usize) {
        if let Some(slot) = &self.progress {
            slot.add(n);
        }
    }

    pub(crate) fn new(bindings: Vec<Binding>) -> Self {
        ExecCtx {
            bindings,
            current: Cell::new(0),
            prefetch: Vec::new(),
            tag: 0,
            epoch: Cell::new(0),
            held: RefCell::new(Vec::new()),
            aborting: Cell::new(false),
            progress: crate::progress::worker_slot(),
            unit: Cell::new(0),
            _not_send: PhantomData,
        }
    }

    /// Ends the running task of a locking run: releases its locks.
    #[inline]
    pub(crate) fn end_task(&self) {
        let mut held = self.held.borrow_mut();
        for &lock in held.iter() {
            // SAFETY: `held` holds pointers into the lock words of the running call, which
            // outlive every worker context of that call.
            unsafe { (*lock).0.store(FREE, Ordering::Release) };
        }
        held.clear();
        self.aborting.set(false);
    }

    /// Starts the next task of a locking run.
    #[inline]
    fn next_task(&self) {
        self.end_task();
        self.epoch.set(self.epoch.get().wrapping_add(1).max(1));
    }

    #[inline]
    pub(crate) fn binding(&self, id: u64) -> &Binding {
        match self.bindings.iter().find(|b| b.id == id) {
            Some(b) => b,
            None => unreachable_binding(id),
        }
    }

    /// The loop index (async_for) or mini-batch start (sync_for) being run.
    pub(crate) fn current(&self) -> usize {
        self.current.get()
    }
}

#[cold]
#[inline(never)]
fn unreachable_binding(id: u64) -> ! {
    panic!("strads-ap internal error: table {id} was captured but not bound by the engine")
}

/// Raises a [`Fault`] out of a loop body without running the panic hook.
#[cold]
#[inline(never)]
pub(crate) fn raise(fault: Fault) -> ! {
    std::panic::resume_unwind(Box::new(fault))
}

/// A loop index type: `usize`, `u32`, `u64`, `i32`, `i64`.
pub trait LoopIndex: Copy + Send + Sync + 'static {
    /// The index as an offset from zero.
    fn to_usize(self) -> Option<usize>;
    /// Back from an offset.
    fn from_usize(i: usize) -> Self;
}

macro_rules! loop_index {
    ($($t:ty),*) => {$(
        impl LoopIndex for $t {
            #[inline(always)]
            fn to_usize(self) -> Option<usize> { usize::try_from(self).ok() }
            #[inline(always)]
            fn from_usize(i: usize) -> Self { i as $t }
        }
    )*};
}
loop_index!(usize, u32, u64, i32, i64);

/// How far ahead (in tasks) the engine prefetches the elements of tables the body
/// reads at its own loop index.
const PREFETCH_DISTANCE: usize = 12;

/// How far ahead (in tasks) the engine prefetches the memory such elements own: nearer
/// than the elements, whose words it reads (by then in cache) to find that memory.
const OWNED_PREFETCH_DISTANCE: usize = 4;

/// The words of an element read for addresses of memory it owns: enough for a record of
/// a few `Vec`s or `String`s (three words each).
const OWNED_WORDS: usize = 8;

/// A table whose elements the engine prefetches ahead of the tasks that read them at
/// their own loop index (`ratings[k]`, Lasso's columns `x[j]`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ahead {
    /// The address of element 0.
    pub addr: usize,
    /// The size of one element.
    pub size: usize,
    /// Whether to prefetch what the elements point to as well: elements that may own
    /// memory (`Vec`, `String`) of a table no worker writes during the call.
    pub owned: bool,
}

/// Hints the CPU to load the cache line at `p`.
#[inline(always)]
pub(crate) fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and has no effect on the program's
    // memory, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Hints the CPU to load the first two cache lines of each block of memory the element of
/// `size` bytes at `p` may point to: each 8-aligned word of its first [`OWNED_WORDS`] that
/// looks like a user-space address (a `Vec`'s or `String`'s buffer). A sparse feature
/// column or a string key read in a task order that jumps across the table (a dynamic
/// round, a plan's cell) otherwise misses cache at every task, where the serial loop
/// streams that memory in allocation order; Lasso's body ran at 1.9× the serial body's
/// time per update for this.
///
/// The element's type is not known here, so this reads raw words: a length or a value
/// that happens to look like an address is prefetched too, which costs a wasted hint and
/// nothing else.
#[inline(always)]
fn prefetch_owned(p: *const u8, size: usize) {
    #[cfg(target_arch = "x86_64")]
    for w in 0..(size / 8).min(OWNED_WORDS) {
        let word: usize;
        // SAFETY: the 8 bytes read lie inside the element at `p` (`8 w + 8 ≤ size`), in a
        // table the running call holds and no worker writes during the call
        // (`Ahead::owned`). They are read by an instruction of our own, not as a Rust
        // `usize`, so padding bytes are only bits here; the value is used as a prefetch
        // hint and never dereferenced.
        unsafe {
            core::arch::asm!(
                "mov {word}, qword ptr [{at}]",
                at = in(reg) p.wrapping_add(w * 8),
                word = out(reg) word,
                options(nostack, readonly, preserves_flags)
            );
        }
        if word & 7 == 0 && word > 4096 && word < 1 << 47 {
            prefetch_read(word as *const u8);
            prefetch_read(word.wrapping_add(64) as *const u8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, size);
}

/// Prefetches what the elements at `key` of `tables` own. Out of line, so that the index
/// iterator of a loop that follows nothing stays as small as it was.
#[inline(never)]
fn follow_ahead(tables: &[Ahead], key: usize) {
    for t in tables {
        prefetch_owned(t.addr.wrapping_add(key * t.size) as *const u8, t.size);
    }
}

enum Kind<'a> {
    Range(std::ops::Range<usize>),
    List {
        base: usize,
        list: &'a [u32],
        pos: usize,
    },
}

/// The loop indices one call of a generated body runs, in order.
///
/// While it hands out index `i`, it prefetches, for tables the body reads at its own loop
/// index (`ratings[k]`), the elements a few tasks ahead in the plan's order.
pub struct Indices<'a, I> {
    kind: Kind<'a>,
    ctx: &'a ExecCtx,
    prefetch: &'a [Ahead],
    /// The leading part of `prefetch` whose elements' memory is followed too: empty for
    /// most loops, which then pay one test per task for it.
    follow: &'a [Ahead],
    _index: PhantomData<I>,
}

impl<'a, I> Indices<'a, I> {
    /// The indices `base + t` for every offset `t` of `list`.
    pub(crate) fn list(base: usize, list: &'a [u32], ctx: &'a ExecCtx) -> Self {
        ctx.count(list.len());
        Indices {
            kind: Kind::List { base, list, pos: 0 },
            ctx,
            prefetch: &ctx.prefetch,
            follow: &ctx.prefetch[..ctx.prefetch.partition_point(|t| t.owned)],
            _index: PhantomData,
        }
    }

    /// The indices of `range`, in order.
    pub(crate) fn range(range: std::ops::Range<usize>, ctx: &'a ExecCtx) -> Self {
        ctx.count(range.len());
        Indices {
            kind: Kind::Range(range),
            ctx,
            prefetch: &[],
            follow: &[],
            _index: PhantomData,
        }
    }
}

impl<I: LoopIndex> Iterator for Indices<'_, I> {
    type Item = I;

    #[inline(always)]
    fn next(&mut self) -> Option<I> {
        if self.ctx.tag != 0 {
            self.ctx.next_task();
        }
        let i = match &mut self.kind {
            Kind::Range(r) => r.next()?,
            Kind::List { base, list, pos } => {
                let t = *list.get(*pos)?;
                if let Some(&ahead) = list.get(*pos + PREFETCH_DISTANCE) {
                    let key = *base + ahead as usize;
                    for t in self.prefetch {
                        prefetch_read(t.addr.wrapping_add(key * t.size) as *const u8);
                    }
                }
                if !self.follow.is_empty() {
                    if let Some(&near) = list.get(*pos + OWNED_PREFETCH_DISTANCE) {
                        follow_ahead(self.follow, *base + near as usize);
                    }
                }
                *pos += 1;
                *base + t as usize
            }
        };
        self.ctx.current.set(i);
        Some(I::from_usize(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetching_what_elements_own_reads_any_bytes_and_faults_on_none() {
        // Words that are lengths, capacities, padding, values that look like addresses of
        // nothing mapped, and real buffers: each is at most a hint.
        let strings: Vec<String> = (0..64).map(|i| "x".repeat(i)).collect();
        let padded: Vec<(u8, u64, u16)> = (0..64).map(|i| (i as u8, 1 << 40 | i, 7)).collect();
        let wild: Vec<[u64; 4]> = (0..64u64)
            .map(|i| [8, 4096 * i + 8, (1 << 47) - 8, u64::MAX - i])
            .collect();
        for i in 0..64 {
            prefetch_owned((&strings[i] as *const String).cast(), size_of::<String>());
            prefetch_owned((&padded[i] as *const (u8, u64, u16)).cast(), 24);
            prefetch_owned((&wild[i] as *const [u64; 4]).cast(), 32);
        }
        assert_eq!(strings[63].len(), 63, "the elements are left as they were");
        assert_eq!(padded[5], (5, 1 << 40 | 5, 7));
    }
}
