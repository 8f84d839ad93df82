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
//!   by longest-processing-time-first; a plan free of conflicts (no checked table) places
//!   its tasks where what they read lives instead ([`place_by_owner`]).
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
use std::ops::{BitAnd, BitOrAssign, Not};

use super::{Plan, Rotation, Schedule, SlotMode};
use crate::store::RangePartition;
use crate::util::Keys;

/// Ranks an `async_for!` can span: element holders are tracked in a 64-bit set.
pub(crate) const MAX_RANKS: usize = 64;

/// A set of ranks, one bit each. The simulation keeps two per key of every table it
/// tracks, so it uses the narrowest word the world fits in: on 4 ranks, model-heavy
/// SGDMF's factor table (1M keys) takes 2 MB of sets instead of 16.
trait RankSet: Copy + Eq + BitAnd<Output = Self> + BitOrAssign + Not<Output = Self> {
    const EMPTY: Self;
    /// The set of rank `r` alone.
    fn of(r: usize) -> Self;
    /// Whether rank `r` is in the set.
    fn has(self, r: usize) -> bool;
    /// The lowest rank in the set (the word's width for an empty set).
    fn lowest(self) -> usize;
}

macro_rules! rank_set {
    ($($word:ty),*) => {$(
        impl RankSet for $word {
            const EMPTY: Self = 0;
            #[inline]
            fn of(r: usize) -> Self {
                1 << r
            }
            #[inline]
            fn has(self, r: usize) -> bool {
                self >> r & 1 == 1
            }
            #[inline]
            fn lowest(self) -> usize {
                self.trailing_zeros() as usize
            }
        }
    )*};
}
rank_set!(u8, u16, u32, u64);

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
pub(crate) type Transfer = Vec<Keys>;

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
    /// The tables they only read: moved only by a call that finds such a table stale on
    /// some rank (changed since the rank last held what the plan reads of it). Worked out
    /// with the written ones by the planning call, while the log is at hand (the kept
    /// plan drops it).
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
        let mut hasher = DefaultHasher::new();
        plan.stats.hash(&mut hasher);
        world.hash(&mut hasher);
        // Per rank, per step: the task lists it runs (as slices of the plan).
        let mut per_rank = cut_steps(plan, lens, world, &mut hasher);
        let steps = per_rank[0].len();
        let cut = Cut {
            plan,
            lens,
            owners,
            world,
            me,
            which,
        };
        let (exchanges, received) = match world {
            0..=8 => simulate::<u8>(&cut, &per_rank),
            9..=16 => simulate::<u16>(&cut, &per_rank),
            17..=32 => simulate::<u32>(&cut, &per_rank),
            _ => simulate::<u64>(&cut, &per_rank),
        };
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

/// Which work each rank runs in each step (see the module docs), hashing the cutting into
/// `hasher`.
/// Whether a rotation has one dimension only (no column table, or one column block): its
/// row blocks are spread over the ranks and nothing moves.
fn one_dim(rot: &Rotation) -> bool {
    rot.col_slot.is_none() || rot.cols == 1
}

/// Whether a rotation's column blocks stay on their ranks across ranks (and its row
/// blocks move): the larger rotated table stays, the other moves around the ring.
fn col_stays(rot: &Rotation, lens: &[usize]) -> bool {
    match rot.col_slot {
        Some(c) if !one_dim(rot) => lens[c] > lens[rot.row_slot],
        _ => false,
    }
}

/// The slots of a rotation whose blocks travel whole across ranks: those windowed by a
/// dimension the steps split over the ranks (rows, and columns too unless the rotation
/// has one dimension). A rank that runs a cell first fetches every key of the cell's
/// blocks of them and then holds the blocks as written (see `Simulation::step`), so within
/// a cell's window every key is current and any write goes on, and home, with its block:
/// views may skip the tags there, as in a world of one.
pub(crate) fn whole_block_slots(rot: &Rotation) -> Vec<usize> {
    let mut slots = rot.row_windowed.clone();
    if !one_dim(rot) {
        slots.extend(&rot.col_windowed);
    }
    slots
}

