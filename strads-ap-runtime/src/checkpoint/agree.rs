//! What the ranks agree on: at recovery, the newest checkpoint every rank can load and the
//! input DDSs every rank can load; while checkpointing, that a manifest is durable, and
//! which checkpoints to keep.
//!
//! Each function takes the rank's collectives as an `Option<&Comm>` (`None`: a world of
//! one) and calls the same collectives on every rank.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::format::{self, InputRecord, Manifest};
use super::warn;
use super::writer::{self, ManifestWriter};
use crate::cluster::collective::Comm;
use crate::error::{Error, Result};

/// The checkpoints found in `root` (by their directories' names), oldest first; none if
/// `root` does not exist.
pub(super) fn found(root: &Path) -> Result<Vec<u64>> {
    let mut found: Vec<u64> = match std::fs::read_dir(root) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(format::ckpt_seq))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(Error::Io {
                path: root.to_path_buf(),
                source: e,
            })
        }
    };
    found.sort_unstable();
    Ok(found)
}

/// The manifests among checkpoints `found` that `rank` can load: the manifest verifies,
/// was made by a job of `world` ranks, and every file of this rank it refers to verifies.
/// The others are skipped with a warning.
pub(super) fn loadable(
    root: &Path,
    found: &[u64],
    rank: usize,
    world: usize,
) -> BTreeMap<u64, Manifest> {
    let mut manifests = BTreeMap::new();
    let mut checked: BTreeMap<u64, bool> = BTreeMap::new();
    for &seq in found.iter().rev() {
        let path = format::manifest_file(root, seq);
        let manifest = match format::read_manifest(&path) {
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
            let ok = *checked.entry(f).or_insert_with(|| {
                format::read_tables(&format::rank_file(root, f, rank, world)).is_ok()
            });
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
    manifests
}

/// The checkpoints in every one of the ranks' lists `all`.
pub(super) fn common(all: &[Vec<u64>]) -> BTreeSet<u64> {
    let Some((first, others)) = all.split_first() else {
        return BTreeSet::new();
    };
    let mut common: BTreeSet<u64> = first.iter().copied().collect();
    for other in others {
        let other: BTreeSet<u64> = other.iter().copied().collect();
        common = common.intersection(&other).copied().collect();
    }
    common
}

/// The manifests in `root` that every rank can load (a collective when `comm` is given):
/// the newest of them is where a replay ends.
pub(super) fn loadable_everywhere(
    root: &Path,
    comm: Option<&Comm>,
    rank: usize,
    world: usize,
) -> Result<BTreeMap<u64, Manifest>> {
    let mut manifests = loadable(root, &found(root)?, rank, world);
    let mine: Vec<u64> = manifests.keys().copied().collect();
    let usable = match comm {
        Some(c) => common(&c.allgather(mine)?),
        None => mine.into_iter().collect(),
    };
    manifests.retain(|s, _| usable.contains(s));
    Ok(manifests)
}

/// Of the input DDSs `inputs` of the agreed checkpoint, those every rank can load (a
/// collective when `comm` is given); the others are made again (their operators run), with
/// a warning.
pub(super) fn loadable_inputs(
    root: &Path,
    inputs: &BTreeMap<u64, InputRecord>,
    comm: Option<&Comm>,
    rank: usize,
    world: usize,
) -> Result<BTreeMap<u64, InputRecord>> {
    let bad: Vec<(u64, String)> = inputs
        .keys()
        .filter_map(|&n| {
            format::read_tables(&format::input_file(root, n, rank, world))
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
    Ok(inputs
        .iter()
        .filter(|(n, _)| !bad.contains_key(n))
        .map(|(&n, r)| (n, r.clone()))
        .collect())
}

/// Waits until rank 0's manifest being written (`job`, on rank 0) is durable; every rank
/// learns whether it is (a collective when `comm` is given), and fails if it is not.
pub(super) fn manifest_written(
    job: Option<(u64, ManifestWriter)>,
    comm: Option<&Comm>,
) -> Result<()> {
    let outcome = match job {
        Some((seq, job)) => writer::join_manifest_writer(seq, job),
        None => Ok(()),
    };
    let outcome = match comm {
        Some(c) => c.broadcast(0, outcome)?,
        None => outcome,
    };
    outcome.map_err(Error::Config)
}

/// A committed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Committed {
    pub seq: u64,
    /// Each table → the checkpoint holding its state.
    pub tables: BTreeMap<u64, u64>,
    /// Whether its files were forced to disk.
    pub synced: bool,
}

/// What pruning drops: the checkpoints whose manifests go, and of those, the ones whose
/// files go too (no kept manifest refers to them).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Pruned {
    pub manifests: Vec<u64>,
    pub files: Vec<u64>,
}

/// Keeps the newest `keep` of `committed` (oldest first) and the newest synced one (what
/// survives a power loss); says what to delete.
pub(super) fn prune(committed: &mut Vec<Committed>, keep: usize) -> Pruned {
    if committed.len() <= keep {
        return Pruned::default();
    }
    let cut = committed.len() - keep;
    let newest_synced = committed.iter().rposition(|c| c.synced);
    let mut manifests = Vec::new();
    let mut i = 0;
    committed.retain(|c| {
        let kept = i >= cut || Some(i) == newest_synced;
        i += 1;
        if !kept {
            manifests.push(c.seq);
        }
        kept
    });
    let needed: BTreeSet<u64> = committed
        .iter()
        .flat_map(|c| c.tables.values().copied())
        .collect();
    let files = manifests
        .iter()
        .copied()
        .filter(|seq| !needed.contains(seq))
        .collect();
    Pruned { manifests, files }
}

/// Deletes what [`prune`] dropped: rank 0 the manifests, every rank its files.
pub(super) fn delete(root: &Path, pruned: &Pruned, rank: usize, world: usize) {
    for &seq in &pruned.manifests {
        if rank == 0 {
            let _ = std::fs::remove_file(format::manifest_file(root, seq));
        }
        if pruned.files.contains(&seq) {
            let _ = std::fs::remove_file(format::rank_file(root, seq, rank, world));
            // Empty once every rank removed its file (on a shared file system).
            let _ = std::fs::remove_dir(format::ckpt_dir(root, seq));
        }
    }
}
