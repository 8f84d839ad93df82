//! Locking runs of `async_for!`, for loops whose accesses change between calls.
//!
//! A plan is made from one reconnaissance and reused by every later call. A loop whose
//! tasks touch different elements at every call (TransE draws new corrupted triples every
//! epoch) would need reconnaissance and planning at every call, which together cost about
//! as much as the loop itself. In a world of one, such a loop ([`Opts::recheck`]) runs
//! with per-element locks instead:
//!
//! - workers take chunks of consecutive tasks;
//! - a task's first access to an element of a written table takes the element's lock (one
//!   compare-and-swap), and its first write of the element saves a copy of it (an element
//!   the task only reads is left as it was); the task releases its locks when it ends. This is strict two-phase locking, so the run is serializable;
//! - a task that meets an element another worker holds is abandoned: its views put back the
//!   elements it changed, it releases its locks, and it runs again once the other tasks are
//!   done, on one worker, where nothing can conflict.
//!
//! Abandoning a task unwinds out of its body (with a payload that runs no panic hook), so a
//! binary built with `panic = "abort"` re-plans re-checked loops at every call instead; so
//! does a call of 2^31 indices or more (tasks are numbered in 32 bits).
//!
//! Reconnaissance runs on the first call only, to learn which tables are written: tables no
//! task writes are read without locks (a write to one is refused, as with a plan), and a
//! relaxed table is a per-worker replica (its elements are saved too, so that an abandoned
//! task leaves no half of its update in the replica; where no table is locked, no task is
//! abandoned and nothing is saved).
//!
//! [`Opts::recheck`]: crate::Opts::recheck

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::sync::Mutex;

use std::time::Instant;

use super::execute::{bind_worker, push_replicas, CellScheduler};
use super::planned::plan_config;
use super::{lone, on_one_worker, table_infos, written_slots, Loop};
use crate::access::{Conflict, ExecCtx, Indices, LockWord, LoopIndex, FREE};
use crate::dds::table::Replica;
use crate::engine::cache::{kept, Keep, Locking};
use crate::engine::pipeline::Ran;
use crate::engine::{body_error, Base, CallSite, FirstError, Merges, Registry};
use crate::error::{Error, Result};
use crate::plan::{self, SlotMode, TableInfo};
use crate::recon::AccessLog;

/// Runs the call with per-element locks, by the table modes of an earlier call or, on the
/// first, of a reconnaissance.
pub(super) fn run<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let mut kept_runs = match kept().modes.take(&l.key) {
        Some(kept) => kept,
        None => {
            let (log, took) = l.reconnoitre(bases)?;
            l.call.note(|f| {
                f.recon += took;
                f.first_call = true;
            });
            learn(l, log, &table_infos(&l.call.registry, bases))
        }
    };
    let one = l.on_one_worker();
    let t0 = Instant::now();
    let outcome = match one {
        true => lone::run_in_order(l, bases, &kept_runs.modes).map(|()| Outcome {
            chunks: 1,
            retried: 0,
        }),
        false => {
            let Locking {
                modes,
                placement,
                buffers,
            } = &mut kept_runs;
            run_locked(l, bases, modes, placement.as_deref(), buffers)
        }
    };
    let ran = t0.elapsed();
    l.call.note(|f| {
        f.ran = true;
        f.running += ran;
        f.strategy = Some(if one { on_one_worker("locks") } else { "locks" });
        if one {
            f.workers = Some(1);
        }
        if let Ok(o) = &outcome {
            f.groups = Some(o.chunks);
            f.retried += o.retried as u64;
        }
    });
    if outcome.is_ok() {
        let zero = std::time::Duration::ZERO;
        l.paced(one, ran, zero, zero, true);
    }
    drop(locked);
    let ran = Ran::new(outcome.map(|_| ()), written_slots(&kept_runs.modes));
    Ok(match ran.outcome {
        // A body that wrote a table reconnaissance saw only read: learn again next call.
        Err(Error::AccessOutsidePlan { .. }) => ran,
        _ => ran.keeping(Keep::Modes(l.key.clone(), kept_runs)),
    })
}

