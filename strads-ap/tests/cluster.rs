//! Real multi-process jobs over QUIC on 127.0.0.1, started by the launcher: `strads-ap run
//! -n N -- strads-ap check`. Every run is bounded in time and leaves no process behind (the
//! launcher reaps its ranks; a test that times out kills the launcher, whose ranks die
//! with it).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_strads-ap");

fn run_bounded(args: &[&str], limit: Duration) -> (Output, Duration) {
    let dir = std::env::temp_dir().join(format!(
        "strads-ap-cluster-test-{}-{}",
        std::process::id(),
        args.join("-").replace('/', "_")
    ));
    let ran = run_bounded_in(&dir, args, limit);
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

/// As [`run_bounded`], with the job's output directory `dir`, left for the caller.
fn run_bounded_in(dir: &std::path::Path, args: &[&str], limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = Command::new(LAUNCHER)
        .arg("run")
        .arg("--output-dir")
        .arg(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the launcher starts");
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "the job did not finish within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (out, start.elapsed())
}

fn json_line(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {stdout:?}"));
    serde_json::from_str(line).expect("a JSON line")
}

#[test]
fn two_and_three_ranks_form_a_cluster_over_quic() {
    for n in ["2", "3"] {
        let (out, _) = run_bounded(
            &["-n", n, "--", LAUNCHER, "check", "--mib", "4"],
            Duration::from_secs(120),
        );
        assert!(
            out.status.success(),
            "{n} ranks failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json_line(&out);
        let world: u64 = n.parse().unwrap();
        assert_eq!(v["check"], "ok");
        assert_eq!(v["ranks"], world);
        assert_eq!(v["sum"], world * (world + 1) / 2);
        assert_eq!(v["pids"].as_array().unwrap().len() as u64, world);
    }
}

#[test]
fn a_rank_that_dies_mid_job_stops_the_job_with_its_name() {
    let (out, took) = run_bounded(
        &[
            "-n",
            "3",
            "--grace",
            "1",
            "--",
            LAUNCHER,
            "check",
            "--exit-rank",
            "1",
        ],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("rank 1 failed (exit code 3)"), "{stderr}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

/// A rank that exits with code 0 mid-job without leaving it (the others see it lost, as
/// if it had been killed) fails the job naming it, and a job with restarts allowed is not
/// restarted: the launcher saw the exit itself, and a restart would end the same way.
#[test]
fn a_rank_that_exits_0_mid_job_is_not_restarted() {
    let ckpt = std::env::temp_dir().join(format!("strads-ap-vanish-{}", std::process::id()));
    let (out, took) = run_bounded(
        &[
            "-n",
            "3",
            "--grace",
            "1",
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
            "--max-restarts",
            "2",
            "--",
            LAUNCHER,
            "check",
            "--vanish-rank",
            "1",
        ],
        Duration::from_secs(120),
    );
    let _ = std::fs::remove_dir_all(&ckpt);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("rank 1 had exited with code 0"), "{stderr}");
    assert!(stderr.contains("not restarted"), "{stderr}");
    assert!(!stderr.contains("restarting the job"), "{stderr}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

/// A rank that leaves the job cleanly but early (`finish()`, exit code 0, as a program
/// that returns on one rank does) ends the job: the others' next wait for it fails naming
/// it, instead of waiting forever.
#[test]
fn a_rank_that_leaves_early_ends_the_job_naming_it() {
    let dir = std::env::temp_dir().join(format!("strads-ap-left-early-{}", std::process::id()));
    let (out, took) = run_bounded_in(
        &dir,
        &[
            "-n",
            "3",
            "--grace",
            "1",
            "--",
            LAUNCHER,
            "check",
            "--leave-rank",
            "1",
        ],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("rank 1 has finished the job while this rank waits"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
    // The rank that waited told the launcher, which would not restart such a job.
    let note = std::fs::read_to_string(dir.join("left-early")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(note.contains("rank 1 has finished the job"), "{note:?}");
    // With checkpoints on, the early `finish()` flushes them (a collective) while the
    // others are in their allreduce: each waits for the other, and they find out.
    let ckpt = std::env::temp_dir().join(format!("strads-ap-left-ckpt-{}", std::process::id()));
    let (out, took) = run_bounded(
        &[
            "-n",
            "2",
            "--grace",
            "1",
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
            "--",
            LAUNCHER,
            "check",
            "--leave-rank",
            "1",
        ],
        Duration::from_secs(120),
    );
    let _ = std::fs::remove_dir_all(&ckpt);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("driver code differs"), "{stderr}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}
