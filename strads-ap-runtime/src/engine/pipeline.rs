//! One pipeline per loop call: every `async_for!` and `sync_for!` call goes through
//! [`enter`], one strategy (chosen by [`super::choose`]), and [`finish`].
//!
//! * [`enter`] collects the captured tables and refuses bad captures, asks the checkpoints
//!   whether recovery skips the call, and across ranks ships the driver's task to every
//!   rank. [`Call::lock`] then locks the captured tables for the strategy (a strategy that
//!   first gathers tables across ranks locks after that).
//! * A strategy runs the call and says what it ran ([`Ran`]): which tables it may have
//!   written, and what to keep for the next call (a plan, locking modes) or forget. Its
//!   figures go into the call's [`Figures`] as it goes.
//! * [`finish`] records the figures, keeps or forgets what the strategy said, and tells the
//!   checkpoints which tables the call wrote.
//!
//! This is the only engine file that names the checkpoint module.

use std::cell::RefCell;
use std::sync::Arc;

use super::cache::Keep;
use super::captures;
use super::reduce::ReductionSlot;
use super::registry::{Base, Registry};
use super::stats::Figures;
use super::{CallSite, Opts};
use crate::cluster::collective::Comm;
use crate::cluster::RankCtx;
use crate::dds::table::TableLock;
use crate::error::{Error, Result};

/// The task a call runs: the driver's, or on other ranks the copy shipped from it.
enum Task<'a, T> {
    Local(&'a T),
    Shipped(Box<T>),
}

/// A loop call between [`enter`] and [`finish`].
pub(crate) struct Call<'a, T> {
    pub site: &'static CallSite,
    task: Task<'a, T>,
    /// The captured tables (and reduction variables) of this rank's own task.
    pub registry: Registry,
    /// The reduction variables of the task the workers run: the registry's, or those of
    /// the copy shipped from the driver.
    running_reductions: Vec<(Arc<dyn ReductionSlot>, &'static str)>,
    /// Workers of this rank.
    pub threads: usize,
    /// The rank the call runs on.
    pub here: Arc<RankCtx>,
    checkpointing: bool,
    figures: RefCell<Figures>,
    /// When the call entered.
    started: std::time::Instant,
}

/// What a strategy ran.
pub(crate) struct Ran {
    /// How the run went (a failure after the strategy had something to keep or forget).
    pub outcome: Result<()>,
    /// Per captured table: whether the call may have written it.
    pub written: Vec<bool>,
    /// What to keep for (or forget before) the next call.
    pub keep: Option<Keep>,
}

impl Ran {
    /// A run that went as `outcome` and keeps nothing.
    pub fn new(outcome: Result<()>, written: Vec<bool>) -> Self {
        Ran {
            outcome,
            written,
            keep: None,
        }
    }

    /// The same, keeping (or forgetting) `keep`.
    pub fn keeping(mut self, keep: Keep) -> Self {
        self.keep = Some(keep);
        self
    }
}

/// The captured tables, locked for a call: where their elements are, per slot.
pub(crate) struct Locked<'r> {
    _locks: Vec<Box<dyn TableLock + 'r>>,
    pub bases: Vec<Base>,
}

