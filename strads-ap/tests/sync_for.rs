//! `sync_for!`: mini-batches, BSP aggregation and Hybrid merging against serial results.

use strads_ap::prelude::*;

/// Sums every element of every mini-batch into a counter; with summing aggregation every
/// mode and thread count must give the exact total, since deltas are integers.
#[test]
fn every_minibatch_runs_once_and_sum_aggregation_is_exact() {
    let data = DVector::from_fn(10_007, |i| i as i64).unwrap();
    let expected: i64 = (0..10_007).sum();
    for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
        for threads in 1..=4 {
            let total = DVector::from_fn(2, |_| 0i64)
                .unwrap()
                .aggregate_with(Aggregation::Sum);
            sync_for!(
                data,
                100,
                mode,
                |batch| {
                    for x in batch {
                        total[0] += *x;
                    }
                    total[1] += 1;
                },
                Opts::new().threads(threads)
            )
            .unwrap();
            assert_eq!(
                total.get(0).unwrap(),
                expected,
                "{mode:?} with {threads} threads"
            );
            assert_eq!(
                total.get(1).unwrap(),
                101,
                "{mode:?} with {threads} threads: batches"
            );
        }
    }
}

/// Small tables of floats, pushed whole after every mini-batch by every worker at once
/// (merged with atomic adds, no lock), lose no update: integer-valued increments, exact
/// in floating point, add up to the serial totals for `f32`, `[f64; 3]` and `Array`
/// elements; the batches claimed in runs are each run once.
#[test]
fn hybrid_whole_tables_of_floats_lose_no_update() {
    let n = 24_000usize;
    let data = DVector::from_fn(n, |i| i).unwrap();
    for threads in [2, 3] {
        let w = DVector::from_fn(8, |_| 0.5f32)
            .unwrap()
            .aggregate_with(Aggregation::Sum);
        let triples = DVector::from_fn(4, |_| [0.0f64; 3])
            .unwrap()
            .aggregate_with(Aggregation::Sum);
        let long = DVector::from_fn(2, |_| Array([0.0f32; 40]))
            .unwrap()
            .aggregate_with(Aggregation::Sum);
        sync_for!(
            data,
            5,
            SyncMode::Hybrid,
            |batch| {
                for &x in batch {
                    w[x % 8] += 1.0;
                    triples[x % 4][x % 3] += 2.0;
                    long[x % 2].0[x % 40] -= 1.0;
                }
            },
            Opts::new().threads(threads)
        )
        .unwrap();
        let mut want_w = vec![0.5f32; 8];
        let mut want_t = vec![[0.0f64; 3]; 4];
        let mut want_l = vec![[0.0f32; 40]; 2];
        for x in 0..n {
            want_w[x % 8] += 1.0;
            want_t[x % 4][x % 3] += 2.0;
            want_l[x % 2][x % 40] -= 1.0;
        }
        assert_eq!(w.to_vec().unwrap(), want_w, "{threads} threads");
        assert_eq!(triples.to_vec().unwrap(), want_t, "{threads} threads");
        let long: Vec<[f32; 40]> = long.to_vec().unwrap().into_iter().map(|a| a.0).collect();
        assert_eq!(long, want_l, "{threads} threads");
    }
}

