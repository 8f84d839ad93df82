//! Diagnoses: a loop that does not scale says why and what to change, once, in its loop
//! figures (and on stderr); a loop that scales says nothing.

mod common;

use strads_ap::prelude::*;
use strads_ap::{Diagnosis, Finding, LoopStats};

/// The figures of the loop at line `line` of this file.
fn stats_at(line: u32) -> LoopStats {
    common::stats_at("diagnose.rs", line)
}

fn finding(stats: &LoopStats, finding: Finding) -> Option<&Diagnosis> {
    stats.diagnoses.iter().find(|d| d.finding == finding)
}

/// Tens of microseconds of arithmetic, so that bodies outweigh the engine's fixed costs.
fn work(seed: u64) -> f64 {
    let mut x = seed as f64 + 1.0;
    for i in 0..16_000 {
        x = (x * 1.000_001 + i as f64).sqrt();
    }
    x
}

/// A seeded scramble (splitmix64), for access patterns without arithmetic structure.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn a_key_every_task_writes_is_named_with_its_share_and_relaxing_it_is_the_fix() {
    let n = 4000;
    let own = DVector::from_fn(n, |_| 0.0f64).unwrap();
    let total = DVector::from_fn(1, |_| 0.0f64).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..n,
            |k| {
                own[k] += 1.0;
                total[0] += own[k];
            },
            Opts::new().threads(2)
        )
        .unwrap();
        // The plan is made beside the next calls: wait for it, so that the second call
        // runs it (and its shape is looked at).
        strads_ap::wait_for_plans();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::IdleWorkers).expect("idle workers diagnosed");
    assert_eq!(d.tables, vec!["total".to_string()]);
    assert_eq!(d.hot_keys.len(), 1, "{:?}", d.hot_keys);
    assert_eq!(
        (d.hot_keys[0].table.as_str(), d.hot_keys[0].key.as_str()),
        ("total", "[0]")
    );
    assert!((d.hot_keys[0].share - 1.0).abs() < 1e-9);
    assert!(d.fix.contains("`total` relaxed"), "{}", d.fix);
    // Relaxing is no fix for coordinate descent, whose steps need the others' exact effect.
    assert!(
        d.fix.contains("compare a held-out metric") && d.fix.contains("`Opts::dynamic`"),
        "{}",
        d.fix
    );
    assert!(
        d.fix.starts_with(
            "if `total`[0] only accumulates a total, a count or a best (`total[0] += e`), keep \
             it in a plain `let mut` variable"
        ),
        "{}",
        d.fix
    );
    assert!(d.message.contains("`total`[0] (100%)"), "{}", d.message);
    // A plan that runs one group after another runs on one worker from its second call
    // on (in loop order), which the loop's figures and a second finding say.
    assert_eq!(stats.strategy, "rotation on one worker");
    let one = finding(&stats, Finding::OneWorker).expect("one worker diagnosed");
    assert!(
        one.message
            .contains("its plan would keep 1.0 of 2 workers busy"),
        "{}",
        one.message
    );
    assert!(one.fix.contains("`total` relaxed"), "{}", one.fix);
    assert!(one.fix.contains("Fallback::Never"), "{}", one.fix);
    // Once per finding, however many calls.
    assert_eq!(stats.diagnoses.len(), 2, "{:?}", stats.diagnoses);
    assert_eq!(
        total.get(0).unwrap(),
        (1..=3).map(|e| e * n).sum::<usize>() as f64
    );
}

