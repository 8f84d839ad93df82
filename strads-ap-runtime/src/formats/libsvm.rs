//! The libsvm (svmlight) format: `label [qid:n] index:value ... [# comment]` per line.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::LineError;

/// One line of a libsvm file: the label and the features as written.
///
/// Feature indices are kept as the file has them: libsvm files usually count from 1,
/// some from 0, and the row does not shift either. `V` is the type of the feature values,
/// `f32` (the default) or `f64`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LibsvmRow<V = f32> {
    /// The label (or regression target), e.g. `1`, `-1`, `+1`, `3.5`.
    pub label: f64,
    /// `(index, value)` pairs, indices strictly increasing.
    pub features: Vec<(u32, V)>,
}

/// Parses a libsvm line, `label index:value index:value ...`, for
/// [`ReadOptions`](crate::ReadOptions) (as `libsvm_line::<f32>` or `libsvm_line::<f64>`,
/// the type of the values).
///
/// - Tokens are separated by spaces or tabs; a `#` and what follows it is a comment.
/// - The label and every value must be finite numbers (`nan` and `inf` are refused, and
///   so is an `f32` value too large for `f32`).
/// - Indices are non-negative integers up to `u32::MAX`, kept as written (0- or
///   1-based), and must increase strictly along the line.
/// - A `qid:n` token right after the label (ranking data) is checked and skipped, as
///   scikit-learn's `load_svmlight_file` does by default; anywhere else it is an error.
///
/// Full-line `#` comments are for the reader to skip: give it
/// [`comment_prefix("#")`](crate::ReadOptions::comment_prefix).
///
/// # Examples
/// ```
/// use strads_ap_runtime::formats::libsvm_line;
/// let row = libsvm_line::<f32>("+1 qid:3 2:0.5 10:-2 # note").unwrap();
/// assert_eq!((row.label, row.features), (1.0, vec![(2, 0.5), (10, -2.0)]));
/// let err = libsvm_line::<f64>("1 3:0.5 2:1").unwrap_err();
/// assert_eq!(err.to_string(), "feature index 2 after 3: the indices of a line must increase");
/// ```
pub fn libsvm_line<V>(line: &str) -> Result<LibsvmRow<V>, LineError>
where
    V: FromStr + Into<f64> + Copy,
{
    if line.trim_start().starts_with('#') {
        return Err(LineError::new(
            "the line is a comment, which has no label: skip comment lines with \
             `ReadOptions::comment_prefix(\"#\")`",
        ));
    }
    let data = line.split('#').next().unwrap_or("");
    let mut tokens = data.split_ascii_whitespace().peekable();
    let label = tokens
        .next()
        .ok_or_else(|| LineError::new("the line has no label"))?;
    let label = match label.parse::<f64>() {
        Ok(v) if v.is_finite() => v,
        Ok(_) => return Err(LineError::new(format!("label `{label}` is not finite"))),
        Err(_) => {
            return Err(LineError::new(format!("label `{label}` is not a number")));
        }
    };
    if let Some(qid) = tokens.peek().and_then(|t| t.strip_prefix("qid:")) {
        if qid.parse::<u64>().is_err() {
            return Err(LineError::new(format!(
                "query id `{qid}` (qid:) is not a non-negative integer"
            )));
        }
        tokens.next();
    }
    let mut features = Vec::new();
    let mut last: Option<u32> = None;
    for token in tokens {
        let (index, value) = feature(token)?;
        if let Some(last) = last.filter(|&l| index <= l) {
            return Err(LineError::new(format!(
                "feature index {index} after {last}: the indices of a line must increase"
            )));
        }
        last = Some(index);
        features.push((index, value));
    }
    Ok(LibsvmRow { label, features })
}

