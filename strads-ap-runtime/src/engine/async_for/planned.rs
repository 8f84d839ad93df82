//! A planned run: the call's tasks in the conflict-free groups of a plan, made by
//! reconnaissance and the planner on the first call and reused by later ones.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use super::execute::{execute, lay_out_task_tables};
use super::{lone, on_one_worker, table_infos, written_slots, Loop};
use crate::access::LoopIndex;
use crate::cluster::context;
use crate::engine::cache::{kept, Cached, Keep, Made, Pending, PlanKey};
use crate::engine::pipeline::Ran;
use crate::engine::Fallback;
use crate::error::{Error, Result};
use crate::plan::{self, Plan, PlanConfig, SlotMode, TableInfo, Work};
use crate::recon::AccessLog;
use crate::sync::Mutex;

/// Runs the call by its cached plan, or plans it first (reconnaissance, then the planner).
pub(super) fn run<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let made = match take_pending(l) {
        Aside::Made(made) => Some(*made),
        Aside::Planning(modes) => return run_beside_planner(l, &modes),
        Aside::None => None,
    };
    let cached = match l.opts.recheck {
        true => None,
        false => kept().plans.take(&l.key),
    };
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let mut plan = match (made, cached) {
        (Some(made), _) => {
            let plan = announce(l, made, "a recorded run", Duration::ZERO, true);
            if !l.on_one_worker() {
                // Set-up work on the call's path (records cloned in plan order: about
                // 2.5 serial epochs for MF over string ids), counted with planning.
                let t0 = Instant::now();
                lay_out_task_tables(l, bases, &plan);
                l.call.note(|f| f.planning += t0.elapsed());
            }
            plan
        }
        (None, Some(c)) => c.plan,
        (None, None) => {
            let (log, took) = l.reconnoitre(bases)?;
            let recon = LogSource::Reconnoitred(took);
            let tables = table_infos(&l.call.registry, bases);
            let mut plan = make_plan(l, log, recon, tables, l.call.threads);
            if !l.on_one_worker() {
                lay_out_task_tables(l, bases, &plan);
            }
            plan.drop_log();
            plan
        }
    };
    let one = l.on_one_worker();
    // How late the pool's threads start this call's steps (what earlier operators left in
    // the count is dropped first).
    let pool = l.call.here.pool(l.call.threads);
    pool.take_late();
    let t0 = Instant::now();
    let outcome = match one {
        true => lone::run_in_order(l, bases, &plan.modes),
        false => {
            let steps = Work::all(&plan.schedule);
            execute(l, bases, &mut plan, &steps, None)
        }
    };
    let ran = t0.elapsed();
    let late = pool.take_late();
    let busy = l.call.note(|f| {
        f.ran = true;
        f.running += ran;
        f.replans_by_design = l.opts.recheck;
        f.groups = Some(plan.stats.groups);
        match one {
            true => {
                f.strategy = Some(on_one_worker(plan.stats.strategy));
                f.workers = Some(1);
            }
            false => f.strategy = Some(plan.stats.strategy),
        }
        f.busy
    });
    if outcome.is_ok() {
        l.paced(one, ran, busy, late, false);
    }
    drop(locked);
    let ran = Ran::new(outcome, written_slots(&plan.modes));
    Ok(match ran.outcome {
        // A body that wrote a table reconnaissance saw only read: plan again next call.
        Err(Error::AccessOutsidePlan { .. } | Error::WritesDependOnValues { .. }) => ran,
        _ => ran.keeping(Keep::Plan(
            l.key.clone(),
            Box::new(Cached { plan, dist: None }),
        )),
    })
}

/// A call whose plan is still being made on a spare thread (see [`plan_aside`]): its
/// indices in loop order on this thread, as one worker runs them, by the table modes the
/// recorded run's log gave. The first call after the plan is made runs it.
fn run_beside_planner<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    modes: &[SlotMode],
) -> Result<Ran> {
    let locked = l.call.lock()?;
    let t0 = Instant::now();
    let outcome = lone::run_in_order(l, &locked.bases, modes);
    let ran = t0.elapsed();
    if outcome.is_ok() {
        l.paced_beside_planner(ran);
    }
    l.call.note(|f| {
        f.ran = true;
        f.running += ran;
        f.awaiting_plan = true;
        f.strategy = Some("serial while planning");
        f.workers = Some(1);
        f.groups = Some(1);
    });
    drop(locked);
    if outcome.is_err() {
        // A body that wrote a table the recorded run saw only read: the plan being made
        // does not hold (it is dropped when done), and the next call plans again.
        kept().pending.remove(&l.key.site());
    }
    Ok(Ran::new(outcome, written_slots(modes)))
}

