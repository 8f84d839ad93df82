//! `fm` with the declarations its diagnosis asks for: the serial program is the same, and
//! the strads-ap twin declares the bias `w0`, the linear weights `w` and the factor rows
//! `v` relaxed (`DVector::relaxed(Relaxed::Sum)`), so that the planner leaves them out and
//! workers merge their updates as summed deltas after every group of tasks (Hogwild-like
//! within a group, serializable nowhere: the Zipf-popular features are in most samples,
//! so no plan could run two samples at once). The rest of the body is unchanged (the
//! epoch's squared error is a reduction, exact in both).
//!
//! Shape, data and metric: those of [`fm`](super::fm).

use anyhow::{ensure, Result};
use strads_ap::prelude::*;

use super::fm::{init_factors, samples, FmSample, FACTORS, LR, REG};
use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "fm-relaxed";

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
    // The declarations the diagnosis asks for: the hot tables merge summed deltas.
    let w0: DVector<f32> = DVector::from_fn(1, |_| 0.0)?.relaxed(Relaxed::Sum);
    let w: DVector<f32> = DVector::from_fn(features, |_| 0.0)?.relaxed(Relaxed::Sum);
    let v: DVector<Vec<f32>> =
        DVector::from_fn(features, |j| init_factors(run.seed, j))?.relaxed(Relaxed::Sum);

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
