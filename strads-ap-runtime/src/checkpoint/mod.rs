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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::collective::Comm;
use crate::dds::table::{lookup_handle, TableHandle};
use crate::error::{Error, Result};
use crate::sync::Mutex;

/// The environment variables of checkpointing.
pub mod env {
    /// Directory of the job's checkpoints; unset: no checkpoints.
    pub const CHECKPOINT_DIR: &str = "STRADS_CHECKPOINT_DIR";
    /// Checkpoint after every N-th loop call (default 1).
    pub const CHECKPOINT_EVERY: &str = "STRADS_CHECKPOINT_EVERY";
    /// Committed checkpoints kept (default 2).
    pub const CHECKPOINT_KEEP: &str = "STRADS_CHECKPOINT_KEEP";
    /// Force checkpoints to disk at most every this many seconds (default 10; 0: every
    /// checkpoint).
    pub const CHECKPOINT_SYNC: &str = "STRADS_CHECKPOINT_SYNC";
    /// `1`: this run resumes from the checkpoints (fast re-execution).
    pub const RECOVER: &str = "STRADS_RECOVER";
    /// Fault injection for tests of recovery, ignored when the run is recovering: `R:N`
    /// kills rank `R` (SIGKILL, like `kill -9`) at the start of its `N`-th loop call;
    /// `R:N:MSms` kills it `MS` milliseconds later, wherever it then is; `R:N:stop` stops
    /// it (SIGSTOP, a hung process that the others detect by the transport's idle
    /// timeout).
    pub const FAULT_AT: &str = "STRADS_FAULT_AT";
}

const MAGIC: &[u8; 8] = b"STRADSCK";
const TRAILER: &[u8; 4] = b"END!";
const VERSION: u32 = 3;
/// The entry of an input checkpoint file holding its operator's extra outcome (e.g. a
/// [`crate::ReadReport`]).
const META: u64 = u64::MAX;

/// Where and how often to checkpoint, and whether this run recovers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The job's checkpoint directory (local disk or a shared file system; each rank
    /// writes its own files, rank 0 the manifests).
    pub dir: PathBuf,
    /// Checkpoint after every `every`-th loop call.
    pub every: u64,
    /// Committed checkpoints to keep (and the newest synced one besides).
    pub keep: usize,
    /// Force checkpoints to disk (fsync) at most this often; zero: every checkpoint.
    pub sync_every: std::time::Duration,
    /// Resume from the newest valid checkpoint in `dir`.
    pub recover: bool,
}

impl CheckpointConfig {
    /// Checkpoints in `dir` after every loop call, keeping the last 2; not recovering.
    ///
    /// # Examples
    /// ```
    /// use strads_ap_runtime::checkpoint::CheckpointConfig;
    /// let c = CheckpointConfig::new("/tmp/ckpt").every(5).keep(3).recover(true);
    /// assert_eq!((c.every, c.keep, c.recover), (5, 3, true));
    /// ```
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CheckpointConfig {
            dir: dir.into(),
            every: 1,
            keep: 2,
            sync_every: std::time::Duration::from_secs(10),
            recover: false,
        }
    }

    /// Checkpoint after every `n`-th loop call (at least 1).
    pub fn every(mut self, n: u64) -> Self {
        self.every = n.max(1);
        self
    }

    /// Keep the last `k` committed checkpoints (at least 1).
    pub fn keep(mut self, k: usize) -> Self {
        self.keep = k.max(1);
        self
    }

    /// Force checkpoints to disk at most every `d` (zero: every checkpoint, each loop
    /// then waits for the disk less than it competes with it for bandwidth).
    pub fn sync_every(mut self, d: std::time::Duration) -> Self {
        self.sync_every = d;
        self
    }

    /// Whether this run resumes from the checkpoints.
    pub fn recover(mut self, recover: bool) -> Self {
        self.recover = recover;
        self
    }

    /// Reads the variables of [`mod@env`]: `None` when `STRADS_CHECKPOINT_DIR` is unset.
    pub fn from_env() -> Result<Option<Self>> {
        let dir = match std::env::var_os(env::CHECKPOINT_DIR) {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => return Ok(None),
        };
        let number = |name: &str, default: u64| -> Result<u64> {
            match std::env::var(name) {
                Ok(v) => v.trim().parse::<u64>().map_err(|_| {
                    Error::Config(format!("{name}={v:?} is not a non-negative integer"))
                }),
                Err(_) => Ok(default),
            }
        };
        let sync = match std::env::var(env::CHECKPOINT_SYNC) {
            Ok(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| {
                    Error::Config(format!(
                        "{}={v:?} is not a non-negative number of seconds",
                        env::CHECKPOINT_SYNC
                    ))
                })?,
            Err(_) => std::time::Duration::from_secs(10),
        };
        Ok(Some(
            CheckpointConfig::new(dir)
                .every(number(env::CHECKPOINT_EVERY, 1)?)
                .keep(number(env::CHECKPOINT_KEEP, 2)? as usize)
                .sync_every(sync)
                .recover(number(env::RECOVER, 0)? != 0),
        ))
    }
}

