//! Writing checkpoint files in the background, and when to force them to disk.
//!
//! [`spawn_writer`] closes the tables' gates (writers wait, readers go on), encodes each
//! table on a thread of its own, opens its gate, and writes the file (see
//! [`super::format`]). [`SyncPolicy`] decides which checkpoints are forced to disk: at
//! most one every [`super::CheckpointConfig::sync_every`], and with it every file written
//! since the last one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::format::{self, Manifest};
use crate::dds::table::TableHandle;
use crate::error::{Error, Result};

/// A background writer of a checkpoint file: the file's checksum, and the encoding
/// buffers back for reuse.
pub(super) type Writer = JoinHandle<(std::result::Result<u32, String>, Vec<Vec<u8>>)>;

/// A background writer of a manifest.
pub(super) type ManifestWriter = JoinHandle<std::result::Result<(), String>>;

/// Writes `tables` to `path` on a background thread, encoding them into `buffers`
/// (reused from earlier checkpoints, so encoding faults in no fresh pages). Their gates
/// are closed until the writer has its copy (writers wait, readers go on); `extra`
/// entries are written after them as they are.
///
/// With `sync`, the file is forced to disk, and so are the earlier files listed (a synced
/// checkpoint refers to them).
pub(super) fn spawn_writer(
    tables: Vec<Arc<dyn TableHandle>>,
    extra: Vec<(u64, Vec<u8>)>,
    mut buffers: Vec<Vec<u8>>,
    path: PathBuf,
    sync: Option<Vec<PathBuf>>,
) -> Result<Writer> {
    for t in &tables {
        t.gate().close();
    }
    let reopen = tables.clone();
    std::thread::Builder::new()
        .name("strads-checkpoint".into())
        .spawn(move || {
            let mut encoded = Vec::with_capacity(tables.len() + extra.len());
            let mut failure = None;
            for t in &tables {
                let mut out = buffers.pop().unwrap_or_default();
                out.clear();
                if let Err(e) = t.snapshot_into(&mut out) {
                    failure.get_or_insert(e.to_string());
                }
                encoded.push((t.id(), out));
                t.gate().open();
            }
            drop(tables);
            let outcome = match failure {
                Some(e) => Err(e),
                None => {
                    let n = encoded.len();
                    encoded.extend(extra);
                    let written = format::write_tables(&path, &encoded, sync.is_some())
                        .map_err(|e| format!("{}: {e}", path.display()));
                    encoded.truncate(n);
                    let earlier = sync.unwrap_or_default();
                    written.and_then(|sum| sync_files(&earlier).map(|()| sum))
                }
            };
            buffers.extend(encoded.into_iter().map(|(_, b)| b));
            (outcome, buffers)
        })
        .map_err(|e| {
            for t in &reopen {
                t.gate().open();
            }
            Error::Config(format!("checkpoint: cannot start a writer thread: {e}"))
        })
}

/// Waits for a writer: its outcome, and its buffers.
pub(super) fn join_writer(
    job: Writer,
    what: &str,
) -> (std::result::Result<u32, String>, Vec<Vec<u8>>) {
    job.join()
        .unwrap_or_else(|_| (Err(format!("the writer of {what} panicked")), Vec::new()))
}

/// Writes `manifest` to `path` on a background thread (forced to disk with `sync`).
pub(super) fn spawn_manifest_writer(
    path: PathBuf,
    manifest: Manifest,
    sync: bool,
) -> Result<ManifestWriter> {
    std::thread::Builder::new()
        .name("strads-manifest".into())
        .spawn(move || format::write_manifest(&path, &manifest, sync))
        .map_err(|e| Error::Config(format!("checkpoint: cannot start a writer: {e}")))
}

/// Waits for a manifest writer: its outcome, naming checkpoint `seq` if it failed.
pub(super) fn join_manifest_writer(
    seq: u64,
    job: ManifestWriter,
) -> std::result::Result<(), String> {
    job.join()
        .unwrap_or_else(|_| Err("the manifest writer panicked".into()))
        .map_err(|e| format!("checkpoint {seq} not committed: {e}"))
}

/// Forces `files` to disk; files gone (pruned) are skipped.
pub(super) fn sync_files(files: &[PathBuf]) -> std::result::Result<(), String> {
    for f in files {
        match std::fs::File::open(f).and_then(|f| f.sync_all()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", f.display())),
        }
    }
    Ok(())
}

/// Which checkpoints are forced to disk: the first, then the first one started at least
/// `every` after the last synced one. Rank 0 decides for every rank (see
/// [`SyncPolicy::decide`]), so that a checkpoint is synced on all ranks or none.
#[derive(Debug)]
pub(super) struct SyncPolicy {
    every: Duration,
    /// Whether the next checkpoint is forced to disk.
    next: bool,
    /// When the last synced checkpoint was started.
    last: Option<Instant>,
    /// This rank's checkpoint files not forced to disk yet.
    unsynced: Vec<PathBuf>,
}

