use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::recon::{Access, LogShape};

/// Every (group, batch) pair of a plan with the tasks of the group.
fn groups_of(plan: &Plan) -> Vec<(GroupRef, Vec<u32>)> {
    match &plan.schedule {
        Schedule::Rotation(r) => r
            .cells
            .iter()
            .enumerate()
            .map(|(i, c)| (GroupRef::Cell(i), c.tasks.clone()))
            .collect(),
        Schedule::Components(batches) => batches
            .iter()
            .enumerate()
            .flat_map(|(b, batch)| {
                batch.groups.iter().enumerate().map(move |(g, group)| {
                    (GroupRef::Group { batch: b, group: g }, group.tasks.clone())
                })
            })
            .collect(),
    }
}

/// Whether two groups may run at the same time.
fn concurrent(plan: &Plan, a: GroupRef, b: GroupRef) -> bool {
    match (&plan.schedule, a, b) {
        (Schedule::Rotation(r), GroupRef::Cell(x), GroupRef::Cell(y)) => {
            let (cx, cy) = (&r.cells[x], &r.cells[y]);
            cx.row != cy.row && (r.col_slot.is_none() || cx.col != cy.col)
        }
        (
            Schedule::Components(_),
            GroupRef::Group {
                batch: b1,
                group: g1,
            },
            GroupRef::Group {
                batch: b2,
                group: g2,
            },
        ) => b1 == b2 && g1 != g2,
        _ => false,
    }
}

/// A table whose window stands in for its tags is reached only inside the window of each
/// task's cell: views that admit the window alone refuse nothing the plan allows. And
/// each cell knows how many of its tasks its hottest rotated key has.
fn check_rotation(log: &AccessLog, schedule: &Schedule, r: &Rotation) {
    for (c, cell) in r.cells.iter().enumerate() {
        for &t in &cell.tasks {
            for a in log.task(t as usize) {
                if r.window_only.contains(&a.slot()) {
                    let window = schedule.window(a.slot(), GroupRef::Cell(c));
                    assert!(
                        window.contains(&(a.key() as usize)),
                        "task {t} reaches {:?} outside its window {window:?}",
                        (a.slot(), a.key())
                    );
                }
            }
        }
    }
    for cell in &r.cells {
        let mut counts: HashMap<(usize, u64), u32> = HashMap::new();
        for &t in &cell.tasks {
            for a in log.task(t as usize) {
                if a.slot() == r.row_slot || Some(a.slot()) == r.col_slot {
                    *counts.entry((a.slot(), a.key())).or_default() += 1;
                }
            }
        }
        let hottest = counts.values().copied().max().unwrap_or(0);
        assert_eq!(cell.hottest, hottest, "cell {:?}", (cell.row, cell.col));
    }
}

fn check_plan(log: &AccessLog, tables: &[TableInfo], threads: usize) {
    let plan = plan(
        log.clone(),
        tables,
        &PlanConfig {
            threads,
            blocks: None,
            seed: 7,
            first_index: 0,
        },
    );
    let groups = groups_of(&plan);

    // Every task exactly once.
    let mut seen = vec![0u32; log.tasks()];
    for (_, tasks) in &groups {
        for &t in tasks {
            seen[t as usize] += 1;
        }
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "a task is missing or repeated"
    );

    if let Schedule::Rotation(r) = &plan.schedule {
        check_rotation(log, &plan.schedule, r);
    }

    // No two concurrent groups share a key that either writes (relaxed tables aside).
    let mut touch: Vec<HashMap<(usize, u64), bool>> = Vec::new();
    for (_, tasks) in &groups {
        let mut m: HashMap<(usize, u64), bool> = HashMap::new();
        for &t in tasks {
            for a in log.task(t as usize) {
                if tables[a.slot()].relaxed {
                    continue;
                }
                *m.entry((a.slot(), a.key())).or_default() |= a.write();
            }
        }
        touch.push(m);
    }
    for i in 0..groups.len() {
        for j in i + 1..groups.len() {
            if !concurrent(&plan, groups[i].0, groups[j].0) {
                continue;
            }
            for (key, &w) in &touch[i] {
                if let Some(&w2) = touch[j].get(key) {
                    assert!(
                        !(w || w2),
                        "groups {i} and {j} may run together but share {key:?}"
                    );
                }
            }
        }
    }

    // Windows (key ranges a group holds alone): every key in a group's window is tagged
    // for that group or untouched, and groups that may run together have disjoint windows.
    for (g, _) in &groups {
        for (s, table) in tables.iter().enumerate() {
            let w = plan.schedule.window(s, *g);
            if w.is_empty() {
                continue;
            }
            assert_eq!(
                plan.modes[s],
                SlotMode::Checked,
                "a window on an unchecked table"
            );
            assert!(w.end <= table.key_space, "window {w:?} past table {s}");
            let allowed = plan.allowed(s, *g);
            for k in w.clone() {
                let tag = plan.tags[s][k];
                assert!(
                    tag == allowed || tag == crate::access::UNTOUCHED,
                    "key {k} of table {s} in {g:?}'s window is tagged {tag}, not {allowed}"
                );
            }
            for (h, _) in &groups {
                if concurrent(&plan, *g, *h) {
                    let v = plan.schedule.window(s, *h);
                    assert!(
                        v.end <= w.start || w.end <= v.start,
                        "concurrent {g:?} and {h:?} share keys of table {s}: {w:?}, {v:?}"
                    );
                }
            }
        }
    }

    // The tags admit every access the log recorded (components: after re-tagging).
    let mut tags = plan.tags.clone();
    let mut last_batch = usize::MAX;
    for (g, tasks) in &groups {
        if let (Schedule::Components(batches), GroupRef::Group { batch, .. }) = (&plan.schedule, g)
        {
            if *batch != last_batch {
                retag(&plan.log, &plan.modes, &batches[*batch], &mut tags);
                last_batch = *batch;
            }
        }
        for &t in tasks {
            for a in log.task(t as usize) {
                if plan.modes[a.slot()] != SlotMode::Checked {
                    continue;
                }
                let tag = tags[a.slot()][a.key() as usize];
                let allowed = plan.allowed(a.slot(), *g);
                assert!(
                    tag == allowed || (!a.write() && tag == crate::access::SHARED),
                    "task {t}'s access {a:?} refused by its own plan"
                );
            }
        }
    }
}

