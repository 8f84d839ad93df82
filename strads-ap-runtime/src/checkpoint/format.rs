//! The on-disk format of checkpoints: where files go, how a file of tables is framed and
//! checked, and what a manifest holds.
//!
//! A *table file* is a header (magic, format version, table count), the tables (id,
//! length, bytes), and a trailer with the length and CRC-32 of everything before it and an
//! end mark. A file is written to a temporary name and renamed into place, so it is either
//! whole or absent, unless the machine lost it before it reached the disk: then the
//! trailer or the checksum tells. A manifest is a table file of one entry, the encoded
//! [`Manifest`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dds::persist::Saved;

const MAGIC: &[u8; 8] = b"STRADSCK";
const TRAILER: &[u8; 4] = b"END!";
/// 4: manifests record every rank's checksum of every file they refer to.
/// 5: manifests record the reduction variables' values of every loop call.
const VERSION: u32 = 5;
/// Magic, version, table count.
const HEADER_LEN: usize = 8 + 4 + 8;
/// Body length, checksum, end mark.
const TRAILER_LEN: usize = 8 + 4 + 4;
/// The entry of an input checkpoint file holding its operator's extra outcome (e.g. a
/// [`crate::ReadReport`]).
pub(super) const META: u64 = u64::MAX;

/// Tables of a checkpoint file: (id, encoded state).
pub(super) type Tables = Vec<(u64, Vec<u8>)>;

/// A committed checkpoint: what rank 0 writes once every rank's file is durable.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Manifest {
    pub seq: u64,
    /// The loop call this checkpoint follows.
    pub site: String,
    pub world: usize,
    /// Every table checkpointed so far → the checkpoint holding its latest state.
    pub tables: BTreeMap<u64, u64>,
    /// Every checkpoint `tables` refers to → each rank's checksum of its file there: a
    /// rank file that verifies on its own but is not the one committed (an older file
    /// copied over it) is refused.
    pub files: BTreeMap<u64, Vec<u32>>,
    /// Every input DDS checkpointed so far: input operator number → where it was made.
    pub inputs: BTreeMap<u64, InputRecord>,
    /// The combined values of the reduction variables (`loss += ..` in a loop body) of
    /// every loop call up to this one that has any: loop call → each variable's encoded
    /// value. A replay skips those calls and gives the variables these values.
    pub reductions: BTreeMap<u64, Vec<Vec<u8>>>,
}

/// An input DDS's checkpoint: the operator that made it and the DDS.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct InputRecord {
    /// The operator and its call site, e.g. `DVector::from_fn at src/main.rs:12:5`.
    pub site: String,
    /// The table it made.
    pub id: u64,
    /// Each rank's checksum of its file of the DDS.
    pub checksums: Vec<u32>,
}

/// Why bytes are not a whole table file of this version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Corrupt {
    /// Too short for a header and a trailer, or no magic: not one of ours.
    #[error("not a strads-ap checkpoint file (torn or foreign)")]
    Foreign,
    /// The end mark is missing: the file was cut short.
    #[error("truncated (no trailer)")]
    NoTrailer,
    /// The trailer's length is not the body's.
    #[error("{found} bytes where {written} were written")]
    Length {
        /// Bytes before the trailer.
        found: u64,
        /// What the trailer says.
        written: u64,
    },
    /// The body's CRC-32 is not the trailer's.
    #[error("checksum mismatch (corrupted)")]
    Checksum,
    /// Written by another version of the format.
    #[error(
        "format version {found}, but this strads-ap reads version {VERSION} only (written by \
         another release: resume with that release, or start the job afresh)"
    )]
    Version {
        /// The file's version.
        found: u32,
    },
    /// The table count or a table's length runs past the body.
    #[error("ends inside a table")]
    EndsInsideTable,
}

/// The directory of the checkpoint after loop call `seq`.
pub(super) fn ckpt_dir(root: &Path, seq: u64) -> PathBuf {
    root.join(format!("ckpt-{seq:010}"))
}

