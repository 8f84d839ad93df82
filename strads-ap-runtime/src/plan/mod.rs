//! Conflict-free schedules for `async_for!` (sans-IO: a plan is a pure function of the
//! access log, the tables' shapes, the thread count and a seed).
//!
//! Tasks conflict when they touch the same key and at least one writes it. Tables no task
//! writes are read-only and never conflict; a written table whose every key is touched by
//! at most one task is *private* and adds no conflicts either; relaxed tables are ignored.
//! From the shape of what is left the planner picks:
//!
//! * **Rotation** (STRADS static schedule, DSGD, Harp): every task writes exactly one key
//!   in each of one or two shared written tables (SGDMF: `W[u]`, `H[v]`). Each table's
//!   keys are split into blocks of equal work; cell `(p, q)` holds the tasks whose keys fall
//!   in row block `p` and column block `q`. Cells sharing no block may run at once.
//! * **Components** (Cyclades): otherwise. Shuffled tasks are cut into batches; inside a
//!   batch, union-find over written keys yields connected components, which are packed
//!   largest-first onto bins of equal work. Bins run in parallel; batches one after another.
//!
//! Either way the plan also gives every checked table a *tag* per key, so that views can
//! refuse any access the plan does not cover (see [`Plan::allowed`]).

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;

use crate::engine::ctx::{SHARED, UNTOUCHED};
use crate::recon::{Access, AccessLog};

#[cfg(test)]
mod tests;

/// The shape of one captured table, as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Number of keys: a DVector's length, a map's entries.
    pub key_space: usize,
    /// Whether the table was declared relaxed.
    pub relaxed: bool,
}

/// How the engine treats a table during the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotMode {
    /// No task writes it: reads are free, writes are refused.
    ReadOnly,
    /// Accesses are checked against per-key tags.
    Checked,
    /// Conflicts ignored; each worker updates a replica, merged by summed deltas.
    Relaxed,
}

/// A task group of a rotation schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// Row block.
    pub row: u32,
    /// Column block (0 for a one-table rotation).
    pub col: u32,
    /// Task offsets (from the range start), in loop order.
    pub tasks: Vec<u32>,
}

/// A rotation schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Slot of the table whose blocks are rows.
    pub row_slot: usize,
    /// Slot of the table whose blocks are columns, if two tables rotate.
    pub col_slot: Option<usize>,
    /// Number of row blocks.
    pub rows: usize,
    /// Number of column blocks (1 for a one-table rotation).
    pub cols: usize,
    /// Non-empty cells.
    pub cells: Vec<Cell>,
}

/// A task group of a components schedule: components packed onto one bin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The group's tag (unique within the plan).
    pub id: u32,
    /// Task offsets, in the order they run.
    pub tasks: Vec<u32>,
}

/// A batch of a components schedule: groups that may run at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Groups, heaviest first.
    pub groups: Vec<Group>,
}

/// How groups are formed and ordered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// See [`Rotation`].
    Rotation(Rotation),
    /// Batches of conflict-free groups.
    Components(Vec<Batch>),
}

/// Figures about a plan, for progress output and the bench.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// `rotation` or `components`.
    pub strategy: &'static str,
    /// Number of tasks.
    pub tasks: usize,
    /// Number of task groups.
    pub groups: usize,
    /// Tasks in the largest group.
    pub largest_group: usize,
    /// Number of batches run one after another.
    pub batches: usize,
    /// Tasks of the largest connected component (components only).
    pub largest_component: usize,
}

/// A conflict-free plan for one loop.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Per slot.
    pub modes: Vec<SlotMode>,
    /// Per slot: per-key tags of checked tables (empty otherwise).
    pub tags: Vec<Vec<u32>>,
    /// The groups.
    pub schedule: Schedule,
    /// Figures.
    pub stats: PlanStats,
    /// The access log the plan was made from (components re-tag from it per batch).
    pub log: AccessLog,
    /// Read-only slots that every task reads at its own loop index (`ratings[k]`): the
    /// engine prefetches them ahead in plan order.
    pub indexed_by_task: Vec<usize>,
}

/// Planner settings.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    /// Worker threads that will run the plan.
    pub threads: usize,
    /// Blocks per rotated table (default: [`BLOCKS_PER_THREAD`] × threads).
    pub blocks: Option<usize>,
    /// Seed of the task shuffle.
    pub seed: u64,
    /// The loop index of task 0 (keys equal to `first_index + task` are "at the loop index").
    pub first_index: usize,
}

