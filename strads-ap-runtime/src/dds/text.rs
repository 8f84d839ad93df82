//! Reading DVectors from text files: [`read_from_file`], in parallel, line-aligned.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::shards;
use super::vector::DVector;
use super::Element;
use crate::cluster::context;
use crate::error::{Error, Result};
use crate::progress::{Progress, Units};
use crate::util::excerpt;

/// The largest chunk a read parses at a time while a progress bar shows it.
const PROGRESS_CHUNK: usize = 4 << 20;

/// Reads `path` line by line into a DVector, parsing each line with `parser`.
///
/// Empty lines are skipped, and so is a UTF-8 byte-order mark at the start of the file. A
/// directory, or bytes that are not UTF-8, are errors naming the file (and the line). The
/// file is split into byte ranges aligned to line boundaries and parsed in parallel;
/// element order is line order. Across ranks each rank reads only its own byte range. A
/// gzip-compressed file is decompressed, and a path with `*`, `?` or `[` that names no
/// file is a glob pattern (see [`ReadOptions::read_files`]). A line the parser rejects fails
/// the whole read with an error naming the file and line; see [`ReadOptions`] to skip
/// bad lines, skip a header or comments instead.
///
/// # Examples
/// ```
/// # let tmp = tempfile::Builder::new().prefix("strads-doc-").tempdir().unwrap();
/// # let path = tmp.path().join("ratings.txt");
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
/// # let tmp = tempfile::Builder::new().prefix("strads-doc2-").tempdir().unwrap();
/// # let path = tmp.path().join("values.tsv");
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
    progress: Option<bool>,
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
    /// The file of the first skipped line.
    pub first_skipped_file: Option<PathBuf>,
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

    /// Shows a progress bar while a read runs longer than a second (`true`, the default
    /// where it can be seen: the driver's terminal, outside tests and CI, unless
    /// `STRADS_PROGRESS=0`), or never (`false`).
    pub fn progress(mut self, show: bool) -> Self {
        self.progress = Some(show);
        self
    }

    /// Accepts a file with no data lines (default: an error).
    pub fn allow_empty(mut self, allow: bool) -> Self {
        self.allow_empty = allow;
        self
    }

    /// The comment prefix, for readers that look at a file's head themselves.
    pub(crate) fn comment(&self) -> Option<&str> {
        self.comment_prefix.as_deref()
    }

    /// Reads `path` with these options: a file, or a glob pattern (see
    /// [`read_files`](Self::read_files)).
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
        self.read_files([path], parser)
    }

    /// Reads several files with these options, as one file made of them in order.
    ///
    /// A path that names no file but holds `*`, `?` or `[` is a glob pattern, whose
    /// matches are read in sorted order; a pattern that matches nothing is an error
    /// naming it. A gzip-compressed file (known by its first bytes, whatever its name) is
    /// decompressed. Header lines are skipped at the start of every file, and errors name
    /// the file and its line.
    ///
    /// Across ranks each rank reads only its share of the bytes: the files, laid end to
    /// end, are cut into one byte range per rank, each moved to a line start. A compressed
    /// file cannot be entered in the middle, so it is read whole by the rank whose range
    /// holds its first byte: to spread a compressed input over the ranks, give it as
    /// several files.
    ///
    /// # Examples
    /// ```
    /// # let tmp = tempfile::Builder::new().prefix("strads-doc3-").tempdir().unwrap();
    /// # let dir = tmp.path();
    /// std::fs::write(dir.join("part-1.csv"), "x\n1\n2\n")?;
    /// std::fs::write(dir.join("part-2.csv"), "x\n3\n")?;
    /// let (v, _) = strads_ap_runtime::ReadOptions::new()
    ///     .header_lines(1)
    ///     .read(dir.join("part-*.csv"), |l: &str| l.parse::<u32>())?;
    /// assert_eq!(v.to_vec()?, vec![1, 2, 3]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn read_files<T, E, F, P>(
        &self,
        paths: impl IntoIterator<Item = P>,
        parser: F,
    ) -> Result<(DVector<T>, ReadReport)>
    where
        T: Element,
        E: Display,
        F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
        P: AsRef<Path>,
    {
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        DVector::made_by_operator("read_from_file", || self.read_all(&paths, parser))
    }

    fn read_all<T, E, F>(&self, paths: &[PathBuf], parser: F) -> Result<(DVector<T>, ReadReport)>
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
        let gather = |mine| -> Result<Vec<std::result::Result<_, SharedError>>> {
            match comm {
                Some(comm) => comm.allgather(mine),
                None => Ok(vec![mine]),
            }
        };
        let named = || match paths {
            [one] => one.clone(),
            _ => PathBuf::from(format!("{} files", paths.len())),
        };
        // Every rank lists the files (they must be visible to all) and reads only its
        // pieces; the ranks then agree on where each piece's lines are numbered from.
        let read = shards::sources(paths).and_then(|sources| {
            let mine = shards::pieces(&sources, ctx.rank(), ctx.world_size());
            let read = mine
                .into_iter()
                .map(|p| shards::read_piece(&sources[p.file], &p).map(|(b, at)| (p.file, b, at)))
                .collect::<Result<Vec<_>>>()?;
            Ok((sources, read))
        });
        let counts = match &read {
            Ok((sources, read)) => Ok(Listing {
                files: sources.len(),
                bytes: sources.iter().map(|s| s.size).sum(),
                lines: read
                    .iter()
                    .map(|(f, b, _)| (*f, shards::count_lines(b)))
                    .collect(),
            }),
            Err(e) => Err(SharedError::from(e)),
        };
        let all = gather(counts)?;
        let mut listings = Vec::with_capacity(all.len());
        for part in all {
            listings.push(part.map_err(|e| e.into_error(&named()))?);
        }
        let (sources, read) = read?;
        if let Some((rank, l)) = listings
            .iter()
            .enumerate()
            .find(|(_, l)| (l.files, l.bytes) != (listings[0].files, listings[0].bytes))
        {
            return Err(Error::Config(format!(
                "read_from_file: the ranks see different input: rank 0 found {} files of {} \
                 bytes, rank {rank} found {} files of {} bytes",
                listings[0].files, listings[0].bytes, l.files, l.bytes
            )));
        }
        // Line numbers: each piece's first line is one past the lines of the pieces of
        // its file read before it (by earlier ranks, or earlier on this rank).
        let mut before = vec![0usize; sources.len()];
        for l in &listings[..ctx.rank()] {
            for &(f, n) in &l.lines {
                before[f] += n;
            }
        }
        let own = &listings[ctx.rank()].lines;
        let bar = Progress::start(
            &format_args!("reading {}", named().display()),
            Some(read.iter().map(|(_, b, _)| b.len() as u64).sum()),
            Units::Bytes,
            self.progress,
            ctx.rank(),
            false,
        );
        let local = self.parse_pieces(&sources, read, own, &mut before, &parser, bar.as_ref());
        drop(bar);
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
                    let part_report = part.map_err(|e| e.into_error(&named()))?;
                    report.skipped = report.skipped.saturating_add(part_report.skipped);
                    report.parsed = report.parsed.saturating_add(part_report.parsed);
                    if report.first_skipped.is_none() {
                        report.first_skipped = part_report.first_skipped;
                        report.first_skipped_file = part_report.first_skipped_file;
                    }
                }
                (DVector::from_rank_parts(comm, items)?, report)
            }
        };
        if let (Some((line, message)), Some(file)) =
            (&report.first_skipped, &report.first_skipped_file)
        {
            if ctx.rank() == 0 {
                crate::util::warn(&format!(
                    "{}: skipped {} bad lines; the first, {}:{line}: {message}",
                    named().display(),
                    report.skipped,
                    file.display()
                ));
            }
        }
        if v.is_empty() && !self.allow_empty {
            return Err(Error::EmptyFile { path: named() });
        }
        Ok((v, report))
    }

    /// Parses this rank's pieces (file, bytes, byte offset in the file), given the lines
    /// of each (`lines`: file and lines per piece, as this rank told the others) and of
    /// each file read before them (`before`, advanced past each piece).
    fn parse_pieces<T, E, F>(
        &self,
        sources: &[shards::Source],
        read: Vec<(usize, Vec<u8>, u64)>,
        lines: &[(usize, usize)],
        before: &mut [usize],
        parser: &F,
        bar: Option<&Progress>,
    ) -> Result<(Vec<T>, ReadReport)>
    where
        T: Element,
        E: Display,
        F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
    {
        let mut report = ReadReport::default();
        let mut items = Vec::new();
        for ((file, bytes, at), &(_, lines)) in read.into_iter().zip(lines) {
            let first_line = before[file] + 1;
            before[file] += lines;
            let path = &sources[file].path;
            let piece = self.parse_piece(path, &bytes, at == 0, first_line, parser, bar)?;
            let (piece_items, piece_report) = piece;
            if report.first_skipped.is_none() && piece_report.first_skipped.is_some() {
                report.first_skipped = piece_report.first_skipped;
                report.first_skipped_file = Some(path.clone());
            }
            report.skipped += piece_report.skipped;
            items.extend(piece_items);
        }
        report.parsed = items.len();
        Ok((items, report))
    }

    /// Parses one piece of `path` whose first line is number `first_line` (`start`: the
    /// piece starts the file, which may begin with a byte-order mark).
    fn parse_piece<T, E, F>(
        &self,
        path: &Path,
        bytes: &[u8],
        start: bool,
        first_line: usize,
        parser: &F,
        bar: Option<&Progress>,
    ) -> Result<(Vec<T>, ReadReport)>
    where
        T: Element,
        E: Display,
        F: Fn(&str) -> std::result::Result<T, E> + Send + Sync,
    {
        let text = std::str::from_utf8(bytes).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            line: first_line
                + bytes[..e.valid_up_to()]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count(),
            message: "the line is not valid UTF-8".into(),
            text: String::new(),
        })?;
        // A UTF-8 byte-order mark is not part of the first line (nor a header).
        let text = match start {
            true => text.strip_prefix('\u{feff}').unwrap_or(text),
            false => text,
        };
        // Header lines are the first lines of each file.
        let mut body_start = 0;
        let mut line = first_line;
        while line <= self.header_lines && body_start < text.len() {
            match text[body_start..].find('\n') {
                Some(at) => body_start += at + 1,
                None => body_start = text.len(),
            }
            line += 1;
        }
        let text = &text[body_start..];
        let threads = context().config().threads;
        // Four chunks per thread, or more of at most PROGRESS_CHUNK bytes while a bar
        // shows the read (the elements come out in the same order either way).
        let chunks = match bar {
            Some(_) => (threads * 4).max(text.len() / PROGRESS_CHUNK),
            None => threads * 4,
        };
        let ranges = split_lines(text, chunks);
        let pool = crate::cluster::here().pool(threads);
        let chunks: Vec<Chunk<T>> = pool.install(|| {
            ranges
                .par_iter()
                .map(|r| {
                    let chunk = self.parse_chunk(&text[r.clone()], parser);
                    if let Some(bar) = bar {
                        bar.add(r.len());
                    }
                    chunk
                })
                .collect()
        });
        let mut report = ReadReport::default();
        let mut items = Vec::with_capacity(chunks.iter().map(|c| c.items.len()).sum());
        for chunk in chunks {
            for (number, message, text) in chunk.bad {
                let number = line + number;
                if !self.skip_bad_lines {
                    return Err(Error::Parse {
                        path: path.to_path_buf(),
                        line: number,
                        message,
                        text,
                    });
                }
                report.skipped += 1;
                report.first_skipped.get_or_insert((number, message));
            }
            line += chunk.lines;
            items.extend(chunk.items);
        }
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

