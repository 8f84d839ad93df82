//! Sparse logistic regression over text, by plain SGD: a document's score is the bias plus
//! the weights of its tokens (bag of words, a token counted as often as it occurs, scaled
//! by `1/sqrt(length)`), and each document updates the bias and the weight of each of its
//! tokens.
//!
//! Shape: a map keyed by strings (`HashMap<String, f32>`, in the twin `DMap<String, f32>`)
//! of which a task writes a variable number of entries, a few of them (stop-word-like
//! tokens) in most tasks, plus a bias every task reads and writes, and the epoch's loss
//! summed into a local (`epoch_loss += ..`, a reduction in the twin). Every vocabulary
//! word is inserted with weight 0 before training, in both twins (a converted body cannot
//! add keys). The bias is a one-element `Vec` (`bias[0]`): the model parameter every task
//! reads, a DDS in the twin.
//!
//! Default: synthetic, 10,000 documents of 20-100 tokens over a 20,000-word vocabulary
//! drawn from a Zipf law of exponent 1 (the most frequent words are in nearly every
//! document), labels from a hidden linear model in which the 20 most frequent words weigh
//! nothing; learning rate 0.02, 10 epochs. `--data ../shared/data/brown/documents.tsv`
//! reads the Brown corpus (500 documents, `docid<TAB>tokens`, shuffled by the seed), the
//! label telling press (genres a-c, document ids `ca..`-`cc..`) from the rest.
//!
//! Metric: the mean log loss of the last epoch, each document's loss taken just before its
//! update (what SGD programs usually print per epoch). The loss of the final model would
//! be the other choice, but it depends on the last few documents the loop visits (the
//! bias and the stop words move with every document): rotating the serial loop's order
//! by 50 of 200 documents changes it by 1.2%, and a serializable run visits them in
//! another order; the epoch's mean loss varies by a tenth of that.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{ensure, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, gaussian, Zipf};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "logreg";
pub(super) const LR: f32 = 0.02;
pub(super) const REG: f32 = 0.0001;
const STOP_WORDS: usize = 20;

/// One document: its tokens, in order, and its label (0 or 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    /// The tokens.
    pub tokens: Vec<String>,
    /// 1 for the positive class, 0 otherwise.
    pub label: f32,
}

/// The documents (the file given, or the synthetic default) and their vocabulary, each
/// word once, in order of first occurrence.
pub(super) fn documents(run: &Run) -> Result<(Vec<Doc>, Vec<String>)> {
    let docs = match &run.data {
        Some(path) => load_documents(path, run.seed)?,
        None => synthetic_documents(run),
    };
    let mut seen: HashSet<&str> = HashSet::new();
    let mut vocab = Vec::new();
    for t in docs.iter().flat_map(|d| &d.tokens) {
        if seen.insert(t) {
            vocab.push(t.clone());
        }
    }
    Ok((docs, vocab))
}

/// Synthetic documents: Zipf-distributed words, labels from a hidden linear model.
fn synthetic_documents(run: &Run) -> Vec<Doc> {
    let words = run.scaled(20_000, 100);
    let n = run.scaled(10_000, 50);
    let mut rng = data::rng_for(run.seed, 12);
    let hidden: Vec<f64> = (0..words)
        .map(|r| {
            if r < STOP_WORDS {
                0.0
            } else {
                gaussian(&mut rng)
            }
        })
        .collect();
    let popularity = Zipf::new(words, 1.0);
    (0..n)
        .map(|_| {
            let len = rng.gen_range(20..=100usize);
            let ranks: Vec<usize> = (0..len).map(|_| popularity.sample(&mut rng)).collect();
            let score = ranks.iter().map(|&r| hidden[r]).sum::<f64>() / (len as f64).sqrt();
            let label = score + 0.5 * gaussian(&mut rng) > 0.0;
            Doc {
                tokens: ranks.iter().map(|r| format!("w{r}")).collect(),
                label: if label { 1.0 } else { 0.0 },
            }
        })
        .collect()
}

/// Reads `docid<TAB>tokens...` lines; the label is 1 for the Brown corpus's press genres
/// (the id's second letter `a`-`c`). The documents are shuffled by `seed` (the file is
/// sorted by genre).
fn load_documents(path: &Path, seed: u64) -> Result<Vec<Doc>> {
    let text = data::read_text(path)?;
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (id, tokens) = line
            .split_once('\t')
            .ok_or_else(|| data::LoadError::at(path, i + 1, "expected `docid<TAB>tokens`"))?;
        let genre = id.chars().nth(1).unwrap_or(' ');
        docs.push(Doc {
            tokens: tokens.split_whitespace().map(str::to_string).collect(),
            label: if ('a'..='c').contains(&genre) {
                1.0
            } else {
                0.0
            },
        });
    }
    ensure!(!docs.is_empty(), "{}: no documents", path.display());
    let mut rng = data::rng_for(seed, 13);
    for i in (1..docs.len()).rev() {
        docs.swap(i, rng.gen_range(0..=i));
    }
    Ok(docs)
}

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
    let weights: DMap<String, f32> = DMap::new()?;
    for word in &vocab {
        weights.insert(word.clone(), 0.0)?;
    }
    let bias: DVector<f32> = DVector::from_fn(1, |_| 0.0)?;

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
