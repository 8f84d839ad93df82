//! Data sets of the examples: synthetic generators, text loaders and the train/test split.
//!
//! Everything here is plain Rust over `Vec`s, so the serial twins use it as it is; the
//! strads-ap twins either convert the result with `DVector::from_vec` or read the file with
//! strads-ap's own reader and the same line parsers ([`parse_rating_line`],
//! [`parse_libsvm_line`]) and remapping ([`remap_ratings`], [`remap_samples`]), so both
//! twins of an example always see the same data in the same order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One rating of a matrix-factorisation data set, with dense ids.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rating {
    /// User id, in `0..users`.
    pub user: u32,
    /// Item id, in `0..items`.
    pub item: u32,
    /// The rating value.
    pub rating: f32,
}

/// A ratings data set: ratings with dense ids and the id ranges.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratings {
    /// The ratings, in file (or generation) order.
    pub ratings: Vec<Rating>,
    /// Number of users: every `Rating::user` is below it.
    pub users: usize,
    /// Number of items: every `Rating::item` is below it.
    pub items: usize,
}

/// One labelled sample of a classification data set, with sparse features.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Class, in `0..classes`.
    pub label: u32,
    /// `(feature index, value)` pairs, feature indices in `0..features`.
    pub x: Vec<(u32, f32)>,
}

/// A classification data set: samples and the sizes of its label and feature spaces.
#[derive(Clone, Debug, PartialEq)]
pub struct Samples {
    /// The samples, in file (or generation) order.
    pub samples: Vec<Sample>,
    /// Number of features: every feature index is below it.
    pub features: usize,
    /// Number of classes: every label is below it.
    pub classes: usize,
}

// ---------------------------------------------------------------------------------------
// Random helpers
// ---------------------------------------------------------------------------------------

/// A standard normal deviate (Box-Muller), from any random source.
pub fn gaussian(rng: &mut impl Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // in (0, 1]
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// SplitMix64's finaliser: a bijective, well-mixed 64-bit hash of `x`, the core of the
/// examples' counter-based draws (a draw made from its indices alone does not depend on
/// which draws ran before it, so parallel and serial runs draw alike).
///
/// # Examples
/// ```
/// use strads_ap_examples::data::mix64;
/// assert_ne!(mix64(1), mix64(2));
/// assert_eq!(mix64(7), mix64(7));
/// ```
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A random generator for stream `stream` of `seed`: independent streams for independent
/// uses of one seed (data, split, initial parameters).
pub fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Samples ranks `0..n` with probability proportional to `1 / (rank + 1)^exponent`.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::{rng_for, Zipf};
/// let zipf = Zipf::new(1000, 1.0);
/// let mut rng = rng_for(7, 0);
/// let draws: Vec<usize> = (0..10_000).map(|_| zipf.sample(&mut rng)).collect();
/// let zeros = draws.iter().filter(|&&d| d == 0).count();
/// let tail = draws.iter().filter(|&&d| d == 999).count();
/// assert!(zeros > 50 * tail.max(1) / 2);
/// ```
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A Zipf-like distribution over `n` ranks (`n >= 1`).
    pub fn new(n: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = (0..n.max(1))
            .map(|r| {
                total += 1.0 / ((r + 1) as f64).powf(exponent);
                total
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= total);
        Zipf { cdf }
    }

    /// Draws a rank.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// A seeded random permutation of `0..n` (Fisher-Yates).
fn permutation(n: usize, rng: &mut impl Rng) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        p.swap(i, rng.gen_range(0..=i));
    }
    p
}

// ---------------------------------------------------------------------------------------
// Synthetic data
// ---------------------------------------------------------------------------------------

/// Rank of the hidden model behind [`synthetic_ratings`].
pub const HIDDEN_RANK: usize = 8;

/// Zipf exponent of user popularity in [`synthetic_ratings`].
pub const USER_EXPONENT: f64 = 0.6;

/// Zipf exponent of item popularity in [`synthetic_ratings`].
pub const ITEM_EXPONENT: f64 = 0.8;

