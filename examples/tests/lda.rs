//! LDA: the corpus loaders (errors name the file and line; empty corpora and vocabularies
//! are refused), the sparse sampler against the dense conditional, and the twins on the
//! Reuters corpus (`../shared/data/lda`, skipped with a message when absent): the serial
//! twin learns, the strads-ap twin on two threads keeps its pace, and on one thread it is
//! the serial program.
//!
//! The binaries are run as child processes, each bounded by a timeout so that a hang
//! fails the test instead of stalling it.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{num, run_json, Output};

use serde_json::Value;
use strads_ap_examples::lda::{
    flatten, load_corpus, sample_topic, Prior, TopicCounts, TopicTotals,
};

/// Longest a child may run.
const TIMEOUT: Duration = Duration::from_secs(120);

fn temp_file(name: &str, content: &str) -> common::TempFile {
    common::temp_file("lda", name, content)
}

/// The Reuters LDA-C file, or `None` (with a message) when the shared data is absent.
fn reuters() -> Option<PathBuf> {
    common::shared_data("lda/reuters.ldac", Path::is_file)
}

fn run_raw(binary: &str, args: &[&str]) -> Output {
    common::run_raw(binary, args, TIMEOUT)
}

/// Runs `binary` with `args`; returns its JSON result line (the last line of stdout) and
/// the log-likelihood per token after every epoch, from its progress lines.
fn run(binary: &str, args: &[&str]) -> (Value, Vec<f64>) {
    let shown = format!("{binary} {}", args.join(" "));
    let (result, stderr) = run_json(binary, args, TIMEOUT);
    let per_epoch = stderr
        .lines()
        .filter(|l| l.contains(" epoch ") && l.contains("loglik_per_token = "))
        .map(|l| {
            let value = l
                .split("loglik_per_token = ")
                .nth(1)
                .and_then(|v| v.split_whitespace().next())
                .unwrap_or("");
            value
                .parse()
                .unwrap_or_else(|_| panic!("{shown}: bad progress line {l:?}"))
        })
        .collect();
    (result, per_epoch)
}

fn check_common(result: &Value, implementation: &str, threads: f64, epochs: f64) {
    assert_eq!(result["app"], "lda", "{result}");
    assert_eq!(result["impl"], implementation, "{result}");
    assert_eq!(num(result, "ranks"), 1.0, "{result}");
    assert_eq!(num(result, "threads"), threads, "{result}");
    assert_eq!(num(result, "epochs"), epochs, "{result}");
    assert!(num(result, "secs_per_epoch") > 0.0, "{result}");
    assert!(num(result, "tokens_per_sec") > 0.0, "{result}");
    assert!(num(result, "setup_secs") >= 0.0, "{result}");
}

// ---------------------------------------------------------------------------------------
// Loaders
// ---------------------------------------------------------------------------------------

#[test]
fn ldac_count_mismatch_names_file_and_line() {
    let path = temp_file("mismatch.ldac", "2 0:1 1:2\n\n3 0:1 2:4\n");
    let err = load_corpus(&path).unwrap_err().to_string();
    let expected = format!("{}:3:", path.display());
    assert!(
        err.starts_with(&expected),
        "error `{err}` should start with `{expected}`"
    );
    assert!(
        err.contains("says 3 distinct terms but has 2"),
        "error `{err}` should say what is wrong"
    );

    let path = temp_file("badpair.ldac", "1 0:1\n1 4-2\n");
    let err = load_corpus(&path).unwrap_err().to_string();
    assert!(
        err.contains("badpair.ldac:2:") && err.contains("id:count"),
        "unexpected error `{err}`"
    );
}

#[test]
fn ldac_ids_outside_the_vocabulary_name_file_and_line() {
    let path = temp_file("vocab.ldac", "1 0:2\n2 1:1 5:1\n");
    std::fs::write(path.with_extension("tokens"), "alpha\nbeta\n").expect("write vocabulary");
    let err = load_corpus(&path).unwrap_err().to_string();
    assert!(
        err.contains("vocab.ldac:2:") && err.contains("term id 5 is outside the vocabulary"),
        "unexpected error `{err}`"
    );
}

