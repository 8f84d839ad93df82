//! Progress bars for long loop calls and long reads, on the driver's terminal.
//!
//! A call or read that runs longer than [`SHOW_AFTER`] gets an `indicatif` bar on stderr,
//! cleared when it ends; shorter ones show nothing. Bars are shown only when all of these
//! hold ([`wanted`]): stderr is a terminal, this is the driver (rank 0), the thread is not
//! a test's (libtest names its threads after the tests; a program's loops run on `main`
//! or an unnamed thread), `CI` is not set, `STRADS_PROGRESS` is not `0`, and the call's
//! [`Opts::progress`](crate::Opts::progress) is not `false`.
//!
//! Workers count what they have done in their own counters (one cache line each, so that
//! counting costs a few nanoseconds per unit of work and no sharing). One ticker thread
//! per process, started with the first bar and asleep while no bar is on, adds them up
//! ten times a second and draws: starting and ending a bar costs a call no thread. Loop calls count indices (`async_for!`) or
//! data items (`sync_for!`) as units of work start; reads count bytes.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::sync::{Condvar, Mutex, RwLock};

/// How long work runs before its bar appears.
pub(crate) const SHOW_AFTER: Duration = Duration::from_secs(1);

/// How often the bars are redrawn.
const TICK: Duration = Duration::from_millis(100);

/// One worker's count, alone on its cache line.
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct Slot(AtomicU64);

impl Slot {
    /// Counts `n` more units done.
    #[inline]
    pub(crate) fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One bar, as the ticker and the workers share it.
struct Shared {
    what: String,
    total: Option<u64>,
    units: Units,
    started: Instant,
    /// Where the bar is drawn once shown.
    target: fn() -> ProgressDrawTarget,
    /// The count of work done outside workers' contexts (reads, reconnaissance chunks).
    own: Slot,
    /// Workers' counts (see [`worker_slot`]).
    workers: Mutex<Vec<Arc<Slot>>>,
    /// The bar once shown; `Err(())` once the work has ended (no bar is drawn after).
    bar: Mutex<Result<Option<ProgressBar>, ()>>,
}

impl Shared {
    fn done(&self) -> u64 {
        self.own.get() + self.workers.lock().iter().map(|s| s.get()).sum::<u64>()
    }

