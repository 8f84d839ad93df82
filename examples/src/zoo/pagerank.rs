//! PageRank by Gauss-Seidel sweeps: each node's rank is recomputed in place from its
//! in-neighbours' current ranks, `rank[v] = (1 - d)/n + d · Σ rank[u] / out_degree[u]`,
//! nodes in order, so later nodes of a sweep already see the new ranks of earlier ones.
//!
//! Shape: a graph as an adjacency map of in-neighbours (`HashMap<u32, Vec<u32>>`),
//! read-only; each task reads the ranks of a variable number of nodes (power-law
//! in-degrees: hubs are read by many tasks) and writes its own. The twin holds the lists
//! in a `DMap<u32, Vec<u32>>`. The guide's `DMultiMap<u32, u32>` serves as well since a
//! multimap's view in a loop body offers `get(&k)` and `[&k]` as the `HashMap` does;
//! before, the serial body did not compile against it (error E0599, met by two of the
//! user study's three participants).
//!
//! Default: synthetic, 500,000 nodes, each with 1-10 out-edges whose targets are drawn
//! from a Zipf law of exponent 0.8 (so in-degrees follow a power law and every node has an
//! out-edge), damping 0.85, 20 sweeps. `--data ../shared/data/kg/movielens-freebase.tsv`
//! reads the Freebase subgraph (`head relation tail` lines, a header line skipped) as a
//! directed graph head → tail (34,628 nodes; the rank of nodes without out-edges leaks,
//! as in the textbook formula). Metric: the rank mass of the 10 highest-ranked nodes after
//! the last sweep (the ranks sum to 1 when no rank leaks).
//!
//! Gauss-Seidel depends on the order of the sweep, and a serializable run sweeps in
//! another order than `0..n` (which here visits the hubs first), so the two converge at
//! different speeds to the same ranks: at the test's size (10,000 nodes, seeds 1-5) the
//! top-10 mass differs by 1.0-1.2% after 10 sweeps, 0.03-0.07% after 20 and 0.000% after
//! 50. The test runs the default 20.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{ensure, Result};
use rand::Rng;
use strads_ap::prelude::*;

use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::data::{self, Zipf};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "pagerank";
pub(super) const DAMPING: f32 = 0.85;

/// A directed graph: its node count and its edges `(source, target)`.
pub(super) struct Graph {
    pub nodes: usize,
    pub edges: Vec<(u32, u32)>,
}

/// The twins' in-neighbour lists and out-degrees.
pub(super) type TwinTables = (DMap<u32, Vec<u32>>, DVector<u32>);

impl Graph {
    /// The serial programs' tables: each node's in-neighbours, and each node's out-degree.
    pub(super) fn adjacency(&self) -> (HashMap<u32, Vec<u32>>, Vec<u32>) {
        let mut in_nbrs: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut out_degree: Vec<u32> = vec![0; self.nodes];
        for &(u, v) in &self.edges {
            in_nbrs.entry(v).or_default().push(u);
            out_degree[u as usize] += 1;
        }
        (in_nbrs, out_degree)
    }

    /// The twins' tables: the same, as DDSs. (`DMultiMap<u32, u32>` is the guide's
    /// replacement for `HashMap<u32, Vec<u32>>` and now serves as well; a `DMap` of the
    /// lists is what the zoo measured first.)
    pub(super) fn twin_tables(&self) -> Result<TwinTables> {
        let (lists, degrees) = self.adjacency();
        let mut pairs: Vec<(u32, Vec<u32>)> = lists.into_iter().collect();
        pairs.sort_unstable_by_key(|p| p.0);
        Ok((DMap::from_pairs(pairs)?, DVector::from_vec(degrees)?))
    }
}

/// The graph: the file given, or the synthetic default.
pub(super) fn graph(run: &Run) -> Result<Graph> {
    match &run.data {
        Some(path) => load_graph(path),
        None => Ok(synthetic_graph(run)),
    }
}

/// A seeded power-law graph: every node has 1-10 out-edges to Zipf-popular targets.
fn synthetic_graph(run: &Run) -> Graph {
    let nodes = run.scaled(500_000, 100);
    let mut rng = data::rng_for(run.seed, 14);
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

/// Reads `head relation tail` lines as edges head → tail, numbering the nodes in order of
/// first appearance.
fn load_graph(path: &Path) -> Result<Graph> {
    let text = crate::data::read_text(path)?;
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut edges = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (n == 0 && line.contains(':')) {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() < 3 {
            let message = "expected `head<TAB>relation<TAB>tail`";
            return Err(crate::data::LoadError::at(path, n + 1, message).into());
        }
        let mut id = |name| {
            let next = ids.len() as u32;
            *ids.entry(name).or_insert(next)
        };
        let (h, t) = (id(fields[0]), id(fields[2]));
        edges.push((h, t));
    }
    ensure!(!edges.is_empty(), "{}: no edges", path.display());
    Ok(Graph {
        nodes: ids.len(),
        edges,
    })
}

/// The serial program.
pub fn serial(run: &Run) -> Result<Outcome> {
    let g = graph(run)?;
    let n = g.nodes;
    let (in_nbrs, out_degree) = g.adjacency();
    let mut rank: Vec<f32> = vec![1.0 / n as f32; n];
    let (damping, teleport) = (DAMPING, (1.0 - DAMPING) / n as f32);

    let epochs = run.epochs_or(20);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        for v in 0..n {
            // zoo body begin: sweep
            let mut sum = 0.0;
            if let Some(srcs) = in_nbrs.get(&(v as u32)) {
                for &u in srcs {
                    sum += rank[u as usize] / out_degree[u as usize] as f32;
                }
            }
            rank[v] = teleport + damping * sum;
            // zoo body end: sweep
        }
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    Ok(serial_outcome(
        NAME,
        epochs,
        n,
        &clock,
        "top10_rank_mass",
        top_mass(&rank, 10),
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let g = graph(run)?;
    let n = g.nodes;
    let (in_nbrs, out_degree) = g.twin_tables()?;
    let rank: DVector<f32> = DVector::from_fn(n, |_| 1.0 / n as f32)?;
    let (damping, teleport) = (DAMPING, (1.0 - DAMPING) / n as f32);

    let epochs = run.epochs_or(20);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        async_for!(
            0..n,
            |v| {
                // zoo body begin: sweep
                let mut sum = 0.0;
                if let Some(srcs) = in_nbrs.get(&(v as u32)) {
                    for &u in srcs {
                        sum += rank[u as usize] / out_degree[u as usize] as f32;
                    }
                }
                rank[v] = teleport + damping * sum;
                // zoo body end: sweep
            },
            Opts::new().threads(run.threads)
        )?;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let rank = rank.to_vec()?;
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        n,
        &clock,
        "top10_rank_mass",
        top_mass(&rank, 10),
    ))
}

/// The sum of the `k` largest ranks.
pub(super) fn top_mass(rank: &[f32], k: usize) -> f64 {
    let mut sorted: Vec<f32> = rank.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted.iter().take(k).map(|&r| f64::from(r)).sum()
}
