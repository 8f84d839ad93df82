// Textbook serial skip-gram with negative sampling (SGNS), plain SGD.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;
use trial58c::*;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn main() {
    let corpus = load("/work/shared/data/brown/sentences.txt");
    let (v, pairs, table) = (corpus.words.len(), &corpus.pairs, &corpus.unigram_table);
    eprintln!("vocab {v}, pairs {}", pairs.len());
    let seed = seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut win: Vec<Vec<f32>> =
        (0..v).map(|_| (0..DIM).map(|_| (rng.r#gen::<f32>() - 0.5) / DIM as f32).collect()).collect();
    let mut wout: Vec<Vec<f32>> = vec![vec![0.0f32; DIM]; v];
    let total_steps = (EPOCHS * pairs.len()) as f32;
    let mut secs = Vec::new();
    let mut last_loss = 0.0;
    for epoch in 0..EPOCHS {
        let t = Instant::now();
        let mut loss = 0.0f64;
        for k in 0..pairs.len() {
            let (c, o) = (pairs[k].0 as usize, pairs[k].1 as usize);
            let step = (epoch * pairs.len() + k) as f32;
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
        }
        let dt = t.elapsed().as_secs_f64();
        last_loss = loss / pairs.len() as f64;
        secs.push(dt);
        eprintln!("epoch {epoch}: {dt:.3} s, mean loss {last_loss:.5}");
    }
    let (rho, gap, n) = evaluate(&corpus, &win);
    let tl = trained_loss(&corpus, &win, &wout);
    eprintln!("trained loss (own pass) {tl:.5}");
    eprintln!("wordsim353 spearman {rho:.4} over {n} pairs; related-unrelated cosine gap {gap:.4}");
    println!(
        "{{\"impl\":\"serial\",\"secs\":{secs:?},\"loss\":{last_loss:.5},\"trained_loss\":{tl:.5},\"wordsim\":{rho:.4},\"gap\":{gap:.4}}}"
    );
}