fn cut_steps(
    plan: &Plan,
    lens: &[usize],
    world: usize,
    hasher: &mut DefaultHasher,
) -> Vec<Vec<Work>> {
    let mut per_rank: Vec<Vec<Work>> = vec![Vec::new(); world];
    match &plan.schedule {
        Schedule::Rotation(rot) => {
            let share = |b: u32, blocks: usize| b as usize * world / blocks.max(1);
            let one_dim = one_dim(rot);
            let steps = if one_dim { 1 } else { world };
            for w in &mut per_rank {
                *w = vec![Work::Cells(Vec::new()); steps];
            }
            let col_stays = col_stays(rot, lens);
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
                (i, rank, step).hash(hasher);
            }
        }
        Schedule::Components(batches) => {
            for w in &mut per_rank {
                *w = Vec::with_capacity(batches.len());
            }
            for (b, batch) in batches.iter().enumerate() {
                let mut load = vec![0usize; world];
                let mut groups: Vec<Vec<usize>> = vec![Vec::new(); world];
                // Groups come heaviest first: longest processing time first, unless the
                // plan placed them by what they read.
                for (g, group) in batch.groups.iter().enumerate() {
                    let rank = match batch.ranks.get(g) {
                        Some(&r) => usize::from(r),
                        None => (0..world).min_by_key(|&r| (load[r], r)).expect("ranks"),
                    };
                    load[rank] += group.tasks.len();
                    groups[rank].push(g);
                    (b, g, rank).hash(hasher);
                }
                for (r, groups) in groups.into_iter().enumerate() {
                    per_rank[r].push(Work::Groups { batch: b, groups });
                }
            }
        }
    }
    per_rank
}

/// Places the tasks of a plan free of conflicts on the ranks that own what they read
/// ("owner computes"), across `world` ranks; returns whether it did.
///
/// It does so for a plan of one batch and no checked table (a loop that only reads, or
/// also reduces into variables or writes relaxed tables): its tasks may run anywhere, and
/// by load alone an evaluation over ratings would fetch nearly every user's row of a
/// large model to another rank. Each element a task reads counts for its owner, weighed by
/// its table's bytes per element (`bytes`: the whole table's estimate) shared among the
/// tasks that read it (an element every task reads goes to every rank wherever they run).
/// A task goes to the rank with the most weight; ties, and tasks reading nothing weighed,
/// to the rank whose share of the loop holds it. No rank takes more than its share and
/// 1/16; the tasks past that go to the least loaded ranks. Each rank's tasks, in loop
/// order, are cut into as many consecutive runs (its groups) as the plan had groups per
/// rank. Deterministic: every rank places alike from the same log.
pub(crate) fn place_by_owner(
    plan: &mut Plan,
    lens: &[usize],
    owners: &[Option<Vec<u16>>],
    bytes: &[u64],
    world: usize,
) -> bool {
    let Schedule::Components(batches) = &plan.schedule else {
        return false;
    };
    if world < 2 || batches.len() != 1 || plan.modes.contains(&SlotMode::Checked) {
        return false;
    }
    let per_rank = batches[0].groups.len().div_ceil(world).max(1);
    let rank_of = preferred_ranks(plan, lens, owners, bytes, world);
    let n = rank_of.len();
    let cap = n.div_ceil(world) + n / (16 * world);
    let mut tasks: Vec<Vec<u32>> = vec![Vec::new(); world];
    let mut over = Vec::new();
    for (t, &r) in rank_of.iter().enumerate() {
        match tasks[usize::from(r)].len() < cap {
            true => tasks[usize::from(r)].push(t as u32),
            false => over.push(t as u32),
        }
    }
    for t in over {
        let r = (0..world)
            .min_by_key(|&r| (tasks[r].len(), r))
            .expect("ranks");
        tasks[r].push(t);
    }
    let mut groups: Vec<(Vec<u32>, u16)> = Vec::new();
    for (r, list) in tasks.iter().enumerate() {
        if !list.is_empty() {
            let runs = super::consecutive_runs(list, per_rank.min(list.len()));
            groups.extend(runs.into_iter().map(|g| (g, r as u16)));
        }
    }
    // Heaviest first, as every components batch (stable: ties stay in rank order).
    groups.sort_by_key(|(g, _)| std::cmp::Reverse(g.len()));
    plan.stats.groups = groups.len();
    plan.stats.largest_group = groups.first().map_or(0, |(g, _)| g.len());
    let (groups, ranks): (Vec<super::Group>, Vec<u16>) = groups
        .into_iter()
        .enumerate()
        .map(|(id, (tasks, r))| {
            let id = id as u32;
            (super::Group { id, tasks }, r)
        })
        .unzip();
    plan.schedule = Schedule::Components(vec![super::Batch { groups, ranks }]);
    true
}

