//! LDA topic modelling by collapsed Gibbs sampling: what `lda-serial` and its strads-ap
//! twin `lda` share.
//!
//! * **Corpora.** [`load_corpus`] reads LDA-C files (`n id:count id:count ...` per
//!   document, with the vocabulary in a sibling `.tokens` file) and `docid<TAB>tokens...`
//!   files (building the vocabulary); [`synthetic_corpus`] draws documents from a known,
//!   seeded topic model. [`flatten`] turns a corpus into tokens, the loop's tasks.
//! * **The sampler state.** One topic per token (`z`), a [`TopicCounts`] row per document
//!   and per word, and the [`TopicTotals`] (tokens per topic, plus the cached smoothing
//!   mass of SparseLDA). The strads-ap twin declares the totals relaxed: every token
//!   writes them, and exact agreement between workers would serialise the loop.
//! * **The sampler.** [`sample_topic`] is SparseLDA (Yao, Mimno and McCallum, KDD 2009):
//!   the conditional of a token's topic splits into a smoothing bucket `s`, a document
//!   bucket `r` and a word bucket `q`; `r` and `q` are sums over the document's and the
//!   word's non-zero topics only, and `s` is cached in the totals, so a token costs
//!   `O(K_d + K_w)` rather than `O(K)`.
//! * **Randomness.** [`token_uniform`] derives the one uniform a token needs from
//!   `(seed, epoch, token index)` alone, so both twins draw the same numbers whatever the
//!   order in which the tokens run.
//! * **Metrics.** [`log_likelihood`] (the collapsed joint log-likelihood `log p(w, z)`, see
//!   there for the formula), its per-row terms for data-parallel evaluation, and the
//!   relaxed table's error ([`recount_totals`], [`l1_distance`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::Rng;
use serde::{Deserialize, Serialize};
use strads_ap::Aggregate;

use crate::data::{gaussian, mix64, read_text, rng_for, LoadError};

// ---------------------------------------------------------------------------------------
// Corpora
// ---------------------------------------------------------------------------------------

/// A corpus: documents as sequences of word ids, and the vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub struct Corpus {
    /// Word ids of each document, in order (ids below `vocab.len()`).
    pub docs: Vec<Vec<u32>>,
    /// The words; word id `i` is `vocab[i]`.
    pub vocab: Vec<String>,
}

impl Corpus {
    /// Number of tokens (word occurrences) in all documents.
    pub fn tokens(&self) -> usize {
        self.docs.iter().map(Vec::len).sum()
    }
}

/// One token, the task of the sampling loop: its document and its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// Document id.
    pub doc: u32,
    /// Word id.
    pub word: u32,
}

/// The tokens of a corpus, document after document, each document's in order.
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::{flatten, Corpus, Token};
/// let corpus = Corpus { docs: vec![vec![1, 0], vec![], vec![1]], vocab: vec!["a".into(), "b".into()] };
/// let t = flatten(&corpus);
/// assert_eq!(t, vec![Token { doc: 0, word: 1 }, Token { doc: 0, word: 0 }, Token { doc: 2, word: 1 }]);
/// ```
pub fn flatten(corpus: &Corpus) -> Vec<Token> {
    let mut tokens = Vec::with_capacity(corpus.tokens());
    for (d, words) in corpus.docs.iter().enumerate() {
        tokens.extend(words.iter().map(|&word| Token {
            doc: d as u32,
            word,
        }));
    }
    tokens
}

/// Most tokens a corpus may have: `async_for!` runs at most 2^32 indices per call.
pub const MAX_TOKENS: u64 = u32::MAX as u64;

/// Refuses a corpus without words or tokens, naming the file it came from.
fn check_corpus(path: &Path, corpus: Corpus) -> Result<Corpus, LoadError> {
    if corpus.docs.is_empty() {
        return Err(LoadError::file(path, "the corpus has no documents"));
    }
    if corpus.tokens() as u64 > MAX_TOKENS {
        return Err(LoadError::file(
            path,
            format!("the corpus has more than {MAX_TOKENS} tokens"),
        ));
    }
    if corpus.tokens() == 0 {
        return Err(LoadError::file(
            path,
            format!(
                "the corpus has no tokens ({} documents, all empty)",
                corpus.docs.len()
            ),
        ));
    }
    if corpus.vocab.is_empty() {
        return Err(LoadError::file(path, "the vocabulary is empty"));
    }
    Ok(corpus)
}

/// Largest count of one term in one document of an LDA-C file: a word repeated more than a
/// million times in a document is a corrupt count, and each occurrence becomes a token.
pub const MAX_TERM_COUNT: u32 = 1_000_000;

/// Largest term id of an LDA-C file without a vocabulary file, `2^24 - 1`: the ids then
/// make the vocabulary `0..=max id`, and each word has a row of topic counts. With a
/// vocabulary file the ids are bounded by its length instead.
pub const MAX_TERM_ID: u32 = (1 << 24) - 1;

