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
//! * **Packing**: when even a small batch is one component (tasks writing several rows
//!   each, as a factorisation machine's do), tasks are packed onto bins one by one, each
//!   waiting for a later batch when its keys are held by two bins (see `packing`). The
//!   result is a components schedule.
//!
//! Either way the plan also gives every checked table a *tag* per key, so that views can
//! refuse any access the plan does not cover (see [`Plan::allowed`]).

use std::sync::atomic::{AtomicU32, Ordering};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;

use crate::access::{SHARED, UNTOUCHED};
use crate::recon::{Access, AccessLog};

pub(crate) mod dist;
#[cfg(test)]
mod tests;

pub(crate) use dist::{place_by_owner, DistPlan, Transfers, Work, MAX_RANKS};

/// The shape of one captured table, as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Number of keys: a DVector's length, a map's entries.
    pub key_space: usize,
    /// Whether the table was declared relaxed.
    pub relaxed: bool,
}

impl TableInfo {
    /// Tables of `key_spaces` keys each, none relaxed (for the planner's tests and the
    /// fuzzing of peer logs).
    #[cfg(test)]
    pub(crate) fn unrelaxed(key_spaces: &[usize]) -> Vec<TableInfo> {
        key_spaces
            .iter()
            .map(|&key_space| TableInfo {
                key_space,
                relaxed: false,
            })
            .collect()
    }
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
    /// The most tasks of the cell that share one key of a rotated table: how long a run
    /// of one row's (or column's) updates against this cell alone can be. Under
    /// `Opts::interleave` the engine cuts a cell with a hot key into short slices, so that
    /// the key's updates interleave with its other cells' as in the serial loop.
    pub hottest: u32,
}

/// A rotation schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Slot of the table whose blocks are rows.
    pub row_slot: usize,
    /// Slot of the table whose blocks are columns, if two tables rotate.
    pub col_slot: Option<usize>,
    /// Tables that follow `row_slot` in its dimension (their keys map one to one to its
    /// keys, task by task, and take the same blocks).
    pub row_members: Vec<usize>,
    /// Tables that follow `col_slot` likewise.
    pub col_members: Vec<usize>,
    /// Row block `b` holds keys `row_bounds[b]..row_bounds[b + 1]` of `row_slot` (blocks
    /// are contiguous key ranges).
    pub row_bounds: Vec<usize>,
    /// Column block boundaries of `col_slot` likewise (empty for one table).
    pub col_bounds: Vec<usize>,
    /// Tables whose keys are `row_slot`'s own, task by task: `row_slot` and the members
    /// keyed exactly like it. A cell holds their row block's key range alone.
    pub row_windowed: Vec<usize>,
    /// Tables keyed exactly like `col_slot` likewise.
    pub col_windowed: Vec<usize>,
    /// The windowed tables no task reached outside its cell's block in reconnaissance:
    /// their windows cover every access the plan allows, so a group's body may check the
    /// window alone (see [`window_only`]).
    pub window_only: Vec<usize>,
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
    /// Across ranks: per group, the rank that runs it, where the plan placed its groups by
    /// what they read (see `dist::place_by_owner`); empty where they go by load.
    pub ranks: Vec<u16>,
}

/// How groups are formed and ordered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// See [`Rotation`]. Boxed: a rotation's fields outweigh a components schedule's.
    Rotation(Box<Rotation>),
    /// Batches of conflict-free groups.
    Components(Vec<Batch>),
}

/// Figures about a plan, for progress output and the bench.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
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
    /// The access log the plan was made from (components re-tag from it per batch);
    /// empty once running the plan needs it no more (see [`Plan::drop_log`]).
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
/// updates closer to the serial loop's (each cell is a stratum of correlated updates),
/// and the engine balances load by cutting cells into small units; but smaller blocks
/// keep a cell's rows in the cache. Measured with 2 threads (`bench`, same runs): 4 per
/// thread made SGDMF 2.22x and LDA 2.15x faster than their serial twins, against 1.99x
/// and 1.88x with 2 per thread, at the same RMSE and log-likelihood (within 0.3%).
pub const BLOCKS_PER_THREAD: usize = 4;

/// How each table is used by a loop, from its reconnaissance: relaxed tables are relaxed;
/// other tables some task writes (the recorder noted it per segment) are checked; the rest
/// are read-only.
pub fn slot_modes(log: &AccessLog, tables: &[TableInfo]) -> Vec<SlotMode> {
    tables
        .iter()
        .enumerate()
        .map(|(s, t)| {
            if t.relaxed {
                SlotMode::Relaxed
            } else if t.key_space > 0 && log.writes(s) {
                SlotMode::Checked
            } else {
                SlotMode::ReadOnly
            }
        })
        .collect()
}

/// Makes a conflict-free plan.
///
/// # Panics
/// If an access of `log` names a slot past `tables` or a key not below its table's
/// `key_space` (logs made here are so by construction; logs from other ranks are checked
/// by [`AccessLog::from_byte_parts`] before they get here).
pub fn plan(log: AccessLog, tables: &[TableInfo], config: &PlanConfig) -> Plan {
    plan_ahead(log, tables, config, None)
}

/// [`plan`], with the first pass over the log perhaps done already, chunk by chunk while
/// the log was being made (see [`GatherAhead`]). The result is the same either way.
///
/// # Panics
/// As [`plan`].
pub fn plan_ahead(
    log: AccessLog,
    tables: &[TableInfo],
    config: &PlanConfig,
    ahead: Option<GatherAhead>,
) -> Plan {
    plan_shaped(log, tables, config, ahead, true).expect("components are always a plan")
}

/// The rotation [`plan`] makes from `log`, or `None` where it would make components
/// (which are then not made). A locking run places its tasks by it: it runs cells of the
/// rotation made from its first call's reconnaissance, so that the accesses that repeat
/// from call to call stay in one worker's blocks, while locks still guard every access.
///
/// A log in which some task touches two keys of one written table gives `None` after one
/// pass over it, without the planner's passes (which also look for private tables and
/// dimensions, and cost BPR's first calls 7-19 ms, one to three serial epochs, to find no
/// rotation: its tasks touch two items each). Such a log could still rotate where that
/// table is private; a placement does without it.
///
/// # Panics
/// As [`plan`].
pub fn rotation_of(log: AccessLog, tables: &[TableInfo], config: &PlanConfig) -> Option<Rotation> {
    let modes = slot_modes(&log, tables);
    let one_key_each = (0..log.tasks()).all(|t| {
        log.task(t).windows(2).all(|w| {
            let (a, b) = (w[0], w[1]);
            a.slot() != b.slot() || a.key() == b.key() || modes[a.slot()] != SlotMode::Checked
        })
    });
    if !one_key_each {
        return None;
    }
    match plan_shaped(log, tables, config, None, false)?.schedule {
        Schedule::Rotation(r) => Some(*r),
        Schedule::Components(_) => None,
    }
}

/// Whether the planner would make a rotation of `log` over `tables`: a what-if for the
/// diagnoses (the same log with some tables relaxed), without making the plan.
pub fn would_rotate(log: &AccessLog, tables: &[TableInfo]) -> bool {
    // No table left to conflict over (all relaxed or read-only): no rotation, and no pass
    // over the log to find that out.
    let checked = slot_modes(log, tables).contains(&SlotMode::Checked);
    checked && rotation_input(log, tables, 0, None).rotated.is_some()
}

/// What decides between a rotation and the other plans: the tables' modes, the tables
/// read at the loop index, the dimensions and the keys to rotate (if the log rotates).
struct RotationInput {
    modes: Vec<SlotMode>,
    at_index: Vec<bool>,
    dims: Option<Dimensions>,
    rotated: Option<Gathered>,
}

