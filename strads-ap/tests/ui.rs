//! Mistakes in loop bodies give spanned compile errors that say what to do.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
