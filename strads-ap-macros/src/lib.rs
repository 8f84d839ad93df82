//! The `async_for!` and `sync_for!` macros of [strads-ap].
//!
//! Use them through the `strads-ap` crate (`strads_ap::async_for!`, `strads_ap::sync_for!`,
//! or `use strads_ap::prelude::*`); the code they generate calls `::strads_ap::__private`.
//!
//! Each macro parses its arguments (`ast`), finds the variables the loop body captures
//! (`captures`), checks the rules a parallel loop body must follow (`valid`), and
//! generates a named, serializable task plus a call into the runtime (`expand`). Every
//! problem is reported as a compile error at the user's code, never as a panic.
//!
//! [strads-ap]: https://github.com/strads-ap/strads-ap

#![warn(missing_docs)]

mod ast;
mod captures;
mod expand;
mod valid;

use proc_macro::TokenStream;

use crate::ast::LoopKind;

/// Runs a serial loop body in parallel, keeping the result of some serial order.
///
/// ```ignore
/// async_for!(RANGE, |k| BODY)?;
/// async_for!(RANGE, |k| BODY, OPTS)?;
/// ```
///
/// `BODY` is the body of the serial loop `for k in RANGE { BODY }`, unchanged. The
/// macro is an operator of the whole job: every rank calls it, the runtime runs the body
/// once for every index in `RANGE`, spread over the threads of every rank, and returns
/// `strads_ap::Result<()>` once all indices are done.
///
/// The first run at a call site records which elements of which distributed data
/// structures (DDSs) each index reads and writes; the runtime then groups the indices so
/// that no two indices running at the same time write an element the other touches. The
/// result equals that of running the indices one after another, in some order.
///
/// ```ignore
/// use strads_ap::prelude::*;
///
/// let ratings: DVector<Rating> = read_from_file(&path, parse_rating)?;
/// let w: DVector<[f32; RANK]> = DVector::from_fn(users, |i| init_row(seed, i))?;
/// let h: DVector<[f32; RANK]> = DVector::from_fn(items, |j| init_row(seed, j))?;
/// let (gamma, lambda) = (0.01_f32, 0.05_f32);
/// for _epoch in 0..epochs {
///     async_for!(0..ratings.len(), |k| {
///         let r = &ratings[k];
///         let (u, v) = (r.user as usize, r.item as usize);
///         let wu = &mut w[u];
///         let hv = &mut h[v];
///         let mut err = r.rating;
///         for f in 0..RANK { err -= wu[f] * hv[f]; }
///         for f in 0..RANK {
///             let (a, b) = (wu[f], hv[f]);
///             wu[f] += gamma * (err * b - lambda * a);
///             hv[f] += gamma * (err * a - lambda * b);
///         }
///     })?;
/// }
/// ```
///
/// # Arguments
///
/// - `RANGE`: the indices, e.g. `0..ratings.len()`.
/// - `|k| BODY`: a closure with exactly one parameter, the index. It may be written
///   `move |k| ..` or `|k: usize| ..`, and its body may be a block or an expression.
/// - `OPTS` (optional): anything that converts into `strads_ap::Opts`, e.g.
///   `Opts::new().threads(4).recheck(true)`.
///
/// # Captured variables
///
/// The variables of the enclosing function that the body uses are its *captures*
/// (`ratings`, `w`, `h`, `gamma` and `lambda` above). They are found from the body's
/// text: a name is a capture when it is used as a plain variable (`x`, `x.field`,
/// `x[i]`, `x.method()`, `&x`) and is not defined inside the body. Names that start with
/// a capital letter (types, constants, statics, variants like `RANK` or `None`), paths
/// with `::`, functions called by name (`foo(x)`), macro names and items defined in the
/// body are never captures.
///
/// - A DDS (`DVector`, `DMap`, `DMultiMap`), or a reference to one (a function's
///   `&DVector` parameter), is indexed exactly like a `Vec` or a `HashMap` inside the
///   body: `w[u][f] += ..`, `&mut h[v]`, `counts.get(&key)`. Writes through indexing go
///   to the shared table.
/// - Every other captured value is **copied**: each thread and each rank gets its own
///   copy, taken from the driver (rank 0) when the loop starts. It must be `Clone`,
///   `Send`, `Sync`, `'static`, `serde::Serialize` and `serde::Deserialize`. Keep large
///   collections in DDSs: plain values are copied and shipped with every call. A DDS
///   inside another value (`Vec<DVector<f32>>`) is not supported; capture each DDS as
///   its own variable.
/// - A function passed by name as a value (`.map(score)`) looks like a variable to the
///   analysis; write `.map(|x| score(x))` instead.
///
/// # Reductions
///
/// A plain captured variable that the body accumulates into, the way the serial loop
/// does, is a *reduction*: each unit of work (a group of indices one worker runs)
/// accumulates its own part, and after the loop the parts are combined into the
/// variable, which must be declared `let mut` as in the serial program.
///
/// ```ignore
/// let mut loss = 0.0f64;
/// let mut best = (f64::MIN, 0usize);
/// async_for!(0..ratings.len(), |k| {
///     let err = /* .. */;
///     loss += err * err;                       // a sum
///     best = better(best, (err.abs(), k));     // a user function
/// })?;
/// println!("RMSE {}", (loss / ratings.len() as f64).sqrt());
/// ```
///
/// The forms, each for one variable (one form per variable):
///
/// - `x += e` and `x -= e` (also `x = x + e`): a sum; parts start from `0`
///   (`Default::default()`).
/// - `x *= e`: a product; parts start from `1` (`From::from(1u8)`).
/// - `x |= e`, `x ^= e`: parts start from `Default::default()` (`false`, `0`); `x &= e`.
/// - `x = x.max(e)`, `x = x.min(e)`, any method `x = x.m(e)`, and any function
///   `x = f(x, e)` or `x = f(e, x)`: parts start from the value before the loop and
///   combine by the same method or function, so it must be associative and commutative,
///   and the starting value neutral for it (`f64::MIN` for a max, the worst score for a
///   best-of) unless it is idempotent (`min`, `max`, `&`).
///
/// - `x[i] += e`, `x[i][j] -= e` on a plain array or `Vec` (of numbers, arrays, `Vec`s
///   or tuples: any `Aggregate` type), when every write to `x` through indexing is `+=`
///   or `-=`: summed element-wise (Lloyd's k-means: `sums[c][f] += p[f]; counts[c] +=
///   1`); parts start from zeros shaped like the value before the loop. The same writes
///   to a DDS are DDS writes, as always: the type decides.
///
/// The value must be `Clone`, `Send`, `Sync`, `'static`, `Serialize` and `Deserialize`.
/// A part is what one unit added, so with `-=` on an unsigned integer a part can go
/// below zero where the serial running value never does: use a signed type (or
/// `wrapping_sub`) there.
///
/// The combined value is deterministic for a given plan: the parts are combined in the
/// order of the plan's units, not in the order workers finished them. One worker in a
/// world of one runs the indices in order as one part starting from the value before the
/// loop, so the result equals the serial program's to the last bit (also on a first call
/// recorded on two workers). With several workers a floating-point sum is added in
/// another order than the serial loop's, so it may differ in the last bits; integer
/// sums, `min` and `max` are exact. Inside the body, reading the variable gives the
/// running part of the current unit, not the total so far. A call that fails leaves the
/// variable unchanged. With checkpoints on, a call that a recovery replay skips gives
/// the variable the value the call gave it when it ran (checkpoints record the values).
/// Partials are gathered across ranks once per call: keep per-key results in a DDS.
///
/// # What the body may not do
///
/// These are compile errors, each reported at the offending code:
///
/// - **Assigning to a captured variable** other than by a reduction form (`gamma = 0.1`,
///   `last = v[k]`, `cfg.lr = ..`, `stats.n += 1`). The change would only reach one copy
///   and be lost. Accumulate into a plain variable (above), or keep a value per key in a
///   `DVector` and write it through indexing (`g[0] += ..`).
/// - **`break` and `return`** outside a loop nested in the body: the body runs for every
///   index, there is no loop to leave. `continue` works as in the serial loop and skips
///   the rest of the current index.
/// - **The `?` operator** outside a closure nested in the body: the body cannot return an
///   error. Handle the error in the body (`match`, `unwrap_or`) or panic with a message.
/// - **`self`**: bind the field you need to a local variable before the loop.
/// - Labelled `break`/`continue` to a loop outside the body.
#[proc_macro]
pub fn async_for(input: TokenStream) -> TokenStream {
    expand::expand(LoopKind::Async, input.into())
        .unwrap_or_else(expand::into_compile_error)
        .into()
}

