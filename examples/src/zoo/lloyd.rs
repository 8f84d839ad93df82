//! Lloyd's k-means (batch k-means): every epoch assigns each point to its nearest centre,
//! summing the points of each centre and counting them, then moves every centre to the
//! mean of its points (in driver code, after the loop). The centres start from greedy
//! k-means++ seeding, as in [`kmeans`](super::kmeans).
//!
//! Shape: no written table at all. The model (the centres) is read whole by every task,
//! and everything the loop produces is accumulated into plain locals, the way a serial
//! program writes it: per-centre sums and counts (`sums[c][f] += x[f]`, `counts[c] +=
//! 1`, an array and a `Vec` written by sums through indexing) and the epoch's squared
//! distance (`sse += best`). In the twin these are reductions, summed element-wise after
//! the call; the centres are a plain captured `Vec` (16 × 16 numbers, copied per call).
//! The sizes are the constants `K` and `DIM` in both bodies: a size captured as a
//! variable (`let k = K;` before the loop) is a value the compiler cannot see through in
//! the converted body, whose inner loops then run 10-20% slower than the serial one's.
//!
//! Default: the synthetic Gaussian blobs of `kmeans` (16 centres in 16 dimensions, σ = 1),
//! 200,000 points, k = 16, 10 epochs. Metric: the mean squared distance of a point to its
//! nearest centre after the last epoch.

use anyhow::{ensure, Result};
use strads_ap::prelude::*;

use super::kmeans::{blobs, inertia, kmeans_pp, DIM, K};
use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "lloyd";

/// The synthetic data set.
fn points(run: &Run) -> Vec<Vec<f32>> {
    blobs(run.scaled(200_000, 1_000), DIM, K, run.seed)
}

/// Moves every centre that has points to their mean.
fn update_centres(centres: &mut [Vec<f32>], sums: &[Vec<f64>], counts: &[u64]) {
    for (c, centre) in centres.iter_mut().enumerate() {
        if counts[c] > 0 {
            for (f, x) in centre.iter_mut().enumerate() {
                *x = (sums[c][f] / counts[c] as f64) as f32;
            }
        }
    }
}

/// The serial program.
pub fn serial(run: &Run) -> Result<Outcome> {
    let points: Vec<Vec<f32>> = points(run);
    ensure!(points.len() >= K, "fewer points than centres");
    let mut centres: Vec<Vec<f32>> = kmeans_pp(&points, K, run.seed);

    let epochs = run.epochs_or(10);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        let mut sums = vec![vec![0.0f64; DIM]; K];
        let mut counts = vec![0u64; K];
        let mut sse = 0.0f64;
        for i in 0..points.len() {
            // zoo body begin: assign
            let x = &points[i];
            let mut best = f64::INFINITY;
            let mut nearest = 0;
            for c in 0..K {
                let mut d2 = 0.0f64;
                for f in 0..DIM {
                    let diff = f64::from(x[f] - centres[c][f]);
                    d2 += diff * diff;
                }
                if d2 < best {
                    best = d2;
                    nearest = c;
                }
            }
            for f in 0..DIM {
                sums[nearest][f] += f64::from(x[f]);
            }
            counts[nearest] += 1;
            sse += best;
            // zoo body end: assign
        }
        update_centres(&mut centres, &sums, &counts);
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
        if run.verbose {
            eprintln!("zoo {NAME} [{SERIAL}] epoch {epoch}: sse {sse:.3}");
        }
    }
    let value = inertia(&points, &centres);
    Ok(serial_outcome(
        NAME,
        epochs,
        points.len(),
        &clock,
        "mean_sq_distance",
        value,
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let all = points(run);
    ensure!(all.len() >= K, "fewer points than centres");
    let mut centres: Vec<Vec<f32>> = kmeans_pp(&all, K, run.seed);
    let points: DVector<Vec<f32>> = DVector::from_vec(all)?;

    let epochs = run.epochs_or(10);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        let mut sums = vec![vec![0.0f64; DIM]; K];
        let mut counts = vec![0u64; K];
        let mut sse = 0.0f64;
        async_for!(
            0..points.len(),
            |i| {
                // zoo body begin: assign
                let x = &points[i];
                let mut best = f64::INFINITY;
                let mut nearest = 0;
                for c in 0..K {
                    let mut d2 = 0.0f64;
                    for f in 0..DIM {
                        let diff = f64::from(x[f] - centres[c][f]);
                        d2 += diff * diff;
                    }
                    if d2 < best {
                        best = d2;
                        nearest = c;
                    }
                }
                for f in 0..DIM {
                    sums[nearest][f] += f64::from(x[f]);
                }
                counts[nearest] += 1;
                sse += best;
                // zoo body end: assign
            },
            Opts::new().threads(run.threads)
        )?;
        update_centres(&mut centres, &sums, &counts);
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
        if run.verbose {
            eprintln!("zoo {NAME} [{STRADS}] epoch {epoch}: sse {sse:.3}");
        }
    }
    let value = inertia(&points.to_vec()?, &centres);
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        points.len(),
        &clock,
        "mean_sq_distance",
        value,
    ))
}
