//! `strads-ap status D`: what `D/job.json` says of a job, made true first.
//!
//! The launcher writes `job.json` when the job starts (`running`) and when it ends (`ok`,
//! `failed`). A launcher killed with SIGKILL (or whose machine went down) cannot write the
//! end, and its ranks die with it: the file would say `running` forever. `status` checks
//! that the launcher named in the file still runs; if it does not, it records the job as
//! `lost` in the file and says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

pub const ABOUT: &str = "\
Print how the job whose output directory is D ended, or that it still runs, from D/job.json \
(one JSON line on stdout). A job whose file says `running` but whose launcher no longer \
runs (killed with SIGKILL, or its machine went down; the ranks die with it) is recorded as \
`lost` in D/job.json first. Exit code: 0 for a job that succeeded or still runs, 1 for one \
that failed or was lost, 2 when D holds no readable job.json.";

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The job's output directory (`--output-dir` of `strads-ap run`).
    #[arg(value_name = "D")]
    dir: PathBuf,
}

pub fn main(args: StatusArgs) -> ExitCode {
    match status(&args.dir) {
        Ok(summary) => {
            println!("{summary}");
            let ok = matches!(summary["status"].as_str(), Some("ok" | "running"));
            ExitCode::from(if ok { 0 } else { 1 })
        }
        Err(error) => {
            eprintln!("strads-ap status: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// The job's summary, with a `running` job whose launcher is gone recorded as `lost`.
fn status(dir: &Path) -> Result<Value> {
    let path = dir.join("job.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut summary: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a job summary", path.display()))?;
    if !summary.is_object() || summary["status"].as_str().is_none() {
        bail!("{} is not a job summary (no status)", path.display());
    }
    if summary["status"] != "running" {
        return Ok(summary);
    }
    let Some(pid) = summary["launcher_pid"].as_u64() else {
        return Ok(summary);
    };
    if launcher_runs(pid) {
        return Ok(summary);
    }
    summary["status"] = "lost".into();
    summary["reason"] = format!(
        "the launcher (pid {pid}) ended without recording how the job ended (killed with \
         SIGKILL, or its machine went down); its ranks die with it. Resume from the job's \
         checkpoints, if it made any, with `strads-ap run --resume C`"
    )
    .into();
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, format!("{summary:#}\n"))
        .and_then(|()| std::fs::rename(&partial, &path))
        .with_context(|| format!("cannot record the lost job in {}", path.display()))?;
    Ok(summary)
}

/// Whether process `pid` runs and is a strads-ap launcher (a pid handed to another program
/// since does not count). Checked on this machine: run `status` where the launcher ran.
fn launcher_runs(pid: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
    if matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X')) {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| {
            let program = cmdline.split(|&b| b == 0).next().unwrap_or_default();
            Path::new(std::str::from_utf8(program).unwrap_or_default())
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("strads-ap"))
        })
        .unwrap_or(false)
}
