//! Command-line arguments. Both twins of an example parse the same arguments, so the bench
//! can pass one argument list to both.

use std::path::PathBuf;

use clap::{Args, Parser, ValueEnum};

/// Most worker threads per process: `--threads` and `STRADS_THREADS` (the runtime's
/// [`strads_ap::MAX_THREADS`]).
pub const MAX_THREADS: usize = strads_ap::MAX_THREADS;

/// Largest size of a synthetic data set (`--users`, `--ratings`, `--samples`, `--docs`,
/// `--triples`, `--sentences`, ...) and of a mini-batch.
pub const MAX_SIZE: usize = 100_000_000;

/// Largest length of a parameter row (`--rank`, `--dim`).
pub const MAX_DIM: usize = 10_000;

/// Largest number of features of MLR's synthetic data (its samples are dense) and of
/// classes.
pub const MAX_FEATURES: usize = 100_000;

/// Largest number of LDA topics (`--topics`): every document and every word keeps a row of
/// topic counts.
pub const MAX_TOPICS: usize = 10_000;

/// Largest word2vec context window and number of negative samples.
pub const MAX_WINDOW: usize = 100;

/// Arguments every example takes.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct CommonArgs {
    /// Read the data from this file instead of generating it (SGDMF: `user item rating`
    /// lines; MLR: libsvm lines). The size arguments of the generator are then ignored.
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,

    /// Passes over the training data (at least 1).
    #[arg(long, default_value_t = 10, value_parser = at_least_one)]
    pub epochs: usize,

    /// Worker threads of the strads-ap twin, 1 to 1024 [default: all cores]; the serial
    /// twin always runs on one.
    #[arg(long, value_parser = thread_count)]
    pub threads: Option<usize>,

    /// Seed of the synthetic data, the train/test split and the initial parameters.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl CommonArgs {
    /// The worker thread count: `--threads`, or `STRADS_THREADS` (set by `strads-ap run
    /// --threads`), or the number of cores.
    /// A bad `STRADS_THREADS` is left to `strads_ap::Config::from_env`, which the
    /// strads-ap twins call next and which names it.
    pub fn threads(&self) -> usize {
        threads_or_default(self.threads)
    }
}

/// Arguments of SGD matrix factorisation (`sgdmf`, `sgdmf-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "SGD matrix factorisation: learns user and item factors from ratings"
)]
pub struct SgdmfArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Users of the synthetic data set.
    #[arg(long, default_value_t = 50_000, value_parser = size)]
    pub users: usize,

    /// Items of the synthetic data set.
    #[arg(long, default_value_t = 5_000, value_parser = size)]
    pub items: usize,

    /// Ratings of the synthetic data set (before the 90/10 train/test split).
    #[arg(long, default_value_t = 1_000_000, value_parser = size)]
    pub ratings: usize,

    /// Rank of the factorisation (length of the user and item rows).
    #[arg(long, default_value_t = 32, value_parser = dim)]
    pub rank: usize,

    /// Learning rate.
    #[arg(long, default_value_t = 0.01, value_parser = positive)]
    pub lr: f32,

    /// L2 regularisation of the factors.
    #[arg(long, default_value_t = 0.05, value_parser = non_negative)]
    pub reg: f32,
}

/// How `sync_for!` merges the workers' updates (`--sync`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncArg {
    /// Workers of a process share progress after every mini-batch.
    Hybrid,
    /// Bulk-synchronous: workers' updates are merged after every step.
    Bsp,
}

impl SyncArg {
    /// The strads-ap synchronisation mode.
    pub fn mode(self) -> strads_ap::SyncMode {
        match self {
            SyncArg::Hybrid => strads_ap::SyncMode::Hybrid,
            SyncArg::Bsp => strads_ap::SyncMode::Bsp,
        }
    }

    /// The name used on the command line and in result lines (`hybrid`, `bsp`).
    pub fn name(self) -> &'static str {
        match self {
            SyncArg::Hybrid => "hybrid",
            SyncArg::Bsp => "bsp",
        }
    }
}