fn arb_log(slots: usize, keys: u64) -> impl Strategy<Value = AccessLog> {
    let access = (0..slots, 0..keys, any::<bool>());
    prop::collection::vec(prop::collection::vec(access, 0..5), 0..120).prop_map(|tasks| {
        AccessLog::from_tasks(tasks.into_iter().map(|t| {
            t.into_iter()
                .map(|(s, k, w)| Access::new(s, k, w))
                .collect::<Vec<_>>()
        }))
    })
}

fn arb_rotation_log(rows: u64, cols: u64) -> impl Strategy<Value = AccessLog> {
    prop::collection::vec((0..rows, 0..cols, 0..1000u64), 0..300).prop_map(|tasks| {
        AccessLog::from_tasks(tasks.into_iter().map(|(r, c, d)| {
            vec![
                Access::new(0, d, false),
                Access::new(1, r, true),
                Access::new(2, c, true),
            ]
        }))
    })
}

/// Matrix factorisation where some tasks write no row of a table (a write made only on a
/// condition of the data): `p[u]` (1) and `q[i]` (2), each written or not touched at all.
fn arb_rotation_log_with_free(rows: u64, cols: u64) -> impl Strategy<Value = AccessLog> {
    let key = |n: u64| prop::option::weighted(0.7, 0..n);
    prop::collection::vec((key(rows), key(cols), 0..1000u64), 0..300).prop_map(|tasks| {
        AccessLog::from_tasks(tasks.into_iter().map(|(r, c, d)| {
            let mut t = vec![Access::new(0, d, false)];
            t.extend(r.map(|r| Access::new(1, r, true)));
            t.extend(c.map(|c| Access::new(2, c, true)));
            t
        }))
    })
}

/// Biased MF's shape with tasks free in the item dimension: `q[i]` (2) and `bi[perm(i)]`
/// (4) both touched or both not; with `lone`, some tasks touch `bi` alone, so `bi` no
/// longer follows `q`.
fn arb_dimension_log_with_free(
    rows: u64,
    cols: u64,
    lone: bool,
) -> impl Strategy<Value = AccessLog> {
    let task = (0..rows, prop::option::weighted(0.7, 0..cols), any::<bool>());
    prop::collection::vec(task, 0..300).prop_map(move |tasks| {
        AccessLog::from_tasks(tasks.into_iter().enumerate().map(|(k, (r, c, alone))| {
            let mut t = vec![
                Access::new(0, k as u64, false),
                Access::new(1, r, true),
                Access::new(3, r, true),
            ];
            match c {
                Some(c) => {
                    t.push(Access::new(2, c, true));
                    t.push(Access::new(4, (c * 5 + 3) % cols, true));
                }
                None if lone && alone => t.push(Access::new(4, r % cols, true)),
                None => {}
            }
            t
        }))
    })
}

/// Whether some key of `slot` is touched by two tasks of `log`.
fn shared_key(log: &AccessLog, slot: usize) -> bool {
    let mut seen = std::collections::HashSet::new();
    (0..log.tasks()).any(|t| {
        log.task(t)
            .iter()
            .any(|a| a.slot() == slot && !seen.insert(a.key()))
    })
}

/// Biased MF's shape: a read of the rating (slot 0), then `p[u]` (1), `q[i]` (2), `bu[u]`
/// (3) and `bi[perm(i)]` (4: keyed one to one with `i`, not equal to it); written.
fn arb_dimension_log(rows: u64, cols: u64) -> impl Strategy<Value = AccessLog> {
    prop::collection::vec((0..rows, 0..cols, 0..1000u64), 0..300).prop_map(move |tasks| {
        AccessLog::from_tasks(tasks.into_iter().map(|(r, c, d)| {
            vec![
                Access::new(0, d, false),
                Access::new(1, r, true),
                Access::new(2, c, true),
                Access::new(3, r, true),
                Access::new(4, (c * 5 + 3) % cols, true),
            ]
        }))
    })
}

