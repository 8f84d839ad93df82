//! STRADS dynamic scheduling (`Opts::dynamic`): rounds chosen by priority and a dependency
//! test. One worker follows the serial loop's visiting order exactly; several workers keep
//! written tables serializable and converge where the serial program converges; bad
//! schedules are answered with clear errors.

use strads_ap::cluster::simulate;
use strads_ap::prelude::*;
use strads_ap::{DynamicStats, Error, Result};

/// A small Lasso problem: sparse columns `(row, value)`, targets, λ.
struct Problem {
    cols: Vec<Vec<(u32, f64)>>,
    y: Vec<f64>,
    lambda: f64,
}

/// Deterministic sparse data with correlated column pairs and a sparse true β.
fn problem(n: usize, p: usize) -> Problem {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut cols: Vec<Vec<(u32, f64)>> = Vec::with_capacity(p);
    for j in 0..p {
        let mut col: Vec<(u32, f64)> = Vec::new();
        if j % 2 == 1 {
            // Correlated with the previous column: most of its rows, perturbed.
            let prev: Vec<(u32, f64)> = cols[j - 1].clone();
            for (i, v) in prev {
                if next() % 4 != 0 {
                    col.push((i, v * 0.9 + (next() % 100) as f64 * 1e-3));
                }
            }
        } else {
            for i in 0..n {
                if next() % 10 == 0 {
                    col.push((i as u32, (next() % 1000) as f64 / 500.0 - 1.0));
                }
            }
        }
        cols.push(col);
    }
    let mut y = vec![0.0; n];
    for (j, col) in cols.iter().enumerate().filter(|(j, _)| j % 7 == 0) {
        let b = 1.0 + (j % 5) as f64;
        for &(i, v) in col {
            y[i as usize] += b * v;
        }
    }
    for v in &mut y {
        *v += (next() % 1000) as f64 / 5000.0;
    }
    let lambda_max = cols
        .iter()
        .map(|c| c.iter().map(|&(i, v)| v * y[i as usize]).sum::<f64>().abs())
        .fold(0.0, f64::max);
    Problem {
        cols,
        y,
        lambda: lambda_max / 20.0,
    }
}

fn soft(z: f64, t: f64) -> f64 {
    if z > t {
        z - t
    } else if z < -t {
        z + t
    } else {
        0.0
    }
}

fn norms(cols: &[Vec<(u32, f64)>]) -> Vec<f64> {
    cols.iter()
        .map(|c| c.iter().map(|&(_, v)| v * v).sum())
        .collect()
}

/// `½‖y − Xβ‖² + λ‖β‖₁` from the residual.
fn objective(r: &[f64], beta: &[f64], lambda: f64) -> f64 {
    0.5 * r.iter().map(|v| v * v).sum::<f64>() + lambda * beta.iter().map(|b| b.abs()).sum::<f64>()
}

/// One coordinate update, as the serial program writes it.
fn update(j: usize, pr: &Problem, nrm: &[f64], r: &mut [f64], beta: &mut [f64]) {
    let col = &pr.cols[j];
    if nrm[j] == 0.0 {
        return;
    }
    let rho: f64 = col.iter().map(|&(i, v)| v * r[i as usize]).sum();
    let old = beta[j];
    let new = soft(rho + nrm[j] * old, pr.lambda) / nrm[j];
    if new != old {
        for &(i, v) in col {
            r[i as usize] -= v * (new - old);
        }
        beta[j] = new;
    }
}

/// Serial coordinate descent visiting `order`; returns (residual, β).
fn serial(pr: &Problem, order: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let nrm = norms(&pr.cols);
    let mut r = pr.y.clone();
    let mut beta = vec![0.0; pr.cols.len()];
    for &j in order {
        update(j, pr, &nrm, &mut r, &mut beta);
    }
    (r, beta)
}

/// Tables of the converted program.
struct Tables {
    x: DVector<Vec<(u32, f64)>>,
    norm: DVector<f64>,
    r: DVector<f64>,
    beta: DVector<f64>,
    order: DVector<u64>,
    lambda: f64,
}

