//! Reductions: plain variables a loop body accumulates into in the serial style
//! (`loss += e`, `best = best.max(e)`, `x = f(x, e)`), combined after the call.
//!
//! The macro turns such a capture into a [`Reduction`] and brackets every run of the body
//! (one unit of work: a plan's group, a rotation slice, a mini-batch, the whole call for a
//! lone worker) with `__strads_start` and `__strads_commit`:
//! the body's variable starts from this unit's partial and the unit's result is kept under
//! the unit's key. After the call the partials are combined in key order, so the result
//! depends on the plan, not on which worker ran what when.
//!
//! * **The serial chain.** Units run in loop order on one worker (a lone worker's call, a
//!   recorded first call) share key 0: each continues from the last, and the first starts
//!   from the value before the loop. With one such chain and nothing else the result is
//!   the chain's last value, bit for bit the serial program's.
//! * **Parallel units** start from the operation's identity (`0` for `+=`, `1` for `*=`)
//!   or, for forms without one (`&=`, `x = x.max(e)`, `x = f(x, e)`), from the value
//!   before the loop, which must then be neutral for the operation or the operation
//!   idempotent. The result is the value before the loop combined with every partial, in
//!   key order.
//! * **Across ranks** every rank's partials are gathered to every rank and combined in
//!   the same order there, with the driver's starting value.
//! * Reconnaissance runs (which change nothing) commit nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::access::ExecCtx;
use crate::dds::{Aggregate, DMap, DMultiMap, DVector, Element, MapRef, MultiMapRef, VectorRef};
use crate::error::{Error, Result};
use crate::recon::{InPlace, Recorder};
use crate::sync::Mutex;

/// The unit key of runs in loop order on one worker (see the module docs).
pub(crate) const SERIAL_UNIT: u64 = 0;

/// A captured reduction variable, as the task holds it. Made by generated code.
#[doc(hidden)]
pub struct Reduction<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    /// The variable's value before the loop.
    init: T,
    /// Combines two partials; `None` in a task shipped from the driver, which only runs
    /// units (the driver's own task combines).
    combine: Option<fn(T, T) -> T>,
    state: Mutex<State<T>>,
}

struct State<T> {
    /// Partials by unit key. A started unit's partial is marked busy (holding its value
    /// at the start) until the unit commits; a unit that unwinds leaves it so, its value
    /// as before. A key holds several partials when two runs of one unit overlap.
    partials: BTreeMap<u64, Vec<Partial<T>>>,
    /// Whether the serial chain has started (from the value before the loop).
    chained: bool,
    /// The combined value, once the call has finished.
    result: Option<T>,
}

struct Partial<T> {
    value: T,
    busy: bool,
}

/// What a rank sends the others of its partials.
#[derive(Serialize, Deserialize)]
struct Partials<T> {
    init: T,
    chained: bool,
    partials: Vec<(u64, T)>,
}

/// Makes the task's form of a reduction variable whose value before the loop is `init`
/// and whose partials combine by `combine`.
#[doc(hidden)]
pub fn reduction<T: Clone>(init: &T, combine: fn(T, T) -> T) -> Reduction<T> {
    Reduction::new(init.clone(), Some(combine))
}

impl<T> Reduction<T> {
    fn new(init: T, combine: Option<fn(T, T) -> T>) -> Self {
        Reduction {
            inner: Arc::new(Inner {
                init,
                combine,
                state: Mutex::new(State {
                    partials: BTreeMap::new(),
                    chained: false,
                    result: None,
                }),
            }),
        }
    }
}

/// Where a body runs, as far as reductions care: the key of the unit it runs, or `None`
/// for reconnaissance, which commits nothing.
#[doc(hidden)]
pub trait UnitOf {
    /// The running unit's key.
    fn __strads_unit(&self) -> Option<u64>;
}

impl UnitOf for ExecCtx {
    #[inline]
    fn __strads_unit(&self) -> Option<u64> {
        Some(self.unit.get())
    }
}

/// Reconnaissance: its tasks' writes are not the call's.
impl UnitOf for Recorder {
    #[inline]
    fn __strads_unit(&self) -> Option<u64> {
        None
    }
}

/// A recorded run: the call itself, one serial unit.
impl UnitOf for InPlace<'_> {
    #[inline]
    fn __strads_unit(&self) -> Option<u64> {
        Some(SERIAL_UNIT)
    }
}

