//! Loop figures: what each call site did, per rank.

use std::time::Duration;

use super::diagnose::{self, Diagnosis, PlanShape};
use super::registry::Registry;
use super::CallSite;

/// Figures about one loop call site, for the bench and progress output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopStats {
    /// `async_for!`/`sync_for!` and where.
    pub site: String,
    /// Calls so far.
    pub calls: u64,
    /// Time spent in reconnaissance execution.
    pub recon: Duration,
    /// Time spent planning on the calls' path (with, for a plan made aside, what a call
    /// waited for it and laying out the tables in its order when the first call runs it).
    pub planning: Duration,
    /// Time spent planning on a spare thread, while the calls after a recorded first call
    /// ran in loop order (in a world of one, with [`Fallback::Measure`](crate::Fallback)).
    /// Not part of [`setup`](LoopStats::setup): what a call waited for such a plan is in
    /// `planning`.
    pub planned_aside: Duration,
    /// Calls that ran in loop order on one worker beside the planner making their
    /// loop's plan (counted in `calls`).
    pub awaited_plan_calls: u64,
    /// Time spent running bodies (including merges).
    pub running: Duration,
    /// How the last call ran: the plan's strategy (`rotation`, `components`, `bsp`,
    /// `hybrid`), `serial` (one worker), `locks` (a locking run), `recorded` (a recorded
    /// run), or `serial while planning` (loop order on one worker while the plan is made
    /// on a spare thread); `rotation on one worker`, `components on one worker` or `locks
    /// on one worker` (loop order) when the call ran on one worker because that was
    /// faster (see [`Fallback`](crate::Fallback)).
    pub strategy: &'static str,
    /// Task groups in the plan (for a locking run: chunks of tasks, or slices of the
    /// cells of the rotation it places its tasks by).
    pub groups: usize,
    /// Tasks a locking run abandoned on a conflict and ran again.
    pub retried: u64,
    /// Elements of other ranks that reconnaissance fetched on this rank (planning calls
    /// across ranks read what their tasks read from its owner, rather than gathering
    /// whole tables; each element once per window of tasks).
    pub fetched: u64,
    /// Elements this rank received from other ranks in the exchanges around the steps of
    /// calls across ranks (what the plan's steps read or write of elements other ranks
    /// hold), and their encoded bytes.
    pub received: u64,
    /// See [`LoopStats::received`].
    pub received_bytes: u64,
    /// Time the workers spent merging their replicas into the shared tables, or waiting
    /// to (`sync_for!`, and relaxed tables of `async_for!`), summed over the workers.
    pub merging: Duration,
    /// Workers of the last call.
    pub workers: usize,
    /// Time of recorded runs: first calls that ran serially in loop order while logging
    /// their accesses, so that the run was also the reconnaissance (not in `running`).
    pub recorded: Duration,
    /// Calls that were recorded runs (counted in `calls`).
    pub recorded_calls: u64,
    /// Time the workers spent running groups of tasks (bodies and what views do), summed
    /// over the workers, in planned runs: against `running` × `workers`, the share of the
    /// workers' time that went to the loop's work rather than to scheduling.
    pub busy: Duration,
    /// Time inside the loop's calls, from the call to its return (checkpointing after a
    /// call excluded): `running`, `recon`, `planning` and `recorded`, plus the fixed costs
    /// of entering and leaving (see [`LoopStats::per_call`]).
    pub wall: Duration,
    /// Steps of groups run in planned runs (each ends with the workers synchronising).
    pub steps: u64,
    /// Why the loop does not scale, and what to change: each finding once, in the order
    /// found (each is also printed once on stderr; see [`Diagnosis`]).
    pub diagnoses: Vec<Diagnosis>,
}

