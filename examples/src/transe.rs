//! TransE knowledge-graph embeddings (Bordes et al., NIPS 2013): what both twins share.
//!
//! * Knowledge graphs: [`load_kg`] reads a directory with `train.txt`, `valid.txt` and
//!   `test.txt` (`head<TAB>relation<TAB>tail` lines, the layout of UMLS, Kinships and
//!   Nations) or one such file with a header row and no split (RecBole's
//!   `movielens-freebase.tsv`), which gets a seeded 80/10/10 split ([`split_80_10_10`]);
//!   [`synthetic_kg`] generates the graph of a run without `--data`.
//! * The model: [`init_embedding`], [`corrupt`] (the negative triple of training triple
//!   `k` in an epoch), [`translation`], [`distance`], [`to_gradient`], [`axpy`],
//!   [`normalize`]: plain functions over slices, so both twins' loop bodies call them.
//! * Evaluation: [`KnownTriples`] and [`rank_triple`] give the *filtered* rank of the true
//!   head and the true tail of a test triple; [`RankSums`] sums them into MRR and
//!   Hits@10; [`eval_sample`] picks the test triples evaluated; [`mean_margin_loss`] is the
//!   per-epoch progress figure.
//! * [`TranseResult`], the final JSON line.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::data::{mix64, read_text, rng_for, LoadError, Zipf};

// ---------------------------------------------------------------------------------------
// Graphs
// ---------------------------------------------------------------------------------------

/// One fact `(head, relation, tail)` with dense ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Triple {
    /// Head entity, in `0..entities`.
    pub head: u32,
    /// Relation, in `0..relations`.
    pub relation: u32,
    /// Tail entity, in `0..entities`.
    pub tail: u32,
}

/// A knowledge graph split into training, validation and test triples, with the names
/// behind the dense ids.
///
/// Every entity and relation of `valid` and `test` occurs in `train`.
#[derive(Clone, Debug, PartialEq)]
pub struct KnowledgeGraph {
    /// Training triples, in file (or generation) order.
    pub train: Vec<Triple>,
    /// Validation triples (used only to filter the ranking).
    pub valid: Vec<Triple>,
    /// Test triples.
    pub test: Vec<Triple>,
    /// Entity names; entity `i` is `entities[i]`.
    pub entities: Vec<String>,
    /// Relation names; relation `i` is `relations[i]`.
    pub relations: Vec<String>,
    /// Validation and test triples left out because an entity or relation of theirs does
    /// not occur in the training triples (only for graphs split here: a split on disk
    /// with such triples is an error).
    pub dropped: usize,
}

/// Fraction of the triples [`split_80_10_10`] puts in the validation set.
pub const VALID_FRACTION: f64 = 0.1;

/// Fraction of the triples [`split_80_10_10`] puts in the test set.
pub const TEST_FRACTION: f64 = 0.1;

/// Splits `items` about 80/10/10 into training, validation and test sets, seeded: each
/// element goes to validation with probability [`VALID_FRACTION`], to test with
/// probability [`TEST_FRACTION`]. All sets keep the input order.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::split_80_10_10;
/// let (train, valid, test) = split_80_10_10((0..1000).collect(), 3);
/// assert_eq!(train.len() + valid.len() + test.len(), 1000);
/// assert!((50..150).contains(&valid.len()) && (50..150).contains(&test.len()));
/// assert_eq!(split_80_10_10((0..1000).collect(), 3), (train, valid, test));
/// ```
pub fn split_80_10_10<T>(items: Vec<T>, seed: u64) -> (Vec<T>, Vec<T>, Vec<T>) {
    let mut rng = rng_for(seed, 4);
    let (mut train, mut valid, mut test) = (Vec::new(), Vec::new(), Vec::new());
    for item in items {
        let u: f64 = rng.gen();
        if u < VALID_FRACTION {
            valid.push(item);
        } else if u < VALID_FRACTION + TEST_FRACTION {
            test.push(item);
        } else {
            train.push(item);
        }
    }
    (train, valid, test)
}

/// A triple as written: names, and the 1-based line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct NamedTriple {
    head: String,
    relation: String,
    tail: String,
    line: usize,
}

