//! `async_for!` across ranks: how a plan's groups are spread over ranks in steps, which
//! elements move between ranks before each step, and the exchange that moves them.
//!
//! Every rank holds a full-length copy of each captured table for the duration of the
//! loop (its own range current, the rest filled on demand). The plan is made identically
//! on every rank from the joined reconnaissance logs; [`DistPlan::new`] then cuts it into
//! steps of groups that may run at once on different ranks:
//!
//! * a **rotation** keeps the blocks of the larger rotated table on their rank (rank `p`
//!   takes the `p`-th contiguous share of them, which mostly matches the table's range
//!   partition) and moves the other table's blocks around the ring: in step `s`, rank `p`
//!   runs the cells of its share against the `(p + s) mod R`-th share of the moving blocks;
//! * a **components** plan runs batch after batch, the groups of each batch placed on ranks
//!   by longest-processing-time-first.
//!
//! Before each step every rank receives, from the rank holding the latest value, each
//! element its tasks of that step read or write and it does not hold yet; after the last
//! step every element written elsewhere goes back to its owner. Which element moves when
//! is worked out once per plan by simulating who holds the latest value of each element,
//! so the exchange itself is only values, in an order both sides know.
//!
//! This module is pure (sans-IO): the engine's `Exchanger` moves the values.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::{Plan, Schedule, SlotMode};
use crate::store::RangePartition;

/// Ranks an `async_for!` can span: element holders are tracked in a 64-bit set.
pub(crate) const MAX_RANKS: usize = 64;

/// What one rank runs in one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Rotation cells, by index into the plan's cells.
    Cells(Vec<usize>),
    /// Groups of one components batch.
    Groups {
        /// The batch.
        batch: usize,
        /// Its groups this rank runs.
        groups: Vec<usize>,
    },
}

impl Work {
    /// The whole plan as steps of a world of one.
    pub fn all(schedule: &Schedule) -> Vec<Work> {
        match schedule {
            Schedule::Rotation(rot) => vec![Work::Cells((0..rot.cells.len()).collect())],
            Schedule::Components(batches) => batches
                .iter()
                .enumerate()
                .map(|(batch, b)| Work::Groups {
                    batch,
                    groups: (0..b.groups.len()).collect(),
                })
                .collect(),
        }
    }
}

/// The elements one rank sends to (or receives from) one peer at one exchange: per slot,
/// keys in an order both sides know.
pub(crate) type Transfer = Vec<Vec<u64>>;

/// One exchange of this rank: per peer, what it sends and what it receives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Exchange {
    /// Per peer: what this rank sends it.
    pub send: Vec<Transfer>,
    /// Per peer: what this rank receives from it.
    pub recv: Vec<Transfer>,
}

/// Which tables [`DistPlan::new`] works out the transfers of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transfers {
    /// The tables the plan's tasks write: every call moves them.
    Written,
    /// The tables they only read: needed only by a call that finds such a table stale on
    /// some rank (changed since the rank last held all of it). A planning call gathers
    /// every table whole, so these are worked out later, if ever.
    ReadOnly,
}

/// A plan cut into steps for the ranks of a job, from this rank's point of view.
#[derive(Clone, Debug)]
pub(crate) struct DistPlan {
    /// This rank's work per step (possibly empty).
    pub steps: Vec<Work>,
    /// One exchange before each step, then a final one.
    pub exchanges: Vec<Exchange>,
    /// Identifies the plan and its cutting; equal on every rank.
    pub fingerprint: u64,
    /// Elements this rank receives per exchange on average (for progress output).
    pub received: usize,
    /// Whether the exchanges include the transfers of read-only tables.
    pub read_only: bool,
}

