//! Dynamic scheduling across ranks.
//!
//! Every rank holds every captured table whole for the call and keeps the same scheduler
//! (made from the same reconnaissance of the same values, its draws seeded alike), so all
//! ranks choose the same rounds. A round has one group per rank; each rank runs its
//! group's tasks in order on one worker. Then the ranks exchange what the round changed:
//! the elements of written tables that their tasks touch (no two groups share one, by the
//! scheduler's choice, and the views refuse any a task's reconnaissance did not show), and
//! the relaxed tables' changes, added in rank order to the values the round started from
//! (`Merger::add_changes`), all in one all-gather. So every rank ends each round with the same tables, reads the
//! same priorities, and draws the same next round. A call ends with every rank holding the
//! tables whole and current: their shadows serve the next call without a gather.
//!
//! The scheduler is replicated rather than kept on the driver: it costs each rank the
//! same few steps per task, where a scheduler on the driver would add a message from it
//! to every rank in every round, on top of the exchange a round needs anyway.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use super::super::distributed::{agree_entry, Shrink};
use super::super::execute::refuse_writes;
use super::super::{written_slots, Loop};
use super::{make_scheduler, new_tags, priority_slot, sched_key, tag, untag, Step};
use crate::access::{ExecCtx, Indices, LoopIndex};
use crate::cluster::collective::Comm;
use crate::dds::table::ShadowValidity;
use crate::engine::dynamic::{Dynamic, Scheduler};
use crate::engine::pipeline::Ran;
use crate::engine::registry::Registry;
use crate::engine::{body_error, Base, FirstError};
use crate::error::{Error, Result};
use crate::plan::SlotMode;

/// Most ranks a dynamic loop runs on: a round has at most 64 groups.
const MAX_RANKS: usize = 64;

/// Runs the call in rounds across the ranks of `comm`.
pub(in crate::engine::async_for) fn run<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    dynamic: &Dynamic,
    comm: &Comm,
) -> Result<Ran> {
    let site = l.call.site;
    let world = comm.world_size();
    if world > MAX_RANKS {
        return Err(Error::Config(format!(
            "{site}: Opts::dynamic runs on at most {MAX_RANKS} ranks ({world} here)"
        )));
    }
    let registry = &l.call.registry;
    let config = dynamic.config.clone();
    let mut state = dynamic.lock();
    let key = sched_key(l);
    // The ranks agree on the shadows they hold, and on whether their schedulers serve the
    // call: if one rank has none, all make theirs again (from the same log, alike).
    let kept = state.sched.as_ref().is_some_and(|s| s.key == key);
    let entry = agree_entry(l, comm, None, kept)?;
    let planning = !entry.cached;
    // From here on, however the call ends, every table goes back to this rank's range.
    let mut shrink = Shrink {
        tables: registry.entries.iter().map(|e| &*e.table).collect(),
        validity: vec![ShadowValidity::Stale; registry.entries.len()],
    };
    let op = site.operator();
    for (slot, e) in registry.entries.iter().enumerate() {
        // A shadow the last dynamic call left is whole and current, unless something
        // wrote the table since.
        match planning || !entry.fresh[slot] {
            true => e.table.gather_all(op, comm)?,
            false => e.table.expand_from_shadow(op)?,
        }
    }
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    if planning {
        make_scheduler(l, bases, key, &config, &mut state)?;
    }
    let priority = priority_slot(l, bases, &config.priority.kind)?;
    let modes = state.sched.as_ref().expect("made").modes.clone();
    let t0 = Instant::now();
    let mut step = Step::new(l, bases, &config, priority, world, world);
    let mut rounds = RankRounds::new(l, comm, bases, &modes);
    let errors = FirstError::new();
    let mut ran = 0usize;
    let mut outcome = Ok(());
    while outcome.is_ok() && step.guarded(&errors, |s| s.choose(&mut state)) == Some(true) {
        let sched = state.sched.as_ref().expect("made");
        step.starting(&sched.round);
        outcome = rounds.round(sched, ran);
        step.ended(&sched.round);
        ran += 1;
        step.guarded(&errors, |s| s.apply(&mut state));
    }
    let outcome = outcome.and(errors.into_result());
    l.call.note(|f| {
        f.ran = true;
        f.running += t0.elapsed();
        f.busy += rounds.busy;
        f.strategy = Some("dynamic");
        f.groups = Some(ran);
        f.workers = Some(1);
        f.steps += ran;
    });
    if outcome.is_ok() {
        // Every rank holds every table whole, and the same.
        shrink.validity.fill(ShadowValidity::All);
    }
    // Any failure (accesses changed since reconnaissance, a panic in the body or in a
    // user function inside the scheduler) may leave the ranks' tables, and so their
    // priorities, apart: every rank starts a new scheduler at the next call, from tables
    // gathered again.
    if step.broken || outcome.is_err() {
        state.sched = None;
    }
    drop(step);
    drop(locked);
    drop(shrink);
    Ok(Ran::new(outcome, written_slots(&modes)))
}