fn tables(pr: &Problem, relaxed: bool) -> Tables {
    let r = DVector::from_vec(pr.y.clone()).unwrap();
    Tables {
        x: DVector::from_vec(pr.cols.clone()).unwrap(),
        norm: DVector::from_vec(norms(&pr.cols)).unwrap(),
        r: if relaxed { r.relaxed(Relaxed::Sum) } else { r },
        beta: DVector::from_vec(vec![0.0; pr.cols.len()]).unwrap(),
        order: DVector::from_vec(vec![0u64; 1]).unwrap(),
        lambda: pr.lambda,
    }
}

/// One call of the converted loop; `order[0]` counts the updates, and each index notes
/// its visit numbers in `seen` (a table written by one index each).
fn sweep(t: &Tables, seen: &DVector<Vec<u64>>, opts: Opts) -> Result<()> {
    let Tables {
        x,
        norm,
        r,
        beta,
        order,
        lambda,
    } = t;
    let lambda = *lambda;
    async_for!(
        0..x.len(),
        |j| {
            let col = &x[j];
            let nj = norm[j];
            seen[j].push(order[0]);
            order[0] += 1;
            if nj > 0.0 {
                let mut rho = 0.0;
                for &(i, v) in col.iter() {
                    rho += v * r[i as usize];
                }
                let old = beta[j];
                let new = soft(rho + nj * old, lambda) / nj;
                if new != old {
                    for &(i, v) in col.iter() {
                        r[i as usize] -= v * (new - old);
                    }
                    beta[j] = new;
                }
            }
        },
        opts
    )
}

/// The same loop without the order counter (a table every index writes, which would
/// serialise every round).
fn lasso_sweep(t: &Tables, opts: Opts) -> Result<()> {
    let Tables {
        x,
        norm,
        r,
        beta,
        lambda,
        ..
    } = t;
    let lambda = *lambda;
    async_for!(
        0..x.len(),
        |j| {
            let col = &x[j];
            let nj = norm[j];
            if nj > 0.0 {
                let mut rho = 0.0;
                for &(i, v) in col.iter() {
                    rho += v * r[i as usize];
                }
                let old = beta[j];
                let new = soft(rho + nj * old, lambda) / nj;
                if new != old {
                    for &(i, v) in col.iter() {
                        r[i as usize] -= v * (new - old);
                    }
                    beta[j] = new;
                }
            }
        },
        opts
    )
}

#[test]
fn one_worker_matches_the_serial_loop_in_the_order_the_rounds_chose() {
    let pr = problem(200, 60);
    let priorities: [fn(&DVector<f64>) -> Priority; 3] = [
        |_| Priority::cyclic(),
        |_| Priority::uniform(),
        |beta| Priority::change(beta),
    ];
    for priority in priorities {
        let t = tables(&pr, true);
        let schedule = Dynamic::new(priority(&t.beta)).round(7);
        let seen = DVector::from_vec(vec![Vec::<u64>::new(); 60]).unwrap();
        for _ in 0..4 {
            sweep(&t, &seen, Opts::new().threads(1).dynamic(schedule.clone())).unwrap();
        }
        let mut visits: Vec<(u64, usize)> = Vec::new();
        for (j, v) in seen.to_vec().unwrap().into_iter().enumerate() {
            visits.extend(v.into_iter().map(|n| (n, j)));
        }
        visits.sort_unstable();
        let order: Vec<usize> = visits.iter().map(|&(_, j)| j).collect();
        let stats = schedule.stats();
        assert_eq!(order.len(), 240);
        assert_eq!(stats.updates, 240, "{stats:?}");
        assert_eq!(stats.reconnaissance, 1);
        let (r, beta) = serial(&pr, &order);
        assert_eq!(t.r.to_vec().unwrap(), r);
        assert_eq!(t.beta.to_vec().unwrap(), beta);
    }
}

