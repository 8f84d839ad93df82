//! A rank's worker threads: rayon pools by size, that stay awake between operators.

use std::ops::Deref;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A rayon pool with a fixed number of threads.
pub(crate) struct Pool {
    threads: rayon::ThreadPool,
    /// Pool threads kept awake by [`Pool::linger`] right now.
    lingering: Arc<AtomicUsize>,
    /// Nanoseconds (see [`Pool::take_late`]).
    late: AtomicU64,
}

/// How long pool threads stay awake after an operator.
const LINGER: Duration = Duration::from_millis(3);

impl Pool {
    /// A pool of `threads` threads named after their rank.
    pub fn new(threads: usize, rank: usize) -> Self {
        let threads = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("strads-r{rank}-worker-{i}"))
            .build()
            .expect("failed to start worker threads");
        Pool {
            threads,
            lingering: Arc::default(),
            late: AtomicU64::new(0),
        }
    }

    /// Runs `work` on `threads` workers: the calling thread and `threads - 1` pool threads.
    /// The caller works at once instead of waiting for sleeping pool threads to wake.
    ///
    /// Afterwards the pool threads stay awake for a moment ([`Pool::linger`]).
    ///
    /// Adds to [`Pool::take_late`] how long after the call the last pool thread started its
    /// `work`: a thread woken from sleep can start after the others have done everything.
    pub fn on_workers(&self, threads: usize, work: &(dyn Fn() + Sync)) {
        if threads <= 1 {
            work();
            return;
        }
        let began = Instant::now();
        let latest = AtomicU64::new(0);
        self.threads.in_place_scope(|s| {
            for _ in 1..threads {
                s.spawn(|_| {
                    let after = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    latest.fetch_max(after, Relaxed);
                    work();
                });
            }
            work();
        });
        self.linger(threads - 1);
        self.late.fetch_add(latest.load(Relaxed), Relaxed);
    }

    /// How late the last pool thread of each [`Pool::on_workers`] since the last call
    /// started its work, summed; starts the sum again. The loop engines read it after a
    /// call, which has the pool to itself (operators do not nest).
    pub fn take_late(&self) -> Duration {
        Duration::from_nanos(self.late.swap(0, Relaxed))
    }

    /// Keeps up to `threads` pool threads awake for [`LINGER`] after their last job,
    /// running whatever the pool is given meanwhile: ML loops call operators back to back,
    /// and waking a sleeping thread costs up to a millisecond on a virtual machine, which
    /// is most of a small epoch.
    pub fn linger(&self, threads: usize) {
        for _ in 0..threads {
            let current = self.lingering.load(Acquire);
            if current >= threads
                || self
                    .lingering
                    .compare_exchange(current, current + 1, AcqRel, Acquire)
                    .is_err()
            {
                return;
            }
            let lingering = self.lingering.clone();
            self.threads.spawn(move || {
                let mut until = Instant::now() + LINGER;
                while Instant::now() < until {
                    match rayon::yield_now() {
                        Some(rayon::Yield::Executed) => until = Instant::now() + LINGER,
                        Some(rayon::Yield::Idle) => std::hint::spin_loop(),
                        None => break,
                    }
                }
                lingering.fetch_sub(1, AcqRel);
            });
        }
    }
}

impl Deref for Pool {
    type Target = rayon::ThreadPool;

    fn deref(&self) -> &rayon::ThreadPool {
        &self.threads
    }
}
