//! Multinomial logistic (softmax) regression, serial: the twin of `mlr`.
//!
//! Samples and weights live in `Vec`s; every epoch runs mini-batch SGD over the training
//! samples in order with `for batch in train.chunks(minibatch) { BODY }`. The weights are
//! one row per class (`features` weights, then the bias). The `mlr` binary is the same
//! program converted to strads-ap, with the same `BODY` (a test checks it).
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin mlr-serial -- --epochs 5
//! ```

use std::time::Instant;

use anyhow::{ensure, Result};
use clap::Parser;
use strads_ap::check_finite;
use strads_ap_examples::cli::MlrArgs;
use strads_ap_examples::metrics::{correct, softmax_loss};
use strads_ap_examples::model::{add_scaled, score, softmax};
use strads_ap_examples::report::{mean, print_json_line, progress, MlrResult, SERIAL};
use strads_ap_examples::{data, idx};

fn main() -> Result<()> {
    let args = MlrArgs::parse();
    let seed = args.common.seed;
    let (minibatch, lr) = (args.minibatch, args.lr);
    ensure!(minibatch > 0, "--minibatch must be at least 1");

    // Data: an IDX directory (Fashion-MNIST, with its own split), a libsvm file or the
    // synthetic generator (then the seeded 90/10 split).
    let (all, given_test) = match &args.common.data {
        Some(path) if idx::is_idx_dir(path) => {
            let (train, test) = idx::load_idx_dir(path)?;
            (train, Some(test))
        }
        Some(path) => (data::load_libsvm(path)?, None),
        None => (
            data::synthetic_samples(args.samples, args.features, args.classes, seed),
            None,
        ),
    };
    let (classes, dims) = (all.classes, all.features + 1);
    let (train, test) = match given_test {
        Some(test) => (all.samples, test),
        None => data::split_train_test(all.samples, seed),
    };
    ensure!(!train.is_empty(), "no training samples");
    eprintln!(
        "mlr [{SERIAL}]: {} training and {} test samples, {} features, {classes} classes",
        train.len(),
        test.len(),
        dims - 1
    );

    // Parameters: one row per class, the bias last.
    let mut w: Vec<Vec<f32>> = vec![vec![0.0; dims]; classes];

    let mut epoch_secs = Vec::new();
    for epoch in 1..=args.common.epochs {
        let start = Instant::now();
        for batch in train.chunks(minibatch) {
            // strads-ap: body begin
            let mut grad = vec![vec![0.0f32; dims]; classes];
            let mut p = vec![0.0f32; classes];
            for s in batch {
                for (c, pc) in p.iter_mut().enumerate() {
                    *pc = score(&w[c], &s.x);
                }
                softmax(&mut p);
                for (c, gc) in grad.iter_mut().enumerate() {
                    let target = if c == s.label as usize { 1.0 } else { 0.0 };
                    add_scaled(gc, p[c] - target, &s.x);
                }
            }
            let step = lr / batch.len() as f32;
            for (c, gc) in grad.iter().enumerate() {
                let wc = &mut w[c];
                for (x, g) in wc.iter_mut().zip(gc) {
                    *x -= step * g;
                }
            }
            // strads-ap: body end
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        let loss = train.iter().map(|s| softmax_loss(&w, s)).sum::<f64>() / train.len() as f64;
        let loss = check_finite("train_loss", loss, epoch)?;
        progress("mlr", SERIAL, epoch, "train_loss", loss, secs);
    }

    let train_loss = train.iter().map(|s| softmax_loss(&w, s)).sum::<f64>() / train.len() as f64;
    let train_loss = check_finite("train_loss", train_loss, args.common.epochs)?;
    let right: usize = test.iter().map(|s| correct(&w, s)).sum();
    print_json_line(&MlrResult {
        app: "mlr".into(),
        implementation: SERIAL.into(),
        ranks: 1,
        threads: 1,
        epochs: args.common.epochs,
        secs_per_epoch: mean(&epoch_secs),
        train_loss,
        test_accuracy: right as f64 / test.len().max(1) as f64,
        setup_secs: 0.0,
        sync: None,
    });
    Ok(())
}
