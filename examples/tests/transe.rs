//! TransE: the loaders' errors, the twins' agreement and the serial twin's quality on UMLS.
//!
//! The UMLS tests read `../shared/data/kg/umls` and say so when it is absent. They run the
//! twins as child processes (debug builds under `cargo test`), 30 epochs each: enough for
//! the serial twin to pass the issue's bar (filtered Hits@10 ≥ 0.8; it reaches about 0.94)
//! in a few seconds. The strads-ap variants' metrics are compared with the serial twin's
//! as means over three seeds: one run's Hits@10 moves by a percent or two with the order
//! of its updates, and a parallel run's order is not fixed.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use common::{num, run_json};

use serde_json::Value;
use strads_ap_examples::transe::{
    eval_sample, evaluate, init_embedding, load_kg, rank_triple, synthetic_kg, KnownTriples, Norm,
    Triple, ENTITY_TABLE, RELATION_TABLE,
};

/// Longest a child may run.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Epochs of the UMLS runs.
const EPOCHS: &str = "30";

/// Seeds of the runs whose metrics are averaged.
const SEEDS: [&str; 3] = ["1", "2", "3"];

/// The UMLS directory, or `None` (after saying so) when the shared data is absent.
fn umls() -> Option<PathBuf> {
    common::shared_data("kg/umls", |p| p.join("train.txt").is_file())
}

/// Runs `binary` with `args` (bounded by [`TIMEOUT`]): whether it succeeded, its stdout and
/// its stderr.
fn run_raw(binary: &str, args: &[&str]) -> (bool, String, String) {
    let out = common::run_raw(binary, args, TIMEOUT);
    (out.success, out.stdout, out.stderr)
}

/// Runs a twin that must succeed and returns its JSON result line.
fn run(binary: &str, args: &[&str]) -> Value {
    run_json(binary, args, TIMEOUT).0
}

/// The mean `hits10` and `mrr` of `binary` over [`SEEDS`], on UMLS.
fn mean_metrics(binary: &str, umls: &Path, extra: &[&str]) -> (f64, f64) {
    let data = umls.to_str().expect("UTF-8 path");
    let (mut hits, mut mrr) = (0.0, 0.0);
    for seed in SEEDS {
        let mut args = vec!["--data", data, "--epochs", EPOCHS, "--seed", seed];
        args.extend_from_slice(extra);
        let r = run(binary, &args);
        assert_eq!(r["app"], "transe", "{r}");
        assert_eq!(num(&r, "epochs"), 30.0, "{r}");
        assert!(num(&r, "secs_per_epoch") > 0.0, "{r}");
        assert!(num(&r, "triples_per_sec") > 0.0, "{r}");
        hits += num(&r, "hits10");
        mrr += num(&r, "mrr");
    }
    let n = SEEDS.len() as f64;
    (hits / n, mrr / n)
}

/// A fresh temporary directory `name` with `files` (name, content), removed when the
/// returned `TempDir` drops.
fn temp_dir(name: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("strads-ap-examples-transe-{name}-"))
        .tempdir()
        .expect("create temp dir");
    for (file, content) in files {
        std::fs::write(dir.path().join(file), content).expect("write temp file");
    }
    dir
}

const TRAIN: &str = "a\tr\tb\nb\tr\tc\nc\ts\ta\n";

#[test]
fn umls_loads_with_known_sizes() {
    let Some(umls) = umls() else { return };
    let g = load_kg(&umls, 0).expect("UMLS loads");
    assert_eq!(
        (g.train.len(), g.valid.len(), g.test.len(), g.dropped),
        (5216, 652, 661, 0)
    );
    assert_eq!((g.entities.len(), g.relations.len()), (135, 46));
}

#[test]
fn a_directory_loads_in_order_of_first_appearance() {
    let dir = temp_dir(
        "good",
        &[
            ("train.txt", TRAIN),
            ("valid.txt", "a\ts\tc\n"),
            ("test.txt", "\nb\tr\ta\r\n"),
        ],
    );
    let g = load_kg(&dir, 0).expect("loads");
    assert_eq!(g.entities, ["a", "b", "c"]);
    assert_eq!(g.relations, ["r", "s"]);
    assert_eq!(
        g.test,
        [Triple {
            head: 1,
            relation: 0,
            tail: 0
        }]
    );
    assert_eq!(
        g.valid,
        [Triple {
            head: 0,
            relation: 1,
            tail: 2
        }]
    );
}

