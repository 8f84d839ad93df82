//! GloVe (Pennington et al. 2014): word and context vectors fitted by weighted least
//! squares to the logarithms of co-occurrence counts, by plain SGD over the shuffled
//! co-occurrence records. A record `(i, j, x)` updates word row `w[i]`, context row `c[j]`
//! and their biases `bw[i]`, `bc[j]`.
//!
//! Shape: four written tables in two dimensions (`w` with `bw` keyed by word, `c` with `bc`
//! by context word), Zipf-distributed keys with the vocabulary sorted by frequency (as
//! GloVe's own vocabulary is), so the first rows of both dimensions are hot: the most
//! frequent word is in about a tenth of the records. With a large constant step, the
//! trained model's loss depends on how a row's updates interleave over the epoch: run in
//! long runs against one block of contexts, the row ends the epoch fitted to the last
//! block it met. The twin therefore asks its rotation for fine interleaving
//! (`Opts::interleave(16)`): with the default units the trained loss ended 54-70% above
//! serial's (full size, seeds 1-3), with runs of 16 within 1.4%, as close as another
//! serial order (the serial loop run in reverse order moves it by up to 3.5%).
//!
//! Default: synthetic, 300,000 draws of a word and a context word from a Zipf law of
//! exponent 1 over a 20,000-word vocabulary, counts `2000 / sqrt((i + 1)(j + 1))` times a
//! uniform factor in [0.5, 1.5), rounded, at least 1; repeated pairs are summed into one
//! record and the records shuffled. Dimension 32, step 0.05, `x_max` 100, `α` 0.75,
//! 10 epochs.
//!
//! Metric: the trained model's loss, the weighted squared error averaged over the records
//! in a pass of its own after the last epoch (what a GloVe user evaluates).

use std::collections::BTreeMap;

use anyhow::{ensure, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, Zipf};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "glove";
const DIM: usize = 32;
const LR: f32 = 0.05;
const X_MAX: f32 = 100.0;
const ALPHA: f32 = 0.75;

/// One co-occurrence record: word `i` and context word `j` met `x` times.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cooc {
    /// The word.
    pub i: u32,
    /// The context word.
    pub j: u32,
    /// How often they co-occur.
    pub x: f32,
}

/// The synthetic records (shuffled) and the vocabulary size.
fn records(run: &Run) -> (Vec<Cooc>, usize) {
    let vocab = run.scaled(20_000, 200);
    let draws = run.scaled(300_000, 2_000);
    let mut rng = data::rng_for(run.seed, 21);
    let zipf = Zipf::new(vocab, 1.0);
    let mut counts: BTreeMap<(u32, u32), f32> = BTreeMap::new();
    for _ in 0..draws {
        let (i, j) = (zipf.sample(&mut rng), zipf.sample(&mut rng));
        let base = 2000.0 / (((i + 1) * (j + 1)) as f64).sqrt();
        let x = (base * rng.gen_range(0.5..1.5)).round().max(1.0) as f32;
        *counts.entry((i as u32, j as u32)).or_insert(0.0) += x;
    }
    let mut out: Vec<Cooc> = counts
        .into_iter()
        .map(|((i, j), x)| Cooc { i, j, x })
        .collect();
    for k in (1..out.len()).rev() {
        out.swap(k, rng.gen_range(0..=k));
    }
    (out, vocab)
}

/// A vector's initial values: uniform in ±0.5 / dimension, seeded per table and row.
fn init_row(seed: u64, table: u64, row: usize) -> Vec<f32> {
    let mut rng = data::rng_for(seed, 0x0600_0000_0000 + (table << 32) + row as u64);
    (0..DIM)
        .map(|_| rng.gen_range(-0.5..0.5) / DIM as f32)
        .collect()
}

/// GloVe's weighting of a count: `(x / x_max)^α`, at most 1.
fn weight(x: f32) -> f32 {
    (x / X_MAX).powf(ALPHA).min(1.0)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The model's mean weighted squared error over `records`.
fn loss(records: &[Cooc], w: &[Vec<f32>], c: &[Vec<f32>], bw: &[f32], bc: &[f32]) -> f64 {
    let sum: f64 = records
        .iter()
        .map(|t| {
            let (i, j) = (t.i as usize, t.j as usize);
            let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
            f64::from(weight(t.x) * diff * diff)
        })
        .sum();
    sum / records.len() as f64
}

/// The serial program.
pub fn serial(run: &Run) -> Result<Outcome> {
    let (records, vocab) = records(run);
    ensure!(!records.is_empty(), "no co-occurrence records");
    let (dim, lr) = run.setting((DIM, LR));
    let mut w: Vec<Vec<f32>> = (0..vocab).map(|r| init_row(run.seed, 0, r)).collect();
    let mut c: Vec<Vec<f32>> = (0..vocab).map(|r| init_row(run.seed, 1, r)).collect();
    let mut bw: Vec<f32> = vec![0.0; vocab];
    let mut bc: Vec<f32> = vec![0.0; vocab];

    let epochs = run.epochs_or(10);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        for k in 0..records.len() {
            // zoo body begin: train
            let t = &records[k];
            let (i, j) = (t.i as usize, t.j as usize);
            let fx = weight(t.x);
            let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
            let g = lr * fx * diff;
            for d in 0..dim {
                let (wa, cb) = (w[i][d], c[j][d]);
                w[i][d] -= g * cb;
                c[j][d] -= g * wa;
            }
            bw[i] -= g;
            bc[j] -= g;
            // zoo body end: train
        }
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    let value = loss(&records, &w, &c, &bw, &bc);
    Ok(serial_outcome(
        NAME,
        epochs,
        records.len(),
        &clock,
        "trained_loss",
        value,
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let (records, vocab) = records(run);
    ensure!(!records.is_empty(), "no co-occurrence records");
    let records: DVector<Cooc> = DVector::from_vec(records)?;
    let (dim, lr) = run.setting((DIM, LR));
    let w: DVector<Vec<f32>> = DVector::from_fn(vocab, |r| init_row(run.seed, 0, r))?;
    let c: DVector<Vec<f32>> = DVector::from_fn(vocab, |r| init_row(run.seed, 1, r))?;
    let bw: DVector<f32> = DVector::from_vec(vec![0.0; vocab])?;
    let bc: DVector<f32> = DVector::from_vec(vec![0.0; vocab])?;

    let epochs = run.epochs_or(10);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        async_for!(
            0..records.len(),
            |k| {
                // zoo body begin: train
                let t = &records[k];
                let (i, j) = (t.i as usize, t.j as usize);
                let fx = weight(t.x);
                let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
                let g = lr * fx * diff;
                for d in 0..dim {
                    let (wa, cb) = (w[i][d], c[j][d]);
                    w[i][d] -= g * cb;
                    c[j][d] -= g * wa;
                }
                bw[i] -= g;
                bc[j] -= g;
                // zoo body end: train
            },
            // Runs of at most 16 updates of one word against one block of contexts: the
            // trained model then matches the serial program's (see the module's docs).
            Opts::new().threads(run.threads).interleave(16)
        )?;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let records = records.to_vec()?;
    let value = loss(
        &records,
        &w.to_vec()?,
        &c.to_vec()?,
        &bw.to_vec()?,
        &bc.to_vec()?,
    );
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        records.len(),
        &clock,
        "trained_loss",
        value,
    ))
}
