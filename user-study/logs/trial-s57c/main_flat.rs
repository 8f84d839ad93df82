use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::ops::Index;
use std::sync::Arc;
use std::time::Instant;
use strads_ap::prelude::*;

const D: usize = 20; // input features
const H: usize = 64; // hidden units
const C: usize = 10; // classes
const N_TRAIN: usize = 60_000;
const N_TEST: usize = 10_000;
const BATCH: usize = 32;
const LR: f32 = 0.05;
const EPOCHS: usize = 10;
const SEED: u64 = 42;
const CENTRE_SCALE: f32 = 0.75;

fn gauss(rng: &mut ChaCha8Rng) -> f32 {
    // Box-Muller
    let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
    let u2: f32 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
}

struct Data {
    x: Vec<f32>, // n * D
    y: Vec<usize>,
}

fn make_data(centres: &[f32], n: usize, rng: &mut ChaCha8Rng) -> Data {
    let mut x = Vec::with_capacity(n * D);
    let mut y = Vec::with_capacity(n);
    for _ in 0..n {
        let c = rng.gen_range(0..C);
        for j in 0..D {
            x.push(centres[c * D + j] + gauss(rng));
        }
        y.push(c);
    }
    Data { x, y }
}

struct Model {
    w1: Vec<f32>, // H * D
    b1: Vec<f32>, // H
    w2: Vec<f32>, // C * H
    b2: Vec<f32>, // C
}

fn init_model(rng: &mut ChaCha8Rng) -> Model {
    let s1 = (2.0 / D as f32).sqrt();
    let s2 = (2.0 / H as f32).sqrt();
    Model {
        w1: (0..H * D).map(|_| gauss(rng) * s1).collect(),
        b1: vec![0.0; H],
        w2: (0..C * H).map(|_| gauss(rng) * s2).collect(),
        b2: vec![0.0; C],
    }
}

/// forward pass for one sample; fills h (post-ReLU) and p (softmax probs)
fn forward(m: &Model, x: &[f32], h: &mut [f32; H], p: &mut [f32; C]) {
    for i in 0..H {
        let mut a = m.b1[i];
        let row = &m.w1[i * D..(i + 1) * D];
        for j in 0..D {
            a += row[j] * x[j];
        }
        h[i] = if a > 0.0 { a } else { 0.0 };
    }
    let mut mx = f32::NEG_INFINITY;
    for k in 0..C {
        let mut a = m.b2[k];
        let row = &m.w2[k * H..(k + 1) * H];
        for i in 0..H {
            a += row[i] * h[i];
        }
        p[k] = a;
        if a > mx {
            mx = a;
        }
    }
    let mut s = 0.0;
    for k in 0..C {
        p[k] = (p[k] - mx).exp();
        s += p[k];
    }
    for k in 0..C {
        p[k] /= s;
    }
}

fn accuracy(m: &Model, d: &Data) -> f64 {
    let mut h = [0.0f32; H];
    let mut p = [0.0f32; C];
    let mut correct = 0usize;
    for n in 0..d.y.len() {
        forward(m, &d.x[n * D..(n + 1) * D], &mut h, &mut p);
        let mut best = 0;
        for k in 1..C {
            if p[k] > p[best] {
                best = k;
            }
        }
        if best == d.y[n] {
            correct += 1;
        }
    }
    correct as f64 / d.y.len() as f64
}

