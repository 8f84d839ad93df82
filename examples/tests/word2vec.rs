//! Word2vec: the corpus and evaluation helpers, clear errors for bad input (a missing file
//! named, an empty corpus, a vocabulary emptied by `--min-count`), and the twins on the
//! Brown corpus (`../shared/data/brown`, skipped with a message when absent): the serial
//! twin learns similarities that agree with WordSim-353, the strads-ap twin on two threads
//! reaches the serial twin's ρ, and on one thread it is the serial program.
//!
//! The Brown runs use small settings (20 dimensions, 3 epochs, window 3, 3 negatives,
//! sub-sampling 1e-4) so that they take seconds in a debug build. With seed 42 the serial
//! twin reaches ρ = 0.187 (seeds 1-4: 0.147-0.213); the strads-ap twin with two threads and
//! mini-batches of 512 sentences reaches 0.178 ± 0.001 over repeated runs.
//!
//! The binaries are run as child processes, each bounded by a timeout so that a hang
//! fails the test instead of stalling it.

use std::collections::HashMap;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{num, run_json, Output};

use serde_json::Value;
use strads_ap_examples::word2vec::{
    analogy_accuracy, analogy_sample, keep_probabilities, learning_rate, load_analogies,
    load_sentences, load_wordsim, noise_table, save_vectors, spearman, wordsim_rho, Corpus,
};

/// Longest a child may run.
const TIMEOUT: Duration = Duration::from_secs(300);

fn temp_file(name: &str, content: &str) -> common::TempFile {
    common::temp_file("w2v", name, content)
}

/// The shared data file `what`, or `None` (with a message) when it is absent.
fn shared(what: &str) -> Option<PathBuf> {
    common::shared_data(what, Path::is_file)
}

fn run_raw(binary: &str, args: &[&str]) -> Output {
    common::run_raw(binary, args, TIMEOUT)
}

/// Runs `binary` with `args` and returns its JSON result line (the last line of stdout).
fn run(binary: &str, args: &[&str]) -> Value {
    let start = Instant::now();
    let (result, _) = run_json(binary, args, TIMEOUT);
    eprintln!(
        "({binary} {}: {:.1} s)",
        args.join(" "),
        start.elapsed().as_secs_f64()
    );
    result
}

/// Runs `binary` with `args`, expects it to fail, and returns its stderr.
fn run_failing(binary: &str, args: &[&str]) -> String {
    let out = run_raw(binary, args);
    assert!(
        !out.success,
        "{binary} {} should have failed; printed:\n{}",
        args.join(" "),
        out.stdout
    );
    out.stderr
}

const SERIAL: &str = env!("CARGO_BIN_EXE_word2vec-serial");
const STRADS: &str = env!("CARGO_BIN_EXE_word2vec");

fn words(s: &[&str]) -> Vec<String> {
    s.iter().map(|w| w.to_string()).collect()
}

#[test]
fn corpus_keeps_frequent_words_most_frequent_first() {
    let raw = vec![
        words(&["a", "b", "a", "rare"]),
        words(&["rare2"]),
        words(&["b", "a"]),
    ];
    let c = Corpus::build(&raw, 2, Path::new("test")).expect("corpus");
    assert_eq!(c.vocab, words(&["a", "b"]));
    assert_eq!(c.counts, vec![3, 2]);
    // The sentence without a kept word is dropped; indices and offsets are kept.
    assert_eq!(c.sentences.len(), 2);
    assert_eq!((c.sentences[0].index, c.sentences[0].offset), (0, 0));
    assert_eq!(c.sentences[0].words, vec![0, 1, 0]);
    assert_eq!((c.sentences[1].index, c.sentences[1].offset), (2, 3));
    assert_eq!(c.train_words, 5);
}

#[test]
fn empty_corpora_and_vocabularies_are_refused() {
    let e = Corpus::build(&[], 1, Path::new("nothing.txt")).unwrap_err();
    assert!(e.to_string().contains("nothing.txt") && e.to_string().contains("empty"));
    let e = Corpus::build(&[words(&["a", "b"])], 5, Path::new("few.txt")).unwrap_err();
    assert!(
        e.to_string().contains("vocabulary is empty") && e.to_string().contains("--min-count"),
        "{e}"
    );
    let blank = temp_file("blank.txt", "\n   \n\n");
    let e = load_sentences(&blank).unwrap_err();
    assert!(e.to_string().contains("blank.txt") && e.to_string().contains("empty"));
}

