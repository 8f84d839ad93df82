use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use strads_ap::prelude::*;
use trial58b::*;

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let path = std::env::args().nth(1).unwrap_or("/work/shared/data/brown/sentences.txt".into());
    let docs_v = load(&path);
    let nd = docs_v.len();
    let lens_v: Vec<i64> = docs_v.iter().map(|d| d.iter().map(|&(_, c)| c as i64).sum()).collect();
    eprintln!("{} documents, {} tokens", nd, lens_v.iter().sum::<i64>());

    let seed: u64 = std::env::var("GSDMM_SEED").map(|s| s.parse().unwrap()).unwrap_or(SEED);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut z_v = vec![0usize; nd];
    let mut m_v = vec![0i64; K];
    let mut n_v = vec![0i64; K];
    let mut nw_v = vec![vec![0i64; V]; K];
    for d in 0..nd {
        let k = rng.gen_range(0..K);
        z_v[d] = k;
        m_v[k] += 1;
        n_v[k] += lens_v[d];
        for &(w, c) in &docs_v[d] {
            nw_v[k][w as usize] += c as i64;
        }
    }
    let docs = DVector::from_vec(docs_v)?;
    let lens = DVector::from_vec(lens_v)?;
    let z = DVector::from_vec(z_v)?;
    // CHANGED: every document reads all clusters' counts and writes two clusters' counts,
    // so the counts are relaxed (summed deltas, slightly stale reads), as the guide says.
    let m = DVector::from_vec(m_v)?.relaxed(Relaxed::Sum);
    let n = DVector::from_vec(n_v)?.relaxed(Relaxed::Sum);
    let nw = DVector::from_vec(nw_v)?.relaxed(Relaxed::Sum);
    let vbeta = V as f64 * BETA;
    let mut times = Vec::new();
    for it in 0..ITERS {
        let t0 = Instant::now();
        let mut moved = 0u64;
        async_for!(0..nd, |d| {
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
            // CHANGED: a captured RNG cannot be mutated in a body; one RNG per (iteration, document)
            let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1_000_003) + (it * nd + d) as u64);
            let mut u = rng.gen::<f64>() * total;
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
        })?;
        let secs = t0.elapsed().as_secs_f64();
        times.push(secs);
        let m_now = m.to_vec()?;
        let n_now = n.to_vec()?;
        let nonempty = m_now.iter().filter(|&&x| x > 0).count();
        let ll = nw.with_all(|rows| loglik(rows, &n_now))?;
        println!("iter {:2}: {:.3} s, non-empty clusters {}, moved {}, loglik/token {:.5}", it, secs, nonempty, moved, ll);
    }
    let mut s = times.clone();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n_now = n.to_vec()?;
    let ll = nw.with_all(|rows| loglik(rows, &n_now))?;
    let nonempty = m.to_vec()?.iter().filter(|&&x| x > 0).count();
    println!("RESULT impl=strads median_secs={:.4} median_after_first={:.4} final_loglik={:.5} nonempty={}", s[s.len() / 2], { let mut t = times[1..].to_vec(); t.sort_by(|a, b| a.partial_cmp(b).unwrap()); t[t.len() / 2] }, ll, nonempty);
    if std::env::var("SHOW_STATS").is_ok() {
        eprintln!("{:#?}", strads_ap::loop_stats());
    }
    strads_ap::finish()?;
    Ok(())
}
