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

/// What a rank found it cannot use, to be reported on the terminal (by rank 0, for every
/// rank: the other ranks' output goes to their logs).
pub(super) type Skipped = Vec<String>;

/// The manifests among checkpoints `found` that `rank` of a job of `world` ranks can
/// load: the manifest verifies, and every file it refers to that this rank reads verifies
/// and has the checksum the manifest recorded for it. A rank reads its own part of a file
/// written by a job of `world` ranks, and every part of one written by a job of another
/// size (whose tables it repartitions as they load; see [`format::parts_read`]). The
/// others are skipped, each with the reason (oldest first).
pub(super) fn loadable(
    root: &Path,
    found: &[u64],
    rank: usize,
    world: usize,
) -> (BTreeMap<u64, Manifest>, Skipped) {
    let mut manifests = BTreeMap::new();
    let mut skipped = Vec::new();
    // Per part of a file: why it cannot be used, if it cannot.
    let mut checked: BTreeMap<(u64, usize, u32), Option<String>> = BTreeMap::new();
    for &seq in found.iter().rev() {
        let path = format::manifest_file(root, seq);
        let manifest = match format::read_manifest(&path) {
            Ok(m) if m.seq == seq => m,
            Ok(m) => {
                skipped.push(format!(
                    "checkpoint {seq}'s manifest is checkpoint {}'s (copied or moved); ignored",
                    m.seq
                ));
                continue;
            }
            // Older than a loadable one: pruned, its files kept for the tables newer
            // manifests still take from it. Newer: not committed, or removed.
            Err(_) if !path.exists() => {
                if manifests.is_empty() {
                    skipped.push(format!(
                        "checkpoint {seq} has no manifest (not committed before the job \
                         stopped, or the manifest was removed); ignored"
                    ));
                }
                continue;
            }
            Err(e) => {
                skipped.push(format!("checkpoint {seq} is not usable: {e}"));
                continue;
            }
        };
        // A file written by a job of another size (the manifest records a checksum per
        // rank that wrote it) is read whole: every part.
        let files: BTreeSet<u64> = manifest.tables.values().copied().collect();
        let bad = files.iter().find_map(|&f| {
            let sums = manifest.files.get(&f).map_or(&[][..], Vec::as_slice);
            if sums.is_empty() {
                let file = format::rank_file(root, f, rank, world);
                return Some((
                    f,
                    format!(
                        "{}: the manifest records no checksum for it",
                        file.display()
                    ),
                ));
            }
            format::parts_read(rank, world, sums.len()).find_map(|part| {
                let why = checked.entry((f, part, sums[part])).or_insert_with(|| {
                    format::check_file(&format::rank_file(root, f, part, sums.len()), sums[part])
                });
                why.clone().map(|why| (f, why))
            })
        });
        match bad {
            None => {
                manifests.insert(seq, manifest);
            }
            Some((f, why)) => skipped.push(format!(
                "checkpoint {seq} cannot be loaded on rank {rank}: its file of checkpoint {f} \
                 is missing, torn, corrupted or stale ({why})"
            )),
        }
    }
    skipped.reverse();
    (manifests, skipped)
}

