//! Running a plan's groups on the workers: rotation cells handed out by a scheduler that
//! keeps row and column blocks exclusive, components batch after batch.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::Loop;
use crate::access::{Ahead, Binding, ExecCtx, Indices, LoopIndex, UNTOUCHED};
use crate::cluster::Pool;
use crate::dds::table::Replica;
use crate::engine::{body_error, Base, CallSite, FirstError, Merges, Registry};
use crate::error::{Error, Result};
use crate::plan::{self, Batch, GroupRef, Plan, Schedule, SlotMode, Work};
use crate::recon::AccessLog;
use crate::sync::{Condvar, Mutex, SpinBarrier};

/// Points a worker's checked bindings at `group`: the tag it may access and, where
/// `windowed[slot]` (see [`windowed_slots`]), the key window it holds alone, inside which
/// its views skip the tags.
fn bind_group(
    bindings: &mut [Binding],
    modes: &[SlotMode],
    schedule: &Schedule,
    group: GroupRef,
    windowed: &[bool],
) {
    for (slot, b) in bindings.iter_mut().enumerate() {
        if modes[slot] == SlotMode::Checked {
            b.allowed = schedule.allowed(slot, group);
            let window = match windowed[slot] {
                true => schedule.window(slot, group),
                false => 0..0,
            };
            (b.window_start, b.window_len) = (window.start, window.len());
        }
    }
}

/// Per slot, whether a group's window may stand in for its tags. In a world of one, for
/// every slot. Across ranks, a key no task touched in reconnaissance would be neither
/// fetched nor sent back unless its block travels whole: only the slots whose rotation
/// blocks do (`plan::dist::whole_block_slots`).
fn windowed_slots(distributed: bool, bases: &[Base], schedule: &Schedule) -> Vec<bool> {
    match (distributed, schedule) {
        (false, _) => vec![true; bases.len()],
        (true, Schedule::Rotation(rot)) => {
            let whole = plan::dist::whole_block_slots(rot);
            (0..bases.len()).map(|slot| whole.contains(&slot)).collect()
        }
        (true, Schedule::Components(_)) => vec![false; bases.len()],
    }
}

/// Per slot, whether a checked table's window covers every access the plan allows (the
/// rotation's `window_only` tables), so that its views may admit the window alone. In a
/// world of one only: across ranks a body may reach elements not yet fetched, which the
/// checked views' tags refuse.
fn window_only_slots(distributed: bool, modes: &[SlotMode], schedule: &Schedule) -> Vec<bool> {
    match (distributed, schedule) {
        (false, Schedule::Rotation(rot)) => (0..modes.len())
            .map(|s| modes[s] == SlotMode::Checked && rot.window_only.contains(&s))
            .collect(),
        _ => vec![false; modes.len()],
    }
}

