//! Matrix factorisation by AdaGrad: every factor has its own step size, from the squared
//! gradients accumulated so far. A task reads and writes 50 factors of four tables element
//! by element (`p[u][f]`, `gp[u][f]`, `q[i][f]`, `gq[i][f]`): about 500 element accesses
//! per rating, the heaviest per-task access count of the zoo.
//!
//! Shape: four written tables in two dimensions (`p` and its accumulators `gp` keyed by
//! user; `q` and `gq` keyed by item), hundreds of element accesses per task.
//!
//! Default: synthetic power-law ratings (200,000; 5,000 users, 1,000 items), 50 factors,
//! 5 epochs; `--data ../shared/data/movielens-100k/ratings.tsv` for MovieLens 100K.
//! Metric: training RMSE after the last epoch.

use anyhow::{ensure, Result};
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, Rating, Ratings};
use crate::metrics::{rmse, squared_error};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "adagrad-mf";
const FACTORS: usize = 50;
const LR: f32 = 0.05;
const REG: f32 = 0.02;
/// Keeps a step finite while a factor's accumulated squared gradient is still zero.
const EPS: f32 = 1e-6;

/// The ratings: the file given, or the synthetic default.
fn ratings(run: &Run) -> Result<Ratings> {
    Ok(match &run.data {
        Some(path) => data::load_ratings(path)?,
        None => data::synthetic_ratings(
            run.scaled(5_000, 50),
            run.scaled(1_000, 20),
            run.scaled(200_000, 1_000),
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
    let (factors, lr, reg) = run.setting((FACTORS, LR, REG));
    let mut p: Vec<Vec<f32>> = (0..all.users)
        .map(|u| init_factors(run.seed, 0, u))
        .collect();
    let mut q: Vec<Vec<f32>> = (0..all.items)
        .map(|i| init_factors(run.seed, 1, i))
        .collect();
    let mut gp: Vec<Vec<f32>> = vec![vec![0.0; FACTORS]; all.users];
    let mut gq: Vec<Vec<f32>> = vec![vec![0.0; FACTORS]; all.items];

    let epochs = run.epochs_or(5);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        for k in 0..ratings.len() {
            // zoo body begin: train
            let r = &ratings[k];
            let (u, i) = (r.user as usize, r.item as usize);
            let mut pred = 0.0;
            for f in 0..factors {
                pred += p[u][f] * q[i][f];
            }
            let err = r.rating - pred;
            for f in 0..factors {
                let (pu, qi) = (p[u][f], q[i][f]);
                let (grad_p, grad_q) = (err * qi - reg * pu, err * pu - reg * qi);
                gp[u][f] += grad_p * grad_p;
                gq[i][f] += grad_q * grad_q;
                p[u][f] += lr * grad_p / (gp[u][f].sqrt() + EPS);
                q[i][f] += lr * grad_q / (gq[i][f].sqrt() + EPS);
            }
            // zoo body end: train
        }
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    let rmse = train_rmse(&ratings, &p, &q);
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
    let (factors, lr, reg) = run.setting((FACTORS, LR, REG));
    let p: DVector<Vec<f32>> = DVector::from_fn(all.users, |u| init_factors(run.seed, 0, u))?;
    let q: DVector<Vec<f32>> = DVector::from_fn(all.items, |i| init_factors(run.seed, 1, i))?;
    let gp: DVector<Vec<f32>> = DVector::from_fn(all.users, |_| vec![0.0; FACTORS])?;
    let gq: DVector<Vec<f32>> = DVector::from_fn(all.items, |_| vec![0.0; FACTORS])?;

    let epochs = run.epochs_or(5);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        async_for!(
            0..ratings.len(),
            |k| {
                // zoo body begin: train
                let r = &ratings[k];
                let (u, i) = (r.user as usize, r.item as usize);
                let mut pred = 0.0;
                for f in 0..factors {
                    pred += p[u][f] * q[i][f];
                }
                let err = r.rating - pred;
                for f in 0..factors {
                    let (pu, qi) = (p[u][f], q[i][f]);
                    let (grad_p, grad_q) = (err * qi - reg * pu, err * pu - reg * qi);
                    gp[u][f] += grad_p * grad_p;
                    gq[i][f] += grad_q * grad_q;
                    p[u][f] += lr * grad_p / (gp[u][f].sqrt() + EPS);
                    q[i][f] += lr * grad_q / (gq[i][f].sqrt() + EPS);
                }
                // zoo body end: train
            },
            Opts::new().threads(run.threads)
        )?;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let (ratings_v, p, q) = (ratings.to_vec()?, p.to_vec()?, q.to_vec()?);
    let rmse = train_rmse(&ratings_v, &p, &q);
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
fn train_rmse(ratings: &[Rating], p: &[Vec<f32>], q: &[Vec<f32>]) -> f64 {
    let sse: f64 = ratings.iter().map(|r| squared_error(p, q, r)).sum();
    rmse(sse, ratings.len())
}
