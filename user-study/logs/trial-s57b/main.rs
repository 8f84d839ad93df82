use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use strads_ap::prelude::*;

const N_TRAIN: usize = 50_000;
const N_TEST: usize = 10_000;
const N_FEAT: usize = 20_000;
const C: f32 = 1.0;
const EPOCHS: usize = 10;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Sample {
    id: usize,
    x: Vec<(usize, f32)>,
    y: f32,
}

fn gen_data(seed: u64) -> (Vec<Sample>, Vec<Sample>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Zipf-like: p(k) ∝ 1/(k+1)
    let mut cdf = Vec::with_capacity(N_FEAT);
    let mut acc = 0.0f64;
    for k in 0..N_FEAT {
        acc += 1.0 / (k as f64 + 1.0);
        cdf.push(acc);
    }
    let total = acc;
    let hidden: Vec<f32> = (0..N_FEAT).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let make = |n: usize, rng: &mut ChaCha8Rng| -> Vec<Sample> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let cnt = rng.gen_range(10..=60usize);
            let mut feats: Vec<usize> = Vec::with_capacity(cnt);
            while feats.len() < cnt {
                let u = rng.r#gen::<f64>() * total;
                let k = cdf.partition_point(|&c| c < u).min(N_FEAT - 1);
                if !feats.contains(&k) {
                    feats.push(k);
                }
            }
            feats.sort_unstable();
            let v = 1.0 / (cnt as f32).sqrt();
            let x: Vec<(usize, f32)> = feats.into_iter().map(|k| (k, v)).collect();
            let score: f32 = x.iter().map(|&(k, v)| hidden[k] * v).sum();
            let mut y = if score >= 0.0 { 1.0 } else { -1.0 };
            if rng.r#gen::<f64>() < 0.05 {
                y = -y;
            }
            out.push(Sample { id: out.len(), x, y });
        }
        out
    };
    let train = make(N_TRAIN, &mut rng);
    let test = make(N_TEST, &mut rng);
    (train, test)
}

fn dot(w: &[f32], x: &[(usize, f32)]) -> f32 {
    x.iter().map(|&(k, v)| w[k] * v).sum()
}

fn dual_obj(w: &[f32], alpha: &[f32]) -> f64 {
    // f(alpha) = 1/2 ||w||^2 - sum alpha  (liblinear minimises this)
    let ww: f64 = w.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let sa: f64 = alpha.iter().map(|&a| a as f64).sum();
    0.5 * ww - sa
}

fn accuracy(w: &[f32], data: &[Sample]) -> f64 {
    let ok = data
        .iter()
        .filter(|s| (dot(w, &s.x) >= 0.0) == (s.y > 0.0))
        .count();
    ok as f64 / data.len() as f64
}

