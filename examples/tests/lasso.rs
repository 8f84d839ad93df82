//! Lasso (`lasso-serial`, `lasso`): the strads-ap twin, scheduled by STRADS's dynamic
//! scheduler on two threads, reaches the serial twin's objective (within 1e-6 relative)
//! with the same support, on the diabetes data (`../shared/data/lasso`, skipped with a
//! message when absent) and on synthetic sparse data, for the Lasso and the elastic net;
//! one thread in cyclic order is the serial program.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{num, run_json};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

fn run(binary: &str, args: &[&str]) -> Value {
    run_json(binary, args, TIMEOUT).0
}

fn assert_same_solution(serial: &Value, strads: &Value) {
    let (s, p) = (num(serial, "objective"), num(strads, "objective"));
    assert!(
        (s - p).abs() <= 1e-6 * s,
        "objective: serial {s}, strads-ap {p}"
    );
    assert!(
        num(serial, "gap") <= 1e-6 && num(strads, "gap") <= 1e-6,
        "{serial}\n{strads}"
    );
    assert_eq!(serial["support"], strads["support"], "{serial}\n{strads}");
    assert!(num(strads, "nonzeros") > 0.0, "{strads}");
}

#[test]
fn diabetes_gives_the_serial_objective_and_support() {
    let Some(path) = common::shared_data("lasso/diabetes.csv", Path::is_file) else {
        return;
    };
    let path = path.to_str().expect("a UTF-8 path");
    let serial = run(env!("CARGO_BIN_EXE_lasso-serial"), &["--data", path]);
    for depends in ["corr:0.5", "none", "overlap:0.2"] {
        let strads = run(
            env!("CARGO_BIN_EXE_lasso"),
            &["--data", path, "--threads", "2", "--depends", depends],
        );
        assert_eq!(strads["impl"], "strads-ap");
        assert_same_solution(&serial, &strads);
    }
}

#[test]
fn synthetic_sparse_data_gives_the_serial_objective() {
    let size = ["--rows", "300", "--features", "800", "--density", "0.05"];
    let serial = run(env!("CARGO_BIN_EXE_lasso-serial"), &size);
    let strads: Vec<&str> = size.iter().copied().chain(["--threads", "2"]).collect();
    assert_same_solution(&serial, &run(env!("CARGO_BIN_EXE_lasso"), &strads));
    // One worker visiting coordinates in index order runs the serial program exactly.
    let cyclic: Vec<&str> = size
        .iter()
        .copied()
        .chain(["--threads", "1", "--order", "cyclic"])
        .collect();
    let one = run(env!("CARGO_BIN_EXE_lasso"), &cyclic);
    assert_eq!(num(&one, "objective"), num(&serial, "objective"), "{one}");
    assert_eq!(num(&one, "updates"), num(&serial, "updates"), "{one}");
}

#[test]
fn the_elastic_net_runs_through_the_same_loop() {
    let args = [
        "--rows",
        "300",
        "--features",
        "800",
        "--density",
        "0.05",
        "--l2",
        "0.3",
    ];
    let serial = run(env!("CARGO_BIN_EXE_lasso-serial"), &args);
    let strads: Vec<&str> = args.iter().copied().chain(["--threads", "2"]).collect();
    let strads = run(env!("CARGO_BIN_EXE_lasso"), &strads);
    assert_eq!(num(&strads, "l2"), 0.3);
    assert_same_solution(&serial, &strads);
    // The ℓ2 term changes the solution.
    let lasso = run(env!("CARGO_BIN_EXE_lasso-serial"), &args[..6]);
    assert!(
        num(&lasso, "objective") < num(&serial, "objective"),
        "{lasso}\n{serial}"
    );
}

#[test]
fn priority_order_needs_fewer_updates_than_cyclic_on_correlated_data() {
    let (line, _) = run_json(
        env!("CARGO_BIN_EXE_lasso"),
        &[
            "--compare-orders",
            "--rows",
            "300",
            "--features",
            "3000",
            "--density",
            "0.1",
        ],
        TIMEOUT,
    );
    let (c, u, p) = (
        num(&line, "cyclic"),
        num(&line, "uniform"),
        num(&line, "priority"),
    );
    assert!(p < c && p < u, "{line}");
}

#[test]
fn a_malformed_data_file_is_named() {
    let dir = std::env::temp_dir().join(format!("lasso-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.csv");
    std::fs::write(&path, "1,2,3\n1,zwei,3\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lasso"))
        .args(["--data", path.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad.csv") && err.contains("line 2"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Across two processes over QUIC (one worker each), the dynamic loop reaches the serial
/// twin's objective and support, every rank holding the same model (rank 0 prints it).
#[test]
fn two_processes_give_the_serial_objective() {
    let Some(launcher) = common::launcher(env!("CARGO_BIN_EXE_lasso")) else {
        return;
    };
    let size = ["--rows", "300", "--features", "800", "--density", "0.05"];
    let serial = run(env!("CARGO_BIN_EXE_lasso-serial"), &size);
    let logs = std::env::temp_dir().join(format!("strads-lasso-ranks-{}", std::process::id()));
    let args = common::launch_args(2, 1, &logs, &[], env!("CARGO_BIN_EXE_lasso"), &size);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (strads, _) = run_json(&launcher.display().to_string(), &args, TIMEOUT);
    assert_eq!(num(&strads, "ranks"), 2.0, "{strads}");
    assert_same_solution(&serial, &strads);
    let _ = std::fs::remove_dir_all(&logs);
}
