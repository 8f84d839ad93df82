//! Which strategy runs a loop call: pure functions of what the call is and what the rank
//! kept from earlier calls.
//!
//! A new strategy is a new file under `async_for/` or `sync_for/` plus one line here (and
//! its row in the tests below).

use super::{Fallback, SyncMode};

/// What an `async_for!` call's strategy depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AsyncCall {
    /// Ranks in the job.
    pub world: usize,
    /// Workers of this rank.
    pub threads: usize,
    /// Indices in the call.
    pub tasks: usize,
    /// The body's accesses change between calls ([`Opts::recheck`](crate::Opts::recheck)).
    pub recheck: bool,
    /// Locking runs can undo a task (the binary unwinds on panics).
    pub unwinds: bool,
    /// The rank kept a plan for this call.
    pub cached_plan: bool,
    /// The rank kept a locking run's table modes for this call.
    pub cached_modes: bool,
}

/// How an `async_for!` call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AsyncStrategy {
    /// No index: nothing runs.
    Nothing,
    /// One worker in a world of one: in loop order, on the tables directly.
    Serial,
    /// A recorded first call, whose log plans the later calls.
    RecordedPlan,
    /// A recorded first call of a re-checked loop, whose log gives the table modes.
    RecordedModes,
    /// Per-element locks (a re-checked loop), reconnoitring first if no modes are kept.
    Locking,
    /// By a plan, planning first if none is kept.
    Planned,
    /// Across the ranks of a job.
    Distributed,
}

/// Locking runs number a worker's tasks (and chunks) in 32 bits.
const MAX_LOCKING_TASKS: usize = (u32::MAX / 2) as usize;

/// Whether a loop's first call in a world of one runs as a recorded run rather than as
/// reconnaissance, planning and a planned run.
///
/// Reconnaissance repeats the body's memory traffic and adds its logging, so on `T`
/// workers the first call costs about `(r + 1) / T` serial epochs plus planning, with
/// `r` ≈ 2 (SGDMF: reconnaissance 0.94 serial epochs on 2 workers); a recorded run costs
/// `f` ≈ 1.2–1.3 on one worker, whatever `T`. So the recorded run is cheaper up to two
/// workers, and parallel reconnaissance beyond.
fn recorded_first_call(threads: usize) -> bool {
    threads <= 2
}

/// The strategy of an `async_for!` call.
pub(crate) fn async_strategy(c: AsyncCall) -> AsyncStrategy {
    use AsyncStrategy::*;
    if c.world > 1 {
        return Distributed;
    }
    if c.tasks == 0 {
        return Nothing;
    }
    if c.threads == 1 {
        return Serial;
    }
    let first = recorded_first_call(c.threads);
    // Accesses change between calls: locks rather than a plan per call (with
    // `panic = "abort"`, or too many tasks, re-checked loops re-plan every call instead).
    if c.recheck && c.unwinds && c.tasks < MAX_LOCKING_TASKS {
        return match (c.cached_modes, first) {
            (false, true) => RecordedModes,
            _ => Locking,
        };
    }
    match (c.cached_plan && !c.recheck, first) {
        (false, true) => RecordedPlan,
        _ => Planned,
    }
}

/// A call on all workers that kept them busy less than this many workers' worth (busy
/// time over wall time) may run faster on one worker, whose views cost less.
pub(crate) const TRY_ONE_BELOW: f64 = 1.5;
/// Calls shorter than this are not timed for [`Fallback::Measure`]: the timer's noise
/// and the first touch of memory are a large share of them.
pub(crate) const MIN_TIMED_SECS: f64 = 1e-3;

/// A plan whose tasks over its longest chain of groups run one after another is below
/// this runs on one worker from its first planned call, unmeasured: its workers would
/// mostly wait, and each access of theirs costs more than a plain one.
pub(crate) const SERIAL_PARALLELISM: f64 = 1.2;

/// Calls run the faster way before the slower way is timed again (then twice as many,
/// and so on): one call timed on a busy machine must not decide for good.
pub(crate) const RETIME_AFTER: u32 = 8;