/// Starts a loop call: collects the captured tables of `task` (refusing two handles of
/// one table, or more than `max_tables`), lets recovery skip the call (`None`), and in a
/// job of several ranks makes every rank run the driver's task.
pub(crate) fn enter<'a, T: serde::Serialize + serde::de::DeserializeOwned>(
    site: &'static CallSite,
    task: &'a T,
    opts: &Opts,
    register: fn(&T, &mut Registry),
    max_tables: usize,
) -> Result<Option<Call<'a, T>>> {
    let started = std::time::Instant::now();
    let mut registry = Registry::default();
    register(task, &mut registry);
    registry.check(site)?;
    if registry.entries.len() > max_tables {
        return Err(Error::invalid(
            site.operator(),
            format!("{site}: the body captures more than {max_tables} DDSs"),
        ));
    }
    if let Some(threads) = opts.threads.filter(|&t| t > crate::cluster::MAX_THREADS) {
        return Err(Error::invalid(
            site.operator(),
            format!(
                "{site}: Opts::threads({threads}): at most {} worker threads per process",
                crate::cluster::MAX_THREADS
            ),
        ));
    }
    // With checkpoints on, recovery may skip this call; after it, the tables it wrote are
    // checkpointed (see `crate::checkpoint`).
    let checkpointing = crate::checkpoint::active();
    if checkpointing && crate::checkpoint::enter_loop(&site.to_string())? {
        // Skipped: its reduction variables take the values the call gave them.
        if let Some(values) = crate::checkpoint::skipped_reductions() {
            for ((slot, name), bytes) in registry.reductions.iter().zip(&values) {
                slot.restore_result(bytes, name)?;
            }
        }
        return Ok(None);
    }
    let here = crate::cluster::here();
    let task = match here.is_distributed() {
        true => match ship_task(here.comm_for(site.operator())?, site, task)? {
            Some(shipped) => Task::Shipped(Box::new(shipped)),
            None => Task::Local(task),
        },
        false => Task::Local(task),
    };
    let running_reductions = match &task {
        Task::Local(_) => registry.reductions.clone(),
        Task::Shipped(shipped) => {
            let mut theirs = Registry::default();
            register(shipped, &mut theirs);
            theirs.reductions
        }
    };
    Ok(Some(Call {
        site,
        task,
        registry,
        running_reductions,
        threads: opts
            .threads
            .unwrap_or(crate::cluster::context().config().threads),
        here,
        checkpointing,
        figures: RefCell::default(),
        started,
    }))
}

impl<T> Call<'_, T> {
    /// The task to run.
    pub fn task(&self) -> &T {
        match &self.task {
            Task::Local(t) => t,
            Task::Shipped(t) => t,
        }
    }

    /// The collectives, in a job of several ranks.
    pub fn comm(&self) -> Result<Option<&Comm>> {
        match self.here.is_distributed() {
            true => self.here.comm_for(self.site.operator()).map(Some),
            false => Ok(None),
        }
    }

    /// Whether the checkpoints will want to know which tables the call wrote.
    pub fn checkpointing(&self) -> bool {
        self.checkpointing
    }

    /// Adds to this call's figures.
    pub fn note<R>(&self, f: impl FnOnce(&mut Figures) -> R) -> R {
        f(&mut self.figures.borrow_mut())
    }

    /// Locks every captured table for the rest of the call (a table in use by another
    /// running operator is refused: loop operators do not nest).
    pub fn lock(&self) -> Result<Locked<'_>> {
        let (locks, bases) = self.registry.lock_all(self.site)?;
        Ok(Locked {
            _locks: locks,
            bases,
        })
    }
}

/// Ends a loop call that ran (or failed) as `ran`: records its figures, keeps or forgets
/// what the strategy said, and has the tables it wrote checkpointed if due.
pub(crate) fn finish<T: serde::Serialize>(call: Call<'_, T>, ran: Result<Ran>) -> Result<()> {
    let mut figures = std::mem::take(&mut *call.figures.borrow_mut());
    // A call that reconnoitred (or recorded) for the plans to come: its captures'
    // fingerprints, to name the ones that changed should a later body leave the plan.
    if figures.first_call && !figures.renewed && !figures.replans_by_design {
        captures::remember(call.site, captures::fingerprints(call.task()));
    }
    let ran = ran.map(|mut r| {
        if let Err(e) = r.outcome {
            r.outcome = Err(name_changed_captures(&call, e));
        }
        r
    });
    if figures.ran {
        figures.wall = call.started.elapsed();
    }
    if let Ok(ran) = &ran {
        figures.written = ran.written.clone();
    }
    figures.failed = figures.ran && ran.as_ref().map_or(true, |r| r.outcome.is_err());
    figures.record(call.site, &call.registry);
    let ran = ran?;
    if let Some(keep) = ran.keep {
        keep.apply();
    }
    ran.outcome?;
    let comm = match call.here.is_distributed() {
        true => Some(call.here.comm_for(call.site.operator())?),
        false => None,
    };
    super::reduce::finish(&call.running_reductions, &call.registry.reductions, comm)?;
    if !call.checkpointing {
        return Ok(());
    }
    let tables: Vec<_> = call
        .registry
        .entries
        .iter()
        .zip(&ran.written)
        .filter(|(_, w)| **w)
        .map(|(e, _)| e.table.clone())
        .collect();
    let reductions = call
        .registry
        .reductions
        .iter()
        .map(|(slot, name)| slot.encode_result(name))
        .collect::<Result<Vec<_>>>()?;
    crate::checkpoint::leave_loop(&call.site.to_string(), &tables, reductions)
}

