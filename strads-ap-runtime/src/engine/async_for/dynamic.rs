//! Dynamic scheduling (STRADS): a call of an `async_for!` loop with [`Opts::dynamic`] runs
//! in rounds, each chosen by the loop's [`Scheduler`] (see `engine::dynamic` for the
//! semantics).
//!
//! A round's tasks share no element of a written (non-relaxed) table, by the scheduler's
//! choice from the first call's reconnaissance; the round is cut into one group per
//! worker share, each key of a written table tagged with the group of the task that
//! touches it, so that views refuse any access the reconnaissance did not foresee.
//! Relaxed tables are per-worker replicas made at the start of the round and pushed as
//! each group ends. One worker in a world of one runs the rounds in order on the tables
//! directly.
//!
//! [`Opts::dynamic`]: crate::Opts::dynamic

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::execute::{bind_worker, push_replicas};
use super::{table_infos, written_slots, Loop};
use crate::access::{Binding, ExecCtx, Indices, LoopIndex, UNTOUCHED};
use crate::engine::dynamic::{
    Dynamic, PriorityKind, SchedKey, Scheduler, DEFAULT_ROUND_PER_WORKER,
};
use crate::engine::pipeline::Ran;
use crate::engine::reduce::SERIAL_UNIT;
use crate::engine::{body_error, Base, CallSite, FirstError, Merges};
use crate::error::{Error, Result};
use crate::plan::{self, SlotMode};

/// Runs the call in rounds chosen by `dynamic`'s scheduler.
pub(super) fn run<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    dynamic: &Dynamic,
) -> Result<Ran> {
    let site = l.call.site;
    if l.call.here.is_distributed() {
        return Err(Error::invalid(
            "async_for!",
            format!(
                "{site}: Opts::dynamic runs in a world of one process for now (any number of \
                 threads); across ranks, run the loop without it"
            ),
        ));
    }
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let config = dynamic.config.clone();
    let mut state = dynamic.lock();
    let key: SchedKey = (
        site as *const CallSite as usize,
        l.start,
        l.n,
        bases.iter().map(|b| (b.id, b.shape)).collect(),
    );
    let priority = priority_slot(l, bases, &config.priority.kind)?;
    if state.sched.as_ref().is_none_or(|s| s.key != key) {
        let (log, took) = l.reconnoitre(bases)?;
        let modes = plan::slot_modes(&log, &table_infos(&l.call.registry, bases));
        let lens: Vec<usize> = bases.iter().map(|b| b.len).collect();
        state.sched = Some(Scheduler::new(key, &log, modes, &lens, &config));
        state.stats.reconnaissance += 1;
        l.call.note(|f| {
            f.recon += took;
            f.first_call = true;
        });
    }
    let t0 = Instant::now();
    let threads = l.call.threads;
    let want = config.round.unwrap_or(DEFAULT_ROUND_PER_WORKER * threads);
    let budget = config.updates.unwrap_or(l.n);
    let mut rounds = Rounds::new(l, bases, state.sched.as_ref().expect("made").modes.clone());
    let mut done = 0usize;
    let mut after = Vec::new();
    let mut ran_rounds = 0usize;
    while done < budget && l.n > 0 {
        let sched = state.sched.as_mut().expect("made");
        let deferred = sched.choose(want.min(budget - done), threads, &config);
        if sched.round.is_empty() {
            break;
        }
        if let Some((slot, read)) = priority {
            let base = bases[slot].ptr as *const u8;
            let start = l.start;
            let Scheduler { round, before, .. } = &mut *sched;
            before.clear();
            before.extend(round.iter().map(|&t| read(base, start + t as usize)));
        }
        rounds.run(sched, ran_rounds);
        ran_rounds += 1;
        done += sched.round.len();
        if let Some((slot, read)) = priority {
            let base = bases[slot].ptr as *const u8;
            after.clear();
            after.extend(
                sched
                    .round
                    .iter()
                    .map(|&t| read(base, l.start + t as usize)),
            );
            sched.update(&after, &config);
        }
        let n = sched.round.len() as u64;
        state.stats.rounds += 1;
        state.stats.updates += n;
        state.stats.deferred += deferred;
        if rounds.errors.failed() {
            break;
        }
    }
    let modes = rounds.modes.clone();
    let outcome = rounds.finish();
    l.call.note(|f| {
        f.ran = true;
        f.running += t0.elapsed();
        f.strategy = Some("dynamic");
        f.groups = Some(ran_rounds);
        f.workers = Some(threads);
        f.steps += ran_rounds;
    });
    if matches!(outcome, Err(Error::AccessOutsidePlan { .. })) {
        // Accesses changed since reconnaissance: the next call learns them again.
        state.sched = None;
    }
    drop(locked);
    Ok(Ran::new(outcome, written_slots(&modes)))
}

/// The captured slot of the priority's table and how to read it, checked against the
/// loop's range.
fn priority_slot<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    kind: &PriorityKind,
) -> Result<Option<(usize, ReadF64)>> {
    let PriorityKind::Change {
        table, name, read, ..
    } = kind
    else {
        return Ok(None);
    };
    let site = l.call.site;
    let Some(slot) = bases.iter().position(|b| b.id == *table) else {
        return Err(Error::invalid(
            "async_for!",
            format!(
                "{site}: Priority::change names a DVector<{name}> the loop body does not use; \
                 name the table the body updates at each index (for Lasso, the coefficients)"
            ),
        ));
    };
    let end = l.start + l.n;
    if bases[slot].len < end || l.call.registry.entries[slot].table.is_map() {
        return Err(Error::invalid(
            "async_for!",
            format!(
                "{site}: Priority::change needs element j of `{}` for every index j of the \
                 loop; it has {} elements and the range ends at {end}",
                site.captures.get(slot).copied().unwrap_or("the table"),
                bases[slot].len
            ),
        ));
    }
    Ok(Some((slot, *read)))
}

