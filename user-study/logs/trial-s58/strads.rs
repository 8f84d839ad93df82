// strads-ap Baum-Welch HMM for unsupervised POS induction on Brown.
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::time::Instant;
use strads_ap::prelude::*;

const K: usize = 12; // hidden states
const TOP: usize = 5000; // vocabulary kept
const V: usize = TOP + 1; // + UNK
const UNK: usize = TOP;
const ITERS: usize = 10;

fn load(path: &str) -> Vec<Vec<u32>> {
    let text = std::fs::read_to_string(path).expect("read data");
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in &lines {
        for w in s {
            *counts.entry(*w).or_insert(0) += 1;
        }
    }
    let mut by_freq: Vec<(&str, usize)> = counts.into_iter().collect();
    by_freq.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
    let ids: HashMap<&str, u32> = by_freq.iter().take(TOP).enumerate().map(|(i, (w, _))| (*w, i as u32)).collect();
    lines
        .iter()
        .map(|s| s.iter().map(|w| *ids.get(w).unwrap_or(&(UNK as u32))).collect())
        .collect()
}

fn random_rows(rng: &mut StdRng, rows: usize, cols: usize) -> Vec<f64> {
    let mut m = vec![0.0; rows * cols];
    for r in 0..rows {
        let mut s = 0.0;
        for c in 0..cols {
            let x: f64 = rng.gen_range(0.5..1.5);
            m[r * cols + c] = x;
            s += x;
        }
        for c in 0..cols {
            m[r * cols + c] /= s;
        }
    }
    m
}

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let path = std::env::args().nth(1).unwrap_or_else(|| "/work/shared/data/brown/sentences.txt".to_string());
    let sentences = DVector::from_vec(load(&path))?;
    let ntok: usize = sentences.map_reduce(|s| s.len(), |x, y| x + y)?;
    eprintln!("{} sentences, {} tokens, V = {}", sentences.len(), ntok, V);

    let mut rng = StdRng::seed_from_u64(42);
    let mut pi = random_rows(&mut rng, 1, K);
    let mut a = random_rows(&mut rng, K, K);
    let mut b = random_rows(&mut rng, K, V);

    let mut times = Vec::new();
    let mut last_ll = 0.0;
    for it in 0..ITERS {
        let t0 = Instant::now();
        let mut start_acc = vec![0.0f64; K];
        let mut trans_acc = vec![0.0f64; K * K];
        let mut emit_acc = vec![0.0f64; K * V];
        let mut loglik = 0.0f64;

        // E-step: the loop to parallelise.
        async_for!(0..sentences.len(), |k| {
            let obs = &sentences[k];
            let t_len = obs.len();
            let mut alpha = vec![0.0f64; t_len * K];
            let mut beta = vec![0.0f64; t_len * K];
            let mut scale = vec![0.0f64; t_len];
            // forward
            let o0 = obs[0] as usize;
            let mut c = 0.0;
            for i in 0..K {
                alpha[i] = pi[i] * b[i * V + o0];
                c += alpha[i];
            }
            scale[0] = c;
            for i in 0..K {
                alpha[i] /= c;
            }
            for t in 1..t_len {
                let o = obs[t] as usize;
                let mut c = 0.0;
                for j in 0..K {
                    let mut s = 0.0;
                    for i in 0..K {
                        s += alpha[(t - 1) * K + i] * a[i * K + j];
                    }
                    let v = s * b[j * V + o];
                    alpha[t * K + j] = v;
                    c += v;
                }
                scale[t] = c;
                for j in 0..K {
                    alpha[t * K + j] /= c;
                }
            }
            // backward
            for i in 0..K {
                beta[(t_len - 1) * K + i] = 1.0;
            }
            for t in (0..t_len - 1).rev() {
                let o = obs[t + 1] as usize;
                for i in 0..K {
                    let mut s = 0.0;
                    for j in 0..K {
                        s += a[i * K + j] * b[j * V + o] * beta[(t + 1) * K + j];
                    }
                    beta[t * K + i] = s / scale[t + 1];
                }
            }
            // expected counts
            for i in 0..K {
                start_acc[i] += alpha[i] * beta[i];
            }
            for t in 0..t_len {
                let o = obs[t] as usize;
                for i in 0..K {
                    emit_acc[i * V + o] += alpha[t * K + i] * beta[t * K + i];
                }
            }
            for t in 0..t_len - 1 {
                let o = obs[t + 1] as usize;
                for i in 0..K {
                    for j in 0..K {
                        trans_acc[i * K + j] +=
                            alpha[t * K + i] * a[i * K + j] * b[j * V + o] * beta[(t + 1) * K + j] / scale[t + 1];
                    }
                }
            }
            let mut ll = 0.0;
            for t in 0..t_len {
                ll += scale[t].ln();
            }
            loglik += ll;
        })?;

        // M-step
        let s: f64 = start_acc.iter().sum();
        for i in 0..K {
            pi[i] = start_acc[i] / s;
        }
        for i in 0..K {
            let s: f64 = trans_acc[i * K..(i + 1) * K].iter().sum();
            for j in 0..K {
                a[i * K + j] = trans_acc[i * K + j] / s;
            }
            let s: f64 = emit_acc[i * V..(i + 1) * V].iter().sum();
            for w in 0..V {
                b[i * V + w] = emit_acc[i * V + w] / s;
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        times.push(secs);
        last_ll = loglik;
        println!("iter {it}: loglik {loglik:.6} bits {:016x} ({secs:.3} s)", loglik.to_bits());
    }
    times.sort_by(|x, y| x.partial_cmp(y).unwrap());
    println!(
        "{{\"impl\":\"strads-ap\",\"median_secs_per_iter\":{:.4},\"final_loglik\":{:.10e}}}",
        times[ITERS / 2],
        last_ll
    );
    strads_ap::finish()?;
    Ok(())
}
