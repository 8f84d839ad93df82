//! The conversion zoo: every program's strads-ap twin has the serial loop bodies, and on
//! 2 threads its result matches the serial program's (worst of seeds 1-5, each against
//! serial at the same seed) within the program's tolerance.

use std::path::Path;

use strads_ap_examples::zoo::{self, Run, PROGRAMS};

const BEGIN: &str = "// zoo body begin: ";
const END: &str = "// zoo body end: ";

/// The loop bodies of a zoo source file by label, in order of appearance, whitespace
/// removed.
fn bodies(text: &str, file: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let label: String = after.lines().next().unwrap_or("").trim().to_string();
        let end_marker = format!("{END}{label}");
        let end = after
            .find(&end_marker)
            .unwrap_or_else(|| panic!("{file}: `{BEGIN}{label}` has no `{end_marker}`"));
        let body_start = after.find('\n').unwrap_or(0);
        let body: String = after[body_start..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        assert!(!body.is_empty(), "{file}: the body `{label}` is empty");
        out.push((label, body));
        rest = &after[end + end_marker.len()..];
    }
    out
}

#[test]
fn every_zoo_twin_has_the_serial_bodies() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/zoo");
    for p in PROGRAMS {
        let file = format!("{}.rs", p.name.replace('-', "_"));
        let text = std::fs::read_to_string(dir.join(&file))
            .unwrap_or_else(|e| panic!("cannot read src/zoo/{file}: {e}"));
        let found = bodies(&text, &file);
        assert!(!found.is_empty(), "{file} marks no loop body");
        let mut labels: Vec<&str> = found.iter().map(|(l, _)| l.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        for label in labels {
            let texts: Vec<&String> = found
                .iter()
                .filter(|(l, _)| l == label)
                .map(|(_, b)| b)
                .collect();
            assert_eq!(
                texts.len(),
                2,
                "{file}: the body `{label}` must be marked exactly twice (serial and strads-ap)"
            );
            if texts[0] != texts[1] {
                let at = texts[0]
                    .chars()
                    .zip(texts[1].chars())
                    .take_while(|(a, b)| a == b)
                    .count();
                let show = |s: &str| {
                    s.chars()
                        .skip(at.saturating_sub(20))
                        .take(60)
                        .collect::<String>()
                };
                panic!(
                    "{file}: the two `{label}` bodies differ at character {at}:\n  serial: ...{}...\n  strads-ap: ...{}...",
                    show(texts[0]),
                    show(texts[1])
                );
            }
        }
    }
}

/// The user study's stand-alone serial programs (`user-study/programs/`, outside the
/// workspace) are the zoo's serial twins: each holds its zoo program's loop bodies, so a
/// change to a zoo body that is not made to the study's copy fails here.
#[test]
fn the_user_study_programs_have_the_zoo_bodies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let studied = std::fs::read_dir(root.join("user-study/programs"))
        .expect("user-study/programs")
        .count();
    assert_eq!(
        studied, 4,
        "user-study/programs holds {studied} programs, not 4"
    );
    for name in ["biased_mf", "kmeans", "logreg", "pagerank"] {
        let zoo_file = root.join(format!("examples/src/zoo/{name}.rs"));
        let zoo_text = std::fs::read_to_string(&zoo_file).expect("zoo source");
        let study = root.join(format!("user-study/programs/{name}/src/main.rs"));
        let study_text: String = std::fs::read_to_string(&study)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", study.display()))
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let found = bodies(&zoo_text, name);
        assert!(!found.is_empty(), "{name}.rs marks no loop body");
        for (label, body) in found {
            assert!(
                study_text.contains(&body),
                "user-study/programs/{name}/src/main.rs lacks the zoo's `{label}` body"
            );
        }
    }
}

#[test]
fn the_body_check_sees_a_difference() {
    let text = "// zoo body begin: a\nx += 1;\n// zoo body end: a\n// zoo body begin: a\nx += 2;\n// zoo body end: a\n";
    let found = bodies(text, "t.rs");
    assert_eq!(found.len(), 2);
    assert_ne!(found[0].1, found[1].1);
}

