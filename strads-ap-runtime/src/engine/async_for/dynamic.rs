//! Dynamic scheduling (STRADS): a call of an `async_for!` loop with [`Opts::dynamic`] runs
//! in rounds, each chosen by the loop's [`Scheduler`] (see `engine::dynamic` for the
//! semantics).
//!
//! A round's tasks share no element of a written (non-relaxed) table, by the scheduler's
//! choice from the first call's reconnaissance; the round is cut into one group per
//! worker share, each key of a written table stamped with its group's tag (by the worker
//! that runs the group, just before it does), so that views refuse any access the
//! reconnaissance did not foresee.
//! Relaxed tables are per-worker replicas, equal to the tables at the start of each round:
//! after each group, its worker adds its replicas' changes to the tables (the keys the
//! group's tasks touch, or whole replicas, which then also take the other workers'
//! changes so far, when a round touches about as many keys as the tables hold), and after
//! the round's barrier refreshes its replicas where the round changed the tables. On
//! Lasso's 10,000 × 100,000 set, merging after each group rather than after the round
//! took two workers to the gap target in 1.8-1.9M updates where rounds of 12,500 had
//! diverged in one run of three.
//!
//! The workers stay on the call from its first round to its last, meeting at two
//! spinning barriers per round and pulling the round's groups (twice as many as workers,
//! or more of about `TASKS_PER_GROUP` tasks each) as they come free; the first worker
//! chooses the next round from priorities one round old while the others start on this
//! one. One worker in a world of one runs the rounds in order on the tables directly,
//! each chosen from the priorities of all before it.
//! Across ranks, `ranks` runs one group per rank and exchanges each round's changes.
//!
//! [`Opts::dynamic`]: crate::Opts::dynamic

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::execute::{bind_worker, prefetched, push_replicas};
use super::reconnoitre::reconnoitre;
use super::serial::checkpointed_writes;
use super::{table_infos, written_slots, Loop};
use crate::access::{Binding, ExecCtx, Indices, LoopIndex, UNTOUCHED};
use crate::dds::table::Replica;
use crate::engine::dynamic::{Config, Dynamic, PriorityKind, SchedKey, Scheduler, State, TaskKeys};
use crate::engine::pipeline::Ran;
use crate::engine::reduce::SERIAL_UNIT;
use crate::engine::registry::Registry;
use crate::engine::{body_error, Base, CallSite, FirstError, Merges};
use crate::error::{Error, Result};
use crate::plan::{self, SlotMask, SlotMode};
use crate::sync::{Mutex, RwLock, SpinBarrier};
use crate::util::panic_message;

mod ranks;

/// The tasks a group of a round on several workers holds, about, when the round is large
/// enough for more groups than twice the workers (see [`run`]).
const TASKS_PER_GROUP: usize = 768;

/// The groups a round of `round` tasks is cut into for `threads` workers of one rank:
/// one for one worker; otherwise at least twice the workers, more when the round holds
/// more than [`TASKS_PER_GROUP`] tasks a group, and at most 64 (the stamps' group bits).
fn groups_per_round(threads: usize, round: usize) -> usize {
    match threads {
        1 => 1,
        t => (round / TASKS_PER_GROUP).max(2 * t).min(64),
    }
}

