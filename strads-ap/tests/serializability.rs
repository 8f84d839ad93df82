//! Serializability of `async_for!`: an order-sensitive body over random access patterns.
//!
//! Each task appends its index to every element it writes and remembers, for every element
//! it reads, how many appends it saw. From the per-element sequences we build the
//! precedence graph (writer → next writer; the writer a reader saw → reader → the next
//! writer) and check that it is acyclic, i.e. that one global serial order explains every
//! element. We also check that every task ran exactly once.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    acyclic, check_serializable, random_patterns, run_order_sensitive_calls, writers_acyclic,
    Pattern,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strads_ap::prelude::*;

/// Two calls on the same tables: the first (reconnaissance and a run, or on up to two
/// workers a recorded run) and the second (the cached plan) must both be serializable.
fn run_and_check(patterns: Vec<Pattern>, keys: usize, threads: usize) {
    let opts = Opts::new().threads(threads).fallback(Fallback::Never);
    for (log, seen, ran) in run_order_sensitive_calls(&patterns, keys, opts, 2).unwrap() {
        check_serializable(&patterns, &log, &seen, &ran);
    }
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

/// Tasks writing several rows each (a factorisation machine's shape): 2 to 10 distinct
/// keys out of `keys`, each written with probability 0.8, read otherwise.
fn variable_row_patterns(seed: u64, tasks: usize, keys: u32) -> Vec<Pattern> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..tasks)
        .map(|_| {
            let mut rows: Vec<u32> = (0..rng.gen_range(2..=10))
                .map(|_| rng.gen_range(0..keys))
                .collect();
            rows.sort_unstable();
            rows.dedup();
            rows.into_iter().map(|r| (r, rng.gen_bool(0.8))).collect()
        })
        .collect()
}

