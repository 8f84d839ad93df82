//! The data-parallel engine: runs `sync_for!` bodies over mini-batches.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use crate::sync::RwLock;
use std::time::Instant;

use super::ctx::{Binding, Dirty, ExecCtx, UNTOUCHED};
use super::{
    body_error, record_stats, Base, CallSite, FirstError, Merges, Opts, Registry, SyncMode,
};
use crate::cluster::collective::Comm;
use crate::cluster::context;
use crate::dds::table::{Merger, Replica, TableHandle};
use crate::dds::{DVector, Element};
use crate::error::{Error, Result};
use crate::recon::{AccessLog, LogRoom, Recorder};

/// Reconnaissance logs of `sync_for!` (with `Opts::re`), one task per mini-batch, keyed by
/// (call site, tables and their shapes, data length, mini-batch size).
/// Kept per rank.
#[derive(Default)]
struct ReCache(DashMap<(usize, Vec<(u64, u64)>, usize, usize), Arc<AccessLog>>);

fn re_cache() -> Arc<ReCache> {
    crate::cluster::here().local::<ReCache>()
}

/// Runs a `sync_for!` loop: `run` once per mini-batch of `data`.
///
/// Called by generated code; see the `sync_for!` macro for the user-facing contract.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn run_sync_for<Task: Sync + serde::Serialize + serde::de::DeserializeOwned, D: Element>(
    site: &'static CallSite,
    data: &DVector<D>,
    minibatch: usize,
    mode: SyncMode,
    task: &Task,
    opts: Opts,
    register: fn(&Task, &mut Registry),
    run: fn(&Task, &ExecCtx, &[D]),
    record: fn(&Task, &Recorder, &[D]),
) -> Result<()> {
    if minibatch == 0 {
        return Err(Error::invalid(
            "sync_for!",
            format!("{site}: the mini-batch size must be at least 1"),
        ));
    }
    let ctx = context();
    let threads = opts.threads.unwrap_or(ctx.config().threads);
    let mut registry = Registry::default();
    register(task, &mut registry);
    registry.check(site)?;
    let data_captured = registry.entries.iter().any(|e| e.table.id() == data.id());
    // With checkpoints on: recovery may skip this call (see `crate::checkpoint`).
    let checkpointing = crate::checkpoint::active();
    if checkpointing && crate::checkpoint::enter_loop(&site.to_string())? {
        return Ok(());
    }

    // A job of several ranks: each rank runs the mini-batches of its part of `data`
    // against a full copy of every other captured table, and the ranks combine their
    // changes at every synchronisation point (see `CrossRank`).
    let here = crate::cluster::here();
    let comm = if here.is_distributed() {
        Some(here.comm_for("sync_for!")?)
    } else {
        None
    };
    // The driver's captures, on every rank.
    let shipped = match comm {
        Some(comm) => super::pipeline::ship_task(comm, site, task)?,
        None => None,
    };
    let task = shipped.as_ref().unwrap_or(task);
    let mut _restore = None;
    if let Some(comm) = comm {
        if data_captured {
            return Err(Error::invalid(
                "sync_for!",
                format!(
                    "{site}: in a job of several ranks the body cannot capture the input \
                     DVector yet"
                ),
            ));
        }
        let others: Vec<&dyn TableHandle> = registry
            .entries
            .iter()
            .map(|e| &*e.table)
            .filter(|t| t.id() != data.id())
            .collect();
        _restore = Some(RestoreRanges(others.clone()));
        for t in others {
            t.gather_all("sync_for!", comm)?;
        }
    }

    let (locks, bases) = registry.lock_all(site)?;
    let mut data_lock = if data_captured {
        None
    } else {
        Some(data.table.lock("sync_for!")?)
    };
    let items: &[D] = {
        let (ptr, len) = match &mut data_lock {
            Some(l) => (l.ptr(), l.len()),
            None => {
                let b = bases.iter().find(|b| b.id == data.id()).expect("captured");
                (b.ptr, b.len)
            }
        };
        // SAFETY: the table is locked by this engine for the whole call. Bodies only read
        // the mini-batch slices; if the body also captures the data table, it is bound
        // read-only below, so nothing writes these elements while the slice lives.
        unsafe { std::slice::from_raw_parts(ptr as *const D, len) }
    };
    let batches: Vec<&[D]> = items.chunks(minibatch).collect();
    let first_item = data.table.offset;
    let batch_start = |b: usize| first_item + b * minibatch;

    // Which tables get per-worker replicas: aggregatable ones the body may write.
    let re_key = (
        site as *const CallSite as usize,
        bases.iter().map(|b| (b.id, b.shape)).collect::<Vec<_>>(),
        items.len(),
        minibatch,
    );
    let re_log: Option<Arc<AccessLog>> = if opts.re && comm.is_none() {
        let key = re_key.clone();
        let cached = if opts.recheck {
            None
        } else {
            re_cache().0.get(&key).map(|log| log.clone())
        };
        Some(match cached {
            Some(log) => log,
            None => {
                let t0 = Instant::now();
                let log = Arc::new(reconnoitre(
                    site, task, record, &bases, &batches, minibatch,
                )?);
                record_stats(site, |s| s.recon += t0.elapsed());
                re_cache().0.insert(key.clone(), log.clone());
                log
            }
        })
    } else {
        None
    };
    let written: Option<Vec<bool>> = re_log.as_ref().map(|log| {
        let mut written = vec![false; bases.len()];
        for t in 0..log.tasks() {
            for a in log.task(t) {
                written[a.slot()] |= a.write();
            }
        }
        written
    });
    // With reconnaissance, Hybrid workers refresh and push only the keys each
    // mini-batch touches, and views refuse any other key.
    let sparse = re_log
        .as_ref()
        .filter(|_| mode == SyncMode::Hybrid && threads > 1);
    let replicate: Vec<bool> = registry
        .entries
        .iter()
        .enumerate()
        .map(|(slot, e)| {
            e.merger.is_some()
                && e.table.id() != data.id()
                && written.as_ref().is_none_or(|w| w[slot])
                && threads > 1
        })
        .collect();

    let template: Vec<Binding> = registry
        .entries
        .iter()
        .zip(&bases)
        .enumerate()
        .map(|(slot, (e, base))| {
            let direct_write = threads == 1 && e.merger.is_some() && e.table.id() != data.id();
            Binding {
                writable: replicate[slot] || direct_write,
                read_only_reason: read_only_reason(
                    &*e.table,
                    e.table.id() == data.id(),
                    e.merger.is_some(),
                ),
                ..base.binding()
            }
        })
        .collect();

    let t0 = Instant::now();
    let errors = FirstError::new();
    let mut cross = comm.map(|comm| CrossRank::new(comm, &registry, &bases, data.id()));
    // Per replicated table, the keys pushed into its master so far in the current Hybrid
    // window (workers refresh just those from the master), and the time spent merging.
    let merges: Merges<Vec<Vec<usize>>> = Merges::new(Vec::new());
    // Hybrid workers merge each element under its own lock (`KeyLocks`) and hold `masters`
    // shared meanwhile; making a replica reads the whole master and holds it exclusively.
    let masters = RwLock::new(());
    let key_locks: Vec<KeyLocks> = (0..bases.len())
        .filter(|&slot| replicate[slot] && mode == SyncMode::Hybrid)
        .map(|slot| KeyLocks::new(bases[slot].len))
        .collect();
    let new_worker = || -> (ExecCtx, Vec<(usize, Replica)>) {
        let mut bindings = template.clone();
        let mut replicas = Vec::new();
        let _alone = masters.write();
        for (slot, b) in bindings.iter_mut().enumerate() {
            if replicate[slot] {
                let merger = registry.entries[slot].merger.as_ref().expect("merger");
                // SAFETY: the master is locked by this engine; no merge runs while we hold
                // `masters` exclusively (merges hold it shared).
                let r = unsafe { merger.replica(b.ptr, b.len) };
                b.ptr = r.ptr();
                replicas.push((slot, r));
            }
        }
        (ExecCtx::new(bindings), replicas)
    };
    let run_batch = |ctx: &ExecCtx, b: usize| {
        ctx.current.set(batch_start(b));
        let outcome = catch_unwind(AssertUnwindSafe(|| run(task, ctx, batches[b])));
        if let Err(payload) = outcome {
            errors.set(body_error(site, batch_start(b), payload));
        }
    };
    let pool = crate::cluster::here().pool(threads);
    match mode {
        _ if threads == 1 => {
            let (ctx, _) = new_worker();
            // Across ranks, BSP synchronises after every mini-batch (one worker per rank)
            // and Hybrid after every window; in a world of one there is nothing to wait for.
            let window = match (comm, mode) {
                (None, _) => batches.len().max(1),
                (Some(_), SyncMode::Bsp) => 1,
                (Some(_), SyncMode::Hybrid) => {
                    HYBRID_WINDOW.max(batches.len().div_ceil(HYBRID_SYNCS))
                }
            };
            let steps = steps_everywhere(comm, batches.len().div_ceil(window))?;
            for step in 0..steps {
                let lo = (step * window).min(batches.len());
                let hi = ((step + 1) * window).min(batches.len());
                let mut ran = 0;
                for b in lo..hi {
                    if errors.failed() {
                        break;
                    }
                    run_batch(&ctx, b);
                    ran += 1;
                }
                let stop = match &mut cross {
                    // SAFETY: between mini-batches nothing else touches the masters.
                    Some(c) => unsafe { c.sync(&registry, &bases, ran, &errors)? },
                    None => errors.failed(),
                };
                if stop {
                    break;
                }
            }
        }
        SyncMode::Hybrid => {
            // Across ranks: the local mini-batches in about `HYBRID_SYNCS` windows (at
            // least a few mini-batches per thread each), each ending in a synchronisation
            // point; in a world of one, one window of everything.
            let window = if comm.is_some() {
                (threads * HYBRID_WINDOW).max(batches.len().div_ceil(HYBRID_SYNCS))
            } else {
                batches.len().max(1)
            };
            let windows = steps_everywhere(comm, batches.len().div_ceil(window))?;
            // Without reconnaissance, workers note the keys they write (in their views)
            // and push only those; before each mini-batch they refresh only the keys
            // others pushed since. Each mini-batch still starts from the masters' current
            // values, at a cost that follows the keys touched, not the tables' sizes.
            let track = sparse.is_none();
            for w in 0..windows {
                let lo = (w * window).min(batches.len());
                let hi = ((w + 1) * window).min(batches.len());
                let next = AtomicUsize::new(lo);
                merges.with(|pushed| {
                    *pushed = vec![Vec::new(); replicate.iter().filter(|&&r| r).count()]
                });
                let work = || {
                    let (mut ctx, mut replicas) = new_worker();
                    let mut tracked: Vec<Tracked> = match track {
                        true => replicas
                            .iter()
                            .map(|(slot, _)| Tracked::new(bases[*slot].len))
                            .collect(),
                        false => Vec::new(),
                    };
                    for ((slot, _), t) in replicas.iter().zip(&tracked) {
                        ctx.bindings[*slot].dirty = t.dirty;
                    }
                    // Sparse mode: per replicated table, the tag of every key (the mini-batch
                    // that may touch it now).
                    let mut tags: Vec<Vec<u32>> = match sparse {
                        Some(_) => replicas
                            .iter()
                            .map(|(slot, _)| vec![UNTOUCHED; bases[*slot].len])
                            .collect(),
                        None => Vec::new(),
                    };
                    for ((slot, _), t) in replicas.iter().zip(&tags) {
                        ctx.bindings[*slot].tags = t.as_ptr();
                    }
                    loop {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        if b >= hi || errors.failed() {
                            break;
                        }
                        let t_merge = Instant::now();
                        match sparse {
                            None => {
                                // The keys others pushed since this worker last looked.
                                let fresh: Vec<Vec<usize>> = merges.with(|pushed| {
                                    tracked
                                        .iter_mut()
                                        .zip(pushed.iter())
                                        .map(|(t, log)| t.news(log))
                                        .collect()
                                });
                                let _shared = masters.read();
                                for (((t, (slot, r)), keys), locks) in tracked
                                    .iter_mut()
                                    .zip(&mut replicas)
                                    .zip(&fresh)
                                    .zip(&key_locks)
                                {
                                    let merger =
                                        registry.entries[*slot].merger.as_ref().expect("merger");
                                    let master = bases[*slot].ptr;
                                    // SAFETY: every merge of an element holds the element's lock,
                                    // which `catch_up` takes, and replicas are made only while
                                    // no merge runs (`masters`, held shared here).
                                    unsafe { t.catch_up(keys, &**merger, master, r, b, locks) };
                                }
                            }
                            Some(log) => {
                                let touched = log.task(b);
                                let _shared = masters.read();
                                for (((slot, r), t), locks) in
                                    replicas.iter_mut().zip(&mut tags).zip(&key_locks)
                                {
                                    let keys = || {
                                        touched
                                            .iter()
                                            .filter(|a| a.slot() == *slot)
                                            .map(|a| a.key() as usize)
                                    };
                                    for k in keys() {
                                        t[k] = b as u32;
                                    }
                                    ctx.bindings[*slot].allowed = b as u32;
                                    let merger =
                                        registry.entries[*slot].merger.as_ref().expect("merger");
                                    let master = bases[*slot].ptr;
                                    // SAFETY: as above, each key locked while it is refreshed;
                                    // reconnaissance keys are below the table's length.
                                    unsafe {
                                        merger.refresh_keys(master, r, &mut locks.each(keys()))
                                    };
                                }
                            }
                        }
                        merges.add(t_merge.elapsed());
                        run_batch(&ctx, b);
                        let t_merge = Instant::now();
                        {
                            let _shared = masters.read();
                            for (k, (slot, r)) in replicas.iter_mut().enumerate() {
                                let merger =
                                    registry.entries[*slot].merger.as_ref().expect("merger");
                                let master = bases[*slot].ptr;
                                let locks = &key_locks[k];
                                match sparse {
                                    Some(log) => {
                                        let written = log
                                            .task(b)
                                            .iter()
                                            .filter(|a| a.slot() == *slot && a.write())
                                            .map(|a| a.key() as usize);
                                        // SAFETY: as above, each key locked while it is
                                        // pushed.
                                        unsafe {
                                            merger.push_keys(master, r, &mut locks.each(written))
                                        };
                                    }
                                    // SAFETY: as above; the body has returned, so no view
                                    // holds the worker's note of written keys.
                                    None => unsafe { tracked[k].push(&**merger, master, r, locks) },
                                }
                            }
                        }
                        if track {
                            merges.with(|pushed| {
                                for (t, log) in tracked.iter_mut().zip(pushed.iter_mut()) {
                                    t.announce(log);
                                }
                            });
                        }
                        merges.add(t_merge.elapsed());
                    }
                };
                if hi > lo && !errors.failed() {
                    pool.on_workers(threads.min(hi - lo), &work);
                }
                let stop = match &mut cross {
                    // SAFETY: the window's workers have all returned.
                    Some(c) => unsafe { c.sync(&registry, &bases, hi - lo, &errors)? },
                    None => errors.failed(),
                };
                if stop {
                    break;
                }
            }
        }
        SyncMode::Bsp => {
            let mut workers: Vec<SendWorker> =
                (0..threads).map(|_| SendWorker(new_worker())).collect();
            let slots: Vec<usize> = workers[0].0 .1.iter().map(|(slot, _)| *slot).collect();
            let rounds = steps_everywhere(comm, batches.len().div_ceil(threads))?;
            for round in 0..rounds {
                let first = round * threads;
                let count = if errors.failed() {
                    0
                } else {
                    threads.min(batches.len().saturating_sub(first))
                };
                if count == 0 {
                    let stop = match &mut cross {
                        // SAFETY: no worker is running.
                        Some(c) => unsafe { c.sync(&registry, &bases, 0, &errors)? },
                        None => true,
                    };
                    if stop {
                        break;
                    }
                    continue;
                }
                let run_batch = &run_batch;
                pool.in_place_scope(|s| {
                    let mut round = workers.iter_mut().take(count).enumerate();
                    let here = round.next();
                    for (i, w) in round {
                        s.spawn(move |_| run_batch(&w.0 .0, first + i));
                    }
                    if let Some((i, w)) = here {
                        run_batch(&w.0 .0, first + i);
                    }
                });
                // Rounds follow each other closely: keep the pool threads awake.
                pool.linger(count - 1);
                // Aggregate the round: every worker started from the same values. Every
                // worker waits meanwhile: the merge counts once per worker.
                let t_merge = Instant::now();
                for (k, &slot) in slots.iter().enumerate() {
                    let merger = registry.entries[slot].merger.as_ref().expect("merger");
                    let master = bases[slot].ptr;
                    let mut round: Vec<Replica> = workers[..count]
                        .iter_mut()
                        .map(|w| std::mem::replace(&mut w.0 .1[k].1, Replica::empty()))
                        .collect();
                    // SAFETY: every worker of the round has finished; the master is locked
                    // by this engine and nothing else touches it now.
                    unsafe { merger.merge_all(master, &mut round) };
                    for (w, r) in workers.iter_mut().zip(round) {
                        w.0 .1[k].1 = r;
                    }
                    // Workers idle in a short last round just refresh (their delta is 0).
                    for w in &mut workers[count..] {
                        // SAFETY: as above.
                        unsafe { merger.push(master, &mut w.0 .1[k].1) };
                    }
                }
                merges.add(t_merge.elapsed() * threads as u32);
                if let Some(c) = &mut cross {
                    // SAFETY: the round's workers have finished and merged.
                    if unsafe { c.sync(&registry, &bases, count, &errors)? } {
                        break;
                    }
                    // Workers start the next round from the combined values.
                    for (k, &slot) in slots.iter().enumerate() {
                        let merger = registry.entries[slot].merger.as_ref().expect("merger");
                        for w in workers.iter_mut() {
                            // SAFETY: as above; the replica's delta is zero, so this only
                            // refreshes it.
                            unsafe {
                                merger.refresh_keys(
                                    bases[slot].ptr,
                                    &mut w.0 .1[k].1,
                                    &mut (0..bases[slot].len),
                                )
                            };
                        }
                    }
                }
            }
        }
    }
    record_stats(site, |s| {
        s.calls += 1;
        s.running += t0.elapsed();
        s.merging += merges.spent();
        s.workers = threads;
        s.strategy = match mode {
            SyncMode::Bsp => "bsp",
            SyncMode::Hybrid => "hybrid",
        };
        s.groups = batches.len();
    });
    drop(locks);
    drop(data_lock);
    let outcome = errors.into_result();
    if let Err(Error::AccessOutsidePlan { .. }) = outcome {
        re_cache().0.remove(&re_key);
    }
    outcome?;
    // Every rank holds its own range again before a checkpoint is taken.
    drop(_restore);
    if checkpointing {
        let written: Vec<_> = registry
            .entries
            .iter()
            .zip(&template)
            .filter(|(_, b)| b.writable)
            .map(|(e, _)| e.table.clone())
            .collect();
        crate::checkpoint::leave_loop(&site.to_string(), &written)?;
    }
    Ok(())
}

