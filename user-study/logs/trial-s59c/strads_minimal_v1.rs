use std::time::Instant;
use strads_ap::prelude::*;
use trial59c::*;

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let d = load();
    let (test, mu) = (&d.test, d.mu);
    let threads: usize = std::env::var("STRADS_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let train = DVector::from_vec(d.train.clone())?;
    let n_of = DVector::from_vec(d.n_of.clone())?;
    let order = DVector::from_vec(d.order.clone())?;
    let bu = DVector::from_vec(vec![0.0f32; d.n_users])?;
    let bi = DVector::from_vec(vec![0.0f32; d.n_items])?;
    let p = DVector::from_vec(init_factors(d.n_users, 11))?;
    let q = DVector::from_vec(init_factors(d.n_items, 12))?;
    let y = DVector::from_vec(init_factors(d.n_items, 13))?.relaxed(Relaxed::Sum);
    let (lr, reg) = (LR, REG);
    let t_all = Instant::now();
    let mut epoch_secs = Vec::new();
    for epoch in 0..EPOCHS {
        let t = Instant::now();
        let mut loss = 0.0f64;
        async_for!(0..order.len(), |kk| {
            let k = order[kk];
            let r = train[k];
            let (u, i) = (r.user, r.item);
            let nu = &n_of[u];
            let norm = 1.0 / (nu.len() as f32).sqrt();
            let mut s = [0.0f32; DIM];
            for &j in nu.iter() {
                for f in 0..DIM {
                    s[f] += y[j][f];
                }
            }
            for f in 0..DIM {
                s[f] *= norm;
            }
            let mut pred = mu + bu[u] + bi[i];
            for f in 0..DIM {
                pred += q[i][f] * (p[u][f] + s[f]);
            }
            let e = r.value - pred;
            loss += f64::from(e * e);
            bu[u] += lr * (e - reg * bu[u]);
            bi[i] += lr * (e - reg * bi[i]);
            let mut q_old = [0.0f32; DIM];
            for f in 0..DIM {
                let (pf, qf) = (p[u][f], q[i][f]);
                q_old[f] = qf;
                p[u][f] += lr * (e * qf - reg * pf);
                q[i][f] += lr * (e * (pf + s[f]) - reg * qf);
            }
            for &j in nu.iter() {
                for f in 0..DIM {
                    y[j][f] += lr * (e * norm * q_old[f] - reg * y[j][f]);
                }
            }
        })?;
        let secs = t.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        eprintln!("epoch {epoch}: train RMSE {:.5} ({secs:.3} s)", (loss / d.train.len() as f64).sqrt());
    }
    let total = t_all.elapsed().as_secs_f64();
    // test RMSE: the serial code, on copies of the tables
    let (bu, bi, p, q, y) = (bu.to_vec()?, bi.to_vec()?, p.to_vec()?, q.to_vec()?, y.to_vec()?);
    let n_of = &d.n_of;
    let mut sse = 0.0f64;
    for r in test.iter() {
        let (u, i) = (r.user, r.item);
        let nu = &n_of[u];
        let norm = if nu.is_empty() { 0.0 } else { 1.0 / (nu.len() as f32).sqrt() };
        let mut s = [0.0f32; DIM];
        for &j in nu.iter() {
            for f in 0..DIM {
                s[f] += y[j][f];
            }
        }
        let mut pred = mu + bu[u] + bi[i];
        for f in 0..DIM {
            pred += q[i][f] * (p[u][f] + norm * s[f]);
        }
        let e = r.value - pred;
        sse += f64::from(e * e);
    }
    let test_rmse = (sse / test.len() as f64).sqrt();
    let steady = &epoch_secs[1..];
    let spe = steady.iter().sum::<f64>() / steady.len() as f64;
    println!(
        "{{\"impl\":\"strads\",\"threads\":{threads},\"secs_per_epoch\":{spe:.4},\"first_epoch_secs\":{:.4},\"total_train_secs\":{total:.4},\"test_rmse\":{test_rmse:.6}}}",
        epoch_secs[0]
    );
    if std::env::var("STATS").is_ok() {
        eprintln!("{:#?}", strads_ap::loop_stats());
    }
    strads_ap::finish()?;
    Ok(())
}