/// A loop's fixed costs per call, on average over its calls (see [`LoopStats::per_call`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CallCosts {
    /// Time inside a call, from the call to its return.
    pub wall: Duration,
    /// Time a call spent outside its run, reconnaissance, planning and recording:
    /// collecting and locking the captured tables, checking that the kept plan still
    /// holds, shipping the task to the other ranks, and the bookkeeping after the run.
    pub outside: Duration,
    /// Time the workers of a planned run waited rather than ran tasks (`running` less the
    /// workers' busy time over their number, per call that was not a recorded run):
    /// waking the workers, synchronising after each step, and waiting for the slowest;
    /// `None` when no planned run measured it (one worker runs the body directly).
    pub waiting: Option<Duration>,
    /// Steps of groups per call (each ends with the workers synchronising).
    pub steps: f64,
}

impl LoopStats {
    /// The loop's one-off set-up cost so far: reconnaissance and planning, plus what its
    /// recorded runs took beyond an ordinary call (their time less the mean time of the
    /// other calls; all of it while there is no other call yet).
    ///
    /// ```
    /// let setup: std::time::Duration =
    ///     strads_ap_runtime::loop_stats().iter().map(|s| s.setup()).sum();
    /// assert!(setup.as_secs_f64() >= 0.0);
    /// ```
    pub fn setup(&self) -> Duration {
        let ordinary = self.calls.saturating_sub(self.recorded_calls);
        let excess = match u32::try_from(ordinary) {
            Ok(0) | Err(_) => self.recorded,
            Ok(calls) => self.recorded.saturating_sub(
                (self.running / calls)
                    .saturating_mul(u32::try_from(self.recorded_calls).unwrap_or(u32::MAX)),
            ),
        };
        self.recon + self.planning + excess
    }

    /// The share of the workers' time (`running` × `workers`) spent on merges: near 1, the
    /// loop does little else, and larger mini-batches (fewer merges of the same rows) or an
    /// `async_for!` (no replicas) will likely be faster. `None` when nothing was merged.
    ///
    /// ```
    /// for s in strads_ap_runtime::loop_stats() {
    ///     if s.merge_share().is_some_and(|share| share > 0.5) {
    ///         eprintln!("{}: the workers mostly merge replicas", s.site);
    ///     }
    /// }
    /// ```
    pub fn merge_share(&self) -> Option<f64> {
        let worker_secs = self.running.as_secs_f64() * self.workers as f64;
        (worker_secs > 0.0 && !self.merging.is_zero())
            .then(|| (self.merging.as_secs_f64() / worker_secs).min(1.0))
    }

    /// The loop's fixed costs per call, on average: what a short epoch pays beyond its
    /// tasks. Zero before the first call.
    ///
    /// ```
    /// for s in strads_ap_runtime::loop_stats() {
    ///     let c = s.per_call();
    ///     eprintln!(
    ///         "{}: {:.3} ms per call, {:.3} ms of it outside the run",
    ///         s.site,
    ///         c.wall.as_secs_f64() * 1e3,
    ///         c.outside.as_secs_f64() * 1e3
    ///     );
    /// }
    /// ```
    pub fn per_call(&self) -> CallCosts {
        let Ok(calls @ 1..) = u32::try_from(self.calls) else {
            return CallCosts::default();
        };
        let inside = self.running + self.recon + self.planning + self.recorded;
        // Recorded calls run no planned groups: the waiting is theirs to share only.
        let ordinary = u32::try_from(self.calls - self.recorded_calls.min(self.calls))
            .unwrap_or(u32::MAX)
            .max(1);
        let waiting = (!self.busy.is_zero() && self.workers > 0).then(|| {
            let workers = u32::try_from(self.workers).unwrap_or(u32::MAX);
            self.running.saturating_sub(self.busy / workers) / ordinary
        });
        CallCosts {
            wall: self.wall / calls,
            outside: self.wall.saturating_sub(inside) / calls,
            waiting,
            steps: self.steps as f64 / f64::from(calls),
        }
    }
}

/// A rank's loop figures by call site.
#[derive(Default)]
struct Stats(dashmap::DashMap<String, LoopStats>);

