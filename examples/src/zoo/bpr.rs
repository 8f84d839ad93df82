//! Bayesian personalised ranking (BPR-MF) on implicit feedback: for every observed
//! (user, item) pair, an item the user did not pick is drawn afresh each epoch, and SGD
//! pushes the user's score of the observed item above that of the drawn one.
//!
//! Shape: accesses that change every call, through a table made afresh every epoch. The
//! epoch's negative items are a new `Vec` in the serial program and a new `DVector` in the
//! twin (a large `Vec` cannot be a captured plain value), so no plan made at one call can
//! serve the next: the twin runs with element locks after its first call (see
//! `PlanKey::renews`), and its diagnosis says so.
//!
//! Default: the (user, item) pairs of synthetic power-law ratings (100,000; 5,000 users,
//! 1,000 items), 16 factors, lr 0.05, reg 0.01, 10 epochs; `--data` reads MovieLens
//! `user item rating` lines (every rating counts as an observation). Negatives are drawn
//! uniformly per epoch from a stream seeded by the seed and the epoch, the same in both
//! twins. Metric: the share of 20,000 fixed (user, observed, other) triples that the model
//! ranks right (a sampled AUC), after the last epoch.

use anyhow::{ensure, Result};
use rand::Rng;
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, rng_for, Rating};
use crate::model::dot;
use crate::report::{SERIAL, STRADS};

const NAME: &str = "bpr";
const FACTORS: usize = 16;
const LR: f32 = 0.05;
const REG: f32 = 0.01;
/// Triples of the sampled AUC.
const AUC_TRIPLES: usize = 20_000;

/// Observed (user, item) pairs, and the numbers of users and items.
struct Observed {
    pairs: Vec<(u32, u32)>,
    users: usize,
    items: usize,
}

/// The observed pairs of a run.
fn observed(run: &Run) -> Result<Observed> {
    let all = match &run.data {
        Some(path) => data::load_ratings(path)?,
        None => data::synthetic_ratings(
            run.scaled(5_000, 50),
            run.scaled(1_000, 20),
            run.scaled(100_000, 1_000),
            run.seed,
        ),
    };
    ensure!(!all.ratings.is_empty(), "no ratings");
    let pairs = all
        .ratings
        .iter()
        .map(|r: &Rating| (r.user, r.item))
        .collect();
    Ok(Observed {
        pairs,
        users: all.users,
        items: all.items,
    })
}

/// This epoch's negative item for every observed pair.
fn negatives(n: usize, items: usize, seed: u64, epoch: usize) -> Vec<u32> {
    let mut rng = rng_for(seed, 1_000 + epoch as u64);
    (0..n).map(|_| rng.gen_range(0..items) as u32).collect()
}

/// A factor row's initial values: small, seeded per table and row.
fn init_factors(seed: u64, table: u64, row: usize) -> Vec<f32> {
    crate::model::init_row(seed, table, row, FACTORS, 0.1)
}

/// The serial program.
#[allow(clippy::needless_range_loop)]
pub fn serial(run: &Run) -> Result<Outcome> {
    let Observed {
        pairs,
        users,
        items,
    } = observed(run)?;
    let (factors, lr, reg) = run.setting((FACTORS, LR, REG));
    let mut p: Vec<Vec<f32>> = (0..users).map(|u| init_factors(run.seed, 0, u)).collect();
    let mut q: Vec<Vec<f32>> = (0..items).map(|i| init_factors(run.seed, 1, i)).collect();

    let epochs = run.epochs_or(10);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let negs: Vec<u32> = negatives(pairs.len(), items, run.seed, epoch);
        let start = clock.start();
        for k in 0..pairs.len() {
            // zoo body begin: train
            let (u, i) = (pairs[k].0 as usize, pairs[k].1 as usize);
            let j = negs[k] as usize;
            let mut x = 0.0;
            for f in 0..factors {
                x += p[u][f] * (q[i][f] - q[j][f]);
            }
            let s = 1.0 / (1.0 + x.exp());
            for f in 0..factors {
                let (pu, qi, qj) = (p[u][f], q[i][f], q[j][f]);
                p[u][f] += lr * (s * (qi - qj) - reg * pu);
                q[i][f] += lr * (s * pu - reg * qi);
                q[j][f] += lr * (-s * pu - reg * qj);
            }
            // zoo body end: train
        }
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    let auc = sampled_auc(&pairs, items, run.seed, &p, &q);
    Ok(serial_outcome(
        NAME,
        epochs,
        pairs.len(),
        &clock,
        "sampled_auc",
        auc,
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let Observed {
        pairs,
        users,
        items,
    } = observed(run)?;
    let n = pairs.len();
    let pairs: DVector<(u32, u32)> = DVector::from_vec(pairs)?;
    let (factors, lr, reg) = run.setting((FACTORS, LR, REG));
    let p: DVector<Vec<f32>> = DVector::from_fn(users, |u| init_factors(run.seed, 0, u))?;
    let q: DVector<Vec<f32>> = DVector::from_fn(items, |i| init_factors(run.seed, 1, i))?;

    let epochs = run.epochs_or(10);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let negs: DVector<u32> = DVector::from_vec(negatives(n, items, run.seed, epoch))?;
        let start = clock.start();
        async_for!(
            0..pairs.len(),
            |k| {
                // zoo body begin: train
                let (u, i) = (pairs[k].0 as usize, pairs[k].1 as usize);
                let j = negs[k] as usize;
                let mut x = 0.0;
                for f in 0..factors {
                    x += p[u][f] * (q[i][f] - q[j][f]);
                }
                let s = 1.0 / (1.0 + x.exp());
                for f in 0..factors {
                    let (pu, qi, qj) = (p[u][f], q[i][f], q[j][f]);
                    p[u][f] += lr * (s * (qi - qj) - reg * pu);
                    q[i][f] += lr * (s * pu - reg * qi);
                    q[j][f] += lr * (-s * pu - reg * qj);
                }
                // zoo body end: train
            },
            Opts::new().threads(run.threads)
        )?;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let (pairs, p, q) = (pairs.to_vec()?, p.to_vec()?, q.to_vec()?);
    let auc = sampled_auc(&pairs, items, run.seed, &p, &q);
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        pairs.len(),
        &clock,
        "sampled_auc",
        auc,
    ))
}

/// The share of fixed (user, observed item, random item) triples the model ranks right
/// (ties count half).
fn sampled_auc(
    pairs: &[(u32, u32)],
    items: usize,
    seed: u64,
    p: &[Vec<f32>],
    q: &[Vec<f32>],
) -> f64 {
    let mut rng = rng_for(seed, 999);
    let mut right = 0.0;
    for _ in 0..AUC_TRIPLES {
        let (u, i) = pairs[rng.gen_range(0..pairs.len())];
        let j = rng.gen_range(0..items);
        let (pos, neg) = (
            dot(&p[u as usize], &q[i as usize]),
            dot(&p[u as usize], &q[j]),
        );
        right += match pos.partial_cmp(&neg) {
            Some(std::cmp::Ordering::Greater) => 1.0,
            Some(std::cmp::Ordering::Equal) => 0.5,
            _ => 0.0,
        };
    }
    right / AUC_TRIPLES as f64
}