/// Per task of `plan`: the rank holding the most weight of what it reads (see
/// [`place_by_owner`]).
fn preferred_ranks(
    plan: &Plan,
    lens: &[usize],
    owners: &[Option<Vec<u16>>],
    bytes: &[u64],
    world: usize,
) -> Vec<u16> {
    let n = plan.log.tasks();
    let weighed: Vec<bool> = (0..lens.len())
        .map(|s| plan.modes[s] == SlotMode::ReadOnly && lens[s] > 0 && bytes[s] > 0)
        .collect();
    // Per slot, per key: the tasks reading it.
    let mut readers: Vec<Vec<u32>> = (0..lens.len())
        .map(|s| vec![0; if weighed[s] { lens[s] } else { 0 }])
        .collect();
    for t in 0..n {
        for a in plan.log.task(t) {
            if let Some(r) = readers[a.slot()].get_mut(a.key() as usize) {
                *r = r.saturating_add(1);
            }
        }
    }
    let parts: Vec<RangePartition> = lens
        .iter()
        .map(|&len| RangePartition::new(len, world))
        .collect();
    let per_key: Vec<f64> = (0..lens.len())
        .map(|s| bytes[s] as f64 / lens[s].max(1) as f64)
        .collect();
    let tasks = RangePartition::new(n, world);
    let mut score = vec![0f64; world];
    let mut touched: Vec<usize> = Vec::new();
    (0..n)
        .map(|t| {
            for a in plan.log.task(t) {
                let (s, key) = (a.slot(), a.key() as usize);
                let Some(&count) = readers[s].get(key) else {
                    continue;
                };
                let owner = match owners[s].as_ref().and_then(|o| o.get(key)) {
                    Some(&o) => usize::from(o),
                    None => parts[s].owner(key),
                };
                if score[owner] == 0.0 {
                    touched.push(owner);
                }
                score[owner] += per_key[s] / f64::from(count.max(1));
            }
            let mut best = tasks.owner(t);
            for &r in &touched {
                if score[r] > score[best] {
                    best = r;
                }
            }
            for r in touched.drain(..) {
                score[r] = 0.0;
            }
            best as u16
        })
        .collect()
}

/// What [`DistPlan::new`] cuts, and for whom.
struct Cut<'p> {
    plan: &'p Plan,
    lens: &'p [usize],
    owners: &'p [Option<Vec<u16>>],
    world: usize,
    me: usize,
    which: Transfers,
}

/// The exchanges before each of the steps `per_rank` cuts, and the final one, with the
/// elements this rank receives in all; holder sets of `S` (wide enough for the world).
fn simulate<S: RankSet>(cut: &Cut<'_>, per_rank: &[Vec<Work>]) -> (Vec<Exchange>, usize) {
    let steps = per_rank[0].len();
    let mut sim = Simulation::<S>::new(cut);
    let mut exchanges: Vec<Exchange> = (0..steps).map(|step| sim.step(per_rank, step)).collect();
    exchanges.push(sim.home());
    (exchanges, sim.received)
}