/// A seeded synthetic ratings data set.
///
/// Users and items are drawn with power-law (Zipf-like) popularity (exponents
/// [`USER_EXPONENT`], [`ITEM_EXPONENT`]; which ids are popular is a seeded permutation, so
/// popularity is not sorted by id). A rating is `3 + b_u + b_i + p_u·q_i + noise` from a
/// hidden model of rank [`HIDDEN_RANK`] with user and item biases and Gaussian noise
/// (σ = 0.3), clipped to `[1, 5]`; its standard deviation is about 1. Duplicate
/// `(user, item)` pairs may occur, as repeated ratings do in real logs. The same arguments
/// always give the same data.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::synthetic_ratings;
/// let a = synthetic_ratings(100, 50, 1000, 1);
/// assert_eq!(a, synthetic_ratings(100, 50, 1000, 1));
/// assert_eq!(a.ratings.len(), 1000);
/// assert!(a.ratings.iter().all(|r| (1.0..=5.0).contains(&r.rating) && r.user < 100 && r.item < 50));
/// ```
pub fn synthetic_ratings(users: usize, items: usize, ratings: usize, seed: u64) -> Ratings {
    let (users, items) = (users.max(1), items.max(1));
    let mut rng = rng_for(seed, 1);
    let factor_sd = 0.53; // p·q has sd ≈ sqrt(8) · 0.53² ≈ 0.8
    let mut factors = |n: usize, bias_sd: f64| -> Vec<(f64, [f64; HIDDEN_RANK])> {
        (0..n)
            .map(|_| {
                let bias = bias_sd * gaussian(&mut rng);
                let mut f = [0.0; HIDDEN_RANK];
                f.iter_mut()
                    .for_each(|x| *x = factor_sd * gaussian(&mut rng));
                (bias, f)
            })
            .collect()
    };
    let p = factors(users, 0.4);
    let q = factors(items, 0.5);
    let user_of_rank = permutation(users, &mut rng);
    let item_of_rank = permutation(items, &mut rng);
    let user_pop = Zipf::new(users, USER_EXPONENT);
    let item_pop = Zipf::new(items, ITEM_EXPONENT);
    let ratings = (0..ratings)
        .map(|_| {
            let user = user_of_rank[user_pop.sample(&mut rng)];
            let item = item_of_rank[item_pop.sample(&mut rng)];
            let (bu, pu) = &p[user as usize];
            let (bi, qi) = &q[item as usize];
            let dot: f64 = pu.iter().zip(qi).map(|(a, b)| a * b).sum();
            let value = 3.0 + bu + bi + dot + 0.3 * gaussian(&mut rng);
            Rating {
                user,
                item,
                rating: value.clamp(1.0, 5.0) as f32,
            }
        })
        .collect();
    Ratings {
        ratings,
        users,
        items,
    }
}

/// A seeded synthetic classification data set of `classes` Gaussian classes in
/// `features` dimensions, stored as (dense) sparse samples.
///
/// Each class has a centre with standard-normal coordinates; a sample of class `c` is its
/// centre plus Gaussian noise (σ = 2), scaled by `1/sqrt(features)` so that the squared
/// norm of a sample is about 5 whatever the dimension. Labels are uniform. The classes
/// overlap a little, so accuracy is high but not perfect.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::synthetic_samples;
/// let s = synthetic_samples(200, 10, 3, 5);
/// assert_eq!((s.samples.len(), s.features, s.classes), (200, 10, 3));
/// assert!(s.samples.iter().all(|x| x.label < 3 && x.x.len() == 10));
/// ```
pub fn synthetic_samples(samples: usize, features: usize, classes: usize, seed: u64) -> Samples {
    let (features, classes) = (features.max(1), classes.max(1));
    let mut rng = rng_for(seed, 2);
    let centres: Vec<Vec<f64>> = (0..classes)
        .map(|_| (0..features).map(|_| gaussian(&mut rng)).collect())
        .collect();
    let scale = 1.0 / (features as f64).sqrt();
    let samples = (0..samples)
        .map(|_| {
            let label = rng.gen_range(0..classes);
            let x = centres[label]
                .iter()
                .enumerate()
                .map(|(f, c)| (f as u32, ((c + 2.0 * gaussian(&mut rng)) * scale) as f32))
                .collect();
            Sample {
                label: label as u32,
                x,
            }
        })
        .collect();
    Samples {
        samples,
        features,
        classes,
    }
}

// ---------------------------------------------------------------------------------------
// Train/test split
// ---------------------------------------------------------------------------------------

/// Fraction of the data [`split_train_test`] puts in the test set.
pub const TEST_FRACTION: f64 = 0.1;