/// A Hybrid worker's bookkeeping for one replica when there is no reconnaissance: the
/// keys it wrote since its last push (noted by its views), how much of the call's push log
/// it has caught up with (a worker that starts late replays what others pushed meanwhile;
/// refreshing is idempotent), and which keys it refreshed for the current mini-batch (a
/// key others pushed several times is refreshed once).
struct Tracked {
    /// Owned (from `Box::into_raw`, freed on drop); a raw pointer rather than a field so
    /// that the views' copies of it stay valid while the worker holds `&mut Tracked`.
    dirty: *mut Dirty,
    seen: usize,
    stamps: Vec<u32>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // SAFETY: `dirty` came from `Box::into_raw` in `new` and is freed only here; the
        // views that copied it live no longer than the worker's loop, which owns `self`.
        drop(unsafe { Box::from_raw(self.dirty) });
    }
}

impl Tracked {
    fn new(len: usize) -> Self {
        Tracked {
            dirty: Box::into_raw(Box::new(Dirty::new(len))),
            seen: 0,
            stamps: vec![u32::MAX; len],
        }
    }

    /// The keys pushed into the master (`log`) since this worker last looked.
    fn news(&mut self, log: &[usize]) -> Vec<usize> {
        let new = log[self.seen.min(log.len())..].to_vec();
        self.seen = log.len();
        new
    }