#[test]
fn variable_row_tasks_are_packed_serializably() {
    for seed in 30..32 {
        for threads in [2, 3, 4] {
            run_and_check(variable_row_patterns(seed, 3000, 2000), 2000, threads);
        }
    }
    // The plan is a packing (no batch falls apart into components): checked on a call
    // site of this test, the second call (the first on 2 workers is recorded).
    let patterns = DVector::from_vec(variable_row_patterns(33, 3000, 2000)).unwrap();
    let rows = DVector::from_fn(2000, |_| 0u32).unwrap();
    for call in 0..2 {
        let line = line!() + 1;
        async_for!(
            0..patterns.len(),
            |k| {
                for &(key, write) in patterns[k].iter() {
                    if write {
                        rows[key as usize] += 1;
                    }
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
        if call == 1 {
            let stats = stats_at(line);
            assert_eq!(stats.strategy, "packing", "{stats:?}");
        }
    }
    let writes: usize = patterns
        .to_vec()
        .unwrap()
        .iter()
        .map(|p| p.iter().filter(|&&(_, w)| w).count())
        .sum();
    let total: u32 = rows.to_vec().unwrap().iter().sum();
    assert_eq!(total as usize, 2 * writes);
}

/// A packing plan runs its batches in one dispatch of the workers, each batch re-tagged by
/// its own groups: a write outside the plan in a late batch is still refused (and stops
/// the call without a hang), and the next call plans again and runs.
#[test]
fn a_write_outside_a_packing_plan_is_refused_in_a_late_batch() {
    for threads in [2, 3] {
        let mut patterns = variable_row_patterns(34, 3000, 2000);
        let table = DVector::from_vec(patterns.clone()).unwrap();
        // One more key, which no task touches during reconnaissance.
        let rows = DVector::from_fn(2001, |_| 0u32).unwrap();
        let call = || {
            async_for!(
                0..table.len(),
                |k| {
                    for &(key, write) in table[k].iter() {
                        if write {
                            rows[key as usize] += 1;
                        }
                    }
                },
                Opts::new().threads(threads).fallback(Fallback::Never)
            )
        };
        call().unwrap();
        call().unwrap();
        // Task 2900 now also writes the untouched key (its batch is one of the plan's
        // hundreds, almost surely not the first).
        patterns[2900].push((2000, true));
        table.set(2900, patterns[2900].clone()).unwrap();
        let err = call().unwrap_err();
        assert!(
            matches!(
                err,
                strads_ap::Error::AccessOutsidePlan {
                    index: 2900,
                    key: 2000,
                    table: "rows",
                    ..
                }
            ),
            "{err}"
        );
        call().unwrap();
        assert_eq!(rows.get(2000).unwrap(), 1, "threads={threads}");
    }
}

/// The figures of the loop call site on line `line` of this file.
fn stats_at(line: u32) -> strads_ap::LoopStats {
    common::stats_at("serializability.rs", line)
}

#[test]
fn locking_runs_are_serializable_on_2_to_4_threads() {
    // A re-checked loop runs with element locks (no plan); hot keys make conflicts, so
    // tasks are undone and retried. Each pattern set runs three times on the same tables:
    // the first call learns the table modes (on 2 workers a recorded run, which takes no
    // locks), the later calls reuse them and run with locks.
    for seed in 20..24 {
        for threads in [2, 3, 4] {
            for hot in [false, true] {
                let patterns = random_patterns(seed, 2000, 200, hot);
                let opts = Opts::new()
                    .threads(threads)
                    .fallback(Fallback::Never)
                    .recheck(true);
                for (log, seen, ran) in run_order_sensitive_calls(&patterns, 200, opts, 3).unwrap()
                {
                    check_serializable(&patterns, &log, &seen, &ran);
                }
            }
        }
    }
    // The shared helper's call site is also run by other tests at the same time (its
    // statistics name the last call's strategy), so the routing is checked on a call site
    // of this test: a re-checked loop on 2 threads records its first call, then runs with
    // locks.
    let log = DVector::from_fn(7, |_| Vec::<u32>::new()).unwrap();
    for call in 0..2 {
        log.transform(|_, v| v.clear()).unwrap();
        let line = line!() + 1;
        async_for!(
            0..100usize,
            |k| {
                log[k % 7].push(k as u32);
            },
            Opts::new()
                .threads(2)
                .recheck(true)
                .fallback(Fallback::Never)
        )
        .unwrap();
        let strategy = if call == 0 { "recorded" } else { "locks" };
        assert_eq!(stats_at(line).strategy, strategy);
        let mut all: Vec<u32> = log.to_vec().unwrap().concat();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<u32>>());
    }
}

#[test]
fn a_rechecked_loop_that_writes_only_relaxed_tables_runs_on_all_workers_and_sums_exactly() {
    // Nothing is locked, so no task is abandoned and the relaxed elements are not saved:
    // the workers add into their replicas, merged after each chunk.
    let n = 5000usize;
    let counts = DVector::from_fn(10, |_| 0u64)
        .unwrap()
        .relaxed(Relaxed::Sum);
    let weights = DVector::from_fn(n, |k| (k % 7) as u64).unwrap();
    for call in 1..=3u64 {
        let line = line!() + 1;
        async_for!(
            0..n,
            |k| {
                counts[k % 10] += weights[k];
            },
            Opts::new()
                .threads(2)
                .recheck(true)
                .fallback(Fallback::Never)
        )
        .unwrap();
        let s = stats_at(line);
        let strategy = if call == 1 { "recorded" } else { "locks" };
        assert_eq!((s.strategy, s.retried), (strategy, 0), "{s:?}");
        let mut want = vec![0u64; 10];
        for k in 0..n {
            want[k % 10] += call * (k % 7) as u64;
        }
        assert_eq!(counts.to_vec().unwrap(), want, "call {call}");
    }
}

/// BPR's shape: each task writes one row of `rows` (the same at every call) and one
/// element of `cols` drawn from a table made anew for every call, so that after its first
/// call the loop runs with element locks. Its first calls draw a permutation (each task its
/// own element of `cols`), so their log gives a rotation over `rows` alone, by whose cells
/// the locking runs place their tasks: one slice per cell, where chunks of consecutive
/// tasks would be 63. The later calls draw hot elements, which meet other workers' locks;
/// every call must be serializable.
#[test]
fn locking_runs_placed_by_a_rotation_are_serializable() {
    let n = 4000usize;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let users: Vec<u32> = (0..n).map(|_| rng.gen_range(0..64)).collect();
    let users = DVector::from_vec(users).unwrap();
    for threads in [2, 3, 4] {
        let rows = DVector::from_fn(64, |_| Vec::<u32>::new()).unwrap();
        let cols = DVector::from_fn(n, |_| Vec::<u32>::new()).unwrap();
        for call in 0..5 {
            rows.transform(|_, v| v.clear()).unwrap();
            cols.transform(|_, v| v.clear()).unwrap();
            let mut draw: Vec<u32> = (0..n as u32).collect();
            if call < 2 {
                draw.rotate_left(call + 1);
            } else {
                for d in &mut draw {
                    *d = match rng.gen_bool(0.5) {
                        true => rng.gen_range(0..4),
                        false => rng.gen_range(0..n as u32),
                    };
                }
            }
            let draws = DVector::from_vec(draw).unwrap();
            let line = line!() + 1;
            async_for!(
                0..n,
                |k| {
                    rows[users[k] as usize].push(k as u32);
                    cols[draws[k] as usize].push(k as u32);
                },
                Opts::new().threads(threads).fallback(Fallback::Never)
            )
            .unwrap();
            let s = stats_at(line);
            if call >= 2 {
                assert_eq!(s.strategy, "locks", "threads {threads} call {call}: {s:?}");
                assert!(
                    s.groups <= 4 * threads,
                    "threads {threads} call {call}: not placed by the rotation: {s:?}"
                );
            }
            let (rows, cols) = (rows.to_vec().unwrap(), cols.to_vec().unwrap());
            for table in [&rows, &cols] {
                let mut all: Vec<u32> = table.concat();
                all.sort_unstable();
                let once = all.iter().copied().eq(0..n as u32);
                assert!(once, "call {call}: {} writes, not one per task", all.len());
            }
            assert!(
                writers_acyclic(n, rows.iter().chain(&cols)),
                "threads {threads} call {call}: no serial order explains the writes"
            );
        }
    }
}

/// Maps in locking runs: each task appends its index to the value of one key of a `DMap`
/// and to the list of another key of a `DMultiMap`, keys that move with a captured `shift`,
/// so the loop is re-checked and runs with element locks. Each call appends every task
/// once to each map, in an order that one serial order explains.
#[test]
fn locking_runs_over_maps_are_serializable() {
    let n = 2000usize;
    for threads in [2, 3] {
        let map = DMap::from_pairs((0..16u64).map(|k| (k, Vec::<u32>::new())).collect()).unwrap();
        let multi = DMultiMap::from_pairs((0..16u64).map(|k| (k, u32::MAX)).collect()).unwrap();
        let lists = || -> Vec<Vec<u32>> {
            let mut lists = vec![Vec::new(); 32];
            for (k, v) in map.to_vec().unwrap() {
                lists[k as usize] = v;
            }
            for (k, v) in multi.to_vec().unwrap() {
                if v != u32::MAX {
                    lists[16 + k as usize].push(v);
                }
            }
            lists
        };
        for shift in 0..4u64 {
            let before = lists();
            let line = line!() + 1;
            async_for!(
                0..n,
                |k| {
                    let key = (k as u64 * 7 + shift) % 16;
                    map.get_mut(&key).unwrap().push(k as u32);
                    multi
                        .get_mut(&((key + shift + 1) % 16))
                        .unwrap()
                        .push(k as u32);
                },
                Opts::new()
                    .threads(threads)
                    .recheck(true)
                    .fallback(Fallback::Never)
            )
            .unwrap();
            if shift > 0 {
                let s = stats_at(line);
                assert_eq!(s.strategy, "locks", "{s:?}");
            }
            let added: Vec<Vec<u32>> = lists()
                .into_iter()
                .zip(&before)
                .map(|(after, before)| after[before.len()..].to_vec())
                .collect();
            for table in added.chunks(16) {
                let mut all: Vec<u32> = table.concat();
                all.sort_unstable();
                assert!(all.iter().copied().eq(0..n as u32), "shift {shift}");
            }
            assert!(
                writers_acyclic(n, &added),
                "threads {threads} shift {shift}: no serial order explains the writes"
            );
        }
    }
}

static ARMED: AtomicBool = AtomicBool::new(false);
static B_HOLDS: AtomicBool = AtomicBool::new(false);
static A_TRIED: AtomicBool = AtomicBool::new(false);

/// Waits (bounded) until another worker sets `flag`, once the test is armed.
fn wait_for(flag: &AtomicBool, what: &str) {
    let t0 = Instant::now();
    while ARMED.load(Ordering::SeqCst) && !flag.load(Ordering::SeqCst) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "timed out waiting: {what}"
        );
        std::thread::yield_now();
    }
}

