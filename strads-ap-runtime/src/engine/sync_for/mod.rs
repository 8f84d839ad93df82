//! The data-parallel engine behind `sync_for!`: each call enters the pipeline
//! ([`super::pipeline`]), is made ready here (tables spread across ranks and locked,
//! mini-batches cut, replicas decided), runs by one strategy
//! ([`super::choose::sync_strategy`]), one file each, and finishes.
//!
//! | strategy | file | across ranks |
//! |---|---|---|
//! | one worker | `serial.rs` | synchronised per mini-batch (BSP) or window (Hybrid) |
//! | Hybrid | `hybrid.rs` (with `keys.rs`) | synchronised per window |
//! | BSP | `bsp.rs` | synchronised per round |
//!
//! Across ranks (`cross.rs`), each rank runs the mini-batches of its part of the data.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::cache::{kept, Keep, TablesKey};
use super::choose::{sync_strategy, SyncCall, SyncStrategy};
use super::pipeline::{self, Call, Ran};
use super::{body_error, Base, CallSite, FirstError, Merges, Opts, Registry, SyncMode};
use crate::access::{Binding, ExecCtx};
use crate::cluster::collective::Comm;
use crate::cluster::Pool;
use crate::dds::table::{Replica, TableHandle};
use crate::dds::{DVector, Element};
use crate::error::{Error, Result};
use crate::recon::{AccessLog, Ended, LogRoom, Recorder, MAX_TABLES};
use crate::sync::RwLock;

mod bsp;
mod cross;
mod hybrid;
mod keys;
mod serial;

use cross::{CrossRank, RestoreRanges};
use keys::KeyLocks;

/// Runs a `sync_for!` loop: `run` once per mini-batch of `data`.
///
/// Called by generated code; see the `sync_for!` macro for the user-facing contract.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn run_sync_for<Task: Sync + serde::Serialize + serde::de::DeserializeOwned, D: Element>(
    site: &'static CallSite,
    data: &DVector<D>,
    minibatch: usize,
    mode: SyncMode,
    task: &Task,
    opts: Opts,
    register: fn(&Task, &mut Registry),
    run: fn(&Task, &ExecCtx, &[D]),
    record: fn(&Task, &Recorder, &[D]),
    direct: fn(&Task, &ExecCtx, &[D]),
) -> Result<()> {
    if minibatch == 0 {
        return Err(Error::invalid(
            "sync_for!",
            format!("{site}: the mini-batch size must be at least 1"),
        ));
    }
    let Some(call) = pipeline::enter(site, task, &opts, register, MAX_TABLES)? else {
        return Ok(());
    };
    let strategy = sync_strategy(SyncCall {
        world: call.here.world_size(),
        threads: call.threads,
        mode,
    });
    let body = Body {
        data,
        minibatch,
        mode,
        opts: &opts,
        run,
        record,
        direct,
    };
    let _bar = crate::progress::for_call(
        site,
        Some(data.len()),
        (call.here.rank(), call.here.world_size()),
        opts.progress,
    );
    let ran = run_call(&call, &body, strategy);
    pipeline::finish(call, ran)
}

/// What a `sync_for!` call runs.
struct Body<'b, Task, D: Element> {
    data: &'b DVector<D>,
    minibatch: usize,
    mode: SyncMode,
    opts: &'b Opts,
    run: fn(&Task, &ExecCtx, &[D]),
    record: fn(&Task, &Recorder, &[D]),
    /// The body over direct views, for a lone worker.
    direct: fn(&Task, &ExecCtx, &[D]),
}