#[test]
fn a_cyclic_schedule_on_one_worker_is_the_serial_program() {
    let pr = problem(300, 80);
    let t = tables(&pr, false);
    let schedule = Dynamic::new(Priority::cyclic()).round(16);
    for _ in 0..3 {
        lasso_sweep(&t, Opts::new().threads(1).dynamic(schedule.clone())).unwrap();
    }
    let order: Vec<usize> = (0..3).flat_map(|_| 0..80).collect();
    let (r, beta) = serial(&pr, &order);
    assert_eq!(t.r.to_vec().unwrap(), r);
    assert_eq!(t.beta.to_vec().unwrap(), beta);
}

/// Body runs of the test below, reconnaissance included.
static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn one_worker_reconnoitres_a_few_indices_and_several_go_on_in_its_order() {
    use std::sync::atomic::Ordering::Relaxed;
    let n = 1000;
    let hits = DVector::from_vec(vec![0u32; n]).unwrap();
    let schedule = Dynamic::new(Priority::cyclic()).round(16).updates(100);
    let call = |threads: usize| {
        async_for!(
            0..n,
            |j| {
                RUNS.fetch_add(1, Relaxed);
                hits[j] += 1;
            },
            Opts::new().threads(threads).dynamic(schedule.clone())
        )
    };
    call(1).unwrap();
    // The 100 updates and a sample of the range, not a pass over all 1000 indices.
    let runs = RUNS.load(Relaxed);
    assert!((100..=200).contains(&runs), "{runs} runs");
    assert_eq!(schedule.stats().reconnaissance, 1);
    // Several workers need every index's keys, and go on from the cursor one left.
    call(2).unwrap();
    assert_eq!(schedule.stats().reconnaissance, 2);
    // The full scheduler serves one worker too.
    call(1).unwrap();
    assert_eq!(schedule.stats().reconnaissance, 2);
    let hits = hits.to_vec().unwrap();
    assert!(hits[..300].iter().all(|&h| h == 1), "{hits:?}");
    assert!(hits[300..].iter().all(|&h| h == 0), "{hits:?}");
    assert_eq!(schedule.stats().updates, 300);
}

#[test]
fn a_written_table_shared_by_indices_stays_serializable_on_several_workers() {
    // Every index increments a counter shared with a third of the others: two workers
    // never run indices of one counter at once, so every count is exact.
    let n = 600;
    let counts = DVector::from_vec(vec![0u64; 3]).unwrap();
    let marks = DVector::from_vec(vec![0u32; n]).unwrap();
    let schedule = Dynamic::new(Priority::uniform()).round(32);
    for _ in 0..5 {
        async_for!(
            0..n,
            |k| {
                counts[k % 3] += 1;
                marks[k] += 1;
            },
            Opts::new().threads(2).dynamic(schedule.clone())
        )
        .unwrap();
    }
    let stats = schedule.stats();
    assert_eq!(stats.updates, 5 * n as u64);
    assert_eq!(counts.to_vec().unwrap().iter().sum::<u64>(), 5 * n as u64);
    let marks = marks.to_vec().unwrap();
    assert_eq!(marks.iter().map(|&m| m as u64).sum::<u64>(), 5 * n as u64);
    // Indices of one counter go to one worker's share of a round (which runs them in
    // order); rounds are at most the size asked for.
    assert!(stats.rounds >= 5 * n as u64 / 32, "{stats:?}");
}

#[test]
fn a_write_outside_the_reconnoitred_keys_on_several_workers_is_refused() {
    // Reconnaissance sees index k write marks[k]; the second call writes a neighbour's
    // element instead, which another group holds or no group of the round does: refused
    // with an error naming the table, never a silent race. The call after it
    // reconnoitres again and runs.
    let n = 600;
    let marks = DVector::from_vec(vec![0u32; n]).unwrap();
    let shift = DVector::from_vec(vec![0usize; 1]).unwrap();
    let schedule = Dynamic::new(Priority::uniform()).round(64);
    let call = || {
        async_for!(
            0..n,
            |k| {
                marks[(k + shift[0]) % n] += 1;
            },
            Opts::new().threads(2).dynamic(schedule.clone())
        )
    };
    call().unwrap();
    assert_eq!(schedule.stats().reconnaissance, 1);
    shift.set(0, 1).unwrap();
    let err = call().unwrap_err();
    assert!(
        matches!(
            err,
            Error::AccessOutsidePlan {
                table: "marks",
                access: "wrote",
                ..
            }
        ),
        "{err}"
    );
    call().unwrap();
    assert_eq!(schedule.stats().reconnaissance, 2, "reconnoitred again");
    let total: u64 = marks.to_vec().unwrap().iter().map(|&m| u64::from(m)).sum();
    // Two whole calls, and the refused call's updates before its refusal.
    assert!(total >= 2 * n as u64, "{total}");
}