/// Sets `A_TRIED` when dropped, i.e. also when its task is abandoned mid-way.
struct Tried;

impl Drop for Tried {
    fn drop(&mut self) {
        A_TRIED.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_task_that_meets_a_held_element_is_undone_and_retried() {
    // Two workers take chunks of 64 tasks: task 64 (second chunk) locks element 0 and
    // holds it until task 0 (first chunk), which has already written element 5, has tried
    // element 0. Task 0 must be undone (element 5 put back), retried once the others are
    // done, and appear exactly once everywhere. The first call (reconnaissance, which runs
    // the body too, and a run) is not armed; the second is.
    let n = 128;
    let log = DVector::from_fn(16, |_| Vec::<u32>::new()).unwrap();
    let mut before = Vec::new();
    let mut line = 0;
    for armed in [false, true] {
        before = log.to_vec().unwrap();
        // The unarmed call set the flags too.
        B_HOLDS.store(false, Ordering::SeqCst);
        A_TRIED.store(false, Ordering::SeqCst);
        ARMED.store(armed, Ordering::SeqCst);
        line = line!() + 1;
        async_for!(
            0..n,
            |k| {
                if k == 64 {
                    log[0].push(k as u32);
                    B_HOLDS.store(true, Ordering::SeqCst);
                    wait_for(&A_TRIED, "task 0 to try element 0");
                } else if k == 0 {
                    log[5].push(k as u32);
                    wait_for(&B_HOLDS, "task 64 to hold element 0");
                    let _tried = Tried;
                    log[0].push(k as u32);
                } else {
                    log[8 + k % 8].push(k as u32);
                }
            },
            Opts::new()
                .threads(2)
                .recheck(true)
                .fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    assert_eq!(stats.strategy, "locks");
    assert!(stats.retried >= 1, "task 0 was not retried: {stats:?}");
    // What the armed call appended.
    let after = log.to_vec().unwrap();
    let added: Vec<Vec<u32>> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a[b.len()..].to_vec())
        .collect();
    // Task 0 ran after task 64 on element 0, and once on element 5.
    assert_eq!(added[0], vec![64, 0]);
    assert_eq!(added[5], vec![0]);
    let mut all: Vec<u32> = added[8..].iter().flatten().copied().collect();
    all.sort_unstable();
    let others: Vec<u32> = (1..n as u32).filter(|&k| k != 64).collect();
    assert_eq!(all, others);
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
        // Two calls: the first (on 2 workers a recorded run) and one with the cached plan.
        for call in 0..2 {
            w.transform(|_, v| v.clear()).unwrap();
            h.transform(|_, v| v.clear()).unwrap();
            let line = line!() + 1;
            async_for!(
                0..pairs_v.len(),
                |k| {
                    let (i, j) = pairs_v[k];
                    w[i as usize].push(k as u32);
                    h[j as usize].push(k as u32);
                },
                Opts::new().threads(threads).fallback(Fallback::Never)
            )
            .unwrap();
            let stats = strads_ap::loop_stats();
            let expected = if threads == 1 { "serial" } else { "rotation" };
            let here = format!("serializability.rs:{line}:");
            let site = stats.iter().find(|s| s.site.contains(&here)).unwrap();
            assert_eq!(site.strategy, expected, "{site:?}");
            // Build the precedence graph from both tables and check it is acyclic.
            let (wv, hv) = (w.to_vec().unwrap(), h.to_vec().unwrap());
            assert!(
                writers_acyclic(n, wv.iter().chain(&hv)),
                "rotation run with {threads} threads, call {call}, was not serializable"
            );
            let total: usize = wv.iter().map(Vec::len).sum();
            assert_eq!(total, n);
        }
    }
}

/// The longest run of consecutive updates of a row (`updates`: the task indices in the
/// order they ran) against one column.
fn longest_run_against_one_column(updates: &[u32], pairs: &[(u32, u32)]) -> usize {
    let col = |k: &u32| pairs[*k as usize].1;
    let mut longest = 0;
    let mut run = 0;
    for (i, k) in updates.iter().enumerate() {
        run = match i > 0 && col(k) == col(&updates[i - 1]) {
            true => run + 1,
            false => 1,
        };
        longest = longest.max(run);
    }
    longest
}

#[test]
fn a_finely_interleaved_rotation_is_serializable_and_spreads_a_hot_rows_updates() {
    // Row 0 is in 30% of the tasks, about 150 against each of 8 columns, each column a
    // block of its own. By default its updates against one column run in one piece per
    // call; with `interleave(4)` in runs of a few, spread over the call: at most two
    // units of the smallest size (16 tasks, a little more where the tasks do not divide
    // evenly), where the other columns' blocks were busy.
    let (n, rows, cols) = (4000, 150u32, 8u32);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let pairs: Vec<(u32, u32)> = (0..n)
        .map(|_| {
            let i = if rng.gen_bool(0.3) {
                0
            } else {
                rng.gen_range(1..rows)
            };
            (i, rng.gen_range(0..cols))
        })
        .collect();
    let pairs_v = DVector::from_vec(pairs.clone()).unwrap();
    for (threads, interleave) in [(2, None), (2, Some(4)), (3, Some(4))] {
        let w = DVector::from_fn(rows as usize, |_| Vec::<u32>::new()).unwrap();
        let h = DVector::from_fn(cols as usize, |_| Vec::<u32>::new()).unwrap();
        let mut opts = Opts::new()
            .threads(threads)
            .blocks(8)
            .fallback(Fallback::Never);
        if let Some(run) = interleave {
            opts = opts.interleave(run);
        }
        // The first call on 2 workers is a recorded run in loop order, and so, with new
        // tables at the same site, is the next; the last runs the plan.
        let mut line = 0;
        for _call in 0..3 {
            w.transform(|_, v| v.clear()).unwrap();
            h.transform(|_, v| v.clear()).unwrap();
            line = line!() + 1;
            async_for!(
                0..pairs_v.len(),
                |k| {
                    let (i, j) = pairs_v[k];
                    w[i as usize].push(k as u32);
                    h[j as usize].push(k as u32);
                },
                &opts
            )
            .unwrap();
            strads_ap::wait_for_plans();
        }
        let last = stats_at(line);
        assert_eq!(
            (last.strategy, last.workers),
            ("rotation", threads),
            "the last call ran the plan on all workers"
        );
        let (wv, hv) = (w.to_vec().unwrap(), h.to_vec().unwrap());
        assert!(
            writers_acyclic(n, wv.iter().chain(&hv)),
            "{threads} threads, {interleave:?}: not serializable"
        );
        assert_eq!(wv.iter().map(Vec::len).sum::<usize>(), n);
        let longest = longest_run_against_one_column(&wv[0], &pairs);
        match interleave {
            None => assert!(longest >= 100, "default units: a run of {longest}"),
            Some(_) => assert!(longest <= 40, "{threads} threads: a run of {longest}"),
        }
    }
}

#[test]
fn tables_keyed_alike_rotate_serializably() {
    // Biased MF's shape: four written tables, `bw` keyed like `w` and `bh` one to one with
    // `h` (a permutation of its keys): two dimensions, rotated like two tables.
    for threads in 1..=3 {
        let (n, rows, cols) = (4000, 150usize, 60usize);
        let mut rng = ChaCha8Rng::seed_from_u64(10 + threads as u64);
        let pairs: Vec<(u32, u32)> = (0..n)
            .map(|_| (rng.gen_range(0..rows) as u32, rng.gen_range(0..cols) as u32))
            .collect();
        let pairs = DVector::from_vec(pairs).unwrap();
        let w = DVector::from_fn(rows, |_| Vec::<u32>::new()).unwrap();
        let h = DVector::from_fn(cols, |_| Vec::<u32>::new()).unwrap();
        let bw = DVector::from_fn(rows, |_| Vec::<u32>::new()).unwrap();
        let bh = DVector::from_fn(cols, |_| Vec::<u32>::new()).unwrap();
        for call in 0..2 {
            for t in [&w, &h, &bw, &bh] {
                t.transform(|_, v| v.clear()).unwrap();
            }
            let line = line!() + 1;
            async_for!(
                0..pairs.len(),
                |k| {
                    let (i, j) = pairs[k];
                    let (i, j) = (i as usize, j as usize);
                    w[i].push(k as u32);
                    h[j].push(k as u32);
                    bw[i].push(k as u32);
                    bh[(j * 7 + 3) % cols].push(k as u32);
                },
                Opts::new().threads(threads).fallback(Fallback::Never)
            )
            .unwrap();
            let site = stats_at(line);
            let expected = if threads == 1 { "serial" } else { "rotation" };
            assert_eq!(site.strategy, expected, "{site:?}");
            let seqs: Vec<Vec<u32>> = [&w, &h, &bw, &bh]
                .iter()
                .flat_map(|t| t.to_vec().unwrap())
                .collect();
            let total: usize = seqs.iter().map(Vec::len).sum();
            assert_eq!(total, 4 * n, "every task wrote each table once");
            assert!(
                writers_acyclic(n, &seqs),
                "{threads} threads, call {call}: not serializable"
            );
        }
    }
}

#[test]
fn tasks_that_write_a_dimension_only_on_a_condition_rotate_serializably() {
    // A learned-neighbourhood recommender's shape: every task writes its user's row, and
    // its item's rows (`h` and `bh`, keyed alike) only where the data says so (a fifth of
    // the tasks touch neither). The planner still rotates over users and items.
    for threads in 1..=3 {
        let (n, rows, cols) = (4000, 150usize, 60usize);
        let mut rng = ChaCha8Rng::seed_from_u64(20 + threads as u64);
        let tasks: Vec<(u32, u32, bool)> = (0..n)
            .map(|_| {
                let (i, j) = (rng.gen_range(0..rows), rng.gen_range(0..cols));
                (i as u32, j as u32, rng.gen_bool(0.8))
            })
            .collect();
        let with_item = tasks.iter().filter(|t| t.2).count();
        let tasks = DVector::from_vec(tasks).unwrap();
        let w = DVector::from_fn(rows, |_| Vec::<u32>::new()).unwrap();
        let bw = DVector::from_fn(rows, |_| Vec::<u32>::new()).unwrap();
        let h = DVector::from_fn(cols, |_| Vec::<u32>::new()).unwrap();
        let bh = DVector::from_fn(cols, |_| Vec::<u32>::new()).unwrap();
        for call in 0..2 {
            for t in [&w, &bw, &h, &bh] {
                t.transform(|_, v| v.clear()).unwrap();
            }
            let line = line!() + 1;
            async_for!(
                0..tasks.len(),
                |k| {
                    let (i, j, rated) = tasks[k];
                    w[i as usize].push(k as u32);
                    bw[i as usize].push(k as u32);
                    if rated {
                        h[j as usize].push(k as u32);
                        bh[j as usize].push(k as u32);
                    }
                },
                Opts::new().threads(threads).fallback(Fallback::Never)
            )
            .unwrap();
            let site = stats_at(line);
            let expected = if threads == 1 { "serial" } else { "rotation" };
            assert_eq!(site.strategy, expected, "{site:?}");
            let seqs: Vec<Vec<u32>> = [&w, &bw, &h, &bh]
                .iter()
                .flat_map(|t| t.to_vec().unwrap())
                .collect();
            let total: usize = seqs.iter().map(Vec::len).sum();
            assert_eq!(total, 2 * n + 2 * with_item, "every write made once");
            assert!(
                writers_acyclic(n, &seqs),
                "{threads} threads, call {call}: not serializable"
            );
        }
    }
}