/// Who holds the latest value of each element, step by step, from one rank's point of
/// view. At first that is the owner; a rank that touches an element it does not hold
/// fetches it before the step, from a rank that held it before; a rank that writes an
/// element becomes its only holder. (Read-only elements never change holder and written
/// ones never meet them, so the two kinds are simulated apart: `which`.)
struct Simulation<'p, S> {
    plan: &'p Plan,
    lens: &'p [usize],
    world: usize,
    me: usize,
    /// Per slot: simulated (by `which`).
    tracked: Vec<bool>,
    /// The read-only tables are simulated (`which`).
    read_only: bool,
    /// Each element's owner, looked up rather than computed (a division) per access.
    owner_of: Vec<Vec<u8>>,
    /// Per slot, per key: the ranks holding its latest value.
    holders: Vec<Vec<S>>,
    /// Ranks that get an element in the current step's exchange: they cannot be its
    /// source in that same exchange.
    arriving: Vec<Vec<S>>,
    arrived: Vec<(usize, usize)>,
    /// Elements this rank received so far.
    received: usize,
    /// Scratch: per task, the rank running it in a large step.
    rank_of: Vec<u8>,
    /// Scratch: (task, rank) pairs of a small step.
    listed: Vec<u64>,
}

impl<'p, S: RankSet> Simulation<'p, S> {
    fn new(cut: &Cut<'p>) -> Self {
        let (plan, lens, owners) = (cut.plan, cut.lens, cut.owners);
        let (world, me, which) = (cut.world, cut.me, cut.which);
        let tracked: Vec<bool> = (0..lens.len())
            .map(|s| {
                lens[s] > 0
                    && match which {
                        Transfers::Written => plan.modes[s] == SlotMode::Checked,
                        Transfers::ReadOnly => plan.modes[s] == SlotMode::ReadOnly,
                    }
            })
            .collect();
        let owner_of: Vec<Vec<u8>> = (0..lens.len())
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
        let holders: Vec<Vec<S>> = owner_of
            .iter()
            .map(|of| of.iter().map(|&r| S::of(r as usize)).collect())
            .collect();
        // Read-only elements always come from their owner, which never stops holding
        // them: no sources to rule out.
        let read_only = which == Transfers::ReadOnly;
        let arriving = holders
            .iter()
            .map(|h| vec![S::EMPTY; if read_only { 0 } else { h.len() }])
            .collect();
        Simulation {
            plan,
            lens,
            world,
            me,
            tracked,
            read_only,
            owner_of,
            holders,
            arriving,
            arrived: Vec::new(),
            received: 0,
            rank_of: Vec::new(),
            listed: Vec::new(),
        }
    }

    /// An exchange with nothing to move.
    fn empty(&self) -> Exchange {
        Exchange {
            send: vec![vec![Keys::default(); self.lens.len()]; self.world],
            recv: vec![vec![Keys::default(); self.lens.len()]; self.world],
        }
    }