#[test]
fn the_binaries_report_bad_input_clearly() {
    let missing = "/nonexistent/strads-ap/sentences.txt";
    for binary in [SERIAL, STRADS] {
        let err = run_failing(binary, &["--data", missing, "--threads", "1"]);
        assert!(err.contains(missing), "{err}");
    }
    let blank = temp_file("blank-bin.txt", "\n\n");
    let err = run_failing(
        STRADS,
        &["--data", blank.to_str().expect("utf-8"), "--threads", "1"],
    );
    assert!(err.contains("the corpus is empty"), "{err}");
    let few = temp_file("few.txt", "a b c\nb c\n");
    let err = run_failing(SERIAL, &["--data", few.to_str().expect("utf-8")]);
    assert!(err.contains("the vocabulary is empty"), "{err}");
    let ws = temp_file("ws.tsv", "# comment\nlove\tsex\n");
    let e = load_wordsim(&ws).unwrap_err().to_string();
    assert!(e.contains("ws.tsv:2"), "{e}");
}

#[test]
fn noise_table_follows_the_three_quarter_power() {
    let t = noise_table(&[81, 16, 1]);
    assert_eq!(t.len(), 3, "one slot per word");
    let share = |w: u32| t.iter().map(|n| n.share_of(w)).sum::<f64>() / t.len() as f64;
    // 81^0.75 = 27, 16^0.75 = 8, 1^0.75 = 1: exactly, up to the coin's 32 bits.
    assert!((share(0) - 27.0 / 36.0).abs() < 1e-9);
    assert!((share(1) - 8.0 / 36.0).abs() < 1e-9);
    assert!((share(2) - 1.0 / 36.0).abs() < 1e-9);
    // Sampled: slot uniform, then the coin.
    let mut rng = strads_ap_examples::word2vec::SentenceRng::new(1, 0, 0);
    let mut hits = [0usize; 3];
    for _ in 0..360_000 {
        let slot = rng.below(t.len());
        hits[t[slot].pick(rng.next_u64()) as usize] += 1;
    }
    assert!(
        (hits[0] as f64 / 360_000.0 - 0.75).abs() < 0.005,
        "{hits:?}"
    );
    assert!(
        (hits[2] as f64 / 360_000.0 - 1.0 / 36.0).abs() < 0.002,
        "{hits:?}"
    );
}

#[test]
fn subsampling_and_learning_rate_follow_the_c_tool() {
    // Word of count 1000 among 1e6 words, threshold 1e-3: (sqrt(1) + 1) * 1 = 2 (kept);
    // count 100_000 of 1e6: (sqrt(100) + 1) * 1000 / 100_000 = 0.11.
    let counts = [100_000, 1000, 899_000];
    let p = keep_probabilities(&counts, 1e-3);
    assert!((p[0] - 0.11).abs() < 1e-6 && p[1] >= 1.0);
    // The rate depends on the position alone and decays to lr * 1e-4.
    let lr = 0.025;
    assert_eq!(learning_rate(lr, 1, 0, 1000, 2), lr);
    let mid = learning_rate(lr, 2, 0, 1000, 2);
    assert!((mid - lr / 2.0).abs() < 1e-4);
    let last = learning_rate(lr, 2, 1000, 1000, 2);
    assert!(last >= lr * 1e-4 && last < lr * 1e-3, "{last}");
    assert_eq!(learning_rate(lr, 9, 0, 1000, 2), lr * 1e-4);
}

#[test]
fn wordsim_skips_unknown_words_and_ranks() {
    assert!((spearman(&[1.0, 1.0, 2.0], &[0.0, 0.0, 5.0]) - 1.0).abs() < 1e-12);
    let index: HashMap<String, usize> = [("a", 0), ("b", 1), ("c", 2)]
        .iter()
        .map(|(w, i)| (w.to_string(), *i))
        .collect();
    let vectors = vec![vec![1.0, 0.0], vec![0.9, 0.1], vec![0.0, 1.0]];
    let pairs = vec![
        ("a".to_string(), "b".to_string(), 9.0),
        ("a".to_string(), "c".to_string(), 1.0),
        ("b".to_string(), "c".to_string(), 2.0),
        ("a".to_string(), "zzz".to_string(), 5.0),
    ];
    let (rho, skipped) = wordsim_rho(&pairs, &index, &vectors);
    assert_eq!(skipped, 1);
    assert!((rho - 1.0).abs() < 1e-12, "{rho}");
}

