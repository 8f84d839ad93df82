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

/// Seconds strads-ap has spent so far on reconnaissance and planning, over every loop
/// call site ([`strads_ap::loop_stats`]): the one-off setup cost of the parallel loops.
pub fn strads_setup_secs() -> f64 {
    strads_ap::loop_stats()
        .iter()
        .map(|s| s.recon + s.planning)
        .sum::<Duration>()
        .as_secs_f64()
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
        eprintln!(
            "{}: {} calls, strategy {}, {} groups, recon {:.3} s, planning {:.3} s, running {:.3} s{retried}{merges}",
            s.site,
            s.calls,
            s.strategy,
            s.groups,
            s.recon.as_secs_f64(),
            s.planning.as_secs_f64(),
            s.running.as_secs_f64()
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
    /// Seconds of reconnaissance and planning (0 for the serial twin).
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
    /// Seconds of reconnaissance and planning (0 for the serial twin).
    pub setup_secs: f64,
    /// The strads-ap twin's synchronisation mode (`hybrid` or `bsp`); absent for the
    /// serial twin.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sync: Option<String>,
}
