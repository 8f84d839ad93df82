//! Metrics: squared rating error and RMSE for matrix factorisation; softmax loss and
//! accuracy for multinomial logistic regression.
//!
//! The per-element functions take the parameters as plain slices of rows, so the serial
//! twins call them from iterators and the strads-ap twins from `DVector::map_reduce` inside
//! `with_all`; [`row_squared_error`] takes the two rows, for a loop body (SGDMF evaluates
//! with a read-only `async_for!` that sums into a reduction).

use crate::data::{Rating, Sample};
use crate::model::{dot, score, softmax};

/// Squared error of the prediction `w[user] · h[item]` for one rating.
///
/// # Examples
/// ```
/// use strads_ap_examples::{data::Rating, metrics::squared_error};
/// let w = vec![vec![1.0, 1.0]];
/// let h = vec![vec![1.0, 2.0]];
/// let r = Rating { user: 0, item: 0, rating: 4.0 };
/// assert_eq!(squared_error(&w, &h, &r), 1.0);
/// ```
pub fn squared_error(w: &[Vec<f32>], h: &[Vec<f32>], r: &Rating) -> f64 {
    let err = r.rating - dot(&w[r.user as usize], &h[r.item as usize]);
    f64::from(err) * f64::from(err)
}

/// Squared error of the prediction `w_row · h_row` for a rating of the user and item whose
/// rows they are: the same figure as [`squared_error`], for a loop body that reads the two
/// rows in place.
///
/// # Examples
/// ```
/// use strads_ap_examples::{data::Rating, metrics::row_squared_error};
/// let r = Rating { user: 0, item: 0, rating: 4.0 };
/// assert_eq!(row_squared_error(&[1.0, 1.0], &[1.0, 2.0], &r), 1.0);
/// ```
pub fn row_squared_error(w_row: &[f32], h_row: &[f32], r: &Rating) -> f64 {
    let err = r.rating - dot(w_row, h_row);
    f64::from(err) * f64::from(err)
}

/// Root mean square from a sum of squared errors over `count` elements (0 when empty).
pub fn rmse(sum_squared: f64, count: usize) -> f64 {
    if count == 0 {
        0.0
    } else {
        (sum_squared / count as f64).sqrt()
    }
}

/// Mean and standard deviation of the ratings (both 0 when empty).
pub fn rating_mean_std(ratings: &[Rating]) -> (f64, f64) {
    if ratings.is_empty() {
        return (0.0, 0.0);
    }
    let n = ratings.len() as f64;
    let mean = ratings.iter().map(|r| f64::from(r.rating)).sum::<f64>() / n;
    let var = ratings
        .iter()
        .map(|r| (f64::from(r.rating) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}

/// The class probabilities of a sample under weight rows `w` (one row per class, bias
/// last).
pub fn class_probabilities(w: &[Vec<f32>], s: &Sample) -> Vec<f32> {
    let mut p: Vec<f32> = w.iter().map(|row| score(row, &s.x)).collect();
    softmax(&mut p);
    p
}

/// Softmax (cross-entropy) loss of one sample: `-ln p(label)`, computed in `f64` as the
/// log-sum-exp of the class scores minus the label's score. It has no floor: a model whose
/// scores saturate (a learning rate far too large) shows a loss that keeps growing, not
/// one stuck at a floor's `-ln 1e-12 = 27.6` per sample, and weights that became infinite
/// or NaN give NaN, which [`strads_ap::check_finite`] turns into an error.
///
/// # Examples
/// ```
/// use strads_ap_examples::{data::Sample, metrics::softmax_loss};
/// let w = vec![vec![0.0, 0.0], vec![0.0, 0.0]]; // two classes, one feature, biases 0
/// let s = Sample { label: 1, x: vec![(0, 1.0)] };
/// assert!((softmax_loss(&w, &s) - 2f64.ln()).abs() < 1e-6);
/// // Confidently wrong by a score gap of 1000: the loss says so.
/// let wrong = vec![vec![1000.0, 0.0], vec![0.0, 0.0]];
/// assert!((softmax_loss(&wrong, &s) - 1000.0).abs() < 1e-6);
/// let diverged = vec![vec![f32::INFINITY, 0.0], vec![f32::INFINITY, 0.0]];
/// assert!(softmax_loss(&diverged, &s).is_nan());
/// ```
pub fn softmax_loss(w: &[Vec<f32>], s: &Sample) -> f64 {
    let scores: Vec<f64> = w.iter().map(|row| f64::from(score(row, &s.x))).collect();
    let Some(&own) = scores.get(s.label as usize) else {
        return f64::INFINITY;
    };
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = scores.iter().map(|v| (v - max).exp()).sum();
    max + sum.ln() - own
}

/// The predicted class of a sample: the class with the highest score.
pub fn predict(w: &[Vec<f32>], s: &Sample) -> usize {
    w.iter()
        .map(|row| score(row, &s.x))
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (c, v)| {
            if v > best.1 {
                (c, v)
            } else {
                best
            }
        })
        .0
}

/// 1 if the sample is classified correctly, else 0 (summable into a count).
pub fn correct(w: &[Vec<f32>], s: &Sample) -> usize {
    usize::from(predict(w, s) == s.label as usize)
}
