//! Data operators give the same results as the serial code they replace.

use strads_ap::prelude::*;

#[test]
fn vector_operators_match_iterators() {
    let xs: Vec<i64> = (0..10_000).map(|i| (i * 7919) % 1000 - 500).collect();
    let v = DVector::from_vec(xs.clone()).unwrap();
    assert_eq!(v.len(), xs.len());
    assert_eq!(v.to_vec().unwrap(), xs);
    assert_eq!(v.iter().unwrap().collect::<Vec<_>>(), xs);

    let squares = v.map(|x| x * x).unwrap();
    assert_eq!(
        squares.to_vec().unwrap(),
        xs.iter().map(|x| x * x).collect::<Vec<_>>()
    );
    assert_eq!(v.reduce(|a, b| a + b).unwrap(), xs.iter().sum::<i64>());
    assert_eq!(
        v.map_reduce(|x| x.abs(), |a, b| a.max(b)).unwrap(),
        xs.iter().map(|x| x.abs()).max().unwrap()
    );
    let positive = v.filter(|x| *x > 0).unwrap();
    assert_eq!(
        positive.to_vec().unwrap(),
        xs.iter().copied().filter(|x| *x > 0).collect::<Vec<_>>()
    );

    v.transform(|i, x| *x += i as i64).unwrap();
    let shifted: Vec<i64> = xs.iter().enumerate().map(|(i, x)| x + i as i64).collect();
    assert_eq!(v.to_vec().unwrap(), shifted);
    assert_eq!(
        v.with_all(|all| all.iter().sum::<i64>()).unwrap(),
        shifted.iter().sum::<i64>()
    );

    // Handles share elements; new DDSs get new ids.
    let alias = v.clone();
    alias.set(0, 42).unwrap();
    assert_eq!(v.get(0).unwrap(), 42);
    assert_eq!(alias.id(), v.id());
    assert_ne!(squares.id(), v.id());
}

#[test]
fn join_pairs_matching_keys_in_order() {
    let orders = DVector::from_vec(vec![(1u32, 2.5f64), (7, 1.0), (2, 4.0), (1, 3.0)]).unwrap();
    let names = DMap::from_pairs(vec![(1u32, "ann".to_string()), (2, "bob".to_string())]).unwrap();
    let joined = orders.join(&names, |o| o.0).unwrap();
    assert_eq!(
        joined.to_vec().unwrap(),
        vec![
            ((1, 2.5), "ann".to_string()),
            ((2, 4.0), "bob".to_string()),
            ((1, 3.0), "ann".to_string()),
        ]
    );
}

#[test]
fn maps_behave_like_hash_maps() {
    let m: DMap<String, u32> = DMap::new().unwrap();
    assert!(m.is_empty());
    for (i, w) in ["a", "b", "c", "b"].iter().enumerate() {
        let old = m.insert(w.to_string(), i as u32).unwrap();
        if i == 3 {
            assert_eq!(old, Some(1));
        }
    }
    assert_eq!(m.len(), 3);
    let all = m.read_all().unwrap();
    assert_eq!(
        format!("{all:?}"),
        r#"{"a": 0, "b": 3, "c": 2}"#,
        "in the map's order"
    );
    drop(all);
    assert_eq!(m.get(&"b".into()).unwrap(), Some(3));
    assert_eq!(m.get(&"z".into()).unwrap(), None);
    assert!(m.contains_key(&"c".into()).unwrap());
    assert_eq!(m.remove(&"a".into()).unwrap(), Some(0));
    assert!(!m.contains_key(&"a".into()).unwrap());
    let mut pairs = m.to_vec().unwrap();
    pairs.sort();
    assert_eq!(pairs, vec![("b".to_string(), 3), ("c".to_string(), 2)]);

    let doubled = m.map_values(|_, v| v * 2).unwrap();
    assert_eq!(doubled.get(&"b".into()).unwrap(), Some(6));
    let other = DMap::from_pairs(vec![("c".to_string(), 'x'), ("d".to_string(), 'y')]).unwrap();
    let both = m.join(&other).unwrap();
    assert_eq!(both.to_vec().unwrap(), vec![("c".to_string(), (2, 'x'))]);

    let mm = DMultiMap::from_pairs(vec![(1u8, 'a'), (2, 'b'), (1, 'c')]).unwrap();
    mm.insert(2, 'd').unwrap();
    assert_eq!(mm.get_all(&1).unwrap(), vec!['a', 'c']);
    assert_eq!(mm.get_all(&2).unwrap(), vec!['b', 'd']);
    assert!(mm.get_all(&3).unwrap().is_empty());
    assert_eq!((mm.len().unwrap(), mm.keys_len()), (4, 2));
}