    /// Draws the bar if it has been on for `show_after`: made the first time, then moved.
    fn draw(&self, show_after: Duration) {
        if self.started.elapsed() < show_after {
            return;
        }
        let done = self.done();
        let mut bar = self.bar.lock();
        let Ok(bar) = &mut *bar else {
            return;
        };
        let bar =
            bar.get_or_insert_with(|| new_bar(&self.what, self.total, self.units, (self.target)()));
        bar.set_position(self.total.map_or(done, |t| done.min(t)));
    }
}

/// The progress of the loop call running on this process, for workers' contexts to count
/// into ([`worker_slot`]).
static CURRENT: RwLock<Option<Arc<Shared>>> = RwLock::new(None);

/// The bars on now, for the ticker, and what wakes it when the first is added.
static ON: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
static TICKER: OnceLock<()> = OnceLock::new();

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Units {
    /// Loop indices or data items.
    Items,
    /// Bytes of input.
    Bytes,
}

/// The bar of one loop call or read; dropping it clears the bar.
pub(crate) struct Progress {
    shared: Arc<Shared>,
    /// Whether workers' contexts count into this bar (loop calls).
    current: bool,
}

/// Whether progress should be shown, from the facts [`Progress::start`] looks up: `opt`
/// (the call's `Opts::progress`), the `STRADS_PROGRESS` and `CI` variables, the rank,
/// whether stderr is a terminal, and the current thread's name.
pub(crate) fn wanted(
    opt: Option<bool>,
    env: Option<&str>,
    ci: bool,
    rank: usize,
    terminal: bool,
    thread: Option<&str>,
) -> bool {
    let env_off = env.is_some_and(|v| matches!(v.trim(), "0" | "off" | "false" | "no"));
    let test_thread = thread.is_some_and(|name| name != "main");
    opt != Some(false) && !env_off && !ci && rank == 0 && terminal && !test_thread
}

impl Progress {
    /// A bar for work of `total` units (`None`: unknown, a spinner) described by `what`,
    /// shown after [`SHOW_AFTER`] if [`wanted`]; `current` makes workers' contexts made
    /// from now on count into it. `None` when no bar is wanted. `what` is formatted only
    /// for a bar: every loop call asks, and most get none.
    pub(crate) fn start(
        what: &dyn std::fmt::Display,
        total: Option<u64>,
        units: Units,
        opt: Option<bool>,
        rank: usize,
        current: bool,
    ) -> Option<Progress> {
        // The process's facts, looked up once: a call pays no system call for them.
        static PROCESS: OnceLock<(Option<String>, bool, bool)> = OnceLock::new();
        let (env, ci, terminal) = PROCESS.get_or_init(|| {
            (
                std::env::var(crate::cluster::env::PROGRESS).ok(),
                std::env::var_os("CI").is_some(),
                std::io::stderr().is_terminal(),
            )
        });
        let show = wanted(
            opt,
            env.as_deref(),
            *ci,
            rank,
            *terminal,
            std::thread::current().name(),
        );
        show.then(|| {
            let what = what.to_string();
            let p = Progress::new(what, total, units, current, ProgressDrawTarget::stderr);
            TICKER.get_or_init(|| {
                // Without a ticker no bar is drawn; the work itself goes on.
                let _ = std::thread::Builder::new()
                    .name("strads-progress".into())
                    .spawn(ticker);
            });
            ON.lock().push(Arc::downgrade(&p.shared));
            WAKE.notify_all();
            p
        })
    }

    /// The bar, drawn on the target `target()` makes once it is shown (by the ticker,
    /// once [`start`](Self::start) has handed it over).
    fn new(
        what: String,
        total: Option<u64>,
        units: Units,
        current: bool,
        target: fn() -> ProgressDrawTarget,
    ) -> Progress {
        let shared = Arc::new(Shared {
            what,
            total,
            units,
            started: Instant::now(),
            target,
            own: Slot::default(),
            workers: Mutex::new(Vec::new()),
            bar: Mutex::new(Ok(None)),
        });
        if current {
            *CURRENT.write() = Some(shared.clone());
        }
        Progress { shared, current }
    }

