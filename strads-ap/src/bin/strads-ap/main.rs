//! `strads-ap run`: start the processes of a strads-ap job and watch them.
//!
//! ```text
//! strads-ap run -n N [--threads T] [--hosts FILE | --slurm] [--output-dir D] [--port P]
//!               [--startup-timeout SECS] [--grace SECS]
//!               [--checkpoint-dir C [--checkpoint-every N] [--checkpoint-keep K]
//!                [--checkpoint-sync SECS] [--max-restarts R] | --resume C]
//!               -- PROGRAM ARGS...
//! ```
//!
//! Every process runs the same `PROGRAM ARGS`; the launcher tells each one its place in
//! the job through environment variables, so any other cluster manager can start a job
//! too by setting them:
//!
//! | variable | value |
//! |---|---|
//! | `STRADS_RANK` | `0..N`; rank 0 is the driver (not set under Slurm: `SLURM_PROCID`) |
//! | `STRADS_WORLD_SIZE` | `N` |
//! | `STRADS_THREADS` | worker threads per rank, only with `--threads` |
//! | `STRADS_RENDEZVOUS` | `host:port` where rank 0 listens |
//! | `STRADS_SECRET` | the job's secret, 64 hex digits (local and Slurm modes) |
//! | `STRADS_SECRET_FILE` | `D/secret`, the same secret in a file of mode 0600 |
//! | `STRADS_JOB_ID` | a random 12-hex-digit id |
//! | `STRADS_OUTPUT_DIR` | `D`, absolute |
//! | `STRADS_STARTUP_TIMEOUT` | seconds to wait for all ranks, only with `--startup-timeout` |
//! | `STRADS_BIND` | the IP address every rank listens on, only with `--bind` |
//! | `STRADS_CHECKPOINT_DIR` | `C`, absolute, with `--checkpoint-dir` or `--resume` |
//! | `STRADS_CHECKPOINT_EVERY`, `STRADS_CHECKPOINT_KEEP`, `STRADS_CHECKPOINT_SYNC` | with the options of those names |
//! | `STRADS_RECOVER` | `1` when the ranks resume from the checkpoints |
//!
//! Rank 0's output goes to the terminal, rank r's to `D/rank-r.log`. Rank 0 reads the
//! launcher's stdin when it is a file or a pipe (each rank leads its own process group, so
//! it cannot read a terminal); the others read nothing. When a rank fails,
//! the others are stopped (SIGTERM, then SIGKILL after `--grace` seconds), the launcher
//! shows the end of the failed rank's log and exits with its code (128 + the signal
//! number for a rank killed by a signal). `D/job.json` records the outcome and each local
//! rank's peak resident memory, and
//! `strads-ap status D` reports it, recording a job whose launcher was killed as `lost`
//! ([`status`]). Usage errors and a program that cannot be started exit with 2.
//!
//! With `--checkpoint-dir C` the ranks checkpoint after their loop operators, and with
//! `--max-restarts R` a job whose rank failed is started again, up to R times, in
//! recovery mode (not when a rank had left early, or exited 0 mid-job and the others
//! lost it: that would happen again): the program replays from the top, skipping the loop calls the newest
//! valid checkpoint covers. `--resume C` starts in recovery mode from the checkpoints in
//! C (after the launcher itself died, for example), with any number of ranks: a job that
//! lost a machine for good resumes on fewer, its tables repartitioned as they load.
//!
//! The pieces: [`job`] decides the processes and their variables (local, [`ssh`],
//! [`slurm`]); [`supervise`] starts, watches and stops them; [`sys`] holds the system
//! calls.

mod check;
mod env;
mod hosts;
mod job;
mod slurm;
mod ssh;
mod status;
mod supervise;
mod sys;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use job::{Job, Placement};
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The rendezvous port in ssh and Slurm modes when `--port` is not given.
const DEFAULT_PORT: u16 = 29517;

/// The exit code of usage errors and of jobs that could not be started.
const USAGE_ERROR: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "strads-ap",
    version,
    about = "Launcher of strads-ap jobs",
    long_about = "Launcher of strads-ap jobs: runs one program as the N processes (ranks) of a \
                  job, on this machine, over ssh, or under Slurm."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run PROGRAM as the N ranks of a job and watch them.
    #[command(long_about = RUN_ABOUT)]
    Run(Box<RunArgs>),
    /// Be one rank of a job that checks the cluster: `strads-ap run -n N -- strads-ap check`.
    #[command(long_about = CHECK_ABOUT)]
    Check(check::CheckArgs),
    /// How a job ended (or that it runs), from its job.json, checked against its launcher.
    #[command(long_about = status::ABOUT)]
    Status(status::StatusArgs),
}

