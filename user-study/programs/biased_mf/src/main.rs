//! Biased matrix factorisation (Koren's "SVD" of the Netflix prize), trained by SGD.
//!
//! A rating is predicted as `mu + bu[u] + bi[i] + p[u]·q[i]`; each rating updates the
//! user's and the item's factor rows and bias terms. The data are synthetic ratings with
//! power-law user and item popularity (300,000 ratings, 10,000 users, 2,000 items) drawn
//! from a hidden low-rank model. Defaults: 16 factors, learning rate 0.01, L2 weight 0.02,
//! 10 epochs. Prints the time of every epoch and the training RMSE at the end.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FACTORS: usize = 16;
const LR: f32 = 0.01;
const REG: f32 = 0.02;

const USAGE: &str =
    "usage: study-biased-mf [--epochs N] [--seed S] [--factors F] [--lr X] [--reg X]";

/// The command-line settings.
struct Args {
    epochs: usize,
    seed: u64,
    factors: usize,
    lr: f32,
    reg: f32,
}

/// Parses `--flag value` pairs from the command line.
fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        epochs: 10,
        seed: 1,
        factors: FACTORS,
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
            "--factors" => args.factors = parse(&flag, &value)?,
            "--lr" => args.lr = parse(&flag, &value)?,
            "--reg" => args.reg = parse(&flag, &value)?,
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    if args.epochs == 0 || args.factors == 0 {
        return Err("--epochs and --factors must be at least 1".to_string());
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

/// One rating.
#[derive(Clone, Copy, Debug)]
struct Rating {
    user: u32,
    item: u32,
    rating: f32,
}

/// A ratings data set: the ratings, and the numbers of users and items.
struct Ratings {
    ratings: Vec<Rating>,
    users: usize,
    items: usize,
}

/// A standard normal deviate (Box-Muller).
fn gaussian(rng: &mut impl Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // in (0, 1]
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A random generator for stream `stream` of `seed` (independent streams for the data and
/// the initial parameters).
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

/// A random permutation of `0..n` (Fisher-Yates).
fn permutation(n: usize, rng: &mut impl Rng) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        p.swap(i, rng.gen_range(0..=i));
    }
    p
}

/// Rank of the hidden model behind the synthetic ratings.
const HIDDEN_RANK: usize = 8;

/// Synthetic ratings: users and items drawn with power-law popularity (which ids are
/// popular is a random permutation); a rating is `3 + b_u + b_i + p_u·q_i + noise` from a
/// hidden model of rank 8 with Gaussian noise (σ = 0.3), clipped to `[1, 5]`.
fn synthetic_ratings(users: usize, items: usize, ratings: usize, seed: u64) -> Ratings {
    let (users, items) = (users.max(1), items.max(1));
    let mut rng = rng_for(seed, 1);
    let factor_sd = 0.53; // p·q has sd ≈ sqrt(8) · 0.53² ≈ 0.8
    let mut factors = |n: usize, bias_sd: f64| -> Vec<(f64, [f64; HIDDEN_RANK])> {
        (0..n)
            .map(|_| {
                let bias = bias_sd * gaussian(&mut rng);
                let mut f = [0.0; HIDDEN_RANK];
                f.iter_mut()
                    .for_each(|x| *x = factor_sd * gaussian(&mut rng));
                (bias, f)
            })
            .collect()
    };
    let p = factors(users, 0.4);
    let q = factors(items, 0.5);
    let user_of_rank = permutation(users, &mut rng);
    let item_of_rank = permutation(items, &mut rng);
    let user_pop = Zipf::new(users, 0.6);
    let item_pop = Zipf::new(items, 0.8);
    let ratings = (0..ratings)
        .map(|_| {
            let user = user_of_rank[user_pop.sample(&mut rng)];
            let item = item_of_rank[item_pop.sample(&mut rng)];
            let (bu, pu) = &p[user as usize];
            let (bi, qi) = &q[item as usize];
            let dot: f64 = pu.iter().zip(qi).map(|(a, b)| a * b).sum();
            let value = 3.0 + bu + bi + dot + 0.3 * gaussian(&mut rng);
            Rating {
                user,
                item,
                rating: value.clamp(1.0, 5.0) as f32,
            }
        })
        .collect();
    Ratings {
        ratings,
        users,
        items,
    }
}

// ---------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------

/// A factor row's initial values: `len` values in `[0.5, 1.5) · scale`, seeded per table
/// and row.
fn init_row(seed: u64, table: u64, row: usize, len: usize, scale: f32) -> Vec<f32> {
    let stream = (table << 40) ^ (row as u64) ^ 0x5eed_0000_0000_0000;
    let mut rng = rng_for(seed, stream);
    (0..len).map(|_| scale * (0.5 + rng.gen::<f32>())).collect()
}

/// The dot product of two rows, summed in eight lanes.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for ((s, &p), &q) in acc.iter_mut().zip(x).zip(y) {
            *s += p * q;
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ar.iter().zip(br) {
        sum += x * y;
    }
    sum
}

/// RMSE of the model on `ratings`.
fn train_rmse(
    ratings: &[Rating],
    mu: f32,
    p: &[Vec<f32>],
    q: &[Vec<f32>],
    bu: &[f32],
    bi: &[f32],
) -> f64 {
    let sse: f64 = ratings
        .iter()
        .map(|r| {
            let (u, i) = (r.user as usize, r.item as usize);
            let pred = mu + bu[u] + bi[i] + dot(&p[u], &q[i]);
            f64::from(r.rating - pred).powi(2)
        })
        .sum();
    (sse / ratings.len().max(1) as f64).sqrt()
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

    let all = synthetic_ratings(10_000, 2_000, 300_000, args.seed);
    let ratings: Vec<Rating> = all.ratings;
    let mu = ratings.iter().map(|r| r.rating).sum::<f32>() / ratings.len() as f32;
    let (factors, lr, reg) = (args.factors, args.lr, args.reg);
    let mut p: Vec<Vec<f32>> = (0..all.users)
        .map(|u| init_row(args.seed, 0, u, factors, 0.1))
        .collect();
    let mut q: Vec<Vec<f32>> = (0..all.items)
        .map(|i| init_row(args.seed, 1, i, factors, 0.1))
        .collect();
    let mut bu: Vec<f32> = vec![0.0; all.users];
    let mut bi: Vec<f32> = vec![0.0; all.items];

    let epochs = args.epochs;
    let mut epoch_secs = Vec::with_capacity(epochs);
    for epoch in 1..=epochs {
        let start = Instant::now();
        for k in 0..ratings.len() {
            let r = &ratings[k];
            let (u, i) = (r.user as usize, r.item as usize);
            let mut pred = mu + bu[u] + bi[i];
            for f in 0..factors {
                pred += p[u][f] * q[i][f];
            }
            let err = r.rating - pred;
            bu[u] += lr * (err - reg * bu[u]);
            bi[i] += lr * (err - reg * bi[i]);
            for f in 0..factors {
                let (pu, qi) = (p[u][f], q[i][f]);
                p[u][f] += lr * (err * qi - reg * pu);
                q[i][f] += lr * (err * pu - reg * qi);
            }
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        println!("epoch {epoch}: {secs:.4} s");
    }
    let rmse = train_rmse(&ratings, mu, &p, &q, &bu, &bi);
    let secs_per_epoch = epoch_secs.iter().sum::<f64>() / epoch_secs.len() as f64;
    println!("secs_per_epoch: {secs_per_epoch:.6}");
    println!("train_rmse: {rmse}");
}
