//! What each rank of a job holds as the job is spread over more ranks: SGDMF run as R ranks
//! in this one process (one thread each, over the in-process `mem` transport), printing
//! one JSON line per R with each table's bytes on the rank that holds the most of it, each
//! rank's total against the goal of 1.25 × (data + model) / R, the process's peak
//! resident memory, and the first call's set-up and an epoch's time.
//!
//! Every rank makes only its own range of the data (rating `k` is a hash of `k` and the
//! seed), so nothing is ever whole on a rank unless the runtime makes it so.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin scale -- --ranks 1,2,4,8,16
//! ```
//!
//! Each R runs in a process of its own (this program runs itself), so each line's peak
//! memory is that R's alone. The bytes per table are those `strads_ap::table_memory`
//! reports after the last epoch: a rank's part plus what loops keep between calls (the
//! shadows); during a call a table is full length on every rank.

use anyhow::{ensure, Context, Result};
use clap::Parser;
use serde::Serialize;
use strads_ap::prelude::*;
use strads_ap_examples::data::{mix64, Rating};
use strads_ap_examples::metrics::{rmse, row_squared_error};
use strads_ap_examples::model::{factor_scale, init_row, sgd_step};
use strads_ap_examples::report::{print_json_line, EpochClock};

#[derive(Parser, Debug)]
#[command(about = "SGDMF as R ranks in one process: what each rank holds")]
struct Args {
    /// The numbers of ranks to run, each in a process of its own.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4])]
    ranks: Vec<usize>,
    /// Users (rows of W).
    #[arg(long, default_value_t = 100_000)]
    users: usize,
    /// Items (rows of H).
    #[arg(long, default_value_t = 2_000)]
    items: usize,
    /// Factors per row.
    #[arg(long, default_value_t = 32)]
    rank: usize,
    /// Training ratings (users and items drawn uniformly).
    #[arg(long, default_value_t = 200_000)]
    ratings: usize,
    /// Training epochs.
    #[arg(long, default_value_t = 2)]
    epochs: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run one R in this process (what `--ranks` starts for each R).
    #[arg(long, hide = true)]
    one: Option<usize>,
}

#[derive(Serialize, Debug)]
struct ScaleLine {
    bench: &'static str,
    app: &'static str,
    ranks: usize,
    users: usize,
    items: usize,
    rank: usize,
    ratings: usize,
    /// Bytes of the ratings and of W and H, whole (as a world of one holds them).
    data_bytes: usize,
    model_bytes: usize,
    /// 1.25 × (data + model) / R.
    goal_bytes: usize,
    /// The largest and the mean of the ranks' table bytes between calls.
    max_rank_bytes: usize,
    mean_rank_bytes: usize,
    /// Each table on the rank that holds the most of it.
    tables: Vec<strads_ap::TableMemory>,
    /// The whole process's peak resident memory (all R ranks), and that over R.
    process_peak_bytes: u64,
    peak_per_rank_bytes: u64,
    setup_secs: f64,
    secs_per_epoch: f64,
    train_rmse: f64,
}

/// What one rank saw.
struct RankOutcome {
    tables: Vec<strads_ap::TableMemory>,
    setup_secs: f64,
    secs_per_epoch: f64,
    train_rmse: f64,
}

/// Rating `k`: a user, an item and a value from 1 to 5, from a hash of `k` and `seed`.
fn rating_at(k: usize, users: usize, items: usize, seed: u64) -> Rating {
    let h = mix64(mix64(seed) ^ k as u64);
    Rating {
        user: (h % users as u64) as u32,
        item: ((h >> 24) % items as u64) as u32,
        rating: 1.0 + ((h >> 48) % 5) as f32,
    }
}

