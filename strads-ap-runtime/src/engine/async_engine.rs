//! The serializable engine: runs `async_for!` bodies in conflict-free groups.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;
use rayon::prelude::*;

use super::ctx::{Binding, ExecCtx, Indices, LoopIndex};
use super::dist_async::{DistPlan, Exchanger, Transfers, Work, MAX_RANKS};
use super::{body_error, record_stats, Base, CallSite, FirstError, Merges, Opts, Registry};
use crate::cluster::context;
use crate::dds::table::{Replica, ShadowValidity, TableHandle};
use crate::error::{Error, Result};
use crate::plan::{self, GroupRef, Plan, PlanConfig, Schedule, SlotMode, TableInfo};
use crate::recon::{AccessLog, LogRoom, RecordIndices, Recorder, MAX_TABLES};
use crate::sync::{Condvar, Mutex};

#[derive(Clone, PartialEq, Eq, Hash)]
struct PlanKey {
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
    fn new(
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

/// A cached plan and, across ranks, its cutting into steps.
struct Cached {
    plan: Plan,
    dist: Option<DistPlan>,
}

/// Plans (or locking runs' table modes) kept per call site and rank: the most recently
/// used. A call site run over ever-changing index ranges would otherwise keep a plan, and
/// its access log, for every range it ever saw.
pub const KEPT_PER_SITE: usize = 8;

/// Values kept per loop call between calls: plans, and locking runs' table modes; at
/// most [`KEPT_PER_SITE`] per call site, the least recently used going first.
struct Cache<V> {
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
    fn take(&self, key: &PlanKey) -> Option<V> {
        self.entries.remove(key).map(|(_, (_, v))| v)
    }

    /// Keeps `value` for `key`, dropping the least recently used value of the same call
    /// site if there are more than [`KEPT_PER_SITE`].
    fn put(&self, key: PlanKey, value: V) {
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
struct Kept {
    plans: Cache<Cached>,
    /// Table modes of locking runs (see [`super::locks`]).
    modes: Cache<Vec<SlotMode>>,
    /// Which tables a loop run serially writes (see [`serial_written`]).
    serial_written: DashMap<(usize, Vec<(u64, u64)>, usize, usize), Vec<bool>>,
}

fn kept() -> Arc<Kept> {
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

/// What the planner needs to know of each captured table.
fn table_infos(registry: &Registry, bases: &[Base]) -> Vec<TableInfo> {
    registry
        .entries
        .iter()
        .zip(bases)
        .map(|(e, base)| TableInfo {
            key_space: base.len,
            relaxed: e.table.is_relaxed() && e.merger.is_some(),
        })
        .collect()
}

/// Runs an `async_for!` loop: `run` over every index of `range`, serializably.
///
/// Called by generated code; see the `async_for!` macro for the user-facing contract.
#[doc(hidden)]
pub fn run_async_for<Task: Sync + serde::Serialize + serde::de::DeserializeOwned, I: LoopIndex>(
    site: &'static CallSite,
    range: Range<I>,
    task: &Task,
    opts: Opts,
    register: fn(&Task, &mut Registry),
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
) -> Result<()> {
    let ctx = context();
    let threads = opts.threads.unwrap_or(ctx.config().threads);
    let bounds = |i: I| {
        i.to_usize().ok_or_else(|| {
            Error::invalid(
                "async_for!",
                format!("{site}: the index range must not be negative"),
            )
        })
    };
    let (start, end) = (bounds(range.start)?, bounds(range.end)?);
    let n = end.saturating_sub(start);
    if n > u32::MAX as usize {
        return Err(Error::invalid(
            "async_for!",
            format!("{site}: {n} indices; at most 2^32 per call are supported"),
        ));
    }
    let mut registry = Registry::default();
    register(task, &mut registry);
    registry.check(site)?;
    if registry.entries.len() > MAX_TABLES {
        return Err(Error::invalid(
            "async_for!",
            format!("{site}: the body captures more than {MAX_TABLES} DDSs"),
        ));
    }
    // With checkpoints on: recovery may skip this call; after it, the tables it wrote are
    // checkpointed (see `crate::checkpoint`).
    let checkpointing = crate::checkpoint::active();
    if checkpointing && crate::checkpoint::enter_loop(&site.to_string())? {
        return Ok(());
    }
    let leave = |written: Vec<bool>| -> Result<()> {
        if !checkpointing {
            return Ok(());
        }
        let tables: Vec<_> = registry
            .entries
            .iter()
            .zip(&written)
            .filter(|(_, w)| **w)
            .map(|(e, _)| e.table.clone())
            .collect();
        crate::checkpoint::leave_loop(&site.to_string(), &tables)
    };
    let here = crate::cluster::here();
    if here.is_distributed() {
        let written = run_distributed(
            site, start, end, task, &opts, &registry, run, record, &here, threads,
        )?;
        return leave(written);
    }
    if n == 0 {
        return leave(Vec::new());
    }

    let (locks, bases) = registry.lock_all(site)?;

    if threads == 1 && ctx.config().world_size == 1 {
        // One worker in a world of one: the loop order is a serial order, so no plan is
        // needed; tables are used directly.
        let t0 = Instant::now();
        let outcome = run_serially(site, start..end, task, run, &bases);
        record_stats(site, |s| {
            s.calls += 1;
            s.running += t0.elapsed();
            s.strategy = "serial";
            s.groups = 1;
        });
        outcome?;
        let written = if checkpointing {
            serial_written(site, start, n, task, record, &bases, &registry)?
        } else {
            Vec::new()
        };
        drop(locks);
        return leave(written);
    }

    let key = PlanKey::new(site, start..end, threads, &opts, &registry);
    // Locking runs number a worker's tasks (and chunks) in 32 bits, and undo a task by
    // unwinding out of its body (with `panic = "abort"`, re-checked loops re-plan).
    if opts.recheck && cfg!(panic = "unwind") && n < (u32::MAX / 2) as usize {
        // Accesses change between calls: locks rather than a plan per call.
        let modes = match kept().modes.take(&key) {
            Some(modes) => modes,
            None if recorded_first_call(threads) => {
                let log = recorded_call(site, start, n, task, record, &bases, None);
                drop(locks);
                let modes = plan::slot_modes(&log?.0, &table_infos(&registry, &bases));
                let written = written_slots(&modes);
                kept().modes.put(key, modes);
                return leave(written);
            }
            None => {
                let t0 = Instant::now();
                let log = reconnoitre(site, start, n, task, record, &bases, threads)?;
                let modes = plan::slot_modes(&log, &table_infos(&registry, &bases));
                record_stats(site, |s| s.recon += t0.elapsed());
                modes
            }
        };
        let t0 = Instant::now();
        let outcome = super::locks::run_locked(
            site, start, n, task, run, &registry, &bases, &modes, threads,
        );
        record_stats(site, |s| {
            s.calls += 1;
            s.running += t0.elapsed();
            s.strategy = "locks";
            if let Ok(o) = &outcome {
                s.groups = o.chunks;
                s.retried += o.retried as u64;
            }
        });
        drop(locks);
        let written = written_slots(&modes);
        // A body that wrote a table reconnaissance saw only read: learn again next call.
        if !matches!(outcome, Err(Error::AccessOutsidePlan { .. })) {
            kept().modes.put(key, modes);
        }
        outcome?;
        return leave(written);
    }
    let cached = if opts.recheck {
        None
    } else {
        kept().plans.take(&key)
    };
    let mut plan = match cached {
        Some(c) => c.plan,
        None if recorded_first_call(threads) => {
            let tables = table_infos(&registry, &bases);
            let log = recorded_call(site, start, n, task, record, &bases, Some(&tables));
            drop(locks);
            let (log, ahead) = log?;
            let plan = make_plan(
                site,
                log,
                Recorded(ahead),
                &registry,
                &bases,
                &opts,
                threads,
                start,
                n,
            );
            let written = written_slots(&plan.modes);
            kept().plans.put(key, Cached { plan, dist: None });
            return leave(written);
        }
        None => {
            let t0 = Instant::now();
            let log = reconnoitre(site, start, n, task, record, &bases, threads)?;
            let recon = Reconnoitred(t0.elapsed());
            make_plan(
                site, log, recon, &registry, &bases, &opts, threads, start, n,
            )
        }
    };

    let t0 = Instant::now();
    let steps = Work::all(&plan.schedule);
    let outcome = execute(
        site,
        start,
        task,
        run,
        &registry,
        &bases,
        &mut plan,
        threads,
        &steps,
        &mut |_, errors| Ok(errors.failed()),
    );
    record_stats(site, |s| {
        s.calls += 1;
        s.running += t0.elapsed();
    });
    drop(locks);
    let written = written_slots(&plan.modes);
    match &outcome {
        Err(Error::AccessOutsidePlan { .. }) => {}
        _ => kept().plans.put(key, Cached { plan, dist: None }),
    }
    outcome?;
    leave(written)
}

/// The slots a plan lets tasks write.
fn written_slots(modes: &[SlotMode]) -> Vec<bool> {
    modes.iter().map(|m| *m != SlotMode::ReadOnly).collect()
}

/// Which tables a loop run serially (no plan) may write, for its checkpoint: found by
/// reconnaissance once per call site and tables, then cached.
fn serial_written<Task: Sync, I: LoopIndex>(
    site: &'static CallSite,
    start: usize,
    n: usize,
    task: &Task,
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    bases: &[Base],
    registry: &Registry,
) -> Result<Vec<bool>> {
    let key = (
        site as *const CallSite as usize,
        bases.iter().map(|b| (b.id, b.shape)).collect(),
        start,
        n,
    );
    let kept = kept();
    if let Some(w) = kept.serial_written.get(&key) {
        return Ok(w.clone());
    }
    let t0 = Instant::now();
    let log = reconnoitre(site, start, n, task, record, bases, 1)?;
    let written: Vec<bool> = (0..registry.entries.len()).map(|s| log.writes(s)).collect();
    // Set-up work, like planning: reported with reconnaissance.
    record_stats(site, |s| s.recon += t0.elapsed());
    kept.serial_written.insert(key, written.clone());
    Ok(written)
}

/// Where a log comes from.
enum LogSource {
    /// Reconnaissance, which took this long.
    Reconnoitred(std::time::Duration),
    /// A recorded run, with the planner's first pass perhaps done already.
    Recorded(Option<plan::GatherAhead>),
}
use LogSource::{Reconnoitred, Recorded};

/// Plans from an access log, reporting what it found (`threads`: workers over the whole
/// job).
#[allow(clippy::too_many_arguments)]
fn make_plan(
    site: &CallSite,
    log: AccessLog,
    source: LogSource,
    registry: &Registry,
    bases: &[Base],
    opts: &Opts,
    threads: usize,
    start: usize,
    n: usize,
) -> Plan {
    let ctx = context();
    let t1 = Instant::now();
    let tables = table_infos(registry, bases);
    let config = PlanConfig {
        threads,
        blocks: opts.blocks,
        seed: opts.seed.unwrap_or(ctx.config().seed),
        first_index: start,
    };
    let (recon, ahead, source) = match source {
        Reconnoitred(t) => (
            t,
            None,
            format!("reconnaissance of {n} tasks in {:.3} s", t.as_secs_f64()),
        ),
        Recorded(ahead) => (
            std::time::Duration::ZERO,
            ahead,
            format!("a recorded run of {n} tasks"),
        ),
    };
    let plan = crate::cluster::here()
        .pool(ctx.config().threads.max(1))
        .install(|| plan::plan_ahead(log, &tables, &config, ahead));
    let t2 = Instant::now();
    let summary = format!(
        "{site}: {source}; {} plan with {} groups in {} batches, largest {} tasks, in {:.3} s",
        plan.stats.strategy,
        plan.stats.groups,
        plan.stats.batches,
        plan.stats.largest_group,
        (t2 - t1).as_secs_f64()
    );
    // Long set-up work is always worth a line: the first call of a loop is slower than the
    // rest, and a user should know why.
    if ctx.config().verbose || recon + (t2 - t1) > std::time::Duration::from_secs(2) {
        eprintln!("strads-ap: {summary}");
    }
    tracing::debug!("{summary}");
    if threads > 1 && plan.stats.largest_group * 2 > n && n >= 64 {
        tracing::warn!(
            "{site}: most tasks conflict with each other ({} of {n} in one group), so the \
             loop runs nearly serially; declare the hot table relaxed if approximate \
             merging is acceptable",
            plan.stats.largest_group
        );
    }
    record_stats(site, |s| {
        s.recon += recon;
        s.planning += t2 - t1;
        s.strategy = plan.stats.strategy;
        s.groups = plan.stats.groups;
    });
    plan
}

/// What every rank says about itself when entering a distributed `async_for!`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    threads: usize,
    cached: bool,
    /// Per slot: the table has a shadow here.
    has: Vec<bool>,
    /// Per slot: the shadow is current for the cached plan.
    fresh: Vec<bool>,
}

/// `async_for!` across ranks (see [`super::dist_async`]).
#[allow(clippy::too_many_arguments)]
fn run_distributed<Task: Sync + serde::Serialize + serde::de::DeserializeOwned, I: LoopIndex>(
    site: &'static CallSite,
    start: usize,
    end: usize,
    task: &Task,
    opts: &Opts,
    registry: &Registry,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    here: &crate::cluster::RankCtx,
    threads: usize,
) -> Result<Vec<bool>> {
    let op = "async_for!";
    let comm = here.comm_for(op)?;
    let shipped = super::ship_task(comm, site, task)?;
    let task = shipped.as_ref().unwrap_or(task);
    let (world, me) = (comm.world_size(), comm.rank());
    let n = end.saturating_sub(start);
    if world > MAX_RANKS {
        return Err(Error::Config(format!(
            "{site}: async_for! runs on at most {MAX_RANKS} ranks for now ({world} here)"
        )));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let slots = registry.entries.len();
    let key = PlanKey::new(site, start..end, threads, opts, registry);
    let cached = if opts.recheck {
        None
    } else {
        kept().plans.take(&key)
    };
    let fingerprint = cached
        .as_ref()
        .and_then(|c| c.dist.as_ref())
        .map(|d| d.fingerprint);
    let states: Vec<(bool, bool)> = registry
        .entries
        .iter()
        .map(|e| e.table.shadow_state(fingerprint))
        .collect();
    let agreed = comm.allreduce(
        Entry {
            threads,
            cached: cached.is_some(),
            has: states.iter().map(|s| s.0).collect(),
            fresh: states.iter().map(|s| s.1).collect(),
        },
        |a, b| Entry {
            threads: a.threads + b.threads,
            cached: a.cached && b.cached,
            has: a.has.iter().zip(&b.has).map(|(x, y)| *x && *y).collect(),
            fresh: a
                .fresh
                .iter()
                .zip(&b.fresh)
                .map(|(x, y)| *x && *y)
                .collect(),
        },
    )?;
    let cached = cached.filter(|_| agreed.cached);

    // Every table full-length here until the loop ends. A table is gathered whole when
    // some rank has no shadow of it yet, when it is relaxed (every rank replicates it),
    // or when the loop is about to be planned: reconnaissance must see current values,
    // as accesses may depend on them.
    let t_entry = Instant::now();
    let mut shrink = Shrink {
        tables: registry.entries.iter().map(|e| &*e.table).collect(),
        validity: vec![ShadowValidity::Stale; slots],
    };
    let mut gathered = vec![false; slots];
    for (slot, e) in registry.entries.iter().enumerate() {
        let relaxed = e.table.is_relaxed() && e.merger.is_some();
        if relaxed || !agreed.has[slot] || cached.is_none() {
            e.table.gather_all(op, comm)?;
            gathered[slot] = true;
        } else {
            e.table.expand_from_shadow(op)?;
        }
    }
    // Read-only tables some rank holds stale (changed since it last held all of them, and
    // not gathered now) need transfers; the others skip them. The same on every rank:
    // `agreed` and the plans are.
    let stale = |modes: &[SlotMode], s: usize| {
        modes[s] == SlotMode::ReadOnly && !gathered[s] && !agreed.fresh[s]
    };
    // A cached plan works those transfers out when first needed.
    let cut_read_only = match &cached {
        Some(Cached {
            plan,
            dist: Some(dist),
        }) => !dist.read_only && (0..slots).any(|s| stale(&plan.modes, s)),
        _ => false,
    };
    // Owners of map entries (by key hash), for cutting a plan; read before locking.
    let owners: Vec<Option<Vec<u16>>> = match cached.is_none() || cut_read_only {
        true => registry.entries.iter().map(|e| e.table.owners()).collect(),
        false => Vec::new(),
    };
    let (locks, bases) = registry.lock_all(site)?;
    if cached.is_none() {
        // Gathering whole tables is part of planning: later calls fetch only what the
        // plan needs.
        record_stats(site, |s| s.recon += t_entry.elapsed());
    }

    let lens: Vec<usize> = bases.iter().map(|b| b.len).collect();
    let (mut plan, mut dist) = match cached {
        Some(Cached {
            plan,
            dist: Some(dist),
        }) => (plan, dist),
        _ => {
            let t0 = Instant::now();
            let share = crate::store::RangePartition::new(n, world).range(me);
            let mine = reconnoitre(
                site,
                start + share.start,
                share.len(),
                task,
                record,
                &bases,
                threads,
            );
            let bytes = comm.gather_outcomes(mine.map(|log| log.to_bytes(start + share.start)))?;
            let log = AccessLog::from_byte_parts(&bytes, slots).map_err(Error::Transport)?;
            drop(bytes);
            if log.tasks() != n {
                return Err(Error::Transport(format!(
                    "{site}: the ranks' reconnaissance logs hold {} tasks, expected {n}",
                    log.tasks()
                )));
            }
            let plan = make_plan(
                site,
                log,
                Reconnoitred(t0.elapsed()),
                registry,
                &bases,
                opts,
                agreed.threads,
                start,
                n,
            );
            let t_cut = Instant::now();
            let dist = DistPlan::new(&plan, &lens, &owners, world, me, Transfers::Written);
            let prints = comm.allgather(dist.fingerprint)?;
            record_stats(site, |s| s.planning += t_cut.elapsed());
            if let Some(rank) = prints.iter().position(|&f| f != dist.fingerprint) {
                return Err(Error::Divergence {
                    rank,
                    driver: site.to_string(),
                    here: format!("{site} with a different plan (an internal error)"),
                });
            }
            if context().config().verbose && me == 0 {
                eprintln!(
                    "strads-ap: {site}: {} steps across {world} ranks, about {} elements \
                     fetched per step",
                    dist.steps.len(),
                    dist.received
                );
            }
            (plan, dist)
        }
    };

    if cut_read_only {
        let t_cut = Instant::now();
        let read_only = DistPlan::new(&plan, &lens, &owners, world, me, Transfers::ReadOnly);
        dist.add_read_only(read_only);
        record_stats(site, |s| s.planning += t_cut.elapsed());
    }
    // Read-only tables already current here need no transfers.
    let skip: Vec<bool> = (0..slots)
        .map(|s| plan.modes[s] == SlotMode::ReadOnly && !stale(&plan.modes, s))
        .collect();
    let t0 = Instant::now();
    // SAFETY: the tables are locked (`bases`) and no worker runs yet.
    // Tables just gathered whole need nothing before the first step either.
    let mut exchanger = unsafe {
        Exchanger::new(
            comm,
            &dist,
            skip.clone(),
            gathered.clone(),
            registry,
            &bases,
            &plan.modes,
        )
    };
    let outcome = execute(
        site,
        start,
        task,
        run,
        registry,
        &bases,
        &mut plan,
        threads,
        &dist.steps,
        // SAFETY: `execute` calls this only between steps, when no worker runs.
        &mut |i, errors| unsafe { exchanger.exchange(i, registry, &bases, errors) },
    );
    let exchanging = exchanger.spent;
    drop(exchanger);
    let running = t0.elapsed();
    record_stats(site, |s| {
        s.calls += 1;
        s.running += running;
    });
    drop(locks);
    let modes = plan.modes.clone();
    if outcome.is_ok() {
        for (slot, v) in shrink.validity.iter_mut().enumerate() {
            *v = match plan.modes[slot] {
                SlotMode::Checked => ShadowValidity::Stale,
                SlotMode::Relaxed => ShadowValidity::All,
                SlotMode::ReadOnly if gathered[slot] => ShadowValidity::All,
                SlotMode::ReadOnly if skip[slot] => ShadowValidity::Unchanged,
                SlotMode::ReadOnly => ShadowValidity::Plan(dist.fingerprint),
            };
        }
        kept().plans.put(
            key,
            Cached {
                plan,
                dist: Some(dist),
            },
        );
    }
    let written = written_slots(&modes);
    let t_shrink = Instant::now();
    drop(shrink);
    if context().config().verbose && me == 0 {
        eprintln!(
            "strads-ap: {site}: call in {:.4} s: tables ready in {:.4} s, steps {:.4} s of \
             which exchanges {:.4} s, shadows kept in {:.4} s",
            t_entry.elapsed().as_secs_f64(),
            (t0 - t_entry).as_secs_f64(),
            running.as_secs_f64(),
            exchanging.as_secs_f64(),
            t_shrink.elapsed().as_secs_f64(),
        );
    }
    outcome.map(|()| written)
}

/// Cuts tables back to this rank's range when a distributed loop ends, however it ends,
/// keeping the full-length elements as shadows.
struct Shrink<'a> {
    tables: Vec<&'a dyn TableHandle>,
    validity: Vec<ShadowValidity>,
}

impl Drop for Shrink<'_> {
    fn drop(&mut self) {
        for (t, v) in self.tables.iter().zip(&self.validity) {
            t.shrink_to_shadow(*v);
        }
    }
}

/// Runs every index in order on this thread (one worker, one process).
fn run_serially<Task, I: LoopIndex>(
    site: &CallSite,
    range: Range<usize>,
    task: &Task,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    bases: &[Base],
) -> Result<()> {
    let ctx = ExecCtx::new(bases.iter().map(Base::binding).collect());
    catch_unwind(AssertUnwindSafe(|| {
        run(task, &ctx, Indices::range(range, &ctx))
    }))
    .map_err(|payload| body_error(site, ctx.current(), payload))
}

/// Indices `start..start + n` in consecutive ranges of `chunk` (the last may be shorter).
fn chunk_ranges(start: usize, n: usize, chunk: usize) -> Vec<Range<usize>> {
    (0..n)
        .step_by(chunk)
        .map(|s| start + s..start + (s + chunk).min(n))
        .collect()
}

/// Reconnaissance: runs `record` for every index, in parallel chunks, and returns the
/// per-task access log in index order.
fn reconnoitre<Task: Sync, I: LoopIndex>(
    site: &CallSite,
    start: usize,
    n: usize,
    task: &Task,
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    bases: &[Base],
    threads: usize,
) -> Result<AccessLog> {
    // Chunks of 2^shift tasks, so that their logs join without copying.
    let chunk = n.div_ceil(threads * 8).max(1024).next_power_of_two();
    let shift = chunk.trailing_zeros();
    let chunks = chunk_ranges(start, n, chunk);
    let pool = crate::cluster::here().pool(threads);
    let logs: Vec<Result<AccessLog>> = pool.install(|| {
        chunks
            .par_iter()
            .map(|r| {
                let room = LogRoom::new(r.len(), bases.len());
                let rec = Recorder::new(bases.iter().map(Base::recorded).collect(), room);
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    record(task, &rec, RecordIndices::new(r.clone(), &rec));
                }));
                match outcome {
                    Ok(()) => Ok(rec.into_log()),
                    Err(payload) => {
                        rec.abort_task();
                        Err(body_error(site, rec.index(), payload))
                    }
                }
            })
            .collect()
    });
    Ok(AccessLog::from_chunks(
        shift,
        logs.into_iter().collect::<Result<_>>()?,
    ))
}

