//! Diagnoses: when a loop does not scale, say why and what to change, once per call site
//! and finding, on stderr and in [`LoopStats::diagnoses`](super::LoopStats::diagnoses).
//!
//! Six findings, each from figures the engine has anyway:
//!
//! * [`Finding::IdleWorkers`]: the plan cannot keep the workers busy (its longest chain of
//!   groups that must run one after another holds most of the tasks). The planner looks at
//!   the access log once per plan, and only then, for the hottest written keys, tables
//!   read where others write, and tables keyed alike.
//! * [`Finding::FixedCosts`]: the plan is parallel enough, yet the workers spend under
//!   [`BUSY_SHARE`] of each call in loop bodies: the call's fixed costs (starting workers,
//!   synchronising steps, locking and tagging tables) outweigh its work.
//! * [`Finding::AlwaysFirstCall`]: every call of the loop was a first call (its tables are
//!   new each time, or its index range changes), so each pays reconnaissance and planning.
//! * [`Finding::MergeBound`]: a `sync_for!` (or relaxed tables) spends over
//!   [`MERGE_SHARE`] of the workers' time merging replicas.
//! * [`Finding::OneWorker`]: the loop ran faster on one worker than on all of them, so
//!   it runs on one (see [`Fallback`](crate::Fallback)); the message says why the
//!   workers did not pay, from the plan's shape and the workers' busy time.
//! * [`Finding::PlanPending`]: the plan of a recorded first call, made on a spare thread,
//!   was still not ready after [`PENDING_CALLS`] calls, each run in loop order on one
//!   worker meanwhile; or the job ended ([`crate::finish`]) before a call ran it.
//!
//! `STRADS_DIAGNOSE=0` keeps them off stderr (they are still in the loop figures).
//! `STRADS_DIAGNOSE_BUSY=SHARE` (read at the first diagnosis) replaces [`BUSY_SHARE`]: `1` reports the fixed costs of
//! every loop that ran twice, with the planner's reason for its plan, which is how to ask
//! "why is this loop a components plan?" on a machine where it happens to be fast enough.

use std::fmt::Write as _;

use super::machine::Usage;
use super::registry::{Registered, Registry};
use super::stats::{Figures, LoopStats, OneWorker};
use super::{CallSite, LoopKind};
use crate::plan::{Plan, Schedule, SlotMode, TableInfo};
use crate::recon::{Access, AccessLog};

/// Below this share of the workers' time spent in loop bodies, a call's fixed costs are
/// diagnosed.
pub const BUSY_SHARE: f64 = 0.8;
/// Above this share of the workers' time spent merging replicas, merges are diagnosed.
pub const MERGE_SHARE: f64 = 0.3;
/// A plan whose parallelism (tasks over its longest chain of groups run one after
/// another) is below this share of the workers leaves workers idle.
pub const IDLE_PARALLELISM: f64 = 0.75;
/// A written key is *hot* when at least this share of the tasks write it.
pub const HOT_SHARE: f64 = 0.1;

/// Bytes the parts of a log's look (see `look_at_log`) may take for their writer counts
/// together: more parts than fit run as fewer.
const LOOK_MEMORY: usize = 64 << 20;

/// Calls after which a loop whose every call was a first call is diagnosed.
pub const FIRST_CALLS: u64 = 3;

/// Calls run in loop order while the loop's plan was made on a spare thread, after which
/// the wait is diagnosed.
pub const PENDING_CALLS: u64 = 5;

/// What a diagnosis found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Finding {
    /// The plan leaves workers idle: fewer independent groups than workers, or one
    /// connected component of conflicting tasks holds most of them.
    IdleWorkers,
    /// The workers spend most of each call outside loop bodies.
    FixedCosts,
    /// Every call of the loop was a first call (reconnaissance and planning each time).
    AlwaysFirstCall,
    /// Merging replicas takes a large share of the workers' time.
    MergeBound,
    /// The loop runs on one worker, which was measured faster than all of them (see
    /// [`Fallback`](crate::Fallback)).
    OneWorker,
    /// The loop's plan, made on a spare thread, was not ready after several calls, each
    /// run in loop order on one worker meanwhile.
    PlanPending,
}

impl Finding {
    /// A short name: `idle-workers`, `fixed-costs`, `always-first-call`, `merge-bound`,
    /// `one-worker`, `plan-pending`.
    pub fn name(self) -> &'static str {
        match self {
            Finding::IdleWorkers => "idle-workers",
            Finding::FixedCosts => "fixed-costs",
            Finding::AlwaysFirstCall => "always-first-call",
            Finding::MergeBound => "merge-bound",
            Finding::OneWorker => "one-worker",
            Finding::PlanPending => "plan-pending",
        }
    }

    /// Whether the finding rests on timings (which a busy machine moves), not on the
    /// plan's shape or the loop's calls alone.
    fn is_timed(self) -> bool {
        matches!(
            self,
            Finding::FixedCosts | Finding::MergeBound | Finding::OneWorker
        )
    }
}

/// A written key that many tasks write.
#[derive(Clone, Debug, PartialEq)]
pub struct HotKey {
    /// The captured variable of the table.
    pub table: String,
    /// The key as the body indexes it: `[3]` for a DVector, `["the"]` for a map.
    pub key: String,
    /// The share of the call's tasks that write it.
    pub share: f64,
}

/// Why a loop does not scale, and what to change.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    /// What was found.
    pub finding: Finding,
    /// The captured variables of the tables concerned.
    pub tables: Vec<String>,
    /// The hottest written keys, hottest first ([`Finding::IdleWorkers`] only).
    pub hot_keys: Vec<HotKey>,
    /// What to change, in a sentence or two.
    pub fix: String,
    /// The whole message, as printed on stderr.
    pub message: String,
    /// For a finding made from timings: the cores other processes kept busy on average
    /// since the loop's first call, where they shaped the figures (the loop's threads
    /// waited for cores meanwhile); the message then says so. `None` on a machine that
    /// let the workers run, or where it cannot be read (Linux's `/proc` figures).
    pub others_busy: Option<f64>,
}

/// What the planner's look at a plan found, with slots and raw keys (tables are named and
/// keys described once the call has released its tables).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PlanShape {
    pub strategy: &'static str,
    pub tasks: usize,
    pub workers: usize,
    /// Tasks over the longest chain of groups that run one after another.
    pub parallelism: f64,
    /// Whether that leaves workers idle.
    pub idle: bool,
    /// Steps of groups per call (batches of a components plan).
    pub batches: usize,
    /// Slots whose conflicts shaped the plan.
    pub conflicting: Vec<usize>,
    /// (slot, key, tasks writing it), hottest first, at most 5.
    pub hot: Vec<(usize, u64, usize)>,
    /// Per conflicting slot: tasks that read a key some other task writes.
    pub readers_of_written: Vec<(usize, usize)>,
    /// Conflicting slots with a key that two tasks or more write.
    pub shared_written: Vec<usize>,
    /// The slots of `readers_of_written`, where relaxing them would let the rest of the
    /// loop rotate (a what-if plan of the same log); empty otherwise.
    pub rotates_if_relaxed: Vec<usize>,
}