/// Per-worker state: the context whose bindings views read, and replicas of relaxed tables.
struct Worker<Task, I> {
    ctx: ExecCtx,
    replicas: Vec<(usize, Replica)>,
    /// The body this worker runs: over direct views when no binding has tags to check
    /// (every written table relaxed, or none written) or every checked binding is
    /// reached only inside its window (a rotation of SGDMF's or biased MF's kind), which
    /// then cost what a `Vec` costs; over checked views otherwise.
    body: fn(&Task, &ExecCtx, Indices<'_, I>),
}

/// What the workers of one [`execute`] share.
struct Shared<'s, Task, I> {
    site: &'static CallSite,
    task: &'s Task,
    start: usize,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    direct: fn(&Task, &ExecCtx, Indices<'_, I>),
    window: fn(&Task, &ExecCtx, Indices<'_, I>),
    recheck: bool,
    /// The longest run of one key's tasks in a rotation's unit of work, if the loop
    /// asked for one (see [`slices_of`]).
    interleave: Option<usize>,
    registry: &'s Registry,
    threads: usize,
    pool: Arc<Pool>,
    bases: &'s [Base],
    modes: &'s [SlotMode],
    schedule: &'s Schedule,
    indexed_by_task: &'s [usize],
    /// Whether workers prefetch what the elements of `indexed_by_task` own: across ranks.
    /// In a world of one, [`lay_out_task_tables`] has put that memory in plan order, or
    /// the plan reads the tables nearly in order, and the hardware streams it.
    owned_ahead: bool,
    windowed: Vec<bool>,
    /// Per slot, whether the group's window covers every access the plan allows it (see
    /// [`window_only_slots`]).
    window_only: Vec<bool>,
    merges: Merges,
    errors: FirstError,
    /// Nanoseconds the workers spent running groups, for the diagnoses.
    busy: AtomicU64,
}

impl<Task: Sync, I: LoopIndex> Shared<'_, Task, I> {
    /// A worker whose checked bindings read their tags at `tags(slot)`.
    fn worker(&self, tags: impl Fn(usize) -> *const u32) -> Worker<Task, I> {
        let (registry, modes) = (self.registry, self.modes);
        let (bindings, replicas) =
            bind_worker(registry, self.bases, modes, &self.merges, |slot, b| {
                if modes[slot] == SlotMode::Checked {
                    b.tags = tags(slot);
                    b.window_only = self.window_only[slot];
                }
            });
        let mut ctx = ExecCtx::new(bindings);
        // The plan's `indexed_by_task` slots are read-only: follow them where it pays.
        ctx.prefetch = prefetched(registry, self.bases, self.indexed_by_task, |_| {
            self.owned_ahead
        });
        let body = if ctx.bindings.iter().all(Binding::is_direct) {
            self.direct
        } else if ctx.bindings.iter().all(|b| b.is_direct() || b.window_only) {
            self.window
        } else {
            self.run
        };
        Worker {
            ctx,
            replicas,
            body,
        }
    }

    /// Runs `tasks`, the tasks of `group` (`unit`: its key for reductions), on `w`.
    fn run_group(&self, w: &mut Worker<Task, I>, group: GroupRef, unit: u64, tasks: &[u32]) {
        let t0 = std::time::Instant::now();
        bind_group(
            &mut w.ctx.bindings,
            self.modes,
            self.schedule,
            group,
            &self.windowed,
        );
        w.ctx.unit.set(unit);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            (w.body)(self.task, &w.ctx, Indices::list(self.start, tasks, &w.ctx));
        }));
        if let Err(payload) = outcome {
            let error = body_error(self.site, w.ctx.current(), payload);
            self.errors.set(writes_follow_values(self.recheck, error));
        }
        push_replicas(self.registry, self.bases, &self.merges, &mut w.replicas);
        let took = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy.fetch_add(took, Ordering::Relaxed);
    }

    /// Runs one step of rotation cells.
    fn run_cells(&self, rot: &plan::Rotation, cells: &[usize], tags: &[Vec<u32>]) {
        let threads = self.threads;
        let sched = CellScheduler::new(rot, cells, self.interleave, threads);
        let work = || {
            let mut w = self.worker(|slot| tags[slot].as_ptr());
            let me = sched.seat();
            while let Some(unit) = sched.take(&self.errors, me) {
                let cell = &rot.cells[unit.cell];
                let tasks = &cell.tasks[unit.tasks.clone()];
                let key = unit_key(unit.cell as u64, unit.slice as u64);
                self.run_group(&mut w, GroupRef::Cell(unit.cell), key, tasks);
                sched.finish(unit.row, unit.col);
            }
        };
        self.pool.on_workers(threads, &work);
    }

    /// Runs `groups` of batch `b` (one step across ranks), after re-tagging the batch on
    /// this thread.
    fn run_batch(
        &self,
        batches: &[Batch],
        step: (usize, &[usize]),
        log: &AccessLog,
        tags: &mut [Vec<u32>],
    ) {
        let (b, groups) = step;
        let batch = &batches[b];
        if batches.len() > 1 {
            plan::retag(log, self.modes, batch, tags);
        }
        let tags: &[Vec<u32>] = tags;
        let next = AtomicUsize::new(0);
        let work = || {
            let mut w = self.worker(|slot| tags[slot].as_ptr());
            while let Some(&g) = groups.get(next.fetch_add(1, Ordering::Relaxed)) {
                if self.errors.failed() {
                    break;
                }
                let (group, key) = group_ref(b, g);
                self.run_group(&mut w, group, key, &batch.groups[g].tasks);
            }
        };
        self.pool.on_workers(self.threads.min(groups.len()), &work);
    }

    /// Runs every batch of a components schedule (`steps`, in a world of one) in one
    /// dispatch of the workers; returns how many steps ran.
    ///
    /// Steps alternate between two sets of tags: the plan's for even steps, a spare for
    /// odd ones. A worker done with its groups of one step re-tags the next step's groups
    /// in the other set (several workers at once, see [`plan::retag_group`]) while the
    /// others still run theirs, then waits at a spin barrier; so a batch costs one barrier,
    /// and re-tagging fills the time a worker would spend waiting for the slowest group.
    /// (Before: a wake-up of the pool and a re-tag of the whole batch on the calling
    /// thread while the others waited, 0.1 ms a batch, which a factorisation machine's
    /// packing plan, 780 batches of 130 tasks, paid more than its bodies.)
    ///
    /// A set's tags left from an older step are harmless: the ids of an older step's
    /// groups are no running group's, and a key left `SHARED` has no writer in the running
    /// step (a step's writers re-tag their keys before it starts), so a read of it outside
    /// the plan races with nothing.
    fn run_batches(
        &self,
        batches: &[Batch],
        steps: &[Work],
        log: &AccessLog,
        tags: &mut [Vec<u32>],
    ) -> usize {
        let threads = self.threads;
        let retag = batches.len() > 1;
        let mut spare: Vec<Vec<u32>> = match retag {
            true => tags.iter().map(|t| vec![UNTOUCHED; t.len()]).collect(),
            false => Vec::new(),
        };
        let sets = [plan::atomic_tags(tags), plan::atomic_tags(&mut spare)];
        let barrier = SpinBarrier::new(threads);
        // Per step: the next group to re-tag and the next to run.
        let next: Vec<[AtomicUsize; 2]> = steps.iter().map(|_| Default::default()).collect();
        let groups_of = |i: usize| match &steps[i] {
            Work::Groups { batch, groups } => (*batch, &groups[..]),
            Work::Cells(_) => unreachable!("a components schedule has groups"),
        };
        let retag_step = |i: usize| {
            let (b, groups) = groups_of(i);
            while let Some(&g) = groups.get(next[i][0].fetch_add(1, Ordering::Relaxed)) {
                plan::retag_group(log, self.modes, &batches[b].groups[g], &sets[i % 2]);
            }
        };
        let ran = AtomicUsize::new(0);
        // Whether a body failed in the last step, as the last worker to reach the barrier
        // after it saw: the same for every worker, where a worker's own look at the error
        // after the barrier could see a failure in the next step's bodies that a faster
        // worker has already begun (and then stop while the others wait at the next
        // barrier for ever).
        let stop = AtomicBool::new(false);
        let verdict = || stop.store(self.errors.failed(), Ordering::Relaxed);
        let work = || {
            let mut w = self.worker(|slot| sets[0][slot].as_ptr().cast::<u32>());
            if retag {
                retag_step(0);
                barrier.wait();
            }
            for i in 0..steps.len() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                ran.fetch_max(i + 1, Ordering::Relaxed);
                if retag {
                    for (slot, b) in w.ctx.bindings.iter_mut().enumerate() {
                        if self.modes[slot] == SlotMode::Checked {
                            b.tags = sets[i % 2][slot].as_ptr().cast::<u32>();
                        }
                    }
                }
                let (b, groups) = groups_of(i);
                while let Some(&g) = groups.get(next[i][1].fetch_add(1, Ordering::Relaxed)) {
                    if self.errors.failed() {
                        break;
                    }
                    let (group, key) = group_ref(b, g);
                    self.run_group(&mut w, group, key, &batches[b].groups[g].tasks);
                }
                if i + 1 < steps.len() {
                    if retag {
                        retag_step(i + 1);
                    }
                    // Every group of this step has ended, and every key of the next
                    // step is tagged, before any body of the next step checks one.
                    barrier.wait_leading(verdict);
                }
            }
        };
        self.pool.on_workers(threads, &work);
        ran.into_inner()
    }
}

