//! A planned run: the call's tasks in the conflict-free groups of a plan, made by
//! reconnaissance and the planner on the first call and reused by later ones.

use std::time::Instant;

use super::execute::{execute, lay_out_task_tables};
use super::{lone, on_one_worker, table_infos, written_slots, Loop};
use crate::access::LoopIndex;
use crate::cluster::context;
use crate::engine::cache::{kept, Cached, Keep};
use crate::engine::pipeline::Ran;
use crate::error::{Error, Result};
use crate::plan::{self, Plan, PlanConfig, TableInfo, Work};
use crate::recon::AccessLog;

/// Runs the call by its cached plan, or plans it first (reconnaissance, then the planner).
pub(super) fn run<Task: Sync, I: LoopIndex>(l: &Loop<'_, '_, Task, I>) -> Result<Ran> {
    let cached = match l.opts.recheck {
        true => None,
        false => kept().plans.take(&l.key),
    };
    let locked = l.call.lock()?;
    let bases = &locked.bases;
    let mut plan = match cached {
        Some(c) => c.plan,
        None => {
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
        if one {
            f.strategy = Some(on_one_worker(plan.stats.strategy));
            f.workers = Some(1);
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
    let (site, opts, start, n) = (l.call.site, l.opts, l.start, l.n);
    let ctx = context();
    let t1 = Instant::now();
    let config = PlanConfig {
        threads,
        blocks: opts.blocks,
        seed: opts.seed.unwrap_or(ctx.config().seed),
        first_index: start,
    };
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
    let plan = l
        .call
        .here
        .pool(ctx.config().threads.max(1))
        .install(|| plan::plan_ahead(log, &tables, &config, ahead));
    let t2 = Instant::now();
    let summary = format!(
        "{site}: {source}; {} plan with {} groups in {} batches, largest {} tasks, in {:.3} s",
        plan.stats.strategy,
        plan.stats.groups,
        plan.stats.batches,
        plan.stats.largest_group,
        (t2 - t1).as_secs_f64()
    );
    // Long set-up work is always worth a line: the first call of a loop is slower than the
    // rest, and a user should know why.
    if ctx.config().verbose || recon + (t2 - t1) > std::time::Duration::from_secs(2) {
        eprintln!("strads-ap: {summary}");
    }
    tracing::debug!("{summary}");
    // How the plan uses the workers, and why (a pass over the log for components plans
    // and plans that leave workers idle; none for a rotation that keeps them busy).
    let shape = l
        .call
        .here
        .pool(ctx.config().threads.max(1))
        .install(|| crate::engine::diagnose::plan_shape(&plan, &tables, threads));
    l.plan_made(shape.as_ref().map(|s| s.parallelism));
    l.call.note(|f| {
        f.first_call = true;
        f.shape = shape;
        f.recon += recon;
        f.planning += t2 - t1;
        f.strategy = Some(plan.stats.strategy);
        f.groups = Some(plan.stats.groups);
    });
    plan
}