/// Parses a `head<TAB>relation<TAB>tail` line (a trailing `\r` is ignored; names may
/// contain spaces, not tabs).
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::parse_triple_line;
/// assert_eq!(parse_triple_line("alga\tisa\tentity").unwrap(), ("alga", "isa", "entity"));
/// assert!(parse_triple_line("alga isa entity").unwrap_err().contains("3 tab-separated"));
/// assert!(parse_triple_line("a\tb\t").unwrap_err().contains("empty"));
/// ```
pub fn parse_triple_line(line: &str) -> Result<(&str, &str, &str), String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let fields: Vec<&str> = line.split('\t').collect();
    let [head, relation, tail] = fields[..] else {
        return Err(format!(
            "expected 3 tab-separated fields (head, relation, tail), found {}",
            fields.len()
        ));
    };
    for (what, name) in [("head", head), ("relation", relation), ("tail", tail)] {
        if name.trim().is_empty() {
            return Err(format!("the {what} is empty"));
        }
    }
    Ok((head, relation, tail))
}

/// Whether `line` is a RecBole-style header (`head_id:token<TAB>relation_id:token<TAB>
/// tail_id:token`): every field is `name:type`.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::is_kg_header;
/// assert!(is_kg_header("head_id:token\trelation_id:token\ttail_id:token"));
/// assert!(!is_kg_header("m.04ctbw8\tfilm.producer.film\tm.0bln8"));
/// ```
pub fn is_kg_header(line: &str) -> bool {
    let fields: Vec<&str> = line.trim_end().split('\t').collect();
    fields.len() == 3
        && fields.iter().all(|f| {
            f.split_once(':').is_some_and(|(name, ty)| {
                !name.is_empty() && matches!(ty, "token" | "token_seq" | "float" | "float_seq")
            })
        })
}

/// Reads the triples of one file: blank lines are skipped, a header row (see
/// [`is_kg_header`]) is skipped when `header` allows it, anything else must parse.
fn read_triples(path: &Path, header: bool) -> Result<Vec<NamedTriple>, LoadError> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || (i == 0 && header && is_kg_header(line)) {
            continue;
        }
        let (head, relation, tail) =
            parse_triple_line(line).map_err(|message| LoadError::at(path, i + 1, message))?;
        out.push(NamedTriple {
            head: head.to_string(),
            relation: relation.to_string(),
            tail: tail.to_string(),
            line: i + 1,
        });
    }
    Ok(out)
}

/// Dense ids for names, in order of first appearance.
#[derive(Default)]
struct Ids {
    of: HashMap<String, u32>,
    names: Vec<String>,
}

/// The training triples with dense ids, and the entity and relation ids they define.
fn index_train(named: &[NamedTriple]) -> (Vec<Triple>, Ids, Ids) {
    let (mut entities, mut relations) = (Ids::default(), Ids::default());
    let train = named
        .iter()
        .map(|t| Triple {
            head: entities.add(&t.head),
            relation: relations.add(&t.relation),
            tail: entities.add(&t.tail),
        })
        .collect();
    (train, entities, relations)
}

impl Ids {
    fn add(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.of.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.of.insert(name.to_string(), id);
        self.names.push(name.to_string());
        id
    }
}

/// Loads a knowledge graph.
///
/// * A directory: `train.txt`, `valid.txt` and `test.txt` in it, `head<TAB>relation<TAB>
///   tail` lines. Entity and relation ids are given in order of first appearance in
///   `train.txt`; an entity or relation of `valid.txt` or `test.txt` that `train.txt` does
///   not have is an error naming it, the file and the line.
/// * A file: the same lines, a header row allowed (RecBole's `name:token` fields), split
///   with [`split_80_10_10`] by `seed`; validation and test triples with an entity or
///   relation not in the training part are left out and counted in
///   [`KnowledgeGraph::dropped`].
///
/// A line without exactly 3 tab-separated fields is an error naming the file and line. A
/// graph without training triples, or without test triples, is an error.
pub fn load_kg(path: impl AsRef<Path>, seed: u64) -> Result<KnowledgeGraph, LoadError> {
    let path = path.as_ref();
    if path.is_dir() {
        load_split_dir(path)
    } else {
        load_unsplit_file(path, seed)
    }
}