impl<T: Clone> Reduction<T> {
    /// The value the body's variable starts a unit from, for forms without an identity:
    /// the unit's partial so far, or the value before the loop.
    #[doc(hidden)]
    #[inline]
    pub fn __strads_start(&self, at: &impl UnitOf) -> T {
        self.start(at, None)
    }

    /// The same for forms with an identity: the unit's partial so far, the value before
    /// the loop (the serial chain's first unit, reconnaissance), or `identity(&before)`.
    #[doc(hidden)]
    #[inline]
    pub fn __strads_start_from(&self, at: &impl UnitOf, identity: fn(&T) -> T) -> T {
        self.start(at, Some(identity))
    }

    fn start(&self, at: &impl UnitOf, identity: Option<fn(&T) -> T>) -> T {
        let Some(unit) = at.__strads_unit() else {
            return self.inner.init.clone();
        };
        let mut st = self.inner.state.lock();
        let st = &mut *st;
        let list = st.partials.entry(unit).or_default();
        if let Some(p) = list.iter_mut().find(|p| !p.busy) {
            p.busy = true;
            return p.value.clone();
        }
        let value = if unit == SERIAL_UNIT && !st.chained {
            st.chained = true;
            self.inner.init.clone()
        } else {
            match identity {
                Some(identity) => identity(&self.inner.init),
                None => self.inner.init.clone(),
            }
        };
        list.push(Partial {
            value: value.clone(),
            busy: true,
        });
        value
    }

    /// Keeps a unit's value at its end, in the partial its start marked busy. (A unit
    /// that unwinds never gets here: its partial keeps the value it had.)
    #[doc(hidden)]
    pub fn __strads_commit(&self, at: &impl UnitOf, value: T) {
        let Some(unit) = at.__strads_unit() else {
            return;
        };
        let mut st = self.inner.state.lock();
        let list = st.partials.entry(unit).or_default();
        match list.iter_mut().rev().find(|p| p.busy) {
            Some(p) => {
                p.value = value;
                p.busy = false;
            }
            None => list.push(Partial { value, busy: false }),
        }
    }

    /// The combined value after the call, or `current` when the call produced none (a
    /// recovery replay skipped it).
    #[doc(hidden)]
    pub fn __strads_take(&self, current: T) -> T {
        self.inner.state.lock().result.take().unwrap_or(current)
    }
}

/// A plain array, `Vec` or number a body accumulates into element-wise (`hist[c] += 1`,
/// `sums[c][f] += x[f]`), as the body binds it: the unit's partial, committed after the
/// body's loop.
#[doc(hidden)]
pub struct Summed<'a, X: Clone, C: UnitOf> {
    red: &'a Reduction<X>,
    at: &'a C,
    value: Option<X>,
}

/// Zeros shaped like `x`.
fn zeros_like<X: Aggregate>(x: &X) -> X {
    let mut z = x.clone();
    z.sub_delta(x);
    z
}

impl<X: Aggregate> Reduction<X> {
    fn summed<'a, C: UnitOf>(&'a self, at: &'a C) -> Summed<'a, X, C> {
        let value = self.start(at, Some(zeros_like::<X>));
        Summed {
            red: self,
            at,
            value: Some(value),
        }
    }

    /// The binding of a checked run.
    #[doc(hidden)]
    pub fn __strads_enter<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        _: &'static str,
    ) -> Summed<'a, X, ExecCtx> {
        self.summed(ctx)
    }

    /// The binding of a checked run that notes written keys (`sync_for!`).
    #[doc(hidden)]
    pub fn __strads_note<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        _: &'static str,
    ) -> Summed<'a, X, ExecCtx> {
        self.summed(ctx)
    }

    /// The binding of a recording run.
    #[doc(hidden)]
    pub fn __strads_record<'a, R: UnitOf>(
        &'a self,
        rec: &'a R,
        _: &'static str,
    ) -> Summed<'a, X, R> {
        self.summed(rec)
    }

    /// The binding of a direct run.
    #[doc(hidden)]
    pub fn __strads_direct<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        _: &'static str,
    ) -> Summed<'a, X, ExecCtx> {
        self.summed(ctx)
    }

    /// The binding of a direct run over windows.
    #[doc(hidden)]
    pub fn __strads_window<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        _: &'static str,
    ) -> Summed<'a, X, ExecCtx> {
        self.summed(ctx)
    }

    /// The binding of a locking run.
    #[doc(hidden)]
    pub fn __strads_lock<'a>(
        &'a self,
        ctx: &'a ExecCtx,
        _: &'static str,
    ) -> Summed<'a, X, ExecCtx> {
        self.summed(ctx)
    }
}

