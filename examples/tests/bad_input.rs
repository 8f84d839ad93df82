//! The bad-input corpus: a careless user's files and flags, run through the real example
//! binaries. Every case must end with a non-zero exit and an error that names the file,
//! the line (where a line is at fault) and the problem, or, where the input is fine but
//! unusual (a UTF-8 byte-order mark), run and see all of the data. No case may panic,
//! abort, hang or report a diverged model as a result.
//!
//! Each child runs under `ulimit -v` (4 GiB of address space), so an attempt to allocate
//! tens of gigabytes fails at once instead of swamping the machine, and under a timeout
//! after which it is killed and the case counts as a hang.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a case may run (debug binaries, tiny files, one epoch).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Address space of a child, in KiB (`ulimit -v`).
const ADDRESS_SPACE_KIB: u64 = 4 << 20;

/// What a case must do.
enum Expect {
    /// Fail with a non-zero exit, stderr containing every one of these strings.
    Error(Vec<String>),
    /// Succeed, stderr or stdout containing this string (all of the data was seen).
    Success(String),
}

/// One careless run: a binary, its arguments (`{DIR}` is the case's directory), extra
/// environment, files written into the directory first, and what must happen.
struct Case {
    name: &'static str,
    binary: &'static str,
    args: Vec<&'static str>,
    env: Vec<(&'static str, &'static str)>,
    files: Vec<(&'static str, Vec<u8>)>,
    expect: Expect,
}

/// How a case ended.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// As expected.
    Clean,
    /// A panic, or an abort (a failed allocation, a signal).
    Panic,
    /// Killed after [`TIMEOUT`].
    Hang,
    /// Ended without a panic but not as expected (exit 0 on bad input, an error that does
    /// not say where or what).
    Wrong,
}

