//! The job a process belongs to: its rank, the world size, its worker threads.
//!
//! A program calls [`crate::init`] once (or lets the first operator do it). Without a
//! launcher the job is a *world of one*: rank 0 of 1, using every core. The launcher
//! describes a larger job through `STRADS_*` environment variables (see [`mod@env`]); the
//! cluster runtime reads them here.

use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::checkpoint_config::CheckpointConfig;
use crate::error::{Error, Result};
use crate::sync::Mutex;

pub mod collective;
mod pool;

pub(crate) use pool::Pool;

/// The environment variables that make up the launcher ↔ program contract.
pub mod env {
    /// This process's rank, `0..STRADS_WORLD_SIZE`. Rank 0 is the driver.
    pub const RANK: &str = "STRADS_RANK";
    /// Number of processes in the job.
    pub const WORLD_SIZE: &str = "STRADS_WORLD_SIZE";
    /// Worker threads per process (default: all cores).
    pub const THREADS: &str = "STRADS_THREADS";
    /// Seed for the runtime's own randomness (task shuffles in the planner).
    pub const SEED: &str = "STRADS_SEED";
    /// `1` to print what the runtime does (reconnaissance, plans) to stderr.
    pub const VERBOSE: &str = "STRADS_VERBOSE";
    /// [`Config::gather_limit`](super::Config::gather_limit), in bytes.
    pub const GATHER_LIMIT: &str = "STRADS_GATHER_LIMIT";
    /// The run of [`Opts::interleave`](crate::Opts::interleave) for loops that set none.
    pub const INTERLEAVE: &str = "STRADS_INTERLEAVE";
    /// Bytes of a rank's share of a table above which a planning call across ranks
    /// fetches what its tasks read instead of gathering the table whole
    /// ([`set_fetch_above`](crate::dds::set_fetch_above)).
    pub const FETCH_ABOVE: &str = "STRADS_FETCH_ABOVE";
    /// `0` to print no diagnoses to stderr (they are still in `loop_stats()`).
    pub const DIAGNOSE: &str = "STRADS_DIAGNOSE";
    /// The share of a call below which the `fixed-costs` diagnosis finds the workers idle.
    pub const DIAGNOSE_BUSY: &str = "STRADS_DIAGNOSE_BUSY";
    /// `0` to show no progress bars.
    pub const PROGRESS: &str = "STRADS_PROGRESS";
    /// The runtime's settings read from the environment, which every rank of a job must
    /// see alike (ranks that differed in them would cut their cells, fetch or time out
    /// differently). Local and Slurm ranks inherit the launcher's environment; in ssh mode
    /// the launcher forwards these.
    pub const SETTINGS: [&str; 10] = [
        SEED,
        VERBOSE,
        GATHER_LIMIT,
        INTERLEAVE,
        FETCH_ABOVE,
        DIAGNOSE,
        DIAGNOSE_BUSY,
        PROGRESS,
        IDLE_TIMEOUT,
        MAX_FRAME,
    ];
    /// Slurm's rank, read when `STRADS_RANK` is not set.
    pub const SLURM_PROCID: &str = "SLURM_PROCID";
    /// The job's output directory, set by the launcher.
    pub const OUTPUT_DIR: &str = "STRADS_OUTPUT_DIR";
    /// The file in [`OUTPUT_DIR`] where a rank notes that it waited for a rank that had
    /// left the job ([`crate::Error::PeerLeft`]) or that waited for it in another
    /// collective ([`crate::Error::Deadlock`]): the launcher does not restart a job that
    /// failed so, since a restart would only fail the same way.
    pub const LEFT_EARLY_FILE: &str = "left-early";
    /// The file in [`OUTPUT_DIR`] where a rank notes the number of a rank it lost
    /// ([`crate::Error::PeerLost`]): if that rank's process had exited with code 0 (it
    /// ended mid-job without leaving it), the launcher does not restart the job.
    pub const LOST_FILE: &str = "lost-rank";
    /// Slurm's task count, read when `STRADS_WORLD_SIZE` is not set.
    pub const SLURM_NTASKS: &str = "SLURM_NTASKS";
    pub use crate::transport::quic::env::*;
}

/// How a process takes part in a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This process's rank.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// Worker threads in this process.
    pub threads: usize,
    /// Seed of the planner's shuffles; fixed so runs are repeatable.
    pub seed: u64,
    /// Print what the runtime does (reconnaissance, plans) to stderr.
    pub verbose: bool,
    /// Checkpoints after loop operators and recovery (see [`crate::checkpoint`]), turned
    /// on by [`crate::init_with`].
    pub checkpoint: Option<CheckpointConfig>,
    /// Most bytes a driver operator may copy whole onto a rank (`to_vec`, `iter`, and
    /// `with_all` across ranks): past it they fail with an error rather than exhaust
    /// the memory. `None`: half the machine's memory. `STRADS_GATHER_LIMIT` sets it.
    pub gather_limit: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rank: 0,
            world_size: 1,
            threads: default_threads(),
            seed: 0x5eed_5eed,
            verbose: false,
            checkpoint: None,
            gather_limit: None,
        }
    }
}