/// One `index:value` token.
fn feature<V>(token: &str) -> Result<(u32, V), LineError>
where
    V: FromStr + Into<f64> + Copy,
{
    if token.starts_with("qid:") {
        return Err(LineError::new(format!(
            "`{token}` comes after a feature: a query id must come right after the label"
        )));
    }
    let (index, value) = token
        .split_once(':')
        .ok_or_else(|| LineError::new(format!("feature `{token}` is not of the form idx:val")))?;
    let index = match index.parse::<u32>() {
        Ok(i) => i,
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            return Err(LineError::new(format!(
                "feature index `{index}` is above {}, the largest index",
                u32::MAX
            )));
        }
        Err(_) => {
            return Err(LineError::new(format!(
                "feature index `{index}` is not a non-negative integer"
            )));
        }
    };
    match value.parse::<V>() {
        Ok(v) if v.into().is_finite() => Ok((index, v)),
        Ok(_) => Err(LineError::new(format!(
            "feature value `{value}` of index {index} is not a finite number (or too large \
             for its type)"
        ))),
        Err(_) => Err(LineError::new(format!(
            "feature value `{value}` of index {index} is not a number"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReadOptions;

    fn err(line: &str) -> String {
        libsvm_line::<f32>(line).unwrap_err().to_string()
    }

    #[test]
    fn lines_parse_with_their_indices_as_written() {
        let row = libsvm_line::<f32>("-1 1:0.5 3:1e-3\t7:2").unwrap();
        assert_eq!(row.label, -1.0);
        assert_eq!(row.features, vec![(1, 0.5), (3, 1e-3), (7, 2.0)]);
        let zero_based = libsvm_line::<f32>("3.5 0:1 4294967295:2").unwrap();
        assert_eq!(zero_based.features, vec![(0, 1.0), (u32::MAX, 2.0)]);
        let bare = libsvm_line::<f32>("2 # no features").unwrap();
        assert_eq!((bare.label, bare.features.len()), (2.0, 0));
        // f64 values keep every digit.
        let exact = libsvm_line::<f64>("0.1 1:0.30000000000000004").unwrap();
        assert_eq!(exact.features, vec![(1, 0.30000000000000004)]);
    }

    #[test]
    fn a_query_id_after_the_label_is_skipped_and_refused_elsewhere() {
        let row = libsvm_line::<f32>("2 qid:17 1:1 2:1").unwrap();
        assert_eq!(row.features, vec![(1, 1.0), (2, 1.0)]);
        assert!(err("2 qid:x 1:1").contains("query id `x`"));
        assert!(err("2 1:1 qid:4").contains("must come right after the label"));
    }

    #[test]
    fn bad_tokens_are_named() {
        for (line, says) in [
            ("", "the line has no label"),
            (
                "  # note",
                "skip comment lines with `ReadOptions::comment_prefix(\"#\")`",
            ),
            ("one 1:2", "label `one` is not a number"),
            ("nan 1:2", "label `nan` is not finite"),
            ("1 7", "feature `7` is not of the form idx:val"),
            ("1 x:7", "feature index `x` is not a non-negative integer"),
            ("1 -1:7", "feature index `-1` is not a non-negative integer"),
            (
                "1 4294967296:7",
                "feature index `4294967296` is above 4294967295",
            ),
            ("1 3:y", "feature value `y` of index 3 is not a number"),
            (
                "1 3:inf",
                "feature value `inf` of index 3 is not a finite number",
            ),
            (
                "1 3:1e39",
                "feature value `1e39` of index 3 is not a finite number",
            ),
            ("1 3:1 3:2", "feature index 3 after 3"),
            ("1 4:1 2:2", "feature index 2 after 4"),
        ] {
            assert!(err(line).contains(says), "{line:?}: {}", err(line));
        }
        // 1e39 fits an f64.
        assert!(libsvm_line::<f64>("1 3:1e39").is_ok());
    }

    #[test]
    fn a_file_reads_through_read_options_and_errors_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.svm");
        std::fs::write(&path, "# header comment\n1 1:1 2:2\n\n-1 2:0.5 # c\n").unwrap();
        let (rows, report) = ReadOptions::new()
            .comment_prefix("#")
            .read(&path, libsvm_line::<f32>)
            .unwrap();
        assert_eq!(report.parsed, 2);
        let rows = rows.to_vec().unwrap();
        assert_eq!(rows[1].label, -1.0);
        assert_eq!(rows[1].features, vec![(2, 0.5)]);

        std::fs::write(&path, "1 1:1\n1 2:1\n1 2:1 1:1\n").unwrap();
        let e = ReadOptions::new()
            .read(&path, libsvm_line::<f64>)
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.svm:3: feature index 1 after 2"), "{e}");
    }
}