/// A factorisation machine's shape: a read of the sample (slot 0), then 1 to 12 rows of
/// `w` (1) and the same rows of `v` (2), written, out of `features`; some tasks also read
/// a row of `v` they do not write.
fn arb_variable_row_log(features: u64) -> impl Strategy<Value = AccessLog> {
    let task = (
        prop::collection::btree_set(0..features, 1..12),
        prop::option::of(0..features),
    );
    prop::collection::vec(task, 0..300).prop_map(|tasks| {
        AccessLog::from_tasks(tasks.into_iter().enumerate().map(|(k, (rows, read))| {
            let mut t = vec![Access::new(0, k as u64, false)];
            t.extend(rows.iter().map(|&r| Access::new(1, r, true)));
            t.extend(read.map(|r| Access::new(2, r, false)));
            t.extend(rows.iter().map(|&r| Access::new(2, r, true)));
            t
        }))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Tasks writing several rows each are packed onto bins that share no written key,
    /// every task once, their tags admitting every access.
    #[test]
    fn variable_row_tasks_pack_conflict_free(log in arb_variable_row_log(60), threads in 1usize..5) {
        let tables = vec![
            TableInfo { key_space: 300, relaxed: false },
            TableInfo { key_space: 60, relaxed: false },
            TableInfo { key_space: 60, relaxed: false },
        ];
        check_plan(&log, &tables, threads);
    }

    /// Tables keyed like a rotated one follow it: the plan rotates (once two keys of each
    /// dimension are shared) and stays conflict-free, its tags admitting every access.
    #[test]
    fn tables_keyed_alike_rotate_as_one_dimension(log in arb_dimension_log(30, 12), threads in 1usize..5) {
        let tables = vec![
            TableInfo { key_space: 1000, relaxed: false },
            TableInfo { key_space: 30, relaxed: false },
            TableInfo { key_space: 12, relaxed: false },
            TableInfo { key_space: 30, relaxed: false },
            TableInfo { key_space: 12, relaxed: false },
        ];
        check_plan(&log, &tables, threads);
    }

    #[test]
    fn random_patterns_are_conflict_free(log in arb_log(3, 20), threads in 1usize..5) {
        let tables = vec![TableInfo { key_space: 20, relaxed: false }; 3];
        check_plan(&log, &tables, threads);
    }

    #[test]
    fn every_written_table_relaxed_is_one_batch_of_consecutive_runs(
        log in arb_log(3, 8),
        threads in 1usize..5,
    ) {
        let tables = vec![TableInfo { key_space: 8, relaxed: true }; 3];
        check_plan(&log, &tables, threads);
        let p = plan(log.clone(), &tables, &PlanConfig {
            threads,
            blocks: None,
            seed: 3,
            first_index: 0,
        });
        if log.tasks() > 0 {
            prop_assert_eq!(p.stats.batches, 1);
            prop_assert!(p.stats.largest_component <= 1);
            for (_, tasks) in groups_of(&p) {
                prop_assert!(tasks.windows(2).all(|w| w[0] + 1 == w[1]), "{:?}", tasks);
            }
        }
    }

    #[test]
    fn random_patterns_with_a_relaxed_table(log in arb_log(3, 8), threads in 1usize..5) {
        let mut tables = vec![TableInfo { key_space: 8, relaxed: false }; 3];
        tables[2].relaxed = true;
        check_plan(&log, &tables, threads);
    }

    #[test]
    fn matrix_factorisation_patterns_rotate(log in arb_rotation_log(30, 12), threads in 1usize..5) {
        let tables = vec![
            TableInfo { key_space: 1000, relaxed: false },
            TableInfo { key_space: 30, relaxed: false },
            TableInfo { key_space: 12, relaxed: false },
        ];
        check_plan(&log, &tables, threads);
    }

    /// Tasks that touch no row of a rotated table (written only on a condition of the
    /// data) still rotate, run in some block of that dimension, and stay conflict-free.
    #[test]
    fn tasks_free_in_a_dimension_still_rotate(
        log in arb_rotation_log_with_free(30, 12),
        threads in 1usize..5,
    ) {
        let tables = vec![
            TableInfo { key_space: 1000, relaxed: false },
            TableInfo { key_space: 30, relaxed: false },
            TableInfo { key_space: 12, relaxed: false },
        ];
        check_plan(&log, &tables, threads);
        let p = plan(log.clone(), &tables, &PlanConfig {
            threads,
            blocks: None,
            seed: 7,
            first_index: 0,
        });
        if shared_key(&log, 1) || shared_key(&log, 2) {
            prop_assert_eq!(p.stats.strategy, "rotation");
        }
    }

    /// A dimension's tables may be free in a task together (biased MF's `q` and `bi`,
    /// neither touched): they still rotate as one dimension. Where one is touched without
    /// the other, they are not one dimension, and the plan stays conflict-free.
    #[test]
    fn dimensions_with_free_tasks_rotate_conflict_free(
        (lone, log) in prop::bool::ANY
            .prop_flat_map(|lone| (Just(lone), arb_dimension_log_with_free(30, 12, lone))),
        threads in 1usize..5,
    ) {
        let tables = vec![
            TableInfo { key_space: 300, relaxed: false },
            TableInfo { key_space: 30, relaxed: false },
            TableInfo { key_space: 12, relaxed: false },
            TableInfo { key_space: 30, relaxed: false },
            TableInfo { key_space: 12, relaxed: false },
        ];
        check_plan(&log, &tables, threads);
        if !lone && (shared_key(&log, 1) || shared_key(&log, 2)) {
            let p = plan(log.clone(), &tables, &PlanConfig {
                threads,
                blocks: None,
                seed: 7,
                first_index: 0,
            });
            prop_assert_eq!(p.stats.strategy, "rotation");
        }
    }

    /// `rotation_of` (a locking run's placement) is the plan's rotation where the plan
    /// rotates and every task touches one key of each table (matrix factorisation's
    /// logs), nothing where the plan makes components, and never another rotation.
    #[test]
    fn rotation_of_is_the_plans_rotation_or_none(
        (log, rotating) in prop_oneof![
            arb_rotation_log(30, 12).prop_map(|l| (l, true)),
            arb_log(3, 20).prop_map(|l| (l, false)),
        ],
        threads in 1usize..5,
    ) {
        let key_spaces: &[usize] = if rotating { &[1000, 30, 12] } else { &[20, 20, 20] };
        let tables = TableInfo::unrelaxed(key_spaces);
        let config = PlanConfig { threads, blocks: None, seed: 5, first_index: 0 };
        let want = match plan(log.clone(), &tables, &config).schedule {
            Schedule::Rotation(r) => Some(*r),
            Schedule::Components(_) => None,
        };
        let got = rotation_of(log, &tables, &config);
        match rotating {
            true => prop_assert_eq!(got, want),
            // A task of a random log may touch two keys of a table that would be private:
            // the plan may rotate where `rotation_of` looks no further.
            false => prop_assert!(got.is_none() || got == want),
        }
    }
}

#[test]
fn sgdmf_shape_picks_rotation_and_rotates_both_tables() {
    let tasks = (0..2000u64).map(|i| {
        vec![
            Access::new(0, i, false),
            Access::new(1, i % 97, true),
            Access::new(2, (i * 7) % 31, true),
        ]
    });
    let log = AccessLog::from_tasks(tasks);
    let tables = [
        TableInfo {
            key_space: 2000,
            relaxed: false,
        },
        TableInfo {
            key_space: 97,
            relaxed: false,
        },
        TableInfo {
            key_space: 31,
            relaxed: false,
        },
    ];
    let p = plan(
        log,
        &tables,
        &PlanConfig {
            threads: 2,
            blocks: None,
            seed: 1,
            first_index: 0,
        },
    );
    assert_eq!(p.stats.strategy, "rotation");
    assert_eq!(
        p.modes,
        vec![SlotMode::ReadOnly, SlotMode::Checked, SlotMode::Checked]
    );
    match &p.schedule {
        Schedule::Rotation(r) => {
            let b = 2 * BLOCKS_PER_THREAD;
            assert_eq!((r.row_slot, r.col_slot, r.rows, r.cols), (1, Some(2), b, b));
            let sizes: Vec<usize> = r.cells.iter().map(|c| c.tasks.len()).collect();
            assert_eq!(sizes.iter().sum::<usize>(), 2000);
        }
        other => panic!("expected rotation, got {other:?}"),
    }
}

#[test]
fn private_tables_do_not_conflict() {
    // Each task writes its own key of table 0 and reads a shared table 1: one batch of
    // singletons packed onto bins.
    let log = AccessLog::from_tasks(
        (0..500u64).map(|i| vec![Access::new(0, i, true), Access::new(1, i % 3, false)]),
    );
    let tables = [
        TableInfo {
            key_space: 500,
            relaxed: false,
        },
        TableInfo {
            key_space: 3,
            relaxed: false,
        },
    ];
    let p = plan(
        log,
        &tables,
        &PlanConfig {
            threads: 4,
            blocks: None,
            seed: 1,
            first_index: 0,
        },
    );
    assert_eq!(p.stats.batches, 1);
    assert_eq!(p.stats.largest_component, 1);
    assert_eq!(p.modes[1], SlotMode::ReadOnly);
    assert!(p.stats.groups >= 4);
    // Tasks that conflict with none run in runs of consecutive indices, which read their
    // loop-indexed elements in memory order.
    let mut runs: Vec<Vec<u32>> = groups_of(&p).into_iter().map(|(_, t)| t).collect();
    runs.sort();
    assert_eq!(runs.concat(), (0..500).collect::<Vec<u32>>());
    assert!(runs.iter().all(|r| r.windows(2).all(|w| w[1] == w[0] + 1)));
}

/// Groups of conflicting tasks run their tasks in loop order.
#[test]
fn a_groups_tasks_run_in_loop_order() {
    // Task i writes keys i / 3 and 1000 + i / 3 of table 0 (two rows: no rotation):
    // components of three consecutive tasks.
    let log = AccessLog::from_tasks((0..3000u64).map(|i| {
        vec![
            Access::new(0, i / 3, true),
            Access::new(0, 1000 + i / 3, true),
        ]
    }));
    let tables = [TableInfo {
        key_space: 2000,
        relaxed: false,
    }];
    let p = plan(
        log.clone(),
        &tables,
        &PlanConfig {
            threads: 2,
            blocks: None,
            seed: 5,
            first_index: 0,
        },
    );
    assert_eq!(p.stats.strategy, "components");
    assert_eq!(p.stats.largest_component, 3);
    for (_, tasks) in groups_of(&p) {
        assert!(tasks.windows(2).all(|w| w[0] < w[1]), "{tasks:?}");
    }
    check_plan(&log, &tables, 2);
}

#[test]
fn a_key_every_task_writes_makes_one_group_in_loop_order() {
    let tables = [TableInfo {
        key_space: 5001,
        relaxed: false,
    }];
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 3,
        first_index: 0,
    };
    // Every task writes key 0 (a global bias) and its own key.
    let all = AccessLog::from_tasks(
        (0..5000u64).map(|i| vec![Access::new(0, 0, true), Access::new(0, i + 1, true)]),
    );
    let p = plan(all.clone(), &tables, &config);
    assert_eq!((p.stats.batches, p.stats.groups), (1, 1), "{:?}", p.stats);
    let tasks = &groups_of(&p)[0].1;
    assert_eq!(tasks, &(0..5000u32).collect::<Vec<_>>(), "loop order");
    check_plan(&all, &tables, 2);
    // Only the first half of the tasks write key 0: the others can run apart.
    let half = AccessLog::from_tasks((0..5000u64).map(|i| match i < 2500 {
        true => vec![Access::new(0, 0, true), Access::new(0, i + 1, true)],
        false => vec![Access::new(0, i + 1, true)],
    }));
    let p = plan(half.clone(), &tables, &config);
    assert!(p.stats.groups > 1, "{:?}", p.stats);
    check_plan(&half, &tables, 2);
}

#[test]
fn a_hot_key_makes_one_serial_component() {
    let log = AccessLog::from_tasks(
        (0..100u64).map(|i| vec![Access::new(0, 0, true), Access::new(0, i, true)]),
    );
    let tables = [TableInfo {
        key_space: 100,
        relaxed: false,
    }];
    let p = plan(
        log.clone(),
        &tables,
        &PlanConfig {
            threads: 2,
            blocks: None,
            seed: 3,
            first_index: 0,
        },
    );
    assert_eq!(p.stats.strategy, "components");
    assert_eq!(p.stats.largest_component, p.stats.largest_group);
    check_plan(&log, &tables, 2);
}

/// A factorisation machine's log: `n` samples (slot 0, read at the task's index), each
/// with 3 to 30 rows drawn by `row` (`None`: left out), written in `w` (1) and `v` (2);
/// with the tables' shapes.
fn fm_shaped_log(
    n: usize,
    features: usize,
    mut row: impl FnMut() -> Option<u64>,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> (AccessLog, [TableInfo; 3]) {
    use rand::Rng;
    let log = AccessLog::from_tasks((0..n).map(|k| {
        let active = rng.gen_range(3..=30);
        let mut rows: Vec<u64> = (0..active).filter_map(|_| row()).collect();
        rows.sort_unstable();
        rows.dedup();
        let mut t = vec![Access::new(0, k as u64, false)];
        t.extend(rows.iter().map(|&r| Access::new(1, r, true)));
        t.extend(rows.iter().map(|&r| Access::new(2, r, true)));
        t
    }));
    let table = |key_space| TableInfo {
        key_space,
        relaxed: false,
    };
    (log, [table(n), table(features), table(features)])
}

/// A components (or packing) plan's speedup on `threads` as modelled: tasks over the
/// sum, per batch, of the larger of its heaviest group and an even share of its tasks.
fn modelled_speedup(p: &Plan, threads: usize) -> f64 {
    let Schedule::Components(batches) = &p.schedule else {
        panic!("not a components schedule: {:?}", p.stats)
    };
    let span: usize = batches
        .iter()
        .map(|b| {
            let size: usize = b.groups.iter().map(|g| g.tasks.len()).sum();
            let largest = b.groups.iter().map(|g| g.tasks.len()).max().unwrap_or(0);
            largest.max(size.div_ceil(threads))
        })
        .sum();
    p.stats.tasks as f64 / span.max(1) as f64
}

/// A factorisation machine's log at a fixed size: 20,000 samples, 3 to 30 features each
/// out of 10,000 (uniform). No batch falls apart into components; packing runs the tasks
/// on both threads, in bins of about equal work.
#[test]
fn variable_row_tasks_are_packed_with_parallelism() {
    use rand::Rng;
    let (n, features) = (20_000usize, 10_000u64);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut rows = rand_chacha::ChaCha8Rng::seed_from_u64(6);
    let (log, tables) = fm_shaped_log(
        n,
        features as usize,
        || Some(rows.gen_range(0..features)),
        &mut rng,
    );
    let threads = 2;
    let p = plan(
        log.clone(),
        &tables,
        &PlanConfig {
            threads,
            blocks: None,
            seed: 1,
            first_index: 0,
        },
    );
    assert_eq!(p.stats.strategy, "packing", "{:?}", p.stats);
    let speedup = modelled_speedup(&p, threads);
    assert!(
        speedup >= 1.8,
        "modelled speedup {speedup:.2} on {threads} threads"
    );
    assert!(
        p.stats.batches * 20 < n,
        "{} batches for {n} tasks",
        p.stats.batches
    );
    check_plan(&log, &tables, threads);
}

/// A sampler's log (a new user's GSDMM): every task reads all 40 cluster counts and
/// writes two of them. Packing finds batches of a task or two; after its first few it
/// gives up for one group in loop order, instead of thousands of such batches.
#[test]
fn tasks_tied_to_most_others_are_not_packed_one_batch_each() {
    let (n, clusters) = (20_000u64, 40u64);
    let log = AccessLog::from_tasks((0..n).map(|i| {
        let (old, new) = (mix_key(i) % clusters, mix_key(i + n) % clusters);
        (0..clusters)
            .map(|c| Access::new(0, c, c == old || c == new))
            .collect::<Vec<_>>()
    }));
    let tables = [TableInfo {
        key_space: clusters as usize,
        relaxed: false,
    }];
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 3,
        first_index: 0,
    };
    let p = plan(log.clone(), &tables, &config);
    assert_eq!((p.stats.batches, p.stats.groups), (1, 1), "{:?}", p.stats);
    let tasks = &groups_of(&p)[0].1;
    assert_eq!(tasks, &(0..n as u32).collect::<Vec<_>>(), "loop order");
    check_plan(&log, &tables, 2);
}

/// A key from an index, well spread.
fn mix_key(i: u64) -> u64 {
    let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[test]
fn balanced_blocks_split_weight_evenly() {
    let w = vec![1u32; 100];
    let b = balanced_blocks(&w, 4);
    for blk in 0..4 {
        assert_eq!(b.iter().filter(|&&x| x == blk).count(), 25);
    }
    assert!(b.windows(2).all(|p| p[0] <= p[1]));
}

#[test]
fn rotation_over_tables_much_larger_than_the_loop() {
    // 3,000 tasks writing one key each of two tables with millions of keys: tasks per key
    // are counted from the gathered keys, not per part, and the plan is still a rotation
    // that covers every task and tags exactly the keys touched.
    let log = AccessLog::from_tasks((0..3000u64).map(|i| {
        vec![
            Access::new(0, (i * 7919) % 5_000_000, true),
            Access::new(1, (i * 104_729) % 3_000_000, true),
        ]
    }));
    let tables = [
        TableInfo {
            key_space: 5_000_000,
            relaxed: false,
        },
        TableInfo {
            key_space: 3_000_000,
            relaxed: false,
        },
    ];
    check_plan(&log, &tables, 2);
    let p = plan(
        log.clone(),
        &tables,
        &PlanConfig {
            threads: 2,
            blocks: None,
            seed: 1,
            first_index: 0,
        },
    );
    // Every key is touched once: both tables are private, so components (singletons).
    assert_eq!(p.stats.strategy, "components");
    assert_eq!(p.stats.largest_component, 1);

    // With repeats the tables are shared and rotate.
    let log = AccessLog::from_tasks((0..3000u64).map(|i| {
        vec![
            Access::new(0, (i % 500) * 9973, true),
            Access::new(1, (i % 301) * 9967, true),
        ]
    }));
    check_plan(&log, &tables, 2);
    let p = plan(
        log,
        &tables,
        &PlanConfig {
            threads: 2,
            blocks: None,
            seed: 1,
            first_index: 0,
        },
    );
    assert_eq!(p.stats.strategy, "rotation");
    let tagged = p.tags[0].iter().filter(|&&t| t != UNTOUCHED).count();
    assert_eq!(tagged, 500);
}

#[test]
fn one_shared_and_one_private_table_rotate_the_shared_one() {
    // Task i writes out[i] (private) and w[i % 10] (shared), and reads x at its own index
    // 100 + i: one-table rotation over w, out tagged by cell, x prefetched.
    let log = AccessLog::from_tasks((0..400u64).map(|i| {
        vec![
            Access::new(0, i, true),
            Access::new(1, i % 10, true),
            Access::new(2, 100 + i, false),
        ]
    }));
    let tables = [
        TableInfo {
            key_space: 400,
            relaxed: false,
        },
        TableInfo {
            key_space: 10,
            relaxed: false,
        },
        TableInfo {
            key_space: 500,
            relaxed: false,
        },
    ];
    let p = plan(
        log,
        &tables,
        &PlanConfig {
            threads: 2,
            blocks: None,
            seed: 1,
            first_index: 100,
        },
    );
    assert_eq!(p.stats.strategy, "rotation");
    assert_eq!(p.indexed_by_task, vec![2]);
    match &p.schedule {
        Schedule::Rotation(r) => {
            assert_eq!((r.row_slot, r.col_slot), (1, None));
            for (c, cell) in r.cells.iter().enumerate() {
                let id = cell.row * r.cols as u32 + cell.col;
                for &t in &cell.tasks {
                    assert_eq!(p.tags[0][t as usize], id, "cell {c} task {t}");
                }
            }
        }
        other => panic!("expected rotation, got {other:?}"),
    }
}

/// A rotation plan from a log gathered chunk by chunk (as a recorded run does it) equals
/// the one from the whole log; a wrong guess of the tables to gather falls back.
#[test]
fn gathering_ahead_chunk_by_chunk_gives_the_same_plan() {
    let (rows, cols, shift) = (40u64, 12u64, 6u32);
    let chunk = |c: u64, n: u64, write_b: bool| {
        AccessLog::from_tasks((0..n).map(move |i| {
            let t = (c << shift) + i;
            vec![
                Access::new(0, 100 + t, false),
                Access::new(1, (t * 7) % rows, true),
                Access::new(2, (t * 5 + 3) % cols, write_b),
            ]
        }))
    };
    let tables = [
        TableInfo {
            key_space: 1000,
            relaxed: false,
        },
        TableInfo {
            key_space: rows as usize,
            relaxed: false,
        },
        TableInfo {
            key_space: cols as usize,
            relaxed: false,
        },
    ];
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 7,
        first_index: 100,
    };
    let sizes = [64u64, 64, 64, 17];
    // The first chunk writes table 2 like the rest (a right guess), or only reads it (a
    // wrong guess: table 1 alone).
    for first_writes_b in [true, false] {
        let chunks: Vec<AccessLog> = sizes
            .iter()
            .enumerate()
            .map(|(c, &n)| chunk(c as u64, n, c > 0 || first_writes_b))
            .collect();
        let feed = || {
            let mut ahead = GatherAhead::new(&tables, config.first_index);
            for c in &chunks {
                ahead.add(c);
            }
            ahead
        };
        let tasks = sizes.iter().sum::<u64>() as usize;
        assert_eq!(
            feed().finish(&[1, 2], tasks).is_some(),
            first_writes_b,
            "the gathered pass is used exactly when the guess was right"
        );
        let ahead = feed();
        let log = AccessLog::from_chunks(shift, chunks);
        let whole = plan(log.clone(), &tables, &config);
        let chunked = plan_ahead(log, &tables, &config, Some(ahead));
        assert_eq!(whole.stats.strategy, "rotation");
        assert_eq!(groups_of(&whole), groups_of(&chunked), "{first_writes_b}");
        assert_eq!(whole.tags, chunked.tags);
        assert_eq!(whole.indexed_by_task, chunked.indexed_by_task);
    }
}

/// A rank that claims a key past its table (here: task 1 writes element 1000 of a table
/// of 10) panicked the planner (an index out of bounds in `connected`) when its log was
/// checked only against 2^55; the decoder now refuses it, naming the part (the rank).
#[test]
fn logs_from_peers_with_keys_past_their_tables_are_refused_before_planning() {
    let mine = AccessLog::from_tasks([vec![Access::new(0, 3, true)]]);
    let theirs = AccessLog::from_tasks([vec![Access::new(0, 1000, true)]]);
    let parts = [mine.to_bytes(0), theirs.to_bytes(1)];
    let shares = [0..1, 1..2];
    let bad = AccessLog::from_byte_parts(&parts, &LogShape::new(&[10], &shares)).unwrap_err();
    assert_eq!(bad.part, 1);
    assert!(
        bad.message
            .contains("key 1000 of table slot 0, which has 10 keys"),
        "{bad}"
    );
    // The same parts against a table long enough plan without trouble.
    let log = AccessLog::from_byte_parts(&parts, &LogShape::new(&[1001], &shares)).unwrap();
    let tables = [TableInfo {
        key_space: 1001,
        relaxed: false,
    }];
    check_plan(&log, &tables, 2);
}

/// What checking a log from other ranks costs against planning it: an SGDMF-shaped log
/// (each task reads `ratings[k]` at its own index and writes one row of `W` and one of
/// `H`) of 1.5 million tasks, 4.5 million accesses, sent by 2 ranks. Decoding checks every
/// access as it goes; the checks alone cost about what a pass over the decoded log doing
/// the same compares costs (measured here too). Run by hand:
/// `cargo test -p strads-ap-runtime --release --lib validation_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand in release"]
fn validation_cost_against_planning() {
    use std::time::Instant;
    let (n, users, items) = (1_500_000usize, 50_000u64, 20_000u64);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let task = |k: usize, rng: &mut rand_chacha::ChaCha8Rng| {
        use rand::Rng;
        vec![
            Access::new(0, k as u64, false),
            Access::new(1, rng.gen_range(0..users), true),
            Access::new(2, rng.gen_range(0..items), true),
        ]
    };
    let half = n / 2;
    let a = AccessLog::from_tasks((0..half).map(|k| task(k, &mut rng)));
    let b = AccessLog::from_tasks((half..n).map(|k| task(k, &mut rng)));
    let parts = [a.to_bytes(0), b.to_bytes(half)];
    let spaces = [n, users as usize, items as usize];
    let shares = [0..half, half..n];
    let shape = LogShape::new(&spaces, &shares);
    let tables = TableInfo::unrelaxed(&spaces);
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 1,
        first_index: 0,
    };
    let (mut decode, mut checks, mut planning) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..5 {
        let t0 = Instant::now();
        let log = AccessLog::from_byte_parts(&parts, &shape).unwrap();
        let t_check = Instant::now();
        let mut bad = 0usize;
        log.for_each_in(0..log.tasks(), |t, set| {
            bad += (t >= n) as usize;
            for a in set {
                bad += (a.slot() >= spaces.len() || a.key() >= spaces[a.slot()] as u64) as usize;
            }
        });
        assert_eq!(std::hint::black_box(bad), 0);
        checks = checks.min(t_check.elapsed().as_secs_f64());
        let t1 = Instant::now();
        let p = plan(log, &tables, &config);
        let t2 = Instant::now();
        assert_eq!(p.stats.strategy, "rotation");
        decode = decode.min((t1 - t0).as_secs_f64());
        planning = planning.min((t2 - t1).as_secs_f64());
    }
    let entries = 3 * n;
    eprintln!(
        "{entries} accesses, {} bytes: decode with checks {:.1} ms ({:.2} ns per access), the \
         checks alone {:.1} ms ({:.2} ns per access, {:.1}% of planning), plan {:.1} ms",
        parts[0].len() + parts[1].len(),
        decode * 1e3,
        decode * 1e9 / entries as f64,
        checks * 1e3,
        checks * 1e9 / entries as f64,
        100.0 * checks / planning,
        planning * 1e3,
    );
}

