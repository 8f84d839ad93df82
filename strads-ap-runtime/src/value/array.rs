//! [`Array`]: a fixed-size array of any length that is a DDS element.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Index, IndexMut};

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeTuple, Serializer};

use super::Aggregate;

/// `[T; N]` for any `N`, as a DDS element (and inside element structs).
///
/// serde implements `Serialize` and `Deserialize` for arrays of at most 32 elements, so a
/// `DVector<[f32; 50]>` is refused; `DVector<Array<f32, 50>>` is the same row, stored
/// inline (no pointer to chase, unlike a `Vec<f32>` row). It dereferences to `[T; N]`,
/// so a loop body indexes and iterates it as it would the array (`w[u][f] += ..`,
/// `w[u].iter()`), and it sums and averages like one in `sync_for!`. It is encoded as
/// `N` elements in a row, as serde encodes the short arrays.
///
/// # Examples
/// ```
/// use strads_ap_runtime::{Array, DVector};
///
/// let rows: DVector<Array<f32, 50>> = DVector::from_fn(3, |i| Array([i as f32; 50]))?;
/// let row = rows.get(2)?;
/// assert_eq!(row[49], 2.0);
/// assert_eq!(row.iter().sum::<f32>(), 100.0);
/// let plain: [f32; 50] = row.into();
/// assert_eq!(plain.len(), 50);
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, PartialOrd, Eq, Hash)]
#[repr(transparent)]
pub struct Array<T, const N: usize>(pub [T; N]);

impl<T: Default, const N: usize> Default for Array<T, N> {
    fn default() -> Self {
        Array(std::array::from_fn(|_| T::default()))
    }
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for Array<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T, const N: usize> Deref for Array<T, N> {
    type Target = [T; N];
    #[inline(always)]
    fn deref(&self) -> &[T; N] {
        &self.0
    }
}

impl<T, const N: usize> DerefMut for Array<T, N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T; N] {
        &mut self.0
    }
}

impl<T, const N: usize> Index<usize> for Array<T, N> {
    type Output = T;
    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        &self.0[i]
    }
}

impl<T, const N: usize> IndexMut<usize> for Array<T, N> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.0[i]
    }
}

impl<T, const N: usize> From<[T; N]> for Array<T, N> {
    fn from(a: [T; N]) -> Self {
        Array(a)
    }
}

impl<T, const N: usize> From<Array<T, N>> for [T; N] {
    fn from(a: Array<T, N>) -> Self {
        a.0
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a Array<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a mut Array<T, N> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl<T: Serialize, const N: usize> Serialize for Array<T, N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = serializer.serialize_tuple(N)?;
        for x in &self.0 {
            tuple.serialize_element(x)?;
        }
        tuple.end()
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Array<T, N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Elements<T, const N: usize>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for Elements<T, N> {
            type Value = Array<T, N>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of {N} elements")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(N);
                for i in 0..N {
                    match seq.next_element()? {
                        Some(x) => items.push(x),
                        None => return Err(de::Error::invalid_length(i, &self)),
                    }
                }
                match items.try_into() {
                    Ok(array) => Ok(Array(array)),
                    Err(_) => unreachable!("exactly N elements were read"),
                }
            }
        }

        deserializer.deserialize_tuple(N, Elements::<T, N>(PhantomData))
    }
}

impl<A: Aggregate, const N: usize> Aggregate for Array<A, N> {
    fn add_delta(&mut self, delta: &Self) {
        self.0
            .iter_mut()
            .zip(&delta.0)
            .for_each(|(a, d)| a.add_delta(d));
    }
    fn sub_delta(&mut self, delta: &Self) {
        self.0
            .iter_mut()
            .zip(&delta.0)
            .for_each(|(a, d)| a.sub_delta(d));
    }
    fn scale(&mut self, factor: f64) {
        self.0.iter_mut().for_each(|a| a.scale(factor));
    }
    fn add_difference(&mut self, new: &Self, old: &Self) {
        for ((a, n), o) in self.0.iter_mut().zip(&new.0).zip(&old.0) {
            a.add_difference(n, o);
        }
    }
    fn __inline_words() -> Option<(super::aggregate::Word, usize)> {
        // `repr(transparent)`: laid out as `[A; N]`.
        A::__inline_words().map(|(w, n)| (w, n * N))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_arrays_round_trip_through_the_wire_encoding() {
        let a: Array<f32, 50> = Array(std::array::from_fn(|i| i as f32 * 0.5));
        let bytes = postcard::to_allocvec(&a).unwrap();
        assert_eq!(postcard::from_bytes::<Array<f32, 50>>(&bytes).unwrap(), a);
        // The same bytes as serde's own encoding of a short array: N elements in a row.
        let short: Array<u8, 3> = Array([1, 2, 3]);
        assert_eq!(
            postcard::to_allocvec(&short).unwrap(),
            postcard::to_allocvec(&[1u8, 2, 3]).unwrap()
        );
        let b: Array<f64, 128> = Array(std::array::from_fn(|i| i as f64));
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Array<f64, 128>>(&json).unwrap(), b);
        // Too few elements is an error that says how many were expected.
        let err = serde_json::from_str::<Array<f64, 4>>("[1.0, 2.0]").unwrap_err();
        assert!(err.to_string().contains("an array of 4 elements"), "{err}");
    }

    #[test]
    fn sums_like_the_array() {
        let mut a: Array<f32, 40> = Array([1.0; 40]);
        a.add_delta(&Array([2.0; 40]));
        a.scale(0.5);
        assert_eq!(a, Array([1.5; 40]));
    }
}
