//! STRADS dynamic scheduling for `async_for!`: [`Dynamic`], named in the loop's
//! [`Opts`](super::Opts), turns a call into rounds. Each round samples candidate indices
//! by [`Priority`], drops those that depend ([`Depends`]) on an index already chosen, runs
//! the rest on all workers, and updates the priorities from what the round changed.
//!
//! # What a round guarantees
//! The body's tables fall in three kinds (found by reconnaissance on the first call, as
//! for any `async_for!`):
//! - **read-only** tables: nothing to guarantee;
//! - **written tables** (not relaxed): a round is cut into one share per worker, and
//!   indices of two shares never share an element of them (indices that do go in one
//!   share, which runs in order). A round runs as if its indices ran one after another,
//!   and rounds run one after another: the call is serializable in these tables;
//! - **relaxed tables** ([`DVector::relaxed`](crate::DVector::relaxed)): indices of two
//!   shares may share elements. Each worker runs its shares on its own copy of the table,
//!   and sums the copy's changes into the table after each share it runs (taking, when
//!   the round touches about as many elements as the table holds, the other workers'
//!   changes so far into its copy); after the round every copy equals the table. A
//!   share thus sees the changes of the shares that ran before it on its worker and
//!   of those other workers finished before it started, not of those running beside it.
//!   This is STRADS's approximation (parallel updates of
//!   coordinates that depend on each other only weakly, as Lasso's coordinates do through
//!   the shared residual), and [`Depends`] bounds it: two indices that depend never run
//!   in two shares of one round.
//!
//! With one worker in a world of one, every round runs in order on the tables directly,
//! so the result is exactly that of the serial loop visiting the indices in the order
//! the rounds chose.
//!
//! Across ranks, each rank runs one share of every round on one worker, and the ranks
//! exchange the round's changes before the next: the written tables' elements each share
//! touched, and the relaxed tables' changes summed in rank order from the round's start.
//! Every rank keeps the same scheduler, so the same guarantees hold with ranks for
//! workers, and every rank ends the call with the same tables.
//!
//! # Examples
//! Coordinate descent that updates the coordinates whose last change was largest first:
//! ```
//! use strads_ap_runtime::{Depends, Dynamic, Opts, Priority};
//! # let beta = strads_ap_runtime::DVector::from_vec(vec![0.0f64; 8]).unwrap();
//! let schedule = Dynamic::new(Priority::change(&beta))
//!     .depends(Depends::overlap(0.1))
//!     .round(64);
//! let opts = Opts::new().dynamic(schedule.clone());
//! assert!(opts.get_dynamic().is_some());
//! ```

use std::fmt;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::dds::{DVector, Element};
use crate::plan::{SlotMask, SlotMode};
use crate::recon::AccessLog;
use crate::sync::{Mutex, MutexGuard};

/// Which indices a round of a [`Dynamic`] loop prefers.
#[derive(Clone)]
pub struct Priority {
    pub(crate) kind: PriorityKind,
}

#[derive(Clone)]
pub(crate) enum PriorityKind {
    /// Indices in order, round after round (an index a round could not take goes first in
    /// the next).
    Cyclic,
    /// Indices drawn uniformly at random.
    Uniform,
    /// Indices drawn with probability proportional to `f(index, before, after)` of the
    /// last change of `table[index]` (plus η).
    Change {
        table: u64,
        name: &'static str,
        read: fn(*const u8, usize) -> f64,
        score: Option<Arc<ScoreFn>>,
    },
}

/// A user priority: `(index, value before, value after) -> weight`.
pub(crate) type ScoreFn = dyn Fn(usize, f64, f64) -> f64 + Send + Sync;

/// A user dependency test between two loop indices.
pub(crate) type DependsFn = dyn Fn(usize, usize) -> bool + Send + Sync;

fn read_as_f64<T: Copy + Into<f64>>(ptr: *const u8, i: usize) -> f64 {
    // SAFETY: `ptr` is element 0 of a locked `DVector<T>` of more than `i` elements (the
    // engine checks the length against the loop's range before it reads), and no worker
    // runs while the scheduler reads.
    unsafe { (*(ptr as *const T).add(i)).into() }
}

impl Priority {
    /// STRADS's priority: index `j` weighs `(Δ table[j])² + η`, where Δ is the change of
    /// `table[j]` the last time `j` ran (for Lasso, `table` is the coefficient vector β).
    /// Until every index has run once, rounds take the indices in order (a first sweep).
    /// Then a round of `m` indices draws each index with probability
    /// `min(1, m × weight / total weight)`: as if `m` indices were drawn in proportion to
    /// weight and repeats dropped, so an index whose weight exceeds `1/m` of the total runs
    /// in every round, and a round may hold fewer than `m` indices when a few weigh most.
    /// η defaults to a tenth of the mean squared change, recomputed every round, so that
    /// about one draw in eleven goes to indices that did not change (and may need to);
    /// [`Dynamic::eta`] fixes it instead.
    ///
    /// The body must use `table`, and `table[j]` must exist for every index `j`.
    pub fn change<T: Element + Copy + Into<f64>>(table: &DVector<T>) -> Self {
        Priority {
            kind: PriorityKind::Change {
                table: table.id(),
                name: std::any::type_name::<T>(),
                read: read_as_f64::<T>,
                score: None,
            },
        }
    }

    /// A user priority from the last change of `table[j]`: `score(j, before, after)`
    /// gives index `j`'s weight (any finite value ≥ 0; η is added).
    pub fn by<T: Element + Copy + Into<f64>>(
        table: &DVector<T>,
        score: impl Fn(usize, f64, f64) -> f64 + Send + Sync + 'static,
    ) -> Self {
        let mut p = Priority::change(table);
        if let PriorityKind::Change { score: s, .. } = &mut p.kind {
            *s = Some(Arc::new(score));
        }
        p
    }

    /// Indices in order, as the serial loop visits them.
    pub fn cyclic() -> Self {
        Priority {
            kind: PriorityKind::Cyclic,
        }
    }

    /// Indices drawn uniformly at random (with the job's seed, or [`Dynamic::seed`]).
    pub fn uniform() -> Self {
        Priority {
            kind: PriorityKind::Uniform,
        }
    }
}

