//! Reading DVectors from text files: [`read_from_file`], in parallel, line-aligned.

use std::fmt::Display;
use std::path::Path;

use rayon::prelude::*;

use super::vector::DVector;
use super::Element;
use crate::cluster::context;
use crate::error::{Error, Result};
use crate::util::excerpt;

/// Reads `path` line by line into a DVector, parsing each line with `parser`.
///
/// Empty lines are skipped, and so is a UTF-8 byte-order mark at the start of the file. A
/// directory, or bytes that are not UTF-8, are errors naming the file (and the line). The
/// file is split into byte ranges aligned to line boundaries
/// and parsed in parallel; element order is line order. A line the parser rejects fails
/// the whole read with an error naming the file and line; see [`ReadOptions`] to skip
/// bad lines, skip a header or comments instead.
///
/// # Examples
/// ```
/// # let dir = std::env::temp_dir().join(format!("strads-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let path = dir.join("ratings.txt");
/// std::fs::write(&path, "1 2 5.0\n3 4 1.5\n")?;
/// let parse = |line: &str| -> Result<(u32, u32, f32), String> {
///     let f: Vec<&str> = line.split_whitespace().collect();
///     if f.len() != 3 { return Err(format!("expected 3 fields, found {}", f.len())); }
///     Ok((f[0].parse().map_err(|e| format!("user: {e}"))?,
///         f[1].parse().map_err(|e| format!("item: {e}"))?,
///         f[2].parse().map_err(|e| format!("rating: {e}"))?))
/// };
/// let ratings = strads_ap_runtime::read_from_file(&path, parse)?;
/// assert_eq!(ratings.get(1)?, (3, 4, 1.5));
///
/// std::fs::write(&path, "1 2 5.0\n3 x 1.5\n")?;
/// let err = strads_ap_runtime::read_from_file(&path, parse).unwrap_err();
/// assert!(err.to_string().contains("ratings.txt:2: item"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[track_caller]
pub fn read_from_file<T, E, F>(path: impl AsRef<Path>, parser: F) -> Result<DVector<T>>
where
    T: Element,
    E: Display,
    F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
{
    Ok(ReadOptions::new().read(path, parser)?.0)
}

/// Options of [`read_from_file`]: header lines, comments, skipping bad lines.
///
/// # Examples
/// ```
/// # let dir = std::env::temp_dir().join(format!("strads-doc2-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let path = dir.join("values.tsv");
/// std::fs::write(&path, "value\n# a comment\n1\ntwo\n3\n")?;
/// let (v, report) = strads_ap_runtime::ReadOptions::new()
///     .header_lines(1)
///     .comment_prefix("#")
///     .skip_bad_lines(true)
///     .read(&path, |l: &str| l.trim().parse::<i64>())?;
/// assert_eq!(v.to_vec()?, vec![1, 3]);
/// assert_eq!(report.skipped, 1);
/// assert_eq!(report.first_skipped.as_ref().unwrap().0, 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    header_lines: usize,
    comment_prefix: Option<String>,
    skip_bad_lines: bool,
    allow_empty: bool,
}

/// What [`ReadOptions::read`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadReport {
    /// Lines parsed into elements.
    pub parsed: usize,
    /// Bad lines skipped (only with `skip_bad_lines`).
    pub skipped: usize,
    /// The first skipped line: its number and the parser's message.
    pub first_skipped: Option<(usize, String)>,
}

struct Chunk<T> {
    items: Vec<T>,
    lines: usize,
    bad: Vec<(usize, String, String)>,
}

impl ReadOptions {
    /// Defaults: no header, no comments, bad lines are errors, an empty file is an error.
    pub fn new() -> Self {
        Self::default()
    }

    /// Skips the first `n` lines (headers).
    pub fn header_lines(mut self, n: usize) -> Self {
        self.header_lines = n;
        self
    }

