//! Word2vec (skip-gram with negative sampling): what `word2vec-serial` and its strads-ap
//! twin `word2vec` share.
//!
//! * **Corpora.** [`load_sentences`] reads one sentence per line, tokens separated by
//!   whitespace (blank lines are skipped); [`synthetic_sentences`] draws sentences from a
//!   few seeded word clusters, so that words of one cluster co-occur. [`Corpus::build`]
//!   keeps the words that occur at least `--min-count` times (the vocabulary, most frequent
//!   first, as in Google's C tool) and turns every sentence into a [`Sentence`]: its index,
//!   its offset (in-vocabulary words before it) and its word ids. Sentences left without
//!   words are dropped.
//! * **Sampling.** [`noise_table`] draws negatives from the unigram distribution raised to
//!   0.75; [`keep_probabilities`] is Mikolov's sub-sampling of frequent words (the C tool's
//!   formula: a word of frequency `f` among `T` words is kept with probability
//!   `(sqrt(f / (s T)) + 1) (s T) / f`), applied to every sentence afresh in every epoch by
//!   [`subsample`].
//! * **Randomness.** [`SentenceRng`] is seeded from `(seed, epoch, sentence index)` alone,
//!   so both twins draw the same numbers whatever the order in which sentences run.
//! * **Learning rate.** [`learning_rate`] decays linearly from `lr` to `lr * 1e-4` over all
//!   epochs' words; a sentence's rate depends only on its global position.
//! * **Evaluation.** WordSim-353 Spearman ρ ([`load_wordsim`], [`wordsim_rho`]; pairs with
//!   an out-of-vocabulary word are skipped and counted) and analogy accuracy by 3CosAdd
//!   ([`load_analogies`], [`analogy_accuracy`]) on a seeded sample of the questions whose
//!   four words are in the vocabulary ([`analogy_sample`]).
//! * **Output.** [`save_vectors`] writes the word2vec text format.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::data::{mix64, read_text, rng_for, LoadError};

/// Largest analogy sample evaluated by default (`--analogy-sample`).
pub const ANALOGY_SAMPLE: usize = 2_000;

/// Stream of [`rng_for`] used for the analogy sample.
const ANALOGY_STREAM: u64 = 0xa9a1_0677;

// ---------------------------------------------------------------------------------------
// Corpora
// ---------------------------------------------------------------------------------------

/// Reads a corpus file: one sentence per line, tokens separated by whitespace. Blank lines
/// are skipped; a file without any token is an error naming the file.
pub fn load_sentences(path: &Path) -> Result<Vec<Vec<String>>, LoadError> {
    let text = read_text(path)?;
    let sentences: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .collect();
    if sentences.is_empty() {
        return Err(LoadError::file(path, "the corpus is empty (no words)"));
    }
    Ok(sentences)
}

/// A seeded synthetic corpus: `sentences` sentences of 8 to 20 words. Every sentence picks
/// one of `clusters` clusters of `words_per_cluster` words (`c3w7` is word 7 of cluster 3);
/// each of its words is a word of that cluster with probability 0.8, else one of 20
/// common words (`the0` ... `the19`) shared by all clusters. Words of one cluster thus
/// co-occur, and [`synthetic_wordsim`] scores them as similar.
pub fn synthetic_sentences(
    sentences: usize,
    clusters: usize,
    words_per_cluster: usize,
    seed: u64,
) -> Vec<Vec<String>> {
    let mut rng = rng_for(seed, 0x5e27);
    let (clusters, per) = (clusters.max(1), words_per_cluster.max(1));
    (0..sentences)
        .map(|_| {
            let c = rng.gen_range(0..clusters);
            let len = rng.gen_range(8..=20);
            (0..len)
                .map(|_| {
                    if rng.gen::<f64>() < 0.8 {
                        format!("c{c}w{}", rng.gen_range(0..per))
                    } else {
                        format!("the{}", rng.gen_range(0..20))
                    }
                })
                .collect()
        })
        .collect()
}

