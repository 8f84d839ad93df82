//! PageRank by Gauss-Seidel sweeps.
//!
//! Each node's rank is recomputed in place from its in-neighbours' current ranks,
//! `rank[v] = (1 - d)/n + d · Σ rank[u] / out_degree[u]`, nodes in order, so later nodes
//! of a sweep already see the new ranks of earlier ones. The graph is synthetic: 500,000
//! nodes, each with 1-10 out-edges whose targets are drawn from a Zipf law of exponent 0.8
//! (so in-degrees follow a power law). Damping 0.85, 20 sweeps. Prints the time of every
//! sweep and, at the end, the rank mass of the 10 highest-ranked nodes.

use std::collections::HashMap;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const NODES: usize = 500_000;
const DAMPING: f32 = 0.85;

const USAGE: &str = "usage: study-pagerank [--epochs N] [--seed S]";

/// The command-line settings.
struct Args {
    epochs: usize,
    seed: u64,
}

/// Parses `--flag value` pairs from the command line.
fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        epochs: 20,
        seed: 1,
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

/// A directed graph: its node count and its edges `(source, target)`.
struct Graph {
    nodes: usize,
    edges: Vec<(u32, u32)>,
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

/// A power-law graph: every node has 1-10 out-edges to Zipf-popular targets.
fn synthetic_graph(nodes: usize, seed: u64) -> Graph {
    let mut rng = rng_for(seed, 14);
    let popularity = Zipf::new(nodes, 0.8);
    let mut edges = Vec::new();
    for u in 0..nodes as u32 {
        for _ in 0..rng.gen_range(1..=10) {
            let mut v = popularity.sample(&mut rng) as u32;
            if v == u {
                v = (v + 1) % nodes as u32;
            }
            edges.push((u, v));
        }
    }
    Graph { nodes, edges }
}

/// The sum of the `k` largest ranks.
fn top_mass(rank: &[f32], k: usize) -> f64 {
    let mut sorted: Vec<f32> = rank.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted.iter().take(k).map(|&r| f64::from(r)).sum()
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };

    let g = synthetic_graph(NODES, args.seed);
    let n = g.nodes;
    let mut in_nbrs: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut out_degree: Vec<u32> = vec![0; n];
    for &(u, v) in &g.edges {
        in_nbrs.entry(v).or_default().push(u);
        out_degree[u as usize] += 1;
    }
    let mut rank: Vec<f32> = vec![1.0 / n as f32; n];
    let (damping, teleport) = (DAMPING, (1.0 - DAMPING) / n as f32);

    let epochs = args.epochs;
    let mut epoch_secs = Vec::with_capacity(epochs);
    for epoch in 1..=epochs {
        let start = Instant::now();
        for v in 0..n {
            let mut sum = 0.0;
            if let Some(srcs) = in_nbrs.get(&(v as u32)) {
                for &u in srcs {
                    sum += rank[u as usize] / out_degree[u as usize] as f32;
                }
            }
            rank[v] = teleport + damping * sum;
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        println!("epoch {epoch}: {secs:.4} s");
    }
    let secs_per_epoch = epoch_secs.iter().sum::<f64>() / epoch_secs.len() as f64;
    println!("secs_per_epoch: {secs_per_epoch:.6}");
    println!("top10_rank_mass: {}", top_mass(&rank, 10));
}
