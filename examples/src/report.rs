//! Output of the examples: one progress line per epoch on stderr and, last, exactly one
//! JSON result line on stdout (read by the bench and the tests).

use std::io::Write;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `"impl"` of a serial twin's result line.
pub const SERIAL: &str = "serial";

/// `"impl"` of a strads-ap twin's result line.
pub const STRADS: &str = "strads-ap";

/// Prints one progress line to stderr: `app impl epoch N: metric = value (S s)`.
pub fn progress(
    app: &str,
    implementation: &str,
    epoch: usize,
    metric: &str,
    value: f64,
    secs: f64,
) {
    eprintln!("{app} [{implementation}] epoch {epoch}: {metric} = {value:.6} ({secs:.3} s)");
}

/// Prints `value` as one JSON line on stdout and flushes.
pub fn print_json_line<T: Serialize>(value: &T) {
    let line = serde_json::to_string(value).expect("a result serialises to JSON");
    let mut out = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) is not worth a panic at the very end.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The mean of `xs` (0 when empty).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// The median of `xs` (mean of the middle two for an even count; 0 when empty).
///
/// # Examples
/// ```
/// use strads_ap_examples::report::median;
/// assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
/// assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
/// ```
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Over every loop call site so far ([`strads_ap::loop_stats`]): the seconds spent on
/// reconnaissance and planning, and the calls that ran as recorded runs or in loop order
/// beside the planner making their plan (one-off calls, not steady ones).
fn setup_so_far() -> (f64, u64) {
    let stats = strads_ap::loop_stats();
    let secs = stats.iter().map(|s| s.recon + s.planning).sum::<Duration>();
    let one_off = stats
        .iter()
        .map(|s| s.recorded_calls + s.awaited_plan_calls)
        .sum();
    (secs.as_secs_f64(), one_off)
}

/// Times the epochs of a strads-ap twin and tells their steady time from the one-off
/// set-up of its parallel loops.
///
/// Set-up is reconnaissance and planning, and what a loop's first call took beyond a
/// steady epoch when it ran as a recorded run (serially, logging its accesses; see
/// [`strads_ap::LoopStats::recorded`]), and what the calls after it took beyond a steady
/// epoch while they ran in loop order beside the planner making their plan (see
/// [`strads_ap::LoopStats::awaited_plan_calls`]). Such epochs trained like any other,
/// but their time goes to [`EpochClock::setup_secs`] as their excess over
/// [`EpochClock::secs_per_epoch`], not into the mean.
///
/// # Examples
/// ```
/// use strads_ap_examples::report::EpochClock;
/// let mut clock = EpochClock::new();
/// for epoch in 1..=3 {
///     let start = clock.start();
///     // ... one epoch's loops ...
///     let secs = clock.stop(start, epoch);
///     assert!(secs >= 0.0);
/// }
/// assert!(clock.secs_per_epoch() >= 0.0 && clock.setup_secs() >= 0.0);
/// ```
#[derive(Debug, Default)]
pub struct EpochClock {
    ordinary: Vec<f64>,
    recorded: Vec<f64>,
    setup: f64,
    replanning: bool,
}

/// Where an epoch started (see [`EpochClock::start`]).
#[derive(Debug)]
pub struct EpochStart {
    at: std::time::Instant,
    setup: f64,
    recorded: u64,
}

impl EpochStart {
    /// Now, with the set-up done so far.
    pub fn now() -> Self {
        let (setup, recorded) = setup_so_far();
        EpochStart {
            setup,
            recorded,
            at: std::time::Instant::now(),
        }
    }
}

impl EpochClock {
    /// A clock with no epochs.
    pub fn new() -> Self {
        EpochClock::default()
    }

    /// For loops that re-plan every call (a re-checked loop across ranks): their
    /// reconnaissance and planning after the first epoch are part of the epochs' time.
    pub fn replanning(mut self, yes: bool) -> Self {
        self.replanning = yes;
        self
    }

    /// Starts timing an epoch (the same as [`EpochStart::now`]).
    pub fn start(&self) -> EpochStart {
        EpochStart::now()
    }

    /// Ends epoch `epoch` (from 1) and returns its seconds without set-up, for its progress
    /// line. An epoch a recovery replayed from checkpoints trained nothing and is left out.
    pub fn stop(&mut self, start: EpochStart, epoch: usize) -> f64 {
        let elapsed = start.at.elapsed().as_secs_f64();
        let (setup_now, recorded_now) = setup_so_far();
        let setup = setup_now - start.setup;
        let excluded = if self.replanning && epoch > 1 {
            0.0
        } else {
            setup
        };
        self.setup += excluded;
        let secs = elapsed - excluded;
        if !strads_ap::checkpoint::last_call_replayed() {
            if recorded_now > start.recorded {
                self.recorded.push(secs);
            } else {
                self.ordinary.push(secs);
            }
        }
        secs
    }

