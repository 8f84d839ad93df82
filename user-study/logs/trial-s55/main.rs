pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
/// uniform in [0,1) from a 64-bit hash
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 { self.0 = self.0.wrapping_add(1); splitmix(self.0 ^ 0x1234_5678) }
    pub fn f64(&mut self) -> f64 { unit(self.next()) }
}
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[s.len() / 2]
}
pub struct Args { pub mode: String, pub threads: usize, pub epochs: Option<usize>, pub seed: u64, pub blocks: Option<usize>, pub interleave: Option<usize> }
pub fn parse_args(rest: &[String]) -> Args {
    let mut a = Args { mode: "serial".into(), threads: 2, epochs: None, seed: 42, blocks: None, interleave: None };
    let mut it = rest.iter();
    while let Some(k) = it.next() {
        let v = it.next().expect("flag needs a value");
        match k.as_str() {
            "--mode" => a.mode = v.clone(),
            "--threads" => a.threads = v.parse().unwrap(),
            "--epochs" => a.epochs = Some(v.parse().unwrap()),
            "--blocks" => a.blocks = Some(v.parse().unwrap()),
            "--interleave" => a.interleave = Some(v.parse().unwrap()),
            "--seed" => a.seed = v.parse().unwrap(),
            _ => panic!("unknown flag {k}"),
        }
    }
    a
}

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


fn report(a: &Args, times: &[f64], train_loss: f64, eval_loss: f64) {
    println!(
        "{{\"app\":\"glove\",\"mode\":\"{}\",\"threads\":{},\"epochs\":{},\"first_epoch_s\":{:.5},\"median_epoch_s\":{:.5},\"mean_epoch_s\":{:.5},\"last_epoch_loss\":{:.6},\"eval_loss\":{:.6}}}",
        a.mode, a.threads, times.len(), times[0], median(times), times.iter().sum::<f64>() / times.len() as f64,
        train_loss, eval_loss
    );
}

fn serial(a: &Args, epochs: usize) {
    let triples = make_triples(a.seed);
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
    let triples = DVector::from_vec(make_triples(a.seed))?;
    let w = DVector::from_vec(init_vecs(a.seed + 1, V))?;
    let c = DVector::from_vec(init_vecs(a.seed + 2, V))?;
    let bw = DVector::from_vec(vec![0.0f32; V])?;
    let bc = DVector::from_vec(vec![0.0f32; V])?;
    let mut opts = Opts::new();
    if let Some(b) = a.blocks { opts = opts.blocks(b); }
    if let Some(r) = a.interleave { opts = opts.interleave(r); }
    let mut times = vec![];
    let mut last = 0.0;
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
    // evaluation pass, serial, on copies of the trained tables
    let triples = triples.to_vec()?;
    let (w, c, bw, bc) = (w.to_vec()?, c.to_vec()?, bw.to_vec()?, bc.to_vec()?);
    let mut sse = 0.0f64;
    for k in 0..triples.len() {
        let t = &triples[k];
        let (i, j) = (t.i as usize, t.j as usize);
        let diff = dot(&w[i], &c[j]) + bw[i] + bc[j] - t.x.ln();
        sse += f64::from(weight(t.x) * diff * diff);
    }
    report(a, &times, last, sse / triples.len() as f64);
    Ok(())
}

fn main() -> strads_ap::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let a = parse_args(&args[1..]);
    let epochs = a.epochs.unwrap_or(10);
    match a.mode.as_str() {
        "serial" => serial(&a, epochs),
        "strads" => {
            strads_ap::init_with(strads_ap::Config::local(a.threads))?;
            strads(&a, epochs)?;
            strads_ap::finish()?;
        }
        m => panic!("unknown mode {m}"),
    }
    Ok(())
}
