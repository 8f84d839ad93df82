//! One worker in a world of one: the loop order is a serial order, so the call needs no
//! plan and uses the tables directly.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use super::execute::refuse_writes;
use super::reconnoitre::reconnoitre;
use super::Loop;
use crate::access::{Binding, ExecCtx, Indices, LoopIndex};
use crate::engine::cache::kept;
use crate::engine::pipeline::Ran;
use crate::engine::{body_error, Base, CallSite};
use crate::error::Result;
use crate::plan::SlotMode;

/// Runs the call serially; with checkpoints on, learns once which tables it writes.
pub(super) fn run<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let locked = l.call.lock()?;
    let t0 = Instant::now();
    let outcome = run_serially(
        l.call.site,
        l.start..l.start + l.n,
        l.call.task(),
        l.run,
        l.direct,
        &locked.bases,
        None,
    );
    l.call.note(|f| {
        f.ran = true;
        f.running += t0.elapsed();
        f.strategy = Some("serial");
        f.groups = Some(1);
    });
    outcome?;
    Ok(Ran::new(Ok(()), checkpointed_writes(l, &locked.bases)?))
}

/// The tables a call that kept no plan's modes may have written, when a checkpoint needs
/// them (learned by [`serial_written`]); none otherwise, since only checkpoints ask.
pub(super) fn checkpointed_writes<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
) -> Result<Vec<bool>> {
    match l.call.checkpointing() {
        true => serial_written(l, bases),
        false => Ok(Vec::new()),
    }
}

/// How many pieces a serial run is cut into while a progress bar is on.
const PROGRESS_PIECES: usize = 200;

/// Runs every index in order on this thread (one worker, one process), over direct views
/// (bounds checks only) when every table is bound plainly, as it is in a world of one;
/// slots that `modes` (if given, one per slot) says are read-only refuse writes.
pub(super) fn run_serially<Task, I: LoopIndex>(
    site: &CallSite,
    range: Range<usize>,
    task: &Task,
    run: fn(&Task, &ExecCtx, Indices<'_, I>),
    direct: fn(&Task, &ExecCtx, Indices<'_, I>),
    bases: &[Base],
    modes: Option<&[SlotMode]>,
) -> Result<()> {
    let bindings = bases.iter().enumerate().map(|(slot, base)| {
        let mut b = base.binding();
        if modes.is_some_and(|m| m[slot] == SlotMode::ReadOnly) {
            refuse_writes(&mut b);
        }
        b
    });
    let ctx = ExecCtx::new(bindings.collect());
    let run = match ctx.bindings.iter().all(Binding::is_direct) {
        true => direct,
        false => run,
    };
    // With a progress bar on, the range runs in pieces so that the bar moves (one
    // reduction chain still: each piece continues the last one's partials).
    let piece = match ctx.progress {
        Some(_) => range.len().div_ceil(PROGRESS_PIECES).max(1),
        None => range.len().max(1),
    };
    catch_unwind(AssertUnwindSafe(|| {
        let mut from = range.start;
        while from < range.end {
            let to = range.end.min(from + piece);
            run(task, &ctx, Indices::range(from..to, &ctx));
            from = to;
        }
    }))
    .map_err(|payload| body_error(site, ctx.current(), payload))
}

/// Which tables a loop run serially (no plan) may write, for its checkpoint: found by
/// reconnaissance once per call site and tables, then cached.
fn serial_written<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
) -> Result<Vec<bool>> {
    let (site, start, n) = (l.call.site, l.start, l.n);
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
    let log = reconnoitre(site, start, n, l.call.task(), l.record, bases, 1)?;
    let written: Vec<bool> = (0..l.call.registry.entries.len())
        .map(|s| log.writes(s))
        .collect();
    // Set-up work, like planning: reported with reconnaissance.
    l.call.note(|f| f.recon += t0.elapsed());
    kept.serial_written.insert(key, written.clone());
    Ok(written)
}
