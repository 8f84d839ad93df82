//! MatrixMarket coordinate files: a banner, `%` comments, a size line, then one entry per
//! line.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::LineError;
use crate::dds::shards::{self, HeadLines};
use crate::dds::{DVector, ReadOptions, ReadReport};
use crate::error::{Error, Result};
use crate::util::excerpt;

/// The kind of values a MatrixMarket file stores (the banner's *field*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MmField {
    /// `real` (or `double`): floating-point values.
    Real,
    /// `integer`: integer values, returned as `f64` (exact up to 2^53 in magnitude).
    Integer,
    /// `pattern`: no values, only where the entries are; each entry's value is 1.
    Pattern,
}

/// Which entries a MatrixMarket file stores (the banner's *symmetry*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MmSymmetry {
    /// `general`: every entry.
    General,
    /// `symmetric`: the entries on and below the diagonal; `a[j][i] = a[i][j]`.
    Symmetric,
    /// `skew-symmetric`: the entries below the diagonal; `a[j][i] = -a[i][j]`.
    SkewSymmetric,
}

/// What a MatrixMarket file's banner and size line declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MmHeader {
    /// Rows of the matrix.
    pub rows: u64,
    /// Columns of the matrix.
    pub cols: u64,
    /// Entries stored in the file (for a symmetric matrix, those of one triangle).
    pub nnz: u64,
    /// The kind of values.
    pub field: MmField,
    /// Which entries are stored.
    pub symmetry: MmSymmetry,
}

/// One stored entry of a MatrixMarket matrix, with **0-based** indices (the file's
/// 1-based `i j` minus one).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MmEntry {
    /// Row, in `0..rows`.
    pub row: u32,
    /// Column, in `0..cols`.
    pub col: u32,
    /// The value (1 for a pattern matrix).
    pub value: f64,
}

impl MmHeader {
    /// The entry a symmetric or skew-symmetric matrix implies but does not store: `e`
    /// mirrored across the diagonal (negated for skew-symmetric). `None` for a general
    /// matrix and for an entry on the diagonal.
    ///
    /// [`read_matrix_market`] returns the entries as stored; this expands them when the
    /// whole matrix is wanted.
    ///
    /// # Examples
    /// ```
    /// use strads_ap_runtime::formats::{read_matrix_market, MmEntry};
    /// # let tmp = tempfile::Builder::new().prefix("strads-mm-doc-").tempdir()?;
    /// # let path = tmp.path().join("sym.mtx");
    /// let text = "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 4\n2 1 -1\n";
    /// std::fs::write(&path, text)?;
    /// let (header, entries) = read_matrix_market(&path)?;
    /// let stored = entries.to_vec()?;
    /// let mirrored: Vec<MmEntry> = stored.iter().filter_map(|e| header.mirror(e)).collect();
    /// assert_eq!(mirrored, vec![MmEntry { row: 0, col: 1, value: -1.0 }]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn mirror(&self, e: &MmEntry) -> Option<MmEntry> {
        let value = match self.symmetry {
            MmSymmetry::General => return None,
            _ if e.row == e.col => return None,
            MmSymmetry::Symmetric => e.value,
            MmSymmetry::SkewSymmetric => -e.value,
        };
        Some(MmEntry {
            row: e.col,
            col: e.row,
            value,
        })
    }
}

/// Reads a MatrixMarket coordinate file (plain or gzip-compressed) into its header and a
/// DVector of its entries, in file order: see [`read_matrix_market_with`].
///
/// # Examples
/// ```
/// use strads_ap_runtime::formats::{read_matrix_market, MmField};
/// # let tmp = tempfile::Builder::new().prefix("strads-mm-doc2-").tempdir()?;
/// # let path = tmp.path().join("graph.mtx");
/// std::fs::write(&path, "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n3 1\n")?;
/// let (header, edges) = read_matrix_market(&path)?;
/// assert_eq!(header.field, MmField::Pattern);
/// assert_eq!((edges.get(1)?.row, edges.get(1)?.col, edges.get(1)?.value), (2, 0, 1.0));
///
/// std::fs::write(&path, "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n4 1\n")?;
/// let err = read_matrix_market(&path).unwrap_err().to_string();
/// assert!(err.contains("graph.mtx:4: row index 4 is out of range"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[track_caller]
pub fn read_matrix_market(path: impl AsRef<Path>) -> Result<(MmHeader, DVector<MmEntry>)> {
    let (header, entries, _) = read_matrix_market_with(&ReadOptions::new(), path)?;
    Ok((header, entries))
}

