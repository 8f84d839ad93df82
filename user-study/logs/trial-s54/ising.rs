use crate::common::*;
use std::time::Instant;

const L: usize = 256;
const N: usize = L * L;
const J: f64 = 1.0;
const BETA: f64 = 0.44;

/// deterministic uniform number from (epoch, site)
fn u_site(epoch: usize, site: usize) -> f64 {
    unit(splitmix(((epoch as u64) << 32) ^ site as u64 ^ 0xA5A5_0000_0000_0000))
}

/// (|m|, energy per site)
fn measure(s: &[i8]) -> (f64, f64) {
    let mut m = 0i64;
    let mut e = 0i64;
    for i in 0..L {
        for j in 0..L {
            let v = s[i * L + j] as i64;
            m += v;
            e -= v * (s[((i + 1) % L) * L + j] as i64 + s[i * L + (j + 1) % L] as i64);
        }
    }
    ((m as f64 / N as f64).abs(), J * e as f64 / N as f64)
}

fn init_spins(seed: u64) -> Vec<i8> {
    let mut rng = Rng(seed);
    (0..N).map(|_| if rng.f64() < 0.5 { 1 } else { -1 }).collect()
}

pub fn run(a: &Args) {
    let epochs = a.epochs.unwrap_or(50);
    match a.mode.as_str() {
        "serial" => serial(a, epochs),
        "strads" => strads(a, epochs).unwrap_or_else(|e| { eprintln!("Error: {e}"); std::process::exit(1) }),
        "strads-jacobi" => strads_jacobi(a, epochs).unwrap_or_else(|e| { eprintln!("Error: {e}"); std::process::exit(1) }),
        "serial-cb" => serial_cb(a, epochs),
        "strads-cb" => strads_cb(a, epochs).unwrap_or_else(|e| { eprintln!("Error: {e}"); std::process::exit(1) }),
        m => panic!("mode {m}"),
    }
}

fn report(a: &Args, times: &[f64], ms: &[f64], es: &[f64]) {
    let k = ms.len().min(10);
    let mavg = ms[ms.len() - k..].iter().sum::<f64>() / k as f64;
    let eavg = es[es.len() - k..].iter().sum::<f64>() / k as f64;
    println!(
        "{{\"app\":\"ising\",\"mode\":\"{}\",\"threads\":{},\"epochs\":{},\"first_epoch_s\":{:.5},\"median_epoch_s\":{:.5},\"mean_epoch_s\":{:.5},\"abs_m_last\":{:.5},\"e_last\":{:.5},\"abs_m_avg10\":{:.5},\"e_avg10\":{:.5}}}",
        a.mode, a.threads, times.len(), times[0], median(times), times.iter().sum::<f64>() / times.len() as f64,
        ms[ms.len() - 1], es[es.len() - 1], mavg, eavg
    );
}

fn serial(a: &Args, epochs: usize) {
    let mut spins = init_spins(a.seed);
    let (mut times, mut ms, mut es) = (vec![], vec![], vec![]);
    for epoch in 0..epochs {
        let t0 = Instant::now();
        for s in 0..N {
            let (i, j) = (s / L, s % L);
            let field = J * (spins[((i + L - 1) % L) * L + j]
                + spins[((i + 1) % L) * L + j]
                + spins[i * L + (j + L - 1) % L]
                + spins[i * L + (j + 1) % L]) as f64;
            let p = 1.0 / (1.0 + (-2.0 * BETA * field).exp());
            spins[s] = if u_site(epoch, s) < p { 1 } else { -1 };
        }
        times.push(t0.elapsed().as_secs_f64());
        let (m, e) = measure(&spins);
        ms.push(m);
        es.push(e);
        eprintln!("epoch {epoch}: {:.4} s  |m| {m:.4}  E/N {e:.4}", times[epoch]);
    }
    report(a, &times, &ms, &es);
}

fn strads(a: &Args, epochs: usize) -> strads_ap::Result<()> {
    use strads_ap::prelude::*;
    strads_ap::init_with(strads_ap::Config::local(a.threads))?;
    let spins = DVector::from_vec(init_spins(a.seed))?;
    let (mut times, mut ms, mut es) = (vec![], vec![], vec![]);
    let mut opts = Opts::new();
    if std::env::var("ISING_NEVER").is_ok() { opts = opts.fallback(Fallback::Never); }
    for epoch in 0..epochs {
        let t0 = Instant::now();
        async_for!(0..N, |s| {
            let (i, j) = (s / L, s % L);
            let field = J * (spins[((i + L - 1) % L) * L + j]
                + spins[((i + 1) % L) * L + j]
                + spins[i * L + (j + L - 1) % L]
                + spins[i * L + (j + 1) % L]) as f64;
            let p = 1.0 / (1.0 + (-2.0 * BETA * field).exp());
            spins[s] = if u_site(epoch, s) < p { 1 } else { -1 };
        }, &opts)?;
        times.push(t0.elapsed().as_secs_f64());
        let (m, e) = spins.with_all(|s| measure(s))?;
        ms.push(m);
        es.push(e);
        eprintln!("epoch {epoch}: {:.4} s  |m| {m:.4}  E/N {e:.4}", times[epoch]);
    }
    if std::env::var("ISING_STATS").is_ok() { eprintln!("{:#?}", strads_ap::loop_stats()); }
    report(a, &times, &ms, &es);
    strads_ap::finish()?;
    Ok(())
}

