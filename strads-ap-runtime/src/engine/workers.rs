//! What every strategy's workers share: the first error of a run, the merge lock and its
//! clock, and turning a caught panic into an error.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::CallSite;
use crate::access::Fault;
use crate::error::Error;
use crate::sync::Mutex;
use crate::util::panic_message;

/// The lock under which workers merge replicas into shared tables, and the time they
/// spent in merges (waiting for the lock included).
#[derive(Default)]
pub(crate) struct Merges<T = ()> {
    lock: Mutex<T>,
    nanos: AtomicU64,
}

impl<T> Merges<T> {
    pub fn new(value: T) -> Self {
        Merges {
            lock: Mutex::new(value),
            nanos: AtomicU64::new(0),
        }
    }

    /// Runs `f` under the lock without counting it as merge time (making replicas).
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock.lock())
    }

    /// Runs `f` under the lock, counting the time from now (waiting included).
    pub fn merge<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let t0 = Instant::now();
        let mut guard = self.lock.lock();
        let out = f(&mut guard);
        drop(guard);
        self.add(t0.elapsed());
        out
    }

    /// Counts `spent` as merge time of the workers.
    pub fn add(&self, spent: Duration) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The merge time counted so far.
    pub fn spent(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

/// Turns a caught panic of a loop body into an error.
pub(crate) fn body_error(site: &CallSite, index: usize, payload: Box<dyn Any + Send>) -> Error {
    match payload.downcast::<Fault>() {
        Ok(fault) => match *fault {
            Fault::OutOfBounds {
                table,
                index: i,
                len,
            } => Error::BodyPanicked {
                site: site.to_string(),
                index,
                message: format!(
                    "index {i} is out of bounds for DVector `{table}` of length {len}"
                ),
            },
            Fault::MissingKey { table, key } => Error::BodyPanicked {
                site: site.to_string(),
                index,
                message: format!(
                    "key {key} is not in map `{table}` (keys cannot be added inside a loop \
                     body: insert them in driver code before the loop)"
                ),
            },
            Fault::Outside {
                table,
                key,
                write,
                reason,
            } => Error::AccessOutsidePlan {
                site: site.to_string(),
                batched: site.kind == super::LoopKind::Sync,
                index,
                access: if write { "wrote" } else { "read" },
                table,
                key,
                reason,
                changed: String::new(),
            },
        },
        Err(payload) => Error::BodyPanicked {
            site: site.to_string(),
            index,
            message: panic_message(&*payload),
        },
    }
}

/// The first error of a parallel run; the others stop at their next group.
pub(crate) struct FirstError {
    error: Mutex<Option<Error>>,
    failed: std::sync::atomic::AtomicBool,
}

impl FirstError {
    pub fn new() -> Self {
        FirstError {
            error: Mutex::new(None),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn set(&self, e: Error) {
        let mut slot = self.error.lock();
        slot.get_or_insert(e);
        self.failed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The first error's message, if any.
    pub fn message(&self) -> Option<String> {
        self.error.lock().as_ref().map(|e| e.to_string())
    }

    pub fn into_result(self) -> crate::Result<()> {
        match self.error.into_inner() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
