//! Which strategy runs a loop call: pure functions of what the call is and what the rank
//! kept from earlier calls.
//!
//! A new strategy is a new file under `async_for/` or `sync_for/` plus one line here (and
//! its row in the tests below).

use super::SyncMode;

/// What an `async_for!` call's strategy depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AsyncCall {
    /// Ranks in the job.
    pub world: usize,
    /// Workers of this rank.
    pub threads: usize,
    /// Indices in the call.
    pub tasks: usize,
    /// The body's accesses change between calls ([`Opts::recheck`](crate::Opts::recheck)).
    pub recheck: bool,
    /// Locking runs can undo a task (the binary unwinds on panics).
    pub unwinds: bool,
    /// The rank kept a plan for this call.
    pub cached_plan: bool,
    /// The rank kept a locking run's table modes for this call.
    pub cached_modes: bool,
}

/// How an `async_for!` call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AsyncStrategy {
    /// No index: nothing runs.
    Nothing,
    /// One worker in a world of one: in loop order, on the tables directly.
    Serial,
    /// A recorded first call, whose log plans the later calls.
    RecordedPlan,
    /// A recorded first call of a re-checked loop, whose log gives the table modes.
    RecordedModes,
    /// Per-element locks (a re-checked loop), reconnoitring first if no modes are kept.
    Locking,
    /// By a plan, planning first if none is kept.
    Planned,
    /// Across the ranks of a job.
    Distributed,
}

/// Locking runs number a worker's tasks (and chunks) in 32 bits.
const MAX_LOCKING_TASKS: usize = (u32::MAX / 2) as usize;

/// Whether a loop's first call in a world of one runs as a recorded run rather than as
/// reconnaissance, planning and a planned run.
///
/// Reconnaissance repeats the body's memory traffic and adds its logging, so on `T`
/// workers the first call costs about `(r + 1) / T` serial epochs plus planning, with
/// `r` ≈ 2 (SGDMF: reconnaissance 0.94 serial epochs on 2 workers); a recorded run costs
/// `f` ≈ 1.2–1.3 on one worker, whatever `T`. So the recorded run is cheaper up to two
/// workers, and parallel reconnaissance beyond.
fn recorded_first_call(threads: usize) -> bool {
    threads <= 2
}

/// The strategy of an `async_for!` call.
pub(crate) fn async_strategy(c: AsyncCall) -> AsyncStrategy {
    use AsyncStrategy::*;
    if c.world > 1 {
        return Distributed;
    }
    if c.tasks == 0 {
        return Nothing;
    }
    if c.threads == 1 {
        return Serial;
    }
    let first = recorded_first_call(c.threads);
    // Accesses change between calls: locks rather than a plan per call (with
    // `panic = "abort"`, or too many tasks, re-checked loops re-plan every call instead).
    if c.recheck && c.unwinds && c.tasks < MAX_LOCKING_TASKS {
        return match (c.cached_modes, first) {
            (false, true) => RecordedModes,
            _ => Locking,
        };
    }
    match (c.cached_plan && !c.recheck, first) {
        (false, true) => RecordedPlan,
        _ => Planned,
    }
}

/// What a `sync_for!` call's strategy depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SyncCall {
    /// Ranks in the job.
    pub world: usize,
    /// Workers of this rank.
    pub threads: usize,
    /// The loop's synchronisation.
    pub mode: SyncMode,
}

/// How a `sync_for!` call runs; each one alone or across the ranks of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncStrategy {
    /// One worker: the mini-batches in order (across ranks, synchronised per mini-batch
    /// for BSP and per window for Hybrid).
    Serial { across: bool },
    /// Workers share progress asynchronously (see [`SyncMode::Hybrid`]).
    Hybrid { across: bool },
    /// Rounds of one mini-batch per worker, aggregated (see [`SyncMode::Bsp`]).
    Bsp { across: bool },
}

/// The strategy of a `sync_for!` call.
pub(crate) fn sync_strategy(c: SyncCall) -> SyncStrategy {
    let across = c.world > 1;
    match c.mode {
        _ if c.threads == 1 => SyncStrategy::Serial { across },
        SyncMode::Hybrid => SyncStrategy::Hybrid { across },
        SyncMode::Bsp => SyncStrategy::Bsp { across },
    }
}

#[cfg(test)]
mod tests {
    use super::AsyncStrategy::*;
    use super::*;

    #[test]
    fn async_for_strategies() {
        // world, threads, tasks, recheck, unwinds, cached plan, cached modes → strategy
        #[rustfmt::skip]
        let table = [
            (2, 1, 0, false, true, false, false, Distributed),
            (4, 2, 100, true, true, true, true, Distributed),
            (1, 2, 0, false, true, false, false, Nothing),
            (1, 1, 100, false, true, false, false, Serial),
            (1, 1, 100, true, true, true, true, Serial),
            (1, 2, 100, false, true, false, false, RecordedPlan),
            (1, 2, 100, false, true, true, false, Planned),
            (1, 4, 100, false, true, false, false, Planned),
            (1, 4, 100, false, true, true, false, Planned),
            (1, 2, 100, true, true, false, false, RecordedModes),
            (1, 2, 100, true, true, false, true, Locking),
            (1, 8, 100, true, true, false, false, Locking),
            // A re-checked loop that cannot lock re-plans every call, ignoring kept plans.
            (1, 2, 100, true, false, true, false, RecordedPlan),
            (1, 4, 100, true, false, true, false, Planned),
            (1, 2, MAX_LOCKING_TASKS, true, true, false, false, RecordedPlan),
        ];
        for (i, &(world, threads, tasks, recheck, unwinds, plan, modes, want)) in
            table.iter().enumerate()
        {
            let call = AsyncCall {
                world,
                threads,
                tasks,
                recheck,
                unwinds,
                cached_plan: plan,
                cached_modes: modes,
            };
            assert_eq!(async_strategy(call), want, "row {i}: {call:?}");
        }
    }

    #[test]
    fn sync_for_strategies() {
        use SyncMode::{Bsp, Hybrid};
        use SyncStrategy as S;
        #[rustfmt::skip]
        let table = [
            (1, 1, Bsp, S::Serial { across: false }),
            (1, 1, Hybrid, S::Serial { across: false }),
            (3, 1, Hybrid, S::Serial { across: true }),
            (1, 4, Hybrid, S::Hybrid { across: false }),
            (2, 4, Hybrid, S::Hybrid { across: true }),
            (1, 2, Bsp, S::Bsp { across: false }),
            (2, 2, Bsp, S::Bsp { across: true }),
        ];
        for (i, &(world, threads, mode, want)) in table.iter().enumerate() {
            let call = SyncCall {
                world,
                threads,
                mode,
            };
            assert_eq!(sync_strategy(call), want, "row {i}: {call:?}");
        }
    }
}