fn load_split_dir(dir: &Path) -> Result<KnowledgeGraph, LoadError> {
    let file = |name: &str| -> Result<(std::path::PathBuf, Vec<NamedTriple>), LoadError> {
        let path = dir.join(name);
        if !path.is_file() {
            let message = format!(
                "a knowledge-graph directory needs train.txt, valid.txt and test.txt; \
                 {name} is missing"
            );
            return Err(LoadError::file(dir, message));
        }
        let triples = read_triples(&path, false)?;
        Ok((path, triples))
    };
    let (train_path, train_named) = file("train.txt")?;
    let (valid_path, valid_named) = file("valid.txt")?;
    let (test_path, test_named) = file("test.txt")?;
    if train_named.is_empty() {
        return Err(LoadError::file(
            &train_path,
            "no data: the file has no triples",
        ));
    }
    if test_named.is_empty() {
        return Err(LoadError::file(
            &test_path,
            "no data: the file has no triples",
        ));
    }
    let (train, entities, relations) = index_train(&train_named);
    let known = |path: &Path, named: &[NamedTriple]| -> Result<Vec<Triple>, LoadError> {
        named
            .iter()
            .map(|t| {
                let find = |ids: &Ids, what: &str, name: &str| {
                    ids.of.get(name).copied().ok_or_else(|| {
                        LoadError::at(
                            path,
                            t.line,
                            format!("{what} `{name}` does not occur in the training triples"),
                        )
                    })
                };
                Ok(Triple {
                    head: find(&entities, "entity", &t.head)?,
                    relation: find(&relations, "relation", &t.relation)?,
                    tail: find(&entities, "entity", &t.tail)?,
                })
            })
            .collect()
    };
    let valid = known(&valid_path, &valid_named)?;
    let test = known(&test_path, &test_named)?;
    Ok(KnowledgeGraph {
        train,
        valid,
        test,
        entities: entities.names,
        relations: relations.names,
        dropped: 0,
    })
}

fn load_unsplit_file(path: &Path, seed: u64) -> Result<KnowledgeGraph, LoadError> {
    let named = read_triples(path, true)?;
    if named.is_empty() {
        return Err(LoadError::file(path, "no data: the file has no triples"));
    }
    let (train_named, valid_named, test_named) = split_80_10_10(named, seed);
    if train_named.is_empty() {
        return Err(LoadError::file(
            path,
            "no data: the split left no training triples",
        ));
    }
    let (train, entities, relations) = index_train(&train_named);
    let known = |named: &[NamedTriple]| -> Vec<Triple> {
        named
            .iter()
            .filter_map(|t| {
                Some(Triple {
                    head: *entities.of.get(&t.head)?,
                    relation: *relations.of.get(&t.relation)?,
                    tail: *entities.of.get(&t.tail)?,
                })
            })
            .collect()
    };
    let valid = known(&valid_named);
    let test = known(&test_named);
    let dropped = valid_named.len() - valid.len() + test_named.len() - test.len();
    if test.is_empty() {
        return Err(LoadError::file(
            path,
            "no data: no test triple has both entities and its relation in the training part",
        ));
    }
    Ok(KnowledgeGraph {
        train,
        valid,
        test,
        entities: entities.names,
        relations: relations.names,
        dropped,
    })
}

/// Keeps the validation and test triples whose entities and relation occur in `train`.
fn drop_unseen(
    train: &[Triple],
    valid: Vec<Triple>,
    test: Vec<Triple>,
    entities: usize,
    relations: usize,
) -> (Vec<Triple>, Vec<Triple>, usize) {
    let mut seen_entity = vec![false; entities];
    let mut seen_relation = vec![false; relations];
    for t in train {
        seen_entity[t.head as usize] = true;
        seen_entity[t.tail as usize] = true;
        seen_relation[t.relation as usize] = true;
    }
    let before = valid.len() + test.len();
    let keep = |t: &Triple| {
        seen_entity[t.head as usize]
            && seen_entity[t.tail as usize]
            && seen_relation[t.relation as usize]
    };
    let valid: Vec<Triple> = valid.into_iter().filter(keep).collect();
    let test: Vec<Triple> = test.into_iter().filter(keep).collect();
    let dropped = before - valid.len() - test.len();
    (valid, test, dropped)
}

/// Largest grid step of a relation's offset in [`synthetic_kg`].
pub const REACH: i64 = 3;

/// Zipf exponent of head popularity in [`synthetic_kg`].
pub const HEAD_EXPONENT: f64 = 0.6;