    /// Before mini-batch `b`: refreshes in `replica` the `keys` others pushed into
    /// `master` (each once), each under its lock.
    ///
    /// # Safety
    /// As for [`Merger::refresh_keys`], every writer of an element holding its lock in
    /// `locks`.
    unsafe fn catch_up(
        &mut self,
        keys: &[usize],
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        b: usize,
        locks: &KeyLocks,
    ) {
        let stamps = &mut self.stamps;
        let once = keys.iter().copied().filter(|&key| {
            let new = stamps[key] != b as u32;
            stamps[key] = b as u32;
            new
        });
        // SAFETY: the caller's guarantee; logged keys were pushed, so below the length.
        unsafe { merger.refresh_keys(master, replica, &mut locks.each(once)) };
    }

    /// After a mini-batch: pushes the keys the worker wrote into `master`, each under its
    /// lock. [`Tracked::announce`] then tells the other workers.
    ///
    /// # Safety
    /// As for [`Merger::push_keys`], every reader and writer of an element holding its lock
    /// in `locks`; and no view of the worker is alive (it writes the note the views write).
    unsafe fn push(
        &mut self,
        merger: &dyn Merger,
        master: *mut u8,
        replica: &mut Replica,
        locks: &KeyLocks,
    ) {
        // SAFETY: `dirty` is valid (see `new`), and no view is alive to write it now (the
        // caller's guarantee).
        let dirty = unsafe { &*self.dirty };
        let keys = dirty.keys().iter().copied();
        // SAFETY: the caller's guarantee; noted keys passed the views' bounds checks.
        unsafe { merger.push_keys(master, replica, &mut locks.each(keys)) };
    }