fn record_stats(site: &CallSite, f: impl FnOnce(&mut LoopStats)) {
    let key = site.to_string();
    let stats = crate::cluster::here().local::<Stats>();
    let mut entry = stats.0.entry(key.clone()).or_insert_with(|| LoopStats {
        site: key,
        ..LoopStats::default()
    });
    f(&mut entry);
}

/// Figures of every loop call site this rank ran so far, sorted by site.
pub fn loop_stats() -> Vec<LoopStats> {
    let stats = crate::cluster::here().local::<Stats>();
    let mut all: Vec<LoopStats> = stats.0.iter().map(|e| e.value().clone()).collect();
    all.sort_by(|a, b| a.site.cmp(&b.site));
    all
}

/// At the job's end: the diagnoses only the end can give (see `diagnose::at_end`).
pub(crate) fn at_end() {
    let stats = crate::cluster::here().local::<Stats>();
    for mut entry in stats.0.iter_mut() {
        diagnose::at_end(&mut entry);
    }
}

/// Why a call ran on one worker: its figures, for the diagnosis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OneWorker {
    /// The loop's workers.
    pub workers: usize,
    /// Seconds a call took on all of them, or (unmeasured) the plan's parallelism.
    pub all: Result<f64, f64>,
    /// Seconds this call took on one worker.
    pub one: f64,
}

/// What one loop call adds to its site's [`LoopStats`]: gathered by the strategy that ran
/// it, recorded once when the call finishes.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Figures {
    /// The call ran (or failed running) rather than stopping before its tasks.
    pub ran: bool,
    /// The call returned an error.
    pub failed: bool,
    pub recon: Duration,
    pub planning: Duration,
    pub planned_aside: Duration,
    pub running: Duration,
    pub merging: Duration,
    pub recorded: Option<Duration>,
    pub retried: u64,
    pub fetched: u64,
    pub received: u64,
    pub received_bytes: u64,
    pub strategy: Option<&'static str>,
    pub groups: Option<usize>,
    pub workers: Option<usize>,
    /// The call reconnoitred (or recorded) and planned: nothing kept from earlier calls
    /// served it.
    pub first_call: bool,
    /// The loop re-plans every call by design (a re-checked loop that cannot lock).
    pub replans_by_design: bool,
    /// The call ran in loop order on one worker while its plan was being made.
    pub awaiting_plan: bool,
    /// A captured table is a new DDS of the same shape as at the last call, so the call
    /// ran as a re-checked loop (see `async_for::run_async_for`).
    pub renewed: bool,
    /// The call's index range (`async_for!`).
    pub range: Option<(usize, usize)>,
    /// Time the workers spent running groups of tasks, summed over the workers.
    pub busy: Duration,
    /// Steps of groups run (each ends with the workers synchronising).
    pub steps: usize,
    /// Time from the call to its return (set by `pipeline::finish`).
    pub wall: Duration,
    /// The plan made by this call, when it leaves workers idle.
    pub shape: Option<PlanShape>,
    /// Per captured table: whether the call may have written it.
    pub written: Vec<bool>,
    /// Per captured table, for a Hybrid `sync_for!`: whether its replicas merged changes
    /// (a table the body only reads is replicated without reconnaissance, and merges
    /// nothing).
    pub merged: Option<Vec<bool>>,
    /// The call ran on one worker because that was faster (see [`crate::Fallback`]).
    pub one_worker: Option<OneWorker>,
    /// A dynamic loop's call: indices run, candidates its dependency test set aside, and
    /// the test's name.
    pub chosen: u64,
    pub deferred: u64,
    pub depends: Option<&'static str>,
}