/// A seeded synthetic knowledge graph with a translation structure TransE can learn.
///
/// Entities sit at hidden points of a square grid (about `sqrt(entities)` on a side;
/// which entity sits where is a seeded permutation). Relation `r` is a hidden offset
/// `(dx, dy)`, each coordinate uniform in `[-REACH, REACH]` ([`REACH`]): relations link
/// nearby entities, a neighbourhood structure that translations on the unit sphere can
/// follow. A triple draws its head
/// with Zipf-like popularity (exponent [`HEAD_EXPONENT`]), a relation uniformly, and its
/// tail at the head's point plus the offset plus noise uniform in `{-1, 0, 1}²`
/// (redrawn when that point is off the grid). Triples are distinct. The graph is split
/// with [`split_80_10_10`]; validation and test triples with an entity not in the
/// training part are left out (counted in [`KnowledgeGraph::dropped`]). The same
/// arguments always give the same graph.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::synthetic_kg;
/// let g = synthetic_kg(400, 5, 5000, 1);
/// assert_eq!(g, synthetic_kg(400, 5, 5000, 1));
/// assert_eq!(g.train.len() + g.valid.len() + g.test.len() + g.dropped, 5000);
/// assert_eq!((g.entities.len(), g.relations.len()), (400, 5));
/// assert!(g.train.iter().all(|t| t.head < 400 && t.tail < 400 && t.relation < 5));
/// ```
pub fn synthetic_kg(
    entities: usize,
    relations: usize,
    triples: usize,
    seed: u64,
) -> KnowledgeGraph {
    let (n, relation_count) = (entities.max(2), relations.max(1));
    let side = (n as f64).sqrt().ceil() as i64;
    let mut rng = rng_for(seed, 6);
    // Point p of the grid is (p % side, p / side); points n.. are off the graph.
    let mut entity_at: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        entity_at.swap(i, rng.gen_range(0..=i));
    }
    let mut point_of = vec![0usize; n];
    for (p, &e) in entity_at.iter().enumerate() {
        point_of[e as usize] = p;
    }
    let reach = REACH;
    let offsets: Vec<(i64, i64)> = (0..relation_count)
        .map(|_| (rng.gen_range(-reach..=reach), rng.gen_range(-reach..=reach)))
        .collect();
    let popularity = Zipf::new(n, HEAD_EXPONENT);
    // At most every (head, relation, noise) combination, so that the loop ends.
    let wanted = triples.min(n * relation_count * 9 / 2);
    let mut seen: HashSet<Triple> = HashSet::with_capacity(wanted);
    let mut all = Vec::with_capacity(wanted);
    while all.len() < wanted {
        let head = entity_at[popularity.sample(&mut rng)];
        let relation = rng.gen_range(0..relation_count);
        let p = point_of[head as usize] as i64;
        let (dx, dy) = offsets[relation];
        let x = p % side + dx + rng.gen_range(-1..=1);
        let y = p / side + dy + rng.gen_range(-1..=1);
        if !(0..side).contains(&x) || !(0..side).contains(&y) || y * side + x >= n as i64 {
            continue;
        }
        let t = Triple {
            head,
            relation: relation as u32,
            tail: entity_at[(y * side + x) as usize],
        };
        if seen.insert(t) {
            all.push(t);
        }
    }
    let (train, valid, test) = split_80_10_10(all, seed);
    let (valid, test, dropped) = drop_unseen(&train, valid, test, n, relation_count);
    KnowledgeGraph {
        train,
        valid,
        test,
        entities: (0..n).map(|i| format!("e{i}")).collect(),
        relations: (0..relation_count).map(|i| format!("r{i}")).collect(),
        dropped,
    }
}

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

/// The dissimilarity of TransE: `d(h + r, t)` is the L1 or the L2 norm of `h + r - t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Norm {
    /// `Σ |x_i|`.
    L1,
    /// `sqrt(Σ x_i²)`.
    L2,
}

impl Norm {
    /// `1` or `2`, as on the command line.
    pub fn number(self) -> u8 {
        match self {
            Norm::L1 => 1,
            Norm::L2 => 2,
        }
    }
}

impl std::str::FromStr for Norm {
    type Err = String;

    /// `1` or `2`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "1" => Ok(Norm::L1),
            "2" => Ok(Norm::L2),
            other => Err(format!("{other:?} is not a norm: use 1 (L1) or 2 (L2)")),
        }
    }
}

/// Parameter table of [`init_embedding`]: entity rows.
pub const ENTITY_TABLE: u64 = 0;