/// Parses one LDA-C line, `n id:count id:count ...`: the `(id, count)` pairs, of which
/// there must be exactly `n`. A count is at most [`MAX_TERM_COUNT`].
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::parse_ldac_line;
/// assert_eq!(parse_ldac_line("2 0:3 7:1").unwrap(), vec![(0, 3), (7, 1)]);
/// assert!(parse_ldac_line("3 0:3 7:1").unwrap_err().contains("says 3 distinct terms but has 2"));
/// assert!(parse_ldac_line("1 0=3").unwrap_err().contains("id:count"));
/// assert!(parse_ldac_line("1 0:4000000000").unwrap_err().contains("above 1000000"));
/// ```
pub fn parse_ldac_line(line: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut fields = line.split_whitespace();
    let n = fields.next().ok_or("the line is empty")?;
    let n: usize = n
        .parse()
        .map_err(|_| format!("the term count `{n}` is not a non-negative integer"))?;
    let pairs = fields
        .map(|field| {
            let (id, count) = field
                .split_once(':')
                .ok_or_else(|| format!("term `{field}` is not of the form id:count"))?;
            let id = id
                .parse::<u64>()
                .map_err(|_| format!("term id `{id}` is not a non-negative integer"))?;
            let id =
                u32::try_from(id).map_err(|_| format!("term id {id} is above {}", u32::MAX))?;
            let count = count.parse::<u64>().map_err(|_| {
                format!("count `{count}` of term {id} is not a non-negative integer")
            })?;
            match u32::try_from(count) {
                Ok(count) if count <= MAX_TERM_COUNT => Ok((id, count)),
                _ => Err(format!(
                    "count `{count}` of term {id} is above {MAX_TERM_COUNT}, the most one \
                     document may hold of a term"
                )),
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    if pairs.len() != n {
        return Err(format!(
            "the line says {n} distinct terms but has {} id:count pairs",
            pairs.len()
        ));
    }
    Ok(pairs)
}

/// The vocabulary file of an LDA-C file: the same path with the extension `.tokens`
/// (`reuters.ldac` → `reuters.tokens`).
pub fn vocabulary_path(ldac: &Path) -> PathBuf {
    ldac.with_extension("tokens")
}

/// Reads a vocabulary file: one word per line, line `i` (0-based) being word id `i`.
/// An empty file is an error.
pub fn load_vocabulary(path: &Path) -> Result<Vec<String>, LoadError> {
    let text = read_text(path)?;
    let vocab: Vec<String> = text.lines().map(|w| w.trim().to_string()).collect();
    if vocab.iter().all(String::is_empty) {
        return Err(LoadError::file(path, "the vocabulary is empty"));
    }
    Ok(vocab)
}

/// Loads an LDA-C corpus: one document per line, `n id:count id:count ...` with `n` the
/// number of pairs (a line whose `n` does not match is an error naming `file:line`); blank
/// lines are skipped. The vocabulary comes from [`vocabulary_path`] when that file exists
/// (every id must then be below its length), else it is the ids `0..=max id` themselves
/// (every id at most [`MAX_TERM_ID`]). Counts are at most [`MAX_TERM_COUNT`].
/// A word with count `c` in a document becomes `c` consecutive tokens.
pub fn load_ldac(path: &Path) -> Result<Corpus, LoadError> {
    let text = read_text(path)?;
    parse_ldac(path, &text)
}

/// [`load_ldac`] of the file `path` whose text is `text`.
fn parse_ldac(path: &Path, text: &str) -> Result<Corpus, LoadError> {
    let vocab_path = vocabulary_path(path);
    let vocab = if vocab_path.is_file() {
        Some(load_vocabulary(&vocab_path)?)
    } else {
        None
    };
    let mut docs = Vec::new();
    let mut max_id: Option<u32> = None;
    let mut tokens = 0u64;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let pairs = parse_ldac_line(line).map_err(|m| LoadError::at(path, i + 1, m))?;
        let mut words = Vec::new();
        for (id, count) in pairs {
            if vocab.is_none() && id > MAX_TERM_ID {
                return Err(LoadError::at(
                    path,
                    i + 1,
                    format!(
                        "term id {id} is above {MAX_TERM_ID}, the largest accepted without a \
                         vocabulary file (none at {})",
                        vocab_path.display()
                    ),
                ));
            }
            if let Some(v) = &vocab {
                if id as usize >= v.len() {
                    return Err(LoadError::at(
                        path,
                        i + 1,
                        format!(
                            "term id {id} is outside the vocabulary ({} words in {})",
                            v.len(),
                            vocab_path.display()
                        ),
                    ));
                }
            }
            max_id = max_id.max(Some(id));
            tokens += u64::from(count);
            if tokens > MAX_TOKENS {
                return Err(LoadError::at(
                    path,
                    i + 1,
                    format!("the corpus has more than {MAX_TOKENS} tokens"),
                ));
            }
            words.extend(std::iter::repeat_n(id, count as usize));
        }
        docs.push(words);
    }
    if docs.is_empty() {
        return Err(LoadError::file(path, "the file has no documents"));
    }
    let vocab = vocab.unwrap_or_else(|| match max_id {
        Some(m) => (0..=m).map(|i| i.to_string()).collect(),
        None => Vec::new(),
    });
    check_corpus(path, Corpus { docs, vocab })
}

/// Loads a `docid<TAB>tokens...` file: one document per line, its tokens separated by
/// whitespace; the vocabulary is built in order of first appearance. Blank lines are
/// skipped; a line without a tab is an error naming `file:line`.
pub fn load_documents_tsv(path: &Path) -> Result<Corpus, LoadError> {
    let text = read_text(path)?;
    parse_documents_tsv(path, &text)
}

/// [`load_documents_tsv`] of the file `path` whose text is `text`.
fn parse_documents_tsv(path: &Path, text: &str) -> Result<Corpus, LoadError> {
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut vocab: Vec<String> = Vec::new();
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (_, body) = line.split_once('\t').ok_or_else(|| {
            LoadError::at(
                path,
                i + 1,
                "expected `docid<TAB>tokens...` (no tab on the line)",
            )
        })?;
        let words = body
            .split_whitespace()
            .map(|w| {
                *ids.entry(w).or_insert_with(|| {
                    vocab.push(w.to_string());
                    (vocab.len() - 1) as u32
                })
            })
            .collect();
        docs.push(words);
    }
    if docs.is_empty() {
        return Err(LoadError::file(path, "the file has no documents"));
    }
    check_corpus(path, Corpus { docs, vocab })
}

/// Loads a corpus file, [`load_documents_tsv`] when the first non-blank line has a tab,
/// else [`load_ldac`] (also for an `.ldac` file with tabs).
pub fn load_corpus(path: impl AsRef<Path>) -> Result<Corpus, LoadError> {
    let path = path.as_ref();
    let text = read_text(path)?;
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let ldac = path.extension().is_some_and(|e| e == "ldac");
    if !ldac && first.contains('\t') {
        parse_documents_tsv(path, &text)
    } else {
        parse_ldac(path, &text)
    }
}

// ---------------------------------------------------------------------------------------
// Synthetic corpus
// ---------------------------------------------------------------------------------------

/// Dirichlet concentration of the topics' word distributions in [`synthetic_corpus`].
pub const SYNTHETIC_WORD_CONCENTRATION: f64 = 0.05;

/// Dirichlet concentration of the documents' topic mixtures in [`synthetic_corpus`].
pub const SYNTHETIC_TOPIC_CONCENTRATION: f64 = 0.1;

/// A Gamma(shape, 1) deviate (Marsaglia and Tsang; shapes below 1 by the boost
/// `Gamma(a) = Gamma(a + 1) · U^(1/a)`).
fn gamma(shape: f64, rng: &mut impl Rng) -> f64 {
    if shape < 1.0 {
        let u: f64 = rng.gen();
        return gamma(shape + 1.0, rng) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = gaussian(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u: f64 = rng.gen();
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// The cumulative distribution of a symmetric Dirichlet(`concentration`) draw over `n`
/// outcomes (uniform in the unlikely case that every component underflows).
fn dirichlet_cdf(n: usize, concentration: f64, rng: &mut impl Rng) -> Vec<f64> {
    let mut cdf: Vec<f64> = (0..n).map(|_| gamma(concentration, rng)).collect();
    let total: f64 = cdf.iter().sum();
    let mut acc = 0.0;
    for (i, p) in cdf.iter_mut().enumerate() {
        acc += if total > 0.0 {
            *p / total
        } else {
            1.0 / n as f64
        };
        *p = if i + 1 == n { 1.0 } else { acc };
    }
    cdf
}

/// Draws an outcome from a cumulative distribution.
fn draw(cdf: &[f64], rng: &mut impl Rng) -> usize {
    let u: f64 = rng.gen();
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
}

/// A seeded synthetic corpus drawn from a known LDA model with `topics` topics.
///
/// Each topic's word distribution is a Dirichlet([`SYNTHETIC_WORD_CONCENTRATION`]) draw
/// over the `vocab` words, each document's topic mixture a
/// Dirichlet([`SYNTHETIC_TOPIC_CONCENTRATION`]) draw; a document has between `doc_len / 2`
/// and `3 · doc_len / 2` tokens (uniformly), each drawn by picking a topic from the
/// document's mixture and a word from the topic. Words are named `w0`, `w1`, ... The same
/// arguments always give the same corpus.
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::synthetic_corpus;
/// let c = synthetic_corpus(20, 100, 50, 5, 1);
/// assert_eq!(c, synthetic_corpus(20, 100, 50, 5, 1));
/// assert_eq!((c.docs.len(), c.vocab.len()), (20, 100));
/// assert!(c.docs.iter().all(|d| (25..=75).contains(&d.len()) && d.iter().all(|&w| w < 100)));
/// ```
pub fn synthetic_corpus(
    docs: usize,
    vocab: usize,
    doc_len: usize,
    topics: usize,
    seed: u64,
) -> Corpus {
    let (vocab, topics, doc_len) = (vocab.max(1), topics.max(1), doc_len.max(1));
    let mut rng = rng_for(seed, 4);
    let phi: Vec<Vec<f64>> = (0..topics)
        .map(|_| dirichlet_cdf(vocab, SYNTHETIC_WORD_CONCENTRATION, &mut rng))
        .collect();
    let docs = (0..docs)
        .map(|_| {
            let theta = dirichlet_cdf(topics, SYNTHETIC_TOPIC_CONCENTRATION, &mut rng);
            let len = doc_len / 2 + rng.gen_range(0..=doc_len);
            (0..len)
                .map(|_| {
                    let t = draw(&theta, &mut rng);
                    draw(&phi[t], &mut rng) as u32
                })
                .collect()
        })
        .collect();
    Corpus {
        docs,
        vocab: (0..vocab).map(|i| format!("w{i}")).collect(),
    }
}

// ---------------------------------------------------------------------------------------
// Sampler state
// ---------------------------------------------------------------------------------------

/// The model's hyper-parameters and the constants derived from them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prior {
    /// Symmetric Dirichlet prior of the documents' topic mixtures.
    pub alpha: f64,
    /// Symmetric Dirichlet prior of the topics' word distributions.
    pub beta: f64,
    /// Number of topics `K`.
    pub topics: usize,
    /// Number of words `V`.
    pub vocab: usize,
    /// `α · β`.
    pub alpha_beta: f64,
    /// `β · V`.
    pub beta_v: f64,
    /// `ln Γ(α)`, `ln Γ(β)`, `ln Γ(K α)`, `ln Γ(V β)`.
    pub ln_gammas: [f64; 4],
}

impl Prior {
    /// The prior `(α, β)` for `topics` topics over `vocab` words.
    pub fn new(alpha: f64, beta: f64, topics: usize, vocab: usize) -> Self {
        let (k, v) = (topics as f64, vocab as f64);
        Prior {
            alpha,
            beta,
            topics,
            vocab,
            alpha_beta: alpha * beta,
            beta_v: beta * v,
            ln_gammas: [
                ln_gamma(alpha),
                ln_gamma(beta),
                ln_gamma(k * alpha),
                ln_gamma(v * beta),
            ],
        }
    }
}

/// Topic counts of one document or one word: dense counts (`counts[t]`) and the list of
/// topics whose count is non-zero (in no particular order), which the sparse sampler
/// iterates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicCounts {
    /// Tokens per topic.
    pub counts: Vec<u32>,
    /// The topics `t` with `counts[t] > 0`.
    pub nonzero: Vec<u32>,
}

impl TopicCounts {
    /// All-zero counts over `topics` topics.
    pub fn new(topics: usize) -> Self {
        TopicCounts {
            counts: vec![0; topics],
            nonzero: Vec::new(),
        }
    }

    /// Counts one more token of topic `t`.
    #[inline]
    pub fn add(&mut self, t: usize) {
        let c = &mut self.counts[t];
        if *c == 0 {
            self.nonzero.push(t as u32);
        }
        *c += 1;
    }

    /// Counts one token of topic `t` less.
    ///
    /// # Panics
    /// If the count of `t` is already 0 (the state is inconsistent).
    #[inline]
    pub fn remove(&mut self, t: usize) {
        let c = &mut self.counts[t];
        *c = c
            .checked_sub(1)
            .expect("LDA state: removing a token from a topic with no tokens");
        if *c == 0 {
            if let Some(p) = self.nonzero.iter().position(|&x| x as usize == t) {
                self.nonzero.swap_remove(p);
            }
        }
    }

    /// Number of tokens counted.
    pub fn total(&self) -> u64 {
        self.nonzero
            .iter()
            .map(|&t| u64::from(self.counts[t as usize]))
            .sum()
    }
}

/// Tokens per topic over the whole corpus, and SparseLDA's smoothing mass
/// `s = Σ_t α β / (β V + n_t)`, kept up to date as counts change.
///
/// This is the table every token writes. The strads-ap twin declares it relaxed
/// (`DVector::relaxed(Relaxed::Sum)`): workers update replicas and their deltas are summed,
/// hence the [`Aggregate`] implementation. The counts then stay exact once merged (integer
/// deltas add up), while `smoothing`, updated from each worker's replica, drifts a little
/// from its definition; [`TopicTotals::refresh_smoothing`] recomputes it (both twins do
/// before every epoch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopicTotals {
    /// Tokens per topic.
    pub counts: Vec<i64>,
    /// The smoothing bucket's mass, `Σ_t α β / (β V + n_t)`.
    pub smoothing: f64,
}

impl TopicTotals {
    /// Totals from per-topic counts, with the smoothing mass computed.
    pub fn new(counts: Vec<i64>, prior: &Prior) -> Self {
        let mut t = TopicTotals {
            counts,
            smoothing: 0.0,
        };
        t.refresh_smoothing(prior);
        t
    }

    /// The exact smoothing mass of the current counts.
    pub fn exact_smoothing(&self, prior: &Prior) -> f64 {
        self.counts
            .iter()
            .map(|&n| prior.alpha_beta / (prior.beta_v + n as f64))
            .sum()
    }

    /// Recomputes the smoothing mass from the counts.
    pub fn refresh_smoothing(&mut self, prior: &Prior) {
        self.smoothing = self.exact_smoothing(prior);
    }

    /// Changes the count of topic `t` by `delta`, updating the smoothing mass.
    #[inline]
    fn change(&mut self, t: usize, delta: i64, prior: &Prior) {
        s_error::record_change(t, delta);
        let n = &mut self.counts[t];
        let before = prior.alpha_beta / (prior.beta_v + *n as f64);
        *n += delta;
        self.smoothing += prior.alpha_beta / (prior.beta_v + *n as f64) - before;
    }

    /// Counts one more token of topic `t`.
    #[inline]
    pub fn add(&mut self, t: usize, prior: &Prior) {
        self.change(t, 1, prior);
    }

    /// Counts one token of topic `t` less.
    #[inline]
    pub fn remove(&mut self, t: usize, prior: &Prior) {
        self.change(t, -1, prior);
    }
}

impl Aggregate for TopicTotals {
    fn add_delta(&mut self, delta: &Self) {
        self.counts.add_delta(&delta.counts);
        self.smoothing += delta.smoothing;
    }

    fn sub_delta(&mut self, delta: &Self) {
        self.counts.sub_delta(&delta.counts);
        self.smoothing -= delta.smoothing;
    }

    fn scale(&mut self, factor: f64) {
        self.counts.scale(factor);
        self.smoothing *= factor;
    }
}

/// The count tables of a topic assignment.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts {
    /// One row per document.
    pub doc_topic: Vec<TopicCounts>,
    /// One row per word.
    pub word_topic: Vec<TopicCounts>,
    /// Tokens per topic.
    pub totals: TopicTotals,
}

