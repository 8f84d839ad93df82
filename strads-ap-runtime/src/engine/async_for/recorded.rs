//! Recorded first calls: in a world of one with one or two workers, a loop's first call
//! runs its indices in loop order on one worker, with views that write the tables in
//! place and log every access, so that one pass both runs the call and reconnoitres it;
//! the log then plans the later calls (or, for a re-checked loop, gives the locking runs'
//! table modes).

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use super::execute::lay_out_task_tables;
use super::planned::{make_plan, plan_aside, plans_aside, LogSource};
use super::reconnoitre::chunk_ranges;
use super::{table_infos, written_slots, Loop};
use crate::access::LoopIndex;
use crate::engine::cache::{Cached, Keep};
use crate::engine::pipeline::Ran;
use crate::engine::{body_error, Base};
use crate::error::Result;
use crate::plan::{self, TableInfo};
use crate::recon::{AccessLog, InPlace, LogRoom, RecordIndices, Recorder};

/// A recorded run whose log plans the later calls.
pub(super) fn run_for_plan<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let tables = table_infos(&l.call.registry, bases);
    let t0 = std::time::Instant::now();
    let log = recorded_call(l, bases, Some(&tables));
    let took = t0.elapsed();
    drop(locked);
    let Some((log, ahead)) = log? else {
        return Ok(unplanned(l));
    };
    if plans_aside(l) {
        let modes = plan_aside(l, &l.key, log, ahead, tables, took);
        l.call.note(|f| f.first_call = true);
        return Ok(Ran::new(Ok(()), written_slots(&modes)));
    }
    let plan = make_plan(l, log, LogSource::Recorded(ahead), tables, l.call.threads);
    if !l.on_one_worker() {
        let locked = l.call.lock()?;
        lay_out_task_tables(l, &locked.bases, &plan);
        // The next call runs the plan on every worker: wake the pool's threads now, while
        // the driver works between calls, rather than at that call's first step (a thread
        // asleep since the program started can take a millisecond or two to wake).
        let threads = l.call.threads;
        l.call.here.pool(threads).linger(threads - 1);
    }
    let written = written_slots(&plan.modes);
    let cached = Cached { plan, dist: None };
    Ok(Ran::new(Ok(()), written).keeping(Keep::Plan(l.key.clone(), Box::new(cached))))
}

/// A recorded run of a re-checked loop, whose log gives the locking runs' table modes.
///
/// Where the loop is not re-checked but its tables were made afresh for this call (and
/// `l.key` is its role), the log also plans aside for the call's own key: a program that
/// swaps its tables once (a new data set for a second phase) then runs its next call by
/// that plan, where it would otherwise record a second time (2.5-4 serial calls).
pub(super) fn run_for_modes<Task, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let locked = l.call.lock()?;
    let t0 = Instant::now();
    let log = recorded_call(l, &locked.bases, None);
    let took = t0.elapsed();
    let tables = table_infos(&l.call.registry, &locked.bases);
    drop(locked);
    let Some((log, _)) = log? else {
        return Ok(unplanned(l));
    };
    l.call.note(|f| f.first_call = true);
    let learnt = match &l.renewed {
        Some(own) if plans_aside(l) => {
            let learnt = super::locking::learn(l, log.clone(), &tables);
            plan_aside(l, own, log, None, tables, took);
            learnt
        }
        _ => super::locking::learn(l, log, &tables),
    };
    let written = written_slots(&learnt.modes);
    Ok(Ran::new(Ok(()), written).keeping(Keep::Modes(l.key.clone(), learnt)))
}

/// A recorded run whose log missed accesses (a task logged more than its room held; see
/// `Recorder::end_task`): the call ran, in loop order, but plans nothing. Its next call
/// records again, with room for such tasks. Every table may have been written.
fn unplanned<Task, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Ran {
    let tables = l.call.registry.entries.len();
    Ran::new(Ok(()), vec![true; tables])
}