#[test]
fn relaxed_sums_lose_no_change_on_several_workers_key_by_key_or_whole() {
    // Each index adds 1 to one element of a relaxed sum: a long table (rounds touch few of
    // its keys, merged key by key) and a short one (merged whole). From the second call
    // on, the long table's key moves away from the one reconnaissance saw: a change at an
    // unforeseen key still arrives, at the end of the call at the latest.
    let n = 400;
    let long = DVector::from_vec(vec![0.0f64; 50_000])
        .unwrap()
        .relaxed(Relaxed::Sum);
    let short = DVector::from_vec(vec![0.0f64; 4])
        .unwrap()
        .relaxed(Relaxed::Sum);
    let shift = DVector::from_vec(vec![0usize; 1]).unwrap();
    let schedule = Dynamic::new(Priority::uniform()).round(16);
    for call in 0..4 {
        shift.set(0, call * 7).unwrap();
        async_for!(
            0..n,
            |k| {
                long[(k * 97 + shift[0]) % 50_000] += 1.0;
                short[k % 4] += 1.0;
            },
            Opts::new().threads(2).dynamic(schedule.clone())
        )
        .unwrap();
        let updates = schedule.stats().updates as f64;
        assert_eq!(
            long.to_vec().unwrap().iter().sum::<f64>(),
            updates,
            "call {call}"
        );
        assert_eq!(
            short.to_vec().unwrap().iter().sum::<f64>(),
            updates,
            "call {call}"
        );
    }
}

#[test]
fn a_panicking_index_on_several_workers_is_an_error_and_the_loop_runs_again() {
    let n = 300;
    let hits = DVector::from_vec(vec![0u32; n]).unwrap();
    let bad = DVector::from_vec(vec![false; n]).unwrap();
    // In order, so that every call reaches the bad index.
    let schedule = Dynamic::new(Priority::cyclic()).round(20);
    let total = || {
        hits.to_vec()
            .unwrap()
            .iter()
            .map(|&h| u64::from(h))
            .sum::<u64>()
    };
    let call = || {
        async_for!(
            0..n,
            |k| {
                if bad[k] {
                    panic!("index {k} is bad");
                }
                hits[k] += 1;
            },
            Opts::new().threads(2).dynamic(schedule.clone())
        )
    };
    bad.set(123, true).unwrap();
    let err = call().unwrap_err().to_string();
    assert!(err.contains("index 123 is bad"), "{err}");
    bad.set(123, false).unwrap();
    let before = total();
    call().unwrap();
    // The call after the failed one runs its whole budget, every update counted once.
    assert_eq!(total() - before, n as u64);
}

#[test]
fn a_panicking_priority_function_is_an_error_and_the_next_call_starts_afresh() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for threads in [1, 2] {
        let n = 200;
        let beta = DVector::from_vec(vec![0.0f64; n]).unwrap();
        let armed = Arc::new(AtomicBool::new(true));
        let trip = armed.clone();
        let schedule = Dynamic::new(Priority::by(&beta, move |j, before, after| {
            if j == 7 && trip.load(Ordering::Relaxed) {
                panic!("no score for index {j}");
            }
            (after - before).abs()
        }))
        .round(16);
        let call = || {
            async_for!(
                0..n,
                |j| {
                    beta[j] += 1.0;
                },
                Opts::new().threads(threads).dynamic(schedule.clone())
            )
        };
        let err = call().unwrap_err().to_string();
        assert!(
            err.contains("no score for index 7") && err.contains("Opts::dynamic"),
            "{threads} threads: {err}"
        );
        armed.store(false, Ordering::Relaxed);
        call().unwrap();
        // The scheduler the panic may have left half-updated was made again.
        assert_eq!(schedule.stats().reconnaissance, 2, "{threads} threads");
    }
}