/// The count tables of assignment `z` (`z[k]` is the topic of `tokens[k]`) over `docs`
/// documents; the prior gives the numbers of topics and words.
///
/// # Panics
/// If a token's document, word or topic is out of range.
pub fn count_topics(tokens: &[Token], z: &[u32], docs: usize, prior: &Prior) -> Counts {
    let mut doc_topic = vec![TopicCounts::new(prior.topics); docs];
    let mut word_topic = vec![TopicCounts::new(prior.topics); prior.vocab];
    let mut totals = vec![0i64; prior.topics];
    for (token, &t) in tokens.iter().zip(z) {
        let t = t as usize;
        doc_topic[token.doc as usize].add(t);
        word_topic[token.word as usize].add(t);
        totals[t] += 1;
    }
    Counts {
        doc_topic,
        word_topic,
        totals: TopicTotals::new(totals, prior),
    }
}

// ---------------------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------------------

/// The uniform in `[0, 1)` that token `k` draws in epoch `epoch` under `seed`: a
/// counter-based generator (SplitMix64 over the three numbers), so a token's draw does not
/// depend on which tokens ran before it.
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::token_uniform;
/// let u = token_uniform(42, 1, 7);
/// assert!((0.0..1.0).contains(&u));
/// assert_eq!(u, token_uniform(42, 1, 7));
/// assert_ne!(u, token_uniform(42, 2, 7));
/// ```
#[inline]
pub fn token_uniform(seed: u64, epoch: usize, k: usize) -> f64 {
    let h = mix64(mix64(mix64(seed) ^ epoch as u64) ^ k as u64);
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The initial topic of token `k`: uniform over `0..topics`, from `(seed, k)` alone.
pub fn initial_topic(seed: u64, k: usize, topics: usize) -> u32 {
    let h = mix64(mix64(seed ^ 0x1da_5eed) ^ k as u64);
    ((u128::from(h) * topics as u128) >> 64) as u32
}

// ---------------------------------------------------------------------------------------
// The sparse sampler
// ---------------------------------------------------------------------------------------

/// Draws a token's new topic with SparseLDA, from the counts without the token.
///
/// The collapsed conditional of topic `t` for a token of word `w` in document `d` is
///
/// ```text
/// p(t) ∝ (α + n_dt)(β + n_wt) / (βV + n_t)
///      = αβ / (βV + n_t)                  s: smoothing, all topics (cached in `nt`)
///      + β n_dt / (βV + n_t)              r: the document's non-zero topics
///      + (α + n_dt) n_wt / (βV + n_t)     q: the word's non-zero topics
/// ```
///
/// `u` (uniform in `[0, 1)`) picks a point of the total mass `s + r + q`; the buckets are
/// searched `q`, `r`, then `s` (rarely reached). A bucket is searched in the order of its
/// topic list, so the result depends on those orders, which both twins keep the same way.
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::{sample_topic, Prior, TopicCounts, TopicTotals};
/// let prior = Prior::new(0.1, 0.01, 3, 10);
/// let mut nd = TopicCounts::new(3);
/// let mut nw = TopicCounts::new(3);
/// for _ in 0..5 { nd.add(2); nw.add(2); }
/// let nt = TopicTotals::new(vec![10, 10, 10], &prior);
/// // Topic 2 holds nearly all the mass.
/// let twos = (0..100).filter(|i| sample_topic(&nd, &nw, &nt, &prior, *i as f64 / 100.0) == 2).count();
/// assert!(twos >= 98);
/// ```
#[inline]
pub fn sample_topic(
    nd: &TopicCounts,
    nw: &TopicCounts,
    nt: &TopicTotals,
    prior: &Prior,
    u: f64,
) -> usize {
    s_error::observe(&nt.counts);
    let (alpha, beta, beta_v) = (prior.alpha, prior.beta, prior.beta_v);
    let inv = |t: usize| 1.0 / (beta_v + nt.counts[t] as f64);
    let q_term = |t: usize| (alpha + f64::from(nd.counts[t])) * f64::from(nw.counts[t]) * inv(t);
    let r_term = |t: usize| beta * f64::from(nd.counts[t]) * inv(t);

    let q: f64 = nw.nonzero.iter().map(|&t| q_term(t as usize)).sum();
    let r: f64 = nd.nonzero.iter().map(|&t| r_term(t as usize)).sum();
    let s = nt.smoothing.max(0.0);
    let mut x = u * (q + r + s);

    if x < q {
        for &t in &nw.nonzero {
            x -= q_term(t as usize);
            if x < 0.0 {
                return t as usize;
            }
        }
        return nw.nonzero.last().map_or(0, |&t| t as usize);
    }
    x -= q;
    if x < r {
        for &t in &nd.nonzero {
            x -= r_term(t as usize);
            if x < 0.0 {
                return t as usize;
            }
        }
        return nd.nonzero.last().map_or(0, |&t| t as usize);
    }
    x -= r;
    for t in 0..nt.counts.len() {
        x -= prior.alpha_beta * inv(t);
        if x < 0.0 {
            return t;
        }
    }
    // The cached smoothing mass may exceed the exact one by rounding (or, in a relaxed
    // replica, by a little more): the remainder goes to the last topic.
    nt.counts.len().saturating_sub(1)
}

// ---------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------

/// `ln Γ(x)` for `x > 0` (Lanczos approximation, g = 7, 9 terms; relative error about
/// 1e-15), with the reflection formula below 0.5.
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::ln_gamma;
/// assert!(ln_gamma(1.0).abs() < 1e-13);
/// assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-13);
/// assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-13);
/// ```
pub fn ln_gamma(x: f64) -> f64 {
    #[allow(clippy::excessive_precision)]
    const C: [f64; 9] = [
        0.999_999_999_999_809_93,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_13,
        -176.615_029_162_140_59,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_571_6e-6,
        1.505_632_735_149_311_6e-7,
    ];
    const G: f64 = 7.0;
    use std::f64::consts::PI;
    if x < 0.5 {
        return (PI / (PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// A document's term of [`log_likelihood`]:
/// `ln Γ(Kα) − ln Γ(Kα + N_d) + Σ_t [ln Γ(α + n_dt) − ln Γ(α)]`.
pub fn doc_log_term(row: &TopicCounts, prior: &Prior) -> f64 {
    let [ln_alpha, _, ln_k_alpha, _] = prior.ln_gammas;
    let mut sum = 0.0;
    let mut len = 0u64;
    for &t in &row.nonzero {
        let n = row.counts[t as usize];
        len += u64::from(n);
        sum += ln_gamma(prior.alpha + f64::from(n)) - ln_alpha;
    }
    sum + ln_k_alpha - ln_gamma(prior.topics as f64 * prior.alpha + len as f64)
}

/// A word's term of [`log_likelihood`]: `Σ_t [ln Γ(β + n_wt) − ln Γ(β)]`.
pub fn word_log_term(row: &TopicCounts, prior: &Prior) -> f64 {
    let ln_beta = prior.ln_gammas[1];
    row.nonzero
        .iter()
        .map(|&t| ln_gamma(prior.beta + f64::from(row.counts[t as usize])) - ln_beta)
        .sum()
}

/// The topics' term of [`log_likelihood`]: `Σ_t [ln Γ(Vβ) − ln Γ(Vβ + n_t)]`.
pub fn topic_log_term(totals: &TopicTotals, prior: &Prior) -> f64 {
    let ln_v_beta = prior.ln_gammas[3];
    totals
        .counts
        .iter()
        .map(|&n| ln_v_beta - ln_gamma(prior.beta_v + n as f64))
        .sum()
}

/// The collapsed joint log-likelihood `log p(w, z)` of the corpus and the topic
/// assignment, under symmetric Dirichlet priors α (documents' topic mixtures, `K` topics)
/// and β (topics' word distributions, `V` words):
///
/// ```text
/// log p(w, z) = Σ_d [ ln Γ(Kα) − ln Γ(Kα + N_d) + Σ_t ( ln Γ(α + n_dt) − ln Γ(α) ) ]
///             + Σ_t [ ln Γ(Vβ) − ln Γ(Vβ + n_t) ] + Σ_w Σ_t [ ln Γ(β + n_wt) − ln Γ(β) ]
/// ```
///
/// with `n_dt` the tokens of document `d` in topic `t`, `N_d` the document's length,
/// `n_wt` the tokens of word `w` in topic `t` and `n_t` all tokens in topic `t`
/// (Griffiths and Steyvers 2004; zero counts contribute nothing, so only non-zero entries
/// are visited). The programs report it divided by the number of tokens.
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::{count_topics, log_likelihood, Prior, Token};
/// // One topic, two words, β = 1: p(w) = Γ(2)/Γ(5) · Γ(3)Γ(2)/Γ(1)² = 1/12 for w = (0, 0, 1).
/// let prior = Prior::new(0.5, 1.0, 1, 2);
/// let tokens = [0, 0, 1].map(|word| Token { doc: 0, word });
/// let c = count_topics(&tokens, &[0, 0, 0], 1, &prior);
/// let ll = log_likelihood(&c.doc_topic, &c.word_topic, &c.totals, &prior);
/// assert!((ll - (1.0f64 / 12.0).ln()).abs() < 1e-12);
/// ```
pub fn log_likelihood(
    doc_topic: &[TopicCounts],
    word_topic: &[TopicCounts],
    totals: &TopicTotals,
    prior: &Prior,
) -> f64 {
    let docs: f64 = doc_topic.iter().map(|r| doc_log_term(r, prior)).sum();
    let words: f64 = word_topic.iter().map(|r| word_log_term(r, prior)).sum();
    docs + words + topic_log_term(totals, prior)
}

/// STRADS's s-error of the relaxed topic totals, measured while the loop runs.
///
/// STRADS (Lee et al., NIPS 2014) measures how stale the workers' copies of LDA's topic
/// totals are by the *s-error*: the L1 distance between a worker's copy and the true
/// totals, averaged over workers and time, per token of the corpus. strads-ap keeps the
/// workers' replicas inside its engine, so this module measures from the sampler's side:
///
/// * every count change a body makes ([`TopicTotals::add`], [`TopicTotals::remove`]) is
///   also added to a per-thread shadow delta, so the true totals at any moment are the
///   totals at the start of the sweep plus the shadows of all threads;
/// * every [`SAMPLE_EVERY`]-th draw of a thread ([`sample_topic`]) compares the totals
///   the body sees (the worker's replica; the table itself in a serial program) with the
///   true totals and accumulates the L1 distance.
///
/// [`start`] before a sweep and [`finish`] after it give the mean distance over the
/// compared draws. Nothing is recorded unless [`start`] was called (the cost is then one
/// relaxed atomic load per call). A measured sweep is slower, by a fifth or so on two
/// threads (the threads read each other's shadows), so it should not be timed.
///
/// The sweep must not include strads-ap's reconnaissance: during reconnaissance the body
/// runs on scratch copies whose changes are discarded, but the shadows would count them.
///
/// [`SAMPLE_EVERY`]: s_error::SAMPLE_EVERY
/// [`start`]: s_error::start
/// [`finish`]: s_error::finish
pub mod s_error {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Mutex, MutexGuard};

    /// One draw in this many (per thread) is compared with the true totals.
    pub const SAMPLE_EVERY: u64 = 64;

    static ON: AtomicBool = AtomicBool::new(false);
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    static STATE: Mutex<State> = Mutex::new(State {
        base: Vec::new(),
        slots: Vec::new(),
    });

    /// The totals at the start of the sweep and the threads' shadows.
    struct State {
        base: Vec<i64>,
        slots: Vec<Arc<Slot>>,
    }

    /// One thread's shadow delta and its accumulated distances. Only the owning thread
    /// writes it; the others read the deltas.
    struct Slot {
        deltas: Vec<AtomicI64>,
        draws: AtomicU64,
        sum_l1: AtomicU64,
        compared: AtomicU64,
    }

    thread_local! {
        static MINE: RefCell<Option<(u64, Arc<Slot>)>> = const { RefCell::new(None) };
    }

    fn state() -> MutexGuard<'static, State> {
        STATE.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on this thread's slot of the current sweep, registering it first.
    #[inline]
    fn with_slot(f: impl FnOnce(&Slot)) {
        let generation = GENERATION.load(Relaxed);
        MINE.with(|mine| {
            let mut mine = mine.borrow_mut();
            match &*mine {
                Some((g, slot)) if *g == generation => f(slot),
                _ => {
                    let mut st = state();
                    let slot = Arc::new(Slot {
                        deltas: st.base.iter().map(|_| AtomicI64::new(0)).collect(),
                        draws: AtomicU64::new(0),
                        sum_l1: AtomicU64::new(0),
                        compared: AtomicU64::new(0),
                    });
                    st.slots.push(slot.clone());
                    drop(st);
                    f(&slot);
                    *mine = Some((generation, slot));
                }
            }
        });
    }

    /// Starts measuring a sweep whose true totals at the start are `totals`.
    pub fn start(totals: &[i64]) {
        let mut st = state();
        st.base = totals.to_vec();
        st.slots.clear();
        GENERATION.fetch_add(1, Relaxed);
        ON.store(true, Relaxed);
    }

    /// Stops measuring; returns the mean L1 distance between the totals the draws saw and
    /// the true totals, over the compared draws, and the number of compared draws.
    pub fn finish() -> (f64, u64) {
        ON.store(false, Relaxed);
        let mut st = state();
        let (sum, compared) = st.slots.iter().fold((0u64, 0u64), |(s, c), slot| {
            (
                s + slot.sum_l1.load(Relaxed),
                c + slot.compared.load(Relaxed),
            )
        });
        st.slots.clear();
        GENERATION.fetch_add(1, Relaxed);
        let mean = if compared > 0 {
            sum as f64 / compared as f64
        } else {
            0.0
        };
        (mean, compared)
    }

    /// Adds a change of topic `t`'s total to this thread's shadow.
    #[inline]
    pub(super) fn record_change(t: usize, delta: i64) {
        if !ON.load(Relaxed) {
            return;
        }
        with_slot(|slot| {
            if let Some(d) = slot.deltas.get(t) {
                d.store(d.load(Relaxed) + delta, Relaxed);
            }
        });
    }

    /// Compares `seen` (the totals a draw uses) with the true totals, every
    /// [`SAMPLE_EVERY`]-th call on this thread.
    #[inline]
    pub(super) fn observe(seen: &[i64]) {
        if !ON.load(Relaxed) {
            return;
        }
        with_slot(|slot| {
            let draws = slot.draws.load(Relaxed) + 1;
            slot.draws.store(draws, Relaxed);
            if draws % SAMPLE_EVERY != 0 {
                return;
            }
            let st = state();
            if st.base.len() != seen.len() {
                return;
            }
            let l1: u64 = (0..seen.len())
                .map(|t| {
                    let truth = st.base[t]
                        + st.slots
                            .iter()
                            .map(|s| s.deltas[t].load(Relaxed))
                            .sum::<i64>();
                    truth.abs_diff(seen[t])
                })
                .sum();
            drop(st);
            slot.sum_l1.store(slot.sum_l1.load(Relaxed) + l1, Relaxed);
            slot.compared
                .store(slot.compared.load(Relaxed) + 1, Relaxed);
        });
    }
}

/// Tokens per topic recounted from the document rows: the true totals, to compare a
/// relaxed totals table with.
pub fn recount_totals(doc_topic: &[TopicCounts], topics: usize) -> Vec<i64> {
    let mut totals = vec![0i64; topics];
    for row in doc_topic {
        for &t in &row.nonzero {
            totals[t as usize] += i64::from(row.counts[t as usize]);
        }
    }
    totals
}

/// The L1 distance between two count vectors (a missing entry counts as 0).
///
/// # Examples
/// ```
/// use strads_ap_examples::lda::l1_distance;
/// assert_eq!(l1_distance(&[3, 1, 0], &[1, 1, 2]), 4);
/// ```
pub fn l1_distance(a: &[i64], b: &[i64]) -> u64 {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let (x, y) = (
                a.get(i).copied().unwrap_or(0),
                b.get(i).copied().unwrap_or(0),
            );
            x.abs_diff(y)
        })
        .sum()
}

/// Tokens sampled per second.
pub fn tokens_per_sec(tokens: usize, secs_per_epoch: f64) -> f64 {
    if secs_per_epoch > 0.0 {
        tokens as f64 / secs_per_epoch
    } else {
        0.0
    }
}

/// The result line of LDA (`lda`, `lda-serial`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LdaResult {
    /// Always `"lda"`.
    pub app: String,
    /// `serial` or `strads-ap`.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Processes of the job (1 for the serial twin).
    pub ranks: usize,
    /// Worker threads per process (1 for the serial twin).
    pub threads: usize,
    /// Epochs (sweeps over all tokens) run.
    pub epochs: usize,
    /// Mean seconds of one sweep: evaluation is excluded, and so is the strads-ap twin's
    /// one-off reconnaissance and planning (see `setup_secs`).
    pub secs_per_epoch: f64,
    /// [`log_likelihood`] per token after the last epoch.
    pub loglik_per_token: f64,
    /// Tokens sampled per second (tokens / `secs_per_epoch`).
    pub tokens_per_sec: f64,
    /// Seconds of one-off set-up: reconnaissance and planning, and a recorded first
    /// call's time beyond a steady epoch (0 for the serial twin; see
    /// [`EpochClock`](crate::report::EpochClock)).
    pub setup_secs: f64,
    /// The strads-ap twin only: STRADS's s-error of the relaxed totals table, the mean L1
    /// distance between the totals the draws used and the true totals, divided by the
    /// number of tokens ([`s_error`]), measured in one extra sweep after the last epoch
    /// that is neither timed nor part of `loglik_per_token`. Absent when it could not be
    /// measured (no epoch ran, so the extra sweep would include reconnaissance).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub s_error: Option<f64>,
}
