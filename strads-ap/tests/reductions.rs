//! Reductions: plain variables a body accumulates into in the serial style (`loss += e`,
//! `best = best.max(e)`, `x = f(x, e)`), combined after the call. One worker in a world of
//! one gives the serial program's value to the last bit; several workers give the exact
//! total of integer sums, the serial value of min and max, and for floating-point sums the
//! same value on every call that runs the same plan.

mod common;

use common::on_ranks;
use strads_ap::prelude::*;

/// Ratings-like pairs (row, column) of `n` tasks, deterministic.
fn pairs(n: usize, rows: usize, cols: usize) -> Vec<(u32, u32)> {
    (0..n)
        .map(|k| {
            let h = (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17;
            ((h % rows as u64) as u32, ((h >> 20) % cols as u64) as u32)
        })
        .collect()
}

/// A value per task whose float sum depends on the order of addition.
fn value(k: usize) -> f64 {
    1.0 / (1.0 + k as f64) + (k % 7) as f64 * 1e-3
}

/// The serial loop the converted ones must match: a write per task to one key of each of
/// two tables, a float loss, an integer count, a max and a min, and a best-of by a user
/// function.
struct Serial {
    loss: f64,
    count: i64,
    top: f64,
    low: f64,
    best: (f64, usize),
}

fn better(a: (f64, usize), b: (f64, usize)) -> (f64, usize) {
    if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) {
        b
    } else {
        a
    }
}

fn serial(p: &[(u32, u32)], loss0: f64) -> Serial {
    let mut s = Serial {
        loss: loss0,
        count: 3,
        top: f64::MIN,
        low: f64::MAX,
        best: (f64::MIN, 0),
    };
    for (k, _) in p.iter().enumerate() {
        let v = value(k);
        s.loss += v * v;
        s.count += 1;
        s.top = s.top.max(v);
        s.low = f64::min(s.low, v);
        s.best = better(s.best, (v * ((k % 13) as f64), k));
    }
    s
}

/// The same loop converted: the body is the serial one.
fn converted(
    p: &DVector<(u32, u32)>,
    rows: usize,
    cols: usize,
    threads: usize,
    loss0: f64,
) -> Serial {
    let w = DVector::from_fn(rows, |_| 0u32).unwrap();
    let h = DVector::from_fn(cols, |_| 0u32).unwrap();
    let got = converted_on(p, &w, &h, threads, loss0, Fallback::Measure);
    assert_eq!(w.to_vec().unwrap().iter().sum::<u32>() as usize, p.len());
    got
}

/// [`converted`] on tables that outlive the call.
fn converted_on(
    p: &DVector<(u32, u32)>,
    w: &DVector<u32>,
    h: &DVector<u32>,
    threads: usize,
    loss0: f64,
    fallback: Fallback,
) -> Serial {
    let mut loss = loss0;
    let mut count = 3i64;
    let mut top = f64::MIN;
    let mut low = f64::MAX;
    let mut best = (f64::MIN, 0usize);
    async_for!(
        0..p.len(),
        |k| {
            let (i, j) = p[k];
            w[i as usize] += 1;
            h[j as usize] += 1;
            let v = value(k);
            loss += v * v;
            count += 1;
            top = top.max(v);
            low = f64::min(low, v);
            best = better(best, (v * ((k % 13) as f64), k));
        },
        Opts::new().threads(threads).fallback(fallback)
    )
    .unwrap();
    Serial {
        loss,
        count,
        top,
        low,
        best,
    }
}

#[test]
fn one_worker_gives_the_serial_value_to_the_last_bit() {
    let (n, rows, cols) = (20_000, 300, 200);
    let raw = pairs(n, rows, cols);
    let expected = serial(&raw, 0.25);
    let p = DVector::from_vec(raw).unwrap();
    for call in 0..2 {
        let got = converted(&p, rows, cols, 1, 0.25);
        assert_eq!(got.loss.to_bits(), expected.loss.to_bits(), "call {call}");
        assert_eq!(got.count, expected.count);
        assert_eq!(got.top, expected.top);
        assert_eq!(got.low, expected.low);
        assert_eq!(got.best, expected.best);
    }
}