/// Similarity judgements for the synthetic corpus: pairs of cluster words, scored 10 when
/// both are of one cluster and 0 otherwise (for `clusters` clusters of
/// `words_per_cluster` words; `pairs` seeded pairs, half of them within a cluster).
/// The judgements are tied (two values), so perfectly separated clusters give ρ ≈ 0.87,
/// the largest value reachable.
pub fn synthetic_wordsim(
    clusters: usize,
    words_per_cluster: usize,
    pairs: usize,
    seed: u64,
) -> Vec<(String, String, f64)> {
    let mut rng = rng_for(seed, 0x5e28);
    let (clusters, per) = (clusters.max(1), words_per_cluster.max(1));
    (0..pairs)
        .map(|i| {
            let a = rng.gen_range(0..clusters);
            let b = if i % 2 == 0 {
                a
            } else {
                rng.gen_range(0..clusters)
            };
            let wa = format!("c{a}w{}", rng.gen_range(0..per));
            let wb = format!("c{b}w{}", rng.gen_range(0..per));
            (wa, wb, if a == b { 10.0 } else { 0.0 })
        })
        .collect()
}

/// One sentence, the training unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sentence {
    /// Index of the sentence in the corpus (seeds its random numbers).
    pub index: u32,
    /// In-vocabulary words of all sentences before this one (its position in an epoch).
    pub offset: u64,
    /// Word ids, in order.
    pub words: Vec<u32>,
}

/// The vocabulary and the sentences as word ids.
#[derive(Clone, Debug, PartialEq)]
pub struct Corpus {
    /// The words, most frequent first (ties by the word).
    pub vocab: Vec<String>,
    /// Occurrences of every word of `vocab`.
    pub counts: Vec<u64>,
    /// Sentences with at least one in-vocabulary word.
    pub sentences: Vec<Sentence>,
    /// In-vocabulary words of all sentences (the words of one epoch before sub-sampling).
    pub train_words: u64,
}

impl Corpus {
    /// Builds the vocabulary (words occurring at least `min_count` times) and the sentences
    /// of `raw`. `source` names the corpus in errors: there must be at least one word, and
    /// at least one word must reach `min_count`.
    pub fn build(raw: &[Vec<String>], min_count: u64, source: &Path) -> Result<Self, LoadError> {
        let mut freq: HashMap<&str, u64> = HashMap::new();
        for s in raw {
            for w in s {
                *freq.entry(w.as_str()).or_insert(0) += 1;
            }
        }
        if freq.is_empty() {
            return Err(LoadError::file(source, "the corpus is empty (no words)"));
        }
        let mut kept: Vec<(&str, u64)> = freq
            .iter()
            .filter(|&(_, &c)| c >= min_count)
            .map(|(&w, &c)| (w, c))
            .collect();
        if kept.is_empty() {
            return Err(LoadError::file(
                source,
                format!(
                    "the vocabulary is empty: none of the {} distinct words occurs at least \
                     {min_count} times (--min-count)",
                    freq.len()
                ),
            ));
        }
        kept.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let index: HashMap<&str, u32> = kept
            .iter()
            .enumerate()
            .map(|(i, &(w, _))| (w, i as u32))
            .collect();
        let mut sentences = Vec::new();
        let mut offset = 0u64;
        for (i, s) in raw.iter().enumerate() {
            let words: Vec<u32> = s
                .iter()
                .filter_map(|w| index.get(w.as_str()).copied())
                .collect();
            if !words.is_empty() {
                let n = words.len() as u64;
                sentences.push(Sentence {
                    index: i as u32,
                    offset,
                    words,
                });
                offset += n;
            }
        }
        Ok(Corpus {
            vocab: kept.iter().map(|&(w, _)| w.to_string()).collect(),
            counts: kept.iter().map(|&(_, c)| c).collect(),
            sentences,
            train_words: offset,
        })
    }

