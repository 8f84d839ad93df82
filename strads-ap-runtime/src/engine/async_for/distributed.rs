//! `async_for!` across ranks.
//!
//! Every rank holds a full-length copy of each captured table for the duration of the call
//! (its own range current, the rest filled from shadows or on demand). A planning call
//! gathers small tables whole and leaves large vectors hollow (see
//! [`fetching`](super::fetching)), each rank reconnoitres its share of the tasks, fetching
//! from their owners what they read of the hollow tables, the logs are joined, and every
//! rank makes the same plan, which [`DistPlan`] cuts into steps; later
//! calls reuse it. Before each step the [`Exchanger`] moves the elements the step needs;
//! when the call ends each rank keeps its own range as the table and the other ranks'
//! elements as its shadow (of a written table, placeholders where the elements own heap
//! memory: see [`Shadow`](crate::dds::table::Shadow)).

use std::time::{Duration, Instant};

use super::exchange::Exchanger;
use super::execute::execute;
use super::fetching::reconnoitre_fetching;
use super::planned::{make_plan, LogSource};
use super::reconnoitre::reconnoitre;
use super::{table_infos, written_slots, Loop};
use crate::access::LoopIndex;
use crate::cluster::collective::Comm;
use crate::cluster::context;
use crate::dds::table::{ShadowValidity, TableHandle};
use crate::engine::cache::{kept, Cached, Keep};
use crate::engine::pipeline::Ran;
use crate::engine::Base;
use crate::error::{Error, Result};
use crate::plan::{place_by_owner, DistPlan, Plan, SlotMode, Transfers, MAX_RANKS};
use crate::recon::{AccessLog, LogShape};

/// What every rank says about itself when entering a distributed `async_for!`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Entry {
    pub threads: usize,
    pub cached: bool,
    /// Per slot: the table has a shadow here.
    pub has: Vec<bool>,
    /// Per slot: the shadow is current for the cached plan.
    pub fresh: Vec<bool>,
    /// Per slot, where the rank keeps no plan: the estimated bytes of its own part of the
    /// table (joined: summed, the whole table's); empty otherwise.
    pub sizes: Vec<u64>,
    /// Tables larger than this are fetched, not gathered, by a planning call (joined: the
    /// smallest; see `dds::set_fetch_above`).
    pub fetch_above: u64,
}

/// Most worker threads a rank may say it has: more is taken for a malformed entry (the
/// planner makes blocks and cells by the job's threads).
const MAX_THREADS_PER_RANK: usize = 4096;

/// Joins the ranks' entries (in rank order) for a loop capturing `slots` tables: threads
/// add up, the rest must hold on every rank. An entry that does not fit the call is an
/// error naming its rank (entries come from other ranks, so nothing in them is trusted:
/// the engine indexes `has` and `fresh` by slot).
fn join_entries(all: Vec<Entry>, slots: usize) -> std::result::Result<Entry, (usize, String)> {
    let mut joined = Entry {
        threads: 0,
        cached: true,
        has: vec![true; slots],
        fresh: vec![true; slots],
        sizes: vec![0; slots],
        fetch_above: u64::MAX,
    };
    for (rank, e) in all.into_iter().enumerate() {
        if e.has.len() != slots || e.fresh.len() != slots {
            return Err((
                rank,
                format!(
                    "shadow states of {} and {} tables; the loop captures {slots}",
                    e.has.len(),
                    e.fresh.len()
                ),
            ));
        }
        if !(1..=MAX_THREADS_PER_RANK).contains(&e.threads) {
            return Err((
                rank,
                format!(
                    "{} worker threads (at least 1, at most {MAX_THREADS_PER_RANK})",
                    e.threads
                ),
            ));
        }
        if !e.sizes.is_empty() && e.sizes.len() != slots {
            return Err((
                rank,
                format!(
                    "sizes of {} tables; the loop captures {slots}",
                    e.sizes.len()
                ),
            ));
        }
        for (j, x) in joined.sizes.iter_mut().zip(&e.sizes) {
            *j = j.saturating_add(*x);
        }
        joined.fetch_above = joined.fetch_above.min(e.fetch_above);
        joined.threads += e.threads;
        joined.cached &= e.cached;
        for (j, x) in joined.has.iter_mut().zip(&e.has) {
            *j &= *x;
        }
        for (j, x) in joined.fresh.iter_mut().zip(&e.fresh) {
            *j &= *x;
        }
    }
    Ok(joined)
}

