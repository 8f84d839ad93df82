//! Reconnaissance: every task of a call run once with views that only log its accesses,
//! in parallel chunks, before anything is planned.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rayon::prelude::*;

use crate::access::LoopIndex;
use crate::engine::{body_error, Base, CallSite};
use crate::error::Result;
use crate::recon::{AccessLog, LogRoom, Presence, RecordIndices, Recorder};

/// Indices `start..start + n` in consecutive ranges of `chunk` (the last may be shorter).
pub(super) fn chunk_ranges(start: usize, n: usize, chunk: usize) -> Vec<Range<usize>> {
    (0..n)
        .step_by(chunk)
        .map(|s| start + s..start + (s + chunk).min(n))
        .collect()
}

/// Reconnaissance: runs `record` for every index, in parallel chunks, and returns the
/// per-task access log in index order.
pub(super) fn reconnoitre<Task: Sync, I: LoopIndex>(
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
                crate::progress::count(r.len());
                let (rec, failed) = record_chunk(site, task, record, bases, r.clone(), Vec::new());
                failed.map_or_else(|| Ok(rec.into_log()), Err)
            })
            .collect()
    });
    Ok(AccessLog::from_chunks(
        shift,
        logs.into_iter().collect::<Result<_>>()?,
    ))
}

/// Records the tasks of `range` with a recorder of its own, whose views read only what
/// `present` says is here (see [`Recorder::with_presence`]; empty: everything is). Returns
/// the recorder and, where the body panicked, the error naming the task (its accesses
/// dropped).
pub(super) fn record_chunk<Task: Sync, I: LoopIndex>(
    site: &CallSite,
    task: &Task,
    record: fn(&Task, &Recorder, RecordIndices<'_, I>),
    bases: &[Base],
    range: Range<usize>,
    present: Vec<Option<Presence>>,
) -> (Recorder, Option<crate::error::Error>) {
    let room = LogRoom::new(range.len(), bases.len());
    let rec =
        Recorder::new(bases.iter().map(Base::recorded).collect(), room).with_presence(present);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        record(task, &rec, RecordIndices::new(range, &rec));
    }));
    let failed = outcome.err().map(|payload| {
        rec.abort_task();
        body_error(site, rec.index(), payload)
    });
    (rec, failed)
}