impl fmt::Debug for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            PriorityKind::Cyclic => f.write_str("Priority::cyclic()"),
            PriorityKind::Uniform => f.write_str("Priority::uniform()"),
            PriorityKind::Change { score: None, .. } => f.write_str("Priority::change(..)"),
            PriorityKind::Change { score: Some(_), .. } => f.write_str("Priority::by(..)"),
        }
    }
}

/// Which indices may not run at once on two workers in a round of a [`Dynamic`] loop
/// (besides those sharing an element of a written, non-relaxed table, which never do).
/// A candidate that depends on indices of one worker's share of the round joins that
/// share, which runs in order; one that depends on two shares waits for a later round.
#[derive(Clone)]
pub struct Depends {
    pub(crate) kind: DependsKind,
}

#[derive(Clone)]
pub(crate) enum DependsKind {
    None,
    Overlap(f64),
    By(Arc<DependsFn>),
    Graph(Arc<Vec<Vec<u32>>>),
}

impl DependsKind {
    /// How a diagnosis names the test.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            DependsKind::None => "`Depends::none()`",
            DependsKind::Overlap(_) => "`Depends::overlap`",
            DependsKind::By(_) => "`Depends::by`",
            DependsKind::Graph(_) => "`Depends::graph`",
        }
    }
}

impl Depends {
    /// No test: indices that share only elements of relaxed tables may run at once (as in
    /// Shotgun).
    pub fn none() -> Self {
        Depends {
            kind: DependsKind::None,
        }
    }

    /// Dependencies found by reconnaissance: a candidate depends on a worker's share of
    /// the round when the elements of relaxed tables it shares with that share's indices
    /// number at least `threshold` × the elements the candidate touches.
    /// `overlap(0.0)` counts any shared element, which makes every round, and so the call,
    /// serializable in every table.
    pub fn overlap(threshold: f64) -> Self {
        Depends {
            kind: DependsKind::Overlap(threshold.max(0.0)),
        }
    }

    /// A user test: `depends(j, k)` says whether indices `j` and `k` may not run at once
    /// on two workers (for Lasso, STRADS's `|x_jᵀx_k| ≥ ρ`). Called for each candidate
    /// against every index the round has taken, so it costs rounds × round size calls;
    /// [`Depends::graph`] is cheaper when the pairs can be listed up front.
    pub fn by(depends: impl Fn(usize, usize) -> bool + Send + Sync + 'static) -> Self {
        Depends {
            kind: DependsKind::By(Arc::new(depends)),
        }
    }
}

impl Depends {
    /// Dependencies listed up front: `neighbours[j]` holds the indices that depend on
    /// index `j` (list each pair both ways). The cheapest test per candidate, for
    /// dependencies known before the loop, such as STRADS's `|x_jᵀx_k| ≥ ρ` computed once
    /// over the data.
    pub fn graph(neighbours: Vec<Vec<u32>>) -> Self {
        Depends {
            kind: DependsKind::Graph(Arc::new(neighbours)),
        }
    }
}

impl fmt::Debug for Depends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DependsKind::None => f.write_str("Depends::none()"),
            DependsKind::Overlap(t) => write!(f, "Depends::overlap({t})"),
            DependsKind::By(_) => f.write_str("Depends::by(..)"),
            DependsKind::Graph(g) => write!(f, "Depends::graph({} lists)", g.len()),
        }
    }
}

/// What a [`Dynamic`] loop has done so far, over all its calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DynamicStats {
    /// Rounds run.
    pub rounds: u64,
    /// Indices run (coordinate updates).
    pub updates: u64,
    /// Candidates a round left out because they depended on an index it had taken.
    pub deferred: u64,
    /// Reconnaissance passes (one per call site and range, unless a call failed; one
    /// worker in a world of one reconnoitres only a few indices, and a later call on
    /// several workers the whole range).
    pub reconnaissance: u64,
}

/// STRADS dynamic scheduling for an `async_for!` loop, named in its options
/// ([`Opts::dynamic`](super::Opts::dynamic)): see the [module docs](self) for what a round
/// guarantees.
///
/// Each call runs rounds until it has run [`updates`](Dynamic::updates) indices (by
/// default as many as the range holds: one sweep's worth); the program's own loop around
/// the call tests convergence between calls, as the serial program does between sweeps.
/// The scheduler's state (priorities, the random stream) lives in this value and its
/// clones: make it once, before the loop, and pass a clone to every call.
#[derive(Clone)]
pub struct Dynamic {
    pub(crate) config: Arc<Config>,
    pub(crate) state: Arc<Mutex<State>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub priority: Priority,
    pub depends: Depends,
    pub round: Option<usize>,
    pub updates: Option<usize>,
    pub eta: Option<f64>,
    pub seed: u64,
    /// Candidates considered per round, as a multiple of the round's size.
    pub candidates: usize,
}

impl fmt::Debug for Dynamic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dynamic")
            .field("priority", &self.config.priority)
            .field("depends", &self.config.depends)
            .field("round", &self.config.round)
            .field("updates", &self.config.updates)
            .finish()
    }
}