/// How the ranks enter a call, as they all agree.
struct Agreed {
    entry: Entry,
    /// Per slot: gathered whole for this call.
    gathered: Vec<bool>,
    /// When the tables started being made ready.
    since: Instant,
}

impl Agreed {
    /// A read-only table some rank holds stale (changed since it last held all of it, and
    /// not gathered now): it needs transfers. The same on every rank.
    fn stale(&self, modes: &[SlotMode], s: usize) -> bool {
        modes[s] == SlotMode::ReadOnly && !self.gathered[s] && !self.entry.fresh[s]
    }
}

/// Runs the call across the ranks of the job.
pub(super) fn run<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let site = l.call.site;
    let comm = l.call.here.comm_for(site.operator())?;
    let world = comm.world_size();
    if world > MAX_RANKS {
        return Err(Error::Config(format!(
            "{site}: async_for! runs on at most {MAX_RANKS} ranks for now ({world} here)"
        )));
    }
    if l.n == 0 {
        return Ok(Ran::new(Ok(()), Vec::new()));
    }
    let cached = match l.opts.recheck {
        true => None,
        false => kept().plans.take(&l.key),
    };
    let (entry, cached) = agree(l, comm, cached)?;
    let since = Instant::now();
    // From here on, however the call ends, every table goes back to this rank's range.
    let mut shrink = Shrink {
        tables: l.call.registry.entries.iter().map(|e| &*e.table).collect(),
        validity: vec![ShadowValidity::Stale; l.call.registry.entries.len()],
    };
    let (gathered, hollow) = make_ready(l, comm, &entry, cached.is_none())?;
    let agreed = Agreed {
        entry,
        gathered,
        since,
    };
    // Owners of map entries (by key hash), for cutting a plan; read before locking.
    let owners: Vec<Option<Vec<u16>>> = match cached.is_none() {
        true => l
            .call
            .registry
            .entries
            .iter()
            .map(|e| e.table.owners())
            .collect(),
        false => Vec::new(),
    };
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let lens: Vec<usize> = bases.iter().map(|b| b.len).collect();
    let (plan, dist) = match cached {
        Some(Cached {
            plan,
            dist: Some(dist),
        }) => (plan, dist),
        _ => {
            // Making tables ready is part of planning: later calls fetch only what the
            // plan needs.
            l.call.note(|f| f.recon += agreed.since.elapsed());
            plan_across(l, comm, bases, &agreed, &hollow, &lens, &owners)?
        }
    };
    let steps = run_steps(l, comm, bases, &agreed, plan, dist, &mut shrink.validity);
    drop(locked);
    let t_shrink = Instant::now();
    drop(shrink);
    if context().config().verbose && comm.rank() == 0 {
        eprintln!(
            "strads-ap: {site}: call in {:.4} s: tables ready in {:.4} s, steps {:.4} s of \
             which exchanges {:.4} s, shadows kept in {:.4} s",
            agreed.since.elapsed().as_secs_f64(),
            steps.ready.as_secs_f64(),
            steps.running.as_secs_f64(),
            steps.exchanging.as_secs_f64(),
            t_shrink.elapsed().as_secs_f64(),
        );
    }
    Ok(steps.ran)
}

/// The ranks agree on how they enter the call: threads, whether all have the plan cached
/// (the cached plan is dropped otherwise), which shadows all hold.
fn agree<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    cached: Option<Cached>,
) -> Result<(Entry, Option<Cached>)> {
    let fingerprint = cached
        .as_ref()
        .and_then(|c| c.dist.as_ref())
        .map(|d| d.fingerprint);
    let entry = agree_entry(l, comm, fingerprint, cached.is_some())?;
    let cached = cached.filter(|_| entry.cached);
    Ok((entry, cached))
}

