//! Serializability of `async_for!`: an order-sensitive body over random access patterns.
//!
//! Each task appends its index to every element it writes and remembers, for every element
//! it reads, how many appends it saw. From the per-element sequences we build the
//! precedence graph (writer → next writer; the writer a reader saw → reader → the next
//! writer) and check that it is acyclic, i.e. that one global serial order explains every
//! element. We also check that every task ran exactly once.

mod common;

use common::{acyclic, check_serializable, random_patterns, run_order_sensitive, Pattern};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strads_ap::prelude::*;

fn run_and_check(patterns: Vec<Pattern>, keys: usize, threads: usize) {
    let (log, seen, ran) = run_order_sensitive(&patterns, keys, threads).unwrap();
    check_serializable(&patterns, &log, &seen, &ran);
}

#[test]
fn the_cycle_check_finds_cycles() {
    assert!(acyclic(&[vec![1], vec![2], vec![]]));
    assert!(!acyclic(&[vec![1], vec![2], vec![0]]));
}

#[test]
fn random_access_patterns_are_serializable_on_1_to_4_threads() {
    for seed in 0..6 {
        for threads in 1..=4 {
            let patterns = random_patterns(seed, 3000, 400, false);
            run_and_check(patterns, 400, threads);
        }
    }
}

#[test]
fn skewed_access_patterns_are_serializable() {
    for seed in 10..14 {
        for threads in [2, 4] {
            let patterns = random_patterns(seed, 2000, 200, true);
            run_and_check(patterns, 200, threads);
        }
    }
}

#[test]
fn rotation_shaped_patterns_are_serializable() {
    // Every task writes one key in each of two tables (matrix factorisation's shape), so
    // the planner rotates blocks; the check is the same.
    for threads in 1..=4 {
        let n = 4000;
        let rows = 150usize;
        let cols = 60usize;
        let mut rng = ChaCha8Rng::seed_from_u64(threads as u64);
        let pairs: Vec<(u32, u32)> = (0..n)
            .map(|_| (rng.gen_range(0..rows) as u32, rng.gen_range(0..cols) as u32))
            .collect();
        let pairs_v = DVector::from_vec(pairs.clone()).unwrap();
        let w = DVector::from_fn(rows, |_| Vec::<u32>::new()).unwrap();
        let h = DVector::from_fn(cols, |_| Vec::<u32>::new()).unwrap();
        let line = line!() + 1;
        async_for!(
            0..pairs_v.len(),
            |k| {
                let (i, j) = pairs_v[k];
                w[i as usize].push(k as u32);
                h[j as usize].push(k as u32);
            },
            Opts::new().threads(threads)
        )
        .unwrap();
        let stats = strads_ap::loop_stats();
        let expected = if threads == 1 { "serial" } else { "rotation" };
        let here = format!("serializability.rs:{line}:");
        let site = stats.iter().find(|s| s.site.contains(&here)).unwrap();
        assert_eq!(site.strategy, expected, "{site:?}");
        // Build the precedence graph from both tables and check it is acyclic.
        let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
        for seq in w.to_vec().unwrap().iter().chain(h.to_vec().unwrap().iter()) {
            for p in seq.windows(2) {
                edges[p[0] as usize].push(p[1] as usize);
            }
        }
        assert!(
            acyclic(&edges),
            "rotation run with {threads} threads was not serializable"
        );
        let total: usize = w.to_vec().unwrap().iter().map(Vec::len).sum();
        assert_eq!(total, n);
    }
}