/// Runs the relaxed Lasso loop until the objective stops moving, with the schedule
/// `make` gives for the coefficients; returns the final objective, β and the figures.
fn converge(
    pr: &Problem,
    threads: usize,
    make: impl Fn(&DVector<f64>) -> Dynamic,
) -> (f64, Vec<f64>, DynamicStats) {
    let t = tables(pr, true);
    let schedule = make(&t.beta);
    let current = || objective(&t.r.to_vec().unwrap(), &t.beta.to_vec().unwrap(), pr.lambda);
    let mut last = f64::INFINITY;
    for _ in 0..400 {
        lasso_sweep(&t, Opts::new().threads(threads).dynamic(schedule.clone())).unwrap();
        let obj = current();
        if (last - obj).abs() <= 1e-13 * obj.abs() {
            break;
        }
        last = obj;
    }
    (current(), t.beta.to_vec().unwrap(), schedule.stats())
}

#[test]
fn priority_rounds_on_two_workers_converge_to_the_serial_objective() {
    let pr = problem(400, 120);
    let order: Vec<usize> = (0..300).flat_map(|_| 0..120).collect();
    let (r, beta) = serial(&pr, &order);
    let best = objective(&r, &beta, pr.lambda);
    let support = |b: &[f64]| b.iter().map(|v| v.abs() > 1e-6).collect::<Vec<_>>();
    for depends in [
        Depends::overlap(0.3),
        Depends::none(),
        Depends::overlap(0.0),
    ] {
        let (obj, b, stats) = converge(&pr, 2, |beta| {
            Dynamic::new(Priority::change(beta))
                .depends(depends.clone())
                .round(24)
        });
        assert!(
            (obj - best).abs() <= 1e-6 * best,
            "{depends:?}: {obj} against the serial {best} ({stats:?})"
        );
        assert_eq!(support(&b), support(&beta), "{depends:?}");
    }
}

#[test]
fn a_priority_on_a_table_the_body_does_not_use_is_refused() {
    let pr = problem(50, 10);
    let t = tables(&pr, true);
    let other = DVector::from_vec(vec![0.0f64; 10]).unwrap();
    let e = lasso_sweep(
        &t,
        Opts::new().dynamic(Dynamic::new(Priority::change(&other))),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("Priority::change names a DVector<f64> the loop body does not use"),
        "{e}"
    );
    let short = DVector::from_vec(vec![0.0f64; 3]).unwrap();
    let x = t.x.clone();
    let e = async_for!(
        0..x.len(),
        |j| {
            short[j % 3] += x[j].len() as f64;
        },
        Opts::new().dynamic(Dynamic::new(Priority::change(&short)))
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("has 3 elements and the range ends at 10"), "{e}");
}

/// Across ranks every rank keeps the same scheduler and the same tables: the rounds
/// converge where the serial program does, and every rank ends with the same model, bit
/// for bit.
#[test]
fn across_ranks_priority_rounds_converge_to_the_serial_objective() {
    let pr = problem(400, 120);
    let order: Vec<usize> = (0..300).flat_map(|_| 0..120).collect();
    let (r, beta) = serial(&pr, &order);
    let best = objective(&r, &beta, pr.lambda);
    let support = |b: &[f64]| b.iter().map(|v| v.abs() > 1e-6).collect::<Vec<_>>();
    for (ranks, depends) in [(2, Depends::overlap(0.3)), (3, Depends::none())] {
        let results = simulate(ranks, || {
            converge(&pr, 1, |beta| {
                Dynamic::new(Priority::change(beta))
                    .depends(depends.clone())
                    .round(24)
            })
        });
        let (obj, b, stats) = &results[0];
        assert!(
            (obj - best).abs() <= 1e-6 * best,
            "{ranks} ranks, {depends:?}: {obj} against the serial {best} ({stats:?})"
        );
        assert_eq!(support(b), support(&beta), "{ranks} ranks, {depends:?}");
        assert_eq!(stats.reconnaissance, 1, "{stats:?}");
        for (rank, other) in results.iter().enumerate().skip(1) {
            assert_eq!((other.0, &other.1), (*obj, b), "rank {rank} of {ranks}");
            assert_eq!(other.2.updates, stats.updates, "rank {rank} of {ranks}");
        }
    }
}