fn case(name: &'static str, binary: &'static str, args: &[&'static str]) -> Case {
    Case {
        name,
        binary,
        args: args.to_vec(),
        env: Vec::new(),
        files: Vec::new(),
        expect: Expect::Error(Vec::new()),
    }
}

impl Case {
    fn file(mut self, name: &'static str, content: impl Into<Vec<u8>>) -> Self {
        self.files.push((name, content.into()));
        self
    }

    fn env(mut self, key: &'static str, value: &'static str) -> Self {
        self.env.push((key, value));
        self
    }

    fn error(mut self, needles: &[&str]) -> Self {
        self.expect = Expect::Error(needles.iter().map(|s| s.to_string()).collect());
        self
    }

    fn success(mut self, needle: &str) -> Self {
        self.expect = Expect::Success(needle.to_string());
        self
    }
}

/// `n` lines of `user item rating` with ratings 1..=5, users and items below 5.
fn ratings(n: usize) -> String {
    (0..n)
        .map(|k| format!("{} {} {}\n", k % 5, (k * 3) % 5, 1 + k % 5))
        .collect()
}

/// A small libsvm file of two classes.
fn libsvm(n: usize) -> String {
    (0..n)
        .map(|k| {
            format!(
                "{} 1:{} 2:{}\n",
                k % 2,
                (k % 7) as f32 / 7.0,
                (k % 3) as f32
            )
        })
        .collect()
}

/// A small LDA-C file over 4 words.
fn ldac(n: usize) -> String {
    (0..n)
        .map(|k| format!("2 {}:2 {}:1\n", k % 4, (k + 1) % 4))
        .collect()
}

/// Tab-separated triples over a handful of entities and two relations.
fn triples(n: usize) -> String {
    (0..n)
        .map(|k| format!("e{}\tr{}\te{}\n", k % 6, k % 2, (k + 1) % 6))
        .collect()
}

fn with_bom(text: &str) -> Vec<u8> {
    let mut out = "\u{feff}".as_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

fn cases() -> Vec<Case> {
    let sgdmf = env!("CARGO_BIN_EXE_sgdmf");
    let sgdmf_serial = env!("CARGO_BIN_EXE_sgdmf-serial");
    let mlr = env!("CARGO_BIN_EXE_mlr");
    let mlr_serial = env!("CARGO_BIN_EXE_mlr-serial");
    let lda = env!("CARGO_BIN_EXE_lda");
    let lda_serial = env!("CARGO_BIN_EXE_lda-serial");
    let transe = env!("CARGO_BIN_EXE_transe");
    let transe_serial = env!("CARGO_BIN_EXE_transe-serial");
    let word2vec_serial = env!("CARGO_BIN_EXE_word2vec-serial");
    let zoo = env!("CARGO_BIN_EXE_zoo");
    let data = |file: &'static str| -> Vec<&'static str> { vec!["--data", file] };
    let one = ["--epochs", "1", "--threads", "2"];
    let args = |file: &'static str, more: &[&'static str]| -> Vec<&'static str> {
        let mut a = data(file);
        a.extend_from_slice(&one);
        a.extend_from_slice(more);
        a
    };
    let mut big_rating = ratings(20);
    big_rating.insert_str(0, "0 0 3\n1 1 1e38\n");
    let bad_utf8 = [b"0 0 3\n1 1 \xff\xfe\n".as_slice(), ratings(20).as_bytes()].concat();
    let w2v = |file: &'static str| -> Vec<&'static str> {
        let mut a = args(
            file,
            &["--min-count", "1", "--dim", "4", "--analogy-sample", "0"],
        );
        a.extend_from_slice(&["--wordsim", "{DIR}/pairs.tsv"]);
        a
    };
    vec![
        // 1. A libsvm feature index of u32::MAX: 17 GB of weights; a u32 wrap in remapping.
        case(
            "libsvm index 4294967295 (mlr)",
            mlr,
            &args("{DIR}/huge.libsvm", &[]),
        )
        .file("huge.libsvm", format!("1 4294967295:1\n{}", libsvm(20)))
        .error(&["huge.libsvm:1", "4294967295"]),
        case(
            "libsvm index 4294967295 (mlr-serial)",
            mlr_serial,
            &args("{DIR}/huge.libsvm", &[]),
        )
        .file("huge.libsvm", format!("1 4294967295:1\n{}", libsvm(20)))
        .error(&["huge.libsvm:1", "4294967295"]),
        case(
            "libsvm 0-based index wraps (mlr-serial)",
            mlr_serial,
            &args("{DIR}/wrap.libsvm", &[]),
        )
        .file(
            "wrap.libsvm",
            format!("1 0:1\n0 4294967295:1\n{}", libsvm(20)),
        )
        .error(&["wrap.libsvm:2", "4294967295"]),
        case(
            "libsvm of 3000 real-valued labels (mlr)",
            mlr,
            &args("{DIR}/reg.libsvm", &[]),
        )
        .file(
            "reg.libsvm",
            (0..3000)
                .map(|k| format!("{k}.5 {}:1\n", 1 + k * 160))
                .collect::<String>(),
        )
        .error(&["reg.libsvm", "3000 classes", "is the label column a class?"]),
        case(
            "libsvm value 1e38 (mlr)",
            mlr,
            &args("{DIR}/big.libsvm", &[]),
        )
        .file("big.libsvm", format!("{}1 1:1e38\n", libsvm(20)))
        .error(&["big.libsvm:21", "1e38"]),
        // 2. LDA-C with a huge word id or count.
        case(
            "LDA-C word id 4000000000 (lda)",
            lda,
            &args("{DIR}/id.ldac", &["--topics", "2"]),
        )
        .file("id.ldac", format!("{}1 4000000000:1\n", ldac(5)))
        .error(&["id.ldac:6", "4000000000"]),
        case(
            "LDA-C word id 4000000000 (lda-serial)",
            lda_serial,
            &args("{DIR}/id.ldac", &["--topics", "2"]),
        )
        .file("id.ldac", format!("{}1 4000000000:1\n", ldac(5)))
        .error(&["id.ldac:6", "4000000000"]),
        case(
            "LDA-C count 4000000000 (lda-serial)",
            lda_serial,
            &args("{DIR}/count.ldac", &["--topics", "2"]),
        )
        .file("count.ldac", format!("{}1 0:4000000000\n", ldac(5)))
        .error(&["count.ldac:6", "4000000000"]),
        case(
            "LDA-C count 4000000000 (lda)",
            lda,
            &args("{DIR}/count.ldac", &["--topics", "2"]),
        )
        .file("count.ldac", format!("{}1 0:4000000000\n", ldac(5)))
        .error(&["count.ldac:6", "4000000000"]),
        // 3. A rating of 1e38 trains to NaN.
        case("rating 1e38 (sgdmf)", sgdmf, &args("{DIR}/big.txt", &[]))
            .file("big.txt", big_rating.clone())
            .error(&["big.txt:2", "1e38"]),
        case(
            "rating 1e38 (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}/big.txt", &[]),
        )
        .file("big.txt", big_rating.clone())
        .error(&["big.txt:2", "1e38"]),
        case(
            "diverging learning rate (sgdmf)",
            sgdmf,
            &args("{DIR}/r.txt", &["--lr", "1000"]),
        )
        .file("r.txt", ratings(200))
        .error(&["train_rmse", "diverged"]),
        case(
            "diverging learning rate (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}/r.txt", &["--lr", "1000"]),
        )
        .file("r.txt", ratings(200))
        .error(&["train_rmse", "diverged"]),
        // 4. A UTF-8 byte-order mark: never a header, never part of a token or a name.
        case(
            "BOM before ratings (sgdmf)",
            sgdmf,
            &args("{DIR}/bom.txt", &[]),
        )
        .file("bom.txt", with_bom(&format!("9 0 5\n{}", ratings(20))))
        .success("6 users"),
        case(
            "BOM before ratings (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}/bom.txt", &[]),
        )
        .file("bom.txt", with_bom(&format!("9 0 5\n{}", ratings(20))))
        .success("6 users"),
        case(
            "BOM before libsvm (mlr-serial)",
            mlr_serial,
            &args("{DIR}/bom.libsvm", &[]),
        )
        .file("bom.libsvm", with_bom(&libsvm(20)))
        .success("2 classes"),
        case(
            "BOM before LDA-C (lda-serial)",
            lda_serial,
            &args("{DIR}/bom.ldac", &["--topics", "2"]),
        )
        .file("bom.ldac", with_bom(&ldac(5)))
        .success("15 tokens"),
        case(
            "BOM before triples (transe-serial)",
            transe_serial,
            &args("{DIR}/bom.kg", &["--dim", "4"]),
        )
        .file("bom.kg", with_bom(&triples(60)))
        .success("6 entities"),
        case(
            "BOM before a corpus (word2vec-serial)",
            word2vec_serial,
            &w2v("{DIR}/bom.txt"),
        )
        .file("bom.txt", with_bom(&"a b c\nb c a\n".repeat(10)))
        .file("pairs.tsv", "a\tb\t1\nb\tc\t2\na\tc\t3\n")
        .success("3 in the vocabulary"),
        // 5. Flags and environment out of range.
        case(
            "--threads 100000",
            sgdmf,
            &["--threads", "100000", "--ratings", "100"],
        )
        .error(&["--threads", "100000", "1024"]),
        case("--epochs 0", sgdmf, &["--epochs", "0", "--ratings", "100"])
            .error(&["--epochs", "at least 1"]),
        case(
            "--epochs 0 (serial)",
            mlr_serial,
            &["--epochs", "0", "--samples", "100"],
        )
        .error(&["--epochs", "at least 1"]),
        case(
            "STRADS_THREADS=100000",
            sgdmf,
            &["--epochs", "1", "--ratings", "100"],
        )
        .env("STRADS_THREADS", "100000")
        .error(&["STRADS_THREADS", "100000", "1024"]),
        case(
            "STRADS_THREADS=0",
            mlr,
            &["--epochs", "1", "--samples", "100"],
        )
        .env("STRADS_THREADS", "0")
        .error(&["STRADS_THREADS", "at least"]),
        case(
            "--topics 1000000000",
            lda_serial,
            &["--epochs", "1", "--topics", "1000000000", "--docs", "10"],
        )
        .error(&["--topics", "1000000000"]),
        case(
            "--rank 100000000",
            sgdmf_serial,
            &["--epochs", "1", "--rank", "100000000", "--ratings", "100"],
        )
        .error(&["--rank", "100000000"]),
        case(
            "--users 10000000000",
            sgdmf_serial,
            &["--epochs", "1", "--users", "10000000000"],
        )
        .error(&["--users", "10000000000"]),
        case(
            "zoo --threads 100000",
            zoo,
            &["biased-mf", "--threads", "100000"],
        )
        .error(&["--threads", "100000"]),
        case("zoo --epochs 0", zoo, &["biased-mf", "--epochs", "0"])
            .error(&["--epochs", "at least 1"]),
        case("zoo --scale 1e9", zoo, &["kmeans", "--scale", "1e9"]).error(&["--scale", "1e9"]),
        case(
            "zoo --data for a program that reads none",
            zoo,
            &["kmeans", "--data", "{DIR}/points.txt", "--epochs", "1"],
        )
        .file("points.txt", "1 2\n")
        .error(&["kmeans reads no data", "points.txt"]),
        // More: empty, missing, short lines, bad bytes, negative ids, a directory.
        case(
            "empty ratings file (sgdmf)",
            sgdmf,
            &args("{DIR}/empty.txt", &[]),
        )
        .file("empty.txt", "")
        .error(&["empty.txt", "no data"]),
        case(
            "empty LDA-C file (lda-serial)",
            lda_serial,
            &args("{DIR}/empty.ldac", &[]),
        )
        .file("empty.ldac", "\n\n")
        .error(&["empty.ldac", "no documents"]),
        case(
            "missing file (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}/missing.txt", &[]),
        )
        .error(&["missing.txt", "No such file"]),
        case(
            "missing file (transe)",
            transe,
            &args("{DIR}/missing.kg", &[]),
        )
        .error(&["missing.kg", "No such file"]),
        case(
            "too few fields (sgdmf)",
            sgdmf,
            &args("{DIR}/short.txt", &[]),
        )
        .file("short.txt", format!("{}3 4\n", ratings(5)))
        .error(&["short.txt:6", "3 fields"]),
        case(
            "too few fields (transe-serial)",
            transe_serial,
            &args("{DIR}/short.kg", &[]),
        )
        .file("short.kg", format!("{}a\tb\n", triples(20)))
        .error(&["short.kg:21", "3 tab-separated"]),
        case(
            "non-UTF-8 bytes (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}/bytes.txt", &[]),
        )
        .file("bytes.txt", bad_utf8.clone())
        .error(&["bytes.txt:2", "UTF-8"]),
        case(
            "non-UTF-8 bytes (sgdmf)",
            sgdmf,
            &args("{DIR}/bytes.txt", &[]),
        )
        .file("bytes.txt", bad_utf8)
        .error(&["bytes.txt:2", "UTF-8"]),
        case(
            "negative user id (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}/neg.txt", &[]),
        )
        .file("neg.txt", format!("{}-1 2 3\n", ratings(5)))
        .error(&["neg.txt:6", "-1"]),
        case("negative word id (lda)", lda, &args("{DIR}/neg.ldac", &[]))
            .file("neg.ldac", format!("{}1 -3:1\n", ldac(5)))
            .error(&["neg.ldac:6", "-3"]),
        case(
            "a directory as ratings (sgdmf-serial)",
            sgdmf_serial,
            &args("{DIR}", &[]),
        )
        .error(&["is a directory"]),
        case("a directory as libsvm (mlr)", mlr, &args("{DIR}", &[])).error(&["is a directory"]),
        case(
            "a directory as a corpus (word2vec-serial)",
            word2vec_serial,
            &args("{DIR}", &[]),
        )
        .error(&["is a directory"]),
        case(
            "rating 1e38 (zoo mf-strings)",
            zoo,
            &["mf-strings", "--data", "{DIR}/big.txt", "--epochs", "1"],
        )
        .file("big.txt", big_rating)
        .error(&["big.txt:2", "1e38"]),
        case(
            "BOM before a graph (zoo pagerank)",
            zoo,
            &[
                "pagerank",
                "--data",
                "{DIR}/bom.kg",
                "--epochs",
                "1",
                "--serial",
            ],
        )
        .file("bom.kg", with_bom("a\tr\tb\nb\tr\ta\n"))
        .success("\"tasks\":2"),
    ]
}