/// Most worker threads a process may have (`STRADS_THREADS`, [`Config::threads`]).
///
/// A thread count beyond it is a typo rather than a plan (each worker has its own stack
/// and its own replicas of `sync_for!` tables); [`init_with`](crate::init_with) refuses it with a clear error
/// instead of starting tens of thousands of threads.
pub const MAX_THREADS: usize = 1024;

/// All cores, up to [`MAX_THREADS`] (a machine with more cores
/// than the limit gets the limit, not an error it cannot avoid).
fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_THREADS)
}

impl Config {
    /// A world of one process with `threads` worker threads.
    pub fn local(threads: usize) -> Self {
        Config {
            threads: threads.max(1),
            ..Config::default()
        }
    }

    /// The same job with `threads` worker threads per process.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The same, printing what the runtime does to stderr.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// The same job with a gather limit of `bytes` (see [`Config::gather_limit`]).
    pub fn with_gather_limit(mut self, bytes: u64) -> Self {
        self.gather_limit = Some(bytes);
        self
    }

    /// The same job with checkpoints (or without, with `None`).
    pub fn with_checkpoints(mut self, checkpoint: Option<CheckpointConfig>) -> Self {
        self.checkpoint = checkpoint;
        self
    }

    /// Reads the `STRADS_*` variables; absent ones take the world-of-one defaults.
    pub fn from_env() -> Result<Self> {
        let mut config = Config::default();
        let read = |name: &str| -> Result<Option<u64>> {
            match std::env::var(name) {
                Ok(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
                    Error::Config(format!("{name}={v:?} is not a non-negative integer"))
                }),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(e) => Err(Error::Config(format!("{name}: {e}"))),
            }
        };
        // Under Slurm (`srun`), the launcher leaves rank and size to Slurm's variables.
        if let Some(rank) = read(env::RANK)?.or(read(env::SLURM_PROCID)?) {
            config.rank = rank as usize;
        }
        if let Some(world) = read(env::WORLD_SIZE)?.or(read(env::SLURM_NTASKS)?) {
            config.world_size = world as usize;
        }
        if let Some(threads) = read(env::THREADS)? {
            if threads == 0 {
                return Err(Error::Config(format!(
                    "{}=0: need at least one thread",
                    env::THREADS
                )));
            }
            config.threads = threads as usize;
        }
        if let Some(seed) = read(env::SEED)? {
            config.seed = seed;
        }
        if let Some(verbose) = read(env::VERBOSE)? {
            config.verbose = verbose != 0;
        }
        if let Some(limit) = read(env::GATHER_LIMIT)? {
            config.gather_limit = Some(limit);
        }
        config.checkpoint = CheckpointConfig::from_env()?;
        if config.world_size == 0 || config.rank >= config.world_size {
            return Err(Error::Config(format!(
                "rank {} is not in a world of {} processes",
                config.rank, config.world_size
            )));
        }
        Ok(config)
    }
}

/// The process-wide runtime state.
pub struct Context {
    config: Config,
}

static CONTEXT: OnceLock<Context> = OnceLock::new();

/// Starts this process's runtime with `config` and, in a job of several processes, joins
/// the other ranks: the cluster's part of [`crate::init_with`]. Returns whether this call
/// started the runtime (`false`: it had been started, with the same job).
///
/// Fails if the runtime was already started with a different job (rank or world size).
pub(crate) fn start(config: &Config) -> Result<bool> {
    let mut fresh = false;
    let ctx = CONTEXT.get_or_init(|| {
        fresh = true;
        Context::new(config.clone())
    });
    if !fresh && (ctx.config.rank != config.rank || ctx.config.world_size != config.world_size) {
        return Err(Error::Config(format!(
            "init called twice with different jobs: rank {}/{} then {}/{}",
            ctx.config.rank, ctx.config.world_size, config.rank, config.world_size
        )));
    }
    if config.world_size > 1 {
        join_cluster(config)?;
    }
    Ok(fresh)
}