/// the diagnosis's advice: read neighbours from a copy refilled before each call (Jacobi)
fn strads_jacobi(a: &Args, epochs: usize) -> strads_ap::Result<()> {
    use strads_ap::prelude::*;
    strads_ap::init_with(strads_ap::Config::local(a.threads))?;
    let spins = DVector::from_vec(init_spins(a.seed))?;
    let copy = DVector::from_vec(init_spins(a.seed))?;
    let (mut times, mut ms, mut es) = (vec![], vec![], vec![]);
    for epoch in 0..epochs {
        let t0 = Instant::now();
        spins.with_all(|t| copy.transform(|i, x| *x = t[i].clone()))??;
        async_for!(0..N, |s| {
            let (i, j) = (s / L, s % L);
            let field = J * (copy[((i + L - 1) % L) * L + j]
                + copy[((i + 1) % L) * L + j]
                + copy[i * L + (j + L - 1) % L]
                + copy[i * L + (j + 1) % L]) as f64;
            let p = 1.0 / (1.0 + (-2.0 * BETA * field).exp());
            spins[s] = if u_site(epoch, s) < p { 1 } else { -1 };
        })?;
        times.push(t0.elapsed().as_secs_f64());
        let (m, e) = spins.with_all(|s| measure(s))?;
        ms.push(m);
        es.push(e);
        eprintln!("epoch {epoch}: {:.4} s  |m| {m:.4}  E/N {e:.4}", times[epoch]);
    }
    report(a, &times, &ms, &es);
    strads_ap::finish()?;
    Ok(())
}

/// checkerboard site of half-index h for colour c (0: (i+j) even, 1: odd)
fn cb_site(h: usize, c: usize) -> usize {
    let i = h / (L / 2);
    let j = 2 * (h % (L / 2)) + ((i + c) % 2);
    i * L + j
}

/// serial checkerboard sweep: all even sites, then all odd sites (a different, also valid, Gibbs scan order)
fn serial_cb(a: &Args, epochs: usize) {
    let mut spins = init_spins(a.seed);
    let (mut times, mut ms, mut es) = (vec![], vec![], vec![]);
    for epoch in 0..epochs {
        let t0 = Instant::now();
        for c in 0..2 {
            for h in 0..N / 2 {
                let s = cb_site(h, c);
                let (i, j) = (s / L, s % L);
                let field = J * (spins[((i + L - 1) % L) * L + j]
                    + spins[((i + 1) % L) * L + j]
                    + spins[i * L + (j + L - 1) % L]
                    + spins[i * L + (j + 1) % L]) as f64;
                let p = 1.0 / (1.0 + (-2.0 * BETA * field).exp());
                spins[s] = if u_site(epoch, s) < p { 1 } else { -1 };
            }
        }
        times.push(t0.elapsed().as_secs_f64());
        let (m, e) = measure(&spins);
        ms.push(m);
        es.push(e);
        eprintln!("epoch {epoch}: {:.4} s  |m| {m:.4}  E/N {e:.4}", times[epoch]);
    }
    report(a, &times, &ms, &es);
}

fn strads_cb(a: &Args, epochs: usize) -> strads_ap::Result<()> {
    use strads_ap::prelude::*;
    strads_ap::init_with(strads_ap::Config::local(a.threads))?;
    let spins = DVector::from_vec(init_spins(a.seed))?;
    let (mut times, mut ms, mut es) = (vec![], vec![], vec![]);
    for epoch in 0..epochs {
        let t0 = Instant::now();
        // one call site per colour: a plan is cached per call site and index range
            async_for!(0..N / 2, |h| {
                let s = cb_site(h, 0);
                let (i, j) = (s / L, s % L);
                let field = J * (spins[((i + L - 1) % L) * L + j]
                    + spins[((i + 1) % L) * L + j]
                    + spins[i * L + (j + L - 1) % L]
                    + spins[i * L + (j + 1) % L]) as f64;
                let p = 1.0 / (1.0 + (-2.0 * BETA * field).exp());
                spins[s] = if u_site(epoch, s) < p { 1 } else { -1 };
            })?;
            async_for!(0..N / 2, |h| {
                let s = cb_site(h, 1);
                let (i, j) = (s / L, s % L);
                let field = J * (spins[((i + L - 1) % L) * L + j]
                    + spins[((i + 1) % L) * L + j]
                    + spins[i * L + (j + L - 1) % L]
                    + spins[i * L + (j + 1) % L]) as f64;
                let p = 1.0 / (1.0 + (-2.0 * BETA * field).exp());
                spins[s] = if u_site(epoch, s) < p { 1 } else { -1 };
            })?;

        times.push(t0.elapsed().as_secs_f64());
        let (m, e) = spins.with_all(|s| measure(s))?;
        ms.push(m);
        es.push(e);
        eprintln!("epoch {epoch}: {:.4} s  |m| {m:.4}  E/N {e:.4}", times[epoch]);
    }
    if std::env::var("ISING_STATS").is_ok() { eprintln!("{:#?}", strads_ap::loop_stats()); }
    report(a, &times, &ms, &es);
    strads_ap::finish()?;
    Ok(())
}