/// Splits `items` into a training and a test set, about 90/10, seeded: each element goes
/// to the test set with probability [`TEST_FRACTION`]. Both sets keep the input order.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::split_train_test;
/// let (train, test) = split_train_test((0..1000).collect(), 3);
/// assert_eq!(train.len() + test.len(), 1000);
/// assert!((50..150).contains(&test.len()));
/// assert_eq!((train.clone(), test.clone()), split_train_test((0..1000).collect(), 3));
/// ```
pub fn split_train_test<T>(items: Vec<T>, seed: u64) -> (Vec<T>, Vec<T>) {
    let mut rng = rng_for(seed, 3);
    let mut train = Vec::with_capacity(items.len());
    let mut test = Vec::with_capacity(items.len() / 8);
    for item in items {
        if rng.gen_bool(TEST_FRACTION) {
            test.push(item);
        } else {
            train.push(item);
        }
    }
    (train, test)
}

// ---------------------------------------------------------------------------------------
// Loaders
// ---------------------------------------------------------------------------------------

/// A loader error: the file, the line (1-based) when a line is at fault, and what is wrong.
///
/// Displays as `path:line: message` (or `path: message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line at fault, if any.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for LoadError {}

impl LoadError {
    /// An error about the file `path` as a whole (`path: message`).
    pub fn file(path: &Path, message: impl Into<String>) -> Self {
        LoadError {
            path: path.to_path_buf(),
            line: None,
            message: message.into(),
        }
    }

    /// An error about line `line` (1-based) of `path` (`path:line: message`).
    ///
    /// # Examples
    /// ```
    /// use strads_ap_examples::data::LoadError;
    /// let e = LoadError::at("ratings.txt".as_ref(), 3, "rating `x` is not a number");
    /// assert_eq!(e.to_string(), "ratings.txt:3: rating `x` is not a number");
    /// ```
    pub fn at(path: &Path, line: usize, message: impl Into<String>) -> Self {
        LoadError {
            line: Some(line),
            ..LoadError::file(path, message)
        }
    }
}

/// The UTF-8 byte-order mark some editors put at the start of a text file.
pub const BOM: char = '\u{feff}';

/// `text` without a leading UTF-8 byte-order mark: the mark is not part of the first line.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::strip_bom;
/// assert_eq!(strip_bom("\u{feff}1 2 5"), "1 2 5");
/// assert_eq!(strip_bom("1 2 5"), "1 2 5");
/// ```
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// Reads a text file for a loader: a directory, a missing file and bytes that are not
/// UTF-8 are errors naming the file (and, for bad bytes, the line); a leading byte-order
/// mark is dropped ([`strip_bom`]). Every loader of the examples reads its files with it.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::read_text;
/// let dir = std::env::temp_dir().join(format!("read-text-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("a.txt"), b"\xef\xbb\xbfword\n\xff\n").unwrap();
/// let err = read_text(&dir.join("a.txt")).unwrap_err().to_string();
/// assert!(err.ends_with("a.txt:2: the line is not valid UTF-8"), "{err}");
/// std::fs::write(dir.join("a.txt"), b"\xef\xbb\xbfword\n").unwrap();
/// assert_eq!(read_text(&dir.join("a.txt")).unwrap(), "word\n");
/// assert!(read_text(&dir).unwrap_err().to_string().contains("is a directory"));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn read_text(path: &Path) -> Result<String, LoadError> {
    if path.is_dir() {
        return Err(LoadError::file(path, "is a directory, not a file"));
    }
    let bytes = std::fs::read(path).map_err(|e| LoadError::file(path, e.to_string()))?;
    let mut text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        LoadError::at(path, line, "the line is not valid UTF-8")
    })?;
    if text.starts_with(BOM) {
        text.drain(..BOM.len_utf8());
    }
    Ok(text)
}

/// Largest magnitude of a rating or a feature value the loaders accept.
///
/// Larger values are almost surely a mistake (a timestamp in the rating column), and their
/// squares and products overflow the single-precision arithmetic of training: a rating of
/// `1e38` makes every RMSE `NaN`. Scale such data before loading it.
pub const MAX_ABS_VALUE: f32 = 1e6;

/// Largest feature index of a libsvm line, `2^24 - 1`: MLR keeps a dense weight row per
/// class, so a stray index of `4294967295` would ask for 17 GB of weights.
pub const MAX_FEATURE_INDEX: u32 = (1 << 24) - 1;