/// What a rank found of the input: files and bytes (which must agree on every rank),
/// and the lines of each piece it read, by file.
#[derive(serde::Serialize, serde::Deserialize)]
struct Listing {
    files: usize,
    bytes: u64,
    lines: Vec<(usize, usize)>,
}

/// A reading error as it travels between ranks.
#[derive(serde::Serialize, serde::Deserialize)]
enum SharedError {
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
        text: String,
    },
    Io {
        path: PathBuf,
        message: String,
    },
    Other(String),
}

impl SharedError {
    fn from(e: &Error) -> Self {
        match e {
            Error::Parse {
                path,
                line,
                message,
                text,
            } => SharedError::Parse {
                path: path.clone(),
                line: *line,
                message: message.clone(),
                text: text.clone(),
            },
            Error::Io { path, source } => SharedError::Io {
                path: path.clone(),
                message: source.to_string(),
            },
            other => SharedError::Other(other.to_string()),
        }
    }

    /// The error, on any rank (`named`: what was read, for errors that name no file).
    fn into_error(self, named: &Path) -> Error {
        match self {
            SharedError::Parse {
                path,
                line,
                message,
                text,
            } => Error::Parse {
                path,
                line,
                message,
                text,
            },
            SharedError::Io { path, message } => Error::io(path, std::io::Error::other(message)),
            SharedError::Other(message) => {
                Error::Config(format!("read_from_file {}: {message}", named.display()))
            }
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