/// Reads element `i` of a table at element 0 `ptr` as an `f64`.
type ReadF64 = fn(*const u8, usize) -> f64;

/// Runs rounds on the call's workers.
struct Rounds<'r, 'c, 'a, Task, I> {
    l: &'r Loop<'c, 'a, Task, I>,
    bases: &'r [Base],
    modes: Vec<SlotMode>,
    /// Per written (checked) slot, the group allowed each key in the round being run.
    tags: Vec<Vec<u32>>,
    /// One worker in a world of one: the rounds run in order on the tables.
    lone: Option<ExecCtx>,
    merges: Merges,
    errors: FirstError,
    /// The round's groups: ranges of positions in the round.
    groups: Vec<std::ops::Range<usize>>,
    /// Nanoseconds the workers spent in the body, summed over the workers.
    busy: AtomicU64,
}

impl<'r, 'c, 'a, Task: Sync, I: LoopIndex> Rounds<'r, 'c, 'a, Task, I> {
    fn new(l: &'r Loop<'c, 'a, Task, I>, bases: &'r [Base], modes: Vec<SlotMode>) -> Self {
        let lone = (l.call.threads == 1).then(|| {
            let ctx = ExecCtx::new(bases.iter().map(Base::binding).collect());
            ctx.unit.set(SERIAL_UNIT);
            ctx
        });
        let tags = match lone {
            Some(_) => Vec::new(),
            None => modes
                .iter()
                .zip(bases)
                .map(|(m, b)| match m {
                    SlotMode::Checked => vec![UNTOUCHED; b.len],
                    _ => Vec::new(),
                })
                .collect(),
        };
        Rounds {
            l,
            bases,
            modes,
            tags,
            lone,
            merges: Merges::default(),
            errors: FirstError::new(),
            groups: Vec::new(),
            busy: AtomicU64::new(0),
        }
    }

    /// Runs the scheduler's current round (the `number`th of the call).
    fn run(&mut self, sched: &Scheduler, number: usize) {
        let (site, start, task) = (self.l.call.site, self.l.start, self.l.call.task());
        let round = &sched.round[..];
        if let Some(ctx) = &self.lone {
            let body = match ctx.bindings.iter().all(Binding::is_direct) {
                true => self.l.direct,
                false => self.l.run,
            };
            let t0 = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                body(task, ctx, Indices::list(start, round, ctx));
            }));
            self.busy.fetch_add(nanos(t0), Ordering::Relaxed);
            if let Err(payload) = outcome {
                self.errors.set(body_error(site, ctx.current(), payload));
            }
            return;
        }
        self.groups.clear();
        for (g, range) in sched.groups.iter().enumerate() {
            for &t in &round[range.clone()] {
                for (slot, key) in sched.checked_keys(t) {
                    self.tags[slot][key] = g as u32;
                }
            }
            self.groups.push(range.clone());
        }
        self.run_groups(round, number);
        for &t in round {
            for (slot, key) in sched.checked_keys(t) {
                self.tags[slot][key] = UNTOUCHED;
            }
        }
    }

    /// Runs the round's groups on the workers.
    fn run_groups(&self, round: &[u32], number: usize) {
        let (site, start, task, run) = (
            self.l.call.site,
            self.l.start,
            self.l.call.task(),
            self.l.run,
        );
        let registry = &self.l.call.registry;
        let (bases, modes, tags) = (self.bases, &self.modes[..], &self.tags);
        let (groups, errors, merges, busy) = (&self.groups, &self.errors, &self.merges, &self.busy);
        let next = AtomicUsize::new(0);
        let work = || {
            let (bindings, mut replicas) =
                bind_worker(registry, bases, modes, merges, |slot, b| {
                    if modes[slot] == SlotMode::Checked {
                        b.tags = tags[slot].as_ptr();
                    }
                });
            let mut ctx = ExecCtx::new(bindings);
            loop {
                let g = next.fetch_add(1, Ordering::Relaxed);
                if g >= groups.len() || errors.failed() {
                    break;
                }
                for (slot, b) in ctx.bindings.iter_mut().enumerate() {
                    if modes[slot] == SlotMode::Checked {
                        b.allowed = g as u32;
                    }
                }
                ctx.unit.set(1 + ((number as u64) << 20 | g as u64));
                let tasks = &round[groups[g].clone()];
                if tasks.is_empty() {
                    continue;
                }
                let t0 = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    run(task, &ctx, Indices::list(start, tasks, &ctx));
                }));
                busy.fetch_add(nanos(t0), Ordering::Relaxed);
                if let Err(payload) = outcome {
                    errors.set(body_error(site, ctx.current(), payload));
                }
                push_replicas(registry, bases, merges, &mut replicas);
            }
        };
        let threads = self.l.call.threads;
        let pool = self.l.call.here.pool(threads);
        pool.on_workers(threads.min(groups.len()), &work);
    }

    fn finish(self) -> Result<()> {
        self.l.call.note(|f| {
            f.merging += self.merges.spent();
            f.busy += std::time::Duration::from_nanos(self.busy.load(Ordering::Relaxed));
        });
        self.errors.into_result()
    }
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