/// Blocks per rotated table and thread, by default. Fewer, larger blocks keep the order of
/// updates closer to the serial loop's (each cell is a stratum of correlated updates);
/// the engine balances load by cutting cells into small units instead.
pub const BLOCKS_PER_THREAD: usize = 2;

/// Makes a conflict-free plan.
pub fn plan(log: AccessLog, tables: &[TableInfo], config: &PlanConfig) -> Plan {
    let slots = tables.len();

    // One pass over the log: which tables are written, how many tasks touch each key
    // (saturating at 2: only 0, 1 and many matter), and which tables every task reads at
    // its own loop index.
    let Summary {
        written,
        at_index,
        touches,
        candidates,
        keys,
    } = summarize(&log, tables, config.first_index);
    let modes: Vec<SlotMode> = (0..slots)
        .map(|s| {
            if tables[s].relaxed {
                SlotMode::Relaxed
            } else if written[s] && tables[s].key_space > 0 {
                SlotMode::Checked
            } else {
                SlotMode::ReadOnly
            }
        })
        .collect();
    let shared: Vec<usize> = (0..slots)
        .filter(|&s| modes[s] == SlotMode::Checked && touches[s].iter().any(|&c| c > 1))
        .collect();
    let indexed_by_task = (0..slots)
        .filter(|&s| modes[s] == SlotMode::ReadOnly && tables[s].key_space > 0 && at_index[s])
        .collect();

    let mut tags: Vec<Vec<u32>> = (0..slots)
        .map(|s| {
            if modes[s] == SlotMode::Checked {
                vec![UNTOUCHED; tables[s].key_space]
            } else {
                Vec::new()
            }
        })
        .collect();

    let blocks = config
        .blocks
        .unwrap_or(BLOCKS_PER_THREAD * config.threads)
        .max(1);
    let rotated = if !(1..=2).contains(&shared.len()) {
        None
    } else if shared == candidates {
        // Gathered in the summary's pass.
        let valid = |k: &[u32; 2]| k[..shared.len()].iter().all(|&x| x != u32::MAX);
        keys.iter().all(valid).then_some(keys)
    } else {
        rotation_keys(&log, &shared)
    };
    let (schedule, stats) = match rotated {
        Some(keys) => rotation(&log, tables, &modes, &shared, &keys, blocks, &mut tags),
        None => components(&log, &modes, config, &mut tags),
    };
    Plan {
        modes,
        tags,
        schedule,
        stats,
        log,
        indexed_by_task,
    }
}

/// What one pass over the log tells: which tables are written, how many tasks touch each
/// key (saturating at 2: only 0, 1 and many matter), and which tables every task reads
/// at its own loop index.
struct Summary {
    written: Vec<bool>,
    at_index: Vec<bool>,
    touches: Vec<Vec<u8>>,
    /// When one or two tables are written: those slots, and per task its one key in
    /// each (`u32::MAX` where it has none or several) — rotation's input, gathered in the
    /// same pass.
    candidates: Vec<usize>,
    keys: Vec<[u32; 2]>,
}