/// Runs the call in rounds chosen by `dynamic`'s scheduler.
pub(super) fn run<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    dynamic: &Dynamic,
) -> Result<Ran> {
    let site = l.call.site;
    if l.call.here.is_distributed() {
        let comm = l.call.here.comm_for(site.operator())?;
        return ranks::run(l, dynamic, comm);
    }
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let config = dynamic.config.clone();
    let mut state = dynamic.lock();
    let key = sched_key(l);
    let priority = priority_slot(l, bases, &config.priority.kind)?;
    let threads = l.call.threads;
    // A scheduler made for one worker indexed no task's keys: several need them.
    let fits = |s: &Scheduler| s.key == key && (threads == 1 || !s.lone);
    if !state.sched.as_ref().is_some_and(fits) {
        make_scheduler(l, bases, key, &config, &mut state)?;
    }
    let t0 = Instant::now();
    // Several workers pull groups as they come free: more groups than workers keep them
    // busy while the first one chooses the next round. A group's worker sees the other
    // workers' changes to relaxed tables only when it ends one of its groups, so groups
    // are also kept near `TASKS_PER_GROUP` tasks: on Lasso's 10,000 x 100,000 set, rounds
    // of 12,500 in 4 groups needed 1.8-3.8M updates to the gap target (0.9-2.5 s on two
    // threads, 13 runs), in 16 groups 1.8-1.9M in 12 runs of 12 (0.8-1.2 s). On the
    // 2,000 x 20,000 set, whose rounds of 2,500 keep 4 groups, 16 cost more than they
    // saved (0.15 s against 0.12 s).
    let groups = groups_per_round(threads, config.round_for(threads, l.n));
    let mut step = Step::new(l, bases, &config, priority, threads, groups);
    let sched = state.sched.as_ref().expect("made");
    let rounds = Rounds::new(l, bases, sched.modes.clone(), &sched.at_index);
    let ran_rounds = match threads {
        1 => {
            let mut ran = 0;
            while step.guarded(&rounds.errors, |s| s.choose(&mut state)) == Some(true) {
                let sched = state.sched.as_ref().expect("made");
                step.starting(&sched.round);
                rounds.run_lone(sched);
                step.ended(&sched.round);
                ran += 1;
                step.guarded(&rounds.errors, |s| s.apply(&mut state));
                if rounds.errors.failed() {
                    break;
                }
            }
            ran
        }
        _ => rounds.run_parallel(&mut step, &mut state),
    };
    let modes = rounds.modes.clone();
    let lone = state.sched.as_ref().is_some_and(|s| s.lone);
    let outcome = rounds.finish();
    l.call.note(|f| {
        f.ran = true;
        f.running += t0.elapsed();
        f.strategy = Some("dynamic");
        f.groups = Some(ran_rounds);
        f.workers = Some(threads);
        f.steps += ran_rounds;
        f.chosen += step.chosen as u64;
        f.deferred += step.deferred;
        f.depends = Some(config.depends.kind.name());
    });
    // Accesses changed since reconnaissance, or a user function panicked inside the
    // scheduler (which may be half-updated): the next call starts a new one.
    if step.broken || matches!(outcome, Err(Error::AccessOutsidePlan { .. })) {
        state.sched = None;
    }
    // A lone scheduler's modes say nothing of writes: learn them as a serial call does.
    let written = match lone {
        false => written_slots(&modes),
        true if outcome.is_ok() => checkpointed_writes(l, bases)?,
        true => Vec::new(),
    };
    drop(locked);
    Ok(Ran::new(outcome, written))
}

/// Tasks reconnoitred for a scheduler that one worker uses ([`Scheduler::lone`]): enough
/// to find the tables every task reads at its own index, which are prefetched.
const LONE_SAMPLE: usize = 64;

/// What identifies the scheduler a call can use: its site, range and tables.
fn sched_key<Task, I>(l: &Loop<'_, '_, Task, I>) -> SchedKey {
    let tables = l.call.registry.entries.iter();
    (
        l.call.site as *const CallSite as usize,
        l.start,
        l.n,
        tables.map(|e| (e.table.id(), e.table.shape())).collect(),
    )
}

/// Makes the call's scheduler (as `key`) from a reconnaissance of its tasks.
fn make_scheduler<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    key: SchedKey,
    config: &Config,
    state: &mut State,
) -> Result<()> {
    let lens: Vec<usize> = bases.iter().map(|b| b.len).collect();
    // One worker in a world of one tests, tags and merges nothing: a few tasks show what
    // to prefetch. (Across ranks, each rank's one worker exchanges its share's keys.)
    let lone = l.call.threads == 1 && !l.call.here.is_distributed();
    let (sched, took, t0) = match lone {
        true => {
            let t0 = Instant::now();
            let (site, task) = (l.call.site, l.call.task());
            let sample = l.n.min(LONE_SAMPLE);
            let log = reconnoitre(site, l.start, sample, task, l.record, bases, 1)?;
            let took = t0.elapsed();
            let t0 = Instant::now();
            let mut at = SlotMask::ALL;
            for t in 0..sample {
                at.and(SlotMask::of_task(l.start, t, log.task(t)));
            }
            // The tasks not sampled may read elsewhere: prefetch only what every index has.
            let entries = &l.call.registry.entries;
            let at_index = (at.to_vec(bases.len(), sample).into_iter().enumerate())
                .filter(|&(s, at)| at && lens[s] >= l.start + l.n && !entries[s].table.is_map())
                .map(|(s, _)| s)
                .collect();
            (
                Scheduler::lone(key, l.n, bases.len(), at_index, config),
                took,
                t0,
            )
        }
        false => {
            let (log, took) = l.reconnoitre(bases)?;
            let t0 = Instant::now();
            let modes = plan::slot_modes(&log, &table_infos(&l.call.registry, bases));
            // Rounds so far ran on one worker: go on in their order.
            let sched = match state.sched.take().filter(|s| s.lone && s.key == key) {
                Some(mut lone) => {
                    lone.index(&log, modes, &lens);
                    lone
                }
                None => Scheduler::new(key, &log, modes, &lens, config),
            };
            (sched, took, t0)
        }
    };
    state.sched = Some(sched);
    state.stats.reconnaissance += 1;
    // Indexing the tasks' keys is the dynamic loop's planning.
    let planning = t0.elapsed();
    l.call.note(|f| {
        f.recon += took;
        f.planning += planning;
        f.first_call = true;
    });
    Ok(())
}

