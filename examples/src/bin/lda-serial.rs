//! LDA topic modelling by collapsed Gibbs sampling, serial: the twin of `lda`.
//!
//! The corpus is flattened into tokens (one `(doc, word)` pair each); the state is a topic
//! per token (`z`), topic counts per document and per word, and the topic totals, all in
//! `Vec`s. Every epoch sweeps the tokens in order with `for k in 0..tokens.len() { BODY }`:
//! take the token's topic out of the counts, draw a new one with the SparseLDA sampler
//! (one uniform per token, derived from the seed, the epoch and `k`), put it back. The
//! `lda` binary is the same program converted to strads-ap, with the same `BODY` (a test
//! checks it).
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin lda-serial -- --epochs 5
//! cargo run --release -p strads-ap-examples --bin lda-serial -- --data ../shared/data/lda/reuters.ldac
//! ```

use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use strads_ap::check_finite;
use strads_ap_examples::cli::LdaArgs;
use strads_ap_examples::lda::{self, LdaResult, Prior};
use strads_ap_examples::report::{mean, print_json_line, progress, SERIAL};

// The serial loop runs over indices, exactly like `async_for!(0..tokens.len(), |k| ..)`.
#[allow(clippy::needless_range_loop)]
fn main() -> Result<()> {
    let args = LdaArgs::parse();
    let seed = args.common.seed;

    // Data: a file or the synthetic generator, flattened into tokens.
    let corpus = match &args.common.data {
        Some(path) => lda::load_corpus(path)?,
        None => lda::synthetic_corpus(args.docs, args.vocab, args.doc_len, args.topics, seed),
    };
    let tokens: Vec<lda::Token> = lda::flatten(&corpus);
    let (docs, vocab, topics) = (corpus.docs.len(), corpus.vocab.len(), args.topics);
    let prior = Prior::new(args.alpha, args.beta, topics, vocab);
    eprintln!(
        "lda [{SERIAL}]: {} tokens, {docs} documents, {vocab} words, {topics} topics, \
         alpha {}, beta {}",
        tokens.len(),
        args.alpha,
        args.beta
    );

    // State: a random topic per token, and the counts it implies. The totals are a
    // one-element vector so that the strads-ap twin can declare them relaxed.
    let z0: Vec<u32> = (0..tokens.len())
        .map(|k| lda::initial_topic(seed, k, topics))
        .collect();
    let counts = lda::count_topics(&tokens, &z0, docs, &prior);
    let mut z: Vec<u32> = z0;
    let mut doc_topic: Vec<lda::TopicCounts> = counts.doc_topic;
    let mut word_topic: Vec<lda::TopicCounts> = counts.word_topic;
    let mut totals: Vec<lda::TopicTotals> = vec![counts.totals];
    let n = tokens.len() as f64;
    let loglik = |doc_topic: &[lda::TopicCounts],
                  word_topic: &[lda::TopicCounts],
                  totals: &[lda::TopicTotals]| {
        lda::log_likelihood(doc_topic, word_topic, &totals[0], &prior) / n
    };
    eprintln!(
        "lda [{SERIAL}] initial: loglik_per_token = {:.6}",
        loglik(&doc_topic, &word_topic, &totals)
    );

    let mut epoch_secs = Vec::new();
    for epoch in 1..=args.common.epochs {
        // The cached smoothing mass, recomputed exactly once per sweep.
        totals[0].refresh_smoothing(&prior);
        let start = Instant::now();
        for k in 0..tokens.len() {
            // strads-ap: body begin
            let token = tokens[k];
            let (d, w) = (token.doc as usize, token.word as usize);
            let old = z[k] as usize;
            let nd = &mut doc_topic[d];
            let nw = &mut word_topic[w];
            let nt = &mut totals[0];
            nd.remove(old);
            nw.remove(old);
            nt.remove(old, &prior);
            let u = lda::token_uniform(seed, epoch, k);
            let topic = lda::sample_topic(nd, nw, nt, &prior, u);
            nd.add(topic);
            nw.add(topic);
            nt.add(topic, &prior);
            z[k] = topic as u32;
            // strads-ap: body end
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        let ll = loglik(&doc_topic, &word_topic, &totals);
        let ll = check_finite("loglik_per_token", ll, epoch)?;
        progress("lda", SERIAL, epoch, "loglik_per_token", ll, secs);
    }

    let secs_per_epoch = mean(&epoch_secs);
    print_json_line(&LdaResult {
        app: "lda".into(),
        implementation: SERIAL.into(),
        ranks: 1,
        threads: 1,
        epochs: args.common.epochs,
        secs_per_epoch,
        loglik_per_token: check_finite(
            "loglik_per_token",
            loglik(&doc_topic, &word_topic, &totals),
            args.common.epochs,
        )?,
        tokens_per_sec: lda::tokens_per_sec(tokens.len(), secs_per_epoch),
        setup_secs: 0.0,
        s_error: None,
    });
    Ok(())
}
