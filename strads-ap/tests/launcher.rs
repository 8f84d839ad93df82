//! `strads-ap run` end to end, in local mode, with `sh` scripts as the ranks.
//!
//! Every launcher is waited for with a deadline and killed if it overruns (its ranks die
//! with it); ranks that sleep record their pid so the tests can check none is left.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_strads-ap");
/// Longest any launcher in these tests may run.
const DEADLINE: Duration = Duration::from_secs(30);

/// Writes `$STRADS_OUTPUT_DIR/pid-$STRADS_RANK` (atomically) and sleeps in the same
/// process, so the pid is the rank's.
const RECORD_PID_AND_SLEEP: &str = r#"echo $$ > "$D/pid.tmp.$STRADS_RANK" && mv "$D/pid.tmp.$STRADS_RANK" "$D/pid-$STRADS_RANK"; exec sleep 60"#;

/// Held while this test process starts a process, and while it writes an executable: a
/// child forked in between would inherit the file open for writing, and executing the
/// file would then fail with "Text file busy".
static FORKING: Mutex<()> = Mutex::new(());

fn forking() -> std::sync::MutexGuard<'static, ()> {
    FORKING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A launcher under test; killed on drop if still running.
struct Launcher {
    child: Child,
    started: Instant,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// How a launcher ended.
struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Launcher {
    /// Starts `strads-ap ARGS` with its stdout and stderr in files under `dir`.
    fn start(dir: &Path, args: &[&str]) -> Launcher {
        Self::start_with(dir, args, |_| {})
    }

    fn start_with(dir: &Path, args: &[&str], adjust: impl FnOnce(&mut Command)) -> Launcher {
        let stdout = dir.join("launcher.out");
        let stderr = dir.join("launcher.err");
        let mut command = Command::new(LAUNCHER);
        command
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap());
        adjust(&mut command);
        Launcher {
            child: {
                let _forking = forking();
                command.spawn().unwrap()
            },
            started: Instant::now(),
            stdout,
            stderr,
        }
    }

    /// Waits for the launcher to exit, at most [`DEADLINE`].
    fn wait(mut self) -> Ended {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if self.started.elapsed() > DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "launcher still running after {DEADLINE:?}; stderr:\n{}",
                    fs::read_to_string(&self.stderr).unwrap_or_default()
                );
            }
            sleep(Duration::from_millis(20));
        };
        Ended {
            code: status.code(),
            stdout: fs::read_to_string(&self.stdout).unwrap(),
            stderr: fs::read_to_string(&self.stderr).unwrap(),
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `strads-ap ARGS` to its end.
fn run(dir: &Path, args: &[&str]) -> Ended {
    Launcher::start(dir, args).wait()
}

/// The pids that ranks recorded in `pid-R` files of `out`, waiting (up to 10 s) for the
/// `ranks` listed.
fn recorded_pids(out: &Path, ranks: &[usize]) -> Vec<u32> {
    let started = Instant::now();
    ranks
        .iter()
        .map(|rank| loop {
            let path = out.join(format!("pid-{rank}"));
            if let Some(pid) = fs::read_to_string(&path)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                break pid;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "rank {rank} wrote no pid file"
            );
            sleep(Duration::from_millis(20));
        })
        .collect()
}

/// Whether a process with this pid runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Asserts that every pid is gone within 5 s.
fn assert_gone(pids: &[u32]) {
    let started = Instant::now();
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "processes still alive: {:?}",
            pids.iter().filter(|&&pid| alive(pid)).collect::<Vec<_>>()
        );
        sleep(Duration::from_millis(20));
    }
}