/// Across ranks a written table shared by indices stays serializable (each counter's
/// indices go to one rank's group of a round), and relaxed sums lose no change, at keys
/// reconnaissance foresaw or not.
#[test]
fn across_ranks_written_tables_are_exact_and_relaxed_sums_lose_nothing() {
    let n = 600;
    let results = simulate(3, || {
        let counts = DVector::from_vec(vec![0u64; 3])?;
        let marks = DVector::from_vec(vec![0u32; n])?;
        let long = DVector::from_vec(vec![0.0f64; 5_000])?.relaxed(Relaxed::Sum);
        let shift = DVector::from_vec(vec![0usize; 1])?;
        let schedule = Dynamic::new(Priority::uniform()).round(32);
        for call in 0..4 {
            shift.set(0, call * 7)?;
            async_for!(
                0..n,
                |k| {
                    counts[k % 3] += 1;
                    marks[k] += 1;
                    long[(k * 97 + shift[0]) % 5_000] += 1.0;
                },
                Opts::new().threads(1).dynamic(schedule.clone())
            )?;
        }
        Ok((
            counts.to_vec()?,
            marks.to_vec()?,
            long.to_vec()?.iter().sum::<f64>(),
            schedule.stats(),
        ))
    });
    let results: Vec<_> = results.into_iter().map(|r: Result<_>| r.unwrap()).collect();
    let (counts, marks, long, stats) = &results[0];
    assert_eq!(stats.updates, 4 * n as u64, "{stats:?}");
    assert_eq!(counts.iter().sum::<u64>(), 4 * n as u64);
    assert_eq!(marks.iter().map(|&m| m as u64).sum::<u64>(), 4 * n as u64);
    assert_eq!(*long, 4.0 * n as f64);
    for other in &results[1..] {
        assert_eq!((&other.0, &other.1, other.2), (counts, marks, *long));
    }
}

/// A body that panics on one rank in a round fails the call on every rank (no rank waits
/// for a round that will not come), naming the rank; the loop runs again afterwards.
#[test]
fn across_ranks_a_panicking_index_is_an_error_on_every_rank() {
    let results = simulate(2, || {
        let beta = DVector::from_vec(vec![0.0f64; 64])?;
        let trip = DVector::from_vec(vec![false])?;
        let schedule = Dynamic::new(Priority::cyclic());
        let run = |beta: &DVector<f64>, trip: &DVector<bool>| {
            async_for!(
                0..64,
                |j| {
                    if trip[0] && j == 40 {
                        panic!("index 40 trips");
                    }
                    beta[j] += 1.0;
                },
                Opts::new().dynamic(schedule.clone())
            )
        };
        // The first call reconnoitres every index on every rank: untripped.
        trip.set(0, false)?;
        run(&beta, &trip)?;
        trip.set(0, true)?;
        let failed = run(&beta, &trip).map_err(|e| e.to_string());
        trip.set(0, false)?;
        run(&beta, &trip)?;
        Ok::<_, strads_ap::Error>((failed, beta.to_vec()?))
    });
    let mut messages = Vec::new();
    for r in results {
        let (failed, beta) = r.unwrap();
        messages.push(failed.unwrap_err());
        // The calls before and after the failure ran every index.
        assert!(beta.iter().all(|&b| b >= 2.0), "{beta:?}");
    }
    // The rank whose group held index 40 says why; the other names that rank.
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.contains("index 40 trips"))
            .count(),
        2,
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("failed in a round of the loop")),
        "{messages:?}"
    );
}