const CHECK_ABOUT: &str = "\
Be one rank of a job that checks the cluster works: run it under the launcher, as in \
`strads-ap run -n 4 --hosts hosts.txt -- strads-ap check`. Every rank joins (proving it \
holds the job's secret), then the ranks run collectives and time a barrier and a bulk \
broadcast. Rank 0 prints one JSON line with the figures.";

const RUN_ABOUT: &str = "\
Run PROGRAM ARGS as the N ranks of a job and watch them.

Each rank learns its place from environment variables: STRADS_RANK (0..N, not set under \
Slurm), STRADS_WORLD_SIZE, STRADS_THREADS (with --threads), STRADS_RENDEZVOUS (host:port \
of rank 0), STRADS_SECRET (local and Slurm modes) and STRADS_SECRET_FILE (D/secret, mode \
0600), STRADS_JOB_ID, STRADS_OUTPUT_DIR (D), STRADS_STARTUP_TIMEOUT (with \
--startup-timeout) and STRADS_BIND (with --bind).

Rank 0 writes to the terminal; rank r to D/rank-r.log. If a rank fails, the others are \
stopped, the end of its log is shown, and strads-ap exits with the rank's exit code \
(128 + signal number if it was killed). D/job.json records the outcome.

Modes: by default all ranks run on this machine. With --hosts FILE (one `HOST` or \
`HOST slots=K` per line) rank r runs through `ssh HOST`, in the same directory; the output \
directory must be on a file system all hosts share. With --slurm, inside an allocation, \
one `srun` starts the ranks.";

#[derive(Args, Debug)]
struct RunArgs {
    /// Number of ranks (processes).
    #[arg(short = 'n', value_name = "N", value_parser = at_least_one)]
    ranks: usize,

    /// Worker threads per rank [default: all cores].
    #[arg(long, value_name = "T", value_parser = at_least_one)]
    threads: Option<usize>,

    /// Run the ranks over ssh on the hosts listed in FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "slurm")]
    hosts: Option<PathBuf>,

    /// Run the ranks with srun inside the current Slurm allocation.
    #[arg(long)]
    slurm: bool,

    /// Directory for logs, the secret and job.json [default: ./strads-ap-logs/JOB-ID].
    #[arg(long, value_name = "D")]
    output_dir: Option<PathBuf>,

    /// Port rank 0 listens on [default: a free port locally, 29517 with --hosts/--slurm].
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,

    /// IP address every rank listens on [default: the local address that routes to the
    /// rendezvous, loopback for local jobs]; `0.0.0.0` listens on every interface.
    #[arg(long, value_name = "IP")]
    bind: Option<std::net::IpAddr>,

    /// Seconds the ranks wait for each other at startup [program's default: 60].
    #[arg(long, value_name = "SECS")]
    startup_timeout: Option<u64>,

    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = seconds)]
    grace: Duration,

    /// Checkpoint after loop operators into this directory (on a file system every host
    /// sees, or local disks for local jobs).
    #[arg(long, value_name = "C", conflicts_with = "resume")]
    checkpoint_dir: Option<PathBuf>,

    /// Checkpoint after every N-th loop call [program's default: 1].
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    checkpoint_every: Option<usize>,

    /// Committed checkpoints to keep [program's default: 2].
    #[arg(long, value_name = "K", value_parser = at_least_one)]
    checkpoint_keep: Option<usize>,

    /// Force checkpoints to disk at most every SECS seconds; 0: every checkpoint
    /// [program's default: 10]. Unsynced checkpoints survive a rank's death, not a power
    /// loss.
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    checkpoint_sync: Option<Duration>,

    /// Restart a job whose rank failed up to R times, resuming from its checkpoints.
    #[arg(long, value_name = "R", default_value_t = 0)]
    max_restarts: usize,

    /// Resume a job from the checkpoints in C (recovery mode from the first start), with
    /// `-n` ranks whatever number made them.
    #[arg(long, value_name = "C")]
    resume: Option<PathBuf>,

    /// The program each rank runs, and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "must be a whole number of at least 1, not {text:?}"
        )),
    }
}