/// A components group's reference and its key for reductions.
fn group_ref(batch: usize, group: usize) -> (GroupRef, u64) {
    let key = unit_key(batch as u64, group as u64);
    (GroupRef::Group { batch, group }, key)
}

/// What runs between the steps of a plan across ranks (see [`execute`]).
pub(super) type Between<'b> = &'b mut dyn FnMut(usize, &FirstError) -> Result<bool>;

/// Runs `steps` of `plan` (all of it in a world of one; this rank's share across ranks)
/// on the call's workers. Across ranks, `between(i, errors)` runs before step `i` and
/// after the last, while no worker runs, and says whether to stop; in a world of one
/// (`between` is `None`) the steps of a components schedule run in one dispatch of the
/// workers (see [`Shared::run_batches`]).
pub(super) fn execute<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    plan: &mut Plan,
    steps: &[Work],
    mut between: Option<Between<'_>>,
) -> Result<()> {
    // Disjoint borrows: components re-tag between batches while the schedule is read.
    let Plan {
        modes,
        tags,
        schedule,
        log,
        indexed_by_task,
        ..
    } = plan;
    let shared = Shared {
        site: l.call.site,
        task: l.call.task(),
        start: l.start,
        run: l.run,
        direct: l.direct,
        window: l.window,
        recheck: l.opts.recheck,
        interleave: l.opts.interleave.or_else(default_interleave),
        registry: &l.call.registry,
        threads: l.call.threads,
        pool: l.call.here.pool(l.call.threads),
        bases,
        modes,
        schedule,
        indexed_by_task,
        owned_ahead: l.call.here.is_distributed(),
        windowed: windowed_slots(l.call.here.is_distributed(), bases, schedule),
        window_only: window_only_slots(l.call.here.is_distributed(), modes, schedule),
        merges: Merges::default(),
        errors: FirstError::new(),
        busy: AtomicU64::new(0),
    };
    let mut ran_steps = 0;
    let mut stopped = false;
    match (&*schedule, between.is_none()) {
        (Schedule::Components(batches), true) => {
            ran_steps = shared.run_batches(batches, steps, log, tags);
        }
        _ => {
            for (i, work) in steps.iter().enumerate() {
                let stop = match between.as_mut() {
                    Some(between) => between(i, &shared.errors)?,
                    None => false,
                };
                if stop || shared.errors.failed() {
                    stopped = true;
                    break;
                }
                match (&*schedule, work) {
                    (Schedule::Rotation(rot), Work::Cells(cells)) if !cells.is_empty() => {
                        shared.run_cells(rot, cells, tags);
                    }
                    (Schedule::Components(batches), Work::Groups { batch, groups })
                        if !groups.is_empty() =>
                    {
                        shared.run_batch(batches, (*batch, groups), log, tags);
                    }
                    (Schedule::Rotation(_), Work::Cells(_))
                    | (Schedule::Components(_), Work::Groups { .. }) => continue,
                    _ => unreachable!("steps do not match the schedule"),
                }
                ran_steps += 1;
            }
        }
    }
    let Shared {
        merges,
        errors,
        busy,
        ..
    } = shared;
    l.call.note(|f| {
        f.merging += merges.spent();
        f.workers = Some(l.call.threads);
        f.busy += std::time::Duration::from_nanos(busy.into_inner());
        f.steps += ran_steps;
    });
    if let (false, Some(between)) = (stopped, between) {
        between(steps.len(), &errors)?;
    }
    errors.into_result()
}

