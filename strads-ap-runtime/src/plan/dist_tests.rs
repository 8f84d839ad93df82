//! [`DistPlan`] on small cases worked out by hand.

use super::*;
use crate::plan::{Batch, Cell, Group, PlanStats, Rotation};
use crate::recon::{Access, AccessLog};

/// A plan of `schedule` over tasks given as (slot, key, write) accesses.
fn plan_of(modes: Vec<SlotMode>, schedule: Schedule, tasks: &[&[(usize, u64, bool)]]) -> Plan {
    let log = AccessLog::from_tasks(tasks.iter().map(|t| {
        t.iter()
            .map(|&(s, k, w)| Access::new(s, k, w))
            .collect::<Vec<_>>()
    }));
    Plan {
        tags: vec![Vec::new(); modes.len()],
        modes,
        schedule,
        stats: PlanStats {
            strategy: "test",
            tasks: tasks.len(),
            ..PlanStats::default()
        },
        log,
        indexed_by_task: Vec::new(),
    }
}

/// Per peer, per slot: no keys.
fn nothing(world: usize, slots: usize) -> Vec<Transfer> {
    vec![vec![Keys::default(); slots]; world]
}

/// Per peer, per slot: `keys` at (`peer`, `slot`) only.
fn only(world: usize, slots: usize, peer: usize, slot: usize, keys: &[u64]) -> Vec<Transfer> {
    let mut t = nothing(world, slots);
    for &k in keys {
        t[peer][slot].push(k);
    }
    t
}

/// One batch of two one-task groups: task 0 in group 0, task 1 in group 1.
fn two_groups() -> Schedule {
    Schedule::Components(vec![Batch {
        groups: vec![
            Group {
                id: 0,
                tasks: vec![0],
            },
            Group {
                id: 1,
                tasks: vec![1],
            },
        ],
        ranks: Vec::new(),
    }])
}

/// Two groups of one batch, each writing a key the other rank owns (table of 4 keys:
/// rank 0 owns 0..2, rank 1 owns 2..4): each rank fetches its key before the step and
/// sends it home after.
fn crossed_components() -> Plan {
    let schedule = two_groups();
    plan_of(
        vec![SlotMode::Checked],
        schedule,
        &[&[(0, 3, true)], &[(0, 0, true)]],
    )
}

#[test]
fn components_fetch_what_a_step_writes_and_send_it_home() {
    let plan = crossed_components();
    let d0 = DistPlan::new(&plan, &[4], &[None], 2, 0, Transfers::Written);
    let d1 = DistPlan::new(&plan, &[4], &[None], 2, 1, Transfers::Written);
    // Longest processing time first, ties to the lower rank: group 0 on rank 0.
    assert_eq!(
        d0.steps,
        vec![Work::Groups {
            batch: 0,
            groups: vec![0]
        }]
    );
    assert_eq!(
        d1.steps,
        vec![Work::Groups {
            batch: 0,
            groups: vec![1]
        }]
    );
    assert_eq!(
        d0.exchanges.len(),
        2,
        "one exchange per step and a final one"
    );
    // Before the step: rank 0 gets key 3 from rank 1 and gives it key 0.
    assert_eq!(d0.exchanges[0].recv, only(2, 1, 1, 0, &[3]));
    assert_eq!(d0.exchanges[0].send, only(2, 1, 1, 0, &[0]));
    assert_eq!(d1.exchanges[0].recv, only(2, 1, 0, 0, &[0]));
    assert_eq!(d1.exchanges[0].send, only(2, 1, 0, 0, &[3]));
    // After it: both written keys go home.
    assert_eq!(d0.exchanges[1].send, only(2, 1, 1, 0, &[3]));
    assert_eq!(d0.exchanges[1].recv, only(2, 1, 1, 0, &[0]));
    assert_eq!(d1.exchanges[1].send, only(2, 1, 0, 0, &[0]));
    assert_eq!(d1.exchanges[1].recv, only(2, 1, 0, 0, &[3]));
    assert_eq!(d0.fingerprint, d1.fingerprint, "ranks agree on the cutting");
    assert_eq!(d0.received, 1);
}