/// Whether a loop's first call in a world of one runs as a recorded run (see
/// [`recorded_call`]) rather than as reconnaissance, planning and a planned run.
///
/// Reconnaissance repeats the body's memory traffic and adds its logging, so on `T`
/// workers the first call costs about `(r + 1) / T` serial epochs plus planning, with
/// `r` ≈ 2 (SGDMF: reconnaissance 0.94 serial epochs on 2 workers); a recorded run costs
/// `f` ≈ 1.2–1.3 on one worker, whatever `T`. So the recorded run is cheaper up to two
/// workers, and parallel reconnaissance beyond.
fn recorded_first_call(threads: usize) -> bool {
    threads <= 2
}

/// A recorded run: every index of `start..start + n` in loop order on this thread, with
/// views that write the tables in place and log each task's accesses (see
/// [`Recorder::in_place`]), so that one pass runs the call and reconnoitres it. Its time
/// is reported as [`LoopStats::recorded`](super::LoopStats::recorded).
///
/// The log is made in chunks of `2^RECORDED_SHIFT` tasks. A pool thread helps: it maps
/// the memory of the next chunks' logs beforehand (the recording thread would otherwise
/// take a page fault every few hundred tasks), sorts and deduplicates each finished
/// chunk's task logs, and with `tables` does the planner's first pass on it (see
/// [`plan::GatherAhead`]). The less the recording thread does between tasks, the more of
/// their cache misses its CPU overlaps.
fn recorded_call<Task, I: LoopIndex>(
    site: &CallSite,
    start: usize,
    n: usize,
    task: &Task,
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    bases: &[Base],
    tables: Option<&[TableInfo]>,
) -> Result<(AccessLog, Option<plan::GatherAhead>)> {
    use std::sync::mpsc::channel;
    let t0 = Instant::now();
    const RECORDED_SHIFT: u32 = 16;
    let chunks = chunk_ranges(start, n, 1 << RECORDED_SHIFT);
    let sizes: Vec<usize> = chunks.iter().map(Range::len).collect();
    let per_task = bases.len();
    let (room_tx, rooms) = channel::<LogRoom>();
    let (done, done_rx) = channel::<AccessLog>();
    let (back_tx, back) = channel::<(Vec<AccessLog>, Option<plan::GatherAhead>)>();
    let mut ahead = tables.map(|t| plan::GatherAhead::new(t, start));
    let mut outcome = Ok(());
    crate::cluster::here().pool(1).in_place_scope(|scope| {
        scope.spawn(move |_| {
            // Two rooms ahead, one more for each chunk finished. The first chunk maps its
            // own: it starts before this helper can have made one.
            let mut next = 1;
            let send_room = |next: &mut usize| {
                if let Some(&tasks) = sizes.get(*next) {
                    // The recording thread may have stopped (a body failed): no matter.
                    let _ = room_tx.send(LogRoom::new(tasks, per_task));
                    *next += 1;
                }
            };
            send_room(&mut next);
            send_room(&mut next);
            let mut logs = Vec::with_capacity(sizes.len());
            while let Ok(mut log) = done_rx.recv() {
                send_room(&mut next);
                log.settle();
                if let Some(a) = &mut ahead {
                    a.add(&log);
                }
                logs.push(log);
            }
            let _ = back_tx.send((logs, ahead));
        });
        for (i, r) in chunks.iter().enumerate() {
            // Never wait for the helper: it may not have started (its pool is busy, or
            // this thread is that pool's), and then we map our own room.
            let made = if i == 0 { None } else { rooms.try_recv().ok() };
            let room = made.unwrap_or_else(|| LogRoom::new(r.len(), per_task));
            let rec = Recorder::in_place(bases.iter().map(Base::recorded).collect(), room);
            let ran = catch_unwind(AssertUnwindSafe(|| {
                record(task, &rec, RecordIndices::new(r.clone(), &rec));
            }));
            if let Err(payload) = ran {
                outcome = Err(body_error(site, rec.index(), payload));
                break;
            }
            // The helper lives until `done` is dropped below.
            let _ = done.send(rec.into_log());
        }
        // Ends the helper's loop (and unblocks it if we stopped early).
        drop(done);
        drop(rooms);
    });
    record_stats(site, |s| {
        s.calls += 1;
        s.recorded += t0.elapsed();
        s.recorded_calls += 1;
        s.strategy = "recorded";
        s.groups = 1;
        s.workers = 1;
    });
    outcome?;
    let (logs, ahead) = back
        .recv()
        .expect("the recording helper returns the logs it was sent");
    Ok((AccessLog::from_chunks(RECORDED_SHIFT, logs), ahead))
}

