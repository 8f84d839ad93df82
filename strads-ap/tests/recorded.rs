//! Recorded runs: on one or two workers in a world of one, a loop's first call runs the
//! indices in order on one worker while logging their accesses, and that log plans the
//! later calls.

mod common;

use std::time::Duration;

use strads_ap::prelude::*;
use strads_ap::{Error, LoopStats};

/// The figures of the loop at line `line` of this file.
fn stats_at(line: u32) -> LoopStats {
    common::stats_at("recorded.rs", line)
}

/// Element pairs of a seeded pattern with repeats, so that tasks conflict.
fn pattern(n: usize, keys: usize) -> Vec<(usize, usize)> {
    (0..n)
        .map(|k| ((k * 7919) % keys, (k * 104_729 + 13) % keys))
        .collect()
}

/// What the order-sensitive loop over `pattern(n, keys)` leaves after `calls` calls in
/// loop order: per element, the indices of the tasks that wrote it, in order.
fn serial_appends(n: usize, keys: usize, calls: usize) -> Vec<Vec<u32>> {
    let mut serial = vec![Vec::new(); keys];
    for _ in 0..calls {
        for (k, &(a, b)) in pattern(n, keys).iter().enumerate() {
            serial[a].push(k as u32);
            if b != a {
                serial[b].push(k as u32);
            }
        }
    }
    serial
}

/// `got` holds per element what `calls` calls in loop order appended (`before`) and then
/// one planned call's appends: every task of that call once, in some order.
fn assert_one_more_call_ran_every_task_once(got: &[Vec<u32>], before: &[Vec<u32>], calls: usize) {
    for (got, before) in got.iter().zip(before) {
        let (same, last) = got.split_at(before.len());
        assert_eq!(same, before.as_slice());
        let mut last = last.to_vec();
        last.sort_unstable();
        let mut once = before[..before.len() / calls].to_vec();
        once.sort_unstable();
        assert_eq!(last, once, "every task ran once in the planned call");
    }
}

#[test]
fn a_recorded_first_call_is_the_serial_loop_and_plans_the_next_calls() {
    let (n, keys) = (5000, 300);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    // Order-sensitive: each task appends its index to the elements it writes.
    let seen = DVector::from_fn(keys, |_| Vec::<u32>::new()).unwrap();
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                seen[a].push(k as u32);
                if b != a {
                    seen[b].push(k as u32);
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    run().unwrap();
    let serial = serial_appends(n, keys, 1);
    assert_eq!(
        seen.to_vec().unwrap(),
        serial,
        "a recorded run is the serial loop, element for element"
    );
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (1, 1), "{s:?}");
    assert!(s.recorded > Duration::ZERO, "{s:?}");
    assert_eq!(s.recon, Duration::ZERO, "no reconnaissance besides: {s:?}");
    assert!(s.groups > 1, "its log planned several groups: {s:?}");
    assert_eq!(
        s.setup(),
        s.planning + s.recorded,
        "before an ordinary call, all of the recorded run counts as set-up"
    );

    // The second call runs the plan: every task once more, on both workers.
    run().unwrap();
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls, s.workers), (2, 1, 2), "{s:?}");
    assert_eq!(s.strategy, "components", "{s:?}");
    assert!(s.setup() <= s.planning + s.recorded, "{s:?}");
    assert_one_more_call_ran_every_task_once(&seen.to_vec().unwrap(), &serial, 1);
}

