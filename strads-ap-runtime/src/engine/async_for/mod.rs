//! The serializable engine behind `async_for!`: each call enters the pipeline
//! ([`super::pipeline`]), runs by one strategy ([`super::choose::async_strategy`]), one file
//! each, and finishes.
//!
//! | strategy | file | when |
//! |---|---|---|
//! | serial | `serial.rs` | one worker in a world of one |
//! | recorded | `recorded.rs` | first call on one or two workers: one logged pass in loop order |
//! | planned | `planned.rs` (with `execute.rs`) | later calls, or first calls on more workers |
//! | locking | `locking.rs` | re-checked loops (accesses change between calls) |
//! | distributed | `distributed.rs` (with `exchange.rs`) | a job of several ranks |

use std::ops::Range;
use std::time::{Duration, Instant};

use super::cache::{kept, PlanKey};
use super::choose::{
    async_strategy, run_on_one_worker, AsyncCall, AsyncStrategy, SERIAL_PARALLELISM,
};
use super::pipeline::{self, Call};
use super::stats::OneWorker;
use super::{Base, CallSite, Fallback, Opts, Registry};
use crate::access::{ExecCtx, Indices, LoopIndex};
use crate::error::{Error, Result};
use crate::plan::{SlotMode, TableInfo};
use crate::recon::{AccessLog, InPlace, RecordIndices, Recorder, MAX_TABLES};

mod distributed;
mod dynamic;
mod exchange;
mod execute;
mod fetching;
pub(in crate::engine) mod locking;
mod lone;
mod planned;
mod reconnoitre;
mod recorded;
mod serial;