/// Parameter table of [`init_embedding`]: relation rows.
pub const RELATION_TABLE: u64 = 1;

/// The initial row `i` of table `table` ([`ENTITY_TABLE`] or [`RELATION_TABLE`]): `dim`
/// values uniform in `[-6/sqrt(dim), 6/sqrt(dim))`, as in the TransE paper, then scaled
/// to unit L2 norm (the paper normalises relations once, at the start, and entities
/// before every step). Drawn from a generator seeded by `(seed, table, i)` alone, so rows
/// do not depend on the order they are built in.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::{init_embedding, ENTITY_TABLE, RELATION_TABLE};
/// let a = init_embedding(1, ENTITY_TABLE, 3, 50);
/// assert_eq!(a, init_embedding(1, ENTITY_TABLE, 3, 50));
/// assert_ne!(a, init_embedding(1, RELATION_TABLE, 3, 50));
/// let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
/// assert!((norm - 1.0).abs() < 1e-5);
/// ```
pub fn init_embedding(seed: u64, table: u64, i: usize, dim: usize) -> Vec<f32> {
    let stream = (table << 40) ^ (i as u64) ^ 0x7a25_0000_0000_0000;
    let mut rng = rng_for(seed, stream);
    let bound = 6.0 / (dim.max(1) as f32).sqrt();
    let mut row: Vec<f32> = (0..dim)
        .map(|_| bound * (2.0 * rng.gen::<f32>() - 1.0))
        .collect();
    normalize(&mut row);
    row
}

/// The negative triple of training triple `k` (`t`) in epoch `epoch`, as `(head, tail)`:
/// with probability 1/2 the head is replaced, else the tail, by an entity drawn uniformly
/// from the `entities` other than the one replaced.
///
/// The draw is a hash of `(seed, epoch, k)` alone, not a generator advanced along the
/// loop, so it does not depend on the order in which triples are visited: the serial twin,
/// the strads-ap twin (in any serializable order) and the evaluation all see the same
/// corruptions.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::{corrupt, Triple};
/// let t = Triple { head: 3, relation: 0, tail: 7 };
/// let (h, tl) = corrupt(42, 1, 10, &t, 20);
/// assert_eq!((h, tl), corrupt(42, 1, 10, &t, 20));
/// assert!((h == 3) != (tl == 7), "exactly one side is replaced, by another entity");
/// assert!(h < 20 && tl < 20);
/// ```
#[inline]
pub fn corrupt(seed: u64, epoch: usize, k: usize, t: &Triple, entities: usize) -> (usize, usize) {
    let bits = mix64(mix64(mix64(seed) ^ epoch as u64) ^ k as u64);
    let (head, tail) = (t.head as usize, t.tail as usize);
    let others = entities.saturating_sub(1).max(1) as u64;
    // The high 32 bits pick an entity (multiply-shift), the lowest bit the side.
    let draw = (((bits >> 32) * others) >> 32) as usize;
    let other = |original: usize| if draw >= original { draw + 1 } else { draw };
    if bits & 1 == 0 {
        (other(head).min(entities.saturating_sub(1)), tail)
    } else {
        (head, other(tail).min(entities.saturating_sub(1)))
    }
}

/// `h + r - t`, the translation error of a triple.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::translation;
/// assert_eq!(translation(&[1.0, 2.0], &[0.5, 0.5], &[1.0, 1.0]), vec![0.5, 1.5]);
/// ```
#[inline]
pub fn translation(h: &[f32], r: &[f32], t: &[f32]) -> Vec<f32> {
    h.iter()
        .zip(r)
        .zip(t)
        .map(|((a, b), c)| (a + b) - c)
        .collect()
}

/// The norm of `x`: TransE's dissimilarity of a triple whose [`translation`] is `x`.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::{distance, Norm};
/// assert_eq!(distance(&[3.0, -4.0], Norm::L1), 7.0);
/// assert_eq!(distance(&[3.0, -4.0], Norm::L2), 5.0);
/// ```
#[inline]
pub fn distance(x: &[f32], norm: Norm) -> f32 {
    match norm {
        Norm::L1 => x.iter().map(|v| v.abs()).sum(),
        Norm::L2 => x.iter().map(|v| v * v).sum::<f32>().sqrt(),
    }
}

