//! Command-line arguments. Both twins of an example parse the same arguments, so the bench
//! can pass one argument list to both.

use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};

/// Arguments every example takes.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct CommonArgs {
    /// Read the data from this file instead of generating it (SGDMF: `user item rating`
    /// lines; MLR: libsvm lines). The size arguments of the generator are then ignored.
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,

    /// Passes over the training data.
    #[arg(long, default_value_t = 10)]
    pub epochs: usize,

    /// Worker threads of the strads-ap twin [default: all cores]; the serial twin always
    /// runs on one.
    #[arg(long, value_parser = at_least_one)]
    pub threads: Option<usize>,

    /// Seed of the synthetic data, the train/test split and the initial parameters.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl CommonArgs {
    /// The worker thread count: `--threads`, or `STRADS_THREADS` (set by `strads-ap run
    /// --threads`), or the number of cores.
    pub fn threads(&self) -> usize {
        self.threads
            .or_else(|| {
                std::env::var("STRADS_THREADS")
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }
}

/// Arguments of SGD matrix factorisation (`sgdmf`, `sgdmf-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "SGD matrix factorisation: learns user and item factors from ratings"
)]
pub struct SgdmfArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Users of the synthetic data set.
    #[arg(long, default_value_t = 50_000, value_parser = at_least_one)]
    pub users: usize,

    /// Items of the synthetic data set.
    #[arg(long, default_value_t = 5_000, value_parser = at_least_one)]
    pub items: usize,

    /// Ratings of the synthetic data set (before the 90/10 train/test split).
    #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one)]
    pub ratings: usize,

    /// Rank of the factorisation (length of the user and item rows).
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    pub rank: usize,

    /// Learning rate.
    #[arg(long, default_value_t = 0.01, value_parser = positive)]
    pub lr: f32,

    /// L2 regularisation of the factors.
    #[arg(long, default_value_t = 0.05, value_parser = non_negative)]
    pub reg: f32,
}

/// How `sync_for!` merges the workers' updates (`--sync`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncArg {
    /// Workers of a process share progress after every mini-batch.
    Hybrid,
    /// Bulk-synchronous: workers' updates are merged after every step.
    Bsp,
}

impl SyncArg {
    /// The strads-ap synchronisation mode.
    pub fn mode(self) -> strads_ap::SyncMode {
        match self {
            SyncArg::Hybrid => strads_ap::SyncMode::Hybrid,
            SyncArg::Bsp => strads_ap::SyncMode::Bsp,
        }
    }

    /// The name used on the command line and in result lines (`hybrid`, `bsp`).
    pub fn name(self) -> &'static str {
        match self {
            SyncArg::Hybrid => "hybrid",
            SyncArg::Bsp => "bsp",
        }
    }
}

/// Arguments of multinomial logistic regression (`mlr`, `mlr-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "Multinomial logistic (softmax) regression trained by mini-batch SGD"
)]
pub struct MlrArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Samples of the synthetic data set (before the 90/10 train/test split).
    #[arg(long, default_value_t = 100_000, value_parser = at_least_one)]
    pub samples: usize,

    /// Features of the synthetic data set.
    #[arg(long, default_value_t = 50, value_parser = at_least_one)]
    pub features: usize,

    /// Classes of the synthetic data set.
    #[arg(long, default_value_t = 10, value_parser = at_least_one)]
    pub classes: usize,

    /// Samples per mini-batch.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub minibatch: usize,

    /// Learning rate (of the mini-batch mean gradient).
    #[arg(long, default_value_t = 0.5, value_parser = positive)]
    pub lr: f32,

    /// Synchronisation of the strads-ap twin's `sync_for!` (the serial twin ignores it).
    #[arg(long, value_enum, default_value_t = SyncArg::Hybrid)]
    pub sync: SyncArg,
}

/// Parses a count that must be at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|e| format!("{s:?} is not a count: {e}"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// Parses a finite number greater than 0 (a step size).
fn positive(s: &str) -> Result<f32, String> {
    let x: f32 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err("must be a finite number greater than 0".into());
    }
    Ok(x)
}

/// Parses a finite number at least 0 (a regularisation weight).
fn non_negative(s: &str) -> Result<f32, String> {
    let x: f32 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x >= 0.0) {
        return Err("must be a finite number at least 0".into());
    }
    Ok(x)
}