impl Dynamic {
    /// Rounds chosen by `priority`, with no dependency test beyond the written tables
    /// ([`Depends::none`]), [`DEFAULT_ROUND_PER_WORKER`] indices per worker per round
    /// or an eighth of the range, whichever is more.
    pub fn new(priority: Priority) -> Self {
        Dynamic {
            config: Arc::new(Config {
                priority,
                depends: Depends::none(),
                round: None,
                updates: None,
                eta: None,
                seed: 0x5742_4144_5341_5000,
                candidates: 2,
            }),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(Arc::make_mut(&mut self.config));
        // A changed configuration starts a fresh scheduler.
        self.state = Arc::new(Mutex::new(State::default()));
        self
    }

    /// The dependency test.
    pub fn depends(self, depends: Depends) -> Self {
        self.with(|c| c.depends = depends)
    }

    /// Indices per round at most (default [`DEFAULT_ROUND_PER_WORKER`] × workers or an
    /// eighth of the range, whichever is more). Larger rounds cost less to schedule;
    /// smaller ones follow the priorities more closely and keep the updates of relaxed
    /// tables closer to the serial program's.
    ///
    /// With several workers, shares running at the same time see each other's changes to
    /// relaxed tables only after they end: on strongly coupled problems (many weakly correlated
    /// coordinates all moving at once) too large a round makes coordinate descent
    /// diverge, as parallel coordinate descent does with too many parallel updates. Take
    /// a smaller round if the objective grows.
    pub fn round(self, indices: usize) -> Self {
        self.with(|c| c.round = Some(indices.max(1)))
    }

    /// Indices each call runs (default: the length of the call's range).
    pub fn updates(self, updates: usize) -> Self {
        self.with(|c| c.updates = Some(updates))
    }

    /// Fixes η of [`Priority::change`] and [`Priority::by`]: the weight every index keeps
    /// however small its last change, so that every index is drawn now and then (by
    /// default η follows the priorities: a tenth of their mean, round by round).
    pub fn eta(self, eta: f64) -> Self {
        self.with(|c| c.eta = Some(eta.max(0.0)))
    }

    /// Seed of the random draws (default: a fixed one, so runs repeat).
    pub fn seed(self, seed: u64) -> Self {
        self.with(|c| c.seed = seed)
    }

    /// How many candidates a round considers, as a multiple of its size (default 2).
    pub fn candidates(self, factor: usize) -> Self {
        self.with(|c| c.candidates = factor.max(1))
    }

    /// What the loop has done so far.
    pub fn stats(&self) -> DynamicStats {
        self.state.lock().stats
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }
}

/// Indices per worker per round by default, at least.
pub const DEFAULT_ROUND_PER_WORKER: usize = 1024;

/// A round holds by default at least this share of the range.
const ROUND_SHARE: usize = 8;

/// A round's indices at most by default, for `workers` workers over a range of `n`:
/// [`DEFAULT_ROUND_PER_WORKER`] per worker, and at least an eighth of the range. A larger
/// round draws from priorities a little older, but each draw reaches further down them
/// (the heaviest indices are certain in any round, so the rest of a round explores):
/// on Lasso's 10,000 × 100,000 set one worker needed 1.8–2.4M updates to the gap target
/// against 7.5M with rounds of 1,024, and two 2.2M (rounds of 12,500) against 5–14M
/// (rounds of 2,048); on the 2,000 × 20,000 set, 0.36M against 0.42M.
pub(crate) fn default_round(workers: usize, n: usize) -> usize {
    (DEFAULT_ROUND_PER_WORKER * workers).max(n / ROUND_SHARE)
}

impl Config {
    /// A round's indices at most, for `workers` workers over a range of `n`: the user's
    /// [`Dynamic::round`], or [`default_round`].
    pub fn round_for(&self, workers: usize, n: usize) -> usize {
        self.round.unwrap_or(default_round(workers, n))
    }
}

/// A [`Dynamic`] loop's state between calls.
#[derive(Default)]
pub(crate) struct State {
    pub stats: DynamicStats,
    pub sched: Option<Scheduler>,
}

/// What identifies the loop a scheduler was made for: call site, range, tables.
pub(crate) type SchedKey = (usize, usize, usize, Vec<(u64, u64)>);

/// Chooses the indices of each round (offsets from the range's start).
pub(crate) struct Scheduler {
    pub key: SchedKey,
    pub modes: Vec<SlotMode>,
    /// Tables (not relaxed) that every task reads or writes at its own loop index (Lasso's
    /// `x[j]`, `norm[j]`, `beta[j]`): what workers prefetch a few tasks ahead, since a
    /// round's tasks lie all over the range.
    pub at_index: Vec<usize>,
    /// Made for one worker without indexing the tasks' keys ([`Scheduler::lone`]).
    pub lone: bool,
    n: usize,
    /// Per task, the elements of written and relaxed tables it touches (shared with the
    /// workers, which tag their groups' keys).
    pub tasks: Arc<TaskKeys>,
    /// Per task: whether another task touches one of its written-table elements.
    shared: Vec<bool>,
    /// Per slot and key: the groups of the round whose tasks touch the key (bit g).
    masks: Vec<Vec<u64>>,
    /// Keys with a mask this round, to clear.
    marked: Vec<u64>,
    /// Per task: the round in which `nbr_mask` was last set, and the groups holding a
    /// task it is listed as depending on ([`Depends::graph`]).
    nbr_round: Vec<u64>,
    nbr_mask: Vec<u64>,
    /// The round being chosen: its tasks, group by group after [`Scheduler::choose`].
    pub round: Vec<u32>,
    /// Per group of the round being chosen: its tasks, and the elements they touch.
    members: Vec<Vec<u32>>,
    load: Vec<usize>,
    /// The group free candidates join while it holds less than its share.
    filling: usize,
    /// Where each group's tasks lie in `round`.
    pub groups: Vec<std::ops::Range<usize>>,
    /// Per task, the number of the round that last considered it (for draws).
    seen: Vec<u64>,
    rounds: u64,
    prio: Weights,
    /// Whether every task has run once (the first sweep of [`Priority::change`] is in
    /// order).
    swept: bool,
    eta: Eta,
    cursor: usize,
    deferred: std::collections::VecDeque<u32>,
    rng: ChaCha8Rng,
    /// The candidates of a batch, in index order.
    batch: Vec<u32>,
    /// Candidates drawn by priority for the coming rounds, in random order.
    queue: std::collections::VecDeque<u32>,
    /// Per task, the number of the draw that last took it; draws so far.
    drew: Vec<u64>,
    draws: u64,
    drawn: Vec<u32>,
    /// One bit per index, all clear between uses: [`sort_distinct`]'s scratch.
    bits: Vec<u64>,
}

/// With several workers, a draw by priority takes at least 1/`DRAW_SPAN` as many indices
/// as have a priority (so that its pass over them costs a few steps per index drawn).
const DRAW_SPAN: usize = 4;

/// A slot's key: a slot below 2^16, a key below 2^48.
const KEY_BITS: u32 = 48;

/// `(slot, key)` of a packed key.
#[inline]
fn split(k: u64) -> (usize, usize) {
    (
        (k >> KEY_BITS) as usize,
        (k & ((1 << KEY_BITS) - 1)) as usize,
    )
}

impl Scheduler {
    /// A scheduler for `n` tasks, from their reconnaissance log and the tables' modes.
    pub fn new(
        key: SchedKey,
        log: &AccessLog,
        modes: Vec<SlotMode>,
        lens: &[usize],
        config: &Config,
    ) -> Self {
        let mut s = Self::lone(key, log.tasks(), modes.len(), Vec::new(), config);
        s.index(log, modes, lens);
        s
    }

