//! Starting the processes of a job, watching them, and stopping them all when one fails.
//!
//! Each process leads its own process group, so stopping a rank reaches the helpers it
//! started too; each gets `PR_SET_PDEATHSIG`, so none outlives a launcher that is killed.
//! Stopping is SIGTERM to every group, then SIGKILL after the grace period.

use crate::job::{Job, Output, Proc};
use crate::sys;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::{self, IsTerminal, Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often running processes are checked.
const POLL: Duration = Duration::from_millis(20);
/// How many lines of a failed rank's log are shown.
const TAIL_LINES: usize = 20;

/// Records in the returned cell the number of the last SIGINT, SIGTERM or SIGHUP the
/// launcher received (0: none yet), so the job can be stopped in good order.
pub fn watch_signals() -> io::Result<Arc<AtomicUsize>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let received = Arc::new(AtomicUsize::new(0));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register_usize(signal, Arc::clone(&received), signal as usize)?;
    }
    Ok(received)
}

/// A started process and, once it has ended, how.
struct Running {
    proc: Proc,
    child: Child,
    status: Option<ExitStatus>,
    /// When it ended, from the job's start.
    ended: Option<Duration>,
    /// Its peak resident memory in bytes, once it has ended.
    peak: Option<u64>,
}

impl Running {
    /// Reaps the process if it has ended (waiting for it with `block`), keeping how and
    /// its peak memory.
    fn reap(&mut self, block: bool) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            if let Some((status, peak)) = sys::reap(self.child.id(), block)? {
                self.status = Some(status);
                self.peak = Some(peak);
            }
        }
        Ok(self.status)
    }
}

/// Why watching stopped.
enum End {
    /// Every process exited with code 0.
    AllSucceeded,
    /// The process at this index failed so.
    Failed(usize, ExitStatus, Duration),
    /// The launcher received this signal.
    Interrupted(i32, Duration),
}

/// How a job ended.
pub struct Ended {
    /// The launcher's exit code.
    pub code: u8,
    /// A rank failed (the job could be restarted); not when interrupted or successful.
    pub rank_failed: bool,
    /// The first rank that had exited with code 0 while others still ran, before one
    /// failed, and a description: if the others lost it, the program ends on that rank
    /// early (it returns, or calls `exit`), and a restart would end the same way.
    pub left_early: Option<(usize, String)>,
}

