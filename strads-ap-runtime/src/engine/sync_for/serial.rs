//! `sync_for!` on one worker: the mini-batches in order, on the tables directly; across
//! ranks, BSP synchronises after every mini-batch and Hybrid after every window.

use super::cross::{steps_everywhere, CrossRank, HYBRID_SYNCS, HYBRID_WINDOW};
use super::Minibatches;
use crate::cluster::collective::Comm;
use crate::dds::Element;
use crate::engine::SyncMode;
use crate::error::Result;

/// Runs the call's mini-batches on this thread.
pub(super) fn run<Task: Sync, D: Element>(
    m: &Minibatches<'_, Task, D>,
    mut cross: Option<&mut CrossRank<'_>>,
    comm: Option<&Comm>,
    mode: SyncMode,
) -> Result<()> {
    let (ctx, _) = m.new_worker();
    let body = m.body_for(&ctx);
    // Across ranks, BSP synchronises after every mini-batch (one worker per rank)
    // and Hybrid after every window; in a world of one there is nothing to wait for.
    let window = match (comm, mode) {
        (None, _) => m.batches.len().max(1),
        (Some(_), SyncMode::Bsp) => 1,
        (Some(_), SyncMode::Hybrid) => HYBRID_WINDOW.max(m.batches.len().div_ceil(HYBRID_SYNCS)),
    };
    let steps = steps_everywhere(comm, m.batches.len().div_ceil(window))?;
    for step in 0..steps {
        let lo = (step * window).min(m.batches.len());
        let hi = ((step + 1) * window).min(m.batches.len());
        let mut ran = 0;
        for b in lo..hi {
            if m.errors.failed() {
                break;
            }
            m.run_batch_by(body, &ctx, b);
            ran += 1;
        }
        let stop = match &mut cross {
            // SAFETY: between mini-batches nothing else touches the masters.
            Some(c) => unsafe { c.sync(m.registry, m.bases, ran, &m.errors)? },
            None => m.errors.failed(),
        };
        if stop {
            break;
        }
    }
    Ok(())
}