/// The plan's shape when it leaves workers idle or is a components plan (whose batches
/// cost a synchronisation each), `None` otherwise or with one worker.
pub(crate) fn plan_shape(plan: &Plan, tables: &[TableInfo], workers: usize) -> Option<PlanShape> {
    let tasks = plan.stats.tasks;
    if workers < 2 || tasks == 0 {
        return None;
    }
    let chain = longest_chain(&plan.schedule).max(1);
    let parallelism = tasks as f64 / chain as f64;
    let idle = parallelism < IDLE_PARALLELISM * workers as f64;
    if !idle && !matches!(plan.stats.strategy, "components" | "packing") {
        return None;
    }
    let conflicting: Vec<usize> = (0..plan.modes.len())
        .filter(|&s| plan.modes[s] == SlotMode::Checked)
        .collect();
    let (hot, readers_of_written, shared_written) = look_at_log(&plan.log, tables, &conflicting);
    // Would the loop rotate without the tables tasks read where others write? (A new
    // user's neighbourhood recommender read its neighbours' item biases `bi`: the
    // diagnosis told it to relax every shared table, where `bi` alone was enough.)
    let mut rotates_if_relaxed: Vec<usize> = readers_of_written.iter().map(|r| r.0).collect();
    if plan.stats.strategy != "rotation" && !rotates_if_relaxed.is_empty() {
        let mut what_if = tables.to_vec();
        for &s in &rotates_if_relaxed {
            what_if[s].relaxed = true;
        }
        if !crate::plan::would_rotate(&plan.log, &what_if) {
            rotates_if_relaxed.clear();
        }
    } else {
        rotates_if_relaxed.clear();
    }
    Some(PlanShape {
        strategy: plan.stats.strategy,
        tasks,
        workers,
        parallelism,
        idle,
        batches: plan.stats.batches,
        conflicting,
        hot,
        readers_of_written,
        shared_written,
        rotates_if_relaxed,
    })
}

/// Tasks in the longest chain of groups that must run one after another: per batch of a
/// components plan its largest group; for a rotation, the busiest row or column block.
fn longest_chain(schedule: &Schedule) -> usize {
    match schedule {
        Schedule::Components(batches) => batches
            .iter()
            .map(|b| b.groups.iter().map(|g| g.tasks.len()).max().unwrap_or(0))
            .sum(),
        Schedule::Rotation(rot) => {
            let mut rows = vec![0usize; rot.rows];
            let mut cols = vec![0usize; rot.cols];
            for c in &rot.cells {
                rows[c.row as usize] += c.tasks.len();
                cols[c.col as usize] += c.tasks.len();
            }
            let row = rows.into_iter().max().unwrap_or(0);
            let col = match rot.cols {
                1 => 0,
                _ => cols.into_iter().max().unwrap_or(0),
            };
            row.max(col)
        }
    }
}

type LogLook = (Vec<(usize, u64, usize)>, Vec<(usize, usize)>, Vec<usize>);

/// Two passes over the log: the hottest written keys, tasks reading keys others write,
/// and the slots with a key several tasks write. (Tables keyed alike need no advice: the
/// planner rotates them as one dimension.) It runs at a first call that diagnoses a plan, so it allocates nothing per task and
/// looks a slot up in an array: with a per-task `Vec` kept for the second pass and a hash
/// map of slots it cost FM's first call about a third of a serial epoch. Each pass runs
/// in parts on the calling rayon pool's threads (the workers are idle between a first
/// call's planning and its end), each part counting writers in arrays of its own, as
/// many parts as their arrays fit in [`LOOK_MEMORY`].
fn look_at_log(log: &AccessLog, tables: &[TableInfo], slots: &[usize]) -> LogLook {
    use rayon::prelude::*;
    // Position in `slots` of each slot, if it is one of them.
    let mut index: Vec<Option<usize>> = vec![None; slots.iter().max().map_or(0, |&s| s + 1)];
    for (i, &s) in slots.iter().enumerate() {
        index[s] = Some(i);
    }
    // A task's accesses to `slots`, as (slot position, key, written), with repeated
    // accesses to one element (adjacent in a settled log) made one, written if any was.
    let mine = |accesses: &[Access], out: &mut Vec<(usize, u64, bool)>| {
        out.clear();
        for a in accesses {
            let Some(i) = index.get(a.slot()).copied().flatten() else {
                continue;
            };
            match out.last_mut() {
                Some(last) if last.0 == i && last.1 == a.key() => last.2 |= a.write(),
                _ => out.push((i, a.key(), a.write())),
            }
        }
    };
    let tasks = log.tasks();
    let keys: usize = slots.iter().map(|&s| tables[s].key_space).sum();
    let parts = rayon::current_num_threads()
        .min(LOOK_MEMORY / (keys * 4).max(1))
        .min(tasks / 1024)
        .max(1);
    let ranges: Vec<std::ops::Range<usize>> = (0..parts)
        .map(|p| tasks * p / parts..tasks * (p + 1) / parts)
        .collect();
    let no_writers = || -> Vec<Vec<u32>> {
        slots
            .iter()
            .map(|&s| vec![0; tables[s].key_space])
            .collect()
    };
    let writers = ranges
        .par_iter()
        .map(|range| {
            let mut writers = no_writers();
            let mut buf = Vec::new();
            log.for_each_in(range.clone(), |_, accesses| {
                mine(accesses, &mut buf);
                for &(i, key, written) in &buf {
                    if written {
                        if let Some(c) = writers[i].get_mut(key as usize) {
                            *c += 1;
                        }
                    }
                }
            });
            writers
        })
        .reduce_with(|mut a, b| {
            for (a, b) in a.iter_mut().zip(b) {
                a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
            }
            a
        })
        .unwrap_or_else(no_writers);
    let readers = ranges
        .par_iter()
        .map(|range| {
            let mut readers = vec![0usize; slots.len()];
            let mut seen = vec![false; slots.len()];
            let mut buf = Vec::new();
            log.for_each_in(range.clone(), |_, accesses| {
                mine(accesses, &mut buf);
                seen.fill(false);
                for &(i, key, written) in &buf {
                    let others = writers[i]
                        .get(key as usize)
                        .map_or(0, |&c| c - u32::from(written));
                    if !written && others > 0 && !seen[i] {
                        readers[i] += 1;
                        seen[i] = true;
                    }
                }
            });
            readers
        })
        .reduce(
            || vec![0usize; slots.len()],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                a
            },
        );
    let mut hot: Vec<(usize, u64, usize)> = Vec::new();
    for (i, counts) in writers.iter().enumerate() {
        for (key, &c) in counts.iter().enumerate() {
            if c as f64 >= HOT_SHARE * tasks as f64 && c > 1 {
                hot.push((slots[i], key as u64, c as usize));
            }
        }
    }
    hot.sort_by_key(|h| std::cmp::Reverse(h.2));
    hot.truncate(5);
    let shared_written = writers
        .iter()
        .enumerate()
        .filter(|(_, counts)| counts.iter().any(|&c| c > 1))
        .map(|(i, _)| slots[i])
        .collect();
    let readers_of_written = readers
        .iter()
        .enumerate()
        .filter(|(_, &r)| r > 0)
        .map(|(i, &r)| (slots[i], r))
        .collect();
    (hot, readers_of_written, shared_written)
}

