//! Shared data loading for the serial and strads-ap SVD++ programs.
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

pub const DIM: usize = 20;
pub const EPOCHS: usize = 15;
pub const LR: f32 = 0.007;
pub const REG: f32 = 0.015;
pub const PATH: &str = "/work/shared/data/movielens-100k/ratings.tsv";

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Rating {
    pub user: usize,
    pub item: usize,
    pub value: f32,
}

pub struct Data {
    pub n_users: usize,
    pub n_items: usize,
    pub train: Vec<Rating>,
    pub test: Vec<Rating>,
    /// N(u): items user u rated in train
    pub n_of: Vec<Vec<usize>>,
    /// the fixed shuffled visiting order of the training ratings
    pub order: Vec<usize>,
    pub mu: f32,
}

pub fn load() -> Data {
    let text = std::fs::read_to_string(PATH).expect("reading ratings");
    let mut all = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (Ok(u), Ok(i), Ok(r)) = (f[0].parse::<usize>(), f[1].parse::<usize>(), f[2].parse::<f32>()) else {
            continue; // header
        };
        all.push(Rating { user: u - 1, item: i - 1, value: r });
    }
    let n_users = all.iter().map(|r| r.user).max().unwrap() + 1;
    let n_items = all.iter().map(|r| r.item).max().unwrap() + 1;
    let mut rng = StdRng::seed_from_u64(1);
    all.shuffle(&mut rng);
    let n_train = all.len() * 9 / 10;
    let test = all.split_off(n_train);
    let train = all;
    let mut n_of = vec![Vec::new(); n_users];
    for r in &train {
        n_of[r.user].push(r.item);
    }
    let mut order: Vec<usize> = (0..train.len()).collect();
    order.shuffle(&mut rng);
    let mu = train.iter().map(|r| r.value as f64).sum::<f64>() as f32 / train.len() as f32;
    Data { n_users, n_items, train, test, n_of, order, mu }
}

/// Small seeded initial factors: `rows` rows of DIM values in [-0.05, 0.05).
pub fn init_factors(rows: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows).map(|_| (0..DIM).map(|_| (rng.gen::<f32>() - 0.5) * 0.1).collect()).collect()
}