/// At most this share of a call is lost, on average, to timing the slower way again: a
/// way several times slower waits longer before it is timed again (pagerank: 206 ms on
/// two workers against 60 ms on one, timed again after 8 calls, lost 7.7 ms a call).
pub(crate) const RETIME_COST: f64 = 0.1;

/// Calls before the slower way is timed again when it took `ratio` times the faster's.
fn retime_after(again_after: u32, ratio: f64) -> u32 {
    let cost = ((ratio - 1.0) / RETIME_COST).ceil();
    let cost = if cost.is_finite() && cost > 0.0 {
        cost.min(f64::from(u32::MAX)) as u32
    } else {
        0
    };
    again_after.max(RETIME_AFTER).max(cost)
}

/// Two ways whose figures differ by less than this factor are a close call: each is
/// timed twice before the faster runs on (one call slowed by the machine, or finding its
/// data in the other core's cache, must not decide). A clear difference decides at once,
/// so a loop that is several times slower on all workers pays for one such call only.
pub(crate) const CLOSE_CALL: f64 = 1.5;

/// What [`Fallback::Measure`] learnt of a loop's calls (per plan key, in a world of one).
///
/// Each way keeps its last two calls' times and counts as the faster of them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Pace {
    /// The plan's parallelism (see [`SERIAL_PARALLELISM`]), when it is that low.
    pub serial_plan: Option<f64>,
    /// Seconds of the last two calls on all workers, newest first.
    all: [Option<f64>; 2],
    /// Whether one worker might beat all workers (the last call on all workers kept them
    /// idle enough, or locked elements).
    worth_trying: bool,
    /// Seconds of the last two calls on one worker, newest first.
    one: [Option<f64>; 2],
    /// The way of the last call (`true`: one worker).
    last: Option<bool>,
    /// Calls since the slower way was last timed, and how many to run before timing it
    /// again (0: [`RETIME_AFTER`]).
    since: u32,
    again_after: u32,
    /// Cold starts on all workers in a row, not counted (see [`Pace::all_workers`]).
    cold: u32,
    /// Whether a call ran on all workers yet (the first, if short, is a warm-up).
    warmed: bool,
    /// Whether the one-worker figure is still that of calls beside the planner (see
    /// [`Pace::beside_planner`]), no call on one worker having been timed since.
    one_beside: bool,
}

/// A plan's first call on all workers shorter than this is a warm-up, not counted: it
/// pays once for what later calls find ready (workers' first touch of the plan's tags and
/// groups, pages of tables written for the first time in parallel, cold caches), a
/// millisecond or two however short the loop. An Ising checkerboard sweep (0.26 ms on
/// one worker) took 2.01 ms in its first call on two workers and about 0.2 ms after, and
/// ran on one worker for good on the strength of that call.
pub(crate) const WARM_UP_SECS: f64 = 0.02;

/// A call on all workers that waited this share of its time for a late worker started
/// cold (see [`Pace::all_workers`]). A warm pool starts its workers within microseconds,
/// under 1% of a millisecond call.
pub(crate) const COLD_SHARE: f64 = 0.1;

/// Cold starts in a row that [`Pace::all_workers`] leaves uncounted.
pub(crate) const COLD_CALLS: u32 = 2;

/// The faster of a way's last two calls.
fn figure(times: [Option<f64>; 2]) -> Option<f64> {
    match times {
        [Some(a), Some(b)] => Some(a.min(b)),
        [a, _] => a,
    }
}