/// Reads a MatrixMarket coordinate file with `options` (to skip bad lines, say).
///
/// The head of the file is read first: the banner
/// `%%MatrixMarket matrix coordinate FIELD SYMMETRY` (FIELD `real`, `double`, `integer`
/// or `pattern`; SYMMETRY `general`, `symmetric` or `skew-symmetric`; any case), `%`
/// comment lines and blank lines, and the size line `rows cols nnz`. The entries
/// `i j [value]` that follow are read through `options`, in parallel and across ranks,
/// with the head as header lines and `%` as the comment prefix (whatever `options` say
/// of those). Indices are 1-based in the file and **0-based** in the [`MmEntry`]s.
/// Entries are returned as stored: a symmetric matrix gives one triangle, which
/// [`MmHeader::mirror`] completes.
///
/// # Errors
/// Each names the file and line:
/// - a banner that is missing or malformed, or declares what is not supported: the
///   `array` (dense) format, `complex` values, `hermitian` symmetry;
/// - a size line that is not three non-negative integers, has more than 2^32 rows or
///   columns (indices are `u32`), or is not square for a symmetric matrix;
/// - an entry with the wrong number of fields, an index out of the size line's bounds,
///   a value that is not a finite number (or not an integer, for `integer`);
/// - more or fewer entry lines than the size line declares (named at the size line).
///
/// A glob pattern must match exactly one file.
#[track_caller]
pub fn read_matrix_market_with(
    options: &ReadOptions,
    path: impl AsRef<Path>,
) -> Result<(MmHeader, DVector<MmEntry>, ReadReport)> {
    let path = path.as_ref();
    let sources = shards::sources(&[path.to_path_buf()])?;
    let [source] = sources.as_slice() else {
        let message = format!(
            "names {} files; a MatrixMarket file is read alone",
            sources.len()
        );
        return Err(Error::io(path, std::io::Error::other(message)));
    };
    let head = read_head(source)?;
    let header = head.header;
    // A count that differs from the size line is reported below, more clearly than as
    // an empty file.
    let options = options
        .clone()
        .header_lines(head.size_line)
        .comment_prefix("%")
        .allow_empty(true);
    let (entries, report) = options.read(&source.path, move |line: &str| entry(&header, line))?;
    let found = (report.parsed + report.skipped) as u64;
    if found != header.nnz {
        return Err(Error::Parse {
            path: source.path.clone(),
            line: head.size_line,
            message: format!(
                "the size line declares {} entries, but the file has {found} entry lines",
                header.nnz
            ),
            text: excerpt(&head.size_text),
        });
    }
    Ok((header, entries, report))
}

/// The head of a file: what it declares, and where and what its size line is.
struct Head {
    header: MmHeader,
    size_line: usize,
    size_text: String,
}

fn read_head(source: &shards::Source) -> Result<Head> {
    let path = &source.path;
    let at = |line: usize, message: String, text: &str| Error::Parse {
        path: path.clone(),
        line,
        message,
        text: excerpt(text),
    };
    let mut lines = HeadLines::new(source)?;
    let Some(first) = lines.next() else {
        let message = "the file is empty; a MatrixMarket file starts with its banner";
        return Err(at(1, message.into(), ""));
    };
    let (_, banner_text) = first?;
    let (field, symmetry) = banner(&banner_text).map_err(|m| at(1, m, &banner_text))?;
    let mut last = 1;
    for line in lines {
        let (number, text) = line?;
        last = number;
        let content = text.trim();
        if content.is_empty() || content.starts_with('%') {
            continue;
        }
        let header = size(content, field, symmetry).map_err(|m| at(number, m, &text))?;
        return Ok(Head {
            header,
            size_line: number,
            size_text: text,
        });
    }
    let message = "the file ends before its size line (`rows columns entries`)";
    Err(at(last, message.into(), ""))
}

