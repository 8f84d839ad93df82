//! Shared code of the strads-ap example programs.
//!
//! Every example ships as a pair of binaries: a plain serial program (`*-serial`) whose
//! data and parameters live in `Vec`s, and its strads-ap twin, which is the same program
//! with `DVector` for `Vec` and `async_for!`/`sync_for!` for `for`. The loop bodies of a
//! pair are textually identical (a test checks it). This library holds what both twins
//! share, so that the twins differ only where the conversion says they should:
//!
//! * [`data`] — seeded synthetic data sets (power-law ratings, Gaussian classes), text
//!   loaders (`user item rating` lines, libsvm lines) and the train/test split;
//! * [`model`] — parameter initialisation and the small vector kernels the loop bodies
//!   call (they take plain slices, so both twins can call them);
//! * [`metrics`] — RMSE, softmax loss and accuracy;
//! * [`cli`] — command-line arguments, shared by both twins of an example;
//! * [`report`] — the per-epoch progress line and the final JSON result line.
//! * [`word2vec`] — corpora, sampling, evaluation and output of the word2vec pair.
//! * [`lasso`] — columns, data, objective and duality gap of the Lasso pair.

#![warn(missing_docs)]

pub mod cli;
pub mod data;
pub mod idx;
pub mod lasso;
pub mod lda;
pub mod metrics;
pub mod model;
pub mod report;
pub mod transe;
pub mod word2vec;
pub mod zoo;