impl<X: Clone, C: UnitOf> Summed<'_, X, C> {
    /// The body's variable.
    #[doc(hidden)]
    #[inline]
    pub fn __strads_bind(&mut self) -> &mut X {
        self.value
            .as_mut()
            .expect("a summed capture is committed after the body")
    }

    /// Keeps the unit's partial, after the body's loop.
    #[doc(hidden)]
    pub fn __strads_commit(&mut self) {
        if let Some(value) = self.value.take() {
            self.red.__strads_commit(self.at, value);
        }
    }
}

/// What a body does after its loop with the bindings of captures it writes through
/// indexing: DDS views need nothing (this), summed plain values commit ([`Summed`]).
#[doc(hidden)]
pub trait CommitFallback {
    /// Nothing.
    #[inline(always)]
    fn __strads_commit(&mut self) {}
}

impl<T: ?Sized> CommitFallback for T {}

/// A capture written through indexing, on its way into the task: picks by autoref
/// specialisation a DDS's handle ([`CaptureDds`]) or a summed reduction
/// ([`CaptureSummed`]).
#[doc(hidden)]
pub struct Written<'a, X>(pub &'a X);

/// A DDS written through indexing: its handle, as for any capture.
#[doc(hidden)]
pub trait CaptureDds {
    /// The task's form.
    type Out;
    /// Makes it.
    fn __strads_capture_summed(&self) -> Self::Out;
}

