//! Locks that ignore poisoning.
//!
//! A loop body that panics is caught by the engines and reported as an error; the thread
//! that panicked may have held one of the runtime's locks. The data those locks guard is
//! always left consistent between statements (a panic can only come from user code run
//! while no runtime invariant is half-updated, or from a bug that is reported anyway), so
//! the runtime keeps using it rather than turning one failed call into a poisoned job.
//! These wrappers say so once, instead of at every `lock()`.
//!
//! They have the interface of their `std::sync` namesakes minus the `LockResult`s.
//!
//! Also here: [`SpinBarrier`], for the phases of one call's workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LockResult, PoisonError, TryLockError};
use std::time::Duration;

pub(crate) use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

/// The guard of a poisoned lock is as good as any other (see the module docs).
fn ok<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

/// The guard if the lock was free, poisoned or not; `None` if it is held.
fn try_ok<G>(result: Result<G, TryLockError<G>>) -> Option<G> {
    match result {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// [`std::sync::Mutex`] without poisoning.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub const fn new(value: T) -> Self {
        Mutex(std::sync::Mutex::new(value))
    }

    pub fn into_inner(self) -> T {
        ok(self.0.into_inner())
    }
}

impl<T: ?Sized> Mutex<T> {
    pub fn lock(&self) -> MutexGuard<'_, T> {
        ok(self.0.lock())
    }
}

/// [`std::sync::RwLock`] without poisoning.
#[derive(Debug, Default)]
pub(crate) struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

impl<T> RwLock<T> {
    pub const fn new(value: T) -> Self {
        RwLock(std::sync::RwLock::new(value))
    }
}

impl<T: ?Sized> RwLock<T> {
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        ok(self.0.read())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        ok(self.0.write())
    }

    /// The read guard, or `None` while a writer holds the lock.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        try_ok(self.0.try_read())
    }

    /// The write guard, or `None` while anyone holds the lock.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        try_ok(self.0.try_write())
    }
}

/// [`std::sync::Condvar`] for the guards of [`Mutex`].
#[derive(Debug, Default)]
pub(crate) struct Condvar(std::sync::Condvar);

impl Condvar {
    pub const fn new() -> Self {
        Condvar(std::sync::Condvar::new())
    }

    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        ok(self.0.wait(guard))
    }

    /// Waits at most `timeout`; `true` if it timed out.
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        let (guard, result) = ok(self.0.wait_timeout(guard, timeout));
        (guard, result.timed_out())
    }

    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// A barrier for the workers of one call, which spins briefly and then yields: rounds
/// are short, and a sleeping worker takes long to wake.
pub(crate) struct SpinBarrier {
    threads: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    pub fn new(threads: usize) -> Self {
        SpinBarrier {
            threads,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    pub fn wait(&self) {
        self.wait_leading(|| {});
    }

    /// Waits like [`SpinBarrier::wait`]; the last thread to arrive runs `leader` before it
    /// releases the others. What `leader` reads, no thread changes meanwhile (all wait),
    /// and what it writes every thread sees after the barrier: a verdict all threads
    /// share, such as whether to stop, where each thread's own reading could differ.
    pub fn wait_leading(&self, leader: impl FnOnce()) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            leader();
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation + 1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if spins < 2_000 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        *m.lock() += 1;
        assert_eq!(*m.lock(), 2);
    }

    #[test]
    fn try_write_says_when_held() {
        let l = RwLock::new(0);
        let r = l.read();
        assert!(l.try_write().is_none());
        assert!(l.try_read().is_some());
        drop(r);
        assert!(l.try_write().is_some());
    }

    #[test]
    fn wait_timeout_reports_the_timeout() {
        let m = Mutex::new(());
        let c = Condvar::new();
        let (_g, timed_out) = c.wait_timeout(m.lock(), Duration::from_millis(1));
        assert!(timed_out);
    }

    #[test]
    fn a_spin_barrier_parts_phases() {
        // Each of 3 threads adds to a counter in every phase; after each barrier every
        // thread must see all of that phase's additions.
        let (threads, phases) = (3, 200);
        let barrier = SpinBarrier::new(threads);
        let count = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for phase in 1..=phases {
                        count.fetch_add(1, Ordering::Relaxed);
                        barrier.wait();
                        assert_eq!(count.load(Ordering::Relaxed), phase * threads);
                        barrier.wait();
                    }
                });
            }
        });
    }
}
