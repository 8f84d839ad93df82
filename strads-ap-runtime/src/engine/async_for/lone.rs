//! One worker instead of several (see [`Fallback`](crate::Fallback)): the call's indices
//! in loop order on the calling thread, over views that check only bounds, when the
//! engine measured that the workers do not pay for this loop.
//!
//! That is what one thread in a world of one runs (`serial.rs`): the serial program's
//! order, relaxed tables updated in place, reductions chained as the serial loop chains
//! them. Loop order rather than the plan's: a components plan's batches are random
//! subsets of the tasks, and visiting them in that order on one worker costs what the
//! lost memory locality costs (a factorisation machine: 44 ms per call against 27 ms).
//! Writes to tables reconnaissance saw only read are still refused, so the kept plan (or
//! table modes) stays right for calls on all workers.

use super::serial::run_serially;
use super::Loop;
use crate::access::LoopIndex;
use crate::engine::Base;
use crate::error::Result;
use crate::plan::SlotMode;

/// Runs the call's indices in loop order on this thread, by the table modes of its plan
/// or locking runs.
pub(super) fn run_in_order<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    modes: &[SlotMode],
) -> Result<()> {
    let range = l.start..l.start + l.n;
    let task = l.call.task();
    run_serially(
        l.call.site,
        range,
        task,
        l.run,
        l.direct,
        bases,
        Some(modes),
    )
}
