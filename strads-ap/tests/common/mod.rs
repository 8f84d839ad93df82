//! Shared by the `async_for!` tests: random access patterns, the serializability check and
//! an in-process cluster of ranks.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strads_ap::prelude::*;
use strads_ap::Result;

/// One access of a task: (key, write?).
pub type Pattern = Vec<(u32, bool)>;

pub fn random_patterns(seed: u64, tasks: usize, keys: u32, hot: bool) -> Vec<Pattern> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..tasks)
        .map(|_| {
            let n = rng.gen_range(0..5);
            (0..n)
                .map(|_| {
                    // A skewed key distribution makes big components.
                    let key = if hot && rng.gen_bool(0.3) {
                        rng.gen_range(0..3)
                    } else {
                        rng.gen_range(0..keys)
                    };
                    (key, rng.gen_bool(0.5))
                })
                .collect()
        })
        .collect()
}

/// What the order-sensitive loop leaves: per key the tasks that appended to it, per task
/// the (key, appends seen) of its reads, and per task how often it ran.
pub type Trace = (Vec<Vec<u32>>, Vec<Vec<(u32, u32)>>, Vec<u32>);

/// Runs the order-sensitive body over `patterns` on `keys` elements with `threads`
/// workers (per rank): each task appends its index to every element it writes and notes,
/// for every element it reads, how many appends it saw.
pub fn run_order_sensitive(patterns: &[Pattern], keys: usize, threads: usize) -> Result<Trace> {
    let opts = Opts::new().threads(threads).fallback(Fallback::Never);
    let mut traces = run_order_sensitive_calls(patterns, keys, opts, 1)?;
    Ok(traces.pop().expect("one call"))
}

/// [`run_order_sensitive`] with the loop's options given, called `calls` times on the same
/// tables, emptied between calls: the first call at a call site is special
/// (reconnaissance, or a recorded run on up to two workers), later ones reuse what it
/// learned. One trace per call.
pub fn run_order_sensitive_calls(
    patterns: &[Pattern],
    keys: usize,
    opts: Opts,
    calls: usize,
) -> Result<Vec<Trace>> {
    let n = patterns.len();
    let pattern = DVector::from_vec(patterns.to_vec())?;
    let log = DVector::from_fn(keys, |_| Vec::<u32>::new())?;
    let seen = DVector::from_fn(n, |_| Vec::<(u32, u32)>::new())?;
    let ran = DVector::from_fn(n, |_| 0u32)?;
    let mut traces = Vec::with_capacity(calls);
    for _ in 0..calls {
        log.transform(|_, v| v.clear())?;
        seen.transform(|_, v| v.clear())?;
        ran.transform(|_, v| *v = 0)?;
        async_for!(
            0..pattern.len(),
            |k| {
                for &(key, write) in pattern[k].iter() {
                    let key = key as usize;
                    if write {
                        log[key].push(k as u32);
                    } else {
                        let count = log[key].len() as u32;
                        seen[k].push((key as u32, count));
                    }
                }
                ran[k] += 1;
            },
            opts.clone()
        )?;
        traces.push((log.to_vec()?, seen.to_vec()?, ran.to_vec()?));
    }
    Ok(traces)
}

/// One epoch of SGD matrix factorisation over `(user, item, rating)` triples with step
/// size `lr` and `threads` workers (per rank).
pub fn mf_epoch(
    data: &DVector<(u32, u32, f32)>,
    w: &DVector<Vec<f32>>,
    h: &DVector<Vec<f32>>,
    lr: f32,
    threads: usize,
) -> Result<()> {
    let (data, w, h) = (data.clone(), w.clone(), h.clone());
    async_for!(
        0..data.len(),
        |k| {
            let (u, i, r) = data[k];
            let (u, i) = (u as usize, i as usize);
            let err = r - w[u]
                .iter()
                .zip(h[i].iter())
                .map(|(a, b)| a * b)
                .sum::<f32>();
            for f in 0..w[u].len() {
                let (wu, hi) = (w[u][f], h[i][f]);
                w[u][f] += lr * (err * hi - 0.01 * wu);
                h[i][f] += lr * (err * wu - 0.01 * hi);
            }
        },
        Opts::new().threads(threads)
    )
}

