//! Checkpoints and fast re-execution: a job stopped part-way and run again in recovery
//! mode ends with the model a failure-free run ends with (bitwise, one thread per rank),
//! replaying the finished loop calls from their checkpoints instead of running them.

mod common;

use std::path::{Path, PathBuf};

use common::{mf_epoch, on_ranks};
use strads_ap::checkpoint::{configure, CheckpointConfig};
use strads_ap::prelude::*;

const EPOCHS: usize = 6;

/// Per-epoch training error, user factors, bias.
type Outcome = (Vec<f64>, Vec<Vec<f32>>, Vec<f32>);

type Factors = DVector<Vec<f32>>;
type Ratings = DVector<(u32, u32, f32)>;

/// User and item factors of the small problems below.
fn factors() -> strads_ap::Result<(Factors, Factors)> {
    let w = DVector::from_fn(97, |u| vec![0.1 + (u % 7) as f32 * 0.01; 4])?;
    let h = DVector::from_fn(41, |i| vec![0.1 + (i % 5) as f32 * 0.01; 4])?;
    Ok((w, h))
}

/// 2,000 ratings of 97 users and 41 items, and their factors.
fn small_problem() -> strads_ap::Result<(Ratings, Factors, Factors)> {
    let ratings: Vec<(u32, u32, f32)> = (0..2000u32)
        .map(|k| ((k * 7919) % 97, (k * 104_729) % 41, ((k % 5) + 1) as f32))
        .collect();
    let data = DVector::from_vec(ratings)?;
    let (w, h) = factors()?;
    Ok((data, w, h))
}

/// `ratings` ratings of 31 users and 17 items, and flat factors: for tests of which
/// checkpoints exist, not of what they hold.
fn tiny_problem(ratings: usize) -> strads_ap::Result<(Ratings, Factors, Factors)> {
    let data = DVector::from_fn(ratings, |k| {
        let k = k as u32;
        ((k * 7919) % 31, (k * 104_729) % 17, (k % 5 + 1) as f32)
    })?;
    let w = DVector::from_fn(31, |_| vec![0.1f32; 4])?;
    let h = DVector::from_fn(17, |_| vec![0.1f32; 4])?;
    Ok((data, w, h))
}

/// A small matrix factorisation (async_for!) with a sync_for! bias update, checkpointed
/// per `config`; stops after `stop_after` epochs. Returns the per-epoch training error
/// (computed by driver code from the DDSs) and the final parameters.
///
/// Epochs before `poison_until` use absurd step sizes: a run that recovers past them must
/// skip them (loading their checkpoints), not run them again.
fn train(
    config: CheckpointConfig,
    stop_after: usize,
    poison_until: usize,
) -> strads_ap::Result<Outcome> {
    configure(Some(config));
    let (data, w, h) = small_problem()?;
    let bias = DVector::from_fn(1, |_| 0.0f32)?.aggregate_with(Aggregation::Sum);
    let errors = epochs(
        &data,
        &w,
        &h,
        &bias,
        0..stop_after.min(EPOCHS),
        poison_until,
    )?;
    // As `strads_ap::finish()` does: commit the checkpoint still being written.
    strads_ap::checkpoint::flush()?;
    Ok((errors, w.to_vec()?, bias.to_vec()?))
}

