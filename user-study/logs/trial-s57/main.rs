use rand::prelude::*;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

const RANK: usize = 10;
const LAMBDA: f32 = 0.1;
const EPOCHS: usize = 10;

struct Rating { u: usize, i: usize, r: f32 }

fn load(path: &str) -> Vec<Rating> {
    let s = std::fs::read_to_string(path).expect("read ratings");
    let mut out = Vec::new();
    for line in s.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 3 { continue; }
        let (u, i, r) = match (f[0].parse::<usize>(), f[1].parse::<usize>(), f[2].parse::<f32>()) {
            (Ok(u), Ok(i), Ok(r)) => (u, i, r),
            _ => continue, // header
        };
        out.push(Rating { u, i, r });
    }
    out
}

/// Solve A x = b for symmetric positive definite A (RANK x RANK) by Cholesky.
fn cholesky_solve(a: &mut [[f32; RANK]; RANK], b: &mut [f32; RANK]) {
    let n = RANK;
    for j in 0..n {
        let mut d = a[j][j];
        for k in 0..j { d -= a[j][k] * a[j][k]; }
        let d = d.max(1e-12).sqrt();
        a[j][j] = d;
        for i in (j + 1)..n {
            let mut s = a[i][j];
            for k in 0..j { s -= a[i][k] * a[j][k]; }
            a[i][j] = s / d;
        }
    }
    // forward: L y = b
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i { s -= a[i][k] * b[k]; }
        b[i] = s / a[i][i];
    }
    // backward: L^T x = y
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in (i + 1)..n { s -= a[k][i] * b[k]; }
        b[i] = s / a[i][i];
    }
}

/// New factor row for one entity given its rating list and the other side's factors.
fn solve_row(list: &[(usize, f32)], other: &dyn Fn(usize) -> Vec<f32>) -> Vec<f32> {
    let mut a = [[0f32; RANK]; RANK];
    let mut b = [0f32; RANK];
    for &(j, r) in list {
        let v = other(j);
        for p in 0..RANK {
            b[p] += r * v[p];
            for q in 0..RANK { a[p][q] += v[p] * v[q]; }
        }
    }
    let reg = LAMBDA * list.len().max(1) as f32;
    for p in 0..RANK { a[p][p] += reg; }
    cholesky_solve(&mut a, &mut b);
    b.to_vec()
}

fn rmse(test: &[Rating], uf: &[Vec<f32>], itf: &[Vec<f32>]) -> f64 {
    let mut se = 0f64;
    for t in test {
        let p: f32 = (0..RANK).map(|k| uf[t.u][k] * itf[t.i][k]).sum();
        se += ((p - t.r) as f64).powi(2);
    }
    (se / test.len() as f64).sqrt()
}

fn run_strads(
    threads: usize,
    by_user: Vec<Vec<(usize, f32)>>,
    by_item: Vec<Vec<(usize, f32)>>,
    uf: Vec<Vec<f32>>,
    itf: Vec<Vec<f32>>,
    test: &[Rating],
) -> strads_ap::Result<()> {
    use strads_ap::prelude::*;
    strads_ap::init()?;
    let n_users = by_user.len();
    let n_items = by_item.len();
    let by_user = std::sync::Arc::new(by_user);
    let by_item = std::sync::Arc::new(by_item);
    let uf = DVector::from_vec(uf)?;
    let itf = DVector::from_vec(itf)?;
    let mut opts = Opts::new().threads(threads);
    if std::env::var("ALS_NEVER").is_ok() { opts = opts.fallback(Fallback::Never); }
    for ep in 0..EPOCHS {
        let t0 = Instant::now();
        async_for!(0..n_users, |u| {
            uf[u] = solve_row(&by_user[u], &|j| itf[j].clone());
        }, &opts)?;
        async_for!(0..n_items, |it| {
            itf[it] = solve_row(&by_item[it], &|j| uf[j].clone());
        }, &opts)?;
        println!("epoch {ep} time {:.4}s", t0.elapsed().as_secs_f64());
    }
    if std::env::var("ALS_STATS").is_ok() { eprintln!("{:#?}", strads_ap::loop_stats()); }
    let ufv = uf.to_vec()?;
    let itfv = itf.to_vec()?;
    println!("test RMSE {:.5}", rmse(test, &ufv, &itfv));
    strads_ap::finish()?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut mode = "serial".to_string();
    let mut threads = 1usize;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--mode" => { mode = args[i + 1].clone(); i += 1; }
            "--threads" => { threads = args[i + 1].parse().unwrap(); i += 1; }
            other => panic!("unknown arg {other}"),
        }
        i += 1;
    }

    let mut all = load("/work/shared/data/movielens-100k/ratings.tsv");
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    all.shuffle(&mut rng);
    let n_test = all.len() / 10;
    let test: Vec<Rating> = all.split_off(all.len() - n_test);
    let train = all;
    let n_users = train.iter().chain(test.iter()).map(|r| r.u).max().unwrap() + 1;
    let n_items = train.iter().chain(test.iter()).map(|r| r.i).max().unwrap() + 1;

    let mut by_user: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n_users];
    let mut by_item: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n_items];
    for t in &train {
        by_user[t.u].push((t.i, t.r));
        by_item[t.i].push((t.u, t.r));
    }
    // init factors
    let mut init_rng = ChaCha8Rng::seed_from_u64(7);
    let mut uf: Vec<Vec<f32>> = (0..n_users).map(|_| (0..RANK).map(|_| init_rng.gen::<f32>() * 0.1).collect()).collect();
    let mut itf: Vec<Vec<f32>> = (0..n_items).map(|_| (0..RANK).map(|_| init_rng.gen::<f32>() * 0.1).collect()).collect();
    println!("mode={mode} threads={threads} users={n_users} items={n_items} train={} test={}", train.len(), test.len());

    match mode.as_str() {
        "serial" => {
            for ep in 0..EPOCHS {
                let t0 = Instant::now();
                for u in 0..n_users {
                    uf[u] = solve_row(&by_user[u], &|j| itf[j].clone());
                }
                for it in 0..n_items {
                    itf[it] = solve_row(&by_item[it], &|j| uf[j].clone());
                }
                println!("epoch {ep} time {:.4}s", t0.elapsed().as_secs_f64());
            }
            println!("test RMSE {:.5}", rmse(&test, &uf, &itf));
        }
        "strads" => {
            if let Err(e) = run_strads(threads, by_user, by_item, uf, itf, &test) {
                eprintln!("Error: {e}");
                std::process::exit(1);
            }
        }
        m => panic!("unknown mode {m}"),
    }
}