/// A committed checkpoint: what rank 0 writes once every rank's file is durable.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Manifest {
    seq: u64,
    /// The loop call this checkpoint follows.
    site: String,
    world: usize,
    /// Every table checkpointed so far → the checkpoint holding its latest state.
    tables: BTreeMap<u64, u64>,
    /// Each rank's file checksum.
    checksums: Vec<u32>,
    /// Every input DDS checkpointed so far: input operator number → where it was made.
    inputs: BTreeMap<u64, InputRecord>,
}

/// An input DDS's checkpoint: the operator that made it and the DDS.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct InputRecord {
    /// The operator and its call site, e.g. `DVector::from_fn at src/main.rs:12:5`.
    site: String,
    /// The table it made.
    id: u64,
}

/// An input DDS being written in the background.
struct InputJob {
    number: u64,
    record: InputRecord,
    job: Writer,
}

/// A background writer of a checkpoint file: the file's checksum, and the encoding
/// buffers back for reuse.
type Writer = std::thread::JoinHandle<(std::result::Result<u32, String>, Vec<Vec<u8>>)>;

/// What an input operator (one that makes a DDS from outside data) should do.
pub(crate) enum Input {
    /// Checkpoints are off: just run.
    Off,
    /// Run, then hand the DDS to [`Input::made`] to be checkpointed.
    Record { number: u64, site: String },
    /// Recovery: don't run; make the DDS from this state (and return the operator's
    /// extra outcome, `meta`) instead.
    Load {
        id: u64,
        state: Vec<u8>,
        meta: Vec<u8>,
    },
}

/// A checkpoint being written in the background.
struct Pending {
    seq: u64,
    site: String,
    /// Tables it holds.
    ids: Vec<u64>,
    /// The writer: this rank's file checksum.
    job: Writer,
    /// Input DDSs made before this loop call, committed with it.
    inputs: Vec<InputJob>,
    /// Whether its files are forced to disk.
    synced: bool,
}

/// What a loop call should do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Run it (and checkpoint after it if due).
    Run,
    /// Skip it: recovery replays past it (its state, if any, was loaded).
    Skip,
}

/// A rank's checkpointing state.
pub(crate) struct Checkpointer {
    config: CheckpointConfig,
    /// Loop calls so far.
    seq: u64,
    /// Tables written since the last checkpoint.
    dirty: HashMap<u64, std::sync::Weak<dyn TableHandle>>,
    /// Every table checkpointed so far → the checkpoint holding its latest state.
    latest: BTreeMap<u64, u64>,
    /// Committed checkpoints of this run (or found at recovery), oldest first.
    committed: Vec<Committed>,
    /// Recovery: skip loop calls up to this sequence number.
    replay_until: Option<u64>,
    /// Recovery: valid manifests by sequence number.
    manifests: BTreeMap<u64, Manifest>,
    /// Recovery: which checkpoint each table's current state came from.
    loaded: BTreeMap<u64, u64>,
    /// Recovery has been prepared (the ranks agreed where to resume).
    prepared: bool,
    /// Whether the last loop call was skipped by a replay.
    last_replayed: bool,
    /// Time spent writing checkpoints.
    pub spent: std::time::Duration,
    /// When checkpointing was configured (the start of a replay).
    started: Instant,
    /// The checkpoint being written, not committed yet.
    pending: Option<Pending>,
    /// Rank 0: the manifest being written, and its checkpoint.
    manifest_job: Option<(
        u64,
        std::thread::JoinHandle<std::result::Result<(), String>>,
    )>,
    /// Input operators so far.
    inputs: u64,
    /// Input DDSs being written, to be committed with the next loop checkpoint.
    input_jobs: Vec<InputJob>,
    /// Committed input DDSs.
    committed_inputs: BTreeMap<u64, InputRecord>,
    /// Recovery: the input DDSs to load rather than make.
    replay_inputs: BTreeMap<u64, InputRecord>,
    /// Recovery: input DDSs loaded so far.
    inputs_loaded: usize,
    /// Encoding buffers of the last checkpoint, for the next.
    buffers: Vec<Vec<u8>>,
    /// Whether the next checkpoint is forced to disk (rank 0 decides for every rank).
    sync_next: bool,
    /// Rank 0: when the last synced checkpoint was started.
    last_sync: Option<Instant>,
    /// This rank's checkpoint files not forced to disk yet.
    unsynced: Vec<PathBuf>,
}