fn seconds(text: &str) -> std::result::Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("must be a number of seconds (0 or more), not {text:?}"))
}

fn main() -> ExitCode {
    let args = match Cli::parse().command {
        Command::Run(args) => *args,
        Command::Check(args) => return check::main(args),
        Command::Status(args) => return status::main(args),
    };
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("strads-ap run: {error:#}");
            ExitCode::from(USAGE_ERROR)
        }
    }
}

/// Turns the arguments into a job, starts it and returns the exit code.
fn run(args: RunArgs) -> Result<u8> {
    let Some((program, program_args)) = args.command.split_first() else {
        bail!("no PROGRAM given (put it after `--`)");
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let id = job::random_hex(6);

    // Everything that can be wrong with the arguments is checked before anything is
    // created.
    let (placement, rendezvous_host) = if let Some(file) = &args.hosts {
        let hosts = hosts::read(file)?;
        let assigned: Vec<String> = hosts::assign(&hosts, args.ranks)
            .into_iter()
            .map(str::to_string)
            .collect();
        let first = hosts::dial_name(&assigned[0]);
        let forward = strads_ap::cluster::env::SETTINGS
            .into_iter()
            .filter_map(|name| std::env::var_os(name).map(|value| (name, value)))
            .collect();
        let placement = Placement::Ssh {
            hosts: assigned,
            cwd: cwd.clone(),
            forward,
        };
        (placement, Some(first))
    } else if args.slurm {
        let Some(list) = std::env::var_os(slurm::NODELIST) else {
            bail!(
                "--slurm runs inside a Slurm allocation (salloc, sbatch), but {} is not set",
                slurm::NODELIST
            );
        };
        let first = slurm::first_node(&list.to_string_lossy())?;
        (Placement::Slurm, Some(first))
    } else {
        (Placement::Local, None)
    };
    let rendezvous = match rendezvous_host {
        Some(host) => format!("{host}:{}", args.port.unwrap_or(DEFAULT_PORT)),
        None => {
            let port = match args.port {
                Some(port) => port,
                None => free_udp_port()?,
            };
            format!("127.0.0.1:{port}")
        }
    };

    let output_dir = match &args.output_dir {
        Some(dir) => std::path::absolute(dir)
            .with_context(|| format!("cannot resolve output directory {}", dir.display()))?,
        None => cwd.join("strads-ap-logs").join(&id),
    };
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("cannot create output directory {}", output_dir.display()))?;
    let checkpoint = match args.resume.as_ref().or(args.checkpoint_dir.as_ref()) {
        Some(dir) => {
            let dir = std::path::absolute(dir).with_context(|| {
                format!("cannot resolve checkpoint directory {}", dir.display())
            })?;
            if args.resume.is_some() && !dir.is_dir() {
                bail!("--resume {}: no such directory", dir.display());
            }
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create checkpoint directory {}", dir.display()))?;
            Some(job::Checkpointing {
                dir,
                every: args.checkpoint_every.map(|n| n as u64),
                keep: args.checkpoint_keep,
                sync: args.checkpoint_sync,
            })
        }
        None => {
            if args.checkpoint_every.is_some()
                || args.checkpoint_keep.is_some()
                || args.checkpoint_sync.is_some()
            {
                bail!(
                    "--checkpoint-every, --checkpoint-keep and --checkpoint-sync need \
                     --checkpoint-dir"
                );
            }
            if args.max_restarts > 0 {
                bail!("--max-restarts needs --checkpoint-dir (a restart resumes from checkpoints)");
            }
            None
        }
    };
    let mut job = Job {
        id,
        ranks: args.ranks,
        threads: args.threads,
        rendezvous,
        secret: job::random_hex(32),
        output_dir,
        startup_timeout: args.startup_timeout,
        placement,
        checkpoint,
        recover: args.resume.is_some(),
        bind: args.bind,
    };
    write_secret(&job.secret_file(), &job.secret)?;
    let signals = supervise::watch_signals().context("cannot watch for signals")?;

    let ranks = supervise::plural(job.ranks, "rank");
    let dir = job.output_dir.display();
    match &job.placement {
        Placement::Local => {
            eprintln!("strads-ap run: job {}, {ranks}, logs in {dir}", job.id)
        }
        Placement::Ssh { .. } => eprintln!(
            "strads-ap run: job {}, {ranks} over ssh, rendezvous {}, logs in {dir}",
            job.id, job.rendezvous
        ),
        Placement::Slurm => eprintln!(
            "strads-ap run: job {}, {ranks} under srun, rendezvous {}, job files in {dir}",
            job.id, job.rendezvous
        ),
    }
    if let Some(c) = &job.checkpoint {
        eprintln!(
            "strads-ap run: checkpoints in {}{}",
            c.dir.display(),
            if job.recover {
                ", resuming from them"
            } else {
                ""
            }
        );
    }
    let mut restarts = 0;
    let left_early = job.output_dir.join(env::LEFT_EARLY_FILE);
    let lost_file = job.output_dir.join(env::LOST_FILE);
    loop {
        let _ = std::fs::remove_file(&left_early);
        let _ = std::fs::remove_file(&lost_file);
        let processes = job.processes(program, program_args);
        let ended = supervise::supervise(&job, processes, args.grace, &signals)?;
        if ended.code == 0 || !ended.rank_failed {
            return Ok(ended.code);
        }
        // A rank exited 0 and the others lost it: the program ended on that rank mid-job
        // (a return or `exit` taken on one rank only), which a restart would repeat.
        let lost: Vec<usize> = std::fs::read_to_string(&lost_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if let Some((rank, early)) = &ended.left_early {
            if lost.contains(rank) {
                eprintln!(
                    "strads-ap run: {early}, and the others lost it: the program ended on that \
                     rank only, mid-job (a return or `exit` taken on one rank); not \
                     restarted: a restart would end the same way"
                );
                return Ok(ended.code);
            }
        }
        // A rank waited for one that had left the job: the program's ranks do not run
        // the same operators, and a restart would fail the same way.
        if let Ok(note) = std::fs::read_to_string(&left_early) {
            eprintln!(
                "strads-ap run: a rank left the job while others still needed it ({}); not \
                 restarted: a restart would end the same way",
                note.trim()
            );
            return Ok(ended.code);
        }
        if restarts >= args.max_restarts {
            return Ok(ended.code);
        }
        restarts += 1;
        job.recover = true;
        if matches!(job.placement, Placement::Local) && args.port.is_none() {
            // The old port may linger for a moment; take a fresh one.
            job.rendezvous = format!("127.0.0.1:{}", free_udp_port()?);
        }
        eprintln!(
            "strads-ap run: restarting the job in recovery mode (restart {restarts} of {})",
            args.max_restarts
        );
    }
}

/// A UDP port on loopback that is free now (it could be taken again before rank 0 binds
/// it; `--port` avoids the race).
fn free_udp_port() -> Result<u16> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")
        .context("cannot find a free UDP port on 127.0.0.1")?;
    Ok(socket
        .local_addr()
        .context("cannot find a free UDP port on 127.0.0.1")?
        .port())
}