/// The part of planning that finds whether `log` rotates, and over what.
fn rotation_input(
    log: &AccessLog,
    tables: &[TableInfo],
    first_index: usize,
    ahead: Option<GatherAhead>,
) -> RotationInput {
    let slots = tables.len();
    let modes = slot_modes(log, tables);
    // Tables some task writes that can conflict.
    let candidates: Vec<usize> = (0..slots)
        .filter(|&s| modes[s] == SlotMode::Checked)
        .collect();

    // Fast path (SGDMF and its kind): one or two written tables, each task touching one
    // key of each. One pass gathers those keys, counts tasks per key and finds the tables
    // read at the loop index; the counts tell shared tables from private ones.
    let mut gathered = None;
    let mut ahead = ahead;
    if (1..=2).contains(&candidates.len()) {
        let g = match ahead
            .take()
            .and_then(|a| a.finish(&candidates, log.tasks()))
        {
            Some(g) => g,
            None => gather(log, tables, &candidates, first_index),
        };
        if g.valid {
            gathered = Some(g);
        }
    }

    let (shared, at_index) = match &gathered {
        Some(g) => {
            let shared = candidates
                .iter()
                .zip(&g.weights)
                .filter(|(_, w)| w.iter().any(|&c| c > 1))
                .map(|(&s, _)| s)
                .collect::<Vec<_>>();
            (shared, g.at_index.clone())
        }
        None => {
            let (touches, at_index) = summarize(log, tables, &candidates, first_index);
            let shared = candidates
                .iter()
                .copied()
                .filter(|&s| touches[s].iter().any(|&c| c > 1))
                .collect::<Vec<_>>();
            (shared, at_index)
        }
    };
    // More than two shared tables may still fall into one or two *dimensions*: tables
    // whose keys coincide task by task (biased MF's `p` and `bu` by user, `q` and `bi` by
    // item). Rotation then runs over one table of each dimension, the others following it.
    let dims = match shared.len() {
        3..=MAX_DIMENSION_SLOTS => {
            let keys = ahead.and_then(|a| a.finish_keys(&shared, log.tasks()));
            dimensions(log, tables, &shared, keys)
        }
        _ => None,
    };
    let shared = match &dims {
        Some(d) => d.representatives(),
        None => shared,
    };
    // Rotation input for the shared tables: reuse the gathered keys when they cover
    // exactly those tables, else gather them now.
    let rotated = if !(1..=2).contains(&shared.len()) {
        None
    } else {
        match (gathered, &dims) {
            (Some(g), _) if g.slots == shared => Some(g),
            (Some(g), _) => Some(g.keep(&shared)),
            // The dimensions hold every task's key of each shared table already.
            (None, Some(d)) => Some(d.gathered(&shared, tables, at_index.clone())),
            (None, None) => {
                let g = gather(log, tables, &shared, first_index);
                g.valid.then_some(g)
            }
        }
    };
    RotationInput {
        modes,
        at_index,
        dims,
        rotated,
    }
}

/// [`plan_ahead`], or with `components_too` false `None` where the plan would not be a
/// rotation.
fn plan_shaped(
    log: AccessLog,
    tables: &[TableInfo],
    config: &PlanConfig,
    ahead: Option<GatherAhead>,
    components_too: bool,
) -> Option<Plan> {
    let slots = tables.len();
    let blocks = config
        .blocks
        .unwrap_or(BLOCKS_PER_THREAD * config.threads)
        .max(1);
    let RotationInput {
        modes,
        at_index,
        dims,
        rotated,
    } = rotation_input(&log, tables, config.first_index, ahead);
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
    let members = dims.as_ref().map(|d| d.members()).unwrap_or_default();
    let (schedule, stats) = match rotated {
        Some(g) => {
            let (mut schedule, stats, block_of) =
                rotation(&log, &modes, &g, blocks, &members, &mut tags);
            if let (Some(d), Schedule::Rotation(r)) = (&dims, &mut schedule) {
                d.tag_members(&g, &block_of, &mut tags);
                r.row_members = d.followers(r.row_slot);
                r.col_members = r.col_slot.map(|c| d.followers(c)).unwrap_or_default();
                let same = |rep: usize, members: &[usize]| -> Vec<usize> {
                    let keyed_alike = members.iter().filter(|&&m| d.keyed_alike(rep, m));
                    std::iter::once(rep).chain(keyed_alike.copied()).collect()
                };
                r.row_windowed = same(r.row_slot, &r.row_members);
                if let Some(c) = r.col_slot {
                    r.col_windowed = same(c, &r.col_members);
                }
            }
            if let Schedule::Rotation(r) = &mut schedule {
                // Every windowed table is window-only by construction: each task touches
                // at most one key of each rotated table (the gathered keys are valid), the
                // task's cell is the block of its representatives' keys, and a windowed
                // follower's key equals its representative's in every task. The pass
                // that checks it costs more than the rest of the rotation (biased MF:
                // 20 of 48 ms), so only debug builds make it.
                r.window_only = r
                    .row_windowed
                    .iter()
                    .chain(&r.col_windowed)
                    .copied()
                    .collect();
                debug_assert_eq!(r.window_only, window_only(&log, r), "window-only tables");
            }
            (schedule, stats)
        }
        None if components_too => components(&log, &modes, config, &mut tags),
        None => return None,
    };
    Some(Plan {
        modes,
        tags,
        schedule,
        stats,
        log,
        indexed_by_task,
    })
}

/// Ranges of tasks for the planner's parallel passes: a few per thread, not tiny.
fn task_parts(n: usize) -> Vec<std::ops::Range<usize>> {
    let parts = (rayon::current_num_threads() * 2).clamp(1, 16);
    let size = n.div_ceil(parts).max(1 << 14);
    (0..n).step_by(size).map(|s| s..(s + size).min(n)).collect()
}

/// Per slot: whether every task touches the key equal to its own loop index.
#[derive(Clone, Copy)]
pub(crate) struct SlotMask([u64; 4]);

impl SlotMask {
    pub(crate) const ALL: SlotMask = SlotMask([u64::MAX; 4]);
    const NONE: SlotMask = SlotMask([0; 4]);
    #[inline]
    fn set(&mut self, s: usize) {
        self.0[s >> 6] |= 1 << (s & 63);
    }
    #[inline]
    pub(crate) fn and(&mut self, o: SlotMask) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a &= b;
        }
    }
    fn get(&self, s: usize) -> bool {
        self.0[s >> 6] >> (s & 63) & 1 == 1
    }
    /// Tasks `range`'s accesses at their own index, ANDed over tasks.
    #[inline]
    pub(crate) fn of_task(first_index: usize, t: usize, accesses: &[Access]) -> SlotMask {
        let own = (first_index + t) as u64;
        let mut seen = SlotMask::NONE;
        for a in accesses {
            if a.key() == own {
                seen.set(a.slot());
            }
        }
        seen
    }
    pub(crate) fn to_vec(self, slots: usize, tasks: usize) -> Vec<bool> {
        (0..slots).map(|s| tasks > 0 && self.get(s)).collect()
    }
}

/// What the fast pass over the log found for up to two `slots`.
struct Gathered {
    /// The slots gathered, in key-column order.
    slots: Vec<usize>,
    /// Consecutive ranges of tasks covering the log.
    parts: Vec<std::ops::Range<usize>>,
    /// Per part: each task's one key per slot ([`FREE`] where it touches none of the
    /// slot's keys; `u32::MAX` past `slots.len()`).
    keys: Vec<Vec<[u32; 2]>>,
    /// Per slot: tasks per key.
    weights: Vec<Vec<u32>>,
    /// Per table slot: whether every task touches its own loop index.
    at_index: Vec<bool>,
    /// Whether every task touches at most one key of each slot.
    valid: bool,
}