/// Where a log comes from.
pub(super) enum LogSource {
    /// Reconnaissance, which took this long.
    Reconnoitred(std::time::Duration),
    /// A recorded run, with the planner's first pass perhaps done already.
    Recorded(Option<plan::GatherAhead>),
}

/// Plans from an access log, reporting what it found (`threads`: workers over the whole
/// job).
pub(super) fn make_plan<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    log: AccessLog,
    source: LogSource,
    tables: Vec<TableInfo>,
    threads: usize,
) -> Plan {
    let n = l.n;
    let config = plan_config(l, threads);
    let (recon, ahead, source) = match source {
        LogSource::Reconnoitred(t) => (
            t,
            None,
            format!("reconnaissance of {n} tasks in {:.3} s", t.as_secs_f64()),
        ),
        LogSource::Recorded(ahead) => (
            std::time::Duration::ZERO,
            ahead,
            format!("a recorded run of {n} tasks"),
        ),
    };
    let made = l
        .call
        .here
        .pool(context().config().threads.max(1))
        .install(|| plan_and_shape(log, &tables, &config, ahead));
    announce(l, made, &source, recon, false)
}

/// The planner's settings for a loop call (`threads`: workers over the whole job).
pub(super) fn plan_config<Task, I>(l: &Loop<'_, '_, Task, I>, threads: usize) -> PlanConfig {
    PlanConfig {
        threads,
        blocks: l.opts.blocks,
        seed: l.opts.seed.unwrap_or(context().config().seed),
        first_index: l.start,
    }
}

/// A plan and its shape from a log: a pure function of its arguments, whatever thread or
/// pool it runs on (the planner's parallel passes join their parts in order).
fn plan_and_shape(
    log: AccessLog,
    tables: &[TableInfo],
    config: &PlanConfig,
    ahead: Option<plan::GatherAhead>,
) -> Made {
    let t0 = Instant::now();
    let plan = plan::plan_ahead(log, tables, config, ahead);
    let took = t0.elapsed();
    // How the plan uses the workers, and why (a pass over the log for components plans
    // and plans that leave workers idle; none for a rotation that keeps them busy).
    let shape = crate::engine::diagnose::plan_shape(&plan, tables, config.threads);
    Made { plan, shape, took }
}

/// Reports a plan made from `source` (with `recon` the reconnaissance's time, or made
/// `aside`: on a spare thread while calls went on) and notes it in the call's figures.
fn announce<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    made: Made,
    source: &str,
    recon: Duration,
    aside: bool,
) -> Plan {
    let Made { plan, shape, took } = made;
    let summary = format!(
        "{}: {source}; {} plan with {} groups in {} batches, largest {} tasks, in {:.3} s{}",
        l.call.site,
        plan.stats.strategy,
        plan.stats.groups,
        plan.stats.batches,
        plan.stats.largest_group,
        took.as_secs_f64(),
        if aside {
            " on a spare thread, while the calls before this one ran in loop order"
        } else {
            ""
        }
    );
    // Long set-up work is always worth a line: the first call of a loop is slower than the
    // rest, and a user should know why.
    let long = !aside && recon + took > Duration::from_secs(2);
    if context().config().verbose || long {
        eprintln!("strads-ap: {summary}");
    }
    tracing::debug!("{summary}");
    l.plan_made(shape.as_ref().map(|s| s.parallelism));
    l.call.note(|f| {
        f.shape = shape;
        match aside {
            true => f.planned_aside += took,
            false => {
                f.first_call = true;
                f.recon += recon;
                f.planning += took;
            }
        }
        f.strategy = Some(plan.stats.strategy);
        f.groups = Some(plan.stats.groups);
    });
    plan
}

/// Whether a recorded first call leaves its plan to be made on a spare thread (see
/// [`plan_aside`]): in a world of one, when calls may run on one worker anyway
/// ([`Fallback::Measure`]); with the other fallbacks, whose calls must not depend on
/// timings, the recorded call plans before it returns.
pub(super) fn plans_aside<Task, I>(l: &Loop<'_, '_, Task, I>) -> bool {
    l.opts.fallback == Fallback::Measure && l.call.here.world_size() == 1 && l.call.threads > 1
}

