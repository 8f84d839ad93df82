//! Word2vec, skip-gram with negative sampling, serial: the twin of `word2vec`.
//!
//! Google's C tool, one thread: for every position of a sentence (after sub-sampling of
//! frequent words), a window of 1 to `--window` words on each side, and for every context
//! word one positive and `--negative` noise targets drawn from the unigram^0.75 table; the
//! learning rate decays linearly from `--lr` to `lr * 1e-4` over all epochs' words. Two
//! departures from the C tool: the logistic function is computed exactly (not from its
//! clipped table), and frequent words are sub-sampled with the same formula but fresh
//! random numbers per `(seed, epoch, sentence)`.
//! Sentences are the training unit: they run in order with
//! `for batch in sentences.chunks(minibatch) { BODY }`, and all of a sentence's random
//! numbers come from `(seed, epoch, sentence index)`. The input vectors are `syn0`, the
//! output vectors `syn1neg`. The `word2vec` binary is the same program converted to
//! strads-ap, with the same `BODY` (a test checks it).
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin word2vec-serial -- \
//!     --data ../shared/data/brown/sentences.txt --epochs 3
//! ```

use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use strads_ap::check_finite;
use strads_ap_examples::cli::Word2vecArgs;
use strads_ap_examples::report::{mean, print_json_line, progress, SERIAL};
use strads_ap_examples::word2vec::{
    axpy, dot, init_input_row, learning_rate, save_vectors, sigmoid, subsample, SentenceRng, Setup,
    Word2vecResult,
};

fn main() -> Result<()> {
    let args = Word2vecArgs::parse();
    let seed = args.common.seed;
    let (dim, window, negative, lr, minibatch) = (
        args.dim,
        args.window,
        args.negative,
        args.lr,
        args.minibatch,
    );
    let epochs = args.common.epochs;

    // Data: the corpus (or the synthetic one), the samplers and the evaluation sets.
    let setup = Setup::new(&args)?;
    let (noise, keep, eval) = (setup.noise, setup.keep, setup.eval);
    let train_words = setup.corpus.train_words;
    let vocab = setup.corpus.vocab;
    let sentences = setup.corpus.sentences;
    eprintln!(
        "word2vec [{SERIAL}]: {} sentences, {train_words} words, {} in the vocabulary, \
         dim {dim}, window {window}, negative {negative}",
        sentences.len(),
        vocab.len()
    );

    // Parameters: input vectors small and random, output vectors zero.
    let mut syn0: Vec<Vec<f32>> = (0..vocab.len())
        .map(|w| init_input_row(seed, w, dim))
        .collect();
    let mut syn1neg: Vec<Vec<f32>> = vec![vec![0.0; dim]; vocab.len()];

    let mut epoch_secs = Vec::new();
    for epoch in 1..=epochs {
        let start = Instant::now();
        for batch in sentences.chunks(minibatch) {
            // strads-ap: body begin
            let mut l1 = vec![0.0f32; dim];
            let mut neu1e = vec![0.0f32; dim];
            for s in batch {
                let mut rng = SentenceRng::new(seed, epoch, s.index);
                let alpha = learning_rate(lr, epoch, s.offset, train_words, epochs);
                let words = subsample(&s.words, &keep, &mut rng);
                for (pos, &word) in words.iter().enumerate() {
                    let b = window - rng.below(window);
                    let (lo, hi) = (pos.saturating_sub(b), (pos + b + 1).min(words.len()));
                    for (c, &context) in words.iter().enumerate().take(hi).skip(lo) {
                        if c != pos {
                            let context = context as usize;
                            l1.copy_from_slice(&syn0[context]);
                            neu1e.fill(0.0);
                            for d in 0..=negative {
                                let target = if d == 0 {
                                    word
                                } else {
                                    noise[rng.below(noise.len())].pick(rng.next_u64())
                                };
                                if d == 0 || target != word {
                                    let t = target as usize;
                                    let label = if d == 0 { 1.0 } else { 0.0 };
                                    let g = (label - sigmoid(dot(&l1, &syn1neg[t]))) * alpha;
                                    axpy(&mut neu1e, g, &syn1neg[t]);
                                    axpy(&mut syn1neg[t], g, &l1);
                                }
                            }
                            axpy(&mut syn0[context], 1.0, &neu1e);
                        }
                    }
                }
            }
            // strads-ap: body end
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        let rho = check_finite("wordsim_rho", eval.rho(&syn0), epoch)?;
        progress("word2vec", SERIAL, epoch, "wordsim_rho", rho, secs);
    }

    let scores = eval.scores(&syn0);
    if let Some(path) = &args.save {
        save_vectors(path, &vocab, &syn0)?;
    }
    let secs_per_epoch = mean(&epoch_secs);
    print_json_line(&Word2vecResult {
        app: "word2vec".into(),
        implementation: SERIAL.into(),
        ranks: 1,
        threads: 1,
        epochs,
        secs_per_epoch,
        words_per_sec: if secs_per_epoch > 0.0 {
            train_words as f64 / secs_per_epoch
        } else {
            0.0
        },
        wordsim_rho: check_finite("wordsim_rho", scores.rho, epochs)?,
        wordsim_skipped: scores.skipped,
        analogy_acc: scores.analogy,
        analogy_questions: scores.questions,
        setup_secs: 0.0,
    });
    Ok(())
}
