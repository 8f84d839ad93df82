//! `async_for!` across ranks: an in-process cluster (threads over the `mem` transport)
//! running the same loops as a world of one, checked for serializability, for results
//! equal to a world of one, and for failures that stop every rank.

mod common;

use common::{
    acyclic, check_serializable, mf_epoch, on_ranks, random_patterns, run_order_sensitive,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strads_ap::prelude::*;
use strads_ap::Error;

/// The order-sensitive body of `serializability.rs` on 4 ranks: every element's history
/// admits one serial order and every task runs once, on every rank's view of the result.
#[test]
fn random_access_patterns_are_serializable_on_4_ranks() {
    for (seed, hot) in [(0, false), (1, false), (2, true), (3, true)] {
        for threads in [1, 2] {
            let patterns = random_patterns(seed, 1500, 200, hot);
            let results = on_ranks(4, || run_order_sensitive(&patterns, 200, threads));
            let mut first = None;
            for (rank, r) in results.into_iter().enumerate() {
                let got = r.unwrap_or_else(|e| panic!("seed {seed} {threads}t rank {rank}: {e}"));
                match &first {
                    None => {
                        check_serializable(&patterns, &got.0, &got.1, &got.2);
                        first = Some(got);
                    }
                    Some(f) => assert_eq!(f, &got, "rank {rank} sees a different result"),
                }
            }
        }
    }
}

/// Whether two calls of `n` tasks, each appending its index to every element it writes
/// (`seqs`: per element, the appends in order), admit one serial order: a task's first
/// append is node `t`, its second (the second call's) node `t + n`.
fn two_calls_serializable<'a>(seqs: impl Iterator<Item = &'a Vec<u32>>, n: usize) -> bool {
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); 2 * n];
    for seq in seqs {
        let mut once = std::collections::HashSet::new();
        let nodes: Vec<usize> = seq
            .iter()
            .map(|&t| t as usize + if once.insert(t) { 0 } else { n })
            .collect();
        for p in nodes.windows(2) {
            edges[p[0]].push(p[1]);
        }
    }
    acyclic(&edges)
}

/// Matrix-factorisation-shaped tasks (one key in each of two tables) rotate blocks
/// around the ranks; the result is serializable and complete.
#[test]
fn rotation_across_ranks_is_serializable() {
    for world in [2, 3] {
        for threads in [1, 2] {
            let (n, rows, cols) = (3000, 120usize, 50usize);
            let mut rng = ChaCha8Rng::seed_from_u64(world as u64 * 10 + threads as u64);
            let pairs: Vec<(u32, u32)> = (0..n)
                .map(|_| (rng.gen_range(0..rows) as u32, rng.gen_range(0..cols) as u32))
                .collect();
            let results = on_ranks(world, move || {
                let pairs_v = DVector::from_vec(pairs.clone())?;
                let w = DVector::from_fn(rows, |_| Vec::<u32>::new())?;
                let h = DVector::from_fn(cols, |_| Vec::<u32>::new())?;
                // Two calls: the second runs the cached plan from the tables' shadows.
                for _ in 0..2 {
                    async_for!(
                        0..pairs_v.len(),
                        |k| {
                            let (i, j) = pairs_v[k];
                            w[i as usize].push(k as u32);
                            h[j as usize].push(k as u32);
                        },
                        Opts::new().threads(threads)
                    )?;
                }
                Ok((w.to_vec()?, h.to_vec()?))
            });
            for (rank, r) in results.into_iter().enumerate() {
                let (w, h) = r.unwrap_or_else(|e| panic!("{world} ranks {threads}t: {e}"));
                // Each call appends every task once per key it touches, the first call's
                // appends before the second's: a task's second append is its second run.
                assert!(
                    two_calls_serializable(w.iter().chain(h.iter()), n),
                    "{world} ranks {threads}t rank {rank}: not serializable"
                );
                let total: usize = w.iter().map(Vec::len).sum();
                assert_eq!(total, 2 * n);
                let total: usize = h.iter().map(Vec::len).sum();
                assert_eq!(total, 2 * n);
            }
        }
    }
}

/// Biased-MF-shaped tasks (four written tables in two dimensions: `bw` keyed like `w`,
/// `bh` one to one with `h`) rotate across ranks too; serializable and complete, the
/// same on every rank.
#[test]
fn dimensions_rotate_across_ranks_serializably() {
    for world in [2, 3] {
        let (n, rows, cols) = (3000, 120usize, 50usize);
        let mut rng = ChaCha8Rng::seed_from_u64(70 + world as u64);
        let pairs: Vec<(u32, u32)> = (0..n)
            .map(|_| (rng.gen_range(0..rows) as u32, rng.gen_range(0..cols) as u32))
            .collect();
        let results = on_ranks(world, move || {
            let pairs_v = DVector::from_vec(pairs.clone())?;
            let w = DVector::from_fn(rows, |_| Vec::<u32>::new())?;
            let h = DVector::from_fn(cols, |_| Vec::<u32>::new())?;
            let bw = DVector::from_fn(rows, |_| Vec::<u32>::new())?;
            let bh = DVector::from_fn(cols, |_| Vec::<u32>::new())?;
            let line = line!() + 2;
            for _ in 0..2 {
                async_for!(
                    0..pairs_v.len(),
                    |k| {
                        let (i, j) = pairs_v[k];
                        let (i, j) = (i as usize, j as usize);
                        bw[i].push(k as u32);
                        w[i].push(k as u32);
                        h[j].push(k as u32);
                        bh[(j * 7 + 3) % cols].push(k as u32);
                    },
                    Opts::new().threads(1)
                )?;
            }
            let site = common::stats_at("dist_async.rs", line);
            Ok((
                site.strategy,
                [w.to_vec()?, h.to_vec()?, bw.to_vec()?, bh.to_vec()?],
            ))
        });
        let mut first = None;
        for (rank, r) in results.into_iter().enumerate() {
            let (strategy, tables) = r.unwrap_or_else(|e| panic!("{world} ranks: {e}"));
            assert_eq!(strategy, "rotation", "{world} ranks, rank {rank}");
            assert!(
                two_calls_serializable(tables.iter().flatten(), n),
                "{world} ranks, rank {rank}: not serializable"
            );
            for t in &tables {
                assert_eq!(t.iter().map(Vec::len).sum::<usize>(), 2 * n);
            }
            match &first {
                None => first = Some(tables),
                Some(f) => assert_eq!(f, &tables, "rank {rank} sees another result"),
            }
        }
    }
}

