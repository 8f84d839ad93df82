//! Distributed data structures: [`DVector`], [`DMap`], [`DMultiMap`].
//!
//! A DDS is a cheap handle (a table id and a shape) to elements kept in the store,
//! partitioned by rank: a DVector by contiguous index ranges, maps by key hash. Driver code
//! uses explicit calls (`len`, `get`, `set`, `to_vec`, the data operators); inside a loop
//! body the macros bind each captured DDS to a *view* that indexes like a `Vec` or a
//! `HashMap`.

mod aggregate;
mod io;
mod map;
pub(crate) mod persist;
pub(crate) mod table;
mod vector;
mod view;

pub use aggregate::{Aggregate, AggregateFn, Aggregation};
pub use io::{read_from_file, ReadOptions, ReadReport};
pub use map::{DMap, DMultiMap, MapRef, MapView, MultiMapRef, MultiMapView};
pub use vector::{DVector, Relaxed, VectorRef};
pub use view::{EnterFallback, Plain, RecordFallback, RecordVectorView, VectorView};

/// What a DDS can hold: plain data that can be copied and shipped between ranks.
///
/// Implemented for every `Serialize + DeserializeOwned + Clone + Send + Sync + 'static`
/// type. DDS handles themselves are not elements: a DDS inside a DDS (a *nested* DDS) is
/// refused at compile time.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an element of a DDS",
    label = "not plain serialisable data",
    note = "DDS elements must be Serialize + Deserialize + Clone + Send + Sync + 'static \
            (derive serde's Serialize and Deserialize, and Clone)",
    note = "a DDS handle cannot be stored inside a DDS (nested DDSs are not supported): \
            use a Vec inside the element, or a second DDS indexed by the same key"
)]
pub trait Element:
    serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
}

impl<T> Element for T where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
}