impl Pace {
    /// Notes a call on all workers that ran `secs`, its workers busy `busy` seconds in
    /// all; `locks`: an element-locking run (whose accesses cost far more than plain ones
    /// whatever the workers' busy time).
    ///
    /// A call whose steps waited for a late worker (`late` seconds, summed over the steps)
    /// more than [`COLD_SHARE`] of its time is a cold start, not the loop's pace: a pool
    /// thread asleep since the last operator can take a millisecond to wake on a virtual
    /// machine, by which time the other worker has done a small call alone. Up to
    /// [`COLD_CALLS`] such calls in a row are not counted (a loop whose every call starts
    /// cold is timed as it is).
    ///
    /// The plan's first call on all workers is not counted either if it is shorter than
    /// [`WARM_UP_SECS`], unless it locked elements: a locking run has no plan to warm up,
    /// and its locks are its pace (`zoo bpr`: 17 ms a call on two workers against 5.3 ms
    /// on one; not counting its first call cost one more such call, +23% over 10 epochs).
    pub fn all_workers(&mut self, secs: f64, busy: f64, late: f64, locks: bool) {
        let first = !std::mem::replace(&mut self.warmed, true);
        if first && !locks && secs < WARM_UP_SECS {
            return;
        }
        if late > COLD_SHARE * secs && self.cold < COLD_CALLS {
            self.cold += 1;
            return;
        }
        self.cold = 0;
        self.count(false);
        self.all = [Some(secs), self.all[0]];
        let idle = locks || busy < TRY_ONE_BELOW * secs;
        self.worth_trying = secs >= MIN_TIMED_SECS && idle;
    }

    /// Notes a call that ran `secs` in loop order on one worker while the loop's plan was
    /// being made on a spare thread: the one-worker way's figure before any call is
    /// timed there, taken for both of its last two calls, so that the first call on all
    /// workers can be compared at once. Such a call shared the machine with the planner,
    /// so if anything it is slow: a loop it shows faster on one worker is that. Calls
    /// shorter than [`MIN_TIMED_SECS`], and loops timed on one worker already, are left.
    ///
    /// `zoo fm-text` (a packing plan whose 779 batches run one after another) ran 10
    /// epochs at 0.56× serial speed on two threads when its workers' busy time stayed just
    /// above [`TRY_ONE_BELOW`] (76% of each call in bodies) and one worker was never
    /// tried; the call beside the planner had shown one worker 1.7× faster.
    ///
    /// Of several calls beside the planner, the fastest counts: the first after a
    /// recorded run meets what that run left in the caches (`zoo fm-text`: 71 ms, then
    /// 60 ms). Its 71 ms made the first call on two workers (102 ms) a close call, so a
    /// second one ran (105 ms) before one worker took over.
    pub fn beside_planner(&mut self, secs: f64) {
        if secs < MIN_TIMED_SECS {
            return;
        }
        let fastest = match self.one[0] {
            None => secs,
            Some(before) if self.one_beside => before.min(secs),
            Some(_) => return,
        };
        self.one = [Some(fastest), Some(fastest)];
        self.one_beside = true;
    }

    /// Notes a call on one worker that ran `secs`.
    pub fn one_worker(&mut self, secs: f64) {
        self.one_beside = false;
        self.count(true);
        self.one = [Some(secs), self.one[0]];
    }

    /// Seconds of a call on all workers: the faster of the last two.
    pub fn all(&self) -> Option<f64> {
        figure(self.all)
    }

    /// Seconds of a call on one worker: the faster of the last two.
    pub fn one(&self) -> Option<f64> {
        figure(self.one)
    }

    /// Which way was faster when both were last timed (`Some(true)`: one worker).
    fn faster(&self) -> Option<bool> {
        match (figure(self.all), figure(self.one)) {
            (Some(all), Some(one)) => Some(one < all),
            _ => None,
        }
    }

    /// Counts a call (`one`: on one worker): starting to time the slower way starts the
    /// count again and doubles the wait before the next time.
    fn count(&mut self, one: bool) {
        match self.faster() {
            Some(faster) if faster != one => {
                if self.last != Some(one) {
                    self.again_after = self.again_after.max(RETIME_AFTER).saturating_mul(2);
                }
                self.since = 0;
            }
            _ => self.since = self.since.saturating_add(1),
        }
        self.last = Some(one);
    }
}