fn job_summary(out: &Path) -> serde_json::Value {
    let text = fs::read_to_string(out.join("job.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn three_ranks_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let ended = run(
        dir.path(),
        &[
            "run",
            "-n",
            "3",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            r#"echo "rank=$STRADS_RANK of $STRADS_WORLD_SIZE at $STRADS_RENDEZVOUS""#,
        ],
    );
    assert_eq!(ended.code, Some(0), "stderr:\n{}", ended.stderr);
    assert!(
        ended
            .stderr
            .contains(&format!("3 ranks, logs in {}", out.display())),
        "{}",
        ended.stderr
    );

    let line = ended.stdout.trim();
    let rendezvous = line
        .strip_prefix("rank=0 of 3 at ")
        .unwrap_or_else(|| panic!("rank 0's line missing from stdout: {line:?}"));
    let port: u16 = rendezvous
        .strip_prefix("127.0.0.1:")
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("rendezvous {rendezvous:?}"));
    assert!(port > 0);
    for rank in [1, 2] {
        let log = fs::read_to_string(out.join(format!("rank-{rank}.log"))).unwrap();
        assert_eq!(log, format!("rank={rank} of 3 at {rendezvous}\n"));
    }

    let summary = job_summary(&out);
    assert_eq!(summary["status"], "ok");
    assert_eq!(summary["ranks"], 3);
    assert!(summary["failed_rank"].is_null());
    // Each rank's peak resident memory, from the kernel when the launcher reaped it: a
    // shell takes at least a few hundred KiB and far less than a GiB.
    let memory = summary["memory"].as_array().expect("a memory list");
    let ranks: Vec<u64> = memory.iter().map(|m| m["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, [0, 1, 2], "{memory:?}");
    for m in memory {
        let bytes = m["peak_rss_bytes"].as_u64().unwrap();
        assert!((100 << 10..1 << 30).contains(&bytes), "{m}");
    }

    let secret = out.join("secret");
    let mode = fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let secret = fs::read_to_string(&secret).unwrap();
    assert_eq!(secret.trim().len(), 64);
}

#[test]
fn ranks_get_the_whole_contract() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let ended = run(
        dir.path(),
        &[
            "run",
            "-n",
            "2",
            "--threads",
            "3",
            "--port",
            "40123",
            "--startup-timeout",
            "9",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            "env | grep '^STRADS_' | sort",
        ],
    );
    assert_eq!(ended.code, Some(0), "stderr:\n{}", ended.stderr);
    let log = fs::read_to_string(out.join("rank-1.log")).unwrap();
    let var = |name: &str| -> String {
        log.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} not set:\n{log}"))
            .to_string()
    };
    assert_eq!(var("STRADS_RANK"), "1");
    assert_eq!(var("STRADS_WORLD_SIZE"), "2");
    assert_eq!(var("STRADS_THREADS"), "3");
    assert_eq!(var("STRADS_RENDEZVOUS"), "127.0.0.1:40123");
    assert_eq!(var("STRADS_STARTUP_TIMEOUT"), "9");
    assert_eq!(var("STRADS_OUTPUT_DIR"), path_str(&out));
    let secret_file = var("STRADS_SECRET_FILE");
    assert_eq!(secret_file, path_str(&out.join("secret")));
    let secret = var("STRADS_SECRET");
    assert_eq!(fs::read_to_string(&secret_file).unwrap().trim(), secret);
    assert!(secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit()));
    let job = var("STRADS_JOB_ID");
    assert_eq!(job.len(), 12);
    assert_eq!(job_summary(&out)["job"], job.as_str());
    // Rank 0 got the same job, on the terminal.
    assert!(ended.stdout.contains("STRADS_RANK=0\n"), "{}", ended.stdout);
    assert!(ended.stdout.contains(&format!("STRADS_SECRET={secret}\n")));
}

/// A job that failed because a rank waited for one that had left (the runtime notes it in
/// `D/left-early`) is not restarted, even with restarts allowed: it would fail again.
/// Restarts still happen for other failures (counted by the runs' marker files).
#[test]
fn a_job_whose_rank_left_early_is_not_restarted() {
    for left in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("job");
        let ckpt = dir.path().join("ckpt");
        let note = if left {
            r#"echo "rank 0: rank 1 has finished the job" > "$D/left-early";"#
        } else {
            ""
        };
        let script = format!(
            r#"D=$STRADS_OUTPUT_DIR
if [ "$STRADS_RANK" = 0 ]; then mktemp "$D/run.XXXXXX" >/dev/null; {note} exit 1; fi
exit 0"#
        );
        let ended = run(
            dir.path(),
            &[
                "run",
                "-n",
                "2",
                "--output-dir",
                path_str(&out),
                "--checkpoint-dir",
                path_str(&ckpt),
                "--max-restarts",
                "2",
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        assert_eq!(ended.code, Some(1), "stderr:\n{}", ended.stderr);
        let runs = fs::read_dir(&out)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("run.")
            })
            .count();
        if left {
            assert_eq!(runs, 1, "{}", ended.stderr);
            assert!(ended.stderr.contains("not restarted"), "{}", ended.stderr);
        } else {
            assert_eq!(runs, 3, "{}", ended.stderr);
            assert!(!ended.stderr.contains("not restarted"), "{}", ended.stderr);
        }
    }
}