/// A map's values merge like a vector's elements: word counts summed over mini-batches
/// are exact in both modes at every thread count, and a map of values that cannot be
/// aggregated stays read-only, saying why.
#[test]
fn map_values_merge_in_both_modes() {
    let words = ["the", "cat", "sat", "on", "mat"];
    let word = |i: usize| words[(i * 7 + i / 3) % 5];
    let data = DVector::from_fn(5_003, |i| word(i).to_string()).unwrap();
    let mut expected = std::collections::HashMap::new();
    for i in 0..5_003usize {
        *expected.entry(word(i)).or_insert(0i64) += 1;
    }
    for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
        for threads in 1..=3 {
            let counts: DMap<String, i64> =
                DMap::from_pairs(words.iter().map(|w| (w.to_string(), 0)).collect())
                    .unwrap()
                    .aggregate_with(Aggregation::Sum);
            sync_for!(
                data,
                64,
                mode,
                |batch| {
                    for w in batch {
                        counts[w] += 1;
                    }
                },
                Opts::new().threads(threads)
            )
            .unwrap();
            for w in words {
                assert_eq!(
                    counts.get(&w.to_string()).unwrap(),
                    Some(expected.get(w).copied().unwrap_or(0)),
                    "{mode:?} {threads} threads: `{w}`"
                );
            }
        }
    }
    let names: DMap<u32, String> = DMap::from_pairs(vec![(0, String::new())]).unwrap();
    let err = sync_for!(
        data,
        64,
        SyncMode::Hybrid,
        |batch| {
            names[&0].push_str(&batch[0]);
        },
        Opts::new().threads(2)
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("value type does not implement Aggregate"),
        "{err}"
    );
}

/// BSP with the default averaging: each round of `threads` mini-batches starts from the
/// same value and the value then moves by the mean of the round's deltas.
#[test]
fn bsp_averages_the_deltas_of_a_round() {
    let data = DVector::from_fn(8, |i| (i + 1) as f64).unwrap();
    let acc = DVector::from_fn(1, |_| 0.0f64).unwrap();
    sync_for!(
        data,
        2,
        SyncMode::Bsp,
        |batch| {
            for x in batch {
                acc[0] += *x;
            }
        },
        Opts::new().threads(2)
    )
    .unwrap();
    // Batches: [1,2] [3,4] | [5,6] [7,8]: rounds move by mean(3, 7) = 5 and mean(11, 15) = 13.
    assert_eq!(acc.get(0).unwrap(), 18.0);
}

/// A custom aggregation function sees the value and every worker's delta.
#[test]
fn a_custom_aggregation_is_used() {
    let data = DVector::from_fn(6, |i| i as f64).unwrap();
    let maxed = DVector::from_fn(1, |_| 0.0f64)
        .unwrap()
        .aggregate_with(Aggregation::Custom(std::sync::Arc::new(
            |value: &mut f64, deltas: &[&f64]| {
                *value += deltas.iter().map(|d| **d).fold(f64::MIN, f64::max);
            },
        )));
    sync_for!(
        data,
        1,
        SyncMode::Bsp,
        |batch| {
            maxed[0] += batch[0];
        },
        Opts::new().threads(3)
    )
    .unwrap();
    // Rounds {0,1,2} and {3,4,5}: the value grows by the largest delta of each.
    assert_eq!(maxed.get(0).unwrap(), 2.0 + 5.0);
}

/// With one thread both modes are exactly the serial loop over `chunks`.
#[test]
fn one_thread_equals_the_serial_loop() {
    let n = 5000;
    let xs: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 101.0).collect();
    let ys: Vec<f64> = xs.iter().map(|x| 3.0 * x - 1.0).collect();
    let pairs: Vec<(f64, f64)> = xs.iter().copied().zip(ys.iter().copied()).collect();
    let lr = 0.1;

    // Serial twin.
    let mut w = vec![0.0f64, 0.0];
    for batch in pairs.chunks(16) {
        let mut g = [0.0, 0.0];
        for &(x, y) in batch {
            let e = w[0] * x + w[1] - y;
            g[0] += e * x;
            g[1] += e;
        }
        w[0] -= lr * g[0] / batch.len() as f64;
        w[1] -= lr * g[1] / batch.len() as f64;
    }

    for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
        let data = DVector::from_vec(pairs.clone()).unwrap();
        let wd = DVector::from_fn(2, |_| 0.0f64).unwrap();
        sync_for!(
            data,
            16,
            mode,
            |batch| {
                let mut g = [0.0, 0.0];
                for &(x, y) in batch {
                    let e = wd[0] * x + wd[1] - y;
                    g[0] += e * x;
                    g[1] += e;
                }
                wd[0] -= lr * g[0] / batch.len() as f64;
                wd[1] -= lr * g[1] / batch.len() as f64;
            },
            Opts::new().threads(1)
        )
        .unwrap();
        assert_eq!(wd.to_vec().unwrap(), w, "{mode:?}");
    }
}

