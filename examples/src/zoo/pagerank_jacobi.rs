//! `pagerank` with the change its diagnosis asks for: Jacobi sweeps instead of
//! Gauss-Seidel. Each sweep reads the ranks of the sweep before from a copy, `old`, made
//! once before the loops and refilled before each sweep, and writes the new ranks into
//! `rank`; no task reads what another writes, so every node can be updated at once. The
//! serial program makes the same change (the `HashMap` of in-neighbours, the `Vec`s), so
//! both twins compute the same ranks: the twin's plan is serializable, and here every
//! order gives the same result.
//!
//! Jacobi needs more sweeps than Gauss-Seidel to reach the same point (the error shrinks
//! by the damping factor, 0.85, per sweep): after the default 20 sweeps the top-10 mass is
//! within a few percent of Gauss-Seidel's, and both converge to the same ranks.
//!
//! Shape, data and metric: those of [`pagerank`](super::pagerank).

use anyhow::Result;
use strads_ap::prelude::*;

use super::pagerank::{graph, top_mass, DAMPING};
use super::{serial_outcome, strads_outcome, Outcome, Run, SerialClock, StradsClock};
use crate::report::{SERIAL, STRADS};

const NAME: &str = "pagerank-jacobi";

/// The serial program.
pub fn serial(run: &Run) -> Result<Outcome> {
    let g = graph(run)?;
    let n = g.nodes;
    let (in_nbrs, out_degree) = g.adjacency();
    let mut rank: Vec<f32> = vec![1.0 / n as f32; n];
    let mut old: Vec<f32> = rank.clone();
    let (damping, teleport) = (DAMPING, (1.0 - DAMPING) / n as f32);

    let epochs = run.epochs_or(20);
    let mut clock = SerialClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        old.copy_from_slice(&rank);
        for v in 0..n {
            // zoo body begin: sweep
            let mut sum = 0.0;
            if let Some(srcs) = in_nbrs.get(&(v as u32)) {
                for &u in srcs {
                    sum += old[u as usize] / out_degree[u as usize] as f32;
                }
            }
            rank[v] = teleport + damping * sum;
            // zoo body end: sweep
        }
        let secs = clock.stop(start);
        run.progress(NAME, SERIAL, epoch, secs);
    }
    Ok(serial_outcome(
        NAME,
        epochs,
        n,
        &clock,
        "top10_rank_mass",
        top_mass(&rank, 10),
    ))
}

/// The strads-ap twin.
pub fn strads(run: &Run) -> Result<Outcome> {
    let g = graph(run)?;
    let n = g.nodes;
    let (in_nbrs, out_degree) = g.twin_tables()?;
    let rank: DVector<f32> = DVector::from_fn(n, |_| 1.0 / n as f32)?;
    let old: DVector<f32> = DVector::from_fn(n, |_| 1.0 / n as f32)?;
    let (damping, teleport) = (DAMPING, (1.0 - DAMPING) / n as f32);

    let epochs = run.epochs_or(20);
    let mut clock = StradsClock::default();
    for epoch in 1..=epochs {
        let start = clock.start();
        // The diagnosis's refill: the same table every sweep, so the plan is kept.
        rank.with_all(|now| old.transform(|i, x| *x = now[i]))??;
        async_for!(
            0..n,
            |v| {
                // zoo body begin: sweep
                let mut sum = 0.0;
                if let Some(srcs) = in_nbrs.get(&(v as u32)) {
                    for &u in srcs {
                        sum += old[u as usize] / out_degree[u as usize] as f32;
                    }
                }
                rank[v] = teleport + damping * sum;
                // zoo body end: sweep
            },
            Opts::new().threads(run.threads)
        )?;
        let secs = clock.stop(start, epoch);
        run.progress(NAME, STRADS, epoch, secs);
    }
    let rank = rank.to_vec()?;
    Ok(strads_outcome(
        NAME,
        run,
        epochs,
        n,
        &clock,
        "top10_rank_mass",
        top_mass(&rank, 10),
    ))
}