impl SyncPolicy {
    /// A policy syncing at most every `every`; the first checkpoint is synced.
    pub fn new(every: Duration) -> Self {
        SyncPolicy {
            every,
            next: true,
            last: None,
            unsynced: Vec::new(),
        }
    }

    /// A checkpoint to be written to `path` starts at `now`. If it is to be forced to
    /// disk: the earlier files to force with it (every file not synced so far), and
    /// `None` if it is not (its file is then remembered as not synced).
    pub fn start(&mut self, path: &Path, now: Instant) -> Option<Vec<PathBuf>> {
        if self.next {
            self.last = Some(now);
            Some(std::mem::take(&mut self.unsynced))
        } else {
            self.unsynced.push(path.to_path_buf());
            None
        }
    }

    /// Whether the checkpoint after one committed at `now` should be synced: this rank's
    /// proposal, rank 0's being what every rank [decides](SyncPolicy::decide).
    pub fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|t| now.saturating_duration_since(t) >= self.every)
    }

    /// Whether the next checkpoint is synced, as rank 0 proposed.
    pub fn decide(&mut self, next: bool) {
        self.next = next;
    }

    /// Whether the next checkpoint is synced.
    pub fn next(&self) -> bool {
        self.next
    }

    /// The end of the job: every file not forced to disk yet (they are forced now).
    pub fn take_unsynced(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.unsynced)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::checkpoint::format::{read_manifest, read_tables, META};
    use crate::cluster::simulate;
    use crate::dds::table::lookup_handle;
    use crate::DVector;

    #[test]
    fn the_writer_writes_every_table_then_the_extra_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt-0000000001").join("rank-0-of-1.bin");
        simulate(1, || {
            let a = DVector::from_fn(5, |i| i as u64 * 10).unwrap();
            let b = DVector::from_fn(3, |i| format!("row {i}")).unwrap();
            let tables = vec![
                lookup_handle(a.id()).unwrap(),
                lookup_handle(b.id()).unwrap(),
            ];
            let extra = vec![(META, b"the outcome".to_vec())];
            let job = spawn_writer(tables.clone(), extra, Vec::new(), path.clone(), None);
            let (outcome, buffers) = join_writer(job.unwrap(), "checkpoint 1");
            let (written, sum) = read_tables(&path).unwrap();
            assert_eq!(outcome, Ok(sum));
            // The tables' buffers come back for the next checkpoint.
            assert_eq!(buffers.len(), 2);
            let ids: Vec<u64> = written.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, [a.id(), b.id(), META]);
            assert_eq!(written[2].1, b"the outcome");
            // Each entry is its table's snapshot: restoring it undoes later changes. The
            // writes also show that the writer opened the tables' gates again.
            a.transform(|_, x| *x = 0).unwrap();
            b.set(1, "changed".into()).unwrap();
            tables[0].restore("test", &written[0].1).unwrap();
            tables[1].restore("test", &written[1].1).unwrap();
            assert_eq!(a.to_vec().unwrap(), [0, 10, 20, 30, 40]);
            assert_eq!(b.to_vec().unwrap(), ["row 0", "row 1", "row 2"]);
        });
    }

    #[test]
    fn reused_buffers_do_not_leak_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0-of-1.bin");
        simulate(1, || {
            let a = DVector::from_fn(2, |i| i as u32).unwrap();
            let table = lookup_handle(a.id()).unwrap();
            let stale = vec![vec![0xee; 4096]];
            let job = spawn_writer(vec![table.clone()], Vec::new(), stale, path.clone(), None);
            assert!(join_writer(job.unwrap(), "checkpoint 1").0.is_ok());
            let mut fresh = Vec::new();
            table.snapshot_into(&mut fresh).unwrap();
            assert_eq!(read_tables(&path).unwrap().0, [(a.id(), fresh)]);
        });
    }

    #[test]
    fn a_synced_checkpoint_syncs_the_earlier_files_given() {
        let dir = tempfile::tempdir().unwrap();
        let earlier = dir.path().join("earlier.bin");
        std::fs::write(&earlier, b"unsynced").unwrap();
        // An earlier file pruned since is skipped.
        let pruned = dir.path().join("pruned.bin");
        let path = dir.path().join("ckpt").join("rank-0-of-1.bin");
        simulate(1, || {
            let a = DVector::from_fn(2, |i| i as u32).unwrap();
            let table = lookup_handle(a.id()).unwrap();
            let sync = Some(vec![earlier.clone(), pruned.clone()]);
            let job = spawn_writer(vec![table], Vec::new(), Vec::new(), path.clone(), sync);
            let (outcome, _) = join_writer(job.unwrap(), "checkpoint 1");
            assert_eq!(outcome, Ok(read_tables(&path).unwrap().1));
        });
    }

    #[test]
    fn a_file_that_cannot_be_synced_fails_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        // Not a directory: opening a file under it fails (also for root), unlike a
        // missing file, which is skipped.
        let under_a_file = file.join("rank-0-of-1.bin");
        let missing = dir.path().join("missing.bin");
        assert_eq!(sync_files(&[missing, file.clone()]), Ok(()));
        let e = sync_files(std::slice::from_ref(&under_a_file)).unwrap_err();
        assert!(
            e.starts_with(&format!("{}: ", under_a_file.display())),
            "{e}"
        );
        simulate(1, || {
            let a = DVector::from_fn(2, |i| i as u32).unwrap();
            let table = lookup_handle(a.id()).unwrap();
            let sync = Some(vec![under_a_file.clone()]);
            let path = dir.path().join("ckpt").join("rank-0-of-1.bin");
            let job = spawn_writer(vec![table], Vec::new(), Vec::new(), path, sync);
            let (outcome, _) = join_writer(job.unwrap(), "checkpoint 1");
            assert_eq!(outcome, Err(e.clone()));
        });
    }

    #[test]
    fn a_file_that_cannot_be_written_fails_the_checkpoint_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let path = file.join("ckpt").join("rank-0-of-1.bin");
        simulate(1, || {
            let a = DVector::from_fn(2, |i| i as u32).unwrap();
            let table = lookup_handle(a.id()).unwrap();
            let job = spawn_writer(vec![table], Vec::new(), Vec::new(), path.clone(), None);
            let (outcome, buffers) = join_writer(job.unwrap(), "checkpoint 1");
            let e = outcome.unwrap_err();
            assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
            assert_eq!(buffers.len(), 1);
            // The gate is open again: the table can be written.
            a.set(0, 7).unwrap();
        });
    }

    #[test]
    fn the_manifest_writer_writes_the_manifest_or_says_which_failed() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest {
            seq: 4,
            site: "src/main.rs:1:1".into(),
            world: 1,
            tables: BTreeMap::from([(1, 4)]),
            files: BTreeMap::from([(4, vec![9])]),
            inputs: BTreeMap::new(),
            reductions: BTreeMap::new(),
        };
        let path = dir.path().join("ckpt-0000000004").join("MANIFEST");
        let job = spawn_manifest_writer(path.clone(), manifest.clone(), true).unwrap();
        assert_eq!(join_manifest_writer(4, job), Ok(()));
        assert_eq!(read_manifest(&path), Ok(manifest.clone()));

        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let job = spawn_manifest_writer(file.join("MANIFEST"), manifest, false).unwrap();
        let e = join_manifest_writer(5, job).unwrap_err();
        assert!(e.starts_with("checkpoint 5 not committed: "), "{e}");
    }

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn the_first_checkpoint_is_synced_then_at_most_one_per_period() {
        let t0 = Instant::now();
        let secs = |s| t0 + Duration::from_secs(s);
        let mut policy = SyncPolicy::new(Duration::from_secs(10));
        assert!(policy.next());
        assert_eq!(policy.start(Path::new("c1"), t0), Some(vec![]));
        // Committing checkpoint 1 at 3 s: the next is not due.
        assert!(!policy.due(secs(3)));
        policy.decide(false);
        assert_eq!(policy.start(Path::new("c2"), secs(3)), None);
        assert!(!policy.due(secs(9)));
        policy.decide(false);
        assert_eq!(policy.start(Path::new("c3"), secs(9)), None);
        // At 10 s the next one is due; it forces the files skipped since to disk.
        assert!(policy.due(secs(10)));
        policy.decide(true);
        assert_eq!(
            policy.start(Path::new("c4"), secs(10)),
            Some(paths(&["c2", "c3"]))
        );
        assert!(!policy.due(secs(19)));
        policy.decide(false);
        assert_eq!(policy.start(Path::new("c5"), secs(19)), None);
        // The end of the job forces what is left.
        assert_eq!(policy.take_unsynced(), paths(&["c5"]));
        assert_eq!(policy.take_unsynced(), paths(&[]));
    }

    #[test]
    fn rank_0_decides_for_every_rank() {
        let t0 = Instant::now();
        let mut policy = SyncPolicy::new(Duration::from_secs(10));
        policy.start(Path::new("c1"), t0);
        // This rank finds it due, rank 0 did not: not synced here either.
        assert!(policy.due(t0 + Duration::from_secs(11)));
        policy.decide(false);
        assert!(!policy.next());
        assert_eq!(policy.start(Path::new("c2"), t0), None);
    }

    #[test]
    fn a_zero_period_syncs_every_checkpoint() {
        let t0 = Instant::now();
        let mut policy = SyncPolicy::new(Duration::ZERO);
        for name in ["c1", "c2", "c3"] {
            assert!(policy.due(t0));
            policy.decide(policy.due(t0));
            assert_eq!(policy.start(Path::new(name), t0), Some(vec![]));
        }
        assert!(policy.take_unsynced().is_empty());
    }
}
