//! What generated code calls. Not a public API: reached through `strads_ap::__private`.

pub use serde;

pub use crate::dds::body::{capture, Capturable, MapMethods, NestedDdsIsNotCapturable};
pub use crate::dds::{
    CaptureRefused, DirectFallback, EnterFallback, LockFallback, NoteFallback, Plain,
    RecordFallback, TaskFallback,
};
pub use crate::engine::reduce::{
    reduction, CaptureDds, CaptureSummed, CommitFallback, Reduction, Summed, TakeDds, TakeSummed,
    UnitOf, Written,
};
pub use crate::engine::{
    run_async_for, run_sync_for, CallSite, ExecCtx, Indices, LoopKind, Opts, Registry, SyncMode,
};
pub use crate::recon::{InPlace, RecordIndices, Recorder, Recording};

use std::sync::Arc;

use crate::dds::table::VectorMerger;
use crate::dds::{Aggregate, Element, MapRef, MultiMapRef, VectorRef};

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
        reg.add(
            table.clone(),
            name,
            Some(Arc::new(VectorMerger::new(table))),
        );
    }
}

/// A DMap of aggregatable values: registered with a merger of its values.
impl<K: Element + Eq + std::hash::Hash, V: Aggregate> ProbeAgg for &&Probe<'_, MapRef<K, V>> {
    fn __strads_register(&self, reg: &mut Registry, name: &'static str) {
        let table = self.0.table.clone();
        reg.add(
            table.clone(),
            name,
            Some(Arc::new(VectorMerger::new(table))),
        );
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
