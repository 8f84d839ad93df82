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
pub struct Args { pub mode: String, pub threads: usize, pub epochs: Option<usize>, pub seed: u64 }
pub fn parse_args(rest: &[String]) -> Args {
    let mut a = Args { mode: "serial".into(), threads: 2, epochs: None, seed: 42 };
    let mut it = rest.iter();
    while let Some(k) = it.next() {
        let v = it.next().expect("flag needs a value");
        match k.as_str() {
            "--mode" => a.mode = v.clone(),
            "--threads" => a.threads = v.parse().unwrap(),
            "--epochs" => a.epochs = Some(v.parse().unwrap()),
            "--seed" => a.seed = v.parse().unwrap(),
            _ => panic!("unknown flag {k}"),
        }
    }
    a
}
