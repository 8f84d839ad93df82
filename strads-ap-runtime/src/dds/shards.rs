//! Which bytes of its input files each rank reads: the files as one stream of bytes cut
//! into one range per rank, each range moved to line starts, so that a rank reads its
//! share and no more. A gzip-compressed file cannot be entered in the middle: it goes
//! whole to the rank whose range holds its first byte.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// An input file.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    pub path: PathBuf,
    /// Bytes on storage (compressed bytes for a gzip file).
    pub size: u64,
    pub gzip: bool,
}

/// What part of a file a rank reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Index into the sources.
    pub file: usize,
    /// For a plain file the nominal byte range, to be moved to line starts when read; for
    /// a gzip file the whole file.
    pub bytes: Range<u64>,
}

/// The two bytes every gzip member starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Characters that make a path that names no file a pattern.
fn is_pattern(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.contains(['*', '?', '[']))
}

/// The files `paths` name, in order: each path names a file, or (when no file has that
/// name and it holds `*`, `?` or `[`) is a glob pattern whose matches are taken in sorted
/// order. A pattern that matches nothing, a directory, or a missing file is an error
/// naming it.
pub(crate) fn sources(paths: &[PathBuf]) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    for path in paths {
        if !path.exists() && is_pattern(path) {
            let pattern = path.to_string_lossy();
            let bad = |message: String| Error::io(path, std::io::Error::other(message));
            let matches =
                glob::glob(&pattern).map_err(|e| bad(format!("not a valid pattern: {e}")))?;
            let mut found: Vec<PathBuf> = Vec::new();
            for m in matches {
                let p = m.map_err(|e| bad(format!("while listing matches: {e}")))?;
                if p.is_file() {
                    found.push(p);
                }
            }
            if found.is_empty() {
                return Err(bad("no file matches this pattern".into()));
            }
            found.sort();
            for p in found {
                out.push(source(&p)?);
            }
        } else {
            out.push(source(path)?);
        }
    }
    Ok(out)
}

fn source(path: &Path) -> Result<Source> {
    if path.is_dir() {
        let e = std::io::Error::other("is a directory, not a file");
        return Err(Error::io(path, e));
    }
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut magic = [0u8; 2];
    let gzip = size >= 2 && {
        file.read_exact(&mut magic)
            .map_err(|e| Error::io(path, e))?;
        magic == GZIP_MAGIC
    };
    Ok(Source {
        path: path.to_path_buf(),
        size,
        gzip,
    })
}

/// The pieces rank `rank` of `world` reads, in stream order: the files laid end to end,
/// cut into `world` equal byte ranges; a gzip file goes whole to the rank whose range
/// holds its first byte.
pub(crate) fn pieces(sources: &[Source], rank: usize, world: usize) -> Vec<Piece> {
    let total: u64 = sources.iter().map(|s| s.size).sum();
    let world = world.max(1) as u64;
    let cut = |r: u64| -> u64 { (u128::from(total) * u128::from(r) / u128::from(world)) as u64 };
    let (lo, hi) = (cut(rank as u64), cut(rank as u64 + 1));
    let last = rank as u64 + 1 == world;
    let mut out = Vec::new();
    let mut offset = 0u64;
    for (file, s) in sources.iter().enumerate() {
        let (start, end) = (offset, offset + s.size);
        offset = end;
        if s.gzip || s.size == 0 {
            // Whole, to the rank whose range holds the first byte (an empty file to the
            // rank whose range starts at its offset, or the last).
            if (lo <= start && start < hi) || (last && start >= hi) {
                out.push(Piece {
                    file,
                    bytes: 0..s.size,
                });
            }
            continue;
        }
        let (a, b) = (start.max(lo), end.min(hi));
        if a < b {
            out.push(Piece {
                file,
                bytes: a - start..b - start,
            });
        }
    }
    out
}

/// Where the line holding byte `at` of a plain file ends, plus one: the first line start
/// at or after `at` (0 for 0; the file's size when no line starts there).
fn line_start_from(reader: &mut BufReader<File>, at: u64, size: u64) -> std::io::Result<u64> {
    if at == 0 || at >= size {
        return Ok(at.min(size));
    }
    reader.seek(SeekFrom::Start(at - 1))?;
    let mut skipped = Vec::new();
    let n = reader.read_until(b'\n', &mut skipped)? as u64;
    Ok((at - 1 + n).min(size))
}

