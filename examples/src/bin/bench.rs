//! Bench runner: runs an example's serial twin and strads-ap twin alternately and
//! summarises their speed and statistical progress.
//!
//! ```text
//! cargo build --release -p strads-ap-examples
//! target/release/bench --app sgdmf --reps 3 --threads 2 -- --epochs 5
//! # the strads-ap twin as 2 processes of 1 thread (needs the launcher built too):
//! cargo build --release -p strads-ap
//! target/release/bench --app sgdmf --reps 3 --ranks 2 --threads 1 -- --epochs 5
//! ```
//!
//! The twins are found next to this executable. Every run's JSON result line is printed
//! as it comes, then one summary line:
//!
//! * SGDMF: `{"bench":"sgdmf","reps":R,"ranks":N,"threads":T,"serial_secs_per_epoch":..,
//!   "strads_secs_per_epoch":..,"speedup":..,"setup_vs_serial_epoch":..,"rmse_ratio":..}`
//! * MLR: the same with `"loss_ratio"` (strads-ap / serial train loss) and
//!   `"accuracy_diff"` (strads-ap − serial test accuracy) instead of `"rmse_ratio"`.
//! * LDA: the same with `"loglik_ratio"` (strads-ap / serial log-likelihood per token; both
//!   are negative, so below 1 means strads-ap's is higher) instead of `"rmse_ratio"`.
//!
//! * TransE: the same with `"mrr_ratio"` (strads-ap / serial filtered MRR) and
//!   `"hits10_diff"` (strads-ap − serial filtered Hits@10) instead of `"rmse_ratio"`.
//! * Word2vec: the same with `"rho_diff"` (strads-ap − serial WordSim Spearman ρ),
//!   `"analogy_diff"` (strads-ap − serial analogy accuracy) and `"serial_words_per_sec"`,
//!   `"strads_words_per_sec"` instead of `"rmse_ratio"`.
//! * Lasso: the same with `"objective_ratio"` (strads-ap / serial final objective) and
//!   `"updates_ratio"` (strads-ap / serial coordinate updates to the gap target); a
//!   solve to the target counts as one epoch.
//! * Zoo programs (`--app zoo --program NAME`, see `examples/zoo/README.md`): the same with
//!   `"program"`, `"metric"` (the program's metric) and `"metric_ratio"` (strads-ap /
//!   serial) instead of `"rmse_ratio"`.
//!
//! Every figure is a median over the repetitions; ratios are of medians.
//! `setup_vs_serial_epoch` is the strads-ap twin's one-off set-up (its `setup_secs`:
//! reconnaissance and planning, and a recorded first call's time beyond a steady epoch;
//! see `strads_ap_examples::report::EpochClock`) over the serial twin's epoch.
//!
//! With `--checkpoint` the runner measures checkpointing instead: it runs the strads-ap
//! twin alternately without checkpoints and with a checkpoint after every loop call (in a
//! fresh temporary directory each run, removed afterwards), and prints
//! `{"bench":"checkpoint","app":..,"reps":R,"ranks":N,"threads":T,"plain_secs_per_epoch":..,
//! "checkpointed_secs_per_epoch":..,"overhead":..}` (`overhead`: the checkpointed median
//! over the plain one, minus 1):
//!
//! ```text
//! target/release/bench --app sgdmf --checkpoint --reps 10 --threads 2 -- --epochs 20
//! ```
//!
//! With `--ceiling` the runner measures what the machine itself allows: it runs the serial
//! twin alone, then `--threads` copies of it at once (default 2), alternately, and prints `{"bench":"ceiling","app":..,"reps":R,"copies":N,
//! "alone_secs_per_epoch":..,"concurrent_secs_per_epoch":..,"ceiling":..}`, where
//! `ceiling` = N × alone / concurrent is the aggregate throughput of N cores on this
//! workload (N if the cores do not slow each other down). A parallel program that splits
//! the serial work perfectly but whose threads touch memory as the serial loop does cannot
//! beat it; one whose threads keep to their own part of the model (rotation) can, as its
//! working set per core is smaller than a copy's:
//!
//! ```text
//! target/release/bench --app transe --ceiling --reps 3 -- --epochs 5
//! ```
//!
//! With `--peer COMMAND` the runner compares the strads-ap twin with a peer (see
//! `examples/peers/`) instead of the serial twin: `COMMAND`, split at whitespace, runs the
//! peer, which prints the examples' JSON line; the arguments after `--` go to the twin
//! only, so give both the same data and epochs. The summary is `{"bench":"peer","app":..,
//! "peer":<the peer's "impl">,"reps":R,"threads":T,"peer_secs_per_epoch":..,
//! "strads_secs_per_epoch":..,"speedup":..}` plus `peer_M` and `strads_M` for every metric
//! `M` both lines carry (throughput and quality: `words_per_sec`, `wordsim_rho`,
//! `tokens_per_sec`, `loglik_per_token`, `test_rmse`, `test_accuracy`, ...):
//!
//! ```text
//! target/release/bench --app word2vec --reps 3 --threads 2 \
//!     --peer "python3 examples/peers/peers.py word2vec --data ../shared/data/brown/sentences.txt --workers 2 --epochs 3" \
//!     -- --data ../shared/data/brown/sentences.txt --epochs 3
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use serde_json::Value;
use strads_ap_examples::report::{median, print_json_line};