/// A committed checkpoint.
struct Committed {
    seq: u64,
    /// Each table → the checkpoint holding its state.
    tables: BTreeMap<u64, u64>,
    /// Whether its files were forced to disk.
    synced: bool,
}

impl Checkpointer {
    pub fn new(config: CheckpointConfig) -> Self {
        Checkpointer {
            config,
            seq: 0,
            dirty: HashMap::new(),
            latest: BTreeMap::new(),
            committed: Vec::new(),
            replay_until: None,
            manifests: BTreeMap::new(),
            loaded: BTreeMap::new(),
            prepared: false,
            last_replayed: false,
            spent: std::time::Duration::ZERO,
            started: Instant::now(),
            pending: None,
            manifest_job: None,
            inputs: 0,
            input_jobs: Vec::new(),
            committed_inputs: BTreeMap::new(),
            replay_inputs: BTreeMap::new(),
            inputs_loaded: 0,
            buffers: Vec::new(),
            sync_next: true,
            last_sync: None,
            unsynced: Vec::new(),
        }
    }
}

fn ckpt_dir(root: &Path, seq: u64) -> PathBuf {
    root.join(format!("ckpt-{seq:010}"))
}

fn rank_file(root: &Path, seq: u64, rank: usize, world: usize) -> PathBuf {
    ckpt_dir(root, seq).join(format!("rank-{rank}-of-{world}.bin"))
}

fn input_file(root: &Path, number: u64, rank: usize, world: usize) -> PathBuf {
    root.join(format!("input-{number:06}"))
        .join(format!("rank-{rank}-of-{world}.bin"))
}