/// What the diagnoses remember of a call site between calls.
#[derive(Clone, Debug, Default)]
struct SiteMemory {
    /// The captured tables of the last call: (name, id).
    tables: Vec<(&'static str, u64)>,
    /// Its index range.
    range: Option<(usize, usize)>,
    /// Calls so far, and how many were first calls.
    calls: u64,
    first_calls: u64,
    /// Names of tables that were new at a first call after the first.
    renewed: Vec<&'static str>,
    /// Calls with tables made afresh ran with element locks (see `Figures::renewed`).
    locked_instead: bool,
    range_changed: bool,
    /// Workers' time in bodies and in calls, over ordinary planned calls after the first
    /// (which wakes the pool's threads, faults in pages and fills caches: on a 0.2 ms
    /// Ising sweep it took twice a steady call, enough to advise one worker where two
    /// were faster).
    busy: f64,
    worker_secs: f64,
    ordinary: u64,
    /// Ordinary calls counted in `busy` and `worker_secs`.
    timed: u64,
    /// The fastest call run in loop order on one worker while the plan was made (its
    /// seconds), the one-worker way measured.
    in_order: Option<f64>,
    /// Calls run in loop order while the plan was made, and their seconds.
    awaiting: u64,
    awaiting_secs: f64,
    /// The calls since the last one that did not await the plan (all of them awaited it),
    /// and their seconds.
    awaiting_run: u64,
    awaiting_run_secs: f64,
    /// The fastest of them: its workers' seconds, their seconds in bodies, and its steps.
    /// The fixed-costs diagnosis looks at it, not at the mean, which one call slowed by the
    /// machine (or still warming up) moves.
    fastest: Option<(f64, f64, u64)>,
    /// Workers of the last ordinary call.
    workers: usize,
    /// A dynamic loop's indices run and candidates set aside over ordinary calls, and the
    /// name of its dependency test.
    chosen: u64,
    deferred: u64,
    depends: Option<&'static str>,
    /// The loop runs in rounds of a dynamic schedule (`Opts::dynamic`).
    dynamic: bool,
    /// The last plan's shape, if it was looked at.
    shape: Option<PlanShape>,
    /// The machine's and the process's CPU figures at the loop's first call (see
    /// `super::machine`).
    usage: Option<Usage>,
}

/// Per rank: memory per call site.
#[derive(Default)]
struct Memory(dashmap::DashMap<String, SiteMemory>);

/// Looks at a finished call: new diagnoses are added to `stats` (and printed).
pub(crate) fn after_call(
    site: &CallSite,
    registry: &Registry,
    figures: &Figures,
    stats: &mut LoopStats,
) {
    if !figures.ran {
        return;
    }
    let here = crate::cluster::here();
    let memory = here.local::<Memory>();
    let key = site.to_string();
    let mut m = memory.0.entry(key).or_default();
    let tables: Vec<(&'static str, u64)> = registry
        .entries
        .iter()
        .map(|e| (e.name, e.table.id()))
        .collect();
    m.calls += 1;
    if m.calls == 1 {
        m.usage = Usage::now();
    }
    if figures.awaiting_plan {
        let secs = figures.running.as_secs_f64();
        if secs > 0.0 && m.in_order.is_none_or(|s| secs < s) {
            m.in_order = Some(secs);
        }
        m.awaiting += 1;
        m.awaiting_secs += secs;
        m.awaiting_run += 1;
        m.awaiting_run_secs += secs;
    } else {
        (m.awaiting_run, m.awaiting_run_secs) = (0, 0.0);
    }
    // A call with a table made afresh ran with locks instead of planning anew: for the
    // diagnosis it is a first call all the same (nothing kept served its tables).
    if figures.first_call || figures.renewed {
        m.first_calls += 1;
        m.locked_instead |= figures.renewed;
        if m.calls > 1 {
            for (name, id) in &tables {
                if !m.tables.iter().any(|(_, old)| old == id) && !m.renewed.contains(name) {
                    m.renewed.push(name);
                }
            }
            m.range_changed |= figures.range.is_some() && figures.range != m.range;
        }
    } else if figures.steps > 0 {
        m.ordinary += 1;
        if m.ordinary > 1 {
            let worker_secs = figures.running.as_secs_f64() * figures.workers.unwrap_or(1) as f64;
            let busy = figures.busy.as_secs_f64();
            m.timed += 1;
            m.busy += busy;
            m.worker_secs += worker_secs;
            if m.fastest.is_none_or(|(w, _, _)| worker_secs < w) {
                m.fastest = Some((worker_secs, busy, figures.steps as u64));
            }
        }
        m.workers = figures.workers.unwrap_or(1);
        m.chosen += figures.chosen;
        m.deferred += figures.deferred;
        m.depends = figures.depends;
        m.dynamic = figures.strategy == Some("dynamic");
    }
    m.tables = tables;
    m.range = figures.range;
    let mut found = Vec::new();
    if let Some(shape) = &figures.shape {
        m.shape = Some(shape.clone());
        if shape.idle {
            found.push(idle_workers(site, registry, shape));
        }
    }
    if m.first_calls == m.calls && m.calls >= FIRST_CALLS && !figures.replans_by_design {
        found.push(always_first_call(site, &m));
    }
    if figures.awaiting_plan && m.awaiting >= PENDING_CALLS {
        found.push(plan_pending(site, &m));
    }
    let idle = m.shape.as_ref().is_some_and(|s| s.idle);
    if let Some((worker_secs, busy, steps)) = m.fastest {
        if !idle && m.timed >= 2 && worker_secs > 0.0 {
            let busy = busy / worker_secs;
            if busy < busy_share() {
                found.push(fixed_costs(site, registry, &m, (worker_secs, busy, steps)));
            }
        }
    }
    if let Some(o) = figures.one_worker {
        found.push(one_worker(site, registry, &m, figures, o));
    }
    // The loop's workers, also where its last call ran on one.
    let workers = (figures.one_worker.map_or(1, |o| o.workers))
        .max(m.workers)
        .max(figures.workers.unwrap_or(1));
    // Over the calls so far, and in this one: a `sync_for!` pushes a table its
    // mini-batches wrote densely whole from its second call (see `sync_for::Dense`), so
    // its first call's merges need not be its pace.
    let this_call = figures.running.as_secs_f64() * figures.workers.unwrap_or(1) as f64;
    let last_share = match this_call > 0.0 {
        true => figures.merging.as_secs_f64() / this_call,
        false => 0.0,
    };
    if let Some(share) = stats.merge_share() {
        if share > MERGE_SHARE && last_share > MERGE_SHARE && stats.calls >= 2 {
            found.push(merge_bound(site, registry, figures, share));
        }
    }
    found.retain(|d| stats.diagnoses.iter().all(|old| old.finding != d.finding));
    if found.iter().any(|d| d.finding.is_timed()) {
        let shared = m.usage.as_ref().and_then(|u| Usage::now()?.since(u));
        if let Some(shared) = shared.filter(|s| s.shaped(workers)) {
            for d in found.iter_mut().filter(|d| d.finding.is_timed()) {
                d.message.push_str(&shared.note());
                d.others_busy = Some(shared.others);
            }
        }
    }
    drop(m);
    for d in found {
        emit(d, stats);
    }
}

/// Says a diagnosis (unless `STRADS_DIAGNOSE=0`) and keeps it in the loop's figures.
fn emit(d: Diagnosis, stats: &mut LoopStats) {
    if std::env::var(crate::cluster::env::DIAGNOSE).map_or(true, |v| v.trim() != "0") {
        eprintln!("{}", d.message);
    }
    tracing::info!("{}", d.message);
    stats.diagnoses.push(d);
}

/// At the job's end ([`crate::finish`]): a loop whose last calls ran in loop order while
/// its plan was made, too few of them for [`PENDING_CALLS`], is told that no call ran its
/// plan. (A new user's word2vec ran its 3 calls of 16 s so, the plan taking 48 s to
/// make, and nothing was said.)
pub(crate) fn at_end(stats: &mut LoopStats) {
    let memory = crate::cluster::here().local::<Memory>();
    let Some(m) = memory.0.get(&stats.site) else {
        return;
    };
    let told = stats
        .diagnoses
        .iter()
        .any(|d| d.finding == Finding::PlanPending);
    if m.awaiting_run == 0 || told {
        return;
    }
    let what = format!(
        "no call ran its plan, made on a spare thread since its recorded first call: the \
         job ended after {} more call{} ({:.2} s in all), which ran in loop order on one \
         worker, as one thread runs them, while the plan was made",
        m.awaiting_run,
        if m.awaiting_run == 1 { "" } else { "s" },
        m.awaiting_run_secs
    );
    drop(m);
    let fix = "for a job of a few calls, `Opts::new().fallback(Fallback::Never)` makes the \
               plan on the first call's path instead, so the calls after the first run it \
               (the first call takes that much longer), and any finding about the plan \
               follows"
        .to_string();
    let site = stats.site.clone();
    emit(pending(&site, &what, fix), stats);
}

/// The plan is still being made on a spare thread: the calls so far ran as the serial
/// loop runs. (A new user's dual coordinate descent SVM ran its 10 calls of 10 ms so,
/// with nothing said even under `STRADS_VERBOSE`, while a packing plan of 50,000 tasks
/// that most write a few hot weights took 0.7-1.0 s to make.)
fn plan_pending(site: &CallSite, m: &SiteMemory) -> Diagnosis {
    let what = format!(
        "its plan, made on a spare thread since its recorded first call, was not ready \
         for the last {} calls ({:.2} s in all), which ran in loop order on one worker, \
         as one thread runs them",
        m.awaiting, m.awaiting_secs
    );
    let fix = "nothing, if the job has many more calls: the first call after the plan is \
               ready runs it; for a job of a few short calls, \
               `Opts::new().fallback(Fallback::Never)` makes the plan on the first call's \
               path instead (the first call takes that much longer), and any finding about \
               the plan follows"
        .to_string();
    pending(site, &what, fix)
}

/// A `plan-pending` diagnosis of `site`, saying `what` and `fix`.
fn pending(site: &dyn std::fmt::Display, what: &str, fix: String) -> Diagnosis {
    Diagnosis {
        finding: Finding::PlanPending,
        message: message(site, Finding::PlanPending, false, what, &fix),
        tables: Vec::new(),
        hot_keys: Vec::new(),
        fix,
        others_busy: None,
    }
}

/// The loop runs on one worker: what each way took, and why the workers did not pay.
fn one_worker(
    site: &CallSite,
    registry: &Registry,
    m: &SiteMemory,
    figures: &Figures,
    o: OneWorker,
) -> Diagnosis {
    let (workers, one) = (o.workers, o.one * 1e3);
    let mut what = match o.all {
        // Within a tenth, the machine's noise decides which way is faster: the workers
        // did not pay, which is what the message is about.
        Ok(all) => format!(
            "it runs on one worker, in loop order as one thread runs it, which was {}: \
             a call took {:.2} ms on {workers} workers and {one:.2} ms on one",
            match all * 1e3 < 1.1 * one {
                true => "as fast",
                false => "faster",
            },
            all * 1e3
        ),
        Err(parallelism) => format!(
            "it runs on one worker, in loop order as one thread runs it ({one:.2} ms per \
             call): its plan would keep {parallelism:.1} of {workers} workers busy"
        ),
    };
    let locks = figures.strategy == Some("locks on one worker");
    if m.worker_secs > 0.0 {
        let _ = write!(
            what,
            "; on {workers} workers they spent {:.0}% of each call in loop bodies",
            100.0 * m.busy / m.worker_secs
        );
    }
    let (fix, tables, hot_keys) = match &m.shape {
        _ if locks => {
            let locked = written_tables(registry, figures, |e| !e.table.is_relaxed());
            let relaxed = written_tables(registry, figures, |e| e.table.is_relaxed());
            what.push_str(&lock_costs(&locked, &relaxed));
            let renewed: Vec<String> = m.renewed.iter().map(|t| t.to_string()).collect();
            let fix = match m.locked_instead {
                _ if locked.is_empty() => {
                    "give each call more work (more tasks per call, or more work per task)"
                        .to_string()
                }
                true => refill_in_place(&renewed),
                false => format!(
                    "a plan serves a loop whose accesses repeat from call to call: drop \
                     `Opts::recheck(true)` if they do; {}",
                    relax_the_sampled(&locked)
                ),
            };
            (fix, renewed, Vec::new())
        }
        Some(shape) => {
            let e = explain(registry, shape);
            let _ = write!(
                what,
                "; its {} plan is what it is because {}",
                shape.strategy, e.why
            );
            (e.fix, e.tables, e.hot_keys)
        }
        None => (
            "give each call more work (more tasks per call, or more work per task)".to_string(),
            Vec::new(),
            Vec::new(),
        ),
    };
    let fix =
        format!("{fix}; `Opts::new().fallback(Fallback::Never)` keeps every call on all workers");
    Diagnosis {
        finding: Finding::OneWorker,
        message: message(site, Finding::OneWorker, false, &what, &fix),
        tables,
        hot_keys,
        fix,
        others_busy: None,
    }
}

/// The names of the tables the call wrote that `keep` accepts, in registry order.
fn written_tables(
    registry: &Registry,
    figures: &Figures,
    keep: impl Fn(&Registered) -> bool,
) -> Vec<String> {
    (registry.entries.iter().zip(&figures.written))
        .filter(|(e, &w)| w && keep(e))
        .map(|(e, _)| e.name.to_string())
        .collect()
}

/// The fix for `renewed` tables, made afresh for every call: make them once and refill
/// them in place, unless their contents decide what the body writes (sampled negatives,
/// TransE's corruptions), where no plan can serve two calls and the locks must stay (a
/// plan kept anyway fails at the next call with accesses outside it).
fn refill_in_place(renewed: &[String]) -> String {
    format!(
        "make {} once, before the loop, and refill it in place each call (`transform`, \
         `set`), so that the plan made at the first call serves the others; but if its \
         contents decide which elements the body writes (negatives sampled afresh each \
         epoch), no plan can serve two calls: keep the locks by declaring \
         `Opts::recheck(true)`, and each call runs on one worker or on all, whichever was \
         measured faster; {}",
        quoted(renewed),
        relax_the_sampled(&[])
    )
}

/// The way out of locks for a loop whose accesses change every call in one table
/// (sampled negatives): relax that table, whose accesses the plan then leaves out (a new
/// user's word2vec with negative sampling ran at serial speed with locks, 1.5-2.1× with
/// its output table relaxed).
fn relax_the_sampled(locked: &[String]) -> String {
    let which = match locked {
        [one] => format!("`{one}`"),
        _ => "the table".to_string(),
    };
    format!(
        "if the accesses that change are those of one table indexed by values drawn \
         afresh (sampled negatives) whose concurrent updates may be summed, declare \
         {which} relaxed where it is made (`.relaxed(Relaxed::Sum)`): a relaxed table is \
         left out of the plan, and a plan made at the first call then serves the others"
    )
}

/// What each access of a re-checked loop on all workers cost: a lock (and a copy of what
/// it writes) for a table it writes and does not relax (`locked`), nothing for its `relaxed` ones when
/// nothing is locked (no task can be abandoned, so nothing is saved), a copy otherwise.
fn lock_costs(locked: &[String], relaxed: &[String]) -> String {
    let tables = |names: &[String]| match names.len() {
        1 => format!("table {}", quoted(names)),
        _ => format!("tables {}", quoted(names)),
    };
    match (locked.is_empty(), relaxed.is_empty()) {
        (true, true) => "; it writes no table, so it locked nothing".to_string(),
        (true, false) => "; it locks no table (every table it writes is relaxed), so on all \
                      workers it paid only for its replicas"
            .to_string(),
        (false, true) => format!(
            "; there every element its tasks touched in {} took a lock (and a copy where \
             they wrote it), because the loop is re-checked",
            tables(locked)
        ),
        (false, false) => format!(
            "; there every element its tasks touched in {} took a lock (and a copy where \
             they wrote it), because the loop is re-checked, and every element they wrote \
             in relaxed {} a copy (so that a task abandoned \
             on a held lock leaves no half update)",
            tables(locked),
            tables(relaxed)
        ),
    }
}

/// [`BUSY_SHARE`], or `STRADS_DIAGNOSE_BUSY` when it holds a share in `0..=1` (read once
/// per process, not at every call).
fn busy_share() -> f64 {
    static SHARE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *SHARE.get_or_init(|| {
        std::env::var(crate::cluster::env::DIAGNOSE_BUSY)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| (0.0..=1.0).contains(s))
            .map_or(BUSY_SHARE, |s| if s >= 1.0 { f64::INFINITY } else { s })
    })
}

/// Names of `slots`, quoted.
fn names(registry: &Registry, slots: &[usize]) -> Vec<String> {
    slots
        .iter()
        .filter_map(|&s| registry.entries.get(s))
        .map(|e| e.name.to_string())
        .collect()
}

/// `names` in backticks, joined as a list (`a`, `b` and `c`).
pub(crate) fn quoted(names: &[String]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match q.len() {
        0 => String::new(),
        1 => q[0].clone(),
        _ => format!("{} and {}", q[..q.len() - 1].join(", "), q[q.len() - 1]),
    }
}

/// The diagnosis's text. A loop that ran on `one_worker` is not said not to scale
/// (nothing was asked of it but its serial body's pace), only to cost more than its
/// bodies.
fn message(
    site: &dyn std::fmt::Display,
    finding: Finding,
    one_worker: bool,
    what: &str,
    fix: &str,
) -> String {
    let headline = match one_worker {
        true => "costs more than its loop bodies",
        false => "does not scale",
    };
    format!(
        "strads-ap: {site} {headline} ({}): {what}\n  what to change: {fix}",
        finding.name()
    )
}

/// What [`explain`] says: words to add to the finding, the fix, the tables it names and
/// the hot keys.
struct Explained {
    why: String,
    fix: String,
    tables: Vec<String>,
    hot_keys: Vec<HotKey>,
}

/// Why a plan is what it is, from its shape.
fn explain(registry: &Registry, shape: &PlanShape) -> Explained {
    let mut tables = names(registry, &shape.conflicting);
    let hot_keys: Vec<HotKey> = shape
        .hot
        .iter()
        .map(|&(slot, key, count)| {
            let entry = &registry.entries[slot];
            HotKey {
                table: entry.name.to_string(),
                key: entry.table.describe_key(key),
                share: count as f64 / shape.tasks.max(1) as f64,
            }
        })
        .collect();
    let (what, fix);
    if shape.tasks < 4 * shape.workers {
        what = "there are fewer tasks than a few per worker".to_string();
        fix = "give the loop more tasks per call (or more work per task), or run it with \
               `Opts::new().threads(1)`"
            .to_string();
    } else if !shape.rotates_if_relaxed.is_empty() {
        return relax_the_read(registry, shape, hot_keys);
    } else if !hot_keys.is_empty() {
        (what, fix, tables) = relax_hot(registry, &hot_keys);
    } else if let Some(&(slot, readers)) = shape.readers_of_written.first() {
        let table = &registry.entries[slot].name;
        let share = 100.0 * readers as f64 / shape.tasks.max(1) as f64;
        if shape.shared_written.contains(&slot) {
            return counts_read_and_shared(registry, shape, table, readers, hot_keys);
        }
        tables = vec![table.to_string()];
        what = format!(
            "{readers} tasks ({share:.0}%) read elements of `{table}` that other tasks write, \
             which chains them together"
        );
        fix = format!(
            "a task that reads what others write must wait for them. Where the algorithm \
             allows another order, split the tasks into classes whose tasks touch none of \
             each other's elements of `{table}` (on a grid, a checkerboard: one colour, then \
             the other) and give each class its own `async_for!` call site (a plan is kept \
             per call site, so one site whose captured variable picks the class would fail \
             when it switches). Where slightly stale values of `{table}` suit the algorithm \
             (Jacobi instead of Gauss-Seidel updates; not a sampler such as Gibbs sampling, \
             whose every update must see its neighbours' latest values), read them from a \
             copy of `{table}` made once, before the loops, refilled before each call \
             (`{table}.with_all(|t| copy.transform(|i, x| *x = t[i].clone()))??`; a copy \
             made anew each call costs a planning call each time), and write the new values \
             into `{table}`: Jacobi takes more sweeps than Gauss-Seidel to reach the same \
             point, so compare results where both have converged"
        );
    } else if tables.is_empty() {
        // Nothing written is shared (relaxed or read-only tables): the workers' costs are
        // their own.
        what = "no task shares a written element with another (the written tables are \
                relaxed), so what the workers lose is their own work: merging relaxed \
                tables and handing out tasks"
            .to_string();
        fix = "give each call more work (more tasks, or more work per task), or run a loop \
               this short with `Opts::new().threads(1)`"
            .to_string();
    } else if shape.shared_written.is_empty() {
        // Each written element is one task's, and no task reads another's: the plan's
        // groups are independent (an ALS half-step: a user's row from the item rows).
        tables = Vec::new();
        what = "no two tasks write the same element, and none reads an element another \
                writes: its tasks are independent, so what the workers lose is their own \
                work: starting, handing out tasks and synchronising"
            .to_string();
        fix = "give each call more work (more tasks, or more work per task), or run a loop \
               this short with `Opts::new().threads(1)`"
            .to_string();
    } else {
        tables = names(registry, &shape.shared_written);
        what = format!("tasks share written elements of {}", quoted(&tables));
        fix = "declare a table relaxed (`.relaxed(Relaxed::Sum)` where it is made) whose \
               concurrent updates may be summed, or run the loop with `sync_for!`"
            .to_string();
    }
    Explained {
        why: what,
        fix,
        tables,
        hot_keys,
    }
}

/// Why a plan is not a rotation when it would be one without the tables that tasks read
/// where others write: those tables alone are to be relaxed.
fn relax_the_read(registry: &Registry, shape: &PlanShape, hot_keys: Vec<HotKey>) -> Explained {
    let tables = names(registry, &shape.rotates_if_relaxed);
    let (slot, readers) = shape.readers_of_written[0];
    let share = 100.0 * readers as f64 / shape.tasks.max(1) as f64;
    let table = registry.entries[slot].name;
    let them = if tables.len() == 1 { "it" } else { "them" };
    let why = format!(
        "{readers} tasks ({share:.0}%) read elements of `{table}` that other tasks write, \
         which chains them together; without {} the planner would rotate the rest of the \
         loop (each task writes at most one element of each of its other written tables)",
        quoted(&tables)
    );
    let fix = format!(
        "{}; each worker then reads its own copy of {them}, merged with the others' after \
         each group of tasks, so the values it reads are slightly stale: compare a \
         held-out metric with one thread's",
        declare_relaxed(registry, &tables).join("; ")
    );
    Explained {
        why,
        fix,
        tables,
        hot_keys,
    }
}

/// Why a plan is one chain when the table most tasks read is also one several tasks write
/// (a sampler's cluster counts, each document moving from one cluster to another): a copy
/// read in place of the table cannot serve, since which elements a task writes follows
/// what it reads; only relaxing all the shared written tables lets tasks run side by side.
fn counts_read_and_shared(
    registry: &Registry,
    shape: &PlanShape,
    table: &str,
    readers: usize,
    hot_keys: Vec<HotKey>,
) -> Explained {
    let share = 100.0 * readers as f64 / shape.tasks.max(1) as f64;
    let tables = names(registry, &shape.shared_written);
    let why = format!(
        "{readers} tasks ({share:.0}%) read elements of `{table}` that other tasks write, \
         and tasks share written elements of {}, which chains them together",
        quoted(&tables)
    );
    let mut parts = declare_relaxed(registry, &tables);
    parts.push(
        "or, if approximate merging suits the model, run the loop with `sync_for!` (Hybrid)"
            .to_string(),
    );
    let fix = format!(
        "{}. Each worker then reads and writes its own copies, merged with the others' after \
         each group of tasks, as a distributed Gibbs sampler (AD-LDA) does with its counts: \
         the other workers' updates are seen late, so compare a held-out metric with one \
         thread's",
        parts.join("; ")
    );
    Explained {
        why,
        fix,
        tables,
        hot_keys,
    }
}

/// A merged table of more elements than this, each at most `SCALAR_BYTES` and owning no
/// memory elsewhere, is a table of scalars to the merge-bound advice.
const SCALAR_TABLE: u64 = 256;
const SCALAR_BYTES: usize = 16;

/// The share of tasks writing a hot key from which the diagnosis suggests a reduction.
const TOTAL_SHARE: f64 = 0.9;

/// Hot keys: the words, the fix (relax them, or `sync_for!`) and the tables named.
fn relax_hot(registry: &Registry, hot_keys: &[HotKey]) -> (String, String, Vec<String>) {
    let list: Vec<String> = hot_keys
        .iter()
        .map(|h| format!("`{}`{} ({:.0}%)", h.table, h.key, 100.0 * h.share))
        .collect();
    let what = format!(
        "the hottest written keys, with the share of tasks writing them, are {}",
        list.join(", ")
    );
    let mut hot_tables: Vec<String> = Vec::new();
    for h in hot_keys {
        if !hot_tables.contains(&h.table) {
            hot_tables.push(h.table.clone());
        }
    }
    let mut parts = Vec::new();
    // A key nearly every task writes is usually a total or a counter kept in a table.
    if let Some(h) = hot_keys.iter().find(|h| h.share >= TOTAL_SHARE) {
        parts.push(format!(
            "if `{}`{} only accumulates a total, a count or a best (`{}{} += e`), keep it in \
             a plain `let mut` variable written the same way (`total += e`): a reduction, \
             combined exactly after the loop and left out of the plan",
            h.table, h.key, h.table, h.key
        ));
    }
    parts.extend(declare_relaxed(registry, &hot_tables));
    parts.push(
        "or, if approximate merging suits the model, run the loop with `sync_for!` (Hybrid)"
            .to_string(),
    );
    // Relaxed copies, and Hybrid replicas, see the other workers' updates late: fine for
    // SGD-like steps, not for coordinate descent, whose every step uses the exact effect
    // of those before (a new user's dual SVM lost 4-12 points of test accuracy either
    // way, and matched serial with dynamic rounds of 2,000 on two workers).
    let mut fix = parts.join("; ");
    fix.push_str(
        ". Relaxed or merged updates are seen late by the other workers: compare a held-out \
         metric with one thread's; coordinate descent (each index solving for its own \
         variable) is better served by `Opts::dynamic` with small rounds",
    );
    (what, fix, hot_tables)
}

/// The advice to declare `tables` relaxed where they are made, vectors and maps apart
/// (their declarations differ).
fn declare_relaxed(registry: &Registry, tables: &[String]) -> Vec<String> {
    let is_map = |t: &String| {
        registry
            .entries
            .iter()
            .any(|e| e.name == t.as_str() && e.table.is_map())
    };
    let maps: Vec<String> = tables.iter().filter(|t| is_map(t)).cloned().collect();
    let vectors: Vec<String> = tables.iter().filter(|t| !is_map(t)).cloned().collect();
    let mut parts = Vec::new();
    if !vectors.is_empty() {
        parts.push(format!(
            "declare {} relaxed where {} made \
             (`DVector::from_vec(v)?.relaxed(Relaxed::Sum)`: concurrent updates are merged as \
             summed deltas) so the planner leaves {} out",
            quoted(&vectors),
            if vectors.len() == 1 {
                "it is"
            } else {
                "they are"
            },
            if vectors.len() == 1 { "it" } else { "them" }
        ));
    }
    if !maps.is_empty() {
        parts.push(format!(
            "declare {} relaxed where {} made \
             (`DMap::from_map(m)?.relaxed(Relaxed::Sum)`: concurrent updates of the values \
             are merged as summed deltas) so the planner leaves {} out",
            quoted(&maps),
            if maps.len() == 1 { "it is" } else { "they are" },
            if maps.len() == 1 { "it" } else { "them" }
        ));
    }
    parts
}

fn idle_workers(site: &CallSite, registry: &Registry, shape: &PlanShape) -> Diagnosis {
    let Explained {
        why,
        fix,
        tables,
        hot_keys,
    } = explain(registry, shape);
    let what = format!(
        "its {} plan keeps {:.1} of {} workers busy (the longest chain of groups that run one \
         after another holds {:.0}% of the {} tasks): {why}",
        shape.strategy,
        shape.parallelism,
        shape.workers,
        100.0 / shape.parallelism.max(1e-9),
        shape.tasks
    );
    Diagnosis {
        finding: Finding::IdleWorkers,
        message: message(site, Finding::IdleWorkers, false, &what, &fix),
        tables,
        hot_keys,
        fix,
        others_busy: None,
    }
}

fn always_first_call(site: &CallSite, m: &SiteMemory) -> Diagnosis {
    let renewed: Vec<String> = m.renewed.iter().map(|n| n.to_string()).collect();
    let mut why = Vec::new();
    if !renewed.is_empty() {
        why.push(format!(
            "{} {} a new DDS at every call",
            quoted(&renewed),
            if renewed.len() == 1 { "is" } else { "are" }
        ));
    }
    if m.range_changed {
        why.push("its index range changes between calls".to_string());
    }
    if why.is_empty() {
        why.push("nothing kept from an earlier call fits".to_string());
    }
    let what = match m.locked_instead {
        false => format!(
            "all {} of its calls were first calls, each paying for reconnaissance (or a \
             serial recorded run) and planning, because {}",
            m.calls,
            why.join(" and ")
        ),
        true => format!(
            "no plan can be kept for it, because {}: after its first call it runs with \
             element locks, as a re-checked loop (`Opts::recheck(true)`), whose every element \
             touched in a written table costs a lock (and a copy where it is written)",
            why.join(" and ")
        ),
    };
    let fix = match (renewed.is_empty(), m.range_changed) {
        (false, _) => refill_in_place(&renewed),
        (true, true) => "keep the index range the same from call to call (loop over the whole \
                         range and skip unwanted indices in the body)"
            .to_string(),
        (true, false) => "keep the loop's tables and index range the same between calls".into(),
    };
    Diagnosis {
        finding: Finding::AlwaysFirstCall,
        message: message(site, Finding::AlwaysFirstCall, m.workers == 1, &what, &fix),
        tables: renewed,
        hot_keys: Vec::new(),
        fix,
        others_busy: None,
    }
}

/// A call's seconds on the workers (of `worker_secs` summed over them) and in loop order on
/// one worker, where a call ran that way (see [`fixed_costs_fix`]).
fn measured(m: &SiteMemory, worker_secs: f64) -> Option<(f64, f64)> {
    let one = m.in_order?;
    (m.workers > 1).then(|| (worker_secs / m.workers as f64, one))
}

/// The fixed-costs diagnosis, from `call`: the fastest ordinary call's workers' seconds, the
/// share of them in bodies, and its steps.
fn fixed_costs(
    site: &CallSite,
    registry: &Registry,
    m: &SiteMemory,
    call: (f64, f64, u64),
) -> Diagnosis {
    let (per_call, busy, steps) = call;
    let steps = steps as f64;
    let after_each = match (m.dynamic, m.workers) {
        // One worker has nothing to merge or wait for: the rest is the scheduler's.
        (true, 1) => "choosing by priority and reading the priorities around each of",
        (true, _) => {
            "starting workers, choosing rounds (on one worker, beside its share), merging \
             relaxed tables and synchronising after each of"
        }
        (false, _) => "starting workers, handing out work and synchronising after each of",
    };
    let unit = match m.dynamic {
        true => "rounds",
        false => "steps of groups",
    };
    let who = match m.workers {
        1 => "its one worker spends",
        _ => "its workers spend",
    };
    let mut what = format!(
        "{who} {:.0}% of each call in loop bodies; the rest ({:.2} of {:.2} \
         worker-ms per call) goes to {after_each} {:.0} {unit}",
        100.0 * busy,
        per_call * (1.0 - busy) * 1e3,
        per_call * 1e3,
        steps
    );
    if busy >= BUSY_SHARE {
        what.push_str(" (reported because `STRADS_DIAGNOSE_BUSY` asks for every loop)");
    }
    let (fix, tables, hot_keys) = match &m.shape {
        // A components plan synchronises (and re-tags) after every batch: its shape says
        // why the loop is not a rotation.
        Some(shape) if shape.batches > 1 => {
            let e = explain(registry, shape);
            let _ = write!(
                what,
                "; a {} plan runs its {} batches one after another because {}",
                shape.strategy, shape.batches, e.why
            );
            (e.fix, e.tables, e.hot_keys)
        }
        // Rounds kept small because the dependency test sets most candidates aside.
        _ if m.dynamic && m.deferred >= m.chosen.max(1) => {
            let depends = m.depends.unwrap_or("the dependency test");
            let _ = write!(
                what,
                "; its dependency test ({depends}) set aside {:.1} candidates for each \
                 index it ran, so rounds stay small",
                m.deferred as f64 / m.chosen.max(1) as f64
            );
            let fix = format!(
                "the test finds most candidates dependent on a round's other groups (an \
                 overlap test on a relaxed table that each round touches nearly whole, \
                 such as a residual of a few thousand rows, finds every pair \
                 overlapping): use a test that lists only the pairs that truly depend \
                 (`Depends::graph`, `Depends::by`), a higher threshold, or \
                 `Depends::none()` (parallel updates of dependent indices, the STRADS \
                 approximation); {}",
                fixed_costs_fix(true, busy, m.workers, None)
            );
            (fix, Vec::new(), Vec::new())
        }
        _ => (
            fixed_costs_fix(m.dynamic, busy, m.workers, measured(m, per_call)),
            Vec::new(),
            Vec::new(),
        ),
    };
    Diagnosis {
        finding: Finding::FixedCosts,
        message: message(site, Finding::FixedCosts, m.workers == 1, &what, &fix),
        tables,
        hot_keys,
        fix,
        others_busy: None,
    }
}

/// What to change when fixed costs weigh on a loop that is not a components plan.
///
/// One worker would take about the body time alone (`busy` of the `workers`' time), so the
/// workers pay while `busy × workers` is above 1: only then is `threads(1)` left out of the
/// advice, and the message says what the workers still gain. Where a call ran in loop
/// order on one worker (`measured`: a call's seconds on the workers, and in loop order),
/// their ratio is the gain instead: bodies on several workers can run slower than in loop
/// order (a GloVe cut into fine slices spent 90% of its calls in bodies on 2 workers,
/// "1.8x as fast as one", and ran slower than the serial loop).
fn fixed_costs_fix(
    dynamic: bool,
    busy: f64,
    workers: usize,
    measured: Option<(f64, f64)>,
) -> String {
    let (gain, how) = match measured {
        Some((all, one)) if all > 0.0 => (
            one / all,
            format!(
                " (measured: a call took {:.2} ms on {workers} workers and {:.2} ms in \
                 loop order on one)",
                all * 1e3,
                one * 1e3
            ),
        ),
        _ => (busy * workers as f64, String::new()),
    };
    // A larger round is more indices updated from the values the round started with (on
    // the workers' copies of relaxed tables): a new user's dual coordinate descent SVM,
    // right with rounds of 2,000 on two workers, lost up to 29 points of test accuracy
    // with the default rounds (6,250 of 50,000) and more with larger ones.
    let more = match dynamic {
        true => {
            "give each round more work (`Dynamic::round(n)` with a larger n, or more work per \
             index), checking the objective and a held-out metric against one thread's: a \
             round's indices update the model from the values the round started with, so \
             on coupled problems (an SVM's duals, Lasso's coordinates) a larger round can \
             end at a worse model or diverge"
        }
        false => {
            "give each call more work (more tasks per call, or more work per task, e.g. \
             several passes in one call)"
        }
    };
    if workers == 1 {
        // Nothing runs in parallel: the costs are choosing rounds, not sharing them.
        return match dynamic {
            true => format!(
                "{more}; or, where the order of updates matters less than the cost of \
                 choosing it, `Priority::cyclic()`, which chooses without drawing"
            ),
            false => more.to_string(),
        };
    }
    if gain >= 1.0 {
        return format!(
            "{more}; the {workers} workers still run about {gain:.1}x as fast as one \
             would{how}, so keep them"
        );
    }
    let one = match dynamic {
        true => "run the loop with `Opts::new().threads(1)`, where rounds need no dependency test",
        false => "run a loop this short with `Opts::new().threads(1)`",
    };
    format!(
        "{more}, or {one} (the {workers} workers run at about {gain:.1}x one worker's \
         pace{how})"
    )
}

fn merge_bound(site: &CallSite, registry: &Registry, figures: &Figures, share: f64) -> Diagnosis {
    // A `sync_for!` keeps a replica of every table it writes; an `async_for!` only of its
    // relaxed ones (the others are planned or locked, and merge nothing). A Hybrid
    // `sync_for!` knows which replicas merged anything: a table only read (a new user's
    // per-sample constants) is not named.
    let tables = match (&figures.merged, site.kind) {
        (Some(merged), LoopKind::Sync) => (registry.entries.iter().zip(merged))
            .filter(|(_, &m)| m)
            .map(|(e, _)| e.name.to_string())
            .collect(),
        _ => written_tables(registry, figures, |e| match site.kind {
            LoopKind::Sync => true,
            LoopKind::Async => e.table.is_relaxed(),
        }),
    };
    let what = format!(
        "its workers spend {:.0}% of their time merging their replicas of {} into the shared \
         values",
        100.0 * share,
        if tables.is_empty() {
            "the written tables".to_string()
        } else {
            quoted(&tables)
        }
    );
    // Tables of many scalars (a dense layer's weights as a flat `DVector<f32>`) merge
    // each written element apart: a new user's MLP ran at 0.58x serial on two workers so,
    // and at 1.8x with each layer one element of its table.
    let scalars: Vec<String> = registry
        .entries
        .iter()
        .filter(|e| {
            tables.iter().any(|t| t == e.name)
                && e.table.elem_size() <= SCALAR_BYTES
                && e.table.shape() > SCALAR_TABLE
                && !e.table.owns_heap()
                && !e.table.is_map()
        })
        .map(|e| e.name.to_string())
        .collect();
    let fix = match site.kind {
        LoopKind::Sync if !scalars.is_empty() => format!(
            "keep a block of parameters that every mini-batch updates (a layer's weights) as \
             one element of its table, as `DVector::from_vec(vec![layer])` with `layer` the \
             flat `Vec<f32>`, indexed `{t}[0][k]`: a replica merges each element of {} it \
             wrote apart, so thousands of scalars cost far more than one row of them; or use \
             larger mini-batches (each element is merged once per mini-batch that wrote it)",
            quoted(&scalars),
            t = scalars[0]
        ),
        LoopKind::Sync => {
            "use larger mini-batches (each row is merged once per mini-batch that wrote it), \
             or an `async_for!` over the samples, which keeps no replicas"
                .to_string()
        }
        // An `async_for!` merges its relaxed tables after every group of tasks, each row
        // the group wrote: worth it for a small table most tasks write, not for a large
        // one whose tasks write a few rows each (TransE's entities relaxed: 64% of the
        // workers' time merging, a call 4x slower than one worker's).
        // Where the table was relaxed for its hot rows (the idle-workers advice), leaving
        // it unrelaxed brings the one-worker plan back: a new user's perceptron (17,899
        // rows, frequent words in most passages, 0.2 us a passage) met both findings.
        LoopKind::Async => {
            "relax only small tables that most tasks write (a bias, a few hot rows): each \
             group of tasks merges every row of a relaxed table it wrote, so leave a large \
             table whose tasks write a few rows each unrelaxed, and the plan (or element \
             locks, with `Opts::recheck(true)`) keeps its tasks apart. Where a few of its \
             rows are in most tasks (so that unrelaxed it chains them), a call has too \
             little work for its merges: run it on one worker (`Opts::new().threads(1)`), \
             or as a `sync_for!` whose mini-batches hold many samples each"
                .to_string()
        }
    };
    Diagnosis {
        finding: Finding::MergeBound,
        message: message(site, Finding::MergeBound, false, &what, &fix),
        tables,
        hot_keys: Vec::new(),
        fix,
        others_busy: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop whose every call after the first ran in loop order beside the planner is
    /// told so after `PENDING_CALLS` of them, once; one whose plan came in time is not; a
    /// job that ends after fewer such calls is told so at its end.
    #[test]
    fn a_plan_not_ready_after_several_calls_is_said_to_be_pending() {
        let site = |line| -> &'static CallSite {
            Box::leak(Box::new(CallSite {
                kind: LoopKind::Async,
                task: "Pending",
                body_hash: 7,
                file: "src/pending.rs",
                line,
                column: 5,
                captures: &[],
            }))
        };
        let call = |site: &CallSite, stats: &mut LoopStats, awaiting: bool| {
            let figures = Figures {
                ran: true,
                running: std::time::Duration::from_millis(10),
                awaiting_plan: awaiting,
                ..Figures::default()
            };
            after_call(site, &Registry::default(), &figures, stats);
        };
        let (waiting, mut stats) = (site(1), LoopStats::default());
        for _ in 0..PENDING_CALLS + 3 {
            call(waiting, &mut stats, true);
        }
        let pending: Vec<_> = stats
            .diagnoses
            .iter()
            .filter(|d| d.finding == Finding::PlanPending)
            .collect();
        assert_eq!(pending.len(), 1, "{:?}", stats.diagnoses);
        assert!(
            pending[0]
                .message
                .contains(&format!("not ready for the last {PENDING_CALLS} calls")),
            "{}",
            pending[0].message
        );
        assert!(pending[0].fix.contains("Fallback::Never"));
        stats.site = waiting.to_string();
        at_end(&mut stats);
        assert_eq!(stats.diagnoses.len(), 1, "told once: {:?}", stats.diagnoses);
        let (served, mut stats) = (site(2), LoopStats::default());
        for awaiting in [true, true, false, false, false, false] {
            call(served, &mut stats, awaiting);
        }
        stats.site = served.to_string();
        at_end(&mut stats);
        assert!(stats.diagnoses.is_empty(), "{:?}", stats.diagnoses);
        // A short job: two calls beside the planner, then the end.
        let (short, mut stats) = (site(3), LoopStats::default());
        for _ in 0..2 {
            call(short, &mut stats, true);
        }
        assert!(stats.diagnoses.is_empty(), "{:?}", stats.diagnoses);
        stats.site = short.to_string();
        at_end(&mut stats);
        let [told] = &stats.diagnoses[..] else {
            panic!("one diagnosis at the end: {:?}", stats.diagnoses);
        };
        assert_eq!(told.finding, Finding::PlanPending);
        assert!(
            told.message.contains("src/pending.rs:3:5")
                && told.message.contains("no call ran its plan")
                && told
                    .message
                    .contains("the job ended after 2 more calls (0.02 s in all)"),
            "{}",
            told.message
        );
        assert!(told.fix.contains("Fallback::Never"));
        at_end(&mut stats);
        assert_eq!(stats.diagnoses.len(), 1, "told once");
        // Only the calls since the plan last served count (a plan made anew after one
        // that served).
        let (again, mut stats) = (site(4), LoopStats::default());
        for awaiting in [true, false, true, true] {
            call(again, &mut stats, awaiting);
        }
        stats.site = again.to_string();
        at_end(&mut stats);
        assert!(
            stats.diagnoses[0]
                .message
                .contains("the job ended after 2 more calls (0.02 s in all)"),
            "{}",
            stats.diagnoses[0].message
        );
    }

    /// A components plan none of whose written tables conflicts (all relaxed) is not
    /// explained by a list of shared tables, which would be empty.
    #[test]
    fn a_plan_with_no_shared_written_table_names_no_empty_list() {
        let shape = PlanShape {
            strategy: "components",
            tasks: 1000,
            workers: 2,
            ..PlanShape::default()
        };
        let e = explain(&Registry::default(), &shape);
        assert!(e.tables.is_empty());
        assert!(
            e.why.contains("no task shares a written element"),
            "{}",
            e.why
        );
        assert!(!e.why.trim_end().ends_with("of"), "{}", e.why);
        assert!(e.fix.contains("threads(1)"), "{}", e.fix);
    }

    /// A plan whose written table has one writer per element and no reader of another's
    /// (a new user's ALS: each task writes its own row, reads the other side's) is not
    /// said to share written elements, nor told to relax the table; one whose table two
    /// tasks write is, naming only that table.
    #[test]
    fn independent_tasks_are_not_said_to_share_written_elements() {
        let (uf, itf) = (
            crate::DVector::from_vec(vec![0.0f32; 4]).unwrap(),
            crate::DVector::from_vec(vec![0.0f32; 4]).unwrap(),
        );
        let mut registry = Registry::default();
        registry.add(uf.table.clone(), "uf", None);
        registry.add(itf.table.clone(), "itf", None);
        let shape = PlanShape {
            strategy: "components",
            tasks: 1000,
            workers: 2,
            conflicting: vec![0, 1],
            ..PlanShape::default()
        };
        let e = explain(&registry, &shape);
        assert!(e.why.contains("its tasks are independent"), "{}", e.why);
        assert!(!e.why.contains("share written"), "{}", e.why);
        assert!(!e.fix.contains("relaxed"), "{}", e.fix);
        assert!(e.tables.is_empty(), "{:?}", e.tables);
        let shared = PlanShape {
            shared_written: vec![1],
            ..shape
        };
        let e = explain(&registry, &shared);
        assert_eq!(e.why, "tasks share written elements of `itf`");
        assert_eq!(e.tables, ["itf"]);
    }

    /// Both findings that name a table made afresh (always-first-call, one-worker) give
    /// this fix: a user who refills sampled negatives in place without the locks would
    /// meet accesses outside the plan at the next call, so the fix says where it stops.
    #[test]
    fn refilling_in_place_is_advised_with_its_limit() {
        let fix = refill_in_place(&["negs".to_string()]);
        assert!(fix.starts_with("make `negs` once"), "{fix}");
        assert!(
            fix.contains("decide which elements the body writes"),
            "{fix}"
        );
        assert!(fix.contains("`Opts::recheck(true)`"), "{fix}");
    }

    /// A re-checked loop's costs name the tables it locks; one that writes only relaxed
    /// tables is not said to have taken locks.
    #[test]
    fn lock_costs_name_the_locked_tables_and_no_lock_where_none_is_taken() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = lock_costs(&[], &names(&["relations"]));
        assert!(!none.contains("took a lock"), "{none}");
        assert!(none.contains("locks no table"), "{none}");
        let one = lock_costs(&names(&["entities"]), &[]);
        assert!(
            one.contains("every element its tasks touched in table `entities` took a lock"),
            "{one}"
        );
        assert!(one.contains("a copy where they wrote it"), "{one}");
        let both = lock_costs(&names(&["entities", "seen"]), &names(&["relations"]));
        assert!(
            both.contains("tables `entities` and `seen` took a lock"),
            "{both}"
        );
        assert!(both.contains("relaxed table `relations` a copy"), "{both}");
    }

