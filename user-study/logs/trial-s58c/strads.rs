// The serial SGNS program converted to strads-ap.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;
use strads_ap::prelude::*;
use trial58c::*;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

// per-index seed: any hash of (seed, epoch, index), as the manual's "Random numbers" says
fn mix(epoch: usize, k: usize) -> u64 {
    let mut z = (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let corpus = load("/work/shared/data/brown/sentences.txt");
    let v = corpus.words.len();
    let npairs = corpus.pairs.len();
    eprintln!("vocab {v}, pairs {npairs}");
    let pairs = DVector::from_vec(corpus.pairs.clone())?;
    let table = Arc::new(corpus.unigram_table.clone());
    let seed = seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let init: Vec<Vec<f32>> =
        (0..v).map(|_| (0..DIM).map(|_| (rng.r#gen::<f32>() - 0.5) / DIM as f32).collect()).collect();
    let win = DVector::from_vec(init)?;
    let wout = DVector::from_fn(v, |_| vec![0.0f32; DIM])?.relaxed(Relaxed::Sum);
    let total_steps = (EPOCHS * npairs) as f32;
    let mut secs = Vec::new();
    let mut last_loss = 0.0;
    for epoch in 0..EPOCHS {
        let t = Instant::now();
        let mut loss = 0.0f64;
        async_for!(0..npairs, |k| {
            let mut rng = SmallRng::seed_from_u64(seed ^ mix(epoch, k));
            let (c, o) = (pairs[k].0 as usize, pairs[k].1 as usize);
            let step = (epoch * npairs + k) as f32;
            let lr = (LR0 * (1.0 - step / total_steps)).max(LR0 * 1e-4);
            let mut grad = [0.0f32; DIM];
            for s in 0..=NEG {
                let (target, label) =
                    if s == 0 { (o, 1.0f32) } else { (table[rng.gen_range(0..table.len())] as usize, 0.0f32) };
                if s > 0 && target == o {
                    continue;
                }
                let f = dot(&win[c], &wout[target]);
                let sig = 1.0 / (1.0 + (-f).exp());
                let p = if label == 1.0 { sig } else { 1.0 - sig };
                loss -= f64::from(p.max(1e-7)).ln();
                let g = lr * (label - sig);
                for d in 0..DIM {
                    grad[d] += g * wout[target][d];
                    wout[target][d] += g * win[c][d];
                }
            }
            for d in 0..DIM {
                win[c][d] += grad[d];
            }
        }, Opts::new().interleave(64))?; // 64: trained model matches serial (STRADS_INTERLEAVE=64 measured); default is faster but +0.5% trained loss
        let dt = t.elapsed().as_secs_f64();
        last_loss = loss / npairs as f64;
        secs.push(dt);
        eprintln!("epoch {epoch}: {dt:.3} s, mean loss {last_loss:.5}");
    }
    let win_vec = win.to_vec()?;
    let (rho, gap, n) = evaluate(&corpus, &win_vec);
    let tl = trained_loss(&corpus, &win_vec, &wout.to_vec()?);
    eprintln!("trained loss (own pass) {tl:.5}");
    eprintln!("wordsim353 spearman {rho:.4} over {n} pairs; related-unrelated cosine gap {gap:.4}");
    let threads = std::env::var("STRADS_THREADS").unwrap_or_default();
    println!(
        "{{\"impl\":\"strads\",\"threads\":\"{threads}\",\"secs\":{secs:?},\"loss\":{last_loss:.5},\"trained_loss\":{tl:.5},\"wordsim\":{rho:.4},\"gap\":{gap:.4}}}"
    );
    strads_ap::finish()?;
    Ok(())
}