#[test]
fn one_rank_moves_nothing() {
    let plan = crossed_components();
    let d = DistPlan::new(&plan, &[4], &[None], 1, 0, Transfers::Written);
    assert_eq!(
        d.steps,
        vec![Work::Groups {
            batch: 0,
            groups: vec![0, 1]
        }]
    );
    assert!(d.exchanges.iter().all(|e| e.send == nothing(1, 1)));
    assert!(d.exchanges.iter().all(|e| e.recv == nothing(1, 1)));
}

#[test]
fn map_owners_replace_the_ranges() {
    // Keys 0 and 3 both owned by rank 0: rank 1's task fetches key 0 from it, rank 0's
    // task needs nothing.
    let plan = crossed_components();
    let owners = vec![Some(vec![0u16, 1, 1, 0])];
    let d1 = DistPlan::new(&plan, &[4], &owners, 2, 1, Transfers::Written);
    assert_eq!(d1.exchanges[0].recv, only(2, 1, 0, 0, &[0]));
    assert_eq!(d1.exchanges[0].send, nothing(2, 1));
    assert_eq!(d1.exchanges[1].send, only(2, 1, 0, 0, &[0]));
}

/// A 2×2 rotation of a row table of 4 keys (rank 0 owns 0..2) and a column table of 2
/// (rank 0 owns key 0): cell (r, c)'s task writes row key `2r + c` and column key `c`.
fn rotation() -> Plan {
    let cell = |row: u32, col: u32, task: u32| Cell {
        row,
        col,
        tasks: vec![task],
        hottest: 1,
    };
    let schedule = Schedule::Rotation(Box::new(Rotation {
        row_slot: 0,
        col_slot: Some(1),
        row_members: Vec::new(),
        col_members: Vec::new(),
        row_bounds: Vec::new(),
        col_bounds: Vec::new(),
        row_windowed: Vec::new(),
        col_windowed: Vec::new(),
        window_only: Vec::new(),
        rows: 2,
        cols: 2,
        cells: vec![cell(0, 0, 0), cell(0, 1, 1), cell(1, 0, 2), cell(1, 1, 3)],
    }));
    let task = |r: u64, c: u64| [(0, 2 * r + c, true), (1, c, true)];
    plan_of(
        vec![SlotMode::Checked, SlotMode::Checked],
        schedule,
        &[&task(0, 0), &task(0, 1), &task(1, 0), &task(1, 1)],
    )
}

#[test]
fn rotation_keeps_the_larger_table_and_moves_the_other_around_the_ring() {
    let plan = rotation();
    let lens = [4, 2];
    let owners = [None, None];
    let d0 = DistPlan::new(&plan, &lens, &owners, 2, 0, Transfers::Written);
    let d1 = DistPlan::new(&plan, &lens, &owners, 2, 1, Transfers::Written);
    // Rank p runs row block p; in step s, column block (p + s) mod 2.
    assert_eq!(d0.steps, vec![Work::Cells(vec![0]), Work::Cells(vec![1])]);
    assert_eq!(d1.steps, vec![Work::Cells(vec![3]), Work::Cells(vec![2])]);
    // Step 0 touches only what each rank owns.
    assert_eq!(d0.exchanges[0].recv, nothing(2, 2));
    assert_eq!(d0.exchanges[0].send, nothing(2, 2));
    // Step 1 swaps the column keys; the row table never moves.
    assert_eq!(d0.exchanges[1].recv, only(2, 2, 1, 1, &[1]));
    assert_eq!(d0.exchanges[1].send, only(2, 2, 1, 1, &[0]));
    // Then they go home.
    assert_eq!(d0.exchanges[2].send, only(2, 2, 1, 1, &[1]));
    assert_eq!(d0.exchanges[2].recv, only(2, 2, 1, 1, &[0]));
    assert_eq!(d1.exchanges[2].send, only(2, 2, 0, 1, &[0]));
    assert_eq!(d0.fingerprint, d1.fingerprint);
    let d3 = DistPlan::new(&plan, &lens, &owners, 1, 0, Transfers::Written);
    assert_ne!(
        d0.fingerprint, d3.fingerprint,
        "another world, another cutting"
    );
}