    /// Mean seconds of a steady epoch: of those without a recorded run, or of all when
    /// every epoch had one.
    pub fn secs_per_epoch(&self) -> f64 {
        if self.ordinary.is_empty() {
            mean(&self.recorded)
        } else {
            mean(&self.ordinary)
        }
    }

    /// Seconds of one-off set-up: reconnaissance and planning, and the recorded epochs'
    /// time beyond a steady epoch.
    pub fn setup_secs(&self) -> f64 {
        let steady = self.secs_per_epoch();
        self.setup
            + self
                .recorded
                .iter()
                .map(|s| (s - steady).max(0.0))
                .sum::<f64>()
    }
}

/// Prints a summary of every loop call site ([`strads_ap::loop_stats`]) to stderr.
pub fn print_loop_stats() {
    for s in strads_ap::loop_stats() {
        // A locking run undoes and retries the tasks that met a locked element.
        let retried = match s.strategy {
            "locks" => format!(", {} tasks retried", s.retried),
            _ => String::new(),
        };
        // Workers that mostly merge replicas: the loop's cost is its merges.
        let merges = match s.merge_share() {
            Some(share) if share >= 0.01 => {
                format!(", merges {:.0}% of the workers' time", share * 100.0)
            }
            _ => String::new(),
        };
        // First calls that ran serially while logging, instead of reconnaissance.
        let recorded = match s.recorded_calls {
            0 => String::new(),
            1 => format!(", first call recorded in {:.3} s", s.recorded.as_secs_f64()),
            n => format!(", {n} calls recorded in {:.3} s", s.recorded.as_secs_f64()),
        };
        // Planning beside the call after a recorded one, off the calls' path.
        let aside = match s.planned_aside.is_zero() {
            true => String::new(),
            false => format!(" (+ {:.3} s aside)", s.planned_aside.as_secs_f64()),
        };
        // Fixed costs per call: outside the run, and workers waiting within it.
        let costs = s.per_call();
        let waiting = match costs.waiting {
            Some(w) => format!(
                ", {:.3} ms waiting in {:.1} steps",
                w.as_secs_f64() * 1e3,
                costs.steps
            ),
            None => String::new(),
        };
        eprintln!(
            "{}: {} calls, strategy {}, {} groups{recorded}, recon {:.3} s, planning {:.3} s{aside}, running {:.3} s{retried}{merges}; per call {:.3} ms, {:.3} ms outside the run{waiting}",
            s.site,
            s.calls,
            s.strategy,
            s.groups,
            s.recon.as_secs_f64(),
            s.planning.as_secs_f64(),
            s.running.as_secs_f64(),
            costs.wall.as_secs_f64() * 1e3,
            costs.outside.as_secs_f64() * 1e3,
        );
    }
}

/// The result line of SGD matrix factorisation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SgdmfResult {
    /// Always `"sgdmf"`.
    pub app: String,
    /// [`SERIAL`] or [`STRADS`].
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Processes of the job (1 for the serial twin).
    pub ranks: usize,
    /// Worker threads per process (1 for the serial twin).
    pub threads: usize,
    /// Epochs run.
    pub epochs: usize,
    /// Mean seconds of one epoch's training loop: evaluation is excluded, and so is the
    /// strads-ap twin's one-off reconnaissance and planning (see `setup_secs`).
    pub secs_per_epoch: f64,
    /// RMSE on the training set after the last epoch.
    pub train_rmse: f64,
    /// RMSE on the test set after the last epoch.
    pub test_rmse: f64,
    /// Seconds of one-off set-up: reconnaissance and planning, and a recorded first
    /// call's time beyond a steady epoch (0 for the serial twin; see [`EpochClock`]).
    pub setup_secs: f64,
}

/// The result line of multinomial logistic regression.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MlrResult {
    /// Always `"mlr"`.
    pub app: String,
    /// [`SERIAL`] or [`STRADS`].
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Processes of the job (1 for the serial twin).
    pub ranks: usize,
    /// Worker threads per process (1 for the serial twin).
    pub threads: usize,
    /// Epochs run.
    pub epochs: usize,
    /// Mean seconds of one epoch's training loop: evaluation is excluded, and so is the
    /// strads-ap twin's one-off reconnaissance and planning (see `setup_secs`).
    pub secs_per_epoch: f64,
    /// Mean softmax loss on the training set after the last epoch.
    pub train_loss: f64,
    /// Accuracy on the test set after the last epoch.
    pub test_accuracy: f64,
    /// Seconds of one-off set-up: reconnaissance and planning, and a recorded first
    /// call's time beyond a steady epoch (0 for the serial twin; see [`EpochClock`]).
    pub setup_secs: f64,
    /// The strads-ap twin's synchronisation mode (`hybrid` or `bsp`); absent for the
    /// serial twin.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sync: Option<String>,
}
