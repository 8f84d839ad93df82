//! # strads-ap
//!
//! Turn a serial ML training loop into one that runs on every core of a machine (and, with
//! the cluster runtime, on many machines) by swapping `Vec` for [`DVector`] and `for` for
//! [`async_for!`] or [`sync_for!`]. The loop body stays the serial body, unchanged, and the
//! statistical progress per epoch stays that of the serial program.
//!
//! ```
//! use strads_ap::prelude::*;
//!
//! fn main() -> strads_ap::Result<()> {
//!     strads_ap::init()?;
//!     // Serial: let pairs: Vec<(usize, usize)> = ...; let mut x: Vec<f64> = vec![1.0; 100];
//!     let pairs = DVector::from_fn(1000, |k| ((k * 7) % 100, (k * 13 + 1) % 100))?;
//!     let x = DVector::from_fn(100, |_| 1.0f64)?;
//!     let rate = 0.5;
//!     for _epoch in 0..3 {
//!         // Serial: for k in 0..pairs.len() { ...same body... }
//!         async_for!(0..pairs.len(), |k| {
//!             let (i, j) = pairs[k];
//!             if i != j {
//!                 let mean = (x[i] + x[j]) / 2.0;
//!                 x[i] += rate * (mean - x[i]);
//!                 x[j] += rate * (mean - x[j]);
//!             }
//!         })?;
//!     }
//!     // Averaging pairs conserves the total: every serial order gives 100.
//!     let total = x.reduce(|a, b| a + b)?;
//!     assert!((total - 100.0).abs() < 1e-9);
//!     Ok(())
//! }
//! ```
//!
//! ## The model in four points
//!
//! * **DDSs** ([`DVector`], [`DMap`], [`DMultiMap`]) hold data and parameters. Outside loops
//!   use explicit calls (`get`, `set`, `to_vec`) and data operators ([`read_from_file`],
//!   [`DVector::from_fn`], [`DVector::map`], [`DVector::reduce`], [`DVector::transform`],
//!   [`DVector::filter`], [`DVector::join`], [`DVector::save`]); inside loop bodies index
//!   them like `Vec`s and `HashMap`s.
//! * **`async_for!(range, |k| body)`** runs the body once per index, *serializably*: the
//!   result equals the result of running the indices one by one in some order. On its
//!   first call it runs the body in a recording mode (*reconnaissance execution*) to learn
//!   what each index reads and writes, plans groups of indices that share nothing, caches
//!   the plan, and runs the groups in parallel without locks.
//! * **`sync_for!(data, minibatch, mode, |batch| body)`** runs the body once per mini-batch
//!   of `data`, data-parallel: workers update their own copies of the parameters and the
//!   copies are merged ([`SyncMode::Bsp`] or [`SyncMode::Hybrid`]).
//! * **Captured plain values** (hyper-parameters) are copied into every worker; assigning
//!   to them inside a body is a compile error, because the change would be lost.
//!
//! The `docs/` folder of the repository has the conversion tutorial and the architecture.

pub mod metric;

pub use metric::{check_finite, NonFiniteMetric};
/// The serde crate strads-ap uses, for element types' derives without a `serde` line in
/// your `Cargo.toml`: `#[derive(strads_ap::serde::Serialize, strads_ap::serde::Deserialize)]`
/// with `#[serde(crate = "strads_ap::serde")]`.
pub use serde;
pub use strads_ap_macros::{async_for, sync_for};
/// Line parsers and readers for common formats (CSV/TSV, libsvm, MatrixMarket), on top of
/// [`ReadOptions`]: sharded across ranks, gzip-aware, errors naming file and line.
pub use strads_ap_runtime::formats;
pub use strads_ap_runtime::{
    checkpoint, cluster, dds::set_fetch_above, dds::set_gather_limit, dds::table_memory,
    dds::TableMemory, finish, init, init_with, is_driver, loop_stats, rank, read_from_file,
    threads, wait_for_plans, world_size, Aggregate, Aggregation, Array, CallCosts, Config, DMap,
    DMultiMap, DVector, Depends, Diagnosis, Dynamic, DynamicStats, Element, Error, Fallback,
    Finding, HotKey, LoopStats, MapEntries, Opts, Priority, ReadOptions, ReadReport, Relaxed,
    Result, SyncMode, VectorElements, MAX_THREADS,
};

/// What a loop body may not do with a captured `DMap` (add or remove keys), refused at
/// compile time with an error that says what to do instead.
pub use strads_ap_runtime::dds::body;

/// Views and planner internals, for the curious and for tools.
pub mod internals {
    pub use strads_ap_runtime::dds::{MapView, MultiMapView, RecordVectorView, VectorView};
    pub use strads_ap_runtime::engine::{cached_plans, KEPT_PER_SITE};
    pub use strads_ap_runtime::plan;
    pub use strads_ap_runtime::recon;
    pub use strads_ap_runtime::transport;
    pub use strads_ap_runtime::wire;
}

/// Everything a converted program needs: `use strads_ap::prelude::*;`.
pub mod prelude {
    pub use crate::{
        async_for, read_from_file, sync_for, Aggregate, Aggregation, Array, DMap, DMultiMap,
        DVector, Depends, Dynamic, Fallback, Opts, Priority, ReadOptions, Relaxed, SyncMode,
    };
}

#[doc(hidden)]
pub mod __private {
    pub use strads_ap_runtime::__private::*;
}

/// The crate README's code blocks, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust code blocks of `docs/`, compiled and run as doc-tests (`tests/docs.rs` checks
/// that every file of `docs/` with Rust blocks is here).
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../../docs/guide.md")]
    pub struct Guide;
    #[doc = include_str!("../../docs/tutorial.md")]
    pub struct Tutorial;
    #[doc = include_str!("../../docs/manual.md")]
    pub struct Manual;
}