/// Whether a call with a kept plan (or locking modes) runs on one worker.
pub(crate) fn run_on_one_worker(fallback: Fallback, pace: Option<Pace>) -> bool {
    match fallback {
        Fallback::Never => false,
        Fallback::Always => true,
        Fallback::Measure => {
            let p = pace.unwrap_or_default();
            if p.serial_plan.is_some() {
                return true;
            }
            let Some(all) = figure(p.all) else {
                return false;
            };
            let Some(one) = figure(p.one) else {
                return p.worth_trying;
            };
            if all.max(one) < CLOSE_CALL * all.min(one) {
                // A close call: each way timed twice first.
                if p.one[1].is_none() {
                    return true;
                }
                if p.all[1].is_none() {
                    return false;
                }
            }
            let one_faster = one < all;
            let retime = p.since >= retime_after(p.again_after, all.max(one) / all.min(one));
            // Time the slower way again now and then; one worker only while the last call
            // on all workers left them idle enough to make it a candidate.
            match retime && (one_faster || p.worth_trying) {
                true => !one_faster,
                false => one_faster,
            }
        }
    }
}

/// What a `sync_for!` call's strategy depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SyncCall {
    /// Ranks in the job.
    pub world: usize,
    /// Workers of this rank.
    pub threads: usize,
    /// The loop's synchronisation.
    pub mode: SyncMode,
}

/// How a `sync_for!` call runs; each one alone or across the ranks of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncStrategy {
    /// One worker: the mini-batches in order (across ranks, synchronised per mini-batch
    /// for BSP and per window for Hybrid).
    Serial { across: bool },
    /// Workers share progress asynchronously (see [`SyncMode::Hybrid`]).
    Hybrid { across: bool },
    /// Rounds of one mini-batch per worker, aggregated (see [`SyncMode::Bsp`]).
    Bsp { across: bool },
}

/// The strategy of a `sync_for!` call.
pub(crate) fn sync_strategy(c: SyncCall) -> SyncStrategy {
    let across = c.world > 1;
    match c.mode {
        _ if c.threads == 1 => SyncStrategy::Serial { across },
        SyncMode::Hybrid => SyncStrategy::Hybrid { across },
        SyncMode::Bsp => SyncStrategy::Bsp { across },
    }
}

#[cfg(test)]
mod tests {
    use super::AsyncStrategy::*;
    use super::*;

    /// A loop's pace after its warm-up call on all workers.
    fn warm() -> Pace {
        Pace {
            warmed: true,
            ..Pace::default()
        }
    }

    /// The first call on all workers pays once for what later calls find ready: if short,
    /// it is not counted (an Ising sweep: 2.01 ms, then 0.2 ms a call on two workers,
    /// 0.26 ms on one); a long one counts, a few milliseconds cannot change its verdict.
    #[test]
    fn a_short_first_call_on_all_workers_is_a_warm_up() {
        use Fallback::Measure;
        let mut p = Pace::default();
        p.beside_planner(0.0026);
        p.all_workers(0.0201, 0.0201, 0.0, false);
        assert_eq!(p.all(), Some(0.0201), "long enough to count");
        let mut p = Pace::default();
        p.one_worker(0.00026);
        p.one_worker(0.00026);
        p.all_workers(0.00201, 0.0024, 0.0, false);
        assert_eq!(p.all(), None, "a warm-up");
        assert!(!run_on_one_worker(Measure, Some(p)), "all workers again");
        p.all_workers(0.0002, 0.00036, 0.0, false);
        assert_eq!(p.all(), Some(0.0002));
        assert!(
            !run_on_one_worker(Measure, Some(p)),
            "a close call: all workers timed twice"
        );
        p.all_workers(0.0002, 0.00036, 0.0, false);
        assert!(!run_on_one_worker(Measure, Some(p)), "all workers faster");
        // A locking run's first call counts: its locks are its pace.
        let mut p = Pace::default();
        p.all_workers(0.017, 0.02, 0.0, true);
        assert_eq!(p.all(), Some(0.017));
        assert!(
            run_on_one_worker(Measure, Some(p)),
            "locks: one worker worth a try"
        );
    }