fn run_serial(train: &[Sample], test: &[Sample]) {
    let qii: Vec<f32> = train.iter().map(|s| s.x.iter().map(|&(_, v)| v * v).sum()).collect();
    let mut alpha: Vec<f32> = vec![0.0; train.len()];
    let mut w: Vec<f32> = vec![0.0; N_FEAT];
    let mut perm: Vec<usize> = (0..train.len()).collect();
    let mut times = Vec::new();
    for epoch in 0..EPOCHS {
        let mut prng = ChaCha8Rng::seed_from_u64(1000 + epoch as u64);
        perm.shuffle(&mut prng);
        let t0 = Instant::now();
        for &i in perm.iter() {
            let s = &train[i];
            let mut wx = 0.0f32;
            for &(k, v) in s.x.iter() {
                wx += w[k] * v;
            }
            let g = s.y * wx - 1.0;
            let a = alpha[i];
            let pg = if a == 0.0 {
                g.min(0.0)
            } else if a == C {
                g.max(0.0)
            } else {
                g
            };
            if pg != 0.0 {
                let a_new = (a - g / qii[i]).clamp(0.0, C);
                alpha[i] = a_new;
                let d = (a_new - a) * s.y;
                for &(k, v) in s.x.iter() {
                    w[k] += d * v;
                }
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        times.push(dt);
        println!("epoch {:2} time {:.4}s dual {:.4}", epoch, dt, dual_obj(&w, &alpha));
    }
    report(&times, &w, test);
    check_alpha(&w, &alpha, train, test);
}

fn run_strads(train_v: Vec<Sample>, test: &[Sample], threads: usize) -> strads_ap::Result<()> {
    let train_copy = train_v.clone();
    let qii_v: Vec<f32> = train_v.iter().map(|s| s.x.iter().map(|&(_, v)| v * v).sum()).collect();
    let n = train_v.len();
    let train = DVector::from_vec(train_v)?;
    let qii = DVector::from_vec(qii_v)?;
    let alpha = DVector::from_vec(vec![0.0f32; n])?;
    let w = DVector::from_vec(vec![0.0f32; N_FEAT])?.relaxed(Relaxed::Sum);
    // Rounds of 2000 updates: the default (8 rounds per call) and larger rounds gave
    // models far from serial's at 2 threads (see report).
    let round: usize = std::env::var("ROUND").ok().and_then(|r| r.parse().ok()).unwrap_or(2000);
    let sched = Dynamic::new(Priority::uniform()).depends(Depends::none()).round(round);
    let opts = Opts::new().threads(threads).dynamic(sched);
    let mut times = Vec::new();
    for epoch in 0..EPOCHS {
        let t0 = Instant::now();
        async_for!(0..n, |i| {
            let s = &train[i];
            let mut wx = 0.0f32;
            for &(k, v) in s.x.iter() {
                wx += w[k] * v;
            }
            let g = s.y * wx - 1.0;
            let a = alpha[i];
            let pg = if a == 0.0 {
                g.min(0.0)
            } else if a == C {
                g.max(0.0)
            } else {
                g
            };
            if pg != 0.0 {
                let a_new = (a - g / qii[i]).clamp(0.0, C);
                alpha[i] = a_new;
                let d = (a_new - a) * s.y;
                for &(k, v) in s.x.iter() {
                    w[k] += d * v;
                }
            }
        }, &opts)?;
        let dt = t0.elapsed().as_secs_f64();
        times.push(dt);
        let (wv, av) = (w.to_vec()?, alpha.to_vec()?);
        println!("epoch {:2} time {:.4}s dual {:.4}", epoch, dt, dual_obj(&wv, &av));
    }
    report(&times, &w.to_vec()?, test);
    check_alpha(&w.to_vec()?, &alpha.to_vec()?, &train_copy, test);
    if std::env::var("SHOW_STATS").is_ok() {
        for st in strads_ap::loop_stats() {
            eprintln!("{:#?}", st);
        }
    }
    Ok(())
}

fn report(times: &[f64], w: &[f32], test: &[Sample]) {
    let mut t = times.to_vec();
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("median epoch time {:.4}s", t[t.len() / 2]);
    println!("test accuracy {:.4}", accuracy(w, test));
}

/// Consistency check: w should equal sum_i alpha_i y_i x_i.
fn check_alpha(w: &[f32], alpha: &[f32], train: &[Sample], test: &[Sample]) {
    let mut wa = vec![0.0f64; N_FEAT];
    for (s, &a) in train.iter().zip(alpha) {
        for &(k, v) in &s.x {
            wa[k] += (a * s.y * v) as f64;
        }
    }
    let diff: f64 = wa.iter().zip(w).map(|(a, &b)| (a - b as f64).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = wa.iter().map(|a| a * a).sum::<f64>().sqrt();
    let waf: Vec<f32> = wa.iter().map(|&v| v as f32).collect();
    let hinge: f64 = train.iter().map(|s| (1.0 - s.y as f64 * dot(w, &s.x) as f64).max(0.0)).sum();
    let ww: f64 = w.iter().map(|&v| (v as f64).powi(2)).sum();
    println!("final primal {:.4}  ||w|| {:.3}", 0.5 * ww + C as f64 * hinge, ww.sqrt());
    println!(
        "final dual(alpha) {:.4}  ||w - w(alpha)||/||w(alpha)|| {:.2e}  test acc with w(alpha) {:.4}",
        dual_obj(&waf, alpha), diff / norm, accuracy(&waf, test)
    );
}

fn main() -> strads_ap::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut mode = "serial".to_string();
    let mut threads = 1usize;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--mode" => { mode = args[i + 1].clone(); i += 1; }
            "--threads" => { threads = args[i + 1].parse().unwrap(); i += 1; }
            _ => panic!("unknown arg {}", args[i]),
        }
        i += 1;
    }
    let t0 = Instant::now();
    let (train, test) = gen_data(42);
    let nnz: usize = train.iter().map(|s| s.x.len()).sum();
    let pos = train.iter().filter(|s| s.y > 0.0).count();
    println!("data: {} train ({} pos), {} test, nnz {}, gen {:.2}s", train.len(), pos, test.len(), nnz, t0.elapsed().as_secs_f64());
    match mode.as_str() {
        "serial" => run_serial(&train, &test),
        "strads" => {
            strads_ap::init_with(strads_ap::Config::local(threads))?;
            run_strads(train, &test, threads)?;
            strads_ap::finish()?;
        }
        m => panic!("unknown mode {}", m),
    }
    Ok(())
}