#[test]
fn malformed_line_names_file_and_line() {
    let dir = temp_dir(
        "malformed",
        &[
            ("train.txt", "a\tr\tb\na r b\n"),
            ("valid.txt", ""),
            ("test.txt", "a\tr\tb\n"),
        ],
    );
    let err = load_kg(&dir, 0).unwrap_err().to_string();
    let expected = format!("{}:2:", dir.path().join("train.txt").display());
    assert!(
        err.starts_with(&expected),
        "error `{err}` should start with `{expected}`"
    );
    assert!(
        err.contains("3 tab-separated fields"),
        "error `{err}` should say what is wrong"
    );

    let dir = temp_dir(
        "four",
        &[
            ("train.txt", TRAIN),
            ("valid.txt", ""),
            ("test.txt", "a\tr\tb\nb\tr\tc\textra\n"),
        ],
    );
    let err = load_kg(&dir, 0).unwrap_err().to_string();
    assert!(
        err.contains("test.txt:2:") && err.contains("found 4"),
        "unexpected error `{err}`"
    );
}

#[test]
fn unknown_entity_in_test_names_it_with_file_and_line() {
    let dir = temp_dir(
        "unknown",
        &[
            ("train.txt", TRAIN),
            ("valid.txt", "a\tr\tc\n"),
            ("test.txt", "a\tr\tb\n\nb\tr\tzebra\n"),
        ],
    );
    let err = load_kg(&dir, 0).unwrap_err().to_string();
    assert!(
        err.contains("test.txt:3:") && err.contains("entity `zebra`"),
        "unexpected error `{err}`"
    );
    let dir = temp_dir(
        "unknown-relation",
        &[
            ("train.txt", TRAIN),
            ("valid.txt", "a\tq\tc\n"),
            ("test.txt", "a\tr\tb\n"),
        ],
    );
    let err = load_kg(&dir, 0).unwrap_err().to_string();
    assert!(
        err.contains("valid.txt:1:") && err.contains("relation `q`"),
        "unexpected error `{err}`"
    );
}

