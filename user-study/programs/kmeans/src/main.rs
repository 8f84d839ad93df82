//! Mini-batch k-means (Sculley, "Web-scale k-means clustering", WWW 2010).
//!
//! For every mini-batch, each point's nearest centre is found (with the centres as the
//! mini-batch found them), then each point pulls its centre towards itself with the step
//! `1/count`, the centre's count of points seen so far. An epoch is a pass over all
//! mini-batches; the centres start from greedy k-means++ seeding. The data are synthetic
//! Gaussian blobs: 100,000 points in 16 dimensions around 16 centres, k = 16, mini-batches
//! of 1,000, 10 epochs. Prints the time of every epoch and the final mean squared distance.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const K: usize = 16;
const DIM: usize = 16;
const POINTS: usize = 100_000;
const MINIBATCH: usize = 1_000;

const USAGE: &str = "usage: study-kmeans [--epochs N] [--seed S] [--k K] [--dim D]";

/// The command-line settings.
struct Args {
    epochs: usize,
    seed: u64,
    k: usize,
    dim: usize,
}

/// Parses `--flag value` pairs from the command line.
fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        epochs: 10,
        seed: 1,
        k: K,
        dim: DIM,
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
            "--k" => args.k = parse(&flag, &value)?,
            "--dim" => args.dim = parse(&flag, &value)?,
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    if args.epochs == 0 || args.k == 0 || args.dim == 0 {
        return Err("--epochs, --k and --dim must be at least 1".to_string());
    }
    if args.k > POINTS {
        return Err("fewer points than centres".to_string());
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

/// A standard normal deviate (Box-Muller).
fn gaussian(rng: &mut impl Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // in (0, 1]
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A random generator for stream `stream` of `seed` (independent streams for the data and
/// the seeding).
fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// `n` points in `dim` dimensions from `k` Gaussian blobs (σ = 1) whose centres are
/// uniform in `[-10, 10]^dim`; each point's blob is uniform.
fn blobs(n: usize, dim: usize, k: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = rng_for(seed, 7);
    let centres: Vec<Vec<f64>> = (0..k)
        .map(|_| (0..dim).map(|_| rng.gen_range(-10.0..10.0)).collect())
        .collect();
    (0..n)
        .map(|_| {
            let c = &centres[rng.gen_range(0..k)];
            c.iter().map(|&m| (m + gaussian(&mut rng)) as f32).collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------

/// Greedy k-means++ seeding (Arthur and Vassilvitskii, 2007, with scikit-learn's
/// `2 + ln k` local trials): the first centre is a uniform point; for each next one,
/// `2 + ln k` candidates are drawn with probability proportional to their squared
/// distance to the nearest centre so far, and the one leaving the smallest total is kept.
fn kmeans_pp(points: &[Vec<f32>], k: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = rng_for(seed, 8);
    let trials = 2 + (k as f64).ln() as usize;
    let mut centres = vec![points[rng.gen_range(0..points.len())].clone()];
    let mut nearest: Vec<f64> = points.iter().map(|x| sq_dist(x, &centres[0])).collect();
    while centres.len() < k {
        let total: f64 = nearest.iter().sum();
        let mut best: Option<(f64, usize, Vec<f64>)> = None;
        for _ in 0..trials {
            let mut u = rng.gen::<f64>() * total;
            let mut pick = points.len() - 1;
            for (i, &d) in nearest.iter().enumerate() {
                if u < d {
                    pick = i;
                    break;
                }
                u -= d;
            }
            let with: Vec<f64> = nearest
                .iter()
                .zip(points)
                .map(|(&d, x)| d.min(sq_dist(x, &points[pick])))
                .collect();
            let potential: f64 = with.iter().sum();
            if best.as_ref().is_none_or(|b| potential < b.0) {
                best = Some((potential, pick, with));
            }
        }
        let (_, pick, with) = best.expect("at least one trial");
        nearest = with;
        centres.push(points[pick].clone());
    }
    centres
}

/// The squared distance of two points (summed in `f64`).
fn sq_dist(a: &[f32], b: &[f32]) -> f64 {
    let mut sum = 0.0;
    for f in 0..a.len().min(b.len()) {
        let d = f64::from(a[f] - b[f]);
        sum += d * d;
    }
    sum
}

/// The mean squared distance of a point to its nearest centre.
fn inertia(points: &[Vec<f32>], centres: &[Vec<f32>]) -> f64 {
    let mut sum = 0.0;
    for x in points {
        let mut best = f64::INFINITY;
        for c in centres {
            best = best.min(sq_dist(x, c));
        }
        sum += best;
    }
    sum / points.len().max(1) as f64
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

    let (k, dim) = (args.k, args.dim);
    let points: Vec<Vec<f32>> = blobs(POINTS, dim, k, args.seed);
    let mut centres: Vec<Vec<f32>> = kmeans_pp(&points, k, args.seed);
    let mut counts: Vec<usize> = vec![0; k];

    let epochs = args.epochs;
    let mut epoch_secs = Vec::with_capacity(epochs);
    for epoch in 1..=epochs {
        let start = Instant::now();
        for batch in points.chunks(MINIBATCH) {
            let mut nearest = vec![0usize; batch.len()];
            for (j, x) in batch.iter().enumerate() {
                let mut best = f32::INFINITY;
                for c in 0..k {
                    let mut d2 = 0.0;
                    for f in 0..dim {
                        let diff = x[f] - centres[c][f];
                        d2 += diff * diff;
                    }
                    if d2 < best {
                        best = d2;
                        nearest[j] = c;
                    }
                }
            }
            for (j, x) in batch.iter().enumerate() {
                let c = nearest[j];
                counts[c] += 1;
                let eta = 1.0 / counts[c] as f32;
                for f in 0..dim {
                    centres[c][f] = (1.0 - eta) * centres[c][f] + eta * x[f];
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        println!("epoch {epoch}: {secs:.4} s");
    }
    let value = inertia(&points, &centres);
    let secs_per_epoch = epoch_secs.iter().sum::<f64>() / epoch_secs.len() as f64;
    println!("secs_per_epoch: {secs_per_epoch:.6}");
    println!("mean_sq_distance: {value}");
}