/// Arguments of multinomial logistic regression (`mlr`, `mlr-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "Multinomial logistic (softmax) regression trained by mini-batch SGD"
)]
pub struct MlrArgs {
    /// Common arguments.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Samples of the synthetic data set (before the 90/10 train/test split).
    #[arg(long, default_value_t = 100_000, value_parser = size)]
    pub samples: usize,

    /// Features of the synthetic data set.
    #[arg(long, default_value_t = 50, value_parser = features)]
    pub features: usize,

    /// Classes of the synthetic data set.
    #[arg(long, default_value_t = 10, value_parser = features)]
    pub classes: usize,

    /// Samples per mini-batch.
    #[arg(long, default_value_t = 100, value_parser = size)]
    pub minibatch: usize,

    /// Learning rate (of the mini-batch mean gradient).
    #[arg(long, default_value_t = 0.5, value_parser = positive)]
    pub lr: f32,

    /// Synchronisation of the strads-ap twin's `sync_for!` (the serial twin ignores it).
    #[arg(long, value_enum, default_value_t = SyncArg::Hybrid)]
    pub sync: SyncArg,
}

/// Arguments of Lasso by coordinate descent (`lasso`, `lasso-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "Lasso by coordinate descent: ½‖y − Xβ‖² + λ‖β‖₁, to a relative duality gap"
)]
pub struct LassoArgs {
    /// Common arguments (`--data`: a CSV of a target then the features per line, such as
    /// `../shared/data/lasso/diabetes.csv`; `--epochs` is not used: see `--max-sweeps`).
    #[command(flatten)]
    pub common: CommonArgs,

    /// The most sweeps (each `features` coordinate updates) before giving up on `--tol`.
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    pub max_sweeps: usize,

    /// Samples of the synthetic data set.
    #[arg(long, default_value_t = 2_000, value_parser = size)]
    pub rows: usize,

    /// Features of the synthetic data set.
    #[arg(long, default_value_t = 20_000, value_parser = size)]
    pub features: usize,

    /// Share of the rows each synthetic column holds.
    #[arg(long, default_value_t = 0.01, value_parser = positive_f64)]
    pub density: f64,

    /// λ = λmax / RATIO, where λmax = ‖Xᵀy‖∞.
    #[arg(long, default_value_t = 20.0, value_parser = positive_f64)]
    pub ratio: f64,

    /// λ₂ of the elastic net, `+ ½λ₂‖β‖²` (0: the Lasso).
    #[arg(long, default_value_t = 0.0)]
    pub l2: f64,

    /// Stop at this relative duality gap (measured after the sweeps `lasso::GapChecks`
    /// picks: the first two, then halfway to where its rate of decrease says it passes).
    #[arg(long, default_value_t = 1e-6, value_parser = positive_f64)]
    pub tol: f64,

    /// The order coordinates are updated in.
    #[arg(long, value_enum, default_value_t = OrderArg::Priority)]
    pub order: OrderArg,

    /// The strads-ap twin's dependency test: `none`, `overlap:T` (shared rows, cosine ≥ T)
    /// or `corr:R` (STRADS's |x_jᵀx_k| ≥ R).
    #[arg(long, default_value = "corr:0.5")]
    pub depends: String,

    /// The strads-ap twin's coordinates per round (default: 1024 per worker, and at least
    /// an eighth of the features). On strongly coupled data several workers need
    /// smaller rounds (parallel updates of a round see each other only after it): the run
    /// stops with an error naming this flag when its objective doubles.
    #[arg(long)]
    pub round: Option<usize>,

    /// η of the priority order, `(Δβ_j)² + η` (default: a tenth of the mean squared change,
    /// round by round).
    #[arg(long)]
    pub eta: Option<f64>,

    /// Write the problem (X and y after loading, centring and scaling) to this svmlight
    /// file, print λ, and stop: peers read it (`examples/peers/peers.py lasso-*`).
    #[arg(long, value_name = "FILE")]
    pub write_problem: Option<std::path::PathBuf>,

    /// Print, instead of solving once, the coordinate updates each order needs to reach
    /// a relative objective error of 1e-4 (cyclic, uniform, priority; one worker).
    #[arg(long)]
    pub compare_orders: bool,
}