    /// Of the calls beside the planner the fastest counts for one worker, so a first call
    /// on all workers clearly slower than it decides at once (`zoo fm-text`: 71 and 60 ms
    /// beside the planner, 102 ms on two workers); a call timed on one worker replaces
    /// them.
    #[test]
    fn the_fastest_call_beside_the_planner_counts() {
        use Fallback::Measure;
        let mut p = Pace::default();
        p.beside_planner(0.071);
        p.beside_planner(0.060);
        assert_eq!(p.one(), Some(0.060));
        p.all_workers(0.102, 0.16, 0.0, false);
        assert!(
            run_on_one_worker(Measure, Some(p)),
            "1.7 times slower on all workers: decided at once"
        );
        p.one_worker(0.065);
        p.beside_planner(0.050);
        assert_eq!(
            p.one(),
            Some(0.060),
            "a timed call on one worker is not replaced"
        );
    }

    #[test]
    fn async_for_strategies() {
        // world, threads, tasks, recheck, unwinds, cached plan, cached modes → strategy
        #[rustfmt::skip]
        let table = [
            (2, 1, 0, false, true, false, false, Distributed),
            (4, 2, 100, true, true, true, true, Distributed),
            (1, 2, 0, false, true, false, false, Nothing),
            (1, 1, 100, false, true, false, false, Serial),
            (1, 1, 100, true, true, true, true, Serial),
            (1, 2, 100, false, true, false, false, RecordedPlan),
            (1, 2, 100, false, true, true, false, Planned),
            (1, 4, 100, false, true, false, false, Planned),
            (1, 4, 100, false, true, true, false, Planned),
            (1, 2, 100, true, true, false, false, RecordedModes),
            (1, 2, 100, true, true, false, true, Locking),
            (1, 8, 100, true, true, false, false, Locking),
            // A re-checked loop that cannot lock re-plans every call, ignoring kept plans.
            (1, 2, 100, true, false, true, false, RecordedPlan),
            (1, 4, 100, true, false, true, false, Planned),
            (1, 2, MAX_LOCKING_TASKS, true, true, false, false, RecordedPlan),
        ];
        for (i, &(world, threads, tasks, recheck, unwinds, plan, modes, want)) in
            table.iter().enumerate()
        {
            let call = AsyncCall {
                world,
                threads,
                tasks,
                recheck,
                unwinds,
                cached_plan: plan,
                cached_modes: modes,
            };
            assert_eq!(async_strategy(call), want, "row {i}: {call:?}");
        }
    }

    #[test]
    fn one_worker_when_measured_faster_or_worth_a_try() {
        use Fallback::*;
        // Each way measured over two calls in a row.
        let paced = |all: Option<(f64, f64, bool)>, one: Option<f64>| {
            let mut p = warm();
            for _ in 0..2 {
                if let Some((secs, busy, locks)) = all {
                    p.all_workers(secs, busy, 0.0, locks);
                }
            }
            for _ in 0..2 {
                if let Some(secs) = one {
                    p.one_worker(secs);
                }
            }
            Some(p)
        };
        // Nothing measured: all workers (a first call measures them).
        assert!(!run_on_one_worker(Measure, None));
        assert!(run_on_one_worker(Always, None));
        // Busy as two workers: not worth a try; busy as one, or locking: try one.
        assert!(!run_on_one_worker(
            Measure,
            paced(Some((0.1, 0.19, false)), None)
        ));
        assert!(run_on_one_worker(
            Measure,
            paced(Some((0.1, 0.12, false)), None)
        ));
        assert!(run_on_one_worker(
            Measure,
            paced(Some((0.1, 0.2, true)), None)
        ));
        // Too short to time.
        assert!(!run_on_one_worker(
            Measure,
            paced(Some((1e-4, 1e-4, true)), None)
        ));
        // A plan that runs one group after another: one worker, unmeasured.
        let serial = Pace {
            serial_plan: Some(1.0),
            ..warm()
        };
        assert!(run_on_one_worker(Measure, Some(serial)));
        assert!(!run_on_one_worker(Never, Some(serial)));
        // Both measured: the faster way, whichever was tried last.
        assert!(run_on_one_worker(
            Measure,
            paced(Some((0.1, 0.1, false)), Some(0.05))
        ));
        assert!(!run_on_one_worker(
            Measure,
            paced(Some((0.1, 0.1, false)), Some(0.2))
        ));
        assert!(!run_on_one_worker(
            Never,
            paced(Some((0.1, 0.1, false)), Some(0.05))
        ));
        assert!(run_on_one_worker(
            Always,
            paced(Some((0.1, 0.1, false)), Some(0.2))
        ));
    }