    /// Indexes the tasks' keys from their reconnaissance `log` and the tables' modes,
    /// keeping the order chosen so far (priorities, cursor, set-aside tasks, random
    /// stream): what a [`Scheduler::lone`] one lacks to serve several workers.
    pub fn index(&mut self, log: &AccessLog, modes: Vec<SlotMode>, lens: &[usize]) {
        let start = self.key.1;
        let n = log.tasks();
        let mut offsets = Vec::with_capacity(n + 1);
        let mut splits = Vec::with_capacity(n);
        let mut keys = Vec::new();
        offsets.push(0);
        // The slots every task touches at its own index.
        let mut at = SlotMask::ALL;
        let slot_modes = &modes[..];
        for t in 0..n {
            let accesses = log.task(t);
            at.and(SlotMask::of_task(start, t, accesses));
            // A task's accesses come sorted and distinct: the elements of written tables
            // first, then those of relaxed ones, each part in that order, with no sort.
            let of = |mode: SlotMode| {
                (accesses.iter())
                    .filter(move |a| slot_modes[a.slot()] == mode)
                    .map(|a| ((a.slot() as u64) << KEY_BITS) | a.key())
            };
            keys.extend(of(SlotMode::Checked));
            splits.push(keys.len());
            keys.extend(of(SlotMode::Relaxed));
            offsets.push(keys.len());
        }
        let mut masks: Vec<Vec<u64>> = modes
            .iter()
            .zip(lens)
            .map(|(m, &len)| match m {
                SlotMode::ReadOnly => Vec::new(),
                _ => vec![0; len],
            })
            .collect();
        // Tasks whose written-table elements no other task touches (Lasso's β_j) never
        // conflict: the scheduler need not look their keys up.
        let hard = |t: usize| keys[offsets[t]..splits[t]].iter().map(|&k| split(k));
        for t in 0..n {
            for (slot, key) in hard(t) {
                masks[slot][key] = masks[slot][key].saturating_add(1);
            }
        }
        let shared = (0..n)
            .map(|t| hard(t).any(|(slot, key)| masks[slot][key] > 1))
            .collect();
        for t in 0..n {
            for (slot, key) in hard(t) {
                masks[slot][key] = 0;
            }
        }
        debug_assert_eq!(n, self.n, "a log of the scheduler's tasks");
        self.tasks = Arc::new(TaskKeys::new(offsets, splits, keys, start));
        self.at_index = (at.to_vec(modes.len(), n).into_iter().enumerate())
            .filter(|&(s, at)| at && modes[s] != SlotMode::Relaxed && lens[s] > 0)
            .map(|(s, _)| s)
            .collect();
        self.modes = modes;
        self.shared = shared;
        self.masks = masks;
        self.lone = false;
    }

    /// A scheduler for one worker in a world of one, which runs each round in order on
    /// the tables: nothing is tested, tagged or merged, so no task's keys are indexed and
    /// no reconnaissance of the whole range is needed. `at_index`: the tables to prefetch
    /// at each task's index. Its modes say nothing of what the tasks write
    /// ([`Scheduler::lone`] is true): several workers need it [indexed](Scheduler::index).
    pub fn lone(
        key: SchedKey,
        n: usize,
        slots: usize,
        at_index: Vec<usize>,
        config: &Config,
    ) -> Self {
        let tasks = TaskKeys::new(vec![0; n + 1], vec![0; n], Vec::new(), key.1);
        Scheduler {
            key,
            modes: vec![SlotMode::ReadOnly; slots],
            at_index,
            lone: true,
            n,
            shared: vec![false; n],
            tasks: Arc::new(tasks),
            masks: vec![Vec::new(); slots],
            marked: Vec::new(),
            nbr_round: vec![u64::MAX; n],
            nbr_mask: vec![0; n],
            round: Vec::new(),
            members: Vec::new(),
            load: Vec::new(),
            filling: 0,
            groups: Vec::new(),
            seen: vec![u64::MAX; n],
            rounds: 0,
            prio: Weights::new(n),
            swept: false,
            eta: match config.eta {
                Some(eta) => Eta::Fixed(eta),
                None => Eta::Share(DEFAULT_ETA_SHARE),
            },
            cursor: 0,
            deferred: Default::default(),
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            batch: Vec::new(),
            queue: Default::default(),
            drew: vec![u64::MAX; n],
            draws: 0,
            drawn: Vec::new(),
            bits: vec![0; n.div_ceil(64)],
        }
    }

    /// Chooses the next round of at most `want` tasks, in `groups` groups (one per
    /// worker), into `self.round` and `self.groups`; returns the number of candidates it
    /// left out for depending on two groups (or on a full one).
    ///
    /// A candidate that depends on tasks of one group joins that group (whose tasks run
    /// in order on one worker); one that depends on none joins the least loaded group.
    /// With one group nothing can conflict, so no candidate is tested.
    pub fn choose(&mut self, want: usize, groups: usize, config: &Config) -> u64 {
        let groups = groups.clamp(1, 64);
        self.round.clear();
        self.members.iter_mut().for_each(Vec::clear);
        self.members.resize_with(groups, Vec::new);
        self.members.truncate(groups);
        self.load.clear();
        self.load.resize(groups, 0);
        self.rounds += 1;
        let want = want.min(self.n);
        // A group may hold somewhat more than its share, for tasks that must join it.
        let share = want.div_ceil(groups);
        let cap = (share * 3).div_ceil(2);
        self.filling = 0;
        let limit = want.saturating_mul(config.candidates).max(want);
        let in_order = match &config.priority.kind {
            PriorityKind::Cyclic => Some(true),
            PriorityKind::Uniform => None,
            // The first sweep runs in order, once.
            PriorityKind::Change { .. } => (!self.swept).then_some(false),
        };
        let mut deferred = 0u64;
        let mut considered = 0usize;
        let mut taken = 0usize;
        let mut batch = std::mem::take(&mut self.batch);
        // Tasks a round set aside go first in the next.
        let mut first = true;
        while taken < want && considered < limit {
            batch.clear();
            let more = (want - taken).min(limit - considered);
            if first {
                take_unseen(
                    &mut self.deferred,
                    &mut self.seen,
                    self.rounds,
                    &mut batch,
                    more,
                );
                first = false;
            }
            let from = batch.len();
            match in_order {
                Some(wraps) => {
                    while batch.len() < more {
                        if !wraps && self.cursor >= self.n {
                            break;
                        }
                        let t = (self.cursor % self.n) as u32;
                        if self.seen[t as usize] == self.rounds {
                            // Met again within the round (a short range): next round.
                            break;
                        }
                        self.cursor = match wraps {
                            true => (self.cursor + 1) % self.n,
                            false => self.cursor + 1,
                        };
                        self.seen[t as usize] = self.rounds;
                        batch.push(t);
                    }
                }
                None => {
                    self.draw_by_priority(&mut batch, from, more, groups, config);
                    // In index order: neighbours (often dependent) fill one group, and
                    // tables laid out by index are read with fewer cache misses.
                    sort_distinct(&mut batch[from..], &mut self.bits);
                }
            }
            if batch.is_empty() {
                break;
            }
            for &t in &batch {
                considered += 1;
                let group = match groups {
                    1 => Some(0),
                    _ => self.group_for(t, &config.depends, share, cap),
                };
                match group {
                    Some(g) => {
                        self.filling = g;
                        self.take(t, g, groups > 1, &config.depends);
                        taken += 1;
                    }
                    None => {
                        // Set aside for the next round, which takes it first (as STRADS
                        // does).
                        deferred += 1;
                        self.deferred.push_back(t);
                    }
                }
            }
        }
        self.batch = batch;
        self.clear_marks();
        self.groups.clear();
        for m in &mut self.members {
            // In index order: tables laid out by index are read with fewer cache misses.
            if !m.is_sorted() {
                sort_distinct(m, &mut self.bits);
            }
            let from = self.round.len();
            self.round.extend_from_slice(m);
            self.groups.push(from..self.round.len());
        }
        deferred
    }

