//! TransE knowledge-graph embeddings, serial: the twin of `transe`.
//!
//! Entity and relation embeddings live in `Vec`s; every epoch runs plain SGD on the
//! margin ranking loss over the training triples in order with
//! `for k in 0..triples.len() { BODY }`: triple `k` against its corruption of the epoch
//! (head or tail replaced, drawn from `(seed, epoch, k)`), then the entity rows it touched
//! are scaled back to unit norm, as in the TransE paper. The `transe` binary is the same
//! program converted to strads-ap, with the same `BODY` (a test checks it).
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin transe-serial -- \
//!     --data ../shared/data/kg/umls --epochs 100
//! ```

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use clap::Parser;
use strads_ap::check_finite;
use strads_ap_examples::cli::TranseArgs;
use strads_ap_examples::report::{mean, print_json_line, progress, SERIAL};
use strads_ap_examples::transe::{
    self, axpy, corrupt, distance, init_embedding, normalize, to_gradient, translation,
    KnownTriples, TranseResult, ENTITY_TABLE, RELATION_TABLE,
};

// The serial loop runs over indices, exactly like `async_for!(0..triples.len(), |k| ..)`.
#[allow(clippy::needless_range_loop)]
fn main() -> Result<()> {
    let args = TranseArgs::parse();
    let seed = args.common.seed;
    let (dim, lr, margin, norm) = (args.dim, args.lr, args.margin, args.norm);

    // Data: a graph on disk or the synthetic generator.
    let graph = match &args.common.data {
        Some(path) => transe::load_kg(path, seed)
            .with_context(|| format!("cannot load the knowledge graph {}", path.display()))?,
        None => transe::synthetic_kg(args.entities, args.relations, args.triples, seed),
    };
    ensure!(!graph.train.is_empty(), "no training triples");
    ensure!(!graph.test.is_empty(), "no test triples");
    ensure!(
        graph.entities.len() >= 2,
        "a graph needs at least 2 entities"
    );
    let known = KnownTriples::new(&graph);
    let sample = transe::eval_sample(&graph.test, args.eval_sample, seed);
    let triples: Vec<transe::Triple> = graph.train;
    eprintln!(
        "transe [{SERIAL}]: {} training, {} validation and {} test triples ({} left out, {} \
         evaluated), {} entities, {} relations, dim {dim}, L{} norm",
        triples.len(),
        graph.valid.len(),
        graph.test.len(),
        graph.dropped,
        sample.len(),
        graph.entities.len(),
        graph.relations.len(),
        norm.number()
    );

    // Parameters: one unit-norm row of `dim` values per entity and per relation.
    let mut entities: Vec<Vec<f32>> = (0..graph.entities.len())
        .map(|e| init_embedding(seed, ENTITY_TABLE, e, dim))
        .collect();
    let mut relations: Vec<Vec<f32>> = (0..graph.relations.len())
        .map(|r| init_embedding(seed, RELATION_TABLE, r, dim))
        .collect();

    let mut epoch_secs = Vec::new();
    for epoch in 1..=args.common.epochs {
        let start = Instant::now();
        for k in 0..triples.len() {
            // strads-ap: body begin
            let t = &triples[k];
            let (h, r, tl) = (t.head as usize, t.relation as usize, t.tail as usize);
            let (h2, t2) = corrupt(seed, epoch, k, t, entities.len());
            let mut pos = translation(&entities[h], &relations[r], &entities[tl]);
            let mut neg = translation(&entities[h2], &relations[r], &entities[t2]);
            // Every triple writes its rows, with a zero step when the margin holds: which
            // rows a triple writes must not depend on the parameters' values.
            let violated = margin + distance(&pos, norm) > distance(&neg, norm);
            let step = if violated { lr } else { 0.0 };
            to_gradient(&mut pos, norm);
            to_gradient(&mut neg, norm);
            axpy(&mut entities[h], -step, &pos);
            axpy(&mut entities[tl], step, &pos);
            axpy(&mut entities[h2], step, &neg);
            axpy(&mut entities[t2], -step, &neg);
            let rel = &mut relations[r];
            axpy(rel, -step, &pos);
            axpy(rel, step, &neg);
            for e in [h, tl, h2, t2] {
                normalize(&mut entities[e]);
            }
            // strads-ap: body end
        }
        let secs = start.elapsed().as_secs_f64();
        epoch_secs.push(secs);
        let loss = transe::mean_margin_loss(&entities, &relations, &triples, seed, margin, norm);
        let loss = check_finite("train_loss", loss, epoch)?;
        progress("transe", SERIAL, epoch, "train_loss", loss, secs);
    }

    let ranks = transe::evaluate(&entities, &relations, &sample, &known, norm);
    let secs_per_epoch = mean(&epoch_secs);
    print_json_line(&TranseResult {
        app: "transe".into(),
        implementation: SERIAL.into(),
        ranks: 1,
        threads: 1,
        epochs: args.common.epochs,
        secs_per_epoch,
        mrr: check_finite("mrr", ranks.mrr(), args.common.epochs)?,
        hits10: check_finite("hits10", ranks.hits10(), args.common.epochs)?,
        triples_per_sec: transe::per_sec(triples.len(), secs_per_epoch),
        setup_secs: 0.0,
        sync: None,
        relaxed: None,
    });
    Ok(())
}
