//! TransE knowledge-graph embeddings with strads-ap: the twin of `transe-serial`.
//!
//! The serial program with `DVector` for `Vec` and `async_for!` for the inner `for`; the
//! loop body is unchanged.
//!
//! Every triple writes the row of its relation, and a graph has few relations (UMLS: 46),
//! so a serializable plan would run nearly all triples one after another. The relation
//! table is therefore declared relaxed (`--relaxed relations`, the default): each worker
//! updates its own replica of the relation rows, and the replicas' deltas are summed into
//! the table after every group of triples. Statistically, a worker does not see the other
//! workers' relation updates until the end of its group (every relation still gets every
//! step, as in the serial loop); the entity rows stay serializable, as no two triples
//! sharing an entity run at the same time. On UMLS the result matches the serial twin's
//! Hits@10 within noise. The corrupted entity of a triple changes every epoch, and with it
//! the rows the triple writes, so no plan made once would hold: the loop is re-checked
//! (`Opts::recheck`), which in one process runs it with a lock per entity row instead of a
//! plan (a triple that meets a row another worker holds is undone and run again later);
//! across processes the plan is redone every epoch (counted in the epoch's time). On small
//! or hub-heavy graphs the entity conflicts leave little to run in parallel.
//!
//! * `--relaxed all` relaxes the entity table too: nothing is planned around, the plan is
//!   made once, and workers merge their replicas after every group, i.e. only 4 × threads
//!   times per epoch. Fastest on a small graph, but the staleness grows with the graph:
//!   about 1.5% of Hits@10 on UMLS, most of the model's quality on a 400,000-triple one.
//! * `--relaxed none` relaxes nothing: every triple conflicts through its relation.
//! * `--sync hybrid` (or `bsp`) runs the same body data-parallel with `sync_for!` over
//!   mini-batches of `--minibatch` triple indices; workers merge after every mini-batch.
//!
//! ```text
//! cargo run --release -p strads-ap-examples --bin transe -- \
//!     --data ../shared/data/kg/umls --epochs 100 --threads 2
//! ```

use anyhow::{ensure, Context, Result};
use clap::Parser;
use strads_ap::check_finite;
use strads_ap::prelude::*;
use strads_ap_examples::cli::TranseArgs;
use strads_ap_examples::report::{print_json_line, print_loop_stats, progress, EpochClock, STRADS};
use strads_ap_examples::transe::{
    self, axpy, corrupt, distance, init_embedding, normalize, to_gradient, translation,
    KnownTriples, TranseResult, Triple, ENTITY_TABLE, RELATION_TABLE,
};

fn main() -> Result<()> {
    let args = TranseArgs::parse();
    let threads = args.common.threads();
    // The job the launcher describes (a world of one without it), with our thread count.
    strads_ap::init_with(strads_ap::Config::from_env()?.with_threads(threads))?;
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
    let sample: DVector<Triple> =
        DVector::from_vec(transe::eval_sample(&graph.test, args.eval_sample, seed))?;
    let triples: DVector<Triple> = DVector::from_vec(graph.train)?;
    let loop_name = match args.sync {
        Some(sync) => sync.name(),
        None => "async",
    };
    let relaxed = args.relaxed;
    eprintln!(
        "transe [{STRADS}]: {} training, {} validation and {} test triples ({} left out, {} \
         evaluated), {} entities, {} relations, dim {dim}, L{} norm, {threads} threads, \
         loop {loop_name}{}",
        triples.len(),
        graph.valid.len(),
        graph.test.len(),
        graph.dropped,
        sample.len(),
        graph.entities.len(),
        graph.relations.len(),
        norm.number(),
        match args.sync {
            Some(_) => format!(", mini-batches of {}", args.minibatch),
            None => format!(", relaxed {}", relaxed.name()),
        }
    );

    // Parameters: one unit-norm row of `dim` values per entity and per relation. Workers'
    // updates (sync_for!, relaxed tables) are merged by summing their deltas.
    let entities: DVector<Vec<f32>> = DVector::from_fn(graph.entities.len(), |e| {
        init_embedding(seed, ENTITY_TABLE, e, dim)
    })?
    .aggregate_with(Aggregation::Sum);
    let relations: DVector<Vec<f32>> = DVector::from_fn(graph.relations.len(), |r| {
        init_embedding(seed, RELATION_TABLE, r, dim)
    })?
    .aggregate_with(Aggregation::Sum);
    let entities = if relaxed.entities() {
        entities.relaxed(Relaxed::Sum)
    } else {
        entities
    };
    let relations = if relaxed.relations() {
        relations.relaxed(Relaxed::Sum)
    } else {
        relations
    };
    // With a planned (checked) entity table the plan depends on the epoch's corruptions.
    let replan = !relaxed.entities();
    // sync_for! runs over mini-batches of training-triple indices.
    let order: DVector<usize> = DVector::from_fn(triples.len(), |k| k)?;
    let (minibatch, mode) = (args.minibatch, args.sync.map(|s| s.mode()));

    // The mean margin loss over the training triples (progress), read in place.
    let loss = || -> Result<f64> {
        let loss = entities.with_all(|e| {
            relations.with_all(|r| {
                triples.with_all(|ts| transe::mean_margin_loss(e, r, ts, seed, margin, norm))
            })
        })???;
        Ok(loss)
    };

    // Reconnaissance redone in later epochs (a re-checked loop across ranks re-plans every
    // call) is part of the epochs.
    let mut clock = EpochClock::new().replanning(replan);
    for epoch in 1..=args.common.epochs {
        let start = clock.start();
        if let Some(mode) = mode {
            sync_for!(order, minibatch, mode, |batch| {
                for &k in batch {
                    // strads-ap: hybrid body begin
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
                    // strads-ap: hybrid body end
                }
            })?;
        } else {
            async_for!(
                0..triples.len(),
                |k| {
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
                },
                Opts::new().recheck(replan)
            )?;
        }
        // The training loop alone: the first call's set-up is reported separately as
        // `setup_secs`.
        let secs = clock.stop(start, epoch);
        let train_loss = check_finite("train_loss", loss()?, epoch)?;
        progress("transe", STRADS, epoch, "train_loss", train_loss, secs);
    }
    print_loop_stats();

    // Filtered ranks of the sampled test triples, in parallel, reading the model in place.
    let ranks = entities.with_all(|e| {
        relations.with_all(|r| {
            sample.map_reduce(|t| transe::rank_triple(e, r, t, &known, norm), |a, b| a + b)
        })
    })???;
    let secs_per_epoch = clock.secs_per_epoch();
    print_json_line(&TranseResult {
        app: "transe".into(),
        implementation: STRADS.into(),
        ranks: strads_ap::world_size(),
        threads,
        epochs: args.common.epochs,
        secs_per_epoch,
        mrr: check_finite("mrr", ranks.mrr(), args.common.epochs)?,
        hits10: check_finite("hits10", ranks.hits10(), args.common.epochs)?,
        triples_per_sec: transe::per_sec(triples.len(), secs_per_epoch),
        setup_secs: clock.setup_secs(),
        sync: Some(loop_name.into()),
        relaxed: args.sync.is_none().then(|| relaxed.name().into()),
    });
    Ok(())
}