#[test]
fn read_only_tables_are_fetched_once_and_never_sent_home() {
    // Slot 1 is read-only; both tasks (one per rank) read key 1 of it (owned by rank 0).
    let schedule = two_groups();
    let plan = plan_of(
        vec![SlotMode::Checked, SlotMode::ReadOnly],
        schedule,
        &[
            &[(0, 0, true), (1, 1, false)],
            &[(0, 3, true), (1, 1, false)],
        ],
    );
    let (lens, owners) = ([4, 4], [None, None]);
    let written = DistPlan::new(&plan, &lens, &owners, 2, 1, Transfers::Written);
    // The written table's keys stay home; the read-only table is not worked out yet.
    assert!(written.exchanges.iter().all(|e| e.recv == nothing(2, 2)));
    assert!(!written.read_only);
    let read = DistPlan::new(&plan, &lens, &owners, 2, 1, Transfers::ReadOnly);
    assert_eq!(read.exchanges[0].recv, only(2, 2, 0, 1, &[1]));
    assert_eq!(
        read.exchanges[1].send,
        nothing(2, 2),
        "read-only keys stay put"
    );
    let mut both = written.clone();
    both.add_read_only(read);
    assert!(both.read_only);
    assert_eq!(both.exchanges[0].recv, only(2, 2, 0, 1, &[1]));
    assert_eq!(both.steps, written.steps);
}

#[test]
fn work_all_lists_every_group_of_a_world_of_one() {
    let plan = rotation();
    assert_eq!(
        Work::all(&plan.schedule),
        vec![Work::Cells(vec![0, 1, 2, 3])]
    );
    let plan = crossed_components();
    assert_eq!(
        Work::all(&plan.schedule),
        vec![Work::Groups {
            batch: 0,
            groups: vec![0, 1]
        }]
    );
}

/// The tasks of a read-only plan, each reading its own element of a small table (slot 0,
/// `set[t]`) and a row of a large one (slot 1, `w[user(t)]`), on two ranks: which rank
/// runs each task, after `place_by_owner` with the tables' `bytes`.
fn placed(users: &[u64], bytes: [u64; 2], w_len: usize) -> Vec<usize> {
    let tasks: Vec<Vec<(usize, u64, bool)>> = users
        .iter()
        .enumerate()
        .map(|(t, &u)| vec![(0, t as u64, false), (1, u, false)])
        .collect();
    let refs: Vec<&[(usize, u64, bool)]> = tasks.iter().map(Vec::as_slice).collect();
    let groups = Schedule::Components(vec![Batch {
        groups: vec![Group {
            id: 0,
            tasks: (0..users.len() as u32).collect(),
        }],
        ranks: Vec::new(),
    }]);
    let mut plan = plan_of(vec![SlotMode::ReadOnly; 2], groups, &refs);
    let lens = [users.len(), w_len];
    assert!(place_by_owner(&mut plan, &lens, &[None, None], &bytes, 2));
    let mut rank_of = vec![usize::MAX; users.len()];
    for me in 0..2 {
        let d = DistPlan::new(&plan, &lens, &[None, None], 2, me, Transfers::ReadOnly);
        assert_eq!(d.steps.len(), 1, "one batch, one step");
        for_tasks(&plan, &d.steps[0], |t| {
            assert_eq!(rank_of[t as usize], usize::MAX, "task {t} placed twice");
            rank_of[t as usize] = me;
        });
    }
    assert!(rank_of.iter().all(|&r| r < 2), "every task placed");
    rank_of
}

#[test]
fn read_only_tasks_run_where_the_rows_they_read_live() {
    // Eight tasks; users alternate between the halves of a 4-row table (rank 0 owns rows
    // 0 and 1). The rows weigh more than the set's elements: each task goes to its row.
    let users = [0, 3, 1, 2, 0, 3, 1, 2];
    let rank_of = placed(&users, [8 * 4, 4 * 400], 4);
    let by_row: Vec<usize> = users.iter().map(|&u| usize::from(u >= 2)).collect();
    assert_eq!(rank_of, by_row);
    // The set's elements weigh more: tasks stay with their own element (first half of the
    // loop on rank 0), as by load.
    let rank_of = placed(&users, [8 * 4000, 4 * 4], 4);
    assert_eq!(rank_of, vec![0, 0, 0, 0, 1, 1, 1, 1]);
}

