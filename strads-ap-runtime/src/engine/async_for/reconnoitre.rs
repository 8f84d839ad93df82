//! Reconnaissance: every task of a call run once with views that only log its accesses,
//! in parallel chunks, before anything is planned.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rayon::prelude::*;

use crate::access::LoopIndex;
use crate::engine::{body_error, Base, CallSite};
use crate::error::Result;
use crate::recon::{AccessLog, LogRoom, RecordIndices, Recorder};

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
                let room = LogRoom::new(r.len(), bases.len());
                let rec = Recorder::new(bases.iter().map(Base::recorded).collect(), room);
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    crate::progress::count(r.len());
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