/// The loop call a checkpoint directory named `name` follows; `None` for other names.
pub(super) fn ckpt_seq(name: &str) -> Option<u64> {
    name.strip_prefix("ckpt-")?.parse().ok()
}

/// The manifest that commits the checkpoint after loop call `seq`.
pub(super) fn manifest_file(root: &Path, seq: u64) -> PathBuf {
    ckpt_dir(root, seq).join("MANIFEST")
}

/// `rank`'s file of the checkpoint after loop call `seq`.
pub(super) fn rank_file(root: &Path, seq: u64, rank: usize, world: usize) -> PathBuf {
    ckpt_dir(root, seq).join(format!("rank-{rank}-of-{world}.bin"))
}

/// `rank`'s file of the DDS made by input operator `number`.
pub(super) fn input_file(root: &Path, number: u64, rank: usize, world: usize) -> PathBuf {
    root.join(format!("input-{number:06}"))
        .join(format!("rank-{rank}-of-{world}.bin"))
}

/// The parts of a file written by a job of `written_by` ranks that `rank` of a job of
/// `world` ranks reads: its own when the sizes agree; every part when they differ (the
/// tables are repartitioned as they load).
pub(super) fn parts_read(rank: usize, world: usize, written_by: usize) -> std::ops::Range<usize> {
    match written_by == world {
        true => rank..rank + 1,
        false => 0..written_by,
    }
}

/// Why the file at `path` is not the one committed with checksum `want`, if it is not.
pub(super) fn check_file(path: &Path, want: u32) -> Option<String> {
    match read_tables(path) {
        Err(e) => Some(e),
        Ok((_, sum)) if sum != want => Some(format!(
            "{}: a well-formed file, but not the one committed (checksum {sum:08x}, the \
             manifest says {want:08x}): stale or replaced",
            path.display()
        )),
        Ok(_) => None,
    }
}

/// The parts of one checkpointed file that a rank reads (see [`parts_read`]), each
/// checked against the checksum committed for it.
pub(super) struct Parts {
    /// The tables of each part read, in rank order.
    parts: Vec<Tables>,
    /// Written by a job of this size: the one part is this rank's own.
    own: bool,
}

impl Parts {
    /// Reads the parts `rank` of a job of `world` ranks needs of a file whose parts the
    /// job of `sums.len()` ranks that wrote it committed with checksums `sums`; `path`
    /// names part `r` of `n`.
    pub(super) fn read(
        sums: &[u32],
        rank: usize,
        world: usize,
        path: impl Fn(usize, usize) -> PathBuf,
    ) -> Result<Parts, String> {
        let written_by = sums.len();
        if written_by == 0 {
            return Err(format!(
                "{}: the manifest records no checksum for it",
                path(rank, world).display()
            ));
        }
        let mut parts = Vec::new();
        for r in parts_read(rank, world, written_by) {
            let file = path(r, written_by);
            let (tables, sum) = read_tables(&file)?;
            if sum != sums[r] {
                return Err(format!(
                    "{}: not the file committed (its checksum changed since the ranks agreed \
                     to resume from it)",
                    file.display()
                ));
            }
            parts.push(tables);
        }
        Ok(Parts {
            parts,
            own: written_by == world,
        })
    }

    /// Takes the saved state of table `id` out of every part read; `None` if a part
    /// lacks it.
    pub(super) fn take(&mut self, id: u64) -> Option<Saved> {
        let take = |tables: &mut Tables| {
            tables
                .iter_mut()
                .find(|(t, _)| *t == id)
                .map(|(_, bytes)| std::mem::take(bytes))
        };
        match self.own {
            true => self.parts.first_mut().and_then(take).map(Saved::Own),
            false => self
                .parts
                .iter_mut()
                .map(take)
                .collect::<Option<_>>()
                .map(Saved::Parts),
        }
    }