/// The dissimilarity of `a - b` ([`distance`]) without building `a - b`; the score of a
/// candidate entity in [`rank_triple`].
#[inline]
pub fn distance_between(a: &[f32], b: &[f32], norm: Norm) -> f32 {
    match norm {
        Norm::L1 => a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum(),
        Norm::L2 => a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f32>()
            .sqrt(),
    }
}

/// Replaces `x` by the gradient of its [`distance`]: `sign(x)` for L1, `x / |x|` for L2
/// (0 where the norm is not differentiable).
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::{to_gradient, Norm};
/// let mut x = vec![3.0, -4.0, 0.0];
/// to_gradient(&mut x, Norm::L1);
/// assert_eq!(x, vec![1.0, -1.0, 0.0]);
/// let mut y = vec![3.0, -4.0];
/// to_gradient(&mut y, Norm::L2);
/// assert_eq!(y, vec![0.6, -0.8]);
/// ```
#[inline]
pub fn to_gradient(x: &mut [f32], norm: Norm) {
    match norm {
        Norm::L1 => x.iter_mut().for_each(|v| {
            *v = if *v > 0.0 {
                1.0
            } else if *v < 0.0 {
                -1.0
            } else {
                0.0
            }
        }),
        Norm::L2 => {
            let n = distance(x, Norm::L2);
            let scale = if n > 0.0 { 1.0 / n } else { 0.0 };
            x.iter_mut().for_each(|v| *v *= scale);
        }
    }
}

/// `y += a · x`.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::axpy;
/// let mut y = vec![1.0, 1.0];
/// axpy(&mut y, 2.0, &[0.5, -1.0]);
/// assert_eq!(y, vec![2.0, -1.0]);
/// ```
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (u, v) in y.iter_mut().zip(x) {
        *u += a * v;
    }
}

/// Scales `x` to unit L2 norm (leaves a zero row alone).
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::normalize;
/// let mut x = vec![3.0, 4.0];
/// normalize(&mut x);
/// assert_eq!(x, vec![0.6, 0.8]);
/// ```
#[inline]
pub fn normalize(x: &mut [f32]) {
    let n = distance(x, Norm::L2);
    if n > 0.0 {
        let scale = 1.0 / n;
        x.iter_mut().for_each(|v| *v *= scale);
    }
}

/// The margin ranking loss of training triple `k` against its corruption in epoch
/// `epoch` ([`corrupt`]): `max(0, margin + d(h + r, t) - d(h' + r, t'))`.
#[allow(clippy::too_many_arguments)]
pub fn margin_loss(
    entities: &[Vec<f32>],
    relations: &[Vec<f32>],
    t: &Triple,
    k: usize,
    seed: u64,
    epoch: usize,
    margin: f32,
    norm: Norm,
) -> f64 {
    let (h, r, tl) = (t.head as usize, t.relation as usize, t.tail as usize);
    let (h2, t2) = corrupt(seed, epoch, k, t, entities.len());
    let pos = distance(
        &translation(&entities[h], &relations[r], &entities[tl]),
        norm,
    );
    let neg = distance(
        &translation(&entities[h2], &relations[r], &entities[t2]),
        norm,
    );
    f64::from((margin + pos - neg).max(0.0))
}

/// Epoch number of the corruptions [`mean_margin_loss`] uses: training epochs count from
/// 1, so these are corruptions no epoch trains on.
pub const LOSS_EPOCH: usize = 0;

/// The mean margin ranking loss over the training triples, each against a fixed
/// corruption (that of epoch [`LOSS_EPOCH`]): the progress figure printed after every
/// epoch, comparable across epochs and between the twins.
pub fn mean_margin_loss(
    entities: &[Vec<f32>],
    relations: &[Vec<f32>],
    triples: &[Triple],
    seed: u64,
    margin: f32,
    norm: Norm,
) -> f64 {
    if triples.is_empty() {
        return 0.0;
    }
    let sum: f64 = triples
        .iter()
        .enumerate()
        .map(|(k, t)| margin_loss(entities, relations, t, k, seed, LOSS_EPOCH, margin, norm))
        .sum();
    sum / triples.len() as f64
}

// ---------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------

/// Every known true triple (training, validation and test), indexed for the filtered
/// ranking: the true tails of each `(head, relation)` and the true heads of each
/// `(relation, tail)`, sorted and without duplicates.
#[derive(Clone, Debug, Default)]
pub struct KnownTriples {
    tails: HashMap<(u32, u32), Vec<u32>>,
    heads: HashMap<(u32, u32), Vec<u32>>,
}