/// Reports what the ranks skipped (`all[r]`: rank `r`'s list) on rank 0, which writes to
/// the terminal; every rank also logs its own.
fn report_skipped(all: &[Skipped], rank: usize) {
    if let Some(mine) = all.get(rank) {
        for why in mine {
            tracing::warn!("{why}");
        }
    }
    if rank != 0 {
        return;
    }
    // Manifest findings are the same on every rank: each is said once.
    let mut seen = BTreeSet::new();
    for why in all.iter().flatten() {
        if seen.insert(why.as_str()) {
            eprintln!("strads-ap: warning: {why}");
        }
    }
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
    let (mut manifests, skipped) = loadable(root, &found(root)?, rank, world);
    let mine: Vec<u64> = manifests.keys().copied().collect();
    let (usable, skipped) = match comm {
        Some(c) => {
            let all = c.allgather((mine, skipped))?;
            let (lists, skipped): (Vec<Vec<u64>>, Vec<Skipped>) = all.into_iter().unzip();
            (common(&lists), skipped)
        }
        None => (mine.into_iter().collect(), vec![skipped]),
    };
    report_skipped(&skipped, rank);
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
        .iter()
        .filter_map(|(&n, record)| {
            let sums = &record.checksums;
            let why = match sums.is_empty() {
                true => Some(format!(
                    "{}: the manifest records no checksum for it",
                    format::input_file(root, n, rank, world).display()
                )),
                false => format::parts_read(rank, world, sums.len()).find_map(|part| {
                    format::check_file(&format::input_file(root, n, part, sums.len()), sums[part])
                }),
            };
            why.map(|e| (n, e))
        })
        .collect();
    let bad: BTreeMap<u64, String> = match comm {
        Some(c) => {
            let mut all = BTreeMap::new();
            for (r, theirs) in c.allgather(bad)?.into_iter().enumerate() {
                // Other ranks' lists are checked: a peer cannot name an input this
                // checkpoint does not have.
                if let Some((n, _)) = theirs.iter().find(|(n, _)| !inputs.contains_key(n)) {
                    return Err(Error::BadPeerData {
                        rank: r,
                        what: "list of unloadable checkpoint inputs".into(),
                        message: format!(
                            "input {n}, which the agreed checkpoint does not have (it has {})",
                            inputs.len()
                        ),
                    });
                }
                all.extend(theirs);
            }
            all
        }
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
    /// The ranks of the job that wrote its files (a job resumed at another size keeps
    /// the files of the old one while its manifests refer to them).
    pub world: usize,
}

/// What pruning drops: the checkpoints whose manifests go, and of those, the ones whose
/// files go too (no kept manifest refers to them), with the ranks that wrote them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Pruned {
    pub manifests: Vec<u64>,
    pub files: Vec<(u64, usize)>,
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
    let mut worlds = BTreeMap::new();
    let mut i = 0;
    committed.retain(|c| {
        let kept = i >= cut || Some(i) == newest_synced;
        i += 1;
        if !kept {
            manifests.push(c.seq);
            worlds.insert(c.seq, c.world);
        }
        kept
    });
    let needed: BTreeSet<u64> = committed
        .iter()
        .flat_map(|c| c.tables.values().copied())
        .collect();
    let files = manifests
        .iter()
        .filter(|seq| !needed.contains(seq))
        .map(|seq| (*seq, worlds[seq]))
        .collect();
    Pruned { manifests, files }
}

