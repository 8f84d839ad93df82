//! CSV and TSV: one record per line, split by the csv crate's parser (quoting, escaped
//! quotes) and deserialised with serde, by position or by the header's column names.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use csv::{DeserializeErrorKind, StringRecord};
use serde::de::DeserializeOwned;

use super::LineError;
use crate::dds::shards::{self, HeadLines};
use crate::dds::{DVector, Element, ReadOptions, ReadReport};
use crate::error::{Error, Result};
use crate::util::excerpt;

/// A reader of comma- (or tab-) separated records, one per line, deserialised with serde.
///
/// A line is split as the [`csv`](https://docs.rs/csv) crate splits a record: fields
/// between delimiters, a field in quotes may hold the delimiter, and a quote inside a
/// quoted field is written twice (`"Toy Story (1995), The"`, `"a ""quoted"" word"`). The
/// fields then deserialise into any `serde::Deserialize` type: a tuple or a struct takes
/// them in order, a `Vec` takes them all, and with a header ([`read`](Self::read)) a
/// struct takes them by column name (so its fields may come in any order and extra
/// columns are ignored; use `#[serde(rename = "userId")]` for names that are not Rust
/// names). An empty field is `None` for an `Option`.
///
/// **Records are lines.** A quoted field cannot span lines, as it may in general CSV: a
/// line that opens a quote and does not close it is an error naming that line (not a
/// record silently joined to the next lines). Blank lines are skipped by the reader.
///
/// Whole files: [`read`](Self::read), [`read_with`](Self::read_with) and
/// [`read_files`](Self::read_files) read the header (when there is one) and then the
/// records through [`ReadOptions`], split over ranks and threads, gzip-aware. A line
/// parser for your own `ReadOptions`: [`parser`](Self::parser) (by position) or
/// [`parser_with_header`](Self::parser_with_header) (by name).
///
/// # Examples
/// ```
/// use strads_ap_runtime::formats::Csv;
/// let parse = Csv::new().parser::<(u32, String, f32)>();
/// assert_eq!(
///     parse(r#"1,"Toy Story (1995), The",3.5"#)?,
///     (1, "Toy Story (1995), The".to_string(), 3.5)
/// );
/// let err = parse("1,Heat,lots").unwrap_err();
/// assert_eq!(err.to_string(), "field 3: `lots` is not a number");
///
/// let tsv = Csv::tsv().parser::<Vec<f64>>();
/// assert_eq!(tsv("1\t2.5\t-3")?, vec![1.0, 2.5, -3.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Csv {
    dialect: Dialect,
    has_headers: bool,
    trim: bool,
    flexible: bool,
}

/// How a line is split into fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dialect {
    delimiter: u8,
    quote: u8,
    quoting: bool,
    escape: Option<u8>,
    double_quote: bool,
}

impl Dialect {
    fn build(self) -> csv_core::Reader {
        csv_core::ReaderBuilder::new()
            .delimiter(self.delimiter)
            .quote(self.quote)
            .quoting(self.quoting)
            .escape(self.escape)
            .double_quote(self.double_quote)
            .terminator(csv_core::Terminator::Any(b'\n'))
            .build()
    }
}

impl Default for Csv {
    fn default() -> Self {
        Csv::new()
    }
}

impl Csv {
    /// Comma-separated records with a header line, quoted with `"`, a quote inside a
    /// quoted field written twice; fields are not trimmed, and with a header every line
    /// must have as many fields as the header.
    pub fn new() -> Self {
        Csv {
            dialect: Dialect {
                delimiter: b',',
                quote: b'"',
                quoting: true,
                escape: None,
                double_quote: true,
            },
            has_headers: true,
            trim: false,
            flexible: false,
        }
    }

    /// Tab-separated records, otherwise as [`new`](Self::new) (a header line, quoting
    /// on: turn it off with [`quoting(false)`](Self::quoting) for files whose fields may
    /// start with a bare `"`).
    pub fn tsv() -> Self {
        Csv::new().delimiter(b'\t')
    }