fn train_serial(m: &mut Model, train: &Data) {
    let mut gw1 = vec![0.0f32; H * D];
    let mut gb1 = vec![0.0f32; H];
    let mut gw2 = vec![0.0f32; C * H];
    let mut gb2 = vec![0.0f32; C];
    let mut h = [0.0f32; H];
    let mut p = [0.0f32; C];
    let mut dh = [0.0f32; H];
    let mut order: Vec<usize> = (0..N_TRAIN).collect();
    let nb = N_TRAIN / BATCH;
    for epoch in 0..EPOCHS {
        let t0 = Instant::now();
        let mut erng = ChaCha8Rng::seed_from_u64(SEED + 1000 + epoch as u64);
        order.shuffle(&mut erng);
        let mut loss_sum = 0.0f64;
        for b in 0..nb {
            gw1.iter_mut().for_each(|v| *v = 0.0);
            gb1.iter_mut().for_each(|v| *v = 0.0);
            gw2.iter_mut().for_each(|v| *v = 0.0);
            gb2.iter_mut().for_each(|v| *v = 0.0);
            for s in 0..BATCH {
                let n = order[b * BATCH + s];
                let x = &train.x[n * D..(n + 1) * D];
                let y = train.y[n];
                forward(m, x, &mut h, &mut p);
                loss_sum += -(p[y].max(1e-12) as f64).ln();
                // output layer: dz2 = p - onehot(y)
                for i in 0..H {
                    dh[i] = 0.0;
                }
                for k in 0..C {
                    let dz = p[k] - if k == y { 1.0 } else { 0.0 };
                    gb2[k] += dz;
                    let row = &m.w2[k * H..(k + 1) * H];
                    let grow = &mut gw2[k * H..(k + 1) * H];
                    for i in 0..H {
                        grow[i] += dz * h[i];
                        dh[i] += dz * row[i];
                    }
                }
                // hidden layer (ReLU)
                for i in 0..H {
                    if h[i] <= 0.0 {
                        continue;
                    }
                    let dz = dh[i];
                    gb1[i] += dz;
                    let grow = &mut gw1[i * D..(i + 1) * D];
                    for j in 0..D {
                        grow[j] += dz * x[j];
                    }
                }
            }
            let scale = LR / BATCH as f32;
            for (w, g) in m.w1.iter_mut().zip(&gw1) {
                *w -= scale * g;
            }
            for (w, g) in m.b1.iter_mut().zip(&gb1) {
                *w -= scale * g;
            }
            for (w, g) in m.w2.iter_mut().zip(&gw2) {
                *w -= scale * g;
            }
            for (w, g) in m.b2.iter_mut().zip(&gb2) {
                *w -= scale * g;
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        println!(
            "epoch {:2} time {:.3}s train_loss {:.5}",
            epoch,
            dt,
            loss_sum / (nb * BATCH) as f64
        );
    }
}

/// forward pass over any indexable weights (slices in serial code, views in a body)
fn forward_g<W: Index<usize, Output = f32> + ?Sized>(
    w1: &W,
    b1: &W,
    w2: &W,
    b2: &W,
    x: &[f32],
    h: &mut [f32; H],
    p: &mut [f32; C],
) {
    for i in 0..H {
        let mut a = b1[i];
        for j in 0..D {
            a += w1[i * D + j] * x[j];
        }
        h[i] = if a > 0.0 { a } else { 0.0 };
    }
    let mut mx = f32::NEG_INFINITY;
    for k in 0..C {
        let mut a = b2[k];
        for i in 0..H {
            a += w2[k * H + i] * h[i];
        }
        p[k] = a;
        if a > mx {
            mx = a;
        }
    }
    let mut s = 0.0;
    for k in 0..C {
        p[k] = (p[k] - mx).exp();
        s += p[k];
    }
    for k in 0..C {
        p[k] /= s;
    }
}

fn train_strads(m: &mut Model, train: &Data) -> strads_ap::Result<()> {
    let w1 = DVector::from_vec(m.w1.clone())?;
    let b1 = DVector::from_vec(m.b1.clone())?;
    let w2 = DVector::from_vec(m.w2.clone())?;
    let b2 = DVector::from_vec(m.b2.clone())?;
    let xs = Arc::new(train.x.clone());
    let ys = Arc::new(train.y.clone());
    let mut order: Vec<usize> = (0..N_TRAIN).collect();
    let order_d = DVector::from_vec(order.clone())?;
    let nb = N_TRAIN / BATCH;
    for epoch in 0..EPOCHS {
        let t0 = Instant::now();
        let mut erng = ChaCha8Rng::seed_from_u64(SEED + 1000 + epoch as u64);
        order.shuffle(&mut erng);
        order_d.transform(|i, v| *v = order[i])?;
        let mut loss_sum = 0.0f64;
        sync_for!(order_d, BATCH, SyncMode::Hybrid, |batch| {
            let mut gw1 = [0.0f32; H * D];
            let mut gb1 = [0.0f32; H];
            let mut gw2 = [0.0f32; C * H];
            let mut gb2 = [0.0f32; C];
            let mut h = [0.0f32; H];
            let mut p = [0.0f32; C];
            let mut dh = [0.0f32; H];
            for &n in batch {
                let x = &xs[n * D..(n + 1) * D];
                let y = ys[n];
                forward_g(&*w1, &*b1, &*w2, &*b2, x, &mut h, &mut p);
                loss_sum += -(p[y].max(1e-12) as f64).ln();
                // output layer: dz2 = p - onehot(y)
                for i in 0..H {
                    dh[i] = 0.0;
                }
                for k in 0..C {
                    let dz = p[k] - if k == y { 1.0 } else { 0.0 };
                    gb2[k] += dz;
                    for i in 0..H {
                        gw2[k * H + i] += dz * h[i];
                        dh[i] += dz * w2[k * H + i];
                    }
                }
                // hidden layer (ReLU)
                for i in 0..H {
                    if h[i] <= 0.0 {
                        continue;
                    }
                    let dz = dh[i];
                    gb1[i] += dz;
                    for j in 0..D {
                        gw1[i * D + j] += dz * x[j];
                    }
                }
            }
            let scale = LR / BATCH as f32;
            for i in 0..H * D {
                w1[i] -= scale * gw1[i];
            }
            for i in 0..H {
                b1[i] -= scale * gb1[i];
            }
            for i in 0..C * H {
                w2[i] -= scale * gw2[i];
            }
            for i in 0..C {
                b2[i] -= scale * gb2[i];
            }
        })?;
        let dt = t0.elapsed().as_secs_f64();
        println!(
            "epoch {:2} time {:.3}s train_loss {:.5}",
            epoch,
            dt,
            loss_sum / (nb * BATCH) as f64
        );
    }
    m.w1 = w1.to_vec()?;
    m.b1 = b1.to_vec()?;
    m.w2 = w2.to_vec()?;
    m.b2 = b2.to_vec()?;
    Ok(())
}

fn main() -> strads_ap::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut mode = "serial".to_string();
    let mut threads = 1usize;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--mode" => {
                mode = args[i + 1].clone();
                i += 1;
            }
            "--threads" => {
                threads = args[i + 1].parse().expect("--threads N");
                i += 1;
            }
            other => panic!("unknown arg {other}"),
        }
        i += 1;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let centres: Vec<f32> = (0..C * D).map(|_| gauss(&mut rng) * CENTRE_SCALE).collect();
    let train = make_data(&centres, N_TRAIN, &mut rng);
    let test = make_data(&centres, N_TEST, &mut rng);
    let mut model = init_model(&mut rng);
    println!("mode {mode} threads {threads}");
    match mode.as_str() {
        "serial" => train_serial(&mut model, &train),
        "strads" => {
            strads_ap::init_with(strads_ap::Config::local(threads))?;
            train_strads(&mut model, &train)?;
        }
        _ => panic!("unknown mode {mode}"),
    }
    println!("test_accuracy {:.4}", accuracy(&model, &test));
    Ok(())
}
