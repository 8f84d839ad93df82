//! Factorisation machine (Rendle 2010) for regression, trained by plain SGD: a sample's
//! prediction is `w0 + Σ w[j]·x_j + ½ Σ_f ((Σ v[j][f]·x_j)² − Σ v[j][f]²·x_j²)` over its
//! active features, and each sample updates the global bias, the linear weight and the
//! factor row of every active feature.
//!
//! Shape: a task writes a variable number of rows (3 to 30 active features per sample,
//! Zipf-popular, so a few features are in most samples) of two tables (`w`, `v`), plus
//! the global bias `w0`, read and written by every task (a one-element `Vec`, `w0[0]`, a
//! DDS in the twin), and the epoch's squared-error sum (`epoch_sse += ..`, a reduction in
//! the twin). Since every task writes the bias, no two tasks may run at once: the plan is
//! as serial as the program.
//!
//! Default: synthetic, 100,000 samples over 1,000 features (drawn from a Zipf law of
//! exponent 1; 3-30 distinct active features per sample, each of value `1/sqrt(active)`,
//! the usual per-sample normalisation), target from a hidden FM of rank 4 plus Gaussian
//! noise (σ = 0.1); 8 factors initialised uniformly in ±0.1, learning rate 0.1/epoch,
//! 10 epochs.
//!
//! Metric: the RMSE of the last epoch, each sample's error taken just before its update
//! (what SGD programs usually print per epoch). The final model's RMSE would be the other
//! choice, but it depends on the order of the samples: the serial program run in reverse
//! order changes it by up to 3% (seeds 1-5 at the test's size; 0.8% at the default), and
//! a serializable run takes another order; the epoch's RMSE varies by a tenth of that.

use anyhow::{ensure, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, gaussian, Zipf};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "fm";
pub(super) const FACTORS: usize = 8;
pub(super) const LR: f32 = 0.1;
pub(super) const REG: f32 = 0.001;
const HIDDEN_RANK: usize = 4;

/// One sample: its active features `(index, value)` and its target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FmSample {
    /// Active features, distinct indices.
    pub x: Vec<(u32, f32)>,
    /// Regression target.
    pub y: f32,
}

/// The synthetic data set: samples and the number of features.
pub(super) fn samples(run: &Run) -> (Vec<FmSample>, usize) {
    let features = run.scaled(1_000, 50);
    let n = run.scaled(100_000, 200);
    (samples_of(run, n, features, 0), features)
}

/// `n` samples over `features` features, active features drawn from a Zipf law of
/// exponent 1 over `features + skipped` ranks from which the `skipped` most frequent are
/// left out (a text pipeline's stop words).
pub(super) fn samples_of(run: &Run, n: usize, features: usize, skipped: usize) -> Vec<FmSample> {
    let mut rng = data::rng_for(run.seed, 11);
    let hidden_w: Vec<f32> = (0..features)
        .map(|_| (0.5 * gaussian(&mut rng)) as f32)
        .collect();
    let hidden_v: Vec<[f32; HIDDEN_RANK]> = (0..features)
        .map(|_| std::array::from_fn(|_| (0.5 * gaussian(&mut rng)) as f32))
        .collect();
    let popularity = Zipf::new(features + skipped, 1.0);
    (0..n)
        .map(|_| {
            let active = rng.gen_range(3..=30usize).min(features);
            let value = 1.0 / (active as f32).sqrt();
            let mut x: Vec<(u32, f32)> = Vec::with_capacity(active);
            while x.len() < active {
                let Some(j) = popularity.sample(&mut rng).checked_sub(skipped) else {
                    continue;
                };
                let j = j as u32;
                if !x.iter().any(|&(i, _)| i == j) {
                    x.push((j, value));
                }
            }
            let mut y = 0.3;
            let mut sums = [0.0f32; HIDDEN_RANK];
            for &(j, v) in &x {
                y += hidden_w[j as usize] * v;
                for (f, s) in sums.iter_mut().enumerate() {
                    let a = hidden_v[j as usize][f] * v;
                    *s += a;
                    y -= 0.5 * a * a;
                }
            }
            y += 0.5 * sums.iter().map(|s| s * s).sum::<f32>();
            y += (0.1 * gaussian(&mut rng)) as f32;
            FmSample { x, y }
        })
        .collect()
}

/// A factor row's initial values: small, seeded per row.
pub(super) fn init_factors(seed: u64, row: usize) -> Vec<f32> {
    let mut rng = data::rng_for(seed, 0x00f0_0000_0000 + row as u64);
    (0..FACTORS).map(|_| rng.gen_range(-0.1..0.1)).collect()
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
    let w0: DVector<f32> = DVector::from_fn(1, |_| 0.0)?;
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