/// The epochs `range` of [`train`]'s loop.
fn epochs(
    data: &Ratings,
    w: &Factors,
    h: &Factors,
    bias: &DVector<f32>,
    range: std::ops::Range<usize>,
    poison_until: usize,
) -> strads_ap::Result<Vec<f64>> {
    let mut errors = Vec::new();
    for epoch in range {
        let poisoned = epoch < poison_until;
        let lr: f32 = if poisoned { 1e3 } else { 0.02 };
        let step: f32 = if poisoned { 1e3 } else { 1e-4 };
        mf_epoch(data, w, h, lr, 1)?;
        sync_for!(
            data,
            100,
            SyncMode::Bsp,
            |batch| {
                bias[0] += step * batch.len() as f32;
            },
            Opts::new().threads(1)
        )?;
        let (wv, hv) = (w.to_vec()?, h.to_vec()?);
        let sse = data.map_reduce(
            |&(u, i, r)| {
                let p: f32 = wv[u as usize]
                    .iter()
                    .zip(&hv[i as usize])
                    .map(|(a, b)| a * b)
                    .sum();
                ((r - p) as f64).powi(2)
            },
            |a, b| a + b,
        )?;
        errors.push(sse);
    }
    Ok(errors)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strads-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `train` as every rank of a `world`-rank in-process cluster (a fresh one per call,
/// so table ids start over as in a restarted process); returns rank 0's result.
fn run(world: usize, config: CheckpointConfig, stop_after: usize, poison_until: usize) -> Outcome {
    let results = on_ranks(world, move || {
        train(config.clone(), stop_after, poison_until)
    });
    let mut results = results.into_iter().map(|r| r.expect("the job succeeds"));
    let first = results.next().unwrap();
    for other in results {
        assert_eq!(other, first, "ranks disagree");
    }
    first
}

/// Results compare bitwise, except the driver's sums, which a parallel reduction may
/// round differently from run to run.
fn same(a: &Outcome, b: &Outcome) -> bool {
    a.0.len() == b.0.len()
        && a.0
            .iter()
            .zip(&b.0)
            .all(|(x, y)| (x - y).abs() <= 1e-9 * x.abs())
        && a.1 == b.1
        && a.2 == b.2
}

fn manifests(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("MANIFEST").exists())
        .count()
}

#[test]
fn a_stopped_job_recovers_to_the_failure_free_result() {
    for world in [1, 3] {
        let clean_dir = temp_dir(&format!("clean{world}"));
        let clean = run(world, CheckpointConfig::new(&clean_dir), EPOCHS, 0);
        // Two loop calls per epoch, a checkpoint after each; two manifests kept, and the
        // first, the one forced to disk (the next would be 10 s later).
        assert_eq!(manifests(&clean_dir), 3, "keep 2, and the synced one");

        // Every checkpoint kept: each replayed call loads its state, so even the driver's
        // per-epoch figures of the replayed epochs are those of the first run.
        let dir = temp_dir(&format!("all{world}"));
        let part = run(world, CheckpointConfig::new(&dir).keep(100), 3, 0);
        assert!(same(
            &part,
            &(clean.0[..3].to_vec(), part.1.clone(), part.2.clone())
        ));
        let resumed = run(world, CheckpointConfig::new(&dir).recover(true), EPOCHS, 3);
        assert!(same(&resumed, &clean), "{world} ranks");

        // The last two kept: the model is the same; figures of epochs replayed without a
        // checkpoint to load are not (the state catches up at the newest checkpoint).
        let dir2 = temp_dir(&format!("last{world}"));
        run(world, CheckpointConfig::new(&dir2), 4, 0);
        let resumed = run(world, CheckpointConfig::new(&dir2).recover(true), EPOCHS, 4);
        assert_eq!(
            (&resumed.1, &resumed.2),
            (&clean.1, &clean.2),
            "{world} ranks"
        );
        assert!(same(
            &(resumed.0[4..].to_vec(), vec![], vec![]),
            &(clean.0[4..].to_vec(), vec![], vec![])
        ));
        for d in [&clean_dir, &dir, &dir2] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}

/// The model after [`train`]'s epochs `0..3` on a job of `from` ranks, trained on for the
/// rest on a job of `to` ranks, started from that model: what resuming the first job's
/// checkpoint on `to` ranks must give.
fn trained_on_after(from: usize, to: usize) -> Outcome {
    type State = (Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<f32>);
    let first: Vec<State> = on_ranks(from, || {
        let (data, w, h) = small_problem()?;
        let bias = DVector::from_fn(1, |_| 0.0f32)?.aggregate_with(Aggregation::Sum);
        epochs(&data, &w, &h, &bias, 0..3, 0)?;
        Ok((w.to_vec()?, h.to_vec()?, bias.to_vec()?))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect();
    let (w0, h0, b0) = first[0].clone();
    let rest = on_ranks(to, || {
        let (data, _, _) = small_problem()?;
        let (w, h) = (
            DVector::from_vec(w0.clone())?,
            DVector::from_vec(h0.clone())?,
        );
        let bias = DVector::from_vec(b0.clone())?.aggregate_with(Aggregation::Sum);
        let errors = epochs(&data, &w, &h, &bias, 3..EPOCHS, 0)?;
        Ok((errors, w.to_vec()?, bias.to_vec()?))
    });
    rest.into_iter().next().unwrap().unwrap()
}

/// A job that lost a rank for good resumes from its checkpoints on fewer ranks (and one
/// that gained a rank, on more): every table, inputs included, loads repartitioned, the
/// replayed epochs show the first job's figures, and the model is the one the
/// checkpointed state implies, bitwise.
#[test]
fn a_checkpoint_resumes_on_another_number_of_ranks() {
    for (from, to) in [(3, 2), (2, 3)] {
        let dir = temp_dir(&format!("resize{from}{to}"));
        let part = run(from, CheckpointConfig::new(&dir).keep(100), 3, 0);
        let resumed = run(to, CheckpointConfig::new(&dir).recover(true), EPOCHS, 3);
        assert!(
            same(
                &(resumed.0[..3].to_vec(), vec![], vec![]),
                &(part.0, vec![], vec![])
            ),
            "{from} ranks to {to}: the replayed epochs' figures"
        );
        let want = trained_on_after(from, to);
        assert_eq!(
            (&resumed.1, &resumed.2),
            (&want.1, &want.2),
            "{from} ranks to {to}"
        );
        assert!(same(
            &(resumed.0[3..].to_vec(), vec![], vec![]),
            &(want.0, vec![], vec![])
        ));
        // It checkpoints on at its own size: resumed again on `to` ranks, from a manifest
        // that still takes the inputs from the first job's files.
        let again = run(
            to,
            CheckpointConfig::new(&dir).recover(true),
            EPOCHS,
            EPOCHS,
        );
        assert_eq!(
            (&again.1, &again.2),
            (&want.1, &want.2),
            "{from} ranks to {to}, again"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The committed checkpoints' directories in `dir` (those with a manifest), oldest first.
fn committed(dir: &Path) -> Vec<PathBuf> {
    let mut ckpts: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("MANIFEST").exists())
        .collect();
    ckpts.sort();
    ckpts
}

#[test]
fn a_corrupted_checkpoint_falls_back_to_the_previous_one() {
    let clean = run(2, CheckpointConfig::new(temp_dir("ref")), EPOCHS, 0);
    let _ = std::fs::remove_dir_all(temp_dir("ref"));
    let dir = temp_dir("corrupt");
    run(2, CheckpointConfig::new(&dir).keep(3), 3, 0);
    // Tear rank 1's file of the newest checkpoint.
    let ckpts = committed(&dir);
    let newest = ckpts.last().unwrap().join("rank-1-of-2.bin");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    // Checkpoint 6 (after epoch 3) is torn, so recovery resumes after loop call 5: the
    // first two epochs are skipped, the third runs its sync_for! again.
    let resumed = run(2, CheckpointConfig::new(&dir).recover(true), EPOCHS, 2);
    assert_eq!((&resumed.1, &resumed.2), (&clean.1, &clean.2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An older, well-formed rank file copied over the newest one (each file's own checksum
/// holds) is caught by the manifest's per-rank checksums: recovery falls back to the
/// checkpoint before and ends with the failure-free model.
#[test]
fn a_stale_rank_file_falls_back_to_the_previous_checkpoint() {
    let clean = run(2, CheckpointConfig::new(temp_dir("ref-stale")), EPOCHS, 0);
    let _ = std::fs::remove_dir_all(temp_dir("ref-stale"));
    let dir = temp_dir("stale");
    run(2, CheckpointConfig::new(&dir).keep(3), 3, 0);
    let ckpts = committed(&dir);
    let [.., older, newest] = &ckpts[..] else {
        panic!("fewer than two checkpoints in {}", dir.display())
    };
    let (old_file, new_file) = (
        older.join("rank-1-of-2.bin"),
        newest.join("rank-1-of-2.bin"),
    );
    assert_ne!(
        std::fs::read(&old_file).unwrap(),
        std::fs::read(&new_file).unwrap()
    );
    std::fs::copy(&old_file, &new_file).unwrap();
    // As with a torn file: checkpoint 6 is refused, recovery resumes after loop call 5.
    let resumed = run(2, CheckpointConfig::new(&dir).recover(true), EPOCHS, 2);
    assert_eq!((&resumed.1, &resumed.2), (&clean.1, &clean.2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn recovery_without_checkpoints_starts_over() {
    let dir = temp_dir("empty");
    let clean = run(1, CheckpointConfig::new(temp_dir("ref2")), EPOCHS, 0);
    let _ = std::fs::remove_dir_all(temp_dir("ref2"));
    let resumed = run(1, CheckpointConfig::new(&dir).recover(true), EPOCHS, 0);
    assert!(same(&resumed, &clean));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dynamic loop on one worker, `stop_after` calls of a cyclic sweep (each call a whole
/// sweep, so the scheduler's own state is the same at every call's end): the coefficients
/// and the running scale it writes.
fn dynamic_job(
    config: CheckpointConfig,
    stop_after: usize,
) -> strads_ap::Result<(Vec<f64>, Vec<f64>)> {
    configure(Some(config));
    let n = 50;
    let beta = DVector::from_vec(vec![0.0f64; n])?;
    let scale = DVector::from_vec(vec![1.0f64; 1])?;
    let schedule = Dynamic::new(Priority::cyclic()).round(8);
    for _ in 0..stop_after {
        async_for!(
            0..n,
            |j| {
                beta[j] += scale[0] / (j + 1) as f64;
                scale[0] *= 0.99;
            },
            Opts::new().threads(1).dynamic(schedule.clone())
        )?;
    }
    strads_ap::checkpoint::flush()?;
    Ok((beta.to_vec()?, scale.to_vec()?))
}

#[test]
fn a_dynamic_loop_on_one_worker_checkpoints_what_it_wrote() {
    let run = |config: CheckpointConfig, stop_after: usize| {
        let mut results = on_ranks(1, move || dynamic_job(config.clone(), stop_after));
        results.remove(0).expect("the job succeeds")
    };
    let clean = run(CheckpointConfig::new(temp_dir("dyn-ref")), EPOCHS);
    let _ = std::fs::remove_dir_all(temp_dir("dyn-ref"));
    let dir = temp_dir("dyn");
    run(CheckpointConfig::new(&dir).keep(100), 3);
    // The first three calls are replayed from their checkpoints: had they not held the
    // tables the loop wrote, the resumed job would start the fourth call from zeros.
    let resumed = run(CheckpointConfig::new(&dir).recover(true), EPOCHS);
    assert_eq!(resumed, clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A matrix factorisation whose ratings are read from `path` (an input DDS, checkpointed
/// once at creation); stops after `stop_after` epochs, poisoning epochs before
/// `poison_until` as `train` does. Returns the user factors and the input's report.
fn fit_file(
    path: &Path,
    config: CheckpointConfig,
    stop_after: usize,
    poison_until: usize,
) -> strads_ap::Result<(Vec<Vec<f32>>, usize)> {
    configure(Some(config));
    let (data, report) = ReadOptions::new()
        .skip_bad_lines(true)
        .read(path, |line: &str| {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f[..] {
                [u, i, r] => Ok((
                    u.parse::<u32>().map_err(|e| e.to_string())?,
                    i.parse::<u32>().map_err(|e| e.to_string())?,
                    r.parse::<f32>().map_err(|e| e.to_string())?,
                )),
                _ => Err(format!("{} fields", f.len())),
            }
        })?;
    let (w, h) = factors()?;
    for epoch in 0..stop_after {
        let lr = if epoch < poison_until { 1e3 } else { 0.02 };
        mf_epoch(&data, &w, &h, lr, 1)?;
    }
    strads_ap::checkpoint::flush()?;
    Ok((w.to_vec()?, report.skipped))
}

fn run_file(
    world: usize,
    path: &Path,
    config: CheckpointConfig,
    stop_after: usize,
    poison_until: usize,
) -> (Vec<Vec<f32>>, usize) {
    let results = on_ranks(world, move || {
        fit_file(path, config.clone(), stop_after, poison_until)
    });
    let mut results = results.into_iter().map(|r| r.expect("the job succeeds"));
    let first = results.next().unwrap();
    assert!(results.all(|r| r == first), "ranks disagree");
    first
}

#[test]
fn input_ddses_are_loaded_from_their_checkpoints_not_made_again() {
    for world in [1, 2] {
        let dir = temp_dir(&format!("inputs{world}"));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("ratings.txt");
        let mut text: String = (0..2000u32)
            .map(|k| format!("{} {} {}\n", (k * 7919) % 97, (k * 104_729) % 41, k % 5 + 1))
            .collect();
        text.push_str("a bad line\n");
        std::fs::write(&input, &text).unwrap();
        let ckpt = dir.join("ckpt");
        let clean = run_file(world, &input, CheckpointConfig::new(dir.join("ref")), 6, 0);
        assert_eq!(clean.1, 1, "one bad line skipped");

        // Stopped after 3 epochs; the input file then disappears. The replay loads the
        // ratings (and the reader's report) from their checkpoint: reading the file again
        // would fail.
        run_file(world, &input, CheckpointConfig::new(&ckpt), 3, 0);
        std::fs::remove_file(&input).unwrap();
        let resumed = run_file(
            world,
            &input,
            CheckpointConfig::new(&ckpt).recover(true),
            6,
            3,
        );
        assert_eq!(resumed, clean, "{world} ranks");

        // A corrupted input checkpoint is not fatal: the operator runs again.
        std::fs::write(&input, &text).unwrap();
        let ckpt2 = dir.join("ckpt2");
        run_file(world, &input, CheckpointConfig::new(&ckpt2), 3, 0);
        let part = ckpt2
            .join("input-000001")
            .join(format!("rank-0-of-{world}.bin"));
        let mut bytes = std::fs::read(&part).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&part, &bytes).unwrap();
        let resumed = run_file(
            world,
            &input,
            CheckpointConfig::new(&ckpt2).recover(true),
            6,
            3,
        );
        assert_eq!(resumed, clean, "{world} ranks, input made again");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The committed checkpoints in `dir`, by loop call.
fn committed_calls(dir: &Path) -> Vec<u64> {
    let mut calls: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            let call = name.strip_prefix("ckpt-")?.parse().ok()?;
            e.path().join("MANIFEST").exists().then_some(call)
        })
        .collect();
    calls.sort_unstable();
    calls
}

/// Checkpoints are forced to disk at most every `sync_every` (the first at once); the
/// newest synced one is kept beside the newest `keep`, since it is what a power loss
/// leaves. Syncing every checkpoint keeps just the newest `keep`.
#[test]
fn the_newest_synced_checkpoint_is_kept_beside_the_newest() {
    for (sync, expected) in [
        (std::time::Duration::from_secs(3600), vec![1, 5, 6]),
        (std::time::Duration::ZERO, vec![5, 6]),
    ] {
        let dir = temp_dir(&format!("sync{}", sync.as_secs()));
        let config = CheckpointConfig::new(&dir).sync_every(sync);
        let results = on_ranks(2, || {
            configure(Some(config.clone()));
            let (data, w, h) = tiny_problem(500)?;
            for _ in 0..6 {
                mf_epoch(&data, &w, &h, 0.02, 1)?;
            }
            strads_ap::checkpoint::flush()
        });
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        assert_eq!(committed_calls(&dir), expected, "sync every {sync:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A replay says which loop calls it skipped, so programs can leave them out of their
/// timings: the calls up to the recovery point, and no later one.
#[test]
fn replayed_calls_are_reported() {
    let dir = temp_dir("replayed");
    let job = |recover: bool, epochs: usize| {
        let config = CheckpointConfig::new(&dir).recover(recover);
        on_ranks(2, move || {
            configure(Some(config.clone()));
            let (data, w, h) = tiny_problem(300)?;
            let mut replayed = Vec::new();
            for _ in 0..epochs {
                mf_epoch(&data, &w, &h, 0.02, 1)?;
                replayed.push(strads_ap::checkpoint::last_call_replayed());
            }
            strads_ap::checkpoint::flush()?;
            Ok(replayed)
        })
    };
    for r in job(false, 3) {
        assert_eq!(r.unwrap(), vec![false; 3]);
    }
    for r in job(true, 5) {
        assert_eq!(r.unwrap(), vec![true, true, true, false, false]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Parameters after training: a derived DVector and a derived DMap made mid-run, a table
/// that driver code changed in place mid-run, and the final user factors.
type Derived = (Vec<f32>, Vec<(u32, f64)>, Vec<f64>, Vec<Vec<f32>>);

/// Trains `stop_after` epochs; after epoch 1 it derives a DVector from the user factors
/// (`map`, `filter`), records their sum in a one-element table (`transform`) and scales a
/// map by it (`map_values`). Epochs before `poison_until` use absurd step sizes (a replay
/// must skip them).
fn fit_derived(
    config: CheckpointConfig,
    stop_after: usize,
    poison_until: usize,
) -> strads_ap::Result<Derived> {
    configure(Some(config));
    let (data, w, h) = small_problem()?;
    let total = DVector::from_fn(1, |_| 0.0f64)?;
    let weights = DMap::from_pairs((0..5u32).map(|k| (k, f64::from(k))).collect())?;
    let (mut derived, mut scaled) = (None, None);
    for epoch in 0..stop_after {
        let lr = if epoch < poison_until { 1e3 } else { 0.02 };
        mf_epoch(&data, &w, &h, lr, 1)?;
        if epoch == 1 {
            let sums = w.map(|row| row.iter().sum::<f32>())?;
            derived = Some(sums.filter(|s| *s > 0.0)?);
            let sum = w.map_reduce(
                |row| row.iter().map(|&x| f64::from(x)).sum::<f64>(),
                |a, b| a + b,
            )?;
            total.transform(|_, t| *t = sum)?;
            scaled = Some(weights.map_values(|_, v| v * sum)?);
        }
    }
    strads_ap::checkpoint::flush()?;
    let derived = match derived {
        Some(d) => d.to_vec()?,
        None => Vec::new(),
    };
    let mut scaled = match scaled {
        Some(m) => m.to_vec()?,
        None => Vec::new(),
    };
    scaled.sort_by_key(|p| p.0);
    Ok((derived, scaled, total.to_vec()?, w.to_vec()?))
}

/// DVectors derived mid-run and tables changed in place by driver code come back from
/// their checkpoints. With only the newest checkpoint kept, the replay cannot reproduce
/// them by running the driver code again: at epoch 1 of the replay the factors are not
/// those of epoch 1 (that checkpoint was pruned; the skipped epochs did not run).
#[test]
fn derived_ddses_and_driver_changes_are_restored_not_recomputed() {
    for world in [1, 2] {
        let dir = temp_dir(&format!("derived{world}"));
        let ckpt = dir.join("ckpt");
        let only_newest = move |recover: bool| {
            CheckpointConfig::new(&ckpt)
                .keep(1)
                .sync_every(std::time::Duration::ZERO)
                .recover(recover)
        };
        let job = |config: CheckpointConfig, stop_after: usize, poison_until: usize| {
            let mut results = on_ranks(world, move || {
                fit_derived(config.clone(), stop_after, poison_until)
            })
            .into_iter()
            .map(|r| r.expect("the job succeeds"));
            let first = results.next().unwrap();
            assert!(results.all(|r| r == first), "ranks disagree");
            first
        };
        let clean = job(CheckpointConfig::new(dir.join("ref")), 5, 0);
        assert!(!clean.0.is_empty() && clean.1.len() == 5 && clean.2[0] != 0.0);

        job(only_newest(false), 4, 0);
        assert_eq!(committed_calls(&dir.join("ckpt")), vec![4]);
        let resumed = job(only_newest(true), 5, 4);
        assert_eq!(resumed, clean, "{world} ranks");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The same job stopped on three ranks and resumed on two: the DVector and the map
/// derived mid-run and the table changed by driver code load repartitioned from the
/// three-rank files, with the values the three-rank job made.
#[test]
fn derived_ddses_and_maps_resume_on_another_number_of_ranks() {
    let dir = temp_dir("derived-resize");
    let job = |world: usize, config: CheckpointConfig, stop_after: usize, poison_until: usize| {
        on_ranks(world, move || {
            fit_derived(config.clone(), stop_after, poison_until)
        })
        .into_iter()
        .next()
        .unwrap()
        .expect("the job succeeds")
    };
    let clean = job(3, CheckpointConfig::new(dir.join("ref")), 5, 0);
    let ckpt = dir.join("ckpt");
    job(3, CheckpointConfig::new(&ckpt).keep(1), 4, 0);
    let resumed = job(2, CheckpointConfig::new(&ckpt).keep(1).recover(true), 5, 4);
    assert_eq!(
        (&resumed.0, &resumed.1, &resumed.2),
        (&clean.0, &clean.1, &clean.2)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Per epoch: a float sum and an integer count, both reduction variables of an
/// `async_for!` that also writes a table, and a `sync_for!` sum; checkpointed per
/// `config`, stopping after `stop_after` epochs.
fn reductions_job(
    config: CheckpointConfig,
    stop_after: usize,
) -> strads_ap::Result<Vec<(f64, u64, u64)>> {
    configure(Some(config));
    let data = DVector::from_fn(3_000, |k| (k % 97) as f64 * 0.5)?;
    let seen = DVector::from_fn(3_000, |_| 0u32)?;
    let mut out = Vec::new();
    for epoch in 0..stop_after.min(EPOCHS) {
        let scale = (epoch + 1) as f64;
        let mut total = 0.0f64;
        let mut count = 0u64;
        async_for!(
            0..data.len(),
            |k| {
                seen[k] += 1;
                total += data[k] * scale;
                count += u64::from(seen[k]);
            },
            Opts::new().threads(2)
        )?;
        let mut batches = 0u64;
        sync_for!(
            data,
            100,
            SyncMode::Hybrid,
            |batch| {
                batches += batch.len() as u64 / 100;
            },
            Opts::new().threads(2)
        )?;
        out.push((total, count, batches));
    }
    strads_ap::checkpoint::flush()?;
    Ok(out)
}

/// A replay gives the reduction variables of the loop calls it skips the values they had
/// when the calls ran (manifests record them), also for calls whose checkpoints were not
/// kept: the resumed job's per-epoch values are the failure-free run's.
#[test]
fn a_replay_restores_the_reduction_variables_of_skipped_calls() {
    for world in [1, 2] {
        let run_job = |config: CheckpointConfig, stop_after: usize| {
            let results = on_ranks(world, move || reductions_job(config.clone(), stop_after));
            let mut results = results.into_iter().map(|r| r.expect("the job succeeds"));
            let first = results.next().unwrap();
            for other in results {
                assert_eq!(other, first, "ranks disagree");
            }
            first
        };
        let clean_dir = temp_dir(&format!("red-clean{world}"));
        let clean = run_job(CheckpointConfig::new(&clean_dir), EPOCHS);
        assert_eq!(
            clean[2].1,
            3 * 3_000,
            "count: each task counts its own visits"
        );
        let dir = temp_dir(&format!("red{world}"));
        run_job(CheckpointConfig::new(&dir), 4);
        let resumed = run_job(CheckpointConfig::new(&dir).recover(true), EPOCHS);
        assert_eq!(resumed.len(), EPOCHS);
        for (epoch, (got, want)) in resumed.iter().zip(&clean).enumerate() {
            assert_eq!(got.1, want.1, "{world} ranks, epoch {epoch}");
            assert_eq!(got.2, want.2, "{world} ranks, epoch {epoch}");
            assert!(
                (got.0 - want.0).abs() <= 1e-9 * want.0,
                "{world} ranks, epoch {epoch}"
            );
        }
        for d in [&clean_dir, &dir] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