/// Summarises the log, in parallel over ranges of tasks.
fn summarize(log: &AccessLog, tables: &[TableInfo], first_index: usize) -> Summary {
    let n = log.tasks();
    let slots = tables.len();
    let candidates: Vec<usize> = (0..slots)
        .filter(|&s| !tables[s].relaxed && tables[s].key_space > 0 && log.writes(s))
        .collect();
    let candidates = if candidates.len() <= 2 {
        candidates
    } else {
        Vec::new()
    };
    let part = |range: std::ops::Range<usize>| {
        let mut sum = Summary {
            candidates: candidates.clone(),
            keys: Vec::with_capacity(if candidates.is_empty() {
                0
            } else {
                range.len()
            }),
            written: vec![false; slots],
            at_index: vec![true; slots],
            // Only written tables can conflict: count touches of those alone.
            touches: tables
                .iter()
                .enumerate()
                .map(|(s, t)| {
                    if !t.relaxed && t.key_space > 0 && log.writes(s) {
                        vec![0u8; t.key_space]
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
        };
        let mut seen_own = vec![false; slots];
        log.for_each_in(range, |t, accesses| {
            let own = (first_index + t) as u64;
            for a in accesses {
                let s = a.slot();
                sum.written[s] |= a.write();
                seen_own[s] |= a.key() == own;
                if let Some(c) = sum.touches[s].get_mut(a.key() as usize) {
                    *c = (*c + 1).min(2);
                }
            }
            if !candidates.is_empty() {
                sum.keys.push(single_keys(accesses, &candidates));
            }
            for (flag, seen) in sum.at_index.iter_mut().zip(&mut seen_own) {
                *flag &= *seen;
                *seen = false;
            }
        });
        sum
    };
    let parts = rayon::current_num_threads().clamp(1, 8);
    let size = n.div_ceil(parts).max(1 << 14);
    let ranges: Vec<std::ops::Range<usize>> =
        (0..n).step_by(size).map(|s| s..(s + size).min(n)).collect();
    let sums: Vec<Summary> = ranges.into_par_iter().map(part).collect();
    let mut total = part(0..0);
    for sum in sums {
        total.keys.extend_from_slice(&sum.keys);
        for s in 0..slots {
            total.written[s] |= sum.written[s];
            total.at_index[s] &= sum.at_index[s];
            for (c, d) in total.touches[s].iter_mut().zip(&sum.touches[s]) {
                *c = (*c + d).min(2);
            }
        }
    }
    if n == 0 {
        total.at_index.iter_mut().for_each(|f| *f = false);
    }
    total
}

/// A task's one key in each of up to two `slots`; `u32::MAX` where it touches none or
/// several keys of that slot (or a key that does not fit in 32 bits).
fn single_keys(accesses: &[Access], slots: &[usize]) -> [u32; 2] {
    let mut key = [u32::MAX; 2];
    let mut count = [0u8; 2];
    for a in accesses {
        for (i, &s) in slots.iter().enumerate() {
            if a.slot() == s {
                key[i] = u32::try_from(a.key()).unwrap_or(u32::MAX);
                count[i] += 1;
            }
        }
    }
    for i in 0..2 {
        if count[i] != 1 {
            key[i] = u32::MAX;
        }
    }
    key
}

/// For a rotation over the `shared` tables: each task's one key in each of them, or
/// `None` if some task touches none or several keys of one of them.
fn rotation_keys(log: &AccessLog, shared: &[usize]) -> Option<Vec<[u32; 2]>> {
    const PART: usize = 1 << 14;
    let parts: Vec<Option<Vec<[u32; 2]>>> = (0..log.tasks().div_ceil(PART))
        .into_par_iter()
        .map(|p| {
            let mut keys = Vec::with_capacity(PART);
            let mut valid = true;
            log.for_each_in(p * PART..(p + 1) * PART, |_, accesses| {
                let k = single_keys(accesses, shared);
                valid &= k[..shared.len()].iter().all(|&x| x != u32::MAX);
                keys.push(k);
            });
            valid.then_some(keys)
        })
        .collect();
    let mut keys = Vec::with_capacity(log.tasks());
    for part in parts {
        keys.extend(part?);
    }
    Some(keys)
}

/// Splits the keys `0..weights.len()` into `blocks` contiguous ranges of about equal
/// weight; returns the block of every key.
fn balanced_blocks(weights: &[u32], blocks: usize) -> Vec<u32> {
    let total: u64 = weights.iter().map(|&w| w as u64).sum();
    let mut block_of = vec![0u32; weights.len()];
    let mut acc = 0u64;
    for (k, &w) in weights.iter().enumerate() {
        // Place the key by the midpoint of its weight, so heavy keys do not drag blocks.
        let mid = acc * 2 + w as u64;
        let b = if total == 0 {
            0
        } else {
            ((mid * blocks as u64) / (2 * total)).min(blocks as u64 - 1)
        };
        block_of[k] = b as u32;
        acc += w as u64;
    }
    block_of
}

fn rotation(
    log: &AccessLog,
    tables: &[TableInfo],
    modes: &[SlotMode],
    shared: &[usize],
    keys: &[[u32; 2]],
    blocks: usize,
    tags: &mut [Vec<u32>],
) -> (Schedule, PlanStats) {
    let n = log.tasks();
    let row_slot = shared[0];
    let col_slot = shared.get(1).copied();
    let cols = if col_slot.is_some() { blocks } else { 1 };
    let block_map = |i: usize, s: usize| {
        let mut w = vec![0u32; tables[s].key_space];
        for k in keys {
            let c = &mut w[k[i] as usize];
            *c = c.saturating_add(1);
        }
        let b = balanced_blocks(&w, blocks);
        (w, b)
    };
    let (row_w, row_b) = block_map(0, row_slot);
    let col_map = col_slot.map(|s| block_map(1, s));

    // Counting sort of tasks into cells, keeping loop order inside a cell.
    let task_cells: Vec<u32> = keys
        .iter()
        .map(|k| {
            let r = row_b[k[0] as usize];
            let c = col_map.as_ref().map_or(0, |(_, cb)| cb[k[1] as usize]);
            r * cols as u32 + c
        })
        .collect();
    let mut counts = vec![0usize; blocks * cols];
    for &c in &task_cells {
        counts[c as usize] += 1;
    }
    let mut cells: Vec<Cell> = (0..blocks * cols)
        .map(|c| Cell {
            row: (c / cols) as u32,
            col: (c % cols) as u32,
            tasks: Vec::with_capacity(counts[c]),
        })
        .collect();
    for (t, &c) in task_cells.iter().enumerate() {
        cells[c as usize].tasks.push(t as u32);
    }

    // Tags: rotated tables by block; private checked tables by the cell of their one task.
    let mut tag_blocks = |s: usize, (w, b): &(Vec<u32>, Vec<u32>)| {
        for (k, (&w, &b)) in w.iter().zip(b).enumerate() {
            if w > 0 {
                tags[s][k] = b;
            }
        }
    };
    tag_blocks(row_slot, &(row_w, row_b));
    if let (Some(map), Some(cs)) = (&col_map, col_slot) {
        tag_blocks(cs, map);
    }
    let private: Vec<usize> = (0..modes.len())
        .filter(|&s| modes[s] == SlotMode::Checked && !shared.contains(&s))
        .collect();
    if !private.is_empty() {
        for (t, &c) in task_cells.iter().enumerate() {
            for a in log.task(t) {
                if private.contains(&a.slot()) {
                    tags[a.slot()][a.key() as usize] = c;
                }
            }
        }
    }
    cells.retain(|c| !c.tasks.is_empty());
    let stats = PlanStats {
        strategy: "rotation",
        tasks: n,
        groups: cells.len(),
        largest_group: cells.iter().map(|c| c.tasks.len()).max().unwrap_or(0),
        batches: 1,
        largest_component: 0,
    };
    (
        Schedule::Rotation(Rotation {
            row_slot,
            col_slot,
            rows: blocks,
            cols,
            cells,
        }),
        stats,
    )
}

struct UnionFind(Vec<u32>);

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind((0..n as u32).collect())
    }
    fn find(&mut self, mut x: u32) -> u32 {
        while self.0[x as usize] != x {
            let p = self.0[x as usize];
            self.0[x as usize] = self.0[p as usize];
            x = p;
        }
        x
    }
    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            // Keep the smaller root: a component's root is its first task.
            let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.0[hi as usize] = lo;
        }
    }
}

