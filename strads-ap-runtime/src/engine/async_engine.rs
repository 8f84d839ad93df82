//! The serializable engine: runs `async_for!` bodies in conflict-free groups.

use std::collections::HashMap;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use rayon::prelude::*;

use super::ctx::{ExecCtx, Indices, LoopIndex};
use super::{body_error, on_workers, record_stats, Base, CallSite, FirstError, Opts, Registry};
use crate::cluster::context;
use crate::dds::table::Replica;
use crate::error::{Error, Result};
use crate::plan::{self, GroupRef, Plan, PlanConfig, Schedule, SlotMode, TableInfo};
use crate::recon::{AccessLog, RecordIndices, Recorder, MAX_TABLES};

#[derive(Clone, PartialEq, Eq, Hash)]
struct PlanKey {
    site: usize,
    start: usize,
    end: usize,
    threads: usize,
    blocks: Option<usize>,
    tables: Vec<(u64, u64)>,
}

fn plan_cache() -> &'static Mutex<HashMap<PlanKey, Plan>> {
    static CACHE: OnceLock<Mutex<HashMap<PlanKey, Plan>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Runs an `async_for!` loop: `run` over every index of `range`, serializably.
///
/// Called by generated code; see the `async_for!` macro for the user-facing contract.
#[doc(hidden)]
pub fn run_async_for<Task: Sync, I: LoopIndex>(
    site: &'static CallSite,
    range: Range<I>,
    task: &Task,
    opts: Opts,
    register: fn(&Task, &mut Registry),
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
) -> Result<()> {
    let ctx = context();
    crate::cluster::local_only("async_for!")?;
    let threads = opts.threads.unwrap_or(ctx.config().threads);
    let bounds = |i: I| {
        i.to_usize().ok_or_else(|| {
            Error::invalid(
                "async_for!",
                format!("{site}: the index range must not be negative"),
            )
        })
    };
    let (start, end) = (bounds(range.start)?, bounds(range.end)?);
    let n = end.saturating_sub(start);
    if n > u32::MAX as usize {
        return Err(Error::invalid(
            "async_for!",
            format!("{site}: {n} indices; at most 2^32 per call are supported"),
        ));
    }
    let mut registry = Registry::default();
    register(task, &mut registry);
    registry.check(site)?;
    if registry.entries.len() > MAX_TABLES {
        return Err(Error::invalid(
            "async_for!",
            format!("{site}: the body captures more than {MAX_TABLES} DDSs"),
        ));
    }
    if n == 0 {
        return Ok(());
    }

    let (locks, bases) = registry.lock_all(site)?;

    if threads == 1 && ctx.config().world_size == 1 {
        // One worker in a world of one: the loop order is a serial order, so no plan is
        // needed; tables are used directly.
        let t0 = Instant::now();
        let outcome = run_serially(site, start..end, task, run, &bases);
        record_stats(site, |s| {
            s.calls += 1;
            s.running += t0.elapsed();
            s.strategy = "serial";
            s.groups = 1;
        });
        drop(locks);
        return outcome;
    }

    let key = PlanKey {
        site: site as *const CallSite as usize,
        start,
        end,
        threads,
        blocks: opts.blocks,
        tables: bases.iter().map(|b| (b.id, b.shape)).collect(),
    };
    let cached = if opts.recheck {
        None
    } else {
        plan_cache()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key)
    };
    let mut plan = match cached {
        Some(plan) => plan,
        None => {
            let t0 = Instant::now();
            let log = reconnoitre(site, start, n, task, record, &bases, threads)?;
            let t1 = Instant::now();
            let tables: Vec<TableInfo> = registry
                .entries
                .iter()
                .zip(&bases)
                .map(|(e, base)| TableInfo {
                    key_space: base.len,
                    relaxed: e.table.is_relaxed() && e.merger.is_some(),
                })
                .collect();
            let config = PlanConfig {
                threads,
                blocks: opts.blocks,
                seed: opts.seed.unwrap_or(ctx.config().seed),
                first_index: start,
            };
            let plan = ctx
                .pool(threads)
                .install(|| plan::plan(log, &tables, &config));
            let t2 = Instant::now();
            let summary = format!(
                "{site}: reconnaissance of {n} tasks in {:.3} s; {} plan with {} groups in {} \
                 batches, largest {} tasks, in {:.3} s",
                (t1 - t0).as_secs_f64(),
                plan.stats.strategy,
                plan.stats.groups,
                plan.stats.batches,
                plan.stats.largest_group,
                (t2 - t1).as_secs_f64()
            );
            // Long set-up work is always worth a line: the first call of a loop is slower
            // than the rest, and a user should know why.
            if ctx.config().verbose || t2 - t0 > std::time::Duration::from_secs(2) {
                eprintln!("strads-ap: {summary}");
            }
            tracing::debug!("{summary}");
            if threads > 1 && plan.stats.largest_group * 2 > n && n >= 64 {
                tracing::warn!(
                    "{site}: most tasks conflict with each other ({} of {n} in one group), so \
                     the loop runs nearly serially; declare the hot table relaxed if \
                     approximate merging is acceptable",
                    plan.stats.largest_group
                );
            }
            record_stats(site, |s| {
                s.recon += t1 - t0;
                s.planning += t2 - t1;
                s.strategy = plan.stats.strategy;
                s.groups = plan.stats.groups;
            });
            plan
        }
    };

    let t0 = Instant::now();
    let outcome = execute(
        site, start, task, run, &registry, &bases, &mut plan, threads,
    );
    record_stats(site, |s| {
        s.calls += 1;
        s.running += t0.elapsed();
    });
    drop(locks);
    match &outcome {
        Err(Error::AccessOutsidePlan { .. }) => {}
        _ => {
            plan_cache()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, plan);
        }
    }
    outcome
}

