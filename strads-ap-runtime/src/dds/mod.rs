//! Distributed data structures: [`DVector`], [`DMap`], [`DMultiMap`].
//!
//! A DDS is a cheap handle (a table id and a shape) to elements kept in the store,
//! partitioned by rank: a DVector by contiguous index ranges, maps by key hash. Driver code
//! uses explicit calls (`len`, `get`, `set`, `to_vec`, the data operators); inside a loop
//! body the macros bind each captured DDS to a *view* that indexes like a `Vec` or a
//! `HashMap`.

pub mod body;
mod direct;
pub(crate) mod gather;
mod lock_view;
mod map;
pub(crate) mod persist;
pub(crate) mod shards;
mod snapshot;
pub(crate) mod table;
mod text;
mod vector;
pub(crate) mod view;
mod word_merge;

pub use crate::value::{Aggregate, AggregateFn, Aggregation, Element};
pub use direct::{DirectFallback, DirectView};
pub use gather::{set_fetch_above, set_gather_limit, FETCH_ABOVE_DEFAULT};
pub use lock_view::{LockFallback, LockView};
pub use map::{DMap, DMultiMap, MapEntries, MapRef, MapView, MultiMapRef, MultiMapView};
pub use table::{table_memory, TableMemory};
pub use text::{read_from_file, ReadOptions, ReadReport};
pub use vector::{DVector, Relaxed, VectorElements, VectorRef};
pub use view::{
    CaptureRefused, EnterFallback, NoteFallback, Plain, RecordFallback, RecordVectorView,
    TaskFallback, VectorView,
};
