//! `async_for!` beyond serializability: relaxed tables, index types, captures, maps.

use std::collections::HashMap;

use strads_ap::prelude::*;

#[test]
fn a_relaxed_table_does_not_serialize_the_loop_and_sums_exactly() {
    let n = 20_000;
    let docs = DVector::from_fn(n, |k| (k % 500) as u32).unwrap();
    let per_doc = DVector::from_fn(500, |_| 0u64).unwrap();
    let total = DVector::from_fn(4, |_| 0u64).unwrap().relaxed(Relaxed::Sum);
    let line = line!() + 2;
    for threads in [1, 2, 4] {
        async_for!(
            0..docs.len(),
            |k| {
                let d = docs[k] as usize;
                per_doc[d] += 1;
                total[k % 4] += 1;
            },
            Opts::new().threads(threads).fallback(Fallback::Never)
        )
        .unwrap();
    }
    assert_eq!(total.to_vec().unwrap(), vec![3 * n as u64 / 4; 4]);
    assert!(per_doc.to_vec().unwrap().iter().all(|&c| c == 3 * 40));
    let stats = strads_ap::loop_stats();
    let here = format!("async_for.rs:{line}:");
    let site = stats.iter().find(|s| s.site.contains(&here)).unwrap();
    assert!(
        site.groups > 1,
        "the relaxed table must not join all tasks: {site:?}"
    );
}

