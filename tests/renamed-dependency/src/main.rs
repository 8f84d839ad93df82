//! `async_for!` and `sync_for!` through a renamed dependency, compared with serial loops.

use sap::prelude::*;
use sap::serde::{Deserialize, Serialize};

/// An element type derived through strads-ap's re-export of serde.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(crate = "sap::serde")]
struct Pair {
    left: usize,
    right: usize,
}

fn pairs(n: usize, m: usize) -> Vec<Pair> {
    (0..n)
        .map(|k| Pair {
            left: (k * 7) % m,
            right: (k * 13 + 1) % m,
        })
        .collect()
}

fn main() -> sap::Result<()> {
    sap::init()?;
    let (n, m, rate) = (2000, 100, 0.5);

    // Serial: average the two ends of every pair, in order.
    let mut serial = vec![1.0f64; m];
    for p in pairs(n, m) {
        if p.left != p.right {
            let mean = (serial[p.left] + serial[p.right]) / 2.0;
            serial[p.left] += rate * (mean - serial[p.left]);
            serial[p.right] += rate * (mean - serial[p.right]);
        }
    }

    // strads-ap, one worker: the serial order, so the same values to the last bit.
    let data = DVector::from_vec(pairs(n, m))?;
    let x = DVector::from_fn(m, |_| 1.0f64)?;
    let mut moved = 0usize;
    async_for!(
        0..data.len(),
        |k| {
            let p = &data[k];
            if p.left != p.right {
                let mean = (x[p.left] + x[p.right]) / 2.0;
                x[p.left] += rate * (mean - x[p.left]);
                x[p.right] += rate * (mean - x[p.right]);
                moved += 1;
            }
        },
        Opts::new().threads(1)
    )?;
    assert_eq!(
        x.to_vec()?,
        serial,
        "async_for! differs from the serial loop"
    );
    assert_eq!(
        moved,
        pairs(n, m).iter().filter(|p| p.left != p.right).count()
    );

    // sync_for!: count each pair's ends into a table whose workers' updates are summed (a
    // sum of whole numbers is exact in any order).
    let counts = DVector::from_fn(m, |_| 0.0f64)?.aggregate_with(Aggregation::Sum);
    sync_for!(data, 100, SyncMode::Bsp, |batch| {
        for p in batch {
            counts[p.left] += 1.0;
            counts[p.right] += 1.0;
        }
    })?;
    let mut expected = vec![0.0f64; m];
    for p in pairs(n, m) {
        expected[p.left] += 1.0;
        expected[p.right] += 1.0;
    }
    assert_eq!(
        counts.to_vec()?,
        expected,
        "sync_for! differs from the serial loop"
    );
    println!("renamed dependency: async_for! and sync_for! match the serial loops");
    Ok(())
}
