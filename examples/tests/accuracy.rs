//! Statistical progress: each strads-ap twin, run on small data with two threads, reaches
//! the serial twin's training metric (within 1%), and the serial twin really learns.
//!
//! The binaries are run as child processes, each bounded by a timeout so that a hang
//! fails the test instead of stalling it.

mod common;

use std::time::Duration;

use common::{num, run_json};

use serde_json::Value;
use strads_ap_examples::data::{split_train_test, synthetic_ratings};
use strads_ap_examples::metrics::rating_mean_std;

/// Longest a child may run.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `binary` with `args` (bounded by [`TIMEOUT`]) and returns its JSON result line.
fn run(binary: &str, args: &[&str]) -> Value {
    run_json(binary, args, TIMEOUT).0
}

fn check_common(result: &Value, app: &str, implementation: &str, threads: f64) {
    assert_eq!(result["app"], app, "{result}");
    assert_eq!(result["impl"], implementation, "{result}");
    assert_eq!(num(result, "ranks"), 1.0, "{result}");
    assert_eq!(num(result, "threads"), threads, "{result}");
    assert_eq!(num(result, "epochs"), 3.0, "{result}");
    assert!(num(result, "secs_per_epoch") > 0.0, "{result}");
    assert!(num(result, "setup_secs") >= 0.0, "{result}");
}

/// One worker in a world of one runs the loop in order: the same model as the serial
/// twin (metrics agree up to the summation order of the evaluation).
#[test]
fn sgdmf_on_one_thread_is_the_serial_program() {
    let args = [
        "--users",
        "1000",
        "--items",
        "300",
        "--ratings",
        "30000",
        "--epochs",
        "3",
        "--threads",
        "1",
    ];
    let serial = run(env!("CARGO_BIN_EXE_sgdmf-serial"), &args);
    let strads = run(env!("CARGO_BIN_EXE_sgdmf"), &args);
    for metric in ["train_rmse", "test_rmse"] {
        let (s, p) = (num(&serial, metric), num(&strads, metric));
        assert!(
            (s - p).abs() <= 1e-9 * s,
            "{metric}: serial {s}, strads-ap {p}"
        );
    }
}

#[test]
fn sgdmf_matches_serial_progress() {
    // The strads-ap plan runs ratings in blocks (rotation), a different serial order from
    // the file order, at the default step size.
    let (users, items, ratings, seed) = ("2000", "500", "60000", "42");
    let args = [
        "--users",
        users,
        "--items",
        items,
        "--ratings",
        ratings,
        "--seed",
        seed,
        "--epochs",
        "3",
        "--threads",
        "2",
    ];
    let serial = run(env!("CARGO_BIN_EXE_sgdmf-serial"), &args);
    let strads = run(env!("CARGO_BIN_EXE_sgdmf"), &args);
    check_common(&serial, "sgdmf", "serial", 1.0);
    check_common(&strads, "sgdmf", "strads-ap", 2.0);

    // The serial twin learned: train RMSE well below the ratings' standard deviation
    // (what predicting the mean achieves).
    let data = synthetic_ratings(2000, 500, 60_000, 42);
    let (train, _) = split_train_test(data.ratings, 42);
    let (_, std) = rating_mean_std(&train);
    let (s, p) = (num(&serial, "train_rmse"), num(&strads, "train_rmse"));
    assert!(
        s < 0.9 * std,
        "serial train RMSE {s} is not well below the rating std {std}"
    );
    assert!(
        num(&serial, "test_rmse") < std,
        "serial test RMSE is not below the std {std}"
    );

    let rel = (p - s).abs() / s;
    assert!(
        rel < 0.01,
        "strads-ap train RMSE {p} is {:.2}% off the serial {s}",
        rel * 100.0
    );
}

fn mlr_matches_serial_progress(sync: &str) {
    let args = [
        "--samples",
        "4000",
        "--features",
        "20",
        "--classes",
        "4",
        "--minibatch",
        "50",
        "--epochs",
        "3",
        "--seed",
        "7",
        "--threads",
        "2",
        "--sync",
        sync,
    ];
    let serial = run(env!("CARGO_BIN_EXE_mlr-serial"), &args);
    let strads = run(env!("CARGO_BIN_EXE_mlr"), &args);
    check_common(&serial, "mlr", "serial", 1.0);
    check_common(&strads, "mlr", "strads-ap", 2.0);
    assert_eq!(strads["sync"], sync, "{strads}");

    // The serial twin learned: loss well below ln(classes) (uniform guessing) and
    // accuracy well above chance (0.25).
    let (s, p) = (num(&serial, "train_loss"), num(&strads, "train_loss"));
    assert!(
        s < 0.5 * 4f64.ln(),
        "serial train loss {s} is not well below ln 4"
    );
    let (sa, pa) = (num(&serial, "test_accuracy"), num(&strads, "test_accuracy"));
    assert!(
        sa > 0.6,
        "serial test accuracy {sa} is not well above chance (0.25)"
    );

    let rel = (p - s).abs() / s;
    assert!(
        rel < 0.01,
        "{sync}: strads-ap train loss {p} is {:.2}% off the serial {s}",
        rel * 100.0
    );
    assert!(
        (pa - sa).abs() <= 0.01,
        "{sync}: strads-ap test accuracy {pa} vs serial {sa}"
    );
}

#[test]
fn mlr_hybrid_matches_serial_progress() {
    mlr_matches_serial_progress("hybrid");
}

#[test]
fn mlr_bsp_matches_serial_progress() {
    mlr_matches_serial_progress("bsp");
}