    /// Bytes `id` holds in the first part read (an operator's extra outcome, the same
    /// on every rank).
    pub(super) fn first(&mut self, id: u64) -> Option<Vec<u8>> {
        let tables = self.parts.first_mut()?;
        let i = tables.iter().position(|(t, _)| *t == id)?;
        Some(tables.swap_remove(i).1)
    }
}

/// Writes `tables` (id, encoded state) to `out` framed as a table file; returns the
/// checksum.
pub(super) fn encode_to(out: &mut impl Write, tables: &[(u64, Vec<u8>)]) -> std::io::Result<u32> {
    let mut crc = crc32fast::Hasher::new();
    let mut len = 0u64;
    let mut put = |out: &mut dyn Write, bytes: &[u8]| {
        crc.update(bytes);
        len += bytes.len() as u64;
        out.write_all(bytes)
    };
    put(out, MAGIC)?;
    put(out, &VERSION.to_le_bytes())?;
    put(out, &(tables.len() as u64).to_le_bytes())?;
    for (id, bytes) in tables {
        put(out, &id.to_le_bytes())?;
        put(out, &(bytes.len() as u64).to_le_bytes())?;
        put(out, bytes)?;
    }
    let sum = crc.finalize();
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&sum.to_le_bytes())?;
    out.write_all(TRAILER)?;
    Ok(sum)
}

/// Reads a table file from `bytes`, checking its framing, length, checksum and version.
/// Returns the tables and the checksum.
pub(super) fn decode(bytes: &[u8]) -> Result<(Tables, u32), Corrupt> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN || &bytes[..8] != MAGIC {
        return Err(Corrupt::Foreign);
    }
    let (body, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
    if &trailer[12..] != TRAILER {
        return Err(Corrupt::NoTrailer);
    }
    let written = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    let sum = u32::from_le_bytes(trailer[8..12].try_into().expect("4 bytes"));
    if written != body.len() as u64 {
        return Err(Corrupt::Length {
            found: body.len() as u64,
            written,
        });
    }
    if crc32fast::hash(body) != sum {
        return Err(Corrupt::Checksum);
    }
    let found = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if found != VERSION {
        return Err(Corrupt::Version { found });
    }
    let mut at = 12;
    let word = |at: &mut usize| -> Result<u64, Corrupt> {
        let w = body.get(*at..*at + 8).ok_or(Corrupt::EndsInsideTable)?;
        *at += 8;
        Ok(u64::from_le_bytes(w.try_into().expect("8 bytes")))
    };
    let count = word(&mut at)?;
    let mut tables = Vec::new();
    for _ in 0..count {
        let id = word(&mut at)?;
        let n = word(&mut at)? as usize;
        let data = at
            .checked_add(n)
            .and_then(|end| body.get(at..end))
            .ok_or(Corrupt::EndsInsideTable)?;
        at += n;
        tables.push((id, data.to_vec()));
    }
    Ok((tables, sum))
}

