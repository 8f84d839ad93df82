//! `logreg` with the declarations its diagnosis asks for: the serial program is the same,
//! and the strads-ap twin declares the hot tables relaxed (`weights`, a `DMap`, with
//! `DMap::relaxed`; the `bias` with `DVector::relaxed`), so that the planner leaves them
//! out and workers merge their updates as summed deltas after every group of tasks. The
//! rest of the body is unchanged (the epoch's loss is a reduction, exact in both).
//!
//! Shape, data and metric: those of [`logreg`](super::logreg).

use std::collections::HashMap;

use anyhow::{ensure, Result};
use strads_ap::prelude::*;

use super::logreg::{documents, Doc, LR, REG};
use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "logreg-relaxed";

/// The serial program.
pub fn serial(run: &Run) -> Result<Outcome> {
    let (docs, vocab) = documents(run)?;
    ensure!(!docs.is_empty(), "no documents");
    let (lr, reg) = run.setting((LR, REG));
    let mut weights: HashMap<String, f32> = HashMap::new();
    for word in &vocab {
        weights.insert(word.clone(), 0.0);
    }
    let mut bias: Vec<f32> = vec![0.0];

    let epochs = run.epochs_or(10);
    let mut last_loss = 0.0f64;
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        let mut epoch_loss = 0.0f64;
        for k in 0..docs.len() {
            // zoo body begin: train
            let d = &docs[k];
            let x = 1.0 / (d.tokens.len() as f32).sqrt();
            let mut z = bias[0];
            for t in &d.tokens {
                z += weights[t] * x;
            }
            let p = 1.0 / (1.0 + (-z).exp());
            let g = d.label - p;
            let margin = if d.label > 0.5 { z } else { -z };
            epoch_loss += f64::from((-margin).exp().ln_1p());
            bias[0] += lr * g;
            for t in &d.tokens {
                let w = weights.get_mut(t).unwrap();
                *w += lr * (g * x - reg * *w);
            }
            // zoo body end: train
        }
        last_loss = epoch_loss;
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    let loss = last_loss / docs.len() as f64;
    Ok(serial_outcome(
        NAME,
        epochs,
        docs.len(),
        &clock,
        "epoch_log_loss",
        loss,
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let (all, vocab) = documents(run)?;
    ensure!(!all.is_empty(), "no documents");
    let docs: DVector<Doc> = DVector::from_vec(all)?;
    let (lr, reg) = run.setting((LR, REG));
    // The declarations the diagnosis of `logreg` asks for.
    let weights: DMap<String, f32> = DMap::new()?.relaxed(Relaxed::Sum);
    for word in &vocab {
        weights.insert(word.clone(), 0.0)?;
    }
    let bias: DVector<f32> = DVector::from_fn(1, |_| 0.0)?.relaxed(Relaxed::Sum);

    let epochs = run.epochs_or(10);
    let mut last_loss = 0.0f64;
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        let mut epoch_loss = 0.0f64;
        async_for!(
            0..docs.len(),
            |k| {
                // zoo body begin: train
                let d = &docs[k];
                let x = 1.0 / (d.tokens.len() as f32).sqrt();
                let mut z = bias[0];
                for t in &d.tokens {
                    z += weights[t] * x;
                }
                let p = 1.0 / (1.0 + (-z).exp());
                let g = d.label - p;
                let margin = if d.label > 0.5 { z } else { -z };
                epoch_loss += f64::from((-margin).exp().ln_1p());
                bias[0] += lr * g;
                for t in &d.tokens {
                    let w = weights.get_mut(t).unwrap();
                    *w += lr * (g * x - reg * *w);
                }
                // zoo body end: train
            },
            Opts::new().threads(run.threads)
        )?;
        last_loss = epoch_loss;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let loss = last_loss / docs.len() as f64;
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        docs.len(),
        &clock,
        "epoch_log_loss",
        loss,
    ))
}