/// Connected components of the tasks `order[..]` (positions are local to the slice):
/// tasks are joined when they touch the same written key of a checked table.
fn connected(
    log: &AccessLog,
    modes: &[SlotMode],
    order: &[u32],
    scratch: &mut Scratch,
) -> UnionFind {
    scratch.epoch += 1;
    let epoch = scratch.epoch;
    for &t in order {
        for a in log.task(t as usize) {
            if a.write() && modes[a.slot()] == SlotMode::Checked {
                scratch.written[a.slot()][a.key() as usize] = epoch;
            }
        }
    }
    let mut uf = UnionFind::new(order.len());
    for (p, &t) in order.iter().enumerate() {
        for a in log.task(t as usize) {
            let (s, k) = (a.slot(), a.key() as usize);
            if modes[s] != SlotMode::Checked || scratch.written[s][k] != epoch {
                continue;
            }
            if scratch.seen[s][k] != epoch {
                scratch.seen[s][k] = epoch;
                scratch.first[s][k] = p as u32;
            } else {
                uf.union(p as u32, scratch.first[s][k]);
            }
        }
    }
    uf
}

struct Scratch {
    epoch: u32,
    written: Vec<Vec<u32>>,
    seen: Vec<Vec<u32>>,
    first: Vec<Vec<u32>>,
}