#[test]
fn save_and_load_round_trip() {
    let tmp = tempfile::Builder::new()
        .prefix("strads-ap-ops-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let rows = DVector::from_fn(500, |i| vec![i as f32; 3]).unwrap();
    rows.save(dir.join("rows")).unwrap();
    let back = DVector::<Vec<f32>>::load(dir.join("rows")).unwrap();
    assert_eq!(back.to_vec().unwrap(), rows.to_vec().unwrap());
    // No temporary file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty());

    let m = DMap::from_pairs(vec![(3u64, "three".to_string()), (4, "four".to_string())]).unwrap();
    m.save(dir.join("map")).unwrap();
    let back = DMap::<u64, String>::load(dir.join("map")).unwrap();
    assert_eq!(back.to_vec().unwrap(), m.to_vec().unwrap());
    // A map file is not a vector file.
    let err = DVector::<(u64, String)>::load(dir.join("map")).unwrap_err();
    assert!(
        err.to_string().contains("holds a DMap, not a DVector"),
        "{err}"
    );
}

mod sequences {
    //! Random sequences of map operations agree with `std::collections::HashMap`.

    use std::collections::HashMap;

    use proptest::prelude::*;
    use strads_ap::{DMap, DMultiMap};

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, i32),
        Remove(u8),
        Get(u8),
        Contains(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<i32>()).prop_map(|(k, v)| Op::Insert(k % 16, v)),
            any::<u8>().prop_map(|k| Op::Remove(k % 16)),
            any::<u8>().prop_map(|k| Op::Get(k % 16)),
            any::<u8>().prop_map(|k| Op::Contains(k % 16)),
        ]
    }

    proptest! {
        #[test]
        fn dmap_agrees_with_hashmap(ops in prop::collection::vec(op(), 0..60)) {
            let d = DMap::new().unwrap();
            let mut m = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(d.insert(k, v).unwrap(), m.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(d.remove(&k).unwrap(), m.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(d.get(&k).unwrap(), m.get(&k).copied()),
                    Op::Contains(k) => prop_assert_eq!(d.contains_key(&k).unwrap(), m.contains_key(&k)),
                }
                prop_assert_eq!(d.len(), m.len());
            }
            let mut pairs = d.to_vec().unwrap();
            pairs.sort();
            let mut expected: Vec<(u8, i32)> = m.into_iter().collect();
            expected.sort();
            prop_assert_eq!(pairs, expected);
        }

        #[test]
        fn dmultimap_keeps_insertion_order(pairs in prop::collection::vec((0u8..8, any::<i16>()), 0..60)) {
            let d = DMultiMap::new().unwrap();
            let mut m: HashMap<u8, Vec<i16>> = HashMap::new();
            for &(k, v) in &pairs {
                d.insert(k, v).unwrap();
                m.entry(k).or_default().push(v);
            }
            for k in 0..8 {
                prop_assert_eq!(d.get_all(&k).unwrap(), m.get(&k).cloned().unwrap_or_default());
            }
            prop_assert_eq!(d.len().unwrap(), pairs.len());
            prop_assert_eq!(d.keys_len(), m.len());
        }
    }
}