    /// Appends the keys pushed by [`Tracked::push`] to the window's `log` and forgets them.
    fn announce(&mut self, log: &mut Vec<usize>) {
        // SAFETY: as in `push`: no view is alive between the mini-batches.
        let dirty = unsafe { &mut *self.dirty };
        // Nobody pushed since this worker looked: its replica holds what the log says.
        let caught_up = self.seen == log.len();
        log.extend_from_slice(dirty.keys());
        if caught_up {
            self.seen = log.len();
        }
        dirty.clear();
    }
}

/// One lock per element of a table that Hybrid workers merge into: workers merging
/// different elements do not wait for each other.
struct KeyLocks(Vec<AtomicBool>);

impl KeyLocks {
    fn new(len: usize) -> Self {
        KeyLocks((0..len).map(|_| AtomicBool::new(false)).collect())
    }

    fn lock(&self, k: usize) {
        let mut spins = 0u32;
        // Acquire: the previous holder's merge of the element happens before ours.
        while self.0[k]
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn unlock(&self, k: usize) {
        self.0[k].store(false, Ordering::Release);
    }

    /// `keys`, each locked from when it is yielded until the next is asked for (or the
    /// iterator dropped): what a merger needs (see [`Merger::refresh_keys`]).
    fn each<I: Iterator<Item = usize>>(&self, keys: I) -> LockedKeys<'_, I> {
        LockedKeys {
            keys,
            locks: self,
            held: None,
        }
    }
}

