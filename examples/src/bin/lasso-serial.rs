//! Lasso by coordinate descent, serial: the twin of `lasso`.
//!
//! The columns of X, the residual `r = y − Xβ` and β live in `Vec`s; every sweep updates
//! each coefficient once, in index order (`--order uniform`: `features` coordinates drawn
//! at random), with glmnet's residual update, and stops at a relative duality gap of
//! `--tol` (measured after the sweeps `GapChecks` picks). The `lasso` binary is the same
//! program converted to strads-ap, with the same `BODY` (a test checks it), run by
//! STRADS's dynamic scheduler.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin lasso-serial
//! cargo run --release -p strads-ap-examples --bin lasso-serial -- --data ../shared/data/lasso/diabetes.csv
//! ```

use std::time::Instant;

use anyhow::{ensure, Result};
use clap::Parser;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strads_ap_examples::cli::{LassoArgs, OrderArg};
use strads_ap_examples::lasso::{
    self, max_correlation, relative_gap, soft, Column, GapChecks, LassoResult,
};
use strads_ap_examples::report::{print_json_line, progress, SERIAL};

fn main() -> Result<()> {
    let args = LassoArgs::parse();
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
    let order = match args.order {
        OrderArg::Priority => OrderArg::Cyclic,
        o => o,
    };
    eprintln!(
        "lasso [{SERIAL}]: {} ({} samples, {} features, {} values), λ = {:.6}, {} order",
        p.name,
        p.rows(),
        p.cols.len(),
        p.nonzeros(),
        p.lambda,
        order.name()
    );
    let (lambda, l2) = (p.lambda, p.l2);
    let x: Vec<Column> = p.cols.clone();
    let norm: Vec<f64> = p.norms();
    let mut r: Vec<f64> = p.y.clone();
    let mut beta: Vec<f64> = vec![0.0; x.len()];
    let mut rng = ChaCha8Rng::seed_from_u64(args.common.seed);

    let t0 = Instant::now();
    let (mut updates, mut gap) = (0u64, f64::INFINITY);
    let mut checks = GapChecks::new(args.tol);
    for sweep in 1..=args.max_sweeps {
        let visits: Vec<usize> = match order {
            OrderArg::Uniform => (0..x.len()).map(|_| rng.gen_range(0..x.len())).collect(),
            _ => (0..x.len()).collect(),
        };
        for &j in &visits {
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
        }
        updates += visits.len() as u64;
        if !checks.due(sweep) && sweep < args.max_sweeps {
            continue;
        }
        let max_corr = max_correlation(&x, &r, &beta, l2);
        gap = relative_gap(&p.y, &r, &beta, lambda, l2, max_corr);
        progress(
            "lasso",
            SERIAL,
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
    let secs = t0.elapsed().as_secs_f64();
    print_json_line(&LassoResult {
        app: "lasso".into(),
        implementation: SERIAL.into(),
        data: p.name.clone(),
        ranks: 1,
        threads: 1,
        order: order.name().into(),
        lambda,
        l2,
        objective: lasso::objective(&r, &beta, lambda, l2),
        gap,
        nonzeros: beta.iter().filter(|b| **b != 0.0).count(),
        support: lasso::support(&beta),
        updates,
        secs,
        secs_per_epoch: secs,
        setup_secs: 0.0,
    });
    Ok(())
}