/// Makes the call ready, runs it by `strategy`, and says what it wrote.
fn run_call<Task: Sync, D: Element>(
    call: &Call<'_, Task>,
    body: &Body<'_, Task, D>,
    strategy: SyncStrategy,
) -> Result<Ran> {
    let data = body.data;
    let data_captured = call
        .registry
        .entries
        .iter()
        .any(|e| e.table.id() == data.id());
    let comm = call.comm()?;
    // Every rank holds every other captured table whole until the call ends.
    let _restore = match comm {
        Some(comm) => Some(spread(call, data.id(), data_captured, comm)?),
        None => None,
    };
    let locked = call.lock()?;
    let mut data_lock = match data_captured {
        true => None,
        false => Some(data.table.lock("sync_for!")?),
    };
    let (ptr, len) = match &mut data_lock {
        Some(l) => (l.ptr(), l.len()),
        None => {
            let b = locked
                .bases
                .iter()
                .find(|b| b.id == data.id())
                .expect("captured");
            (b.ptr, b.len)
        }
    };
    // SAFETY: the table is locked by this engine for the whole call. Bodies only read
    // the mini-batch slices; if the body also captures the data table, it is bound
    // read-only below, so nothing writes these elements while the slice lives.
    let items: &[D] = unsafe { std::slice::from_raw_parts(ptr as *const D, len) };
    let (m, re_key) = Minibatches::new(call, body, &locked.bases, items)?;
    let t0 = Instant::now();
    let mut cross = comm.map(|comm| CrossRank::new(comm, &call.registry, m.bases, data.id()));
    let merged = match strategy {
        SyncStrategy::Serial { .. } => {
            serial::run(&m, cross.as_mut(), comm, body.mode).map(|_| None)?
        }
        SyncStrategy::Hybrid { .. } => {
            let merged = hybrid::run(&m, cross.as_mut(), comm)?;
            m.learn_density(&call.here);
            Some(merged)
        }
        SyncStrategy::Bsp { .. } => bsp::run(&m, cross.as_mut(), comm).map(|_| None)?,
    };
    call.note(|f| {
        f.merged = merged;
        f.ran = true;
        f.running += t0.elapsed();
        f.merging += m.merges.spent();
        f.workers = Some(m.threads);
        f.strategy = Some(match body.mode {
            SyncMode::Bsp => "bsp",
            SyncMode::Hybrid => "hybrid",
        });
        f.groups = Some(m.batches.len());
    });
    let written = m.template.iter().map(|b| b.writable).collect();
    let outcome = m.errors.into_result();
    drop(locked);
    drop(data_lock);
    let ran = Ran::new(outcome, written);
    // Every rank holds its own range again (`_restore`) before a checkpoint is taken.
    Ok(match ran.outcome {
        Err(Error::AccessOutsidePlan { .. }) => ran.keeping(Keep::ForgetSyncLog(re_key)),
        _ => ran,
    })
}

/// Across ranks: every captured table but the data becomes whole on every rank until the
/// call ends (the returned guard gives each rank back its own range).
fn spread<'c, Task>(
    call: &'c Call<'_, Task>,
    data: u64,
    data_captured: bool,
    comm: &Comm,
) -> Result<RestoreRanges<'c>> {
    if data_captured {
        return Err(Error::invalid(
            "sync_for!",
            format!(
                "{}: in a job of several ranks the body cannot capture the input DVector yet",
                call.site
            ),
        ));
    }
    let others: Vec<&dyn TableHandle> = call
        .registry
        .entries
        .iter()
        .map(|e| &*e.table)
        .filter(|t| t.id() != data)
        .collect();
    let restore = RestoreRanges(others.clone());
    for t in others {
        t.gather_all("sync_for!", comm)?;
    }
    Ok(restore)
}

