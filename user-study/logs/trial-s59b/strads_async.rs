use std::time::Instant;
use strads_ap::prelude::*;
use trial59b::*;

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let t0 = Instant::now();
    let data = load();
    let train = DVector::from_vec(data.train)?;
    let test = data.test;
    eprintln!("train {} passages, test {}, vocab {}", train.len(), test.len(), data.vocab);

    // averaged perceptron: weights w, averaging accumulator u, example counter c
    let w = DVector::from_fn(data.vocab, |_| [0.0f32; NCLASS])?.relaxed(Relaxed::Sum);
    let u = DVector::from_fn(data.vocab, |_| [0.0f32; NCLASS])?.relaxed(Relaxed::Sum);
    let n = train.len();
    let mut epoch_secs = Vec::new();
    let mut mistakes_last = 0usize;
    let t_train = Instant::now();
    for epoch in 0..EPOCHS {
        let te = Instant::now();
        let mut mistakes = 0usize;
        async_for!(0..train.len(), |k| {
            let c = (epoch * n + k + 1) as f32; // the example counter, from the index
            let ex = &train[k];
            let mut score = [0.0f32; NCLASS];
            for &(j, x) in &ex.feats {
                for y in 0..NCLASS {
                    score[y] += w[j][y] * x;
                }
            }
            let yhat = argmax(&score);
            if yhat != ex.label {
                mistakes += 1;
                for &(j, x) in &ex.feats {
                    w[j][ex.label] += x;
                    w[j][yhat] -= x;
                    u[j][ex.label] += c * x;
                    u[j][yhat] -= c * x;
                }
            }
        })?;
        let secs = te.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        mistakes_last = mistakes;
        eprintln!("epoch {epoch}: {mistakes} mistakes, {secs:.4} s");
    }
    let train_secs = t_train.elapsed().as_secs_f64();

    // averaged weights
    let c = (EPOCHS * n + 1) as f32;
    let w = w.to_vec()?;
    let u = u.to_vec()?;
    let avg: Vec<[f32; NCLASS]> = (0..data.vocab)
        .map(|j| {
            let mut r = [0.0f32; NCLASS];
            for y in 0..NCLASS {
                r[y] = w[j][y] - u[j][y] / c;
            }
            r
        })
        .collect();
    let mut correct = 0usize;
    for ex in &test {
        let mut score = [0.0f32; NCLASS];
        for &(j, x) in &ex.feats {
            for y in 0..NCLASS {
                score[y] += avg[j][y] * x;
            }
        }
        if argmax(&score) == ex.label {
            correct += 1;
        }
    }
    let acc = correct as f64 / test.len() as f64;
    let steady = &epoch_secs[1..];
    let spe = steady.iter().sum::<f64>() / steady.len() as f64;
    println!(
        "{{\"impl\":\"strads\",\"threads\":\"{}\",\"secs_per_epoch\":{spe:.5},\"first_epoch_secs\":{:.5},\"train_secs\":{train_secs:.4},\"total_secs\":{:.4},\"mistakes_last_epoch\":{mistakes_last},\"test_accuracy\":{acc:.6}}}",
        std::env::var("STRADS_THREADS").unwrap_or("all".into()),
        epoch_secs[0],
        t0.elapsed().as_secs_f64()
    );
    strads_ap::finish()?;
    Ok(())
}
