//! What generated code calls. Not a public API: reached through `strads_ap::__private`.

pub use serde;

pub use crate::dds::body::MapMethods;
pub use crate::dds::{
    DirectFallback, EnterFallback, LockFallback, NoteFallback, Plain, RecordFallback,
};
pub use crate::engine::reduce::{
    reduction, CaptureDds, CaptureSummed, CommitFallback, Reduction, Summed, TakeDds, TakeSummed,
    UnitOf, Written,
};
pub use crate::engine::{
    run_async_for, run_sync_for, CallSite, ExecCtx, Indices, LoopKind, Opts, Registry, SyncMode,
};
pub use crate::recon::{RecordIndices, Recorder};

use std::sync::Arc;

use crate::dds::table::VectorMerger;
use crate::dds::{Aggregate, DMap, DMultiMap, DVector, Element, MapRef, MultiMapRef, VectorRef};

/// Values a loop body may capture, and the form the task stores them in.
#[diagnostic::on_unimplemented(
    message = "a loop body cannot capture a value of type `{Self}`",
    label = "captured by the loop body here",
    note = "captured values are copied to every worker and rank, so they must be \
            Serialize + Deserialize + Clone + Send + Sync + 'static; DDS handles \
            (DVector, DMap, DMultiMap) are captured by handle",
    note = "a DDS inside another value (a nested DDS, e.g. Vec<DVector<f32>>) is not \
            supported: capture each DDS as its own variable",
    note = "a large plain value (a big Vec) is copied per call: make it a DVector instead"
)]
pub trait Capturable {
    /// What the task struct stores.
    type Captured: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static;
    /// Makes the stored form.
    fn __strads_capture_value(&self) -> Self::Captured;
}

impl<X> Capturable for X
where
    X: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    type Captured = X;
    fn __strads_capture_value(&self) -> X {
        self.clone()
    }
}

impl<T: Element> Capturable for DVector<T> {
    type Captured = VectorRef<T>;
    fn __strads_capture_value(&self) -> VectorRef<T> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for DMap<K, V> {
    type Captured = MapRef<K, V>;
    fn __strads_capture_value(&self) -> MapRef<K, V> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for DMultiMap<K, V> {
    type Captured = MultiMapRef<K, V>;
    fn __strads_capture_value(&self) -> MultiMapRef<K, V> {
        self.__strads_capture()
    }
}

/// A borrowed DVector (a function's `&DVector` parameter) is captured by handle, like
/// the DVector itself.
impl<T: Element> Capturable for &DVector<T> {
    type Captured = VectorRef<T>;
    fn __strads_capture_value(&self) -> VectorRef<T> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for &DMap<K, V> {
    type Captured = MapRef<K, V>;
    fn __strads_capture_value(&self) -> MapRef<K, V> {
        self.__strads_capture()
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> Capturable for &DMultiMap<K, V> {
    type Captured = MultiMapRef<K, V>;
    fn __strads_capture_value(&self) -> MultiMapRef<K, V> {
        self.__strads_capture()
    }
}

/// Marker with no implementations: names the nested-DDS mistake in the error.
#[diagnostic::on_unimplemented(
    message = "a loop body cannot capture `{Self}`: a collection of DDS handles is a nested DDS",
    label = "captured by the loop body here",
    note = "nested DDSs are not supported: capture each DVector/DMap as its own variable, or \
            keep the rows in one DVector whose elements are Vecs"
)]
pub trait NestedDdsIsNotCapturable {}

impl<T: Element> Capturable for Vec<DVector<T>>
where
    Vec<DVector<T>>: NestedDdsIsNotCapturable,
{
    type Captured = ();
    fn __strads_capture_value(&self) {}
}

/// Captures a variable for a task.
#[inline]
pub fn capture<X: Capturable + ?Sized>(x: &X) -> X::Captured {
    x.__strads_capture_value()
}

/// Wraps a task field to pick, by autoref specialisation at the call site, how it
/// registers with the engine.
pub struct Probe<'a, X>(pub &'a X);

/// A DVector of an aggregatable element type: registered with a merger.
pub trait ProbeAgg {
    /// Registers the field.
    fn __strads_register(&self, reg: &mut Registry, name: &'static str);
}

impl<T: Aggregate> ProbeAgg for &&Probe<'_, VectorRef<T>> {
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        let table = self.0.table.clone();
        reg.add(table.clone(), name, Some(Arc::new(VectorMerger { table })));
    }
}

/// A DMap of aggregatable values: registered with a merger of its values.
impl<K: Element + Eq + std::hash::Hash, V: Aggregate> ProbeAgg for &&Probe<'_, MapRef<K, V>> {
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        let table = self.0.table.clone();
        reg.add(table.clone(), name, Some(Arc::new(VectorMerger { table })));
    }
}

/// A DDS without a merger.
pub trait ProbeNoAgg {
    /// Registers the field.
    fn __strads_register(&self, reg: &mut Registry, name: &'static str);
}

impl<T: Element> ProbeNoAgg for &Probe<'_, VectorRef<T>> {
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        reg.add(self.0.table.clone(), name, None);
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> ProbeNoAgg for &Probe<'_, MapRef<K, V>> {
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        reg.add(self.0.table.clone(), name, None);
    }
}

impl<K: Element + Eq + std::hash::Hash, V: Element> ProbeNoAgg for &Probe<'_, MultiMapRef<K, V>> {
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        reg.add(self.0 .0.table.clone(), name, None);
    }
}

/// A reduction variable: registered so that the engine combines its partials after the
/// call.
impl<T: 'static> ProbeNoAgg for &Probe<'_, Reduction<T>>
where
    Reduction<T>: crate::engine::reduce::ReductionSlot,
{
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        reg.add_reduction(self.0.slot(), name);
    }
}

/// A plain value: nothing to register.
pub trait ProbePlain {
    /// Does nothing.
    fn __strads_register(&self, reg: &mut Registry, name: &'static str);
}

impl<X> ProbePlain for Probe<'_, X> {
    #[inline(always)]
    fn __strads_register(&self, _reg: &mut Registry, _name: &'static str) {}
}