#[test]
fn a_failing_rank_stops_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let script = format!(
        r#"D=$STRADS_OUTPUT_DIR
if [ "$STRADS_RANK" = 1 ]; then
  while [ ! -e "$D/pid-0" ] || [ ! -e "$D/pid-2" ]; do sleep 0.05; done
  echo boom >&2; exit 3
fi
{RECORD_PID_AND_SLEEP}"#
    );
    let ended = run(
        dir.path(),
        &[
            "run",
            "-n",
            "3",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert_eq!(ended.code, Some(3), "stderr:\n{}", ended.stderr);
    assert!(
        ended.elapsed < Duration::from_secs(20),
        "{:?}",
        ended.elapsed
    );
    assert!(
        ended.stderr.contains("rank 1 failed (exit code 3)"),
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("stopped ranks 0, 2"),
        "{}",
        ended.stderr
    );
    assert!(ended.stderr.contains("  | boom\n"), "{}", ended.stderr);
    assert_gone(&recorded_pids(&out, &[0, 2]));

    let summary = job_summary(&out);
    assert_eq!(summary["status"], "failed");
    assert_eq!(summary["failed_rank"], 1);
    assert_eq!(summary["exit_code"], 3);
}

#[test]
fn a_rank_killed_by_a_signal_fails_the_job_with_128_plus_signal() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let script = format!(
        r#"D=$STRADS_OUTPUT_DIR
if [ "$STRADS_RANK" = 2 ]; then
  while [ ! -e "$D/pid-0" ] || [ ! -e "$D/pid-1" ]; do sleep 0.05; done
  kill -9 $$
fi
{RECORD_PID_AND_SLEEP}"#
    );
    let ended = run(
        dir.path(),
        &[
            "run",
            "-n",
            "3",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert_eq!(ended.code, Some(137), "stderr:\n{}", ended.stderr);
    assert!(
        ended
            .stderr
            .contains("rank 2 failed (killed by signal 9, SIGKILL)"),
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("rank-2.log is empty"),
        "{}",
        ended.stderr
    );
    assert_gone(&recorded_pids(&out, &[0, 1]));
    assert_eq!(job_summary(&out)["failed_rank"], 2);
}

/// A 2-rank job with output directory `out` whose ranks record their pids and sleep.
fn sleeping_job(dir: &Path, out: &Path) -> Launcher {
    let script = format!("D=$STRADS_OUTPUT_DIR; {RECORD_PID_AND_SLEEP}");
    Launcher::start(
        dir,
        &[
            "run",
            "-n",
            "2",
            "--output-dir",
            path_str(out),
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
}

#[test]
fn ranks_die_with_a_killed_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let mut launcher = sleeping_job(dir.path(), &out);
    let pids = recorded_pids(&out, &[0, 1]);
    assert!(pids.iter().all(|&pid| alive(pid)));
    launcher.child.kill().unwrap(); // SIGKILL: no chance to clean up
    launcher.child.wait().unwrap();
    assert_gone(&pids);
}

/// After a SIGKILL of the launcher, `job.json` says `running`; `strads-ap status` finds
/// the launcher gone, records the job as lost and exits with 1. While it runs, and after
/// a clean end, `status` reports what the file says.
#[test]
fn status_tells_the_truth_after_the_launcher_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let mut launcher = sleeping_job(dir.path(), &out);
    let pids = recorded_pids(&out, &[0, 1]);
    let status = |expect: i32| {
        let o = Command::new(LAUNCHER)
            .args(["status", path_str(&out)])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(expect), "{o:?}");
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    assert_eq!(status(0)["status"], "running");
    launcher.child.kill().unwrap();
    launcher.child.wait().unwrap();
    assert_gone(&pids);
    assert_eq!(job_summary(&out)["status"], "running", "the file is stale");
    let lost = status(1);
    assert_eq!(lost["status"], "lost");
    assert!(
        lost["reason"]
            .as_str()
            .unwrap()
            .contains("ended without recording"),
        "{lost}"
    );
    assert_eq!(job_summary(&out)["status"], "lost", "the file is made true");
    // A job that ended cleanly is reported as it is.
    let ok = dir.path().join("ok");
    let ended = run(
        dir.path(),
        &[
            "run",
            "-n",
            "1",
            "--output-dir",
            path_str(&ok),
            "--",
            "true",
        ],
    );
    assert_eq!(ended.code, Some(0), "{}", ended.stderr);
    let o = Command::new(LAUNCHER)
        .args(["status", path_str(&ok)])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"ok\""));
    // No job there.
    let o = Command::new(LAUNCHER)
        .args(["status", path_str(dir.path())])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("job.json"));
}