/// Per-worker state: the context whose bindings views read, and replicas of relaxed tables.
struct Worker {
    ctx: ExecCtx,
    replicas: Vec<(usize, Replica)>,
}

#[allow(clippy::too_many_arguments)]
fn execute<Task: Sync, I: LoopIndex>(
    site: &CallSite,
    start: usize,
    task: &Task,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    registry: &Registry,
    bases: &[Base],
    plan: &mut Plan,
    threads: usize,
    steps: &[Work],
    between: &mut dyn FnMut(usize, &FirstError) -> Result<bool>,
) -> Result<()> {
    let merges = Merges::default();
    let errors = FirstError::new();
    // Disjoint borrows: components re-tag between batches while the schedule is read.
    let Plan {
        modes,
        tags,
        schedule,
        log,
        indexed_by_task,
        ..
    } = plan;
    let modes: &[SlotMode] = modes;
    let new_worker = |tags: &[Vec<u32>]| -> Worker {
        let (bindings, replicas) = bind_worker(registry, bases, modes, &merges, |slot, b| {
            if modes[slot] == SlotMode::Checked {
                b.tags = tags[slot].as_ptr();
            }
        });
        let mut ctx = ExecCtx::new(bindings);
        ctx.prefetch = indexed_by_task
            .iter()
            .map(|&slot| {
                (
                    bases[slot].ptr as usize,
                    registry.entries[slot].table.elem_size(),
                )
            })
            .collect();
        Worker { ctx, replicas }
    };
    let run_group = |w: &mut Worker, group: GroupRef, tasks: &[u32]| {
        for (slot, b) in w.ctx.bindings.iter_mut().enumerate() {
            if modes[slot] == SlotMode::Checked {
                b.allowed = schedule.allowed(slot, group);
            }
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run(task, &w.ctx, Indices::list(start, tasks, &w.ctx));
        }));
        if let Err(payload) = outcome {
            errors.set(body_error(site, w.ctx.current(), payload));
        }
        push_replicas(registry, bases, &merges, &mut w.replicas);
    };

    let pool = crate::cluster::here().pool(threads);
    let mut stopped = false;
    for (i, work) in steps.iter().enumerate() {
        if between(i, &errors)? || errors.failed() {
            stopped = true;
            break;
        }
        match (&*schedule, work) {
            (Schedule::Rotation(rot), Work::Cells(cells)) => {
                if cells.is_empty() {
                    continue;
                }
                let sched = CellScheduler::new(rot, cells, slices_per_cell(rot));
                let tags: &[Vec<u32>] = tags;
                let work = || {
                    let mut w = new_worker(tags);
                    while let Some(unit) = sched.take(&errors) {
                        let cell = &rot.cells[unit.cell];
                        let tasks = &cell.tasks[unit.tasks.clone()];
                        run_group(&mut w, GroupRef::Cell(unit.cell), tasks);
                        sched.finish(unit.row, unit.col);
                    }
                };
                pool.on_workers(threads, &work);
            }
            (Schedule::Components(batches), Work::Groups { batch: b, groups }) => {
                if groups.is_empty() {
                    continue;
                }
                let batch = &batches[*b];
                if batches.len() > 1 {
                    plan::retag(log, modes, batch, tags);
                }
                let tags: &[Vec<u32>] = tags;
                let next = AtomicUsize::new(0);
                let work = || {
                    let mut w = new_worker(tags);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= groups.len() || errors.failed() {
                            break;
                        }
                        let g = groups[i];
                        let group = GroupRef::Group {
                            batch: *b,
                            group: g,
                        };
                        run_group(&mut w, group, &batch.groups[g].tasks);
                    }
                };
                pool.on_workers(threads.min(groups.len()), &work);
            }
            _ => unreachable!("steps do not match the schedule"),
        }
    }
    record_stats(site, |s| {
        s.merging += merges.spent();
        s.workers = threads;
    });
    if !stopped {
        between(steps.len(), &errors)?;
    }
    errors.into_result()
}