#[test]
fn analogies_by_3cosadd_exclude_the_question_words() {
    let file = temp_file(
        "q.txt",
        ": section\nman king woman queen\nman king woman unknown\n",
    );
    let questions = load_analogies(&file).expect("analogies");
    assert_eq!(questions.len(), 2);
    let names = ["man", "king", "woman", "queen", "apple"];
    let index: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), i))
        .collect();
    let sample = analogy_sample(&questions, &index, 2000, 1);
    assert_eq!(sample, vec![[0, 1, 2, 3]]);
    // king - man + woman = queen; "woman" itself would score higher but is excluded.
    let vectors = vec![
        vec![1.0, 0.0, 0.0],
        vec![1.0, 1.0, 0.0],
        vec![0.0, 0.0, 1.0],
        vec![0.0, 1.0, 1.0],
        vec![1.0, -1.0, 0.0],
    ];
    assert_eq!(analogy_accuracy(&sample, &vectors), 1.0);
    let many: Vec<[String; 4]> = (0..50).map(|_| questions[0].clone()).collect();
    assert_eq!(analogy_sample(&many, &index, 10, 1).len(), 10);
}

#[test]
fn vectors_are_saved_in_the_word2vec_text_format() {
    let path = temp_file("vectors.txt", "");
    save_vectors(
        &path,
        &words(&["a", "b"]),
        &[vec![1.0, 0.5], vec![-2.0, 0.0]],
    )
    .expect("save");
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(text, "2 2\na 1 0.5\nb -2 0\n");
}

/// Small settings for the Brown runs (see the module documentation).
const SMALL: &[&str] = &[
    "--dim",
    "20",
    "--epochs",
    "3",
    "--lr",
    "0.05",
    "--window",
    "3",
    "--negative",
    "3",
    "--sample",
    "1e-4",
    "--minibatch",
    "512",
    "--analogy-sample",
    "200",
    "--seed",
    "42",
];

#[test]
fn the_twins_learn_brown_alike() {
    let (Some(brown), Some(wordsim), Some(analogies)) = (
        shared("brown/sentences.txt"),
        shared("word2vec-eval/wordsim353.tsv"),
        shared("word2vec-eval/questions-words.txt"),
    ) else {
        return;
    };
    let (brown, wordsim, analogies) = (
        brown.to_str().expect("utf-8"),
        wordsim.to_str().expect("utf-8"),
        analogies.to_str().expect("utf-8"),
    );
    let base = [
        &[
            "--data",
            brown,
            "--wordsim",
            wordsim,
            "--analogies",
            analogies,
        ][..],
        SMALL,
    ]
    .concat();
    let with = |extra: &[&'static str]| [&base[..], extra].concat();

    // One thread is the serial program (on part of the corpus, to keep it short).
    let part = with(&["--max-sentences", "4000", "--threads", "1"]);
    let serial_part = run(SERIAL, &part);
    let strads_part = run(STRADS, &part);
    assert_eq!(num(&strads_part, "threads"), 1.0);
    for key in ["wordsim_rho", "analogy_acc"] {
        assert!(
            (num(&serial_part, key) - num(&strads_part, key)).abs() < 1e-9,
            "{key}: serial {serial_part} vs strads-ap on one thread {strads_part}"
        );
    }

    // The whole corpus: the serial twin learns, two threads keep up.
    let serial = run(SERIAL, &base);
    let strads = run(STRADS, &with(&["--threads", "2"]));
    let (rs, rp) = (num(&serial, "wordsim_rho"), num(&strads, "wordsim_rho"));
    assert!(rs > 0.12, "the serial twin's WordSim rho {rs} is too low");
    assert!(
        rp >= rs - 0.02,
        "strads-ap on two threads reaches rho {rp}, the serial twin {rs}"
    );
    assert_eq!(
        num(&serial, "wordsim_skipped"),
        num(&strads, "wordsim_skipped")
    );
    assert!(num(&serial, "analogy_questions") > 0.0);
    assert!(num(&strads, "words_per_sec") > 0.0);
}