/// Several workers: integer sums, max, min and best-of exact on every call; the float
/// sum the serial one to the last bit on the first call (recorded, in loop order) and the
/// same to the last bit on every call that runs the kept plan. Tables made afresh every
/// call run with locks instead, whose order depends on timing: sums within rounding.
#[test]
fn several_workers_combine_exactly_and_deterministically_per_plan() {
    let (n, rows, cols) = (20_000, 300, 200);
    let raw = pairs(n, rows, cols);
    let expected = serial(&raw, 0.25);
    let p = DVector::from_vec(raw).unwrap();
    let check = |got: &Serial, what: &str| {
        assert_eq!(got.count, expected.count, "{what}");
        assert_eq!(got.top, expected.top, "{what}");
        assert_eq!(got.low, expected.low, "{what}");
        assert_eq!(got.best, expected.best, "{what}");
        let rel = (got.loss - expected.loss).abs() / expected.loss;
        assert!(rel < 1e-12, "{what}: {} vs {}", got.loss, expected.loss);
    };
    // Tables for the last part, made before the others so that they are not taken for
    // tables made afresh for a call.
    let (w1, h1) = (
        DVector::from_fn(rows, |_| 0u32).unwrap(),
        DVector::from_fn(cols, |_| 0u32).unwrap(),
    );
    for threads in [2, 3] {
        let w = DVector::from_fn(rows, |_| 0u32).unwrap();
        let h = DVector::from_fn(cols, |_| 0u32).unwrap();
        let mut planned = Vec::new();
        for call in 0..4 {
            // All workers on every call: this is about the plan's determinism.
            let got = converted_on(&p, &w, &h, threads, 0.25, Fallback::Never);
            check(&got, &format!("{threads} threads, call {call}"));
            if call == 0 && threads == 2 {
                assert_eq!(got.loss.to_bits(), expected.loss.to_bits());
            }
            planned.push(got.loss.to_bits());
        }
        assert!(
            planned[1..].windows(2).all(|w| w[0] == w[1]),
            "{threads} threads: {planned:?}"
        );
        for call in 0..2 {
            let got = converted(&p, rows, cols, threads, 0.25);
            check(
                &got,
                &format!("{threads} threads, fresh tables, call {call}"),
            );
        }
    }
    // On one worker instead of two (`Fallback`), in loop order as one thread runs it:
    // the serial value to the last bit on every call (a recorded first call, then calls
    // by the kept plan's table modes on one worker); the plan's order would differ.
    // (One test, not two: tests run side by side, and another one's tables at this call
    // site would look like tables made afresh for every call.)
    for call in 1..=3u32 {
        let got = converted_on(&p, &w1, &h1, 2, 0.25, Fallback::Always);
        assert_eq!(got.loss.to_bits(), expected.loss.to_bits(), "call {call}");
        assert_eq!(got.count, expected.count);
        assert_eq!(
            (got.top, got.low, got.best),
            (expected.top, expected.low, expected.best)
        );
        assert_eq!(w1.to_vec().unwrap().iter().sum::<u32>(), call * n as u32);
        assert_eq!(h1.to_vec().unwrap().iter().sum::<u32>(), call * n as u32);
    }
}

/// A loop whose tables stay the same across calls: the first call runs recorded (in
/// loop order, the serial value to the last bit), later calls run the plan.
#[test]
fn a_recorded_first_call_is_serial_and_planned_calls_agree() {
    let (n, rows, cols) = (30_000, 400, 300);
    let raw = pairs(n, rows, cols);
    let p = DVector::from_vec(raw).unwrap();
    let w = DVector::from_fn(rows, |_| 0.0f64).unwrap();
    let h = DVector::from_fn(cols, |_| 0.0f64).unwrap();
    let mut sums = Vec::new();
    for _ in 0..3 {
        let mut sq = 0.0f64;
        let mut ones = 0u64;
        async_for!(
            0..p.len(),
            |k| {
                let (i, j) = p[k];
                let e = value(k) - w[i as usize] * h[j as usize];
                w[i as usize] += 0.01 * e;
                h[j as usize] += 0.01 * e;
                sq += e * e;
                ones += 1;
            },
            Opts::new().threads(2)
        )
        .unwrap();
        assert_eq!(ones, n as u64);
        sums.push(sq);
    }
    // The serial twin of the first call.
    let mut wv = vec![0.0f64; rows];
    let mut hv = vec![0.0f64; cols];
    let mut sq = 0.0f64;
    for (k, &(i, j)) in pairs(n, rows, cols).iter().enumerate() {
        let e = value(k) - wv[i as usize] * hv[j as usize];
        wv[i as usize] += 0.01 * e;
        hv[j as usize] += 0.01 * e;
        sq += e * e;
    }
    assert_eq!(sums[0].to_bits(), sq.to_bits());
    assert!(sums[1].is_finite() && sums[2].is_finite());
}