/// A recorded run: every index of `start..start + n` in loop order on this thread, with
/// views that write the tables in place and log each task's accesses (see
/// [`Recorder::in_place`]), so that one pass runs the call and reconnoitres it. Its time
/// is reported as [`LoopStats::recorded`](super::LoopStats::recorded).
///
/// The log is made in chunks of `2^RECORDED_SHIFT` tasks. A pool thread helps: it maps
/// the memory of the next chunks' logs beforehand (the recording thread would otherwise
/// take a page fault every few hundred tasks), sorts and deduplicates each finished
/// chunk's task logs, and with `tables` does the planner's first pass on it (see
/// [`plan::GatherAhead`]). The less the recording thread does between tasks, the more of
/// their cache misses its CPU overlaps.
fn recorded_call<Task, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    tables: Option<&[TableInfo]>,
) -> Result<Option<(AccessLog, Option<plan::GatherAhead>)>> {
    let (site, start, n) = (l.call.site, l.start, l.n);
    let (task, record) = (l.call.task(), l.recorded);
    use std::sync::mpsc::channel;
    let t0 = Instant::now();
    // Chunks small enough that the helper sizes the next rooms by what the finished ones
    // logged (a factorisation machine logs ~60 accesses per task, where a first guess of
    // one per table gives 3), large enough that each chunk's fixed costs (its recorder,
    // its room, its part of the planner's first pass) stay small: with 2^12 SGDMF's
    // recorded run and planning took 10% longer than with 2^16; 2^14 matches 2^16.
    const RECORDED_SHIFT: u32 = 14;
    let chunks = chunk_ranges(start, n, 1 << RECORDED_SHIFT);
    // Relaxed tables are left out of the plan and never checked: nothing to log.
    let relaxed: Vec<bool> = table_infos(&l.call.registry, bases)
        .iter()
        .map(|t| t.relaxed)
        .collect();
    let sizes: Vec<usize> = chunks.iter().map(Range::len).collect();
    let mut per_task = bases.len();
    let (room_tx, rooms) = channel::<LogRoom>();
    let (done, done_rx) = channel::<AccessLog>();
    let (back_tx, back) = channel::<(Vec<AccessLog>, Option<plan::GatherAhead>)>();
    let mut ahead = tables.map(|t| plan::GatherAhead::new(t, start));
    let mut outcome = Ok(());
    // The most accesses a task logged past its room, if one did.
    let mut overflowed = None;
    l.call.here.pool(1).in_place_scope(|scope| {
        scope.spawn(move |_| {
            // Two rooms ahead, one more for each chunk finished. The first chunk maps its
            // own: it starts before this helper can have made one.
            let mut next = 1;
            let send_room = |next: &mut usize, per_task: usize| {
                if let Some(&tasks) = sizes.get(*next) {
                    // The recording thread may have stopped (a body failed): no matter.
                    let _ = room_tx.send(LogRoom::new(tasks, per_task));
                    *next += 1;
                }
            };
            send_room(&mut next, per_task);
            send_room(&mut next, per_task);
            let mut logs = Vec::with_capacity(sizes.len());
            while let Ok(mut log) = done_rx.recv() {
                // A quarter more than the chunk just finished logged per task (not the
                // most any chunk logged: one chunk with a hub would size them all).
                per_task = (log.logged_per_task() * 5 / 4).max(1);
                send_room(&mut next, per_task);
                log.settle();
                if let Some(a) = &mut ahead {
                    a.add(&log);
                }
                logs.push(log);
            }
            let _ = back_tx.send((logs, ahead));
        });
        for (i, r) in chunks.iter().enumerate() {
            // Never wait for the helper: it may not have started (its pool is busy, or
            // this thread is that pool's), and then we map our own room.
            let made = if i == 0 { None } else { rooms.try_recv().ok() };
            let room = made.unwrap_or_else(|| LogRoom::new(r.len(), per_task));
            let rec = Recorder::in_place(bases.iter().map(Base::recorded).collect(), room)
                .unlogged(relaxed.clone());
            let ran = catch_unwind(AssertUnwindSafe(|| {
                crate::progress::count(r.len());
                record(
                    task,
                    &InPlace::new(&rec),
                    RecordIndices::new(r.clone(), &rec),
                );
            }));
            if let Err(payload) = ran {
                outcome = Err(body_error(site, rec.index(), payload));
                break;
            }
            overflowed = overflowed.max(rec.overflowed());
            // The helper lives until `done` is dropped below.
            let _ = done.send(rec.into_log());
        }
        // Ends the helper's loop (and unblocks it if we stopped early).
        drop(done);
        drop(rooms);
    });
    l.call.note(|f| {
        f.ran = true;
        f.recorded = Some(t0.elapsed());
        f.strategy = Some("recorded");
        f.groups = Some(1);
        f.workers = Some(1);
    });
    outcome?;
    let (logs, ahead) = back
        .recv()
        .expect("the recording helper returns the logs it was sent");
    if let Some(needed) = overflowed {
        let message = format!(
            "{site}: a task of the recorded first call logged {needed} accesses, more than \
             the room made for one task; the call ran, but plans nothing: its next call \
             records again with room for such tasks"
        );
        if crate::cluster::context().config().verbose {
            eprintln!("strads-ap: {message}");
        }
        tracing::debug!("{message}");
        return Ok(None);
    }
    Ok(Some((AccessLog::from_chunks(RECORDED_SHIFT, logs), ahead)))
}
