//! The bench runner: its summary lines, in both modes, on a small synthetic problem. The
//! figures themselves are not judged here (tests must not depend on the machine's load);
//! only that they are there, positive, and of runs that trained the same model.

mod common;

use std::time::Duration;

use common::{num, run_raw};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(300);
const SMALL: [&str; 8] = [
    "--epochs",
    "2",
    "--ratings",
    "20000",
    "--users",
    "300",
    "--items",
    "100",
];

/// The bench's last stdout line (its summary), after checking it succeeded.
fn summary(args: &[&str]) -> Value {
    let out = run_raw(env!("CARGO_BIN_EXE_bench"), args, TIMEOUT);
    assert!(out.success, "bench {args:?} failed:\n{}", out.stderr);
    let last = out.stdout.lines().last().expect("a summary line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad summary {last}: {e}"))
}

#[test]
fn twins_are_compared_on_speed_and_progress() {
    let mut args = vec!["--app", "sgdmf", "--reps", "1", "--threads", "2", "--"];
    args.extend(SMALL);
    let s = summary(&args);
    assert_eq!(s["bench"], "sgdmf");
    assert_eq!(
        (s["reps"].as_u64(), s["threads"].as_u64()),
        (Some(1), Some(2))
    );
    for key in ["serial_secs_per_epoch", "strads_secs_per_epoch", "speedup"] {
        assert!(num(&s, key) > 0.0, "{key} in {s}");
    }
    // Two epochs of the same SGD in another order, on a tiny problem: the same model
    // roughly (the twins' 1% agreement after 3 epochs is tested in `accuracy.rs`), not NaN.
    let rmse = num(&s, "rmse_ratio");
    assert!((rmse - 1.0).abs() < 0.1, "rmse ratio {rmse}");
}

#[test]
fn checkpointing_is_measured_against_the_same_twin_without() {
    let mut args = vec![
        "--app",
        "sgdmf",
        "--checkpoint",
        "--reps",
        "1",
        "--threads",
        "1",
        "--",
    ];
    args.extend(SMALL);
    let s = summary(&args);
    assert_eq!(
        (s["bench"].as_str(), s["app"].as_str()),
        (Some("checkpoint"), Some("sgdmf"))
    );
    let (plain, ckpt) = (
        num(&s, "plain_secs_per_epoch"),
        num(&s, "checkpointed_secs_per_epoch"),
    );
    assert!(plain > 0.0 && ckpt > 0.0, "{s}");
    assert!(
        (num(&s, "overhead") - (ckpt / plain - 1.0)).abs() < 1e-9,
        "{s}"
    );
    // The checkpoints went to a temporary directory that is gone again.
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("strads-bench-ckpt-")
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_ceiling_runs_copies_of_the_serial_twin_side_by_side() {
    let mut args = vec![
        "--app",
        "sgdmf",
        "--ceiling",
        "--reps",
        "1",
        "--threads",
        "2",
        "--",
    ];
    args.extend(SMALL);
    let s = summary(&args);
    assert_eq!(
        (s["bench"].as_str(), s["app"].as_str(), s["copies"].as_u64()),
        (Some("ceiling"), Some("sgdmf"), Some(2))
    );
    let (alone, together) = (
        num(&s, "alone_secs_per_epoch"),
        num(&s, "concurrent_secs_per_epoch"),
    );
    assert!(alone > 0.0 && together > 0.0, "{s}");
    assert!(
        (num(&s, "ceiling") - 2.0 * alone / together).abs() < 1e-9,
        "{s}"
    );
    // The ceiling is not measured against a launcher run.
    let out = run_raw(
        env!("CARGO_BIN_EXE_bench"),
        &["--app", "sgdmf", "--ceiling", "--ranks", "2"],
        TIMEOUT,
    );
    assert!(
        !out.success && out.stderr.contains("--ranks"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_peer_is_compared_with_the_strads_ap_twin() {
    // Any program printing the examples' JSON line can be the peer: here the serial twin.
    let peer = format!("{} {}", env!("CARGO_BIN_EXE_sgdmf-serial"), SMALL.join(" "));
    let mut args = vec![
        "--app",
        "sgdmf",
        "--reps",
        "1",
        "--threads",
        "2",
        "--peer",
        &peer,
        "--",
    ];
    args.extend(SMALL);
    let s = summary(&args);
    assert_eq!(
        (s["bench"].as_str(), s["app"].as_str(), s["peer"].as_str()),
        (Some("peer"), Some("sgdmf"), Some("serial"))
    );
    let (p, t) = (
        num(&s, "peer_secs_per_epoch"),
        num(&s, "strads_secs_per_epoch"),
    );
    assert!(p > 0.0 && t > 0.0, "{s}");
    assert!((num(&s, "speedup") - p / t).abs() < 1e-9, "{s}");
    // Metrics both lines carry, side by side.
    for key in ["train_rmse", "test_rmse"] {
        let (a, b) = (
            num(&s, &format!("peer_{key}")),
            num(&s, &format!("strads_{key}")),
        );
        assert!((a / b - 1.0).abs() < 0.1, "{key}: {s}");
    }
    assert!(s.get("peer_mrr").is_none(), "{s}");
    // A peer that cannot start is named.
    let out = run_raw(
        env!("CARGO_BIN_EXE_bench"),
        &["--app", "sgdmf", "--peer", "/no/such/peer --x"],
        TIMEOUT,
    );
    assert!(
        !out.success && out.stderr.contains("/no/such/peer"),
        "{}",
        out.stderr
    );
}

/// The scale bench: one line per number of ranks, each run in a process of its own with
/// every rank fetching rather than gathering (`STRADS_FETCH_ABOVE=0`), so what a rank
/// holds between calls shrinks as ranks are added: its part plus the rows it read.
#[test]
fn the_scale_bench_shows_each_rank_holding_less_as_ranks_are_added() {
    let out = common::run_raw_env(
        env!("CARGO_BIN_EXE_scale"),
        &[
            "--ranks",
            "1,2,4",
            "--users",
            "4000",
            "--items",
            "200",
            "--ratings",
            "12000",
            "--epochs",
            "1",
        ],
        &[("STRADS_FETCH_ABOVE", "0")],
        TIMEOUT,
    );
    assert!(out.success, "scale failed:\n{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l}: {e}")))
        .collect();
    let ranks: Vec<f64> = lines.iter().map(|l| num(l, "ranks")).collect();
    assert_eq!(ranks, [1.0, 2.0, 4.0]);
    let held: Vec<f64> = lines.iter().map(|l| num(l, "max_rank_bytes")).collect();
    let whole = num(&lines[0], "data_bytes") + num(&lines[0], "model_bytes");
    // A world of one holds the data and the model, as the bench counts them.
    assert!(
        (held[0] - whole).abs() < 0.05 * whole,
        "{held:?} against {whole}"
    );
    assert!(
        held[1] < 0.8 * held[0] && held[2] < 0.8 * held[1],
        "{held:?}"
    );
    for l in &lines {
        assert_eq!(l["tables"].as_array().map(Vec::len), Some(3), "{l}");
        assert!(num(l, "train_rmse").is_finite() && num(l, "process_peak_bytes") > 0.0);
    }
}