/// Biased MF at a fixed size: four written tables in two dimensions rotate like SGDMF,
/// `bu` following `p` and `bi` following `q`; a fifth written table keyed by neither
/// dimension (a shared accumulator) leaves three dimensions, which rotation cannot run.
#[test]
fn biased_mf_shape_rotates_over_two_dimensions() {
    let task = |i: u64| {
        vec![
            Access::new(0, i, false),
            Access::new(1, i % 97, true),
            Access::new(2, (i * 7) % 31, true),
            Access::new(3, i % 97, true),
            Access::new(4, (i * 7) % 31, true),
        ]
    };
    let tables = |n: usize| {
        let mut t = vec![
            TableInfo {
                key_space: 2000,
                relaxed: false,
            },
            TableInfo {
                key_space: 97,
                relaxed: false,
            },
            TableInfo {
                key_space: 31,
                relaxed: false,
            },
            TableInfo {
                key_space: 97,
                relaxed: false,
            },
            TableInfo {
                key_space: 31,
                relaxed: false,
            },
        ];
        t.truncate(n);
        t.resize(
            n,
            TableInfo {
                key_space: 3,
                relaxed: false,
            },
        );
        t
    };
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 1,
        first_index: 0,
    };
    let log = AccessLog::from_tasks((0..2000u64).map(task));
    let p = plan(log.clone(), &tables(5), &config);
    match &p.schedule {
        Schedule::Rotation(r) => {
            assert_eq!((r.row_slot, r.col_slot), (1, Some(2)));
            assert_eq!(
                (&r.row_members[..], &r.col_members[..]),
                (&[3][..], &[4][..])
            );
            // Keyed exactly alike: the members share their representative's windows.
            assert_eq!(
                (&r.row_windowed[..], &r.col_windowed[..]),
                (&[1, 3][..], &[2, 4][..])
            );
            let cell = GroupRef::Cell(0);
            assert_eq!(p.schedule.window(3, cell), p.schedule.window(1, cell));
            assert!(!p.schedule.window(1, cell).is_empty());
            // Every task reaches only its own keys: the windows cover every access.
            assert_eq!(r.window_only, [1, 3, 2, 4]);
        }
        other => panic!("expected rotation, got {other:?}"),
    }
    check_plan(&log, &tables(5), 2);

    // A written key every task touches (`sum[i % 3]`) is a third dimension.
    let log = AccessLog::from_tasks((0..2000u64).map(|i| {
        let mut t = task(i);
        t.push(Access::new(5, i % 3, true));
        t
    }));
    let p = plan(log.clone(), &tables(6), &config);
    assert_eq!(p.stats.strategy, "packing", "{:?}", p.stats);
    check_plan(&log, &tables(6), 2);
}