    #[test]
    fn the_slower_way_is_timed_again_after_8_then_16_then_32_calls() {
        use Fallback::Measure;
        let timed = |all: (f64, f64), one: f64| {
            let mut p = warm();
            for _ in 0..2 {
                p.all_workers(all.0, all.1, 0.0, false);
            }
            for _ in 0..2 {
                p.one_worker(one);
            }
            p
        };
        // One worker twice as fast: all workers are timed again 10 calls after the first
        // timing of both began (its four calls count; 10 calls, not 8, keep the cost of
        // timing the slower way under a tenth of a call), then after 16 more, then 32.
        let mut p = timed((0.1, 0.1), 0.05);
        let mut all_at = Vec::new();
        for i in 0..60 {
            match run_on_one_worker(Measure, Some(p)) {
                true => p.one_worker(0.05),
                false => {
                    all_at.push(i);
                    p.all_workers(0.1, 0.1, 0.0, false);
                }
            }
        }
        assert_eq!(all_at, vec![6, 23, 56]);
        // A slower way found faster when timed again is the way from then on.
        let mut p = timed((0.1, 0.1), 0.05);
        for _ in 0..7 {
            p.one_worker(0.05);
        }
        assert!(!run_on_one_worker(Measure, Some(p)));
        p.all_workers(0.01, 0.02, 0.0, false);
        for _ in 0..20 {
            assert!(!run_on_one_worker(Measure, Some(p)));
            p.all_workers(0.01, 0.02, 0.0, false);
        }
        // All workers faster and busy on their last call: one worker is not timed again.
        let mut p = timed((0.05, 0.1), 0.1);
        for _ in 0..20 {
            assert!(!run_on_one_worker(Measure, Some(p)));
            p.all_workers(0.05, 0.1, 0.0, false);
        }
        // One slow call does not decide a close call: each way is timed twice and counts
        // as the faster of its last two calls (biased MF: one call on two workers took
        // 13.3 ms where the others took 9.3, and one worker's 11.1 ms won for hundreds of
        // calls).
        let mut p = warm();
        p.all_workers(0.0133, 0.013, 0.0, false);
        assert!(
            run_on_one_worker(Measure, Some(p)),
            "idle enough to try one worker"
        );
        p.one_worker(0.0111);
        assert!(
            run_on_one_worker(Measure, Some(p)),
            "close: one worker again"
        );
        p.one_worker(0.0112);
        assert!(
            !run_on_one_worker(Measure, Some(p)),
            "close: all workers again"
        );
        p.all_workers(0.0093, 0.018, 0.0, false);
        for _ in 0..40 {
            assert!(!run_on_one_worker(Measure, Some(p)), "all workers faster");
            p.all_workers(0.0093, 0.018, 0.0, false);
        }
        // A way several times slower waits longer before it is timed again.
        assert_eq!(retime_after(0, 3.4), 24);
        assert_eq!(retime_after(16, 3.4), 24);
        assert_eq!(retime_after(32, 3.4), 32);
        assert_eq!(retime_after(0, 1.2), RETIME_AFTER);
        // A clear difference decides at once: one call each way.
        let mut p = warm();
        p.all_workers(0.03, 0.03, 0.0, false);
        p.one_worker(0.01);
        assert!(run_on_one_worker(Measure, Some(p)));
        p.one_worker(0.01);
        assert!(run_on_one_worker(Measure, Some(p)));
    }