    /// The byte between fields (`b','`, `b'\t'`, `b';'`, `b'|'`...).
    pub fn delimiter(mut self, delimiter: u8) -> Self {
        self.dialect.delimiter = delimiter;
        self
    }

    /// The quote byte (default `b'"'`).
    pub fn quote(mut self, quote: u8) -> Self {
        self.dialect.quote = quote;
        self
    }

    /// Whether quotes are special (default `true`); without quoting a quote is an
    /// ordinary byte of its field.
    pub fn quoting(mut self, quoting: bool) -> Self {
        self.dialect.quoting = quoting;
        self
    }

    /// An escape byte for quotes inside quoted fields, such as `Some(b'\\')` for `\"`
    /// (default `None`: quotes are escaped by doubling them).
    pub fn escape(mut self, escape: Option<u8>) -> Self {
        self.dialect.escape = escape;
        self
    }

    /// Whether two quotes inside a quoted field are one quote (default `true`).
    pub fn double_quote(mut self, double_quote: bool) -> Self {
        self.dialect.double_quote = double_quote;
        self
    }

    /// Whether the first line of every file is a header naming the columns (default
    /// `true`). The whole-file readers then skip it in every file, check that every file
    /// has the same one, and deserialise structs by column name.
    pub fn has_headers(mut self, has_headers: bool) -> Self {
        self.has_headers = has_headers;
        self
    }

    /// Whether spaces and tabs around fields (and header names) are removed (default
    /// `false`), so that `1, 2.5` reads as `1` and `2.5`.
    pub fn trim(mut self, trim: bool) -> Self {
        self.trim = trim;
        self
    }

    /// Whether a line may have another number of fields than the header (default
    /// `false`: an error naming the line). Without a header the number of fields is not
    /// checked: a tuple or struct takes the fields it needs (too few is an error) and
    /// ignores the rest.
    pub fn flexible(mut self, flexible: bool) -> Self {
        self.flexible = flexible;
        self
    }

