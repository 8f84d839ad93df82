//! `async_for!` across ranks: the exchange that moves elements between ranks before each
//! step of a [`DistPlan`] (which the planner works out, see [`crate::plan::dist`]).

use crate::cluster::collective::Comm;
use crate::engine::{Base, FirstError, Registry};
use crate::error::{Error, Result};
use crate::plan::{DistPlan, SlotMode};

/// Runs the exchanges of a [`DistPlan`] and keeps relaxed tables in step across ranks.
pub(crate) struct Exchanger<'a> {
    comm: &'a Comm,
    plan: &'a DistPlan,
    /// Per slot: skip its transfers (read-only and already current here).
    skip: Vec<bool>,
    /// Per slot: skip its transfers before the first step (gathered whole for this call,
    /// so every rank already holds the current value of every element).
    skip_first: Vec<bool>,
    /// Relaxed slots and their values at the last combination.
    relaxed: Vec<(usize, Box<dyn std::any::Any + Send>)>,
    /// Time spent in exchanges so far.
    pub spent: std::time::Duration,
    /// Elements received from other ranks so far, and their encoded bytes.
    pub received: (u64, u64),
}

impl<'a> Exchanger<'a> {
    /// `skip[slot]`: the slot's transfers are not needed; `skip_first[slot]`: its
    /// transfers before the first step are not (see [`Exchanger`]).
    ///
    /// # Safety
    /// `bases` must be the locked tables of `registry`, and no worker may run yet.
    pub unsafe fn new(
        comm: &'a Comm,
        plan: &'a DistPlan,
        skip: Vec<bool>,
        skip_first: Vec<bool>,
        registry: &Registry,
        bases: &[Base],
        modes: &[SlotMode],
    ) -> Self {
        let relaxed = (0..bases.len())
            .filter(|&s| modes[s] == SlotMode::Relaxed)
            .map(|s| {
                let merger = registry.entries[s].merger.as_ref().expect("relaxed");
                // SAFETY: the caller guarantees the table is locked and no worker runs.
                (s, unsafe { merger.snapshot(bases[s].ptr, bases[s].len) })
            })
            .collect();
        Exchanger {
            comm,
            plan,
            skip,
            skip_first,
            relaxed,
            spent: std::time::Duration::ZERO,
            received: (0, 0),
        }
    }

    /// Exchange `i` (before step `i`, or the final one): combines relaxed tables (after a
    /// step), agrees whether a rank failed, and moves elements. Returns whether the loop
    /// must stop.
    ///
    /// # Safety
    /// No worker may touch the tables during the call.
    pub unsafe fn exchange(
        &mut self,
        i: usize,
        registry: &Registry,
        bases: &[Base],
        errors: &FirstError,
    ) -> Result<bool> {
        let t0 = std::time::Instant::now();
        // SAFETY: the caller's guarantee, passed on.
        let outcome = unsafe { self.exchange_inner(i, registry, bases, errors) };
        self.spent += t0.elapsed();
        outcome
    }

    unsafe fn exchange_inner(
        &mut self,
        i: usize,
        registry: &Registry,
        bases: &[Base],
        errors: &FirstError,
    ) -> Result<bool> {
        let world = self.comm.world_size();
        let me = self.comm.rank();
        if i > 0 {
            for (slot, start) in &mut self.relaxed {
                let merger = registry.entries[*slot].merger.as_ref().expect("relaxed");
                let master = bases[*slot].ptr;
                // SAFETY: no worker runs (the caller's guarantee); the snapshot was taken
                // from this master.
                unsafe {
                    merger.combine_ranks(self.comm, master, &**start, None)?;
                    *start = merger.snapshot(master, bases[*slot].len);
                }
            }
        }
        let plan = &self.plan.exchanges[i];
        // Both sides skip the same slots: `skip` and `skip_first` are agreed by all ranks.
        let skipped: Vec<bool> = (0..self.skip.len())
            .map(|s| self.skip[s] || (i == 0 && self.skip_first[s]))
            .collect();
        let status = errors.message();
        let mut out = Vec::with_capacity(world);
        for peer in 0..world {
            let mut bytes = postcard::to_stdvec(&status).map_err(|e| Error::Codec {
                what: "a loop status".into(),
                message: e.to_string(),
            })?;
            if peer != me && status.is_none() {
                for (slot, keys) in plan.send[peer].iter().enumerate() {
                    if !keys.is_empty() && !skipped[slot] {
                        // SAFETY: the table is locked by the engine, `keys` come from the
                        // reconnaissance log (below the length) and no worker runs.
                        unsafe {
                            registry.entries[slot].table.pack(
                                bases[slot].ptr,
                                keys.as_slice(),
                                &mut bytes,
                            )?
                        };
                    }
                }
            }
            out.push(bytes);
        }
        let all = self.comm.exchange(out)?;
        let mut bodies = Vec::with_capacity(world);
        let mut failure = None;
        for (peer, bytes) in all.iter().enumerate() {
            let (status, rest) =
                postcard::take_from_bytes::<Option<String>>(bytes).map_err(|e| Error::Codec {
                    what: format!("a loop status from rank {peer}"),
                    message: e.to_string(),
                })?;
            if let Some(message) = status {
                failure.get_or_insert((peer, message));
            }
            bodies.push(rest);
        }
        if let Some((rank, message)) = failure {
            if !errors.failed() {
                errors.set(Error::RemoteFailure { rank, message });
            }
            return Ok(true);
        }
        for (peer, mut rest) in bodies.into_iter().enumerate() {
            if peer == me {
                continue;
            }
            self.received.1 += rest.len() as u64;
            for (slot, keys) in plan.recv[peer].iter().enumerate() {
                if !keys.is_empty() && !skipped[slot] {
                    self.received.0 += keys.len() as u64;
                    // SAFETY: as above; this thread is the only one touching the table.
                    unsafe {
                        registry.entries[slot].table.unpack(
                            bases[slot].ptr,
                            keys.as_slice(),
                            &mut rest,
                        )?
                    };
                }
            }
            if !rest.is_empty() {
                return Err(Error::Codec {
                    what: format!("loop elements from rank {peer}"),
                    message: format!("{} bytes more than expected", rest.len()),
                });
            }
        }
        Ok(false)
    }
}