/// A small matrix factorisation trained by SGD on 2 and 3 ranks reaches the fit of a
/// world of one with as many workers (within 2%), and every rank holds the same model.
#[test]
fn matrix_factorisation_matches_a_world_of_one() {
    let (users, items, rank_k) = (60usize, 30usize, 4usize);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let truth_u: Vec<Vec<f32>> = (0..users)
        .map(|_| (0..rank_k).map(|_| rng.gen_range(0.0..1.0)).collect())
        .collect();
    let truth_i: Vec<Vec<f32>> = (0..items)
        .map(|_| (0..rank_k).map(|_| rng.gen_range(0.0..1.0)).collect())
        .collect();
    let ratings: Vec<(u32, u32, f32)> = (0..1200)
        .map(|_| {
            let (u, i) = (rng.gen_range(0..users), rng.gen_range(0..items));
            let r = truth_u[u].iter().zip(&truth_i[i]).map(|(a, b)| a * b).sum();
            (u as u32, i as u32, r)
        })
        .collect();
    let train = move |threads: usize| -> strads_ap::Result<(f64, Vec<Vec<f32>>)> {
        let data = DVector::from_vec(ratings.clone())?;
        let w = DVector::from_fn(users, |u| vec![0.1 + (u % 7) as f32 * 0.01; rank_k])?;
        let h = DVector::from_fn(items, |i| vec![0.1 + (i % 5) as f32 * 0.01; rank_k])?;
        for _ in 0..30 {
            mf_epoch(&data, &w, &h, 0.05, threads)?;
        }
        let (w, h, data) = (w.to_vec()?, h.to_vec()?, data.to_vec()?);
        let sse: f64 = data
            .iter()
            .map(|&(u, i, r)| {
                let p: f32 = w[u as usize]
                    .iter()
                    .zip(&h[i as usize])
                    .map(|(a, b)| a * b)
                    .sum();
                ((r - p) as f64).powi(2)
            })
            .sum();
        Ok(((sse / data.len() as f64).sqrt(), w))
    };
    let train = std::sync::Arc::new(train);
    for world in [2, 3] {
        let local = train.clone();
        let (serial_rmse, _) = local(world).unwrap();
        let dist = train.clone();
        // On 3 ranks the planning call fetches what it reads rather than gathering.
        let fetch = (world == 3).then_some(0);
        let results = on_ranks(world, move || {
            strads_ap::set_fetch_above(fetch);
            dist(1)
        });
        let mut first: Option<Vec<Vec<f32>>> = None;
        for (rank, r) in results.into_iter().enumerate() {
            let (rmse, w) = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
            assert!(
                serial_rmse < 0.2,
                "the world of one did not fit: {serial_rmse}"
            );
            assert!(
                (rmse - serial_rmse).abs() <= 0.02 * serial_rmse.max(0.05),
                "{world} ranks: rmse {rmse} vs {serial_rmse} in a world of one"
            );
            match &first {
                None => first = Some(w),
                Some(f) => assert_eq!(f, &w, "rank {rank} holds a different model"),
            }
        }
    }
}

/// A relaxed table's updates from every rank add up exactly, call after call, and the
/// written tables read correctly afterwards.
#[test]
fn relaxed_totals_add_up_across_ranks() {
    for world in [2, 3] {
        let results = on_ranks(world, || {
            let n = 5_000;
            let docs = DVector::from_fn(n, |k| (k % 97) as u32)?;
            let per_doc = DVector::from_fn(97, |_| 0u64)?;
            let total = DVector::from_fn(3, |_| 0u64)?.relaxed(Relaxed::Sum);
            for _ in 0..3 {
                async_for!(
                    0..docs.len(),
                    |k| {
                        per_doc[docs[k] as usize] += 1;
                        total[k % 3] += 1;
                    },
                    Opts::new().threads(2)
                )?;
            }
            Ok((total.to_vec()?, per_doc.to_vec()?))
        });
        for r in results {
            let (total, per_doc) = r.unwrap();
            let expected: Vec<u64> = (0..3)
                .map(|j| 3 * (0..5_000).filter(|k| k % 3 == j).count() as u64)
                .collect();
            assert_eq!(total, expected, "{world} ranks");
            for (d, &c) in per_doc.iter().enumerate() {
                assert_eq!(c, 3 * (0..5_000).filter(|k| k % 97 == d).count() as u64);
            }
        }
    }
}

