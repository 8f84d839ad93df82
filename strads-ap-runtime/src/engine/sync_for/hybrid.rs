//! `sync_for!` in Hybrid mode: workers inside a process share progress asynchronously.
//! Each worker runs a mini-batch on its replica, then adds its delta to the masters and
//! goes on from the fresh values; across ranks, the ranks combine their changes at the end
//! of every window of mini-batches.
//!
//! Without reconnaissance, workers note the keys they write (in their views) and push only
//! those; before each mini-batch they refresh only the keys others pushed since. With
//! reconnaissance (`Opts::re`), they refresh and push the keys the mini-batch's log names,
//! and views refuse any other. Either way each mini-batch starts from the masters' current
//! values, at a cost that follows the keys touched, not the tables' sizes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::cross::{steps_everywhere, CrossRank, HYBRID_SYNCS, HYBRID_WINDOW};
use super::keys::{Tracked, WHOLE_KEYS};
use super::Minibatches;
use crate::access::{ExecCtx, SHARED, UNTOUCHED};
use crate::cluster::collective::Comm;
use crate::dds::table::Replica;
use crate::dds::Element;
use crate::error::Result;

/// Runs the call's mini-batches in windows (one window in a world of one). Returns, per
/// slot, whether the call merged changes of that table into its master: every replica
/// pushed whole (a small table) counts; another only if some worker wrote a key of it
/// (without reconnaissance every aggregatable table is replicated, read-only ones too,
/// and those merge nothing).
pub(super) fn run<Task: Sync, D: Element>(
    m: &Minibatches<'_, Task, D>,
    mut cross: Option<&mut CrossRank<'_>>,
    comm: Option<&Comm>,
) -> Result<Vec<bool>> {
    let slots: Vec<usize> = (0..m.replicate.len()).filter(|&s| m.replicate[s]).collect();
    let mut merged = vec![false; m.replicate.len()];
    for &slot in &slots {
        // With reconnaissance only written tables are replicated.
        merged[slot] = pushed_whole(m, slot) || m.sparse.is_some();
    }
    // Across ranks: the local mini-batches in about `HYBRID_SYNCS` windows (at least a few
    // mini-batches per thread each), each ending in a synchronisation point.
    let window = if comm.is_some() {
        (m.threads * HYBRID_WINDOW).max(m.batches.len().div_ceil(HYBRID_SYNCS))
    } else {
        m.batches.len().max(1)
    };
    let windows = steps_everywhere(comm, m.batches.len().div_ceil(window))?;
    for w in 0..windows {
        let lo = (w * window).min(m.batches.len());
        let hi = ((w + 1) * window).min(m.batches.len());
        let next = AtomicUsize::new(lo);
        m.merges
            .with(|pushed| *pushed = vec![Vec::new(); m.replicate.iter().filter(|&&r| r).count()]);
        if hi > lo && !m.errors.failed() {
            let run = run_length(hi - lo, m.threads);
            m.pool
                .on_workers(m.threads.min(hi - lo), &|| work(m, &next, hi, run));
        }
        m.merges.with(|pushed| {
            for (&slot, keys) in slots.iter().zip(pushed.iter()) {
                merged[slot] |= !keys.is_empty();
            }
        });
        let stop = match &mut cross {
            // SAFETY: the window's workers have all returned.
            Some(c) => unsafe { c.sync(m.registry, m.bases, hi - lo, &m.errors)? },
            None => m.errors.failed(),
        };
        if stop {
            break;
        }
    }
    Ok(merged)
}

/// Whether workers push their replicas of `slot`'s table whole (without
/// reconnaissance): a table whose unchanged elements push nothing, small, or written
/// densely at the call site's last call.
fn pushed_whole<Task, D>(m: &Minibatches<'_, Task, D>, slot: usize) -> bool {
    m.registry.entries[slot].merger.as_ref().is_some_and(|g| {
        g.zero_change_is_neutral() && (m.bases[slot].len <= WHOLE_KEYS || m.dense[slot])
    })
}

/// A Hybrid worker: its context, its replicas, and per replica what it tracks (without
/// reconnaissance) or the tag of every key (with: the mini-batch that writes it now,
/// `SHARED` if it only reads it, untouched otherwise).
struct Worker {
    ctx: ExecCtx,
    replicas: Vec<(usize, Replica)>,
    tracked: Vec<Tracked>,
    tags: Vec<Vec<u32>>,
    /// Every replica is pushed whole: the worker neither reads nor writes the log of
    /// pushed keys (see [`Tracked::whole`]), so it skips its lock.
    all_whole: bool,
}