/// A `sync_for!` call made ready: its mini-batches, its tables' bindings and replicas,
/// and what its workers share.
struct Minibatches<'m, Task, D> {
    site: &'static CallSite,
    task: &'m Task,
    run: fn(&Task, &ExecCtx, &[D]),
    direct: fn(&Task, &ExecCtx, &[D]),
    registry: &'m Registry,
    bases: &'m [Base],
    batches: Vec<&'m [D]>,
    /// The data index of the first item (this rank's range start).
    first_item: usize,
    minibatch: usize,
    threads: usize,
    pool: Arc<Pool>,
    /// Per slot: the binding every worker starts from.
    template: Vec<Binding>,
    /// Per slot: workers write a replica of the table, merged into it.
    replicate: Vec<bool>,
    /// Hybrid with reconnaissance: workers refresh and push only the keys each
    /// mini-batch touches, and views refuse any other key.
    sparse: Option<Arc<AccessLog>>,
    errors: FirstError,
    /// Per replicated table, the keys pushed into its master so far in the current Hybrid
    /// window (workers refresh just those from the master), and the time spent merging.
    merges: Merges<Vec<Vec<usize>>>,
    /// Hybrid workers merge each element under its own lock (`key_locks`) and hold
    /// `masters` shared meanwhile; making a replica reads the whole master and holds it
    /// exclusively.
    masters: RwLock<()>,
    key_locks: Vec<KeyLocks>,
    /// Whether one worker in a world of one runs every mini-batch, in order.
    chain: bool,
    /// Per slot: Hybrid workers push the table whole, its mini-batches having written
    /// it densely at this call site's last call (see [`Dense`]).
    dense: Vec<bool>,
    /// Per slot: keys Hybrid workers pushed by their noted writes, and pushes.
    pushed: Vec<(AtomicU64, AtomicU64)>,
}

/// Per rank, the (call site, slot) pairs whose Hybrid mini-batches wrote their table
/// densely (a quarter of its elements or more per push, on average). The site's next
/// call pushes that table whole (see `Tracked::bulk`), as a small table is: no view notes
/// a key, and one pass under the table's lock merges it. A new user's MLP kept its
/// layers as flat `DVector<f32>`s (1,280 weights in the largest), every one written by
/// every mini-batch, and merged each under its own lock: 0.58x serial on two workers.
/// Keyed by slot, not by table, so that it stays as small as the program's loops (a
/// table made afresh for each call takes its slot's rule).
#[derive(Default)]
struct Dense(dashmap::DashSet<(usize, usize)>);

/// The share of a table's elements a push writes on average, from which it is dense.
const DENSE_SHARE: u64 = 4;

impl<'m, Task: Sync, D: Element> Minibatches<'m, Task, D> {
    /// Cuts `items` into mini-batches and decides, per table, how workers bind it; returns
    /// the key of the call's reconnaissance log too.
    fn new(
        call: &'m Call<'_, Task>,
        body: &Body<'_, Task, D>,
        bases: &'m [Base],
        items: &'m [D],
    ) -> Result<(Self, TablesKey)> {
        let (registry, threads) = (&call.registry, call.threads);
        let batches: Vec<&[D]> = items.chunks(body.minibatch).collect();
        let re_key = (
            call.site as *const CallSite as usize,
            bases.iter().map(|b| (b.id, b.shape)).collect::<Vec<_>>(),
            items.len(),
            body.minibatch,
        );
        let re_log = match body.opts.re && !call.here.is_distributed() {
            true => Some(sync_log(call, body, bases, &batches, &re_key)?),
            false => None,
        };
        let written: Option<Vec<bool>> = re_log.as_ref().map(|log| {
            let mut written = vec![false; bases.len()];
            for t in 0..log.tasks() {
                for a in log.task(t) {
                    written[a.slot()] |= a.write();
                }
            }
            written
        });
        let data = body.data.id();
        // Which tables get per-worker replicas: aggregatable ones the body may write.
        let replicate: Vec<bool> = registry
            .entries
            .iter()
            .enumerate()
            .map(|(slot, e)| {
                e.merger.is_some()
                    && e.table.id() != data
                    && written.as_ref().is_none_or(|w| w[slot])
                    && threads > 1
            })
            .collect();
        let template = bindings(registry, bases, &replicate, data, threads);
        let key_locks = (0..bases.len())
            .filter(|&slot| replicate[slot] && body.mode == SyncMode::Hybrid)
            .map(|slot| KeyLocks::new(bases[slot].len))
            .collect();
        let sparse = re_log.filter(|_| body.mode == SyncMode::Hybrid && threads > 1);
        let m = Minibatches {
            site: call.site,
            task: call.task(),
            run: body.run,
            direct: body.direct,
            registry,
            bases,
            batches,
            first_item: body.data.table.offset,
            minibatch: body.minibatch,
            threads,
            pool: call.here.pool(threads),
            template,
            replicate,
            sparse,
            errors: FirstError::new(),
            merges: Merges::new(Vec::new()),
            masters: RwLock::new(()),
            key_locks,
            chain: threads == 1 && !call.here.is_distributed(),
            dense: {
                let dense = call.here.local::<Dense>();
                let site = call.site as *const CallSite as usize;
                (0..bases.len())
                    .map(|slot| dense.0.contains(&(site, slot)))
                    .collect()
            },
            pushed: (0..bases.len())
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        };
        Ok((m, re_key))
    }

