//! `sync_for!` across ranks: each rank runs the mini-batches of its part of the data
//! against a full copy of every other captured table, and the ranks combine their changes
//! at every synchronisation point.

use crate::cluster::collective::Comm;
use crate::dds::table::TableHandle;
use crate::engine::{Base, FirstError, Registry};
use crate::error::{Error, Result};

/// Least mini-batches per thread between two synchronisation points of Hybrid mode across
/// ranks.
pub(super) const HYBRID_WINDOW: usize = 4;
/// Synchronisation points per `sync_for!` call in Hybrid mode across ranks (Hybrid is
/// asynchronous inside a node; across ranks it combines the ranks' changes this often).
pub(super) const HYBRID_SYNCS: usize = 8;

/// The number of steps every rank takes: the largest of the ranks' own counts.
pub(super) fn steps_everywhere(comm: Option<&Comm>, mine: usize) -> Result<usize> {
    match comm {
        None => Ok(mine),
        Some(c) => c.allreduce(mine, usize::max),
    }
}

/// Gives the other ranks their elements back when the loop ends, however it ends.
pub(super) struct RestoreRanges<'a>(pub Vec<&'a dyn TableHandle>);

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
pub(super) struct CrossRank<'a> {
    comm: &'a Comm,
    /// Slots of the tables combined, and their values at the last point.
    tables: Vec<(usize, Box<dyn std::any::Any + Send>)>,
}

impl<'a> CrossRank<'a> {
    pub fn new(comm: &'a Comm, registry: &Registry, bases: &[Base], data: u64) -> Self {
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
    pub unsafe fn sync(
        &mut self,
        registry: &Registry,
        bases: &[Base],
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