#[test]
fn empty_or_incomplete_graphs_are_errors() {
    let dir = temp_dir(
        "empty",
        &[
            ("train.txt", "\n\n"),
            ("valid.txt", ""),
            ("test.txt", "a\tr\tb\n"),
        ],
    );
    let err = load_kg(&dir, 0).unwrap_err().to_string();
    assert!(
        err.contains("train.txt") && err.contains("no data"),
        "unexpected error `{err}`"
    );

    let dir = temp_dir("no-test", &[("train.txt", TRAIN), ("valid.txt", "")]);
    let err = load_kg(&dir, 0).unwrap_err().to_string();
    assert!(
        err.contains("test.txt is missing"),
        "unexpected error `{err}`"
    );

    let empty = temp_dir(
        "tsv",
        &[(
            "header-only.tsv",
            "head_id:token\trelation_id:token\ttail_id:token\n",
        )],
    );
    let err = load_kg(empty.path().join("header-only.tsv"), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("header-only.tsv") && err.contains("no data"),
        "unexpected error `{err}`"
    );

    let err = load_kg(empty.path().join("no-such-file.tsv"), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-file.tsv"), "unexpected error `{err}`");
}

#[test]
fn a_single_file_is_split_and_unseen_entities_left_out() {
    let mut text = String::from("head_id:token\trelation_id:token\ttail_id:token\n");
    for i in 0..400 {
        text.push_str(&format!("e{}\tr{}\te{}\n", i % 40, i % 3, (i * 7 + 1) % 40));
    }
    text.push_str("lonely\tr0\tonce\n");
    let dir = temp_dir("single", &[("kg.tsv", &text)]);
    let g = load_kg(dir.path().join("kg.tsv"), 5).expect("loads");
    assert_eq!(
        g.train.len() + g.valid.len() + g.test.len() + g.dropped,
        401
    );
    assert!(
        (240..=380).contains(&g.train.len()),
        "{} training triples",
        g.train.len()
    );
    assert_eq!(g, load_kg(dir.path().join("kg.tsv"), 5).expect("loads"));
    // A bad line of a single file names it too (line 3: the header is line 1).
    let dir = temp_dir(
        "single-bad",
        &[("kg.tsv", "h:token\tr:token\tt:token\na\tr\tb\na\tr\n")],
    );
    let err = load_kg(dir.path().join("kg.tsv"), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("kg.tsv:3:"), "unexpected error `{err}`");
}

#[test]
fn the_binaries_report_bad_input_with_file_and_line() {
    let dir = temp_dir(
        "binary",
        &[
            ("train.txt", TRAIN),
            ("valid.txt", ""),
            ("test.txt", "a\tr\tnowhere\n"),
        ],
    );
    let data = dir.path().to_str().expect("UTF-8 path");
    for binary in [
        env!("CARGO_BIN_EXE_transe-serial"),
        env!("CARGO_BIN_EXE_transe"),
    ] {
        let (ok, _, stderr) = run_raw(binary, &["--data", data, "--epochs", "1"]);
        assert!(!ok, "{binary} accepted an unknown test entity");
        assert!(
            stderr.contains("test.txt:1:") && stderr.contains("entity `nowhere`"),
            "{binary}: unexpected error output:\n{stderr}"
        );
    }
}

/// Filtered ranking: a model that puts every true tail exactly at `h + r` ranks them all
/// first, known true answers do not count against a triple, and ties count half.
#[test]
fn filtered_ranks() {
    let e = |x: f32| vec![x, 0.0];
    let entities = vec![e(0.0), e(1.0), e(2.0), e(3.0)];
    let relations = vec![vec![1.0, 0.0]];
    let t = |h, tl| Triple {
        head: h,
        relation: 0,
        tail: tl,
    };
    let g = strads_ap_examples::transe::KnowledgeGraph {
        train: vec![t(0, 1), t(1, 2)],
        valid: vec![],
        test: vec![t(2, 3), t(0, 2)],
        entities: (0..4).map(|i| i.to_string()).collect(),
        relations: vec!["next".into()],
        dropped: 0,
    };
    let known = KnownTriples::new(&g);
    // (2, next, 3): both sides exact.
    let r = rank_triple(&entities, &relations, &t(2, 3), &known, Norm::L1);
    assert_eq!((r.mrr(), r.hits10()), (1.0, 1.0));
    // (0, next, 2): the tail is sought at 1. Entity 1 scores better but (0, next, 1) is
    // known true, so it does not count; entity 0 ties (distance 1): rank 1.5. The head is
    // sought at 1: entity 1 is filtered ((1, next, 2) is known), entity 2 ties: rank 1.5.
    let r = rank_triple(&entities, &relations, &t(0, 2), &known, Norm::L2);
    assert_eq!((r.mrr(), r.hits10(), r.ranks), (1.0 / 1.5, 1.0, 2));
    // Unfiltered, entity 1 counts on both sides: rank 2.5.
    let r = rank_triple(
        &entities,
        &relations,
        &t(0, 2),
        &KnownTriples::default(),
        Norm::L2,
    );
    assert_eq!(r.mrr(), 1.0 / 2.5);
    // Everything alike: the true entity ties with the 3 others, realistic rank 2.5.
    let flat = vec![e(0.0); 4];
    let r = evaluate(
        &flat,
        &[vec![0.0, 0.0]],
        &[t(2, 3)],
        &KnownTriples::default(),
        Norm::L1,
    );
    assert_eq!(r.mrr(), 1.0 / 2.5);
}

#[test]
fn synthetic_graph_and_initial_model() {
    let g = synthetic_kg(900, 10, 20_000, 7);
    assert!(
        !g.test.is_empty() && g.dropped < 200,
        "{} dropped",
        g.dropped
    );
    let known = KnownTriples::new(&g);
    let sample = eval_sample(&g.test, 200, 7);
    assert_eq!(sample.len(), 200);
    // An untrained model ranks at random: MRR far below 1, Hits@10 about 10/900.
    let entities: Vec<Vec<f32>> = (0..900)
        .map(|i| init_embedding(7, ENTITY_TABLE, i, 16))
        .collect();
    let relations: Vec<Vec<f32>> = (0..10)
        .map(|i| init_embedding(7, RELATION_TABLE, i, 16))
        .collect();
    let r = evaluate(&entities, &relations, &sample, &known, Norm::L1);
    assert!(
        r.mrr() < 0.1 && r.hits10() < 0.1,
        "mrr {} hits10 {}",
        r.mrr(),
        r.hits10()
    );
}

/// One worker in a world of one runs the loop in order: the serial twin's model.
#[test]
fn strads_ap_on_one_thread_is_the_serial_program() {
    let Some(umls) = umls() else { return };
    let data = umls.to_str().expect("UTF-8 path");
    let args = ["--data", data, "--epochs", "10", "--threads", "1"];
    let serial = run(env!("CARGO_BIN_EXE_transe-serial"), &args);
    let strads = run(env!("CARGO_BIN_EXE_transe"), &args);
    assert_eq!(num(&strads, "threads"), 1.0, "{strads}");
    assert_eq!(num(&serial, "hits10"), num(&strads, "hits10"));
    let (s, p) = (num(&serial, "mrr"), num(&strads, "mrr"));
    assert!((s - p).abs() <= 1e-9 * s, "mrr: serial {s}, strads-ap {p}");
}

/// The serial twin's mean `(hits10, mrr)` over [`SEEDS`] on UMLS, computed once for all
/// the tests that compare with it.
fn serial_baseline(umls: &Path) -> (f64, f64) {
    static BASELINE: OnceLock<(f64, f64)> = OnceLock::new();
    *BASELINE.get_or_init(|| mean_metrics(env!("CARGO_BIN_EXE_transe-serial"), umls, &[]))
}

/// A turn for the two-thread runs whose results are compared with the serial twin's: one
/// at a time. Hybrid's result depends on how its workers interleave, and several such runs
/// at once on a small machine starve each other's workers (a worker that stalls merges its
/// update onto values that moved on meanwhile): Hits@10 then drifts by up to 2%.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Asserts that the strads-ap twin with two threads and `variant` reaches, averaged over
/// [`SEEDS`], a Hits@10 within `bar` (a fraction) of the serial twin's.
fn matches_serial(variant: &[&str], bar: f64) {
    let Some(umls) = umls() else { return };
    let _turn = one_at_a_time();
    let (serial_hits, serial_mrr) = serial_baseline(&umls);
    let mut extra = vec!["--threads", "2"];
    extra.extend_from_slice(variant);
    let (hits, mrr) = mean_metrics(env!("CARGO_BIN_EXE_transe"), &umls, &extra);
    let rel = (hits - serial_hits).abs() / serial_hits;
    assert!(
        rel <= bar,
        "{variant:?}: strads-ap Hits@10 {hits} is {:.2}% off the serial {serial_hits} \
         (MRR {mrr} vs {serial_mrr}; the bar is {:.1}%)",
        rel * 100.0,
        bar * 100.0
    );
}

/// The issue's bar: the serial twin reaches filtered Hits@10 ≥ 0.8 on UMLS.
#[test]
fn umls_serial_twin_reaches_hits10_of_0_8() {
    let Some(umls) = umls() else { return };
    let (hits, mrr) = serial_baseline(&umls);
    assert!(hits >= 0.8, "serial Hits@10 {hits} is below 0.8");
    assert!(mrr >= 0.4, "serial MRR {mrr} is below 0.4");
}

/// The default: relation rows relaxed, entity rows planned (serializable).
#[test]
fn umls_relaxed_relations_match_serial() {
    matches_serial(&["--relaxed", "relations"], 0.02);
}

/// `sync_for!` in Hybrid mode over mini-batches of 256 triples. Hybrid is asynchronous
/// by design (a worker merges its mini-batch's change onto whatever the masters hold by
/// then), so its result depends on how the machine schedules the workers, and more so
/// in this debug build, where a mini-batch takes long enough to be cut by the scheduler.
/// Measured (the debug binaries, seeds 1-3 averaged, 8 runs each): 0.27-1.29% below the
/// serial twin on an idle machine, 0.30-1.66% beside two CPU hogs, and once 2.23% in a
/// run of `.ci/run` beside one. The bar is 3%; `umls_relaxed_relations_match_serial` (planned,
/// serializable entity rows) keeps 2%.
#[test]
fn umls_hybrid_matches_serial() {
    matches_serial(&["--sync", "hybrid"], 0.03);
}

/// Everything relaxed: workers merge every eighth of an epoch, which costs UMLS about
/// 1.5% of Hits@10 (more on larger graphs), so only a sane level is required here.
#[test]
fn umls_relaxed_all_learns() {
    let Some(umls) = umls() else { return };
    let _turn = one_at_a_time();
    let data = umls.to_str().expect("UTF-8 path");
    let args = [
        "--data",
        data,
        "--epochs",
        EPOCHS,
        "--threads",
        "2",
        "--relaxed",
        "all",
    ];
    let r = run(env!("CARGO_BIN_EXE_transe"), &args);
    assert_eq!(
        (r["sync"].as_str(), r["relaxed"].as_str()),
        (Some("async"), Some("all"))
    );
    assert!(num(&r, "hits10") >= 0.85, "{r}");
}

/// The hybrid variant's body (`sync_for!`, one triple at a time inside the mini-batch) is
/// the serial body too.
#[test]
fn hybrid_body_is_the_serial_body() {
    let body = |file: &str, begin: &str, end: &str| -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/bin")
            .join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let start = text
            .find(begin)
            .unwrap_or_else(|| panic!("{file}: no `{begin}`"))
            + begin.len();
        let stop = text
            .find(end)
            .unwrap_or_else(|| panic!("{file}: no `{end}`"));
        text[start..stop]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect()
    };
    let serial = body(
        "transe-serial.rs",
        "// strads-ap: body begin",
        "// strads-ap: body end",
    );
    let hybrid = body(
        "transe.rs",
        "// strads-ap: hybrid body begin",
        "// strads-ap: hybrid body end",
    );
    assert!(!serial.is_empty());
    assert_eq!(
        serial, hybrid,
        "the hybrid body of transe.rs differs from the serial body"
    );
}