    /// The id of every vocabulary word.
    pub fn index(&self) -> HashMap<String, usize> {
        self.vocab
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Sampling and randomness
// ---------------------------------------------------------------------------------------

/// The random numbers of one sentence in one epoch: a SplitMix64 stream seeded from
/// `(seed, epoch, sentence index)` alone.
///
/// # Examples
/// ```
/// use strads_ap_examples::word2vec::SentenceRng;
/// let (mut a, mut b) = (SentenceRng::new(42, 1, 7), SentenceRng::new(42, 1, 7));
/// assert_eq!(a.below(1000), b.below(1000));
/// assert!((0.0..1.0).contains(&a.uniform()));
/// ```
#[derive(Clone, Debug)]
pub struct SentenceRng {
    state: u64,
}

impl SentenceRng {
    /// The stream of sentence `index` in `epoch`.
    pub fn new(seed: u64, epoch: usize, index: u32) -> Self {
        SentenceRng {
            state: mix64(mix64(mix64(seed ^ 0x2_77ec) ^ epoch as u64) ^ u64::from(index)),
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`).
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A uniform number in `[0, 1)`.
    #[inline]
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
}

/// An entry of the noise table (an alias table): a slot drawn uniformly yields its own
/// word or its alias, by a biased coin. Not [`strads_ap::Aggregate`], so the strads-ap
/// twin's `sync_for!` treats the table as read-only: it neither replicates nor merges it
/// (a plain captured `Vec` would be copied to the workers on every call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Noise {
    word: u32,
    alias: u32,
    /// The slot yields `word` when the coin's 32 high bits are below this.
    threshold: u32,
}

impl Noise {
    /// The word this slot yields for the random bits `coin`.
    #[inline]
    pub fn pick(self, coin: u64) -> u32 {
        if ((coin >> 32) as u32) < self.threshold {
            self.word
        } else {
            self.alias
        }
    }

    /// The probability that this slot yields `w`.
    pub fn share_of(&self, w: u32) -> f64 {
        let own = f64::from(self.threshold) / 4_294_967_296.0;
        let mut p = 0.0;
        if self.word == w {
            p += own;
        }
        if self.alias == w {
            p += 1.0 - own;
        }
        p
    }
}

/// The negative-sampling distribution: word ids in proportion to `count^0.75` (the C
/// tool's distribution), as an alias table with one slot per word (Vose's method). A
/// negative sample is `table[uniform slot].pick(random bits)`: exact, where the C tool's
/// table of 1e8 entries rounds every probability to 1e-8, and small enough to stay in
/// the cache (the C tool's table costs a memory miss per sample).
///
/// # Examples
/// ```
/// use strads_ap_examples::word2vec::noise_table;
/// let t = noise_table(&[16, 1]);
/// let zero: f64 = t.iter().map(|n| n.share_of(0)).sum::<f64>() / t.len() as f64;
/// assert!((zero - 8.0 / 9.0).abs() < 1e-9); // 16^0.75 = 8 against 1
/// ```
pub fn noise_table(counts: &[u64]) -> Vec<Noise> {
    let n = counts.len();
    let weights: Vec<f64> = counts.iter().map(|&c| (c as f64).powf(0.75)).collect();
    let total: f64 = weights.iter().sum();
    if n == 0 || total <= 0.0 {
        return Vec::new();
    }
    // Each slot's share of its own word, scaled so that 1 is a full slot.
    let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
    let mut table: Vec<Noise> = (0..n as u32)
        .map(|w| Noise {
            word: w,
            alias: w,
            threshold: u32::MAX,
        })
        .collect();
    let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&w| scaled[w] < 1.0);
    while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
        small.pop();
        table[s].alias = l as u32;
        table[s].threshold = (scaled[s] * 4_294_967_296.0).min(u32::MAX as f64) as u32;
        scaled[l] -= 1.0 - scaled[s];
        if scaled[l] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    // What remains is a full slot (up to rounding): it yields its own word, whatever the
    // coin (`alias` is the word itself).
    table
}

/// Mikolov's sub-sampling: the probability of keeping an occurrence of every word, for
/// threshold `sample` (0 keeps everything), as in the C tool:
/// `(sqrt(c / (sample T)) + 1) (sample T) / c` for a word of count `c` among `T` words.
///
/// # Examples
/// ```
/// use strads_ap_examples::word2vec::keep_probabilities;
/// let p = keep_probabilities(&[500, 5], 1e-3);
/// assert!(p[0] < 0.1 && p[1] > p[0]);
/// assert_eq!(keep_probabilities(&[500, 5], 0.0), vec![1.0, 1.0]);
/// ```
pub fn keep_probabilities(counts: &[u64], sample: f64) -> Vec<f32> {
    let total: u64 = counts.iter().sum();
    counts
        .iter()
        .map(|&c| {
            if sample <= 0.0 {
                1.0
            } else {
                let st = sample * total as f64;
                (((c as f64 / st).sqrt() + 1.0) * st / c as f64) as f32
            }
        })
        .collect()
}

/// The words of a sentence kept by sub-sampling (one uniform of `rng` per word).
#[inline]
pub fn subsample(words: &[u32], keep: &[f32], rng: &mut SentenceRng) -> Vec<u32> {
    words
        .iter()
        .copied()
        .filter(|&w| rng.uniform() < keep[w as usize])
        .collect()
}

/// The learning rate of a sentence at `offset` in `epoch` (1-based) of `epochs` over
/// `train_words` words per epoch: linear from `lr` down to `lr * 1e-4`.
///
/// # Examples
/// ```
/// use strads_ap_examples::word2vec::learning_rate;
/// assert_eq!(learning_rate(0.025, 1, 0, 100, 2), 0.025);
/// assert!((learning_rate(0.025, 2, 0, 100, 2) - 0.0125).abs() < 1e-3);
/// assert!(learning_rate(0.025, 2, 100, 100, 2) >= 0.025 * 1e-4);
/// ```
#[inline]
pub fn learning_rate(lr: f32, epoch: usize, offset: u64, train_words: u64, epochs: usize) -> f32 {
    let done = (epoch.saturating_sub(1) as u64 * train_words + offset) as f64;
    let all = (epochs as u64 * train_words + 1) as f64;
    let alpha = lr as f64 * (1.0 - done / all);
    alpha.max(lr as f64 * 1e-4) as f32
}

/// The logistic function.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The dot product of two rows (the shorter one's length).
///
/// Sixteen partial sums, added in a fixed order at the end: the compiler turns the loop
/// into SIMD (a single running sum would be one long dependency chain), and the result
/// is the same on every run and every thread.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            acc[j] += x[j] * y[j];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a * x`.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// The initial input vector of `word`: uniform in `[-0.5, 0.5) / dim` per component,
/// from `(seed, word)` alone (the output vectors start at zero).
pub fn init_input_row(seed: u64, word: usize, dim: usize) -> Vec<f32> {
    let mut rng = SentenceRng::new(seed ^ 0x1_9e7, 0, word as u32);
    (0..dim)
        .map(|_| (rng.uniform() - 0.5) / dim as f32)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------

/// Reads WordSim-353 (`word1<TAB>word2<TAB>score` lines; `#` lines and blank lines are
/// skipped; words are lowercased). A bad line is an error naming `file:line`.
pub fn load_wordsim(path: &Path) -> Result<Vec<(String, String, f64)>, LoadError> {
    let text = read_text(path)?;
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            return Err(LoadError::at(
                path,
                i + 1,
                format!("expected `word1 word2 score`, found {} fields", f.len()),
            ));
        }
        let score = f[2].parse::<f64>().ok().filter(|x| x.is_finite());
        let score = score.ok_or_else(|| {
            LoadError::at(
                path,
                i + 1,
                format!("score `{}` is not a finite number", f[2]),
            )
        })?;
        pairs.push((f[0].to_lowercase(), f[1].to_lowercase(), score));
    }
    if pairs.is_empty() {
        return Err(LoadError::file(path, "no word pairs"));
    }
    Ok(pairs)
}

/// Reads analogy questions (`a b c d` lines, `: section` lines skipped; lowercased). A line
/// without four words is an error naming `file:line`.
pub fn load_analogies(path: &Path) -> Result<Vec<[String; 4]>, LoadError> {
    let text = read_text(path)?;
    let mut questions = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let f: Vec<String> = line.split_whitespace().map(str::to_lowercase).collect();
        match <[String; 4]>::try_from(f) {
            Ok(q) => questions.push(q),
            Err(f) => {
                return Err(LoadError::at(
                    path,
                    i + 1,
                    format!("expected four words, found {}", f.len()),
                ))
            }
        }
    }
    Ok(questions)
}

/// Ranks of `xs` (1-based; ties get the mean of their ranks).
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            r[k] = mean_rank;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of two samples (Pearson's on tie-averaged ranks; 0 when
/// either is constant or there are fewer than two points).
///
/// # Examples
/// ```
/// use strads_ap_examples::word2vec::spearman;
/// assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 90.0]) - 1.0).abs() < 1e-12);
/// assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
/// ```
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    if x.len() < 2 || x.len() != y.len() {
        return 0.0;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        0.0
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

/// The cosine similarity of two rows (0 if either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (ab, aa, bb) = (dot(a, b) as f64, dot(a, a) as f64, dot(b, b) as f64);
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        ab / (aa * bb).sqrt()
    }
}

/// The WordSim score: Spearman ρ between the human scores and the cosine similarities of
/// the pairs whose two words are in the vocabulary, and the number of pairs skipped.
pub fn wordsim_rho(
    pairs: &[(String, String, f64)],
    index: &HashMap<String, usize>,
    vectors: &[Vec<f32>],
) -> (f64, usize) {
    let (mut human, mut model, mut skipped) = (Vec::new(), Vec::new(), 0);
    for (a, b, score) in pairs {
        match (index.get(a), index.get(b)) {
            (Some(&i), Some(&j)) => {
                human.push(*score);
                model.push(cosine(&vectors[i], &vectors[j]));
            }
            _ => skipped += 1,
        }
    }
    // A vector with a NaN (a diverged model) has no rank: say so rather than rank it last.
    if model.iter().any(|x| x.is_nan()) {
        return (f64::NAN, skipped);
    }
    (spearman(&human, &model), skipped)
}

/// The questions whose four words are in the vocabulary, as word ids: all of them when
/// there are at most `max`, else a seeded sample of `max` (shuffled with stream
/// `0xa9a10677` of `seed`, then the first `max` taken).
pub fn analogy_sample(
    questions: &[[String; 4]],
    index: &HashMap<String, usize>,
    max: usize,
    seed: u64,
) -> Vec<[usize; 4]> {
    let mut known: Vec<[usize; 4]> = questions
        .iter()
        .filter_map(|q| {
            Some([
                *index.get(&q[0])?,
                *index.get(&q[1])?,
                *index.get(&q[2])?,
                *index.get(&q[3])?,
            ])
        })
        .collect();
    if known.len() > max {
        known.shuffle(&mut rng_for(seed, ANALOGY_STREAM));
        known.truncate(max);
    }
    known
}

/// Analogy accuracy by 3CosAdd: for `a : b :: c : d`, the answer is the word (other than
/// `a`, `b` and `c`) whose unit vector has the largest dot product with
/// `b̂ - â + ĉ`. Returns the fraction answered `d` (0 without questions).
pub fn analogy_accuracy(questions: &[[usize; 4]], vectors: &[Vec<f32>]) -> f64 {
    if questions.is_empty() {
        return 0.0;
    }
    let unit: Vec<Vec<f32>> = vectors
        .iter()
        .map(|v| {
            let n = dot(v, v).sqrt();
            if n > 0.0 {
                v.iter().map(|x| x / n).collect()
            } else {
                v.clone()
            }
        })
        .collect();
    let dim = vectors.first().map_or(0, Vec::len);
    let mut right = 0usize;
    let mut target = vec![0.0f32; dim];
    for &[a, b, c, d] in questions {
        for (k, t) in target.iter_mut().enumerate() {
            *t = unit[b][k] - unit[a][k] + unit[c][k];
        }
        let mut best = (f32::NEG_INFINITY, usize::MAX);
        for (w, u) in unit.iter().enumerate() {
            if w == a || w == b || w == c {
                continue;
            }
            let s = dot(u, &target);
            if s > best.0 {
                best = (s, w);
            }
        }
        if best.1 == d {
            right += 1;
        }
    }
    right as f64 / questions.len() as f64
}

/// Writes vectors in the word2vec text format: `V D`, then `word v1 ... vD` per word.
pub fn save_vectors(path: &Path, vocab: &[String], vectors: &[Vec<f32>]) -> Result<(), LoadError> {
    let err = |e: std::io::Error| LoadError::file(path, e.to_string());
    let file = std::fs::File::create(path).map_err(err)?;
    let mut out = std::io::BufWriter::new(file);
    let dim = vectors.first().map_or(0, Vec::len);
    writeln!(out, "{} {dim}", vocab.len()).map_err(err)?;
    for (w, v) in vocab.iter().zip(vectors) {
        write!(out, "{w}").map_err(err)?;
        for x in v {
            write!(out, " {x}").map_err(err)?;
        }
        writeln!(out).map_err(err)?;
    }
    out.flush().map_err(err)
}

// ---------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------

/// The result line of word2vec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Word2vecResult {
    /// Always `"word2vec"`.
    pub app: String,
    /// `serial` or `strads-ap`.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Processes of the job (1 for the serial twin).
    pub ranks: usize,
    /// Worker threads per process (1 for the serial twin).
    pub threads: usize,
    /// Epochs run.
    pub epochs: usize,
    /// Mean seconds of one epoch's training loop (evaluation and the strads-ap twin's
    /// one-off setup excluded).
    pub secs_per_epoch: f64,
    /// In-vocabulary words per epoch (before sub-sampling) over `secs_per_epoch`, as the C
    /// tool counts them.
    pub words_per_sec: f64,
    /// WordSim Spearman ρ after the last epoch.
    pub wordsim_rho: f64,
    /// Word pairs skipped because a word is out of the vocabulary.
    pub wordsim_skipped: usize,
    /// Analogy accuracy (3CosAdd) on the sample after the last epoch (0 without
    /// questions).
    pub analogy_acc: f64,
    /// Analogy questions evaluated.
    pub analogy_questions: usize,
    /// Seconds of one-off set-up: reconnaissance and planning (0 for the serial twin; see
    /// [`EpochClock`](crate::report::EpochClock)).
    pub setup_secs: f64,
}

// ---------------------------------------------------------------------------------------
// The twins' common setup
// ---------------------------------------------------------------------------------------

/// Default WordSim-353 file, used when present.
pub const DEFAULT_WORDSIM: &str = "../shared/data/word2vec-eval/wordsim353.tsv";

/// Default analogy questions, used when present.
pub const DEFAULT_ANALOGIES: &str = "../shared/data/word2vec-eval/questions-words.txt";

/// Clusters of the synthetic corpus.
pub const SYNTHETIC_CLUSTERS: usize = 40;

/// Words per cluster of the synthetic corpus.
pub const SYNTHETIC_CLUSTER_WORDS: usize = 50;

/// What both twins set up before training: the corpus, the samplers and the evaluation.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The corpus.
    pub corpus: Corpus,
    /// The negative-sampling table ([`noise_table`]).
    pub noise: Vec<Noise>,
    /// Sub-sampling keep probability of every word.
    pub keep: Vec<f32>,
    /// The evaluation.
    pub eval: Evaluation,
}