/// Deletes what [`prune`] dropped: rank 0 the manifests, every rank its files (the files
/// of a job of another size are shared out: part `p` goes with rank `p % world`).
pub(super) fn delete(root: &Path, pruned: &Pruned, rank: usize, world: usize) {
    for &seq in &pruned.manifests {
        if rank == 0 {
            let _ = std::fs::remove_file(format::manifest_file(root, seq));
        }
        if let Some(&(_, written_by)) = pruned.files.iter().find(|(f, _)| *f == seq) {
            for part in (rank..written_by).step_by(world.max(1)) {
                let _ = std::fs::remove_file(format::rank_file(root, seq, part, written_by));
            }
            // Empty once every rank removed its file (on a shared file system).
            let _ = std::fs::remove_dir(format::ckpt_dir(root, seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::checkpoint::format::{
        input_file, manifest_file, rank_file, write_manifest, write_tables, Tables,
    };
    use crate::cluster::{here, simulate};

    /// Commits checkpoint `seq` as a job of `world` ranks does: each rank's file holds
    /// the tables whose latest state `tables` (table → checkpoint) puts in `seq`, and the
    /// manifest lists them all.
    fn commit(root: &Path, seq: u64, world: usize, tables: &[(u64, u64)]) {
        let mut sums = Vec::new();
        for rank in 0..world {
            let own: Tables = tables
                .iter()
                .filter(|(_, f)| *f == seq)
                .map(|(id, _)| (*id, vec![rank as u8, seq as u8, 3]))
                .collect();
            sums.push(write_tables(&rank_file(root, seq, rank, world), &own, false).unwrap());
        }
        // The checksums of the older files it refers to, as their manifests recorded them.
        let mut files = BTreeMap::from([(seq, sums)]);
        for &(_, f) in tables {
            if f != seq {
                let older = crate::checkpoint::format::read_manifest(&manifest_file(root, f));
                files.insert(f, older.unwrap().files[&f].clone());
            }
        }
        let manifest = Manifest {
            seq,
            site: format!("loop {seq}"),
            world,
            tables: tables.iter().copied().collect(),
            files,
            inputs: BTreeMap::new(),
            reductions: BTreeMap::new(),
        };
        write_manifest(&manifest_file(root, seq), &manifest, false).unwrap();
    }

    /// Checkpoints 1, 2 and 3 of a 2-rank job: table 1 is written every time, table 2
    /// only at 1 (so checkpoint 2 refers to checkpoint 1's files).
    fn three_checkpoints(root: &Path) {
        commit(root, 1, 2, &[(1, 1), (2, 1)]);
        commit(root, 2, 2, &[(1, 2), (2, 1)]);
        commit(root, 3, 2, &[(1, 3), (2, 1)]);
    }

    fn tear(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
    }

    fn seqs(manifests: &BTreeMap<u64, Manifest>) -> Vec<u64> {
        manifests.keys().copied().collect()
    }

    #[test]
    fn checkpoints_are_found_by_their_directories() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(found(&dir.path().join("none")).unwrap(), Vec::<u64>::new());
        commit(dir.path(), 3, 1, &[(1, 3)]);
        commit(dir.path(), 1, 1, &[(1, 1)]);
        std::fs::create_dir(dir.path().join("input-000001")).unwrap();
        std::fs::write(dir.path().join("ckpt-notes.txt"), b"").unwrap();
        assert_eq!(found(dir.path()).unwrap(), [1, 3]);
    }

    #[test]
    fn a_rank_can_load_a_checkpoint_whose_files_all_verify() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        three_checkpoints(root);
        tear(&rank_file(root, 3, 1, 2));
        let all = found(root).unwrap();
        assert_eq!(seqs(&loadable(root, &all, 0, 2).0), [1, 2, 3]);
        assert_eq!(seqs(&loadable(root, &all, 1, 2).0), [1, 2]);
        // Checkpoint 1's file holds table 2 for every later checkpoint too.
        tear(&rank_file(root, 1, 0, 2));
        assert_eq!(seqs(&loadable(root, &all, 0, 2).0), Vec::<u64>::new());
        std::fs::remove_file(rank_file(root, 1, 1, 2)).unwrap();
        assert_eq!(seqs(&loadable(root, &all, 1, 2).0), Vec::<u64>::new());
    }

    #[test]
    fn bad_manifests_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        three_checkpoints(root);
        // A torn manifest, a manifest in the wrong directory, and a checkpoint never
        // committed.
        tear(&manifest_file(root, 3));
        std::fs::create_dir(format::ckpt_dir(root, 5)).unwrap();
        std::fs::copy(manifest_file(root, 1), manifest_file(root, 5)).unwrap();
        commit(root, 6, 2, &[(1, 6), (2, 1)]);
        std::fs::remove_file(manifest_file(root, 6)).unwrap();
        let all = found(root).unwrap();
        assert_eq!(all, [1, 2, 3, 5, 6]);
        assert_eq!(seqs(&loadable(root, &all, 0, 2).0), [1, 2]);
    }

    /// A checkpoint of a job of three ranks, whose manifest also refers to a file of a
    /// job of two: every rank of a job of two reads every part of the three-rank file (its
    /// own part of the other), so one bad part of it makes the checkpoint unloadable on
    /// every rank. The job of two then prunes the three-rank files among its ranks.
    #[test]
    fn a_checkpoint_of_another_job_size_loads_from_every_part() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        three_checkpoints(root);
        commit(root, 4, 3, &[(1, 4), (2, 1)]);
        let all = found(root).unwrap();
        for rank in 0..2 {
            assert_eq!(
                seqs(&loadable(root, &all, rank, 2).0),
                [1, 2, 3, 4],
                "rank {rank}"
            );
        }
        // Every part of the other job's file is read, and checked.
        tear(&rank_file(root, 4, 2, 3));
        for rank in 0..2 {
            let (ok, skipped) = loadable(root, &all, rank, 2);
            assert_eq!(seqs(&ok), [1, 2, 3], "rank {rank}");
            assert!(
                skipped.iter().any(|w| w.contains("rank-2-of-3.bin")),
                "{skipped:?}"
            );
        }
        let pruned = Pruned {
            manifests: vec![4],
            files: vec![(4, 3)],
        };
        delete(root, &pruned, 1, 2);
        assert!(!rank_file(root, 4, 1, 3).exists());
        assert!(rank_file(root, 4, 0, 3).exists() && rank_file(root, 4, 2, 3).exists());
        delete(root, &pruned, 0, 2);
        assert!(!format::ckpt_dir(root, 4).exists());
    }

    #[test]
    fn the_ranks_agree_on_the_checkpoints_every_rank_can_load() {
        assert_eq!(common(&[]), BTreeSet::new());
        assert_eq!(common(&[vec![]]), BTreeSet::new());
        assert_eq!(common(&[vec![1, 2]]), BTreeSet::from([1, 2]));
        assert_eq!(
            common(&[vec![1, 2, 3], vec![2, 3], vec![3, 1, 2]]),
            BTreeSet::from([2, 3])
        );
        assert_eq!(common(&[vec![1], vec![2]]), BTreeSet::new());
    }

    #[test]
    fn ranks_resume_from_the_newest_checkpoint_all_of_them_can_load() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        three_checkpoints(root);
        // Rank 1 cannot load 3; rank 0 could.
        tear(&rank_file(root, 3, 1, 2));
        let agreed = simulate(2, || {
            let here = here();
            let (rank, world) = (here.rank(), here.world_size());
            seqs(&loadable_everywhere(root, here.comm(), rank, world).unwrap())
        });
        assert_eq!(agreed, [vec![1, 2], vec![1, 2]]);
        // Alone, rank 0 would resume from 3.
        assert_eq!(
            seqs(&loadable_everywhere(root, None, 0, 2).unwrap()),
            [1, 2, 3]
        );
    }

    #[test]
    fn no_common_checkpoint_means_starting_over() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        commit(root, 1, 2, &[(1, 1)]);
        commit(root, 2, 2, &[(1, 2)]);
        tear(&rank_file(root, 1, 0, 2));
        tear(&rank_file(root, 2, 1, 2));
        let agreed = simulate(2, || {
            let here = here();
            let (rank, world) = (here.rank(), here.world_size());
            seqs(&loadable_everywhere(root, here.comm(), rank, world).unwrap())
        });
        assert_eq!(agreed, [Vec::<u64>::new(), Vec::new()]);
    }

    #[test]
    fn inputs_load_only_where_every_rank_can_load_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let inputs: BTreeMap<u64, InputRecord> = (1..=4)
            .map(|n| {
                let checksums = (0..2)
                    .map(|rank| {
                        let tables = [(n, vec![1, 2, n as u8])];
                        write_tables(&input_file(root, n, rank, 2), &tables, false).unwrap()
                    })
                    .collect();
                let site = format!("DVector::from_fn at src/main.rs:{n}:1");
                (
                    n,
                    InputRecord {
                        site,
                        id: n,
                        checksums,
                    },
                )
            })
            .collect();
        tear(&input_file(root, 2, 1, 2));
        std::fs::remove_file(input_file(root, 3, 0, 2)).unwrap();
        // Well-formed, but another input's file.
        std::fs::copy(input_file(root, 1, 1, 2), input_file(root, 4, 1, 2)).unwrap();
        let loadable = simulate(2, || {
            let here = here();
            let (rank, world) = (here.rank(), here.world_size());
            loadable_inputs(root, &inputs, here.comm(), rank, world).unwrap()
        });
        let first = BTreeMap::from([(1, inputs[&1].clone())]);
        assert_eq!(loadable, [first.clone(), first]);
    }

    /// A peer naming an input the checkpoint does not have panicked every rank (the
    /// warning indexed the inputs by it); it is refused, naming the rank.
    #[test]
    fn a_peer_cannot_name_inputs_the_checkpoint_does_not_have() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let site = "DVector::from_fn at src/main.rs:1:1".to_string();
        let inputs = BTreeMap::from([(
            1,
            InputRecord {
                site,
                id: 1,
                checksums: Vec::new(),
            },
        )]);
        for rank in 0..2 {
            write_tables(&input_file(root, 1, rank, 2), &[(1, vec![1])], false).unwrap();
        }
        let outcomes = simulate(2, || {
            let here = here();
            match here.rank() {
                0 => loadable_inputs(root, &inputs, here.comm(), 0, 2).map_err(|e| e.to_string()),
                _ => {
                    // Rank 1 lies: it says input 999 does not load.
                    let lie = vec![(999u64, "torn".to_string())];
                    here.comm().unwrap().allgather(lie).unwrap();
                    Ok(BTreeMap::new())
                }
            }
        });
        assert_eq!(
            outcomes[0],
            Err(
                "rank 1 sent a malformed list of unloadable checkpoint inputs: input 999, \
                 which the agreed checkpoint does not have (it has 1)"
                    .to_string()
            )
        );
    }

    #[test]
    fn a_stale_but_well_formed_rank_file_is_skipped_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        three_checkpoints(root);
        // Rank 1's file of checkpoint 2 copied over its file of checkpoint 3: each file's
        // own checksum holds.
        std::fs::copy(rank_file(root, 2, 1, 2), rank_file(root, 3, 1, 2)).unwrap();
        assert!(format::read_tables(&rank_file(root, 3, 1, 2)).is_ok());
        let all = found(root).unwrap();
        let (manifests, skipped) = loadable(root, &all, 1, 2);
        assert_eq!(seqs(&manifests), [1, 2]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(
            skipped[0].starts_with("checkpoint 3 cannot be loaded on rank 1")
                && skipped[0].contains("stale or replaced"),
            "{}",
            skipped[0]
        );
        assert_eq!(seqs(&loadable(root, &all, 0, 2).0), [1, 2, 3]);
        let agreed = simulate(2, || {
            let here = here();
            let (rank, world) = (here.rank(), here.world_size());
            seqs(&loadable_everywhere(root, here.comm(), rank, world).unwrap())
        });
        assert_eq!(agreed, [vec![1, 2], vec![1, 2]]);
    }

    #[test]
    fn a_missing_newest_manifest_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        three_checkpoints(root);
        std::fs::remove_file(manifest_file(root, 3)).unwrap();
        // Checkpoint 1 pruned as a job does it: its manifest goes, its file stays (the
        // manifest of 2 takes table 2 from it). That is no news.
        std::fs::remove_file(manifest_file(root, 1)).unwrap();
        let (manifests, skipped) = loadable(root, &found(root).unwrap(), 0, 2);
        assert_eq!(seqs(&manifests), [2]);
        assert_eq!(
            skipped,
            [
                "checkpoint 3 has no manifest (not committed before the job stopped, or the \
              manifest was removed); ignored"
            ]
        );
    }

    #[test]
    fn every_rank_learns_whether_the_manifest_was_written() {
        assert!(manifest_written(None, None).is_ok());
        for failure in [None, Some("disk full")] {
            let outcomes = simulate(2, || {
                let here = here();
                let job = (here.rank() == 0).then(|| {
                    let outcome = failure.map_or(Ok(()), |e| Err(e.to_string()));
                    (3, std::thread::spawn(move || outcome))
                });
                manifest_written(job, here.comm()).map_err(|e| e.to_string())
            });
            let expected = match failure {
                None => Ok(()),
                Some(e) => Err(format!("configuration: checkpoint 3 not committed: {e}")),
            };
            assert_eq!(outcomes, [expected.clone(), expected]);
        }
    }

    /// Committed checkpoints `seqs`, those in `synced` forced to disk; table 1 is written
    /// by every one, table 2 by the first only.
    fn committed(seqs: &[u64], synced: &[u64]) -> Vec<Committed> {
        seqs.iter()
            .map(|&seq| Committed {
                seq,
                tables: BTreeMap::from([(1, seq), (2, seqs[0])]),
                synced: synced.contains(&seq),
                world: 2,
            })
            .collect()
    }

    fn kept(committed: &[Committed]) -> Vec<u64> {
        committed.iter().map(|c| c.seq).collect()
    }

    #[test]
    fn pruning_keeps_the_newest_and_the_newest_synced() {
        let mut c = committed(&[1, 2, 3, 4, 5], &[1]);
        let pruned = prune(&mut c, 2);
        assert_eq!(kept(&c), [1, 4, 5]);
        // Kept manifests refer to checkpoint 1's files (table 2), not to 2's or 3's.
        assert_eq!(
            pruned,
            Pruned {
                manifests: vec![2, 3],
                files: vec![(2, 2), (3, 2)]
            }
        );
        // Only the newest synced one is kept beside the newest `keep`.
        let mut c = committed(&[1, 2, 3, 4], &[1, 2]);
        prune(&mut c, 2);
        assert_eq!(kept(&c), [2, 3, 4]);
        // A synced one among the newest adds nothing.
        let mut c = committed(&[1, 2, 3], &[1, 3]);
        prune(&mut c, 1);
        assert_eq!(kept(&c), [3]);
        // Nothing to prune.
        let mut c = committed(&[1, 2], &[]);
        assert_eq!(prune(&mut c, 2), Pruned::default());
        assert_eq!(kept(&c), [1, 2]);
    }

    #[test]
    fn files_a_kept_manifest_refers_to_stay() {
        let mut c = committed(&[1, 2, 3, 4], &[]);
        let pruned = prune(&mut c, 1);
        assert_eq!(kept(&c), [4]);
        assert_eq!(pruned.manifests, [1, 2, 3]);
        // Checkpoint 4's manifest takes table 2 from checkpoint 1's files.
        assert_eq!(pruned.files, [(2, 2), (3, 2)]);
    }

    #[test]
    fn rank_0_deletes_manifests_and_every_rank_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        commit(root, 1, 2, &[(1, 1)]);
        commit(root, 2, 2, &[(1, 2)]);
        let pruned = Pruned {
            manifests: vec![1],
            files: vec![(1, 2)],
        };
        delete(root, &pruned, 1, 2);
        assert!(!rank_file(root, 1, 1, 2).exists());
        assert!(rank_file(root, 1, 0, 2).exists() && manifest_file(root, 1).exists());
        delete(root, &pruned, 0, 2);
        assert!(!format::ckpt_dir(root, 1).exists());
        assert!(manifest_file(root, 2).exists());
        // A manifest dropped whose files are still needed: only the manifest goes.
        let pruned = Pruned {
            manifests: vec![2],
            files: vec![],
        };
        for rank in [1, 0] {
            delete(root, &pruned, rank, 2);
        }
        assert!(!manifest_file(root, 2).exists());
        assert!(rank_file(root, 2, 0, 2).exists() && rank_file(root, 2, 1, 2).exists());
    }
}