/// Runs `procs` as the processes of `job` until all succeed, one fails, or the launcher
/// is told to stop through `signals`; returns how it ended. Errors are the launcher's own
/// (a process that cannot be started), after every started one is stopped.
pub fn supervise(
    job: &Job,
    procs: Vec<Proc>,
    grace: Duration,
    signals: &AtomicUsize,
) -> Result<Ended> {
    let started = Instant::now();
    write_summary_or_warn(job, "running", None, "", None, &[]);
    let mut running: Vec<Running> = Vec::with_capacity(procs.len());
    for proc in procs {
        if signals.load(Ordering::Relaxed) != 0 {
            break;
        }
        match start(&proc) {
            Ok(child) => running.push(Running {
                proc,
                child,
                status: None,
                ended: None,
                peak: None,
            }),
            Err(error) => {
                stop(&mut running, grace);
                let reason = format!("cannot start {}: {error:#}", proc.label);
                write_summary_or_warn(job, "failed", proc.rank, &reason, Some(2), &[]);
                bail!(reason);
            }
        }
    }

    let end = watch(&mut running, started, signals)?;
    let (failed, when, description, code) = match end {
        End::AllSucceeded => {
            let reason = match running.as_slice() {
                [only] if only.proc.rank.is_none() => {
                    format!("{} exited with code 0", only.proc.label)
                }
                _ => format!("all {} exited with code 0", plural(job.ranks, "rank")),
            };
            write_summary_or_warn(job, "ok", None, &reason, Some(0), &peaks(&running));
            return Ok(Ended {
                code: 0,
                rank_failed: false,
                left_early: None,
            });
        }
        End::Failed(index, status, when) => {
            let (description, code) = describe(status);
            (Some(index), when, description, code)
        }
        End::Interrupted(signal, when) => {
            let name = sys::signal_name(signal).unwrap_or("a signal");
            let code = u8::try_from(128 + signal).unwrap_or(u8::MAX);
            (None, when, format!("{name} ({signal})"), code)
        }
    };

    // The first rank that exited with code 0 before the failure, while others ran.
    let left_early = failed.and_then(|_| {
        running
            .iter()
            .filter(|r| r.status.is_some_and(|s| s.success()))
            .filter_map(|r| Some((r.ended?, r.proc.rank?, &r.proc.label)))
            .min_by_key(|(at, ..)| *at)
            .map(|(at, rank, label)| {
                let what = format!(
                    "{label} had exited with code 0 after {:.1} s while the other ranks still \
                     ran",
                    at.as_secs_f64()
                );
                (rank, what)
            })
    });
    let stopped = stop(&mut running, grace);
    let mut reason = match failed {
        Some(index) => {
            let proc = &running[index].proc;
            let mut reason = format!("{} failed ({description})", proc.label);
            if proc.program == "ssh" && code == 255 {
                reason.push_str(" [ssh exits with 255 when it cannot reach the host or log in]");
            }
            reason
        }
        None => format!("interrupted by {description}"),
    };
    reason.push_str(&format!(" after {:.1} s", when.as_secs_f64()));
    if let Some((_, early)) = &left_early {
        reason.push_str("; ");
        reason.push_str(early);
    }
    if running.len() > 1 {
        reason.push_str("; ");
        reason.push_str(&stopped_list(&running, &stopped));
    }
    eprintln!("strads-ap run: {reason}");
    if let Some(index) = failed {
        if let Output::Log(path) = &running[index].proc.output {
            show_tail(path);
        }
    }
    let failed_rank = failed.and_then(|index| running[index].proc.rank);
    write_summary_or_warn(
        job,
        "failed",
        failed_rank,
        &reason,
        Some(code),
        &peaks(&running),
    );
    Ok(Ended {
        code,
        rank_failed: failed.is_some(),
        left_early,
    })
}

/// Starts one process in its own process group, tied to the launcher's life.
fn start(proc: &Proc) -> Result<Child> {
    let mut command = Command::new(&proc.program);
    command.args(&proc.args);
    for name in &proc.env_remove {
        command.env_remove(name);
    }
    command.envs(proc.env.iter().map(|(name, value)| (name, value)));
    match &proc.output {
        Output::Terminal => {
            // The process leads a process group in the background of the terminal: reading
            // from the terminal would stop it (SIGTTIN), so it reads only a file or pipe.
            let stdin = if io::stdin().is_terminal() {
                Stdio::null()
            } else {
                Stdio::inherit()
            };
            command.stdin(stdin);
        }
        Output::Log(path) => {
            let log = File::create(path)
                .with_context(|| format!("cannot create log file {}", path.display()))?;
            let log_too = log
                .try_clone()
                .with_context(|| format!("cannot share log file {}", path.display()))?;
            command.stdin(Stdio::null()).stdout(log).stderr(log_too);
        }
    }
    command.process_group(0);
    sys::die_with_parent(&mut command);
    command
        .spawn()
        .map_err(|error| anyhow!("{}: {}", proc.program.to_string_lossy(), io_message(&error)))
}

/// Polls the processes until all have succeeded, one has failed (the first one seen), or
/// a signal has arrived.
fn watch(running: &mut [Running], started: Instant, signals: &AtomicUsize) -> Result<End> {
    loop {
        let signal = signals.load(Ordering::Relaxed);
        if signal != 0 {
            let signal = i32::try_from(signal).unwrap_or(i32::MAX);
            return Ok(End::Interrupted(signal, started.elapsed()));
        }
        let mut all_done = true;
        let mut failed = None;
        // Every process is looked at before a failure is returned, so that one that
        // exited 0 in the same poll is known (see `Ended::left_early`).
        for (index, process) in running.iter_mut().enumerate() {
            if process.status.is_some() {
                continue;
            }
            let status = process
                .reap(false)
                .with_context(|| format!("cannot watch {}", process.proc.label))?;
            match status {
                None => all_done = false,
                Some(status) => {
                    process.ended = Some(started.elapsed());
                    if !status.success() && failed.is_none() {
                        failed = Some(End::Failed(index, status, started.elapsed()));
                    }
                }
            }
        }
        if let Some(failed) = failed {
            return Ok(failed);
        }
        if all_done {
            return Ok(End::AllSucceeded);
        }
        std::thread::sleep(POLL);
    }
}