impl Figures {
    /// Adds these figures to the site's (a call that did nothing leaves no trace), and
    /// diagnoses the loop if it does not scale.
    pub fn record(self, site: &CallSite, registry: &Registry) {
        if self == Figures::default() {
            return;
        }
        record_stats(site, |s| {
            s.calls += u64::from(self.ran);
            s.recon += self.recon;
            s.planning += self.planning;
            s.planned_aside += self.planned_aside;
            s.awaited_plan_calls += u64::from(self.awaiting_plan);
            s.running += self.running;
            s.merging += self.merging;
            s.retried += self.retried;
            s.fetched += self.fetched;
            s.received += self.received;
            s.received_bytes += self.received_bytes;
            s.busy += self.busy;
            s.wall += self.wall;
            s.steps += self.steps as u64;
            if let Some(t) = self.recorded {
                s.recorded += t;
                s.recorded_calls += 1;
            }
            if let Some(strategy) = self.strategy {
                s.strategy = strategy;
            }
            if let Some(groups) = self.groups {
                s.groups = groups;
            }
            if let Some(workers) = self.workers {
                s.workers = workers;
            }
            diagnose::after_call(site, registry, &self, s);
            if crate::cluster::context().config().verbose {
                let announced = &crate::cluster::here().local::<Announced>().0;
                if let Some(line) = steady_line(site, &self, s, announced) {
                    eprintln!("strads-ap: {line}");
                }
            }
        });
    }
}

/// The workers each site's steady running ran on when [`steady_line`] last described it.
#[derive(Default)]
struct Announced(dashmap::DashMap<String, usize>);

/// With `STRADS_VERBOSE=1`: how a loop runs, said after its first call that ran as later
/// calls will (not a recording or planning call), and again only when its number of
/// workers changes (a loop that falls back to one worker), so that a user whose loop
/// prints no diagnosis (nothing limits it) can see it runs on all workers. `None` for any
/// other call.
fn steady_line(
    site: &CallSite,
    f: &Figures,
    s: &LoopStats,
    announced: &dashmap::DashMap<String, usize>,
) -> Option<String> {
    if !f.ran || f.failed || f.first_call || f.recorded.is_some() || f.renewed || f.awaiting_plan {
        return None;
    }
    let workers = f.workers?;
    if announced.insert(site.to_string(), workers) == Some(workers) {
        return None;
    }
    Some(format!(
        "{site}: runs on {workers} worker{} ({}, {} groups), {:.3} ms per call",
        if workers == 1 { "" } else { "s" },
        s.strategy,
        s.groups,
        f.wall.as_secs_f64() * 1e3
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steady-running line comes once per site, from the first call that is not a
    /// recording or planning call and did not fail, and says the workers and the
    /// strategy; again only when the workers change.
    #[test]
    fn the_steady_line_comes_once_after_the_first_ordinary_call() {
        static SITE: CallSite = CallSite {
            kind: crate::engine::LoopKind::Async,
            task: "Steady",
            body_hash: 1,
            file: "src/main.rs",
            line: 12,
            column: 9,
            captures: &[],
        };
        let announced = dashmap::DashMap::new();
        let stats = LoopStats {
            strategy: "rotation",
            groups: 64,
            ..LoopStats::default()
        };
        let call = |first_call: bool, recorded: Option<Duration>| Figures {
            ran: true,
            first_call,
            recorded,
            workers: Some(2),
            wall: Duration::from_millis(12),
            ..Figures::default()
        };
        let once = |f: &Figures| steady_line(&SITE, f, &stats, &announced);
        assert_eq!(once(&call(true, Some(Duration::from_millis(50)))), None);
        assert_eq!(once(&call(true, None)), None);
        assert_eq!(once(&Figures::default()), None);
        let failed = Figures {
            failed: true,
            ..call(false, None)
        };
        assert_eq!(once(&failed), None, "a call that failed is not said to run");
        let line = once(&call(false, None)).expect("the first ordinary call is described");
        assert!(
            line.contains("src/main.rs:12:9")
                && line.contains("runs on 2 workers (rotation, 64 groups)")
                && line.contains("12.000 ms per call"),
            "{line}"
        );
        assert_eq!(once(&call(false, None)), None, "said once");
        let alone = Figures {
            workers: Some(1),
            ..call(false, None)
        };
        let line = once(&alone).expect("a change of workers is described");
        assert!(line.contains("runs on 1 worker ("), "{line}");
        assert_eq!(once(&alone), None);
    }
}