/// Runs rounds on this rank and exchanges what they change with the other ranks.
struct RankRounds<'r, 'c, 'a, Task, I> {
    l: &'r Loop<'c, 'a, Task, I>,
    comm: &'r Comm,
    registry: &'r Registry,
    bases: &'r [Base],
    /// The written (checked) slots, and the relaxed ones.
    checked: Vec<usize>,
    relaxed: Vec<usize>,
    /// Per checked slot, the group (rank) allowed each key in the round being run.
    tags: Vec<Vec<AtomicU32>>,
    ctx: ExecCtx,
    busy: Duration,
}

impl<'r, 'c, 'a, Task: Sync, I: LoopIndex> RankRounds<'r, 'c, 'a, Task, I> {
    fn new(
        l: &'r Loop<'c, 'a, Task, I>,
        comm: &'r Comm,
        bases: &'r [Base],
        modes: &[SlotMode],
    ) -> Self {
        let slots = |mode: SlotMode| -> Vec<usize> {
            (0..modes.len()).filter(|&s| modes[s] == mode).collect()
        };
        let tags = new_tags(modes, bases);
        let bindings = bases
            .iter()
            .enumerate()
            .map(|(slot, base)| {
                let mut b = base.binding();
                match modes[slot] {
                    SlotMode::ReadOnly => refuse_writes(&mut b),
                    SlotMode::Checked => {
                        b.tags = tags[slot].as_ptr() as *const u32;
                        b.allowed = comm.rank() as u32;
                    }
                    // Written in place: the round's changes are what the table holds at
                    // its end less what it held at its start.
                    SlotMode::Relaxed => {}
                }
                b
            })
            .collect();
        RankRounds {
            l,
            comm,
            registry: &l.call.registry,
            bases,
            checked: slots(SlotMode::Checked),
            relaxed: slots(SlotMode::Relaxed),
            tags,
            ctx: ExecCtx::new(bindings),
            busy: Duration::ZERO,
        }
    }

    /// The tasks of `sched`'s round in rank `r`'s group.
    fn group(sched: &Scheduler, r: usize) -> &[u32] {
        sched
            .groups
            .get(r)
            .map_or(&[][..], |g| &sched.round[g.clone()])
    }

    /// The keys of checked slot `slot` that `tasks` touch.
    fn keys(sched: &Scheduler, tasks: &[u32], slot: usize) -> Vec<u64> {
        tasks
            .iter()
            .flat_map(|&t| sched.checked_keys(t))
            .filter(|&(s, _)| s == slot)
            .map(|(_, k)| k as u64)
            .collect()
    }

