//! The text loaders: errors name the file and line, an empty file is an error, and the
//! real MovieLens 100K file loads with its known sizes.

use std::path::PathBuf;

use strads_ap_examples::data::{load_libsvm, load_ratings};

/// A fresh file `name` with `content` in a per-process temporary directory.
fn temp_file(name: &str, content: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("strads-ap-examples-loaders-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write temp file");
    path
}

#[test]
fn ratings_load_with_header_tabs_and_one_based_ids() {
    let path = temp_file(
        "good.tsv",
        "user\titem\trating\ttimestamp\n1\t10\t4\t100\n3\t10\t2.5\t101\n\n1 20 5\n",
    );
    let r = load_ratings(&path).expect("loads");
    assert_eq!((r.users, r.items, r.ratings.len()), (2, 2, 3));
    assert_eq!(
        (r.ratings[1].user, r.ratings[1].item, r.ratings[1].rating),
        (1, 0, 2.5)
    );
    assert_eq!((r.ratings[2].user, r.ratings[2].item), (0, 1));
}

#[test]
fn malformed_rating_line_names_file_and_line() {
    let path = temp_file("bad.txt", "1 2 3\n4 5 4.5\n6 x 1\n");
    let err = load_ratings(&path).unwrap_err().to_string();
    let expected = format!("{}:3:", path.display());
    assert!(
        err.starts_with(&expected),
        "error `{err}` should start with `{expected}`"
    );
    assert!(
        err.contains("item id `x`"),
        "error `{err}` should say what is wrong"
    );

    let path = temp_file("short.txt", "1 2 3\n4 5\n");
    let err = load_ratings(&path).unwrap_err().to_string();
    assert!(
        err.contains("short.txt:2:"),
        "error `{err}` should name short.txt:2"
    );

    let path = temp_file("nan.txt", "1 2 nan\n");
    let err = load_ratings(&path).unwrap_err().to_string();
    assert!(
        err.contains("nan.txt:1:"),
        "error `{err}` should name nan.txt:1"
    );
}

#[test]
fn malformed_libsvm_line_names_file_and_line() {
    let path = temp_file("bad.svm", "1 1:0.5 2:1\n# a comment\n2 1:0.5 2=1\n");
    let err = load_libsvm(&path).unwrap_err().to_string();
    let expected = format!("{}:3:", path.display());
    assert!(
        err.starts_with(&expected),
        "error `{err}` should start with `{expected}`"
    );

    let path = temp_file("badlabel.svm", "one 1:0.5\n");
    let err = load_libsvm(&path).unwrap_err().to_string();
    assert!(
        err.contains("badlabel.svm:1:"),
        "error `{err}` should name badlabel.svm:1"
    );
}

#[test]
fn libsvm_loads_and_remaps() {
    let path = temp_file(
        "good.svm",
        "-1 1:0.5 3:1\n+1 2:2 # trailing comment\n\n-1 3:-1\n",
    );
    let s = load_libsvm(&path).expect("loads");
    assert_eq!((s.samples.len(), s.features, s.classes), (3, 3, 2));
    assert_eq!(s.samples[0].label, 0);
    assert_eq!(s.samples[1].label, 1);
    assert_eq!(s.samples[0].x, vec![(0, 0.5), (2, 1.0)]);
}

#[test]
fn empty_files_are_errors() {
    for (name, content) in [
        ("empty.txt", ""),
        ("blank.txt", "\n  \n"),
        ("header.tsv", "user item rating\n"),
    ] {
        let path = temp_file(name, content);
        let err = load_ratings(&path).unwrap_err().to_string();
        assert!(
            err.contains(name) && err.contains("no data"),
            "{name}: unexpected error `{err}`"
        );
    }
    let path = temp_file("empty.svm", "# only a comment\n");
    let err = load_libsvm(&path).unwrap_err().to_string();
    assert!(
        err.contains("empty.svm") && err.contains("no data"),
        "unexpected error `{err}`"
    );
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let path = std::env::temp_dir().join("strads-ap-examples-no-such-file.txt");
    let err = load_ratings(&path).unwrap_err().to_string();
    assert!(
        err.contains("strads-ap-examples-no-such-file.txt"),
        "unexpected error `{err}`"
    );
}

#[test]
fn movielens_100k_loads() {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/movielens-100k/ratings.tsv"
    ));
    if !path.is_file() {
        eprintln!("skipping: {} not found", path.display());
        println!("skipping: {} not found", path.display());
        return;
    }
    let r = load_ratings(&path).expect("MovieLens 100K loads");
    assert_eq!(r.ratings.len(), 100_000);
    assert_eq!(r.users, 943);
    assert_eq!(r.items, 1_682);
    assert!(r.ratings.iter().all(|x| (1.0..=5.0).contains(&x.rating)));
}

#[test]
fn fashion_mnist_loads_from_debians_package() {
    // `apt-get install dataset-fashion-mnist` (.ci/run installs it when it can).
    let dir = PathBuf::from("/usr/share/datasets/fashion-mnist");
    if !strads_ap_examples::idx::is_idx_dir(&dir) {
        eprintln!("skipping: Fashion-MNIST not installed at {}", dir.display());
        println!("skipping: Fashion-MNIST not installed at {}", dir.display());
        return;
    }
    let (train, test) = strads_ap_examples::idx::load_idx_dir(&dir).expect("Fashion-MNIST loads");
    assert_eq!((train.samples.len(), test.len()), (60_000, 10_000));
    assert_eq!((train.features, train.classes), (784, 10));
    assert!(train
        .samples
        .iter()
        .all(|s| s.label < 10 && s.x.iter().all(|&(i, v)| i < 784 && v > 0.0 && v <= 1.0)));
}
