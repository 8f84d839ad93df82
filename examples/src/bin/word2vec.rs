//! Word2vec, skip-gram with negative sampling, with strads-ap: the twin of
//! `word2vec-serial`.
//!
//! The serial program with `DVector` for `Vec` and `sync_for!` for the mini-batch `for`;
//! the loop body is unchanged. `sync_for!` runs mini-batches of sentences data-parallel on
//! every core (`SyncMode::Hybrid`: each worker adds its changes to the shared tables after
//! every mini-batch and continues from the fresh values), like the C tool's threads,
//! which update shared vectors without locks. The input vectors `syn0` and the output
//! vectors `syn1neg` merge by summing the workers' deltas, so every sentence's steps count
//! as in the serial program. A sentence's random numbers come from `(seed, epoch,
//! sentence index)` and its learning rate from its position in the corpus, so neither
//! depends on the order in which the workers run the sentences.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin word2vec -- \
//!     --data ../shared/data/brown/sentences.txt --epochs 3 --threads 2
//! ```

use anyhow::Result;
use clap::Parser;
use strads_ap::check_finite;
use strads_ap::prelude::*;
use strads_ap_examples::cli::Word2vecArgs;
use strads_ap_examples::report::{print_json_line, print_loop_stats, progress, EpochClock, STRADS};
use strads_ap_examples::word2vec::{
    axpy, dot, init_input_row, learning_rate, save_vectors, sigmoid, subsample, Noise, Sentence,
    SentenceRng, Setup, Word2vecResult,
};

fn main() -> Result<()> {
    let args = Word2vecArgs::parse();
    let threads = args.common.threads();
    // The job the launcher describes (a world of one without it), with our thread count.
    strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
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
    let (keep, eval) = (setup.keep, setup.eval);
    // The noise table is large and read-only: a DVector (its element type is not
    // aggregatable, so workers share it rather than copy it).
    let noise: DVector<Noise> = DVector::from_vec(setup.noise)?;
    let train_words = setup.corpus.train_words;
    let vocab = setup.corpus.vocab;
    let sentences: DVector<Sentence> = DVector::from_vec(setup.corpus.sentences)?;
    eprintln!(
        "word2vec [{STRADS}]: {} sentences, {train_words} words, {} in the vocabulary, \
         dim {dim}, window {window}, negative {negative}, {threads} threads, \
         mini-batches of {minibatch}",
        sentences.len(),
        vocab.len()
    );

    // Parameters: input vectors small and random, output vectors zero. Workers' updates
    // are summed.
    let syn0: DVector<Vec<f32>> = DVector::from_fn(vocab.len(), |w| init_input_row(seed, w, dim))?
        .aggregate_with(Aggregation::Sum);
    let syn1neg: DVector<Vec<f32>> =
        DVector::from_fn(vocab.len(), |_| vec![0.0; dim])?.aggregate_with(Aggregation::Sum);

    let mut clock = EpochClock::new();
    for epoch in 1..=epochs {
        let start = clock.start();
        sync_for!(sentences, minibatch, SyncMode::Hybrid, |batch| {
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
        })?;
        let secs = clock.stop(start, epoch);
        let rho = eval.rho(&syn0.to_vec()?);
        let rho = check_finite("wordsim_rho", rho, epoch)?;
        progress("word2vec", STRADS, epoch, "wordsim_rho", rho, secs);
    }
    print_loop_stats();

    let vectors = syn0.to_vec()?;
    let scores = eval.scores(&vectors);
    if let Some(path) = &args.save {
        save_vectors(path, &vocab, &vectors)?;
    }
    let secs_per_epoch = clock.secs_per_epoch();
    print_json_line(&Word2vecResult {
        app: "word2vec".into(),
        implementation: STRADS.into(),
        ranks: strads_ap::world_size(),
        threads,
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
        setup_secs: clock.setup_secs(),
    });
    // Leave the job cleanly (every rank; nothing in a world of one).
    strads_ap::finish()?;
    Ok(())
}
