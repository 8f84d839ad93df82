//! How concurrent updates of one element are merged: the [`Aggregate`] trait and the
//! per-table [`Aggregation`] setting.

use std::sync::Arc;

use super::Element;

/// Element types whose updates can be merged as deltas: numbers, arrays and `Vec`s of
/// numbers, tuples of those.
///
/// `sync_for!` gives each worker its own copy of the parameters it writes and merges the
/// copies' deltas (`new - old`); a relaxed table in `async_for!` does the same. Implement
/// this trait for your own parameter types to use them there.
///
/// # Examples
/// ```
/// use strads_ap_runtime::Aggregate;
/// let mut a = [1.0f32, 2.0];
/// a.add_delta(&[0.5, 0.5]);
/// a.sub_delta(&[1.0, 1.0]);
/// a.scale(2.0);
/// assert_eq!(a, [1.0, 3.0]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not implement `Aggregate`",
    note = "sync_for! and relaxed tables merge updates as deltas; implement \
            strads_ap::Aggregate for the element type (add, subtract, scale)"
)]
pub trait Aggregate: Element {
    /// `self += delta`.
    fn add_delta(&mut self, delta: &Self);
    /// `self -= delta`.
    fn sub_delta(&mut self, delta: &Self);
    /// `self *= factor`.
    fn scale(&mut self, factor: f64);
    /// `self += new - old`, the difference computed first (as `add_delta` of a delta
    /// made by `sub_delta` would). The provided version allocates that delta; the
    /// implementations for numbers, arrays, `Vec`s and tuples do not.
    fn add_difference(&mut self, new: &Self, old: &Self) {
        let mut delta = new.clone();
        delta.sub_delta(old);
        self.add_delta(&delta);
    }
    /// The value as machine words laid out inline, `(word, count)`, if it is exactly that
    /// (a number, or an array of numbers): the engine then merges several workers' deltas
    /// into one copy by atomic adds instead of a lock. Left `None`, as for your own types.
    #[doc(hidden)]
    fn __inline_words() -> Option<(Word, usize)> {
        None
    }
}

/// A machine word an element's delta is added to atomically (see
/// [`Aggregate::__inline_words`]): a float, or an integer added with wraparound (signed
/// and unsigned integers of one width add alike).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    F32,
    F64,
    U32,
    U64,
}

impl Word {
    /// Bytes in one word.
    pub fn size(self) -> usize {
        match self {
            Word::F32 | Word::U32 => 4,
            Word::F64 | Word::U64 => 8,
        }
    }
}

macro_rules! float_aggregate {
    ($($t:ty => $w:ident),*) => {$(
        impl Aggregate for $t {
            #[inline]
            fn __inline_words() -> Option<(Word, usize)> { Some((Word::$w, 1)) }
            #[inline]
            fn add_delta(&mut self, delta: &Self) { *self += *delta; }
            #[inline]
            fn sub_delta(&mut self, delta: &Self) { *self -= *delta; }
            #[inline]
            fn scale(&mut self, factor: f64) { *self = (*self as f64 * factor) as $t; }
            #[inline]
            fn add_difference(&mut self, new: &Self, old: &Self) { *self += *new - *old; }
        }
    )*};
}
float_aggregate!(f32 => F32, f64 => F64);

macro_rules! int_aggregate {
    ($($t:ty),*) => {$(
        impl Aggregate for $t {
            #[inline]
            fn __inline_words() -> Option<(Word, usize)> {
                match std::mem::size_of::<$t>() {
                    4 => Some((Word::U32, 1)),
                    8 => Some((Word::U64, 1)),
                    _ => None,
                }
            }
            #[inline]
            fn add_delta(&mut self, delta: &Self) { *self = self.wrapping_add(*delta); }
            #[inline]
            fn sub_delta(&mut self, delta: &Self) { *self = self.wrapping_sub(*delta); }
            #[inline]
            fn scale(&mut self, factor: f64) { *self = (*self as f64 * factor).round() as $t; }
            #[inline]
            fn add_difference(&mut self, new: &Self, old: &Self) {
                *self = self.wrapping_add(new.wrapping_sub(*old));
            }
        }
    )*};
}
int_aggregate!(i8, i16, i32, i64, u8, u16, u32, u64, isize, usize);

impl<A: Aggregate, const N: usize> Aggregate for [A; N]
where
    [A; N]: Element,
{
    fn add_delta(&mut self, delta: &Self) {
        self.iter_mut().zip(delta).for_each(|(a, d)| a.add_delta(d));
    }
    fn sub_delta(&mut self, delta: &Self) {
        self.iter_mut().zip(delta).for_each(|(a, d)| a.sub_delta(d));
    }
    fn scale(&mut self, factor: f64) {
        self.iter_mut().for_each(|a| a.scale(factor));
    }
    fn add_difference(&mut self, new: &Self, old: &Self) {
        for ((a, n), o) in self.iter_mut().zip(new).zip(old) {
            a.add_difference(n, o);
        }
    }
    fn __inline_words() -> Option<(Word, usize)> {
        A::__inline_words().map(|(w, n)| (w, n * N))
    }
}