/// Stops every process: SIGTERM to each process group, SIGKILL to all once they have
/// exited or `grace` has passed, then reaps them. Returns the indices of those that were
/// still running.
///
/// Groups of processes that already exited are signalled too, for helpers they left.
/// Linux does not hand out a pid while a process group of that number has members, so
/// this reaches only the job's own leftovers.
fn stop(running: &mut [Running], grace: Duration) -> Vec<usize> {
    let stopped: Vec<usize> = (0..running.len())
        .filter(|&index| running[index].status.is_none())
        .collect();
    for process in running.iter() {
        sys::signal_group(process.child.id(), sys::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    loop {
        let mut all_done = true;
        for process in running.iter_mut().filter(|p| p.status.is_none()) {
            match process.reap(false) {
                Ok(Some(_)) => {}
                Ok(None) => all_done = false,
                // Cannot tell: SIGKILL and `wait` below settle it.
                Err(_) => all_done = false,
            }
        }
        if all_done || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL);
    }
    for process in running.iter_mut() {
        sys::signal_group(process.child.id(), sys::SIGKILL);
        let _ = process.reap(true);
    }
    stopped
}

/// `exit code 3` or `killed by signal 9, SIGKILL`, and the exit code the launcher passes
/// on: the process's own, or 128 + the signal number.
fn describe(status: ExitStatus) -> (String, u8) {
    if let Some(code) = status.code() {
        return (format!("exit code {code}"), u8::try_from(code).unwrap_or(1));
    }
    let Some(signal) = status.signal() else {
        return (format!("{status}"), 1);
    };
    let mut text = format!("killed by signal {signal}");
    if let Some(name) = sys::signal_name(signal) {
        text.push_str(&format!(", {name}"));
    }
    if status.core_dumped() {
        text.push_str(", core dumped");
    }
    (text, u8::try_from(128 + signal).unwrap_or(u8::MAX))
}

/// `stopped ranks 0, 1, 3`, `stopped rank 2`, or `no other rank was running`.
fn stopped_list(running: &[Running], stopped: &[usize]) -> String {
    let ranks: Vec<String> = stopped
        .iter()
        .map(|&index| match running[index].proc.rank {
            Some(rank) => rank.to_string(),
            None => running[index].proc.label.clone(),
        })
        .collect();
    match ranks.len() {
        0 => "no other rank was running".to_string(),
        1 => format!("stopped rank {}", ranks[0]),
        _ => format!("stopped ranks {}", ranks.join(", ")),
    }
}

/// Prints the last lines of a failed rank's log, framed.
fn show_tail(path: &Path) {
    match tail_lines(path, TAIL_LINES) {
        Ok(lines) if lines.is_empty() => {
            eprintln!("strads-ap run: its log {} is empty", path.display());
        }
        Ok(lines) => {
            eprintln!("strads-ap run: last lines of {}:", path.display());
            for line in lines {
                eprintln!("  | {line}");
            }
            eprintln!("strads-ap run: (end of {})", path.display());
        }
        Err(error) => {
            eprintln!(
                "strads-ap run: cannot read its log {}: {}",
                path.display(),
                io_message(&error)
            );
        }
    }
}

/// The last `max` lines of the file at `path` (reading at most its last 64 KiB).
fn tail_lines(path: &Path, max: usize) -> io::Result<Vec<String>> {
    const WINDOW: u64 = 64 * 1024;
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let from = len.saturating_sub(WINDOW);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if from > 0 && !lines.is_empty() {
        // The window most likely starts inside a line.
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(max);
    Ok(lines[skip..].iter().map(|line| line.to_string()).collect())
}

/// Each rank's peak resident memory, for `job.json`: ranks the launcher runs itself that
/// have ended. Not through `ssh`, whose own memory says nothing of the rank's (nor the
/// `srun` that runs them all, which is no rank).
fn peaks(running: &[Running]) -> Vec<serde_json::Value> {
    running
        .iter()
        .filter(|r| r.proc.program != "ssh")
        .filter_map(|r| {
            Some(serde_json::json!({
                "rank": r.proc.rank?,
                "peak_rss_bytes": r.peak?,
            }))
        })
        .collect()
}

/// Writes `job.json` in the output directory: the job, its status (`running`, `ok`,
/// `failed`), the failed rank, why, the launcher's exit code, and each rank's peak
/// resident memory (`memory`, once the ranks have ended).
fn write_summary(
    job: &Job,
    status: &str,
    failed_rank: Option<usize>,
    reason: &str,
    exit_code: Option<u8>,
    memory: &[serde_json::Value],
) -> io::Result<()> {
    let summary = serde_json::json!({
        "job": job.id,
        "ranks": job.ranks,
        "status": status,
        "failed_rank": failed_rank,
        "reason": reason,
        "exit_code": exit_code,
        // While `running`: whose death leaves the file stale (`strads-ap status` checks).
        "launcher_pid": std::process::id(),
        "memory": memory,
    });
    let path = job.summary_file();
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, format!("{summary:#}\n"))?;
    std::fs::rename(&partial, &path)
}

fn write_summary_or_warn(
    job: &Job,
    status: &str,
    failed_rank: Option<usize>,
    reason: &str,
    exit_code: Option<u8>,
    memory: &[serde_json::Value],
) {
    if let Err(error) = write_summary(job, status, failed_rank, reason, exit_code, memory) {
        eprintln!(
            "strads-ap run: cannot write {}: {}",
            job.summary_file().display(),
            io_message(&error)
        );
    }
}

/// An I/O error as a person reads it: `No such file or directory`, without the
/// `(os error 2)` the standard library adds.
pub fn io_message(error: &io::Error) -> String {
    let text = error.to_string();
    match error.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map(str::to_string)
            .unwrap_or(text),
        None => text,
    }
}