impl Worker {
    fn new<Task: Sync, D: Element>(m: &Minibatches<'_, Task, D>) -> Self {
        let (mut ctx, replicas) = m.new_worker();
        let tracked: Vec<Tracked> = match m.sparse {
            None => replicas
                .iter()
                .map(|&(slot, _)| {
                    let len = m.bases[slot].len;
                    let merger = m.registry.entries[slot].merger.as_ref();
                    match (pushed_whole(m, slot), len <= WHOLE_KEYS) {
                        (true, true) => Tracked::whole(len, merger.is_some_and(|m| m.lock_free())),
                        (true, false) => Tracked::bulk(len),
                        (false, _) => Tracked::new(len),
                    }
                })
                .collect(),
            Some(_) => Vec::new(),
        };
        for ((slot, _), t) in replicas.iter().zip(&tracked) {
            if !t.is_whole() {
                ctx.bindings[*slot].dirty = t.dirty;
            }
        }
        let tags: Vec<Vec<u32>> = match m.sparse {
            Some(_) => replicas
                .iter()
                .map(|(slot, _)| vec![UNTOUCHED; m.bases[*slot].len])
                .collect(),
            None => Vec::new(),
        };
        // The tags' buffers stay where they are when the worker moves.
        for ((slot, _), t) in replicas.iter().zip(&tags) {
            ctx.bindings[*slot].tags = t.as_ptr();
        }
        let all_whole = m.sparse.is_none() && tracked.iter().all(Tracked::is_whole);
        Worker {
            ctx,
            replicas,
            tracked,
            tags,
            all_whole,
        }
    }
}

/// The most consecutive mini-batches a worker claims at once (see [`run_length`]).
const RUN_MAX: usize = 16;

/// Runs each worker should claim at least, so that the last ones balance the load.
const RUNS_PER_WORKER: usize = 64;

/// How many consecutive mini-batches a worker claims at a time, of `batches` shared by
/// `threads`: up to [`RUN_MAX`], while each worker still gets [`RUNS_PER_WORKER`] runs.
///
/// A worker that takes every other mini-batch reads the data in strides, and the
/// hardware's prefetcher, which follows one stream per core, restarts at every gap;
/// runs let it stream. `zoo pegasos` (600,000 samples of 20 features in 6,000
/// mini-batches, 2 threads): 11.9 → 10.8 ms an epoch with runs of 16 (serial 18.3 ms),
/// its objective unchanged within the Hybrid noise; `kmeans` unchanged.
fn run_length(batches: usize, threads: usize) -> usize {
    (batches / (threads.max(1) * RUNS_PER_WORKER)).clamp(1, RUN_MAX)
}

/// A worker's loop: takes mini-batches below `hi`, `run` consecutive ones at a time,
/// until none is left (or a run failed).
fn work<Task: Sync, D: Element>(
    m: &Minibatches<'_, Task, D>,
    next: &AtomicUsize,
    hi: usize,
    run: usize,
) {
    let mut w = Worker::new(m);
    // Counted here and added once: a shared counter bumped twice a mini-batch would be
    // one more cache line the workers pass between them.
    let mut merging = Duration::ZERO;
    let mut claimed = 0..0;
    let mut take = || {
        if claimed.is_empty() {
            let first = next.fetch_add(run, Ordering::Relaxed);
            claimed = first..first.saturating_add(run).min(hi.max(first));
        }
        claimed.next().filter(|_| !m.errors.failed())
    };
    let mut batch = take();
    if let Some(b) = batch {
        let t_merge = Instant::now();
        refresh(m, &mut w, b);
        merging += t_merge.elapsed();
    }
    // Over direct views where no replica's views note keys (every one small, pushed whole).
    let body = m.body_for(&w.ctx);
    while let Some(b) = batch {
        m.run_batch_by(body, &w.ctx, b);
        batch = take();
        let t_merge = Instant::now();
        match batch {
            // Without reconnaissance, one pass pushes this mini-batch and refreshes for the
            // next: a key the worker wrote is locked once, not once each way.
            Some(next) if m.sparse.is_none() => push_refresh(m, &mut w, next),
            Some(next) => {
                push(m, &mut w, b);
                refresh(m, &mut w, next);
            }
            None => push(m, &mut w, b),
        }
        merging += t_merge.elapsed();
    }
    m.merges.add(merging);
    for ((slot, _), t) in w.replicas.iter().zip(&w.tracked) {
        let (keys, pushes) = &m.pushed[*slot];
        keys.fetch_add(t.pushed_keys, Ordering::Relaxed);
        pushes.fetch_add(t.pushes, Ordering::Relaxed);
    }
}

/// Without reconnaissance, between mini-batches: pushes the keys the worker wrote (which
/// refreshes them) and refreshes for mini-batch `next` the other keys others pushed.
///
/// The news are read before the push: a key in them was pushed into the master before it
/// was announced, so the push, which reads the key's master value after adding to it,
/// brings the replica up to date with it, and [`Tracked::push_catch_up`] skips it.
fn push_refresh<Task: Sync, D: Element>(m: &Minibatches<'_, Task, D>, w: &mut Worker, next: usize) {
    news(m, w);
    {
        let _shared = m.masters.read();
        for ((t, (slot, r)), locks) in w.tracked.iter_mut().zip(&mut w.replicas).zip(&m.key_locks) {
            let merger = m.registry.entries[*slot].merger.as_ref().expect("merger");
            let master = m.bases[*slot].ptr;
            // SAFETY: every merge of an element holds its stripe's lock, which
            // `push_catch_up` takes; replicas are made only while no merge runs (`masters`,
            // held shared here); the body has returned, so no view holds the worker's note
            // of written keys.
            unsafe { t.push_catch_up(&**merger, master, r, next, locks) };
        }
    }
    announce(m, w);
}

