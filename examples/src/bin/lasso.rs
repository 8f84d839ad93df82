//! Lasso by coordinate descent with strads-ap: the twin of `lasso-serial`, scheduled by
//! STRADS's dynamic scheduler.
//!
//! The serial program with `DVector` for `Vec` and `async_for!` for the coordinate `for`;
//! the loop body is unchanged. The loop's options name the schedule
//! ([`Opts::dynamic`](strads_ap::Opts::dynamic)): each round samples coordinates in
//! proportion to the square of their last change (`--order priority`, the default; or
//! `cyclic`, `uniform`), leaves out those that depend on one already taken (`--depends`:
//! STRADS's correlation test `corr:R`, rows shared `overlap:T`, or `none`), and updates the
//! rest on all workers. The residual is relaxed: coordinates of one round update it in
//! parallel and their changes are summed, STRADS's approximation for weakly dependent
//! coordinates; β is written by one coordinate each, so it stays exact.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin lasso -- --threads 2
//! cargo run --release -p strads-ap-examples --bin lasso -- --data ../shared/data/lasso/diabetes.csv
//! cargo run --release -p strads-ap-examples --bin lasso -- --compare-orders
//! strads-ap run -n 2 --threads 1 -- target/release/lasso    # across two processes
//! ```

use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use strads_ap::prelude::*;
use strads_ap::DynamicStats;
use strads_ap_examples::cli::{LassoArgs, OrderArg};
use strads_ap_examples::lasso::{
    self, max_correlation, relative_gap, soft, Column, GapChecks, LassoResult, Problem,
};
use strads_ap_examples::report::{print_json_line, print_loop_stats, progress, STRADS};

/// The converted program's tables.
struct Tables {
    x: DVector<Column>,
    norm: DVector<f64>,
    r: DVector<f64>,
    beta: DVector<f64>,
}

impl Tables {
    fn new(p: &Problem) -> Result<Self> {
        Ok(Tables {
            x: DVector::from_vec(p.cols.clone())?,
            norm: DVector::from_vec(p.norms())?,
            // Coordinates of one round update the residual in parallel; their changes add.
            r: DVector::from_vec(p.y.clone())?.relaxed(Relaxed::Sum),
            beta: DVector::from_vec(vec![0.0; p.cols.len()])?,
        })
    }

    /// (objective, relative duality gap, nonzeros) of the current β; the gap (a pass
    /// over X) only `with_gap`, infinite otherwise.
    fn measure(&self, p: &Problem, with_gap: bool) -> Result<(f64, f64, usize)> {
        let (r, beta) = (self.r.to_vec()?, self.beta.to_vec()?);
        let obj = lasso::objective(&r, &beta, p.lambda, p.l2);
        let gap = match with_gap {
            // On the driver's copy of the columns, as the serial twin does.
            true => {
                let max_corr = max_correlation(&p.cols, &r, &beta, p.l2);
                relative_gap(&p.y, &r, &beta, p.lambda, p.l2, max_corr)
            }
            false => f64::INFINITY,
        };
        Ok((obj, gap, beta.iter().filter(|b| **b != 0.0).count()))
    }
}

/// The schedule `--order`, `--depends`, `--round` and `--eta` describe, for the
/// coefficients `beta`, run by `workers` workers in all (threads times ranks).
#[allow(clippy::too_many_arguments)]
fn schedule(
    order: OrderArg,
    depends: &str,
    round: Option<usize>,
    eta: Option<f64>,
    workers: usize,
    beta: &DVector<f64>,
    cols: &[Column],
    rows: usize,
) -> Result<Dynamic> {
    let priority = match order {
        OrderArg::Cyclic => Priority::cyclic(),
        OrderArg::Uniform => Priority::uniform(),
        OrderArg::Priority => Priority::change(beta),
    };
    let depends = match depends.split_once(':') {
        None if depends == "none" => Depends::none(),
        Some(("overlap", t)) => Depends::overlap(t.parse().context("--depends overlap:T")?),
        // One worker runs each round in order: nothing to test.
        Some(_) if workers == 1 => Depends::none(),
        Some(("corr", rho)) => {
            // STRADS's test, |x_jᵀx_k| ≥ R, listed once for all pairs.
            let rho: f64 = rho.parse().context("--depends corr:R")?;
            Depends::graph(lasso::correlation_graph(cols, rows, rho))
        }
        _ => bail!("--depends {depends:?}: expected none, overlap:T or corr:R"),
    };
    let mut s = Dynamic::new(priority).depends(depends);
    if let Some(round) = round {
        s = s.round(round);
    }
    if let Some(eta) = eta {
        s = s.eta(eta);
    }
    Ok(s)
}

