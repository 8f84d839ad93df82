//! Engines: the serializable engine behind `async_for!` and the data-parallel engine
//! behind `sync_for!`.
//!
//! Both lock the captured tables for the duration of the operator, bind them to views
//! through an [`ExecCtx`] per worker thread, and run the generated body on a rayon pool.
//! A panic inside a body (an index out of bounds, an access outside the plan, a user
//! `panic!`) is caught per group and returned as an [`Error`](crate::Error::BodyPanicked) naming the
//! call site and the loop index.

mod async_for;
mod cache;
mod captures;
mod choose;
pub mod diagnose;
pub mod dynamic;
mod machine;
mod opts;
mod pipeline;
pub(crate) mod reduce;
mod registry;
mod site;
pub(crate) mod stats;
mod sync_for;
mod workers;

pub use crate::access::{ExecCtx, Indices, LoopIndex};
pub use async_for::run_async_for;
pub use cache::{cached_plans, wait_for_plans, KEPT_PER_SITE};
pub use diagnose::{Diagnosis, Finding, HotKey};
pub use dynamic::{Depends, Dynamic, DynamicStats, Priority};
pub use opts::{Fallback, Opts, SyncMode};
pub(crate) use registry::Base;
pub use registry::Registry;
pub use site::{CallSite, LoopKind};
pub use stats::{loop_stats, CallCosts, LoopStats};
pub use sync_for::run_sync_for;
pub(crate) use workers::{body_error, FirstError, Merges};