#[test]
fn sigterm_to_the_launcher_stops_the_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let script = format!("D=$STRADS_OUTPUT_DIR; {RECORD_PID_AND_SLEEP}");
    let launcher = Launcher::start(
        dir.path(),
        &[
            "run",
            "-n",
            "2",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let pids = recorded_pids(&out, &[0, 1]);
    let forking = forking();
    let status = Command::new("kill")
        .args(["-TERM", &launcher.child.id().to_string()])
        .status()
        .unwrap();
    drop(forking);
    assert!(status.success());
    let ended = launcher.wait();
    assert_eq!(ended.code, Some(128 + 15), "stderr:\n{}", ended.stderr);
    assert!(
        ended.stderr.contains("interrupted by SIGTERM (15)"),
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("stopped ranks 0, 1"),
        "{}",
        ended.stderr
    );
    assert_gone(&pids);
    assert_eq!(job_summary(&out)["status"], "failed");
}

#[test]
fn a_rank_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let script = r#"D=$STRADS_OUTPUT_DIR
if [ "$STRADS_RANK" = 1 ]; then
  while [ ! -e "$D/ready" ]; do sleep 0.05; done
  exit 4
fi
trap '' TERM
echo $$ > "$D/pid.tmp" && mv "$D/pid.tmp" "$D/pid-0" && touch "$D/ready"
while :; do sleep 0.1; done"#;
    let ended = run(
        dir.path(),
        &[
            "run",
            "-n",
            "2",
            "--grace",
            "0.5",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert_eq!(ended.code, Some(4), "stderr:\n{}", ended.stderr);
    assert!(ended.stderr.contains("stopped rank 0"), "{}", ended.stderr);
    assert_gone(&recorded_pids(&out, &[0]));
}

#[test]
fn bad_usage_exits_with_2_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let out = path_str(&out);
    let cases: [(&[&str], &str); 7] = [
        (&["run", "-n", "2"], "<PROGRAM>"),
        (&["run", "-n", "0", "--", "true"], "at least 1"),
        (
            &["run", "-n", "2", "--threads", "0", "--", "true"],
            "at least 1",
        ),
        (
            &["run", "-n", "2", "--hosts", "h", "--slurm", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "-n", "2", "--hosts", "/no/such/hosts", "--", "true"],
            "cannot read hosts file /no/such/hosts: ",
        ),
        (
            &[
                "run",
                "-n",
                "2",
                "--output-dir",
                out,
                "--",
                "/no/such/program",
            ],
            "cannot start rank 0: /no/such/program: No such file or directory",
        ),
        (
            &[
                "run",
                "-n",
                "2",
                "--output-dir",
                out,
                "--",
                "strads-ap-no-such-program",
            ],
            "cannot start rank 0: strads-ap-no-such-program: No such file or directory",
        ),
    ];
    for (args, expected) in cases {
        let ended = run(dir.path(), args);
        assert_eq!(ended.code, Some(2), "{args:?}: {}", ended.stderr);
        assert!(
            ended.stderr.contains(expected),
            "{args:?}: expected {expected:?} in:\n{}",
            ended.stderr
        );
    }
}

#[test]
fn rank_0_reads_the_launchers_stdin_when_it_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job");
    let input = dir.path().join("input");
    fs::write(&input, "hello\n").unwrap();
    let ended = Launcher::start_with(
        dir.path(),
        &[
            "run",
            "-n",
            "2",
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            r#"read x; echo "got $x""#,
        ],
        |command| {
            command.stdin(fs::File::open(&input).unwrap());
        },
    )
    .wait();
    assert_eq!(ended.code, Some(0), "stderr:\n{}", ended.stderr);
    assert_eq!(ended.stdout, "got hello\n");
    assert_eq!(
        fs::read_to_string(out.join("rank-1.log")).unwrap(),
        "got \n"
    );
}