/// A relaxed map's updates from every rank add up exactly, call after call.
#[test]
fn relaxed_map_totals_add_up_across_ranks() {
    for world in [2, 3] {
        let results = on_ranks(world, || {
            let n = 4_000;
            let docs = DVector::from_fn(n, |k| (k % 89) as u32)?;
            let per_doc = DVector::from_fn(89, |_| 0u64)?;
            let totals: DMap<String, u64> =
                DMap::from_pairs((0..3).map(|j| (format!("t{j}"), 0)).collect())?
                    .relaxed(Relaxed::Sum);
            for _ in 0..3 {
                async_for!(
                    0..docs.len(),
                    |k| {
                        per_doc[docs[k] as usize] += 1;
                        totals[&format!("t{}", k % 3)] += 1;
                    },
                    Opts::new().threads(2)
                )?;
            }
            let got = (0..3)
                .map(|j| Ok(totals.get(&format!("t{j}"))?.unwrap_or(0)))
                .collect::<strads_ap::Result<Vec<u64>>>()?;
            Ok((got, per_doc.to_vec()?))
        });
        for r in results {
            let (totals, per_doc) = r.unwrap();
            let expected: Vec<u64> = (0..3)
                .map(|j| 3 * (0..4_000).filter(|k| k % 3 == j).count() as u64)
                .collect();
            assert_eq!(totals, expected, "{world} ranks");
            for (d, &c) in per_doc.iter().enumerate() {
                assert_eq!(c, 3 * (0..4_000).filter(|k| k % 89 == d).count() as u64);
            }
        }
    }
}

/// Read-only tables are fetched once and kept between calls; a change made between
/// calls (by driver code on one rank's part) is seen by every rank's tasks.
#[test]
fn read_only_tables_changed_between_calls_are_seen() {
    let results = on_ranks(3, || {
        let n = 300;
        let src = DVector::from_fn(n, |k| k as u64)?;
        let out = DVector::from_fn(n, |_| 0u64)?;
        let mut seen = Vec::new();
        for call in 0..4 {
            if call == 2 {
                // Element 0 lives on rank 0; tasks on other ranks read it.
                src.set(0, 1_000)?;
            }
            async_for!(
                0..out.len(),
                |k| {
                    out[k] = src[out.len() - 1 - k] + src[0];
                },
                Opts::new().threads(2)
            )?;
            seen.push(out.to_vec()?);
        }
        Ok(seen)
    });
    for r in results {
        let seen = r.unwrap();
        let expect = |zero: u64| -> Vec<u64> {
            (0..300u64)
                .map(|k| {
                    if k == 299 {
                        zero + zero
                    } else {
                        299 - k + zero
                    }
                })
                .collect()
        };
        assert_eq!(seen[0], expect(0));
        assert_eq!(seen[1], expect(0));
        assert_eq!(seen[2], expect(1_000));
        assert_eq!(seen[3], expect(1_000));
    }
}

/// A body that panics on one rank stops every rank: that rank reports the panic, the
/// others name it; nobody hangs. The next call runs normally.
#[test]
fn a_panic_on_one_rank_fails_every_rank() {
    let results = on_ranks(3, || {
        let v = DVector::from_fn(600, |k| k as u64)?;
        let fail = DVector::from_fn(1, |_| true)?;
        let run = || {
            async_for!(
                0..v.len(),
                |k| {
                    if fail[0] && k == 450 {
                        panic!("task 450 refuses");
                    }
                    v[k] += 1;
                },
                Opts::new().threads(2)
            )
        };
        let first = run();
        fail.set(0, false)?;
        run()?;
        Ok((first, v.get(10)?))
    });
    let mut panicked = 0;
    for (rank, r) in results.into_iter().enumerate() {
        let (first, after) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        match first {
            Err(Error::BodyPanicked { index, message, .. }) => {
                assert_eq!(index, 450);
                assert!(message.contains("task 450 refuses"), "{message}");
                panicked += 1;
            }
            Err(Error::RemoteFailure { message, .. }) => {
                assert!(message.contains("task 450 refuses"), "{message}");
            }
            other => panic!("rank {rank}: expected a failure, got {other:?}"),
        }
        assert!(after >= 11, "the second call ran on rank {rank}");
    }
    assert_eq!(panicked, 1, "exactly one rank ran task 450");
}

/// An access that depends on a value changed since the plan was made is caught across
/// ranks too, and the next call re-plans.
#[test]
fn a_parameter_dependent_access_is_detected_across_ranks() {
    let results = on_ranks(2, || {
        let target = DVector::from_fn(100, |k| k)?;
        let w = DVector::from_fn(200, |_| 0u32)?;
        let run = || {
            async_for!(
                0..target.len(),
                |k| {
                    let t = target[k];
                    w[t] += 1;
                },
                Opts::new().threads(2)
            )
        };
        run()?;
        target.set(40, 150)?;
        let err = run();
        run()?;
        Ok((err, w.to_vec()?))
    });
    let mut outside = 0;
    for r in results {
        let (err, w) = r.unwrap();
        match err {
            Err(Error::AccessOutsidePlan {
                key: 150,
                table: "w",
                ..
            }) => outside += 1,
            Err(Error::RemoteFailure { message, .. }) => {
                assert!(message.contains("w[150]"), "{message}")
            }
            other => panic!("expected the access to be caught, got {other:?}"),
        }
        assert_eq!(w[150], 1);
    }
    assert_eq!(outside, 1);
}