/// Per slot, a tag per key for a written (checked) table, none for the others: the group
/// allowed each key in the round being run.
fn new_tags(modes: &[SlotMode], bases: &[Base]) -> Vec<Vec<AtomicU32>> {
    modes
        .iter()
        .zip(bases)
        .map(|(m, b)| match m {
            SlotMode::Checked => (0..b.len).map(|_| AtomicU32::new(UNTOUCHED)).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// What choosing and closing a round needs, besides the scheduler's state.
struct Step<'s> {
    /// The loop's first index and its number of indices.
    start: usize,
    n: usize,
    /// Groups per round: one worker's own, or one per rank across ranks.
    groups: usize,
    bases: &'s [Base],
    config: &'s Config,
    priority: Option<(usize, ReadF64)>,
    /// Indices per round at most.
    max: usize,
    /// Indices this call runs.
    budget: usize,
    /// Indices in the rounds chosen so far.
    chosen: usize,
    /// Candidates the dependency test set aside this call.
    deferred: u64,
    /// The site, for errors.
    site: &'s CallSite,
    /// Whether a user function panicked inside the scheduler.
    broken: bool,
    /// The priority table's values for the round about to run (when the scheduling worker
    /// reads them; see [`Step::worker_reads`]).
    next_before: Vec<f64>,
    /// A round that ran and whose priorities are not applied yet: its tasks and the
    /// priority table's values before and after it.
    ran: Vec<u32>,
    before: Vec<f64>,
    after: Vec<f64>,
    pending: bool,
}

impl<'s> Step<'s> {
    /// For a call of `l` run by `workers` workers in all, in rounds of `groups` groups.
    fn new<Task, I>(
        l: &Loop<'_, '_, Task, I>,
        bases: &'s [Base],
        config: &'s Config,
        priority: Option<(usize, ReadF64)>,
        workers: usize,
        groups: usize,
    ) -> Self {
        Step {
            start: l.start,
            n: l.n,
            groups,
            bases,
            config,
            priority,
            max: config.round_for(workers, l.n),
            budget: config.updates.unwrap_or(l.n),
            chosen: 0,
            deferred: 0,
            site: l.call.site,
            broken: false,
            next_before: Vec::new(),
            ran: Vec::new(),
            before: Vec::new(),
            after: Vec::new(),
            pending: false,
        }
    }

    /// Chooses the next round into the scheduler; false when the call's budget is spent
    /// or nothing is left to run.
    fn choose(&mut self, state: &mut State) -> bool {
        if self.chosen >= self.budget || self.n == 0 {
            return false;
        }
        let want = self.max.min(self.budget - self.chosen);
        let sched = state.sched.as_mut().expect("made");
        let deferred = sched.choose(want, self.groups, self.config);
        state.stats.deferred += deferred;
        self.deferred += deferred;
        self.chosen += sched.round.len();
        !sched.round.is_empty()
    }

    /// Runs `f`, a part of the scheduler that calls user functions: a panic becomes the
    /// call's error (in `errors`) and the scheduler is made again by the next call.
    fn guarded<R>(&mut self, errors: &FirstError, f: impl FnOnce(&mut Self) -> R) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(r) => Some(r),
            Err(payload) => {
                errors.set(scheduler_error(self.site, &*payload));
                self.broken = true;
                None
            }
        }
    }

    /// The priority table at `tasks`, into `into` (no worker writes it meanwhile).
    fn read(&self, tasks: &[u32], into: &mut Vec<f64>) {
        into.clear();
        if let Some((slot, read)) = self.priority {
            let base = self.bases[slot].ptr as *const u8;
            into.extend(tasks.iter().map(|&t| read(base, self.start + t as usize)));
        }
    }

    /// The priority's slot and reader when the workers may read the priority table
    /// themselves, around each group they run: the table is read-only in the loop, or
    /// written (tag-checked) and touched by every task at its own index, so that element
    /// `j` is one of task `j`'s keys and no other group writes it while `j`'s runs.
    /// Otherwise (a relaxed table, whose master only the merges write) the scheduling
    /// worker reads it between rounds.
    fn worker_reads(&self, modes: &[SlotMode], at_index: &[usize]) -> Option<(usize, ReadF64)> {
        let (slot, read) = self.priority?;
        match modes[slot] {
            SlotMode::ReadOnly => Some((slot, read)),
            SlotMode::Checked if at_index.contains(&slot) => Some((slot, read)),
            _ => None,
        }
    }

    /// Before round `tasks` runs: the priority table's values.
    fn starting(&mut self, tasks: &[u32]) {
        let mut before = std::mem::take(&mut self.next_before);
        self.read(tasks, &mut before);
        self.next_before = before;
    }

    /// After round `p` ran, whose workers read the priority table around its groups:
    /// keeps what its priorities need, applied by [`Step::apply`].
    fn ended_with(&mut self, p: &Published) {
        let n = p.round.len();
        self.ran.clear();
        self.ran.extend_from_slice(&p.round);
        let bits = |b: &AtomicU64| f64::from_bits(b.load(Ordering::Relaxed));
        self.before.clear();
        self.before.extend(p.before[..n].iter().map(bits));
        self.after.clear();
        self.after.extend(p.after[..n].iter().map(bits));
        self.pending = true;
    }

    /// After round `tasks` ran: keeps what its priorities need, applied by
    /// [`Step::apply`].
    fn ended(&mut self, tasks: &[u32]) {
        self.ran.clear();
        self.ran.extend_from_slice(tasks);
        std::mem::swap(&mut self.before, &mut self.next_before);
        let mut after = std::mem::take(&mut self.after);
        self.read(tasks, &mut after);
        self.after = after;
        self.pending = true;
    }

    /// Applies the priorities of the round that ended last, and counts it.
    fn apply(&mut self, state: &mut State) {
        if !std::mem::take(&mut self.pending) {
            return;
        }
        state.stats.rounds += 1;
        state.stats.updates += self.ran.len() as u64;
        if self.priority.is_some() {
            let sched = state.sched.as_mut().expect("made");
            sched.update(&self.ran, &self.before, &self.after, self.config);
        }
    }
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

/// The error for a panic in a user function the scheduler calls ([`Priority::by`]'s
/// score, [`Depends::by`]'s test).
///
/// [`Priority::by`]: crate::Priority::by
/// [`Depends::by`]: crate::Depends::by
fn scheduler_error(site: &CallSite, payload: &(dyn std::any::Any + Send)) -> Error {
    Error::invalid(
        "async_for!",
        format!(
            "{site}: a priority or dependency function of Opts::dynamic panicked while the \
             dynamic scheduler ran it: {}",
            panic_message(payload)
        ),
    )
}

/// Reads element `i` of a table at element 0 `ptr` as an `f64`.
type ReadF64 = fn(*const u8, usize) -> f64;

/// Runs rounds on the call's workers.
struct Rounds<'r, 'c, 'a, Task, I> {
    l: &'r Loop<'c, 'a, Task, I>,
    bases: &'r [Base],
    modes: Vec<SlotMode>,
    /// Per written (checked) slot, the group allowed each key in the round being run
    /// (written by the scheduling worker between rounds, read by views during them).
    tags: Vec<Vec<AtomicU32>>,
    /// One worker in a world of one: the rounds run in order on the tables.
    lone: Option<ExecCtx>,
    /// What each worker's index iterator prefetches ahead: the tables every task touches
    /// at its own index.
    prefetch: Vec<crate::access::Ahead>,
    merges: Merges,
    errors: FirstError,
    /// Nanoseconds the workers spent in the body, summed over the workers.
    busy: AtomicU64,
}