#[test]
fn placement_by_owner_keeps_the_ranks_balanced() {
    // Every task reads a row rank 0 owns: rank 0 takes its share and 1/16 more, rank 1
    // the rest, in loop order.
    let users = vec![0u64; 64];
    let rank_of = placed(&users, [64, 1 << 20], 4);
    let on_zero = rank_of.iter().filter(|&&r| r == 0).count();
    assert_eq!(on_zero, 32 + 64 / 32);
    assert!(rank_of[..on_zero].iter().all(|&r| r == 0));
}

/// A components plan of `batches` batches of `groups` groups of 3 tasks each; a task
/// writes two keys of slot 0 (the keys of a batch's groups never meet) and reads three
/// keys of slot 1 anywhere.
fn scattered(batches: usize, groups: usize, len: u64) -> Plan {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = |below: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) % below
    };
    let mut tasks = Vec::new();
    let mut schedule = Vec::new();
    for b in 0..batches {
        let mut members = Vec::new();
        for g in 0..groups {
            let mut group = Vec::new();
            for _ in 0..3 {
                let mut set = Vec::new();
                for _ in 0..2 {
                    set.push((
                        0,
                        draw(len / groups as u64) * groups as u64 + g as u64,
                        true,
                    ));
                }
                for _ in 0..3 {
                    set.push((1, draw(len), false));
                }
                set.sort_unstable();
                set.dedup_by_key(|a| (a.0, a.1));
                group.push(tasks.len() as u32);
                tasks.push(set);
            }
            members.push(Group {
                id: (b * groups + g) as u32,
                tasks: group,
            });
        }
        schedule.push(Batch {
            groups: members,
            ranks: Vec::new(),
        });
    }
    let tasks: Vec<&[(usize, u64, bool)]> = tasks.iter().map(Vec::as_slice).collect();
    plan_of(
        vec![SlotMode::Checked, SlotMode::ReadOnly],
        Schedule::Components(schedule),
        &tasks,
    )
}

#[test]
fn holder_sets_of_every_width_move_the_same_elements() {
    let plan = scattered(6, 70, 4096);
    let lens = [4096, 4096];
    let owners = [None, None];
    for world in [2, 3, 8, 9, 16, 17, 32, 33, 64] {
        let per_rank = cut_steps(&plan, &lens, world, &mut DefaultHasher::new());
        for which in [Transfers::Written, Transfers::ReadOnly] {
            for me in [0, world / 2, world - 1] {
                let cut = Cut {
                    plan: &plan,
                    lens: &lens,
                    owners: &owners,
                    world,
                    me,
                    which,
                };
                let wide = simulate::<u64>(&cut, &per_rank);
                assert!(wide.1 > 0, "world {world}: something moves");
                let narrow = [
                    (world <= 8).then(|| simulate::<u8>(&cut, &per_rank)),
                    (world <= 16).then(|| simulate::<u16>(&cut, &per_rank)),
                    (world <= 32).then(|| simulate::<u32>(&cut, &per_rank)),
                ];
                for got in narrow.into_iter().flatten() {
                    assert_eq!(got, wide, "world {world}, rank {me}, {which:?}");
                }
            }
        }
    }
}

#[test]
fn key_lists_stay_narrow_until_a_key_needs_more() {
    let mut keys = Keys::default();
    keys.push(3);
    keys.push(u64::from(u32::MAX));
    assert!(matches!(keys, Keys::Narrow(_)));
    keys.push(1 << 40);
    assert_eq!(keys, Keys::Wide(vec![3, u64::from(u32::MAX), 1 << 40]));
    let mut seen = Vec::new();
    let all = keys.as_slice().try_for_each(|k| {
        seen.push(k);
        Ok::<(), ()>(())
    });
    assert_eq!(all, Ok(()));
    assert_eq!(seen, [3, u64::from(u32::MAX), 1 << 40]);
    assert_eq!(keys.len(), 3);
}
