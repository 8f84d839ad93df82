//! Shared by the `async_for!` tests: random access patterns, the serializability check and
//! an in-process cluster of ranks.
#![allow(dead_code)]

use std::sync::Arc;
use std::thread;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strads_ap::cluster::{collective::Comm, scoped, RankCtx};
use strads_ap::internals::transport::mem::MemCluster;
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

/// Whether the graph (adjacency lists) has no cycle: Kahn's algorithm removes every node.
pub fn acyclic(edges: &[Vec<usize>]) -> bool {
    let n = edges.len();
    let mut indegree = vec![0usize; n];
    edges.iter().flatten().for_each(|&t| indegree[t] += 1);
    let mut ready: Vec<usize> = (0..n).filter(|&t| indegree[t] == 0).collect();
    let mut removed = 0;
    while let Some(t) = ready.pop() {
        removed += 1;
        for &u in &edges[t] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(u);
            }
        }
    }
    removed == n
}

/// Runs `job` as every rank of a `world`-rank in-process cluster (one thread per rank over
/// the `mem` transport) and returns the ranks' results in rank order.
pub fn on_ranks<T: Send + 'static>(
    world: usize,
    job: impl Fn() -> Result<T> + Send + Sync + 'static,
) -> Vec<Result<T>> {
    let job = Arc::new(job);
    let handles: Vec<_> = MemCluster::new(world)
        .into_transports()
        .into_iter()
        .map(|t| {
            let job = job.clone();
            thread::spawn(move || scoped(RankCtx::new(Comm::new(t)), || job()))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