/// A round as the workers see it: its tasks, its groups, and how relaxed replicas are
/// merged after it.
#[derive(Default)]
struct Published {
    round: Vec<u32>,
    groups: Vec<Range<usize>>,
    /// Per group, the relaxed keys its tasks touch (empty when merges are dense).
    keys: Vec<Vec<(usize, usize)>>,
    /// Whether replicas are merged whole (the round touches about as many keys as the
    /// relaxed tables hold) or key by key.
    dense: bool,
    /// Per task of the round, the priority table's value before and after its group ran
    /// (`f64` bits), when the workers read it ([`Step::worker_reads`]); at least as long
    /// as `round`.
    before: Vec<AtomicU64>,
    after: Vec<AtomicU64>,
    /// No round: the workers stop.
    stop: bool,
}

impl<'r, 'c, 'a, Task: Sync, I: LoopIndex> Rounds<'r, 'c, 'a, Task, I> {
    fn new(
        l: &'r Loop<'c, 'a, Task, I>,
        bases: &'r [Base],
        modes: Vec<SlotMode>,
        at_index: &[usize],
    ) -> Self {
        let prefetch = prefetched(&l.call.registry, bases, at_index, |s| {
            modes[s] == SlotMode::ReadOnly
        });
        let lone = (l.call.threads == 1).then(|| {
            let mut ctx = ExecCtx::new(bases.iter().map(Base::binding).collect());
            ctx.unit.set(SERIAL_UNIT);
            ctx.prefetch = prefetch.clone();
            ctx
        });
        let tags = match lone {
            Some(_) => Vec::new(),
            None => new_tags(&modes, bases),
        };
        Rounds {
            l,
            bases,
            modes,
            tags,
            lone,
            prefetch,
            merges: Merges::default(),
            errors: FirstError::new(),
            busy: AtomicU64::new(0),
        }
    }

