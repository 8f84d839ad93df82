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
