//! Mistakes in loop bodies give spanned compile errors that say what to do.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

/// The expected errors speak of the user's code: no generated or internal name a user
/// never wrote (the task struct, the crate's private module, the engines' contexts, the
/// views a body's DDS becomes) appears in any of them, and each mistake gives one error.
#[test]
fn expected_errors_name_nothing_internal() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/ui") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "stderr") {
            continue;
        }
        seen += 1;
        let text = std::fs::read_to_string(&path).expect("an expected-output file");
        for internal in [
            "__Strads",
            "__strads",
            "__private",
            "ExecCtx",
            "Recorder",
            "RecordIndices",
            "VectorView",
            "RecordVectorView",
            "MapView",
            "LockView",
            "DirectView",
            "Fallback",
            "CaptureRefused",
        ] {
            assert!(
                !text.contains(internal),
                "{} names `{internal}`:\n{text}",
                path.display()
            );
        }
        // One error per mistake: each test file makes one mistake, except where its
        // source says how many.
        let source = std::fs::read_to_string(path.with_extension("rs")).expect("the test");
        let expected = source
            .lines()
            .find_map(|l| l.strip_prefix("// mistakes: "))
            .map_or(1, |n| {
                n.trim().parse::<usize>().expect("a count of mistakes")
            });
        let errors = text.lines().filter(|l| l.starts_with("error")).count();
        assert_eq!(
            errors,
            expected,
            "{} gives {errors} errors for {expected} mistakes:\n{text}",
            path.display()
        );
    }
    assert!(
        seen >= 9,
        "only {seen} expected-output files in {}",
        dir.display()
    );
}