/// Without reconnaissance: notes the keys others pushed since this worker last looked.
fn news<Task: Sync, D: Element>(m: &Minibatches<'_, Task, D>, w: &mut Worker) {
    if w.all_whole {
        return;
    }
    m.merges.with(|pushed| {
        for (t, log) in w.tracked.iter_mut().zip(pushed.iter()) {
            t.news(log);
        }
    });
}

/// Without reconnaissance: tells the other workers which keys this worker pushed.
fn announce<Task: Sync, D: Element>(m: &Minibatches<'_, Task, D>, w: &mut Worker) {
    if w.all_whole {
        return;
    }
    m.merges.with(|pushed| {
        for (t, log) in w.tracked.iter_mut().zip(pushed.iter_mut()) {
            t.announce(log);
        }
    });
}

/// Before mini-batch `b`: refreshes the worker's replicas from the masters.
fn refresh<Task: Sync, D: Element>(m: &Minibatches<'_, Task, D>, w: &mut Worker, b: usize) {
    match m.sparse.as_deref() {
        None => {
            news(m, w);
            let _shared = m.masters.read();
            for ((t, (slot, r)), locks) in
                w.tracked.iter_mut().zip(&mut w.replicas).zip(&m.key_locks)
            {
                let merger = m.registry.entries[*slot].merger.as_ref().expect("merger");
                let master = m.bases[*slot].ptr;
                // SAFETY: every merge of an element holds its stripe's lock, which
                // `catch_up` takes, and replicas are made only while no merge runs
                // (`masters`, held shared here).
                unsafe { t.catch_up(&**merger, master, r, b, locks) };
            }
        }
        Some(log) => {
            let touched = log.task(b);
            let _shared = m.masters.read();
            for (((slot, r), t), locks) in w.replicas.iter_mut().zip(&mut w.tags).zip(&m.key_locks)
            {
                let keys = || {
                    touched
                        .iter()
                        .filter(|a| a.slot() == *slot)
                        .map(|a| a.key() as usize)
                };
                // Keys the mini-batch only read in reconnaissance are shared for reading:
                // only written keys are pushed, so a write to one of them (an access that
                // drifted from reconnaissance) must be refused, not kept in the replica and
                // lost. `push` makes the keys untouched again after the mini-batch.
                for k in keys() {
                    t[k] = SHARED;
                }
                for a in touched.iter().filter(|a| a.slot() == *slot && a.write()) {
                    t[a.key() as usize] = b as u32;
                }
                w.ctx.bindings[*slot].allowed = b as u32;
                let merger = m.registry.entries[*slot].merger.as_ref().expect("merger");
                let master = m.bases[*slot].ptr;
                // SAFETY: as above, each key's stripe locked while it is refreshed;
                // reconnaissance keys are below the table's length.
                unsafe { merger.refresh_keys(master, r, &mut locks.each(keys())) };
            }
        }
    }
}

/// After mini-batch `b`: pushes the worker's changes into the masters (and, without
/// reconnaissance, tells the other workers which keys).
fn push<Task: Sync, D: Element>(m: &Minibatches<'_, Task, D>, w: &mut Worker, b: usize) {
    {
        let _shared = m.masters.read();
        for (k, (slot, r)) in w.replicas.iter_mut().enumerate() {
            let merger = m.registry.entries[*slot].merger.as_ref().expect("merger");
            let master = m.bases[*slot].ptr;
            let locks = &m.key_locks[k];
            match m.sparse.as_deref() {
                Some(log) => {
                    let written = log
                        .task(b)
                        .iter()
                        .filter(|a| a.slot() == *slot && a.write())
                        .map(|a| a.key() as usize);
                    // SAFETY: every merge of an element holds its stripe's lock, taken
                    // here while the key is pushed; replicas are made only while no merge
                    // runs (`masters`, held shared here).
                    unsafe { merger.push_keys(master, r, &mut locks.each(written)) };
                    // Untouched again: a later mini-batch on this worker that reads a key
                    // it did not refresh (one its reconnaissance did not see) is refused,
                    // not served this mini-batch's stale copy.
                    for a in log.task(b).iter().filter(|a| a.slot() == *slot) {
                        w.tags[k][a.key() as usize] = UNTOUCHED;
                    }
                }
                // SAFETY: as above; the body has returned, so no view holds the worker's
                // note of written keys.
                None => unsafe { w.tracked[k].push(&**merger, master, r, locks) },
            }
        }
    }
    if m.sparse.is_none() {
        announce(m, w);
    }
}
