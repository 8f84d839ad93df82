//! The docs keep their promises: the guide's prose fits in two pages, and every Rust code
//! block in `docs/` is compiled (by the doc-tests of `src/lib.rs`).

use std::path::{Path, PathBuf};

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

/// The lines of `text` outside code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut inside = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                inside = !inside;
                return false;
            }
            !inside
        })
        .collect()
}

/// The info strings of the code blocks of `text` (`rust`, `text`, `toml`, ...).
fn fences(text: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            if !inside {
                out.push(info.trim().to_string());
            }
            inside = !inside;
        }
    }
    out
}

#[test]
fn the_guide_has_at_most_1000_words_of_prose() {
    let text = std::fs::read_to_string(docs_dir().join("guide.md")).unwrap();
    // Prose: outside code blocks and tables.
    let words: usize = prose_lines(&text)
        .iter()
        .filter(|line| !line.trim_start().starts_with('|'))
        .map(|line| line.split_whitespace().count())
        .sum();
    assert!(
        words <= 1000,
        "docs/guide.md has {words} words of prose; the limit is 1000"
    );
    assert!(
        words >= 300,
        "docs/guide.md has only {words} words: is it still the guide?"
    );
}

#[test]
fn every_rust_block_in_docs_is_compiled() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(docs_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        for info in fences(&text) {
            // An untagged block would be compiled as Rust by rustdoc: say what it is.
            assert!(
                !info.is_empty(),
                "docs/{name}: a code block without a language; tag it rust, text, sh or toml"
            );
            let rust = info.split(',').next() == Some("rust");
            assert!(
                !(rust && info.contains("ignore")),
                "docs/{name}: a Rust block marked `{info}` is not compiled"
            );
        }
        if fences(&text).iter().any(|f| f.starts_with("rust")) {
            let include = format!("include_str!(\"../../docs/{name}\")");
            assert!(
                lib.contains(&include),
                "docs/{name} has Rust blocks but src/lib.rs does not compile them ({include})"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "only {checked} files of docs/ have Rust blocks"
    );
}