/// How Lasso picks coordinates (`--order`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderArg {
    /// In index order, sweep after sweep.
    Cyclic,
    /// Uniformly at random.
    Uniform,
    /// STRADS's priority: in proportion to the squared last change (the serial twin
    /// runs cyclic instead).
    Priority,
}

impl OrderArg {
    /// The name in result lines.
    pub fn name(self) -> &'static str {
        match self {
            OrderArg::Cyclic => "cyclic",
            OrderArg::Uniform => "uniform",
            OrderArg::Priority => "priority",
        }
    }
}

/// Arguments of LDA topic modelling by collapsed Gibbs sampling (`lda`, `lda-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "LDA topic modelling: collapsed Gibbs sampling with the SparseLDA sampler"
)]
pub struct LdaArgs {
    /// Common arguments (`--data`: an LDA-C file, `n id:count ...` per document with the
    /// vocabulary in a sibling `.tokens` file, or `docid<TAB>tokens...` lines).
    #[command(flatten)]
    pub common: CommonArgs,

    /// Topics `K`.
    #[arg(long, default_value_t = 100, value_parser = topics)]
    pub topics: usize,

    /// Symmetric Dirichlet prior of the documents' topic mixtures.
    #[arg(long, default_value_t = 0.1, value_parser = positive_f64)]
    pub alpha: f64,

    /// Symmetric Dirichlet prior of the topics' word distributions.
    #[arg(long, default_value_t = 0.01, value_parser = positive_f64)]
    pub beta: f64,

    /// Documents of the synthetic corpus.
    #[arg(long, default_value_t = 5_000, value_parser = size)]
    pub docs: usize,

    /// Words of the synthetic corpus's vocabulary.
    #[arg(long, default_value_t = 10_000, value_parser = size)]
    pub vocab: usize,

    /// Mean tokens per document of the synthetic corpus (lengths are uniform between half
    /// and one and a half times it).
    #[arg(long, default_value_t = 100, value_parser = doc_len)]
    pub doc_len: usize,
}

/// `threads`, or `STRADS_THREADS` (as the strads-ap launcher sets it), or the number of
/// cores (at most [`MAX_THREADS`]).
pub fn threads_or_default(threads: Option<usize>) -> usize {
    threads
        .or_else(|| {
            std::env::var("STRADS_THREADS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
        })
        .max(1)
}

/// Parses a finite number greater than 0, in double precision (a Dirichlet prior).
fn positive_f64(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err("must be a finite number greater than 0".into());
    }
    Ok(x)
}

/// Parses a count between `lo` and `hi`; `limit` says what the upper bound is.
fn count_between(s: &str, lo: usize, hi: usize, limit: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|e| format!("{s:?} is not a count: {e}"))?;
    if n < lo {
        return Err(format!("must be at least {lo}"));
    }
    if n > hi {
        return Err(format!("must be at most {hi} ({limit})"));
    }
    Ok(n)
}

/// Parses a count that must be at least 1 (`--epochs`, sample sizes).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    count_between(s, 1, usize::MAX, "")
}

/// Parses a worker thread count, 1 to [`MAX_THREADS`].
///
/// # Examples
/// ```
/// use strads_ap_examples::cli::thread_count;
/// assert_eq!(thread_count("4"), Ok(4));
/// assert!(thread_count("0").unwrap_err().contains("at least 1"));
/// assert!(thread_count("100000").unwrap_err().contains("at most 1024"));
/// ```
pub fn thread_count(s: &str) -> Result<usize, String> {
    count_between(
        s,
        1,
        MAX_THREADS,
        "strads-ap's limit of worker threads per process",
    )
}

/// Parses the size of a synthetic data set or a mini-batch, 1 to [`MAX_SIZE`].
fn size(s: &str) -> Result<usize, String> {
    count_between(s, 1, MAX_SIZE, "the examples' limit of a data set's size")
}

/// Parses a parameter row's length, 1 to [`MAX_DIM`].
fn dim(s: &str) -> Result<usize, String> {
    count_between(
        s,
        1,
        MAX_DIM,
        "the examples' limit of a parameter row's length",
    )
}

