//! DVector data operators on an in-process cluster of 4 ranks (threads over the `mem`
//! transport) give the same results, on every rank, as in a world of one.

use strads_ap_runtime::cluster::simulate;
use strads_ap_runtime::{DVector, Error, Result};

/// Runs `job` as every rank of a `world`-rank cluster and returns each rank's result.
fn on_ranks<T: Send>(world: usize, job: impl Fn() -> Result<T> + Sync) -> Vec<Result<T>> {
    simulate(world, job)
}

/// The same job in a world of one (this thread, no scope) and on 4 ranks: every rank must
/// agree with the world of one.
fn same_everywhere<T: PartialEq + std::fmt::Debug + Send + 'static>(
    job: impl Fn() -> Result<T> + Send + Sync + Clone + 'static,
) {
    let one = job().expect("the world of one succeeds");
    for world in [2, 3, 4] {
        for (rank, got) in on_ranks(world, job.clone()).into_iter().enumerate() {
            let got = got.unwrap_or_else(|e| panic!("rank {rank} of {world}: {e}"));
            assert_eq!(got, one, "rank {rank} of {world}");
        }
    }
}

#[test]
fn construction_and_element_access() {
    same_everywhere(|| {
        let v = DVector::from_fn(10, |i| i as u64 * 3)?;
        let w = DVector::from_vec((0..7).map(|i| format!("e{i}")).collect::<Vec<_>>())?;
        v.set(9, 100)?;
        v.set(0, 7)?;
        let picks = (v.get(0)?, v.get(4)?, v.get(9)?, w.get(6)?);
        Ok((v.len(), v.to_vec()?, w.to_vec()?, picks, v.iter()?.count()))
    });
}

#[test]
fn map_reduce_transform_filter() {
    same_everywhere(|| {
        let v = DVector::from_fn(23, |i| i as i64 - 5)?;
        let sq = v.map(|x| x * x)?;
        let total = sq.reduce(|a, b| a + b)?;
        let evens = v.map_reduce(|x| u32::from(x % 2 == 0), |a, b| a + b)?;
        v.transform(|i, x| *x += i as i64)?;
        let kept = v.filter(|x| x % 3 == 0)?;
        let sum_kept = kept.map_reduce(|x| *x, |a, b| a + b)?;
        Ok((
            sq.to_vec()?,
            total,
            evens,
            v.to_vec()?,
            kept.len(),
            kept.to_vec()?,
            sum_kept,
        ))
    });
}

#[test]
fn with_all_sees_every_element() {
    same_everywhere(|| {
        let w = DVector::from_fn(9, |i| vec![i as f32; 2])?;
        w.with_all(|rows| rows.iter().flatten().map(|x| x * x).sum::<f32>())
    });
}

#[test]
fn fewer_elements_than_ranks_and_empty_vectors() {
    same_everywhere(|| {
        let tiny = DVector::from_vec(vec![5u8, 6])?;
        let empty: DVector<u8> = DVector::from_vec(Vec::new())?;
        let none = tiny.filter(|_| false)?;
        let reduced_empty = matches!(empty.reduce(|a, b| a + b), Err(Error::Empty { .. }));
        Ok((
            tiny.to_vec()?,
            tiny.reduce(|a, b| a + b)?,
            empty.len(),
            none.len(),
            reduced_empty,
            tiny.get(1)?,
        ))
    });
}

#[test]
fn out_of_bounds_is_the_same_error_on_every_rank() {
    for got in on_ranks(3, || {
        let v = DVector::from_fn(4, |i| i)?;
        v.get(4)
    }) {
        match got {
            Err(Error::IndexOutOfBounds {
                index: 4, len: 4, ..
            }) => {}
            other => panic!("expected an out-of-bounds error, got {other:?}"),
        }
    }
}

#[test]
fn ranks_building_different_vectors_is_a_divergence_error() {
    let results = on_ranks(3, || {
        let rank = strads_ap_runtime::cluster::here().rank();
        DVector::from_vec(vec![0u32; 5 + usize::from(rank == 2)]).map(|_| ())
    });
    for r in results {
        match r {
            Err(Error::Divergence { rank: 2, .. }) => {}
            other => panic!("expected a divergence at rank 2, got {other:?}"),
        }
    }
}