    /// Runs the scheduler's current round on the one worker, in order on the tables.
    fn run_lone(&self, sched: &Scheduler) {
        let (site, start, task) = (self.l.call.site, self.l.start, self.l.call.task());
        let ctx = self.lone.as_ref().expect("one worker");
        let body = match ctx.bindings.iter().all(Binding::is_direct) {
            true => self.l.direct,
            false => self.l.run,
        };
        let t0 = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            body(task, ctx, Indices::list(start, &sched.round, ctx));
        }));
        self.busy.fetch_add(nanos(t0), Ordering::Relaxed);
        if let Err(payload) = outcome {
            self.errors.set(body_error(site, ctx.current(), payload));
        }
    }

    /// Runs the call's rounds on its workers, which stay on the call from its first round
    /// to its last, meeting at two barriers per round. Round by round: the first worker
    /// applies the priorities of the round before and chooses the next round while the
    /// others start on this one's groups (so the next round is drawn from priorities one
    /// round old, as STRADS's pipelined scheduler does); every worker pulls groups, and
    /// for each tags its written keys with the group's stamp, reads the priority table
    /// around it (where it may: [`Step::worker_reads`]), runs it, and adds its relaxed
    /// replicas' changes to the tables; after the barrier each refreshes its replicas,
    /// and the first worker collects the round's priority values. Returns the rounds
    /// run.
    fn run_parallel(&self, step: &mut Step<'_>, state: &mut State) -> usize {
        let (site, start, task, run) = (
            self.l.call.site,
            self.l.start,
            self.l.call.task(),
            self.l.run,
        );
        let registry = &self.l.call.registry;
        let (bases, modes, tags) = (self.bases, &self.modes[..], &self.tags);
        let (errors, merges, busy) = (&self.errors, &self.merges, &self.busy);
        let prefetch = &self.prefetch[..];
        let threads = self.l.call.threads;
        let published: [RwLock<Published>; 2] = Default::default();
        if !step.choose(state) {
            return 0;
        }
        let sched = state.sched.as_ref().expect("made");
        let task_keys = sched.tasks.clone();
        let reads = step.worker_reads(modes, &sched.at_index);
        {
            let mut first = published[0].write();
            publish(modes, bases, sched, &mut first);
            if reads.is_none() {
                step.starting(&first.round);
            }
        }
        // The scheduling worker's part: the step, the scheduler's state, the rounds run.
        let coordinator = Mutex::new((&mut *step, &mut *state, 0usize));
        let barrier = SpinBarrier::new(threads);
        let next = AtomicUsize::new(0);
        let ids = AtomicUsize::new(0);
        let work = || {
            let id = ids.fetch_add(1, Ordering::Relaxed);
            let (bindings, mut replicas) =
                bind_worker(registry, bases, modes, merges, |slot, b| {
                    if modes[slot] == SlotMode::Checked {
                        b.tags = tags[slot].as_ptr() as *const u32;
                    }
                });
            let mut ctx = ExecCtx::new(bindings);
            ctx.prefetch = prefetch.to_vec();
            for number in 0.. {
                barrier.wait();
                let p = published[number % 2].read();
                if p.stop {
                    // Changes at keys reconnaissance did not foresee (merged key by key,
                    // none of them was) go in now.
                    push_replicas(registry, bases, merges, &mut replicas);
                    break;
                }
                if id == 0 {
                    let mut c = coordinator.lock();
                    let (step, state, _) = &mut *c;
                    let mut following = published[(number + 1) % 2].write();
                    let chosen = step.guarded(errors, |s| {
                        s.apply(state);
                        !errors.failed() && s.choose(state)
                    });
                    match chosen {
                        Some(true) => {
                            let sched = state.sched.as_ref().expect("made");
                            publish(modes, bases, sched, &mut following);
                        }
                        _ => following.stop = true,
                    }
                }
                loop {
                    let g = next.fetch_add(1, Ordering::Relaxed);
                    if g >= p.groups.len() || errors.failed() {
                        break;
                    }
                    let stamp = stamp(number, g);
                    for (slot, b) in ctx.bindings.iter_mut().enumerate() {
                        if modes[slot] == SlotMode::Checked {
                            b.allowed = stamp;
                        }
                    }
                    ctx.unit.set(1 + ((number as u64) << 20 | g as u64));
                    let range = p.groups[g].clone();
                    let tasks = &p.round[range.clone()];
                    if tasks.is_empty() {
                        continue;
                    }
                    let t0 = Instant::now();
                    stamp_keys(tags, &task_keys, tasks, stamp);
                    read_priorities(reads, bases, start, tasks, &p.before[range.clone()]);
                    let outcome = catch_unwind(AssertUnwindSafe(|| {
                        run(task, &ctx, Indices::list(start, tasks, &ctx));
                    }));
                    read_priorities(reads, bases, start, tasks, &p.after[range]);
                    busy.fetch_add(nanos(t0), Ordering::Relaxed);
                    if let Err(payload) = outcome {
                        errors.set(body_error(site, ctx.current(), payload));
                    }
                    // The group's changes to relaxed tables go into the tables now, and
                    // (when merges are dense) the worker's replicas take the others'
                    // changes so far: the rest of the round sees them.
                    push_group(registry, bases, merges, &mut replicas, &p, g);
                }
                // Every group pushed its changes to relaxed tables as it ended: after the
                // barrier every worker's are in, and each refreshes its replicas.
                barrier.wait();
                refresh(registry, bases, &mut replicas, &p);
                if id == 0 {
                    // No worker runs the body until the next barrier.
                    let mut c = coordinator.lock();
                    let (step, _, ran) = &mut *c;
                    *ran += 1;
                    let following = published[(number + 1) % 2].read();
                    if reads.is_some() {
                        step.ended_with(&p);
                    } else {
                        step.ended(&p.round);
                        if !following.stop {
                            step.starting(&following.round);
                        }
                    }
                    clear_stamps_before(tags, number + 1);
                    next.store(0, Ordering::Relaxed);
                }
            }
        };
        let pool = self.l.call.here.pool(threads);
        pool.on_workers(threads, &work);
        let (step, state, ran) = coordinator.into_inner();
        // The last round's priorities.
        step.guarded(errors, |s| s.apply(state));
        ran
    }

    fn finish(self) -> Result<()> {
        self.l.call.note(|f| {
            f.merging += self.merges.spent();
            f.busy += std::time::Duration::from_nanos(self.busy.load(Ordering::Relaxed));
        });
        self.errors.into_result()
    }
}

