//! Plain-Rust helpers shared by both programs: data loading and the quality measure.
use std::collections::HashMap;

pub const K: usize = 40;
pub const V: usize = 5000;
pub const ALPHA: f64 = 0.1;
pub const BETA: f64 = 0.1;
pub const ITERS: usize = 15;
pub const SEED: u64 = 42;

/// Each document as (word id, count) pairs, plus its length in tokens.
pub fn load(path: &str) -> Vec<Vec<(u32, u32)>> {
    let text = std::fs::read_to_string(path).expect("reading sentences");
    let mut freq: HashMap<&str, u64> = HashMap::new();
    for line in text.lines() {
        for t in line.split(' ').filter(|t| !t.is_empty()) {
            *freq.entry(t).or_insert(0) += 1;
        }
    }
    let mut words: Vec<(&str, u64)> = freq.into_iter().collect();
    words.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    words.truncate(V);
    let id: HashMap<&str, u32> = words.iter().enumerate().map(|(i, (w, _))| (*w, i as u32)).collect();
    let mut docs = Vec::new();
    for line in text.lines() {
        let mut counts: Vec<(u32, u32)> = Vec::new();
        let mut ids: Vec<u32> = line.split(' ').filter_map(|t| id.get(t).copied()).collect();
        ids.sort_unstable();
        for w in ids {
            match counts.last_mut() {
                Some(last) if last.0 == w => last.1 += 1,
                _ => counts.push((w, 1)),
            }
        }
        if !counts.is_empty() {
            docs.push(counts);
        }
    }
    docs
}

/// Plug-in log-likelihood per token: sum_k sum_w nw[k][w] ln((nw[k][w]+beta)/(n[k]+V beta)) / tokens.
pub fn loglik<R: AsRef<[i64]>>(nw: &[R], n: &[i64]) -> f64 {
    let mut ll = 0.0;
    let mut tokens = 0i64;
    for k in 0..K {
        let denom = (n[k] as f64 + V as f64 * BETA).ln();
        for &c in nw[k].as_ref() {
            if c > 0 {
                ll += c as f64 * ((c as f64 + BETA).ln() - denom);
            }
        }
        tokens += n[k];
    }
    ll / tokens as f64
}