impl KnownTriples {
    /// Indexes all triples of `graph`.
    pub fn new(graph: &KnowledgeGraph) -> Self {
        let mut known = KnownTriples::default();
        for t in graph.train.iter().chain(&graph.valid).chain(&graph.test) {
            known
                .tails
                .entry((t.head, t.relation))
                .or_default()
                .push(t.tail);
            known
                .heads
                .entry((t.relation, t.tail))
                .or_default()
                .push(t.head);
        }
        for list in known.tails.values_mut().chain(known.heads.values_mut()) {
            list.sort_unstable();
            list.dedup();
        }
        known
    }

    /// The known tails of `(head, relation, ?)`.
    pub fn tails(&self, head: u32, relation: u32) -> &[u32] {
        self.tails.get(&(head, relation)).map_or(&[], Vec::as_slice)
    }

    /// The known heads of `(?, relation, tail)`.
    pub fn heads(&self, relation: u32, tail: u32) -> &[u32] {
        self.heads.get(&(relation, tail)).map_or(&[], Vec::as_slice)
    }
}

/// Sums of filtered ranks: add them up over triples, then read [`RankSums::mrr`] and
/// [`RankSums::hits10`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankSums {
    /// Sum of `1 / rank`.
    pub reciprocal: f64,
    /// Number of ranks at most 10.
    pub hits10: f64,
    /// Number of ranks.
    pub ranks: usize,
}

impl std::ops::Add for RankSums {
    type Output = RankSums;

    /// The sums of both.
    fn add(self, other: RankSums) -> RankSums {
        RankSums {
            reciprocal: self.reciprocal + other.reciprocal,
            hits10: self.hits10 + other.hits10,
            ranks: self.ranks + other.ranks,
        }
    }
}

impl RankSums {
    /// Sums for one rank.
    pub fn of_rank(rank: f64) -> RankSums {
        RankSums {
            reciprocal: 1.0 / rank,
            hits10: if rank <= 10.0 { 1.0 } else { 0.0 },
            ranks: 1,
        }
    }

    /// Mean reciprocal rank (0 without ranks).
    pub fn mrr(&self) -> f64 {
        if self.ranks == 0 {
            0.0
        } else {
            self.reciprocal / self.ranks as f64
        }
    }

    /// Fraction of ranks at most 10 (0 without ranks).
    pub fn hits10(&self) -> f64 {
        if self.ranks == 0 {
            0.0
        } else {
            self.hits10 / self.ranks as f64
        }
    }
}

/// The filtered rank of `truth` among all entities scored by their distance to `point`,
/// leaving out the other entities of `known` (true answers too). Ties count half
/// ("realistic" rank: the mean rank over the orders of tied entities), so a model that
/// scores everything alike ranks in the middle, not first.
fn filtered_rank(
    entities: &[Vec<f32>],
    point: &[f32],
    truth: usize,
    known: &[u32],
    norm: Norm,
) -> f64 {
    let score = |e: usize| distance_between(&entities[e], point, norm);
    let target = score(truth);
    let (mut better, mut tied) = (0i64, 0i64);
    for (e, row) in entities.iter().enumerate() {
        let s = distance_between(row, point, norm);
        if s < target {
            better += 1;
        } else if s == target && e != truth {
            tied += 1;
        }
    }
    for &e in known {
        let e = e as usize;
        if e == truth || e >= entities.len() {
            continue;
        }
        let s = score(e);
        if s < target {
            better -= 1;
        } else if s == target {
            tied -= 1;
        }
    }
    1.0 + better as f64 + tied as f64 / 2.0
}