fn components(
    log: &AccessLog,
    modes: &[SlotMode],
    config: &PlanConfig,
    tags: &mut [Vec<u32>],
) -> (Schedule, PlanStats) {
    let n = log.tasks();
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(config.seed);
    order.shuffle(&mut rng);
    let sized = |s: usize| tags[s].len();
    let mut scratch = Scratch {
        epoch: 0,
        written: (0..modes.len()).map(|s| vec![0; sized(s)]).collect(),
        seen: (0..modes.len()).map(|s| vec![0; sized(s)]).collect(),
        first: (0..modes.len()).map(|s| vec![0; sized(s)]).collect(),
    };
    let threads = config.threads.max(1);

    // Batch size: halve until the largest component of the first batch leaves room for
    // every thread (at most half of one thread's share), or batches get small.
    let min_batch = (64 * threads).min(n.max(1));
    let mut size = n.max(1);
    loop {
        if threads == 1 || size <= min_batch {
            break;
        }
        let batch = &order[..size.min(n)];
        let mut uf = connected(log, modes, batch, &mut scratch);
        let mut counts = vec![0u32; batch.len()];
        let mut largest = 0;
        for p in 0..batch.len() as u32 {
            let r = uf.find(p) as usize;
            counts[r] += 1;
            largest = largest.max(counts[r] as usize);
        }
        if largest * 2 * threads <= batch.len() {
            break;
        }
        size = (size / 2).max(min_batch);
    }

    let bins_per_batch = 4 * threads;
    let mut batches = Vec::new();
    let mut next_id = 0u32;
    let mut stats = PlanStats {
        strategy: "components",
        tasks: n,
        ..PlanStats::default()
    };
    for chunk in order.chunks(size) {
        let mut uf = connected(log, modes, chunk, &mut scratch);
        // Components as lists of local positions, in position order.
        let mut members: Vec<Vec<u32>> = Vec::new();
        let mut index_of_root = vec![u32::MAX; chunk.len()];
        for p in 0..chunk.len() as u32 {
            let r = uf.find(p) as usize;
            if index_of_root[r] == u32::MAX {
                index_of_root[r] = members.len() as u32;
                members.push(Vec::new());
            }
            members[index_of_root[r] as usize].push(p);
        }
        stats.largest_component = stats
            .largest_component
            .max(members.iter().map(Vec::len).max().unwrap_or(0));
        // Largest-first onto the least-loaded bin (LPT).
        members.sort_by_key(|m| std::cmp::Reverse(m.len()));
        let bins = bins_per_batch.min(members.len()).max(1);
        let mut load = vec![0usize; bins];
        let mut bin_members: Vec<Vec<u32>> = vec![Vec::new(); bins];
        for m in members {
            let b = (0..bins).min_by_key(|&b| load[b]).expect("bins > 0");
            load[b] += m.len();
            bin_members[b].extend(m);
        }
        let mut groups: Vec<Group> = bin_members
            .into_iter()
            .filter(|m| !m.is_empty())
            .map(|mut m| {
                m.sort_unstable();
                let id = next_id;
                next_id += 1;
                Group {
                    id,
                    tasks: m.into_iter().map(|p| chunk[p as usize]).collect(),
                }
            })
            .collect();
        groups.sort_by_key(|g| std::cmp::Reverse(g.tasks.len()));
        stats.groups += groups.len();
        stats.largest_group = stats
            .largest_group
            .max(groups.first().map_or(0, |g| g.tasks.len()));
        batches.push(Batch { groups });
    }
    stats.batches = batches.len();
    if let Some(first) = batches.first() {
        retag(log, modes, first, tags);
    }
    (Schedule::Components(batches), stats)
}

/// Sets the tags of the keys a components batch touches: keys written in the batch get
/// the tag of the one group that touches them; keys only read get [`SHARED`].
pub(crate) fn retag(log: &AccessLog, modes: &[SlotMode], batch: &Batch, tags: &mut [Vec<u32>]) {
    for g in &batch.groups {
        for &t in &g.tasks {
            for a in log.task(t as usize) {
                if modes[a.slot()] == SlotMode::Checked {
                    tags[a.slot()][a.key() as usize] = SHARED;
                }
            }
        }
    }
    for g in &batch.groups {
        for &t in &g.tasks {
            for a in log.task(t as usize) {
                if a.write() && modes[a.slot()] == SlotMode::Checked {
                    tags[a.slot()][a.key() as usize] = g.id;
                }
            }
        }
    }
}

impl Schedule {
    /// The tag a group may access in a slot: its row or column block for rotated tables,
    /// its cell or group index otherwise.
    pub fn allowed(&self, slot: usize, group: GroupRef) -> u32 {
        match (self, group) {
            (Schedule::Rotation(r), GroupRef::Cell(c)) => {
                let cell = &r.cells[c];
                if slot == r.row_slot {
                    cell.row
                } else if Some(slot) == r.col_slot {
                    cell.col
                } else {
                    cell.row * r.cols as u32 + cell.col
                }
            }
            (Schedule::Components(batches), GroupRef::Group { batch, group }) => {
                batches[batch].groups[group].id
            }
            _ => unreachable!("group reference does not match the schedule"),
        }
    }
}

impl Plan {
    /// The tag a group may access in a slot (see [`Schedule::allowed`]).
    pub fn allowed(&self, slot: usize, group: GroupRef) -> u32 {
        self.schedule.allowed(slot, group)
    }
}

/// A group of a plan, by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRef {
    /// A rotation cell, by index into `cells`.
    Cell(usize),
    /// A components group.
    Group {
        /// Batch index.
        batch: usize,
        /// Group index within the batch.
        group: usize,
    },
}