/// A worker's bindings of the captured tables by their modes: read-only tables refuse
/// writes, relaxed tables get a replica of the table (returned with its slot); then
/// `adjust` completes each binding (a checked table's tags or locks).
pub(super) fn bind_worker(
    registry: &Registry,
    bases: &[Base],
    modes: &[SlotMode],
    merges: &Merges,
    mut adjust: impl FnMut(usize, &mut Binding),
) -> (Vec<Binding>, Vec<(usize, Replica)>) {
    let mut replicas = Vec::new();
    let bindings = bases
        .iter()
        .enumerate()
        .map(|(slot, base)| {
            let mut b = base.binding();
            match modes[slot] {
                SlotMode::ReadOnly => {
                    b.writable = false;
                    b.read_only_reason = "reconnaissance saw no task write this table";
                }
                SlotMode::Checked => {}
                SlotMode::Relaxed => {
                    let merger = registry.entries[slot]
                        .merger
                        .as_ref()
                        .expect("relaxed tables have a merger");
                    // Making a replica is no merge: not counted as one.
                    // SAFETY: the master holds `len` elements, locked by this engine;
                    // masters of relaxed tables are only touched under `merges`' lock.
                    let r = merges.with(|_| unsafe { merger.replica(base.ptr, base.len) });
                    b.ptr = r.ptr();
                    replicas.push((slot, r));
                }
            }
            adjust(slot, &mut b);
            b
        })
        .collect();
    (bindings, replicas)
}

