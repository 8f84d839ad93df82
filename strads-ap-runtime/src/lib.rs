//! The runtime of strads-ap: everything that runs.
//!
//! Users depend on the `strads-ap` crate, which re-exports what is public here together with
//! the `async_for!` and `sync_for!` macros. The modules follow the design
//! (`DESIGN.md` §3):
//!
//! * [`cluster`] — the job: rank, world size, worker threads. [`init`] joins it (and
//!   turns checkpoints on), [`finish`] leaves it.
//! * [`dds`] — [`DVector`], [`DMap`], [`DMultiMap`], their views and data operators.
//! * [`recon`] — reconnaissance execution's access logs.
//! * [`plan`] — conflict-free schedules (rotation, components), sans-IO.
//! * [`engine`] — the serializable engine (`async_for!`) and the data-parallel engine
//!   (`sync_for!`).
//! * [`checkpoint`] — checkpoints after loop calls, and recovery by fast re-execution.
//! * [`formats`] — readers of CSV/TSV, libsvm and MatrixMarket files, as line parsers
//!   for [`ReadOptions`].

mod access;
pub mod checkpoint;
mod checkpoint_config;
pub mod cluster;
pub mod dds;
pub mod engine;
mod error;
pub mod formats;
#[cfg(test)]
mod fuzz;
mod job;
pub mod plan;
mod progress;
pub mod rank;
pub mod recon;
pub mod store;
mod sync;
pub mod transport;
mod util;
mod value;
pub mod wire;

#[doc(hidden)]
pub mod __private;

pub use cluster::{is_driver, rank, threads, world_size, Config};
pub use dds::{
    read_from_file, Aggregate, Aggregation, DMap, DMultiMap, DVector, Element, MapEntries,
    ReadOptions, ReadReport, Relaxed, VectorElements,
};
pub use engine::{
    loop_stats, wait_for_plans, CallCosts, Depends, Diagnosis, Dynamic, DynamicStats, Fallback,
    Finding, HotKey, LoopStats, Opts, Priority, SyncMode,
};
pub use error::{Error, Result};
pub use job::{finish, init, init_with, MAX_THREADS};
pub use value::Array;