/// A task's key of a rotated table that it does not touch at all: the task may run in any
/// block of that table's dimension (a task that writes a row only on a condition of the
/// data, or reads none of it). Every real key is below it (keys must be below their
/// table's length, which [`gather_range`] checks against `FREE`).
pub(crate) const FREE: u32 = u32::MAX - 1;

impl Gathered {
    /// Keeps one of two gathered slots.
    fn keep(self, slots: &[usize]) -> Gathered {
        let cols: Vec<usize> = slots
            .iter()
            .map(|s| {
                self.slots
                    .iter()
                    .position(|x| x == s)
                    .expect("gathered slot")
            })
            .collect();
        let keys = self
            .keys
            .into_par_iter()
            .map(|part| {
                part.into_iter()
                    .map(|k| {
                        let mut out = [u32::MAX; 2];
                        for (o, &c) in out.iter_mut().zip(&cols) {
                            *o = k[c];
                        }
                        out
                    })
                    .collect()
            })
            .collect();
        let mut weights: Vec<Option<Vec<u32>>> = self.weights.into_iter().map(Some).collect();
        Gathered {
            slots: slots.to_vec(),
            parts: self.parts,
            keys,
            weights: cols
                .iter()
                .map(|&c| weights[c].take().expect("once"))
                .collect(),
            at_index: self.at_index,
            valid: self.valid,
        }
    }
}

/// What one part of the log told about up to two tables' keys.
struct PartGather {
    keys: Vec<[u32; 2]>,
    weights: Vec<Vec<u32>>,
    at_index: SlotMask,
    valid: bool,
}

/// Keys, weights and own-index tables of tasks `range` of `log` (see [`Gathered`]).
fn gather_range(
    log: &AccessLog,
    range: std::ops::Range<usize>,
    tables: &[TableInfo],
    slots: &[usize],
    first_index: usize,
) -> PartGather {
    debug_assert!((1..=2).contains(&slots.len()));
    let (s0, s1) = (slots[0], slots.get(1).copied().unwrap_or(usize::MAX));
    let mut keys = Vec::with_capacity(range.len());
    // Tasks per key are counted here when the table is not much larger than the range
    // (else per-chunk arrays would cost more than the tasks: `join` counts from the keys).
    let sizes: Vec<usize> = slots.iter().map(|&s| tables[s].key_space).collect();
    let mut weights: Vec<Vec<u32>> = sizes
        .iter()
        .map(|&len| {
            if len <= 4 * range.len().max(1024) {
                vec![0; len]
            } else {
                Vec::new()
            }
        })
        .collect();
    let mut at = SlotMask::ALL;
    let mut valid = true;
    log.for_each_in(range.clone(), |t, accesses| {
        let mut key = [u32::MAX; 2];
        let mut count = [0u32; 2];
        for a in accesses {
            let s = a.slot();
            let i = if s == s0 {
                0
            } else if s == s1 {
                1
            } else {
                continue;
            };
            key[i] = u32::try_from(a.key()).unwrap_or(u32::MAX);
            count[i] += 1;
        }
        for (i, w) in weights.iter_mut().enumerate() {
            if count[i] == 0 {
                key[i] = FREE;
            } else if count[i] == 1 && key[i] < FREE && (key[i] as usize) < sizes[i] {
                if let Some(c) = w.get_mut(key[i] as usize) {
                    *c += 1;
                }
            } else {
                valid = false;
                key[i] = u32::MAX;
            }
        }
        keys.push(key);
        at.and(SlotMask::of_task(first_index, t, accesses));
    });
    PartGather {
        keys,
        weights,
        at_index: at,
        valid,
    }
}

/// One parallel pass over the whole log: each task's one key in each of `slots` (one or
/// two), tasks per key, and the tables every task touches at its own index.
fn gather(log: &AccessLog, tables: &[TableInfo], slots: &[usize], first_index: usize) -> Gathered {
    let parts = task_parts(log.tasks());
    let found: Vec<PartGather> = parts
        .par_iter()
        .map(|range| gather_range(log, range.clone(), tables, slots, first_index))
        .collect();
    join_parts(tables, slots, parts, found, log.tasks())
}

/// Joins the gathered `parts` (consecutive ranges of tasks covering `tasks` tasks).
fn join_parts(
    tables: &[TableInfo],
    slots: &[usize],
    parts: Vec<std::ops::Range<usize>>,
    found: Vec<PartGather>,
    tasks: usize,
) -> Gathered {
    let mut at = SlotMask::ALL;
    let mut valid = true;
    let mut keys = Vec::with_capacity(found.len());
    let mut weights: Vec<Vec<u32>> = slots
        .iter()
        .map(|&s| vec![0; tables[s].key_space])
        .collect();
    for part in found {
        at.and(part.at_index);
        valid &= part.valid;
        for (i, (total, counted)) in weights.iter_mut().zip(&part.weights).enumerate() {
            if counted.is_empty() {
                for k in &part.keys {
                    if let Some(x) = total.get_mut(k[i] as usize) {
                        *x += 1;
                    }
                }
            } else {
                for (x, y) in total.iter_mut().zip(counted) {
                    *x += y;
                }
            }
        }
        keys.push(part.keys);
    }
    Gathered {
        slots: slots.to_vec(),
        parts,
        keys,
        weights,
        at_index: at.to_vec(tables.len(), tasks),
        valid,
    }
}

/// The planner's first pass over a log made chunk by chunk (a recorded run), done on each
/// chunk as it is finished, typically on another thread than the one making the log.
///
/// Which tables to gather is guessed from the first chunk (its checked tables): with one
/// or two, their keys, weights and own-index tables (what `gather` finds); with three
/// to eight, each task's key of each (what `dimensions` needs). When the whole log says
/// otherwise, [`plan_ahead`] makes its pass again, so a wrong guess costs time, never
/// correctness.
pub struct GatherAhead {
    tables: Vec<TableInfo>,
    first_index: usize,
    slots: Option<Vec<usize>>,
    parts: Vec<std::ops::Range<usize>>,
    found: Vec<PartGather>,
    /// With three or more checked tables, per chunk: its tasks' keys of each (see
    /// [`task_keys`]), for [`dimensions`].
    keyed: Vec<Option<Vec<u32>>>,
    tasks: usize,
}

impl GatherAhead {
    /// Ready for the chunks of a loop over `tables` whose first task is loop index
    /// `first_index`.
    pub fn new(tables: &[TableInfo], first_index: usize) -> Self {
        GatherAhead {
            tables: tables.to_vec(),
            first_index,
            slots: None,
            parts: Vec::new(),
            found: Vec::new(),
            keyed: Vec::new(),
            tasks: 0,
        }
    }

    /// Gathers the next chunk: the log of the tasks after those of the previous chunks.
    pub fn add(&mut self, chunk: &AccessLog) {
        let slots = self.slots.get_or_insert_with(|| {
            let modes = slot_modes(chunk, &self.tables);
            (0..modes.len())
                .filter(|&s| modes[s] == SlotMode::Checked)
                .collect()
        });
        let n = chunk.tasks();
        if n > 0 {
            match slots.len() {
                1..=2 => {
                    let first = self.first_index + self.tasks;
                    self.found
                        .push(gather_range(chunk, 0..n, &self.tables, slots, first));
                }
                3..=MAX_DIMENSION_SLOTS => {
                    self.keyed.push(task_keys(chunk, 0..n, &self.tables, slots));
                }
                _ => {}
            }
            self.parts.push(self.tasks..self.tasks + n);
        }
        self.tasks += n;
    }