/// A fresh directory for case `i`.
fn case_dir(i: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strads-ap-bad-input-{}-{i}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the case directory");
    dir
}

/// Runs `case` in `dir`: its verdict and what it printed.
fn run(case: &Case, dir: &Path) -> (Verdict, String) {
    for (name, content) in &case.files {
        std::fs::write(dir.join(name), content).expect("write a case file");
    }
    let dir_text = dir.display().to_string();
    let args: Vec<String> = case
        .args
        .iter()
        .map(|a| a.replace("{DIR}", &dir_text))
        .collect();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(case.binary)
        .args(&args)
        .envs(case.env.iter().copied())
        .env_remove("RUST_BACKTRACE")
        .env("STRADS_DIAGNOSE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sh");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (stdout, stderr) = (
        stdout.join().expect("stdout"),
        stderr.join().expect("stderr"),
    );
    let shown = format!(
        "$ {} {}\nstderr: {}\nstdout: {}",
        case.binary,
        args.join(" "),
        tail(&stderr),
        tail(&stdout)
    );
    let Some(status) = status else {
        return (Verdict::Hang, shown);
    };
    // A signal (an abort on a failed allocation, say) leaves no exit code.
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") || status.code().is_none() {
        return (Verdict::Panic, shown);
    }
    let verdict = match &case.expect {
        Expect::Error(needles) => {
            if !status.success() && needles.iter().all(|n| stderr.contains(n.as_str())) {
                Verdict::Clean
            } else {
                Verdict::Wrong
            }
        }
        Expect::Success(needle) => {
            if status.success()
                && (stderr.contains(needle.as_str()) || stdout.contains(needle.as_str()))
            {
                Verdict::Clean
            } else {
                Verdict::Wrong
            }
        }
    };
    (verdict, shown)
}

/// The last 600 characters of `s`.
fn tail(s: &str) -> &str {
    let mut at = s.len().saturating_sub(600);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

#[test]
fn bad_input_never_aborts_hangs_or_misleads() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut counts = [0usize; 4];
    for (i, case) in cases.iter().enumerate() {
        let dir = case_dir(i);
        let (verdict, shown) = run(case, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        counts[match verdict {
            Verdict::Clean => 0,
            Verdict::Panic => 1,
            Verdict::Hang => 2,
            Verdict::Wrong => 3,
        }] += 1;
        eprintln!("{verdict:?}: {}", case.name);
        if verdict != Verdict::Clean {
            failures.push(format!("{verdict:?}: {}\n{shown}", case.name));
        }
    }
    eprintln!(
        "{} cases: {} clean errors, {} panics, {} hangs, {} wrong",
        cases.len(),
        counts[0],
        counts[1],
        counts[2],
        counts[3]
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
