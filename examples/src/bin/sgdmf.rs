//! SGD matrix factorisation with strads-ap: the twin of `sgdmf-serial`.
//!
//! The serial program with `DVector` for `Vec` and `async_for!` for the inner `for`; the
//! loop body is unchanged. `async_for!` runs it on every core and keeps the result of some
//! serial order (no two ratings sharing a user or an item run at the same time).
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin sgdmf -- --epochs 5 --threads 2
//! ```

use anyhow::{ensure, Result};
use clap::Parser;
use strads_ap::check_finite;
use strads_ap::prelude::*;
use strads_ap_examples::cli::SgdmfArgs;
use strads_ap_examples::data;
use strads_ap_examples::metrics::{rmse, row_squared_error};
use strads_ap_examples::model::{dot, factor_scale, init_row};
use strads_ap_examples::report::{
    print_json_line, print_loop_stats, progress, EpochClock, SgdmfResult, STRADS,
};

fn main() -> Result<()> {
    let args = SgdmfArgs::parse();
    let threads = args.common.threads();
    // The job the launcher describes (a world of one without it), with our thread count.
    strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
    let seed = args.common.seed;
    let (rank, lr, reg) = (args.rank, args.lr, args.reg);

    // Data: a file (read with strads-ap's parallel reader and the shared line parser) or
    // the synthetic generator, then the seeded 90/10 split.
    let all = match &args.common.data {
        Some(path) => {
            let (raw, _) = ReadOptions::new()
                .header_lines(data::header_lines(path)?)
                .comment_prefix("#")
                .read(path, data::rating_parser(path))?;
            data::remap_ratings(&raw.to_vec()?)
        }
        None => data::synthetic_ratings(args.users, args.items, args.ratings, seed),
    };
    let (users, items) = (all.users, all.items);
    let (train, test) = data::split_train_test(all.ratings, seed);
    ensure!(!train.is_empty(), "no training ratings");
    let ratings: DVector<data::Rating> = DVector::from_vec(train)?;
    let test: DVector<data::Rating> = DVector::from_vec(test)?;
    let n = ratings.len() as f64;
    let rating_mean = ratings.map_reduce(|r| f64::from(r.rating), |a, b| a + b)? / n;
    let rating_var = ratings.map_reduce(
        |r| (f64::from(r.rating) - rating_mean).powi(2),
        |a, b| a + b,
    )? / n;
    eprintln!(
        "sgdmf [{STRADS}]: {} training and {} test ratings, {users} users, {items} items, \
         rating mean {rating_mean:.3}, std {:.3}, {threads} threads",
        ratings.len(),
        test.len(),
        rating_var.sqrt()
    );

    // Parameters: one row of `rank` factors per user and per item.
    let scale = factor_scale(rating_mean as f32, rank);
    let w: DVector<Vec<f32>> = DVector::from_fn(users, |u| init_row(seed, 0, u, rank, scale))?;
    let h: DVector<Vec<f32>> = DVector::from_fn(items, |v| init_row(seed, 1, v, rank, scale))?;

    // Squared error summed over a DVector of ratings: a loop that only reads the
    // parameters and adds into `sum` (a reduction). Across ranks each rating is evaluated
    // where its user's row lives, so the user rows stay where they are.
    let sum_squared = |set: &DVector<data::Rating>| -> Result<f64> {
        let mut sum = 0.0f64;
        async_for!(0..set.len(), |k| {
            let r = &set[k];
            sum += row_squared_error(&w[r.user as usize], &h[r.item as usize], r);
        })?;
        Ok(sum)
    };

    let mut clock = EpochClock::new();
    for epoch in 1..=args.common.epochs {
        let start = clock.start();
        async_for!(0..ratings.len(), |k| {
            // strads-ap: body begin
            let r = &ratings[k];
            let wu = &mut w[r.user as usize];
            let hv = &mut h[r.item as usize];
            let err = r.rating - dot(wu, hv);
            for (a, b) in wu.iter_mut().zip(hv.iter_mut()) {
                let (wf, hf) = (*a, *b);
                *a += lr * (err * hf - reg * wf);
                *b += lr * (err * wf - reg * hf);
            }
            // strads-ap: body end
        })?;
        // The training loop alone: the first call's set-up is reported separately as
        // `setup_secs`.
        let secs = clock.stop(start, epoch);
        let train_rmse = rmse(sum_squared(&ratings)?, ratings.len());
        let train_rmse = check_finite("train_rmse", train_rmse, epoch)?;
        progress("sgdmf", STRADS, epoch, "train_rmse", train_rmse, secs);
    }
    print_loop_stats();

    let epochs = args.common.epochs;
    print_json_line(&SgdmfResult {
        app: "sgdmf".into(),
        implementation: STRADS.into(),
        ranks: strads_ap::world_size(),
        threads,
        epochs: args.common.epochs,
        secs_per_epoch: clock.secs_per_epoch(),
        train_rmse: check_finite(
            "train_rmse",
            rmse(sum_squared(&ratings)?, ratings.len()),
            epochs,
        )?,
        test_rmse: check_finite("test_rmse", rmse(sum_squared(&test)?, test.len()), epochs)?,
        setup_secs: clock.setup_secs(),
    });
    // Leave the job cleanly (every rank; nothing in a world of one).
    strads_ap::finish()?;
    Ok(())
}