/// Adds a worker's relaxed replicas' deltas to their tables and refreshes them.
pub(super) fn push_replicas(
    registry: &Registry,
    bases: &[Base],
    merges: &Merges,
    replicas: &mut [(usize, Replica)],
) {
    if replicas.is_empty() {
        return;
    }
    merges.merge(|_| {
        for (slot, r) in replicas {
            let merger = registry.entries[*slot].merger.as_ref().expect("merger");
            // SAFETY: the master is locked by this engine and only touched under
            // `merges`' lock, which we hold.
            unsafe { merger.push(bases[*slot].ptr, r) };
        }
    })
}

/// Tasks per unit of work the rotation scheduler aims for: small enough that every block
/// pair is visited several times per call, which keeps the update order close to the
/// serial loop's (a cell run in one piece is a stratum of correlated updates, which slows
/// SGD per epoch), large enough to amortise taking a unit.
const UNIT_TASKS: usize = 2048;

/// Into how many slices each rotation cell is cut.
fn slices_per_cell(rot: &plan::Rotation) -> usize {
    let tasks: usize = rot.cells.iter().map(|c| c.tasks.len()).sum();
    let cells = rot.cells.len().max(1);
    (tasks / cells / UNIT_TASKS).clamp(1, 16)
}

/// A slice of a rotation cell.
struct Unit {
    cell: usize,
    tasks: Range<usize>,
    row: usize,
    col: usize,
}