/// Parses MLR's synthetic features or classes, 1 to [`MAX_FEATURES`].
fn features(s: &str) -> Result<usize, String> {
    count_between(s, 1, MAX_FEATURES, "the synthetic samples are dense")
}

/// Parses LDA's topic count, 1 to [`MAX_TOPICS`].
fn topics(s: &str) -> Result<usize, String> {
    count_between(
        s,
        1,
        MAX_TOPICS,
        "every document and word keeps a row of topic counts",
    )
}

/// Parses LDA's mean synthetic document length, 1 to 100,000 tokens.
fn doc_len(s: &str) -> Result<usize, String> {
    count_between(s, 1, 100_000, "the examples' limit of a synthetic document")
}

/// Parses word2vec's window or negative samples, 1 to [`MAX_WINDOW`].
fn window(s: &str) -> Result<usize, String> {
    count_between(s, 1, MAX_WINDOW, "the examples' limit of a window")
}

/// Parses a finite number greater than 0 (a step size).
fn positive(s: &str) -> Result<f32, String> {
    let x: f32 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err("must be a finite number greater than 0".into());
    }
    Ok(x)
}

/// Parses a finite number at least 0 (a regularisation weight).
fn non_negative(s: &str) -> Result<f32, String> {
    let x: f32 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x >= 0.0) {
        return Err("must be a finite number at least 0".into());
    }
    Ok(x)
}

/// Which parameter tables the TransE strads-ap twin declares relaxed (`--relaxed`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelaxedArg {
    /// None: every conflict is planned around (the loop is serializable).
    None,
    /// The relation table: every triple writes its relation's row, and a graph has few
    /// relations, so planning around them would serialise the loop.
    Relations,
    /// Relations and entities: no conflict is planned around; workers update replicas
    /// whose deltas are summed after every group of triples.
    All,
}

impl RelaxedArg {
    /// The name used on the command line and in result lines.
    pub fn name(self) -> &'static str {
        match self {
            RelaxedArg::None => "none",
            RelaxedArg::Relations => "relations",
            RelaxedArg::All => "all",
        }
    }

    /// Whether the relation table is relaxed.
    pub fn relations(self) -> bool {
        self != RelaxedArg::None
    }

    /// Whether the entity table is relaxed.
    pub fn entities(self) -> bool {
        self == RelaxedArg::All
    }
}

/// Arguments of TransE knowledge-graph embeddings (`transe`, `transe-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "TransE: knowledge-graph embeddings trained by SGD on a margin ranking loss"
)]
pub struct TranseArgs {
    /// Common arguments (`--data`: a directory with train.txt, valid.txt and test.txt, or
    /// one `head<TAB>relation<TAB>tail` file, split 80/10/10 by the seed).
    #[command(flatten)]
    pub common: CommonArgs,

    /// Entities of the synthetic graph.
    #[arg(long, default_value_t = 20_000, value_parser = entity_count)]
    pub entities: usize,

    /// Relations of the synthetic graph.
    #[arg(long, default_value_t = 50, value_parser = size)]
    pub relations: usize,

    /// Triples of the synthetic graph (before the 80/10/10 split).
    #[arg(long, default_value_t = 500_000, value_parser = size)]
    pub triples: usize,

    /// Embedding dimension.
    #[arg(long, default_value_t = 50, value_parser = dim)]
    pub dim: usize,

    /// Learning rate.
    #[arg(long, default_value_t = 0.01, value_parser = positive)]
    pub lr: f32,

    /// Margin of the ranking loss.
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    pub margin: f32,

    /// Dissimilarity: 1 (L1 norm) or 2 (L2 norm) of `h + r - t`.
    #[arg(long, default_value = "1", value_parser = parse_norm)]
    pub norm: crate::transe::Norm,

    /// Test triples evaluated at most (a seeded sample when the test set is larger).
    #[arg(long, default_value_t = crate::transe::EVAL_SAMPLE, value_parser = at_least_one)]
    pub eval_sample: usize,