/// Writes the secret to a new file only its owner can read.
fn write_secret(path: &Path, secret: &str) -> Result<()> {
    let context = || format!("cannot write the secret file {}", path.display());
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(error).with_context(context)
        }
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(context)?;
    writeln!(file, "{secret}").with_context(context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_arguments_parse() {
        let cli = Cli::try_parse_from([
            "strads-ap",
            "run",
            "-n",
            "3",
            "--threads",
            "2",
            "--grace",
            "0.5",
            "--",
            "prog",
            "-n",
            "9",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("parsed as another command");
        };
        assert_eq!(args.ranks, 3);
        assert_eq!(args.threads, Some(2));
        assert_eq!(args.grace, Duration::from_millis(500));
        assert_eq!(args.command, ["prog", "-n", "9"]);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let refused = [
            &["strads-ap", "run", "-n", "0", "--", "p"][..],
            &["strads-ap", "run", "-n", "2"],
            &["strads-ap", "run", "-n", "2", "--threads", "0", "--", "p"],
            &[
                "strads-ap",
                "run",
                "-n",
                "2",
                "--hosts",
                "h",
                "--slurm",
                "--",
                "p",
            ],
            &["strads-ap", "run", "-n", "2", "--grace", "-1", "--", "p"],
            &["strads-ap", "run", "-n", "2", "--port", "0", "--", "p"],
        ];
        for argv in refused {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }
}
