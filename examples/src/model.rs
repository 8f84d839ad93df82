//! Parameter initialisation and the vector kernels that the loop bodies call.
//!
//! A loop body of a strads-ap twin sees a captured `DVector<Vec<f32>>` as a view whose
//! elements are `Vec<f32>`s, so helpers take plain slices (`&[f32]`), which both twins can
//! pass (`&w[u]` derefs to `&[f32]` in either).

use rand::Rng;

use crate::data::rng_for;

/// The initial row `i` of the parameter table `table` (e.g. 0 for user factors, 1 for item
/// factors): `len` values drawn uniformly from `[0.5, 1.5) · scale`, from a generator
/// seeded by `(seed, table, i)` alone.
///
/// Rows do not depend on the order in which they are built, so a parallel
/// `DVector::from_fn` and a serial `(0..n).map(..)` give the same parameters.
///
/// # Examples
/// ```
/// use strads_ap_examples::model::init_row;
/// let a = init_row(1, 0, 5, 4, 0.5);
/// assert_eq!(a, init_row(1, 0, 5, 4, 0.5));
/// assert_ne!(a, init_row(1, 1, 5, 4, 0.5));
/// assert!(a.iter().all(|&x| (0.25..0.75).contains(&x)));
/// ```
pub fn init_row(seed: u64, table: u64, i: usize, len: usize, scale: f32) -> Vec<f32> {
    let stream = (table << 40) ^ (i as u64) ^ 0x5eed_0000_0000_0000;
    let mut rng = rng_for(seed, stream);
    (0..len).map(|_| scale * (0.5 + rng.gen::<f32>())).collect()
}

/// The scale for [`init_row`] that makes the expected dot product of a user row and an
/// item row of length `rank` equal `mean` (the mean rating): `sqrt(mean / rank)`.
pub fn factor_scale(mean: f32, rank: usize) -> f32 {
    (mean.max(0.0) / rank.max(1) as f32).sqrt()
}

/// One SGD step of matrix factorisation on a rating: both rows move along the error's
/// gradient, with L2 regularisation `reg` (the body of SGDMF's loop).
///
/// # Examples
/// ```
/// use strads_ap_examples::model::{dot, sgd_step};
/// let (mut w, mut h) = (vec![0.5f32; 4], vec![0.5f32; 4]);
/// let before = (3.0 - dot(&w, &h)).abs();
/// sgd_step(&mut w, &mut h, 3.0, 0.05, 0.0);
/// assert!((3.0 - dot(&w, &h)).abs() < before);
/// ```
#[inline]
pub fn sgd_step(w: &mut [f32], h: &mut [f32], rating: f32, lr: f32, reg: f32) {
    let err = rating - dot(w, h);
    for (a, b) in w.iter_mut().zip(h.iter_mut()) {
        let (wf, hf) = (*a, *b);
        *a += lr * (err * hf - reg * wf);
        *b += lr * (err * wf - reg * hf);
    }
}

/// Dot product of two equally long slices, with eight independent partial sums (a single
/// chain of dependent adds is latency-bound).
///
/// # Examples
/// ```
/// use strads_ap_examples::model::dot;
/// let a: Vec<f32> = (0..11).map(|i| i as f32).collect();
/// assert_eq!(dot(&a, &a), (0..11).map(|i| (i * i) as f32).sum::<f32>());
/// ```
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for ((s, &p), &q) in acc.iter_mut().zip(x).zip(y) {
            *s += p * q;
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ar.iter().zip(br) {
        sum += x * y;
    }
    sum
}

/// The linear score of a sparse sample under a weight row whose last element is the bias:
/// `w[len-1] + Σ w[i]·v` over the `(i, v)` pairs of `x`.
///
/// # Examples
/// ```
/// use strads_ap_examples::model::score;
/// assert_eq!(score(&[1.0, 2.0, 0.5], &[(0, 3.0), (1, 1.0)]), 0.5 + 3.0 + 2.0);
/// ```
#[inline]
pub fn score(w: &[f32], x: &[(u32, f32)]) -> f32 {
    let bias = w.last().copied().unwrap_or(0.0);
    x.iter().fold(bias, |s, &(i, v)| s + w[i as usize] * v)
}

/// Adds `scale · (x, 1)` to the gradient row `g` (the `1` goes to the bias, `g`'s last
/// element); the gradient of [`score`] times `scale`.
///
/// # Examples
/// ```
/// use strads_ap_examples::model::add_scaled;
/// let mut g = vec![0.0; 3];
/// add_scaled(&mut g, 2.0, &[(1, 3.0)]);
/// assert_eq!(g, vec![0.0, 6.0, 2.0]);
/// ```
#[inline]
pub fn add_scaled(g: &mut [f32], scale: f32, x: &[(u32, f32)]) {
    for &(i, v) in x {
        g[i as usize] += scale * v;
    }
    if let Some(bias) = g.last_mut() {
        *bias += scale;
    }
}

/// Replaces scores by softmax probabilities, in place (stable: subtracts the maximum).
///
/// # Examples
/// ```
/// use strads_ap_examples::model::softmax;
/// let mut p = vec![1.0, 1.0, 1.0 + 2f32.ln()];
/// softmax(&mut p);
/// assert!((p[2] - 0.5).abs() < 1e-6 && (p[0] - 0.25).abs() < 1e-6);
/// ```
#[inline]
pub fn softmax(scores: &mut [f32]) {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0.0;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        total += *s;
    }
    for s in scores.iter_mut() {
        *s /= total;
    }
}
