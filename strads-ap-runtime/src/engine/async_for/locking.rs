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

use crate::sync::Mutex;

use std::time::Instant;

use super::execute::{bind_worker, push_replicas};
use super::{lone, on_one_worker, table_infos, written_slots, Loop};
use crate::access::{Conflict, ExecCtx, Indices, LockWord, LoopIndex, FREE};
use crate::dds::table::Replica;
use crate::engine::cache::{kept, Keep};
use crate::engine::pipeline::Ran;
use crate::engine::{body_error, Base, FirstError, Merges};
use crate::error::{Error, Result};
use crate::plan::{self, SlotMode};

/// Runs the call with per-element locks, by the table modes of an earlier call or, on the
/// first, of a reconnaissance.
pub(super) fn run<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let modes = match kept().modes.take(&l.key) {
        Some(modes) => modes,
        None => {
            let (log, took) = l.reconnoitre(bases)?;
            let modes = plan::slot_modes(&log, &table_infos(&l.call.registry, bases));
            l.call.note(|f| {
                f.recon += took;
                f.first_call = true;
            });
            modes
        }
    };
    let one = l.on_one_worker();
    let t0 = Instant::now();
    let outcome = match one {
        true => lone::run_in_order(l, bases, &modes).map(|()| Outcome {
            chunks: 1,
            retried: 0,
        }),
        false => run_locked(l, bases, &modes),
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
    let ran = Ran::new(outcome.map(|_| ()), written_slots(&modes));
    Ok(match ran.outcome {
        // A body that wrote a table reconnaissance saw only read: learn again next call.
        Err(Error::AccessOutsidePlan { .. }) => ran,
        _ => ran.keeping(Keep::Modes(l.key.clone(), modes)),
    })
}

/// What a locking run did.
#[derive(Debug, Default)]
struct Outcome {
    /// Chunks of tasks the workers took.
    pub chunks: usize,
    /// Tasks abandoned on a conflict and run again.
    pub retried: usize,
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
    /// Owned here because the context's bindings point into them.
    _stamps: Vec<Vec<u32>>,
}

/// Runs tasks `start..start + n` of a loop with per-element locks (see the module docs);
/// `modes` says, per slot, whether the table is read-only, written (locked) or relaxed.
fn run_locked<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    modes: &[SlotMode],
) -> Result<Outcome> {
    let (site, start, n, task, run) = (l.call.site, l.start, l.n, l.call.task(), l.lock);
    let (registry, threads) = (&l.call.registry, l.call.threads);
    let locks: Vec<Vec<LockWord>> = modes
        .iter()
        .zip(bases)
        .map(|(mode, base)| match mode {
            SlotMode::Checked => (0..base.len)
                .map(|_| LockWord(AtomicU32::new(FREE)))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    let merges = Merges::default();
    let errors = FirstError::new();
    let next_tag = AtomicU32::new(1);

    let saves = |mode| saves_copies(mode, modes);
    let new_worker = || -> Worker {
        let mut stamps: Vec<Vec<u32>> = modes
            .iter()
            .zip(bases)
            .map(|(&mode, base)| match saves(mode) {
                true => vec![0; base.len],
                false => Vec::new(),
            })
            .collect();
        let (bindings, replicas) = bind_worker(registry, bases, modes, &merges, |slot, b| {
            match modes[slot] {
                SlotMode::ReadOnly => {
                    b.read_only_reason = "the first call's reconnaissance saw no task write \
                                          this table; the next call learns it again"
                }
                SlotMode::Checked => {
                    b.locks = locks[slot].as_ptr();
                    b.stamps = stamps[slot].as_mut_ptr();
                }
                SlotMode::Relaxed if saves(SlotMode::Relaxed) => {
                    b.stamps = stamps[slot].as_mut_ptr()
                }
                SlotMode::Relaxed => {}
            }
        });
        let mut ctx = ExecCtx::new(bindings);
        ctx.tag = next_tag.fetch_add(1, Ordering::Relaxed);
        Worker {
            ctx,
            replicas,
            _stamps: stamps,
        }
    };
    let push = |w: &mut Worker| push_replicas(registry, bases, &merges, &mut w.replicas);
    // Runs the tasks of `range` (loop indices), noting in `abandoned` those that met an
    // element another worker held.
    // A task that meets a held element unwinds, and with it the body's reduction
    // variables; those of the tasks before it in the same run of the body would be lost,
    // so a body with reduction variables runs one task at a time.
    let one_by_one = !registry.reductions.is_empty();
    let run_range = |ctx: &ExecCtx, range: Range<usize>, abandoned: &mut Vec<usize>| {
        let mut from = range.start;
        while from < range.end {
            let to = if one_by_one { from + 1 } else { range.end };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                run(task, ctx, Indices::range(from..to, ctx));
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
                errors.set(body_error(site, i, payload));
                break;
            }
            abandoned.push(i);
            from = i + 1;
        }
    };

    let chunk = chunk_size(n, threads);
    let chunks = n.div_ceil(chunk);
    let next = AtomicUsize::new(0);
    let abandoned = Mutex::new(Vec::new());
    let work = || {
        let mut w = new_worker();
        let mut mine = Vec::new();
        loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= chunks || errors.failed() {
                break;
            }
            let first = start + c * chunk;
            w.ctx.unit.set(1 + c as u64);
            run_range(&w.ctx, first..(first + chunk).min(start + n), &mut mine);
            push(&mut w);
        }
        abandoned.lock().extend(mine);
    };
    let pool = l.call.here.pool(threads);
    pool.on_workers(threads.min(chunks), &work);

    let mut retry = abandoned.into_inner();
    let retried = retry.len();
    if !retry.is_empty() && !errors.failed() {
        // Alone, a worker meets no lock held by another.
        retry.sort_unstable();
        let mut w = new_worker();
        w.ctx.unit.set(1 + chunks as u64);
        let mut again = Vec::new();
        for &i in &retry {
            run_range(&w.ctx, i..i + 1, &mut again);
        }
        push(&mut w);
        assert!(
            again.is_empty(),
            "strads-ap internal error: {site}: task {} retried alone met a locked element",
            again[0]
        );
    }
    l.call.note(|f| {
        f.merging += merges.spent();
        f.workers = Some(threads);
    });
    errors.into_result()?;
    Ok(Outcome { chunks, retried })
}
