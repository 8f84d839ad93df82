//! A check on the figures a training program reports: [`check_finite`].

use std::fmt;

/// A reported metric that is not a finite number (`NaN` or an infinity): the model
/// diverged, or the data holds values whose arithmetic overflows.
#[derive(Clone, Debug, PartialEq)]
pub struct NonFiniteMetric {
    /// The metric's name, as reported (`train_rmse`).
    pub metric: String,
    /// Its value: `NaN`, `inf` or `-inf`.
    pub value: f64,
    /// The epoch after which it was measured (0: before the first).
    pub epoch: usize,
}

impl fmt::Display for NonFiniteMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is {}", self.metric, self.value)?;
        match self.epoch {
            0 => write!(f, " before the first epoch")?,
            epoch => write!(f, " after epoch {epoch}")?,
        }
        write!(
            f,
            ": the model diverged; lower the learning rate, or look for extreme values in \
             the input"
        )
    }
}

impl std::error::Error for NonFiniteMetric {}

/// Returns `value` if it is finite, else an error naming the metric and the epoch.
///
/// A diverged model reports `NaN`, which JSON prints as `null` and comparisons silently
/// ignore; a program that checks what it reports ends with that error (and a non-zero exit
/// when `main` returns it) instead of a result that looks like one. The example programs
/// check every metric they print.
///
/// # Examples
/// ```
/// use strads_ap::check_finite;
///
/// assert_eq!(check_finite("train_rmse", 0.93, 3), Ok(0.93));
/// let err = check_finite("train_rmse", f64::NAN, 3).unwrap_err();
/// assert_eq!(err.epoch, 3);
/// assert!(err
///     .to_string()
///     .starts_with("train_rmse is NaN after epoch 3: the model diverged; lower the learning rate"));
/// ```
pub fn check_finite(metric: &str, value: f64, epoch: usize) -> Result<f64, NonFiniteMetric> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(NonFiniteMetric {
            metric: metric.to_string(),
            value,
            epoch,
        })
    }
}