#[test]
fn save_on_a_cluster_loads_in_a_world_of_one_and_back() {
    let dir = std::env::temp_dir().join(format!("strads-dist-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("v.bin");
    let p = path.clone();
    for r in on_ranks(4, move || {
        DVector::from_fn(11, |i| i as f64 / 2.0)?.save(&p)
    }) {
        r.unwrap();
    }
    let back: DVector<f64> = DVector::load(&path).unwrap();
    assert_eq!(
        back.to_vec().unwrap(),
        (0..11).map(|i| i as f64 / 2.0).collect::<Vec<_>>()
    );
    let p = path.clone();
    for r in on_ranks(3, move || DVector::<f64>::load(&p)?.to_vec()) {
        assert_eq!(r.unwrap(), back.to_vec().unwrap());
    }
    let missing = dir.join("missing.bin");
    for r in on_ranks(2, move || DVector::<f64>::load(&missing).map(|_| ())) {
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("missing.bin"), "{msg}");
    }
    // An empty table: rank 0 writes a file with no elements, which loads as one.
    let empty = dir.join("empty.bin");
    let p = empty.clone();
    for r in on_ranks(3, move || {
        DVector::<f64>::from_vec(Vec::new())?.save(&p)?;
        DVector::<f64>::load(&p)?.to_vec()
    }) {
        assert_eq!(r.unwrap(), Vec::<f64>::new());
    }
    std::fs::remove_file(&empty).unwrap();
    // Rank 0 cannot make the file: every rank gets its error (none waits for ever for
    // rank 0 to ask for its part), and nothing is left behind.
    let nowhere = dir.join("no-such-dir").join("v.bin");
    for r in on_ranks(3, move || {
        DVector::from_fn(11, |i| i as f64)?.save(&nowhere)
    }) {
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("no-such-dir"), "{msg}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("v.bin")]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file larger than the pieces `load` reads (1 MiB), saved across 3 ranks and loaded on
/// 2: rank 0 streams it in both directions and every rank gets its range. A damaged byte
/// anywhere, a truncated file, or bytes added at the end are errors on every rank, none of
/// which returns a table.
#[test]
fn a_large_saved_table_streams_and_a_damaged_one_fails_everywhere() {
    let dir = std::env::temp_dir().join(format!("strads-dist-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rows.bin");
    let row = |i: usize| vec![i as u32; 1 + i % 7];
    let expected: Vec<Vec<u32>> = (0..200_000).map(row).collect();
    let p = path.clone();
    for r in on_ranks(3, move || DVector::from_fn(200_000, row)?.save(&p)) {
        r.unwrap();
    }
    assert!(std::fs::metadata(&path).unwrap().len() > 2 << 20);
    let p = path.clone();
    for r in on_ranks(2, move || DVector::<Vec<u32>>::load(&p)?.to_vec()) {
        assert!(r.unwrap() == expected);
    }
    let good = std::fs::read(&path).unwrap();
    let mut flipped = good.clone();
    flipped[good.len() / 3] ^= 0x40;
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 5]);
    for (what, bytes, says) in [
        ("a flipped byte", flipped, "checksum mismatch"),
        (
            "a truncated file",
            good[..good.len() / 2].to_vec(),
            "checksum mismatch",
        ),
        ("bytes added", longer, "checksum mismatch"),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let p = path.clone();
        for r in on_ranks(3, move || DVector::<Vec<u32>>::load(&p).map(|_| ())) {
            let msg = r.unwrap_err().to_string();
            assert!(
                msg.contains(says) && msg.contains("rows.bin"),
                "{what}: {msg}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn maps_and_joins() {
    same_everywhere(|| {
        use strads_ap_runtime::{DMap, DMultiMap};
        let v = DVector::from_fn(41, |i| (i % 13) as u32)?;
        let names = DMap::from_pairs((0..10u32).map(|k| (k, format!("n{k}"))).collect())?;
        names.insert(12, "twelve".to_string())?;
        let old = names.insert(0, "zero".to_string())?;
        let gone = names.remove(&5)?;
        let joined = v.join(&names, |x| *x)?;
        let weights = names.map_values(|k, _| *k as f64 / 2.0)?;
        let both = names.join(&weights)?;
        let multi = DMultiMap::from_pairs(vec![(1u8, 'a'), (2, 'b'), (1, 'c')])?;
        multi.insert(3, 'd')?;
        Ok((
            joined.len(),
            joined.to_vec()?,
            names.to_vec()?,
            (old, gone, names.get(&12)?, names.get(&5)?, names.len()),
            both.to_vec()?,
            (multi.get_all(&1)?, multi.len()?, multi.keys_len()),
        ))
    });
}

/// Driver code reads maps as it reads a `HashMap`: `with_all` lends the entries (look-ups,
/// indexing, iteration in the map's order), `map_reduce` and `filter` work on the owners'
/// values, and a multimap removes, lists, saves and loads its pairs, the same on every
/// rank as in a world of one.
#[test]
fn maps_read_in_driver_code_and_multimaps_round_trip() {
    same_everywhere(|| {
        use strads_ap_runtime::{DMap, DMultiMap};
        let m = DMap::from_pairs((0..30u32).map(|k| (k, u64::from(k) * 3)).collect())?;
        m.remove(&4)?;
        m.insert(100, 1)?;
        let seen = m.with_all(|e| {
            let listed: Vec<(u32, u64)> = e.iter().map(|(k, v)| (*k, *v)).collect();
            (
                listed,
                e[&7],
                e.get(&4).copied(),
                e.contains_key(&100),
                e.len(),
            )
        })?;
        let total = m.map_reduce(|k, v| u64::from(*k) + v, |a, b| a + b)?;
        let big = m.filter(|k, v| *v > 40 && k % 2 == 1)?;
        let empty = m.filter(|_, _| false)?;
        let none = empty.map_reduce(|_, v| *v, |a, b| a + b);
        let multi = DMultiMap::from_pairs(vec![(1u8, 'a'), (2, 'b'), (1, 'c'), (3, 'e')])?;
        multi.insert(2, 'd')?;
        let removed = (multi.remove(&3)?, multi.remove(&9)?);
        // Rank 0 writes and reads the file; the others only pass the path.
        let here = strads_ap_runtime::cluster::here();
        let dir = std::env::temp_dir().join(format!(
            "strads-multimap-{}-{}",
            std::process::id(),
            here.world_size()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("multi");
        multi.save(&path)?;
        let back: DMultiMap<u8, char> = DMultiMap::load(&path)?;
        if here.rank() == 0 {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        let lists =
            back.with_all(|e| e.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>())?;
        Ok((
            seen,
            total,
            big.to_vec()?,
            matches!(none, Err(Error::Empty { .. })),
            (
                removed,
                multi.to_vec()?,
                back.to_vec()? == multi.to_vec()?,
                lists,
            ),
        ))
    });
}

/// Writes `text` to a file `name` in a fresh temporary directory: the directory (keep it
/// while the file is used; it is removed when it drops) and the file's path.
fn write_file(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("strads-dist-read-")
        .tempdir()
        .unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn parse_pair(line: &str) -> std::result::Result<(u32, f32), String> {
    let mut it = line.split_whitespace();
    let a = it
        .next()
        .ok_or("empty")?
        .parse::<u32>()
        .map_err(|e| e.to_string())?;
    let b = it
        .next()
        .ok_or("missing value")?
        .parse::<f32>()
        .map_err(|e| e.to_string())?;
    Ok((a, b))
}

#[test]
fn read_from_file_on_a_cluster_matches_a_world_of_one() {
    // Large enough for several byte ranges, with a header, comments and blank lines.
    let mut text = String::from("id value\n");
    for i in 0..40_000u32 {
        if i % 997 == 0 {
            text.push_str("# a comment\n\n");
        }
        text.push_str(&format!("{i} {}.5\n", i % 13));
    }
    let (_dir, path) = write_file("pairs.txt", &text);
    let p = path.clone();
    same_everywhere(move || {
        let (v, report) = strads_ap_runtime::ReadOptions::new()
            .header_lines(1)
            .comment_prefix("#")
            .read(&p, parse_pair)?;
        Ok((v.len(), v.to_vec()?, report))
    });
}

#[test]
fn a_bad_line_is_reported_with_its_global_line_number_on_every_rank() {
    let mut text = String::new();
    for i in 0..30_000u32 {
        if i == 25_000 {
            text.push_str("25000 not-a-number\n");
        } else {
            text.push_str(&format!("{i} 1.0\n"));
        }
    }
    let (_dir, path) = write_file("bad.txt", &text);
    let p = path.clone();
    for r in on_ranks(4, move || {
        strads_ap_runtime::read_from_file(&p, parse_pair).map(|v| v.len())
    }) {
        match r {
            Err(Error::Parse { line, text, .. }) => {
                assert_eq!(line, 25_001);
                assert!(text.contains("not-a-number"), "{text}");
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }
    let p = path.clone();
    for r in on_ranks(3, move || {
        strads_ap_runtime::ReadOptions::new()
            .skip_bad_lines(true)
            .read(&p, parse_pair)
            .map(|(v, report)| (v.len(), report.skipped, report.first_skipped.map(|f| f.0)))
    }) {
        assert_eq!(r.unwrap(), (29_999, 1, Some(25_001)));
    }
}

/// Writes `files` (name, text, gzip?) into a fresh directory of this test's own, removed
/// when the returned `TempDir` drops.
fn write_files(test: &str, files: &[(&str, String, bool)]) -> tempfile::TempDir {
    use std::io::Write;
    let dir = tempfile::Builder::new()
        .prefix(&format!("strads-dist-{test}-"))
        .tempdir()
        .unwrap();
    for (name, text, gz) in files {
        let bytes = match gz {
            false => text.clone().into_bytes(),
            true => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(text.as_bytes()).unwrap();
                e.finish().unwrap()
            }
        };
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

/// `n` lines `i value` from `from`, after a header line.
fn pairs(from: u32, n: u32) -> String {
    let mut text = String::from("id value\n");
    for i in from..from + n {
        text.push_str(&format!("{i} {}.5\n", i % 5));
    }
    text
}

#[test]
fn several_files_by_pattern_and_gzip_on_a_cluster_match_a_world_of_one() {
    // Three files read as one in name order: plain, compressed (read whole by one rank),
    // and plain with comments and no last newline; each starts with a header line.
    let mut third = pairs(30_000, 10_000);
    third.insert_str(9, "# a comment\n\n");
    third.pop();
    let dir = write_files(
        "pattern",
        &[
            ("part-1.txt", pairs(0, 20_000), false),
            ("part-2.txt.gz", pairs(20_000, 10_000), true),
            ("part-3.txt", third, false),
            ("other.txt", "not read\n".into(), false),
        ],
    );
    let pattern = dir.path().join("part-*");
    same_everywhere(move || {
        let (v, report) = strads_ap_runtime::ReadOptions::new()
            .header_lines(1)
            .comment_prefix("#")
            .read(&pattern, parse_pair)?;
        let all = v.to_vec()?;
        let in_order = all.iter().enumerate().all(|(i, &(id, _))| id as usize == i);
        Ok((v.len(), in_order, report))
    });
    // The same files given as a list, in another order, come in that order.
    let files = [dir.path().join("part-3.txt"), dir.path().join("part-1.txt")];
    same_everywhere(move || {
        let (v, _) = strads_ap_runtime::ReadOptions::new()
            .header_lines(1)
            .comment_prefix("#")
            .read_files(&files, parse_pair)?;
        Ok((v.len(), v.get(0)?.0, v.get(10_000)?.0))
    });
}

#[test]
fn a_bad_line_in_a_later_file_names_that_file_and_its_own_line_on_every_rank() {
    let mut second = pairs(0, 8_000);
    second.push_str("8000 oops\n");
    let dir = write_files(
        "bad-later",
        &[("a.txt", pairs(0, 30_000), false), ("b.txt", second, false)],
    );
    let pattern = dir.path().join("*.txt");
    for world in [1, 3] {
        let p = pattern.clone();
        for r in on_ranks(world, move || {
            strads_ap_runtime::ReadOptions::new()
                .header_lines(1)
                .read(&p, parse_pair)
                .map(|(v, _)| v.len())
        }) {
            match r {
                Err(Error::Parse { path, line, .. }) => {
                    assert!(path.ends_with("b.txt"), "{}", path.display());
                    // The header is line 1 of b.txt, so its 8,001st pair is line 8,002.
                    assert_eq!(line, 8_002);
                }
                other => panic!("expected a parse error in b.txt, got {other:?}"),
            }
        }
    }
}

#[test]
fn the_same_operator_with_other_values_is_explained_as_an_order_that_differs() {
    // Rank 1 builds its pairs in another order, as a HashSet in another process would:
    // the map's keys land at other positions.
    let results = on_ranks(2, || {
        let rank = strads_ap_runtime::cluster::here().rank();
        let mut pairs: Vec<(u32, f32)> = (0..10).map(|k| (k, 0.5)).collect();
        if rank == 1 {
            pairs.reverse();
        }
        strads_ap_runtime::DMap::from_pairs(pairs).map(|_| ())
    });
    for r in results {
        let err = r.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Divergence { rank: 1, .. }), "{msg}");
        assert!(msg.contains("same operator with different"), "{msg}");
        assert!(
            msg.contains("DMap::from_pairs") && msg.contains("HashSet"),
            "{msg}"
        );
        // `Debug` (what `fn main() -> Result<()>` prints) is the same sentence.
        assert_eq!(format!("{err:?}"), msg);
    }
}

#[test]
fn debug_of_an_error_is_its_sentence_with_causes_said_once() {
    let missing = std::env::temp_dir().join("strads-no-such-file.txt");
    let err = strads_ap_runtime::read_from_file(&missing, parse_pair).unwrap_err();
    let (debug, display) = (format!("{err:?}"), err.to_string());
    assert!(display.contains("strads-no-such-file.txt"), "{display}");
    // The OS error is already in the sentence: not repeated under "Caused by".
    assert_eq!(debug, display);
}
