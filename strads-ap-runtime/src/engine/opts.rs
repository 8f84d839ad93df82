//! Options of a loop call: [`Opts`], [`Fallback`] and [`SyncMode`].

/// Options of one loop operator call, passed as the macros' last argument.
///
/// # Examples
/// ```
/// use strads_ap_runtime::Opts;
/// let opts = Opts::new().threads(2).recheck(true);
/// assert_eq!(opts.get_threads(), Some(2));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Opts {
    pub(super) threads: Option<usize>,
    pub(super) recheck: bool,
    pub(super) re: bool,
    pub(super) blocks: Option<usize>,
    pub(crate) interleave: Option<usize>,
    pub(super) seed: Option<u64>,
    pub(super) dynamic: Option<super::Dynamic>,
    pub(super) fallback: Fallback,
    pub(crate) progress: Option<bool>,
}

impl Opts {
    /// Defaults: all the process's threads, plan cached per call site and range,
    /// reconnaissance off for `sync_for!`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Worker threads for this call (default: the process's thread count).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads.max(1));
        self
    }

    /// Shows a progress bar while a call runs longer than a second (`true`, the default
    /// where it can be seen), or never (`false`). A bar is drawn only on the driver's
    /// terminal, never in tests, under `CI`, or with `STRADS_PROGRESS=0` in the
    /// environment, which turns every bar off (reads' too).
    ///
    /// ```
    /// let quiet = strads_ap_runtime::Opts::new().progress(false);
    /// ```
    pub fn progress(mut self, show: bool) -> Self {
        self.progress = Some(show);
        self
    }

    /// The thread count set, if any.
    pub fn get_threads(&self) -> Option<usize> {
        self.threads
    }

    /// For bodies whose accesses change between calls (values they depend on change, or
    /// they draw random keys).
    ///
    /// `async_for!` in a world of one then runs with per-element locks instead of a plan:
    /// reconnaissance once, to learn which tables are written, then every call locks each
    /// element a task touches, undoes and retries a task that meets an element another
    /// worker holds (the run stays serializable; [`LoopStats::retried`](super::LoopStats::retried) counts them).
    /// Across ranks, and for `sync_for!`, reconnaissance (and planning) is redone on every
    /// call.
    pub fn recheck(mut self, recheck: bool) -> Self {
        self.recheck = recheck;
        self
    }

    /// `sync_for!`: run reconnaissance once per call site, so that tables the body never
    /// writes are shared read-only instead of copied per worker, and, in
    /// [`SyncMode::Hybrid`], workers refresh and merge only the keys each mini-batch
    /// touches (what makes large sparse models such as word embeddings cheap).
    pub fn re(mut self, re: bool) -> Self {
        self.re = re;
        self
    }

    /// `async_for!`: blocks per rotated table (default: 4 × threads).
    pub fn blocks(mut self, blocks: usize) -> Self {
        self.blocks = Some(blocks.max(1));
        self
    }

    /// `async_for!` on a rotation plan: interleave each key's updates against the blocks
    /// of the other table finely, in runs of at most about `run` updates. By default the
    /// workers run each cell of the rotation (a block of rows against a block of columns)
    /// in a few large pieces, which keeps a worker's blocks in its cache; with this option
    /// a cell is cut into units of at most about `run` tasks of any one row or column (and
    /// about 16 × `run` tasks in all), spread over the call, so that a frequent row meets
    /// all the blocks of columns throughout the call, as it does in a shuffled serial loop.
    ///
    /// Ask for it when the trained model differs from the serial program's by more than
    /// another serial order would move it: constant-step SGD with a large step and a few
    /// very frequent keys (GloVe, word embeddings over Zipf words), whose frequent rows
    /// otherwise end each call fitted to the last block they met. On the zoo's GloVe
    /// (2 workers, 10 epochs): by default 2.0× the serial speed with a trained loss
    /// 54-70% above serial's; with `interleave(16)` 1.6× and within 1.4%. The cost grows
    /// as the body gets cheaper: the same GloVe with rows of `[f32; 32]` went from 1.3×
    /// to 0.9×, no faster than serial. It also costs speed where the order matters less
    /// (matrix factorisation, whose RMSE moves by hundredths of a percent). `STRADS_INTERLEAVE=run` in the environment sets it for every loop
    /// that does not, to try it without recompiling. See the manual's "Rotation order".
    ///
    /// ```
    /// use strads_ap_runtime::Opts;
    /// let fine = Opts::new().interleave(16);
    /// assert_eq!(fine.get_interleave(), Some(16));
    /// ```
    pub fn interleave(mut self, run: usize) -> Self {
        self.interleave = Some(run.max(1));
        self
    }

    /// The interleaving run set, if any.
    pub fn get_interleave(&self) -> Option<usize> {
        self.interleave
    }

    /// `async_for!`: STRADS dynamic scheduling. The call runs in rounds: each samples
    /// indices by the schedule's [`Priority`](super::Priority), leaves out those that
    /// [`Depends`](super::Depends) on one already taken, runs the rest on all workers and
    /// updates the priorities. See [`Dynamic`](super::Dynamic) for what a round
    /// guarantees. Across ranks each rank runs one share of every round on one worker.
    pub fn dynamic(mut self, schedule: super::Dynamic) -> Self {
        self.dynamic = Some(schedule);
        self
    }

    /// The dynamic schedule set, if any.
    pub fn get_dynamic(&self) -> Option<&super::Dynamic> {
        self.dynamic.as_ref()
    }

    /// `async_for!` in a world of one: whether a loop whose workers do not pay runs on one
    /// worker instead (default [`Fallback::Measure`]). See [`Fallback`].
    ///
    /// ```
    /// use strads_ap_runtime::{Fallback, Opts};
    /// // A test that must exercise the parallel run whatever the timings say:
    /// let opts = Opts::new().threads(2).fallback(Fallback::Never);
    /// assert_eq!(opts.get_fallback(), Fallback::Never);
    /// ```
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// The fallback set (default [`Fallback::Measure`]).
    pub fn get_fallback(&self) -> Fallback {
        self.fallback
    }

    /// `async_for!`: seed of the planner's task shuffle (default: the job's seed).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
}