/// Runs a serial mini-batch loop body data-parallel, on every thread of every rank.
///
/// ```ignore
/// sync_for!(DATA, MINIBATCH, MODE, |batch| BODY)?;
/// sync_for!(DATA, MINIBATCH, MODE, |batch| BODY, OPTS)?;
/// ```
///
/// `BODY` is the body of the serial loop `for batch in DATA.chunks(MINIBATCH) { BODY }`,
/// unchanged: the runtime cuts the DDS `DATA` into mini-batches of `MINIBATCH` elements
/// and runs the body once for each, with `batch` bound to the mini-batch (a slice of
/// elements). Unlike [`async_for!`], mini-batches running at the same time may write the
/// same elements; `MODE` says how their updates are combined:
///
/// - `SyncMode::Bsp`: in each step every worker processes one mini-batch on its own copy
///   of the parameters it touches; the copies' updates are then aggregated (averaged by
///   default, or by a table's own aggregation function) across threads and ranks.
/// - `SyncMode::Hybrid`: the workers of one process share their progress: each worker's
///   update is added to the process's parameters after every mini-batch; processes
///   synchronise at the end of each step.
///
/// The macro is an operator of the whole job: every rank calls it, and it returns
/// `strads_ap::Result<()>` once every mini-batch is done.
///
/// ```ignore
/// use strads_ap::prelude::*;
///
/// sync_for!(sentences, 1000, SyncMode::Hybrid, |batch| {
///     for s in batch {
///         for (i, &word) in s.words.iter().enumerate() {
///             let g = rate * gradient(&emb[word], s, i);
///             for f in 0..DIM { emb[word][f] += g[f]; }
///         }
///     }
/// }, Opts::new().threads(2))?;
/// ```
///
/// # Arguments
///
/// - `DATA`: the DDS of training data, e.g. `sentences` (passed by reference).
/// - `MINIBATCH`: the number of elements in a mini-batch.
/// - `MODE`: a `strads_ap::SyncMode`.
/// - `|batch| BODY`: a closure with exactly one parameter, the mini-batch. It may be
///   written `move |batch| ..` or `|batch: &[Sentence]| ..`, and its body may be a block
///   or an expression.
/// - `OPTS` (optional): anything that converts into `strads_ap::Opts`.
///
/// # Captured variables and refused code
///
/// The rules are those of [`async_for!`]: DDSs are indexed like a `Vec` or a `HashMap`
/// inside the body; every other captured variable is a copy, so assigning to it is a
/// compile error unless it is a reduction (`seen += batch.len()`, combined after the
/// loop; one worker in a world of one gives the serial value to the last bit, and
/// several workers combine per mini-batch in data order); `break`, `return`, `?` and
/// `self` are refused, and `continue` skips the rest of the current mini-batch. If the body uses `DATA` itself (e.g.
/// `sentences.len()`), it is captured like any other variable.
#[proc_macro]
pub fn sync_for(input: TokenStream) -> TokenStream {
    expand::expand(LoopKind::Sync, input.into())
        .unwrap_or_else(expand::into_compile_error)
        .into()
}