/// What the locking runs of a loop keep from a log of its accesses (a reconnaissance, or
/// a recorded run's): the table modes, and where its tasks go.
///
/// The tasks go by the rotation the planner makes from the log, if it makes one (see
/// [`plan::rotation_of`]): workers take slices of its cells, keeping row and column
/// blocks apart, so that the accesses that repeat from call to call (BPR's user rows,
/// where the negative items it draws afresh change) stay in one worker's blocks, and
/// their rows in its cache. Locks still guard every access, so a task whose accesses
/// left its cell's blocks waits for nothing but a conflict. Where the planner would make
/// components, the workers take chunks of consecutive tasks: a components plan keeps
/// tasks apart batch by batch, not in one worker's memory from batch to batch.
pub(super) fn learn<Task, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    log: AccessLog,
    tables: &[TableInfo],
) -> Locking {
    let modes = plan::slot_modes(&log, tables);
    let placed = modes.contains(&SlotMode::Checked) && l.call.threads > 1;
    let t0 = Instant::now();
    let config = plan_config(l, l.call.threads);
    let placement = placed
        .then(|| plan::rotation_of(log, tables, &config))
        .flatten()
        .map(Arc::new);
    l.call.note(|f| f.planning += t0.elapsed());
    Locking {
        modes,
        placement,
        buffers: Buffers::default(),
    }
}

/// What a locking run did.
#[derive(Debug, Default)]
struct Outcome {
    /// Chunks of consecutive tasks, or slices of the placement's cells, the workers took.
    pub chunks: usize,
    /// Tasks abandoned on a conflict and run again.
    pub retried: usize,
}

/// Tasks a worker of a locking run takes at once, as offsets from the call's first index.
enum Tasks<'a> {
    /// Consecutive tasks.
    Range(Range<usize>),
    /// A slice of a placement's cell, in loop order.
    List(&'a [u32]),
}

impl<'a> Tasks<'a> {
    fn len(&self) -> usize {
        match self {
            Tasks::Range(r) => r.len(),
            Tasks::List(list) => list.len(),
        }
    }

    /// The loop indices of tasks `part` (positions in `self`), for a body.
    fn indices<I>(&self, start: usize, part: Range<usize>, ctx: &'a ExecCtx) -> Indices<'a, I> {
        match *self {
            Tasks::Range(ref r) => Indices::range(
                start + r.start + part.start..start + r.start + part.end,
                ctx,
            ),
            Tasks::List(list) => Indices::list(start, &list[part], ctx),
        }
    }

    /// The position in `self` just after the task at loop index `i`.
    fn after(&self, start: usize, i: usize) -> usize {
        match self {
            Tasks::Range(r) => i - start - r.start + 1,
            Tasks::List(list) => list.partition_point(|&t| start + t as usize <= i),
        }
    }
}

/// Chunk size: small enough to balance the workers and to merge relaxed replicas often
/// (their staleness is one chunk), large enough to amortise taking a chunk.
fn chunk_size(n: usize, threads: usize) -> usize {
    (n / (threads * 32)).clamp(64, 1024)
}

/// Whether a locking run with table modes `modes` stamps the elements of a `mode` table at
/// a task's first touch (locking them) and saves them at its first write: always for a locked table, for a relaxed one only where some table
/// is locked (with none, no task is abandoned, so there is nothing to put back).
fn saves_copies(mode: SlotMode, modes: &[SlotMode]) -> bool {
    match mode {
        SlotMode::Checked => true,
        SlotMode::Relaxed => modes.contains(&SlotMode::Checked),
        SlotMode::ReadOnly => false,
    }
}

/// A worker of a locking run: its context, the stamps its views compare, and its replicas
/// of relaxed tables.
struct Worker {
    ctx: ExecCtx,
    replicas: Vec<(usize, Replica)>,
    /// Owned here because the context's bindings point into them; back to the
    /// [`Buffers`] when the worker is done.
    stamps: Vec<Vec<u32>>,
}

/// Memory a locking run keeps from call to call, so that no call maps and faults in fresh
/// pages for it: the lock words of the locked tables, and each worker's stamps. (For
/// TransE's 35,000 entities, 140 KB of each per call: page faults took 5% of a call.)
/// Kept with the loop's table modes: 4 bytes per element of a locked table, and 4 more
/// per worker, of a locked or saved relaxed table.
#[derive(Default)]
pub(crate) struct Buffers {
    locks: Vec<Vec<LockWord>>,
    /// Stamp sets of workers not running.
    stamps: Mutex<Vec<Vec<Vec<u32>>>>,
}

impl Buffers {
    /// Makes the lock words free lock words for the elements of each locked table
    /// (`modes`, `bases`).
    fn free_locks(&mut self, modes: &[SlotMode], bases: &[Base]) {
        self.locks.resize_with(modes.len(), Vec::new);
        for ((words, mode), base) in self.locks.iter_mut().zip(modes).zip(bases) {
            let len = match mode {
                SlotMode::Checked => base.len,
                _ => 0,
            };
            if words.len() == len {
                // Every task released its locks, but a worker that failed outside a
                // task might not have: nothing is held at a call's start.
                words
                    .iter()
                    .for_each(|w| w.0.store(FREE, Ordering::Relaxed));
            } else {
                *words = (0..len).map(|_| LockWord(AtomicU32::new(FREE))).collect();
            }
        }
    }
}

/// A worker's stamps from `spare`, all 0 (no task touched anything), `lens[slot]` per
/// slot.
fn stamps(spare: &Mutex<Vec<Vec<Vec<u32>>>>, lens: impl Iterator<Item = usize>) -> Vec<Vec<u32>> {
    let mut set = spare.lock().pop().unwrap_or_default();
    let mut slots = 0;
    for (slot, len) in lens.enumerate() {
        if set.len() == slot {
            set.push(Vec::new());
        }
        set[slot].clear();
        set[slot].resize(len, 0);
        slots += 1;
    }
    set.truncate(slots);
    set
}

/// What the workers of one locking run share.
struct Run<'r, Task, I> {
    site: &'static CallSite,
    start: usize,
    task: &'r Task,
    body: fn(&Task, &ExecCtx, Indices<'_, I>),
    registry: &'r Registry,
    bases: &'r [Base],
    modes: &'r [SlotMode],
    locks: &'r [Vec<LockWord>],
    stamps: &'r Mutex<Vec<Vec<Vec<u32>>>>,
    merges: Merges,
    errors: FirstError,
    next_tag: AtomicU32,
    /// Tasks a body meets a held element in run one at a time (see [`Run::tasks`]).
    one_by_one: bool,
}

impl<Task: Sync, I: LoopIndex> Run<'_, Task, I> {
    /// Whether the run stamps `mode` tables (see [`saves_copies`]).
    fn saves(&self, mode: SlotMode) -> bool {
        saves_copies(mode, self.modes)
    }