/// See [`KeyLocks::each`].
struct LockedKeys<'a, I> {
    keys: I,
    locks: &'a KeyLocks,
    held: Option<usize>,
}

impl<I: Iterator<Item = usize>> Iterator for LockedKeys<'_, I> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if let Some(k) = self.held.take() {
            self.locks.unlock(k);
        }
        let k = self.keys.next()?;
        self.locks.lock(k);
        self.held = Some(k);
        Some(k)
    }
}

impl<I> Drop for LockedKeys<'_, I> {
    fn drop(&mut self) {
        if let Some(k) = self.held.take() {
            self.locks.unlock(k);
        }
    }
}

/// Least mini-batches per thread between two synchronisation points of Hybrid mode across
/// ranks.
const HYBRID_WINDOW: usize = 4;
/// Synchronisation points per `sync_for!` call in Hybrid mode across ranks (Hybrid is
/// asynchronous inside a node; across ranks it combines the ranks' changes this often).
const HYBRID_SYNCS: usize = 8;

/// The number of steps every rank takes: the largest of the ranks' own counts.
fn steps_everywhere(comm: Option<&Comm>, mine: usize) -> Result<usize> {
    match comm {
        None => Ok(mine),
        Some(c) => c.allreduce(mine, usize::max),
    }
}