    /// Runs this rank's group of the scheduler's round (number `number`) and brings every
    /// rank's changes into the tables, so that all ranks end it alike.
    fn round(&mut self, sched: &Scheduler, number: usize) -> Result<()> {
        let (comm, registry, bases) = (self.comm, self.registry, self.bases);
        let me = comm.rank();
        tag(&self.tags, sched, &sched.round, &sched.groups);
        // The relaxed tables' values as the round starts, the same on every rank.
        let starts: Vec<Box<dyn Any + Send>> = self
            .relaxed
            .iter()
            .map(|&slot| {
                let merger = registry.entries[slot].merger.as_ref().expect("merger");
                // SAFETY: the table is locked by this engine, and no body runs now.
                unsafe { merger.snapshot(bases[slot].ptr, bases[slot].len) }
            })
            .collect();
        let mine = Self::group(sched, me);
        self.ctx.unit.set(1 + (((number as u64) << 20) | me as u64));
        let t0 = Instant::now();
        let (l, ctx) = (self.l, &self.ctx);
        let ran = match mine.is_empty() {
            true => Ok(()),
            false => catch_unwind(AssertUnwindSafe(|| {
                (l.run)(l.call.task(), ctx, Indices::list(l.start, mine, ctx));
            })),
        };
        self.busy += t0.elapsed();
        let failed = ran
            .err()
            .map(|payload| body_error(l.call.site, ctx.current(), payload));
        // The elements of written tables this rank's tasks touched, slot by slot.
        let mut packed = Vec::with_capacity(self.checked.len());
        for &slot in &self.checked {
            let mut out = Vec::new();
            let keys = Self::keys(sched, mine, slot);
            // SAFETY: the table is locked by this engine and no body runs now; the keys
            // come from reconnaissance and are below its length.
            unsafe {
                registry.entries[slot]
                    .table
                    .pack(bases[slot].ptr, keys[..].into(), &mut out)?
            };
            packed.push(out);
        }
        // And the relaxed tables' changes: one message per rank and round for all.
        let mut changes = Vec::with_capacity(self.relaxed.len());
        for (&slot, start) in self.relaxed.iter().zip(&starts) {
            let merger = registry.entries[slot].merger.as_ref().expect("merger");
            let mut out = Vec::new();
            // SAFETY: the table is locked by this engine, no body runs now, and `start` is
            // its snapshot from the round's start.
            unsafe { merger.encode_change(bases[slot].ptr, &**start, &mut out)? };
            changes.push(out);
        }
        let said = failed.as_ref().map(ToString::to_string);
        let all = comm.allgather((said, packed, changes))?;
        untag(&self.tags, sched, &sched.round);
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some((r, (Some(why), _, _))) = all.iter().enumerate().find(|(_, a)| a.0.is_some()) {
            return Err(Error::invalid(
                "async_for!",
                format!(
                    "{}: rank {r} failed in a round of the loop: {why}",
                    l.call.site
                ),
            ));
        }
        for (r, (_, parts, changes)) in all.iter().enumerate().filter(|(r, _)| *r != me) {
            let theirs = Self::group(sched, r);
            if parts.len() != self.checked.len() || changes.len() != self.relaxed.len() {
                return Err(Error::BadPeerData {
                    rank: r,
                    what: format!("the changes of a round of {}", l.call.site),
                    message: format!(
                        "{} written and {} relaxed tables; the loop has {} and {}",
                        parts.len(),
                        changes.len(),
                        self.checked.len(),
                        self.relaxed.len()
                    ),
                });
            }
            for (&slot, part) in self.checked.iter().zip(parts) {
                let keys = Self::keys(sched, theirs, slot);
                let mut bytes: &[u8] = part;
                // SAFETY: as for `pack`; these keys belong to rank `r`'s group, which no
                // task of this rank touched in the round.
                unsafe {
                    registry.entries[slot].table.unpack(
                        bases[slot].ptr,
                        keys[..].into(),
                        &mut bytes,
                    )?
                };
            }
        }
        for (i, (&slot, start)) in self.relaxed.iter().zip(&starts).enumerate() {
            let merger = registry.entries[slot].merger.as_ref().expect("merger");
            let changes: Vec<&[u8]> = all.iter().map(|a| a.2[i].as_slice()).collect();
            // SAFETY: as above.
            unsafe { merger.add_changes(bases[slot].ptr, &**start, &changes)? };
        }
        Ok(())
    }
}