/// Joins every rank's entry to a call (a collective): its threads, whether it keeps what
/// serves the call (`kept`: a plan, a scheduler; `cached` is true when every rank does),
/// and its shadows' states for the plan `fingerprint`.
pub(super) fn agree_entry<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    fingerprint: Option<u64>,
    kept: bool,
) -> Result<Entry> {
    let registry = &l.call.registry;
    let states: Vec<(bool, bool)> = registry
        .entries
        .iter()
        .map(|e| e.table.shadow_state(fingerprint))
        .collect();
    // Sizes matter only to a planning call: a rank that keeps a plan sends none (its part
    // then counts as nothing, alike on every rank).
    let sizes = match kept {
        true => Vec::new(),
        false => registry
            .entries
            .iter()
            .map(|e| e.table.part_bytes())
            .collect(),
    };
    let mine = Entry {
        threads: l.call.threads,
        cached: kept,
        has: states.iter().map(|s| s.0).collect(),
        fresh: states.iter().map(|s| s.1).collect(),
        sizes,
        fetch_above: crate::dds::gather::fetch_above(),
    };
    // Every rank checks and joins every rank's entry (in rank order, so alike everywhere).
    let what = || format!("entry to {}", l.call.site);
    join_entries(comm.allgather(mine)?, registry.entries.len()).map_err(|(rank, message)| {
        Error::BadPeerData {
            rank,
            what: what(),
            message,
        }
    })
}

/// Makes every table full-length here until the call ends; returns which were gathered
/// whole, and which are hollow (this rank's range and fillers).
///
/// A relaxed table is gathered whole (every rank replicates it). When the loop is about to
/// be planned (`planning`), reconnaissance must see current values, as accesses may depend
/// on them: a table every rank holds current in its shadow is expanded from it; a vector
/// larger than the agreed `fetch_above` is made hollow, and reconnaissance fetches what it
/// reads (see [`fetching`](super::fetching)); the others (smaller tables, maps, element
/// types no filler is made of) are gathered whole. A later call expands from the shadows,
/// gathering a table only where some rank has no shadow of it.
fn make_ready<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    entry: &Entry,
    planning: bool,
) -> Result<(Vec<bool>, Vec<bool>)> {
    let registry = &l.call.registry;
    let op = l.call.site.operator();
    let mut gathered = vec![false; registry.entries.len()];
    let mut hollow = vec![false; registry.entries.len()];
    for (slot, e) in registry.entries.iter().enumerate() {
        let relaxed = e.table.is_relaxed() && e.merger.is_some();
        let current = entry.has[slot] && entry.fresh[slot];
        let large = entry
            .sizes
            .get(slot)
            .is_some_and(|&b| b > entry.fetch_above);
        // The same choice on every rank: `entry` is agreed, the rest is the table's type.
        if !relaxed && planning && !current && large && e.table.expand_hollow(op)? {
            hollow[slot] = true;
        } else if relaxed || !entry.has[slot] || (planning && !current) {
            e.table.gather_all(op, comm)?;
            gathered[slot] = true;
        } else {
            e.table.expand_from_shadow(op)?;
        }
    }
    Ok((gathered, hollow))
}

