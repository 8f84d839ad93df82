//! Readers of common data formats: CSV and TSV, libsvm, and MatrixMarket coordinate files.
//!
//! Each format is a *line parser*, a function from one line to one element, that plugs
//! into [`ReadOptions`](crate::ReadOptions) (or [`read_from_file`](crate::read_from_file)),
//! so every reader gets what those already do: files split over the ranks and threads,
//! gzip-compressed files, glob patterns, comment and header lines skipped, and an error
//! naming `file:line` for a line the parser rejects, with the parser's [`LineError`]
//! saying which field is wrong and why. Where a format keeps something in the file's
//! head (a CSV header, a MatrixMarket banner and size line), a whole-file entry point
//! reads the head first and then the lines.
//!
//! * [`Csv`] — comma- or tab-separated records with quoting, deserialised with serde by
//!   position ([`Csv::parser`]) or, with a header line, by column name ([`Csv::read`]).
//! * [`libsvm_line`] — `label index:value ...` lines into a [`LibsvmRow`].
//! * [`read_matrix_market`] — the entries of a sparse matrix as 0-based [`MmEntry`]s,
//!   with the [`MmHeader`] the banner and the size line declare.
//!
//! Records are lines: a quoted CSV field cannot span lines (a line that opens a quote it
//! does not close is an error naming it).
//!
//! # Examples
//!
//! A CSV file with a header, read by column name:
//! ```
//! use strads_ap_runtime::formats::Csv;
//! # let tmp = tempfile::Builder::new().prefix("strads-formats-doc-").tempdir()?;
//! # let path = tmp.path().join("ratings.csv");
//! let text = "userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n1,1029,3.0,1260759179\n";
//! std::fs::write(&path, text)?;
//!
//! #[derive(Clone, serde::Serialize, serde::Deserialize)]
//! struct Rating {
//!     #[serde(rename = "userId")]
//!     user: u32,
//!     #[serde(rename = "movieId")]
//!     movie: u32,
//!     rating: f32,
//! }
//! let ratings = Csv::new().read::<Rating>(&path)?;
//! assert_eq!(ratings.len(), 2);
//! assert_eq!(ratings.get(1)?.movie, 1029);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A libsvm file, through [`ReadOptions`](crate::ReadOptions):
//! ```
//! use strads_ap_runtime::formats::libsvm_line;
//! use strads_ap_runtime::ReadOptions;
//! # let tmp = tempfile::Builder::new().prefix("strads-formats-doc2-").tempdir()?;
//! # let path = tmp.path().join("train.svm");
//! std::fs::write(&path, "# two samples\n+1 1:0.5 7:2\n-1 3:1 # a comment\n")?;
//! let (rows, _) = ReadOptions::new()
//!     .comment_prefix("#")
//!     .read(&path, libsvm_line::<f32>)?;
//! assert_eq!(rows.get(0)?.features, vec![(1, 0.5), (7, 2.0)]);
//! assert_eq!(rows.get(1)?.label, -1.0);
//!
//! std::fs::write(&path, "+1 1:0.5 7:2\n-1 3:x\n")?;
//! let err = ReadOptions::new().read(&path, libsvm_line::<f32>).unwrap_err();
//! assert!(err.to_string().contains("train.svm:2: feature value `x` of index 3 is not a number"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A MatrixMarket file:
//! ```
//! use strads_ap_runtime::formats::{read_matrix_market, MmEntry};
//! # let tmp = tempfile::Builder::new().prefix("strads-formats-doc3-").tempdir()?;
//! # let path = tmp.path().join("a.mtx");
//! let text = "%%MatrixMarket matrix coordinate real general\n% c\n3 4 2\n1 1 0.5\n3 4 -2\n";
//! std::fs::write(&path, text)?;
//! let (header, entries) = read_matrix_market(&path)?;
//! assert_eq!((header.rows, header.cols, header.nnz), (3, 4, 2));
//! assert_eq!(entries.get(1)?, MmEntry { row: 2, col: 3, value: -2.0 });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod delimited;
mod libsvm;
mod matrix_market;

use std::fmt;

pub use delimited::Csv;
pub use libsvm::{libsvm_line, LibsvmRow};
pub use matrix_market::{
    read_matrix_market, read_matrix_market_with, MmEntry, MmField, MmHeader, MmSymmetry,
};

/// Why a line parser rejected a line: a sentence that names the field at fault and says
/// what is wrong with it, such as ``field 3 (`rating`): `abc` is not a number``.
///
/// [`ReadOptions`](crate::ReadOptions) puts the file and line in front of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    message: String,
}

impl LineError {
    /// An error saying `message`, for parsers that add their own checks to these.
    pub fn new(message: impl Into<String>) -> Self {
        LineError {
            message: message.into(),
        }
    }

    /// The sentence.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LineError {}

impl From<LineError> for String {
    fn from(e: LineError) -> String {
        e.message
    }
}