    /// A worker.
    fn worker(&self) -> Worker {
        let (registry, bases, modes) = (self.registry, self.bases, self.modes);
        let lens = modes
            .iter()
            .zip(bases)
            .map(|(&mode, base)| match self.saves(mode) {
                true => base.len,
                false => 0,
            });
        let mut stamps = stamps(self.stamps, lens);
        let (bindings, replicas) =
            bind_worker(
                registry,
                bases,
                modes,
                &self.merges,
                |slot, b| match modes[slot] {
                    SlotMode::ReadOnly => {
                        b.read_only_reason = "the first call's reconnaissance saw no task \
                                              write this table; the next call learns it again"
                    }
                    SlotMode::Checked => {
                        b.locks = self.locks[slot].as_ptr();
                        b.stamps = stamps[slot].as_mut_ptr();
                    }
                    SlotMode::Relaxed if self.saves(SlotMode::Relaxed) => {
                        b.stamps = stamps[slot].as_mut_ptr()
                    }
                    SlotMode::Relaxed => {}
                },
            );
        let mut ctx = ExecCtx::new(bindings);
        ctx.tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        Worker {
            ctx,
            replicas,
            stamps,
        }
    }

    /// Ends a worker: its stamps go back to the buffers.
    fn done(&self, w: Worker) {
        self.stamps.lock().push(w.stamps);
    }

    /// Merges a worker's replicas of relaxed tables into the tables.
    fn push(&self, w: &mut Worker) {
        push_replicas(self.registry, self.bases, &self.merges, &mut w.replicas);
    }

