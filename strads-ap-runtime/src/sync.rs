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
}
