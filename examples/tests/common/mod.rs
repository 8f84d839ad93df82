//! Helpers shared by the examples' integration tests: running a twin as a bounded child
//! process, reading its JSON result line, temporary files and the shared data sets.

// Each test crate uses a different subset.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What a child printed and how it ended.
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `binary` with `args`, killing it (and failing the test) after `timeout`.
pub fn run_raw(binary: &str, args: &[&str], timeout: Duration) -> Output {
    run_raw_env(binary, args, &[], timeout)
}

/// [`run_raw`] with `env` added to the child's environment.
pub fn run_raw_env(binary: &str, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let shown = format!("{binary} {}", args.join(" "));
    let mut child = Command::new(binary)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{shown} did not finish within {timeout:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        success: status.success(),
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    }
}

/// Runs a twin that must succeed; returns its JSON result line (the last non-empty line of
/// stdout) and its stderr (which is also echoed, for the test log).
pub fn run_json(binary: &str, args: &[&str], timeout: Duration) -> (Value, String) {
    run_json_env(binary, args, &[], timeout)
}

/// [`run_json`] with `env` added to the child's environment.
pub fn run_json_env(
    binary: &str,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> (Value, String) {
    let shown = format!("{binary} {}", args.join(" "));
    let out = run_raw_env(binary, args, env, timeout);
    assert!(out.success, "{shown} failed:\n{}", out.stderr);
    eprint!("{}", out.stderr);
    let line = out
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_else(|| panic!("{shown} printed no result line:\n{}", out.stderr));
    let value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{shown}: bad result line {line:?}: {e}"));
    (value, out.stderr)
}

/// Field `key` of a result line, as a number.
pub fn num(result: &Value, key: &str) -> f64 {
    result
        .get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("result line without a number `{key}`: {result}"))
}

/// A file written by [`temp_file`]: its path (it derefs to it), in a temporary directory
/// of its own that is removed, with whatever else was written there, when this drops.
pub struct TempFile {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for TempFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A fresh file `name` with `content`, in a fresh temporary directory named after `tag`.
pub fn temp_file(tag: &str, name: &str, content: &str) -> TempFile {
    let dir = tempfile::Builder::new()
        .prefix(&format!("strads-ap-examples-{tag}-"))
        .tempdir()
        .expect("create temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, content).expect("write temp file");
    TempFile { path, _dir: dir }
}

/// Whether the tests run in CI (`CI=true`, as `.ci/run` sets it): a test that cannot find
/// what it needs then fails instead of skipping, so CI never passes by skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The one rule for a missing input: under CI ([`in_ci`]) the test fails, saying what is
/// missing and how to provide it; elsewhere it is skipped with the same message on both
/// streams (so `cargo test` shows it).
pub fn missing(what: &str, how: &str) {
    if in_ci() {
        panic!("{what} is missing, and CI=true does not skip tests: {how}");
    }
    eprintln!("skipping: {what} is missing ({how})");
    println!("skipping: {what} is missing ({how})");
}

/// `../shared/data/<what>` if `present(path)` holds, or `None` after [`missing`] (which
/// fails the test under CI).
pub fn shared_data(what: &str, present: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(what);
    if present(&path) {
        return Some(path);
    }
    missing(
        &path.display().to_string(),
        "the shared data sets live in ../shared/data beside the checkout (see \
         ../shared/data/README.md)",
    );
    None
}

/// The launcher, built beside the examples by `cargo test --workspace` (found next to the
/// example binary `sibling`), or `None` after [`missing`] (which fails the test under CI).
pub fn launcher(sibling: &str) -> Option<PathBuf> {
    let path = PathBuf::from(sibling).with_file_name("strads-ap");
    if path.exists() {
        return Some(path);
    }
    missing(
        &format!("the launcher {}", path.display()),
        "run `cargo test --workspace`, or `cargo build -p strads-ap` first",
    );
    None
}

/// The launcher's arguments for `PROGRAM ARGS` as `ranks` processes of `threads` threads,
/// logs in `logs`, with `extra` launcher options.
pub fn launch_args(
    ranks: usize,
    threads: usize,
    logs: &Path,
    extra: &[&str],
    program: &str,
    args: &[&str],
) -> Vec<String> {
    let mut all: Vec<String> = vec!["run".into(), "-n".into(), ranks.to_string()];
    all.extend(["--threads".into(), threads.to_string()]);
    all.extend(["--output-dir".into(), logs.display().to_string()]);
    all.extend(extra.iter().map(|s| s.to_string()));
    all.push("--".into());
    all.push(program.into());
    all.extend(args.iter().map(|s| s.to_string()));
    all
}
