//! Checkpoints after loop operators, and fast re-execution after a failure.
//!
//! Every `async_for!` and `sync_for!` call has a *sequence number* on its rank: the
//! number of loop calls so far, the same on every rank of a job since all ranks run the
//! same driver program. After every `every`-th call, each rank writes the tables the loops
//! changed since the last checkpoint (its own partitions) to
//! `DIR/ckpt-SEQ/rank-R-of-W.bin`, atomically (temporary file, fsync, rename) with a
//! CRC-32 checksum. The writing happens on a background thread while the program goes on:
//! readers of the tables are not held back, and a writer (the next loop, a driver `set`)
//! waits only until the checkpoint has its copy. At the next checkpoint (or at
//! [`crate::finish`]), once every rank's file is durable, rank 0 commits it by writing
//! `DIR/ckpt-SEQ/MANIFEST`, which lists for *every* table checkpointed so far the
//! checkpoint holding its latest state (so a manifest alone describes the whole state) and
//! each rank's checksum. Only the newest `keep` manifests are kept, with the files they
//! refer to.
//!
//! In *recovery* mode the program runs again from the top. The ranks agree on the newest
//! checkpoint whose files all verify (a torn or corrupted one is skipped with a warning).
//! Loop calls up to it are skipped; at each skipped call that has a committed manifest the
//! state it describes is loaded, so driver code between loops sees the values it saw the
//! first time, and the last skipped call leaves exactly the committed state. The first
//! call after it runs normally. Non-DDS variables (counters, hyper-parameters, RNGs in
//! driver code) are rebuilt by the replay itself.
//!
//! A job may recover with another number of ranks than made the checkpoint (a machine
//! lost for good). The manifest records a checksum per rank that wrote each file, so a
//! file's job size is known; a rank reads every part of a file written by a job of
//! another size, checks each, and takes its share (`Snapshot::restore_parts`: a DVector
//! its balanced range, a map each key's value from its old owner). Manifests written
//! after such a recovery refer to files of both sizes.
//!
//! *Input* DDSs — those made by [`crate::read_from_file`], `DVector::from_fn`, `from_vec`
//! and `load`, `DMap::from_pairs` and `load`, and `DMultiMap::from_pairs` — are
//! checkpointed once, at creation, to `DIR/input-N/rank-R-of-W.bin` (N counts these
//! operators, the same on every rank), keyed by the operator and its call site, and
//! committed with the next loop checkpoint. A replay does not run such an operator again:
//! it loads the DDS as it was made, so a replay neither re-parses the input nor depends on
//! the input file being unchanged (or there at all). A missing or corrupted input
//! checkpoint is not fatal: the operator runs again, with a warning.
//!
//! *Derived* DDSs — made by `DVector::map`, `filter` and `join`, and `DMap::map_values`
//! and `join` — are checkpointed the same way, once, when they are made, and loaded by a
//! replay. This matters for correctness, not only for speed: a replay skips loop calls
//! without always loading their state (only the newest `keep` checkpoints are kept), so
//! an operator run again between skipped calls would see parameters other than those it
//! saw the first time. A table changed in place by driver code (`transform`, `set`,
//! `DMap::insert`/`remove`, `DMultiMap::insert`) goes into the next loop checkpoint, as if
//! a loop had written it. Derived DDSs made inside a training loop add a file per call:
//! make them outside the loop where the program allows.
//!
//! *Durability.* A checkpoint is safe from the death of the process that wrote it as soon
//! as it is committed (the operating system has its bytes). Against a crash of the
//! machine itself, files are forced to disk (fsync) at most every
//! [`CheckpointConfig::sync_every`] (10 s by default; zero: every checkpoint), and always
//! at the end of the job; the newest such *synced* checkpoint is kept however many newer
//! ones there are. After a power loss, a checkpoint that had not reached the disk is torn
//! or missing, which its checksum reveals, and recovery falls back to an earlier one.
//! Syncing every checkpoint costs disk bandwidth: checkpointing SGDMF every epoch writes
//! about 200 MB/s, which the disk must absorb, where unsynced checkpoints pruned before
//! the kernel writes them back cost nothing but the copy.
//!
//! The launcher ↔ program contract is a few variables: `STRADS_CHECKPOINT_DIR` (enables
//! checkpoints), `STRADS_CHECKPOINT_EVERY`, `STRADS_CHECKPOINT_KEEP` and
//! `STRADS_CHECKPOINT_SYNC`, and `STRADS_RECOVER=1` for recovery mode (see
//! [`CheckpointConfig::from_env`]).
//!
//! *Layout.* [`CheckpointConfig`] and the [`mod@env`] names are in the leaf module
//! `checkpoint_config.rs` beside this directory (the job's `Config` holds one); the file
//! format (framing, checksums, manifests, paths) in `format.rs`; the background writer
//! and when to force files to disk in `writer.rs`; what the ranks agree on (where a
//! replay ends, which inputs load, that a manifest is durable, what to prune) in
//! `agree.rs`; a rank's state and the commit and replay protocol in `checkpointer.rs`;
//! fault injection for tests in `fault.rs`. This file is the facade the loop engines and
//! [`crate::init`] call; the DDS operators reach the checkpoints only through the hook
//! this file installs on the rank (`dds::persist`), so the DDS layer does not depend on
//! this module.