/// Writes `tables` (id, encoded state) to `path` atomically: framed by [`encode_to`] into
/// a temporary file, with `sync` forced to disk, and renamed into place. Returns the
/// checksum.
pub(super) fn write_tables(
    path: &Path,
    tables: &[(u64, Vec<u8>)],
    sync: bool,
) -> std::io::Result<u32> {
    let dir = path.parent().expect("checkpoint files live in a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let sum = encode_to(&mut f, tables)?;
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

/// Reads a file written by [`write_tables`] (see [`decode`]); errors name the file.
pub(super) fn read_tables(path: &Path) -> Result<(Tables, u32), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes a manifest atomically (checksummed like the tables).
pub(super) fn write_manifest(path: &Path, manifest: &Manifest, sync: bool) -> Result<(), String> {
    let bytes = postcard::to_stdvec(manifest).map_err(|e| e.to_string())?;
    write_tables(path, &[(0, bytes)], sync)
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a manifest written by [`write_manifest`].
pub(super) fn read_manifest(path: &Path) -> Result<Manifest, String> {
    let (mut tables, _) = read_tables(path)?;
    let (_, bytes) = tables.pop().ok_or("an empty manifest")?;
    postcard::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    fn sample() -> Tables {
        vec![
            (3, b"three".to_vec()),
            (7, Vec::new()),
            (META, vec![0xab; 1000]),
        ]
    }

    fn encoded(tables: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_to(&mut out, tables).unwrap();
        out
    }

    /// Recomputes the trailer of `bytes` after the body was edited: a file whose framing
    /// and checksum are right but whose content is not.
    fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
        let body_len = bytes.len() - TRAILER_LEN;
        bytes.truncate(body_len);
        let sum = crc32fast::hash(&bytes);
        bytes.extend((body_len as u64).to_le_bytes());
        bytes.extend(sum.to_le_bytes());
        bytes.extend(TRAILER);
        bytes
    }

    #[test]
    fn tables_round_trip_with_their_checksum() {
        for tables in [sample(), Vec::new()] {
            let mut out = Vec::new();
            let sum = encode_to(&mut out, &tables).unwrap();
            assert_eq!(decode(&out), Ok((tables, sum)));
            assert_eq!(sum, crc32fast::hash(&out[..out.len() - TRAILER_LEN]));
        }
    }

    #[test]
    fn files_round_trip_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt-0000000001").join("rank-0-of-1.bin");
        for sync in [false, true] {
            let sum = write_tables(&path, &sample(), sync).unwrap();
            assert_eq!(read_tables(&path), Ok((sample(), sum)));
        }
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["rank-0-of-1.bin"]);
    }

    #[test]
    fn short_or_foreign_files_are_refused() {
        let good = encoded(&sample());
        assert_eq!(decode(&[]), Err(Corrupt::Foreign));
        assert_eq!(
            decode(&good[..HEADER_LEN + TRAILER_LEN - 1]),
            Err(Corrupt::Foreign)
        );
        let mut foreign = good.clone();
        foreign[0] = b'X';
        assert_eq!(decode(&foreign), Err(Corrupt::Foreign));
        assert_eq!(
            Corrupt::Foreign.to_string(),
            "not a strads-ap checkpoint file (torn or foreign)"
        );
    }

    #[test]
    fn a_file_cut_short_is_refused() {
        let good = encoded(&sample());
        for len in [good.len() - 1, good.len() / 2, HEADER_LEN + TRAILER_LEN] {
            assert_eq!(decode(&good[..len]), Err(Corrupt::NoTrailer), "{len} bytes");
        }
        assert_eq!(Corrupt::NoTrailer.to_string(), "truncated (no trailer)");
    }

    #[test]
    fn a_bad_end_mark_is_refused() {
        let mut bad = encoded(&sample());
        *bad.last_mut().unwrap() = b'?';
        assert_eq!(decode(&bad), Err(Corrupt::NoTrailer));
    }

    #[test]
    fn a_body_of_the_wrong_length_is_refused() {
        let good = encoded(&sample());
        // A byte lost in the middle, the trailer intact.
        let mut short = good.clone();
        short.remove(HEADER_LEN + 3);
        let written = (good.len() - TRAILER_LEN) as u64;
        let found = written - 1;
        assert_eq!(decode(&short), Err(Corrupt::Length { found, written }));
        assert_eq!(
            Corrupt::Length { found, written }.to_string(),
            format!("{found} bytes where {written} were written")
        );
    }

    #[test]
    fn a_flipped_bit_is_refused() {
        let good = encoded(&sample());
        for at in [8, HEADER_LEN, good.len() - TRAILER_LEN - 1, good.len() - 6] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert_eq!(decode(&bad), Err(Corrupt::Checksum), "byte {at}");
        }
        assert_eq!(
            Corrupt::Checksum.to_string(),
            "checksum mismatch (corrupted)"
        );
    }

    #[test]
    fn another_format_version_is_refused() {
        let mut old = encoded(&sample());
        old[8..12].copy_from_slice(&2u32.to_le_bytes());
        let old = reseal(old);
        assert_eq!(decode(&old), Err(Corrupt::Version { found: 2 }));
        assert_eq!(
            Corrupt::Version { found: 2 }.to_string(),
            format!(
                "format version 2, but this strads-ap reads version {VERSION} only (written \
                 by another release: resume with that release, or start the job afresh)"
            )
        );
    }

    #[test]
    fn counts_and_lengths_past_the_end_are_refused() {
        // One table more than there are.
        let mut more = encoded(&sample());
        more[12..20].copy_from_slice(&4u64.to_le_bytes());
        assert_eq!(decode(&reseal(more)), Err(Corrupt::EndsInsideTable));
        // A table longer than the file, up to the largest length there is.
        for len in [6, u64::MAX] {
            let mut long = encoded(&[(3, b"three".to_vec())]);
            long[28..36].copy_from_slice(&len.to_le_bytes());
            assert_eq!(
                decode(&reseal(long)),
                Err(Corrupt::EndsInsideTable),
                "{len}"
            );
        }
        assert_eq!(Corrupt::EndsInsideTable.to_string(), "ends inside a table");
    }

    #[test]
    fn read_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0-of-1.bin");
        let missing = read_tables(&path).unwrap_err();
        assert!(
            missing.starts_with(&format!("{}: ", path.display())),
            "{missing}"
        );
        let good = encoded(&sample());
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        assert_eq!(
            read_tables(&path),
            Err(format!("{}: truncated (no trailer)", path.display()))
        );
    }

    #[test]
    fn manifests_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest {
            seq: 12,
            site: "src/main.rs:40:9".into(),
            world: 3,
            tables: BTreeMap::from([(1, 4), (2, 12)]),
            files: BTreeMap::from([(4, vec![1, 2, 3]), (12, vec![4, 5, 6])]),
            inputs: BTreeMap::from([(
                1,
                InputRecord {
                    site: "read_from_file at src/main.rs:12:5".into(),
                    id: 1,
                    checksums: vec![7, 8, 9],
                },
            )]),
            reductions: BTreeMap::from([(3, vec![vec![1, 2], vec![]]), (12, vec![vec![9]])]),
        };
        let path = manifest_file(dir.path(), 12);
        write_manifest(&path, &manifest, true).unwrap();
        assert_eq!(read_manifest(&path), Ok(manifest));
    }

    #[test]
    fn a_manifest_without_its_entry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = manifest_file(dir.path(), 1);
        write_tables(&path, &[], false).unwrap();
        assert_eq!(read_manifest(&path), Err("an empty manifest".to_string()));
        write_tables(&path, &[(0, vec![0xff; 3])], false).unwrap();
        let garbled = read_manifest(&path).unwrap_err();
        assert!(
            garbled.starts_with(&format!("{}: ", path.display())),
            "{garbled}"
        );
    }

    #[test]
    fn paths_follow_the_layout_of_a_checkpoint_directory() {
        let root = Path::new("/ckpt");
        assert_eq!(ckpt_dir(root, 42), Path::new("/ckpt/ckpt-0000000042"));
        assert_eq!(
            manifest_file(root, 42),
            Path::new("/ckpt/ckpt-0000000042/MANIFEST")
        );
        assert_eq!(
            rank_file(root, 42, 1, 3),
            Path::new("/ckpt/ckpt-0000000042/rank-1-of-3.bin")
        );
        assert_eq!(
            input_file(root, 2, 0, 3),
            Path::new("/ckpt/input-000002/rank-0-of-3.bin")
        );
        let name = ckpt_dir(root, 42);
        let name = name.file_name().unwrap().to_str().unwrap();
        assert_eq!(ckpt_seq(name), Some(42));
        for other in ["input-000002", "ckpt-", "ckpt-x", "MANIFEST"] {
            assert_eq!(ckpt_seq(other), None, "{other}");
        }
    }
}
