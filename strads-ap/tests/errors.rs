//! Bad input and misuse get clear errors: file and line, or call site and index.

use strads_ap::prelude::*;
use strads_ap::Error;

/// A fresh temporary directory, removed (with what the test wrote in it) when it drops.
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("strads-ap-test-{name}-"))
        .tempdir()
        .unwrap()
}

fn parse_rating(line: &str) -> Result<(u32, u32, f32), String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 3 {
        return Err(format!("expected 3 fields, found {}", f.len()));
    }
    Ok((
        f[0].parse().map_err(|e| format!("user id: {e}"))?,
        f[1].parse().map_err(|e| format!("item id: {e}"))?,
        f[2].parse().map_err(|e| format!("rating: {e}"))?,
    ))
}

#[test]
fn a_malformed_line_names_file_and_line() {
    let dir = temp_dir("malformed");
    let path = dir.path().join("ratings.txt");
    let mut text = String::new();
    for i in 0..50_000 {
        text.push_str(&format!("{} {} 3.5\n", i % 100, i % 7));
    }
    text.push_str("12 7 four\n");
    std::fs::write(&path, &text).unwrap();
    let err = read_from_file(&path, parse_rating).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Parse { line: 50_001, .. }), "{msg}");
    assert!(
        msg.contains("ratings.txt:50001: rating: invalid float literal"),
        "{msg}"
    );

    // The documented option skips it and reports it.
    let (v, report) = ReadOptions::new()
        .skip_bad_lines(true)
        .read(&path, parse_rating)
        .unwrap();
    assert_eq!(v.len(), 50_000);
    assert_eq!(report.skipped, 1);
    assert_eq!(report.first_skipped.unwrap().0, 50_001);
}

#[test]
fn line_numbers_count_headers_and_blank_lines() {
    let dir = temp_dir("header");
    let path = dir.path().join("with-header.tsv");
    std::fs::write(&path, "user item rating\n1 2 3\n\n# note\n4 5\n").unwrap();
    let err = ReadOptions::new()
        .header_lines(1)
        .comment_prefix("#")
        .read(&path, parse_rating)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("with-header.tsv:5: expected 3 fields, found 2"),
        "{err}"
    );
}

#[test]
fn an_empty_or_missing_file_is_an_error() {
    let dir = temp_dir("empty");
    let path = dir.path().join("empty.txt");
    std::fs::write(&path, "\n\n").unwrap();
    let err = read_from_file(&path, parse_rating).unwrap_err();
    assert!(matches!(err, Error::EmptyFile { .. }));
    assert!(err
        .to_string()
        .contains("empty.txt: the file has no data lines"));

    let missing = dir.path().join("missing.txt");
    let err = read_from_file(&missing, parse_rating).unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    assert!(err.to_string().contains("missing.txt"), "{err}");
}

#[test]
fn driver_side_index_errors() {
    let v = DVector::from_fn(10, |i| i as u64).unwrap();
    let err = v.get(10).unwrap_err();
    assert_eq!(
        err.to_string(),
        "DVector::get: index 10 is out of bounds for a DVector of length 10"
    );
    assert!(v.set(11, 0).is_err());
    let empty = DVector::<f32>::from_vec(Vec::new()).unwrap();
    assert!(matches!(
        empty.reduce(|a, b| a + b),
        Err(Error::Empty { .. })
    ));
}

#[test]
fn an_index_out_of_bounds_inside_a_body_names_site_variable_and_index() {
    let w = DVector::from_fn(100, |_| 0.0f32).unwrap();
    // A range past the DVector's end.
    let err = async_for!(0..101usize, |k| {
        w[k] += 1.0;
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::BodyPanicked { index: 100, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("async_for! at strads-ap/tests/errors.rs:"),
        "{msg}"
    );
    assert!(
        msg.contains("index 100 is out of bounds for DVector `w` of length 100"),
        "{msg}"
    );
}

/// In a locking run too, whatever the index: `usize::MAX` (a `-1` cast to an index) is
/// refused by its bound at a task's first access, not taken for an element the task
/// touched already.
#[test]
fn an_index_out_of_bounds_in_a_locking_run_is_refused() {
    let w = DVector::from_fn(100, |_| 0.0f32).unwrap();
    let at = DVector::from_fn(100, |k| k as i64).unwrap();
    let run = || {
        async_for!(
            0..100usize,
            |k| {
                w[at[k] as usize] += 1.0;
            },
            Opts::new()
                .threads(2)
                .recheck(true)
                .fallback(Fallback::Never)
        )
    };
    run().unwrap();
    run().unwrap();
    at.set(37, -1).unwrap();
    let err = run().unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::BodyPanicked { index: 37, .. }),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "index {} is out of bounds for DVector `w`",
            usize::MAX
        )),
        "{msg}"
    );
}