#[test]
fn empty_corpora_and_vocabularies_are_errors() {
    for (name, content, what) in [
        ("empty.ldac", "", "no documents"),
        ("blank.ldac", "\n \n", "no documents"),
        ("zeros.ldac", "0\n0\n", "no tokens"),
        ("zerocounts.ldac", "1 3:0\n", "no tokens"),
        ("empty.tsv", "", "no documents"),
        ("notokens.tsv", "a\t\nb\t  \n", "no tokens"),
    ] {
        let path = temp_file(name, content);
        let err = load_corpus(&path).unwrap_err().to_string();
        assert!(
            err.contains(name) && err.contains(what),
            "{name}: error `{err}` should name the file and say `{what}`"
        );
    }
    let path = temp_file("novocab.ldac", "1 0:2\n");
    std::fs::write(path.with_extension("tokens"), "\n").expect("write vocabulary");
    let err = load_corpus(&path).unwrap_err().to_string();
    assert!(
        err.contains("novocab.tokens") && err.contains("vocabulary is empty"),
        "unexpected error `{err}`"
    );
}

#[test]
fn documents_tsv_loads_and_builds_the_vocabulary() {
    let path = temp_file("docs.tsv", "d1\tthe cat sat\n\nd2\tthe dog\n");
    let c = load_corpus(&path).expect("loads");
    assert_eq!(c.vocab, vec!["the", "cat", "sat", "dog"]);
    assert_eq!(c.docs, vec![vec![0, 1, 2], vec![0, 3]]);
    assert_eq!(flatten(&c).len(), 5);

    let path = temp_file("notab.tsv", "d1\tthe cat\nd2 the dog\n");
    let err = load_corpus(&path).unwrap_err().to_string();
    assert!(
        err.contains("notab.tsv:2:") && err.contains("tab"),
        "unexpected error `{err}`"
    );
}

#[test]
fn ldac_without_vocabulary_file_uses_the_ids() {
    let path = temp_file("ids.ldac", "2 0:2 3:1\n1 1:1\n");
    let c = load_corpus(&path).expect("loads");
    assert_eq!(c.vocab.len(), 4);
    assert_eq!(c.docs, vec![vec![0, 0, 3], vec![1]]);
}

#[test]
fn reuters_loads() {
    let Some(path) = reuters() else { return };
    let c = load_corpus(&path).expect("Reuters loads");
    assert_eq!(c.docs.len(), 395);
    assert_eq!(c.vocab.len(), 4258);
    assert_eq!(c.tokens(), 84_010);
}

// ---------------------------------------------------------------------------------------
// The sampler
// ---------------------------------------------------------------------------------------