/// One call of the coordinate loop: `schedule`'s budget of updates.
fn call(t: &Tables, p: &Problem, threads: usize, schedule: &Dynamic) -> Result<()> {
    let Tables { x, norm, r, beta } = t;
    let (lambda, l2) = (p.lambda, p.l2);
    async_for!(
        0..x.len(),
        |j| {
            // strads-ap: body begin
            let col = &x[j];
            let nj = norm[j];
            if nj > 0.0 {
                let mut rho = 0.0;
                if col.rows.is_empty() {
                    for (i, v) in col.vals.iter().enumerate() {
                        rho += v * r[i];
                    }
                } else {
                    for (&i, v) in col.rows.iter().zip(&col.vals) {
                        rho += v * r[i as usize];
                    }
                }
                let old = beta[j];
                let new = soft(rho + nj * old, lambda) / (nj + l2);
                if new != old {
                    let d = new - old;
                    if col.rows.is_empty() {
                        for (i, v) in col.vals.iter().enumerate() {
                            r[i] -= v * d;
                        }
                    } else {
                        for (&i, v) in col.rows.iter().zip(&col.vals) {
                            r[i as usize] -= v * d;
                        }
                    }
                    beta[j] = new;
                }
            }
            // strads-ap: body end
        },
        Opts::new().threads(threads).dynamic(schedule.clone())
    )?;
    Ok(())
}

fn main() -> Result<()> {
    let args = LassoArgs::parse();
    let threads = args.common.threads();
    strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
    let p = lasso::load(
        args.common.data.as_deref(),
        args.rows,
        args.features,
        args.density,
        args.common.seed,
        args.ratio,
        args.l2,
    )?;
    if lasso::write_problem_if_asked(&p, args.write_problem.as_deref())? {
        return Ok(());
    }
    ensure!(!p.cols.is_empty(), "no features");
    eprintln!(
        "lasso [{STRADS}]: {} ({} samples, {} features, {} values), λ = {:.6}, {} order, \
         depends {}, {threads} threads",
        p.name,
        p.rows(),
        p.cols.len(),
        p.nonzeros(),
        p.lambda,
        args.order.name(),
        args.depends
    );
    if args.compare_orders {
        compare_orders(&args, &p)?;
    } else {
        solve(&args, &p, threads)?;
    }
    strads_ap::finish()?;
    Ok(())
}