/// Runs `name` serially and with strads-ap on 2 threads for seeds 1-5 at `scale` and
/// asserts the worst relative gap of the metric is within the program's tolerance.
fn matches_serial(name: &str, scale: f64, epochs: usize) {
    let program = zoo::program(name).expect("in the zoo");
    let mut worst: f64 = 0.0;
    for seed in 1..=5 {
        let run = Run {
            epochs: Some(epochs),
            seed,
            threads: 2,
            scale,
            ..Run::default()
        };
        let serial = (program.serial)(&run).unwrap_or_else(|e| panic!("{name} serial: {e:#}"));
        let strads = (program.strads)(&run).unwrap_or_else(|e| panic!("{name} strads-ap: {e:#}"));
        assert_eq!(serial.metric, strads.metric);
        assert_eq!(serial.tasks, strads.tasks, "{name}: tasks per epoch");
        assert!(
            serial.value.is_finite() && strads.value.is_finite(),
            "{name} seed {seed}: {} {} and {}",
            serial.metric,
            serial.value,
            strads.value
        );
        let gap = (strads.value - serial.value).abs() / serial.value.abs().max(1e-12);
        eprintln!(
            "{name} seed {seed}: serial {} = {:.6}, strads-ap {:.6} ({:+.3}%), strategies {:?}",
            serial.metric,
            serial.value,
            strads.value,
            100.0 * (strads.value - serial.value) / serial.value.abs().max(1e-12),
            strads.strategies
        );
        worst = worst.max(gap);
    }
    assert!(
        worst <= program.tolerance,
        "{name}: the worst gap over seeds 1-5 is {:.3}%, above {:.1}%",
        100.0 * worst,
        100.0 * program.tolerance
    );
}

#[test]
fn every_program_has_a_matching_test() {
    let text = include_str!("zoo.rs");
    for p in PROGRAMS {
        let call = format!("matches_serial(\"{}\"", p.name);
        assert!(
            text.contains(&call),
            "tests/zoo.rs has no `{call}, ..)` test"
        );
    }
}

#[test]
fn adagrad_mf_matches_serial() {
    matches_serial("adagrad-mf", 0.2, 3);
}

#[test]
fn biased_mf_matches_serial() {
    matches_serial("biased-mf", 0.05, 3);
}

#[test]
fn bpr_matches_serial() {
    matches_serial("bpr", 0.1, 3);
}

#[test]
fn fm_matches_serial() {
    matches_serial("fm", 0.02, 5);
}

#[test]
fn fm_relaxed_matches_serial() {
    matches_serial("fm-relaxed", 0.02, 5);
}

#[test]
fn fm_text_matches_serial() {
    matches_serial("fm-text", 0.02, 5);
}

#[test]
fn glove_matches_serial() {
    matches_serial("glove", 0.5, 5);
}

#[test]
fn logreg_matches_serial() {
    matches_serial("logreg", 0.02, 3);
}

#[test]
fn logreg_relaxed_matches_serial() {
    matches_serial("logreg-relaxed", 0.1, 3);
}

#[test]
fn mf_strings_matches_serial() {
    matches_serial("mf-strings", 0.2, 3);
}

#[test]
fn pagerank_matches_serial() {
    matches_serial("pagerank", 0.02, 20);
}

#[test]
fn pagerank_jacobi_matches_serial() {
    matches_serial("pagerank-jacobi", 0.02, 20);
}

#[test]
fn pegasos_matches_serial() {
    matches_serial("pegasos", 0.04, 10);
}

#[test]
fn kmeans_matches_serial() {
    matches_serial("kmeans", 0.2, 3);
}

#[test]
fn lloyd_matches_serial() {
    matches_serial("lloyd", 0.05, 3);
}

#[test]
fn mf_small_matches_serial() {
    matches_serial("mf-small", 0.05, 3);
}

#[test]
fn transe_fb_matches_serial() {
    matches_serial("transe-fb", 0.1, 3);
}