    /// Adds candidates drawn by priority to `batch` (which holds `from` of the round's
    /// candidates so far) until it holds `more`, or fewer if the draw gives fewer.
    fn draw_by_priority(
        &mut self,
        batch: &mut Vec<u32>,
        from: usize,
        more: usize,
        groups: usize,
        config: &Config,
    ) {
        let eta = match &config.priority.kind {
            PriorityKind::Uniform => Eta::Uniform,
            _ => self.eta,
        };
        let need = more - from;
        if groups == 1 {
            // One worker: the round's draw is no time others wait for.
            self.prio
                .draw(need, eta, &mut self.rng, &mut self.seen, self.rounds, batch);
        } else if self.queue.len() < need {
            // A draw costs a pass over the indices with a priority, time the
            // other workers wait: draw for several rounds at once when they
            // are many (the later rounds use priorities a few rounds old, as
            // STRADS's pipelined scheduler does), in random order.
            let target = need.max(self.prio.listed.len() / DRAW_SPAN);
            self.draws += 1;
            // Not the round's tasks so far, nor those waiting in the queue.
            let draw = self.draws;
            let taken = self.members.iter().flatten().chain(&batch[..from]);
            for &t in taken.chain(&self.queue) {
                self.drew[t as usize] = draw;
            }
            let mut drawn = std::mem::take(&mut self.drawn);
            drawn.clear();
            self.prio.draw(
                target,
                eta,
                &mut self.rng,
                &mut self.drew,
                self.draws,
                &mut drawn,
            );
            drawn.shuffle(&mut self.rng);
            self.queue.extend(drawn.iter().copied());
            self.drawn = drawn;
        }
        take_unseen(&mut self.queue, &mut self.seen, self.rounds, batch, more);
    }

    /// The group candidate `t` must join, or `None` when it depends on two groups or on a
    /// full one.
    fn group_for(&self, t: u32, depends: &Depends, share: usize, cap: usize) -> Option<usize> {
        let mut hard = 0u64;
        if self.shared[t as usize] {
            for &k in self.tasks.hard(t) {
                let (slot, key) = split(k);
                hard |= self.masks[slot][key];
            }
        }
        let soft = match &depends.kind {
            DependsKind::None => 0,
            DependsKind::Overlap(threshold) => {
                let keys = self.tasks.soft(t);
                let mut shared = [0u32; 64];
                for &k in keys {
                    let (slot, key) = split(k);
                    let mut bits = self.masks[slot][key];
                    while bits != 0 {
                        shared[bits.trailing_zeros() as usize] += 1;
                        bits &= bits - 1;
                    }
                }
                let need = threshold * keys.len() as f64;
                (0..self.members.len())
                    .filter(|&g| shared[g] > 0 && f64::from(shared[g]) >= need)
                    .fold(0u64, |m, g| m | 1 << g)
            }
            DependsKind::By(f) => {
                let j = t as usize;
                (0..self.members.len())
                    .filter(|&g| self.members[g].iter().any(|&o| f(j, o as usize)))
                    .fold(0u64, |m, g| m | 1 << g)
            }
            DependsKind::Graph(_) => match self.nbr_round[t as usize] == self.rounds {
                true => self.nbr_mask[t as usize],
                false => 0,
            },
        };
        let deps = hard | soft;
        let g = match deps.count_ones() {
            // Free: the group being filled, while it holds less than its share (so that
            // consecutive candidates, consecutive indices in order, stay together).
            0 if self.members[self.filling].len() < share => self.filling,
            0 => (0..self.members.len()).min_by_key(|&g| self.load[g])?,
            1 => deps.trailing_zeros() as usize,
            _ => return None,
        };
        (self.members[g].len() < cap).then_some(g)
    }

    /// Takes `t` into group `g` of the round.
    fn take(&mut self, t: u32, g: usize, mark: bool, depends: &Depends) {
        self.members[g].push(t);
        let tasks = &self.tasks;
        let (from, to) = (tasks.offsets[t as usize], tasks.offsets[t as usize + 1]);
        self.load[g] += to - from + 1;
        if !mark {
            return;
        }
        // No other task looks up unshared keys, and elements of relaxed tables matter to
        // the overlap test only: a task with neither marks nothing (and its `splits`
        // entry, a cache miss, is not read).
        let shared = self.shared[t as usize];
        let overlap = matches!(depends.kind, DependsKind::Overlap(_));
        let (from, to) = match (shared, overlap) {
            (false, false) => (0, 0),
            (true, true) => (from, to),
            (true, false) => (from, tasks.splits[t as usize]),
            (false, true) => (tasks.splits[t as usize], to),
        };
        for i in from..to {
            let k = tasks.keys[i];
            let (slot, key) = split(k);
            let m = &mut self.masks[slot][key];
            if *m == 0 {
                self.marked.push(k);
            }
            *m |= 1 << g;
        }
        if let DependsKind::Graph(adj) = &depends.kind {
            for &o in adj.get(t as usize).map_or(&[][..], Vec::as_slice) {
                let o = o as usize;
                if o < self.n {
                    if self.nbr_round[o] != self.rounds {
                        self.nbr_round[o] = self.rounds;
                        self.nbr_mask[o] = 0;
                    }
                    self.nbr_mask[o] |= 1 << g;
                }
            }
        }
    }