/// Which example to bench.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum App {
    /// SGD matrix factorisation (`sgdmf-serial` vs `sgdmf`).
    Sgdmf,
    /// Multinomial logistic regression (`mlr-serial` vs `mlr`).
    Mlr,
    /// LDA topic modelling by collapsed Gibbs sampling (`lda-serial` vs `lda`).
    Lda,
    /// TransE knowledge-graph embeddings (`transe-serial` vs `transe`).
    Transe,
    /// Word2vec skip-gram with negative sampling (`word2vec-serial` vs `word2vec`).
    Word2vec,
    /// Lasso by coordinate descent to a duality gap (`lasso-serial` vs `lasso`): the
    /// whole solve counts as one epoch.
    Lasso,
    /// A program of the conversion zoo (`zoo PROGRAM --serial` vs `zoo PROGRAM`; needs
    /// `--program`).
    Zoo,
}

impl App {
    fn name(self) -> &'static str {
        match self {
            App::Sgdmf => "sgdmf",
            App::Mlr => "mlr",
            App::Lda => "lda",
            App::Transe => "transe",
            App::Word2vec => "word2vec",
            App::Lasso => "lasso",
            App::Zoo => "zoo",
        }
    }
}

/// Runs an example's serial and strads-ap twins alternately and summarises them.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The example.
    #[arg(long, value_enum)]
    app: App,

    /// The zoo program, with `--app zoo` (`target/release/zoo --list` lists them).
    #[arg(long, required_if_eq("app", "zoo"))]
    program: Option<String>,

    /// Runs of each twin.
    #[arg(long, default_value_t = 3)]
    reps: usize,

    /// Worker threads of the strads-ap twin (passed as `--threads` to both twins; the
    /// serial twin ignores it) [default: the twins' default, all cores].
    #[arg(long)]
    threads: Option<usize>,

    /// Processes of the strads-ap twin: above 1 it runs under the launcher (`strads-ap
    /// run -n RANKS`, found next to this executable) over QUIC on 127.0.0.1, each process
    /// with `--threads` threads.
    #[arg(long, default_value_t = 1)]
    ranks: usize,

    /// Measure checkpointing: the strads-ap twin without and with a checkpoint after every
    /// loop call, alternately (the serial twin does not run).
    #[arg(long)]
    checkpoint: bool,

    /// Measure the machine's ceiling for the app: the serial twin alone, then `--threads`
    /// copies of it at once (default 2), alternately (the strads-ap twin does not run).
    #[arg(long, conflicts_with_all = ["checkpoint", "ranks"])]
    ceiling: bool,

    /// Compare the strads-ap twin with a peer instead of the serial twin: the peer's
    /// command line (split at whitespace), which must print the examples' JSON line. The
    /// arguments after `--` go to the twin only.
    #[arg(long, value_name = "COMMAND", conflicts_with_all = ["checkpoint", "ceiling"])]
    peer: Option<String>,

    /// Further arguments, passed to both twins (after `--`).
    #[arg(last = true)]
    extra: Vec<String>,
}

