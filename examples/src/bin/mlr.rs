//! Multinomial logistic (softmax) regression with strads-ap: the twin of `mlr-serial`.
//!
//! The serial program with `DVector` for `Vec` and `sync_for!` for the mini-batch `for`;
//! the loop body is unchanged. `sync_for!` runs mini-batches data-parallel on every core
//! and merges the workers' weight updates (`--sync hybrid`, the default: after every
//! mini-batch; `--sync bsp`: after every step of one mini-batch per worker). The weights
//! merge by summing the workers' deltas, so every mini-batch's step counts as it does in
//! the serial program.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin mlr -- --epochs 5 --sync bsp
//! ```

use anyhow::{ensure, Result};
use clap::Parser;
use strads_ap::check_finite;
use strads_ap::prelude::*;
use strads_ap_examples::cli::MlrArgs;
use strads_ap_examples::metrics::{correct, softmax_loss};
use strads_ap_examples::model::{add_scaled, score, softmax};
use strads_ap_examples::report::{
    print_json_line, print_loop_stats, progress, EpochClock, MlrResult, STRADS,
};
use strads_ap_examples::{data, idx};

fn main() -> Result<()> {
    let args = MlrArgs::parse();
    let threads = args.common.threads();
    // The job the launcher describes (a world of one without it), with our thread count.
    strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
    let seed = args.common.seed;
    let (minibatch, lr, mode) = (args.minibatch, args.lr, args.sync.mode());
    ensure!(minibatch > 0, "--minibatch must be at least 1");

    // Data: a libsvm file (read with strads-ap's parallel reader and the line parser the
    // serial twin uses, strads-ap's `formats::libsvm_line` with the loaders' limits) or
    // the synthetic generator, then the seeded 90/10 split.
    // An IDX directory (Fashion-MNIST) brings its own train/test split.
    let (all, given_test) = match &args.common.data {
        Some(path) if idx::is_idx_dir(path) => {
            let (train, test) = idx::load_idx_dir(path)?;
            (train, Some(test))
        }
        Some(path) => {
            let (raw, _) = ReadOptions::new()
                .comment_prefix("#")
                .read(path, data::parse_libsvm_line)?;
            let samples = data::remap_samples(raw.to_vec()?)
                .map_err(|message| data::LoadError::file(path, message))?;
            (samples, None)
        }
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
    let train: DVector<data::Sample> = DVector::from_vec(train)?;
    let test: DVector<data::Sample> = DVector::from_vec(test)?;
    eprintln!(
        "mlr [{STRADS}]: {} training and {} test samples, {} features, {classes} classes, \
         {threads} threads, sync {}",
        train.len(),
        test.len(),
        dims - 1,
        args.sync.name()
    );

    // Parameters: one row per class, the bias last. Workers' updates are summed.
    let w: DVector<Vec<f32>> =
        DVector::from_fn(classes, |_| vec![0.0; dims])?.aggregate_with(Aggregation::Sum);

    // Mean softmax loss and correct count over a DVector of samples, on a snapshot of w.
    let mean_loss = |set: &DVector<data::Sample>| -> Result<f64> {
        let wv = w.to_vec()?;
        let sum = set.map_reduce(|s| softmax_loss(&wv, s), |a, b| a + b)?;
        Ok(sum / set.len() as f64)
    };
    let accuracy = |set: &DVector<data::Sample>| -> Result<f64> {
        if set.is_empty() {
            return Ok(0.0);
        }
        let wv = w.to_vec()?;
        let right = set.map_reduce(|s| correct(&wv, s), |a, b| a + b)?;
        Ok(right as f64 / set.len() as f64)
    };

    let mut clock = EpochClock::new();
    for epoch in 1..=args.common.epochs {
        let start = clock.start();
        sync_for!(train, minibatch, mode, |batch| {
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
        })?;
        let secs = clock.stop(start, epoch);
        let train_loss = check_finite("train_loss", mean_loss(&train)?, epoch)?;
        progress("mlr", STRADS, epoch, "train_loss", train_loss, secs);
    }
    print_loop_stats();

    print_json_line(&MlrResult {
        app: "mlr".into(),
        implementation: STRADS.into(),
        ranks: strads_ap::world_size(),
        threads,
        epochs: args.common.epochs,
        secs_per_epoch: clock.secs_per_epoch(),
        train_loss: check_finite("train_loss", mean_loss(&train)?, args.common.epochs)?,
        test_accuracy: check_finite("test_accuracy", accuracy(&test)?, args.common.epochs)?,
        setup_secs: clock.setup_secs(),
        sync: Some(args.sync.name().into()),
    });
    // Leave the job cleanly (every rank; nothing in a world of one).
    strads_ap::finish()?;
    Ok(())
}