    /// Notes, for this call site's next call, which tables its workers wrote densely:
    /// tables pushed by noted keys whose pushes wrote a quarter of their elements or more.
    /// A table pushed whole for that stays so at the site: a whole push notes no keys, so
    /// a site whose mini-batches later write it sparsely keeps pushing it whole.
    fn learn_density(&self, here: &crate::cluster::RankCtx) {
        let dense = here.local::<Dense>();
        let site = self.site as *const CallSite as usize;
        for (slot, (keys, pushes)) in self.pushed.iter().enumerate() {
            let (keys, pushes) = (keys.load(Ordering::Relaxed), pushes.load(Ordering::Relaxed));
            if pushes == 0 || self.dense[slot] {
                continue;
            }
            match keys * DENSE_SHARE >= pushes * self.bases[slot].len as u64 {
                true => dense.0.insert((site, slot)),
                false => dense.0.remove(&(site, slot)).is_some(),
            };
        }
    }

    /// The data index of mini-batch `b`'s first item.
    fn batch_start(&self, b: usize) -> usize {
        self.first_item + b * self.minibatch
    }

    /// A worker's context, with replicas of the replicated tables made from their masters.
    fn new_worker(&self) -> (ExecCtx, Vec<(usize, Replica)>) {
        let mut bindings = self.template.clone();
        let mut replicas = Vec::new();
        let _alone = self.masters.write();
        for (slot, b) in bindings.iter_mut().enumerate() {
            if self.replicate[slot] {
                let merger = self.registry.entries[slot].merger.as_ref().expect("merger");
                // SAFETY: the master is locked by this engine; no merge runs while we hold
                // `masters` exclusively (merges hold it shared).
                let r = unsafe { merger.replica(b.ptr, b.len) };
                b.ptr = r.ptr();
                replicas.push((slot, r));
            }
        }
        (ExecCtx::new(bindings), replicas)
    }

    /// Runs mini-batch `b` in `ctx`; a failure is kept in `errors`.
    fn run_batch(&self, ctx: &ExecCtx, b: usize) {
        self.run_batch_by(self.run, ctx, b)
    }

    /// The body a worker runs in `ctx`: over direct views when every table is bound
    /// plainly (no replica's dirty note, no tags), else over checked views.
    fn body_for(&self, ctx: &ExecCtx) -> fn(&Task, &ExecCtx, &[D]) {
        match ctx.bindings.iter().all(Binding::is_direct) {
            true => self.direct,
            false => self.run,
        }
    }