/// Checks a run of the order-sensitive body: every task ran once (`ran`), every write
/// happened where its pattern says (`log`: per key, the tasks that appended to it), and
/// the precedence graph of writes and reads (`seen`: per task, (key, appends seen)) is
/// acyclic.
pub fn check_serializable(
    patterns: &[Pattern],
    log: &[Vec<u32>],
    seen: &[Vec<(u32, u32)>],
    ran: &[u32],
) {
    let n = patterns.len();
    assert!(
        ran.iter().all(|&r| r == 1),
        "a task did not run exactly once"
    );
    // Every write happened once, where the pattern says.
    for (k, p) in patterns.iter().enumerate() {
        let mut writes: Vec<u32> = p.iter().filter(|a| a.1).map(|a| a.0).collect();
        writes.sort_unstable();
        let mut found: Vec<u32> = log
            .iter()
            .enumerate()
            .flat_map(|(key, seq)| {
                seq.iter()
                    .filter(|&&t| t as usize == k)
                    .map(move |_| key as u32)
            })
            .collect();
        found.sort_unstable();
        assert_eq!(writes, found, "task {k}'s writes");
    }

    // Precedence graph.
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    for seq in log {
        for w in seq.windows(2) {
            if w[0] != w[1] {
                edges[w[0] as usize].push(w[1] as usize);
            }
        }
    }
    for (reader, reads) in seen.iter().enumerate() {
        for &(key, count) in reads {
            let seq = &log[key as usize];
            if count > 0 {
                let before = seq[count as usize - 1] as usize;
                if before != reader {
                    edges[before].push(reader);
                }
            }
            if let Some(&after) = seq.get(count as usize) {
                if after as usize != reader {
                    edges[reader].push(after as usize);
                }
            }
        }
    }
    assert!(
        acyclic(&edges),
        "the precedence graph has a cycle: the run was not serializable"
    );
}

/// Whether the order in which tasks `0..n` wrote each key (`sequences`: per key, the
/// tasks that wrote it, in order) is one serial order's: the precedence graph of
/// consecutive writers is acyclic.
pub fn writers_acyclic<'a>(n: usize, sequences: impl IntoIterator<Item = &'a Vec<u32>>) -> bool {
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    for seq in sequences {
        for p in seq.windows(2) {
            edges[p[0] as usize].push(p[1] as usize);
        }
    }
    acyclic(&edges)
}

/// Whether the graph (adjacency lists) has no cycle.
pub fn acyclic(edges: &[Vec<usize>]) -> bool {
    let mut graph = petgraph::graph::DiGraph::<(), ()>::new();
    let nodes: Vec<_> = (0..edges.len()).map(|_| graph.add_node(())).collect();
    for (from, tos) in edges.iter().enumerate() {
        for &to in tos {
            graph.add_edge(nodes[from], nodes[to], ());
        }
    }
    !petgraph::algo::is_cyclic_directed(&graph)
}

/// Runs `job` as every rank of a `world`-rank in-process cluster (one thread per rank over
/// the `mem` transport) and returns the ranks' results in rank order.
pub fn on_ranks<T: Send>(world: usize, job: impl Fn() -> Result<T> + Sync) -> Vec<Result<T>> {
    strads_ap::cluster::simulate(world, job)
}

/// The figures of the loop whose call site is line `line` of test file `file`
/// (`"dist_async.rs"`), on this rank.
pub fn stats_at(file: &str, line: u32) -> strads_ap::LoopStats {
    let here = format!("{file}:{line}:");
    strads_ap::loop_stats()
        .into_iter()
        .find(|s| s.site.contains(&here))
        .unwrap_or_else(|| panic!("no figures of a loop at {here}"))
}