/// Parses `text` (a field named `what`) as a finite number of magnitude at most
/// [`MAX_ABS_VALUE`].
///
/// # Examples
/// ```
/// use strads_ap_examples::data::bounded_value;
/// assert_eq!(bounded_value("rating", "4.5"), Ok(4.5));
/// assert!(bounded_value("rating", "NaN").unwrap_err().contains("not a finite number"));
/// assert!(bounded_value("rating", "1e38").unwrap_err().contains("larger in magnitude"));
/// ```
pub fn bounded_value(what: &str, text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(v) if v.is_finite() && v.abs() <= MAX_ABS_VALUE => Ok(v),
        Ok(v) if v.is_finite() => Err(too_large(what, text)),
        _ => Err(format!("{what} `{text}` is not a finite number")),
    }
}

/// The error of a value (`text`, of the field `what`) above [`MAX_ABS_VALUE`].
fn too_large(what: &str, text: &str) -> String {
    format!(
        "{what} `{text}` is larger in magnitude than {MAX_ABS_VALUE:e}, the loaders' limit (it \
         would overflow single-precision training; scale the data)"
    )
}

/// A rating as written in a file: ids as they are there (not yet dense).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawRating {
    /// User id in the file.
    pub user: u64,
    /// Item id in the file.
    pub item: u64,
    /// Rating value.
    pub rating: f32,
}

/// Parses a `user item rating [more fields...]` line (whitespace or tab separated;
/// fields after the third, such as a timestamp, are ignored). The rating must be finite
/// and at most [`MAX_ABS_VALUE`] in magnitude.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::parse_rating_line;
/// let r = parse_rating_line("196\t242\t3\t881250949").unwrap();
/// assert_eq!((r.user, r.item, r.rating), (196, 242, 3.0));
/// assert!(parse_rating_line("1 2").unwrap_err().contains("3 fields"));
/// assert!(parse_rating_line("1 2 1e38").unwrap_err().contains("`1e38` is larger"));
/// ```
pub fn parse_rating_line(line: &str) -> Result<RawRating, String> {
    let mut fields = line.split_whitespace();
    let mut next = |what: &str| {
        fields.next().ok_or_else(|| {
            format!("expected at least 3 fields (user item rating), the {what} is missing")
        })
    };
    let (user, item, rating) = (next("user")?, next("item")?, next("rating")?);
    let user = user
        .parse()
        .map_err(|_| format!("user id `{user}` is not a non-negative integer"))?;
    let item = item
        .parse()
        .map_err(|_| format!("item id `{item}` is not a non-negative integer"))?;
    let rating = bounded_value("rating", rating)?;
    Ok(RawRating { user, item, rating })
}

/// Parses a comma-separated ratings line `user,item,rating[,more]` (MovieLens
/// `ratings.csv`), with quoting, through strads-ap's CSV reader; the same checks as
/// [`parse_rating_line`].
///
/// # Examples
/// ```
/// use strads_ap_examples::data::parse_rating_csv_line;
/// let r = parse_rating_csv_line("1,31,2.5,1260759144").unwrap();
/// assert_eq!((r.user, r.item, r.rating), (1, 31, 2.5));
/// assert!(parse_rating_csv_line("1,x,2.5").unwrap_err().contains("field 2"));
/// ```
pub fn parse_rating_csv_line(line: &str) -> Result<RawRating, String> {
    // A `Csv` line parser is cheap to make: it keeps its record splitter per thread.
    let parse = strads_ap::formats::Csv::new().parser::<(u64, u64, String)>();
    let (user, item, rating) = parse(line)?;
    let rating = bounded_value("rating", rating.trim())?;
    Ok(RawRating { user, item, rating })
}

/// The line parser for a ratings file: [`parse_rating_csv_line`] for a `.csv` file
/// (compressed or not), [`parse_rating_line`] (whitespace-separated) otherwise.
pub fn rating_parser(path: &Path) -> fn(&str) -> Result<RawRating, String> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    match name.ends_with(".csv") {
        true => parse_rating_csv_line,
        false => parse_rating_line,
    }
}

/// Whether `line` is a header rather than data: its first field is not a number.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::is_header;
/// assert!(is_header("user_id:token\titem_id:token\trating:float"));
/// assert!(!is_header("1 2 3.5"));
/// assert!(is_header("userId,movieId,rating,timestamp"));
/// assert!(!is_header("1,31,2.5,1260759144"));
/// ```
pub fn is_header(line: &str) -> bool {
    let mut fields = line
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|f| !f.is_empty());
    match fields.next() {
        Some(first) => first.parse::<f64>().is_err(),
        None => false,
    }
}