/// Rounds after which the stamps of [`stamp`] repeat.
const STAMP_ROUNDS: usize = 1 << 25;

/// Before round `number` (no worker runs a group): when stamps come round again, clears
/// every key's, so that none keeps an old one.
fn clear_stamps_before(tags: &[Vec<AtomicU32>], number: usize) {
    if number % STAMP_ROUNDS == 0 {
        for t in tags.iter().flatten() {
            t.store(UNTOUCHED, Ordering::Relaxed);
        }
    }
}

/// The tag of the keys group `g` (below 64) of round `number` holds: unique among the
/// last [`STAMP_ROUNDS`] rounds' groups, and never [`UNTOUCHED`] or `SHARED`.
fn stamp(number: usize, g: usize) -> u32 {
    1 + (((number % STAMP_ROUNDS) << 6) | g) as u32
}

/// Tags the written keys of `tasks`, a group of the round, with the group's `stamp`, as
/// the worker about to run the group does. The keys are the group's own until the round
/// ends: no other group holds them (the scheduler kept every shared key of the round in
/// one group), and a key no group of the round holds keeps an older round's stamp or
/// none, so views still refuse it.
fn stamp_keys(tags: &[Vec<AtomicU32>], keys: &TaskKeys, tasks: &[u32], stamp: u32) {
    if let Some((start, slots)) = keys.own_index() {
        // Each task's keys are its own index: no lookup through the key lists (whose
        // cache misses cost Lasso about a tenth of its body time).
        for &slot in slots {
            let tags = &tags[slot];
            for &t in tasks {
                tags[start + t as usize].store(stamp, Ordering::Relaxed);
            }
        }
        return;
    }
    for &t in tasks {
        for (slot, key) in keys.checked_keys(t) {
            tags[slot][key].store(stamp, Ordering::Relaxed);
        }
    }
}