/// One `async_for!` call, as its strategies see it.
pub(super) struct Loop<'c, 'a, Task, I> {
    pub call: &'c Call<'a, Task>,
    /// The first index.
    pub start: usize,
    /// Indices in the call.
    pub n: usize,
    pub opts: &'c Opts,
    pub run: fn(&Task, &ExecCtx, Indices<'_, I>),
    /// The body over recording views that write to scratch copies, for reconnaissance.
    pub record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    /// The body over recording views that write the tables, for a recorded run.
    pub recorded: fn(&Task, &InPlace<'_>, RecordIndices<'_, I>),
    /// The body over direct views, for a lone worker.
    pub direct: fn(&Task, &ExecCtx, Indices<'_, I>),
    /// The body over direct views of windows, for a rotation group whose checked tables
    /// are all window-only.
    pub window: fn(&Task, &ExecCtx, Indices<'_, I>),
    /// The body over lock views, for locking runs.
    pub lock: fn(&Task, &ExecCtx, Indices<'_, I>),
    /// What the rank keeps of this call between calls is kept under.
    pub key: PlanKey,
    /// Where the call's tables are new DDSs of the last call's shapes and `key` is its
    /// role (see `PlanKey::renews`; not declared `recheck`): the call's own key, under
    /// which a plan made from its recorded run serves a next call over the same tables.
    pub renewed: Option<PlanKey>,
}

impl<Task: Sync, I: LoopIndex> Loop<'_, '_, Task, I> {
    /// Reconnaissance of the whole call on its workers: the log, and what it took.
    fn reconnoitre(&self, bases: &[Base]) -> Result<(AccessLog, Duration)> {
        let t0 = Instant::now();
        let log = reconnoitre::reconnoitre(
            self.call.site,
            self.start,
            self.n,
            self.call.task(),
            self.record,
            bases,
            self.call.threads,
        )?;
        Ok((log, t0.elapsed()))
    }

    /// Whether this call runs on one worker instead of all (see [`Fallback`]).
    fn on_one_worker(&self) -> bool {
        self.call.here.world_size() == 1
            && run_on_one_worker(self.opts.fallback, kept().pace.get(&self.key))
    }

    /// Notes how long a call ran (`one`: on one worker; `busy`: the workers' time in
    /// bodies; `locks`: with element locks), for the next call's choice, and the figures
    /// of a call that ran on one worker because that was faster.
    fn paced(&self, one: bool, ran: Duration, busy: Duration, late: Duration, locks: bool) {
        let kept = kept();
        let mut pace = kept.pace.get(&self.key).unwrap_or_default();
        let secs = ran.as_secs_f64();
        match one {
            true => {
                pace.one_worker(secs);
                // The figures a choice compares (the faster of each way's last two
                // calls); a call on one worker that only times that way (a close call,
                // or a retiming) is not one that runs there because it is faster.
                let one = pace.one().unwrap_or(secs);
                let all = match (pace.all(), pace.serial_plan) {
                    (Some(all), _) if one < all => Some(Ok(all)),
                    (Some(_), _) => None,
                    (None, Some(parallelism)) => Some(Err(parallelism)),
                    (None, None) => None,
                };
                if let (Fallback::Measure, Some(all)) = (self.opts.fallback, all) {
                    let workers = self.call.threads;
                    let figures = OneWorker { workers, all, one };
                    self.call.note(|f| f.one_worker = Some(figures));
                }
            }
            false => pace.all_workers(secs, busy.as_secs_f64(), late.as_secs_f64(), locks),
        }
        kept.pace.put(self.key.clone(), pace);
    }
}

impl<Task, I> Loop<'_, '_, Task, I> {
    /// Notes a call that ran in loop order on one worker while the plan was made aside
    /// (see [`Pace::beside_planner`](crate::engine::choose::Pace::beside_planner)).
    fn paced_beside_planner(&self, ran: Duration) {
        if self.call.here.world_size() > 1 {
            return;
        }
        let kept = kept();
        let mut pace = kept.pace.get(&self.key).unwrap_or_default();
        pace.beside_planner(ran.as_secs_f64());
        kept.pace.put(self.key.clone(), pace);
    }

    /// Notes a plan just made, with its parallelism (tasks over its longest chain of
    /// groups) when it was looked at: too low for its workers to pay, later calls run on
    /// one worker unmeasured; a new plan that is not (a loop planned again) is timed.
    fn plan_made(&self, parallelism: Option<f64>) {
        if self.call.here.world_size() > 1 {
            return;
        }
        let kept = kept();
        let mut pace = kept.pace.get(&self.key).unwrap_or_default();
        pace.serial_plan = parallelism.filter(|&p| p < SERIAL_PARALLELISM);
        kept.pace.put(self.key.clone(), pace);
    }
}

/// The name of a strategy run on one worker (see [`Fallback`]).
fn on_one_worker(strategy: &str) -> &'static str {
    match strategy {
        "rotation" => "rotation on one worker",
        "components" => "components on one worker",
        "packing" => "packing on one worker",
        "locks" => "locks on one worker",
        _ => "on one worker",
    }
}

/// Runs an `async_for!` loop: `run` over every index of `range`, serializably.
///
/// Called by generated code (the body six times: over checked views, recording views
/// (writing to scratch, and in place), direct views of whole tables and of windows, and
/// lock views); see the `async_for!` macro for the user-facing contract.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn run_async_for<Task: Sync + serde::Serialize + serde::de::DeserializeOwned, I: LoopIndex>(
    site: &'static CallSite,
    range: Range<I>,
    task: &Task,
    opts: Opts,
    register: fn(&Task, &mut Registry),
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    recorded: fn(&Task, &InPlace<'_>, RecordIndices<'_, I>),
    direct: fn(&Task, &ExecCtx, Indices<'_, I>),
    window: fn(&Task, &ExecCtx, Indices<'_, I>),
    lock: fn(&Task, &ExecCtx, Indices<'_, I>),
) -> Result<()> {
    let (start, n) = check_range(site, range)?;
    let Some(call) = pipeline::enter(site, task, &opts, register, MAX_TABLES)? else {
        return Ok(());
    };
    let mut key = PlanKey::new(site, start..start + n, call.threads, &opts, &call.registry);
    let kept = kept();
    // A table made afresh for this call (same shapes as the last call's, another DDS): no
    // plan from an earlier call can serve it, and one made now would serve no later call.
    // In a world of one such a loop runs as a re-checked one (element locks, with the
    // table modes kept for its role) rather than as a recorded first call every time.
    let last = kept
        .last_keys
        .insert(site as *const CallSite as usize, key.clone());
    let renewed = call.here.world_size() == 1 && last.is_some_and(|last| key.renews(&last));
    let own_key = (renewed && !opts.recheck).then(|| key.clone());
    if renewed {
        key = key.role();
    }
    let strategy = async_strategy(AsyncCall {
        world: call.here.world_size(),
        threads: call.threads,
        tasks: n,
        recheck: opts.recheck || renewed,
        unwinds: cfg!(panic = "unwind"),
        cached_plan: kept.has_plan(&key),
        cached_modes: kept.modes.contains(&key),
    });
    drop(kept);
    // Only a call that runs with locks because of it counts as renewed (one worker runs
    // the loop directly; without unwinding, a re-checked loop re-plans instead).
    if renewed && !opts.recheck {
        let locks = matches!(
            strategy,
            AsyncStrategy::Locking | AsyncStrategy::RecordedModes
        );
        call.note(|f| f.renewed = locks);
    }
    let l = Loop {
        call: &call,
        start,
        n,
        opts: &opts,
        run,
        record,
        recorded,
        direct,
        window,
        lock,
        key,
        renewed: own_key,
    };
    call.note(|f| f.range = Some((start, start + n)));
    // A dynamic loop runs rounds until it converges: its length is not known.
    let total = opts.dynamic.is_none().then_some(n);
    let _bar = crate::progress::for_call(
        site,
        total,
        (call.here.rank(), call.here.world_size()),
        opts.progress,
    );
    if let Some(schedule) = &opts.dynamic {
        let ran = dynamic::run(&l, schedule);
        return pipeline::finish(call, ran);
    }
    let ran = match strategy {
        AsyncStrategy::Nothing => Ok(pipeline::Ran::new(Ok(()), Vec::new())),
        AsyncStrategy::Serial => serial::run(&l),
        AsyncStrategy::RecordedPlan => recorded::run_for_plan(&l),
        AsyncStrategy::RecordedModes => recorded::run_for_modes(&l),
        AsyncStrategy::Locking => locking::run(&l),
        AsyncStrategy::Planned => planned::run(&l),
        AsyncStrategy::Distributed => distributed::run(&l),
    };
    pipeline::finish(call, ran)
}

/// The call's first index and index count, or an error for a range the engine cannot run.
fn check_range<I: LoopIndex>(site: &CallSite, range: Range<I>) -> Result<(usize, usize)> {
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
    Ok((start, n))
}

/// What the planner needs to know of each captured table.
fn table_infos(registry: &Registry, bases: &[Base]) -> Vec<TableInfo> {
    registry
        .entries
        .iter()
        .zip(bases)
        .map(|(e, base)| TableInfo {
            key_space: base.len,
            relaxed: e.table.is_relaxed() && e.merger.is_some(),
        })
        .collect()
}

/// The slots a plan lets tasks write.
fn written_slots(modes: &[SlotMode]) -> Vec<bool> {
    modes.iter().map(|m| *m != SlotMode::ReadOnly).collect()
}