    /// A line parser for [`ReadOptions`]: the fields of one line deserialised into `T`
    /// by position (field 1 into the first tuple element or struct field, and so on).
    ///
    /// It does not know about headers, whatever [`has_headers`](Self::has_headers) says:
    /// skip a header line with [`ReadOptions::header_lines`], or use
    /// [`read`](Self::read) or [`parser_with_header`](Self::parser_with_header) to match
    /// fields by name. Errors name the field (counted from 1) and say what is wrong:
    /// ``field 3: `abc` is not a number``.
    ///
    /// # Examples
    /// ```
    /// use strads_ap_runtime::formats::Csv;
    /// use strads_ap_runtime::ReadOptions;
    /// # let tmp = tempfile::Builder::new().prefix("strads-csv-doc-").tempdir()?;
    /// # let path = tmp.path().join("u.data");
    /// std::fs::write(&path, "196\t242\t3\t881250949\n186\t302\t3\t891717742\n")?;
    /// let parse = Csv::tsv().parser::<(u32, u32, f32)>();
    /// let (ratings, _) = ReadOptions::new().read(&path, parse)?;
    /// assert_eq!(ratings.get(1)?, (186, 302, 3.0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parser<T: DeserializeOwned>(
        &self,
    ) -> impl Fn(&str) -> std::result::Result<T, LineError> + Clone + Send + Sync {
        let records = self.records(None);
        move |line: &str| records.parse(line)
    }

    /// A line parser for [`ReadOptions`] that deserialises structs by the column names
    /// of `header` (a header line, split and trimmed as the records are). Tuples and
    /// `Vec`s still take the fields in order. Skip the header line itself with
    /// [`ReadOptions::header_lines`].
    ///
    /// # Errors
    /// A header line that does not split (an unclosed quote).
    ///
    /// # Examples
    /// ```
    /// use strads_ap_runtime::formats::Csv;
    /// #[derive(serde::Deserialize)]
    /// struct Movie { title: String, year: u16 }
    /// let parse = Csv::new().parser_with_header::<Movie>("year,title,genres")?;
    /// let m = parse(r#"1995,"Toy Story (1995), The",Animation"#)?;
    /// assert_eq!((m.title.as_str(), m.year), ("Toy Story (1995), The", 1995));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parser_with_header<T: DeserializeOwned>(
        &self,
        header: &str,
    ) -> std::result::Result<
        impl Fn(&str) -> std::result::Result<T, LineError> + Clone + Send + Sync,
        LineError,
    > {
        let header = self.records(None).split(header)?;
        let records = self.records(Some(Arc::new(header)));
        Ok(move |line: &str| records.parse(line))
    }

    /// Reads `path` (a file or a glob pattern) into a DVector of `T`, one element per
    /// record, with the default [`ReadOptions`]: see [`read_files`](Self::read_files).
    ///
    /// # Examples
    /// ```
    /// use strads_ap_runtime::formats::Csv;
    /// # let tmp = tempfile::Builder::new().prefix("strads-csv-doc2-").tempdir()?;
    /// # let path = tmp.path().join("ratings.csv");
    /// let text = "userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n1,x,3.0,1260759179\n";
    /// std::fs::write(&path, text)?;
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Rating { #[serde(rename = "movieId")] movie: u32, rating: f32 }
    /// let err = Csv::new().read::<Rating>(&path).unwrap_err().to_string();
    /// let says = "ratings.csv:3: field 2 (`movieId`): `x` is not a valid integer";
    /// assert!(err.contains(says), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn read<T: Element>(&self, path: impl AsRef<Path>) -> Result<DVector<T>> {
        Ok(self.read_with(&ReadOptions::new(), path)?.0)
    }

    /// Reads `path` (a file or a glob pattern) with `options`: see
    /// [`read_files`](Self::read_files).
    #[track_caller]
    pub fn read_with<T: Element>(
        &self,
        options: &ReadOptions,
        path: impl AsRef<Path>,
    ) -> Result<(DVector<T>, ReadReport)> {
        self.read_files(options, [path])
    }

    /// Reads several files (or glob patterns) as one, with `options` for comments, bad
    /// lines and empty input.
    ///
    /// With [`has_headers`](Self::has_headers) (the default), the first line of every
    /// file is its header, whatever `options` says of header lines: it is skipped, it
    /// must be the same in every file (an error names the file that differs and the
    /// first file), and structs deserialise by its column names. A column the record type
    /// needs that the header lacks is an error naming the column and the header's file
    /// and line (found from the first data line, before anything is read). An empty file
    /// has no header and adds no records. Without headers, the records deserialise by
    /// position, after the `options`' header lines.
    ///
    /// # Errors
    /// Those of [`ReadOptions::read_files`], a header that differs between files or
    /// lacks a column, and a line the parser rejects (named by file and line, unless
    /// `options` skip bad lines).
    #[track_caller]
    pub fn read_files<T: Element, P: AsRef<Path>>(
        &self,
        options: &ReadOptions,
        paths: impl IntoIterator<Item = P>,
    ) -> Result<(DVector<T>, ReadReport)> {
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        if !self.has_headers {
            return options.read_files(&paths, self.parser::<T>());
        }
        let sources = shards::sources(&paths)?;
        let header = self.common_header(&sources)?;
        let records = self.records(header.as_ref().map(|(_, h)| Arc::new(h.clone())));
        if let Some((source, _)) = &header {
            records.check_columns::<T>(source, options.comment())?;
        }
        let options = options.clone().header_lines(1);
        options.read_files(&paths, move |line: &str| records.parse::<T>(line))
    }

    fn records(&self, header: Option<Arc<StringRecord>>) -> Records {
        Records {
            dialect: self.dialect,
            trim: self.trim,
            flexible: self.flexible,
            header,
        }
    }

    /// The header of the files (the first line of each), with the first file that has
    /// one; `None` when every file is empty. A header that differs from the first is an
    /// error naming both files.
    fn common_header(
        &self,
        sources: &[shards::Source],
    ) -> Result<Option<(shards::Source, StringRecord)>> {
        let splitter = self.records(None);
        let mut first: Option<(&shards::Source, String, StringRecord)> = None;
        for source in sources {
            let Some(line) = HeadLines::new(source)?.next() else {
                continue;
            };
            let (_, text) = line?;
            let at = |message: String| parse_error(&source.path, 1, message, &text);
            if text.trim().is_empty() {
                return Err(at(
                    "the first line is empty, where the header should be (a file read \
                     with headers starts with its header line)"
                        .into(),
                ));
            }
            let header = splitter
                .split(&text)
                .map_err(|e| at(format!("the header: {e}")))?;
            match &first {
                None => first = Some((source, text, header)),
                Some((first_source, first_text, first_header)) if *first_header != header => {
                    return Err(at(format!(
                        "the header differs from that of {} (`{}`): every file must have \
                         the same columns",
                        first_source.path.display(),
                        excerpt(first_text)
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(first.map(|(source, _, header)| (source.clone(), header)))
    }
}

/// A parser of the lines of one CSV dialect, with the header's column names, if any.
#[derive(Clone)]
struct Records {
    dialect: Dialect,
    trim: bool,
    flexible: bool,
    header: Option<Arc<StringRecord>>,
}

thread_local! {
    /// Each thread's splitter, kept between lines: building one costs far more than a
    /// line.
    static SPLITTER: RefCell<Option<(Dialect, csv_core::Reader)>> = const { RefCell::new(None) };
}

impl Records {
    /// The fields of `line` (trimmed if asked).
    fn split(&self, line: &str) -> std::result::Result<StringRecord, LineError> {
        let line = line.trim_end_matches(['\n', '\r']);
        if line.is_empty() {
            return Err(LineError::new("the line is empty"));
        }
        let mut record = SPLITTER.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().is_some_and(|(d, _)| *d != self.dialect) {
                *slot = None;
            }
            let (_, reader) = slot.get_or_insert_with(|| (self.dialect, self.dialect.build()));
            reader.reset();
            split_with(reader, line)
        })?;
        if self.trim {
            record.trim();
        }
        Ok(record)
    }

    /// `line` deserialised.
    fn parse<T: DeserializeOwned>(&self, line: &str) -> std::result::Result<T, LineError> {
        let record = self.split(line)?;
        if let Some(header) = self.header.as_deref() {
            if !self.flexible && record.len() != header.len() {
                return Err(LineError::new(format!(
                    "the line has {} fields, the header {} (a quote missing or too many? \
                     `Csv::flexible(true)` accepts lines of any length)",
                    record.len(),
                    header.len()
                )));
            }
        }
        record
            .deserialize(self.header.as_deref())
            .map_err(|e| self.describe(&e, &record))
    }

    /// Fails if the first data line of `source` (the header's file) is refused for a
    /// column the header lacks: every line would be.
    fn check_columns<T: DeserializeOwned>(
        &self,
        source: &shards::Source,
        comment: Option<&str>,
    ) -> Result<()> {
        for line in HeadLines::new(source)?.skip(1) {
            let (number, text) = line?;
            let content = text.trim_start();
            if content.is_empty() || comment.is_some_and(|c| content.starts_with(c)) {
                continue;
            }
            let Ok(record) = self.split(&text) else {
                return Ok(());
            };
            if let Err(e) = record.deserialize::<T>(self.header.as_deref()) {
                if let Some(column) = self.missing_column(&e) {
                    let message = format!(
                        "{} (seen at line {number}, the first data line)",
                        self.no_column(column)
                    );
                    let header = self.header.as_deref().map(join).unwrap_or_default();
                    return Err(parse_error(&source.path, 1, message, &header));
                }
            }
            return Ok(());
        }
        Ok(())
    }

    /// The column a struct field names that the header lacks, if that is the error.
    fn missing_column<'e>(&self, e: &'e csv::Error) -> Option<&'e str> {
        let header = self.header.as_deref()?;
        let csv::ErrorKind::Deserialize { err, .. } = e.kind() else {
            return None;
        };
        let DeserializeErrorKind::Message(m) = err.kind() else {
            return None;
        };
        let column = m.strip_prefix("missing field `")?.strip_suffix('`')?;
        (!header.iter().any(|h| h == column)).then_some(column)
    }

    fn no_column(&self, column: &str) -> String {
        let columns = self.header.as_deref().map(join).unwrap_or_default();
        format!(
            "the header has no column `{column}`, which the record type needs (its columns: \
             {columns})"
        )
    }

    /// A deserialisation error in words, naming the field.
    fn describe(&self, e: &csv::Error, record: &StringRecord) -> LineError {
        let csv::ErrorKind::Deserialize { err, .. } = e.kind() else {
            return LineError::new(e.to_string());
        };
        if let Some(column) = self.missing_column(e) {
            return LineError::new(self.no_column(column));
        }
        let field = err.field().and_then(|i| usize::try_from(i).ok());
        let text = field.and_then(|i| record.get(i)).unwrap_or("");
        let what = match err.kind() {
            DeserializeErrorKind::ParseInt(_) | DeserializeErrorKind::ParseFloat(_)
                if text.trim().is_empty() =>
            {
                "is empty, where a number is needed".to_string()
            }
            DeserializeErrorKind::ParseInt(e) => match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    format!("`{text}` is out of range for its integer type")
                }
                _ => format!("`{text}` is not a valid integer ({e})"),
            },
            DeserializeErrorKind::ParseFloat(_) => format!("`{text}` is not a number"),
            DeserializeErrorKind::ParseBool(_) => format!("`{text}` is not `true` or `false`"),
            DeserializeErrorKind::InvalidUtf8(_) => "is not valid UTF-8".to_string(),
            DeserializeErrorKind::UnexpectedEndOfRow => {
                format!(
                    "the line has {} fields, fewer than the record type needs",
                    record.len()
                )
            }
            DeserializeErrorKind::Unsupported(m) => {
                format!("the record type cannot be read from CSV fields ({m})")
            }
            // serde's words for a tuple or struct the fields run out for.
            DeserializeErrorKind::Message(m) if m.starts_with("invalid length") => format!(
                "the line has {} fields, fewer than the record type needs ({m})",
                record.len()
            ),
            DeserializeErrorKind::Message(m) => m.clone(),
        };
        match field {
            Some(i) => LineError::new(format!("{}: {what}", self.field_name(i))),
            None => LineError::new(what),
        }
    }

    /// `field 3`, or ``field 3 (`rating`)`` with a header.
    fn field_name(&self, i: usize) -> String {
        match self.header.as_deref().and_then(|h| h.get(i)) {
            Some(name) => format!("field {} (`{name}`)", i + 1),
            None => format!("field {}", i + 1),
        }
    }
}