/// Hands out slices of rotation cells whose row and column blocks are both free: the
/// first slices of all cells (heaviest cell first), then the second slices, and so on.
struct CellScheduler {
    state: Mutex<CellState>,
    wake: Condvar,
}

struct CellState {
    row_busy: Vec<bool>,
    col_busy: Vec<bool>,
    /// Units not yet taken, in the order above.
    pending: Vec<Unit>,
    one_dimensional: bool,
    running: usize,
    waiting: usize,
}

impl CellScheduler {
    /// Units of `cells` (indices into the rotation's cells).
    fn new(rot: &plan::Rotation, cells: &[usize], slices: usize) -> Self {
        let mut cells: Vec<usize> = cells.to_vec();
        cells.sort_by_key(|&c| std::cmp::Reverse(rot.cells[c].tasks.len()));
        let mut pending = Vec::new();
        for s in 0..slices {
            for &c in &cells {
                let cell = &rot.cells[c];
                let n = cell.tasks.len();
                let tasks = n * s / slices..n * (s + 1) / slices;
                if !tasks.is_empty() {
                    pending.push(Unit {
                        cell: c,
                        tasks,
                        row: cell.row as usize,
                        col: cell.col as usize,
                    });
                }
            }
        }
        CellScheduler {
            state: Mutex::new(CellState {
                row_busy: vec![false; rot.rows],
                col_busy: vec![false; rot.cols],
                pending,
                one_dimensional: rot.cols == 1,
                running: 0,
                waiting: 0,
            }),
            wake: Condvar::new(),
        }
    }

    /// The next unit to run, or `None` when all are taken (or a run failed).
    fn take(&self, errors: &FirstError) -> Option<Unit> {
        let mut st = self.state.lock();
        loop {
            if st.pending.is_empty() || errors.failed() {
                return None;
            }
            let free = st
                .pending
                .iter()
                .position(|u| !st.row_busy[u.row] && (st.one_dimensional || !st.col_busy[u.col]));
            if let Some(i) = free {
                let unit = st.pending.remove(i);
                st.row_busy[unit.row] = true;
                st.col_busy[unit.col] = true;
                st.running += 1;
                return Some(unit);
            }
            if st.running == 0 {
                // Unreachable for a valid plan: nothing runs, so every block is free.
                return None;
            }
            st.waiting += 1;
            st = self.wake.wait(st);
            st.waiting -= 1;
        }
    }

    fn finish(&self, row: usize, col: usize) {
        let mut st = self.state.lock();
        st.row_busy[row] = false;
        st.col_busy[col] = false;
        st.running -= 1;
        let waiting = st.waiting > 0;
        drop(st);
        if waiting {
            self.wake.notify_all();
        }
    }
}