/// Encoded bytes beyond which a captured value that changed may be an order of the data.
const ORDER_BYTES: usize = 64;

/// An access outside the plan, with what changed since the site last reconnoitred named
/// in it: a write where reconnaissance saw only reads (an update made on a condition of
/// values), or else the captured plain variables (not tables, not reductions) whose
/// values changed.
fn name_changed_captures<T: serde::Serialize>(call: &Call<'_, T>, mut error: Error) -> Error {
    let Error::AccessOutsidePlan {
        changed,
        access,
        reason,
        table,
        ..
    } = &mut error
    else {
        return error;
    };
    if *access == "wrote" && *reason == crate::dds::view::ONLY_READ {
        // A perceptron's update on a mistake: the captures that changed (the pass) are
        // beside the point, and naming them misled a new user.
        *changed = format!(
            ": the body writes it under a condition of values that changed since (an \
             update made only on a mistake or a violated margin, `if pred != label {{ \
             {table}[..] += .. }}`); make the write whatever the values, with a zero step \
             where the condition fails (`{table}[..] += if wrong {{ step }} else {{ 0.0 }}`), \
             so that reconnaissance sees it"
        );
        return error;
    }
    let registry = &call.registry;
    let plain = |name: &&str| {
        !registry.entries.iter().any(|e| e.name == *name)
            && !registry.reductions.iter().any(|(_, r)| r == name)
    };
    let found: Vec<(&str, usize)> = captures::since(call.site)
        .map(|then| captures::changed(&then, &captures::fingerprints(call.task())))
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| plain(name))
        .collect();
    let names: Vec<String> = found.iter().map(|(name, _)| name.to_string()).collect();
    if !names.is_empty() {
        *changed = format!(
            "; here captured {} changed since reconnaissance ran",
            super::diagnose::quoted(&names)
        );
    }
    // A collection that changed may be an order of the data; a number (a pass, a rate)
    // is not one.
    if found.iter().any(|&(_, len)| len > ORDER_BYTES) {
        changed.push_str(&format!(
            ": where {} the order of the data (a shuffle made each pass, indexed as \
             `data[perm[k]]`), index the data by the loop index instead (`data[k]`), as \
             `async_for!` chooses the order of the indices itself",
            if names.len() == 1 { "it is" } else { "one is" },
        ));
    }
    error
}