impl DistPlan {
    /// Cuts `plan` for `world` ranks, as rank `me`, with the transfers of the tables
    /// `which` selects; `lens` are the tables' lengths and `owners` their keys' owners
    /// where not the balanced ranges (maps).
    pub fn new(
        plan: &Plan,
        lens: &[usize],
        owners: &[Option<Vec<u16>>],
        world: usize,
        me: usize,
        which: Transfers,
    ) -> DistPlan {
        assert!((1..=MAX_RANKS).contains(&world));
        let slots = lens.len();
        // Per step, per rank: the task lists it runs (as slices of the plan).
        let mut per_rank: Vec<Vec<Work>> = vec![Vec::new(); world];
        let mut hasher = DefaultHasher::new();
        plan.stats.hash(&mut hasher);
        world.hash(&mut hasher);
        match &plan.schedule {
            Schedule::Rotation(rot) => {
                let share = |b: u32, blocks: usize| b as usize * world / blocks.max(1);
                let one_dim = rot.col_slot.is_none() || rot.cols == 1;
                let steps = if one_dim { 1 } else { world };
                for w in &mut per_rank {
                    *w = vec![Work::Cells(Vec::new()); steps];
                }
                // The larger rotated table stays; the other moves around the ring.
                let col_stays = match rot.col_slot {
                    Some(c) if !one_dim => lens[c] > lens[rot.row_slot],
                    _ => false,
                };
                for (i, cell) in rot.cells.iter().enumerate() {
                    let (stay, stay_blocks, moving, moving_blocks) = if col_stays {
                        (cell.col, rot.cols, cell.row, rot.rows)
                    } else {
                        (cell.row, rot.rows, cell.col, rot.cols)
                    };
                    let rank = share(stay, stay_blocks);
                    let step = if one_dim {
                        0
                    } else {
                        (share(moving, moving_blocks) + world - rank) % world
                    };
                    if let Work::Cells(cells) = &mut per_rank[rank][step] {
                        cells.push(i);
                    }
                    (i, rank, step).hash(&mut hasher);
                }
            }
            Schedule::Components(batches) => {
                for w in &mut per_rank {
                    *w = Vec::with_capacity(batches.len());
                }
                for (b, batch) in batches.iter().enumerate() {
                    let mut load = vec![0usize; world];
                    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); world];
                    // Groups come heaviest first: longest processing time first.
                    for (g, group) in batch.groups.iter().enumerate() {
                        let rank = (0..world).min_by_key(|&r| (load[r], r)).expect("ranks");
                        load[rank] += group.tasks.len();
                        groups[rank].push(g);
                        (b, g, rank).hash(&mut hasher);
                    }
                    for (r, groups) in groups.into_iter().enumerate() {
                        per_rank[r].push(Work::Groups { batch: b, groups });
                    }
                }
            }
        }
        let steps = per_rank[0].len();

        // Who holds the latest value of each element, step by step.
        // (Read-only elements never change holder and written ones never meet them, so
        // the two kinds are simulated apart.)
        let tracked: Vec<bool> = (0..slots)
            .map(|s| {
                lens[s] > 0
                    && match which {
                        Transfers::Written => plan.modes[s] == SlotMode::Checked,
                        Transfers::ReadOnly => plan.modes[s] == SlotMode::ReadOnly,
                    }
            })
            .collect();
        // Each element's owner, looked up rather than computed (a division) per access.
        let owner_of: Vec<Vec<u8>> = (0..slots)
            .map(|s| match (&owners[s], tracked[s]) {
                (_, false) => Vec::new(),
                (Some(o), true) => o.iter().map(|&r| r as u8).collect(),
                (None, true) => {
                    let part = RangePartition::new(lens[s], world);
                    let mut of = vec![0u8; lens[s]];
                    for r in 0..world {
                        of[part.range(r)].fill(r as u8);
                    }
                    of
                }
            })
            .collect();
        let owner = |slot: usize, key: usize| owner_of[slot][key] as usize;
        let mut holders: Vec<Vec<u64>> = owner_of
            .iter()
            .map(|of| of.iter().map(|&r| 1u64 << r).collect())
            .collect();
        let empty = || Exchange {
            send: vec![vec![Vec::new(); slots]; world],
            recv: vec![vec![Vec::new(); slots]; world],
        };
        let mut exchanges: Vec<Exchange> = (0..=steps).map(|_| empty()).collect();
        let mut received = 0usize;
        // Ranks that get an element in the current step's exchange: they cannot be its
        // source in that same exchange.
        let mut arriving: Vec<Vec<u64>> = holders.iter().map(|h| vec![0; h.len()]).collect();
        let mut arrived: Vec<(usize, usize)> = Vec::new();
        // Within a step the order of tasks does not matter (an element one rank writes in
        // a step is touched by no other rank in it, and read-only elements never change
        // holder), so the step's tasks are visited in task order: the log, and the
        // holders of tables indexed like the loop, are then read sequentially rather than
        // at random (which made this simulation cost more than a serial epoch).
        let n_tasks = plan.log.tasks();
        let mut rank_of: Vec<u8> = Vec::new();
        let mut listed: Vec<u64> = Vec::new();
        for (step, exchange) in exchanges.iter_mut().enumerate().take(steps) {
            let mut count = 0usize;
            for works in &per_rank {
                for_tasks(plan, &works[step], |_| count += 1);
            }
            let mut visit = |t: usize, q: usize| {
                let bit = 1u64 << q;
                for a in plan.log.task(t) {
                    let (slot, key) = (a.slot(), a.key() as usize);
                    if !tracked[slot] || key >= lens[slot] {
                        continue;
                    }
                    let held = &mut holders[slot][key];
                    if *held & bit == 0 {
                        let sources = *held & !arriving[slot][key];
                        let home = owner(slot, key);
                        let src = if sources >> home & 1 == 1 {
                            home
                        } else {
                            sources.trailing_zeros() as usize
                        };
                        debug_assert!(src < world, "an element with no holder");
                        if src == me {
                            exchange.send[q][slot].push(key as u64);
                        }
                        if q == me {
                            exchange.recv[src][slot].push(key as u64);
                            received += 1;
                        }
                        *held |= bit;
                        if arriving[slot][key] == 0 {
                            arrived.push((slot, key));
                        }
                        arriving[slot][key] |= bit;
                    }
                    if a.write() {
                        *held = bit;
                    }
                }
            };
            if count.saturating_mul(16) >= n_tasks {
                // A large step: mark its tasks, then scan all tasks in order.
                rank_of.resize(n_tasks, u8::MAX);
                for (q, works) in per_rank.iter().enumerate() {
                    for_tasks(plan, &works[step], |t| rank_of[t as usize] = q as u8);
                }
                for (t, q) in rank_of.iter_mut().enumerate() {
                    if *q != u8::MAX {
                        visit(t, *q as usize);
                        *q = u8::MAX;
                    }
                }
            } else {
                // A small one: sort its (task, rank) pairs.
                listed.clear();
                for (q, works) in per_rank.iter().enumerate() {
                    for_tasks(plan, &works[step], |t| {
                        listed.push(u64::from(t) << 8 | q as u64)
                    });
                }
                listed.sort_unstable();
                for &e in &listed {
                    visit((e >> 8) as usize, (e & 0xff) as usize);
                }
            }
            for (slot, key) in arrived.drain(..) {
                arriving[slot][key] = 0;
            }
        }
        // Written elements go home.
        let last = &mut exchanges[steps];
        for slot in (0..slots).filter(|&s| tracked[s] && plan.modes[s] == SlotMode::Checked) {
            for (key, &held) in holders[slot].iter().enumerate() {
                let home = owner(slot, key);
                if held >> home & 1 == 0 {
                    let src = held.trailing_zeros() as usize;
                    if src == me {
                        last.send[home][slot].push(key as u64);
                    }
                    if home == me {
                        last.recv[src][slot].push(key as u64);
                    }
                }
            }
        }
        DistPlan {
            steps: std::mem::take(&mut per_rank[me]),
            received: received / steps.max(1),
            exchanges,
            fingerprint: hasher.finish(),
            read_only: which == Transfers::ReadOnly,
        }
    }

    /// Adds the read-only tables' transfers, cut from the same plan
    /// ([`Transfers::ReadOnly`]).
    pub fn add_read_only(&mut self, other: DistPlan) {
        assert_eq!(
            (self.fingerprint, other.read_only),
            (other.fingerprint, true),
            "strads-ap internal error: read-only transfers of another plan"
        );
        for (mine, theirs) in self.exchanges.iter_mut().zip(other.exchanges) {
            for (lists, more) in [(&mut mine.send, theirs.send), (&mut mine.recv, theirs.recv)] {
                for (peer, slots) in more.into_iter().enumerate() {
                    for (slot, keys) in slots.into_iter().enumerate() {
                        if !keys.is_empty() {
                            lists[peer][slot] = keys;
                        }
                    }
                }
            }
        }
        self.received += other.received;
        self.read_only = true;
    }
}

/// Calls `f` for every task (offset) of `work`, in order.
fn for_tasks(plan: &Plan, work: &Work, mut f: impl FnMut(u32)) {
    match (&plan.schedule, work) {
        (Schedule::Rotation(rot), Work::Cells(cells)) => {
            for &c in cells {
                rot.cells[c].tasks.iter().for_each(|&t| f(t));
            }
        }
        (Schedule::Components(batches), Work::Groups { batch, groups }) => {
            for &g in groups {
                batches[*batch].groups[g].tasks.iter().for_each(|&t| f(t));
            }
        }
        _ => unreachable!("work does not match the schedule"),
    }
}

#[cfg(test)]
#[path = "dist_tests.rs"]
mod tests;