/// The summary line.
#[derive(Serialize)]
struct Summary {
    bench: &'static str,
    reps: usize,
    ranks: usize,
    threads: usize,
    serial_secs_per_epoch: f64,
    strads_secs_per_epoch: f64,
    speedup: f64,
    setup_vs_serial_epoch: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rmse_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    objective_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updates_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loss_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    accuracy_diff: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loglik_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mrr_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hits10_diff: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rho_diff: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    analogy_diff: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    serial_words_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strads_words_per_sec: Option<f64>,
    /// Zoo programs: the program, its metric, and strads-ap's value over serial's.
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_ratio: Option<f64>,
}

/// The twin binary `name` in `dir`, or an error saying how to build it.
fn sibling(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        bail!(
            "the example binary {} is missing; build with cargo build --release -p strads-ap-examples",
            path.display()
        );
    }
    Ok(path)
}

/// The summary line of `--checkpoint`.
#[derive(Serialize)]
struct CheckpointSummary {
    bench: &'static str,
    app: &'static str,
    reps: usize,
    ranks: usize,
    threads: usize,
    plain_secs_per_epoch: f64,
    checkpointed_secs_per_epoch: f64,
    overhead: f64,
}

/// The summary line of `--ceiling`.
#[derive(Serialize)]
struct CeilingSummary {
    bench: &'static str,
    app: &'static str,
    reps: usize,
    copies: usize,
    alone_secs_per_epoch: f64,
    concurrent_secs_per_epoch: f64,
    ceiling: f64,
}

/// Runs one twin and returns its JSON result line (the last line of its stdout).
fn run(binary: &Path, args: &[String]) -> Result<Value> {
    run_env(binary, args, &[])
}

/// [`run`] with `env` added to the twin's environment.
fn run_env(binary: &Path, args: &[String], env: &[(&str, &Path)]) -> Result<Value> {
    let child = spawn(binary, args, env)?;
    result_line(binary, args, child)
}

/// Starts a twin with its stdout captured.
fn spawn(binary: &Path, args: &[String], env: &[(&str, &Path)]) -> Result<std::process::Child> {
    Command::new(binary)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))
}