/// The reduction the diagnosis suggests for a total: the loop rotates, and the total is
/// the serial one.
#[test]
fn a_total_kept_in_a_reduction_is_left_out_of_the_plan() {
    let n = 4000;
    let own = DVector::from_fn(n, |_| 0.0f64).unwrap();
    let line = line!() + 3;
    for epoch in 1..=3 {
        let mut total = 0.0f64;
        async_for!(
            0..n,
            |k| {
                own[k] += 1.0;
                total += own[k];
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
        assert_eq!(total, (epoch * n) as f64);
    }
    let stats = stats_at(line);
    assert!(stats.groups > 1, "{stats:?}");
    assert!(
        finding(&stats, Finding::IdleWorkers).is_none(),
        "{:?}",
        stats.diagnoses
    );
}

/// 3,000 documents of two words: `the`, in every one, and one of 1,000 others; and the
/// vocabulary.
fn hot_word_docs() -> (DVector<Vec<String>>, Vec<String>) {
    let docs: Vec<Vec<String>> = (0..3000)
        .map(|d| vec!["the".to_string(), format!("w{}", d % 1000)])
        .collect();
    let mut words: Vec<String> = (0..1000).map(|w| format!("w{w}")).collect();
    words.push("the".into());
    (DVector::from_vec(docs).unwrap(), words)
}

#[test]
fn hot_map_keys_are_shown_as_the_body_writes_them() {
    let (docs, words) = hot_word_docs();
    let weights: DMap<String, f32> =
        DMap::from_pairs(words.into_iter().map(|w| (w, 0.0)).collect()).unwrap();
    let line = line!() + 1;
    async_for!(
        0..docs.len(),
        |d| {
            for w in &docs[d] {
                weights[w] += 0.1;
            }
        },
        Opts::new().threads(2).fallback(Fallback::Never)
    )
    .unwrap();
    let stats = stats_at(line);
    let d = finding(&stats, Finding::IdleWorkers).expect("idle workers diagnosed");
    assert_eq!(d.hot_keys[0].key, "[\"the\"]", "{:?}", d.hot_keys);
    assert!(
        d.fix.contains("DMap::from_map(m)?.relaxed(Relaxed::Sum)"),
        "{}",
        d.fix
    );
}

/// The fix the diagnosis names for a hot map works: relaxed, the map no longer joins the
/// tasks into one group, its sums are exact, and no diagnosis remains.
#[test]
fn a_relaxed_hot_map_is_planned_around_and_sums_exactly() {
    let (docs, words) = hot_word_docs();
    let counts: DMap<String, u64> = DMap::from_pairs(words.into_iter().map(|w| (w, 0)).collect())
        .unwrap()
        .relaxed(Relaxed::Sum);
    let per_doc = DVector::from_fn(3000, |_| 0u64).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..docs.len(),
            |d| {
                for w in &docs[d] {
                    counts[w] += 1;
                }
                per_doc[d] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    assert!(stats.groups > 1, "{stats:?}");
    assert!(
        finding(&stats, Finding::IdleWorkers).is_none(),
        "{:?}",
        stats.diagnoses
    );
    assert_eq!(counts.get(&"the".to_string()).unwrap(), Some(9000));
    assert_eq!(counts.get(&"w7".to_string()).unwrap(), Some(9));
    assert!(per_doc.to_vec().unwrap().iter().all(|&c| c == 3));
}

#[test]
fn a_relaxed_hot_key_and_private_writes_give_no_diagnosis() {
    // Calls of some 40 ms or more: a worker started late by a busy machine idles for a
    // small share of them.
    let n = 1024;
    let own = DVector::from_fn(n, |_| 0.0f64).unwrap();
    let total = DVector::from_fn(1, |_| 0.0f64)
        .unwrap()
        .relaxed(Relaxed::Sum);
    let line = line!() + 2;
    for _ in 0..4 {
        async_for!(
            0..n,
            |k| {
                own[k] += work(k as u64);
                total[0] += 1.0;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    assert!(stats.diagnoses.is_empty(), "{:#?}", stats.diagnoses);
    assert_eq!(total.get(0).unwrap(), 4.0 * n as f64);
}

/// The plan's explanation, from whichever finding the timing gives (workers idle, or
/// the fixed costs of a components plan's many batches).
fn plan_finding(stats: &LoopStats) -> &Diagnosis {
    stats
        .diagnoses
        .iter()
        .find(|d| matches!(d.finding, Finding::FixedCosts | Finding::IdleWorkers))
        .unwrap_or_else(|| panic!("no plan finding in {stats:#?}"))
}

#[test]
fn reading_what_other_tasks_write_is_named() {
    // Gauss-Seidel on a random graph: each node reads 8 others and writes itself, so a
    // components plan needs many small batches.
    let n = 3000;
    let neighbours: Vec<[usize; 8]> = (0..n)
        .map(|i| std::array::from_fn(|j| mix((i * 8 + j) as u64) as usize % n))
        .collect();
    let neighbours = DVector::from_vec(neighbours).unwrap();
    let value = DVector::from_fn(n, |i| i as f64).unwrap();
    let line = line!() + 2;
    for _ in 0..4 {
        async_for!(
            0..n,
            |i| {
                let mut sum = 0.0;
                for &j in &neighbours[i] {
                    sum += value[j];
                }
                value[i] = 0.5 * value[i] + sum / 16.0;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = plan_finding(&stats);
    assert!(
        d.message
            .contains("read elements of `value` that other tasks write"),
        "{}",
        d.message
    );
    assert_eq!(d.tables, vec!["value".to_string()]);
    assert!(d.fix.contains("copy of `value`"), "{}", d.fix);
}

#[test]
fn a_table_read_where_others_write_is_named_alone_when_the_rest_would_rotate() {
    // A learned-neighbourhood recommender's shape (a new user's trial): each rating writes
    // its user's bias and its item's bias and weights, and reads the biases of the item's
    // neighbours. Reading `bi` where other tasks write it chains the tasks; without `bi`
    // the loop rotates over users and items, so `bi` alone is to be relaxed.
    let (n, users, items) = (4000, 200, 80);
    let pairs: Vec<(usize, usize)> = (0..n)
        .map(|k| {
            (
                mix(k as u64) as usize % users,
                mix(k as u64 + n as u64) as usize % items,
            )
        })
        .collect();
    let pairs = DVector::from_vec(pairs).unwrap();
    let bu = DVector::from_fn(users, |_| 0.0f64).unwrap();
    let bi = DVector::from_fn(items, |_| 0.0f64).unwrap();
    let w = DVector::from_fn(items, |_| [0.0f64; 4]).unwrap();
    let line = line!() + 2;
    for _ in 0..4 {
        async_for!(
            0..n,
            |k| {
                let (u, i) = pairs[k];
                let mut s = 0.0;
                for (slot, j) in [(i + 1) % 80, (i + 7) % 80, (i + 31) % 80]
                    .iter()
                    .enumerate()
                {
                    s += w[i][slot] * bi[*j];
                }
                let e = 1.0 - bu[u] - bi[i] - s;
                bu[u] += 0.01 * e;
                bi[i] += 0.01 * e;
                w[i][3] += 0.01 * e;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = plan_finding(&stats);
    assert_eq!(d.tables, vec!["bi".to_string()], "{}", d.message);
    assert!(
        d.message
            .contains("read elements of `bi` that other tasks write, which chains them together; without `bi` the planner would rotate"),
        "{}",
        d.message
    );
    assert!(d.fix.starts_with("declare `bi` relaxed"), "{}", d.fix);
    assert!(!d.fix.contains("copy of `bi`"), "{}", d.fix);
}

#[test]
fn counts_most_tasks_read_and_several_write_are_all_named_for_relaxing() {
    // A sampler's shape (a new user's GSDMM: each document reads every cluster's counts
    // and moves from one cluster to another): the counts chain all tasks, a copy read in
    // their place cannot serve (what a task writes follows what it reads), and relaxing
    // one table at a time only names the next. Here the moves are fixed per item, so the
    // plan holds from call to call.
    // Forty clusters: each is written by about 5% of the tasks, too few to be hot.
    let (n, k) = (3000, 40);
    let start: Vec<usize> = (0..n).map(|i| mix(i as u64) as usize % k).collect();
    let mut sizes = vec![0i64; k];
    start.iter().for_each(|&c| sizes[c] += 1);
    let cluster = DVector::from_vec(start).unwrap();
    let size = DVector::from_vec(sizes).unwrap();
    let weight = DVector::from_fn(k, |_| 1.0f64).unwrap();
    let line = line!() + 2;
    for _ in 0..4 {
        async_for!(
            0..n,
            |i| {
                let old = cluster[i];
                let mut score = 0.0;
                for c in 0..40 {
                    score += size[c] as f64 * weight[c];
                }
                let new = (old + 1 + i % 3) % 40;
                size[old] -= 1;
                weight[old] -= 1e-9 * score;
                size[new] += 1;
                weight[new] += 1e-9 * score;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = plan_finding(&stats);
    let mut named = d.tables.clone();
    named.sort();
    assert_eq!(
        named,
        vec!["size".to_string(), "weight".to_string()],
        "{}",
        d.message
    );
    assert!(
        d.message
            .contains("that other tasks write, and tasks share written elements of"),
        "{}",
        d.message
    );
    assert!(
        d.fix.contains("declare `size` and `weight` relaxed")
            || d.fix.contains("declare `weight` and `size` relaxed"),
        "{}",
        d.fix
    );
    assert!(!d.fix.contains("copy of"), "{}", d.fix);
}

#[test]
fn tables_keyed_alike_rotate_without_advice() {
    // Biased MF's shape: two factor tables and two bias tables keyed like them. The
    // planner rotates `p` with `bu` and `q` with `bi` (two dimensions), so nothing needs
    // changing.
    let (users, items, n) = (40usize, 30usize, 20_000usize);
    let pairs: Vec<(usize, usize)> = (0..n as u64)
        .map(|k| (mix(k) as usize % users, mix(k + n as u64) as usize % items))
        .collect();
    let pairs = DVector::from_vec(pairs).unwrap();
    let p = DVector::from_fn(users, |_| vec![0.1f32; 2]).unwrap();
    let q = DVector::from_fn(items, |_| vec![0.1f32; 2]).unwrap();
    let bu = DVector::from_fn(users, |_| 0.0f32).unwrap();
    let bi = DVector::from_fn(items, |_| 0.0f32).unwrap();
    let line = line!() + 2;
    for _ in 0..4 {
        async_for!(
            0..n,
            |k| {
                let (u, i) = pairs[k];
                let r = ((u * 7 + i * 3) % 5) as f32;
                let err = r - bu[u] - bi[i] - p[u][0] * q[i][0];
                bu[u] += 0.01 * err;
                bi[i] += 0.01 * err;
                p[u][0] += 0.01 * err * q[i][0];
                q[i][0] += 0.01 * err * p[u][0];
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    assert_eq!(stats.strategy, "rotation");
    assert!(
        stats
            .diagnoses
            .iter()
            .all(|d| d.finding != Finding::IdleWorkers),
        "{:?}",
        stats.diagnoses
    );
    // That the rotation is serializable is checked in `tests/serializability.rs`.
}

#[test]
fn short_calls_of_tiny_bodies_are_diagnosed_as_fixed_costs() {
    let n = 2000;
    let own = DVector::from_fn(n, |_| 0u64).unwrap();
    let line = line!() + 2;
    for _ in 0..6 {
        async_for!(
            0..n,
            |k| {
                own[k] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::FixedCosts).expect("fixed costs diagnosed");
    assert!(d.fix.contains("more work"), "{}", d.fix);
    assert!(finding(&stats, Finding::IdleWorkers).is_none());
}

#[test]
fn short_rounds_of_a_dynamic_loop_name_the_round_size() {
    let n = 2000;
    let own = DVector::from_fn(n, |_| 0u64).unwrap();
    let schedule = Dynamic::new(Priority::cyclic()).round(8);
    let line = line!() + 2;
    for _ in 0..6 {
        async_for!(
            0..n,
            |k| {
                own[k] += 1;
            },
            Opts::new()
                .threads(2)
                .fallback(Fallback::Never)
                .dynamic(schedule.clone())
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::FixedCosts).expect("fixed costs diagnosed");
    assert!(d.fix.contains("Dynamic::round(n)"), "{}", d.fix);
    assert!(d.message.contains("rounds"), "{}", d.message);
    assert!(d.message.contains("does not scale"), "{}", d.message);
    assert_eq!(own.to_vec().unwrap(), vec![6u64; n]);
}

/// The same loop on one worker: nothing was asked of it but the serial body's pace, so it
/// is not said not to scale, only to cost more than its bodies, and it is not told to run
/// on the one thread it already runs on.
#[test]
fn short_rounds_on_one_worker_are_not_said_not_to_scale() {
    let n = 2000;
    let own = DVector::from_fn(n, |_| 0u64).unwrap();
    let schedule = Dynamic::new(Priority::cyclic()).round(8);
    let line = line!() + 2;
    for _ in 0..6 {
        async_for!(
            0..n,
            |k| {
                own[k] += 1;
            },
            Opts::new().threads(1).dynamic(schedule.clone())
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::FixedCosts).expect("fixed costs diagnosed");
    assert!(
        d.message.contains("costs more than its loop bodies")
            && d.message.contains("its one worker spends")
            && !d.message.contains("does not scale"),
        "{}",
        d.message
    );
    assert!(!d.fix.contains("threads(1)"), "{}", d.fix);
    assert_eq!(own.to_vec().unwrap(), vec![6u64; n]);
}

#[test]
fn a_dependency_test_that_sets_most_candidates_aside_is_named() {
    // Every index adds to one of 4 elements of a relaxed sum: `overlap(0.0)` finds each
    // candidate dependent on the group holding its element, so each round fills one
    // group and sets the rest of its candidates aside.
    let n = 2000;
    let own = DVector::from_fn(n, |_| 0u64).unwrap();
    let total = DVector::from_vec(vec![0.0f64; 4])
        .unwrap()
        .relaxed(Relaxed::Sum);
    let schedule = Dynamic::new(Priority::cyclic())
        .round(64)
        .depends(Depends::overlap(0.0));
    let line = line!() + 2;
    for _ in 0..6 {
        async_for!(
            0..n,
            |k| {
                own[k] += 1;
                total[k % 4] += 1.0;
            },
            Opts::new()
                .threads(2)
                .fallback(Fallback::Never)
                .dynamic(schedule.clone())
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::FixedCosts).expect("fixed costs diagnosed");
    assert!(
        d.message.contains("`Depends::overlap`") && d.message.contains("set aside"),
        "{}",
        d.message
    );
    assert!(d.fix.contains("Depends::graph"), "{}", d.fix);
    let s = schedule.stats();
    assert!(s.deferred >= s.updates, "{s:?}");
    assert_eq!(
        total.to_vec().unwrap().iter().sum::<f64>(),
        s.updates as f64
    );
}

#[test]
fn a_table_made_anew_for_every_call_is_named() {
    let n = 1000;
    let acc = DVector::from_fn(n, |_| 0u64).unwrap();
    let line = line!() + 3;
    for epoch in 0..4u64 {
        let fresh = DVector::from_fn(n, |i| i as u64 + epoch).unwrap();
        async_for!(
            0..n,
            |k| {
                acc[k] += fresh[k];
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::AlwaysFirstCall).expect("always a first call");
    assert_eq!(d.tables, vec!["fresh".to_string()]);
    assert!(d.fix.contains("make `fresh` once"), "{}", d.fix);
    // Refilling in place is wrong where the contents decide the writes: the fix says so.
    assert!(d.fix.contains("Opts::recheck(true)"), "{}", d.fix);
}

#[test]
fn a_table_kept_between_calls_is_not_diagnosed_as_new() {
    let n = 1000;
    let acc = DVector::from_fn(n, |_| 0u64).unwrap();
    let kept = DVector::from_fn(n, |i| i as u64).unwrap();
    let line = line!() + 2;
    for _ in 0..4 {
        async_for!(
            0..n,
            |k| {
                acc[k] += kept[k];
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    assert!(
        finding(&stats, Finding::AlwaysFirstCall).is_none(),
        "{:#?}",
        stats.diagnoses
    );
}

#[test]
fn a_sync_for_that_mostly_merges_is_diagnosed() {
    let data = DVector::from_fn(20_000, |i| i as f32).unwrap();
    let w = DVector::from_fn(256, |_| 0.0f32).unwrap();
    // Only read: replicated all the same (no reconnaissance), but it merges nothing, so
    // the diagnosis does not name it (a new user's SVM was told its per-sample constants
    // were being merged).
    let scale = DVector::from_fn(20_000, |_| 1e-6f32).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        sync_for!(
            data,
            1,
            SyncMode::Hybrid,
            |batch| {
                for x in batch {
                    w[(*x as usize) % 256] += scale[*x as usize];
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::MergeBound).expect("merge-bound diagnosed");
    assert_eq!(d.tables, vec!["w".to_string()]);
    assert!(d.fix.contains("larger mini-batches"), "{}", d.fix);
}

/// A dense block of parameters kept as a flat table of scalars, every element of which
/// every mini-batch writes (a new user's MLP layers, 0.58x serial on two workers), is
/// told to become one element of its table.
#[test]
fn a_sync_for_merging_a_flat_table_of_scalars_is_told_to_keep_it_in_one_row() {
    let data = DVector::from_fn(1_000, |i| i as f32).unwrap();
    let w = DVector::from_fn(1_024, |_| 0.0f32).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        sync_for!(
            data,
            1,
            SyncMode::Hybrid,
            |batch| {
                for x in batch {
                    for k in 0..1_024 {
                        w[k] += 1e-6 * x;
                    }
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    let d = finding(&stats, Finding::MergeBound).expect("merge-bound diagnosed");
    assert_eq!(d.tables, vec!["w".to_string()]);
    assert!(
        d.fix.contains("as one element of its table") && d.fix.contains("`w[0][k]`"),
        "{}",
        d.fix
    );
}

/// An `async_for!` with a large relaxed table each task writes one row of merges every
/// row after every group: told to relax only small, widely written tables (not the
/// mini-batch advice of `sync_for!`, which it has no mini-batches for), naming the relaxed
/// table and not the planned one it also writes.
#[test]
fn an_async_for_that_mostly_merges_a_large_relaxed_table_is_told_to_relax_less() {
    let w = DVector::from_fn(20_000, |_| vec![0.0f32; 256])
        .unwrap()
        .relaxed(Relaxed::Sum);
    let seen = DVector::from_fn(20_000, |_| 0u32).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..w.len(),
            |i| {
                w[i][0] += 1.0;
                seen[i] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    assert_eq!(w.get(7).unwrap()[0], 3.0, "every update kept");
    assert_eq!(seen.get(7).unwrap(), 3);
    let stats = stats_at(line);
    let d = finding(&stats, Finding::MergeBound).expect("merge-bound diagnosed");
    assert_eq!(d.tables, vec!["w".to_string()]);
    assert!(d.fix.contains("relax only small tables"), "{}", d.fix);
    // Not the `sync_for!` advice; where hot rows forbid unrelaxing, the other ways out.
    assert!(!d.fix.starts_with("use larger mini-batches"), "{}", d.fix);
    assert!(d.fix.contains("`Opts::new().threads(1)`"), "{}", d.fix);
}

#[test]
fn a_sync_for_with_long_bodies_is_not_merge_bound() {
    let data = DVector::from_fn(512, |i| i as u64).unwrap();
    let w = DVector::from_fn(4, |_| 0.0f64).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        sync_for!(
            data,
            16,
            SyncMode::Hybrid,
            |batch| {
                for x in batch {
                    w[(*x as usize) % 4] += work(*x) * 1e-9;
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let stats = stats_at(line);
    assert!(
        finding(&stats, Finding::MergeBound).is_none(),
        "{:#?}",
        stats.diagnoses
    );
}