    fn clear_marks(&mut self) {
        for &k in &self.marked {
            let (slot, key) = split(k);
            self.masks[slot][key] = 0;
        }
        self.marked.clear();
    }

    /// The keys of relaxed tables task `t` touches: `(slot, key)`.
    pub fn relaxed_keys(&self, t: u32) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.tasks.soft(t).iter().map(|&k| split(k))
    }

    /// The number of relaxed-table keys the round's tasks touch, counted once per task.
    pub fn round_relaxed_keys(&self) -> usize {
        self.round.iter().map(|&t| self.tasks.soft(t).len()).sum()
    }

    /// The keys of written (non-relaxed) tables task `t` touches: `(slot, key)`.
    pub fn checked_keys(&self, t: u32) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.tasks.checked_keys(t)
    }

    /// After a round: task `round[i]` changed the priority table from `before[i]` to
    /// `after[i]`.
    pub fn update(&mut self, round: &[u32], before: &[f64], after: &[f64], config: &Config) {
        let PriorityKind::Change { score, .. } = &config.priority.kind else {
            return;
        };
        for (i, &t) in round.iter().enumerate() {
            let (b, a) = (before[i], after[i]);
            let w = match score {
                Some(f) => f(t as usize, b, a),
                None => (a - b) * (a - b),
            };
            let w = if w.is_finite() { w.max(0.0) } else { 0.0 };
            self.prio.set(t as usize, w);
        }
        if !self.swept && self.cursor >= self.n && self.deferred.is_empty() {
            self.swept = true;
        }
    }
}

/// Per task of a dynamic loop, the elements of written and relaxed tables it touches,
/// from reconnaissance: `(slot << 48) | key`; task `t`'s are
/// `keys[offsets[t]..offsets[t + 1]]`, those of written tables first (up to `splits[t]`),
/// each part sorted.
pub(crate) struct TaskKeys {
    offsets: Vec<usize>,
    splits: Vec<usize>,
    keys: Vec<u64>,
    /// When every task's written-table elements are exactly its own index (the range's
    /// start plus the task) in the same slots (Lasso's `beta[j]`): the start and those
    /// slots, so that workers stamp a task's keys without looking them up.
    own: Option<(usize, Vec<usize>)>,
}

impl TaskKeys {
    /// The keys of tasks whose range starts at `start`, finding [`TaskKeys::own`].
    fn new(offsets: Vec<usize>, splits: Vec<usize>, keys: Vec<u64>, start: usize) -> Self {
        let mut k = TaskKeys {
            offsets,
            splits,
            keys,
            own: None,
        };
        k.own = k.own_slots(start).map(|slots| (start, slots));
        k
    }

    /// The slots every task `t` writes at exactly element `start + t` and nowhere else
    /// (at least one slot), if there are such.
    fn own_slots(&self, start: usize) -> Option<Vec<usize>> {
        let n = self.splits.len() as u32;
        let slots: Vec<usize> = (n > 0)
            .then(|| self.hard(0))?
            .iter()
            .map(|&k| split(k).0)
            .collect();
        let own = |t: u32| {
            let hard = self.hard(t);
            hard.len() == slots.len()
                && (hard.iter().zip(&slots)).all(|(&k, &s)| split(k) == (s, start + t as usize))
        };
        (!slots.is_empty() && (0..n).all(own)).then_some(slots)
    }

    /// Task `t`'s elements of written tables.
    fn hard(&self, t: u32) -> &[u64] {
        &self.keys[self.offsets[t as usize]..self.splits[t as usize]]
    }

    /// Task `t`'s elements of relaxed tables.
    fn soft(&self, t: u32) -> &[u64] {
        &self.keys[self.splits[t as usize]..self.offsets[t as usize + 1]]
    }

    /// The keys of written (non-relaxed) tables task `t` touches: `(slot, key)`.
    pub fn checked_keys(&self, t: u32) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.hard(t).iter().map(|&k| split(k))
    }

    /// When every task writes exactly its own index of the same tables: the range's start
    /// and those slots (task `t`'s keys are `(slot, start + t)`, found without a lookup).
    pub fn own_index(&self) -> Option<(usize, &[usize])> {
        self.own.as_ref().map(|(start, slots)| (*start, &slots[..]))
    }
}

/// Sorts `v`, whose values are distinct and below `64 × bits.len()`: through the bitmap
/// `bits` (left clear) when `v` holds at least one value per 64 bits' word, which costs a
/// pass over the bitmap and one bit per value rather than a comparison sort; by
/// comparison otherwise.
fn sort_distinct(v: &mut [u32], bits: &mut [u64]) {
    if v.len() < bits.len() {
        v.sort_unstable();
        return;
    }
    for &i in v.iter() {
        bits[i as usize / 64] |= 1 << (i % 64);
    }
    let mut out = 0;
    for (w, word) in bits.iter_mut().enumerate() {
        let mut b = std::mem::take(word);
        while b != 0 {
            v[out] = (w * 64) as u32 + b.trailing_zeros();
            out += 1;
            b &= b - 1;
        }
    }
    debug_assert_eq!(out, v.len(), "sort_distinct needs distinct values");
}

/// Moves tasks from the front of `from` into `batch` until it holds `more`, dropping those
/// already `seen` in this `round` and marking the others.
fn take_unseen(
    from: &mut std::collections::VecDeque<u32>,
    seen: &mut [u64],
    round: u64,
    batch: &mut Vec<u32>,
    more: usize,
) {
    while batch.len() < more {
        let Some(t) = from.pop_front() else {
            break;
        };
        if seen[t as usize] != round {
            seen[t as usize] = round;
            batch.push(t);
        }
    }
}

/// Per index a score ≥ 0 (its weight is score + η), with the indices of positive score
/// listed, so that a whole round is drawn at once at a cost that grows with the listed
/// indices and the round, not with the range.
struct Weights {
    score: Vec<f64>,
    /// Where each index is in `listed` (`NOT_LISTED` for a score of 0).
    at: Vec<u32>,
    listed: Vec<u32>,
}