    /// The keys of all `tasks` tasks for [`dimensions`] of `slots`, if the chunks gathered
    /// exactly those and each chunk's tasks touched one key of each.
    fn finish_keys(self, slots: &[usize], tasks: usize) -> Option<Vec<u32>> {
        let covered = self.parts.last().map_or(0, |p| p.end);
        if self.slots.as_deref() != Some(slots) || covered != tasks || self.tasks != tasks {
            return None;
        }
        let mut keys = Vec::with_capacity(tasks * slots.len());
        for part in self.keyed {
            keys.extend(part?);
        }
        (keys.len() == tasks * slots.len()).then_some(keys)
    }

    /// The first pass over all `tasks` tasks, if it gathered exactly `slots`.
    fn finish(self, slots: &[usize], tasks: usize) -> Option<Gathered> {
        let covered = self.parts.last().map_or(0, |p| p.end);
        (self.slots.as_deref() == Some(slots) && covered == tasks && self.tasks == tasks)
            .then(|| join_parts(&self.tables, slots, self.parts, self.found, tasks))
    }
}

/// The general pass: for each written table (`candidates`), how many tasks touch each key
/// (saturating at 2: only 0, 1 and many matter); and the tables every task touches at its
/// own loop index.
fn summarize(
    log: &AccessLog,
    tables: &[TableInfo],
    candidates: &[usize],
    first_index: usize,
) -> (Vec<Vec<u8>>, Vec<bool>) {
    let parts = task_parts(log.tasks());
    let fresh = || -> Vec<Vec<u8>> {
        (0..tables.len())
            .map(|s| {
                if candidates.contains(&s) {
                    vec![0u8; tables[s].key_space]
                } else {
                    Vec::new()
                }
            })
            .collect()
    };
    let sums: Vec<(Vec<Vec<u8>>, SlotMask)> = parts
        .par_iter()
        .map(|range| {
            let mut touches = fresh();
            let mut at = SlotMask::ALL;
            log.for_each_in(range.clone(), |t, accesses| {
                for a in accesses {
                    if let Some(c) = touches[a.slot()].get_mut(a.key() as usize) {
                        *c = (*c + 1).min(2);
                    }
                }
                at.and(SlotMask::of_task(first_index, t, accesses));
            });
            (touches, at)
        })
        .collect();
    let mut total = fresh();
    let mut at = SlotMask::ALL;
    for (touches, a) in sums {
        at.and(a);
        for (tot, part) in total.iter_mut().zip(&touches) {
            for (c, d) in tot.iter_mut().zip(part) {
                *c = (*c + d).min(2);
            }
        }
    }
    (total, at.to_vec(tables.len(), log.tasks()))
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

/// A rotation schedule over the gathered tables (their blocks, cells and tags), tagging the
/// private checked tables by cell too; `members` (tables that follow a gathered one in its
/// dimension) are left to the caller. Returns each gathered table's block per key as well.
fn rotation(
    log: &AccessLog,
    modes: &[SlotMode],
    g: &Gathered,
    blocks: usize,
    members: &[usize],
    tags: &mut [Vec<u32>],
) -> (Schedule, PlanStats, Vec<Vec<u32>>) {
    let n = log.tasks();
    let row_slot = g.slots[0];
    let col_slot = g.slots.get(1).copied();
    let cols = if col_slot.is_some() { blocks } else { 1 };
    let block_of: Vec<Vec<u32>> = g
        .weights
        .iter()
        .map(|w| balanced_blocks(w, blocks))
        .collect();
    // A task free in a dimension (it touches none of its table's keys) runs in any of
    // its blocks: spread by task index, so free tasks keep the blocks' balance.
    let block = |b: &[u32], k: u32, t: usize, n: usize| -> u32 {
        match k {
            FREE => (t % n) as u32,
            k => b[k as usize],
        }
    };
    let cell_of = |k: &[u32; 2], t: usize| -> u32 {
        let r = block(&block_of[0], k[0], t, blocks);
        let c = block_of
            .get(1)
            .map_or(0, |b| block(b, k[1], t / blocks, cols));
        r * cols as u32 + c
    };

    // Tasks into cells, keeping loop order inside a cell: each part buckets its tasks,
    // then each cell joins its buckets in part order.
    let cell_count = blocks * cols;
    let buckets: Vec<Vec<Vec<u32>>> = g
        .keys
        .par_iter()
        .zip(&g.parts)
        .map(|(keys, range)| {
            let mut counts = vec![0usize; cell_count];
            for (t, k) in range.clone().zip(keys) {
                counts[cell_of(k, t) as usize] += 1;
            }
            let mut out: Vec<Vec<u32>> = counts.iter().map(|&c| Vec::with_capacity(c)).collect();
            for (t, k) in range.clone().zip(keys) {
                out[cell_of(k, t) as usize].push(t as u32);
            }
            out
        })
        .collect();
    let mut cells: Vec<Cell> = (0..cell_count)
        .into_par_iter()
        .map_init(KeyCounts::default, |counts, c| {
            let mut tasks = Vec::with_capacity(buckets.iter().map(|b| b[c].len()).sum());
            for b in &buckets {
                tasks.extend_from_slice(&b[c]);
            }
            counts.start(g.slots.len());
            for (p, b) in buckets.iter().enumerate() {
                let (keys, start) = (&g.keys[p], g.parts[p].start);
                for &t in &b[c] {
                    counts.add(&keys[t as usize - start]);
                }
            }
            let hottest = counts.most();
            Cell {
                row: (c / cols) as u32,
                col: (c % cols) as u32,
                tasks,
                hottest,
            }
        })
        .collect();
    drop(buckets);

    // Tags: rotated tables by block; private checked tables by the cell of their one task.
    for (i, &s) in g.slots.iter().enumerate() {
        for (k, (&w, &b)) in g.weights[i].iter().zip(&block_of[i]).enumerate() {
            if w > 0 {
                tags[s][k] = b;
            }
        }
    }
    let private: Vec<usize> = (0..modes.len())
        .filter(|&s| {
            modes[s] == SlotMode::Checked && !g.slots.contains(&s) && !members.contains(&s)
        })
        .collect();
    if !private.is_empty() {
        for (c, cell) in cells.iter().enumerate() {
            for &t in &cell.tasks {
                for a in log.task(t as usize) {
                    if private.contains(&a.slot()) {
                        tags[a.slot()][a.key() as usize] = c as u32;
                    }
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
        Schedule::Rotation(Box::new(Rotation {
            row_slot,
            col_slot,
            row_members: Vec::new(),
            col_members: Vec::new(),
            row_bounds: block_bounds(&block_of[0], blocks),
            col_bounds: block_of
                .get(1)
                .map(|b| block_bounds(b, cols))
                .unwrap_or_default(),
            row_windowed: vec![row_slot],
            col_windowed: col_slot.into_iter().collect(),
            window_only: Vec::new(),
            rows: blocks,
            cols,
            cells,
        })),
        stats,
        block_of,
    )
}

/// Counters of the keys of one cell's tasks, per rotated slot, reused from cell to cell
/// by one thread of the planner: the most tasks of the cell that share one key.
///
/// One pass over the cell's tasks for both slots, with counters stamped by the cell they
/// count in (a counter of another cell's reads as 0), so that no pass resets them and a
/// cell costs what its tasks cost, not what its blocks span. (Two passes per slot, one
/// to count and one to reset, made biased MF's planning 14 → 21 ms.)
#[derive(Default)]
struct KeyCounts {
    /// Per slot and key: the cell stamp in the high half, the count in the low half.
    counts: [Vec<u64>; 2],
    slots: usize,
    /// The running cell's stamp (from 1; 0 is no cell's).
    stamp: u64,
    most: u32,
}

impl KeyCounts {
    /// Starts counting a cell's tasks, with `slots` keys each.
    fn start(&mut self, slots: usize) {
        self.slots = slots.min(2);
        self.stamp += 1;
        self.most = 0;
    }

    /// Counts a task's keys.
    #[inline]
    fn add(&mut self, keys: &[u32; 2]) {
        for (counts, &k) in self.counts[..self.slots].iter_mut().zip(keys) {
            if k == FREE {
                continue;
            }
            let k = k as usize;
            if k >= counts.len() {
                counts.resize(k + 1, 0);
            }
            let c = &mut counts[k];
            let n = match *c >> 32 == self.stamp {
                true => (*c as u32) + 1,
                false => 1,
            };
            *c = self.stamp << 32 | u64::from(n);
            self.most = self.most.max(n);
        }
    }

    /// The most tasks counted since [`KeyCounts::start`] that share one key of a slot.
    fn most(&self) -> u32 {
        self.most
    }
}

/// The windowed tables of `rot` (`row_windowed`, `col_windowed`) whose every access in
/// `log` lies in the block of its task's cell: a cell's window then covers all the
/// accesses the plan allows it, and an access outside it is one the plan refuses. One
/// parallel pass over the cells' logs.
pub fn window_only(log: &AccessLog, rot: &Rotation) -> Vec<usize> {
    let windowed: Vec<(usize, &[usize], bool)> = rot
        .row_windowed
        .iter()
        .map(|&s| (s, &rot.row_bounds[..], true))
        .chain(
            rot.col_windowed
                .iter()
                .map(|&s| (s, &rot.col_bounds[..], false)),
        )
        .collect();
    let within = |bounds: &[usize], block: u32, key: u64| {
        let b = block as usize;
        match (bounds.get(b), bounds.get(b + 1)) {
            (Some(&lo), Some(&hi)) => (lo as u64..hi as u64).contains(&key),
            _ => false,
        }
    };
    let outside: Vec<bool> = rot
        .cells
        .par_iter()
        .map(|cell| {
            let mut outside = vec![false; windowed.len()];
            for &t in &cell.tasks {
                for a in log.task(t as usize) {
                    for (w, &(slot, bounds, by_row)) in windowed.iter().enumerate() {
                        let block = if by_row { cell.row } else { cell.col };
                        if a.slot() == slot && !within(bounds, block, a.key()) {
                            outside[w] = true;
                        }
                    }
                }
            }
            outside
        })
        .reduce(
            || vec![false; windowed.len()],
            |a, b| a.iter().zip(&b).map(|(x, y)| x | y).collect(),
        );
    windowed
        .iter()
        .zip(&outside)
        .filter(|(_, &out)| !out)
        .map(|(&(slot, _, _), _)| slot)
        .collect()
}

/// Where each of `blocks` blocks starts in a table whose keys' blocks (`block_of`) never
/// decrease, plus the end: block `b` holds keys `bounds[b]..bounds[b + 1]`.
fn block_bounds(block_of: &[u32], blocks: usize) -> Vec<usize> {
    let mut bounds = vec![block_of.len(); blocks + 1];
    for (k, &b) in block_of.iter().enumerate().rev() {
        bounds[b as usize] = k;
    }
    // Empty blocks start where the next one does.
    for b in (0..blocks).rev() {
        bounds[b] = bounds[b].min(bounds[b + 1]);
    }
    bounds
}

/// Most shared tables the planner tries to group into dimensions.
const MAX_DIMENSION_SLOTS: usize = 8;

/// Shared written tables grouped into one or two dimensions (see [`dimensions`]).
struct Dimensions {
    /// The shared tables, in the column order of `keys`.
    slots: Vec<usize>,
    /// Per task, its one key of each table of `slots` (row-major, `slots.len()` per task).
    keys: Vec<u32>,
    /// The dimensions: columns of `slots`, the representative first.
    groups: Vec<Vec<usize>>,
}

impl Dimensions {
    /// The table that represents each dimension in the rotation.
    fn representatives(&self) -> Vec<usize> {
        self.groups.iter().map(|g| self.slots[g[0]]).collect()
    }

    /// The tables that follow a representative.
    fn members(&self) -> Vec<usize> {
        self.groups
            .iter()
            .flat_map(|g| g[1..].iter().map(|&c| self.slots[c]))
            .collect()
    }

    /// The tables that follow representative `rep`.
    fn followers(&self, rep: usize) -> Vec<usize> {
        self.groups
            .iter()
            .find(|g| self.slots[g[0]] == rep)
            .map(|g| g[1..].iter().map(|&c| self.slots[c]).collect())
            .unwrap_or_default()
    }

    /// Whether every task touches the same key of tables `a` and `b`.
    fn keyed_alike(&self, a: usize, b: usize) -> bool {
        let col = |s: usize| {
            self.slots
                .iter()
                .position(|&x| x == s)
                .expect("shared slot")
        };
        let (a, b) = (col(a), col(b));
        self.keys
            .chunks_exact(self.slots.len())
            .all(|task| task[a] == task[b])
    }

    /// The rotation's input for the representatives `reps` (one or two), from the keys the
    /// dimensions were found by: the pass over the log that [`gather`] makes, made
    /// already. `at_index` is per table slot, as [`summarize`] found it.
    fn gathered(&self, reps: &[usize], tables: &[TableInfo], at_index: Vec<bool>) -> Gathered {
        let width = self.slots.len();
        let col = |s: usize| {
            self.slots
                .iter()
                .position(|&x| x == s)
                .expect("shared slot")
        };
        let cols: Vec<usize> = reps.iter().map(|&s| col(s)).collect();
        let tasks = self.keys.len() / width.max(1);
        let parts = task_parts(tasks);
        let mut weights: Vec<Vec<u32>> =
            reps.iter().map(|&s| vec![0; tables[s].key_space]).collect();
        let keys = parts
            .iter()
            .map(|range| {
                let rows = self.keys[range.start * width..range.end * width].chunks_exact(width);
                rows.map(|task| {
                    let mut k = [u32::MAX; 2];
                    for (i, &c) in cols.iter().enumerate() {
                        k[i] = task[c];
                        if let Some(w) = weights[i].get_mut(task[c] as usize) {
                            *w += 1;
                        }
                    }
                    k
                })
                .collect()
            })
            .collect();
        Gathered {
            slots: reps.to_vec(),
            parts,
            keys,
            weights,
            at_index,
            // Dimensions are found only where every task touches at most one key of each
            // shared table, below its length.
            valid: true,
        }
    }

    /// Tags each member's keys with the block of the key its dimension's representative
    /// has in the same task (`block_of`, per gathered table of `g`).
    fn tag_members(&self, g: &Gathered, block_of: &[Vec<u32>], tags: &mut [Vec<u32>]) {
        let width = self.slots.len();
        for group in &self.groups {
            let rep = self.slots[group[0]];
            let i = g
                .slots
                .iter()
                .position(|&s| s == rep)
                .expect("gathered representative");
            for &m in &group[1..] {
                let tag = &mut tags[self.slots[m]];
                // A member is free in a task exactly where its representative is (see
                // `one_to_one`), and a free key is no element to tag.
                for task in self.keys.chunks_exact(width).filter(|t| t[m] != FREE) {
                    tag[task[m] as usize] = block_of[i][task[group[0]] as usize];
                }
            }
        }
    }
}

/// Groups the `shared` written tables into at most two dimensions, if every task touches
/// exactly one key of each and, within a dimension, the keys of any two tables map one to
/// one across tasks (task `t` touches `p[u]` and `bu[u']` with `u ↦ u'` a bijection over the
/// keys touched: usually `u' = u`). Such tables conflict exactly when their representative
/// does, so rotating the representative's blocks keeps the plan conflict-free when the
/// others take their representative's tags. `ahead`: the tasks' keys as [`task_keys`]
/// gives them for the whole log, where a recorded run's chunks made them already.
fn dimensions(
    log: &AccessLog,
    tables: &[TableInfo],
    shared: &[usize],
    ahead: Option<Vec<u32>>,
) -> Option<Dimensions> {
    let width = shared.len();
    let keys = match ahead {
        Some(keys) => keys,
        None => {
            let parts = task_parts(log.tasks());
            let found: Vec<Option<Vec<u32>>> = parts
                .par_iter()
                .map(|range| task_keys(log, range.clone(), tables, shared))
                .collect();
            let mut keys = Vec::with_capacity(log.tasks() * width);
            for part in found {
                keys.extend(part?);
            }
            keys
        }
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for c in 0..width {
        let len = |c: usize| tables[shared[c]].key_space;
        match groups
            .iter()
            .position(|g| one_to_one(&keys, width, (g[0], len(g[0])), (c, len(c))))
        {
            Some(i) => groups[i].push(c),
            None if groups.len() < 2 => groups.push(vec![c]),
            None => return None,
        }
    }
    // Nothing to gain unless some dimension holds two tables (else the caller's own
    // check of one or two shared tables applies).
    groups.iter().any(|g| g.len() > 1).then(|| Dimensions {
        slots: shared.to_vec(),
        keys,
        groups,
    })
}

/// Tasks `range` of `log`, each as its one key of each table of `shared` (row-major,
/// `shared.len()` per task; [`FREE`] for a table the task does not touch); `None` if some
/// task touches two keys of one of them, or a key past 32 bits: then they are not
/// dimensions.
fn task_keys(
    log: &AccessLog,
    range: std::ops::Range<usize>,
    tables: &[TableInfo],
    shared: &[usize],
) -> Option<Vec<u32>> {
    let width = shared.len();
    // Per table slot, its column (`usize::MAX`: not shared), read once per access.
    let mut columns = vec![usize::MAX; tables.len()];
    for (c, &s) in shared.iter().enumerate() {
        columns[s] = c;
    }
    let column = |s: usize| columns.get(s).copied().filter(|&c| c != usize::MAX);
    let mut keys = vec![FREE; range.len() * width];
    let mut row = 0;
    let mut ok = true;
    log.for_each_in(range, |_, accesses| {
        let task = &mut keys[row * width..(row + 1) * width];
        for a in accesses {
            if let Some(c) = column(a.slot()) {
                ok &= task[c] == FREE && a.key() < u64::from(FREE);
                task[c] = a.key() as u32;
            }
        }
        row += 1;
    });
    ok.then_some(keys)
}

/// Whether, across the tasks of `keys` (rows of `width`), column `a`'s key and column
/// `b`'s key determine each other (keys below `len_a` and `len_b`, the tables' lengths),
/// and a task touches neither table or both ([`FREE`] in both columns or in neither).
fn one_to_one(
    keys: &[u32],
    width: usize,
    (a, len_a): (usize, usize),
    (b, len_b): (usize, usize),
) -> bool {
    let (mut fwd, mut bwd) = (vec![u32::MAX; len_a], vec![u32::MAX; len_b]);
    keys.chunks_exact(width).all(|task| {
        let (ka, kb) = (task[a], task[b]);
        if ka == FREE || kb == FREE {
            return ka == kb;
        }
        let (f, g) = (&mut fwd[ka as usize], &mut bwd[kb as usize]);
        if *f == u32::MAX && *g == u32::MAX {
            (*f, *g) = (kb, ka);
            true
        } else {
            *f == kb && *g == ka
        }
    })
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
///
/// The log is read in task order, not in the order given (a shuffle): the components
/// are the same either way, and a shuffled walk takes a cache miss per task (PageRank's
/// components planning, 500,000 tasks: 0.22 s of which most went to reading the log).
fn connected(
    log: &AccessLog,
    modes: &[SlotMode],
    order: &[u32],
    scratch: &mut Scratch,
) -> UnionFind {
    scratch.epoch += 1;
    let epoch = scratch.epoch;
    let mut in_log_order: Vec<(u32, u32)> = order
        .iter()
        .enumerate()
        .map(|(p, &t)| (t, p as u32))
        .collect();
    in_log_order.sort_unstable();
    for &(t, _) in &in_log_order {
        for a in log.task(t as usize) {
            if a.write() && modes[a.slot()] == SlotMode::Checked {
                scratch.keys[a.slot()][a.key() as usize].written = epoch;
            }
        }
    }
    let mut uf = UnionFind::new(order.len());
    for &(t, p) in &in_log_order {
        for a in log.task(t as usize) {
            let (s, k) = (a.slot(), a.key() as usize);
            if modes[s] != SlotMode::Checked {
                continue;
            }
            let key = &mut scratch.keys[s][k];
            if key.written != epoch {
                continue;
            }
            if key.seen != epoch {
                key.seen = epoch;
                key.first = p;
            } else {
                uf.union(p, key.first);
            }
        }
    }
    uf
}

/// Tasks in the largest component of `uf`.
fn largest_component(uf: &mut UnionFind) -> usize {
    let n = uf.0.len();
    let mut counts = vec![0u32; n];
    let mut largest = 0;
    for p in 0..n as u32 {
        let r = uf.find(p) as usize;
        counts[r] += 1;
        largest = largest.max(counts[r] as usize);
    }
    largest
}

struct Scratch {
    epoch: u32,
    /// Per slot and key: one array of all three marks, as a key's are read together.
    keys: Vec<Vec<KeyMarks>>,
}

/// What [`connected`] knows of a key in the current pass ([`Scratch::epoch`]).
#[derive(Clone, Copy, Default)]
struct KeyMarks {
    /// Some task of the pass writes it.
    written: u32,
    /// Some task of the pass touched it already: `first`, the first (by position).
    seen: u32,
    first: u32,
}

/// The tasks of a batch in which no two conflict, as `bins` runs of consecutive tasks:
/// they read their loop-indexed elements in memory order.
pub(super) fn consecutive_runs(chunk: &[u32], bins: usize) -> Vec<Vec<u32>> {
    let mut tasks: Vec<u32> = chunk.to_vec();
    tasks.sort_unstable();
    (0..bins)
        .map(|b| tasks[b * tasks.len() / bins..(b + 1) * tasks.len() / bins].to_vec())
        .filter(|g| !g.is_empty())
        .collect()
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
    let sizes: Vec<usize> = tags.iter().map(Vec::len).collect();
    let new_scratch = || Scratch {
        epoch: 0,
        keys: sizes
            .iter()
            .map(|&n| vec![KeyMarks::default(); n])
            .collect(),
    };
    let mut scratch = new_scratch();
    let threads = config.threads.max(1);

    // Batch size: the largest of n, n/2, n/4, ... (down to a floor) whose first batch's
    // largest component leaves room for every thread (at most half of one thread's
    // share). A prefix's largest component only grows with the prefix, so the sizes are
    // tried from the smallest up and the search stops at the first that fails: it reads
    // about twice the chosen batch, not the whole log several times over.
    let min_batch = (64 * threads).min(n.max(1));
    let mut candidates = vec![n.max(1)];
    // No checked table, no conflict: one batch of all tasks (what the search would find).
    let conflicts = modes.contains(&SlotMode::Checked);
    while conflicts && threads > 1 && *candidates.last().expect("one") > min_batch {
        let next = (candidates.last().expect("one") / 2).max(min_batch);
        candidates.push(next);
    }
    let mut size = *candidates.last().expect("one");
    let largest_in = |batch: &[u32], scratch: &mut Scratch| {
        largest_component(&mut connected(log, modes, batch, scratch))
    };
    for (tried, &candidate) in candidates.iter().rev().skip(1).enumerate() {
        let batch = &order[..candidate.min(n)];
        let largest = largest_in(batch, &mut scratch);
        if largest * 2 * threads > batch.len() {
            // The smallest batch tried is one component: if the last tasks of the order
            // are too, some key is written by (nearly) every task (a global bias, an
            // epoch counter), and no batch would hold two components worth running apart.
            // One group in loop order, rather than a pass over every batch to find that.
            if tried == 0 && largest == batch.len() {
                let tail = &order[n - batch.len()..];
                if key_in_every_task(log, modes, batch) && key_in_every_task(log, modes, tail) {
                    return one_group(log, modes, tags);
                }
            }
            // Even the smallest batch is mostly one component (tasks writing several
            // rows each, as a factorisation machine's do, join everything): pack tasks
            // onto bins one by one instead, deferring those that would join two.
            if tried == 0 {
                drop(scratch);
                return packing(log, modes, &order, threads, largest, tags);
            }
            break;
        }
        size = candidate;
    }

    let bins_per_batch = 4 * threads;
    let mut batches = Batches::new("components", n);
    // Batches are cut independently (in parallel, each worker with its own scratch) and
    // numbered in order afterwards, so the plan is the same however they were scheduled.
    drop(scratch);
    let cut: Vec<(Vec<Vec<u32>>, usize)> = order
        .par_chunks(size)
        .map_init(&new_scratch, |scratch, chunk| {
            if !conflicts {
                return (
                    consecutive_runs(chunk, bins_per_batch.min(chunk.len()).max(1)),
                    1,
                );
            }
            let mut uf = connected(log, modes, chunk, scratch);
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
            let largest = members.iter().map(Vec::len).max().unwrap_or(0);
            let bins = bins_per_batch.min(members.len()).max(1);
            if largest <= 1 {
                return (consecutive_runs(chunk, bins), largest);
            }
            // Largest-first onto the least-loaded bin (LPT).
            let mut load = vec![0usize; bins];
            let mut bin_members: Vec<Vec<u32>> = vec![Vec::new(); bins];
            for m in members {
                let b = (0..bins).min_by_key(|&b| load[b]).expect("bins > 0");
                load[b] += m.len();
                bin_members[b].extend(m);
            }
            let groups = bin_members
                .into_iter()
                .filter(|m| !m.is_empty())
                .map(|m| {
                    // In loop order within the group: the tasks' own elements are read in
                    // memory order, as the serial loop reads them.
                    let mut tasks: Vec<u32> = m.into_iter().map(|p| chunk[p as usize]).collect();
                    tasks.sort_unstable();
                    tasks
                })
                .collect();
            (groups, largest)
        })
        .collect();
    for (tasks, largest) in cut {
        batches.stats.largest_component = batches.stats.largest_component.max(largest);
        batches.push(tasks);
    }
    batches.finish(log, modes, tags)
}

/// The batches of a components or packing plan as they are made: groups numbered in
/// order across batches, and the plan's figures.
struct Batches {
    batches: Vec<Batch>,
    next_id: u32,
    stats: PlanStats,
}

impl Batches {
    fn new(strategy: &'static str, tasks: usize) -> Self {
        Batches {
            batches: Vec::new(),
            next_id: 0,
            stats: PlanStats {
                strategy,
                tasks,
                ..PlanStats::default()
            },
        }
    }

    /// Adds a batch of groups given as task lists (each in the order its tasks run),
    /// numbered in order and kept heaviest first.
    fn push(&mut self, task_lists: Vec<Vec<u32>>) {
        let mut groups: Vec<Group> = task_lists
            .into_iter()
            .map(|tasks| {
                let id = self.next_id;
                self.next_id += 1;
                Group { id, tasks }
            })
            .collect();
        groups.sort_by_key(|g| std::cmp::Reverse(g.tasks.len()));
        self.stats.groups += groups.len();
        self.stats.largest_group = self
            .stats
            .largest_group
            .max(groups.first().map_or(0, |g| g.tasks.len()));
        self.batches.push(Batch {
            groups,
            ranks: Vec::new(),
        });
    }

    /// The schedule and its figures, with the first batch's keys tagged.
    fn finish(
        mut self,
        log: &AccessLog,
        modes: &[SlotMode],
        tags: &mut [Vec<u32>],
    ) -> (Schedule, PlanStats) {
        self.stats.batches = self.batches.len();
        if let Some(first) = self.batches.first() {
            retag(log, modes, first, tags);
        }
        (Schedule::Components(self.batches), self.stats)
    }
}

/// Whether some written key of a checked table is touched by every one of `tasks`.
fn key_in_every_task(log: &AccessLog, modes: &[SlotMode], tasks: &[u32]) -> bool {
    let mut counts: std::collections::HashMap<(usize, u64), usize> = Default::default();
    for &t in tasks {
        let mut keys: Vec<(usize, u64)> = log
            .task(t as usize)
            .iter()
            .filter(|a| a.write() && modes[a.slot()] == SlotMode::Checked)
            .map(|a| (a.slot(), a.key()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            *counts.entry(k).or_default() += 1;
        }
    }
    counts.values().any(|&c| c == tasks.len())
}

/// What a packing batch knows of a key: the bin writing it, or the bin(s) reading it.
#[derive(Clone, Copy, Default)]
struct Packed {
    /// The batch (1-based) the marks are from; older marks mean "untouched".
    batch: u32,
    /// The bin writing the key, or [`Packed::NONE`].
    writer: u32,
    /// The bin reading it, [`Packed::NONE`], or [`Packed::MANY`] bins.
    reader: u32,
}

impl Packed {
    const NONE: u32 = u32::MAX;
    const MANY: u32 = u32::MAX - 1;
}

/// Components' fallback for tasks that touch many rows each (a factorisation machine,
/// SVD++): no batch is small enough to fall apart into components, as a task's rows link
/// it to most others. Tasks are taken in the shuffled order and packed onto `threads`
/// (at least 2) bins one by one: a task goes to the bin that already holds one of its
/// keys (the least-loaded bin if none does), unless its keys are held by two bins, or
/// the bin is ahead of the lightest by more than two tasks' work (on average): then it
/// waits for a later batch. A batch ends when its scan has deferred four tasks for each
/// it packed (plus 256). Bins of a batch share no key that either writes, so they may
/// run at once; each bin's tasks run in loop order. When the first [`FEW_BATCHES`] hold
/// under two tasks a bin, the plan is one group in loop order instead.
fn packing(
    log: &AccessLog,
    modes: &[SlotMode],
    order: &[u32],
    threads: usize,
    largest_component: usize,
    tags: &mut [Vec<u32>],
) -> (Schedule, PlanStats) {
    let n = log.tasks();
    let bins = threads.max(2);
    let slack = 2 * log.entries().max(1).div_ceil(n.max(1));
    let mut marks: Vec<Vec<Packed>> = tags
        .iter()
        .map(|t| vec![Packed::default(); t.len()])
        .collect();
    // The tasks not yet packed are `pending[head..]`, in the order they are offered. A
    // batch scans a prefix of them; the ones it defers are written back at the end of
    // that prefix, so a batch costs what it scans, not what is left (copying the rest
    // once a batch made a word2vec plan of 30,059 batches take 48 s instead of 2).
    let mut pending: Vec<u32> = order.to_vec();
    let mut head = 0usize;
    let mut deferred = Vec::new();
    let mut batches = Batches::new("packing", n);
    batches.stats.largest_component = largest_component;
    let mut batch_no = 0u32;
    let mut packed_so_far = 0usize;
    while head < pending.len() {
        batch_no += 1;
        let mut load = vec![0usize; bins];
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); bins];
        deferred.clear();
        let (mut packed, mut scanned) = (0usize, 0usize);
        for &t in &pending[head..] {
            if scanned > 4 * packed + 256 {
                break;
            }
            scanned += 1;
            let accesses = log.task(t as usize);
            let lightest = *load.iter().min().expect("bins > 0");
            match bin_for(accesses, modes, &marks, batch_no) {
                Some(forced) => {
                    let bin = forced
                        .unwrap_or_else(|| (0..bins).min_by_key(|&b| load[b]).expect("bins > 0"));
                    let w = accesses.len().max(1);
                    if load[bin] + w > lightest + slack && load[bin] > lightest {
                        deferred.push(t);
                        continue;
                    }
                    mark(accesses, modes, &mut marks, batch_no, bin as u32);
                    load[bin] += w;
                    members[bin].push(t);
                    packed += 1;
                }
                None => deferred.push(t),
            }
        }
        let start = head + scanned - deferred.len();
        pending[start..head + scanned].copy_from_slice(&deferred);
        head = start;
        members.retain(|m| !m.is_empty());
        members.iter_mut().for_each(|m| m.sort_unstable());
        batches.push(members);
        packed_so_far += packed;
        // The first batches are the fullest (the order is shuffled, and what is left gets
        // denser in conflicts): if they hold under two tasks a bin, every task is tied to
        // most others (a sampler's counts, read by every task and written by many), and
        // the rest would be thousands of batches of a task or two, each a barrier, found
        // by a scan of the pending tasks per batch (a new user's GSDMM: 28,376 batches in
        // 2.9 s, ten serial iterations, for a plan then run on one worker).
        if batch_no >= FEW_BATCHES && packed_so_far < 2 * bins * batch_no as usize {
            return one_group(log, modes, tags);
        }
    }
    batches.finish(log, modes, tags)
}

/// How many batches the packer makes before it judges whether packing pays.
const FEW_BATCHES: u32 = 16;

/// The bin a task must join given the keys packed so far in batch `batch`: `Some(Some(b))`
/// when one of its keys ties it to bin `b`, `Some(None)` when any bin will do, `None` when
/// its keys tie it to two bins.
fn bin_for(
    accesses: &[Access],
    modes: &[SlotMode],
    marks: &[Vec<Packed>],
    batch: u32,
) -> Option<Option<usize>> {
    let mut forced: Option<u32> = None;
    let mut force = |b: u32| match forced {
        None => {
            forced = Some(b);
            true
        }
        Some(f) => f == b,
    };
    for a in accesses {
        if modes[a.slot()] != SlotMode::Checked {
            continue;
        }
        let m = marks[a.slot()][a.key() as usize];
        if m.batch != batch {
            continue;
        }
        if m.writer != Packed::NONE && !force(m.writer) {
            return None;
        }
        if a.write() {
            if m.reader == Packed::MANY {
                return None;
            }
            if m.reader != Packed::NONE && !force(m.reader) {
                return None;
            }
        }
    }
    Some(forced.map(|b| b as usize))
}

/// Records a task's keys as packed onto `bin` in batch `batch`.
fn mark(accesses: &[Access], modes: &[SlotMode], marks: &mut [Vec<Packed>], batch: u32, bin: u32) {
    for a in accesses {
        if modes[a.slot()] != SlotMode::Checked {
            continue;
        }
        let m = &mut marks[a.slot()][a.key() as usize];
        if m.batch != batch {
            *m = Packed {
                batch,
                writer: Packed::NONE,
                reader: Packed::NONE,
            };
        }
        if a.write() {
            m.writer = bin;
        } else if m.reader == Packed::NONE || m.reader == bin {
            m.reader = bin;
        } else {
            m.reader = Packed::MANY;
        }
    }
}

/// A components plan of one batch of one group, every task in loop order: for a loop whose
/// tasks all conflict.
fn one_group(log: &AccessLog, modes: &[SlotMode], tags: &mut [Vec<u32>]) -> (Schedule, PlanStats) {
    let n = log.tasks();
    let mut batches = Batches::new("components", n);
    // As far as the two batches sampled tell: the planner did not look further.
    batches.stats.largest_component = n;
    batches.push(vec![(0..n as u32).collect()]);
    batches.finish(log, modes, tags)
}

/// Tags the keys `batch` (of a components schedule) touches for the batch, on this thread
/// (see [`retag_group`]).
pub(crate) fn retag(log: &AccessLog, modes: &[SlotMode], batch: &Batch, tags: &mut [Vec<u32>]) {
    let tags = atomic_tags(tags);
    for g in &batch.groups {
        retag_group(log, modes, g, &tags);
    }
}

/// Tags the keys `group` (of a batch of a components schedule) touches for its batch: the
/// keys it writes with its id, those it only reads [`SHARED`]. The groups of one batch may
/// do this at once on several threads: a key one group writes, no other group of the
/// batch touches, and a key several read, each stores the same `SHARED`.
pub(crate) fn retag_group(
    log: &AccessLog,
    modes: &[SlotMode],
    group: &Group,
    tags: &[&[AtomicU32]],
) {
    for &t in &group.tasks {
        for a in log.task(t as usize) {
            if modes[a.slot()] != SlotMode::Checked {
                continue;
            }
            let tag = &tags[a.slot()][a.key() as usize];
            if a.write() {
                tag.store(group.id, Ordering::Relaxed);
            } else if tag.load(Ordering::Relaxed) != group.id {
                // Not written by this group earlier in its tasks (only this group may
                // have stored its id since the batch began).
                tag.store(SHARED, Ordering::Relaxed);
            }
        }
    }
}

/// A plan's tags (per slot) as atomics, for groups that re-tag at once on several threads
/// ([`retag_group`]).
pub(crate) fn atomic_tags(tags: &mut [Vec<u32>]) -> Vec<&[AtomicU32]> {
    tags.iter_mut()
        .map(|t| {
            let t: *mut [u32] = t.as_mut_slice();
            // SAFETY: `AtomicU32` has the size and alignment of `u32` (its documentation
            // says so), and the unique borrow of the tags keeps every non-atomic access
            // out while the atomic view lives.
            unsafe { &*(t as *const [AtomicU32]) }
        })
        .collect()
}

impl Schedule {
    /// The tag a group may access in a slot: its row or column block for rotated tables,
    /// its cell or group index otherwise.
    pub fn allowed(&self, slot: usize, group: GroupRef) -> u32 {
        match (self, group) {
            (Schedule::Rotation(r), GroupRef::Cell(c)) => {
                let cell = &r.cells[c];
                if slot == r.row_slot || r.row_members.contains(&slot) {
                    cell.row
                } else if Some(slot) == r.col_slot || r.col_members.contains(&slot) {
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

    /// Drops the access log where running the plan does not read it (all but a components
    /// plan of several batches, which re-tags each batch from it): a kept plan's largest
    /// part, some 30 bytes a task, and nothing else needs it once the plan is made and, across
    /// ranks, cut into steps with every table's transfers.
    pub fn drop_log(&mut self) {
        if !matches!(&self.schedule, Schedule::Components(b) if b.len() > 1) {
            self.log = AccessLog::new();
        }
    }
}

impl Schedule {
    /// The keys of `slot` that `group` holds alone while it runs, if they form one range:
    /// a rotation cell's row (or column) block of the rotated tables and of the tables
    /// keyed exactly like them. Every key of the range that reconnaissance saw touched is
    /// tagged with the block; the others no task touched, so no other group may touch
    /// them either while the cell runs. (In a world of one only: across ranks a key no
    /// task touched may not have been fetched.)
    pub fn window(&self, slot: usize, group: GroupRef) -> std::ops::Range<usize> {
        match (self, group) {
            (Schedule::Rotation(r), GroupRef::Cell(c)) => {
                let cell = &r.cells[c];
                let (bounds, block) = if r.row_windowed.contains(&slot) {
                    (&r.row_bounds, cell.row as usize)
                } else if r.col_windowed.contains(&slot) {
                    (&r.col_bounds, cell.col as usize)
                } else {
                    return 0..0;
                };
                match (bounds.get(block), bounds.get(block + 1)) {
                    (Some(&lo), Some(&hi)) => lo..hi,
                    _ => 0..0,
                }
            }
            _ => 0..0,
        }
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