    /// `threads(1)` is advised only where one worker would be faster: Lasso's rounds at
    /// 76% busy on 2 workers run about 1.5x one worker's pace and must not be told to drop
    /// to one.
    #[test]
    fn one_thread_is_advised_only_where_the_workers_do_not_pay() {
        let keep = fixed_costs_fix(true, 0.76, 2, None);
        assert!(!keep.contains("threads(1)"), "{keep}");
        assert!(
            keep.contains("Dynamic::round(n)")
                && keep.contains("1.5x")
                && keep.contains("can end at a worse model or diverge"),
            "{keep}"
        );
        let drop = fixed_costs_fix(true, 0.3, 2, None);
        assert!(
            drop.contains("threads(1)") && drop.contains("0.6x"),
            "{drop}"
        );
        let short = fixed_costs_fix(false, 0.2, 4, None);
        assert!(
            short.contains("threads(1)") && short.contains("more work"),
            "{short}"
        );
        assert!(!fixed_costs_fix(false, 0.5, 4, None).contains("threads(1)"));
        // One worker is never told to run on one thread.
        let lone = fixed_costs_fix(true, 0.65, 1, None);
        assert!(
            !lone.contains("threads(1)") && lone.contains("Priority::cyclic()"),
            "{lone}"
        );
        // A measured call in loop order decides over the busy share: 90% busy on 2
        // workers, but 11.5 ms a call against 10.1 ms in loop order.
        let slower = fixed_costs_fix(false, 0.9, 2, Some((0.0115, 0.0101)));
        assert!(
            slower.contains("threads(1)")
                && slower.contains("0.9x")
                && slower.contains("11.50 ms on 2 workers and 10.10 ms in loop order"),
            "{slower}"
        );
        let faster = fixed_costs_fix(false, 0.6, 2, Some((0.0062, 0.0101)));
        assert!(
            !faster.contains("threads(1)") && faster.contains("1.6x"),
            "{faster}"
        );
    }
}