const NOT_LISTED: u32 = u32::MAX;

/// How the weight η of indices whose last change was 0 is set.
#[derive(Clone, Copy, Debug)]
enum Eta {
    /// Every index weighs the same.
    Uniform,
    /// [`Dynamic::eta`].
    Fixed(f64),
    /// This share of the mean score, round by round.
    Share(f64),
}

/// η by default, as a share of the mean score: indices whose last change was 0 keep a
/// tenth of the mean weight, so about one draw in eleven explores.
const DEFAULT_ETA_SHARE: f64 = 0.1;

impl Weights {
    fn new(n: usize) -> Self {
        Weights {
            score: vec![0.0; n],
            at: vec![NOT_LISTED; n],
            listed: Vec::new(),
        }
    }

    fn set(&mut self, i: usize, score: f64) {
        self.score[i] = score;
        match (score > 0.0, self.at[i]) {
            (true, NOT_LISTED) => {
                self.at[i] = self.listed.len() as u32;
                self.listed.push(i as u32);
            }
            (false, at) if at != NOT_LISTED => {
                let last = *self.listed.last().expect("listed");
                self.listed.swap_remove(at as usize);
                if last as usize != i {
                    self.at[last as usize] = at;
                }
                self.at[i] = NOT_LISTED;
            }
            _ => {}
        }
    }

    /// Draws about `m` indices not yet `seen` in this `round` (marking them): index `i`
    /// with probability `min(1, m wᵢ / W)` of its weight `wᵢ = scoreᵢ + η` over the total
    /// `W`, as if `m` indices were drawn in proportion to weight and repeats dropped.
    /// Listed indices are drawn systematically (one random offset), the others (weight
    /// η) uniformly.
    fn draw(
        &self,
        m: usize,
        eta: Eta,
        rng: &mut ChaCha8Rng,
        seen: &mut [u64],
        round: u64,
        out: &mut Vec<u32>,
    ) {
        let n = self.score.len();
        if m == 0 || n == 0 {
            return;
        }
        let fresh = |i: u32, seen: &[u64]| seen[i as usize] != round;
        let (listed, scores): (&[u32], f64) = match eta {
            Eta::Uniform => (&[], 0.0),
            _ => (
                &self.listed,
                self.listed
                    .iter()
                    .filter(|&&i| fresh(i, seen))
                    .map(|&i| self.score[i as usize])
                    .sum(),
            ),
        };
        let unlisted = n - listed.len();
        let eta = match eta {
            Eta::Uniform => 1.0,
            Eta::Fixed(eta) => eta,
            Eta::Share(share) => share * scores / n as f64,
        };
        let total = scores + eta * n as f64;
        if !(total > 0.0 && total.is_finite()) {
            // Every weight is 0 (or one is not finite): uniform.
            return Self::draw_uniform(n, m, rng, seen, round, out, |_| true);
        }
        let scale = m as f64 / total;
        // Listed indices, systematically: one offset, then every time the running sum of
        // probabilities passes an integer.
        let mut acc: f64 = rng.gen();
        for &i in listed {
            if fresh(i, seen) {
                acc += ((eta + self.score[i as usize]) * scale).min(1.0);
                if acc >= 1.0 {
                    acc -= 1.0;
                    seen[i as usize] = round;
                    out.push(i);
                }
            }
        }
        // Unlisted indices: each with probability η m / W.
        let expect = unlisted as f64 * (eta * scale).min(1.0);
        let mut k = expect.floor() as usize;
        if rng.gen::<f64>() < expect - k as f64 {
            k += 1;
        }
        let at = &self.at;
        let all = listed.is_empty();
        Self::draw_uniform(unlisted, k, rng, seen, round, out, |i| {
            all || at[i] == NOT_LISTED
        });
    }