use std::sync::Arc;

use crate::cluster::collective::Comm;
use crate::dds::persist::{self, Input, Persist};
use crate::dds::table::TableHandle;
use crate::error::Result;
use crate::sync::Mutex;

mod agree;
mod checkpointer;
mod fault;
mod format;
mod writer;

pub use crate::checkpoint_config::{env, CheckpointConfig};
use checkpointer::{Checkpointer, Entry};

use crate::util::warn;

/// The checkpointer of this thread's rank, if checkpoints are on.
fn with<R>(f: impl FnOnce(&mut Checkpointer) -> R) -> Option<R> {
    let here = crate::cluster::here();
    let slot = here.local::<Slot>();
    let mut slot = slot.lock();
    slot.as_mut().map(f)
}

/// Turns checkpoints on (or off, with `None`) for this thread's rank: every rank of a job
/// must do the same. [`crate::init`] does it from the environment.
pub fn configure(config: Option<CheckpointConfig>) {
    let here = crate::cluster::here();
    let on = config.is_some();
    *here.local::<Slot>().lock() = config.map(Checkpointer::new);
    persist::install(on.then(|| Arc::new(Hook) as Arc<dyn Persist>));
}

/// Whether this thread's rank checkpoints.
pub(crate) fn active() -> bool {
    let here = crate::cluster::here();
    let on = here.local::<Slot>().lock().is_some();
    on
}

fn comm_of(here: &crate::cluster::RankCtx) -> Result<Option<&Comm>> {
    if here.is_distributed() {
        here.comm_for("checkpoint").map(Some)
    } else {
        Ok(None)
    }
}

/// Runs `f` on this thread's rank's checkpointer, with the rank's collectives (in a job of
/// several ranks), rank and world size; `None` when checkpoints are off.
fn on_rank<R>(
    f: impl FnOnce(&mut Checkpointer, Option<&Comm>, usize, usize) -> Result<R>,
) -> Result<Option<R>> {
    let here = crate::cluster::here();
    let comm = comm_of(&here)?;
    let (rank, world) = (here.rank(), here.world_size());
    let slot = here.local::<Slot>();
    let mut slot = slot.lock();
    slot.as_mut().map(|c| f(c, comm, rank, world)).transpose()
}

/// A loop call starts: `true` if recovery skips it (its state, if checkpointed, loaded).
pub(crate) fn enter_loop(site: &str) -> Result<bool> {
    let entry = on_rank(|c, comm, rank, world| c.enter(site, comm, rank, world))?;
    Ok(entry == Some(Entry::Skip))
}

/// A loop call ran, wrote `written` and gave its reduction variables these values
/// (encoded): checkpoints if due.
pub(crate) fn leave_loop(
    site: &str,
    written: &[Arc<dyn TableHandle>],
    reductions: Vec<Vec<u8>>,
) -> Result<()> {
    on_rank(|c, comm, rank, world| c.leave(site, written, reductions, comm, rank, world))
        .map(|_| ())
}

/// The values (encoded) the reduction variables of the loop call a replay just skipped
/// had when it ran.
pub(crate) fn skipped_reductions() -> Option<Vec<Vec<u8>>> {
    with(|c| c.skipped_reductions.take()).flatten()
}

/// The checkpoints' side of the DDS operators' [`persist`] hook, installed on a rank while
/// its checkpoints are on: tables changed by driver code go into the next checkpoint,
/// and DDSs made by data operators are checkpointed when made and loaded by a replay.
struct Hook;

impl Persist for Hook {
    fn modified(&self, table: Arc<dyn TableHandle>) {
        with(|c| c.note_modified(&table));
    }

    fn begin_input(&self, site: String) -> Result<Input> {
        let input = on_rank(|c, comm, rank, world| c.begin_input(site, comm, rank, world))?;
        Ok(input.unwrap_or(Input::Off))
    }