/// Writes `tables` to `path` on a background thread, encoding them into `buffers`
/// (reused from earlier checkpoints, so encoding faults in no fresh pages). Their gates
/// are closed until the writer has its copy (writers wait, readers go on); `extra`
/// entries are written after them as they are.
///
/// With `sync`, the file is forced to disk, and so are the earlier files listed (a synced
/// checkpoint refers to them).
fn spawn_writer(
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
                    let written = write_tables(&path, &encoded, sync.is_some())
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
fn join_writer(job: Writer, what: &str) -> (std::result::Result<u32, String>, Vec<Vec<u8>>) {
    job.join()
        .unwrap_or_else(|_| (Err(format!("the writer of {what} panicked")), Vec::new()))
}

/// Forces `files` to disk; files gone (pruned) are skipped.
fn sync_files(files: &[PathBuf]) -> std::result::Result<(), String> {
    for f in files {
        match std::fs::File::open(f).and_then(|f| f.sync_all()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", f.display())),
        }
    }
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Tables of a checkpoint file: (id, encoded state).
type Tables = Vec<(u64, Vec<u8>)>;

/// Writes `tables` (id, encoded state) to `path` atomically: a header, the tables, and a
/// trailer with the length and CRC-32 of everything before it; with `sync`, forced to
/// disk before it is renamed into place. Returns the checksum.
fn write_tables(path: &Path, tables: &[(u64, Vec<u8>)], sync: bool) -> std::io::Result<u32> {
    let dir = path.parent().expect("checkpoint files live in a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let mut crc = crc32fast::Hasher::new();
    let mut len = 0u64;
    let mut put = |f: &mut std::io::BufWriter<std::fs::File>, bytes: &[u8]| {
        crc.update(bytes);
        len += bytes.len() as u64;
        f.write_all(bytes)
    };
    put(&mut f, MAGIC)?;
    put(&mut f, &VERSION.to_le_bytes())?;
    put(&mut f, &(tables.len() as u64).to_le_bytes())?;
    for (id, bytes) in tables {
        put(&mut f, &id.to_le_bytes())?;
        put(&mut f, &(bytes.len() as u64).to_le_bytes())?;
        put(&mut f, bytes)?;
    }
    let sum = crc.finalize();
    f.write_all(&len.to_le_bytes())?;
    f.write_all(&sum.to_le_bytes())?;
    f.write_all(TRAILER)?;
    let f = f.into_inner().map_err(|e| e.into_error())?;
    if sync {
        f.sync_all()?;
    }
    drop(f);
    std::fs::rename(&tmp, path)?;
    if sync {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(sum)
}

/// Reads a file written by [`write_tables`], checking its framing, length and checksum.
fn read_tables(path: &Path) -> std::result::Result<(Tables, u32), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: {why}", path.display());
    if bytes.len() < 8 + 4 + 8 + 16 || &bytes[..8] != MAGIC {
        return Err(bad("not a strads-ap checkpoint file (torn or foreign)"));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 16);
    if &trailer[12..] != TRAILER {
        return Err(bad("truncated (no trailer)"));
    }
    let len = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    let sum = u32::from_le_bytes(trailer[8..12].try_into().expect("4 bytes"));
    if len != body.len() as u64 {
        return Err(bad(&format!(
            "{} bytes where {len} were written",
            body.len()
        )));
    }
    if crc32fast::hash(body) != sum {
        return Err(bad("checksum mismatch (corrupted)"));
    }
    let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(&format!(
            "format version {version}, expected {VERSION}"
        )));
    }
    let mut at = 12;
    let word = |at: &mut usize| -> std::result::Result<u64, String> {
        let w = body
            .get(*at..*at + 8)
            .ok_or_else(|| bad("ends inside a table"))?;
        *at += 8;
        Ok(u64::from_le_bytes(w.try_into().expect("8 bytes")))
    };
    let count = word(&mut at)?;
    let mut tables = Vec::new();
    for _ in 0..count {
        let id = word(&mut at)?;
        let n = word(&mut at)? as usize;
        let data = body
            .get(at..at + n)
            .ok_or_else(|| bad("ends inside a table"))?;
        at += n;
        tables.push((id, data.to_vec()));
    }
    Ok((tables, sum))
}

/// Writes a manifest atomically (checksummed like the tables).
fn write_manifest(path: &Path, manifest: &Manifest, sync: bool) -> std::result::Result<(), String> {
    let bytes = postcard::to_stdvec(manifest).map_err(|e| e.to_string())?;
    write_tables(path, &[(0, bytes)], sync)
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn read_manifest(path: &Path) -> std::result::Result<Manifest, String> {
    let (mut tables, _) = read_tables(path)?;
    let (_, bytes) = tables.pop().ok_or("an empty manifest")?;
    postcard::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

impl Checkpointer {
    /// Recovery: finds the newest checkpoint that every rank can load and agrees on it
    /// with the other ranks (a collective when `comm` is given).
    fn prepare(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        self.prepared = true;
        if !self.config.recover {
            return Ok(());
        }
        let root = self.config.dir.clone();
        let mut found: Vec<u64> = match std::fs::read_dir(&root) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("ckpt-"))
                        .and_then(|n| n.parse::<u64>().ok())
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_error(&root, e)),
        };
        found.sort_unstable();
        // Every manifest whose files (this rank's part) all verify, newest first.
        let mut manifests = BTreeMap::new();
        let mut checked: BTreeMap<u64, bool> = BTreeMap::new();
        for &seq in found.iter().rev() {
            let path = ckpt_dir(&root, seq).join("MANIFEST");
            let manifest = match read_manifest(&path) {
                Ok(m) if m.world == world && m.seq == seq => m,
                Ok(m) => {
                    warn(&format!(
                        "checkpoint {seq} was made by {} ranks, this job has {world}; ignored",
                        m.world
                    ));
                    continue;
                }
                Err(e) => {
                    if path.exists() {
                        warn(&format!("checkpoint {seq} is not usable: {e}"));
                    }
                    continue;
                }
            };
            let files: BTreeSet<u64> = manifest.tables.values().copied().collect();
            let bad = files.iter().find_map(|&f| {
                let ok = *checked
                    .entry(f)
                    .or_insert_with(|| read_tables(&rank_file(&root, f, rank, world)).is_ok());
                (!ok).then_some(f)
            });
            match bad {
                None => {
                    manifests.insert(seq, manifest);
                }
                Some(f) => warn(&format!(
                    "checkpoint {seq} cannot be loaded on rank {rank} (its file of checkpoint \
                     {f} is missing, torn or corrupted); using an earlier one"
                )),
            }
        }
        // The checkpoints every rank can load.
        let mine: Vec<u64> = manifests.keys().copied().collect();
        let usable: BTreeSet<u64> = match comm {
            Some(c) => {
                let all = c.allgather(mine)?;
                let mut common: BTreeSet<u64> = all[0].iter().copied().collect();
                for other in &all[1..] {
                    let other: BTreeSet<u64> = other.iter().copied().collect();
                    common = common.intersection(&other).copied().collect();
                }
                common
            }
            None => mine.into_iter().collect(),
        };
        manifests.retain(|s, _| usable.contains(s));
        if let Some(&agreed) = manifests.keys().next_back() {
            self.replay_until = Some(agreed);
            self.latest = manifests[&agreed].tables.clone();
            self.committed = manifests
                .iter()
                .map(|(&seq, m)| Committed {
                    seq,
                    tables: m.tables.clone(),
                    synced: false,
                })
                .collect();
            self.manifests = manifests;
            self.agree_inputs(agreed, comm, rank, world)?;
            if rank == 0 {
                eprintln!(
                    "strads-ap: recovering: replaying up to loop call {agreed} from {}",
                    root.display()
                );
            }
        } else if rank == 0 {
            eprintln!(
                "strads-ap: recovering, but {} holds no usable checkpoint: starting over",
                root.display()
            );
        }
        Ok(())
    }

    /// Recovery: the input DDSs of checkpoint `agreed` that every rank can load; the
    /// others are made again (their operators run), with a warning.
    fn agree_inputs(
        &mut self,
        agreed: u64,
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<()> {
        let inputs = self.manifests[&agreed].inputs.clone();
        let root = self.config.dir.clone();
        let bad: Vec<(u64, String)> = inputs
            .keys()
            .filter_map(|&n| {
                read_tables(&input_file(&root, n, rank, world))
                    .err()
                    .map(|e| (n, e))
            })
            .collect();
        let bad: BTreeMap<u64, String> = match comm {
            Some(c) => c.allgather(bad)?.into_iter().flatten().collect(),
            None => bad.into_iter().collect(),
        };
        for (n, why) in &bad {
            if rank == 0 {
                warn(&format!(
                    "the checkpoint of input {n} ({}) is not usable ({why}); its operator \
                     runs again",
                    inputs[n].site
                ));
            }
        }
        self.committed_inputs = inputs.clone();
        self.replay_inputs = inputs
            .into_iter()
            .filter(|(n, _)| !bad.contains_key(n))
            .collect();
        Ok(())
    }

    /// Called when an input operator starts.
    pub fn begin_input(
        &mut self,
        site: String,
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<Input> {
        if !self.prepared {
            self.prepare(comm, rank, world)?;
        }
        self.inputs += 1;
        let number = self.inputs;
        let Some(record) = self.replay_inputs.remove(&number) else {
            return Ok(Input::Record { number, site });
        };
        if record.site != site {
            return Err(Error::Config(format!(
                "recovery: input operator {number} is {site}, but the checkpoint was made by \
                 {} (the program changed since; remove {} to start over)",
                record.site,
                self.config.dir.display()
            )));
        }
        let path = input_file(&self.config.dir, number, rank, world);
        let (mut tables, _) = read_tables(&path).map_err(Error::Config)?;
        let meta = match tables.iter().position(|(id, _)| *id == META) {
            Some(i) => tables.swap_remove(i).1,
            None => Vec::new(),
        };
        let state = match tables.into_iter().find(|(id, _)| *id == record.id) {
            Some((_, state)) => state,
            None => {
                return Err(Error::Config(format!(
                    "{}: no state of DDS {}",
                    path.display(),
                    record.id
                )))
            }
        };
        self.inputs_loaded += 1;
        Ok(Input::Load {
            id: record.id,
            state,
            meta,
        })
    }

    /// An input operator made `table` (with its extra outcome `meta`): writes it in the
    /// background, to be committed with the next loop checkpoint.
    pub fn made_input(
        &mut self,
        number: u64,
        site: String,
        table: Arc<dyn TableHandle>,
        meta: Vec<u8>,
        rank: usize,
        world: usize,
    ) -> Result<()> {
        let t0 = Instant::now();
        let id = table.id();
        let path = input_file(&self.config.dir, number, rank, world);
        // Written once, so forced to disk at once.
        let job = spawn_writer(
            vec![table],
            vec![(META, meta)],
            Vec::new(),
            path,
            Some(vec![]),
        )?;
        self.input_jobs.push(InputJob {
            number,
            record: InputRecord { site, id },
            job,
        });
        self.spent += t0.elapsed();
        Ok(())
    }

    /// Called when a loop call starts: its sequence number, and whether to run it.
    pub fn enter(
        &mut self,
        site: &str,
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<Entry> {
        if !self.prepared {
            self.prepare(comm, rank, world)?;
        }
        self.seq += 1;
        let seq = self.seq;
        self.last_replayed = false;
        if let Some((r, n, how)) = fault_at() {
            if !self.config.recover && (r, n) == (rank, seq) {
                inject(rank, seq, how);
            }
        }
        let Some(until) = self.replay_until else {
            return Ok(Entry::Run);
        };
        if seq > until {
            self.replay_until = None;
            return Ok(Entry::Run);
        }
        if let Some(m) = self.manifests.get(&seq) {
            if m.site != site {
                return Err(Error::Config(format!(
                    "recovery: loop call {seq} is {site}, but the checkpoint was taken after \
                     {} (the program or its input changed since; remove {} to start over)",
                    m.site,
                    self.config.dir.display()
                )));
            }
            let tables = m.tables.clone();
            self.load(&tables, rank, world)?;
        }
        self.last_replayed = true;
        if seq == until {
            self.replay_until = None;
            if rank == 0 {
                eprintln!(
                    "strads-ap: recovered the state after loop call {seq} ({site}) in {:.2} s \
                     of replay ({} DDSs of data operators loaded rather than made again)",
                    self.started.elapsed().as_secs_f64(),
                    self.inputs_loaded
                );
            }
        }
        Ok(Entry::Skip)
    }

    /// Loads every table whose state in `tables` differs from what is loaded.
    fn load(&mut self, tables: &BTreeMap<u64, u64>, rank: usize, world: usize) -> Result<()> {
        let root = self.config.dir.clone();
        let mut by_file: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (&id, &f) in tables {
            if self.loaded.get(&id) != Some(&f) {
                by_file.entry(f).or_default().push(id);
            }
        }
        for (f, ids) in by_file {
            let path = rank_file(&root, f, rank, world);
            let (tables, _) = read_tables(&path).map_err(Error::Config)?;
            for id in ids {
                let data = tables
                    .iter()
                    .find(|(t, _)| *t == id)
                    .map(|(_, d)| d)
                    .ok_or_else(|| {
                        Error::Config(format!("{}: no state of DDS {id}", path.display()))
                    })?;
                let table = lookup_handle(id).ok_or_else(|| {
                    Error::Config(format!(
                        "recovery: DDS {id} of checkpoint {f} does not exist at this point of \
                         the replay (the program changed since the checkpoint?)"
                    ))
                })?;
                table.restore("recovery", data)?;
                self.loaded.insert(id, f);
            }
        }
        Ok(())
    }

    /// Notes that a driver operator changed `table` outside the loops: its state goes into
    /// the next checkpoint.
    pub fn note_modified(&mut self, table: &Arc<dyn TableHandle>) {
        self.dirty.insert(table.id(), Arc::downgrade(table));
    }

    /// Called when a loop call ran: notes the tables it wrote and checkpoints if due (in
    /// the background, committing the previous checkpoint first).
    pub fn leave(
        &mut self,
        site: &str,
        written: &[Arc<dyn TableHandle>],
        comm: Option<&Comm>,
        rank: usize,
        world: usize,
    ) -> Result<()> {
        for t in written {
            self.dirty.insert(t.id(), Arc::downgrade(t));
        }
        if self.seq % self.config.every != 0 {
            return Ok(());
        }
        let t0 = Instant::now();
        self.commit_pending(comm, rank, world)?;
        let seq = self.seq;
        let mut tables: Vec<Arc<dyn TableHandle>> = self
            .dirty
            .drain()
            .filter_map(|(_, t)| t.upgrade())
            .collect();
        tables.sort_by_key(|t| t.id());
        // Writers wait until the writer has its copy; readers go on.
        let path = rank_file(&self.config.dir, seq, rank, world);
        let ids = tables.iter().map(|t| t.id()).collect();
        let buffers = std::mem::take(&mut self.buffers);
        let synced = self.sync_next;
        let sync = if synced {
            self.last_sync = Some(Instant::now());
            Some(std::mem::take(&mut self.unsynced))
        } else {
            self.unsynced.push(path.clone());
            None
        };
        let job = spawn_writer(tables, Vec::new(), buffers, path, sync)?;
        self.pending = Some(Pending {
            seq,
            site: site.to_string(),
            ids,
            job,
            inputs: std::mem::take(&mut self.input_jobs),
            synced,
        });
        self.spent += t0.elapsed();
        Ok(())
    }

    /// Commits the checkpoint being written, once every rank's file is durable (a
    /// collective when `comm` is given). Nothing to do when none is pending.
    pub fn commit_pending(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let (mut mine, buffers) = join_writer(p.job, &format!("checkpoint {}", p.seq));
        self.buffers = buffers;
        let mut made = Vec::with_capacity(p.inputs.len());
        for input in p.inputs {
            // Inputs are written once: their buffers are not kept.
            let (outcome, _) = join_writer(input.job, &format!("input {}", input.number));
            if let (Ok(_), Err(e)) = (&mine, outcome) {
                mine = Err(e);
            }
            made.push((input.number, input.record));
        }
        // Rank 0 decides, for every rank, whether the next checkpoint is synced.
        let sync_next = self
            .last_sync
            .is_none_or(|t| t.elapsed() >= self.config.sync_every);
        let mine = mine
            .map(|sum| (sum, sync_next))
            .map_err(|e| Error::Config(format!("checkpoint: {e}")));
        let outcomes = match comm {
            Some(c) => c.gather_outcomes(mine)?,
            None => vec![mine?],
        };
        self.sync_next = outcomes[0].1;
        let checksums = outcomes.iter().map(|o| o.0).collect();
        for id in p.ids {
            self.latest.insert(id, p.seq);
        }
        self.committed_inputs.extend(made);
        let manifest = Manifest {
            seq: p.seq,
            site: p.site,
            world,
            tables: self.latest.clone(),
            checksums,
            inputs: self.committed_inputs.clone(),
        };
        // Rank 0 commits by writing the manifest, in the background too: the previous
        // manifest is durable first, and a failure to write one fails the next commit.
        self.await_manifest(comm, rank, world)?;
        let root = self.config.dir.clone();
        if rank == 0 {
            let path = ckpt_dir(&root, p.seq).join("MANIFEST");
            let synced = p.synced;
            let job = std::thread::Builder::new()
                .name("strads-manifest".into())
                .spawn(move || write_manifest(&path, &manifest, synced))
                .map_err(|e| Error::Config(format!("checkpoint: cannot start a writer: {e}")))?;
            self.manifest_job = Some((p.seq, job));
        }
        self.committed.push(Committed {
            seq: p.seq,
            tables: self.latest.clone(),
            synced: p.synced,
        });
        Ok(())
    }

    /// Commits the checkpoint being written and waits until its manifest is durable.
    fn flush(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        self.commit_pending(comm, rank, world)?;
        // Input DDSs made after the last loop call have nothing to commit them (a replay
        // makes them again); their writers finish before the program ends.
        for input in self.input_jobs.drain(..) {
            let _ = input.job.join();
        }
        self.await_manifest(comm, rank, world)?;
        // The end of the job: everything on disk.
        let mut files = std::mem::take(&mut self.unsynced);
        if rank == 0 {
            if let Some(last) = self.committed.last() {
                files.push(ckpt_dir(&self.config.dir, last.seq).join("MANIFEST"));
            }
        }
        sync_files(&files).map_err(|e| Error::Config(format!("checkpoint: {e}")))?;
        if let Some(last) = self.committed.last_mut() {
            last.synced = true;
        }
        Ok(())
    }

    /// Waits until rank 0's manifest being written is durable (every rank learns whether
    /// it is), then prunes old checkpoints.
    fn await_manifest(&mut self, comm: Option<&Comm>, rank: usize, world: usize) -> Result<()> {
        let outcome: std::result::Result<(), String> = match self.manifest_job.take() {
            Some((seq, job)) => job
                .join()
                .unwrap_or_else(|_| Err("the manifest writer panicked".into()))
                .map_err(|e| format!("checkpoint {seq} not committed: {e}")),
            None => Ok(()),
        };
        let outcome = match comm {
            Some(c) => c.broadcast(0, outcome)?,
            None => outcome,
        };
        outcome.map_err(Error::Config)?;
        self.prune(rank, world);
        Ok(())
    }

    /// Drops checkpoints older than the newest `keep`, keeping the files a kept manifest
    /// still refers to.
    fn prune(&mut self, rank: usize, world: usize) {
        let keep = self.config.keep;
        if self.committed.len() <= keep {
            return;
        }
        // The newest `keep`, and the newest synced one (what survives a power loss).
        let cut = self.committed.len() - keep;
        let newest_synced = self.committed.iter().rposition(|c| c.synced);
        let mut old = Vec::new();
        let mut i = 0;
        self.committed.retain(|c| {
            let kept = i >= cut || Some(i) == newest_synced;
            i += 1;
            if !kept {
                old.push(c.seq);
            }
            kept
        });
        let needed: BTreeSet<u64> = self
            .committed
            .iter()
            .flat_map(|c| c.tables.values().copied())
            .collect();
        let root = self.config.dir.clone();
        for seq in old {
            if rank == 0 {
                let _ = std::fs::remove_file(ckpt_dir(&root, seq).join("MANIFEST"));
            }
            if !needed.contains(&seq) {
                let _ = std::fs::remove_file(rank_file(&root, seq, rank, world));
                // Empty once every rank removed its file (on a shared file system).
                let _ = std::fs::remove_dir(ckpt_dir(&root, seq));
            }
        }
    }
}

/// How [`env::FAULT_AT`] makes a rank fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL at the start of the loop call.
    Kill,
    /// SIGKILL this many milliseconds into the loop call, from another thread: wherever
    /// the rank then is (inside the loop body, an exchange, driver code, a later call).
    KillAfter(u64),
    /// SIGSTOP: a hung process.
    Stop,
}

/// The fault to inject ([`env::FAULT_AT`]): rank, loop call, and how.
fn fault_at() -> Option<(usize, u64, Fault)> {
    static FAULT: std::sync::OnceLock<Option<(usize, u64, Fault)>> = std::sync::OnceLock::new();
    *FAULT.get_or_init(|| {
        let v = std::env::var(env::FAULT_AT).ok()?;
        let mut parts = v.split(':');
        let rank = parts.next()?.trim().parse().ok()?;
        let call = parts.next()?.trim().parse().ok()?;
        let how = match parts.next().map(str::trim) {
            None | Some("kill") => Fault::Kill,
            Some("stop") => Fault::Stop,
            Some(ms) => Fault::KillAfter(ms.strip_suffix("ms")?.parse().ok()?),
        };
        Some((rank, call, how))
    })
}

/// Makes this process fail as [`env::FAULT_AT`] asks.
fn inject(rank: usize, seq: u64, how: Fault) {
    let signal = |name: &str| {
        let _ = std::process::Command::new("kill")
            .args([name, &std::process::id().to_string()])
            .status();
    };
    eprintln!(
        "strads-ap: {}: rank {rank} at loop call {seq}: {how:?}",
        env::FAULT_AT
    );
    match how {
        Fault::Kill => signal("-KILL"),
        // Every thread stops, the network's too: the others see silence.
        Fault::Stop => signal("-STOP"),
        Fault::KillAfter(ms) => {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                signal("-KILL");
                std::process::abort();
            });
            return;
        }
    }
    std::process::abort();
}