    /// Tables the strads-ap twin's `async_for!` declares relaxed (the serial twin ignores
    /// it).
    #[arg(long, value_enum, default_value_t = RelaxedArg::Relations)]
    pub relaxed: RelaxedArg,

    /// Run the strads-ap twin with `sync_for!` over mini-batches of triples instead of
    /// `async_for!` (the serial twin ignores it).
    #[arg(long, value_enum)]
    pub sync: Option<SyncArg>,

    /// Triples per mini-batch of `--sync`.
    #[arg(long, default_value_t = 256, value_parser = size)]
    pub minibatch: usize,
}

/// Parses the synthetic graph's entities, 2 (a corruption needs another one) to
/// [`MAX_SIZE`].
fn entity_count(s: &str) -> Result<usize, String> {
    count_between(s, 2, MAX_SIZE, "the examples' limit of a data set's size")
}

/// Parses `--norm`: 1 or 2.
fn parse_norm(s: &str) -> Result<crate::transe::Norm, String> {
    s.parse()
}

/// Arguments of word2vec, skip-gram with negative sampling (`word2vec`, `word2vec-serial`).
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    version,
    about = "Word2vec: skip-gram word embeddings trained by SGD with negative sampling"
)]
pub struct Word2vecArgs {
    /// Common arguments (`--data`: one sentence per line, tokens separated by spaces;
    /// without it a seeded synthetic corpus of word clusters).
    #[command(flatten)]
    pub common: CommonArgs,

    /// Sentences of the synthetic corpus.
    #[arg(long, default_value_t = 50_000, value_parser = size)]
    pub sentences: usize,

    /// Use only the first N sentences of the corpus (all by default).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_sentences: Option<usize>,

    /// Words occurring fewer times are dropped from the corpus.
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    pub min_count: usize,

    /// Embedding dimension.
    #[arg(long, default_value_t = 100, value_parser = dim)]
    pub dim: usize,

    /// Largest context window (each position draws a window of 1 to this many words).
    #[arg(long, default_value_t = 5, value_parser = window)]
    pub window: usize,

    /// Negative samples per (word, context) pair (1 to 100).
    #[arg(long, default_value_t = 5, value_parser = window)]
    pub negative: usize,

    /// Sub-sampling threshold of frequent words (0: keep all).
    #[arg(long, default_value_t = 1e-3, value_parser = non_negative_f64)]
    pub sample: f64,

    /// Initial learning rate (decays linearly to lr * 1e-4 over all epochs).
    #[arg(long, default_value_t = 0.025, value_parser = positive)]
    pub lr: f32,

    /// Sentences per mini-batch of the strads-ap twin's `sync_for!` (the serial twin runs
    /// the same mini-batches in order). Workers merge whole tables after every mini-batch,
    /// so mini-batches are large: on Brown, 2,048 sentences (about 34,000 words) make 28
    /// merges per epoch.
    #[arg(long, default_value_t = 2048, value_parser = size)]
    pub minibatch: usize,

    /// WordSim-353 file (`word1<TAB>word2<TAB>score`, `#` comments) [default:
    /// ../shared/data/word2vec-eval/wordsim353.tsv when present].
    #[arg(long, value_name = "PATH")]
    pub wordsim: Option<PathBuf>,

    /// Analogy questions (`a b c d` lines, `: section` lines) [default:
    /// ../shared/data/word2vec-eval/questions-words.txt when present].
    #[arg(long, value_name = "PATH")]
    pub analogies: Option<PathBuf>,

    /// Analogy questions evaluated at most (a seeded sample when more are in the
    /// vocabulary; 0 skips the analogies).
    #[arg(long, default_value_t = crate::word2vec::ANALOGY_SAMPLE)]
    pub analogy_sample: usize,

    /// Write the input vectors to this file in the word2vec text format.
    #[arg(long, value_name = "PATH")]
    pub save: Option<PathBuf>,
}

/// Parses a finite number at least 0, in double precision (a threshold).
fn non_negative_f64(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(x.is_finite() && x >= 0.0) {
        return Err("must be a finite number at least 0".into());
    }
    Ok(x)
}
