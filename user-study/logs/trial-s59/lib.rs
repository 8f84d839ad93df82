//! Shared data preparation for the item-kNN (learned interpolation weights) trial.
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

pub const K: usize = 50;
pub const LR: f32 = 0.005;
pub const REG: f32 = 0.02;
pub const EPOCHS: usize = 20;
pub const DATA: &str = "/work/shared/data/movielens-100k/ratings.tsv";

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Rating {
    pub user: u32,
    pub item: u32,
    pub value: f32,
}

pub struct Data {
    pub train: Vec<Rating>,
    pub test: Vec<Rating>,
    pub n_users: usize,
    pub n_items: usize,
    pub mu: f32,
    /// For each item, its (up to) K most co-rated items.
    pub nbrs: Vec<Vec<u32>>,
    /// For each user, the (item, rating) pairs rated in train, sorted by item.
    pub rated: Vec<Vec<(u32, f32)>>,
}

pub fn load() -> Data {
    let text = std::fs::read_to_string(DATA).expect("reading ratings");
    let mut all: Vec<Rating> = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        let user: u32 = f[0].parse().unwrap();
        let item: u32 = f[1].parse().unwrap();
        let value: f32 = f[2].parse().unwrap();
        all.push(Rating { user: user - 1, item: item - 1, value });
    }
    let n_users = all.iter().map(|r| r.user as usize).max().unwrap() + 1;
    let n_items = all.iter().map(|r| r.item as usize).max().unwrap() + 1;
    let mut rng = StdRng::seed_from_u64(1);
    all.shuffle(&mut rng);
    let n_train = all.len() * 9 / 10;
    let test = all.split_off(n_train);
    let train = all;
    let mu = train.iter().map(|r| r.value as f64).sum::<f64>() as f32 / train.len() as f32;

    let mut rated: Vec<Vec<(u32, f32)>> = vec![Vec::new(); n_users];
    for r in &train {
        rated[r.user as usize].push((r.item, r.value));
    }
    for list in rated.iter_mut() {
        list.sort_by_key(|p| p.0);
    }
    // Co-rating counts.
    let mut co = vec![0u32; n_items * n_items];
    for list in &rated {
        for &(a, _) in list {
            for &(b, _) in list {
                if a != b {
                    co[a as usize * n_items + b as usize] += 1;
                }
            }
        }
    }
    let mut nbrs: Vec<Vec<u32>> = Vec::with_capacity(n_items);
    for i in 0..n_items {
        let row = &co[i * n_items..(i + 1) * n_items];
        let mut cand: Vec<u32> = (0..n_items as u32).filter(|&j| row[j as usize] > 0).collect();
        cand.sort_by(|&a, &b| row[b as usize].cmp(&row[a as usize]).then(a.cmp(&b)));
        cand.truncate(K);
        nbrs.push(cand);
    }
    Data { train, test, n_users, n_items, mu, nbrs, rated }
}

/// r_uj for item j if user u rated it in train.
#[inline]
pub fn rating_of(rated: &[(u32, f32)], j: u32) -> Option<f32> {
    rated.binary_search_by_key(&j, |p| p.0).ok().map(|k| rated[k].1)
}

/// Test RMSE of a trained model (serial, after training).
pub fn rmse(d: &Data, test: &[Rating], bu: &[f32], bi: &[f32], w: &[Vec<f32>]) -> f64 {
    let mut sse = 0.0f64;
    for r in test {
        let (u, i) = (r.user as usize, r.item as usize);
        let mut s = 0.0f32;
        let mut n = 0usize;
        for (slot, &j) in d.nbrs[i].iter().enumerate() {
            if let Some(ruj) = rating_of(&d.rated[u], j) {
                s += w[i][slot] * (ruj - d.mu - bu[u] - bi[j as usize]);
                n += 1;
            }
        }
        let mut p = d.mu + bu[u] + bi[i];
        if n > 0 {
            p += s / (n as f32).sqrt();
        }
        let e = r.value - p;
        sse += (e * e) as f64;
    }
    (sse / test.len() as f64).sqrt()
}