/// Solves to the duality-gap target and prints the result line.
fn solve(args: &LassoArgs, p: &Problem, threads: usize) -> Result<()> {
    let t = Tables::new(p)?;
    let t0 = Instant::now();
    let s = schedule(
        args.order,
        &args.depends,
        args.round,
        args.eta,
        threads * strads_ap::world_size(),
        &t.beta,
        &p.cols,
        p.rows(),
    )?;
    // Building the dependency graph is set-up.
    let mut setup = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let mut last = (f64::INFINITY, f64::INFINITY, 0);
    let mut best = f64::INFINITY;
    let mut checks = GapChecks::new(args.tol);
    for sweep in 1..=args.max_sweeps {
        call(&t, p, threads, &s)?;
        let with_gap = checks.due(sweep) || sweep == args.max_sweeps;
        last = t.measure(p, with_gap)?;
        let (objective, gap, _) = last;
        // Coordinate descent never doubles its best objective unless parallel updates of
        // coupled coordinates feed each other (rounds too large for this problem).
        ensure!(
            objective.is_finite() && objective <= 2.0 * best,
            "the objective grew from {best:.6e} to {objective:.6e} after {sweep} calls: the \
             parallel updates of a round diverge on this problem; run with a smaller --round \
             (for example {}) or a lower --depends corr:R threshold",
            (s.stats().updates / s.stats().rounds.max(1) / 8).max(threads as u64)
        );
        best = best.min(objective);
        if !with_gap {
            continue;
        }
        progress(
            "lasso",
            STRADS,
            sweep,
            "gap",
            gap,
            t0.elapsed().as_secs_f64(),
        );
        if gap <= args.tol {
            break;
        }
        checks.measured(sweep, gap);
    }
    // The first call's reconnaissance and planning (indexing the tasks' keys for the
    // scheduler) are set-up too.
    let recon: f64 = strads_ap::loop_stats()
        .iter()
        .map(|l| (l.recon + l.planning).as_secs_f64())
        .sum();
    setup += recon;
    let secs = t0.elapsed().as_secs_f64() - recon;
    let (objective, gap, nonzeros) = last;
    let support = lasso::support(&t.beta.to_vec()?);
    print_loop_stats();
    let stats = s.stats();
    eprintln!(
        "lasso [{STRADS}]: {} rounds, {} updates, {} candidates deferred",
        stats.rounds, stats.updates, stats.deferred
    );
    let DynamicStats { updates, .. } = stats;
    print_json_line(&LassoResult {
        app: "lasso".into(),
        implementation: STRADS.into(),
        data: p.name.clone(),
        ranks: strads_ap::world_size(),
        threads,
        order: args.order.name().into(),
        lambda: p.lambda,
        l2: p.l2,
        objective,
        gap,
        nonzeros,
        support,
        updates,
        secs,
        secs_per_epoch: secs,
        setup_secs: setup,
    });
    Ok(())
}

/// Coordinate updates each order needs, on one worker, to bring the objective within
/// 1e-4 (relative) of the optimum (found first by serial cyclic descent to a gap of 1e-10).
fn compare_orders(args: &LassoArgs, p: &Problem) -> Result<()> {
    let (r, beta, _) = lasso::solve_cyclic(p, 1e-10, 100_000);
    let best = lasso::objective(&r, &beta, p.lambda, p.l2);
    let step = (p.cols.len() / 20).max(1);
    let limit = (args.max_sweeps * p.cols.len()) as u64;
    let mut counts = Vec::new();
    for order in [OrderArg::Cyclic, OrderArg::Uniform, OrderArg::Priority] {
        let t = Tables::new(p)?;
        let s = schedule(
            order,
            "none",
            args.round,
            args.eta,
            1,
            &t.beta,
            &p.cols,
            p.rows(),
        )?
        .updates(step);
        let mut updates = None;
        while s.stats().updates < limit {
            call(&t, p, 1, &s)?;
            let (obj, _, _) = t.measure(p, false)?;
            if (obj - best) / best <= 1e-4 {
                updates = Some(s.stats().updates);
                break;
            }
        }
        eprintln!(
            "lasso [{STRADS}]: {} order: {} updates to 1e-4 of the optimum",
            order.name(),
            updates.map_or("more than the budget of".to_string(), |u| u.to_string())
        );
        counts.push((order.name(), updates));
    }
    let mut line = serde_json::Map::new();
    line.insert("app".into(), "lasso-orders".into());
    line.insert("data".into(), p.name.clone().into());
    line.insert("features".into(), p.cols.len().into());
    line.insert("optimum".into(), best.into());
    for (name, n) in counts {
        line.insert(name.into(), n.map_or(serde_json::Value::Null, Into::into));
    }
    print_json_line(&line);
    Ok(())
}
