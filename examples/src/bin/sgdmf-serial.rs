//! SGD matrix factorisation, serial: the twin of `sgdmf`.
//!
//! Data and parameters live in `Vec`s; every epoch runs plain SGD over the training
//! ratings in order with `for k in 0..ratings.len() { BODY }`. The `sgdmf` binary is the
//! same program converted to strads-ap, with the same `BODY` (a test checks it).
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin sgdmf-serial -- --epochs 5
//! ```

use std::time::Instant;

use anyhow::{ensure, Result};
use clap::Parser;
use strads_ap::check_finite;
use strads_ap_examples::cli::SgdmfArgs;
use strads_ap_examples::data;
use strads_ap_examples::metrics::{rating_mean_std, rmse, squared_error};
use strads_ap_examples::model::{dot, factor_scale, init_row};
use strads_ap_examples::report::{mean, print_json_line, progress, SgdmfResult, SERIAL};

// The serial loop runs over indices, exactly like `async_for!(0..ratings.len(), |k| ..)`.
#[allow(clippy::needless_range_loop)]
fn main() -> Result<()> {
    let args = SgdmfArgs::parse();
    let seed = args.common.seed;
    let (rank, lr, reg) = (args.rank, args.lr, args.reg);

    // Data: a file or the synthetic generator, then the seeded 90/10 split.
    let all = match &args.common.data {
        Some(path) => data::load_ratings(path)?,
        None => data::synthetic_ratings(args.users, args.items, args.ratings, seed),
    };
    let (users, items) = (all.users, all.items);
    let (ratings, test) = data::split_train_test(all.ratings, seed);
    ensure!(!ratings.is_empty(), "no training ratings");
    let (rating_mean, rating_std) = rating_mean_std(&ratings);
    eprintln!(
        "sgdmf [{SERIAL}]: {} training and {} test ratings, {users} users, {items} items, \
         rating mean {rating_mean:.3}, std {rating_std:.3}",
        ratings.len(),
        test.len()
    );

    // Parameters: one row of `rank` factors per user and per item.
    let scale = factor_scale(rating_mean as f32, rank);
    let mut w: Vec<Vec<f32>> = (0..users)
        .map(|u| init_row(seed, 0, u, rank, scale))
        .collect();
    let mut h: Vec<Vec<f32>> = (0..items)
        .map(|v| init_row(seed, 1, v, rank, scale))
        .collect();

    let mut epoch_secs = Vec::new();
    for epoch in 1..=args.common.epochs {
        let start = Instant::now();
        for k in 0..ratings.len() {
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
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        let sum: f64 = ratings.iter().map(|r| squared_error(&w, &h, r)).sum();
        let train_rmse = check_finite("train_rmse", rmse(sum, ratings.len()), epoch)?;
        progress("sgdmf", SERIAL, epoch, "train_rmse", train_rmse, secs);
    }

    let train_sum: f64 = ratings.iter().map(|r| squared_error(&w, &h, r)).sum();
    let test_sum: f64 = test.iter().map(|r| squared_error(&w, &h, r)).sum();
    let epochs = args.common.epochs;
    print_json_line(&SgdmfResult {
        app: "sgdmf".into(),
        implementation: SERIAL.into(),
        ranks: 1,
        threads: 1,
        epochs: args.common.epochs,
        secs_per_epoch: mean(&epoch_secs),
        train_rmse: check_finite("train_rmse", rmse(train_sum, ratings.len()), epochs)?,
        test_rmse: check_finite("test_rmse", rmse(test_sum, test.len()), epochs)?,
        setup_secs: 0.0,
    });
    Ok(())
}