/// Gives the other ranks their elements back when the loop ends, however it ends.
struct RestoreRanges<'a>(Vec<&'a dyn TableHandle>);

impl Drop for RestoreRanges<'_> {
    fn drop(&mut self) {
        for t in &self.0 {
            t.keep_own_range();
        }
    }
}

/// Synchronisation of the ranks of a `sync_for!`: at each point, the ranks agree whether
/// one failed, then every aggregatable table becomes its value at the previous point plus
/// the aggregation (average or sum) of the ranks' changes since.
struct CrossRank<'a> {
    comm: &'a Comm,
    /// Slots of the tables combined, and their values at the last point.
    tables: Vec<(usize, Box<dyn std::any::Any + Send>)>,
}

impl<'a> CrossRank<'a> {
    fn new(comm: &'a Comm, registry: &Registry, bases: &[super::Base], data: u64) -> Self {
        let tables = registry
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.merger.is_some() && e.table.id() != data)
            .map(|(slot, e)| {
                let merger = e.merger.as_ref().expect("filtered");
                // SAFETY: the table is locked by the engine and no worker runs yet.
                (slot, unsafe {
                    merger.snapshot(bases[slot].ptr, bases[slot].len)
                })
            })
            .collect();
        CrossRank { comm, tables }
    }

    /// A synchronisation point after this rank ran `count` mini-batches since the last.
    /// Returns whether the loop must stop (some rank failed).
    ///
    /// # Safety
    /// No worker may touch the tables during the call.
    unsafe fn sync(
        &mut self,
        registry: &Registry,
        bases: &[super::Base],
        count: usize,
        errors: &FirstError,
    ) -> Result<bool> {
        let failures = self.comm.allgather(errors.message())?;
        if let Some((rank, message)) = failures
            .into_iter()
            .enumerate()
            .find_map(|(r, m)| m.map(|m| (r, m)))
        {
            if !errors.failed() {
                errors.set(Error::RemoteFailure { rank, message });
            }
            return Ok(true);
        }
        for (slot, start) in &mut self.tables {
            let merger = registry.entries[*slot]
                .merger
                .as_ref()
                .expect("aggregatable");
            let master = bases[*slot].ptr;
            // SAFETY: the caller guarantees no worker touches the masters; the snapshot
            // was taken from this master.
            unsafe {
                merger.combine_ranks(self.comm, master, &**start, Some(count))?;
                *start = merger.snapshot(master, bases[*slot].len);
            }
        }
        Ok(false)
    }
}