    /// The exchange before `step`, in which each rank runs `per_rank[rank][step]`.
    ///
    /// Within a step the order of tasks does not matter (an element one rank writes in a
    /// step is touched by no other rank in it, and read-only elements never change
    /// holder), so the step's tasks are visited in task order: the log, and the holders of
    /// tables indexed like the loop, are then read sequentially rather than at random
    /// (which made this simulation cost more than a serial epoch).
    fn step(&mut self, per_rank: &[Vec<Work>], step: usize) -> Exchange {
        let plan = self.plan;
        let mut exchange = self.empty();
        if let Schedule::Rotation(rot) = &plan.schedule {
            let whole: Vec<usize> = whole_block_slots(rot)
                .into_iter()
                .filter(|&s| self.tracked[s])
                .collect();
            for (q, works) in per_rank.iter().enumerate() {
                let Work::Cells(cells) = &works[step] else {
                    continue;
                };
                for &c in cells {
                    for &slot in &whole {
                        let window = plan.schedule.window(slot, super::GroupRef::Cell(c));
                        for key in window.start..window.end.min(self.lens[slot]) {
                            self.touch(&mut exchange, slot, key, q, true);
                        }
                    }
                }
            }
        }
        let mut count = 0usize;
        for works in per_rank {
            for_tasks(plan, &works[step], |_| count += 1);
        }
        let n_tasks = plan.log.tasks();
        if count.saturating_mul(16) >= n_tasks {
            // A large step: mark its tasks, then scan all tasks in order.
            let mut rank_of = std::mem::take(&mut self.rank_of);
            rank_of.resize(n_tasks, u8::MAX);
            for (q, works) in per_rank.iter().enumerate() {
                for_tasks(plan, &works[step], |t| rank_of[t as usize] = q as u8);
            }
            for (t, q) in rank_of.iter_mut().enumerate() {
                if *q != u8::MAX {
                    self.visit(&mut exchange, t, *q as usize);
                    *q = u8::MAX;
                }
            }
            self.rank_of = rank_of;
        } else {
            // A small one: sort its (task, rank) pairs.
            let mut listed = std::mem::take(&mut self.listed);
            listed.clear();
            for (q, works) in per_rank.iter().enumerate() {
                for_tasks(plan, &works[step], |t| {
                    listed.push(u64::from(t) << 8 | q as u64)
                });
            }
            listed.sort_unstable();
            for &e in &listed {
                self.visit(&mut exchange, (e >> 8) as usize, (e & 0xff) as usize);
            }
            self.listed = listed;
        }
        for (slot, key) in self.arrived.drain(..) {
            self.arriving[slot][key] = S::EMPTY;
        }
        exchange
    }

    /// Task `t`, run by rank `q`: fetches what `q` does not hold, then `q` alone holds
    /// what the task writes.
    fn visit(&mut self, exchange: &mut Exchange, t: usize, q: usize) {
        let plan = self.plan;
        for a in plan.log.task(t) {
            let (slot, key) = (a.slot(), a.key() as usize);
            if !self.tracked[slot] || key >= self.lens[slot] {
                continue;
            }
            self.touch(exchange, slot, key, q, a.write());
        }
    }

    /// Rank `q` touches element `key` of `slot` (tracked, below its length): it fetches
    /// the element if it does not hold it, and alone holds it if it writes it.
    fn touch(&mut self, exchange: &mut Exchange, slot: usize, key: usize, q: usize, write: bool) {
        let bit = S::of(q);
        let held = &mut self.holders[slot][key];
        if !held.has(q) {
            let home = self.owner_of[slot][key] as usize;
            let src = match self.read_only {
                true => home,
                false => {
                    let sources = *held & !self.arriving[slot][key];
                    if sources.has(home) {
                        home
                    } else {
                        sources.lowest()
                    }
                }
            };
            debug_assert!(src < self.world, "an element with no holder");
            if src == self.me {
                exchange.send[q][slot].push(key as u64);
            }
            if q == self.me {
                exchange.recv[src][slot].push(key as u64);
                self.received += 1;
            }
            *held |= bit;
            if !self.read_only {
                if self.arriving[slot][key] == S::EMPTY {
                    self.arrived.push((slot, key));
                }
                self.arriving[slot][key] |= bit;
            }
        }
        if write {
            *held = bit;
        }
    }

    /// The final exchange: written elements go back to their owners.
    fn home(&self) -> Exchange {
        let mut last = self.empty();
        let checked = |s: &usize| self.tracked[*s] && self.plan.modes[*s] == SlotMode::Checked;
        for slot in (0..self.lens.len()).filter(checked) {
            for (key, &held) in self.holders[slot].iter().enumerate() {
                let home = self.owner_of[slot][key] as usize;
                if !held.has(home) {
                    let src = held.lowest();
                    if src == self.me {
                        last.send[home][slot].push(key as u64);
                    }
                    if home == self.me {
                        last.recv[src][slot].push(key as u64);
                    }
                }
            }
        }
        last
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