/// With the default fallback, a recorded first call leaves its log to be planned on a
/// spare thread: the calls after it run in loop order on one worker (the serial loop's
/// result, element for element) until the plan is made, and the first call after that
/// runs it on both workers; `wait_for_plans` waits for it.
#[test]
fn the_calls_after_a_recorded_one_run_in_loop_order_while_its_plan_is_made() {
    let (n, keys) = (5000, 300);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    let seen = DVector::from_fn(keys, |_| Vec::<u32>::new()).unwrap();
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                seen[a].push(k as u32);
                if b != a {
                    seen[b].push(k as u32);
                }
            },
            Opts::new().threads(2)
        )
    };
    run().unwrap();
    let mut serial_calls = 1;
    let s = stats_at(line);
    assert_eq!(
        (s.calls, s.recorded_calls, s.strategy),
        (1, 1, "recorded"),
        "{s:?}"
    );
    assert_eq!(
        s.planning,
        Duration::ZERO,
        "nothing planned on the call's path: {s:?}"
    );
    assert_eq!(s.setup(), s.recorded, "{s:?}");

    // However many calls run before the plan is made (none, on a fast machine), each is
    // the serial loop.
    loop {
        run().unwrap();
        let s = stats_at(line);
        if s.strategy != "serial while planning" {
            assert_eq!(s.strategy, "components", "{s:?}");
            break;
        }
        serial_calls += 1;
        assert_eq!(s.workers, 1, "{s:?}");
        let serial = serial_appends(n, keys, serial_calls);
        assert_eq!(seen.to_vec().unwrap(), serial, "calls in loop order: {s:?}");
    }
    let s = stats_at(line);
    assert_eq!(s.awaited_plan_calls + 2, s.calls, "{s:?}");
    assert_eq!((s.recorded_calls, s.workers), (1, 2), "{s:?}");
    assert!(s.groups > 1, "{s:?}");
    assert!(
        s.planned_aside > Duration::ZERO,
        "the planner's time: {s:?}"
    );
    assert_eq!(s.calls as usize, serial_calls + 1, "{s:?}");
    let serial = serial_appends(n, keys, serial_calls);
    assert_one_more_call_ran_every_task_once(&seen.to_vec().unwrap(), &serial, serial_calls);

    // Another loop, whose caller waits for the plan: its second call runs it.
    let w = DVector::from_fn(keys, |_| 0u64).unwrap();
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                w[a] += k as u64;
                w[b] += 1;
            },
            Opts::new().threads(2)
        )
    };
    run().unwrap();
    strads_ap::wait_for_plans();
    run().unwrap();
    let s = stats_at(line);
    assert_eq!(
        (s.calls, s.awaited_plan_calls, s.workers, s.strategy),
        (2, 0, 2, "components"),
        "{s:?}"
    );
}

#[test]
fn three_workers_reconnoitre_rather_than_record() {
    let w = DVector::from_fn(64, |_| 0u64).unwrap();
    let line = line!() + 1;
    async_for!(
        0..6400usize,
        |k| w[k % 64] += k as u64,
        Opts::new().threads(3).fallback(Fallback::Never)
    )
    .unwrap();
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (1, 0), "{s:?}");
    assert!(s.recon > Duration::ZERO, "{s:?}");
    let want: Vec<u64> = (0..64u64)
        .map(|j| (0..100u64).map(|i| i * 64 + j).sum())
        .collect();
    assert_eq!(w.to_vec().unwrap(), want);
}