    /// Counts `n` more units done outside workers' contexts.
    pub(crate) fn add(&self, n: usize) {
        self.shared.own.add(n);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.current {
            *CURRENT.write() = None;
        }
        // Ended: the ticker draws it no more (the lock waits for a draw under way).
        let bar = std::mem::replace(&mut *self.shared.bar.lock(), Err(()));
        if let Ok(Some(bar)) = bar {
            bar.finish_and_clear();
        }
    }
}

/// The ticker thread: asleep while no bar is on, else draws the bars every [`TICK`].
fn ticker() {
    let mut on = ON.lock();
    loop {
        on.retain(|s| s.strong_count() > 0);
        if on.is_empty() {
            on = WAKE.wait(on);
            continue;
        }
        let bars: Vec<Arc<Shared>> = on.iter().filter_map(Weak::upgrade).collect();
        drop(on);
        for shared in &bars {
            shared.draw(SHOW_AFTER);
        }
        drop(bars);
        std::thread::sleep(TICK);
        on = ON.lock();
    }
}

/// The bar of a loop call at `site` (shown as `async_for! at src/main.rs:12:5`) over
/// `total` units of work: the whole count in a world of one, a spinner counting this
/// rank's share across ranks (or when `total` is `None`).
pub(crate) fn for_call(
    site: &dyn std::fmt::Display,
    total: Option<usize>,
    (rank, world): (usize, usize),
    opt: Option<bool>,
) -> Option<Progress> {
    let total = total.filter(|_| world == 1).map(|t| t as u64);
    Progress::start(site, total, Units::Items, opt, rank, true)
}

/// Counts `n` units done into the current loop call's bar, if one is on: for large pieces
/// of work (a chunk of reconnaissance), where a shared counter costs nothing.
pub(crate) fn count(n: usize) {
    if let Some(shared) = CURRENT.read().as_ref() {
        shared.own.add(n);
    }
}

/// A counter for a worker's context made now: `Some` while a loop call's bar is on.
pub(crate) fn worker_slot() -> Option<Arc<Slot>> {
    let current = CURRENT.read();
    let shared = current.as_ref()?;
    let slot = Arc::new(Slot::default());
    shared.workers.lock().push(slot.clone());
    Some(slot)
}

fn new_bar(
    what: &str,
    total: Option<u64>,
    units: Units,
    target: ProgressDrawTarget,
) -> ProgressBar {
    // Loop calls count in jumps (a recorded first call counts its chunks as they start),
    // so a rate of items would mislead; bytes of a read move smoothly.
    let (done, of, rate) = match units {
        Units::Items => ("{human_pos}", "{human_len}", ""),
        Units::Bytes => ("{bytes}", "{total_bytes}", ", {bytes_per_sec}"),
    };
    let template = match total {
        Some(_) => format!("{{msg}} [{{bar:30}}] {done}/{of}{rate}, {{eta}} left"),
        None => format!("{{msg}} {{spinner}} {done}"),
    };
    let bar = ProgressBar::with_draw_target(total, target);
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_only_on_the_drivers_terminal_outside_tests_and_ci() {
        let main = Some("main");
        assert!(wanted(None, None, false, 0, true, main));
        assert!(wanted(Some(true), Some("1"), false, 0, true, None));
        // Each condition alone turns it off.
        assert!(!wanted(Some(false), None, false, 0, true, main));
        assert!(!wanted(None, Some("0"), false, 0, true, main));
        assert!(!wanted(None, Some(" off "), false, 0, true, main));
        assert!(!wanted(None, None, true, 0, true, main));
        assert!(!wanted(None, None, false, 1, true, main));
        assert!(!wanted(None, None, false, 0, false, main));
        assert!(!wanted(None, None, false, 0, true, Some("tests::a_test")));
    }

    #[test]
    fn this_test_gets_no_bar() {
        // A test thread is named after the test, and the test's stderr is captured.
        assert!(Progress::start(&"x", Some(1), Units::Items, None, 0, false).is_none());
    }

    /// The bar's position (`None`: not drawn).
    fn position(p: &Progress) -> Option<u64> {
        match &*p.shared.bar.lock() {
            Ok(bar) => bar.as_ref().map(ProgressBar::position),
            Err(()) => None,
        }
    }

    #[test]
    fn workers_count_into_the_current_call_and_the_bar_shows_once_on_long_enough() {
        let p = Progress::new(
            "async_for! at here.rs:1".into(),
            Some(100),
            Units::Items,
            true,
            ProgressDrawTarget::hidden,
        );
        let a = worker_slot().expect("a slot while a call's bar is on");
        let b = worker_slot().expect("a slot while a call's bar is on");
        a.add(30);
        b.add(12);
        p.add(1);
        // Not yet on for SHOW_AFTER (an hour here): nothing drawn.
        p.shared.draw(Duration::from_secs(3600));
        assert_eq!(position(&p), None);
        // On long enough: drawn with what the workers and the call counted.
        p.shared.draw(Duration::ZERO);
        assert_eq!(position(&p), Some(43));
        // Never past the total.
        a.add(1000);
        p.shared.draw(Duration::ZERO);
        assert_eq!(position(&p), Some(100));
        let shared = p.shared.clone();
        drop(p);
        assert!(worker_slot().is_none(), "no counting once the call is over");
        shared.draw(Duration::ZERO);
        assert!(
            shared.bar.lock().is_err(),
            "an ended bar is not drawn again"
        );
    }
}