/// The priority table's values at `tasks` into `into` (`f64` bits), when the workers
/// read them (`reads`, from [`Step::worker_reads`]).
fn read_priorities(
    reads: Option<(usize, ReadF64)>,
    bases: &[Base],
    start: usize,
    tasks: &[u32],
    into: &[AtomicU64],
) {
    let Some((slot, read)) = reads else { return };
    // No other worker writes these elements now: the table is read-only in this loop, or
    // element `start + t` is one of task `t`'s written-table keys, which the group running
    // `t` holds alone for the round (see `Step::worker_reads`).
    let base = bases[slot].ptr as *const u8;
    for (&t, v) in tasks.iter().zip(into) {
        v.store(read(base, start + t as usize).to_bits(), Ordering::Relaxed);
    }
}

/// Publishes the scheduler's current round into `p`.
fn publish(modes: &[SlotMode], bases: &[Base], sched: &Scheduler, p: &mut Published) {
    p.round.clear();
    p.round.extend_from_slice(&sched.round);
    p.groups.clear();
    p.groups.extend(sched.groups.iter().cloned());
    let relaxed_len: usize = (modes.iter().zip(bases))
        .filter(|(m, _)| **m == SlotMode::Relaxed)
        .map(|(_, b)| b.len)
        .sum();
    p.dense = sched.round_relaxed_keys() * 2 >= relaxed_len;
    let n = p.round.len();
    for v in [&mut p.before, &mut p.after] {
        if v.len() < n {
            v.resize_with(n, AtomicU64::default);
        }
    }
    p.keys.resize_with(p.groups.len(), Vec::new);
    for (g, range) in p.groups.iter().enumerate() {
        p.keys[g].clear();
        if !p.dense {
            for &t in &p.round[range.clone()] {
                p.keys[g].extend(sched.relaxed_keys(t));
            }
        }
    }
    p.stop = false;
}

/// Tags the written keys of `round`, cut into `groups`, with their groups (between rounds).
fn tag(tags: &[Vec<AtomicU32>], sched: &Scheduler, round: &[u32], groups: &[Range<usize>]) {
    for (g, range) in groups.iter().enumerate() {
        for &t in &round[range.clone()] {
            for (slot, key) in sched.checked_keys(t) {
                tags[slot][key].store(g as u32, Ordering::Relaxed);
            }
        }
    }
}

/// Clears the tags of `round` (between rounds).
fn untag(tags: &[Vec<AtomicU32>], sched: &Scheduler, round: &[u32]) {
    for &t in round {
        for (slot, key) in sched.checked_keys(t) {
            tags[slot][key].store(UNTOUCHED, Ordering::Relaxed);
        }
    }
}

/// Adds a worker's changes to relaxed tables in group `g` of round `p` to the tables:
/// whole replicas (which then also take the other workers' changes so far), or the keys
/// the group's tasks touch.
fn push_group(
    registry: &Registry,
    bases: &[Base],
    merges: &Merges,
    replicas: &mut [(usize, Replica)],
    p: &Published,
    g: usize,
) {
    if replicas.is_empty() {
        return;
    }
    if p.dense {
        return push_replicas(registry, bases, merges, replicas);
    }
    merges.merge(|_| {
        for (slot, r) in replicas {
            let mut keys = p.keys[g].iter().filter(|k| k.0 == *slot).map(|k| k.1);
            let merger = registry.entries[*slot].merger.as_ref().expect("merger");
            // SAFETY: the master is locked by this engine and only touched under `merges`'
            // lock, which we hold; the keys come from reconnaissance and are below its
            // length.
            unsafe { merger.push_keys(bases[*slot].ptr, r, &mut keys) };
        }
    });
}