/// The fields of `line` as `reader` splits it, `line` being the whole record: a line
/// that leaves a quoted field open, or holds a record terminator, is an error.
fn split_with(
    reader: &mut csv_core::Reader,
    line: &str,
) -> std::result::Result<StringRecord, LineError> {
    use csv_core::ReadRecordResult as Read;
    // A field is never longer than the line; the ends grow as needed.
    let mut out = vec![0u8; line.len() + 1];
    let mut ends = vec![0usize; 16];
    let (mut input, mut ended) = (line.as_bytes(), false);
    let (mut out_len, mut ends_len) = (0, 0);
    loop {
        let (result, read, wrote, fields) =
            reader.read_record(input, &mut out[out_len..], &mut ends[ends_len..]);
        input = &input[read..];
        out_len += wrote;
        ends_len += fields;
        match result {
            // The line is in: end the record as its line end would.
            Read::InputEmpty if !ended => {
                input = b"\n";
                ended = true;
            }
            Read::InputEmpty => {
                return Err(LineError::new(
                    "a quoted field opens on this line and does not close: a quoted field \
                     cannot span lines (records are lines), so a quote is missing or one \
                     too many",
                ))
            }
            Read::OutputFull => out.resize(out.len() * 2, 0),
            Read::OutputEndsFull => ends.resize(ends.len() * 2, 0),
            Read::Record if input.is_empty() => break,
            Read::Record | Read::End => {
                return Err(LineError::new("the line holds more than one record"));
            }
        }
    }
    let mut record = StringRecord::with_capacity(out_len, ends_len);
    let mut start = 0;
    for &end in &ends[..ends_len] {
        // Fields are cut at ASCII delimiters and quotes, so each is UTF-8 as the line is.
        let field = std::str::from_utf8(&out[start..end])
            .map_err(|_| LineError::new("a field is not valid UTF-8"))?;
        record.push_field(field);
        start = end;
    }
    Ok(record)
}