/// A new user's learned-neighbourhood recommender writes an item's neighbour weights only
/// where the user rated a neighbour: a fifth of its tasks touch no row of `w` (item
/// dimension) and none of `bi` either. It still rotates over users and items, `bi`
/// following `w`, and each cell's windows cover every access.
#[test]
fn tasks_that_write_no_row_of_a_dimension_rotate() {
    let task = |i: u64| {
        let mut t = vec![
            Access::new(0, i, false),
            Access::new(1, i % 97, true),
            Access::new(3, i % 97, true),
        ];
        if i % 5 != 0 {
            t.push(Access::new(2, (i * 7) % 31, true));
            t.push(Access::new(4, (i * 7) % 31, true));
        }
        t
    };
    let tables = [2000, 97, 31, 97, 31].map(|key_space| TableInfo {
        key_space,
        relaxed: false,
    });
    let log = AccessLog::from_tasks((0..2000u64).map(task));
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 1,
        first_index: 0,
    };
    let p = plan(log.clone(), &tables, &config);
    match &p.schedule {
        Schedule::Rotation(r) => {
            assert_eq!((r.row_slot, r.col_slot), (1, Some(2)));
            assert_eq!(
                (&r.row_members[..], &r.col_members[..]),
                (&[3][..], &[4][..])
            );
            assert_eq!(r.window_only, [1, 3, 2, 4]);
            // The free tasks are spread over the item blocks, not piled into one.
            let free_per_col = |col: u32| {
                r.cells
                    .iter()
                    .filter(|c| c.col == col)
                    .flat_map(|c| &c.tasks)
                    .filter(|&&t| t % 5 == 0)
                    .count()
            };
            let counts: Vec<usize> = (0..r.cols as u32).map(free_per_col).collect();
            let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(most - least <= 1 + 400 / (2 * r.cols), "{counts:?}");
        }
        other => panic!("expected rotation, got {other:?}"),
    }
    check_plan(&log, &tables, 2);
}