/// Plans the call across ranks: each rank reconnoitres its share of the tasks, the logs
/// are joined on every rank, every rank makes the same plan and cuts it into steps (the
/// fingerprints must agree).
fn plan_across<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    bases: &[Base],
    agreed: &Agreed,
    hollow: &[bool],
    lens: &[usize],
    owners: &[Option<Vec<u16>>],
) -> Result<(Plan, DistPlan)> {
    let (site, start, n) = (l.call.site, l.start, l.n);
    let (world, me) = (comm.world_size(), comm.rank());
    let t0 = Instant::now();
    let share = crate::store::RangePartition::new(n, world).range(me);
    let (task, record, threads) = (l.call.task(), l.record, l.call.threads);
    let mine = match hollow.iter().any(|&h| h) {
        true => reconnoitre_fetching(l, comm, bases, hollow, start + share.start, share.len()),
        false => reconnoitre(
            site,
            start + share.start,
            share.len(),
            task,
            record,
            bases,
            threads,
        ),
    };
    let bytes = comm.gather_outcomes(mine.map(|log| log.to_bytes(start + share.start)))?;
    // The logs of other ranks are checked as they are decoded: the planner indexes the
    // tables' tags and scratch arrays by their keys.
    let shares: Vec<_> = (0..world)
        .map(|r| {
            let share = crate::store::RangePartition::new(n, world).range(r);
            start + share.start..start + share.end
        })
        .collect();
    let shape = LogShape {
        key_spaces: lens,
        shares: &shares,
    };
    let log = AccessLog::from_byte_parts(&bytes, &shape).map_err(|bad| Error::BadPeerData {
        rank: bad.part,
        what: format!("reconnaissance log for {site}"),
        message: bad.message,
    })?;
    drop(bytes);
    let recon = LogSource::Reconnoitred(t0.elapsed());
    let tables = table_infos(&l.call.registry, bases);
    let mut plan = make_plan(l, log, recon, tables, agreed.entry.threads);
    let t_cut = Instant::now();
    // Tasks free to run anywhere go where what they read lives, weighed by the tables'
    // sizes the ranks sent (a rank that keeps a plan sent none: its parts weigh nothing).
    place_by_owner(&mut plan, lens, owners, &agreed.entry.sizes, world);
    let mut dist = DistPlan::new(&plan, lens, owners, world, me, Transfers::Written);
    // The read-only tables' transfers too, while the log is at hand: a later call that
    // finds one stale (changed since this rank last held what the plan reads of it) moves
    // them, and the kept plan drops its log.
    if plan.modes.contains(&SlotMode::ReadOnly) {
        dist.add_read_only(DistPlan::new(
            &plan,
            lens,
            owners,
            world,
            me,
            Transfers::ReadOnly,
        ));
    }
    plan.drop_log();
    let prints = comm.allgather(dist.fingerprint)?;
    l.call.note(|f| f.planning += t_cut.elapsed());
    if let Some(rank) = prints.iter().position(|&f| f != dist.fingerprint) {
        return Err(Error::Divergence {
            rank,
            driver: site.to_string(),
            here: format!("{site} with a different plan (an internal error)"),
        });
    }
    if context().config().verbose && me == 0 {
        eprintln!(
            "strads-ap: {site}: {} steps across {world} ranks, about {} elements fetched per \
             step",
            dist.steps.len(),
            dist.received
        );
    }
    Ok((plan, dist))
}

/// What running the steps did.
struct Steps {
    ran: Ran,
    /// From entering the call to the first step.
    ready: Duration,
    running: Duration,
    exchanging: Duration,
}

/// Runs this rank's steps with an exchange before each and after the last; on success,
/// says how current each table's shadow will be (`validity`) and keeps the plan.
fn run_steps<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    bases: &[Base],
    agreed: &Agreed,
    mut plan: Plan,
    dist: DistPlan,
    validity: &mut [ShadowValidity],
) -> Steps {
    let registry = &l.call.registry;
    let slots = registry.entries.len();
    // Read-only tables already current here need no transfers.
    let skip: Vec<bool> = (0..slots)
        .map(|s| plan.modes[s] == SlotMode::ReadOnly && !agreed.stale(&plan.modes, s))
        .collect();
    let t0 = Instant::now();
    let ready = t0 - agreed.since;
    // SAFETY: the tables are locked (`bases`) and no worker runs yet. Tables just gathered
    // whole need nothing before the first step either.
    let mut exchanger = unsafe {
        let gathered = agreed.gathered.clone();
        Exchanger::new(
            comm,
            &dist,
            skip.clone(),
            gathered,
            registry,
            bases,
            &plan.modes,
        )
    };
    let outcome = execute(
        l,
        bases,
        &mut plan,
        &dist.steps,
        // SAFETY: `execute` calls this only between steps, when no worker runs.
        Some(&mut |i, errors| unsafe { exchanger.exchange(i, registry, bases, errors) }),
    );
    let (exchanging, received) = (exchanger.spent, exchanger.received);
    drop(exchanger);
    let running = t0.elapsed();
    l.call.note(|f| {
        (f.received, f.received_bytes) = received;
        f.ran = true;
        f.running += running;
        f.replans_by_design = l.opts.recheck;
    });
    let written = written_slots(&plan.modes);
    let ok = outcome.is_ok();
    let mut ran = Ran::new(outcome, written);
    if ok {
        for (slot, v) in validity.iter_mut().enumerate() {
            *v = match plan.modes[slot] {
                SlotMode::Checked => ShadowValidity::Stale,
                SlotMode::Relaxed => ShadowValidity::All,
                SlotMode::ReadOnly if agreed.gathered[slot] => ShadowValidity::All,
                SlotMode::ReadOnly if skip[slot] => ShadowValidity::Unchanged,
                SlotMode::ReadOnly => ShadowValidity::Plan(dist.fingerprint),
            };
        }
        let cached = Cached {
            plan,
            dist: Some(dist),
        };
        ran = ran.keeping(Keep::Plan(l.key.clone(), Box::new(cached)));
    }
    Steps {
        ran,
        ready,
        running,
        exchanging,
    }
}