#[test]
fn a_panic_in_a_body_becomes_an_error() {
    let v = DVector::from_fn(64, |i| i as i64).unwrap();
    let err = async_for!(0..v.len(), |k| {
        if v[k] == 17 {
            panic!("bad value at {k}");
        }
    })
    .unwrap_err();
    assert!(err.to_string().contains("bad value at 17"), "{err}");
    assert!(matches!(err, Error::BodyPanicked { index: 17, .. }));
}

/// A loop over a shuffled order of its data (`data[perm[k]]`, `perm` shuffled every pass,
/// as textbook SGD writes it) leaves its plan at the second call: the error names `perm`,
/// the captured variable that changed since reconnaissance, and not those that did not
/// (`rate`), nor tables or reductions; it says to index the data by the loop index.
#[test]
fn a_shuffled_order_captured_by_the_body_is_named_when_the_plan_breaks() {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let n = 2000;
    let data = DVector::from_fn(n, |k| (k % 50) as u32).unwrap();
    let w = DVector::from_fn(50, |_| 0.0f64).unwrap();
    let mut perm: Vec<usize> = (0..n).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let rate = 0.5f64;
    let opts = Opts::new().threads(2).fallback(Fallback::Never);
    let mut failed = None;
    // Summed over the passes: its starting value changes, yet a reduction is not named.
    let mut loss = 0.0f64;
    for pass in 0..3 {
        perm.shuffle(&mut rng);
        let ran = async_for!(
            0..n,
            |k| {
                let u = data[perm[k]] as usize;
                w[u] += rate;
                loss += rate;
            },
            opts.clone()
        );
        if let Err(e) = ran {
            failed = Some(e);
            break;
        }
        assert_eq!(loss, rate * (n * (pass + 1)) as f64);
    }
    let err = failed.expect("a shuffled order leaves the plan");
    let msg = err.to_string();
    assert!(
        matches!(err, Error::AccessOutsidePlan { table: "w", .. }),
        "{msg}"
    );
    assert!(
        msg.contains("); here captured `perm` changed since reconnaissance ran"),
        "{msg}"
    );
    assert!(
        msg.contains("index the data by the loop index instead (`data[k]`)"),
        "{msg}"
    );
    for unchanged in ["`rate`", "`loss`", "`data`", "`w` changed"] {
        assert!(!msg.contains(&format!("captured {unchanged}")), "{msg}");
    }
}

/// A number the accesses follow (a phase) that changed is named, without the advice for
/// a shuffled order of the data, which a number cannot be.
#[test]
fn a_phase_captured_by_the_body_is_named_when_the_plan_breaks() {
    let n = 300;
    let w = DVector::from_fn(n, |_| 0u32).unwrap();
    let opts = Opts::new().threads(2).fallback(Fallback::Never);
    let mut failed = None;
    for phase in 0..3usize {
        let ran = async_for!(
            0..n,
            |k| {
                w[(k + phase) % 300] += 1;
            },
            opts.clone()
        );
        if let Err(e) = ran {
            failed = Some(e);
            break;
        }
    }
    let msg = failed.expect("a new phase leaves the plan").to_string();
    assert!(
        msg.contains("); here captured `phase` changed since reconnaissance ran. "),
        "{msg}"
    );
    assert!(!msg.contains("a shuffle made each pass"), "{msg}");
}

