//! Sparse logistic regression over text documents, trained by plain SGD.
//!
//! A document's score is the bias plus the weights of its tokens (bag of words, a token
//! counted as often as it occurs, scaled by `1/sqrt(length)`); each document updates the
//! bias and the weight of each of its tokens. The data are synthetic: 10,000 documents of
//! 20-100 tokens over a 20,000-word Zipf vocabulary, labelled by a hidden linear model in
//! which the 20 most frequent words weigh nothing. Defaults: learning rate 0.02, 10 epochs.
//! Prints the time of every epoch and the mean log loss of the last epoch.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const LR: f32 = 0.02;
const REG: f32 = 0.0001;
const STOP_WORDS: usize = 20;

const USAGE: &str = "usage: study-logreg [--epochs N] [--seed S] [--lr X] [--reg X]";

/// The command-line settings.
struct Args {
    epochs: usize,
    seed: u64,
    lr: f32,
    reg: f32,
}

/// Parses `--flag value` pairs from the command line.
fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        epochs: 10,
        seed: 1,
        lr: LR,
        reg: REG,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_string());
        }
        let value = it.next().ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--epochs" => args.epochs = parse(&flag, &value)?,
            "--seed" => args.seed = parse(&flag, &value)?,
            "--lr" => args.lr = parse(&flag, &value)?,
            "--reg" => args.reg = parse(&flag, &value)?,
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    if args.epochs == 0 {
        return Err("--epochs must be at least 1".to_string());
    }
    Ok(args)
}

/// Parses the value of `flag`.
fn parse<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: cannot parse `{value}`"))
}

// ---------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------

/// One document: its tokens, in order, and its label (0 or 1).
#[derive(Clone, Debug)]
struct Doc {
    tokens: Vec<String>,
    label: f32,
}

/// A standard normal deviate (Box-Muller).
fn gaussian(rng: &mut impl Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // in (0, 1]
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A random generator for stream `stream` of `seed`.
fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Samples ranks `0..n` with probability proportional to `1 / (rank + 1)^exponent`.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = (0..n.max(1))
            .map(|r| {
                total += 1.0 / ((r + 1) as f64).powf(exponent);
                total
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= total);
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Synthetic documents: Zipf-distributed words, labels from a hidden linear model.
fn synthetic_documents(words: usize, n: usize, seed: u64) -> Vec<Doc> {
    let mut rng = rng_for(seed, 12);
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

/// The vocabulary of `docs`: each word once, in order of first occurrence.
fn vocabulary(docs: &[Doc]) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut vocab = Vec::new();
    for t in docs.iter().flat_map(|d| &d.tokens) {
        if seen.insert(t) {
            vocab.push(t.clone());
        }
    }
    vocab
}

#[allow(clippy::needless_range_loop)]
fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };

    let docs = synthetic_documents(20_000, 10_000, args.seed);
    let vocab = vocabulary(&docs);
    let (lr, reg) = (args.lr, args.reg);
    let mut weights: HashMap<String, f32> = HashMap::new();
    for word in &vocab {
        weights.insert(word.clone(), 0.0);
    }
    let mut bias: Vec<f32> = vec![0.0];

    let epochs = args.epochs;
    // The metric: the mean log loss of the last epoch, each document's loss taken just
    // before its update.
    let mut last_loss = 0.0f64;
    let mut epoch_secs = Vec::with_capacity(epochs);
    for epoch in 1..=epochs {
        let start = Instant::now();
        let mut epoch_loss = 0.0f64;
        for k in 0..docs.len() {
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
        }
        last_loss = epoch_loss;
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        println!("epoch {epoch}: {secs:.4} s");
    }
    let loss = last_loss / docs.len() as f64;
    let secs_per_epoch = epoch_secs.iter().sum::<f64>() / epoch_secs.len() as f64;
    println!("secs_per_epoch: {secs_per_epoch:.6}");
    println!("epoch_log_loss: {loss}");
}