/// With locks (a re-checked loop), tasks that meet a held element unwind and run again:
/// each still counts once.
#[test]
fn tasks_run_again_after_a_conflict_count_once() {
    let n = 20_000;
    let hot = DVector::from_fn(4, |_| 0u64).unwrap();
    for _ in 0..2 {
        let mut count = 0u64;
        let mut total = 0u64;
        async_for!(
            0..n,
            |k| {
                hot[k % 4] += 1;
                count += 1;
                total += k as u64;
            },
            Opts::new().threads(2).recheck(true)
        )
        .unwrap();
        assert_eq!(count, n as u64);
        assert_eq!(total, (0..n as u64).sum::<u64>());
    }
    assert_eq!(hot.to_vec().unwrap(), vec![2 * n as u64 / 4; 4]);
}

/// A call that fails leaves its reduction variables as they were.
#[test]
fn a_failed_call_leaves_the_variable_alone() {
    let v = DVector::from_fn(100, |i| i as i64).unwrap();
    let mut sum = 7i64;
    let outcome = async_for!(
        0..v.len(),
        |k| {
            if k == 50 {
                panic!("task 50 fails");
            }
            sum += v[k];
        },
        Opts::new().threads(1)
    );
    assert!(outcome.is_err());
    assert_eq!(sum, 7);
}

/// `sync_for!`: per mini-batch partials, in every mode and thread count; one worker
/// gives the serial float sum to the last bit.
#[test]
fn sync_for_sums_in_every_mode() {
    let n = 10_007;
    let data = DVector::from_fn(n, |i| i).unwrap();
    let serial: f64 = (0..n).fold(0.5, |acc, i| acc + value(i));
    for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
        for threads in 1..=3 {
            let counts = DVector::from_fn(3, |_| 0i64)
                .unwrap()
                .aggregate_with(Aggregation::Sum);
            let mut seen = 0usize;
            let mut total = 0.5f64;
            let mut any_big = false;
            let mut hist = [0u64; 8];
            sync_for!(
                data,
                100,
                mode,
                |batch| {
                    for &i in batch {
                        counts[i % 3] += 1;
                        seen += 1;
                        total += value(i);
                        any_big |= i > 10_000;
                        hist[i % 8] += 1;
                    }
                },
                Opts::new().threads(threads)
            )
            .unwrap();
            assert_eq!(seen, n, "{mode:?} {threads}");
            let want: Vec<u64> = (0..8)
                .map(|b| (0..n).filter(|i| i % 8 == b).count() as u64)
                .collect();
            assert_eq!(hist.to_vec(), want, "{mode:?} {threads}");
            assert!(any_big);
            match threads {
                1 => assert_eq!(total.to_bits(), serial.to_bits(), "{mode:?}"),
                _ => assert!((total - serial).abs() < 1e-9, "{mode:?} {threads}: {total}"),
            }
        }
    }
}

/// Across ranks every rank ends with the same combined value: integer sums exact, float
/// sums equal on every rank.
#[test]
fn ranks_agree_on_the_combined_value() {
    for world in [2, 3] {
        for threads in [1, 2] {
            let (n, rows, cols) = (6_000, 120usize, 80usize);
            let raw = pairs(n, rows, cols);
            let expected = serial(&raw, 1.5);
            let results = on_ranks(world, move || {
                let p = DVector::from_vec(raw.clone())?;
                let mut out = Vec::new();
                for _ in 0..2 {
                    let got = converted(&p, rows, cols, threads, 1.5);
                    out.push((got.loss, got.count, got.top, got.low, got.best));
                }
                Ok(out)
            });
            let mut first = None;
            for (rank, r) in results.into_iter().enumerate() {
                let got = r.unwrap_or_else(|e| panic!("{world} ranks, rank {rank}: {e}"));
                for (loss, count, top, low, best) in &got {
                    assert_eq!(*count, expected.count, "{world} ranks {threads}t");
                    assert_eq!(
                        (*top, *low, *best),
                        (expected.top, expected.low, expected.best)
                    );
                    assert!((loss - expected.loss).abs() / expected.loss < 1e-12);
                }
                match &first {
                    None => first = Some(got),
                    Some(f) => assert_eq!(f, &got, "rank {rank} combined differently"),
                }
            }
        }
    }
}