fn warn(message: &str) {
    tracing::warn!("{message}");
    eprintln!("strads-ap: warning: {message}");
}

/// The checkpointer of this thread's rank, if checkpoints are on.
pub(crate) fn with<R>(f: impl FnOnce(&mut Checkpointer) -> R) -> Option<R> {
    let here = crate::cluster::here();
    let slot = here.local::<Slot>();
    let mut slot = slot.lock();
    slot.as_mut().map(f)
}

/// Turns checkpoints on (or off, with `None`) for this thread's rank: every rank of a job
/// must do the same. [`crate::init`] does it from the environment.
pub fn configure(config: Option<CheckpointConfig>) {
    let here = crate::cluster::here();
    *here.local::<Slot>().lock() = config.map(Checkpointer::new);
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

/// A loop call ran and wrote `written`: checkpoints if due.
pub(crate) fn leave_loop(site: &str, written: &[Arc<dyn TableHandle>]) -> Result<()> {
    on_rank(|c, comm, rank, world| c.leave(site, written, comm, rank, world)).map(|_| ())
}

/// A driver operator (`transform`, `set`, `insert`, `remove`) is changing `table` outside
/// the loops: the next checkpoint writes its state, so that a replay resuming after the
/// change loads it rather than depending on the replayed driver code to redo it.
pub(crate) fn modified<T: TableHandle + 'static>(table: &Arc<T>) {
    // The handle is cloned only when checkpoints are on: driver loops of `insert`s pay
    // nothing more otherwise.
    with(|c| c.note_modified(&(table.clone() as Arc<dyn TableHandle>)));
}