/// The field and symmetry a banner line declares.
fn banner(line: &str) -> std::result::Result<(MmField, MmSymmetry), String> {
    const FORM: &str = "`%%MatrixMarket matrix coordinate FIELD SYMMETRY`, with FIELD real, \
                        integer or pattern and SYMMETRY general, symmetric or skew-symmetric";
    let words: Vec<String> = line
        .split_ascii_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    if words.first().map(String::as_str) != Some("%%matrixmarket") {
        return Err(format!(
            "the first line is not a MatrixMarket banner: it should read {FORM}"
        ));
    }
    if words.len() != 5 {
        return Err(format!(
            "the banner has {} words, not 5: it should read {FORM}",
            words.len()
        ));
    }
    match words[1].as_str() {
        "matrix" => {}
        other => return Err(format!("only matrices are read, not `{other}` objects")),
    }
    match words[2].as_str() {
        "coordinate" => {}
        "array" => {
            return Err(
                "the `array` (dense) format is not supported, only `coordinate` (sparse)".into(),
            )
        }
        other => {
            return Err(format!(
                "`{other}` is not a MatrixMarket format (coordinate)"
            ))
        }
    }
    let field = match words[3].as_str() {
        "real" | "double" => MmField::Real,
        "integer" => MmField::Integer,
        "pattern" => MmField::Pattern,
        "complex" => {
            return Err("`complex` values are not supported, only real, integer or pattern".into())
        }
        other => {
            return Err(format!(
                "`{other}` is not a MatrixMarket field (real, integer or pattern)"
            ))
        }
    };
    let symmetry = match words[4].as_str() {
        "general" => MmSymmetry::General,
        "symmetric" => MmSymmetry::Symmetric,
        "skew-symmetric" => MmSymmetry::SkewSymmetric,
        "hermitian" => {
            return Err("`hermitian` matrices are not supported (their values are complex)".into())
        }
        other => {
            return Err(format!(
                "`{other}` is not a MatrixMarket symmetry (general, symmetric or skew-symmetric)"
            ))
        }
    };
    Ok((field, symmetry))
}

/// The header a size line `rows cols nnz` completes.
fn size(line: &str, field: MmField, symmetry: MmSymmetry) -> std::result::Result<MmHeader, String> {
    let numbers: Option<Vec<u64>> = line
        .split_ascii_whitespace()
        .map(|t| t.parse().ok())
        .collect();
    let Some(&[rows, cols, nnz]) = numbers.as_deref() else {
        return Err(
            "the size line should be `rows columns entries`, three non-negative integers".into(),
        );
    };
    let most = u64::from(u32::MAX) + 1;
    if rows > most || cols > most {
        return Err(format!(
            "a matrix of {rows} × {cols} has more rows or columns than u32 indices can \
             number ({most})"
        ));
    }
    if symmetry != MmSymmetry::General && rows != cols {
        return Err(format!(
            "a symmetric or skew-symmetric matrix must be square, but it is {rows} × {cols}"
        ));
    }
    if u128::from(nnz) > u128::from(rows) * u128::from(cols) {
        return Err(format!(
            "{nnz} entries do not fit in a matrix of {rows} × {cols}"
        ));
    }
    Ok(MmHeader {
        rows,
        cols,
        nnz,
        field,
        symmetry,
    })
}

/// One entry line `i j [value]`, checked against `header`.
fn entry(header: &MmHeader, line: &str) -> std::result::Result<MmEntry, LineError> {
    let wanted = match header.field {
        MmField::Pattern => "2 fields (row column)",
        _ => "3 fields (row column value)",
    };
    let mut tokens = line.split_ascii_whitespace();
    let mut next = || tokens.next();
    let (i, j) = match (next(), next()) {
        (Some(i), Some(j)) => (i, j),
        _ => return Err(LineError::new(format!("the entry should have {wanted}"))),
    };
    let row = index("row", i, header.rows)?;
    let col = index("column", j, header.cols)?;
    let value = match header.field {
        MmField::Pattern => 1.0,
        field => {
            let v =
                next().ok_or_else(|| LineError::new(format!("the entry should have {wanted}")))?;
            value(v, field)?
        }
    };
    if next().is_some() {
        return Err(LineError::new(format!("the entry has more than {wanted}")));
    }
    Ok(MmEntry { row, col, value })
}

/// A 1-based index of at most `bound`, made 0-based.
fn index(what: &str, text: &str, bound: u64) -> std::result::Result<u32, LineError> {
    let i: u64 = text
        .parse()
        .map_err(|_| LineError::new(format!("{what} index `{text}` is not a positive integer")))?;
    if i == 0 || i > bound {
        return Err(LineError::new(format!(
            "{what} index {i} is out of range: indices count from 1 to {bound}, the {what}s \
             of the size line"
        )));
    }
    // `bound` is at most 2^32 (checked on the size line), so `i - 1` fits.
    u32::try_from(i - 1).map_err(|_| LineError::new(format!("{what} index {i} is too large")))
}