#[test]
fn a_relaxed_table_changed_between_calls_is_seen_by_the_next_call() {
    // Workers keep their replicas of a relaxed table from one call to the next: each call
    // must refill them from the table as the driver left it.
    let n = 4_000;
    let seen = DVector::from_fn(n, |_| 0u64).unwrap();
    let t = DVector::from_fn(2, |_| 0u64).unwrap().relaxed(Relaxed::Sum);
    let line = line!() + 3;
    for call in 1..=6u64 {
        t.set(0, 1000 * call).unwrap();
        async_for!(
            0..n,
            |k| {
                seen[k] = t[0];
                t[1] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
        strads_ap::wait_for_plans();
        let stale: Vec<u64> = seen
            .to_vec()
            .unwrap()
            .into_iter()
            .filter(|&s| s != 1000 * call)
            .collect();
        assert!(
            stale.is_empty(),
            "call {call} read {:?}",
            &stale[..3.min(stale.len())]
        );
        assert_eq!(t.get(1).unwrap(), n as u64 * call);
    }
    let stats = strads_ap::loop_stats();
    let here = format!("async_for.rs:{line}:");
    let site = stats.iter().find(|s| s.site.contains(&here)).unwrap();
    assert!(site.groups > 1 && site.workers == 2, "{site:?}");
}

#[test]
fn relaxed_unsigned_counts_that_go_down_and_up_merge_exactly() {
    // Each task moves one unit from one count to the next (a sampler's document leaving
    // one cluster for another): the workers' changes to a `u32` are merged modulo its
    // range, so the counts end where the serial loop's do.
    let counts = DVector::from_fn(4, |_| 1000u32)
        .unwrap()
        .relaxed(Relaxed::Sum);
    let n = 4_000;
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..n,
            |i| {
                counts[i % 4] -= 1;
                counts[(i + 1) % 4] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
        strads_ap::wait_for_plans();
    }
    assert_eq!(counts.to_vec().unwrap(), vec![1000; 4]);
    // Merged from replicas: the calls after the first ran on both workers.
    let stats = strads_ap::loop_stats();
    let here = format!("async_for.rs:{line}:");
    let site = stats.iter().find(|s| s.site.contains(&here)).unwrap();
    assert!(site.groups > 1 && site.workers == 2, "{site:?}");
}

#[test]
fn index_types_and_offsets() {
    let v = DVector::from_fn(30, |_| 0i64).unwrap();
    let base = 10u32;
    async_for!(base..20u32, |k| {
        v[k as usize] += k as i64;
    })
    .unwrap();
    let out = v.to_vec().unwrap();
    assert_eq!(out[..10], [0; 10]);
    assert_eq!(out[10..20], (10..20).collect::<Vec<i64>>()[..]);
    assert_eq!(out[20..], [0; 10]);
    // An empty range does nothing.
    async_for!(5..5usize, |k| {
        v[k] += 1;
    })
    .unwrap();
    assert_eq!(v.get(5).unwrap(), 0);
}

/// The serial body over a `HashMap<u32, Vec<u32>>` of in-neighbours (`get`, indexing)
/// runs unchanged over the `DMultiMap` made from that map, with the serial result (a
/// Jacobi step, so the order of the tasks does not matter), and a missing key indexed
/// fails the call with an error naming the map and the key.
#[test]
fn a_multimap_reads_like_the_serial_hash_map_of_lists() {
    use std::collections::HashMap;
    let n = 200usize;
    let serial: HashMap<u32, Vec<u32>> = (0..n as u32)
        .filter(|v| v % 7 != 3)
        .map(|v| {
            (
                v,
                (1..=v % 5 + 1)
                    .map(|j| (v * 31 + j * 17) % n as u32)
                    .collect(),
            )
        })
        .collect();
    let step = |in_links: &dyn Fn(u32) -> Option<Vec<u32>>| -> Vec<f64> {
        (0..n as u32)
            .map(|v| match in_links(v) {
                Some(srcs) => srcs.iter().map(|&u| f64::from(u) * 0.5).sum(),
                None => 1.0,
            })
            .collect()
    };
    let expected = step(&|v| serial.get(&v).cloned());

    let in_links = DMultiMap::from_map(serial.clone()).unwrap();
    let rank = DVector::from_fn(n, |_| 0.0f64).unwrap();
    for _ in 0..3 {
        async_for!(0..n, |k| {
            let v = k as u32;
            if let Some(srcs) = in_links.get(&v) {
                rank[k] = srcs.iter().map(|&u| f64::from(u) * 0.5).sum();
            } else {
                rank[k] = 1.0;
            }
        })
        .unwrap();
        assert_eq!(rank.to_vec().unwrap(), expected);
        async_for!(0..n, |k| {
            let v = k as u32;
            if in_links.contains_key(&v) {
                rank[k] = in_links[&v].iter().map(|&u| f64::from(u) * 0.5).sum();
            }
        })
        .unwrap();
        assert_eq!(rank.to_vec().unwrap(), expected);
    }

    let missing = async_for!(0..1usize, |k| {
        rank[k] = in_links[&3].len() as f64;
    })
    .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("key 3 is not in map `in_links`"),
        "{missing}"
    );
}

/// The Jacobi form the `one-worker` diagnosis advises for a loop whose tasks read what
/// others write: a copy made once, refilled from the table before each call (the
/// diagnosis's own idiom, `with_all` around `transform`), read in the body while the
/// table is written. Every call gives the serial Jacobi sweep, and the copy, being the
/// same table at every call, keeps the plan: one planning call, not one per call.
#[test]
fn a_copy_refilled_in_place_serves_jacobi_sweeps() {
    const N: usize = 300;
    fn links(v: usize) -> [usize; 3] {
        [(v * 7 + 1) % N, (v * 13 + 5) % N, (v + N - 1) % N]
    }
    let n = N;
    let mut serial = vec![1.0f64; n];
    let rank = DVector::from_fn(n, |_| 1.0f64).unwrap();
    let old = DVector::from_fn(n, |_| 0.0f64).unwrap();
    let mut site = 0;
    for _ in 0..4 {
        let prev = serial.clone();
        for (v, r) in serial.iter_mut().enumerate() {
            *r = 0.1 + 0.3 * links(v).iter().map(|&u| prev[u]).sum::<f64>();
        }
        rank.with_all(|r| old.transform(|i, x| *x = r[i]))
            .unwrap()
            .unwrap();
        site = line!() + 1;
        async_for!(0..n, |v| {
            let [a, b, c] = links(v);
            rank[v] = 0.1 + 0.3 * (old[a] + old[b] + old[c]);
        })
        .unwrap();
        assert_eq!(rank.to_vec().unwrap(), serial);
    }
    let stats = strads_ap::loop_stats();
    let this = stats
        .iter()
        .find(|s| s.site.contains(&format!("async_for.rs:{site}:")))
        .expect("the loop's stats");
    assert_eq!((this.calls, this.recorded_calls), (4, 1), "{this:?}");
}

/// `from_map` builds the same map whatever order the source yields its entries in:
/// the same entries inserted into hash maps in opposite orders (and so, with their
/// random hashers, iterated in different orders) give maps whose own order (`with_all`)
/// is the same, as is their content.
#[test]
fn maps_made_from_hash_maps_do_not_depend_on_their_order() {
    use std::collections::{BTreeMap, HashMap};
    let pairs: Vec<(String, u64)> = (0..300u64).map(|i| (format!("w{i}"), i * i)).collect();
    let forward: HashMap<String, u64> = pairs.iter().cloned().collect();
    let backward: HashMap<String, u64> = pairs.iter().rev().cloned().collect();
    let sorted: BTreeMap<String, u64> = pairs.iter().cloned().collect();
    let listed = |m: DMap<String, u64>| -> Vec<(String, u64)> {
        m.with_all(|all| all.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap()
    };
    let a = listed(DMap::from_map(forward).unwrap());
    let b = listed(DMap::from_map(backward).unwrap());
    let c = listed(DMap::from_map(sorted).unwrap());
    assert_eq!(a.len(), pairs.len());
    assert_eq!(a, b);
    assert_eq!(a, c);
    let mut got = a;
    got.sort();
    let mut want = pairs;
    want.sort();
    assert_eq!(got, want);

    let lists = |rev: bool| -> HashMap<u8, Vec<u8>> {
        let mut keys: Vec<u8> = (0..50).collect();
        if rev {
            keys.reverse();
        }
        keys.into_iter().map(|k| (k, vec![k, k / 2, 7])).collect()
    };
    let listed = |m: DMultiMap<u8, u8>| -> Vec<(u8, Vec<u8>)> {
        m.with_all(|all| all.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap()
    };
    let m = listed(DMultiMap::from_map(lists(false)).unwrap());
    assert_eq!(m, listed(DMultiMap::from_map(lists(true)).unwrap()));
    assert_eq!(m.len(), 50);
    assert!(m.iter().all(|(k, vs)| *vs == vec![*k, *k / 2, 7]));
}

#[test]
fn maps_are_readable_inside_bodies() {
    let weights = DMap::from_pairs(vec![(1u32, 10.0f64), (2, 20.0), (3, 30.0)]).unwrap();
    let lists = DMultiMap::from_pairs(vec![(0usize, 1u32), (0, 2), (1, 3)]).unwrap();
    let out = DVector::from_fn(3, |_| 0.0f64).unwrap();
    async_for!(0..out.len(), |k| {
        for key in lists.get_all(&k) {
            out[k] += weights[key];
        }
        if weights.contains_key(&(k as u32 + 7)) {
            out[k] = -1.0;
        }
    })
    .unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![30.0, 30.0, 0.0]);

    let missing = async_for!(0..1usize, |k| {
        out[k] = weights[&99];
    })
    .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("key 99 is not in map `weights`"),
        "{missing}"
    );
}

#[test]
fn captured_plain_values_are_copies() {
    #[derive(Clone, serde::Serialize, serde::Deserialize)]
    struct Hyper {
        rate: f64,
        names: Vec<String>,
    }
    let hyper = Hyper {
        rate: 0.5,
        names: vec!["a".into(), "b".into()],
    };
    let v = DVector::from_fn(4, |i| i as f64).unwrap();
    async_for!(0..v.len(), |k| {
        v[k] *= hyper.rate * hyper.names.len() as f64;
    })
    .unwrap();
    assert_eq!(v.to_vec().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(hyper.names.len(), 2);
}

#[test]
fn two_handles_of_one_table_in_one_body_are_refused() {
    // Their views would alias one element mutably and immutably.
    let v = DVector::from_fn(4, |_| 1u32).unwrap();
    let w = v.clone();
    let err = async_for!(0..w.len(), |k| {
        w[k] += v[k];
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("`w` and `v` are handles of the same DDS"),
        "{err}"
    );
    assert_eq!(v.to_vec().unwrap(), vec![1; 4]);
}

#[test]
fn maps_are_writable_inside_bodies_under_the_plan() {
    // Word counts: many tasks add to the same key, so the planner must group them.
    let words: Vec<String> = (0..5000)
        .map(|i| format!("w{}", (i * i + 7 * i) % 97))
        .collect();
    let mut expected: HashMap<String, u64> = HashMap::new();
    for w in &words {
        *expected.entry(w.clone()).or_default() += 1;
    }
    for threads in 1..=4 {
        let text = DVector::from_vec(words.clone()).unwrap();
        let counts =
            DMap::from_pairs(expected.keys().map(|w| (w.clone(), 0u64)).collect()).unwrap();
        async_for!(
            0..text.len(),
            |k| {
                counts[&text[k]] += 1;
            },
            Opts::new().threads(threads).fallback(Fallback::Never)
        )
        .unwrap();
        let got: HashMap<String, u64> = counts.to_vec().unwrap().into_iter().collect();
        assert_eq!(got, expected, "{threads} threads");
    }
}

#[test]
fn a_map_key_added_between_calls_is_planned_for() {
    let keys = DVector::from_vec(vec![1u32, 2, 3, 1, 2, 3]).unwrap();
    let totals = DMap::from_pairs(vec![(1u32, 0i64), (2, 0), (3, 0)]).unwrap();
    let run = || {
        async_for!(
            0..keys.len(),
            |k| {
                if let Some(t) = totals.get_mut(&keys[k]) {
                    *t += k as i64;
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    run().unwrap();
    // A new key moves positions; the cached plan must not be reused blindly.
    totals.remove(&1).unwrap();
    totals.insert(4, 100).unwrap();
    keys.set(0, 4).unwrap();
    run().unwrap();
    let mut got = totals.to_vec().unwrap();
    got.sort();
    assert_eq!(got, vec![(2, 2 * (1 + 4)), (3, 2 * (2 + 5)), (4, 100)]);
}

#[test]
fn adding_a_key_inside_a_body_is_a_clear_error() {
    let totals = DMap::from_pairs(vec![(1u32, 0i64)]).unwrap();
    let err = async_for!(
        0..2u32,
        |k| {
            totals[&(k + 1)] += 1;
        },
        Opts::new().threads(1)
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("key 2 is not in map `totals`"), "{msg}");
    assert!(
        msg.contains("insert them in driver code before the loop"),
        "{msg}"
    );
}

#[test]
fn multimap_lists_can_grow_inside_bodies() {
    let pairs = DVector::from_fn(300, |i| ((i % 7) as u8, i as u32)).unwrap();
    let groups = DMultiMap::from_pairs((0..7u8).map(|g| (g, 0u32)).collect()).unwrap();
    async_for!(
        0..pairs.len(),
        |k| {
            let (g, v) = pairs[k];
            if let Some(list) = groups.get_mut(&g) {
                list.push(v);
            }
        },
        Opts::new().threads(3).fallback(Fallback::Never)
    )
    .unwrap();
    for g in 0..7u8 {
        let mut got = groups.get_all(&g).unwrap();
        got.sort();
        let mut want: Vec<u32> = std::iter::once(0)
            .chain((0..300).filter(|i| i % 7 == g as u32))
            .collect();
        want.sort();
        assert_eq!(got, want);
    }
}

#[test]
fn plans_kept_per_call_site_are_bounded_and_the_latest_are_reused() {
    use strads_ap::internals::{cached_plans, KEPT_PER_SITE};
    let w = DVector::from_fn(1000, |_| 0u64).unwrap();
    let line = line!() + 2;
    let run = |end: usize| {
        async_for!(
            0..end,
            |k| w[k] += 1,
            Opts::new().threads(3).fallback(Fallback::Never)
        )
        .unwrap();
    };
    // A call site over ever-changing ranges: one plan per range, but only the most
    // recently used are kept.
    for end in 100..100 + 3 * KEPT_PER_SITE {
        run(end);
    }
    assert_eq!(cached_plans(file!(), line), KEPT_PER_SITE);
    let recon = |s: &strads_ap::LoopStats| s.recon;
    let site = || {
        strads_ap::loop_stats()
            .into_iter()
            .find(|s| s.site.contains(&format!("async_for.rs:{line}:")))
            .expect("this loop's figures")
    };
    // The latest range is still planned: no reconnaissance.
    let before = recon(&site());
    run(100 + 3 * KEPT_PER_SITE - 1);
    assert_eq!(recon(&site()), before, "the latest plan was kept");
    // The first range's plan was dropped: reconnaissance again.
    run(100);
    assert!(recon(&site()) > before, "the oldest plan was dropped");
    assert_eq!(cached_plans(file!(), line), KEPT_PER_SITE);
    // Every call ran every index of its range once.
    let ends: Vec<usize> = (100..100 + 3 * KEPT_PER_SITE)
        .chain([100 + 3 * KEPT_PER_SITE - 1, 100])
        .collect();
    let want: Vec<u64> = (0..1000)
        .map(|k| ends.iter().filter(|&&e| k < e).count() as u64)
        .collect();
    assert_eq!(w.to_vec().unwrap(), want);
}

/// Rows longer than serde's 32-element arrays, as `Array<T, N>`: an MF-style loop over
/// 50-float rows matches the serial loop over `[f32; 50]` to the bit on one worker, and
/// `sync_for!` sums 128-float rows.
#[test]
fn arrays_longer_than_32_are_elements() {
    const R: usize = 50;
    let (users, items, n) = (40, 30, 3000);
    let pair = |k: usize| ((k * 7) % users, (k * 11 + 3) % items);
    let init =
        |i: usize| std::array::from_fn::<f32, R, _>(|f| 0.1 + ((i * 31 + f) % 7) as f32 * 0.01);
    let mut w: Vec<[f32; R]> = (0..users).map(init).collect();
    let mut h: Vec<[f32; R]> = (0..items).map(|j| init(j + 100)).collect();
    for k in 0..n {
        let (u, v) = pair(k);
        let err = 1.0 - (0..R).map(|f| w[u][f] * h[v][f]).sum::<f32>();
        for f in 0..R {
            let (a, b) = (w[u][f], h[v][f]);
            w[u][f] += 0.01 * (err * b - 0.05 * a);
            h[v][f] += 0.01 * (err * a - 0.05 * b);
        }
    }

    let pairs = DVector::from_fn(n, pair).unwrap();
    let wd: DVector<Array<f32, R>> = DVector::from_fn(users, |i| Array(init(i))).unwrap();
    let hd: DVector<Array<f32, R>> = DVector::from_fn(items, |j| Array(init(j + 100))).unwrap();
    async_for!(
        0..pairs.len(),
        |k| {
            let (u, v) = pairs[k];
            let err = 1.0 - (0..R).map(|f| wd[u][f] * hd[v][f]).sum::<f32>();
            for f in 0..R {
                let (a, b) = (wd[u][f], hd[v][f]);
                wd[u][f] += 0.01 * (err * b - 0.05 * a);
                hd[v][f] += 0.01 * (err * a - 0.05 * b);
            }
        },
        Opts::new().threads(1)
    )
    .unwrap();
    let got: Vec<[f32; R]> = wd.to_vec().unwrap().into_iter().map(Into::into).collect();
    assert_eq!(got, w);
    assert_eq!(hd.get(3).unwrap().0, h[3]);

    let data = DVector::from_fn(64, |i| i as f64).unwrap();
    let acc = DVector::from_fn(2, |_| Array([0.0f64; 128]))
        .unwrap()
        .aggregate_with(Aggregation::Sum);
    sync_for!(data, 8, SyncMode::Bsp, |batch| {
        for &x in batch {
            for f in 0..128 {
                acc[0][f] += x;
            }
        }
    })
    .unwrap();
    let total: f64 = (0..64).map(f64::from).sum();
    assert_eq!(acc.get(0).unwrap(), Array([total; 128]));
}

/// A large read-only value captured as an `Arc` is shared by the workers, not copied:
/// the body reads it like the `Vec`, and every worker sees the same allocation.
#[test]
fn a_captured_arc_is_shared_not_copied() {
    let table = std::sync::Arc::new((0..10_000).map(|i| i as f64).collect::<Vec<f64>>());
    let at = table.as_ptr() as usize;
    let out = DVector::from_fn(1000, |_| 0.0f64).unwrap();
    let seen = DVector::from_fn(1000, |_| 0usize).unwrap();
    async_for!(
        0..out.len(),
        |k| {
            out[k] = table[k * 10] + table[k * 10 + 1];
            seen[k] = table.as_ptr() as usize;
        },
        Opts::new().threads(2)
    )
    .unwrap();
    assert_eq!(out.get(3).unwrap(), 61.0);
    assert!(seen.to_vec().unwrap().iter().all(|&p| p == at));
}

/// A rotation over a task table of string records lays the table out in plan order after
/// planning (each record's strings get fresh memory in the order the workers read them):
/// the records must come out unchanged, and every task must still see its own record.
#[test]
fn a_task_table_of_strings_laid_out_in_plan_order_keeps_its_records() {
    let (users, items, n) = (300usize, 200usize, 30_000usize);
    let record = |k: usize| {
        (
            format!("u{}", (k * 7919) % users),
            format!("i{}", (k * 104_729) % items),
        )
    };
    let records: Vec<(String, String)> = (0..n).map(record).collect();
    let pairs = DVector::from_vec(records.clone()).unwrap();
    let per_user = DVector::from_fn(users, |_| 0u64).unwrap();
    let per_item = DVector::from_fn(items, |_| 0u64).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..pairs.len(),
            |k| {
                let (u, i) = &pairs[k];
                let u: usize = u[1..].parse().unwrap();
                let i: usize = i[1..].parse().unwrap();
                per_user[u] += 1;
                per_item[i] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    assert_eq!(pairs.to_vec().unwrap(), records);
    let (mut users_seen, mut items_seen) = (vec![0u64; users], vec![0u64; items]);
    for (u, i) in &records {
        users_seen[u[1..].parse::<usize>().unwrap()] += 3;
        items_seen[i[1..].parse::<usize>().unwrap()] += 3;
    }
    assert_eq!(per_user.to_vec().unwrap(), users_seen);
    assert_eq!(per_item.to_vec().unwrap(), items_seen);
    let stats = strads_ap::loop_stats();
    let here = format!("async_for.rs:{line}:");
    let site = stats.iter().find(|s| s.site.contains(&here)).unwrap();
    assert_eq!(site.strategy, "rotation", "{site:?}");
}