/// Runs every index in order on this thread (one worker, one process).
fn run_serially<Task, I: LoopIndex>(
    site: &CallSite,
    range: Range<usize>,
    task: &Task,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    bases: &[Base],
) -> Result<()> {
    let ctx = ExecCtx::new(bases.iter().map(Base::binding).collect());
    catch_unwind(AssertUnwindSafe(|| {
        run(task, &ctx, Indices::range(range, &ctx))
    }))
    .map_err(|payload| body_error(site, ctx.current(), payload))
}

/// Reconnaissance: runs `record` for every index, in parallel chunks, and returns the
/// per-task access log in index order.
fn reconnoitre<Task: Sync, I: LoopIndex>(
    site: &CallSite,
    start: usize,
    n: usize,
    task: &Task,
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    bases: &[Base],
    threads: usize,
) -> Result<AccessLog> {
    // Chunks of 2^shift tasks, so that their logs join without copying.
    let chunk = n.div_ceil(threads * 8).max(1024).next_power_of_two();
    let shift = chunk.trailing_zeros();
    let chunks: Vec<Range<usize>> = (0..n)
        .step_by(chunk)
        .map(|s| start + s..start + (s + chunk).min(n))
        .collect();
    let pool = context().pool(threads);
    let logs: Vec<Result<AccessLog>> = pool.install(|| {
        chunks
            .par_iter()
            .map(|r| {
                let rec = Recorder::new(bases.iter().map(Base::recorded).collect());
                rec.reserve(r.len(), bases.len());
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    record(task, &rec, RecordIndices::new(r.clone(), &rec));
                }));
                match outcome {
                    Ok(()) => Ok(rec.into_log()),
                    Err(payload) => {
                        rec.abort_task();
                        Err(body_error(site, rec.index(), payload))
                    }
                }
            })
            .collect()
    });
    Ok(AccessLog::from_chunks(
        shift,
        logs.into_iter().collect::<Result<_>>()?,
    ))
}

/// Per-worker state: the context whose bindings views read, and replicas of relaxed tables.
struct Worker {
    ctx: ExecCtx,
    replicas: Vec<(usize, Replica)>,
}