/// The header's names, comma-separated.
fn join(header: &StringRecord) -> String {
    excerpt(&header.iter().collect::<Vec<_>>().join(", "))
}

fn parse_error(path: &Path, line: usize, message: String, text: &str) -> Error {
    Error::Parse {
        path: path.to_path_buf(),
        line,
        message,
        text: excerpt(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Rating {
        #[serde(rename = "userId")]
        user: u32,
        #[serde(rename = "movieId")]
        movie: u32,
        rating: f32,
    }

    const RATINGS: &str = "userId,movieId,rating,timestamp\n\
                           1,31,2.5,1260759144\n\
                           1,1029,3.0,1260759179\n\
                           7,31,4.5,1260759185\n";

    use crate::util::test_files::{gzip, write};

    #[test]
    fn movielens_ratings_read_by_column_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "ratings.csv", RATINGS);
        let ratings = Csv::new().read::<Rating>(&path).unwrap().to_vec().unwrap();
        assert_eq!(ratings.len(), 3);
        assert_eq!(
            ratings[1],
            Rating {
                user: 1,
                movie: 1029,
                rating: 3.0
            }
        );
        // By name: the columns may come in another order than the struct's fields.
        let path = write(
            dir.path(),
            "reordered.csv",
            "timestamp,rating,movieId,userId\n1260759144,2.5,31,1\n",
        );
        let ratings = Csv::new().read::<Rating>(&path).unwrap().to_vec().unwrap();
        assert_eq!((ratings[0].user, ratings[0].movie), (1, 31));
        // By position without a header: a tuple.
        let path = write(dir.path(), "bare.csv", "1,31,2.5\n2,32,3\n");
        let rows = Csv::new()
            .has_headers(false)
            .read::<(u32, u32, f32)>(&path)
            .unwrap();
        assert_eq!(rows.to_vec().unwrap(), vec![(1, 31, 2.5), (2, 32, 3.0)]);
    }

    #[test]
    fn quoted_fields_hold_delimiters_and_quotes() {
        let parse = Csv::new().parser::<(u32, String, f32)>();
        let (id, title, r) = parse(r#"1,"Toy Story (1995), The",3.5"#).unwrap();
        assert_eq!((id, title.as_str(), r), (1, "Toy Story (1995), The", 3.5));
        let (_, title, _) = parse(r#"2,"say ""hi"", then go",1"#).unwrap();
        assert_eq!(title, r#"say "hi", then go"#);
        let escaped = Csv::new()
            .escape(Some(b'\\'))
            .double_quote(false)
            .parser::<(String,)>();
        assert_eq!(escaped(r#""a \"b\"""#).unwrap().0, r#"a "b""#);
        // Without quoting, a quote is an ordinary byte.
        let bare = Csv::tsv().quoting(false).parser::<(String, u8)>();
        assert_eq!(bare("\"x\t1").unwrap(), ("\"x".to_string(), 1));
    }

    #[test]
    fn tsv_trim_options_and_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "ratings.tsv",
            "userId\tmovieId\trating\n3\t4\t5\n# a comment\n6\t7\t1.5\n",
        );
        let (ratings, report) = Csv::tsv()
            .read_with::<Rating>(&ReadOptions::new().comment_prefix("#"), &path)
            .unwrap();
        assert_eq!(report.parsed, 2);
        assert_eq!(ratings.get(1).unwrap().rating, 1.5);

        let trimmed = Csv::new().trim(true).parser::<Vec<f64>>();
        assert_eq!(trimmed(" 1, 2.5 ,\t3").unwrap(), vec![1.0, 2.5, 3.0]);
        let untrimmed = Csv::new().parser::<Vec<f64>>();
        assert!(untrimmed(" 1,2")
            .unwrap_err()
            .to_string()
            .contains("field 1"));
        let optional = Csv::new().parser::<(u32, Option<f32>, bool)>();
        assert_eq!(optional("1,,true").unwrap(), (1, None, true));
        let semicolons = Csv::new().delimiter(b';').parser::<(f32, f32)>();
        assert_eq!(semicolons("1.5;2").unwrap(), (1.5, 2.0));
    }

    #[test]
    fn field_errors_say_which_field_and_why() {
        let parse = Csv::new().parser::<(u32, u8, f32, bool)>();
        for (line, says) in [
            ("x,1,1,true", "field 1: `x` is not a valid integer"),
            ("-1,1,1,true", "field 1: `-1` is not a valid integer"),
            (
                "1,300,1,true",
                "field 2: `300` is out of range for its integer type",
            ),
            ("1,1,,true", "field 3: is empty, where a number is needed"),
            ("1,1,abc,true", "field 3: `abc` is not a number"),
            ("1,1,1,yes", "field 4: `yes` is not `true` or `false`"),
            (
                "1,1",
                "the line has 2 fields, fewer than the record type needs",
            ),
            ("", "the line is empty"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(says), "{line:?}: {e}");
        }
        let named = Csv::new()
            .parser_with_header::<Rating>("userId,movieId,rating")
            .unwrap();
        let e = named("1,2,abc").unwrap_err().to_string();
        assert_eq!(e, "field 3 (`rating`): `abc` is not a number");
        let e = named("1,2").unwrap_err().to_string();
        assert!(e.contains("the line has 2 fields, the header 3"), "{e}");
    }

    #[test]
    fn a_bad_field_is_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "ratings.csv",
            "userId,movieId,rating,timestamp\n1,31,2.5,0\n\n1,31,lots,0\n",
        );
        let e = Csv::new().read::<Rating>(&path).unwrap_err().to_string();
        assert!(
            e.contains("ratings.csv:4: field 3 (`rating`): `lots` is not a number"),
            "{e}"
        );
        // Skipped instead, with a report naming it.
        let (ratings, report) = Csv::new()
            .read_with::<Rating>(&ReadOptions::new().skip_bad_lines(true), &path)
            .unwrap();
        assert_eq!((ratings.len(), report.skipped), (1, 1));
        assert_eq!(report.first_skipped.unwrap().0, 4);
    }

    #[test]
    fn an_unclosed_quote_is_an_error_naming_its_line() {
        let parse = Csv::new().parser::<(u32, String)>();
        let e = parse(r#"1,"Toy Story, part"#).unwrap_err().to_string();
        assert!(e.contains("does not close"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "movies.csv",
            "movieId,title\n1,\"Toy Story\"\n2,\"Heat,\n1995\"\n",
        );
        let e = Csv::new()
            .read::<(u32, String)>(&path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("movies.csv:3: a quoted field opens on this line"),
            "{e}"
        );
        // A header that leaves a quote open is named too.
        let path = write(dir.path(), "header.csv", "\"id,title\n1,x\n");
        let e = Csv::new()
            .read::<(u32, String)>(&path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("header.csv:1: the header: a quoted field"),
            "{e}"
        );
    }

    #[test]
    fn files_with_different_headers_are_an_error_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "part-1.csv", RATINGS);
        write(
            dir.path(),
            "part-2.csv",
            "userId,movieId,score,timestamp\n2,3,4,5\n",
        );
        let e = Csv::new()
            .read::<Rating>(dir.path().join("part-*.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("part-2.csv:1: the header differs from that of") && e.contains("part-1.csv"),
            "{e}"
        );
        // The same header in every file: each file's header line is skipped.
        write(
            dir.path(),
            "part-2.csv",
            "userId,movieId,rating,timestamp\n2,3,4,5\n",
        );
        let all = Csv::new()
            .read::<Rating>(dir.path().join("part-*.csv"))
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all[3].movie, 3);
    }

    #[test]
    fn a_column_missing_from_the_header_is_named_before_reading() {
        #[derive(Clone, Serialize, Deserialize)]
        struct Scored {
            #[serde(rename = "userId")]
            _user: u32,
            _score: f32,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "ratings.csv", RATINGS);
        // Even when bad lines are skipped: every line would be.
        let options = ReadOptions::new().skip_bad_lines(true);
        let e = Csv::new()
            .read_with::<Scored>(&options, &path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ratings.csv:1: the header has no column `_score`")
                && e.contains("userId, movieId, rating, timestamp"),
            "{e}"
        );
        // An `Option` field may be missing.
        #[derive(Clone, Serialize, Deserialize)]
        struct Maybe {
            rating: f32,
            tag: Option<String>,
        }
        let maybe = Csv::new().read::<Maybe>(&path).unwrap().to_vec().unwrap();
        assert!(maybe.iter().all(|m| m.tag.is_none()) && maybe[2].rating == 4.5);
    }

    #[test]
    fn gzip_files_and_byte_order_marks_keep_their_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ratings.csv.gz");
        std::fs::write(&path, gzip(RATINGS)).unwrap();
        let ratings = Csv::new().read::<Rating>(&path).unwrap();
        assert_eq!(ratings.get(2).unwrap().user, 7);
        let bom = write(dir.path(), "bom.csv", format!("\u{feff}{RATINGS}"));
        assert_eq!(Csv::new().read::<Rating>(&bom).unwrap().len(), 3);
        // An empty file adds nothing; a file without data lines is an error as usual.
        let empty = write(dir.path(), "empty.csv", "");
        let header_only = write(dir.path(), "header.csv", "userId,movieId,rating\n");
        let e = Csv::new()
            .read_files::<Rating, _>(&ReadOptions::new(), [&empty, &header_only])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no data lines"), "{e}");
    }

    #[test]
    fn ranks_read_their_share_by_name_and_fail_together() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("userId,movieId,rating,timestamp\n");
        for k in 0..200 {
            text.push_str(&format!("{},{},{}.5,0\n", k % 7, k, k % 5));
        }
        let path = write(dir.path(), "ratings.csv", &text);
        let gz = dir.path().join("more.csv.gz");
        std::fs::write(&gz, gzip(RATINGS)).unwrap();
        let read = crate::cluster::simulate(3, || {
            Csv::new()
                .read_files::<Rating, _>(&ReadOptions::new(), [&path, &gz])?
                .0
                .to_vec()
        });
        for all in read {
            let all = all.unwrap();
            assert_eq!(all.len(), 203);
            assert_eq!(
                all[150],
                Rating {
                    user: 150 % 7,
                    movie: 150,
                    rating: 0.5
                }
            );
            assert_eq!(all[202].user, 7);
        }
        text.push_str("1,2,bad,0\n");
        let path = write(dir.path(), "ratings.csv", &text);
        let read =
            crate::cluster::simulate(3, || Csv::new().read::<Rating>(&path).map(|v| v.len()));
        for e in read {
            let e = e.unwrap_err().to_string();
            assert!(e.contains("ratings.csv:202: field 3 (`rating`)"), "{e}");
        }
    }
}
