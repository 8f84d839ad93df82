//! LDA topic modelling by collapsed Gibbs sampling with strads-ap: the twin of
//! `lda-serial`.
//!
//! The serial program with `DVector` for `Vec` and `async_for!` for the token loop; the
//! loop body is unchanged. Each token writes its own topic `z[k]`, its document's row of
//! the document-topic table, its word's row of the word-topic table, and the topic totals.
//! The totals are declared relaxed (`DVector::relaxed(Relaxed::Sum)`): every token writes
//! them, so keeping them exact would serialise the loop; each worker samples against its
//! own replica, and the replicas' deltas are summed into the table after every group of
//! tokens. The document and word tables are left to the planner, which finds the rotation
//! schedule (STRADS's word rotation, here over blocks of documents and blocks of words):
//! no two tokens of one document or of one word are sampled at once.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin lda -- --epochs 5 --threads 2
//! STRADS_VERBOSE=1 target/release/lda --data ../shared/data/lda/reuters.ldac   # prints the plan
//! ```
//!
//! The relaxed table's error (`s_error` in the result line) is STRADS's s-error: the
//! mean L1 distance between the totals a worker samples with (its replica) and the true
//! totals, per token of the corpus. strads-ap keeps the replicas inside its engine, so the
//! sampler measures it from its side ([`lda::s_error`]): the true totals are kept as
//! per-thread shadows of every count change, and every 64th draw of a thread compares the
//! totals it sees with them. The probes cost time (the threads read each other's shadows),
//! so they run in one extra sweep after the last epoch, which is not timed and not part of
//! the reported log-likelihood (the first sweep cannot be probed: reconnaissance runs the
//! body on scratch copies). After every epoch the program also checks the merged table
//! against the totals recounted from the document-topic table (the L1 distance is 0 when
//! merging lost no update: the counts are integers, so summed deltas are exact) and shows
//! how far the relaxed smoothing mass, a float updated from the replicas, has drifted.

use anyhow::Result;
use clap::Parser;
use strads_ap::check_finite;
use strads_ap::prelude::*;
use strads_ap_examples::cli::LdaArgs;
use strads_ap_examples::lda::{self, LdaResult, Prior};
use strads_ap_examples::report::{
    print_json_line, print_loop_stats, progress, EpochClock, EpochStart, STRADS,
};

fn main() -> Result<()> {
    let args = LdaArgs::parse();
    let threads = args.common.threads();
    // The job the launcher describes (a world of one without it), with our thread count.
    strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
    let seed = args.common.seed;

    // Data: a file or the synthetic generator, flattened into tokens.
    let corpus = match &args.common.data {
        Some(path) => lda::load_corpus(path)?,
        None => lda::synthetic_corpus(args.docs, args.vocab, args.doc_len, args.topics, seed),
    };
    let tokens: DVector<lda::Token> = DVector::from_vec(lda::flatten(&corpus))?;
    let (docs, vocab, topics) = (corpus.docs.len(), corpus.vocab.len(), args.topics);
    let prior = Prior::new(args.alpha, args.beta, topics, vocab);
    eprintln!(
        "lda [{STRADS}]: {} tokens, {docs} documents, {vocab} words, {topics} topics, \
         alpha {}, beta {}, {threads} threads",
        tokens.len(),
        args.alpha,
        args.beta
    );

    // State: a random topic per token, and the counts it implies. The totals table has one
    // element, written by every token: relaxed.
    let z0: Vec<u32> = (0..tokens.len())
        .map(|k| lda::initial_topic(seed, k, topics))
        .collect();
    let counts = tokens.with_all(|t| lda::count_topics(t, &z0, docs, &prior))?;
    let z: DVector<u32> = DVector::from_vec(z0)?;
    let doc_topic: DVector<lda::TopicCounts> = DVector::from_vec(counts.doc_topic)?;
    let word_topic: DVector<lda::TopicCounts> = DVector::from_vec(counts.word_topic)?;
    let totals: DVector<lda::TopicTotals> =
        DVector::from_vec(vec![counts.totals])?.relaxed(Relaxed::Sum);
    let n = tokens.len() as f64;

    // The log-likelihood per token, its row terms summed data-parallel.
    let loglik = || -> Result<f64> {
        let d = doc_topic.map_reduce(|r| lda::doc_log_term(r, &prior), |a, b| a + b)?;
        let w = word_topic.map_reduce(|r| lda::word_log_term(r, &prior), |a, b| a + b)?;
        let t = lda::topic_log_term(&totals.get(0)?, &prior);
        Ok((d + w + t) / n)
    };
    // The relaxed totals against the totals recounted from the document-topic table: the
    // L1 distance per token, and the smoothing mass's relative drift.
    let relaxed_error = || -> Result<(f64, f64)> {
        let recount = doc_topic.with_all(|rows| lda::recount_totals(rows, topics))?;
        let nt = totals.get(0)?;
        let l1 = lda::l1_distance(&nt.counts, &recount) as f64 / n;
        let exact = lda::TopicTotals::new(recount, &prior).smoothing;
        Ok((l1, (nt.smoothing - exact).abs() / exact))
    };
    eprintln!(
        "lda [{STRADS}] initial: loglik_per_token = {:.6}",
        loglik()?
    );

    // One sweep over the tokens, the serial program's epoch; returns when its timed part
    // started (for `EpochClock::stop`).
    let sweep = |epoch: usize| -> Result<EpochStart> {
        // The cached smoothing mass, recomputed exactly once per sweep.
        totals.transform(|_, t| t.refresh_smoothing(&prior))?;
        let start = EpochStart::now();
        async_for!(0..tokens.len(), |k| {
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
        })?;
        Ok(start)
    };

    let epochs = args.common.epochs;
    // The first call's set-up is reported separately as `setup_secs`.
    let mut clock = EpochClock::new();
    for epoch in 1..=epochs {
        let start = sweep(epoch)?;
        let secs = clock.stop(start, epoch);
        let ll = check_finite("loglik_per_token", loglik()?, epoch)?;
        progress("lda", STRADS, epoch, "loglik_per_token", ll, secs);
        let (lost, drift) = relaxed_error()?;
        eprintln!(
            "lda [{STRADS}] epoch {epoch}: relaxed totals after merging: L1 to recount per \
             token {lost:.3e}, smoothing mass drift {drift:.3e}"
        );
    }
    let loglik_per_token = check_finite("loglik_per_token", loglik()?, epochs)?;

    // The s-error probe sweep (see above), once the plan exists (a single worker in a
    // world of one needs none).
    let s_error = if epochs > 0 || threads == 1 {
        let true_totals = doc_topic.with_all(|rows| lda::recount_totals(rows, topics))?;
        lda::s_error::start(&true_totals);
        let swept = sweep(epochs + 1);
        let (mean_l1, draws) = lda::s_error::finish();
        swept?;
        eprintln!(
            "lda [{STRADS}] probe sweep: s-error {:.3e} (mean L1 distance {mean_l1:.1} over \
             {draws} draws, {n} tokens)",
            mean_l1 / n
        );
        Some(mean_l1 / n)
    } else {
        None
    };
    print_loop_stats();

    let secs_per_epoch = clock.secs_per_epoch();
    print_json_line(&LdaResult {
        app: "lda".into(),
        implementation: STRADS.into(),
        ranks: strads_ap::world_size(),
        threads,
        epochs: args.common.epochs,
        secs_per_epoch,
        loglik_per_token,
        tokens_per_sec: lda::tokens_per_sec(tokens.len(), secs_per_epoch),
        setup_secs: clock.setup_secs(),
        s_error,
    });
    Ok(())
}
