//! Shared data preparation: Brown corpus -> 40-word passages -> bag-of-words examples.
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::{BTreeMap, HashMap};

pub const PASSAGE: usize = 40;
pub const NCLASS: usize = 15;
pub const EPOCHS: usize = 15;
pub const MIN_COUNT: usize = 3;
pub const HOT: usize = 256; // the most frequent words, kept in a small relaxed table (strads only)
pub const DATA: &str = "/work/shared/data/brown/documents.tsv";

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Example {
    pub pos: usize,   // position in the training order (used by the sync_for! variant)
    pub label: usize,
    pub feats: Vec<(usize, f32)>, // (word id, count), sorted by word id
}

pub struct Data {
    pub train: Vec<Example>,
    pub test: Vec<Example>,
    pub vocab: usize,
}

pub fn load() -> Data {
    let text = std::fs::read_to_string(DATA).expect("reading documents.tsv");
    let mut docs: Vec<(char, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        let (id, body) = line.split_once('\t').expect("id<TAB>text");
        let genre = id.chars().nth(1).unwrap();
        docs.push((genre, body.split_whitespace().collect()));
    }
    // genres -> class ids 0..15 in sorted order
    let mut genres: Vec<char> = docs.iter().map(|d| d.0).collect();
    genres.sort();
    genres.dedup();
    assert_eq!(genres.len(), NCLASS);
    let class_of: HashMap<char, usize> = genres.iter().enumerate().map(|(i, &g)| (g, i)).collect();

    // split by document: seeded shuffle (seed 1), 80% train
    let mut order: Vec<usize> = (0..docs.len()).collect();
    let mut rng = StdRng::seed_from_u64(1);
    order.shuffle(&mut rng);
    let ntrain = docs.len() * 8 / 10;
    let (train_docs, test_docs) = order.split_at(ntrain);

    // passages of 40 consecutive words (a shorter remainder is dropped)
    let passages = |ids: &[usize]| -> Vec<(usize, Vec<&str>)> {
        let mut out = Vec::new();
        for &d in ids {
            let (g, words) = &docs[d];
            for chunk in words.chunks_exact(PASSAGE) {
                out.push((class_of[g], chunk.to_vec()));
            }
        }
        out
    };
    let mut train_p = passages(train_docs);
    let test_p = passages(test_docs);
    // visit training passages in a shuffled (but then fixed) order
    train_p.shuffle(&mut rng);
    // calibration only: ORDER_SEED=s visits the training passages in another order
    if let Ok(seed) = std::env::var("ORDER_SEED") {
        train_p.shuffle(&mut StdRng::seed_from_u64(seed.parse().unwrap()));
    }

    // vocabulary: words occurring at least 3 times in the training passages
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, ws) in &train_p {
        for w in ws {
            *counts.entry(w).or_insert(0) += 1;
        }
    }
    // word ids by descending frequency (ties alphabetical): id 0 is the most frequent word
    let mut kept: Vec<(&str, usize)> = counts.iter().filter(|(_, &c)| c >= MIN_COUNT).map(|(w, &c)| (*w, c)).collect();
    kept.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let vocab: HashMap<&str, usize> = kept.iter().enumerate().map(|(i, (w, _))| (*w, i)).collect();

    let featurize = |ps: &[(usize, Vec<&str>)]| -> Vec<Example> {
        ps.iter()
            .enumerate()
            .map(|(pos, (label, ws))| {
                let mut bag: BTreeMap<usize, f32> = BTreeMap::new();
                for w in ws {
                    if let Some(&id) = vocab.get(w) {
                        *bag.entry(id).or_insert(0.0) += 1.0;
                    }
                }
                Example { pos, label: *label, feats: bag.into_iter().collect() }
            })
            .collect()
    };
    Data { train: featurize(&train_p), test: featurize(&test_p), vocab: vocab.len() }
}

/// Argmax of scores; ties go to the lowest class.
pub fn argmax(s: &[f32; NCLASS]) -> usize {
    let mut best = 0;
    for c in 1..NCLASS {
        if s[c] > s[best] {
            best = c;
        }
    }
    best
}
