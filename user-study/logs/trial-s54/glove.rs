use crate::common::*;
use std::time::Instant;

const V: usize = 20_000;
const NNZ: usize = 300_000;
const DIM: usize = 32;
const LR: f32 = 0.05;
const XMAX: f32 = 100.0;
const ALPHA: f32 = 0.75;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Triple { i: u32, j: u32, x: f32 }

fn weight(x: f32) -> f32 {
    (x / XMAX).powf(ALPHA).min(1.0)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// synthetic co-occurrences: i, j Zipf(1.0) over V words, x grows with both frequencies
fn make_triples(seed: u64) -> Vec<Triple> {
    let mut cdf = Vec::with_capacity(V);
    let mut acc = 0.0f64;
    for r in 0..V { acc += 1.0 / (r as f64 + 1.0); cdf.push(acc); }
    let zipf = |u: f64| -> usize { cdf.partition_point(|&c| c < u * acc).min(V - 1) };
    let mut rng = Rng(seed);
    (0..NNZ)
        .map(|_| {
            let i = zipf(rng.f64());
            let j = zipf(rng.f64());
            let base = 2000.0 / ((i as f64 + 1.0) * (j as f64 + 1.0)).sqrt();
            let x = (base * (0.5 + rng.f64())).max(1.0).round();
            Triple { i: i as u32, j: j as u32, x: x as f32 }
        })
        .collect()
}

fn init_vecs(seed: u64, n: usize) -> Vec<[f32; DIM]> {
    let mut rng = Rng(seed);
    (0..n).map(|_| std::array::from_fn(|_| ((rng.f64() - 0.5) / DIM as f64) as f32)).collect()
}

pub fn run(a: &Args) {
    let epochs = a.epochs.unwrap_or(10);
    match a.mode.as_str() {
        "serial" => serial(a, epochs),
        "strads-sync" => strads_sync(a, epochs).unwrap_or_else(|e| { eprintln!("Error: {e}"); std::process::exit(1) }),
        "strads" => strads(a, epochs).unwrap_or_else(|e| { eprintln!("Error: {e}"); std::process::exit(1) }),
        m => panic!("mode {m}"),
    }
}

fn report(a: &Args, times: &[f64], train_loss: f64, eval_loss: f64) {
    println!(
        "{{\"app\":\"glove\",\"mode\":\"{}\",\"threads\":{},\"epochs\":{},\"first_epoch_s\":{:.5},\"median_epoch_s\":{:.5},\"mean_epoch_s\":{:.5},\"last_epoch_loss\":{:.6},\"eval_loss\":{:.6}}}",
        a.mode, a.threads, times.len(), times[0], median(times), times.iter().sum::<f64>() / times.len() as f64,
        train_loss, eval_loss
    );
}

fn serial(a: &Args, epochs: usize) {
    let mut triples = make_triples(a.seed);
    if let Ok(sd) = std::env::var("GLOVE_SHUFFLE") {
        // debug: a different random order of the same triples
        let mut rng = Rng(sd.parse().unwrap());
        for k in (1..triples.len()).rev() { let r = (rng.next() % (k as u64 + 1)) as usize; triples.swap(k, r); }
    }
    if let Ok(b) = std::env::var("GLOVE_ROT_ORDER") {
        // debug: emulate a rotation schedule's order: step (bi - bj) mod B, then block pair, then original order
        let b: usize = b.parse().unwrap();
        let blk = |x: u32| x as usize * b / V;
        let mut idx: Vec<usize> = (0..triples.len()).collect();
        idx.sort_by_key(|&k| { let t = &triples[k]; ((blk(t.i) + b - blk(t.j)) % b, blk(t.i), k) });
        triples = idx.into_iter().map(|k| triples[k].clone()).collect();
    }
    let mut w = init_vecs(a.seed + 1, V);
    let mut c = init_vecs(a.seed + 2, V);
    let mut bw = vec![0.0f32; V];
    let mut bc = vec![0.0f32; V];
    let mut times = vec![];
    let mut last = 0.0;
    for epoch in 0..epochs {
        let t0 = Instant::now();
        let mut loss = 0.0f64;
        for k in 0..triples.len() {
            let t = &triples[k];
            let (i, j) = (t.i as usize, t.j as usize);
            let fx = weight(t.x);
            let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
            loss += f64::from(fx * diff * diff);
            let g = LR * fx * diff;
            for d in 0..DIM {
                let (wa, cb) = (w[i][d], c[j][d]);
                w[i][d] -= g * cb;
                c[j][d] -= g * wa;
            }
            bw[i] -= g;
            bc[j] -= g;
        }
        times.push(t0.elapsed().as_secs_f64());
        last = loss / triples.len() as f64;
        eprintln!("epoch {epoch}: {:.4} s  train loss {last:.6}", times[epoch]);
    }
    // evaluation pass: mean weighted loss after the last epoch
    let mut sse = 0.0f64;
    for k in 0..triples.len() {
        let t = &triples[k];
        let (i, j) = (t.i as usize, t.j as usize);
        let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
        sse += f64::from(weight(t.x) * diff * diff);
    }
    report(a, &times, last, sse / triples.len() as f64);
}

fn strads(a: &Args, epochs: usize) -> strads_ap::Result<()> {
    use strads_ap::prelude::*;
    strads_ap::init_with(strads_ap::Config::local(a.threads))?;
    let triples = DVector::from_vec(make_triples(a.seed))?;
    let w = DVector::from_vec(init_vecs(a.seed + 1, V))?;
    let c = DVector::from_vec(init_vecs(a.seed + 2, V))?;
    let bw = DVector::from_vec(vec![0.0f32; V])?;
    let bc = DVector::from_vec(vec![0.0f32; V])?;
    let mut times = vec![];
    let mut last = 0.0;
    let mut opts = Opts::new();
    if let Ok(b) = std::env::var("GLOVE_BLOCKS") { opts = opts.blocks(b.parse().unwrap()); }
    if std::env::var("GLOVE_NEVER").is_ok() { opts = opts.fallback(Fallback::Never); }
    for epoch in 0..epochs {
        let t0 = Instant::now();
        let mut loss = 0.0f64;
        async_for!(0..triples.len(), |k| {
            let t = &triples[k];
            let (i, j) = (t.i as usize, t.j as usize);
            let fx = weight(t.x);
            let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
            loss += f64::from(fx * diff * diff);
            let g = LR * fx * diff;
            for d in 0..DIM {
                let (wa, cb) = (w[i][d], c[j][d]);
                w[i][d] -= g * cb;
                c[j][d] -= g * wa;
            }
            bw[i] -= g;
            bc[j] -= g;
        }, &opts)?;
        times.push(t0.elapsed().as_secs_f64());
        last = loss / triples.len() as f64;
        eprintln!("epoch {epoch}: {:.4} s  train loss {last:.6}", times[epoch]);
    }
    // evaluation pass: mean weighted loss after the last epoch
    let mut sse = 0.0f64;
    async_for!(0..triples.len(), |k| {
        let t = &triples[k];
        let (i, j) = (t.i as usize, t.j as usize);
        let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
        sse += f64::from(weight(t.x) * diff * diff);
    })?;
    if std::env::var("GLOVE_CHECK").is_ok() {
        // debug: the same evaluation in plain serial code on copies
        let (tv, wv, cv, bwv, bcv) = (triples.to_vec()?, w.to_vec()?, c.to_vec()?, bw.to_vec()?, bc.to_vec()?);
        let mut s2 = 0.0f64;
        for t in &tv {
            let (i, j) = (t.i as usize, t.j as usize);
            let diff = dot(&wv[i], &cv[j]) + bwv[i] + bcv[j] - t.x.ln();
            s2 += f64::from(weight(t.x) * diff * diff);
        }
        eprintln!("driver-side eval on to_vec copies: {:.6}", s2 / tv.len() as f64);
        eprintln!("{:#?}", strads_ap::loop_stats());
    }
    report(a, &times, last, sse / triples.len() as f64);
    strads_ap::finish()?;
    Ok(())
}

/// alternative: sync_for! Hybrid over mini-batches of the triples, the per-triple SGD step inside
fn strads_sync(a: &Args, epochs: usize) -> strads_ap::Result<()> {
    use strads_ap::prelude::*;
    strads_ap::init_with(strads_ap::Config::local(a.threads))?;
    let triples = DVector::from_vec(make_triples(a.seed))?;
    let w = DVector::from_vec(init_vecs(a.seed + 1, V))?;
    let c = DVector::from_vec(init_vecs(a.seed + 2, V))?;
    let bw = DVector::from_vec(vec![0.0f32; V])?;
    let bc = DVector::from_vec(vec![0.0f32; V])?;
    let mb: usize = std::env::var("GLOVE_MB").map(|v| v.parse().unwrap()).unwrap_or(64);
    let opts = Opts::new().re(true);
    let mut times = vec![];
    let mut last = 0.0;
    for epoch in 0..epochs {
        let t0 = Instant::now();
        let mut loss = 0.0f64;
        sync_for!(triples, mb, SyncMode::Hybrid, |batch| {
            for t in batch {
                let (i, j) = (t.i as usize, t.j as usize);
                let fx = weight(t.x);
                let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
                loss += f64::from(fx * diff * diff);
                let g = LR * fx * diff;
                for d in 0..DIM {
                    let (wa, cb) = (w[i][d], c[j][d]);
                    w[i][d] -= g * cb;
                    c[j][d] -= g * wa;
                }
                bw[i] -= g;
                bc[j] -= g;
            }
        }, &opts)?;
        times.push(t0.elapsed().as_secs_f64());
        last = loss / triples.len() as f64;
        eprintln!("epoch {epoch}: {:.4} s  train loss {last:.6}", times[epoch]);
    }
    let mut sse = 0.0f64;
    async_for!(0..triples.len(), |k| {
        let t = &triples[k];
        let (i, j) = (t.i as usize, t.j as usize);
        let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
        sse += f64::from(weight(t.x) * diff * diff);
    })?;
    if std::env::var("GLOVE_CHECK").is_ok() { eprintln!("{:#?}", strads_ap::loop_stats()); }
    report(a, &times, last, sse / triples.len() as f64);
    strads_ap::finish()?;
    Ok(())
}