/// Where an input operator was called, as its key in the checkpoints.
pub(crate) fn input_site(op: &str, at: &std::panic::Location<'_>) -> String {
    format!("{op} at {}:{}:{}", at.file(), at.line(), at.column())
}

/// An input operator `op`, called at `at`, starts: what to do (see [`Input`]).
pub(crate) fn begin_input(op: &str, at: &std::panic::Location<'_>) -> Result<Input> {
    let input =
        on_rank(|c, comm, rank, world| c.begin_input(input_site(op, at), comm, rank, world))?;
    Ok(input.unwrap_or(Input::Off))
}

impl Input {
    /// The operator made `table`: checkpoints it if asked to by [`begin_input`].
    pub(crate) fn made(self, table: Arc<dyn TableHandle>, meta: Vec<u8>) -> Result<()> {
        let Input::Record { number, site } = self else {
            return Ok(());
        };
        on_rank(|c, _, rank, world| c.made_input(number, site, table, meta, rank, world))
            .map(|_| ())
    }
}

/// Checks that a DDS made from an input checkpoint got the id it had when checkpointed.
pub(crate) fn check_input_id(expected: u64, got: u64, site: &str) -> Result<()> {
    if expected == got {
        return Ok(());
    }
    Err(Error::Config(format!(
        "recovery: {site} made DDS {got}, but its checkpoint holds DDS {expected} (the \
         program changed since the checkpoint?)"
    )))
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