#[test]
fn ssh_mode_through_a_stand_in_ssh() {
    // A stand-in for ssh that logs the host and runs the remote command here, in a clean
    // environment like a login shell's.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let ssh = bin.join("ssh");
    let forking = forking();
    fs::write(
        &ssh,
        "#!/bin/sh\n[ \"$1 $2\" = '-o BatchMode=yes' ] || exit 100\n\
         echo \"$3\" >> \"$SSH_LOG\"\nexec env -i PATH=\"$PATH\" sh -c \"$4\"\n",
    )
    .unwrap();
    fs::set_permissions(&ssh, fs::Permissions::from_mode(0o755)).unwrap();
    drop(forking);
    let hosts = dir.path().join("hosts");
    fs::write(&hosts, "# test\nnodeA slots=2\nme@nodeB\n").unwrap();
    let ssh_log = dir.path().join("ssh.log");
    let out = dir.path().join("job");
    let script = r#"printf '%s|' "$@"; echo; env | grep '^STRADS_' | sort"#;
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let ended = Launcher::start_with(
        dir.path(),
        &[
            "run",
            "-n",
            "3",
            "--hosts",
            path_str(&hosts),
            "--output-dir",
            path_str(&out),
            "--",
            "sh",
            "-c",
            script,
            "sh",
            "a b",
            "it's",
            "$HOME",
        ],
        |command| {
            command
                .env("PATH", path)
                .env("SSH_LOG", &ssh_log)
                .env("STRADS_SEED", "7");
        },
    )
    .wait();
    assert_eq!(ended.code, Some(0), "stderr:\n{}", ended.stderr);
    let mut logged: Vec<String> = fs::read_to_string(&ssh_log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    logged.sort();
    assert_eq!(logged, ["me@nodeB", "nodeA", "nodeA"]);
    let log = fs::read_to_string(out.join("rank-2.log")).unwrap();
    assert!(log.starts_with("a b|it's|$HOME|\n"), "{log}");
    for expected in [
        "STRADS_RANK=2\n",
        "STRADS_WORLD_SIZE=3\n",
        "STRADS_RENDEZVOUS=nodeA:29517\n",
        "STRADS_SEED=7\n",
        &format!("STRADS_SECRET_FILE={}\n", out.join("secret").display()),
        &format!("STRADS_OUTPUT_DIR={}\n", out.display()),
    ] {
        assert!(log.contains(expected), "{expected:?} missing from:\n{log}");
    }
    assert!(!log.contains("STRADS_SECRET="), "{log}");
    assert!(
        ended.stdout.starts_with("a b|it's|$HOME|\n"),
        "{}",
        ended.stdout
    );
}

#[test]
fn slurm_mode_needs_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let ended = Launcher::start_with(
        dir.path(),
        &["run", "-n", "2", "--slurm", "--", "true"],
        |c| {
            c.env_remove("SLURM_JOB_NODELIST");
        },
    )
    .wait();
    assert_eq!(ended.code, Some(2));
    assert!(
        ended.stderr.contains("SLURM_JOB_NODELIST is not set"),
        "{}",
        ended.stderr
    );
}

#[test]
fn help_documents_run() {
    let forking = forking();
    let output = Command::new(LAUNCHER)
        .args(["run", "--help"])
        .output()
        .unwrap();
    drop(forking);
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "STRADS_RANK",
        "STRADS_RENDEZVOUS",
        "--hosts",
        "--slurm",
        "--grace",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}
