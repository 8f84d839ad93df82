use std::time::Instant;
use strads_ap::prelude::*;
use trial59::*;

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let t0 = Instant::now();
    let d = load();
    let train = DVector::from_vec(d.train.clone())?;
    let mu = d.mu;
    let (nbrs, rated) = (std::sync::Arc::new(d.nbrs.clone()), std::sync::Arc::new(d.rated.clone()));
    let bu = DVector::from_vec(vec![0.0f32; d.n_users])?;
    let bi = DVector::from_vec(vec![0.0f32; d.n_items])?.relaxed(Relaxed::Sum);
    let w = DVector::from_vec(vec![vec![0.0f32; K]; d.n_items])?;
    let opts = Opts::new().interleave(16);
    let t_train = Instant::now();
    let mut epoch_secs = Vec::new();
    for epoch in 0..EPOCHS {
        let te = Instant::now();
        let mut loss = 0.0f64;
        async_for!(0..train.len(), |k| {
            let r = &train[k];
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
                w[i][slot] += if has[slot] { LR * (e * nrm * res[slot] - REG * w[i][slot]) } else { 0.0 };
            }
        }, &opts)?;
        let secs = te.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        eprintln!("epoch {epoch}: train RMSE {:.4} ({secs:.3} s)", (loss / train.len() as f64).sqrt());
    }
    let train_secs = t_train.elapsed().as_secs_f64();
    let test_rmse = rmse(&d, &d.test, &bu.to_vec()?, &bi.to_vec()?, &w.to_vec()?);
    let steady: f64 = epoch_secs[1..].iter().sum::<f64>() / (EPOCHS - 1) as f64;
    let threads = std::env::var("STRADS_THREADS").unwrap_or_else(|_| "all".into());
    println!(
        "{{\"impl\":\"strads\",\"threads\":\"{threads}\",\"secs_per_epoch\":{steady:.5},\"train_secs\":{train_secs:.4},\"total_secs\":{:.4},\"test_rmse\":{test_rmse:.6}}}",
        t0.elapsed().as_secs_f64()
    );
    strads_ap::finish()?;
    Ok(())
}