impl<A: Aggregate> Aggregate for Vec<A> {
    /// Element-wise; a longer delta extends `self` (missing elements count as zero).
    fn add_delta(&mut self, delta: &Self) {
        for (i, d) in delta.iter().enumerate() {
            match self.get_mut(i) {
                Some(a) => a.add_delta(d),
                None => self.push(d.clone()),
            }
        }
    }
    fn sub_delta(&mut self, delta: &Self) {
        for (i, d) in delta.iter().enumerate() {
            match self.get_mut(i) {
                Some(a) => a.sub_delta(d),
                None => {
                    let mut neg = d.clone();
                    neg.scale(-1.0);
                    self.push(neg)
                }
            }
        }
    }
    fn scale(&mut self, factor: f64) {
        self.iter_mut().for_each(|a| a.scale(factor));
    }
    fn add_difference(&mut self, new: &Self, old: &Self) {
        if self.len() == new.len() && new.len() == old.len() {
            for ((a, n), o) in self.iter_mut().zip(new).zip(old) {
                a.add_difference(n, o);
            }
        } else {
            let mut delta = new.clone();
            delta.sub_delta(old);
            self.add_delta(&delta);
        }
    }
}

macro_rules! tuple_aggregate {
    ($($n:tt $t:ident),*) => {
        impl<$($t: Aggregate),*> Aggregate for ($($t,)*) {
            fn add_delta(&mut self, delta: &Self) { $(self.$n.add_delta(&delta.$n);)* }
            fn sub_delta(&mut self, delta: &Self) { $(self.$n.sub_delta(&delta.$n);)* }
            fn scale(&mut self, factor: f64) { $(self.$n.scale(factor);)* }
            fn add_difference(&mut self, new: &Self, old: &Self) {
                $(self.$n.add_difference(&new.$n, &old.$n);)*
            }
        }
    };
}
tuple_aggregate!(0 A, 1 B);
tuple_aggregate!(0 A, 1 B, 2 C);
tuple_aggregate!(0 A, 1 B, 2 C, 3 D);

/// A custom aggregation: updates the value from the workers' deltas.
pub type AggregateFn<T> = Arc<dyn Fn(&mut T, &[&T]) + Send + Sync>;

/// How a table merges the deltas several workers computed from the same starting value.
///
/// The default is [`Aggregation::Average`] (STRADS-AP's default, model averaging).
pub enum Aggregation<T> {
    /// `value += mean(deltas)`.
    Average,
    /// `value += sum(deltas)`: each worker's steps all count, as in the serial program.
    Sum,
    /// A function of the current value and the workers' deltas.
    Custom(AggregateFn<T>),
}

impl<T> Clone for Aggregation<T> {
    fn clone(&self) -> Self {
        match self {
            Aggregation::Average => Aggregation::Average,
            Aggregation::Sum => Aggregation::Sum,
            Aggregation::Custom(f) => Aggregation::Custom(f.clone()),
        }
    }
}

impl<T> std::fmt::Debug for Aggregation<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Aggregation::Average => f.write_str("Average"),
            Aggregation::Sum => f.write_str("Sum"),
            Aggregation::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl<T: Aggregate> Aggregation<T> {
    /// Applies one worker's change (`new` from `old`) to `value`: what `apply` does with
    /// the single delta `new - old`, without allocating one for the built-in
    /// aggregations.
    pub fn apply_change(&self, value: &mut T, new: &T, old: &T) {
        match self {
            Aggregation::Average | Aggregation::Sum => value.add_difference(new, old),
            Aggregation::Custom(f) => {
                let mut delta = new.clone();
                delta.sub_delta(old);
                f(value, &[&delta]);
            }
        }
    }

    /// Applies the deltas to `value`.
    pub fn apply(&self, value: &mut T, deltas: &[&T]) {
        match self {
            Aggregation::Average | Aggregation::Sum => {
                if deltas.is_empty() {
                    return;
                }
                let mut total = deltas[0].clone();
                for d in &deltas[1..] {
                    total.add_delta(d);
                }
                if matches!(self, Aggregation::Average) && deltas.len() > 1 {
                    total.scale(1.0 / deltas.len() as f64);
                }
                value.add_delta(&total);
            }
            Aggregation::Custom(f) => f(value, deltas),
        }
    }
}