/// Waits for a twin started by [`spawn`] and returns its JSON result line.
fn result_line(binary: &Path, args: &[String], child: std::process::Child) -> Result<Value> {
    let output = child
        .wait_with_output()
        .with_context(|| format!("cannot wait for {}", binary.display()))?;
    if !output.status.success() {
        bail!(
            "{} {} failed: {}",
            binary.display(),
            args.join(" "),
            output.status
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .with_context(|| format!("{} printed no result line", binary.display()))?;
    let value: Value = serde_json::from_str(line)
        .with_context(|| format!("{} printed a bad result line: {line}", binary.display()))?;
    println!("{line}");
    Ok(value)
}

/// Metrics a peer's line and the twin's are compared on when both carry them.
const PEER_METRICS: [&str; 12] = [
    "words_per_sec",
    "tokens_per_sec",
    "triples_per_sec",
    "wordsim_rho",
    "analogy_acc",
    "loglik_per_token",
    "train_rmse",
    "test_rmse",
    "train_loss",
    "test_accuracy",
    "mrr",
    "hits10",
];

/// The summary line of `--peer`: speed, then the medians of every metric both carry.
fn peer_summary(app: &str, peer: &[Value], strads: &[Value]) -> Result<Value> {
    let (p, s) = (epoch_median(peer)?, epoch_median(strads)?);
    let name = peer[0]
        .get("impl")
        .and_then(Value::as_str)
        .unwrap_or("peer");
    let threads = strads[0]
        .get("threads")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut line = serde_json::json!({
        "bench": "peer",
        "app": app,
        "peer": name,
        "reps": peer.len(),
        "threads": threads,
        "peer_secs_per_epoch": p,
        "strads_secs_per_epoch": s,
        "speedup": ratio(p, s),
    });
    let has = |runs: &[Value], key: &str| {
        runs.iter()
            .all(|r| r.get(key).is_some_and(Value::is_number))
    };
    for key in PEER_METRICS {
        if has(peer, key) && has(strads, key) {
            line[format!("peer_{key}")] = median(&field(peer, key)?).into();
            line[format!("strads_{key}")] = median(&field(strads, key)?).into();
        }
    }
    Ok(line)
}

/// `a / b`, or NaN when `b` is not positive (a run that measured nothing).
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// The median time per epoch of `runs`.
fn epoch_median(runs: &[Value]) -> Result<f64> {
    Ok(median(&field(runs, "secs_per_epoch")?))
}

/// Runs `first` and `second` alternately `reps` times (each yields one or more result
/// lines), announcing each repetition of `what`; returns their results.
fn alternate(
    what: &str,
    reps: usize,
    mut first: impl FnMut() -> Result<Vec<Value>>,
    mut second: impl FnMut() -> Result<Vec<Value>>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for rep in 1..=reps {
        eprintln!("bench {what}: repetition {rep} of {reps}");
        a.extend(first()?);
        b.extend(second()?);
    }
    Ok((a, b))
}

/// The numeric field `key` of every result.
fn field(results: &[Value], key: &str) -> Result<Vec<f64>> {
    results
        .iter()
        .map(|r| {
            r.get(key)
                .and_then(Value::as_f64)
                .with_context(|| format!("result line without a number `{key}`: {r}"))
        })
        .collect()
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let exe = std::env::current_exe().context("cannot find the bench executable")?;
    let dir = exe
        .parent()
        .context("the bench executable has no directory")?;
    let app = args.app.name();
    // The zoo's twins are one binary: the program's name (and `--serial`) come first.
    let (serial, strads, serial_first, strads_first) = match (&args.app, &args.program) {
        (App::Zoo, Some(program)) => (
            sibling(dir, "zoo")?,
            sibling(dir, "zoo")?,
            vec![
                program.clone(),
                "--serial".to_string(),
                "--quiet".to_string(),
            ],
            vec![program.clone(), "--quiet".to_string()],
        ),
        (App::Zoo, None) => bail!("--app zoo needs --program NAME (see zoo --list)"),
        _ => (
            sibling(dir, &format!("{app}-serial"))?,
            sibling(dir, app)?,
            Vec::new(),
            Vec::new(),
        ),
    };
    if args.ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    let launcher = if args.ranks > 1 {
        Some(
            sibling(dir, "strads-ap")
                .context("--ranks needs the launcher: cargo build --release -p strads-ap")?,
        )
    } else {
        None
    };
    let logs = std::env::temp_dir().join(format!("strads-bench-{}", std::process::id()));

    let mut twin_args: Vec<String> = Vec::new();
    if let Some(t) = args.threads {
        twin_args.extend(["--threads".to_string(), t.to_string()]);
    }
    twin_args.extend(args.extra.iter().cloned());
    let serial_args: Vec<String> = serial_first.iter().chain(&twin_args).cloned().collect();
    let serial_extra: Vec<String> = serial_first.iter().chain(&args.extra).cloned().collect();
    let twin_args: Vec<String> = strads_first.iter().chain(&twin_args).cloned().collect();

    // The strads-ap twin, checkpointing into `ckpt` if given.
    let run_strads = |ckpt: Option<&Path>| -> Result<Value> {
        match &launcher {
            None => match ckpt {
                None => run(&strads, &twin_args),
                Some(dir) => run_env(&strads, &twin_args, &[("STRADS_CHECKPOINT_DIR", dir)]),
            },
            Some(launcher) => {
                let mut launch = vec![
                    "run".to_string(),
                    "-n".to_string(),
                    args.ranks.to_string(),
                    "--output-dir".to_string(),
                    logs.display().to_string(),
                ];
                if let Some(t) = args.threads {
                    launch.extend(["--threads".to_string(), t.to_string()]);
                }
                if let Some(dir) = ckpt {
                    launch.extend(["--checkpoint-dir".to_string(), dir.display().to_string()]);
                }
                launch.push("--".to_string());
                launch.push(strads.display().to_string());
                launch.extend(twin_args.iter().cloned());
                run(launcher, &launch)
            }
        }
    };

    if args.ceiling {
        let copies = args.threads.unwrap_or(2).max(1);
        let (alone, together) = alternate(
            &format!("{app} --ceiling"),
            args.reps,
            || Ok(vec![run(&serial, &serial_extra)?]),
            || {
                // Processes share no memory, so the copies run the same arguments.
                let runs: Vec<std::process::Child> = (0..copies)
                    .map(|_| spawn(&serial, &serial_extra, &[]))
                    .collect::<Result<_>>()?;
                runs.into_iter()
                    .map(|child| result_line(&serial, &serial_extra, child))
                    .collect()
            },
        )?;
        let (one, many) = (epoch_median(&alone)?, epoch_median(&together)?);
        print_json_line(&CeilingSummary {
            bench: "ceiling",
            app,
            reps: args.reps,
            copies,
            alone_secs_per_epoch: one,
            concurrent_secs_per_epoch: many,
            ceiling: ratio(copies as f64 * one, many),
        });
        return Ok(());
    }

    if let Some(command) = &args.peer {
        let mut words = command.split_whitespace().map(str::to_string);
        let program = PathBuf::from(words.next().context("--peer needs a command")?);
        let peer_args: Vec<String> = words.collect();
        let (peer_runs, strads_runs) = alternate(
            &format!("{app} --peer"),
            args.reps,
            || Ok(vec![run(&program, &peer_args)?]),
            || Ok(vec![run_strads(None)?]),
        )?;
        let _ = std::fs::remove_dir_all(&logs);
        print_json_line(&peer_summary(app, &peer_runs, &strads_runs)?);
        return Ok(());
    }

    if args.checkpoint {
        let ckpt = std::env::temp_dir().join(format!("strads-bench-ckpt-{}", std::process::id()));
        let (plain, checkpointed) = alternate(
            &format!("{app} --checkpoint"),
            args.reps,
            || Ok(vec![run_strads(None)?]),
            || {
                let _ = std::fs::remove_dir_all(&ckpt);
                let outcome = run_strads(Some(&ckpt));
                let _ = std::fs::remove_dir_all(&ckpt);
                Ok(vec![outcome?])
            },
        )?;
        let _ = std::fs::remove_dir_all(&logs);
        let (p, c) = (epoch_median(&plain)?, epoch_median(&checkpointed)?);
        print_json_line(&CheckpointSummary {
            bench: "checkpoint",
            app,
            reps: args.reps,
            ranks: args.ranks,
            threads: plain[0].get("threads").and_then(Value::as_u64).unwrap_or(0) as usize,
            plain_secs_per_epoch: p,
            checkpointed_secs_per_epoch: c,
            overhead: ratio(c, p) - 1.0,
        });
        return Ok(());
    }

    let (serial_runs, strads_runs) = alternate(
        app,
        args.reps,
        || Ok(vec![run(&serial, &serial_args)?]),
        || Ok(vec![run_strads(None)?]),
    )?;
    let _ = std::fs::remove_dir_all(&logs);

    let serial_epoch = epoch_median(&serial_runs)?;
    let strads_epoch = epoch_median(&strads_runs)?;
    let setup = median(&field(&strads_runs, "setup_secs")?);
    let threads = strads_runs[0]
        .get("threads")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    let mut summary = Summary {
        bench: app,
        reps: args.reps,
        ranks: args.ranks,
        threads,
        serial_secs_per_epoch: serial_epoch,
        strads_secs_per_epoch: strads_epoch,
        speedup: ratio(serial_epoch, strads_epoch),
        setup_vs_serial_epoch: ratio(setup, serial_epoch),
        rmse_ratio: None,
        objective_ratio: None,
        updates_ratio: None,
        loss_ratio: None,
        accuracy_diff: None,
        loglik_ratio: None,
        mrr_ratio: None,
        hits10_diff: None,
        rho_diff: None,
        analogy_diff: None,
        serial_words_per_sec: None,
        strads_words_per_sec: None,
        program: None,
        metric: None,
        metric_ratio: None,
    };
    match args.app {
        App::Sgdmf => {
            let s = median(&field(&serial_runs, "train_rmse")?);
            let p = median(&field(&strads_runs, "train_rmse")?);
            summary.rmse_ratio = Some(ratio(p, s));
        }
        App::Mlr => {
            let sl = median(&field(&serial_runs, "train_loss")?);
            let pl = median(&field(&strads_runs, "train_loss")?);
            let sa = median(&field(&serial_runs, "test_accuracy")?);
            let pa = median(&field(&strads_runs, "test_accuracy")?);
            summary.loss_ratio = Some(ratio(pl, sl));
            summary.accuracy_diff = Some(pa - sa);
        }
        App::Lda => {
            let s = median(&field(&serial_runs, "loglik_per_token")?);
            let p = median(&field(&strads_runs, "loglik_per_token")?);
            // Log-likelihoods are negative: a plain quotient.
            summary.loglik_ratio = Some(if s != 0.0 { p / s } else { f64::NAN });
        }
        App::Transe => {
            let s = median(&field(&serial_runs, "mrr")?);
            let p = median(&field(&strads_runs, "mrr")?);
            let sh = median(&field(&serial_runs, "hits10")?);
            let ph = median(&field(&strads_runs, "hits10")?);
            summary.mrr_ratio = Some(ratio(p, s));
            summary.hits10_diff = Some(ph - sh);
        }
        App::Word2vec => {
            let s = median(&field(&serial_runs, "wordsim_rho")?);
            let p = median(&field(&strads_runs, "wordsim_rho")?);
            let sa = median(&field(&serial_runs, "analogy_acc")?);
            let pa = median(&field(&strads_runs, "analogy_acc")?);
            summary.rho_diff = Some(p - s);
            summary.analogy_diff = Some(pa - sa);
            summary.serial_words_per_sec = Some(median(&field(&serial_runs, "words_per_sec")?));
            summary.strads_words_per_sec = Some(median(&field(&strads_runs, "words_per_sec")?));
        }
        App::Lasso => {
            let s = median(&field(&serial_runs, "objective")?);
            let p = median(&field(&strads_runs, "objective")?);
            summary.objective_ratio = Some(ratio(p, s));
            let su = median(&field(&serial_runs, "updates")?);
            let pu = median(&field(&strads_runs, "updates")?);
            summary.updates_ratio = Some(ratio(pu, su));
        }
        App::Zoo => {
            let s = median(&field(&serial_runs, "value")?);
            let p = median(&field(&strads_runs, "value")?);
            summary.program = args.program.clone();
            summary.metric = strads_runs[0]
                .get("metric")
                .and_then(Value::as_str)
                .map(str::to_string);
            summary.metric_ratio = Some(if s != 0.0 { p / s } else { f64::NAN });
        }
    }
    print_json_line(&summary);
    Ok(())
}
