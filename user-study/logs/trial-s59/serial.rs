use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::time::Instant;
use trial59::*;

fn main() {
    let t0 = Instant::now();
    let d = load();
    let (train, mu) = (&d.train, d.mu);
    let (nbrs, rated) = (&d.nbrs, &d.rated);
    let mut bu = vec![0.0f32; d.n_users];
    let mut bi = vec![0.0f32; d.n_items];
    let mut w: Vec<Vec<f32>> = vec![vec![0.0f32; K]; d.n_items];
    let mut rng = StdRng::seed_from_u64(std::env::var("SEED").map(|s| s.parse().unwrap()).unwrap_or(2));
    let mut perm: Vec<usize> = (0..train.len()).collect();
    let t_train = Instant::now();
    let mut epoch_secs = Vec::new();
    for epoch in 0..EPOCHS {
        let te = Instant::now();
        if std::env::var("NOSHUFFLE").is_err() { perm.shuffle(&mut rng); }
        let mut loss = 0.0f64;
        for k in 0..train.len() {
            let r = &train[perm[k]];
            let (u, i) = (r.user as usize, r.item as usize);
            let nb = &nbrs[i];
            let ru = &rated[u];
            let mut res = [0.0f32; K];
            let mut has = [false; K];
            let mut s = 0.0f32;
            let mut n = 0usize;
            for slot in 0..nb.len() {
                let j = nb[slot];
                if let Some(ruj) = rating_of(ru, j) {
                    res[slot] = ruj - mu - bu[u] - bi[j as usize];
                    has[slot] = true;
                    s += w[i][slot] * res[slot];
                    n += 1;
                }
            }
            let nrm = if n > 0 { 1.0 / (n as f32).sqrt() } else { 0.0 };
            let pred = mu + bu[u] + bi[i] + s * nrm;
            let e = r.value - pred;
            loss += f64::from(e * e);
            bu[u] += LR * (e - REG * bu[u]);
            bi[i] += LR * (e - REG * bi[i]);
            for slot in 0..nb.len() {
                if has[slot] {
                    w[i][slot] += LR * (e * nrm * res[slot] - REG * w[i][slot]);
                }
            }
        }
        let secs = te.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        eprintln!("epoch {epoch}: train RMSE {:.4} ({secs:.3} s)", (loss / train.len() as f64).sqrt());
    }
    let train_secs = t_train.elapsed().as_secs_f64();
    let test_rmse = rmse(&d, &d.test, &bu, &bi, &w);
    let steady: f64 = epoch_secs[1..].iter().sum::<f64>() / (EPOCHS - 1) as f64;
    println!(
        "{{\"impl\":\"serial\",\"threads\":1,\"secs_per_epoch\":{steady:.5},\"train_secs\":{train_secs:.4},\"total_secs\":{:.4},\"test_rmse\":{test_rmse:.6}}}",
        t0.elapsed().as_secs_f64()
    );
}