    /// Runs `tasks` on `w`, noting in `abandoned` those that met an element another
    /// worker held.
    ///
    /// A task that meets a held element unwinds, and with it the body's reduction
    /// variables; those of the tasks before it in the same run of the body would be lost,
    /// so a body with reduction variables runs one task at a time.
    fn tasks(&self, w: &Worker, tasks: Tasks<'_>, abandoned: &mut Vec<usize>) {
        let (ctx, start) = (&w.ctx, self.start);
        let mut from = 0;
        while from < tasks.len() {
            let to = if self.one_by_one {
                from + 1
            } else {
                tasks.len()
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                (self.body)(self.task, ctx, tasks.indices(start, from..to, ctx));
            }));
            let Err(payload) = outcome else {
                from = to;
                continue;
            };
            let i = ctx.current();
            // The views have put back what the task changed; now its locks go.
            let conflict = ctx.aborting.get() && payload.is::<Conflict>();
            ctx.end_task();
            if !conflict {
                self.errors.set(body_error(self.site, i, payload));
                break;
            }
            abandoned.push(i);
            from = tasks.after(start, i);
        }
    }
}

/// Runs tasks `start..start + n` of a loop with per-element locks (see the module docs);
/// `modes` says, per slot, whether the table is read-only, written (locked) or relaxed.
/// Workers take slices of `placement`'s cells if given, else chunks of consecutive tasks.
fn run_locked<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    modes: &[SlotMode],
    placement: Option<&plan::Rotation>,
    buffers: &mut Buffers,
) -> Result<Outcome> {
    let (n, threads) = (l.n, l.call.threads);
    buffers.free_locks(modes, bases);
    let r = Run {
        site: l.call.site,
        start: l.start,
        task: l.call.task(),
        body: l.lock,
        registry: &l.call.registry,
        bases,
        modes,
        locks: &buffers.locks,
        stamps: &buffers.stamps,
        merges: Merges::default(),
        errors: FirstError::new(),
        next_tag: AtomicU32::new(1),
        one_by_one: !l.call.registry.reductions.is_empty(),
    };
    let abandoned = Mutex::new(Vec::new());
    let pool = l.call.here.pool(threads);
    let chunks = match placement {
        Some(rot) => {
            let cells: Vec<usize> = (0..rot.cells.len()).collect();
            let sched = CellScheduler::new(rot, &cells, None, threads);
            let taken = AtomicUsize::new(0);
            let work = || {
                let (mut w, mut mine) = (r.worker(), Vec::new());
                let me = sched.seat();
                while let Some(unit) = sched.take(&r.errors, me) {
                    let tasks = &rot.cells[unit.cell].tasks[unit.tasks.clone()];
                    let c = taken.fetch_add(1, Ordering::Relaxed);
                    w.ctx.unit.set(1 + c as u64);
                    r.tasks(&w, Tasks::List(tasks), &mut mine);
                    r.push(&mut w);
                    sched.finish(unit.row, unit.col);
                }
                r.done(w);
                abandoned.lock().extend(mine);
            };
            pool.on_workers(threads, &work);
            taken.into_inner()
        }
        None => {
            let chunk = chunk_size(n, threads);
            let chunks = n.div_ceil(chunk);
            let next = AtomicUsize::new(0);
            let work = || {
                let (mut w, mut mine) = (r.worker(), Vec::new());
                loop {
                    let c = next.fetch_add(1, Ordering::Relaxed);
                    if c >= chunks || r.errors.failed() {
                        break;
                    }
                    let first = c * chunk;
                    w.ctx.unit.set(1 + c as u64);
                    let tasks = Tasks::Range(first..(first + chunk).min(n));
                    r.tasks(&w, tasks, &mut mine);
                    r.push(&mut w);
                }
                r.done(w);
                abandoned.lock().extend(mine);
            };
            pool.on_workers(threads.min(chunks), &work);
            chunks
        }
    };

    let mut retry = abandoned.into_inner();
    let retried = retry.len();
    if !retry.is_empty() && !r.errors.failed() {
        // Alone, a worker meets no lock held by another.
        retry.sort_unstable();
        let mut w = r.worker();
        w.ctx.unit.set(1 + chunks as u64);
        let mut again = Vec::new();
        for &i in &retry {
            let t = i - l.start;
            r.tasks(&w, Tasks::Range(t..t + 1), &mut again);
        }
        r.push(&mut w);
        r.done(w);
        assert!(
            again.is_empty(),
            "strads-ap internal error: {}: task {} retried alone met a locked element",
            l.call.site,
            again[0]
        );
    }
    l.call.note(|f| {
        f.merging += r.merges.spent();
        f.workers = Some(threads);
    });
    r.errors.into_result()?;
    Ok(Outcome { chunks, retried })
}