/// The process's own rank joins the job of several processes `config` describes: its
/// connections and collectives are kept on that rank (see [`RankCtx::process`]).
fn join_cluster(config: &Config) -> Result<()> {
    let me = RankCtx::process();
    let _one_at_a_time = me.joining.lock();
    if me.comm.get().is_some() {
        return Ok(());
    }
    let transport = crate::transport::QuicTransport::from_env(config.rank, config.world_size)?;
    let comm = collective::Comm::new(transport.clone());
    comm.barrier()?;
    if config.verbose {
        eprintln!(
            "strads-ap: rank {} of {} joined the job at {}",
            config.rank,
            config.world_size,
            transport.local_addr()
        );
    }
    let _ = me.transport.set(transport);
    let _ = me.comm.set(comm);
    Ok(())
}

/// The collectives of this job, once [`crate::init`] joined a job of several processes;
/// `None` in a world of one.
///
/// ```
/// strads_ap_runtime::init().unwrap();
/// assert!(strads_ap_runtime::cluster::comm().is_none());
/// ```
pub fn comm() -> Option<&'static collective::Comm> {
    RankCtx::process().comm.get()
}

/// Closes the connections of a job of several processes cleanly: the cluster's part of
/// [`crate::finish`]. Says goodbye to every rank, waits until everything sent has been
/// delivered and every rank has said goodbye. Does nothing in a world of one.
pub(crate) fn leave() -> Result<()> {
    use crate::transport::Transport;
    match RankCtx::process().transport.get() {
        Some(t) => t.shutdown(std::time::Duration::from_secs(60)),
        None => Ok(()),
    }
}

/// The rank a thread acts as: its place in the job, its collectives, and the counter that
/// gives DDSs their ids (in program order, so every rank gives a DDS the same id).
///
/// A process has one by default (from [`crate::init`]). Tests and simulations run several
/// ranks in one process: each thread enters its own with [`scoped`] (see
/// [`crate::transport::mem`]).
pub struct RankCtx {
    rank: usize,
    world: usize,
    /// The collectives: set when the rank is made (ranks simulated in one process), or
    /// when the process's own rank joins its job ([`crate::init`]); unset in a world of one.
    comm: OnceLock<collective::Comm>,
    /// The process's own rank in a job of several processes: its connections.
    transport: OnceLock<Arc<crate::transport::QuicTransport>>,
    /// Joins happen one at a time.
    joining: Mutex<()>,
    next_table: AtomicU64,
    /// State the layers above keep per rank (plan caches, loop figures, table registry,
    /// checkpointer), one value per type: see [`RankCtx::local`].
    locals: dashmap::DashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    /// Worker pools by size.
    pools: dashmap::DashMap<usize, Arc<Pool>>,
}

impl std::fmt::Debug for RankCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankCtx")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish()
    }
}

impl RankCtx {
    /// A rank of a job whose collectives run over `comm` (e.g. on a `mem` transport).
    pub fn new(comm: collective::Comm) -> Arc<RankCtx> {
        Arc::new(RankCtx {
            rank: comm.rank(),
            world: comm.world_size(),
            comm: OnceLock::from(comm),
            transport: OnceLock::new(),
            joining: Mutex::new(()),
            next_table: AtomicU64::new(1),
            locals: Default::default(),
            pools: Default::default(),
        })
    }

    /// The process's own rank (the rank of every thread not in a [`scoped`] rank).
    fn process_arc() -> &'static Arc<RankCtx> {
        static PROCESS: OnceLock<Arc<RankCtx>> = OnceLock::new();
        PROCESS.get_or_init(|| {
            let config = &context().config;
            Arc::new(RankCtx {
                rank: config.rank,
                world: config.world_size,
                comm: OnceLock::new(),
                transport: OnceLock::new(),
                joining: Mutex::new(()),
                next_table: AtomicU64::new(1),
                locals: Default::default(),
                pools: Default::default(),
            })
        })
    }

    /// The process's own rank.
    fn process() -> &'static RankCtx {
        Self::process_arc()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// This rank's value of type `T`, made by `T::default()` on first use.
    ///
    /// The layers above the cluster keep their per-rank state here without the cluster
    /// knowing their types: ranks simulated in one process (see [`simulate`]) each have
    /// their own.
    pub(crate) fn local<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let any = match self.locals.get(&TypeId::of::<T>()) {
            Some(v) => v.clone(),
            None => self
                .locals
                .entry(TypeId::of::<T>())
                .or_insert_with(|| Arc::new(T::default()))
                .clone(),
        };
        any.downcast::<T>()
            .unwrap_or_else(|_| unreachable!("rank locals are keyed by their type"))
    }

    /// A pool of exactly `threads` worker threads of this rank (made once per size).
    pub(crate) fn pool(&self, threads: usize) -> Arc<Pool> {
        let rank = self.rank;
        self.pools
            .entry(threads)
            .or_insert_with(|| Arc::new(Pool::new(threads, rank)))
            .clone()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The collectives, in a job of several ranks.
    pub fn comm(&self) -> Option<&collective::Comm> {
        self.comm.get()
    }

    /// The collectives of a job of several ranks, or an error naming `op` if the job has
    /// not been joined.
    pub(crate) fn comm_for(&self, op: &str) -> Result<&collective::Comm> {
        self.comm().ok_or_else(|| {
            Error::Config(format!(
                "{op}: rank {} of {} has not joined the job; call strads_ap::init() first",
                self.rank, self.world
            ))
        })
    }

    /// Whether the job has several ranks.
    pub fn is_distributed(&self) -> bool {
        self.world > 1
    }

    /// A fresh DDS id.
    pub(crate) fn new_table_id(&self) -> u64 {
        self.next_table.fetch_add(1, Ordering::Relaxed)
    }
}