    /// Skips lines starting with `prefix` (after leading whitespace).
    pub fn comment_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.comment_prefix = Some(prefix.into());
        self
    }

    /// Skips lines the parser rejects instead of failing; the report counts them and a
    /// warning names the first.
    pub fn skip_bad_lines(mut self, skip: bool) -> Self {
        self.skip_bad_lines = skip;
        self
    }

    /// Accepts a file with no data lines (default: an error).
    pub fn allow_empty(mut self, allow: bool) -> Self {
        self.allow_empty = allow;
        self
    }

    /// Reads `path` with these options.
    #[track_caller]
    pub fn read<T, E, F>(
        &self,
        path: impl AsRef<Path>,
        parser: F,
    ) -> Result<(DVector<T>, ReadReport)>
    where
        T: Element,
        E: Display,
        F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
    {
        let path = path.as_ref();
        DVector::made_by_operator("read_from_file", || self.read_all(path, parser))
    }

    fn read_all<T, E, F>(&self, path: &Path, parser: F) -> Result<(DVector<T>, ReadReport)>
    where
        T: Element,
        E: Display,
        F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
    {
        let ctx = crate::cluster::here();
        let comm = if ctx.is_distributed() {
            Some(ctx.comm_for("read_from_file")?)
        } else {
            None
        };
        // In a job of several ranks every rank reads the file (it must be visible to all)
        // and parses its share of the line-aligned byte ranges; the outcome is agreed on.
        let local = self.read_share(path, &parser, ctx.rank(), ctx.world_size());
        let (v, report) = match comm {
            None => {
                let (items, report) = local?;
                (DVector::from_data(items), report)
            }
            Some(comm) => {
                // The ranks agree on the outcome first (a failure anywhere fails all), then
                // each receives just its range of the parsed elements.
                let (items, mine) = match local {
                    Ok((items, report)) => (items, Ok(report)),
                    Err(e) => (Vec::new(), Err(SharedError::from(&e))),
                };
                let mut report = ReadReport::default();
                for part in comm.allgather(mine)? {
                    let part_report = part.map_err(|e| e.into_error(path))?;
                    report.skipped = report.skipped.saturating_add(part_report.skipped);
                    report.parsed = report.parsed.saturating_add(part_report.parsed);
                    if report.first_skipped.is_none() {
                        report.first_skipped = part_report.first_skipped;
                    }
                }
                (DVector::from_rank_parts(comm, items)?, report)
            }
        };
        if let Some((line, message)) = &report.first_skipped {
            if ctx.rank() == 0 {
                tracing::warn!(
                    "{}: skipped {} bad lines; the first, line {line}: {message}",
                    path.display(),
                    report.skipped
                );
            }
        }
        if v.is_empty() && !self.allow_empty {
            return Err(Error::EmptyFile {
                path: path.to_path_buf(),
            });
        }
        Ok((v, report))
    }

    /// Parses rank `rank`'s share (of `world`) of the file's line-aligned byte ranges.
    fn read_share<T, E, F>(
        &self,
        path: &Path,
        parser: &F,
        rank: usize,
        world: usize,
    ) -> Result<(Vec<T>, ReadReport)>
    where
        T: Element,
        E: Display,
        F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
    {
        if path.is_dir() {
            let e = std::io::Error::other("is a directory, not a file");
            return Err(Error::io(path, e));
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            Error::Parse {
                path: path.to_path_buf(),
                line,
                message: "the line is not valid UTF-8".into(),
                text: String::new(),
            }
        })?;
        // A UTF-8 byte-order mark is not part of the first line (nor a header).
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut body_start = 0;
        for _ in 0..self.header_lines {
            match text[body_start..].find('\n') {
                Some(at) => body_start += at + 1,
                None => body_start = text.len(),
            }
        }
        let text = &text[body_start..];
        let threads = context().config().threads;
        let ranges = split_lines(text, threads * 4 * world);
        // Rank r takes a contiguous run of the ranges, about 1/world of them.
        let (lo, hi) = (
            ranges.len() * rank / world,
            ranges.len() * (rank + 1) / world,
        );
        let mine = &ranges[lo..hi];
        let pool = crate::cluster::here().pool(threads);
        let chunks: Vec<Chunk<T>> = pool.install(|| {
            mine.par_iter()
                .map(|r| self.parse_chunk(&text[r.clone()], parser))
                .collect()
        });
        let mut report = ReadReport::default();
        let mut items = Vec::with_capacity(chunks.iter().map(|c| c.items.len()).sum());
        let before = mine.first().map_or(0, |r| {
            text.as_bytes()[..r.start]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
        });
        let mut first_line = self.header_lines + 1 + before;
        for chunk in chunks {
            for (line, message, text) in chunk.bad {
                let line = first_line + line;
                if !self.skip_bad_lines {
                    return Err(Error::Parse {
                        path: path.to_path_buf(),
                        line,
                        message,
                        text,
                    });
                }
                report.skipped += 1;
                report.first_skipped.get_or_insert((line, message));
            }
            first_line += chunk.lines;
            items.extend(chunk.items);
        }
        report.parsed = items.len();
        Ok((items, report))
    }

    fn parse_chunk<T, E: Display>(
        &self,
        text: &str,
        parser: &(impl Fn(&str) -> std::result::Result<T, E> + Sync),
    ) -> Chunk<T> {
        let mut chunk = Chunk {
            items: Vec::new(),
            lines: 0,
            bad: Vec::new(),
        };
        // `first_line` of a chunk is only known after the fact, so numbers are relative.
        for line in text.split_inclusive('\n') {
            let number = chunk.lines;
            chunk.lines += 1;
            let content = line.trim_end_matches(['\n', '\r']);
            if content.trim().is_empty() {
                continue;
            }
            if let Some(prefix) = &self.comment_prefix {
                if content.trim_start().starts_with(prefix.as_str()) {
                    continue;
                }
            }
            match parser(content) {
                Ok(item) => chunk.items.push(item),
                Err(e) => chunk.bad.push((number, e.to_string(), excerpt(content))),
            }
        }
        chunk
    }
}

/// A reading error as it travels between ranks.
#[derive(serde::Serialize, serde::Deserialize)]
enum SharedError {
    Parse {
        line: usize,
        message: String,
        text: String,
    },
    Other(String),
}

impl SharedError {
    fn from(e: &Error) -> Self {
        match e {
            Error::Parse {
                line,
                message,
                text,
                ..
            } => SharedError::Parse {
                line: *line,
                message: message.clone(),
                text: text.clone(),
            },
            other => SharedError::Other(other.to_string()),
        }
    }

    fn into_error(self, path: &Path) -> Error {
        match self {
            SharedError::Parse {
                line,
                message,
                text,
            } => Error::Parse {
                path: path.to_path_buf(),
                line,
                message,
                text,
            },
            SharedError::Other(message) => Error::Config(format!("read_from_file: {message}")),
        }
    }
}

/// Splits `text` into about `parts` byte ranges that end at line ends.
fn split_lines(text: &str, parts: usize) -> Vec<std::ops::Range<usize>> {
    let bytes = text.as_bytes();
    let target = (bytes.len() / parts.max(1)).max(1 << 16);
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = (start + target).min(bytes.len());
        while end < bytes.len() && bytes[end - 1] != b'\n' {
            end += 1;
        }
        ranges.push(start..end);
        start = end;
    }
    ranges
}
