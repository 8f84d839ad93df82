//! LIBMF on the data of the `sgdmf` example, printing the example's JSON line with
//! `"impl":"libmf"`. It takes `sgdmf`'s flags (data, sizes, seed, rank, regularisation,
//! epochs, threads), so the two see the same training and test ratings:
//!
//! ```text
//! examples/peers/libmf/target/release/sgdmf-libmf --epochs 20 --threads 2
//! ```
//!
//! LIBMF trains by its own method (fast parallel SGD over blocks of the rating matrix,
//! with adaptive learning rates), so `--lr` is not used: compare speed at equal test
//! RMSE, not per epoch alone.

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use clap::Parser;
use strads_ap_examples::cli::SgdmfArgs;
use strads_ap_examples::data::{self, Rating};
use strads_ap_examples::metrics::rmse;
use strads_ap_examples::report::{print_json_line, SgdmfResult};

fn matrix(ratings: &[Rating]) -> libmf::Matrix {
    let mut m = libmf::Matrix::new();
    for r in ratings {
        m.push(r.user as i32, r.item as i32, r.rating);
    }
    m
}

fn sum_squared(model: &libmf::Model, ratings: &[Rating]) -> f64 {
    ratings
        .iter()
        .map(|r| {
            let e = f64::from(r.rating - model.predict(r.user as i32, r.item as i32));
            e * e
        })
        .sum()
}

fn main() -> Result<()> {
    let args = SgdmfArgs::parse();
    let seed = args.common.seed;
    let all = match &args.common.data {
        Some(path) => data::load_ratings(path)?,
        None => data::synthetic_ratings(args.users, args.items, args.ratings, seed),
    };
    let (ratings, test) = data::split_train_test(all.ratings, seed);
    ensure!(!ratings.is_empty(), "no training ratings");
    let threads = args.common.threads.unwrap_or(1);
    let epochs = args.common.epochs;
    eprintln!(
        "sgdmf [libmf]: {} training and {} test ratings, rank {}, {threads} threads, \
         {epochs} iterations",
        ratings.len(),
        test.len(),
        args.rank
    );
    let train = matrix(&ratings);
    let start = Instant::now();
    let model = libmf::Model::params()
        .loss(libmf::Loss::RealL2)
        .factors(i32::try_from(args.rank)?)
        .threads(i32::try_from(threads)?)
        .iterations(i32::try_from(epochs)?)
        .lambda_p2(args.reg)
        .lambda_q2(args.reg)
        .quiet(true)
        .fit(&train)
        .context("LIBMF training")?;
    let secs = start.elapsed().as_secs_f64();
    print_json_line(&SgdmfResult {
        app: "sgdmf".into(),
        implementation: "libmf".into(),
        ranks: 1,
        threads,
        epochs,
        secs_per_epoch: secs / epochs.max(1) as f64,
        train_rmse: rmse(sum_squared(&model, &ratings), ratings.len()),
        test_rmse: rmse(sum_squared(&model, &test), test.len()),
        setup_secs: 0.0,
    });
    Ok(())
}