thread_local! {
    static SCOPE: std::cell::RefCell<Option<Arc<RankCtx>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `job` as every rank of a `world`-rank job inside this process, one thread per rank
/// over the [`mem`](crate::transport::mem) transport, and returns the ranks' results in
/// rank order: a whole cluster in one test or simulation. A panic on a rank is re-raised
/// here.
///
/// ```
/// use strads_ap_runtime::cluster::simulate;
/// use strads_ap_runtime::DVector;
///
/// let sums = simulate(3, || DVector::from_fn(10, |i| i as u64)?.reduce(|a, b| a + b));
/// for s in sums {
///     assert_eq!(s.unwrap(), 45);
/// }
/// ```
pub fn simulate<T: Send>(world: usize, job: impl Fn() -> T + Sync) -> Vec<T> {
    let transports = crate::transport::mem::MemCluster::new(world).into_transports();
    std::thread::scope(|s| {
        let handles: Vec<_> = transports
            .into_iter()
            .map(|t| {
                s.spawn(|| {
                    // A rank whose job returned (or panicked) has left: the others' waits
                    // for it end instead of hanging.
                    struct Leave(Arc<crate::transport::mem::MemTransport>);
                    impl Drop for Leave {
                        fn drop(&mut self) {
                            self.0.leave();
                        }
                    }
                    let _leave = Leave(t.clone());
                    scoped(RankCtx::new(collective::Comm::new(t)), &job)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Runs `f` on this thread as rank `ctx` (operators called inside act for that rank).
///
/// ```
/// use std::thread;
/// use strads_ap_runtime::cluster::{collective::Comm, scoped, RankCtx};
/// use strads_ap_runtime::transport::mem::MemCluster;
/// use strads_ap_runtime::DVector;
///
/// let ranks: Vec<_> = MemCluster::new(2).into_transports().into_iter().map(|t| {
///     thread::spawn(move || scoped(RankCtx::new(Comm::new(t)), || {
///         let v = DVector::from_fn(5, |i| i as u64)?;   // each rank holds its range
///         v.reduce(|a, b| a + b)                         // the same sum on every rank
///     }))
/// }).collect();
/// for r in ranks {
///     assert_eq!(r.join().unwrap().unwrap(), 10);
/// }
/// ```
pub fn scoped<R>(ctx: Arc<RankCtx>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<RankCtx>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            SCOPE.with(|s| *s.borrow_mut() = old);
        }
    }
    let old = SCOPE.with(|s| s.borrow_mut().replace(ctx));
    let _restore = Restore(old);
    f()
}

/// The rank this thread acts as.
pub fn here() -> Arc<RankCtx> {
    SCOPE
        .with(|s| s.borrow().clone())
        .unwrap_or_else(|| RankCtx::process_arc().clone())
}

/// The runtime context, started on first use.
pub(crate) fn context() -> &'static Context {
    CONTEXT.get_or_init(|| {
        let config = Config::from_env().unwrap_or_else(|e| {
            crate::util::warn(&format!("{e}; running as a world of one instead"));
            Config::default()
        });
        Context::new(config)
    })
}

impl Context {
    fn new(mut config: Config) -> Self {
        // STRADS_VERBOSE=1 turns progress lines on whatever the program configured.
        if std::env::var(env::VERBOSE).is_ok_and(|v| v.trim() == "1") {
            config.verbose = true;
        }
        Context { config }
    }

    /// The configuration this process runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

/// This process's rank (0 is the driver).
pub fn rank() -> usize {
    context().config.rank
}

/// Number of processes in the job.
pub fn world_size() -> usize {
    context().config.world_size
}

/// Whether this process is the driver (rank 0), whose output is authoritative.
pub fn is_driver() -> bool {
    rank() == 0
}

/// Default worker threads per process.
pub fn threads() -> usize {
    context().config.threads
}