/// With reconnaissance on, a table the body only reads is shared, not copied: it is
/// bound read-only, so a write that reconnaissance did not see is refused.
#[test]
fn reconnaissance_shares_read_only_tables() {
    let data = DVector::from_fn(100, |i| i as f32).unwrap();
    let scale = DVector::from_fn(1, |_| 2.0f32).unwrap();
    let grow = DVector::from_fn(1, |_| false).unwrap();
    let out = DVector::from_fn(1, |_| 0.0f32)
        .unwrap()
        .aggregate_with(Aggregation::Sum);
    let run = || {
        sync_for!(
            data,
            10,
            SyncMode::Hybrid,
            |batch| {
                for x in batch {
                    out[0] += scale[0] * *x;
                }
                if grow[0] {
                    scale[0] += 1.0;
                }
            },
            Opts::new().threads(2).re(true)
        )
    };
    run().unwrap();
    assert_eq!(out.get(0).unwrap(), 2.0 * 4950.0);
    grow.set(0, true).unwrap();
    let err = run().unwrap_err();
    assert!(
        matches!(
            err,
            strads_ap::Error::AccessOutsidePlan { table: "scale", .. }
        ),
        "{err}"
    );
    // Said as a mini-batch loop says it: no loop index, no element locks.
    let msg = err.to_string();
    assert!(msg.contains(": the mini-batch from element "), "{msg}");
    assert!(
        msg.contains("before every call (at a reconnaissance's cost per call)"),
        "{msg}"
    );
    assert!(
        !msg.contains("loop index") && !msg.contains("element locks"),
        "{msg}"
    );
    assert_eq!(scale.get(0).unwrap(), 2.0);
}

/// Hybrid with reconnaissance: workers refresh and merge only the rows each mini-batch
/// touches (sparse models); counts stay exact and match the dense run.
#[test]
fn hybrid_with_reconnaissance_merges_only_touched_rows() {
    let n = 20_000;
    let data = DVector::from_fn(n, |i| ((i * 7919) % 1000) as u32).unwrap();
    let expected: Vec<i64> = {
        let mut c = vec![0i64; 1000];
        for i in 0..n {
            c[(i * 7919) % 1000] += 1;
        }
        c
    };
    for re in [false, true] {
        for threads in [1, 2, 3] {
            let counts = DVector::from_fn(1000, |_| 0i64)
                .unwrap()
                .aggregate_with(Aggregation::Sum);
            for _epoch in 0..2 {
                sync_for!(
                    data,
                    64,
                    SyncMode::Hybrid,
                    |batch| {
                        for &x in batch {
                            counts[x as usize] += 1;
                        }
                    },
                    Opts::new().threads(threads).re(re)
                )
                .unwrap();
            }
            let got = counts.to_vec().unwrap();
            let want: Vec<i64> = expected.iter().map(|c| 2 * c).collect();
            assert_eq!(got, want, "re={re} threads={threads}");
        }
    }
}

/// A sparse Hybrid body that touches a row reconnaissance did not see is refused (its
/// update would otherwise be lost), and the next call redoes reconnaissance.
#[test]
fn hybrid_with_reconnaissance_detects_drifting_accesses() {
    let data = DVector::from_fn(100, |i| i as u32).unwrap();
    let shift = DVector::from_fn(1, |_| 0u32).unwrap();
    let counts = DVector::from_fn(200, |_| 0i64)
        .unwrap()
        .aggregate_with(Aggregation::Sum);
    let run = || {
        sync_for!(
            data,
            10,
            SyncMode::Hybrid,
            |batch| {
                for &x in batch {
                    counts[(x + shift[0]) as usize] += 1;
                }
            },
            Opts::new().threads(2).re(true)
        )
    };
    run().unwrap();
    shift.set(0, 100).unwrap();
    let err = run().unwrap_err();
    assert!(
        matches!(
            err,
            strads_ap::Error::AccessOutsidePlan {
                table: "counts",
                ..
            }
        ),
        "{err}"
    );
    run().unwrap();
    let c = counts.to_vec().unwrap();
    assert!(c[..100].iter().all(|&x| x == 1));
    assert!(c[100..].iter().all(|&x| x == 1));
}