/// The filtered ranks of the true tail of `t` (among `(h, r, e)` for every entity `e`)
/// and of its true head (among `(e, r, t)`), each against all entities except the other
/// known true triples ([`KnownTriples`]), as [`RankSums`] of two ranks.
///
/// A candidate's score is `d(h + r, e)` (tails) or `d(e, t - r)` (heads), lower is better.
pub fn rank_triple(
    entities: &[Vec<f32>],
    relations: &[Vec<f32>],
    t: &Triple,
    known: &KnownTriples,
    norm: Norm,
) -> RankSums {
    let (h, r, tl) = (t.head as usize, t.relation as usize, t.tail as usize);
    let head_plus_r: Vec<f32> = entities[h]
        .iter()
        .zip(&relations[r])
        .map(|(a, b)| a + b)
        .collect();
    let tail_minus_r: Vec<f32> = entities[tl]
        .iter()
        .zip(&relations[r])
        .map(|(a, b)| a - b)
        .collect();
    let tail_rank = filtered_rank(
        entities,
        &head_plus_r,
        tl,
        known.tails(t.head, t.relation),
        norm,
    );
    let head_rank = filtered_rank(
        entities,
        &tail_minus_r,
        h,
        known.heads(t.relation, t.tail),
        norm,
    );
    RankSums::of_rank(tail_rank) + RankSums::of_rank(head_rank)
}

/// The filtered ranks of every triple of `triples` ([`rank_triple`]), summed in order.
pub fn evaluate(
    entities: &[Vec<f32>],
    relations: &[Vec<f32>],
    triples: &[Triple],
    known: &KnownTriples,
    norm: Norm,
) -> RankSums {
    triples
        .iter()
        .map(|t| rank_triple(entities, relations, t, known, norm))
        .fold(RankSums::default(), |a, b| a + b)
}

/// Default of `--eval-sample`: test triples evaluated at most.
pub const EVAL_SAMPLE: usize = 1000;

/// The test triples to evaluate: all of `test` when it has at most `max` triples, else
/// `max` of them drawn uniformly without replacement by `seed` (kept in test-set order).
/// Ranking a triple costs two passes over all entities, so large graphs are evaluated on
/// such a sample; both twins draw the same one.
///
/// # Examples
/// ```
/// use strads_ap_examples::transe::{eval_sample, Triple};
/// let test: Vec<Triple> = (0..50).map(|i| Triple { head: i, relation: 0, tail: i + 1 }).collect();
/// assert_eq!(eval_sample(&test, 100, 1), test);
/// let s = eval_sample(&test, 10, 1);
/// assert_eq!(s.len(), 10);
/// assert_eq!(s, eval_sample(&test, 10, 1));
/// assert!(s.windows(2).all(|w| w[0].head < w[1].head));
/// ```
pub fn eval_sample(test: &[Triple], max: usize, seed: u64) -> Vec<Triple> {
    if test.len() <= max {
        return test.to_vec();
    }
    let mut rng = rng_for(seed, 5);
    let mut order: Vec<usize> = (0..test.len()).collect();
    for i in 0..max {
        order.swap(i, rng.gen_range(i..test.len()));
    }
    let mut chosen = order[..max].to_vec();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| test[i]).collect()
}

// ---------------------------------------------------------------------------------------
// Result line
// ---------------------------------------------------------------------------------------

/// `count / secs` (e.g. triples per second), 0 when no time was measured.
pub fn per_sec(count: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

/// The result line of TransE.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TranseResult {
    /// Always `"transe"`.
    pub app: String,
    /// [`SERIAL`](crate::report::SERIAL) or [`STRADS`](crate::report::STRADS).
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Processes of the job (1 for the serial twin).
    pub ranks: usize,
    /// Worker threads per process (1 for the serial twin).
    pub threads: usize,
    /// Epochs run.
    pub epochs: usize,
    /// Mean seconds of one epoch's training loop. Evaluation is excluded, and so is the
    /// strads-ap twin's one-off reconnaissance and planning (`setup_secs`) when its plan
    /// is reused; a plan redone every epoch counts in the epoch.
    pub secs_per_epoch: f64,
    /// Filtered mean reciprocal rank on the (sampled) test triples, heads and tails.
    pub mrr: f64,
    /// Filtered Hits@10 on the same ranks.
    pub hits10: f64,
    /// Training triples per second: training triples / `secs_per_epoch`.
    pub triples_per_sec: f64,
    /// Seconds of the one-off reconnaissance and planning left out of `secs_per_epoch`
    /// (0 for the serial twin, and when the plan is redone every epoch: that time is part
    /// of the epochs).
    pub setup_secs: f64,
    /// The strads-ap twin's loop: `async` (`async_for!`), `hybrid` or `bsp` (`sync_for!`);
    /// absent for the serial twin.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sync: Option<String>,
    /// The strads-ap twin's relaxed tables with `async_for!` (`none`, `relations`, `all`);
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub relaxed: Option<String>,
}