#[allow(clippy::too_many_arguments)]
fn execute<Task: Sync, I: LoopIndex>(
    site: &CallSite,
    start: usize,
    task: &Task,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    registry: &Registry,
    bases: &[Base],
    plan: &mut Plan,
    threads: usize,
) -> Result<()> {
    let merge_lock = Mutex::new(());
    let errors = FirstError::new();
    // Disjoint borrows: components re-tag between batches while the schedule is read.
    let Plan {
        modes,
        tags,
        schedule,
        log,
        indexed_by_task,
        ..
    } = plan;
    let modes: &[SlotMode] = modes;
    let new_worker = |tags: &[Vec<u32>]| -> Worker {
        let mut replicas = Vec::new();
        let bindings = bases
            .iter()
            .enumerate()
            .map(|(slot, base)| {
                let mut b = base.binding();
                match modes[slot] {
                    SlotMode::ReadOnly => {
                        b.writable = false;
                        b.read_only_reason = "reconnaissance saw no task write this table";
                    }
                    SlotMode::Checked => b.tags = tags[slot].as_ptr(),
                    SlotMode::Relaxed => {
                        let merger = registry.entries[slot]
                            .merger
                            .as_ref()
                            .expect("relaxed tables have a merger");
                        let _guard = merge_lock.lock().unwrap_or_else(|p| p.into_inner());
                        // SAFETY: the master holds `len` elements, locked by this engine;
                        // masters of relaxed tables are only touched under `merge_lock`.
                        let r = unsafe { merger.replica(base.ptr, base.len) };
                        b.ptr = r.ptr();
                        replicas.push((slot, r));
                    }
                }
                b
            })
            .collect();
        let mut ctx = ExecCtx::new(bindings);
        ctx.prefetch = indexed_by_task
            .iter()
            .map(|&slot| {
                (
                    bases[slot].ptr as usize,
                    registry.entries[slot].table.elem_size(),
                )
            })
            .collect();
        Worker { ctx, replicas }
    };
    let run_group = |w: &mut Worker, group: GroupRef, tasks: &[u32]| {
        for (slot, b) in w.ctx.bindings.iter_mut().enumerate() {
            if modes[slot] == SlotMode::Checked {
                b.allowed = schedule.allowed(slot, group);
            }
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run(task, &w.ctx, Indices::list(start, tasks, &w.ctx));
        }));
        if let Err(payload) = outcome {
            errors.set(body_error(site, w.ctx.current(), payload));
        }
        if !w.replicas.is_empty() {
            let _guard = merge_lock.lock().unwrap_or_else(|p| p.into_inner());
            for (slot, r) in &mut w.replicas {
                let merger = registry.entries[*slot].merger.as_ref().expect("merger");
                // SAFETY: the master is locked by this engine and only touched under
                // `merge_lock`, which we hold.
                unsafe { merger.push(bases[*slot].ptr, r) };
            }
        }
    };

    let pool = context().pool(threads);
    match &*schedule {
        Schedule::Rotation(rot) => {
            let sched = CellScheduler::new(rot, slices_per_cell(rot));
            let tags: &[Vec<u32>] = tags;
            let work = || {
                let mut w = new_worker(tags);
                while let Some(unit) = sched.take(&errors) {
                    let cell = &rot.cells[unit.cell];
                    let tasks = &cell.tasks[unit.tasks.clone()];
                    run_group(&mut w, GroupRef::Cell(unit.cell), tasks);
                    sched.finish(unit.row, unit.col);
                }
            };
            on_workers(&pool, threads, &work);
        }
        Schedule::Components(batches) => {
            for (b, batch) in batches.iter().enumerate() {
                if errors.failed() {
                    break;
                }
                if batches.len() > 1 {
                    plan::retag(log, modes, batch, tags);
                }
                let tags: &[Vec<u32>] = tags;
                let next = AtomicUsize::new(0);
                let work = || {
                    let mut w = new_worker(tags);
                    loop {
                        let g = next.fetch_add(1, Ordering::Relaxed);
                        if g >= batch.groups.len() || errors.failed() {
                            break;
                        }
                        let group = GroupRef::Group { batch: b, group: g };
                        run_group(&mut w, group, &batch.groups[g].tasks);
                    }
                };
                on_workers(&pool, threads.min(batch.groups.len()), &work);
            }
        }
    }
    errors.into_result()
}

/// Tasks per unit of work the rotation scheduler aims for: small enough that every block
/// pair is visited several times per call, which keeps the update order close to the
/// serial loop's (a cell run in one piece is a stratum of correlated updates, which slows
/// SGD per epoch), large enough to amortise taking a unit.
const UNIT_TASKS: usize = 2048;

/// Into how many slices each rotation cell is cut.
fn slices_per_cell(rot: &plan::Rotation) -> usize {
    let tasks: usize = rot.cells.iter().map(|c| c.tasks.len()).sum();
    let cells = rot.cells.len().max(1);
    (tasks / cells / UNIT_TASKS).clamp(1, 16)
}

/// A slice of a rotation cell.
struct Unit {
    cell: usize,
    tasks: Range<usize>,
    row: usize,
    col: usize,
}

/// Hands out slices of rotation cells whose row and column blocks are both free: the
/// first slices of all cells (heaviest cell first), then the second slices, and so on.
struct CellScheduler {
    state: Mutex<CellState>,
    wake: Condvar,
}

struct CellState {
    row_busy: Vec<bool>,
    col_busy: Vec<bool>,
    /// Units not yet taken, in the order above.
    pending: Vec<Unit>,
    one_dimensional: bool,
    running: usize,
    waiting: usize,
}

impl CellScheduler {
    fn new(rot: &plan::Rotation, slices: usize) -> Self {
        let mut cells: Vec<usize> = (0..rot.cells.len()).collect();
        cells.sort_by_key(|&c| std::cmp::Reverse(rot.cells[c].tasks.len()));
        let mut pending = Vec::new();
        for s in 0..slices {
            for &c in &cells {
                let cell = &rot.cells[c];
                let n = cell.tasks.len();
                let tasks = n * s / slices..n * (s + 1) / slices;
                if !tasks.is_empty() {
                    pending.push(Unit {
                        cell: c,
                        tasks,
                        row: cell.row as usize,
                        col: cell.col as usize,
                    });
                }
            }
        }
        CellScheduler {
            state: Mutex::new(CellState {
                row_busy: vec![false; rot.rows],
                col_busy: vec![false; rot.cols],
                pending,
                one_dimensional: rot.cols == 1,
                running: 0,
                waiting: 0,
            }),
            wake: Condvar::new(),
        }
    }

    /// The next unit to run, or `None` when all are taken (or a run failed).
    fn take(&self, errors: &FirstError) -> Option<Unit> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if st.pending.is_empty() || errors.failed() {
                return None;
            }
            let free = st
                .pending
                .iter()
                .position(|u| !st.row_busy[u.row] && (st.one_dimensional || !st.col_busy[u.col]));
            if let Some(i) = free {
                let unit = st.pending.remove(i);
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
            st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            st.waiting -= 1;
        }
    }

    fn finish(&self, row: usize, col: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
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