/// How many header lines `path` has (0 or 1): 1 when its first line is a header
/// ([`is_header`]); a byte-order mark before it does not make it one.
pub fn header_lines(path: &Path) -> Result<usize, LoadError> {
    if path.is_dir() {
        return Err(LoadError::file(path, "is a directory, not a file"));
    }
    let file = std::fs::File::open(path).map_err(|e| LoadError::file(path, e.to_string()))?;
    let mut first = Vec::new();
    std::io::BufReader::new(file)
        .read_until(b'\n', &mut first)
        .map_err(|e| LoadError::file(path, e.to_string()))?;
    // Bad bytes are the reader's to report, with their line.
    let first = String::from_utf8_lossy(&first);
    Ok(usize::from(is_header(strip_bom(&first))))
}

/// Dense ids for the distinct values of `ids`, in increasing order of the original id.
fn dense_ids(ids: impl Iterator<Item = u64>) -> BTreeMap<u64, u32> {
    let distinct: BTreeSet<u64> = ids.collect();
    distinct
        .into_iter()
        .enumerate()
        .map(|(dense, id)| (id, dense as u32))
        .collect()
}

/// Remaps file ids to dense ids `0..users` and `0..items`, in increasing order of the
/// original id (so 1-based ids `1..=n` become `0..n`, and gaps close up).
///
/// # Examples
/// ```
/// use strads_ap_examples::data::{remap_ratings, RawRating};
/// let raw = [RawRating { user: 7, item: 1, rating: 4.0 }, RawRating { user: 3, item: 9, rating: 2.0 }];
/// let r = remap_ratings(&raw);
/// assert_eq!((r.users, r.items), (2, 2));
/// assert_eq!((r.ratings[0].user, r.ratings[0].item), (1, 0));
/// ```
pub fn remap_ratings(raw: &[RawRating]) -> Ratings {
    let users = dense_ids(raw.iter().map(|r| r.user));
    let items = dense_ids(raw.iter().map(|r| r.item));
    let ratings = raw
        .iter()
        .map(|r| Rating {
            user: users[&r.user],
            item: items[&r.item],
            rating: r.rating,
        })
        .collect();
    Ratings {
        ratings,
        users: users.len(),
        items: items.len(),
    }
}

/// Reads the data lines of a text file: skips blank lines, `#` comment lines and `header`
/// leading lines, and parses the rest with `parse`; a bad line is an error naming the file
/// and line, a file without data lines is an error too.
fn read_lines<T>(
    path: &Path,
    header: usize,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, LoadError> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(header) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse(line).map_err(|message| LoadError::at(path, i + 1, message))?);
    }
    if out.is_empty() {
        return Err(LoadError::file(path, "the file has no data lines"));
    }
    Ok(out)
}

/// Loads a ratings file: `user item rating` lines (whitespace or tab separated, or
/// comma-separated in a `.csv` file such as MovieLens `ratings.csv`; more fields
/// ignored), an optional header line (detected by [`is_header`]), blank and `#`
/// lines skipped; ids (0- or 1-based, or sparse) are remapped to dense ids with
/// [`remap_ratings`].
///
/// Errors name the file and, for a bad line, the line: `ratings.txt:3: item id ...`. A
/// file without ratings is an error.
pub fn load_ratings(path: impl AsRef<Path>) -> Result<Ratings, LoadError> {
    let path = path.as_ref();
    let raw = read_lines(path, header_lines(path)?, rating_parser(path))?;
    Ok(remap_ratings(&raw))
}

/// A sample as written in a libsvm file: the label and feature indices as they are there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawSample {
    /// The label as written (e.g. `1`, `-1`, `+1`, `3.0`).
    pub label: f64,
    /// `(index, value)` pairs as written.
    pub x: Vec<(u32, f32)>,
}