/// Cuts tables back to this rank's range when a distributed loop ends, however it ends,
/// keeping the full-length elements as shadows.
pub(super) struct Shrink<'a> {
    pub tables: Vec<&'a dyn TableHandle>,
    pub validity: Vec<ShadowValidity>,
}

impl Drop for Shrink<'_> {
    fn drop(&mut self) {
        for (t, v) in self.tables.iter().zip(&self.validity) {
            t.shrink_to_shadow(*v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(threads: usize, cached: bool, has: &[bool], fresh: &[bool]) -> Entry {
        Entry {
            threads,
            cached,
            has: has.to_vec(),
            fresh: fresh.to_vec(),
            sizes: Vec::new(),
            fetch_above: u64::MAX,
        }
    }

    #[test]
    fn entries_join_in_rank_order() {
        // A rank that keeps no plan sends its tables' sizes; one that does, none.
        let planning = Entry {
            sizes: vec![10, 700],
            fetch_above: 100,
            ..entry(2, false, &[true, true], &[true, false])
        };
        let keeping = Entry {
            fetch_above: 50,
            ..entry(3, true, &[false, true], &[true, false])
        };
        let other = Entry {
            sizes: vec![20, 600],
            ..entry(1, false, &[true, true], &[true, true])
        };
        let joined = join_entries(vec![planning, keeping, other], 2).unwrap();
        let expected = Entry {
            sizes: vec![30, 1300],
            fetch_above: 50,
            ..entry(6, false, &[false, true], &[true, false])
        };
        assert_eq!(joined, expected);
    }

    /// An entry with fewer shadow states than the loop has tables panicked every rank
    /// (the engine indexed the joined states by slot after `zip` had cut them short); a
    /// thread count near `usize::MAX` overflowed the sum. Both are refused, naming the
    /// rank.
    #[test]
    fn entries_that_do_not_fit_the_call_are_refused() {
        let good = entry(1, true, &[true, true], &[true, true]);
        let short = entry(1, true, &[], &[]);
        let (rank, why) = join_entries(vec![good.clone(), short], 2).unwrap_err();
        assert_eq!(rank, 1);
        assert_eq!(why, "shadow states of 0 and 0 tables; the loop captures 2");
        let greedy = entry(usize::MAX, true, &[true, true], &[true, true]);
        let (rank, why) = join_entries(vec![greedy, good.clone()], 2).unwrap_err();
        assert_eq!(rank, 0);
        assert!(
            why.starts_with(&format!("{} worker threads", usize::MAX)),
            "{why}"
        );
        let idle = entry(0, true, &[true, true], &[true, true]);
        assert_eq!(join_entries(vec![good.clone(), idle], 2).unwrap_err().0, 1);
        let sized = Entry {
            sizes: vec![1, 2, 3],
            ..good.clone()
        };
        let (rank, why) = join_entries(vec![good, sized], 2).unwrap_err();
        assert_eq!(
            (rank, why.as_str()),
            (1, "sizes of 3 tables; the loop captures 2")
        );
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        /// Entries as other ranks send them (see `crate::fuzz`): decoded and joined, or
        /// refused, never a panic; what is joined fits the call.
        #[test]
        fn fuzz_entries(
            threads in 0usize..10,
            has in proptest::collection::vec(proptest::bool::ANY, 0..5),
            ms in crate::fuzz::mutations(),
            slots in 0usize..5,
        ) {
            let good = entry(threads, true, &has, &has);
            let mut bytes = postcard::to_stdvec(&good).unwrap();
            crate::fuzz::mutate(&mut bytes, &ms);
            if let Ok(theirs) = postcard::from_bytes::<Entry>(&bytes) {
                let mine = entry(1, true, &vec![true; slots], &vec![false; slots]);
                if let Ok(joined) = join_entries(vec![mine, theirs], slots) {
                    proptest::prop_assert_eq!(joined.has.len(), slots);
                    proptest::prop_assert_eq!(joined.fresh.len(), slots);
                    proptest::prop_assert!(joined.threads <= 2 * MAX_THREADS_PER_RANK);
                }
            }
        }
    }
}