/// Dimensions found from keys gathered chunk by chunk (as a recorded run's helper gathers
/// them) give the plan the whole log gives; where some chunk's tasks are no dimensions
/// (a task touching two keys of a table), the keys gathered ahead are refused and the
/// plan is the whole log's all the same.
#[test]
fn dimensions_gathered_ahead_chunk_by_chunk_give_the_same_plan() {
    let shift = 6u32;
    let sizes = [64u64, 64, 64, 64, 30];
    let task = |t: u64, twice: bool| {
        let mut a = vec![
            Access::new(0, t, false),
            Access::new(1, t % 97, true),
            Access::new(2, (t * 7) % 31, true),
            Access::new(3, t % 97, true),
            Access::new(4, (t * 7) % 31, true),
        ];
        if twice {
            a.push(Access::new(3, (t + 1) % 97, true));
        }
        a
    };
    let tables = TableInfo::unrelaxed(&[2000, 97, 31, 97, 31]);
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 3,
        first_index: 0,
    };
    let tasks = sizes.iter().sum::<u64>() as usize;
    for odd_task in [None, Some(200u64)] {
        let chunks: Vec<AccessLog> = sizes
            .iter()
            .enumerate()
            .map(|(c, &n)| {
                let first = (c as u64) << shift;
                AccessLog::from_tasks((first..first + n).map(|t| task(t, Some(t) == odd_task)))
            })
            .collect();
        let mut ahead = GatherAhead::new(&tables, config.first_index);
        for c in &chunks {
            ahead.add(c);
        }
        let log = AccessLog::from_chunks(shift, chunks.clone());
        let whole = plan(log.clone(), &tables, &config);
        let chunked = plan_ahead(log.clone(), &tables, &config, Some(ahead));
        let expected = if odd_task.is_none() {
            "rotation"
        } else {
            "packing"
        };
        assert_eq!(whole.stats.strategy, expected, "{odd_task:?}");
        assert_eq!(groups_of(&whole), groups_of(&chunked), "{odd_task:?}");
        assert_eq!(whole.tags, chunked.tags, "{odd_task:?}");
        check_plan(&log, &tables, 2);
        let mut ahead = GatherAhead::new(&tables, config.first_index);
        for c in &chunks {
            ahead.add(c);
        }
        let keys = ahead.finish_keys(&[1, 2, 3, 4], tasks);
        assert_eq!(keys.is_some(), odd_task.is_none(), "{odd_task:?}");
        if let Some(keys) = keys {
            assert_eq!(&keys[..4], &[0, 0, 0, 0]);
            assert_eq!(
                &keys[4 * 100..4 * 101],
                &[100 % 97, 700 % 31, 100 % 97, 700 % 31]
            );
        }
    }
}

