//! Shared, non-training code: data loading and evaluation (identical for both programs).
use std::collections::HashMap;

pub const DIM: usize = 50;
pub const WINDOW: usize = 5;
pub const NEG: usize = 5;
pub const MIN_COUNT: usize = 5;
pub const EPOCHS: usize = 3;
pub const LR0: f32 = 0.025;
pub const SEED: u64 = 12345;
pub const TABLE_SIZE: usize = 10_000_000;

pub struct Corpus {
    pub words: Vec<String>,
    pub index: HashMap<String, u32>,
    pub counts: Vec<u64>,
    pub pairs: Vec<(u32, u32)>,
    pub unigram_table: Vec<u32>,
}

pub fn load(path: &str) -> Corpus {
    let text = std::fs::read_to_string(path).expect("reading corpus");
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for line in text.lines() {
        for w in line.split(' ').filter(|w| !w.is_empty()) {
            *counts.entry(w).or_insert(0) += 1;
        }
    }
    let mut vocab: Vec<(&str, u64)> = counts.into_iter().filter(|&(_, c)| c as usize >= MIN_COUNT).collect();
    vocab.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let words: Vec<String> = vocab.iter().map(|(w, _)| w.to_string()).collect();
    let counts: Vec<u64> = vocab.iter().map(|&(_, c)| c).collect();
    let index: HashMap<String, u32> = words.iter().enumerate().map(|(i, w)| (w.clone(), i as u32)).collect();
    // (centre, context) pairs, fixed window, out-of-vocabulary tokens dropped first.
    let mut pairs = Vec::new();
    for line in text.lines() {
        let ids: Vec<u32> = line.split(' ').filter_map(|w| index.get(w).copied()).collect();
        for i in 0..ids.len() {
            let lo = i.saturating_sub(WINDOW);
            let hi = (i + WINDOW).min(ids.len() - 1);
            for j in lo..=hi {
                if j != i {
                    pairs.push((ids[i], ids[j]));
                }
            }
        }
    }
    // unigram^0.75 table, as in word2vec.c
    let pow: Vec<f64> = counts.iter().map(|&c| (c as f64).powf(0.75)).collect();
    let total: f64 = pow.iter().sum();
    let mut unigram_table = Vec::with_capacity(TABLE_SIZE);
    let mut w = 0usize;
    let mut cum = pow[0] / total;
    for a in 0..TABLE_SIZE {
        unigram_table.push(w as u32);
        if (a as f64 + 1.0) / TABLE_SIZE as f64 > cum && w + 1 < pow.len() {
            w += 1;
            cum += pow[w] / total;
        }
    }
    Corpus { words, index, counts, pairs, unigram_table }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for d in 0..a.len() {
        ab += (a[d] * b[d]) as f64;
        aa += (a[d] * a[d]) as f64;
        bb += (b[d] * b[d]) as f64;
    }
    ab / (aa.sqrt() * bb.sqrt() + 1e-12)
}

fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].partial_cmp(&x[b]).unwrap());
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            r[idx[k]] = avg;
        }
        i = j + 1;
    }
    r
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut s, mut sa, mut sb) = (0.0, 0.0, 0.0);
    for i in 0..a.len() {
        s += (a[i] - ma) * (b[i] - mb);
        sa += (a[i] - ma).powi(2);
        sb += (b[i] - mb).powi(2);
    }
    s / (sa.sqrt() * sb.sqrt())
}

const RELATED: [(&str, &str); 10] = [
    ("man", "woman"), ("king", "queen"), ("day", "night"), ("boy", "girl"), ("father", "mother"),
    ("black", "white"), ("good", "bad"), ("war", "peace"), ("city", "town"), ("husband", "wife"),
];
const UNRELATED: [(&str, &str); 10] = [
    ("man", "price"), ("king", "river"), ("day", "church"), ("boy", "tax"), ("father", "method"),
    ("black", "college"), ("good", "oil"), ("war", "hair"), ("city", "blue"), ("husband", "industry"),
];

/// Prints and returns (wordsim spearman, related-minus-unrelated mean cosine).
pub fn evaluate(c: &Corpus, win: &[Vec<f32>]) -> (f64, f64, usize) {
    let text = std::fs::read_to_string("/work/shared/data/word2vec-eval/wordsim353.tsv").expect("wordsim");
    let (mut human, mut model) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let (a, b) = (f[0].to_lowercase(), f[1].to_lowercase());
        if let (Some(&i), Some(&j)) = (c.index.get(&a), c.index.get(&b)) {
            human.push(f[2].trim().parse::<f64>().unwrap());
            model.push(cosine(&win[i as usize], &win[j as usize]));
        }
    }
    let rho = pearson(&ranks(&human), &ranks(&model));
    let mean = |ps: &[(&str, &str)]| {
        let v: Vec<f64> = ps
            .iter()
            .filter_map(|(a, b)| Some(cosine(&win[*c.index.get(*a)? as usize], &win[*c.index.get(*b)? as usize])))
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let gap = mean(&RELATED) - mean(&UNRELATED);
    (rho, gap, human.len())
}

/// The trained model's SGNS loss in a pass of its own (no updates): every 10th pair,
/// negatives from a fixed generator, so both programs are measured identically.
pub fn trained_loss(c: &Corpus, win: &[Vec<f32>], wout: &[Vec<f32>]) -> f64 {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(999);
    let (mut loss, mut n) = (0.0f64, 0usize);
    for k in (0..c.pairs.len()).step_by(10) {
        let (ci, o) = (c.pairs[k].0 as usize, c.pairs[k].1 as usize);
        for s in 0..=NEG {
            let t = if s == 0 { o } else { c.unigram_table[rng.gen_range(0..c.unigram_table.len())] as usize };
            if s > 0 && t == o {
                continue;
            }
            let f: f32 = win[ci].iter().zip(&wout[t]).map(|(a, b)| a * b).sum();
            let sig = 1.0 / (1.0 + (-f).exp());
            let p = if s == 0 { sig } else { 1.0 - sig };
            loss -= f64::from(p.max(1e-7)).ln();
        }
        n += 1;
    }
    loss / n as f64
}

/// SEED, or W2V_SEED from the environment (to measure seed-to-seed spread).
pub fn seed() -> u64 {
    std::env::var("W2V_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED)
}
