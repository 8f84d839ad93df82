//! What a rank keeps of its loop calls between calls: plans, locking runs' table modes,
//! how fast calls ran on all workers and on one, which tables serial runs write, and
//! `sync_for!`'s reconnaissance logs.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use super::choose::Pace;
use super::{CallSite, Opts, Registry};
use crate::plan::{DistPlan, Plan, Rotation, SlotMode};
use crate::recon::AccessLog;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PlanKey {
    site: usize,
    /// The call site's file and line (see [`cached_plans`]).
    at: (&'static str, u32),
    start: usize,
    end: usize,
    threads: usize,
    blocks: Option<usize>,
    tables: Vec<(u64, u64)>,
}

impl PlanKey {
    /// The key of a loop call: call site, index range, workers, blocks, and the captured
    /// tables with their shapes.
    pub fn new(
        site: &CallSite,
        range: Range<usize>,
        threads: usize,
        opts: &Opts,
        registry: &Registry,
    ) -> Self {
        PlanKey {
            site: site as *const CallSite as usize,
            at: (site.file, site.line),
            start: range.start,
            end: range.end,
            threads,
            blocks: opts.blocks,
            tables: registry
                .entries
                .iter()
                .map(|e| (e.table.id(), e.table.shape()))
                .collect(),
        }
    }
}

impl PlanKey {
    /// The call site's address.
    pub fn site(&self) -> usize {
        self.site
    }

    /// Whether this call differs from `last` (the call site's previous call) only in that
    /// some captured tables are DDSs made since, of the same shapes: a table made afresh
    /// for every call (this epoch's samples), whose plan cannot serve the next call.
    /// Tables that only trade places (two buffers swapped every call) are not new: each
    /// arrangement keeps its own plan.
    pub fn renews(&self, last: &PlanKey) -> bool {
        // Table ids grow: a DDS made after the last call has a larger id than all of its.
        let newest_then = last.tables.iter().map(|t| t.0).max().unwrap_or(0);
        self.site == last.site
            && (self.start, self.end, self.threads, self.blocks)
                == (last.start, last.end, last.threads, last.blocks)
            && self.tables.len() == last.tables.len()
            && self
                .tables
                .iter()
                .zip(&last.tables)
                .all(|(a, b)| a.1 == b.1)
            && self.tables.iter().any(|t| t.0 > newest_then)
    }

    /// The key without the tables' identities: the loop's role, the same for every call
    /// whose tables are made afresh with the same shapes.
    pub fn role(&self) -> PlanKey {
        PlanKey {
            tables: self.tables.iter().map(|&(_, shape)| (0, shape)).collect(),
            ..self.clone()
        }
    }
}

/// A cached plan and, across ranks, its cutting into steps.
pub(crate) struct Cached {
    pub plan: Plan,
    pub dist: Option<DistPlan>,
}

/// Plans (or locking runs' table modes) kept per call site and rank: the most recently
/// used. A call site run over ever-changing index ranges would otherwise keep a plan, and
/// its access log, for every range it ever saw.
pub const KEPT_PER_SITE: usize = 8;

/// Values kept per loop call between calls: plans, and locking runs' table modes; at
/// most [`KEPT_PER_SITE`] per call site, the least recently used going first.
pub(crate) struct Cache<V> {
    /// Each value with the clock reading of its last use.
    entries: DashMap<PlanKey, (u64, V)>,
    clock: AtomicU64,
}

impl<V> Default for Cache<V> {
    fn default() -> Self {
        Cache {
            entries: DashMap::new(),
            clock: AtomicU64::new(0),
        }
    }
}

impl<V> Cache<V> {
    /// Whether a value is kept for `key`.
    pub fn contains(&self, key: &PlanKey) -> bool {
        self.entries.contains_key(key)
    }

    /// A copy of the value kept for `key`, if any.
    pub fn get(&self, key: &PlanKey) -> Option<V>
    where
        V: Clone,
    {
        self.entries.get(key).map(|e| e.value().1.clone())
    }

    pub fn take(&self, key: &PlanKey) -> Option<V> {
        self.entries.remove(key).map(|(_, (_, v))| v)
    }

    /// Keeps `value` for `key`, dropping the least recently used value of the same call
    /// site if there are more than [`KEPT_PER_SITE`].
    pub fn put(&self, key: PlanKey, value: V) {
        let used = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let site = key.site;
        self.entries.insert(key, (used, value));
        let mut same = 0;
        let mut oldest: Option<(u64, PlanKey)> = None;
        for e in self.entries.iter().filter(|e| e.key().site == site) {
            same += 1;
            if oldest.as_ref().is_none_or(|(u, _)| e.value().0 < *u) {
                oldest = Some((e.value().0, e.key().clone()));
            }
        }
        if let Some((_, k)) = oldest.filter(|_| same > KEPT_PER_SITE) {
            self.entries.remove(&k);
        }
    }

    /// How many values are kept for the call site at `file:line`.
    fn count_at(&self, file: &str, line: u32) -> usize {
        self.entries
            .iter()
            .filter(|e| e.key().at.0 == file && e.key().at.1 == line)
            .count()
    }
}

/// What a rank keeps of its `async_for!` calls between calls.
#[derive(Default)]
pub(crate) struct Kept {
    pub plans: Cache<Cached>,
    /// Table modes of locking runs, and the rotations their tasks are placed by.
    pub modes: Cache<Locking>,
    /// How fast calls ran on all workers and on one ([`crate::Fallback::Measure`]).
    pub pace: Cache<Pace>,
    /// Which tables a loop run serially writes, by [`TablesKey`].
    pub serial_written: DashMap<TablesKey, Vec<bool>>,
    /// `sync_for!`'s reconnaissance logs (with `Opts::re`), one task per mini-batch, by
    /// [`TablesKey`] (the data's length and the mini-batch size as the range).
    pub sync_logs: DashMap<TablesKey, Arc<AccessLog>>,
    /// Per `async_for!` call site (its address): the key of its last call, to notice
    /// tables made afresh for every call (see [`PlanKey::renews`]).
    pub last_keys: DashMap<usize, PlanKey>,
    /// Per `async_for!` call site (its address): the plan a recorded first call left
    /// being made on a spare thread, at most one.
    pub pending: DashMap<usize, Pending>,
}

/// What a locking run keeps for its site's next call.
pub(crate) struct Locking {
    /// How the run treats each table.
    pub modes: Vec<SlotMode>,
    /// The rotation a reconnaissance of the loop gave (see [`crate::plan::rotation_of`]),
    /// by whose cells workers take its tasks; `None` where it gave components, and the
    /// workers take chunks of consecutive tasks.
    pub placement: Option<Arc<Rotation>>,
    /// The runs' lock words and stamps.
    pub buffers: super::async_for::locking::Buffers,
}

/// A plan being made on a spare thread (see `async_for::planned::plan_aside`), for the
/// calls with key `key`; until it is made, they run in loop order on one worker, by the
/// table modes the recorded run's log gave.
pub(crate) struct Pending {
    pub key: PlanKey,
    pub modes: Vec<SlotMode>,
    /// Sends the plan once made; disconnected if the planner failed.
    pub made: crate::sync::Mutex<std::sync::mpsc::Receiver<Made>>,
    /// The plan, once [`wait_for_plans`] received it.
    pub ready: Option<Made>,
    /// How long a call waits for the plan before it runs in loop order instead.
    pub patience: std::time::Duration,
}

/// Waits until the plans that loops of this thread's rank are having made on a spare
/// thread are made, so that each loop's next call runs its plan (see
/// [`Fallback::Measure`](crate::Fallback)).
///
/// After its first call, a loop on two workers in a world of one runs in loop order on
/// one worker while its plan is made beside it, and runs the plan from the first call
/// after it is made: which call that is depends on timings. Tests and benchmarks that
/// must know call this between the first call and the next.
///
/// ```
/// use strads_ap_runtime::engine::wait_for_plans;
/// wait_for_plans(); // nothing is being planned: returns at once
/// ```
pub fn wait_for_plans() {
    let kept = kept();
    let sites: Vec<usize> = kept.pending.iter().map(|e| *e.key()).collect();
    for site in sites {
        // Taken out while waiting, so that no other thread of the rank waits on the map.
        let Some((_, mut pending)) = kept.pending.remove(&site) else {
            continue;
        };
        if pending.ready.is_none() {
            // A planner that failed sent nothing: the call plans again.
            pending.ready = pending.made.lock().recv().ok();
        }
        kept.pending.insert(site, pending);
    }
}

/// A plan made from an access log, with what the diagnoses make of it and how long the
/// planner took.
pub(crate) struct Made {
    pub plan: Plan,
    pub shape: Option<super::diagnose::PlanShape>,
    pub took: std::time::Duration,
}

impl Kept {
    /// Whether a plan for `key` is kept or being made.
    pub fn has_plan(&self, key: &PlanKey) -> bool {
        self.plans.contains(key) || self.pending.get(&key.site).is_some_and(|p| p.key == *key)
    }
}

/// A loop call by call site, captured tables with their shapes, and two numbers that
/// stand for its range.
pub(crate) type TablesKey = (usize, Vec<(u64, u64)>, usize, usize);

/// What this thread's rank keeps of its loop calls between calls.
pub(crate) fn kept() -> Arc<Kept> {
    crate::cluster::here().local::<Kept>()
}

/// How many plans (and locking runs' table modes) this thread's rank keeps for the
/// `async_for!` call at `file:line`: at most [`KEPT_PER_SITE`].
///
/// ```
/// assert_eq!(strads_ap_runtime::engine::cached_plans("nowhere.rs", 1), 0);
/// ```
pub fn cached_plans(file: &str, line: u32) -> usize {
    let kept = kept();
    kept.plans.count_at(file, line) + kept.modes.count_at(file, line)
}

/// What a finished call leaves for the next (see [`super::pipeline::Ran`]).
pub(crate) enum Keep {
    /// A plan (and its cutting across ranks) for the next call with this key.
    Plan(PlanKey, Box<Cached>),
    /// A locking run's table modes and placement.
    Modes(PlanKey, Locking),
    /// `sync_for!`'s reconnaissance log, which a body just contradicted: learn again.
    ForgetSyncLog(TablesKey),
}

impl Keep {
    /// Keeps (or forgets) it in this thread's rank.
    pub fn apply(self) {
        let kept = kept();
        match self {
            Keep::Plan(key, cached) => kept.plans.put(key, *cached),
            Keep::Modes(key, modes) => kept.modes.put(key, modes),
            Keep::ForgetSyncLog(key) => {
                kept.sync_logs.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tables: &[(u64, u64)]) -> PlanKey {
        PlanKey {
            site: 1,
            at: ("a.rs", 1),
            start: 0,
            end: 100,
            threads: 2,
            blocks: None,
            tables: tables.to_vec(),
        }
    }

    #[test]
    fn only_tables_made_since_the_last_call_renew_it() {
        let last = key(&[(3, 10), (4, 10), (5, 7)]);
        // A DDS made since the last call, in place of one of the same shape.
        assert!(key(&[(3, 10), (9, 10), (5, 7)]).renews(&last));
        // The same tables, or two of them trading places: not new.
        assert!(!key(&[(3, 10), (4, 10), (5, 7)]).renews(&last));
        assert!(!key(&[(4, 10), (3, 10), (5, 7)]).renews(&last));
        // Another shape, range or table count: another loop as far as plans go.
        assert!(!key(&[(3, 10), (9, 11), (5, 7)]).renews(&last));
        assert!(!key(&[(3, 10), (9, 10)]).renews(&last));
        let mut other_range = key(&[(3, 10), (9, 10), (5, 7)]);
        other_range.end = 50;
        assert!(!other_range.renews(&last));
        // The role forgets which DDSs they were.
        assert_eq!(
            key(&[(3, 10), (9, 10), (5, 7)]).role(),
            key(&[(0, 10), (0, 10), (0, 7)])
        );
    }
}
