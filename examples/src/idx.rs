//! IDX files (MNIST, Fashion-MNIST): images and labels, optionally gzipped.
//!
//! A directory holding `train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte[.gz]`,
//! `t10k-images-idx3-ubyte[.gz]` and `t10k-labels-idx1-ubyte[.gz]` (as Debian's
//! `dataset-fashion-mnist` installs them in `/usr/share/datasets/fashion-mnist`) is read as
//! a classification data set with its own train/test split: pixels scaled to `0..=1` become
//! sparse features (zero pixels are left out).

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use crate::data::{Sample, Samples};

/// The four files of an IDX data set, as found in a directory.
const FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// The path of `name` in `dir`, plain or gzipped.
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    [dir.join(name), dir.join(format!("{name}.gz"))]
        .into_iter()
        .find(|p| p.is_file())
}

/// Whether `path` is a directory with an IDX training set in it.
pub fn is_idx_dir(path: &Path) -> bool {
    path.is_dir() && find(path, FILES[0]).is_some()
}

/// An IDX array: its dimensions and its bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Idx {
    /// Dimension sizes, the first being the number of items.
    pub dims: Vec<usize>,
    /// The items' bytes, row-major.
    pub data: Vec<u8>,
}

/// Parses an IDX array of unsigned bytes (type code 0x08) from `bytes`; `what` names the
/// source in errors.
pub fn parse_idx(bytes: &[u8], what: &str) -> Result<Idx> {
    ensure!(
        bytes.len() >= 4,
        "{what}: not an IDX file (only {} bytes)",
        bytes.len()
    );
    ensure!(
        bytes[0] == 0 && bytes[1] == 0,
        "{what}: not an IDX file (magic {:02x?})",
        &bytes[..4]
    );
    ensure!(
        bytes[2] == 0x08,
        "{what}: element type {:#04x} is not unsigned bytes (0x08)",
        bytes[2]
    );
    let rank = bytes[3] as usize;
    ensure!(
        (1..=4).contains(&rank),
        "{what}: {rank} dimensions (expected 1 to 4)"
    );
    let header = 4 + 4 * rank;
    ensure!(
        bytes.len() >= header,
        "{what}: truncated header ({} bytes)",
        bytes.len()
    );
    let dims: Vec<usize> = (0..rank)
        .map(|i| {
            let at = 4 + 4 * i;
            u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
        })
        .collect();
    let want = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let have = bytes.len() - header;
    match want {
        Some(w) if w == have => {}
        _ => bail!(
            "{what}: the header promises {dims:?} ({} bytes) but the file holds {have} bytes \
             of data",
            want.map_or("too many".to_string(), |w| w.to_string())
        ),
    }
    Ok(Idx {
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// Reads an IDX file, gunzipping it if its name ends in `.gz`.
pub fn read_idx(path: &Path) -> Result<Idx> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("{}: not a valid gzip file", path.display()))?;
        out
    } else {
        raw
    };
    parse_idx(&bytes, &path.display().to_string())
}

/// Samples from an images file and a labels file.
fn samples(images: &Path, labels: &Path) -> Result<Vec<Sample>> {
    let (img, lab) = (read_idx(images)?, read_idx(labels)?);
    ensure!(
        img.dims.len() >= 2,
        "{}: expected images (2 or more dimensions), found {:?}",
        images.display(),
        img.dims
    );
    ensure!(
        lab.dims.len() == 1,
        "{}: expected labels (1 dimension), found {:?}",
        labels.display(),
        lab.dims
    );
    ensure!(
        img.dims[0] == lab.dims[0],
        "{} holds {} images but {} holds {} labels",
        images.display(),
        img.dims[0],
        labels.display(),
        lab.dims[0]
    );
    let size: usize = img.dims[1..].iter().product();
    Ok(img
        .data
        .chunks(size.max(1))
        .zip(&lab.data)
        .map(|(pixels, &label)| Sample {
            label: u32::from(label),
            x: pixels
                .iter()
                .enumerate()
                .filter(|(_, &p)| p != 0)
                .map(|(i, &p)| (i as u32, f32::from(p) / 255.0))
                .collect(),
        })
        .collect())
}

/// Reads an IDX directory: the training set (with its feature and class counts) and the
/// test set.
pub fn load_idx_dir(dir: &Path) -> Result<(Samples, Vec<Sample>)> {
    let paths: Vec<PathBuf> = FILES
        .iter()
        .map(|name| {
            find(dir, name).with_context(|| {
                format!(
                    "{}: no {name} or {name}.gz (an IDX data set)",
                    dir.display()
                )
            })
        })
        .collect::<Result<_>>()?;
    let train = samples(&paths[0], &paths[1])?;
    let test = samples(&paths[2], &paths[3])?;
    let features = read_idx(&paths[0])?.dims[1..].iter().product();
    let classes = train
        .iter()
        .chain(&test)
        .map(|s| s.label as usize + 1)
        .max()
        .unwrap_or(0);
    ensure!(!train.is_empty(), "{}: no training images", dir.display());
    Ok((
        Samples {
            samples: train,
            features,
            classes,
        },
        test,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut out = vec![0, 0, 0x08, dims.len() as u8];
        for d in dims {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn parses_and_checks_sizes() {
        let ok = parse_idx(&idx(&[2, 2, 2], &[1, 0, 0, 3, 0, 0, 0, 255]), "x").unwrap();
        assert_eq!(ok.dims, vec![2, 2, 2]);
        let short = parse_idx(&idx(&[2, 2, 2], &[1, 2, 3]), "imgs").unwrap_err();
        assert!(short
            .to_string()
            .contains("imgs: the header promises [2, 2, 2] (8 bytes)"));
        let bad = parse_idx(&[1, 2, 3, 4, 5], "f").unwrap_err();
        assert!(bad.to_string().contains("not an IDX file"), "{bad}");
        let float = parse_idx(&[0, 0, 0x0d, 1, 0, 0, 0, 0], "f").unwrap_err();
        assert!(float.to_string().contains("not unsigned bytes"), "{float}");
    }

    #[test]
    fn a_directory_becomes_sparse_samples() {
        let dir = std::env::temp_dir().join(format!("idx-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: Vec<u8>| std::fs::write(dir.join(name), bytes).unwrap();
        write(FILES[0], idx(&[2, 2, 2], &[0, 255, 0, 0, 51, 0, 0, 0]));
        write(FILES[1], idx(&[2], &[3, 1]));
        write(FILES[2], idx(&[1, 2, 2], &[0, 0, 0, 255]));
        write(FILES[3], idx(&[1], &[0]));
        assert!(is_idx_dir(&dir));
        let (train, test) = load_idx_dir(&dir).unwrap();
        assert_eq!((train.features, train.classes), (4, 4));
        assert_eq!(train.samples[0].x, vec![(1, 1.0)]);
        assert_eq!(train.samples[1].x, vec![(0, 0.2)]);
        assert_eq!(test[0].x, vec![(3, 1.0)]);
        write(FILES[3], idx(&[2], &[0, 1]));
        let err = load_idx_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("holds 1 images but"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