/// A body that writes an element only on a condition of values (a perceptron's update on
/// a mistake) writes at a later call what reconnaissance saw it only read: the error says
/// so and names the zero-step way out, not the captured variables that changed.
#[test]
fn a_write_made_on_a_condition_of_values_is_named_as_such() {
    let n = 400;
    // Every task updates its own row of `w` and reads the shared `w[0]`, which at the
    // first call no task updates: it would be updated only on a mistake.
    let wrong = DVector::from_fn(n, |_| false).unwrap();
    let w = DVector::from_fn(40, |_| 0.0f64).unwrap();
    let opts = Opts::new().threads(2).fallback(Fallback::Never);
    let mut failed = None;
    for pass in 0..3usize {
        let ran = async_for!(
            0..n,
            |k| {
                let step = 0.1 * (pass + 1) as f64;
                let x = w[0];
                w[1 + k % 39] += x + step;
                if wrong[k] {
                    w[0] = x + step;
                }
            },
            opts.clone()
        );
        if let Err(e) = ran {
            failed = Some(e);
            break;
        }
        // Now a task makes a mistake.
        wrong.set(25, true).unwrap();
    }
    let err = failed.expect("the new write leaves the plan");
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            Error::AccessOutsidePlan {
                table: "w",
                key: 0,
                access: "wrote",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains(
            "reconnaissance saw only reads of this element): the body writes it under a \
             condition of values"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("`w[..] += if wrong { step } else { 0.0 }`"),
        "{msg}"
    );
    assert!(!msg.contains("here captured `pass`"), "{msg}");
}

/// A body whose accesses depend on a value that changes between calls must be caught,
/// not raced: the first call plans for `target[k] == k`, the second call writes elsewhere.
/// (One worker in a world of one runs the indices in order without a plan: there is
/// nothing to race with, so nothing to detect; see the last part.)
#[test]
fn a_parameter_dependent_access_is_detected() {
    for threads in [2, 3] {
        let target = DVector::from_fn(100, |k| k).unwrap();
        let w = DVector::from_fn(200, |_| 0u32).unwrap();
        let run = |opts: Opts| {
            async_for!(
                0..target.len(),
                |k| {
                    let t = target[k];
                    w[t] += 1;
                },
                opts
            )
        };
        // On all workers every call: with `Fallback::Measure` a busy machine can make a
        // call run on one worker, where there is nothing to detect.
        let on_all = || Opts::new().threads(threads).fallback(Fallback::Never);
        run(on_all()).unwrap();
        target.set(40, 150).unwrap();
        let err = run(on_all()).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::AccessOutsidePlan {
                    index: 40,
                    key: 150,
                    table: "w",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(msg.contains("wrote `w[150]`"), "{msg}");
        assert!(msg.contains("recheck(true)"), "{msg}");
        assert!(
            msg.contains("where `w` is indexed by values drawn afresh"),
            "{msg}"
        );
        // The next call re-plans (the cached plan was dropped) and succeeds.
        run(on_all()).unwrap();
        // With recheck, every call re-plans.
        target.set(41, 160).unwrap();
        run(on_all().recheck(true)).unwrap();
        let w = w.to_vec().unwrap();
        assert_eq!(w[150], 2, "threads={threads}");
        assert_eq!(w[160], 1);
    }

    let target = DVector::from_fn(100, |k| k).unwrap();
    let w = DVector::from_fn(200, |_| 0u32).unwrap();
    for call in 0..2 {
        if call == 1 {
            target.set(40, 150).unwrap();
        }
        async_for!(
            0..target.len(),
            |k| {
                let t = target[k];
                w[t] += 1;
            },
            Opts::new().threads(1)
        )
        .unwrap();
    }
    assert_eq!(w.get(150).unwrap(), 1);
    assert_eq!(w.get(40).unwrap(), 1);
}

#[test]
fn a_rotated_table_reached_outside_its_block_is_detected() {
    // SGDMF's shape: each task writes one row of `p` and one of `q`, and rows are shared
    // between tasks, so the plan rotates blocks of both and its groups check each access
    // against their blocks alone (no task reached outside them in reconnaissance). Task
    // `k` reads `p[peek[k]]`, its own user's row until the test points it elsewhere.
    let n = 4000;
    let users = DVector::from_fn(n, |k| (k % 97) as u32).unwrap();
    let items = DVector::from_fn(n, |k| (k * 7 % 31) as u32).unwrap();
    let peek = DVector::from_fn(n, |k| k % 97).unwrap();
    let p = DVector::from_fn(97, |_| 0u32).unwrap();
    let q = DVector::from_fn(31, |_| 0u32).unwrap();
    let run = || {
        async_for!(
            0..users.len(),
            |k| {
                let (u, i) = (users[k] as usize, items[k] as usize);
                let seen = p[peek[k]];
                p[u] = seen + 1;
                q[i] += 1;
            },
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    let refused_at_96 = |err: Error, how: &str| {
        assert!(
            matches!(
                err,
                Error::AccessOutsidePlan {
                    table: "p",
                    key: 96,
                    index: 0,
                    access,
                    ..
                } if access == how
            ),
            "{err}"
        )
    };
    for _ in 0..3 {
        run().unwrap();
    }
    assert_eq!(
        p.get(5).unwrap(),
        3 * (n as u32 / 97 + 1),
        "every task ran once a call"
    );
    // Task 0 (user 0, in the first block) now writes user 96, in the last block.
    users.set(0, 96).unwrap();
    refused_at_96(run().unwrap_err(), "wrote");
    // Back in its block, the next call plans again and runs.
    users.set(0, 0).unwrap();
    run().unwrap();
    run().unwrap();
    // A read outside the block is refused too: reading is no safer than writing while
    // another group may write the row.
    peek.set(0, 96).unwrap();
    refused_at_96(run().unwrap_err(), "read");
}

#[test]
fn writing_a_table_reconnaissance_saw_only_read_is_detected() {
    let flag = DVector::from_fn(1, |_| false).unwrap();
    let counts = DVector::from_fn(10, |_| 0u32).unwrap();
    let run = || {
        async_for!(
            0..counts.len(),
            |k| {
                if flag[0] {
                    counts[0] += 1;
                } else {
                    counts[k] += 1;
                }
            },
            // On all workers by the plan: with the default fallback the second call may
            // run in loop order on one worker while the plan is made, which is correct.
            Opts::new().threads(2).fallback(Fallback::Never)
        )
    };
    run().unwrap();
    flag.set(0, true).unwrap();
    let err = run().unwrap_err();
    assert!(
        matches!(
            err,
            Error::AccessOutsidePlan {
                table: "counts",
                key: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_rechecked_loop_learns_again_which_tables_it_writes() {
    // A re-checked loop runs with element locks; which tables it writes was learned on
    // its first call. Writing another one is refused clearly, and the next call learns.
    let flag = DVector::from_fn(1, |_| false).unwrap();
    let side = DVector::from_fn(10, |_| 0u32).unwrap();
    let counts = DVector::from_fn(10, |_| 0u32).unwrap();
    let line = line!() + 2;
    let run = || {
        async_for!(
            0..counts.len(),
            |k| {
                if flag[0] {
                    side[k] += 1;
                }
                counts[k] += 1;
            },
            Opts::new().threads(2).recheck(true)
        )
    };
    run().unwrap();
    flag.set(0, true).unwrap();
    let err = run().unwrap_err();
    assert!(
        matches!(
            err,
            Error::AccessOutsidePlan {
                table: "side",
                access: "wrote",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("learns it again"), "{err}");
    assert_eq!(
        side.to_vec().unwrap(),
        vec![0; 10],
        "refused writes changed nothing"
    );
    run().unwrap();
    assert_eq!(side.to_vec().unwrap(), vec![1; 10]);
    let stats = strads_ap::loop_stats();
    let at = format!("errors.rs:{line}:");
    let site = stats
        .iter()
        .find(|s| s.site.contains(&at))
        .expect("this loop's figures");
    // On two workers the loop learns by recording a call (run in order while logging):
    // the first call, then a locking run (the refused one), then a recorded call again.
    assert_eq!(
        (site.strategy, site.calls, site.recorded_calls),
        ("recorded", 3, 2),
        "{site:?}"
    );
}

#[test]
fn sync_for_rejects_a_zero_minibatch_and_unmergeable_writes() {
    let data = DVector::from_fn(10, |i| i as u32).unwrap();
    let total = DVector::from_fn(1, |_| 0.0f64).unwrap();
    let err = sync_for!(data, 0, SyncMode::Bsp, |batch| {
        for x in batch {
            total[0] += *x as f64;
        }
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("mini-batch size must be at least 1"),
        "{err}"
    );

    // Strings cannot be merged as deltas, so sync_for! refuses to write them.
    let names = DVector::from_fn(1, |_| String::new()).unwrap();
    let err = sync_for!(
        data,
        2,
        SyncMode::Hybrid,
        |batch| {
            names[0].push_str(&batch.len().to_string());
        },
        Opts::new().threads(2)
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("does not implement Aggregate"),
        "{err}"
    );
}

#[test]
fn a_snapshot_of_another_type_or_a_damaged_one_is_refused() {
    let dir = temp_dir("snapshot");
    let path = dir.path().join("w.dv");
    let v = DVector::from_fn(1000, |i| i as f32).unwrap();
    v.save(&path).unwrap();
    assert_eq!(
        DVector::<f32>::load(&path).unwrap().to_vec().unwrap(),
        v.to_vec().unwrap()
    );
    let err = DVector::<f64>::load(&path).unwrap_err();
    assert!(
        err.to_string()
            .contains("holds elements of type f32, but f64 was asked for"),
        "{err}"
    );
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let err = DVector::<f32>::load(&path).unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&path, &bytes).unwrap();
    assert!(DVector::<f32>::load(&path).is_err());
}

#[test]
fn a_byte_order_mark_is_dropped_and_a_directory_is_named() {
    let dir = temp_dir("bom");
    let path = dir.path().join("bom.txt");
    std::fs::write(&path, "\u{feff}1 2 5\n3 4 1.5\n").unwrap();
    let v = read_from_file(&path, parse_rating).unwrap();
    assert_eq!(v.to_vec().unwrap(), vec![(1, 2, 5.0), (3, 4, 1.5)]);
    // A header after the mark is still the first line.
    std::fs::write(&path, "\u{feff}user item rating\n3 4 1.5\n").unwrap();
    let (v, _) = ReadOptions::new()
        .header_lines(1)
        .read(&path, parse_rating)
        .unwrap();
    assert_eq!(v.len(), 1);
    let err = read_from_file(dir.path(), parse_rating)
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("is a directory, not a file"), "{err}");
}

#[test]
fn more_threads_than_the_limit_is_a_configuration_error() {
    let err = strads_ap::init_with(strads_ap::Config::local(strads_ap::MAX_THREADS + 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("1025 worker threads per process"), "{err}");
    assert!(err.contains("at most 1024"), "{err}");

    // Per call too: a loop asking for more is refused before any thread starts.
    let w = DVector::from_fn(4, |_| 0.0f32).unwrap();
    let err = async_for!(
        0..4usize,
        |k| {
            w[k] += 1.0;
        },
        Opts::new().threads(100_000)
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("Opts::threads(100000): at most 1024"), "{err}");
}

/// One worker runs a call over direct views (bounds checks only); they must refuse what
/// the checked views of two workers refuse, with the same words: an index past the end, a
/// missing map key, and writes `sync_for!` cannot merge.
#[test]
fn one_worker_refuses_what_two_workers_refuse() {
    for threads in [1, 2] {
        let w = DVector::from_fn(10, |_| 0.0f32).unwrap();
        let err = async_for!(
            0..11usize,
            |k| {
                w[k] += 1.0;
            },
            Opts::new().threads(threads)
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("index 10 is out of bounds for DVector `w` of length 10"),
            "{threads} threads: {err}"
        );

        let m: DMap<u32, f32> = DMap::from_pairs((0..4u32).map(|k| (k, 0.0)).collect()).unwrap();
        let err = async_for!(
            0..5usize,
            |k| {
                m[&(k as u32)] += 1.0;
            },
            Opts::new().threads(threads)
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::BodyPanicked { index: 4, .. }) && err.to_string().contains("`m`"),
            "{threads} threads: {err}"
        );

        let data = DVector::from_fn(10, |i| i as u32).unwrap();
        let names = DVector::from_fn(1, |_| String::new()).unwrap();
        let err = sync_for!(
            data,
            2,
            SyncMode::Hybrid,
            |batch| {
                names[0].push_str(&batch.len().to_string());
            },
            Opts::new().threads(threads)
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("does not implement Aggregate"),
            "{threads} threads: {err}"
        );
        let err = sync_for!(
            data,
            2,
            SyncMode::Bsp,
            |batch| {
                data[0] += batch.len() as u32;
            },
            Opts::new().threads(threads)
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("input of this sync_for!"),
            "{threads} threads: {err}"
        );
    }
}