/// `1 rank`, `3 ranks`.
pub fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut file = File::create(&path).unwrap();
        for i in 0..100 {
            writeln!(file, "line {i}").unwrap();
        }
        let tail = tail_lines(&path, 3).unwrap();
        assert_eq!(tail, ["line 97", "line 98", "line 99"]);
        std::fs::write(&path, "only\n").unwrap();
        assert_eq!(tail_lines(&path, 20).unwrap(), ["only"]);
        std::fs::write(&path, "").unwrap();
        assert!(tail_lines(&path, 20).unwrap().is_empty());
    }

    #[test]
    fn tail_of_a_big_file_reads_only_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut file = File::create(&path).unwrap();
        for i in 0..20_000 {
            writeln!(file, "a fairly long line of log output, number {i}").unwrap();
        }
        let tail = tail_lines(&path, 2).unwrap();
        assert_eq!(
            tail,
            [
                "a fairly long line of log output, number 19998",
                "a fairly long line of log output, number 19999"
            ]
        );
    }

    #[test]
    fn exit_statuses_are_described_with_their_code() {
        let exited = ExitStatus::from_raw(3 << 8);
        assert_eq!(describe(exited), ("exit code 3".to_string(), 3));
        let killed = ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(
            describe(killed),
            ("killed by signal 9, SIGKILL".to_string(), 137)
        );
    }

    #[test]
    fn io_messages_drop_the_os_error_number() {
        let error = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(io_message(&error), "No such file or directory");
        let custom = io::Error::other("odd");
        assert_eq!(io_message(&custom), "odd");
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "rank"), "1 rank");
        assert_eq!(plural(3, "rank"), "3 ranks");
    }
}
