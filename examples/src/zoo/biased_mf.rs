//! Biased matrix factorisation (Koren's "SVD" of the Netflix prize): a rating is predicted
//! as `mu + bu[u] + bi[i] + p[u]·q[i]`, and SGD updates two factor rows and two bias
//! scalars per rating, indexing `p[u][f]` and `q[i][f]` element by element in its inner
//! loop, as textbook code does.
//!
//! Shape: four written tables (`p`, `bu` keyed by user; `q`, `bi` keyed by item).
//!
//! Default: synthetic power-law ratings (300,000; 10,000 users, 2,000 items), 16 factors,
//! 10 epochs; `--data ../shared/data/movielens-100k/ratings.tsv` for MovieLens 100K.
//! Metric: training RMSE after the last epoch.

use anyhow::{ensure, Result};
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, Rating, Ratings};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "biased-mf";
const FACTORS: usize = 16;
const LR: f32 = 0.01;
const REG: f32 = 0.02;

/// The ratings: the file given, or the synthetic default.
fn ratings(run: &Run) -> Result<Ratings> {
    Ok(match &run.data {
        Some(path) => data::load_ratings(path)?,
        None => data::synthetic_ratings(
            run.scaled(10_000, 50),
            run.scaled(2_000, 20),
            run.scaled(300_000, 1_000),
            run.seed,
        ),
    })
}

/// A factor row's initial values: small, seeded per table and row.
fn init_factors(seed: u64, table: u64, row: usize) -> Vec<f32> {
    crate::model::init_row(seed, table, row, FACTORS, 0.1)
}

/// The serial program.
#[allow(clippy::needless_range_loop)]
pub fn serial(run: &Run) -> Result<Outcome> {
    let all = ratings(run)?;
    ensure!(!all.ratings.is_empty(), "no ratings");
    let ratings: Vec<Rating> = all.ratings;
    let mu = ratings.iter().map(|r| r.rating).sum::<f32>() / ratings.len() as f32;
    let (factors, lr, reg) = run.setting((FACTORS, LR, REG));
    let mut p: Vec<Vec<f32>> = (0..all.users)
        .map(|u| init_factors(run.seed, 0, u))
        .collect();
    let mut q: Vec<Vec<f32>> = (0..all.items)
        .map(|i| init_factors(run.seed, 1, i))
        .collect();
    let mut bu: Vec<f32> = vec![0.0; all.users];
    let mut bi: Vec<f32> = vec![0.0; all.items];

    let epochs = run.epochs_or(10);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        for k in 0..ratings.len() {
            // zoo body begin: train
            let r = &ratings[k];
            let (u, i) = (r.user as usize, r.item as usize);
            let mut pred = mu + bu[u] + bi[i];
            for f in 0..factors {
                pred += p[u][f] * q[i][f];
            }
            let err = r.rating - pred;
            bu[u] += lr * (err - reg * bu[u]);
            bi[i] += lr * (err - reg * bi[i]);
            for f in 0..factors {
                let (pu, qi) = (p[u][f], q[i][f]);
                p[u][f] += lr * (err * qi - reg * pu);
                q[i][f] += lr * (err * pu - reg * qi);
            }
            // zoo body end: train
        }
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    let rmse = train_rmse(&ratings, mu, &p, &q, &bu, &bi);
    Ok(serial_outcome(
        NAME,
        epochs,
        ratings.len(),
        &clock,
        "train_rmse",
        rmse,
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let all = ratings(run)?;
    ensure!(!all.ratings.is_empty(), "no ratings");
    let ratings: DVector<Rating> = DVector::from_vec(all.ratings)?;
    let mu = ratings.map_reduce(|r| r.rating, |a, b| a + b)? / ratings.len() as f32;
    let (factors, lr, reg) = run.setting((FACTORS, LR, REG));
    let p: DVector<Vec<f32>> = DVector::from_fn(all.users, |u| init_factors(run.seed, 0, u))?;
    let q: DVector<Vec<f32>> = DVector::from_fn(all.items, |i| init_factors(run.seed, 1, i))?;
    let bu: DVector<f32> = DVector::from_fn(all.users, |_| 0.0)?;
    let bi: DVector<f32> = DVector::from_fn(all.items, |_| 0.0)?;

    let epochs = run.epochs_or(10);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        async_for!(
            0..ratings.len(),
            |k| {
                // zoo body begin: train
                let r = &ratings[k];
                let (u, i) = (r.user as usize, r.item as usize);
                let mut pred = mu + bu[u] + bi[i];
                for f in 0..factors {
                    pred += p[u][f] * q[i][f];
                }
                let err = r.rating - pred;
                bu[u] += lr * (err - reg * bu[u]);
                bi[i] += lr * (err - reg * bi[i]);
                for f in 0..factors {
                    let (pu, qi) = (p[u][f], q[i][f]);
                    p[u][f] += lr * (err * qi - reg * pu);
                    q[i][f] += lr * (err * pu - reg * qi);
                }
                // zoo body end: train
            },
            Opts::new().threads(run.threads)
        )?;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let (ratings_v, p, q, bu, bi) = (
        ratings.to_vec()?,
        p.to_vec()?,
        q.to_vec()?,
        bu.to_vec()?,
        bi.to_vec()?,
    );
    let rmse = train_rmse(&ratings_v, mu, &p, &q, &bu, &bi);
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        ratings_v.len(),
        &clock,
        "train_rmse",
        rmse,
    ))
}

/// RMSE of the model on `ratings`.
fn train_rmse(
    ratings: &[Rating],
    mu: f32,
    p: &[Vec<f32>],
    q: &[Vec<f32>],
    bu: &[f32],
    bi: &[f32],
) -> f64 {
    let sse: f64 = ratings
        .iter()
        .map(|r| {
            let (u, i) = (r.user as usize, r.item as usize);
            let pred = mu + bu[u] + bi[i] + crate::model::dot(&p[u], &q[i]);
            f64::from(r.rating - pred).powi(2)
        })
        .sum();
    (sse / ratings.len().max(1) as f64).sqrt()
}