/// A worker's context and replicas, moved between rayon threads under a mutex.
struct SendWorker((ExecCtx, Vec<(usize, Replica)>));

// SAFETY: an `ExecCtx` holds raw pointers into tables and replicas that the engine keeps
// alive for the whole call; a `SendWorker` is only used by one thread at a time (it sits
// behind a `Mutex`), so moving it between threads cannot create shared mutable access.
unsafe impl Send for SendWorker {}

fn read_only_reason(table: &dyn TableHandle, is_data: bool, aggregatable: bool) -> &'static str {
    if is_data {
        "it is the input of this sync_for!, which is read-only"
    } else if table.is_map() {
        "sync_for! does not merge workers' updates of maps; update maps in async_for! or in driver code"
    } else if !aggregatable {
        "its element type does not implement Aggregate, so sync_for! cannot merge workers' updates of it"
    } else {
        "reconnaissance saw no mini-batch write this table"
    }
}

/// Reconnaissance over every mini-batch; one task per mini-batch.
fn reconnoitre<Task, D>(
    site: &CallSite,
    task: &Task,
    record: fn(&Task, &Recorder, &[D]),
    bases: &[Base],
    batches: &[&[D]],
    minibatch: usize,
) -> Result<AccessLog> {
    // Mini-batches log an unknown number of accesses: the log grows as needed.
    let rec = Recorder::new(
        bases.iter().map(Base::recorded).collect(),
        LogRoom::new(0, 0),
    );
    for (i, batch) in batches.iter().enumerate() {
        rec.start_task(i * minibatch);
        let outcome = catch_unwind(AssertUnwindSafe(|| record(task, &rec, batch)));
        if let Err(payload) = outcome {
            return Err(body_error(site, i * minibatch, payload));
        }
        rec.end_task();
    }
    Ok(rec.into_log())
}
