//! The diagnoses on the conversion zoo: every program whose loop needs a change to scale is
//! told which tables to change and how; the others are not told their plan leaves workers
//! idle or that every call is a first call.
//!
//! Whether a loop's fixed costs are too high depends on the machine (a loaded test machine
//! or a debug build moves the share of time in loop bodies), so this test sets
//! `STRADS_DIAGNOSE_BUSY=1`, which reports `fixed-costs` for every loop whatever its timing,
//! and checks what the message says. The timing threshold itself is tested, triggered and
//! not, in `strads-ap/tests/diagnose.rs`. Only one test of this binary runs loops, so the
//! variable is set before any loop runs and no other test depends on it.

use strads_ap::{Diagnosis, Finding, LoopStats};
use strads_ap_examples::zoo::{self, Run, PROGRAMS};

/// What a program's diagnoses must say: a finding (one of several, where timing decides
/// which), tables it must name, and words its fix must contain.
struct Expect {
    program: &'static str,
    findings: &'static [Finding],
    tables: &'static [&'static str],
    fix: &'static str,
}

/// The programs that need a change to their loops with today's planner, and the change.
const NEEDS_A_CHANGE: &[Expect] = &[
    // A table of negatives made afresh every epoch: no plan can be kept (the loop runs
    // with element locks), and the diagnosis names the table.
    Expect {
        program: "bpr",
        findings: &[Finding::AlwaysFirstCall],
        tables: &["negs"],
        fix: "make `negs` once",
    },
    // A bias every task reads and writes: one component. (The epoch's loss is a
    // reduction, left out of the plan.)
    Expect {
        program: "fm",
        findings: &[Finding::IdleWorkers],
        tables: &["w0"],
        fix: "relaxed",
    },
    // The same, plus hot tokens in a string-keyed map.
    Expect {
        program: "logreg",
        findings: &[Finding::IdleWorkers],
        tables: &["bias", "weights"],
        fix:
            "declare `weights` relaxed where it is made (`DMap::from_map(m)?.relaxed(Relaxed::Sum)`",
    },
    // Gauss-Seidel: tasks read the ranks others write, which chains them. Its workers
    // are busy under half the time: by the timings, the loop keeps its workers (and the
    // fixed costs are diagnosed) or runs on one worker (and that is).
    Expect {
        program: "pagerank",
        findings: &[Finding::FixedCosts, Finding::OneWorker],
        tables: &["rank"],
        fix: "Jacobi",
    },
];

/// The strads-ap twin's loop figures for `program` (sites in its own source file).
fn stats_of(program: &str) -> Vec<LoopStats> {
    let file = format!("zoo/{}.rs", program.replace('-', "_"));
    strads_ap::loop_stats()
        .into_iter()
        .filter(|s| s.site.contains(&file))
        .collect()
}

fn show(diagnoses: &[&Diagnosis]) -> String {
    diagnoses
        .iter()
        .map(|d| format!("\n  {}", d.message))
        .collect()
}

#[test]
fn every_zoo_program_that_needs_a_change_is_told_which() {
    std::env::set_var("STRADS_DIAGNOSE_BUSY", "1");
    for p in PROGRAMS {
        // Small sizes (as in `tests/zoo.rs`), four calls: the first plans (its plan made
        // beside the driver, which waits for it), the second warms the workers up, the
        // last two are ordinary calls whose costs are looked at.
        let scale = match p.name {
            "biased-mf" | "mf-small" => 0.05,
            "pegasos" => 0.04,
            "mf-strings" | "kmeans" => 0.2,
            "transe-fb" => 0.1,
            _ => 0.02,
        };
        let run = Run {
            epochs: Some(4),
            seed: 1,
            threads: 2,
            scale,
            wait_for_plans: true,
            ..Run::default()
        };
        let outcome = (p.strads)(&run).unwrap_or_else(|e| panic!("{}: {e:#}", p.name));
        let stats = stats_of(p.name);
        assert!(!stats.is_empty(), "{}: no loop figures", p.name);
        let diagnoses: Vec<&Diagnosis> = stats.iter().flat_map(|s| &s.diagnoses).collect();
        assert_eq!(
            outcome.diagnoses.len(),
            diagnoses.len(),
            "{}: the outcome carries the diagnoses",
            p.name
        );
        match NEEDS_A_CHANGE.iter().find(|e| e.program == p.name) {
            Some(expect) => {
                let d = diagnoses
                    .iter()
                    .find(|d| expect.findings.contains(&d.finding))
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: no `{}` diagnosis; it got:{}",
                            p.name,
                            expect.findings[0].name(),
                            show(&diagnoses)
                        )
                    });
                for table in expect.tables {
                    assert!(
                        d.tables.iter().any(|t| t == table),
                        "{}: the diagnosis does not name `{table}`:\n  {}",
                        p.name,
                        d.message
                    );
                    assert!(
                        d.message.contains(&format!("`{table}`")),
                        "{}: the message does not name `{table}`:\n  {}",
                        p.name,
                        d.message
                    );
                }
                assert!(
                    d.fix.contains(expect.fix),
                    "{}: the fix does not say `{}`:\n  {}",
                    p.name,
                    expect.fix,
                    d.message
                );
                if d.finding == Finding::IdleWorkers {
                    let hottest = d.hot_keys.first().expect("idle workers name hot keys");
                    assert!(
                        hottest.share > 0.9 && expect.tables.contains(&hottest.table.as_str()),
                        "{}: the hottest key is {hottest:?}",
                        p.name
                    );
                }
            }
            None => {
                let wrong: Vec<&Diagnosis> = diagnoses
                    .iter()
                    .copied()
                    .filter(|d| {
                        matches!(d.finding, Finding::IdleWorkers | Finding::AlwaysFirstCall)
                    })
                    .collect();
                assert!(
                    wrong.is_empty(),
                    "{}: its loops need no change, yet:{}",
                    p.name,
                    show(&wrong)
                );
            }
        }
    }
    let names: Vec<&str> = PROGRAMS.iter().map(|p| p.name).collect();
    for e in NEEDS_A_CHANGE {
        assert!(
            names.contains(&e.program),
            "`{}` is not in the zoo",
            e.program
        );
    }
}

#[test]
fn the_zoo_program_lookup_names_the_zoo() {
    let Err(err) = zoo::program("svd") else {
        panic!("`svd` is not in the zoo")
    };
    let err = err.to_string();
    assert!(
        err.contains("biased-mf") && err.contains("transe-fb"),
        "{err}"
    );
}