/// Across ranks, a rotation cell's blocks travel whole (every key fetched before the cell
/// runs, and sent on and home after it), so a group skips tag checks inside its window as
/// in a world of one. In a rotation over users and items (even ids only), writes to a
/// user and an item reconnaissance saw no task touch (task 40 now writes the odd ones
/// beside its own, in its blocks) are then no error, and the result is a world of one's.
#[test]
fn unforeseen_writes_inside_a_cells_blocks_are_exact_across_ranks() {
    let job = |threads: usize| {
        let users = DVector::from_fn(2000, |k| (k * 7) % 100 * 2)?;
        let items = DVector::from_fn(2000, |k| k % 20 * 2)?;
        // Rows of `Vec`s: between calls each rank keeps placeholders (empty rows) for the
        // other ranks' users, which no step may read.
        let w = DVector::from_fn(200, |_| vec![0u32])?;
        let h = DVector::from_fn(40, |_| 0u32)?;
        let run = || {
            async_for!(
                0..users.len(),
                |k| {
                    w[users[k]][0] += 1;
                    h[items[k]] += 1;
                },
                Opts::new().threads(threads)
            )
        };
        run()?;
        let (u, i) = (users.get(40)?, items.get(40)?);
        users.set(40, u + 1)?;
        items.set(40, i + 1)?;
        run()?;
        let strategies: Vec<&str> = strads_ap::loop_stats().iter().map(|s| s.strategy).collect();
        let w: Vec<u32> = w.to_vec()?.into_iter().map(|row| row[0]).collect();
        Ok::<_, Error>((w, h.to_vec()?, strategies))
    };
    let alone = job(2).unwrap();
    assert_eq!(alone.0.iter().sum::<u32>(), 4000);
    assert_eq!((alone.0[161], alone.1[1]), (1, 1));
    for r in on_ranks(2, move || job(1)) {
        let dist = r.unwrap();
        assert_eq!((&dist.0, &dist.1), (&alone.0, &alone.1));
        assert!(dist.2.contains(&"rotation"), "{:?}", dist.2);
    }
}

/// Under `recheck(true)` across ranks, a body whose writes follow values other tasks of the
/// same call change (write only while a condition holds, as a hinge loss does) fails with
/// an error that says so and names the fixes, not with advice to pass `recheck(true)`.
#[test]
fn writes_chosen_by_values_under_recheck_say_so_across_ranks() {
    let results = on_ranks(2, || {
        // A wave: task k passes the mark on only if it has it. Reconnaissance at the start
        // of a call sees the marks as they were; once task k-1 has passed the mark on
        // within the call, task k writes `x[k + 1]`, which its reconnaissance did not.
        let n = 64;
        let x = DVector::from_fn(n, |k| if k == 0 { 1.0f32 } else { 0.0 })?;
        let mut outcomes = Vec::new();
        for call in 0..5 {
            let r = async_for!(
                0..x.len(),
                |k| {
                    if x[k] > 0.5 && k + 1 < x.len() {
                        x[k + 1] = 1.0;
                    }
                },
                Opts::new().threads(2).recheck(true)
            );
            outcomes.push((call, r));
        }
        Ok(outcomes)
    });
    let mut said = 0;
    for r in results {
        for (call, e) in r.unwrap() {
            match e {
                Ok(()) => {}
                Err(Error::WritesDependOnValues { table, .. }) => {
                    assert_eq!(table, "x");
                    said += 1;
                }
                Err(Error::RemoteFailure { message, .. }) => {
                    assert!(message.contains("whatever the values"), "{message}")
                }
                Err(other) => panic!("call {call}: expected WritesDependOnValues, got {other}"),
            }
        }
    }
    assert!(said >= 1, "no rank reported writes that depend on values");
}