    fn made_input(
        &self,
        number: u64,
        site: String,
        table: Arc<dyn TableHandle>,
        meta: Vec<u8>,
    ) -> Result<()> {
        on_rank(|c, _, rank, world| c.made_input(number, site, table, meta, rank, world))
            .map(|_| ())
    }
}

/// Commits the checkpoint still being written (every rank of a job calls it, as
/// [`crate::finish`] does); nothing without checkpoints.
pub fn flush() -> Result<()> {
    on_rank(|c, comm, rank, world| c.flush(comm, rank, world)).map(|_| ())
}

/// Whether the last loop call of this thread's rank was skipped by a recovery replay (its
/// state loaded from a checkpoint rather than computed): programs that time their epochs
/// leave such epochs out.
///
/// # Examples
/// ```
/// // Without checkpoints nothing is ever replayed.
/// assert!(!strads_ap_runtime::checkpoint::last_call_replayed());
/// ```
pub fn last_call_replayed() -> bool {
    with(|c| c.last_replayed).unwrap_or(false)
}

/// Time this rank spent on checkpoints in the loop operators' path so far (the writing
/// itself runs in the background).
pub fn time_spent() -> std::time::Duration {
    with(|c| c.spent).unwrap_or_default()
}

/// A rank's checkpointer, while checkpoints are on.
type Slot = Mutex<Option<Checkpointer>>;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cluster::simulate;
    use crate::dds::table::lookup_handle;
    use crate::DVector;

    /// Per loop call: whether `enter_loop` skipped it, and the elements after it.
    type Calls = Vec<(bool, Vec<u64>)>;

    /// Ranks of a fresh 2-rank job make a DVector (an input DDS, element `i` being
    /// `i * scale`) and run `calls` loop calls at `site`, each adding 1 to every element;
    /// each rank returns its [`Calls`].
    fn job(config: &CheckpointConfig, calls: usize, site: &str, scale: u64) -> Vec<Result<Calls>> {
        simulate(2, || {
            configure(Some(config.clone()));
            let v = DVector::from_fn(4, |i| i as u64 * scale)?;
            let written = [lookup_handle(v.id()).expect("a live table")];
            let mut seen = Vec::new();
            for _ in 0..calls {
                let skipped = enter_loop(site)?;
                if !skipped {
                    v.transform(|_, x| *x += 1)?;
                    leave_loop(site, &written, Vec::new())?;
                }
                assert_eq!(last_call_replayed(), skipped);
                seen.push((skipped, v.to_vec()?));
            }
            flush()?;
            configure(None);
            Ok(seen)
        })
    }

    #[test]
    fn checkpoints_are_off_until_configured() {
        simulate(1, || {
            assert!(!active());
            assert!(!enter_loop("site").unwrap());
            leave_loop("site", &[], Vec::new()).unwrap();
            flush().unwrap();
            configure(Some(CheckpointConfig::new("unused")));
            assert!(active());
            configure(None);
            assert!(!active());
        });
    }

    #[test]
    fn a_replay_skips_the_checkpointed_calls_and_loads_their_state() {
        let dir = tempfile::tempdir().unwrap();
        let config = CheckpointConfig::new(dir.path()).sync_every(Duration::ZERO);
        let first = job(&config, 3, "site", 10);
        let ran = |k: u64| (false, (0..4).map(|i| i * 10 + k).collect::<Vec<u64>>());
        for rank in first {
            assert_eq!(rank.unwrap(), [ran(1), ran(2), ran(3)]);
        }
        // The replay loads the input DVector as it was made (not as its operator would
        // make it now), skips calls 1 to 3, loading checkpoints 2 and 3 (the kept ones),
        // and runs call 4 on the state after call 3.
        let replay = job(&config.clone().recover(true), 4, "site", 1000);
        let loaded = |k: u64| (true, ran(k).1);
        let skipped_unloaded = (true, ran(0).1);
        for rank in replay {
            assert_eq!(
                rank.unwrap(),
                [skipped_unloaded.clone(), loaded(2), loaded(3), ran(4)]
            );
        }
    }

    #[test]
    fn a_replay_of_another_program_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = CheckpointConfig::new(dir.path());
        for rank in job(&config, 2, "site", 1) {
            rank.unwrap();
        }
        for rank in job(&config.recover(true), 2, "other site", 1) {
            let e = rank.unwrap_err().to_string();
            assert!(
                e.contains("loop call 1 is other site, but the checkpoint was taken after site"),
                "{e}"
            );
        }
    }
}
