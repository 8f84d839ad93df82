//! `sync_for!` across ranks: an in-process cluster (threads over the `mem` transport), each
//! rank running the mini-batches of its part of the data against a full copy of the
//! parameters, combined at every synchronisation point.

mod common;

use common::on_ranks;
use strads_ap::prelude::*;
use strads_ap::{Error, Result};

/// With summing aggregation the total over every mini-batch of every rank is exact, in
/// both modes, for any number of ranks and threads (including ranks with fewer batches).
#[test]
fn every_minibatch_of_every_rank_counts_once() {
    for world in [2, 3, 4] {
        for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
            for threads in [1, 2] {
                let results = on_ranks(world, move || {
                    let data = DVector::from_fn(1_001, |i| i as i64)?;
                    let total = DVector::from_fn(2, |_| 0i64)?.aggregate_with(Aggregation::Sum);
                    sync_for!(
                        data,
                        10,
                        mode,
                        |batch| {
                            for x in batch {
                                total[0] += *x;
                            }
                            total[1] += 1;
                        },
                        Opts::new().threads(threads)
                    )?;
                    Ok((total.get(0)?, total.get(1)?, total.to_vec()?))
                });
                for (rank, r) in results.into_iter().enumerate() {
                    let (sum, batches, all) = r.unwrap_or_else(|e| {
                        panic!("{world} ranks {mode:?} {threads}t rank {rank}: {e}")
                    });
                    assert_eq!(
                        sum,
                        (0..1_001).sum::<i64>(),
                        "{world} ranks {mode:?} {threads}t"
                    );
                    // Each rank cuts its own part into batches of 10.
                    let expected: i64 = (0..world)
                        .map(|r| {
                            let (q, e) = (1_001 / world, 1_001 % world);
                            ((q + usize::from(r < e)).div_ceil(10)) as i64
                        })
                        .sum();
                    assert_eq!(batches, expected);
                    assert_eq!(all, vec![sum, batches]);
                }
            }
        }
    }
}

/// A map's values summed over every mini-batch of every rank are exact, on every rank.
#[test]
fn map_values_merge_across_ranks() {
    for world in [2, 3] {
        for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
            let results = on_ranks(world, move || {
                let data = DVector::from_fn(2_001, |i| (i % 7) as u32)?;
                let counts: DMap<u32, i64> = DMap::from_pairs((0..7u32).map(|k| (k, 0)).collect())?
                    .aggregate_with(Aggregation::Sum);
                sync_for!(
                    data,
                    16,
                    mode,
                    |batch| {
                        for k in batch {
                            counts[k] += 1;
                        }
                    },
                    Opts::new().threads(2)
                )?;
                (0..7u32)
                    .map(|k| Ok(counts.get(&k)?.unwrap_or(-1)))
                    .collect::<Result<Vec<i64>>>()
            });
            let expected: Vec<i64> = (0..7)
                .map(|k| (0..2_001).filter(|i| i % 7 == k).count() as i64)
                .collect();
            for (rank, r) in results.into_iter().enumerate() {
                let got = r.unwrap_or_else(|e| panic!("{world} ranks {mode:?} rank {rank}: {e}"));
                assert_eq!(got, expected, "{world} ranks {mode:?} rank {rank}");
            }
        }
    }
}

/// Least squares by mini-batch gradient descent: the model trained on 2 and 3 ranks
/// reaches the same fit as in a world of one (within 1%), on every rank identically.
#[test]
fn linear_regression_matches_a_world_of_one() {
    fn train() -> Result<(Vec<f64>, f64)> {
        let n = 4_000;
        let xs = DVector::from_fn(n, |i| {
            let x = [(i % 17) as f64 / 17.0, (i % 29) as f64 / 29.0, 1.0];
            let y = 3.0 * x[0] - 2.0 * x[1] + 0.5 + ((i * 7919) % 13) as f64 / 130.0;
            (x, y)
        })?;
        let w = DVector::from_fn(3, |_| 0.0f64)?;
        let lr = 0.05;
        for _ in 0..30 {
            sync_for!(
                xs,
                20,
                SyncMode::Bsp,
                |batch| {
                    let mut grad = [0.0; 3];
                    for (x, y) in batch {
                        let pred: f64 = (0..3).map(|j| w[j] * x[j]).sum();
                        for j in 0..3 {
                            grad[j] += (pred - y) * x[j];
                        }
                    }
                    for j in 0..3 {
                        w[j] -= lr * grad[j] / batch.len() as f64;
                    }
                },
                Opts::new().threads(1)
            )?;
        }
        let weights = w.to_vec()?;
        let loss = xs.map_reduce(
            |(x, y)| {
                let p: f64 = (0..3).map(|j| weights[j] * x[j]).sum();
                (p - y) * (p - y)
            },
            |a, b| a + b,
        )? / 4_000.0;
        Ok((weights, loss))
    }
    let (_, one) = train().unwrap();
    for world in [2, 3] {
        let results: Vec<(Vec<f64>, f64)> = on_ranks(world, train)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        for (w, loss) in &results {
            assert_eq!(w, &results[0].0, "every rank holds the same model");
            assert!(
                (loss - one).abs() <= 0.01 * one,
                "{world} ranks: loss {loss} vs {one} in a world of one"
            );
        }
    }
}

/// A body that panics on one rank stops every rank: that rank reports its panic, the
/// others name it.
#[test]
fn a_failing_rank_stops_the_others() {
    let results = on_ranks(3, || {
        let data = DVector::from_fn(300, |i| i as u32)?;
        let acc = DVector::from_fn(1, |_| 0.0f64)?;
        sync_for!(data, 10, SyncMode::Bsp, |batch| {
            for x in batch {
                if *x == 150 {
                    panic!("bad sample {x}");
                }
                acc[0] += 1.0;
            }
        })
    });
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Err(Error::BodyPanicked { message, .. }) if rank == 1 => {
                assert!(message.contains("bad sample 150"), "{message}")
            }
            Err(Error::RemoteFailure { rank: 1, message }) if rank != 1 => {
                assert!(message.contains("bad sample 150"), "{message}")
            }
            other => panic!("rank {rank}: unexpected {other:?}"),
        }
    }
}
