//! Starting and ending a job: [`init`], [`init_with`] and [`finish`] (re-exported at the
//! crate root).
//!
//! They orchestrate the layers below, which know nothing of each other: the cluster
//! (this process's rank, world and connections, [`crate::cluster`]) and the checkpoints
//! ([`crate::checkpoint`]).

use crate::checkpoint;
use crate::cluster::{self, Config};
use crate::error::{Error, Result};

pub use crate::cluster::MAX_THREADS;

/// Joins the job the launcher described, or starts a world of one using all cores.
///
/// In a job of several processes this connects to the other ranks (see
/// [`crate::transport::quic`]) and returns once all have joined, or fails with a clear error
/// at the start-up deadline. Calling it again with the same configuration is harmless;
/// operators call it themselves if the program did not (in a world of one).
///
/// # Examples
/// ```
/// strads_ap_runtime::init().unwrap();
/// assert!(strads_ap_runtime::is_driver());
/// ```
pub fn init() -> Result<()> {
    let config = Config::from_env()?;
    init_with(config)
}

/// Starts the runtime with an explicit configuration (tests, embedding).
///
/// Fails if the runtime was already started with a different configuration, except that
/// the thread count may differ (operators can choose their thread count per call).
/// Checkpoints ([`Config::checkpoint`]) are turned on by the call that starts the
/// runtime. A thread count above [`MAX_THREADS`] is a configuration error that names
/// where it came from.
///
/// ```
/// let err = strads_ap_runtime::init_with(strads_ap_runtime::Config::local(100_000)).unwrap_err();
/// assert!(err.to_string().contains("at most 1024"), "{err}");
/// ```
pub fn init_with(config: Config) -> Result<()> {
    check_threads(config.threads)?;
    let fresh = cluster::start(&config)?;
    if config.gather_limit.is_some() {
        crate::dds::set_gather_limit(config.gather_limit);
    }
    if fresh && config.checkpoint.is_some() {
        checkpoint::configure(config.checkpoint.clone());
    }
    Ok(())
}

/// Refuses a thread count above [`MAX_THREADS`], naming `STRADS_THREADS` when that is
/// where it came from.
fn check_threads(threads: usize) -> Result<()> {
    if threads <= MAX_THREADS {
        return Ok(());
    }
    let from_env = std::env::var(cluster::env::THREADS)
        .ok()
        .filter(|v| v.trim().parse::<usize>() == Ok(threads))
        .map(|v| format!(" ({}={v})", cluster::env::THREADS))
        .unwrap_or_default();
    Err(Error::Config(format!(
        "{threads} worker threads per process{from_env}: at most {MAX_THREADS} are allowed"
    )))
}

/// Leaves the job cleanly: says goodbye to every rank, waits until everything sent has been
/// delivered and every rank has said goodbye, and closes the connections. Call it last, on
/// every rank; a rank that exits without it looks lost to the others. It also tells of
/// any loop whose plan no call ran (the `plan-pending` diagnosis), in a world of one too.
pub fn finish() -> Result<()> {
    // A loop whose plan no call ran is told so (see `engine::diagnose::at_end`).
    crate::engine::stats::at_end();
    // The last checkpoint, still being written, is committed first.
    checkpoint::flush()?;
    cluster::leave()
}