/// The one thread that makes plans aside, for every loop of the process: the driver runs
/// calls in loop order meanwhile, so one thread keeps a machine's cores busy without
/// slowing the call beside it.
fn planner() -> &'static rayon::ThreadPool {
    static PLANNER: OnceLock<rayon::ThreadPool> = OnceLock::new();
    PLANNER.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "strads-planner".to_string())
            .build()
            .expect("failed to start the planner thread")
    })
}

/// Makes the plan of a recorded first call's log on a spare thread rather than on the
/// call's path: until it is made, the calls with the same key run in loop order on one
/// worker (by the table modes the log gives), as fast as the serial loop; the first call
/// after that runs it (see [`run`]; [`crate::engine::wait_for_plans`] waits for it).
/// Planning took biased MF's first call 0.026-0.032 s beside a 0.017 s serial epoch, and
/// a PageRank of 500,000 nodes 0.18-0.26 s beside 0.07 s, on two workers. Returns the
/// table modes the log gives.
pub(super) fn plan_aside<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    key: &PlanKey,
    log: AccessLog,
    ahead: Option<plan::GatherAhead>,
    tables: Vec<TableInfo>,
    recorded: Duration,
) -> Vec<SlotMode> {
    let modes = plan::slot_modes(&log, &tables);
    let config = plan_config(l, l.call.threads);
    if context().config().verbose {
        eprintln!(
            "strads-ap: {}: a recorded run; its plan is being made on a spare thread, and \
             until it is ready calls run in loop order on one worker",
            l.call.site
        );
    }
    let (tx, made) = mpsc::channel();
    planner().spawn(move || {
        // A planner that panics drops the sender: the next call plans on its path again.
        if let Ok(made) = catch_unwind(AssertUnwindSafe(|| {
            plan_and_shape(log, &tables, &config, ahead)
        })) {
            let _ = tx.send(made);
        }
    });
    let pending = Pending {
        key: key.clone(),
        modes: modes.clone(),
        made: Mutex::new(made),
        ready: None,
        patience: recorded / RECORDED_PER_PATIENCE,
    };
    kept().pending.insert(key.site(), pending);
    modes
}

/// The first call whose plan is still being made waits for it up to the recorded run's
/// time over this, before it runs in loop order instead (later ones do not wait): about
/// half a serial call (a recorded run takes 2.5-4 serial calls), so that a plan made
/// within it is run at once (a call on two workers saves up to half a serial call), and
/// one made later costs the wait at most. The user study's sparse logistic regressions
/// (10,000 tasks) plan in 2-3 ms against a 40 ms serial call: without the wait their
/// second call ran in loop order, and their 10 epochs ran at 0.87-0.94 of the speed they
/// had with planning on the path.
const RECORDED_PER_PATIENCE: u32 = 8;

/// Where the plan a recorded first call left to a spare thread is, for this call.
enum Aside {
    /// Made: this call runs it.
    Made(Box<Made>),
    /// Still being made: this call runs in loop order by these table modes.
    Planning(Vec<SlotMode>),
    /// None for this call (one for another range or other tables serves no call now and
    /// is dropped; a planner that failed made none).
    None,
}

/// The plan a recorded first call left being made for this call, if any.
fn take_pending<Task, I>(l: &Loop<'_, '_, Task, I>) -> Aside {
    let kept = kept();
    let Some((site, mut pending)) = kept.pending.remove(&l.key.site()) else {
        return Aside::None;
    };
    if pending.key != l.key {
        return Aside::None;
    }
    if let Some(made) = pending.ready.take() {
        return Aside::Made(Box::new(made));
    }
    let t0 = Instant::now();
    let received = pending.made.lock().recv_timeout(pending.patience);
    // Waiting for the plan is set-up on the call's path.
    let waited = t0.elapsed();
    l.call.note(|f| f.planning += waited);
    match received {
        Ok(made) => Aside::Made(Box::new(made)),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let modes = pending.modes.clone();
            // Waited once: a plan this slow is not waited for again.
            pending.patience = Duration::ZERO;
            kept.pending.insert(site, pending);
            Aside::Planning(modes)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Aside::None,
    }
}