/// Refreshes a worker's replicas where round `p` changed the tables (all of them when its
/// merges are dense), once every worker has pushed its changes.
fn refresh(registry: &Registry, bases: &[Base], replicas: &mut [(usize, Replica)], p: &Published) {
    for (slot, r) in replicas {
        let merger = registry.entries[*slot].merger.as_ref().expect("merger");
        let master = bases[*slot].ptr;
        let mut keys = p
            .keys
            .iter()
            .flatten()
            .filter(|k| k.0 == *slot)
            .map(|k| k.1);
        // SAFETY: after the round's second barrier no worker writes a relaxed table's
        // master (every push is done, and the next round starts after the next barrier);
        // the replica has the master's length and the keys are below it.
        unsafe {
            match p.dense {
                true => merger.refresh(master, r),
                false => merger.refresh_keys(master, r, &mut keys),
            }
        }
    }
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::{groups_per_round, stamp_keys, TASKS_PER_GROUP};
    use crate::access::UNTOUCHED;
    use crate::engine::dynamic::{Dynamic, Priority, Scheduler};
    use crate::plan::SlotMode;
    use crate::recon::{Access, AccessLog};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Stamps a group of a log's tasks; returns the tags, and whether the keys were found
    /// by index rather than looked up.
    fn stamped(tasks: &[Vec<Access>], group: &[u32]) -> (Vec<Vec<u32>>, bool) {
        let log = AccessLog::from_tasks(tasks.iter().cloned());
        let modes = vec![SlotMode::ReadOnly, SlotMode::Checked, SlotMode::Checked];
        let lens = [20, 20, 20];
        let config = Dynamic::new(Priority::cyclic()).config;
        let s = Scheduler::new((0, 3, tasks.len(), Vec::new()), &log, modes, &lens, &config);
        let tags: Vec<Vec<AtomicU32>> = (0..3)
            .map(|_| (0..20).map(|_| AtomicU32::new(UNTOUCHED)).collect())
            .collect();
        stamp_keys(&tags, &s.tasks, group, 9);
        let tags = tags
            .iter()
            .map(|t| t.iter().map(|a| a.load(Ordering::Relaxed)).collect())
            .collect();
        (tags, s.tasks.own_index().is_some())
    }

    #[test]
    fn stamping_by_own_index_tags_what_the_lookup_would() {
        // Tasks 0..6 of a range from 3: each writes tables 1 and 2 at its own index, and
        // then (second log) task 4 also writes table 2 at 19, which needs the lookup.
        let own = |t: u64| {
            vec![
                Access::new(0, 3 + t, false),
                Access::new(1, 3 + t, true),
                Access::new(2, 3 + t, true),
            ]
        };
        let by_index: Vec<_> = (0..6).map(own).collect();
        let mut looked_up = by_index.clone();
        looked_up[4].push(Access::new(2, 19, true));
        let group = [1u32, 4, 5];
        let (fast, found) = stamped(&by_index, &group);
        assert!(found);
        let (slow, found) = stamped(&looked_up, &group);
        assert!(!found);
        for (slot, tags) in fast.iter().enumerate() {
            for (key, &tag) in tags.iter().enumerate() {
                let expect = match slot > 0 && [4, 7, 8].contains(&key) {
                    true => 9,
                    false => UNTOUCHED,
                };
                assert_eq!(tag, expect, "slot {slot} key {key}");
                // The lookup tags the same keys, and task 4's extra one.
                let extra = slot == 2 && key == 19;
                assert_eq!(slow[slot][key], if extra { 9 } else { expect });
            }
        }
    }

    #[test]
    fn large_rounds_are_cut_into_groups_of_about_tasks_per_group() {
        assert_eq!(groups_per_round(1, 12_500), 1);
        // Lasso's 10,000 x 100,000 set on two workers: 16 groups of about 781.
        assert_eq!(groups_per_round(2, 12_500), 16);
        // Its 2,000 x 20,000 set: rounds of 2,500 keep twice the workers.
        assert_eq!(groups_per_round(2, 2_500), 4);
        assert_eq!(groups_per_round(4, 2_048), 8);
        assert_eq!(groups_per_round(2, 1_000 * TASKS_PER_GROUP), 64);
        assert_eq!(groups_per_round(48, 100), 64);
    }
}