/// Where the tables every task reads at its own loop index start, with their element
/// sizes: what a worker's index iterator prefetches ahead. What their elements own is
/// prefetched too for the slots `follow` names, which must be slots no worker writes
/// during the call.
pub(super) fn prefetched(
    registry: &Registry,
    bases: &[Base],
    indexed_by_task: &[usize],
    follow: impl Fn(usize) -> bool,
) -> Vec<Ahead> {
    let mut tables: Vec<Ahead> = indexed_by_task
        .iter()
        .map(|&slot| {
            let table = &registry.entries[slot].table;
            Ahead {
                addr: bases[slot].ptr as usize,
                size: table.elem_size(),
                owned: follow(slot) && table.owns_heap(),
            }
        })
        .collect();
    // Those whose memory is followed first (see `Indices`).
    tables.sort_by_key(|t| !t.owned);
    tables
}

/// Lays out the heap memory of the tables every task reads at its own loop index
/// (`plan.indexed_by_task`: the task table, `ratings[k]`) in the order the plan runs the
/// tasks, once per plan. A plan runs a cell's or group's tasks in loop order but picks them
/// from across the whole range, so a body that follows a task record's strings or rows
/// (`String` ids, sparse feature lists) would read them all over the heap: twice the serial
/// body's time per task on a 300,000-rating table keyed by strings. The prefetcher covers
/// the records themselves; this covers what they own. Only where the plan runs on several
/// workers in a world of one (one worker runs in loop order, which is already the order
/// the memory was allocated in).
pub(super) fn lay_out_task_tables<Task, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    plan: &Plan,
) {
    if l.call.here.is_distributed() || plan.indexed_by_task.is_empty() {
        return;
    }
    let lists: Vec<&[u32]> = match &plan.schedule {
        Schedule::Rotation(rot) => rot.cells.iter().map(|c| &c.tasks[..]).collect(),
        Schedule::Components(batches) => batches
            .iter()
            .flat_map(|b| b.groups.iter().map(|g| &g.tasks[..]))
            .collect(),
    };
    if !scattered(&lists) {
        return;
    }
    let start = l.start;
    for &slot in &plan.indexed_by_task {
        let mut keys = lists
            .iter()
            .flat_map(|tasks| tasks.iter().map(move |&t| start + t as usize));
        let (base, table) = (&bases[slot], &l.call.registry.entries[slot].table);
        // SAFETY: the tables are locked by this call (`bases`) and no worker runs.
        l.call
            .here
            .pool(l.call.threads)
            .install(|| unsafe { table.lay_out(base.ptr, base.len, &mut keys) });
    }
}

/// Whether the plan's units (task `lists`) mostly step across the table rather than
/// along it: most consecutive tasks of a unit more than [`NEAR`] keys apart. A plan of
/// contiguous runs (a components plan over independent rows) reads the task table nearly
/// in order already, and laying it out would cost a copy for nothing.
fn scattered(lists: &[&[u32]]) -> bool {
    let (mut far, mut pairs) = (0usize, 0usize);
    for tasks in lists {
        for w in tasks.windows(2) {
            pairs += 1;
            far += usize::from(w[1].wrapping_sub(w[0]) > NEAR);
        }
    }
    far * 2 > pairs
}

/// Tasks this close in a unit read neighbouring records (see [`scattered`]).
const NEAR: u32 = 4;

/// Makes `b` refuse writes: the table of a slot reconnaissance saw no task write.
pub(super) fn refuse_writes(b: &mut Binding) {
    b.writable = false;
    b.read_only_reason = "reconnaissance saw no task write this table";
}

/// A worker's bindings of the captured tables by their modes: read-only tables refuse
/// writes, relaxed tables get a replica of the table (returned with its slot); then
/// `adjust` completes each binding (a checked table's tags or locks).
pub(in crate::engine) fn bind_worker(
    registry: &Registry,
    bases: &[Base],
    modes: &[SlotMode],
    merges: &Merges,
    mut adjust: impl FnMut(usize, &mut Binding),
) -> (Vec<Binding>, Vec<(usize, Replica)>) {
    let mut replicas = Vec::new();
    let bindings = bases
        .iter()
        .enumerate()
        .map(|(slot, base)| {
            let mut b = base.binding();
            match modes[slot] {
                SlotMode::ReadOnly => refuse_writes(&mut b),
                SlotMode::Checked => {}
                SlotMode::Relaxed => {
                    let merger = registry.entries[slot]
                        .merger
                        .as_ref()
                        .expect("relaxed tables have a merger");
                    // Making a replica is no merge: not counted as one.
                    // SAFETY: the master holds `len` elements, locked by this engine;
                    // masters of relaxed tables are only touched under `merges`' lock.
                    let r = merges.with(|_| unsafe { merger.replica(base.ptr, base.len) });
                    b.ptr = r.ptr();
                    if b.index.is_null() {
                        // The worker's own copy: every element is its to read and write,
                        // so a vector view admits an access with the one comparison of
                        // its window (which is also the bounds check), as its checks
                        // would (no tags, writable).
                        (b.window_start, b.window_len) = (0, b.len);
                    }
                    replicas.push((slot, r));
                }
            }
            adjust(slot, &mut b);
            b
        })
        .collect();
    (bindings, replicas)
}