/// A sparse Hybrid body that writes a row reconnaissance saw it only read is refused: only
/// the rows a mini-batch wrote are merged, so the write would stay in the worker's copy and
/// be lost. The next call redoes reconnaissance, and counts every update once.
#[test]
fn hybrid_with_reconnaissance_refuses_a_write_to_a_row_it_only_read() {
    let data = DVector::from_fn(100, |i| i as u32).unwrap();
    // 0: each item reads the row of an item of the next mini-batch; 1: adds to it too.
    let also = DVector::from_fn(1, |_| 0i64).unwrap();
    let counts = DVector::from_fn(100, |_| 0i64)
        .unwrap()
        .aggregate_with(Aggregation::Sum);
    let run = || {
        sync_for!(
            data,
            10,
            SyncMode::Hybrid,
            |batch| {
                for &x in batch {
                    counts[x as usize] += 1;
                    let next = (x as usize + 10) % 100;
                    if also[0] == 0 {
                        assert!(counts[next] >= 0);
                    } else {
                        counts[next] += also[0];
                    }
                }
            },
            Opts::new().threads(2).re(true)
        )
    };
    run().unwrap();
    also.set(0, 1).unwrap();
    let err = run().unwrap_err();
    assert!(
        matches!(
            err,
            strads_ap::Error::AccessOutsidePlan {
                table: "counts",
                access: "wrote",
                ..
            }
        ),
        "{err}"
    );
    // The failed call's mini-batches that ran before the fault keep their writes; the
    // next call counts every item's two updates once.
    let before = counts.to_vec().unwrap();
    run().unwrap();
    let after = counts.to_vec().unwrap();
    assert!(
        before.iter().zip(&after).all(|(b, a)| a - b == 2),
        "{before:?} -> {after:?}"
    );
}

/// Hybrid: every mini-batch starts from the shared values as they are when it starts,
/// including other workers' pushes (with reconnaissance or without, when workers push and
/// refresh only the keys written). Each mini-batch counts the ticks of the mini-batches
/// before it (rows it never writes) and adds its own: the values seen reach the end (a
/// worker that never saw the others' rows would count only about its own share), and no
/// count is seen by more mini-batches than there are workers. Tables of at most 256
/// elements are pushed whole, and their workers keep no log of pushed keys: 200 batches.
#[test]
fn hybrid_mini_batches_start_from_the_shared_values() {
    for (batches, re, threads) in [
        (300, false, 2),
        (300, false, 3),
        (300, true, 2),
        (300, true, 3),
        (200, false, 2),
        (200, false, 3),
    ] {
        let data = DVector::from_fn(batches, |b| b).unwrap();
        {
            let ticks = DVector::from_fn(batches, |_| 0i64)
                .unwrap()
                .aggregate_with(Aggregation::Sum);
            let seen = DVector::from_fn(batches, |_| 0i64)
                .unwrap()
                .aggregate_with(Aggregation::Sum);
            sync_for!(
                data,
                1,
                SyncMode::Hybrid,
                |batch| {
                    for &b in batch {
                        // Some work, so that every worker takes mini-batches.
                        let mut x = std::hint::black_box(b as f64);
                        for _ in 0..20_000 {
                            x = (x * 1.000_001).sqrt() + 1.0;
                        }
                        let mut before = std::hint::black_box(x < 0.0) as i64;
                        for k in 0..ticks.len() {
                            before += ticks[k];
                        }
                        seen[b] += before + 1;
                        ticks[b] += 1;
                    }
                },
                Opts::new().threads(threads).re(re)
            )
            .unwrap();
            let what = format!("batches={batches} re={re} threads={threads}");
            assert_eq!(ticks.to_vec().unwrap(), vec![1; batches], "{what}");
            let seen = seen.to_vec().unwrap();
            let max = *seen.iter().max().unwrap();
            assert!(
                max >= (batches - threads) as i64,
                "{what}: the last mini-batch saw {max} of {batches}"
            );
            let mut counts = std::collections::HashMap::new();
            for v in seen {
                *counts.entry(v).or_insert(0usize) += 1;
            }
            assert!(counts.values().all(|&c| c <= threads), "{what}: {counts:?}");
        }
    }
}

