//! A factorisation machine on bag-of-words samples: the body of [`fm`](super::fm), on
//! data shaped like text rather than like a handful of popular features. Each sample has
//! 3-30 distinct words out of a vocabulary of 100,000, drawn from a Zipf law of exponent 1
//! from which the 100 most frequent words are left out (the stop words a text pipeline
//! drops), so no word is in more than about 2.5% of the samples.
//!
//! Shape: a task writes a variable number of rows of two tables (`w`, `v`) with no hot
//! row, plus the global bias `w0` every task writes. The strads-ap twin makes the one
//! declaration its diagnosis asks for, the bias relaxed (`DVector::relaxed(Relaxed::Sum)`:
//! workers merge summed deltas after every group of tasks); `w` and `v` stay planned.
//! Their rows link every task to most others, so no batch of tasks falls apart into
//! components: the planner *packs* tasks onto one bin per worker, a task waiting for a
//! later batch when two bins hold its rows. The plan is serializable for `w` and `v`.
//!
//! Default: 100,000 samples (the rest as in `fm`: values `1/sqrt(active)`, a hidden FM of
//! rank 4 plus noise, 8 factors, learning rate 0.1/epoch, 10 epochs). Metric: the last
//! epoch's RMSE, as in `fm`.

use anyhow::{ensure, Result};
use strads_ap::prelude::*;

use super::fm::{init_factors, samples_of, FmSample, FACTORS, LR, REG};
use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "fm-text";

/// The vocabulary's size and the most frequent words left out.
const WORDS: usize = 100_000;
const STOP_WORDS: usize = 100;

/// The synthetic data set: samples and the vocabulary's size.
fn samples(run: &Run) -> (Vec<FmSample>, usize) {
    let words = run.scaled(WORDS, 500);
    let n = run.scaled(100_000, 200);
    (samples_of(run, n, words, STOP_WORDS), words)
}

/// The serial program.
pub fn serial(run: &Run) -> Result<Outcome> {
    let (samples, features) = samples(run);
    ensure!(!samples.is_empty(), "no samples");
    let (factors, lr0, reg) = run.setting((FACTORS, LR, REG));
    let mut w0: Vec<f32> = vec![0.0];
    let mut w: Vec<f32> = vec![0.0; features];
    let mut v: Vec<Vec<f32>> = (0..features).map(|j| init_factors(run.seed, j)).collect();

    let epochs = run.epochs_or(10);
    let mut last_sse = 0.0f64;
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        let lr = lr0 / epoch as f32;
        let mut epoch_sse = 0.0f64;
        for k in 0..samples.len() {
            // zoo body begin: train
            let s = &samples[k];
            let mut sums = vec![0.0f32; factors];
            let mut pred = w0[0];
            for &(j, x) in &s.x {
                let j = j as usize;
                pred += w[j] * x;
                for f in 0..factors {
                    sums[f] += v[j][f] * x;
                    pred -= 0.5 * v[j][f] * v[j][f] * x * x;
                }
            }
            for f in 0..factors {
                pred += 0.5 * sums[f] * sums[f];
            }
            let err = s.y - pred;
            epoch_sse += f64::from(err * err);
            w0[0] += lr * err;
            for &(j, x) in &s.x {
                let j = j as usize;
                w[j] += lr * (err * x - reg * w[j]);
                for f in 0..factors {
                    let grad = x * sums[f] - v[j][f] * x * x;
                    v[j][f] += lr * (err * grad - reg * v[j][f]);
                }
            }
            // zoo body end: train
        }
        last_sse = epoch_sse;
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    let rmse = (last_sse / samples.len() as f64).sqrt();
    Ok(serial_outcome(
        NAME,
        epochs,
        samples.len(),
        &clock,
        "epoch_rmse",
        rmse,
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let (all, features) = samples(run);
    ensure!(!all.is_empty(), "no samples");
    let samples: DVector<FmSample> = DVector::from_vec(all)?;
    let (factors, lr0, reg) = run.setting((FACTORS, LR, REG));
    // The declaration the diagnosis asks for: the bias every task writes merges summed
    // deltas; the weights and factor rows are planned.
    let w0: DVector<f32> = DVector::from_fn(1, |_| 0.0)?.relaxed(Relaxed::Sum);
    let w: DVector<f32> = DVector::from_fn(features, |_| 0.0)?;
    let v: DVector<Vec<f32>> = DVector::from_fn(features, |j| init_factors(run.seed, j))?;

    let epochs = run.epochs_or(10);
    let mut last_sse = 0.0f64;
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        let lr = lr0 / epoch as f32;
        let mut epoch_sse = 0.0f64;
        async_for!(
            0..samples.len(),
            |k| {
                // zoo body begin: train
                let s = &samples[k];
                let mut sums = vec![0.0f32; factors];
                let mut pred = w0[0];
                for &(j, x) in &s.x {
                    let j = j as usize;
                    pred += w[j] * x;
                    for f in 0..factors {
                        sums[f] += v[j][f] * x;
                        pred -= 0.5 * v[j][f] * v[j][f] * x * x;
                    }
                }
                for f in 0..factors {
                    pred += 0.5 * sums[f] * sums[f];
                }
                let err = s.y - pred;
                epoch_sse += f64::from(err * err);
                w0[0] += lr * err;
                for &(j, x) in &s.x {
                    let j = j as usize;
                    w[j] += lr * (err * x - reg * w[j]);
                    for f in 0..factors {
                        let grad = x * sums[f] - v[j][f] * x * x;
                        v[j][f] += lr * (err * grad - reg * v[j][f]);
                    }
                }
                // zoo body end: train
            },
            Opts::new().threads(run.threads)
        )?;
        last_sse = epoch_sse;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let rmse = (last_sse / samples.len() as f64).sqrt();
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        samples.len(),
        &clock,
        "epoch_rmse",
        rmse,
    ))
}