/// Adds a worker's relaxed replicas' deltas to their tables and refreshes them.
pub(in crate::engine) fn push_replicas(
    registry: &Registry,
    bases: &[Base],
    merges: &Merges,
    replicas: &mut [(usize, Replica)],
) {
    if replicas.is_empty() {
        return;
    }
    merges.merge(|_| {
        for (slot, r) in replicas {
            let merger = registry.entries[*slot].merger.as_ref().expect("merger");
            // SAFETY: the master is locked by this engine and only touched under
            // `merges`' lock, which we hold.
            unsafe { merger.push(bases[*slot].ptr, r) };
        }
    })
}

/// Tasks per unit of work the rotation scheduler aims for by default: small enough that
/// every block pair is visited several times per call, large enough to amortise taking a
/// unit and to keep a worker's blocks in its cache (see [`Opts::interleave`] for finer
/// units).
///
/// [`Opts::interleave`]: crate::Opts::interleave
const UNIT_TASKS: usize = 2048;

/// The most slices a cell is cut into by its size alone (hot keys may cut it finer).
const SIZE_SLICES: usize = 16;

/// Into how many slices each rotation cell is cut by default: the same for all cells.
fn slices_per_cell(rot: &plan::Rotation) -> usize {
    let tasks: usize = rot.cells.iter().map(|c| c.tasks.len()).sum();
    let cells = rot.cells.len().max(1);
    (tasks / cells / UNIT_TASKS).clamp(1, SIZE_SLICES)
}

/// The run of loops that set none: `STRADS_INTERLEAVE` in the environment, if set.
fn default_interleave() -> Option<usize> {
    static ENV: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        std::env::var(crate::cluster::env::INTERLEAVE)
            .ok()?
            .parse()
            .ok()
    })
    .map(|run: usize| run.max(1))
}

/// Tasks per unit under [`Opts::interleave`], in runs (see [`slices_of`]).
///
/// [`Opts::interleave`]: crate::Opts::interleave
const UNIT_RUNS: usize = 16;

/// Under [`Opts::interleave`], how far past the first unit not yet taken (as a fraction
/// of a cell) a unit may be taken: a cell's slices run at most about this far ahead of
/// the others'.
///
/// [`Opts::interleave`]: crate::Opts::interleave
const INTERLEAVE_WINDOW: f64 = 0.125;

/// The most slices a cell is cut into at all, and the fewest tasks a unit holds: bounds
/// on the scheduler's bookkeeping for huge cells.
const MAX_SLICES: usize = 4096;
const MIN_UNIT: usize = 16;

/// How a rotation cuts its cells under [`Opts::interleave`]`(run)`: a unit holds at most
/// about `run` tasks of one row or column key, and about `UNIT_RUNS * run` tasks in all.
///
/// The scheduler hands units out by how far into its cell they lie, so a key's updates
/// against one cell interleave with its updates against its other cells, closer to the
/// serial loop's order. A cell run in long pieces is a stratum of correlated updates: with
/// a large constant step a frequent row ends the call fitted to the last block of the
/// other dimension it met. Measured on the zoo's GloVe (195,000 co-occurrences of Zipf
/// words, the most frequent word in a tenth of them, 10 epochs, 2 workers, seeds 1-3):
/// by default the trained loss ended 54-70% above serial's; with runs of 128, 13-16%;
/// with runs of 32, 0.4-2.1%. Finer units cost cache reuse (a worker changes blocks more
/// often) and per-unit work, the more the cheaper the body: that GloVe ran at 1.7x serial
/// instead of 2.0x, a GloVe with rows of `[f32; 32]` at 0.9x instead of 1.3x (runs of
/// 16), and programs whose order matters less paid as much (biased MF 1.45x instead of
/// 1.8x, for an RMSE 0.03% closer to serial's), which is why the default stays coarse.
///
/// Returns into how many slices a rotation cell of `n` tasks, `hottest` of which share
/// one key, is cut, for runs of `run` tasks and units of about `unit` tasks.
///
/// [`Opts::interleave`]: crate::Opts::interleave
fn slices_of(n: usize, hottest: usize, run: usize, unit: usize) -> usize {
    let by_size = (n / unit.max(1)).clamp(1, SIZE_SLICES);
    let by_key = hottest.div_ceil(run.max(1));
    by_size
        .max(by_key)
        .min(MAX_SLICES)
        .min((n / MIN_UNIT).max(1))
}