/// The figures of a loop whose workers merge replicas count the merges, per worker: a
/// Hybrid loop with two workers merges after every mini-batch; a loop of one worker writes
/// the tables directly and merges nothing.
#[test]
fn loop_figures_count_the_workers_merges() {
    let data = DVector::from_fn(4_000, |i| i as f64).unwrap();
    let table = DVector::from_fn(64, |_| 0.0f64).unwrap();
    // One call site; each call's share is the difference of the site's figures.
    let figures = |line: u32| {
        let at = format!("sync_for.rs:{line}:");
        strads_ap::loop_stats()
            .into_iter()
            .find(|s| s.site.contains(&at))
    };
    let call = |threads: usize| {
        let line = line!();
        let before = figures(line + 2).map_or(std::time::Duration::ZERO, |s| s.merging);
        sync_for!(
            data,
            10,
            SyncMode::Hybrid,
            |batch| {
                for x in batch {
                    table[*x as usize % 64] += 1.0;
                }
            },
            Opts::new().threads(threads)
        )
        .unwrap();
        let now = figures(line + 2).expect("the call site's figures");
        let merged = now.merging - before;
        (now, merged)
    };
    let (s, merged) = call(2);
    assert_eq!(s.workers, 2);
    assert!(!merged.is_zero(), "{s:?}");
    let share = s.merge_share().expect("a share of the workers' time");
    assert!(share > 0.0 && share <= 1.0, "{share}");

    let (s, merged) = call(1);
    assert_eq!((s.workers, merged), (1, std::time::Duration::ZERO));
}

/// A large table every mini-batch writes whole (a layer's weights kept as a flat table
/// of scalars) is noted key by key at the site's first call on several workers and
/// pushed whole under the table's lock from its second (a new table in the same place
/// too): every worker's every change is merged exactly once either way, on 1, 2 and 4
/// workers, and across calls that switch between the two.
#[test]
fn a_table_written_densely_is_merged_exactly_when_pushed_whole() {
    let data = DVector::from_fn(600, |i| i as u64).unwrap();
    for threads in [1, 2, 4] {
        let w = DVector::from_fn(1_000, |_| 0u64).unwrap();
        let sparse = DVector::from_fn(1_000, |_| 0u64).unwrap();
        for _ in 0..3 {
            sync_for!(
                data,
                3,
                SyncMode::Hybrid,
                |batch| {
                    for x in batch {
                        for k in 0..1_000 {
                            w[k] += 1;
                        }
                        sparse[(*x as usize * 7) % 1_000] += 2;
                    }
                },
                Opts::new().threads(threads).fallback(Fallback::Never)
            )
            .unwrap();
        }
        assert_eq!(
            w.to_vec().unwrap(),
            vec![1_800u64; 1_000],
            "{threads} threads"
        );
        let mut expected = vec![0u64; 1_000];
        for x in 0..600 {
            expected[(x * 7) % 1_000] += 6;
        }
        assert_eq!(sparse.to_vec().unwrap(), expected, "{threads} threads");
    }
}
