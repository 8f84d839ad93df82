use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use trial58b::*;

fn main() {
    let path = std::env::args().nth(1).unwrap_or("/work/shared/data/brown/sentences.txt".into());
    let docs = load(&path);
    let nd = docs.len();
    let lens: Vec<i64> = docs.iter().map(|d| d.iter().map(|&(_, c)| c as i64).sum()).collect();
    eprintln!("{} documents, {} tokens", nd, lens.iter().sum::<i64>());

    let seed: u64 = std::env::var("GSDMM_SEED").map(|s| s.parse().unwrap()).unwrap_or(SEED);
    // optional check: draw from one RNG per (iteration, document), as the strads-ap body must
    let perdoc = std::env::var("PERDOC_RNG").is_ok();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut z = vec![0usize; nd];
    let mut m = vec![0i64; K];
    let mut n = vec![0i64; K];
    let mut nw = vec![vec![0i64; V]; K];
    for d in 0..nd {
        let k = rng.gen_range(0..K);
        z[d] = k;
        m[k] += 1;
        n[k] += lens[d];
        for &(w, c) in &docs[d] {
            nw[k][w as usize] += c as i64;
        }
    }
    let vbeta = V as f64 * BETA;
    let mut times = Vec::new();
    for it in 0..ITERS {
        let t0 = Instant::now();
        let mut moved = 0u64;
        for d in 0..nd {
            let doc = &docs[d];
            let len = lens[d];
            let old = z[d];
            // remove d from its cluster
            m[old] -= 1;
            n[old] -= len;
            for &(w, c) in doc {
                nw[old][w as usize] -= c as i64;
            }
            // log conditional of each cluster
            let mut lp = [0.0f64; K];
            for k in 0..K {
                let mut s = (m[k] as f64 + ALPHA).ln();
                for &(w, c) in doc {
                    let base = nw[k][w as usize] as f64 + BETA;
                    for j in 0..c {
                        s += (base + j as f64).ln();
                    }
                }
                let nb = n[k] as f64 + vbeta;
                for i in 0..len {
                    s -= (nb + i as f64).ln();
                }
                lp[k] = s;
            }
            // sample
            let mx = lp.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut total = 0.0;
            for k in 0..K {
                lp[k] = (lp[k] - mx).exp();
                total += lp[k];
            }
            let mut u = if perdoc {
                ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003) + (it * nd + d) as u64).gen::<f64>() * total
            } else {
                rng.gen::<f64>() * total
            };
            let mut new = K - 1;
            for k in 0..K {
                u -= lp[k];
                if u <= 0.0 {
                    new = k;
                    break;
                }
            }
            // add d to the new cluster
            m[new] += 1;
            n[new] += len;
            for &(w, c) in doc {
                nw[new][w as usize] += c as i64;
            }
            if new != old {
                moved += 1;
            }
            z[d] = new;
        }
        let secs = t0.elapsed().as_secs_f64();
        times.push(secs);
        let nonempty = m.iter().filter(|&&x| x > 0).count();
        let ll = loglik(&nw, &n);
        println!("iter {:2}: {:.3} s, non-empty clusters {}, moved {}, loglik/token {:.5}", it, secs, nonempty, moved, ll);
    }
    let mut s = times.clone();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("RESULT impl=serial median_secs={:.4} final_loglik={:.5} nonempty={}", s[s.len() / 2], loglik(&nw, &n), m.iter().filter(|&&x| x > 0).count());
}