/// Variable-row shapes (a task writes several rows of one dimension, as a factorisation
/// machine or SVD++ does): the modelled speedup of the plan at 2 and 4 threads, that is
/// tasks over the sum, per batch, of the larger of its largest group and its even share.
/// Run by hand:
/// `cargo test -p strads-ap-runtime --release --lib variable_row_parallelism -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand in release"]
fn variable_row_parallelism() {
    use rand::Rng;
    use std::time::Instant;
    // (name, features, Zipf exponent, hottest features left out)
    let shapes = [
        ("uniform 1000", 1000usize, 0.0f64, 0usize),
        ("uniform 10000", 10_000, 0.0, 0),
        ("zipf1 1000 minus top 20", 1000, 1.0, 20),
        ("zipf1 100000 minus top 100", 100_000, 1.0, 100),
        ("zipf0.7 10000", 10_000, 0.7, 0),
        ("zipf1 10000 minus top 100", 10_000, 1.0, 100),
        ("zipf1 20000 minus top 100", 20_000, 1.0, 100),
    ];
    let n = 100_000usize;
    for (name, features, s, cut) in shapes {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut rows = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        let mut total = 0.0;
        let cdf: Vec<f64> = (0..features)
            .map(|r| {
                total += 1.0 / ((r + 1) as f64).powf(s);
                total
            })
            .collect();
        let (log, tables) = fm_shaped_log(
            n,
            features,
            || {
                let u = rows.gen::<f64>() * total;
                let f = cdf.partition_point(|&c| c < u).min(features - 1);
                (f >= cut).then_some(f as u64)
            },
            &mut rng,
        );
        for threads in [2usize, 4] {
            let t0 = Instant::now();
            let p = plan(
                log.clone(),
                &tables,
                &PlanConfig {
                    threads,
                    blocks: None,
                    seed: 1,
                    first_index: 0,
                },
            );
            eprintln!(
                "{name}, {threads} threads: {}, modelled speedup {:.2}, {} batches, largest \
                 group {}, planned in {:.0} ms",
                p.stats.strategy,
                modelled_speedup(&p, threads),
                p.stats.batches,
                p.stats.largest_group,
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}

/// A plan is a function of the log, the tables and the settings alone, not of the rayon
/// pool that makes it: a recorded first call's plan is made on a pool of one thread (see
/// `async_for::planned::plan_aside`), while a call that plans on its path uses all of its
/// workers. Logs large enough (2^15 tasks and more) that the planner's passes split
/// them into several parts, for the rotation, components and packing shapes.
#[test]
fn a_plan_does_not_depend_on_the_threads_that_make_it() {
    let n = 70_000u64;
    let mix = |x: u64| x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    let shapes: Vec<(&str, AccessLog, Vec<TableInfo>)> = vec![
        (
            "rotation",
            AccessLog::from_tasks((0..n).map(|t| {
                vec![
                    Access::new(0, t, false),
                    Access::new(1, mix(t) % 3000, true),
                    Access::new(2, mix(t + 7) % 500, true),
                ]
            })),
            vec![
                TableInfo {
                    key_space: n as usize,
                    relaxed: false,
                },
                TableInfo {
                    key_space: 3000,
                    relaxed: false,
                },
                TableInfo {
                    key_space: 500,
                    relaxed: false,
                },
            ],
        ),
        (
            "components",
            AccessLog::from_tasks((0..n).map(|t| {
                vec![
                    Access::new(0, t, true),
                    Access::new(0, mix(t) % n, false),
                    Access::new(0, mix(t + 1) % n, false),
                ]
            })),
            vec![TableInfo {
                key_space: n as usize,
                relaxed: false,
            }],
        ),
        (
            "packing",
            AccessLog::from_tasks((0..n).map(|t| {
                (0..6)
                    .map(|r| Access::new(0, mix(t * 6 + r) % 200, true))
                    .collect::<Vec<_>>()
            })),
            vec![TableInfo {
                key_space: 200,
                relaxed: false,
            }],
        ),
    ];
    let config = PlanConfig {
        threads: 2,
        blocks: None,
        seed: 5,
        first_index: 0,
    };
    for (shape, log, tables) in shapes {
        let made = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool");
            pool.install(|| plan(log.clone(), &tables, &config))
        };
        let one = made(1);
        assert_eq!(one.stats.strategy, shape);
        for threads in [2, 3] {
            let other = made(threads);
            assert_eq!(
                groups_of(&one),
                groups_of(&other),
                "{shape}, {threads} threads"
            );
            assert_eq!(one.tags, other.tags, "{shape}, {threads} threads");
            assert_eq!(one.stats, other.stats, "{shape}, {threads} threads");
            assert_eq!(one.indexed_by_task, other.indexed_by_task);
        }
    }
}