    /// A call run on one worker beside the planner times that way: the first call on all
    /// workers is compared with it at once, whatever its busy time (`zoo fm-text`: busy
    /// as 1.52 workers, 99 ms on two against 62 ms on one); a loop that scales is not
    /// timed on one worker again; short calls and loops already timed are left alone.
    #[test]
    fn a_call_beside_the_planner_times_the_one_worker_way() {
        use Fallback::Measure;
        let mut p = warm();
        p.beside_planner(0.062);
        assert!(
            !run_on_one_worker(Measure, Some(p)),
            "nothing on all workers yet"
        );
        p.all_workers(0.099, 0.099 * 1.52, 0.0, false);
        for _ in 0..5 {
            assert!(
                run_on_one_worker(Measure, Some(p)),
                "one worker clearly faster"
            );
            p.one_worker(0.060);
        }
        // Scaling: all workers stay, one worker is never timed again.
        let mut p = warm();
        p.beside_planner(0.012);
        for _ in 0..3 {
            p.all_workers(0.0064, 0.0126, 0.0, false);
        }
        for _ in 0..40 {
            assert!(!run_on_one_worker(Measure, Some(p)), "all workers faster");
            p.all_workers(0.0064, 0.0126, 0.0, false);
        }
        // A close call needs no further call on one worker: the figure counts twice.
        let mut p = warm();
        p.beside_planner(0.026);
        p.all_workers(0.0186, 0.036, 0.0, false);
        assert!(
            !run_on_one_worker(Measure, Some(p)),
            "close: all workers again"
        );
        p.all_workers(0.0184, 0.036, 0.0, false);
        assert!(!run_on_one_worker(Measure, Some(p)), "all workers faster");
        // Too short to time, or timed already: no figure taken.
        let mut p = warm();
        p.beside_planner(MIN_TIMED_SECS / 2.0);
        assert_eq!(p.one(), None);
        p.one_worker(0.05);
        p.beside_planner(0.01);
        assert_eq!(p.one(), Some(0.05));
    }

    /// A call on all workers that waited most of its time for a worker to wake is not the
    /// loop's pace: up to two in a row are not counted, the third is.
    #[test]
    fn cold_starts_are_not_taken_for_the_loops_pace() {
        use Fallback::Measure;
        let mut p = warm();
        // A cold call: 2 ms, the second worker started after 1.9 ms (busy as one worker).
        p.all_workers(0.002, 0.0019, 0.0019, false);
        assert_eq!(p.all(), None);
        assert!(
            !run_on_one_worker(Measure, Some(p)),
            "nothing timed yet: all workers"
        );
        // A warm call counts.
        p.all_workers(0.001, 0.0019, 0.0, false);
        assert_eq!(p.all(), Some(0.001));
        assert!(!run_on_one_worker(Measure, Some(p)));
        // Every call cold: the third in a row is timed as it is.
        let mut p = warm();
        for _ in 0..COLD_CALLS {
            p.all_workers(0.002, 0.0019, 0.0019, false);
        }
        assert_eq!(p.all(), None);
        p.all_workers(0.002, 0.0019, 0.0019, false);
        assert_eq!(p.all(), Some(0.002));
        assert!(
            run_on_one_worker(Measure, Some(p)),
            "idle workers: one is worth a try"
        );
    }

    #[test]
    fn sync_for_strategies() {
        use SyncMode::{Bsp, Hybrid};
        use SyncStrategy as S;
        #[rustfmt::skip]
        let table = [
            (1, 1, Bsp, S::Serial { across: false }),
            (1, 1, Hybrid, S::Serial { across: false }),
            (3, 1, Hybrid, S::Serial { across: true }),
            (1, 4, Hybrid, S::Hybrid { across: false }),
            (2, 4, Hybrid, S::Hybrid { across: true }),
            (1, 2, Bsp, S::Bsp { across: false }),
            (2, 2, Bsp, S::Bsp { across: true }),
        ];
        for (i, &(world, threads, mode, want)) in table.iter().enumerate() {
            let call = SyncCall {
                world,
                threads,
                mode,
            };
            assert_eq!(sync_strategy(call), want, "row {i}: {call:?}");
        }
    }
}