/// The job every rank runs.
fn job(args: &Args) -> Result<RankOutcome> {
    let (users, items, rank, seed) = (args.users, args.items, args.rank, args.seed);
    let ratings = DVector::from_fn(args.ratings, |k| rating_at(k, users, items, seed))?;
    let scale = factor_scale(3.0, rank);
    let w: DVector<Vec<f32>> = DVector::from_fn(users, |u| init_row(seed, 0, u, rank, scale))?;
    let h: DVector<Vec<f32>> = DVector::from_fn(items, |v| init_row(seed, 1, v, rank, scale))?;
    let (lr, reg) = (0.01f32, 0.05f32);
    let mut clock = EpochClock::new();
    for epoch in 1..=args.epochs {
        let start = clock.start();
        async_for!(0..ratings.len(), |k| {
            let r = &ratings[k];
            sgd_step(
                &mut w[r.user as usize],
                &mut h[r.item as usize],
                r.rating,
                lr,
                reg,
            );
        })?;
        clock.stop(start, epoch);
    }
    let mut sum = 0.0f64;
    async_for!(0..ratings.len(), |k| {
        let r = &ratings[k];
        sum += row_squared_error(&w[r.user as usize], &h[r.item as usize], r);
    })?;
    Ok(RankOutcome {
        tables: strads_ap::table_memory(),
        setup_secs: clock.setup_secs(),
        secs_per_epoch: clock.secs_per_epoch(),
        train_rmse: rmse(sum, ratings.len()),
    })
}

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmHWM in /proc/self/status")?;
    Ok(kib * 1024)
}

/// Runs `args` as `world` ranks in this process and prints its line.
fn run_one(args: &Args, world: usize) -> Result<()> {
    ensure!(world >= 1, "--ranks: a world has at least one rank");
    strads_ap::init_with(strads_ap::Config::local(1))?;
    let outcomes: Vec<RankOutcome> = strads_ap::cluster::simulate(world, || job(args))
        .into_iter()
        .enumerate()
        .map(|(r, o)| o.with_context(|| format!("rank {r} of {world}")))
        .collect::<Result<_>>()?;
    let first = &outcomes[0];
    for (r, o) in outcomes.iter().enumerate() {
        ensure!(
            o.train_rmse == first.train_rmse,
            "rank {r} ends with train_rmse {} where rank 0 has {}",
            o.train_rmse,
            first.train_rmse
        );
    }
    let rank_bytes: Vec<usize> = outcomes
        .iter()
        .map(|o| o.tables.iter().map(|t| t.bytes).sum())
        .collect();
    let tables: Vec<strads_ap::TableMemory> = (0..first.tables.len())
        .map(|i| {
            outcomes
                .iter()
                .map(|o| o.tables[i].clone())
                .max_by_key(|t| t.bytes)
                .expect("one rank at least")
        })
        .collect();
    // Whole sizes, counted as `table_memory` counts an element: a rating's 12 bytes; a
    // row's `Vec` and its encoded floats.
    let data_bytes = args.ratings * std::mem::size_of::<Rating>();
    let row = std::mem::size_of::<Vec<f32>>() + 1 + 4 * args.rank;
    let model_bytes = (args.users + args.items) * row;
    let peak = peak_rss()?;
    print_json_line(&ScaleLine {
        bench: "scale",
        app: "sgdmf",
        ranks: world,
        users: args.users,
        items: args.items,
        rank: args.rank,
        ratings: args.ratings,
        data_bytes,
        model_bytes,
        goal_bytes: (1.25 * (data_bytes + model_bytes) as f64 / world as f64) as usize,
        max_rank_bytes: rank_bytes.iter().copied().max().unwrap_or(0),
        mean_rank_bytes: rank_bytes.iter().sum::<usize>() / world,
        tables,
        process_peak_bytes: peak,
        peak_per_rank_bytes: peak / world as u64,
        setup_secs: first.setup_secs,
        secs_per_epoch: first.secs_per_epoch,
        train_rmse: first.train_rmse,
    });
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(world) = args.one {
        return run_one(&args, world);
    }
    let me = std::env::current_exe().context("this program's path")?;
    for &world in &args.ranks {
        let mut cmd = std::process::Command::new(&me);
        cmd.args(std::env::args_os().skip(1))
            .arg("--one")
            .arg(world.to_string());
        let status = cmd
            .status()
            .with_context(|| format!("running {}", me.display()))?;
        ensure!(
            status.success(),
            "the run of {world} ranks failed ({status})"
        );
    }
    Ok(())
}
