//! The runtime's modules form layers: no import circle between its top-level modules, and
//! the edges the architecture forbids are absent (see `docs/architecture.md`).
//!
//! An edge `a -> b` is a line of code (not a comment) in module `a` that names `crate::b`
//! (or `super::b` from a file directly under `src/`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graphmap::DiGraphMap;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("the runtime's sources") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/engine/async_for/mod.rs` →
/// `engine`, `src/sync.rs` → `sync`), or `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.trim_end_matches(".rs").to_string();
    (name != "lib").then_some(name)
}

/// The crate-level modules each top-level module's code names.
fn module_edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = module_of(&src, file) else {
            continue;
        };
        let text = fs::read_to_string(file).expect("a source file");
        let named = edges.entry(from.clone()).or_default();
        for line in text.lines().map(str::trim_start) {
            if line.starts_with("//") {
                continue;
            }
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if modules.contains(&name) && name != from {
                    named.insert(name);
                }
            }
        }
    }
    edges
}

#[test]
fn the_runtime_has_no_import_circle() {
    let edges = module_edges();
    let mut graph = DiGraphMap::<&str, ()>::new();
    for (from, tos) in &edges {
        graph.add_node(from);
        for to in tos {
            graph.add_edge(from, to, ());
        }
    }
    let circles: Vec<Vec<&str>> = tarjan_scc(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .collect();
    assert!(
        circles.is_empty(),
        "modules that import each other (directly or around a circle): {circles:?}\n\
         edges: {edges:#?}"
    );
}

#[test]
fn the_forbidden_edges_are_absent() {
    let edges = module_edges();
    let forbidden = [
        ("dds", "engine"),
        ("dds", "checkpoint"),
        ("cluster", "checkpoint"),
        ("store", "transport"),
        ("store", "dds"),
        ("access", "engine"),
        ("access", "dds"),
        ("plan", "engine"),
        ("recon", "engine"),
        ("wire", "transport"),
    ];
    for (from, to) in forbidden {
        let named = edges.get(from).cloned().unwrap_or_default();
        assert!(
            !named.contains(to),
            "`{from}` must not import `{to}` (it names: {named:?})"
        );
    }
    // The layers the rules above speak of exist: a renamed module fails here, not
    // silently above.
    for module in [
        "access",
        "checkpoint",
        "cluster",
        "dds",
        "engine",
        "plan",
        "store",
    ] {
        assert!(edges.contains_key(module), "no module `{module}`");
    }
}

#[test]
fn the_edge_finder_sees_code_and_skips_comments() {
    let edges = module_edges();
    // The engines use the planner in code, and the planner's docs mention the engine
    // only in comments.
    assert!(edges["engine"].contains("plan"));
    assert!(edges["engine"].contains("dds"));
    assert!(!edges["plan"].contains("engine"));
}

#[test]
fn only_the_pipeline_names_the_checkpoints() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join("engine");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let naming: Vec<String> = files
        .iter()
        .filter(|f| {
            fs::read_to_string(f)
                .expect("a source file")
                .lines()
                .map(str::trim_start)
                .any(|l| !l.starts_with("//") && l.contains("crate::checkpoint"))
        })
        .map(|f| {
            f.strip_prefix(&src)
                .expect("under engine")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(naming, vec!["pipeline.rs".to_string()]);
}