    /// Runs mini-batch `b` in `ctx` by `body` (checked or direct); a failure is kept in
    /// `errors`.
    fn run_batch_by(&self, body: fn(&Task, &ExecCtx, &[D]), ctx: &ExecCtx, b: usize) {
        ctx.current.set(self.batch_start(b));
        // Reductions: a lone worker in a world of one runs the mini-batches in order, as
        // one chain; otherwise each mini-batch keeps its partial under its first item.
        let unit = match self.chain {
            true => crate::engine::reduce::SERIAL_UNIT,
            false => 1 + self.batch_start(b) as u64,
        };
        ctx.unit.set(unit);
        ctx.count(self.batches[b].len());
        let outcome = catch_unwind(AssertUnwindSafe(|| body(self.task, ctx, self.batches[b])));
        if let Err(payload) = outcome {
            self.errors
                .set(body_error(self.site, self.batch_start(b), payload));
        }
    }
}

/// The bindings workers start from: replicated tables (and, with one worker, aggregatable
/// ones) writable, the others read-only with the reason.
fn bindings(
    registry: &Registry,
    bases: &[Base],
    replicate: &[bool],
    data: u64,
    threads: usize,
) -> Vec<Binding> {
    registry
        .entries
        .iter()
        .zip(bases)
        .enumerate()
        .map(|(slot, (e, base))| {
            let direct_write = threads == 1 && e.merger.is_some() && e.table.id() != data;
            Binding {
                writable: replicate[slot] || direct_write,
                read_only_reason: read_only_reason(
                    &*e.table,
                    e.table.id() == data,
                    e.merger.is_some(),
                ),
                ..base.binding()
            }
        })
        .collect()
}

/// The call's reconnaissance log (one task per mini-batch), kept per call site and
/// tables: made on the first call (and on every call of a re-checked loop).
fn sync_log<Task, D: Element>(
    call: &Call<'_, Task>,
    body: &Body<'_, Task, D>,
    bases: &[Base],
    batches: &[&[D]],
    key: &TablesKey,
) -> Result<Arc<AccessLog>> {
    let kept = kept();
    if !body.opts.recheck {
        if let Some(log) = kept.sync_logs.get(key) {
            return Ok(log.clone());
        }
    }
    let t0 = Instant::now();
    let (site, task) = (call.site, call.task());
    let log = Arc::new(reconnoitre(
        site,
        task,
        body.record,
        bases,
        batches,
        body.minibatch,
    )?);
    call.note(|f| f.recon += t0.elapsed());
    kept.sync_logs.insert(key.clone(), log.clone());
    Ok(log)
}

fn read_only_reason(table: &dyn TableHandle, is_data: bool, aggregatable: bool) -> &'static str {
    if is_data {
        "it is the input of this sync_for!, which is read-only"
    } else if table.is_map() && !aggregatable {
        "its value type does not implement Aggregate, so sync_for! cannot merge workers' updates of the map's values"
    } else if !aggregatable {
        "its element type does not implement Aggregate, so sync_for! cannot merge workers' updates of it"
    } else {
        "reconnaissance saw no mini-batch write this table"
    }
}

/// Reconnaissance over every mini-batch; one task per mini-batch.
fn reconnoitre<Task, D>(
    site: &CallSite,
    task: &Task,
    record: fn(&Task, &Recorder, &[D]),
    bases: &[Base],
    batches: &[&[D]],
    minibatch: usize,
) -> Result<AccessLog> {
    // Mini-batches log an unknown number of accesses: the log grows as needed.
    let rec = Recorder::new(
        bases.iter().map(Base::recorded).collect(),
        LogRoom::new(0, 0),
    );
    for (i, batch) in batches.iter().enumerate() {
        // A mini-batch that logs more than its room holds runs again, with more room.
        loop {
            rec.start_task(i * minibatch);
            let outcome = catch_unwind(AssertUnwindSafe(|| record(task, &rec, batch)));
            if let Err(payload) = outcome {
                return Err(body_error(site, i * minibatch, payload));
            }
            if rec.end_task() == Ended::Logged {
                break;
            }
        }
    }
    Ok(rec.into_log())
}