/// `sync_for!` across ranks: every rank's mini-batches count once, on every rank.
#[test]
fn sync_for_reductions_across_ranks() {
    for mode in [SyncMode::Bsp, SyncMode::Hybrid] {
        for threads in [1, 2] {
            let results = on_ranks(2, move || {
                let data = DVector::from_fn(5_003, |i| i as u64)?;
                let mut seen = 0u64;
                let mut total = 0u64;
                let mut top = 0u64;
                sync_for!(
                    data,
                    64,
                    mode,
                    |batch| {
                        for &x in batch {
                            seen += 1;
                            total += x;
                            top = top.max(x);
                        }
                    },
                    Opts::new().threads(threads)
                )?;
                Ok((seen, total, top))
            });
            for (rank, r) in results.into_iter().enumerate() {
                let got = r.unwrap_or_else(|e| panic!("{mode:?} {threads}t rank {rank}: {e}"));
                assert_eq!(
                    got,
                    (5_003, (0..5_003u64).sum(), 5_002),
                    "{mode:?} {threads}t"
                );
            }
        }
    }
}

/// Plain arrays and `Vec`s written through indexing by sums (`hist[c] += 1`,
/// `sums[c][f] += x[f]`) are summed element-wise, as Lloyd's k-means step accumulates
/// per-centre sums and counts; DVectors written the same way stay DDSs.
#[test]
fn arrays_written_by_sums_are_summed_element_wise() {
    fn point(i: usize) -> [f64; 3] {
        [
            (i % 17) as f64 * 0.25,
            (i % 5) as f64,
            1.0 / (1.0 + i as f64),
        ]
    }
    fn centre_of(i: usize) -> usize {
        (i * 7 + i / 11) % 4
    }
    let n = 12_000;
    let dim = 3;
    // The serial loop.
    let mut s_sums = vec![vec![0.0f64; dim]; 4];
    let mut s_counts = [0u64; 4];
    let mut s_hist = vec![1i32; 8];
    for i in 0..n {
        let c = centre_of(i);
        for (f, x) in point(i).iter().enumerate() {
            s_sums[c][f] += x;
        }
        s_counts[c] += 1;
        s_hist[i % 8] += 2;
        s_hist[(i + 1) % 8] -= 1;
    }
    let points = DVector::from_fn(n, point).unwrap();
    let seen = DVector::from_fn(n, |_| 0u8).unwrap();
    for threads in [1, 2, 3] {
        for call in 0..2 {
            let mut sums = vec![vec![0.0f64; dim]; 4];
            let mut counts = [0u64; 4];
            let mut hist = vec![1i32; 8];
            async_for!(
                0..n,
                |i| {
                    let c = centre_of(i);
                    for (f, x) in points[i].iter().enumerate() {
                        sums[c][f] += x;
                    }
                    counts[c] += 1;
                    hist[i % 8] += 2;
                    hist[(i + 1) % 8] -= 1;
                    seen[i] += 1;
                },
                Opts::new().threads(threads)
            )
            .unwrap();
            let what = format!("{threads} threads, call {call}");
            assert_eq!(counts, s_counts, "{what}");
            assert_eq!(hist, s_hist, "{what}");
            for (got, want) in sums.iter().flatten().zip(s_sums.iter().flatten()) {
                match threads {
                    1 => assert_eq!(got.to_bits(), want.to_bits(), "{what}"),
                    _ => assert!((got - want).abs() <= 1e-9 * want.abs(), "{what}"),
                }
            }
        }
    }
    assert!(seen.to_vec().unwrap().iter().all(|&s| s == 6));
}