/// Maps across ranks: driver operators, joins, save/load and `async_for!` bodies that
/// read and write map entries give what a world of one gives, on every rank.
#[test]
fn maps_across_ranks_match_a_world_of_one() {
    let dir = std::env::temp_dir().join(format!("strads-dist-maps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.clone();
    let job = move || -> strads_ap::Result<String> {
        let rank = strads_ap::cluster::here().rank();
        let dir = root.join(format!(
            "{}-{rank}",
            strads_ap::cluster::here().world_size()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let counts = DMap::from_pairs((0..200u64).map(|k| (k, k * 2)).collect())?;
        counts.insert(500, 7)?;
        let replaced = counts.insert(3, 30)?;
        let removed = counts.remove(&4)?;
        let hits = DVector::from_fn(3000, |i| (i as u64 * 7919) % 203)?;
        let lists = DMultiMap::from_pairs(vec![(1u64, 0u64), (2, 0)])?;
        for call in 0..2 {
            async_for!(
                0..hits.len(),
                |k| {
                    let key = hits[k];
                    if let Some(c) = counts.get_mut(&key) {
                        *c += 1;
                    }
                    if key % 50 == 1 {
                        lists.get_mut(&(key % 2 + 1)).unwrap().push(k as u64);
                    }
                },
                Opts::new().threads(2)
            )?;
            if call == 0 {
                counts.insert(201, 0)?;
            }
        }
        // Driver reads right after the loop, while the values a rank does not own are
        // stale there (`read_all`, `with_all` and the join refresh them), see the values
        // the loop wrote; while `read_all`'s result lives the map refuses writes.
        let total = counts.map_reduce(|_, v| *v, |a, b| a + b)?;
        // Few keys were hit this rarely; a stale value (never hit) would pass on any rank.
        let cold = counts.filter(|k, v| *v <= k * 2 + 20)?.to_vec()?;
        let all = counts.read_all()?;
        let mut weighted = 0;
        for (k, v) in &all {
            weighted += k * v;
        }
        let read = (weighted, all[&17], all.len());
        let busy = counts.insert(999, 1).map_err(|e| e.to_string());
        drop(all);
        let message = busy.expect_err("an insert while read_all's result lives");
        assert!(message.contains("read_all"), "{message}");
        let again = counts.with_all(|c| (c.iter().map(|(k, v)| k * v).sum(), c[&17], c.len()))?;
        assert_eq!(again, read);
        let joined = hits.join(&counts, |h| *h)?;
        let path = dir.join("counts.map");
        counts.save(&path)?;
        let loaded: DMap<u64, u64> = DMap::load(&path)?;
        let mut l1 = lists.get_all(&1)?;
        let mut l2 = lists.get_all(&2)?;
        l1.sort_unstable();
        l2.sort_unstable();
        let mut listed = lists.to_vec()?;
        listed.sort_unstable();
        Ok(format!(
            "{:?} {replaced:?} {removed:?} {:?} {:?} {} {} {:?} {:?} {} {:?} {read:?} {total} \
             {cold:?} {listed:?}",
            counts.to_vec()?,
            counts.get(&17)?,
            counts.get(&4)?,
            counts.len(),
            counts.contains_key(&201)?,
            joined.to_vec()?,
            loaded.to_vec()? == counts.to_vec()?,
            lists.len()?,
            (l1, l2),
        ))
    };
    let job = std::sync::Arc::new(job);
    let one = {
        let job = job.clone();
        on_ranks(1, move || job()).pop().unwrap().unwrap()
    };
    for world in [2, 3] {
        let job = job.clone();
        for (rank, r) in on_ranks(world, move || job()).into_iter().enumerate() {
            let got = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
            assert_eq!(got, one, "{world} ranks, rank {rank}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Ranks that build a map from different pairs fail with a divergence error, not with
/// silently different maps.
#[test]
fn ranks_building_different_maps_diverge_clearly() {
    for r in on_ranks(2, || {
        let rank = strads_ap::cluster::here().rank() as u64;
        DMap::from_pairs(vec![(rank, 1u64)]).map(|_| ())
    }) {
        let err = r.unwrap_err();
        assert!(matches!(err, Error::Divergence { .. }), "{err}");
        assert!(err.to_string().contains("DMap::from_pairs"), "{err}");
    }
}

/// The driver ships its captures: a plain value that differs between ranks (here, on
/// purpose) is the driver's (rank 0's) in every rank's tasks, in both loop operators.
#[test]
fn every_rank_runs_the_drivers_captures() {
    for r in on_ranks(3, || {
        let rank = strads_ap::cluster::here().rank() as u64;
        let value = 10 + rank;
        let out = DVector::from_fn(90, |_| 0u64)?;
        async_for!(0..out.len(), |k| {
            out[k] = value;
        })?;
        let data = DVector::from_fn(30, |i| i as u64)?;
        let sums = DVector::from_fn(1, |_| 0u64)?.aggregate_with(Aggregation::Sum);
        sync_for!(data, 5, SyncMode::Bsp, |batch| {
            sums[0] += value * batch.len() as u64;
        })?;
        Ok((out.to_vec()?, sums.get(0)?))
    }) {
        let (out, sum) = r.unwrap();
        assert!(out.iter().all(|&x| x == 10), "{out:?}");
        assert_eq!(sum, 10 * 30);
    }
}

/// A rank whose control flow reaches a different loop fails every rank with an error
/// naming both call sites, instead of hanging.
#[test]
fn ranks_at_different_loops_fail_with_both_call_sites() {
    let results = on_ranks(2, || {
        let v = DVector::from_fn(50, |_| 0u32)?;
        if strads_ap::cluster::here().rank() == 0 {
            async_for!(0..v.len(), |k| {
                v[k] += 1;
            })
        } else {
            async_for!(0..v.len(), |k| {
                v[k] += 2;
            })
        }
    });
    for r in results {
        let err = r.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Divergence { .. }), "{msg}");
        assert_eq!(msg.matches("dist_async.rs:").count(), 2, "{msg}");
    }
}

/// Each rank of an in-process cluster keeps its own loop figures: two calls on 3 ranks
/// are two calls on each rank (not six on one shared table), and a thread outside the
/// simulated ranks sees none of them.
#[test]
fn ranks_in_one_process_keep_their_own_loop_figures() {
    let line = line!() + 4;
    let figures = on_ranks(3, move || {
        let v = DVector::from_fn(300, |i| i as u64)?;
        for _ in 0..2 {
            async_for!(
                0..v.len(),
                |k| {
                    v[k] += 1;
                },
                Opts::new().threads(2)
            )?;
        }
        let mine: Vec<_> = strads_ap::loop_stats()
            .into_iter()
            .filter(|s| s.site.contains(&format!("dist_async.rs:{line}:")))
            .collect();
        Ok((mine, v.to_vec()?))
    });
    for (rank, r) in figures.into_iter().enumerate() {
        let (mine, values) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(mine.len(), 1, "rank {rank}: one site");
        assert_eq!(mine[0].calls, 2, "rank {rank}: its own two calls");
        assert_eq!(values, (2..302).collect::<Vec<u64>>());
    }
    assert!(
        strads_ap::loop_stats()
            .iter()
            .all(|s| !s.site.contains(&format!("dist_async.rs:{line}:"))),
        "the test's own thread is not one of the simulated ranks"
    );
}

/// `table_memory` shows what each rank holds: its part after making a table, and after a
/// distributed `async_for!` that wrote a table of `Vec` rows only its own rows' values
/// (the slots it keeps for the other ranks' rows are empty placeholders: their stale
/// values are never read), what the partitioned-storage work (issue 21) is to bound. A
/// later `with_all` still sees every rank's results.
#[test]
fn each_rank_reports_the_elements_it_holds() {
    let results = on_ranks(3, || -> strads_ap::Result<_> {
        let pairs = DVector::from_vec(serial_pairs())?;
        let x = DVector::from_fn(300, |_| vec![1.0f64; 4])?;
        let before = strads_ap::table_memory();
        count_pairs(&pairs, &x)?;
        let after = strads_ap::table_memory();
        let all = x.with_all(|all| all.to_vec())?;
        Ok((before, after, all))
    });
    let expected = counted_rows();
    for (rank, r) in results.into_iter().enumerate() {
        let (before, after, all) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(all, expected, "rank {rank} reads every rank's results");
        let rows = |m: &[strads_ap::TableMemory]| {
            m.iter()
                .find(|t| t.len == 300)
                .cloned()
                .expect("the x table")
        };
        let (b, a) = (rows(&before), rows(&after));
        assert_eq!((b.held, b.extra), (100, 0), "rank {rank} before: {b:?}");
        assert!(b.bytes >= 100 * (24 + 4 * 8), "rank {rank}: {b:?}");
        assert_eq!(a.held, 100, "rank {rank} after: {a:?}");
        assert_eq!(
            a.extra, 0,
            "rank {rank} keeps no other rank's values: {a:?}"
        );
        // Its own rows as before, and the placeholders' inline bytes.
        assert_eq!(a.bytes, b.bytes + 200 * 24, "rank {rank}: {a:?}");
    }
}

/// A table of `Vec` rows written by one loop and only read by the next, in turns: after
/// each writing call every rank keeps placeholders (empty rows) for the other ranks'
/// rows, so both loops must fetch every row they touch (an empty row would panic at
/// `x[i][1]`). Three turns on 2 and 3 ranks give a world of one's results exactly.
#[test]
fn rows_written_by_one_loop_and_read_by_the_next_are_fetched_each_turn() {
    let job = || -> strads_ap::Result<(Vec<Vec<u64>>, Vec<u64>)> {
        let pairs = DVector::from_vec(serial_pairs())?;
        let x = DVector::from_fn(300, |i| vec![i as u64, 1])?;
        let y = DVector::from_fn(300, |_| 0u64)?;
        for _ in 0..3 {
            async_for!(0..pairs.len(), |k| {
                let (i, j) = pairs[k];
                if i != j {
                    // Adds up in any order: any serializable run gives the same rows.
                    x[i][1] += 3;
                    x[j][0] += 1;
                }
            })?;
            async_for!(0..pairs.len(), |k| {
                let (i, j) = pairs[k];
                y[i] += x[i][1] + x[j][0];
            })?;
        }
        Ok((x.to_vec()?, y.to_vec()?))
    };
    let alone = job().unwrap();
    assert!(alone.1.iter().sum::<u64>() > 0);
    // Planning calls gather the small tables whole, or (fetching above 0 bytes) fetch
    // what reconnaissance reads: the same result.
    for fetch in [None, Some(0)] {
        for world in [2, 3] {
            let ranks = on_ranks(world, move || {
                strads_ap::set_fetch_above(fetch);
                job()
            });
            for (rank, r) in ranks.into_iter().enumerate() {
                let dist = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
                assert_eq!(dist, alone, "{world} ranks, rank {rank}, fetch {fetch:?}");
            }
        }
    }
}

/// The pairs the tests of what ranks keep after a loop run over.
fn serial_pairs() -> Vec<(usize, usize)> {
    (0..600)
        .map(|k| ((k * 7) % 300, (k * 13 + 1) % 300))
        .collect()
}

/// Counts [`serial_pairs`] into `x` in a distributed loop (`x[i][0] += 1.0` and
/// `x[j][1] += 1.0` for each pair of two keys), as [`counted_rows`] does serially.
fn count_pairs(pairs: &DVector<(usize, usize)>, x: &DVector<Vec<f64>>) -> strads_ap::Result<()> {
    async_for!(0..pairs.len(), |k| {
        let (i, j) = pairs[k];
        if i != j {
            x[i][0] += 1.0;
            x[j][1] += 1.0;
        }
    })?;
    Ok(())
}

/// The rows of 300 `[1.0; 4]` after counting [`serial_pairs`] (`x[i][0] += 1.0` and
/// `x[j][1] += 1.0` for each pair of two keys), as a world of one computes them.
fn counted_rows() -> Vec<Vec<f64>> {
    let mut rows = vec![vec![1.0f64; 4]; 300];
    for (i, j) in serial_pairs() {
        if i != j {
            rows[i][0] += 1.0;
            rows[j][1] += 1.0;
        }
    }
    rows
}

/// After a distributed loop, `with_all` reads the full-length copy each rank keeps,
/// refreshed in place with what the other ranks changed: it needs no new copy (so it works
/// under a gather limit that refuses `to_vec`), sees the loop's results and later driver
/// writes, and agrees on every rank.
#[test]
fn with_all_after_a_loop_reads_the_kept_copy_refreshed() {
    let expected = counted_rows();
    let results = on_ranks(3, || -> strads_ap::Result<_> {
        let pairs = DVector::from_vec(serial_pairs())?;
        let x = DVector::from_fn(300, |_| vec![1.0f64; 4])?;
        count_pairs(&pairs, &x)?;
        strads_ap::set_gather_limit(Some(1_000));
        let refused = x.to_vec().map(|_| ()).map_err(|e| e.to_string());
        let first = x.with_all(|all| all.to_vec())?;
        // A driver write on the owner rank (rank 2 holds 200..300), then a second read.
        x.set(250, vec![-1.0; 4])?;
        let second = x.with_all(|all| all.to_vec())?;
        let third = x.with_all(|all| all[250][0])?;
        // A closure that panics leaves the table whole.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            x.with_all(|_| panic!("evaluation failed")).ok()
        }));
        assert!(panicked.is_err());
        strads_ap::set_gather_limit(None);
        let whole = x.to_vec()?;
        assert_eq!(whole, second, "the table after a panicking with_all");
        Ok((refused, first, second, third))
    });
    let mut after_set = expected.clone();
    after_set[250] = vec![-1.0; 4];
    for (rank, r) in results.into_iter().enumerate() {
        let (refused, first, second, third) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let message = refused.expect_err("to_vec past the gather limit");
        assert!(message.contains("gather limit"), "rank {rank}: {message}");
        assert_eq!(first, expected, "rank {rank}: the loop's results");
        assert_eq!(second, after_set, "rank {rank}: the driver's write");
        assert_eq!(third, -1.0, "rank {rank}");
    }
}

/// `read_all` indexes a table in driver code as the serial program indexes its `Vec`:
/// after a distributed loop it lends each rank's kept copy with the own rows in place,
/// refreshed from the other ranks (under a gather limit that refuses a copy), and gives it
/// back for the next read; while it lives a write to the table fails as busy, and once
/// dropped the next loop, reads and writes see the table whole, as in a world of one (on 2
/// and 3 ranks; before any loop, no rank keeps a copy and every rank gathers one).
#[test]
fn read_all_indexes_the_table_like_a_vec_and_gives_it_back_whole() {
    let job = || -> strads_ap::Result<_> {
        let pairs = DVector::from_vec(serial_pairs())?;
        let x = DVector::from_fn(300, |_| vec![1.0f64; 4])?;
        let fresh = x.read_all()?.iter().map(|r| r[0]).sum::<f64>();
        let mut read = Vec::new();
        for turn in 0..2 {
            count_pairs(&pairs, &x)?;
            // Each rank's kept copy is lent, never gathered: a copy would be refused.
            strads_ap::set_gather_limit(Some(1_000));
            let rows = x.read_all()?;
            let mut sum = 0.0;
            for row in &rows {
                sum += row[0] * row[1];
            }
            read.push((sum, rows[250].clone(), rows[3][1], rows.len()));
            let busy = x.set(250, vec![0.0; 4]).map_err(|e| e.to_string());
            drop(rows);
            x.set(250 - turn, vec![-1.0; 4])?;
            read.push((0.0, x.read_all()?[250 - turn].clone(), 0.0, 0));
            let message = busy.expect_err("a write while read_all's result lives");
            assert!(message.contains("read_all"), "{message}");
            strads_ap::set_gather_limit(None);
        }
        Ok((fresh, read, x.to_vec()?))
    };
    let alone = job().unwrap();
    assert_eq!(alone.0, 300.0);
    assert_eq!(alone.1[1].1, vec![-1.0; 4], "{:?}", alone.1);
    // Set to -1.0 after the first turn, then counted once more.
    let c = &counted_rows()[250];
    let counted_again = vec![c[0] - 2.0, c[1] - 2.0, -1.0, -1.0];
    assert_eq!(alone.1[2].1, counted_again, "{:?}", alone.1);
    for world in [2, 3] {
        for (rank, r) in on_ranks(world, job).into_iter().enumerate() {
            let dist = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
            assert_eq!(dist, alone, "{world} ranks, rank {rank}");
        }
    }
}

/// `DVector::save` across ranks: rank 0 asks each rank for its part in turn and writes
/// it to the file as it comes; loading it on the ranks, or in a world of one, gives the
/// elements back in order.
#[test]
fn a_dvector_saved_across_ranks_loads_whole() {
    let dir = std::env::temp_dir().join(format!("strads-dist-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rows.dvec");
    let expected: Vec<Vec<u32>> = (0..1001).map(|i| vec![i as u32; 1 + i % 3]).collect();
    let results = on_ranks(3, || -> strads_ap::Result<_> {
        let rows = DVector::from_fn(1001, |i| vec![i as u32; 1 + i % 3])?;
        rows.save(&path)?;
        let back: DVector<Vec<u32>> = DVector::load(&path)?;
        back.to_vec()
    });
    for (rank, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap_or_else(|e| panic!("rank {rank}: {e}")), expected);
    }
    let alone = on_ranks(1, || DVector::<Vec<u32>>::load(&path)?.to_vec());
    assert_eq!(alone.into_iter().next().unwrap().unwrap(), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A planning call across ranks fetches what its tasks read instead of gathering tables
/// whole: tasks follow chains of pointers through other ranks' rows (`next[i]`, then
/// `next[j]`) and read a table shorter than the world (a rank holding none of it stops a
/// task at its first absent element), over more tasks than one window of reconnaissance.
/// Every rank computes what a world of one does, exactly, on the planning call and on the
/// next (planned) call, and reconnaissance counts the elements it fetched.
/// An evaluation loop (reads a large model's rows and a small one's, sums into a reduction)
/// across ranks: every rank gets the world of one's sum, and each task runs where the user
/// row it reads lives, so what moves is the ratings and the small table, not the rows.
#[test]
fn read_only_loops_run_each_task_where_its_rows_live() {
    const USERS: usize = 5_000;
    const WIDTH: usize = 32;
    let n = 4 * USERS;
    let pairs: Vec<(u32, u32)> = {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..n)
            .map(|_| (rng.gen_range(0..USERS as u32), rng.gen_range(0..100)))
            .collect()
    };
    let expected: u64 = pairs
        .iter()
        .map(|&(u, i)| (0..WIDTH as u64).map(|f| u as u64 * f + f).sum::<u64>() * (i as u64 + 1))
        .sum();
    let pairs2 = pairs.clone();
    let run = move || -> strads_ap::Result<(u64, u64)> {
        // Between the rows' size (about 600 KB) and what a full-length table of mostly
        // fillers looks like (under 300 KB on 3 ranks): `w` is fetched, the others gathered.
        strads_ap::set_fetch_above(Some(300_000));
        let set = DVector::from_vec(pairs2.clone())?;
        let w = DVector::from_fn(USERS, |u| {
            (0..WIDTH as u64)
                .map(|f| u as u64 * f + f)
                .collect::<Vec<u64>>()
        })?;
        let h = DVector::from_fn(100, |i| i as u64 + 1)?;
        let line = line!() + 2;
        let mut sum = 0u64;
        async_for!(0..set.len(), |k| {
            let (u, i) = set[k];
            sum += w[u as usize].iter().sum::<u64>() * h[i as usize];
        })?;
        let s = common::stats_at("dist_async.rs", line);
        // A table larger than the fetch size keeps its shadow in the gap form after a loop
        // that read it: its own rows are held once, not also in a full-length copy. (Its
        // size is its own rows', not that of a full length of mostly fillers.)
        let memory = strads_ap::table_memory();
        let rows = memory.iter().find(|t| t.len == USERS).expect("the w table");
        assert_eq!(rows.held + rows.extra, USERS, "{rows:?}");
        Ok((sum, s.received_bytes))
    };
    assert_eq!(run().unwrap().0, expected, "a world of one");
    for world in [2, 3] {
        for (rank, r) in on_ranks(world, run.clone()).into_iter().enumerate() {
            let (sum, received) = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
            assert_eq!(sum, expected, "{world} ranks, rank {rank}");
            // Run where the loop puts them, a rank's tasks would read the rows of most
            // users other ranks own (each user has four ratings): 212 KB of 640 KB on two
            // ranks (postcard's varints shrink small numbers). Run where their rows live,
            // they move ratings and `h`: 15 KB.
            let rows = (USERS - USERS / world) * WIDTH * 8;
            assert!(
                (received as usize) < rows / 16,
                "{world} ranks, rank {rank}: received {received} bytes (rows: {rows})"
            );
        }
    }
}

#[test]
fn reconnaissance_fetches_chained_reads_from_their_owners() {
    let n = 70_000usize;
    let run = move || -> strads_ap::Result<(Vec<u64>, u64)> {
        strads_ap::set_fetch_above(Some(0));
        let next = DVector::from_fn(n, |i| vec![((i * 7919 + 13) % n) as u32])?;
        let vals = DVector::from_fn(n, |i| vec![(i % 1000) as u64 + 1])?;
        let tiny = DVector::from_fn(2, |i| vec![100 * (i as u64 + 1)])?;
        let out = DVector::from_fn(n, |_| 0u64)?;
        let line = line!() + 2;
        for _ in 0..2 {
            async_for!(0..out.len(), |i| {
                let j = next[i][0] as usize;
                let k = next[j][0] as usize;
                out[i] += vals[j][0] + vals[k][0] * 3 + tiny[i % 2][0];
            })?;
        }
        let fetched = common::stats_at("dist_async.rs", line).fetched;
        Ok((out.to_vec()?, fetched))
    };
    let expected: Vec<u64> = (0..n)
        .map(|i| {
            let j = (i * 7919 + 13) % n;
            let k = (j * 7919 + 13) % n;
            2 * ((j % 1000) as u64 + 1 + ((k % 1000) as u64 + 1) * 3 + 100 * (i as u64 % 2 + 1))
        })
        .collect();
    let (alone, fetched) = run().unwrap();
    assert_eq!(alone, expected, "a world of one");
    assert_eq!(fetched, 0, "a world of one fetches nothing");
    for world in [2, 3] {
        for (rank, r) in on_ranks(world, run).into_iter().enumerate() {
            let (out, fetched) = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
            assert_eq!(out, expected, "{world} ranks, rank {rank}");
            // Tasks read rows of other ranks: at least the share's first link each.
            assert!(
                fetched as usize >= n / world / 2,
                "{world} ranks, rank {rank}: fetched {fetched}"
            );
        }
    }
}
