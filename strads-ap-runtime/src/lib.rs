//! The runtime of strads-ap: everything that runs.
//!
//! Users depend on the `strads-ap` crate, which re-exports what is public here together with
//! the `async_for!` and `sync_for!` macros. The modules follow the design
//! (`DESIGN.md` §3):
//!
//! * [`cluster`] — the job: rank, world size, worker threads, [`init`].
//! * [`dds`] — [`DVector`], [`DMap`], [`DMultiMap`], their views and data operators.
//! * [`recon`] — reconnaissance execution's access logs.
//! * [`plan`] — conflict-free schedules (rotation, components), sans-IO.
//! * [`engine`] — the serializable engine (`async_for!`) and the data-parallel engine
//!   (`sync_for!`).

mod access;
pub mod checkpoint;
pub mod cluster;
pub mod dds;
pub mod engine;
mod error;
pub mod plan;
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

pub use cluster::{finish, init, init_with, is_driver, rank, threads, world_size, Config};
pub use dds::{
    read_from_file, Aggregate, Aggregation, DMap, DMultiMap, DVector, Element, ReadOptions,
    ReadReport, Relaxed,
};
pub use engine::{loop_stats, LoopStats, Opts, SyncMode};
pub use error::{Error, Result};
