//! `sync_for!` in BSP mode: rounds of one mini-batch per worker, each on its own replica
//! of the parameters; the replicas' deltas are aggregated after every round (and, across
//! ranks, combined with the other ranks').

use std::time::Instant;

use super::cross::{steps_everywhere, CrossRank};
use super::Minibatches;
use crate::access::ExecCtx;
use crate::cluster::collective::Comm;
use crate::dds::table::Replica;
use crate::dds::Element;
use crate::error::Result;

/// A worker's context and replicas, moved between rayon threads.
struct SendWorker((ExecCtx, Vec<(usize, Replica)>));

// SAFETY: an `ExecCtx` holds raw pointers into tables and replicas that the engine keeps
// alive for the whole call; a `SendWorker` is only used by one thread at a time (each
// round hands each worker to one thread), so moving it between threads cannot create
// shared mutable access.
unsafe impl Send for SendWorker {}

/// Runs the call's rounds.
pub(super) fn run<Task: Sync, D: Element>(
    m: &Minibatches<'_, Task, D>,
    mut cross: Option<&mut CrossRank<'_>>,
    comm: Option<&Comm>,
) -> Result<()> {
    let mut workers: Vec<SendWorker> = (0..m.threads).map(|_| SendWorker(m.new_worker())).collect();
    let slots: Vec<usize> = workers[0].0 .1.iter().map(|(slot, _)| *slot).collect();
    let rounds = steps_everywhere(comm, m.batches.len().div_ceil(m.threads))?;
    for round in 0..rounds {
        let first = round * m.threads;
        let count = if m.errors.failed() {
            0
        } else {
            m.threads.min(m.batches.len().saturating_sub(first))
        };
        if count == 0 {
            let stop = match &mut cross {
                // SAFETY: no worker is running.
                Some(c) => unsafe { c.sync(m.registry, m.bases, 0, &m.errors)? },
                None => true,
            };
            if stop {
                break;
            }
            continue;
        }
        let run_batch = &|ctx: &ExecCtx, b: usize| m.run_batch(ctx, b);
        m.pool.in_place_scope(|s| {
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
        m.pool.linger(count - 1);
        aggregate(m, &mut workers, &slots, count);
        if let Some(c) = &mut cross {
            // SAFETY: the round's workers have finished and merged.
            if unsafe { c.sync(m.registry, m.bases, count, &m.errors)? } {
                break;
            }
            refresh(m, &mut workers, &slots);
        }
    }
    Ok(())
}

/// Aggregates a round of `count` workers into the masters of `slots`: every worker
/// started from the same values. Every worker waits meanwhile: the merge counts once per
/// worker.
fn aggregate<Task: Sync, D: Element>(
    m: &Minibatches<'_, Task, D>,
    workers: &mut [SendWorker],
    slots: &[usize],
    count: usize,
) {
    let t_merge = Instant::now();
    for (k, &slot) in slots.iter().enumerate() {
        let merger = m.registry.entries[slot].merger.as_ref().expect("merger");
        let master = m.bases[slot].ptr;
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
    m.merges.add(t_merge.elapsed() * m.threads as u32);
}

/// Workers start the next round from the values the ranks combined.
fn refresh<Task: Sync, D: Element>(
    m: &Minibatches<'_, Task, D>,
    workers: &mut [SendWorker],
    slots: &[usize],
) {
    for (k, &slot) in slots.iter().enumerate() {
        let merger = m.registry.entries[slot].merger.as_ref().expect("merger");
        for w in workers.iter_mut() {
            // SAFETY: no worker runs between rounds and the master is locked by this
            // engine; the replica's delta is zero, so this only refreshes it.
            unsafe {
                merger.refresh_keys(
                    m.bases[slot].ptr,
                    &mut w.0 .1[k].1,
                    &mut (0..m.bases[slot].len),
                )
            };
        }
    }
}