/// The evaluation sets, restricted to the vocabulary.
#[derive(Clone, Debug)]
pub struct Evaluation {
    index: HashMap<String, usize>,
    pairs: Vec<(String, String, f64)>,
    questions: Vec<[usize; 4]>,
}

/// The scores of one set of vectors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scores {
    /// WordSim Spearman ρ.
    pub rho: f64,
    /// Pairs skipped (a word out of the vocabulary).
    pub skipped: usize,
    /// Analogy accuracy (0 without questions).
    pub analogy: f64,
    /// Analogy questions evaluated.
    pub questions: usize,
}

impl Evaluation {
    /// WordSim ρ only (cheap: every epoch).
    pub fn rho(&self, vectors: &[Vec<f32>]) -> f64 {
        wordsim_rho(&self.pairs, &self.index, vectors).0
    }

    /// Every score (the analogies cost a pass over the vocabulary per question).
    pub fn scores(&self, vectors: &[Vec<f32>]) -> Scores {
        let (rho, skipped) = wordsim_rho(&self.pairs, &self.index, vectors);
        Scores {
            rho,
            skipped,
            analogy: analogy_accuracy(&self.questions, vectors),
            questions: self.questions.len(),
        }
    }

    /// Evaluated analogy questions.
    pub fn questions(&self) -> usize {
        self.questions.len()
    }
}

