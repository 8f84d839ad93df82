//! Each strads-ap example's loop body is textually the serial twin's loop body: the text
//! between `// strads-ap: body begin` and `// strads-ap: body end` must be equal in both
//! files once all whitespace is removed.

use std::path::Path;

const BEGIN: &str = "// strads-ap: body begin";
const END: &str = "// strads-ap: body end";

/// The text between the markers of `file` (in `src/bin/`), with all whitespace removed.
fn body(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/bin")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let count = |marker: &str| text.matches(marker).count();
    assert_eq!(
        (count(BEGIN), count(END)),
        (1, 1),
        "{} must contain exactly one `{BEGIN}` line and one `{END}` line",
        path.display()
    );
    let start = text.find(BEGIN).expect("counted") + BEGIN.len();
    let end = text.find(END).expect("counted");
    assert!(
        start <= end,
        "{}: `{END}` comes before `{BEGIN}`",
        path.display()
    );
    let body: String = text[start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    assert!(
        !body.is_empty(),
        "{}: the loop body between the markers is empty",
        path.display()
    );
    body
}

fn assert_twins(serial: &str, strads: &str) {
    let (a, b) = (body(serial), body(strads));
    if a != b {
        let at = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        let context = |s: &str| {
            s.chars()
                .skip(at.saturating_sub(20))
                .take(60)
                .collect::<String>()
        };
        panic!(
            "the loop bodies of {serial} and {strads} differ (whitespace removed) at character \
             {at}:\n  {serial}: ...{}...\n  {strads}: ...{}...",
            context(&a),
            context(&b)
        );
    }
}

#[test]
fn sgdmf_body_is_the_serial_body() {
    assert_twins("sgdmf-serial.rs", "sgdmf.rs");
}

#[test]
fn mlr_body_is_the_serial_body() {
    assert_twins("mlr-serial.rs", "mlr.rs");
}

#[test]
fn lda_body_is_the_serial_body() {
    assert_twins("lda-serial.rs", "lda.rs");
}

#[test]
fn transe_body_is_the_serial_body() {
    assert_twins("transe-serial.rs", "transe.rs");
}

#[test]
fn word2vec_body_is_the_serial_body() {
    assert_twins("word2vec-serial.rs", "word2vec.rs");
}

#[test]
fn lasso_body_is_the_serial_body() {
    assert_twins("lasso-serial.rs", "lasso.rs");
}