/// Parses a libsvm line `label idx:val idx:val ...` (a trailing `# comment` is ignored)
/// with strads-ap's [`libsvm_line`](strads_ap::formats::libsvm_line) (finite
/// numbers, indices increasing along the line, a `qid:` after the label skipped), then
/// checks the loaders' limits: indices are at most [`MAX_FEATURE_INDEX`], values at most
/// [`MAX_ABS_VALUE`] in magnitude.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::parse_libsvm_line;
/// let s = parse_libsvm_line("+1 3:0.5 10:-2 # note").unwrap();
/// assert_eq!((s.label, s.x), (1.0, vec![(3, 0.5), (10, -2.0)]));
/// assert!(parse_libsvm_line("1 3=0.5").unwrap_err().contains("idx:val"));
/// assert!(parse_libsvm_line("1 4294967295:1").unwrap_err().contains("above 16777215"));
/// assert!(parse_libsvm_line("1 2:1e38").unwrap_err().contains("`1e38` is larger"));
/// ```
pub fn parse_libsvm_line(line: &str) -> Result<RawSample, String> {
    let row = strads_ap::formats::libsvm_line::<f32>(line)?;
    for &(index, value) in &row.features {
        if index > MAX_FEATURE_INDEX {
            return Err(format!(
                "feature index `{index}` is above {MAX_FEATURE_INDEX}, the largest the loader \
                 accepts (weights are dense rows)"
            ));
        }
        if value.abs() > MAX_ABS_VALUE {
            return Err(too_large("feature value", &format!("{value:e}")));
        }
    }
    Ok(RawSample {
        label: row.label,
        x: row.features,
    })
}

/// Most weights a libsvm data set may ask of MLR, `2^28` (1 GiB of `f32`): one dense row
/// of `features + 1` per class.
pub const MAX_WEIGHTS: usize = 1 << 28;

/// Remaps libsvm samples: labels to classes `0..classes` in increasing order of the label
/// value; feature indices to `0..features` (shifted down by one when no index is 0, i.e.
/// the usual 1-based libsvm indices).
///
/// Fails when `classes × (features + 1)` exceeds [`MAX_WEIGHTS`]: typically a regression
/// file, whose real-valued labels each become a class.
///
/// # Examples
/// ```
/// use strads_ap_examples::data::{remap_samples, RawSample};
/// let raw = vec![RawSample { label: -1.0, x: vec![(1, 1.0)] }, RawSample { label: 1.0, x: vec![(4, 2.0)] }];
/// let s = remap_samples(raw).unwrap();
/// assert_eq!((s.classes, s.features), (2, 4));
/// assert_eq!(s.samples[1].label, 1);
/// assert_eq!(s.samples[1].x, vec![(3, 2.0)]);
/// let many = (0..100).map(|k| RawSample { label: k as f64 / 7.0, x: vec![(16_000_000, 1.0)] });
/// assert!(remap_samples(many.collect()).unwrap_err().contains("100 classes"));
/// ```
pub fn remap_samples(raw: Vec<RawSample>) -> Result<Samples, String> {
    let mut labels: Vec<f64> = raw.iter().map(|s| s.label).collect();
    labels.sort_by(f64::total_cmp);
    labels.dedup();
    let min_index = raw.iter().flat_map(|s| s.x.iter().map(|p| p.0)).min();
    let shift = u32::from(min_index.is_some_and(|m| m >= 1));
    let features = raw
        .iter()
        .flat_map(|s| s.x.iter().map(|p| (p.0 - shift) as usize + 1))
        .max()
        .unwrap_or(0);
    let weights = labels.len().saturating_mul(features + 1);
    if weights > MAX_WEIGHTS {
        return Err(format!(
            "{} classes (distinct labels) of {features} features need {weights} weights, more \
             than the {MAX_WEIGHTS} allowed; is the label column a class?",
            labels.len()
        ));
    }
    let samples = raw
        .into_iter()
        .map(|s| Sample {
            label: labels
                .binary_search_by(|l| l.total_cmp(&s.label))
                .expect("every label is in the list") as u32,
            x: s.x.into_iter().map(|(i, v)| (i - shift, v)).collect(),
        })
        .collect();
    Ok(Samples {
        samples,
        features: features.max(1),
        classes: labels.len(),
    })
}

/// Loads a libsvm file (`label idx:val ...` lines; blank and `#` lines skipped) and
/// remaps it with [`remap_samples`].
///
/// Errors name the file and, for a bad line, the line. A file without samples is an
/// error.
pub fn load_libsvm(path: impl AsRef<Path>) -> Result<Samples, LoadError> {
    let path = path.as_ref();
    let raw = read_lines(path, 0, parse_libsvm_line)?;
    remap_samples(raw).map_err(|message| LoadError::file(path, message))
}