/// When an `async_for!` loop on several workers in a world of one runs on one worker
/// instead: the call's indices in loop order on the calling thread, over views that check
/// only bounds (as a `Vec` does), as with `Opts::new().threads(1)`.
///
/// A plan whose groups must mostly run one after another (every task writes a bias, a
/// few keys are in most tasks, most tasks read what others write) keeps the workers
/// waiting on each other, and checked accesses (or element locks, in a re-checked loop)
/// cost more than plain ones: such a loop can run several times slower on two workers
/// than on one. On one worker a call runs exactly as the serial program's loop does
/// (relaxed tables updated in place, reductions chained in loop order); a call on all
/// workers runs in its plan's order. Each is serializable; their results differ as two
/// serial orders do.
///
/// With [`Fallback::Measure`] the engine times the loop's calls: when a call on all
/// workers kept them busy less than 1.5 workers' worth (or ran with element locks) and
/// took at least a millisecond, the next calls run on one worker, and from then on each
/// call runs the way that was faster the last time both were measured. Each way counts
/// as the faster of its last two calls, and when the two ways are within 1.5× of each
/// other each is timed twice before one is chosen. The slower way is timed again after 8
/// calls, then after 16, 32, and so on (later when it was several times slower, so that
/// timing it costs under a tenth of a call on average), so that one call slowed by a busy
/// machine does not decide for good. A plan's first call on all workers is not timed when
/// it is shorter than 20 ms: it pays once for the workers' first touch of the plan and of
/// the tables, which can make a sub-millisecond call ten times slower. The loop's
/// [`LoopStats::strategy`](super::LoopStats::strategy) then ends in `" on one worker"`,
/// and a diagnosis (`one-worker`) says what each way took and what would let the
/// workers pay.
///
/// With `Measure`, a loop's first call on two workers (a recorded run) also leaves its plan
/// to be made on a spare thread, and the calls until it is made run in loop order on one
/// worker ([`LoopStats::strategy`](super::LoopStats::strategy) `serial while planning`);
/// [`wait_for_plans`](super::wait_for_plans) waits for it. With `Never` and `Always` the
/// first call plans before it returns. Where results must not depend on timings, choose
/// `Never` or `Always`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// Time the calls and run each the faster way (the default).
    #[default]
    Measure,
    /// Always on all workers (tests of the parallel run; benchmarks of the plan).
    Never,
    /// On one worker once a first call made the plan (or a locking run's table modes).
    Always,
}

/// Synchronisation of `sync_for!`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// Bulk-synchronous: in each sub-iteration every worker processes one mini-batch on
    /// its own copy of the parameters; the copies' deltas are then aggregated (averaged
    /// by default, see [`Aggregation`](crate::Aggregation)).
    Bsp,
    /// Workers inside a process share progress asynchronously: each worker's delta is
    /// added to the process's parameters after every mini-batch and the worker continues
    /// from the fresh values; processes synchronise at sub-iteration ends.
    Hybrid,
}

/// A borrowed `Opts` for a loop's options, so that one value made before the epochs
/// serves every call: `async_for!(0..n, |k| { .. }, &opts)?`.
///
/// ```
/// use strads_ap_runtime::Opts;
/// let opts = Opts::new().threads(2);
/// let first: Opts = (&opts).into();
/// let second: Opts = (&opts).into();
/// assert_eq!((first.get_threads(), second.get_threads()), (Some(2), Some(2)));
/// ```
impl From<&Opts> for Opts {
    fn from(opts: &Opts) -> Opts {
        opts.clone()
    }
}