/// Inverting SparseLDA's three buckets at evenly spaced points gives every topic the mass
/// of the dense collapsed conditional `(α + n_dt)(β + n_wt) / (βV + n_t)`.
#[test]
fn sparse_sampler_follows_the_dense_conditional() {
    let topics = 7;
    let prior = Prior::new(0.3, 0.05, topics, 20);
    let (mut nd, mut nw) = (TopicCounts::new(topics), TopicCounts::new(topics));
    for (t, c) in [(1, 3), (4, 1), (6, 5)] {
        (0..c).for_each(|_| nd.add(t));
    }
    for (t, c) in [(4, 2), (0, 7), (6, 1)] {
        (0..c).for_each(|_| nw.add(t));
    }
    nd.remove(1); // a count goes down, and one to zero
    nd.remove(4);
    let nt = TopicTotals::new(vec![30, 12, 5, 0, 9, 2, 40], &prior);

    let dense: Vec<f64> = (0..topics)
        .map(|t| {
            (prior.alpha + f64::from(nd.counts[t])) * (prior.beta + f64::from(nw.counts[t]))
                / (prior.beta_v + nt.counts[t] as f64)
        })
        .collect();
    let total: f64 = dense.iter().sum();
    let points = 200_000;
    let mut hits = vec![0usize; topics];
    for i in 0..points {
        let u = (i as f64 + 0.5) / points as f64;
        hits[sample_topic(&nd, &nw, &nt, &prior, u)] += 1;
    }
    for t in 0..topics {
        let got = hits[t] as f64 / points as f64;
        let want = dense[t] / total;
        assert!(
            (got - want).abs() <= 4.0 / points as f64,
            "topic {t}: sampled mass {got}, conditional {want}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The twins on Reuters
// ---------------------------------------------------------------------------------------

/// (a) The serial twin learns: its log-likelihood per token after the last epoch is at
/// least 10% better than after the first. (b) The strads-ap twin on two threads, from the
/// same seed, ends within 2% of the serial twin's log-likelihood.
#[test]
fn serial_learns_and_strads_ap_keeps_its_pace_on_reuters() {
    let Some(path) = reuters() else { return };
    let path = path.to_string_lossy().into_owned();
    let epochs = "6";
    let args = |threads: &'static str| {
        vec![
            "--data",
            path.as_str(),
            "--topics",
            "50",
            "--epochs",
            epochs,
            "--seed",
            "3",
            "--threads",
            threads,
        ]
    };
    let (serial, serial_epochs) = run(env!("CARGO_BIN_EXE_lda-serial"), &args("2"));
    let (strads, strads_epochs) = run(env!("CARGO_BIN_EXE_lda"), &args("2"));
    check_common(&serial, "serial", 1.0, 6.0);
    check_common(&strads, "strads-ap", 2.0, 6.0);
    assert_eq!(serial_epochs.len(), 6, "one progress line per epoch");
    assert_eq!(strads_epochs.len(), 6, "one progress line per epoch");

    let (first, last) = (serial_epochs[0], num(&serial, "loglik_per_token"));
    assert!(
        (last - serial_epochs[5]).abs() <= 1e-6,
        "the result line ({last}) is not the last epoch's ({})",
        serial_epochs[5]
    );
    assert!(
        first < 0.0 && last > first * 0.9,
        "serial log-likelihood per token went from {first} to {last}: less than 10% better"
    );

    let p = num(&strads, "loglik_per_token");
    let rel = (p - last).abs() / last.abs();
    assert!(
        rel < 0.02,
        "strads-ap log-likelihood per token {p} is {:.2}% off the serial {last}",
        rel * 100.0
    );
    // The relaxed totals' s-error: the replicas lag the true totals by a few units' worth of
    // changes (about 0.5% of the tokens on Reuters with 2 threads; 0 if the operating
    // system happened to run one thread at a time).
    let s_error = num(&strads, "s_error");
    assert!(
        (0.0..0.05).contains(&s_error),
        "s-error {s_error} per token"
    );
    assert!(serial.get("s_error").is_none(), "{serial}");
}

/// (c) One worker in a world of one runs the loop in order: the same chain as the serial
/// twin (the log-likelihoods agree up to the summation order of the evaluation).
#[test]
fn one_thread_is_the_serial_program_on_reuters() {
    let Some(path) = reuters() else { return };
    let path = path.to_string_lossy().into_owned();
    let args = [
        "--data",
        path.as_str(),
        "--topics",
        "20",
        "--epochs",
        "2",
        "--threads",
        "1",
    ];
    let (serial, serial_epochs) = run(env!("CARGO_BIN_EXE_lda-serial"), &args);
    let (strads, strads_epochs) = run(env!("CARGO_BIN_EXE_lda"), &args);
    check_common(&strads, "strads-ap", 1.0, 2.0);
    assert_eq!(serial_epochs.len(), strads_epochs.len());
    for (epoch, (s, p)) in serial_epochs.iter().zip(&strads_epochs).enumerate() {
        // Progress lines have six decimals.
        assert!(
            (s - p).abs() <= 2e-6,
            "epoch {}: serial {s}, strads-ap {p}",
            epoch + 1
        );
    }
    let (s, p) = (
        num(&serial, "loglik_per_token"),
        num(&strads, "loglik_per_token"),
    );
    assert!((s - p).abs() <= 1e-9 * s.abs(), "serial {s}, strads-ap {p}");
    // One worker samples with the true totals.
    assert_eq!(num(&strads, "s_error"), 0.0, "{strads}");
}

/// (d) Bad input stops both binaries with an error naming the file and line.
#[test]
fn binaries_report_bad_input_with_file_and_line() {
    let path = temp_file("binary-mismatch.ldac", "1 0:1\n2 1:1\n");
    let shown = path.to_string_lossy().into_owned();
    for binary in [env!("CARGO_BIN_EXE_lda-serial"), env!("CARGO_BIN_EXE_lda")] {
        let out = run_raw(binary, &["--data", &shown, "--threads", "1"]);
        assert!(!out.success, "{binary} accepted a bad file");
        assert!(
            out.stderr.contains(&format!("{shown}:2:")) && out.stderr.contains("says 2"),
            "{binary}: stderr should name {shown}:2 and the mismatch:\n{}",
            out.stderr
        );
        assert!(out.stdout.trim().is_empty(), "{binary} printed a result");
    }
}