impl<T: Element> CaptureDds for &Written<'_, DVector<T>> {
    type Out = VectorRef<T>;
    fn __strads_capture_summed(&self) -> VectorRef<T> {
        self.0.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> CaptureDds for &Written<'_, DMap<K, V>> {
    type Out = MapRef<K, V>;
    fn __strads_capture_summed(&self) -> MapRef<K, V> {
        self.0.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> CaptureDds for &Written<'_, DMultiMap<K, V>> {
    type Out = MultiMapRef<K, V>;
    fn __strads_capture_summed(&self) -> MultiMapRef<K, V> {
        self.0.__strads_capture()
    }
}

impl<T: Element> CaptureDds for &Written<'_, &DVector<T>> {
    type Out = VectorRef<T>;
    fn __strads_capture_summed(&self) -> VectorRef<T> {
        self.0.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> CaptureDds for &Written<'_, &DMap<K, V>> {
    type Out = MapRef<K, V>;
    fn __strads_capture_summed(&self) -> MapRef<K, V> {
        self.0.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> CaptureDds for &Written<'_, &DMultiMap<K, V>> {
    type Out = MultiMapRef<K, V>;
    fn __strads_capture_summed(&self) -> MultiMapRef<K, V> {
        self.0.__strads_capture()
    }
}

/// A plain value written through indexing by sums only: a reduction whose partials add
/// element-wise.
#[doc(hidden)]
pub trait CaptureSummed<X> {
    /// Makes it.
    fn __strads_capture_summed(&self) -> Reduction<X>;
}

impl<X: Aggregate> CaptureSummed<X> for Written<'_, X> {
    fn __strads_capture_summed(&self) -> Reduction<X> {
        Reduction::new(
            self.0.clone(),
            Some(|mut a: X, b: X| {
                a.add_delta(&b);
                a
            }),
        )
    }
}

/// After the call, a capture written through indexing by sums takes its combined value
/// if it is a summed plain value ([`TakeSummed`], through `&mut`: the variable is `let
/// mut`, as in the serial program); a DDS has nothing to take (this, through `&`: its
/// variable need not be `mut`). Method resolution picks by type, before borrow checking.
#[doc(hidden)]
pub trait TakeDds {
    /// Nothing.
    #[inline(always)]
    fn __strads_take_from<Y>(&self, _: &Y) {}
}

impl<T> TakeDds for DVector<T> {}
impl<K, V> TakeDds for DMap<K, V> {}
impl<K, V> TakeDds for DMultiMap<K, V> {}

/// See [`TakeDds`].
#[doc(hidden)]
pub trait TakeSummed<X> {
    /// Takes the combined value, if the call produced one.
    fn __strads_take_from(&mut self, from: &Reduction<X>);
}

impl<X: Aggregate> TakeSummed<X> for X {
    fn __strads_take_from(&mut self, from: &Reduction<X>) {
        if let Some(v) = from.inner.state.lock().result.take() {
            *self = v;
        }
    }
}

/// A state's partials in key order.
fn flatten<T>(partials: BTreeMap<u64, Vec<Partial<T>>>) -> Vec<(u64, T)> {
    partials
        .into_iter()
        .flat_map(|(k, list)| list.into_iter().map(move |p| (k, p.value)))
        .collect()
}

/// `init` combined with every partial in key order; with only the serial chain, its
/// last value.
fn fold<T>(combine: fn(T, T) -> T, init: T, chained: bool, mut partials: Vec<(u64, T)>) -> T {
    partials.sort_by_key(|(k, _)| *k);
    let mut acc = if chained { None } else { Some(init) };
    for (_, p) in partials {
        acc = Some(match acc {
            None => p,
            Some(a) => combine(a, p),
        });
    }
    acc.expect("a started chain has committed its partial")
}

/// A reduction as the engine handles it, its value type erased.
pub(crate) trait ReductionSlot: Send + Sync {
    /// This rank's partials, for the others.
    fn encode(&self, name: &str) -> Result<Vec<u8>>;
    /// Combines this task's own partials (a world of one).
    fn finish_alone(&self);
    /// Combines every rank's partials (`payloads` in rank order, as [`Self::encode`]
    /// made them), with rank 0's starting value.
    fn finish_from(&self, payloads: &[Vec<u8>], name: &str) -> Result<()>;
    /// The combined value, encoded for a checkpoint.
    fn encode_result(&self, name: &str) -> Result<Vec<u8>>;
    /// Sets the combined value from a checkpoint (a call a recovery replay skipped).
    fn restore_result(&self, bytes: &[u8], name: &str) -> Result<()>;
}

impl<T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> ReductionSlot
    for Reduction<T>
{
    fn encode(&self, name: &str) -> Result<Vec<u8>> {
        let mut st = self.inner.state.lock();
        let p = Partials {
            init: self.inner.init.clone(),
            chained: st.chained,
            partials: flatten(std::mem::take(&mut st.partials)),
        };
        postcard::to_stdvec(&p).map_err(|e| Error::Codec {
            what: format!("the partials of reduction `{name}`"),
            message: e.to_string(),
        })
    }

    fn finish_alone(&self) {
        let combine = self.combiner();
        let mut st = self.inner.state.lock();
        let partials = flatten(std::mem::take(&mut st.partials));
        st.result = Some(fold(combine, self.inner.init.clone(), st.chained, partials));
    }

    fn finish_from(&self, payloads: &[Vec<u8>], name: &str) -> Result<()> {
        let combine = self.combiner();
        let mut init = None;
        let (mut chained, mut all) = (false, Vec::new());
        for (rank, bytes) in payloads.iter().enumerate() {
            let p: Partials<T> = postcard::from_bytes(bytes).map_err(|e| Error::Codec {
                what: format!("the partials of reduction `{name}` from rank {rank}"),
                message: e.to_string(),
            })?;
            init.get_or_insert(p.init);
            chained |= p.chained;
            all.extend(p.partials);
        }
        let init = init.unwrap_or_else(|| self.inner.init.clone());
        self.inner.state.lock().result = Some(fold(combine, init, chained, all));
        Ok(())
    }

    fn encode_result(&self, name: &str) -> Result<Vec<u8>> {
        let st = self.inner.state.lock();
        postcard::to_stdvec(&st.result).map_err(|e| Error::Codec {
            what: format!("the value of reduction `{name}` for a checkpoint"),
            message: e.to_string(),
        })
    }

    fn restore_result(&self, bytes: &[u8], name: &str) -> Result<()> {
        let value: Option<T> = postcard::from_bytes(bytes).map_err(|e| Error::Codec {
            what: format!("the value of reduction `{name}` in a checkpoint"),
            message: e.to_string(),
        })?;
        self.inner.state.lock().result = value;
        Ok(())
    }
}

impl<T> Reduction<T> {
    fn combiner(&self) -> fn(T, T) -> T {
        self.inner
            .combine
            .expect("the driver's task holds the combining function")
    }

    /// The engine's handle of this reduction.
    pub(crate) fn slot(&self) -> Arc<dyn ReductionSlot>
    where
        T: 'static,
        Reduction<T>: ReductionSlot,
    {
        Arc::new(Reduction {
            inner: self.inner.clone(),
        })
    }
}

impl<T: Serialize> Serialize for Reduction<T> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.inner.init.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Reduction<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Ok(Reduction::new(T::deserialize(d)?, None))
    }
}