/// The key under which reductions keep the partial of a plan's unit of work (see
/// `engine::reduce`): a rotation cell and slice, or a components batch and group. The
/// same on every rank, and never the serial chain's 0.
fn unit_key(major: u64, minor: u64) -> u64 {
    1 + (major << 32 | minor)
}

/// A slice of a rotation cell.
#[derive(Clone)]
pub(super) struct Unit {
    pub cell: usize,
    /// Which slice of the cell.
    slice: usize,
    /// Its tasks: positions in the cell's task list.
    pub tasks: Range<usize>,
    pub row: usize,
    pub col: usize,
    /// Where the slice lies in its cell: its midpoint, as a fraction of the cell.
    at: f64,
    /// How far past the first unit not yet taken (in `at`) this unit may be taken.
    reach: f64,
}

thread_local! {
    /// The seat this thread last took in a rotation step (see [`CellScheduler::seat`]).
    static SEAT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Hands out slices of rotation cells whose row and column blocks are both free, in the
/// order of how far into its cell a slice lies (the first slices of all cells, heaviest
/// cell first, then the second slices, and so on; a cell cut finer for a hot key has its
/// slices spread evenly among the others').
///
/// Each worker has home blocks of the larger dimension (block `b` is worker
/// `b % threads`'s) and takes free units of its home blocks first, so that the larger
/// table's rows stay in one core's cache from step to step and call to call while the
/// smaller dimension's blocks rotate between workers, as DSGD and Harp assign them. A
/// worker with no free unit at home takes any free unit, which keeps the load balanced.
/// Measured with 2 threads on biased MF (10,000 users, 2,000 items): without homes a user
/// block ran on either core and every task's first touch of its user row missed the
/// cache.
pub(super) struct CellScheduler {
    state: Mutex<CellState>,
    wake: Condvar,
    /// Which seats (`0..threads`) the step's workers have taken.
    seats: Vec<AtomicBool>,
}

struct CellState {
    row_busy: Vec<bool>,
    col_busy: Vec<bool>,
    /// Every unit, in the order above.
    pending: Vec<Unit>,
    /// Which units of `pending` were taken.
    taken: Vec<bool>,
    /// The first unit not taken (`pending.len()` when all were).
    first: usize,
    one_dimensional: bool,
    /// Whether units' homes are their rows (else their columns).
    home_by_row: bool,
    threads: usize,
    running: usize,
    waiting: usize,
}

impl CellScheduler {
    /// Units of `cells` (indices into the rotation's cells): each cell cut alike, into
    /// [`slices_per_cell`], or for runs of `run` tasks of one key (see [`slices_of`]).
    pub(super) fn new(
        rot: &plan::Rotation,
        cells: &[usize],
        run: Option<usize>,
        threads: usize,
    ) -> Self {
        let uniform = slices_per_cell(rot);
        let mut cells: Vec<usize> = cells.to_vec();
        cells.sort_by_key(|&c| std::cmp::Reverse(rot.cells[c].tasks.len()));
        // Units in order of their slices' midpoints in their cells (`Unit::at`); the
        // stable sort keeps heavier cells first among equals (cells cut alike keep the
        // order slice by slice). Equal fractions divide to equal floats, and unequal
        // ones of at most `MAX_SLICES` slices differ far above the rounding.
        let mut pending: Vec<Unit> = Vec::new();
        // Under `interleave`, a worker whose next units are blocked takes a later slice of
        // a cell only a little ahead of the rest, not the next slices of the one cell
        // it is free to run (with 3 workers that alone made runs of 90 tasks of one key
        // where 16 were asked for).
        let window = match run {
            Some(_) => INTERLEAVE_WINDOW,
            None => f64::INFINITY,
        };
        for &c in &cells {
            let cell = &rot.cells[c];
            let n = cell.tasks.len();
            let cut = match run {
                Some(run) => slices_of(n, cell.hottest as usize, run, UNIT_RUNS * run),
                None => uniform,
            };
            for s in 0..cut {
                let tasks = n * s / cut..n * (s + 1) / cut;
                if !tasks.is_empty() {
                    pending.push(Unit {
                        cell: c,
                        slice: s,
                        tasks,
                        row: cell.row as usize,
                        col: cell.col as usize,
                        at: (2 * s + 1) as f64 / (2 * cut) as f64,
                        reach: window.max(1.0 / cut as f64),
                    });
                }
            }
        }
        pending.sort_by(|a, b| a.at.total_cmp(&b.at));
        CellScheduler {
            state: Mutex::new(CellState {
                row_busy: vec![false; rot.rows],
                col_busy: vec![false; rot.cols],
                taken: vec![false; pending.len()],
                first: 0,
                pending,
                one_dimensional: rot.cols == 1,
                home_by_row: rot.cols == 1 || span(&rot.row_bounds) >= span(&rot.col_bounds),
                threads: threads.max(1),
                running: 0,
                waiting: 0,
            }),
            wake: Condvar::new(),
            seats: (0..threads.max(1))
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    /// A seat for the calling worker: the one it took in the last step it ran if free, so
    /// that the same thread keeps the same home blocks (whose rows its cache holds) from
    /// step to step and call to call, whichever pool threads a call wakes; else the first
    /// free one.
    pub(super) fn seat(&self) -> usize {
        let last = SEAT.get();
        let free = |s: usize| !self.seats[s].swap(true, Ordering::Relaxed);
        let seat = match last < self.seats.len() && free(last) {
            true => last,
            // More workers than seats cannot take one each; the extra share seat 0.
            false => (0..self.seats.len()).find(|&s| free(s)).unwrap_or(0),
        };
        SEAT.set(seat);
        seat
    }

    /// The next unit for worker `me`, or `None` when all are taken (or a run failed).
    pub(super) fn take(&self, errors: &FirstError, me: usize) -> Option<Unit> {
        let mut st = self.state.lock();
        loop {
            if st.first == st.pending.len() || errors.failed() {
                return None;
            }
            let frontier = st.pending[st.first].at;
            let free = |u: &Unit| {
                !st.row_busy[u.row]
                    && (st.one_dimensional || !st.col_busy[u.col])
                    && u.at <= frontier + u.reach
            };
            let home = |u: &Unit| (if st.home_by_row { u.row } else { u.col }) % st.threads == me;
            // Units not taken yet, in order (taken ones stay in place: removing them
            // would move the rest, which cost more than the bodies with thousands of
            // units).
            let open = || {
                (st.first..st.pending.len())
                    .filter(|&i| !st.taken[i])
                    .map(|i| (i, &st.pending[i]))
            };
            let found = open()
                .find(|(_, u)| home(u) && free(u))
                .or_else(|| open().find(|(_, u)| free(u)))
                .map(|(i, _)| i);
            if let Some(i) = found {
                st.taken[i] = true;
                while st.first < st.pending.len() && st.taken[st.first] {
                    st.first += 1;
                }
                let unit = st.pending[i].clone();
                st.row_busy[unit.row] = true;
                st.col_busy[unit.col] = true;
                st.running += 1;
                return Some(unit);
            }
            if st.running == 0 {
                // Unreachable for a valid plan: nothing runs, so every block is free.
                return None;
            }
            st.waiting += 1;
            st = self.wake.wait(st);
            st.waiting -= 1;
        }
    }

    pub(super) fn finish(&self, row: usize, col: usize) {
        let mut st = self.state.lock();
        st.row_busy[row] = false;
        st.col_busy[col] = false;
        st.running -= 1;
        let waiting = st.waiting > 0;
        drop(st);
        if waiting {
            self.wake.notify_all();
        }
    }
}

/// How many keys block bounds cover (0 for none).
fn span(bounds: &[usize]) -> usize {
    bounds.last().copied().unwrap_or(0)
}

/// Under `recheck`, a write outside a plan made at the start of this very call: the body
/// chose what to write from values other tasks of the call changed.
fn writes_follow_values(recheck: bool, error: Error) -> Error {
    match error {
        Error::AccessOutsidePlan {
            site,
            index,
            access: "wrote",
            table,
            key,
            reason,
            ..
        } if recheck => Error::WritesDependOnValues {
            site,
            index,
            table,
            key,
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rotation of `rows` x `cols` cells of `tasks` tasks each, `row_keys` and
    /// `col_keys` keys wide.
    fn grid(
        rows: usize,
        cols: usize,
        tasks: u32,
        row_keys: usize,
        col_keys: usize,
    ) -> plan::Rotation {
        let cells = (0..rows * cols)
            .map(|c| plan::Cell {
                row: (c / cols) as u32,
                col: (c % cols) as u32,
                tasks: (0..tasks).collect(),
                hottest: 1,
            })
            .collect();
        let bounds = |n: usize, keys: usize| (0..=n).map(|b| b * keys / n).collect::<Vec<_>>();
        plan::Rotation {
            row_slot: 0,
            col_slot: Some(1),
            row_members: Vec::new(),
            col_members: Vec::new(),
            row_bounds: bounds(rows, row_keys),
            col_bounds: bounds(cols, col_keys),
            row_windowed: vec![0],
            col_windowed: vec![1],
            window_only: Vec::new(),
            rows,
            cols,
            cells,
        }
    }

    #[test]
    fn workers_take_their_home_blocks_of_the_larger_dimension_first() {
        let errors = FirstError::new();
        for (row_keys, col_keys, by_row) in [(10_000, 2_000, true), (2_000, 10_000, false)] {
            let rot = grid(4, 4, 10, row_keys, col_keys);
            let all: Vec<usize> = (0..rot.cells.len()).collect();
            let sched = CellScheduler::new(&rot, &all, None, 2);
            let home = |u: &Unit| (if by_row { u.row } else { u.col }) % 2;
            // Worker 0, then worker 1, each finishing its unit before the next take: each
            // is given a home unit while one is free.
            let mut taken = 0;
            for me in [0, 1].iter().cycle().take(16) {
                let unit = sched.take(&errors, *me).expect("a unit for every take");
                assert_eq!(
                    home(&unit),
                    *me,
                    "worker {me} took {:?}",
                    (unit.row, unit.col)
                );
                sched.finish(unit.row, unit.col);
                taken += 1;
            }
            assert_eq!(taken, 16);
            assert!(
                sched.take(&errors, 0).is_none(),
                "every unit was handed out once"
            );
        }
    }

    #[test]
    fn a_thread_keeps_its_seat_from_step_to_step_and_seats_are_distinct() {
        let rot = grid(4, 4, 10, 10_000, 2_000);
        let all: Vec<usize> = (0..rot.cells.len()).collect();
        let steps: Vec<CellScheduler> = (0..4)
            .map(|_| CellScheduler::new(&rot, &all, None, 3))
            .collect();
        // Three threads take seats in every step, in a different order each time: each
        // keeps the seat it first took, and no two share one.
        let seats: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|t| {
                    let steps = &steps;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for (i, step) in steps.iter().enumerate() {
                            // Later threads wait for the earlier ones' turn (by step).
                            while step
                                .seats
                                .iter()
                                .filter(|s| s.load(Ordering::Relaxed))
                                .count()
                                != (t + i) % 3
                            {
                                std::thread::yield_now();
                            }
                            mine.push(step.seat());
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for mine in &seats {
            assert!(
                mine.iter().all(|&s| s == mine[0]),
                "a thread changed seats: {seats:?}"
            );
        }
        let mut first: Vec<usize> = seats.iter().map(|m| m[0]).collect();
        first.sort_unstable();
        assert_eq!(first, [0, 1, 2]);
    }

    #[test]
    fn a_worker_with_no_free_home_unit_takes_another_and_blocks_stay_exclusive() {
        let errors = FirstError::new();
        let rot = grid(4, 4, 10, 10_000, 2_000);
        let all: Vec<usize> = (0..rot.cells.len()).collect();
        let sched = CellScheduler::new(&rot, &all, None, 2);
        // Worker 0 takes all its home units (rows 0 and 2) before worker 1 takes any, as a
        // worker that is late to start would leave them; then worker 1 takes the rest.
        let mut units = Vec::new();
        for _ in 0..8 {
            let unit = sched.take(&errors, 0).unwrap();
            assert_eq!(unit.row % 2, 0);
            sched.finish(unit.row, unit.col);
            units.push(unit);
        }
        let stolen = sched.take(&errors, 0).unwrap();
        assert_eq!(
            stolen.row % 2,
            1,
            "no home unit left: worker 0 helps worker 1"
        );
        // While it runs, no unit of its row or column is handed out.
        for _ in 0..3 {
            let other = sched.take(&errors, 1).unwrap();
            assert!(other.row != stolen.row && other.col != stolen.col);
            sched.finish(other.row, other.col);
            units.push(other);
        }
        sched.finish(stolen.row, stolen.col);
        units.push(stolen);
        while let Some(u) = sched.take(&errors, 1) {
            sched.finish(u.row, u.col);
            units.push(u);
        }
        let mut cells: Vec<usize> = units.iter().map(|u| u.cell).collect();
        cells.sort_unstable();
        assert_eq!(cells, (0..16).collect::<Vec<_>>(), "every cell ran once");
    }

    #[test]
    fn cells_are_cut_by_size_and_by_their_hottest_key() {
        // Runs of 32, units of 512: a cold cell by its size (at most 16 slices).
        assert_eq!(slices_of(300, 3, 32, 512), 1);
        assert_eq!(slices_of(5_000, 40, 32, 512), 9);
        assert_eq!(slices_of(1_000_000, 40, 32, 512), SIZE_SLICES);
        // A hot key's tasks are cut into runs of about 32, however small the cell.
        assert_eq!(slices_of(400, 320, 32, 512), 10);
        assert_eq!(slices_of(5_000, 4_000, 32, 512), 125);
        // Units keep a few tasks, and a cell a bounded number of slices.
        assert_eq!(slices_of(64, 64, 1, 16), 64 / MIN_UNIT);
        assert_eq!(slices_of(100_000_000, 50_000_000, 1, 16), MAX_SLICES);
        assert_eq!(slices_of(0, 0, 32, 512), 1);
    }

    #[test]
    fn a_hot_cells_slices_are_spread_over_the_step() {
        // Cell 0 holds one key in 320 tasks, the others 100 tasks of distinct keys: with
        // runs of 32 cell 0 is cut into 10 units, the others run whole, at the middle of
        // the step, between cell 0's first five and last five units.
        let mut rot = grid(2, 2, 100, 1_000, 1_000);
        rot.cells[0].tasks = (0..320).collect();
        rot.cells[0].hottest = 320;
        let all: Vec<usize> = (0..4).collect();
        let sched = CellScheduler::new(&rot, &all, Some(32), 1);
        let errors = FirstError::new();
        let mut order = Vec::new();
        while let Some(u) = sched.take(&errors, 0) {
            sched.finish(u.row, u.col);
            assert_eq!(u.tasks.len(), if u.cell == 0 { 32 } else { 100 });
            order.push(u.cell);
        }
        assert_eq!(order, [0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0]);
    }
}