/// The bytes of `piece` of `source`, moved to line starts for a plain file (and
/// decompressed for a gzip one), with the byte offset in the file they start at.
pub(crate) fn read_piece(source: &Source, piece: &Piece) -> Result<(Vec<u8>, u64)> {
    let path = &source.path;
    let io = |e| Error::io(path, e);
    let file = File::open(path).map_err(io)?;
    if source.gzip {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(BufReader::new(file))
            .read_to_end(&mut out)
            .map_err(|e| {
                Error::io(
                    path,
                    std::io::Error::new(e.kind(), format!("not a readable gzip file: {e}")),
                )
            })?;
        return Ok((out, 0));
    }
    let mut reader = BufReader::new(file);
    let start = line_start_from(&mut reader, piece.bytes.start, source.size).map_err(io)?;
    let end = match piece.bytes.end >= source.size {
        true => source.size,
        false => line_start_from(&mut reader, piece.bytes.end, source.size).map_err(io)?,
    };
    let mut out = vec![0u8; end.saturating_sub(start) as usize];
    if !out.is_empty() {
        reader.seek(SeekFrom::Start(start)).map_err(io)?;
        reader.read_exact(&mut out).map_err(io)?;
    }
    Ok((out, start))
}

/// Opens `source` for reading from its first byte, decompressed when it is gzip.
fn open(source: &Source) -> Result<Box<dyn BufRead>> {
    let file = File::open(&source.path).map_err(|e| Error::io(&source.path, e))?;
    Ok(match source.gzip {
        true => Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(
            BufReader::new(file),
        ))),
        false => Box::new(BufReader::new(file)),
    })
}

/// The lines of a file from its start (decompressed), for readers that look at a file's
/// head (a header, a banner) before reading it in pieces: each line without its `\n` or
/// `\r\n`, numbered from 1, the first without a byte-order mark. A line that is not UTF-8
/// is an error naming it.
pub(crate) struct HeadLines {
    reader: Box<dyn BufRead>,
    path: PathBuf,
    gzip: bool,
    number: usize,
    buf: Vec<u8>,
}

impl HeadLines {
    /// The lines of `source`.
    pub(crate) fn new(source: &Source) -> Result<Self> {
        Ok(HeadLines {
            reader: open(source)?,
            path: source.path.clone(),
            gzip: source.gzip,
            number: 0,
            buf: Vec::new(),
        })
    }
}

impl Iterator for HeadLines {
    /// The line's number and text.
    type Item = Result<(usize, String)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.buf.clear();
        match self.reader.read_until(b'\n', &mut self.buf) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => {
                let e = match self.gzip {
                    true => std::io::Error::new(e.kind(), format!("not a readable gzip file: {e}")),
                    false => e,
                };
                return Some(Err(Error::io(&self.path, e)));
            }
        }
        self.number += 1;
        let mut bytes = self.buf.as_slice();
        while let Some((&(b'\n' | b'\r'), rest)) = bytes.split_last() {
            bytes = rest;
        }
        if self.number == 1 {
            bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
        }
        Some(match std::str::from_utf8(bytes) {
            Ok(text) => Ok((self.number, text.to_string())),
            Err(_) => Err(Error::Parse {
                path: self.path.clone(),
                line: self.number,
                message: "the line is not valid UTF-8".into(),
                text: String::new(),
            }),
        })
    }
}