/// Combines the partials of every reduction of a call that ran: `running` are the
/// reductions of the task the workers ran (the driver's, or the copy shipped to this
/// rank), `local` those of this rank's own task, which the generated code reads.
pub(crate) fn finish(
    running: &[(Arc<dyn ReductionSlot>, &'static str)],
    local: &[(Arc<dyn ReductionSlot>, &'static str)],
    comm: Option<&crate::cluster::collective::Comm>,
) -> Result<()> {
    if local.is_empty() {
        return Ok(());
    }
    match comm {
        None => {
            for (slot, _) in local {
                slot.finish_alone();
            }
        }
        Some(comm) => {
            let mine = running
                .iter()
                .map(|(slot, name)| slot.encode(name))
                .collect::<Result<Vec<_>>>()?;
            let every: Vec<Vec<Vec<u8>>> = comm.allgather(mine)?;
            for (i, (slot, name)) in local.iter().enumerate() {
                let payloads: Vec<Vec<u8>> = every
                    .iter()
                    .enumerate()
                    .map(|(rank, p)| {
                        p.get(i).cloned().ok_or_else(|| Error::Codec {
                            what: format!("the partials of reduction `{name}` from rank {rank}"),
                            message: format!(
                                "rank {rank} sent {} reductions, this rank has {}",
                                p.len(),
                                local.len()
                            ),
                        })
                    })
                    .collect::<Result<_>>()?;
                slot.finish_from(&payloads, name)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(a: f64, b: f64) -> f64 {
        a + b
    }

    #[test]
    fn a_serial_chain_alone_is_its_last_value() {
        let r = reduction(&0.1f64, add);
        let ctx = ExecCtx::new(Vec::new());
        let mut x = r.__strads_start_from(&ctx, |_| 0.0);
        assert_eq!(x, 0.1);
        x += 0.2;
        r.__strads_commit(&ctx, x);
        let mut y = r.__strads_start_from(&ctx, |_| 0.0);
        assert_eq!(y, 0.1 + 0.2);
        y += 0.3;
        r.__strads_commit(&ctx, y);
        r.slot().finish_alone();
        assert_eq!(r.__strads_take(-1.0), 0.1 + 0.2 + 0.3);
        // Taken once; a call that produced nothing leaves the variable alone.
        assert_eq!(r.__strads_take(-1.0), -1.0);
    }

    #[test]
    fn parallel_units_start_from_the_identity_and_fold_in_key_order() {
        let r = reduction(&100.0f64, add);
        let ctx = ExecCtx::new(Vec::new());
        for unit in [3u64, 1, 2] {
            ctx.unit.set(unit);
            let mut x = r.__strads_start_from(&ctx, |_| 0.0);
            assert_eq!(x, 0.0);
            x += unit as f64;
            r.__strads_commit(&ctx, x);
        }
        // A unit run in two pieces continues from its own partial.
        ctx.unit.set(1);
        let x = r.__strads_start_from(&ctx, |_| 0.0);
        assert_eq!(x, 1.0);
        r.__strads_commit(&ctx, x + 10.0);
        r.slot().finish_alone();
        assert_eq!(r.__strads_take(0.0), ((100.0 + 11.0) + 2.0) + 3.0);
    }

    #[test]
    fn a_unit_that_unwinds_loses_only_its_own_part() {
        let r = reduction(&0u64, |a, b| a + b);
        let ctx = ExecCtx::new(Vec::new());
        ctx.unit.set(4);
        let x = r.__strads_start_from(&ctx, |_| 0);
        r.__strads_commit(&ctx, x + 5);
        // A task starts, adds, and unwinds before committing.
        let x = r.__strads_start_from(&ctx, |_| 0);
        assert_eq!(x, 5);
        // Started again while the unwound one is still marked busy: the busy partial
        // keeps its value, the new start opens another.
        let y = r.__strads_start_from(&ctx, |_| 0);
        assert_eq!(y, 0);
        r.__strads_commit(&ctx, y + 2);
        r.slot().finish_alone();
        assert_eq!(r.__strads_take(0), 7);
    }

    #[test]
    fn forms_without_identity_start_from_the_value_before_the_loop() {
        let r = reduction(&5i64, std::cmp::max);
        let ctx = ExecCtx::new(Vec::new());
        for (unit, v) in [(1u64, 3i64), (2, 9)] {
            ctx.unit.set(unit);
            let x = r.__strads_start(&ctx);
            assert_eq!(x, 5);
            r.__strads_commit(&ctx, x.max(v));
        }
        r.slot().finish_alone();
        assert_eq!(r.__strads_take(0), 9);
    }

    #[test]
    fn partials_from_ranks_combine_with_the_drivers_start() {
        // Rank 1's task came from the driver: it has no combining function, only runs.
        let driver = reduction(&1.0f64, add);
        let shipped: Reduction<f64> =
            postcard::from_bytes(&postcard::to_stdvec(&driver).unwrap()).unwrap();
        let ctx = ExecCtx::new(Vec::new());
        ctx.unit.set(2);
        let x = shipped.__strads_start_from(&ctx, |_| 0.0);
        shipped.__strads_commit(&ctx, x + 4.0);
        ctx.unit.set(1);
        let x = driver.__strads_start_from(&ctx, |_| 0.0);
        driver.__strads_commit(&ctx, x + 2.0);
        let payloads = vec![
            driver.slot().encode("x").unwrap(),
            shipped.slot().encode("x").unwrap(),
        ];
        // Every rank's own task combines the same payloads alike.
        driver.slot().finish_from(&payloads, "x").unwrap();
        assert_eq!(driver.__strads_take(0.0), 1.0 + 2.0 + 4.0);
        let err = driver
            .slot()
            .finish_from(&[vec![0xff; 3]], "x")
            .unwrap_err();
        assert!(
            err.to_string().contains("reduction `x` from rank 0"),
            "{err}"
        );
    }

    proptest::proptest! {
        /// Units committed in any order (as workers finish them) fold to the same value,
        /// bit for bit: the value depends on the units' keys, not on timing. (The pieces
        /// of one unit run in order on one worker: keys here are distinct.)
        #[test]
        fn the_fold_does_not_depend_on_commit_order(
            parts in proptest::collection::btree_map(1u64..500, -1e3f64..1e3, 1..40),
            seed in 0u64..1000,
        ) {
            let parts: Vec<(u64, f64)> = parts.into_iter().collect();
            let fold_in = |order: &[usize]| {
                let r = reduction(&0.5f64, add);
                let ctx = ExecCtx::new(Vec::new());
                for &i in order {
                    let (unit, v) = parts[i];
                    ctx.unit.set(unit);
                    let x = r.__strads_start_from(&ctx, |_| 0.0);
                    r.__strads_commit(&ctx, x + v);
                }
                r.slot().finish_alone();
                r.__strads_take(f64::NAN)
            };
            let forward: Vec<usize> = (0..parts.len()).collect();
            let mut shuffled = forward.clone();
            // A seeded Fisher-Yates shuffle.
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for i in (1..shuffled.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let (a, b) = (fold_in(&forward), fold_in(&shuffled));
            proptest::prop_assert_eq!(a.to_bits(), b.to_bits());
            let exact: f64 = 0.5 + parts.iter().map(|p| p.1).sum::<f64>();
            proptest::prop_assert!((a - exact).abs() <= 1e-9 * (1.0 + exact.abs()));
        }
    }

    #[test]
    fn reconnaissance_commits_nothing() {
        let r = reduction(&7u32, |a, b| a + b);
        let rec = Recorder::new(Vec::new(), crate::recon::LogRoom::new(0, 0));
        let x = r.__strads_start_from(&rec, |_| 0);
        assert_eq!(x, 7);
        r.__strads_commit(&rec, x + 1);
        r.slot().finish_alone();
        assert_eq!(r.__strads_take(0), 7);
    }
}