fn value(text: &str, field: MmField) -> std::result::Result<f64, LineError> {
    if field == MmField::Integer {
        return text.parse::<i64>().map(|v| v as f64).map_err(|_| {
            LineError::new(format!(
                "value `{text}` is not an integer, as the banner's `integer` field requires"
            ))
        });
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(LineError::new(format!("value `{text}` is not finite"))),
        Err(_) => Err(LineError::new(format!("value `{text}` is not a number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "%%MatrixMarket matrix coordinate real general\n\
                        % written by hand\n\
                        %\n\
                        4 5 3\n\
                        1 1 1.5\n\
                        % a comment among the entries\n\
                        4 5 -2e-3\n\
                        \n\
                        2 3 7\n";

    use crate::util::test_files::{gzip, write};

    fn read_err(dir: &Path, name: &str, text: &str) -> String {
        let path = write(dir, name, text);
        read_matrix_market(&path).unwrap_err().to_string()
    }

    #[test]
    fn a_real_matrix_reads_with_0_based_indices() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "a.mtx", REAL);
        let (header, entries) = read_matrix_market(&path).unwrap();
        assert_eq!(
            (
                header.rows,
                header.cols,
                header.nnz,
                header.field,
                header.symmetry
            ),
            (4, 5, 3, MmField::Real, MmSymmetry::General)
        );
        let entry = |row, col, value| MmEntry { row, col, value };
        assert_eq!(
            entries.to_vec().unwrap(),
            vec![entry(0, 0, 1.5), entry(3, 4, -2e-3), entry(1, 2, 7.0)]
        );
    }

    #[test]
    fn pattern_integer_and_symmetric_matrices() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "p.mtx",
            "%%MatrixMarket MATRIX Coordinate Pattern General\n2 2 2\n1 2\n2 1\n",
        );
        let (header, entries) = read_matrix_market(&path).unwrap();
        assert_eq!(header.field, MmField::Pattern);
        assert_eq!(
            entries.get(0).unwrap(),
            MmEntry {
                row: 0,
                col: 1,
                value: 1.0
            }
        );

        let path = write(
            dir.path(),
            "i.mtx",
            "%%MatrixMarket matrix coordinate integer general\n1 3 1\n1 3 -42\n",
        );
        let (_, entries) = read_matrix_market(&path).unwrap();
        assert_eq!(entries.get(0).unwrap().value, -42.0);

        // Symmetric: the stored triangle, as stored; `mirror` gives the other one.
        let path = write(
            dir.path(),
            "s.mtx",
            "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 2\n3 1 5\n3 2 -1\n",
        );
        let (header, entries) = read_matrix_market(&path).unwrap();
        let stored = entries.to_vec().unwrap();
        assert_eq!(stored.len(), 3);
        let mirrored: Vec<MmEntry> = stored.iter().filter_map(|e| header.mirror(e)).collect();
        assert_eq!(
            mirrored,
            vec![
                MmEntry {
                    row: 0,
                    col: 2,
                    value: 5.0
                },
                MmEntry {
                    row: 1,
                    col: 2,
                    value: -1.0
                }
            ]
        );
        let skew = MmHeader {
            symmetry: MmSymmetry::SkewSymmetric,
            ..header
        };
        assert_eq!(skew.mirror(&stored[1]).unwrap().value, -5.0);
        let general = MmHeader {
            symmetry: MmSymmetry::General,
            ..header
        };
        assert_eq!(general.mirror(&stored[1]), None);
    }

    #[test]
    fn a_gzip_file_reads_like_a_plain_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "a.mtx.gz", gzip(REAL));
        let (header, entries) = read_matrix_market(&path).unwrap();
        assert_eq!((header.nnz, entries.len()), (3, 3));
        assert_eq!(
            entries.get(2).unwrap(),
            MmEntry {
                row: 1,
                col: 2,
                value: 7.0
            }
        );
    }

    #[test]
    fn bad_banners_are_named_at_line_1() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (text, says) in [
            ("", "b.mtx:1: the file is empty"),
            (
                "4 5 3\n1 1 1\n",
                "b.mtx:1: the first line is not a MatrixMarket banner",
            ),
            (
                "%%MatrixMarket matrix coordinate real\n",
                "the banner has 4 words, not 5",
            ),
            (
                "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
                "b.mtx:1: the `array` (dense) format is not supported, only `coordinate`",
            ),
            (
                "%%MatrixMarket matrix coordinate complex general\n",
                "`complex` values are not supported",
            ),
            (
                "%%MatrixMarket matrix coordinate real hermitian\n",
                "`hermitian` matrices are not supported",
            ),
            (
                "%%MatrixMarket vector coordinate real general\n",
                "not `vector` objects",
            ),
            (
                "%%MatrixMarket matrix coordinate float general\n",
                "`float` is not a MatrixMarket field",
            ),
        ] {
            let e = read_err(d, "b.mtx", text);
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_size_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let banner = "%%MatrixMarket matrix coordinate real general\n";
        for (text, says) in [
            (
                format!("{banner}% only comments\n"),
                "s.mtx:2: the file ends before its size line",
            ),
            (
                format!("{banner}%\n4 5\n"),
                "s.mtx:3: the size line should be `rows columns entries`",
            ),
            (
                format!("{banner}4 x 5\n"),
                "s.mtx:2: the size line should be",
            ),
            (
                format!("{banner}5000000000 2 1\n"),
                "more rows or columns than u32 indices",
            ),
            (
                format!("{banner}2 2 5\n"),
                "5 entries do not fit in a matrix of 2 × 2",
            ),
            (
                "%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n".to_string(),
                "must be square, but it is 2 × 3",
            ),
        ] {
            let e = read_err(d, "s.mtx", &text);
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_entries_are_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let head = "%%MatrixMarket matrix coordinate real general\n% c\n3 4 2\n";
        for (entries, says) in [
            (
                "1 1 1\n4 1 1\n",
                "e.mtx:5: row index 4 is out of range: indices count from 1 to 3",
            ),
            ("1 5 1\n1 1 1\n", "e.mtx:4: column index 5 is out of range"),
            ("0 1 1\n1 1 1\n", "e.mtx:4: row index 0 is out of range"),
            (
                "1 1 1\n1 1\n",
                "e.mtx:5: the entry should have 3 fields (row column value)",
            ),
            (
                "1 1 1 1\n1 1 1\n",
                "e.mtx:4: the entry has more than 3 fields",
            ),
            ("1 1 x\n1 1 1\n", "e.mtx:4: value `x` is not a number"),
            ("1 1 nan\n1 1 1\n", "e.mtx:4: value `nan` is not finite"),
            (
                "-1 1 1\n1 1 1\n",
                "e.mtx:4: row index `-1` is not a positive integer",
            ),
        ] {
            let e = read_err(d, "e.mtx", &format!("{head}{entries}"));
            assert!(e.contains(says), "{entries:?}: {e}");
        }
        let integer = "%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 1.5\n";
        let e = read_err(d, "e.mtx", integer);
        assert!(e.contains("e.mtx:3: value `1.5` is not an integer"), "{e}");
        let pattern = "%%MatrixMarket matrix coordinate pattern general\n1 1 1\n1 1 1\n";
        let e = read_err(d, "e.mtx", pattern);
        assert!(
            e.contains("e.mtx:3: the entry has more than 2 fields (row column)"),
            "{e}"
        );
    }

    #[test]
    fn an_entry_count_other_than_the_size_line_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let head = "%%MatrixMarket matrix coordinate real general\n% c\n3 4 2\n";
        let e = read_err(d, "c.mtx", &format!("{head}1 1 1\n"));
        assert!(
            e.contains("c.mtx:3: the size line declares 2 entries, but the file has 1 entry lines"),
            "{e}"
        );
        let e = read_err(d, "c.mtx", &format!("{head}1 1 1\n2 2 2\n3 3 3\n"));
        assert!(e.contains("but the file has 3 entry lines"), "{e}");
        let e = read_err(d, "c.mtx", head);
        assert!(e.contains("but the file has 0 entry lines"), "{e}");
        // An empty matrix is fine.
        let path = write(
            d,
            "z.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 4 0\n",
        );
        let (header, entries) = read_matrix_market(&path).unwrap();
        assert_eq!((header.nnz, entries.len()), (0, 0));
        // Skipped bad lines count as entry lines, and the report says so.
        let path = write(d, "k.mtx", format!("{head}1 1 1\n9 9 9\n"));
        let options = ReadOptions::new().skip_bad_lines(true);
        let (_, entries, report) = read_matrix_market_with(&options, &path).unwrap();
        assert_eq!((entries.len(), report.skipped), (1, 1));
        assert_eq!(report.first_skipped.unwrap().0, 5);
    }

    #[test]
    fn ranks_read_their_share_of_the_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut text =
            String::from("%%MatrixMarket matrix coordinate real general\n% c\n300 2 300\n");
        for k in 1..=300 {
            text.push_str(&format!("{k} {} {k}.25\n", 1 + k % 2));
        }
        let path = write(dir.path(), "big.mtx", &text);
        let read = crate::cluster::simulate(3, || {
            let (header, entries) = read_matrix_market(&path)?;
            Ok::<_, Error>((header.nnz, entries.to_vec()?))
        });
        for r in read {
            let (nnz, entries) = r.unwrap();
            assert_eq!((nnz, entries.len()), (300, 300));
            assert_eq!(
                entries[199],
                MmEntry {
                    row: 199,
                    col: 0,
                    value: 200.25
                }
            );
        }
    }
}
