//! What DDS elements are: plain serialisable data ([`Element`]), and how concurrent
//! updates of one element merge ([`Aggregate`], [`Aggregation`]).
//!
//! This layer is below the store and the DDSs, which both name these traits.

mod aggregate;
mod array;

pub use aggregate::{Aggregate, AggregateFn, Aggregation, Word};
pub use array::Array;

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
            use a Vec inside the element, or a second DDS indexed by the same key",
    note = "serde implements arrays only up to 32 elements: for a longer array use \
            `strads_ap::Array<T, N>` (it dereferences to `[T; N]`), in an element struct too"
)]
pub trait Element:
    serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
}

// Not recommended: a type that is not an element gets one error, this trait's, rather
// than one per missing serde trait.
#[diagnostic::do_not_recommend]
impl<T> Element for T where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static
{
}