    /// Draws `k` of the `pool` indices `i < n` for which `eligible(i)` holds, not yet
    /// seen in this round, uniformly (marking them).
    fn draw_uniform(
        pool: usize,
        k: usize,
        rng: &mut ChaCha8Rng,
        seen: &mut [u64],
        round: u64,
        out: &mut Vec<u32>,
        eligible: impl Fn(usize) -> bool,
    ) {
        let n = seen.len();
        if k == 0 || pool == 0 {
            return;
        }
        let fresh = |i: usize, seen: &[u64]| seen[i] != round && eligible(i);
        if k * 4 <= pool {
            // Few: draw and reject the ineligible or seen (bounded tries).
            let (mut got, mut tries) = (0, 0usize);
            while got < k && tries < 64 * k + 1024 {
                tries += 1;
                let i = rng.gen_range(0..n);
                if fresh(i, seen) {
                    seen[i] = round;
                    out.push(i as u32);
                    got += 1;
                }
            }
        } else {
            // Many: one pass, systematically.
            let p = (k as f64 / pool as f64).min(1.0);
            let mut acc: f64 = rng.gen();
            for i in 0..n {
                if fresh(i, seen) {
                    acc += p;
                    if acc >= 1.0 {
                        acc -= 1.0;
                        seen[i] = round;
                        out.push(i as u32);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw_many(w: &Weights, m: usize, eta: Eta, times: usize) -> (Vec<usize>, usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut seen = vec![u64::MAX; w.score.len()];
        let mut counts = vec![0usize; w.score.len()];
        let mut out = Vec::new();
        let mut drawn = 0;
        for round in 0..times as u64 {
            out.clear();
            w.draw(m, eta, &mut rng, &mut seen, round, &mut out);
            let mut sorted = out.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), out.len(), "an index drawn twice in one round");
            drawn += out.len();
            for &i in &out {
                counts[i as usize] += 1;
            }
        }
        (counts, drawn)
    }

    #[test]
    fn draws_follow_the_weights_and_heavy_indices_are_certain() {
        // 1000 indices of weight η = 1 but one of 500 (certain in a round of 10) and one
        // of 2: W = 1500, so each index i is drawn with probability min(1, 10 wᵢ / 1500).
        let mut w = Weights::new(1000);
        w.set(3, 499.0);
        w.set(7, 1.0);
        w.set(9, 5.0);
        w.set(9, 0.0); // unlisted again
        let times = 20_000;
        let (counts, drawn) = draw_many(&w, 10, Eta::Fixed(1.0), times);
        assert_eq!(counts[3], times, "the heavy index is in every round");
        let per_round = drawn as f64 / times as f64;
        let expect = 1.0 + 20.0 / 1500.0 + 998.0 * 10.0 / 1500.0;
        assert!(
            (per_round - expect).abs() < 0.05,
            "{per_round} per round, not {expect}"
        );
        let light: f64 = counts
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 3 && i != 7)
            .map(|(_, &c)| c as f64)
            .sum::<f64>()
            / 998.0;
        assert!(
            (light / times as f64 - 10.0 / 1500.0).abs() < 0.0005,
            "{light}"
        );
        let ratio = counts[7] as f64 / light;
        assert!(
            (ratio - 2.0).abs() < 0.5,
            "weight 2 drawn {ratio}× as often as weight 1"
        );
    }

    #[test]
    fn uniform_draws_cover_the_range_evenly_and_whole_rounds_take_everything() {
        let w = Weights::new(100);
        let (counts, drawn) = draw_many(&w, 30, Eta::Uniform, 2000);
        assert!((drawn as f64 / 2000.0 - 30.0).abs() < 0.5);
        assert!(
            counts.iter().all(|&c| (450..750).contains(&c)),
            "{counts:?}"
        );
        let (counts, _) = draw_many(&w, 100, Eta::Fixed(1e-3), 3);
        assert!(counts.iter().all(|&c| c == 3), "{counts:?}");
    }

    #[test]
    fn with_eta_zero_only_listed_indices_are_drawn() {
        let mut w = Weights::new(50);
        for i in [1, 4, 9] {
            w.set(i, 1.0);
        }
        let (counts, _) = draw_many(&w, 10, Eta::Fixed(0.0), 10);
        for (i, c) in counts.iter().enumerate() {
            assert_eq!(*c, if [1, 4, 9].contains(&i) { 10 } else { 0 }, "{i}");
        }
    }

    #[test]
    fn tasks_keys_split_into_written_and_relaxed_and_at_index_tables_are_found() {
        use crate::recon::Access;
        // Lasso's shape from index 10 on: x (0) and beta (2) at j, the relaxed residual (3)
        // at rows; norm (1) at j for all but one task, and a written table (4) at a key
        // that is not j.
        let log = AccessLog::from_tasks((0..6u64).map(|t| {
            let j = 10 + t;
            let mut a = vec![
                Access::new(0, j, false),
                Access::new(2, j, true),
                Access::new(3, t % 3, true),
                Access::new(4, 100 + j, true),
            ];
            if t != 4 {
                a.push(Access::new(1, j, false));
            }
            a
        }));
        let modes = vec![
            SlotMode::ReadOnly,
            SlotMode::ReadOnly,
            SlotMode::Checked,
            SlotMode::Relaxed,
            SlotMode::Checked,
        ];
        let lens = [16, 16, 16, 3, 200];
        let config = Dynamic::new(Priority::cyclic()).config;
        let s = Scheduler::new((0, 10, 6, Vec::new()), &log, modes, &lens, &config);
        // Not norm (one task skips it), not the relaxed residual, not table 4.
        assert_eq!(s.at_index, vec![0, 2]);
        // Each task's written keys (slots 2 and 4, around the relaxed slot 3 in the log's
        // order) and then its relaxed ones; read-only tables in neither.
        for t in 0..6u32 {
            let j = 10 + t as usize;
            let checked: Vec<_> = s.checked_keys(t).collect();
            assert_eq!(checked, [(2, j), (4, 100 + j)], "task {t}");
            let relaxed: Vec<_> = s.relaxed_keys(t).collect();
            assert_eq!(relaxed, [(3, t as usize % 3)], "task {t}");
        }
        // Table 4 is written away from the index: keys are looked up per task.
        assert!(s.tasks.own_index().is_none());
    }

    #[test]
    fn tasks_writing_only_their_own_index_are_stamped_without_a_lookup() {
        use crate::recon::Access;
        let log_of = |skip: Option<u64>| {
            AccessLog::from_tasks((0..5u64).map(move |t| {
                let j = 7 + t;
                let mut a = vec![Access::new(0, j, false), Access::new(2, t % 2, true)];
                if skip != Some(t) {
                    a.push(Access::new(1, j, true));
                }
                a
            }))
        };
        let modes = vec![SlotMode::ReadOnly, SlotMode::Checked, SlotMode::Relaxed];
        let lens = [12, 12, 2];
        let config = Dynamic::new(Priority::cyclic()).config;
        let key = || (0, 7, 5, Vec::new());
        let s = Scheduler::new(key(), &log_of(None), modes.clone(), &lens, &config);
        assert_eq!(s.tasks.own_index(), Some((7, &[1usize][..])));
        for t in 0..5u32 {
            let checked: Vec<_> = s.checked_keys(t).collect();
            assert_eq!(checked, [(1, 7 + t as usize)]);
        }
        // One task that writes nothing of table 1: its keys must be looked up.
        let s = Scheduler::new(key(), &log_of(Some(3)), modes, &lens, &config);
        assert!(s.tasks.own_index().is_none());
    }

    #[test]
    fn distinct_values_sort_alike_through_the_bitmap_and_by_comparison() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (n, k) in [
            (1000usize, 10usize),
            (1000, 600),
            (64, 64),
            (100_000, 12_500),
        ] {
            let mut all: Vec<u32> = (0..n as u32).collect();
            all.shuffle(&mut rng);
            let mut v = all[..k].to_vec();
            let mut expected = v.clone();
            expected.sort_unstable();
            let mut bits = vec![0u64; n.div_ceil(64)];
            sort_distinct(&mut v, &mut bits);
            assert_eq!(v, expected, "{n} {k}");
            assert!(bits.iter().all(|&b| b == 0), "the bitmap is left clear");
        }
    }

    #[test]
    fn rounds_take_an_eighth_of_a_long_range_and_at_least_each_workers_share() {
        assert_eq!(default_round(1, 100_000), 12_500);
        assert_eq!(default_round(2, 100_000), 12_500);
        assert_eq!(default_round(1, 2_000), DEFAULT_ROUND_PER_WORKER);
        assert_eq!(default_round(2, 8_000), 2 * DEFAULT_ROUND_PER_WORKER);
        assert_eq!(default_round(4, 10), 4 * DEFAULT_ROUND_PER_WORKER);
    }
}