/// An evaluation file: the one given (which must exist) or the default when present.
fn eval_path(given: Option<&Path>, default: &str) -> Option<std::path::PathBuf> {
    match given {
        Some(p) => Some(p.to_path_buf()),
        None => {
            let p = Path::new(default);
            p.is_file().then(|| p.to_path_buf())
        }
    }
}

impl Setup {
    /// Loads (or generates) the corpus and the evaluation sets of `args`.
    pub fn new(args: &crate::cli::Word2vecArgs) -> Result<Self, LoadError> {
        let seed = args.common.seed;
        let synthetic = args.common.data.is_none();
        let (mut raw, source) = match &args.common.data {
            Some(path) => (load_sentences(path)?, path.clone()),
            None => (
                synthetic_sentences(
                    args.sentences,
                    SYNTHETIC_CLUSTERS,
                    SYNTHETIC_CLUSTER_WORDS,
                    seed,
                ),
                "<synthetic corpus>".into(),
            ),
        };
        if let Some(n) = args.max_sentences {
            raw.truncate(n);
        }
        let corpus = Corpus::build(&raw, args.min_count as u64, &source)?;
        let noise = noise_table(&corpus.counts);
        let keep = keep_probabilities(&corpus.counts, args.sample);
        let index = corpus.index();
        let pairs = if synthetic && args.wordsim.is_none() {
            synthetic_wordsim(SYNTHETIC_CLUSTERS, SYNTHETIC_CLUSTER_WORDS, 400, seed)
        } else {
            match eval_path(args.wordsim.as_deref(), DEFAULT_WORDSIM) {
                Some(p) => load_wordsim(&p)?,
                None => {
                    eprintln!("word2vec: no WordSim file ({DEFAULT_WORDSIM} not found): rho is 0");
                    Vec::new()
                }
            }
        };
        let questions = if args.analogy_sample == 0 || (synthetic && args.analogies.is_none()) {
            Vec::new()
        } else {
            match eval_path(args.analogies.as_deref(), DEFAULT_ANALOGIES) {
                Some(p) => analogy_sample(&load_analogies(&p)?, &index, args.analogy_sample, seed),
                None => Vec::new(),
            }
        };
        Ok(Setup {
            corpus,
            noise,
            keep,
            eval: Evaluation {
                index,
                pairs,
                questions,
            },
        })
    }
}