#[test]
fn a_body_failing_in_a_recorded_run_names_its_index_and_keeps_the_tasks_before_it() {
    let w = DVector::from_fn(100, |_| 0u32).unwrap();
    let line = line!() + 2;
    let run = |fail: bool| {
        async_for!(
            0..w.len(),
            |k| {
                if fail && k == 40 {
                    panic!("bad value at {k}");
                }
                w[k] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    let err = run(true).unwrap_err();
    assert!(
        matches!(err, Error::BodyPanicked { index: 40, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("bad value at 40"), "{err}");
    let want: Vec<u32> = (0..100).map(|k| u32::from(k < 40)).collect();
    assert_eq!(
        w.to_vec().unwrap(),
        want,
        "as in the serial loop, the tasks before the failed one took effect"
    );
    // No plan was made: the next call is recorded again, and completes.
    run(false).unwrap();
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (2, 2), "{s:?}");
    let want: Vec<u32> = (0..100).map(|k| 1 + u32::from(k < 40)).collect();
    assert_eq!(w.to_vec().unwrap(), want);
}

#[test]
fn an_index_out_of_bounds_in_a_recorded_run_names_the_table() {
    let w = DVector::from_fn(10, |_| 0u32).unwrap();
    let err = async_for!(
        0..11usize,
        |k| w[k] += 1,
        Opts::new().threads(2).fallback(Fallback::Never)
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("`w`") && msg.contains("10"), "{msg}");
    assert_eq!(w.to_vec().unwrap(), vec![1; 10]);
}

#[test]
fn a_rechecked_loop_records_its_first_call_then_runs_with_locks() {
    let (n, keys) = (4000, 50);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    let counts = DVector::from_fn(keys, |_| 0u64).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                counts[a] += 1;
                counts[b] += 1;
            },
            Opts::new()
                .threads(2)
                .fallback(Fallback::Never)
                .recheck(true)
        )
        .unwrap();
    }
    let s = stats_at(line);
    assert_eq!(
        (s.calls, s.recorded_calls, s.strategy),
        (3, 1, "locks"),
        "{s:?}"
    );
    let mut want = vec![0u64; keys];
    for (a, b) in pattern(n, keys) {
        want[a] += 3;
        want[b] += 3;
    }
    assert_eq!(counts.to_vec().unwrap(), want);
}

#[test]
fn recorded_first_calls_from_several_driver_threads_share_the_helper_pool() {
    // Each driver thread's first call records with the help of the same one-thread pool:
    // a call whose helper has not started yet maps its own log memory and goes on.
    let outcomes: Vec<Vec<u64>> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..4u64)
            .map(|seed| {
                s.spawn(move || {
                    let n = 200_000;
                    let keys = 1000;
                    let w = DVector::from_fn(keys, |_| 0u64).unwrap();
                    for _ in 0..2 {
                        async_for!(
                            0..n,
                            |k| {
                                let key = (k * 7919 + seed as usize) % keys;
                                w[key] += k as u64;
                            },
                            Opts::new().threads(2).fallback(Fallback::Never)
                        )
                        .unwrap();
                    }
                    w.to_vec().unwrap()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (seed, got) in outcomes.iter().enumerate() {
        let mut want = vec![0u64; 1000];
        for k in 0..200_000usize {
            want[(k * 7919 + seed) % 1000] += 2 * k as u64;
        }
        assert_eq!(*got, want, "driver thread {seed}");
    }
}

/// A loop's fixed costs per call are reported: the time inside its calls covers the run,
/// reconnaissance, planning and recording, and what is left is the cost of entering and
/// leaving; planned runs on two workers say how long their workers waited, per step.
#[test]
fn fixed_costs_per_call_are_reported() {
    let (n, keys) = (4000, 64);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    let sums = DVector::from_fn(keys, |_| 0u64).unwrap();
    let line = line!() + 2;
    for _ in 0..5 {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                sums[a] += b as u64;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let s = stats_at(line);
    assert_eq!(s.calls, 5, "{s:?}");
    let c = s.per_call();
    let inside = s.running + s.recon + s.planning + s.recorded;
    assert!(s.wall >= inside, "{s:?}");
    assert_eq!(c.wall, s.wall / 5);
    assert_eq!(c.outside, (s.wall - inside) / 5);
    // Four planned calls on two workers after the recorded one: each ran at least one
    // step, and the workers' waiting is part of those calls' run.
    assert_eq!(s.recorded_calls, 1, "{s:?}");
    assert!(c.steps >= 4.0 / 5.0, "{c:?}");
    let waiting = c.waiting.expect("planned runs measure their workers");
    assert!(waiting * 4 <= s.running, "{c:?} {s:?}");
    // No call yet: nothing per call.
    assert_eq!(
        strads_ap::LoopStats::default().per_call(),
        strads_ap::CallCosts::default()
    );
}

/// A table made afresh for every call (this epoch's negative samples) gets no recorded run
/// per call: once the loop is seen to renew it, its calls run with element locks (the
/// table modes kept for the loop's role), and the result is the serial one.
#[test]
fn a_table_made_afresh_every_call_runs_with_locks_not_recorded_runs() {
    let (n, keys) = (6000, 500);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    let w = DVector::from_fn(keys, |_| 0i64).unwrap();
    let mut serial = vec![0i64; keys];
    let line = line!() + 9;
    for epoch in 0..5usize {
        let negs: Vec<usize> = (0..n).map(|k| (k * 31 + epoch * 17) % keys).collect();
        for (k, &(a, _)) in pattern(n, keys).iter().enumerate() {
            serial[a] += 1;
            serial[negs[k]] -= 1;
        }
        // Made afresh, with other contents: the loop's accesses change with it.
        let negs = DVector::from_vec(negs).unwrap();
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, _) = pairs[k];
                w[a] += 1;
                w[negs[k]] -= 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    assert_eq!(w.to_vec().unwrap(), serial);
    let s = stats_at(line);
    assert_eq!(s.calls, 5, "{s:?}");
    assert_eq!(s.strategy, "locks", "{s:?}");
    // The first call plans nothing it could keep; the second learns the table modes.
    assert!(s.recorded_calls <= 2, "{s:?}");
    assert!(
        s.diagnoses
            .iter()
            .any(|d| d.finding == strads_ap::Finding::AlwaysFirstCall
                && d.message.contains("element locks")),
        "{:#?}",
        s.diagnoses
    );
}

/// A loop whose tables are swapped once (a second data set of the same shapes) is
/// recorded at its first call and at the call after the swap, and at no other: the swap's
/// recorded run also plans, aside, for the calls that keep the new tables.
#[test]
fn tables_swapped_once_are_recorded_once_more_not_twice() {
    let (n, keys) = (6000, 500);
    let w = DVector::from_fn(keys, |_| 0i64).unwrap();
    let mut serial = vec![0i64; keys];
    let mut data = pattern(n, keys);
    let mut pairs = DVector::from_vec(data.clone()).unwrap();
    let mut line = 0;
    for call in 0..6 {
        if call == 2 {
            // The second phase's data: other pairs, the same shapes.
            data.iter_mut()
                .for_each(|(a, b)| (*a, *b) = ((*a + 1) % keys, *a));
            pairs = DVector::from_vec(data.clone()).unwrap();
        }
        line = line!() + 1;
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                w[a] += 2;
                w[b] -= 1;
            },
            Opts::new().threads(2)
        )
        .unwrap();
        for &(a, b) in &data {
            serial[a] += 2;
            serial[b] -= 1;
        }
        strads_ap::wait_for_plans();
    }
    assert_eq!(w.to_vec().unwrap(), serial);
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (6, 2), "{s:?}");
    assert_ne!(s.strategy, "recorded", "{s:?}");
}

#[test]
fn a_rechecked_loop_on_one_worker_runs_in_loop_order_and_still_refuses_unlearned_writes() {
    // `Fallback::Always`: after the recorded first call, calls run on one worker in loop
    // order (no locks), so an order-sensitive update ends exactly as the serial loop's.
    let (n, keys) = (4000, 50);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    let acc = DVector::from_fn(keys, |_| 1u64).unwrap();
    let flag = DVector::from_fn(1, |_| false).unwrap();
    let side = DVector::from_fn(n, |_| 0u32).unwrap();
    let mut want = vec![1u64; keys];
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                acc[a] = acc[a].wrapping_mul(31).wrapping_add(acc[b] ^ k as u64);
                if flag[0] {
                    side[k] += 1;
                }
            },
            Opts::new()
                .threads(2)
                .recheck(true)
                .fallback(Fallback::Always)
        )
    };
    for call in 1..=3 {
        run().unwrap();
        for (k, (a, b)) in pattern(n, keys).into_iter().enumerate() {
            want[a] = want[a].wrapping_mul(31).wrapping_add(want[b] ^ k as u64);
        }
        assert_eq!(acc.to_vec().unwrap(), want, "call {call}");
    }
    let s = stats_at(line);
    assert_eq!(
        (s.calls, s.recorded_calls, s.strategy, s.workers),
        (3, 1, "locks on one worker", 1),
        "{s:?}"
    );
    // A table the first call only read stays read-only on one worker too: the write is
    // refused with the same error as under locks, and the next call learns again.
    flag.set(0, true).unwrap();
    let err = run().unwrap_err();
    assert!(
        matches!(
            err,
            Error::AccessOutsidePlan {
                table: "side",
                access: "wrote",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(side.to_vec().unwrap(), vec![0; n]);
    run().unwrap();
    assert_eq!(side.to_vec().unwrap(), vec![1; n]);
}

/// A recording view remembers the running task's last access so that an inner loop over
/// one element is logged once; each task starts afresh. Here consecutive tasks touch the
/// element the task before them touched last, through a vector and a map: were the memory
/// kept across tasks, only the first would log it, the plan would run the rest on
/// different workers at once, and the next call would be refused (or lose updates).
#[test]
fn each_task_logs_the_element_the_task_before_it_touched_last() {
    let n = 4000usize;
    let total = DVector::from_fn(1, |_| 0u64).unwrap();
    let by_name = DMap::from_pairs(vec![("all".to_string(), 0u64)]).unwrap();
    let key = "all".to_string();
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..n,
            |k| {
                for _ in 0..3 {
                    total[0] += k as u64;
                    by_name[&key] += 1;
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    for _ in 0..3 {
        run().unwrap();
    }
    let each = (n * (n - 1) / 2) as u64 * 3;
    assert_eq!(total.get(0).unwrap(), 3 * each);
    assert_eq!(by_name.get(&key).unwrap(), Some(3 * 3 * n as u64));
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (3, 1), "{s:?}");
}

#[test]
fn tasks_logging_more_than_their_room_are_recorded_again_or_reconnoitred_again() {
    // A task starts with room for 131,072 accesses; these touch 150,000 elements each.
    let width = 150_000usize;
    let w = DVector::from_fn(width, |_| 0u64).unwrap();
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..4usize,
            |k| {
                for j in 0..w.len() {
                    // Order-sensitive: the value depends on the tasks before.
                    w[j] = w[j] * 3 + (k + j) as u64 % 7;
                }
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    let mut serial = vec![0u64; width];
    for call in 1..=3u64 {
        run().unwrap();
        for k in 0..4usize {
            for (j, x) in serial.iter_mut().enumerate() {
                *x = *x * 3 + (k + j) as u64 % 7;
            }
        }
        assert_eq!(w.to_vec().unwrap(), serial, "call {call}");
        let s = stats_at(line);
        // The first recorded run's log lacks accesses: it plans nothing, and the next
        // call records again, with room for such tasks; the third runs by that plan.
        let recorded = call.min(2);
        assert_eq!((s.calls, s.recorded_calls), (call, recorded), "{s:?}");
    }

    // Reconnaissance (three workers) runs such a task again, with more room: the
    // first call plans. These tasks log more than twice the room made above.
    let width = 400_000usize;
    let v = DVector::from_fn(width, |_| 0u64).unwrap();
    let line = line!() + 1;
    async_for!(
        0..3usize,
        |k| {
            for j in 0..v.len() {
                v[j] += (k * j) as u64 % 5;
            }
        },
        Opts::new().threads(3).fallback(Fallback::Never)
    )
    .unwrap();
    let want: Vec<u64> = (0..width)
        .map(|j| (0..3).map(|k| (k * j) as u64 % 5).sum())
        .collect();
    assert_eq!(v.to_vec().unwrap(), want);
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (1, 0), "{s:?}");
    assert!(
        s.recon > Duration::ZERO && s.planning > Duration::ZERO,
        "{s:?}"
    );
}

/// A task that reads an element and then writes it (`let a = x[i]; ...; x[i] = ..`, two
/// statements) is logged as writing it: the table is planned as written, its tasks kept
/// apart, and no increment is lost. Were the write taken for the earlier read, the plan
/// would let two workers update one element at once, or refuse the write.
#[test]
fn a_write_after_a_read_of_the_same_element_is_logged_as_a_write() {
    let (n, keys, calls) = (20_000, 40, 8);
    let pairs = DVector::from_vec(pattern(n, keys)).unwrap();
    let x = DVector::from_fn(keys, |_| 0u64).unwrap();
    let line = line!() + 2;
    for _ in 0..calls {
        async_for!(
            0..pairs.len(),
            |k| {
                let (a, b) = pairs[k];
                // The view's last access before the write is the read of the same element.
                let old = x[a];
                let mut spin = std::hint::black_box(old);
                for _ in 0..50 {
                    spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(7));
                }
                std::hint::black_box(spin);
                x[a] = old + 1;
                std::hint::black_box(x[b]);
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let mut counts = vec![0u64; keys];
    for &(a, _) in &pattern(n, keys) {
        counts[a] += calls as u64;
    }
    assert_eq!(x.to_vec().unwrap(), counts, "every increment kept");
    let s = stats_at(line);
    assert_eq!((s.recorded_calls, s.workers), (1, 2), "{s:?}");
    assert!(
        ["components", "packing", "rotation"].contains(&s.strategy),
        "the later calls ran a plan: {s:?}"
    );
}

/// A recorded run logs no access to a relaxed table: the plan leaves it out and never
/// checks it. Each task here adds into 200,000 elements of a relaxed table, more than the
/// room a recorded run makes for one task's log: were they logged, the first call would
/// plan nothing and the second would record again.
#[test]
fn a_recorded_run_logs_no_access_to_a_relaxed_table() {
    let (n, width) = (8, 200_000);
    let sums = DVector::from_fn(width, |_| 0.0f64)
        .unwrap()
        .relaxed(Relaxed::Sum);
    let own = DVector::from_fn(n, |_| 0u32).unwrap();
    let line = line!() + 2;
    for _ in 0..3 {
        async_for!(
            0..n,
            |k| {
                for x in 0..200_000 {
                    sums[x] += 1.0;
                }
                own[k] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
        .unwrap();
    }
    let s = stats_at(line);
    assert_eq!((s.calls, s.recorded_calls), (3, 1), "{s:?}");
    assert!(sums.to_vec().unwrap().iter().all(|&v| v == 3.0 * n as f64));
    assert!(own.to_vec().unwrap().iter().all(|&v| v == 3));
}