/// Lines that start in `bytes` (a line's last byte is `\n`, or the end).
pub(crate) fn count_lines(bytes: &[u8]) -> usize {
    let ends = bytes.iter().filter(|&&b| b == b'\n').count();
    ends + usize::from(bytes.last().is_some_and(|&b| b != b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::util::test_files::{gzip, write};

    /// Every rank's pieces, read: the bytes each rank read and the text of every file
    /// joined in stream order.
    fn read_all(sources: &[Source], world: usize) -> (Vec<u64>, Vec<String>) {
        let mut per_file = vec![String::new(); sources.len()];
        let mut bytes_read = Vec::new();
        for rank in 0..world {
            let mut read = 0;
            for piece in pieces(sources, rank, world) {
                let (bytes, start) = read_piece(&sources[piece.file], &piece).unwrap();
                read += bytes.len() as u64;
                let empty = bytes.is_empty();
                let text = String::from_utf8(bytes).unwrap();
                assert!(
                    start == 0 || empty || sources[piece.file].gzip || {
                        let whole = std::fs::read(&sources[piece.file].path).unwrap();
                        whole[start as usize - 1] == b'\n'
                    },
                    "a piece starts at a line start"
                );
                per_file[piece.file].push_str(&text);
            }
            bytes_read.push(read);
        }
        (bytes_read, per_file)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn ranks_read_every_line_once_in_order(
            lines in proptest::collection::vec("[a-z]{0,40}", 0..200),
            split in 0usize..200,
            world in 1usize..7,
            trailing in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut text = lines.join("\n");
            if trailing && !text.is_empty() { text.push('\n'); }
            let cut = split.min(lines.len());
            let first: String = lines[..cut].iter().map(|l| format!("{l}\n")).collect();
            let paths = [
                write(dir.path(), "a.txt", text.as_bytes()),
                write(dir.path(), "b.txt", first.as_bytes()),
                write(dir.path(), "c.gz", gzip(&text)),
            ];
            let sources = sources(&paths).unwrap();
            prop_assert!(!sources[0].gzip && sources[2].gzip);
            let (_, read) = read_all(&sources, world);
            prop_assert_eq!(&read[0], &text);
            prop_assert_eq!(&read[1], &first);
            prop_assert_eq!(&read[2], &text);
        }
    }

    #[test]
    fn a_rank_reads_its_share_and_a_line_more_at_most() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..100_000).map(|i| format!("{i} {}\n", i % 7)).collect();
        let path = write(dir.path(), "big.txt", text.as_bytes());
        let sources = sources(&[path]).unwrap();
        let world = 4;
        let (bytes_read, read) = read_all(&sources, world);
        assert_eq!(read[0], text);
        let share = text.len() as u64 / world as u64;
        for (rank, &b) in bytes_read.iter().enumerate() {
            // Each range moves by less than a line at either end.
            assert!(
                b <= share + 16 && b + 16 >= share,
                "rank {rank} read {b} of {share}"
            );
        }
    }

    #[test]
    fn patterns_expand_in_sorted_order_and_name_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["part-2.txt", "part-10.txt", "part-1.txt", "other.txt"] {
            write(dir.path(), name, b"x\n");
        }
        let pattern = dir.path().join("part-*.txt");
        let found: Vec<String> = sources(&[pattern])
            .unwrap()
            .iter()
            .map(|s| s.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, ["part-1.txt", "part-10.txt", "part-2.txt"]);
        let none = dir.path().join("nothing-*.txt");
        let err = sources(&[none]).unwrap_err().to_string();
        assert!(
            err.contains("nothing-*.txt") && err.contains("no file matches"),
            "{err}"
        );
        let missing = dir.path().join("missing.txt");
        let err = sources(&[missing]).unwrap_err().to_string();
        assert!(err.contains("missing.txt"), "{err}");
    }

    #[test]
    fn a_damaged_gzip_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = gzip("1\n2\n3\n");
        bytes.truncate(bytes.len() - 6);
        let path = write(dir.path(), "cut.gz", &bytes);
        let sources = sources(&[path]).unwrap();
        let piece = &pieces(&sources, 0, 1)[0];
        let err = read_piece(&sources[0], piece).unwrap_err().to_string();
        assert!(err.contains("cut.gz") && err.contains("gzip"), "{err}");
    }

    #[test]
    fn head_lines_are_numbered_and_decompressed() {
        let dir = tempfile::tempdir().unwrap();
        let text = "\u{feff}a,b\r\n\n1,2";
        let paths = [
            write(dir.path(), "plain.csv", text.as_bytes()),
            write(dir.path(), "packed.gz", gzip(text)),
        ];
        for source in sources(&paths).unwrap() {
            let lines: Vec<(usize, String)> = HeadLines::new(&source)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let expected = [(1, "a,b"), (2, ""), (3, "1,2")];
            assert_eq!(lines, expected.map(|(n, l)| (n, l.to_string())));
        }
        let bad = write(dir.path(), "bad.txt", b"ok\n\xff\n");
        let source = &sources(&[bad]).unwrap()[0];
        let err = HeadLines::new(source).unwrap().nth(1).unwrap().unwrap_err();
        assert!(
            err.to_string()
                .contains("bad.txt:2: the line is not valid UTF-8"),
            "{err}"
        );
    }

    #[test]
    fn lines_are_counted_with_or_without_a_last_newline() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"a"), 1);
        assert_eq!(count_lines(b"a\n"), 1);
        assert_eq!(count_lines(b"a\n\nb"), 3);
    }
}