/// Enters a loop operator across ranks and ships the driver's task: every rank must reach
/// the same call site (a divergence error naming both sites otherwise), and every rank but
/// the driver (rank 0) runs the driver's captures, returned here. Whatever fails on one
/// rank (a capture that does not encode or decode) fails every rank alike.
pub(crate) fn ship_task<Task: serde::Serialize + serde::de::DeserializeOwned>(
    comm: &crate::cluster::collective::Comm,
    site: &CallSite,
    task: &Task,
) -> crate::Result<Option<Task>> {
    let me = comm.rank();
    let codec = |e: postcard::Error| Error::Codec {
        what: format!("the captures of {site}"),
        message: e.to_string(),
    };
    let (captures, mut local) = match me {
        0 => match postcard::to_stdvec(task) {
            Ok(bytes) => (bytes, Ok(None)),
            Err(e) => (Vec::new(), Err(codec(e))),
        },
        _ => (Vec::new(), Ok(None)),
    };
    let shipped = comm.enter_operator(&site.to_string(), site.task, captures)?;
    if me != 0 {
        local = postcard::from_bytes(&shipped).map(Some).map_err(codec);
    }
    // Every rank learns whether the task reached every rank.
    let (ok, task) = match local {
        Ok(task) => (Ok(()), task),
        Err(e) => (Err(e), None),
    };
    comm.gather_outcomes(ok)?;
    Ok(task)
}

#[cfg(test)]
mod tests {
    use crate::dds::VectorRef;
    use crate::engine::{run_async_for, run_sync_for, CallSite, LoopKind, Opts, Registry};
    use crate::recon::{Recording, MAX_TABLES};
    use crate::{DVector, Error, SyncMode};

    fn site(kind: LoopKind) -> &'static CallSite {
        Box::leak(Box::new(CallSite {
            kind,
            task: "ManyTables",
            body_hash: 1,
            file: "src/many.rs",
            line: 3,
            column: 5,
            captures: &["v"],
        }))
    }

    fn register(task: &Vec<VectorRef<f64>>, reg: &mut Registry) {
        for v in task {
            reg.add(v.table.clone(), "v", None);
        }
    }

    /// Each operator run with `tables` captured tables, the body logging a write of
    /// element 0 of each: the outcomes of `async_for!` and `sync_for!`.
    fn run_both(tables: usize) -> [crate::Result<()>; 2] {
        let vectors: Vec<DVector<f64>> = (0..tables)
            .map(|_| DVector::from_vec(vec![0.0; 2]).unwrap())
            .collect();
        let task: Vec<VectorRef<f64>> = vectors.iter().map(|v| v.__strads_capture()).collect();
        let data = DVector::from_vec(vec![1.0f64; 4]).unwrap();
        let opts = || Opts::new().threads(2);
        let async_run = run_async_for(
            site(LoopKind::Async),
            0..4usize,
            &task,
            opts(),
            register,
            |_, _, _| {},
            |t, rec, _| {
                (0..t.len()).for_each(|s| {
                    rec.log(s, 0, true);
                })
            },
            |t, rec, _| {
                (0..t.len()).for_each(|s| {
                    rec.recorder().log(s, 0, true);
                })
            },
            |_, _, _| {},
            |_, _, _| {},
            |_, _, _| {},
        );
        let sync_run = run_sync_for(
            site(LoopKind::Sync),
            &data,
            2,
            SyncMode::Hybrid,
            &task,
            opts(),
            register,
            |_, _, _| {},
            |t, rec, _| {
                (0..t.len()).for_each(|s| {
                    rec.log(s, 0, true);
                })
            },
            |_, _, _| {},
        );
        [async_run, sync_run]
    }

    /// An access names its table in 8 bits: a body capturing more than [`MAX_TABLES`]
    /// tables is refused when the call enters, by both operators (`sync_for!` had no limit,
    /// so its reconnaissance logged table 256 as table 0 in release builds).
    #[test]
    fn more_tables_than_an_access_can_name_are_refused_at_entry() {
        for outcome in run_both(MAX_TABLES) {
            assert!(outcome.is_ok(), "{outcome:?}");
        }
        for (outcome, op) in run_both(MAX_TABLES + 1)
            .into_iter()
            .zip(["async_for!", "sync_for!"])
        {
            match outcome {
                Err(Error::InvalidArgument { op: o, message }) => {
                    assert_eq!(o, op);
                    assert_eq!(
                        message,
                        format!("{op} at src/many.rs:3:5: the body captures more than 255 DDSs")
                    );
                }
                other => panic!("{op}: {other:?}"),
            }
        }
    }
}
