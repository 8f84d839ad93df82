//! Fingerprints of a loop's captured variables, to name the ones that changed since its
//! plan's reconnaissance when a body leaves the plan.
//!
//! A plan is made from one call's accesses and kept for the next calls. A body whose
//! accesses follow a captured value that changes every call (a per-pass shuffle indexed
//! as `data[perm[k]]`, a phase, a colour) leaves it, and the error can only say "a
//! captured variable" unless it knows which one changed. The loop's task (the struct of
//! its captures, one field per captured variable) is serialised field by field into a
//! hash when a call reconnoitres, and again when a body leaves the plan; the fields whose
//! hashes differ are named. Nothing is hashed on ordinary calls.

use std::hash::Hasher;

use serde::ser::{self, Impossible, Serialize, SerializeStruct, Serializer};

use super::CallSite;

/// Each captured variable's name, the hash of its value (a DDS capture hashes its table's
/// identity and length; a reduction its starting value) and its length in bytes encoded.
pub(crate) type Fingerprints = Vec<(&'static str, u64, usize)>;

/// The fingerprints of `task`, a loop's struct of captures; empty if it is not a struct of
/// fields that serialise (which the loop macros never make).
pub(crate) fn fingerprints<T: Serialize>(task: &T) -> Fingerprints {
    task.serialize(Fields).unwrap_or_default()
}

/// The captures in `now` whose hashes differ from `then`'s, in capture order, with their
/// encoded lengths now.
pub(crate) fn changed(then: &Fingerprints, now: &Fingerprints) -> Vec<(&'static str, usize)> {
    now.iter()
        .filter(|(name, hash, _)| {
            then.iter()
                .any(|(old_name, old_hash, _)| old_name == name && old_hash != hash)
        })
        .map(|&(name, _, len)| (name, len))
        .collect()
}

/// Per rank: the fingerprints of each call site's captures at its last call that
/// reconnoitred (keyed by the site's address).
#[derive(Default)]
struct Reconnoitred(dashmap::DashMap<usize, Fingerprints>);

/// Keeps `fingerprints` as `site`'s at reconnaissance.
pub(crate) fn remember(site: &'static CallSite, fingerprints: Fingerprints) {
    let here = crate::cluster::here();
    let kept = here.local::<Reconnoitred>();
    kept.0
        .insert(site as *const CallSite as usize, fingerprints);
}

/// `site`'s fingerprints at its last reconnaissance, if it made one.
pub(crate) fn since(site: &'static CallSite) -> Option<Fingerprints> {
    let here = crate::cluster::here();
    let kept = here.local::<Reconnoitred>();
    let found = kept.0.get(&(site as *const CallSite as usize))?;
    Some(found.clone())
}

/// Bytes fed to a hasher, a buffer at a time (postcard writes byte by byte).
struct HashSink {
    hasher: std::hash::DefaultHasher,
    buf: [u8; 256],
    len: usize,
    total: usize,
}

impl HashSink {
    fn new() -> Self {
        HashSink {
            hasher: std::hash::DefaultHasher::new(),
            buf: [0; 256],
            len: 0,
            total: 0,
        }
    }

    /// The hash and the number of bytes fed.
    fn finish(mut self) -> (u64, usize) {
        self.hasher.write(&self.buf[..self.len]);
        (self.hasher.finish(), self.total + self.len)
    }
}

impl Extend<u8> for HashSink {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
        for b in bytes {
            if self.len == self.buf.len() {
                self.hasher.write(&self.buf);
                self.total += self.len;
                self.len = 0;
            }
            self.buf[self.len] = b;
            self.len += 1;
        }
    }
}

/// A serializer of a struct's fields into their fingerprints; anything else is refused.
struct Fields;

/// Why a value could not be fingerprinted (never shown: the fingerprints are then empty).
#[derive(Debug)]
struct NotAStruct;

impl std::fmt::Display for NotAStruct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("captures are fingerprinted as a struct of fields")
    }
}

impl std::error::Error for NotAStruct {}

impl ser::Error for NotAStruct {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotAStruct
    }
}

/// Collects the fields' fingerprints.
struct Collect(Fingerprints);

impl SerializeStruct for Collect {
    type Ok = Fingerprints;
    type Error = NotAStruct;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NotAStruct> {
        let sink = postcard::to_extend(value, HashSink::new()).map_err(|_| NotAStruct)?;
        let (hash, len) = sink.finish();
        self.0.push((key, hash, len));
        Ok(())
    }

    fn end(self) -> Result<Fingerprints, NotAStruct> {
        Ok(self.0)
    }
}

/// Serializer methods for everything but a struct: refused.
macro_rules! refuse {
    ($($method:ident($($arg:ty),*) -> $ret:ty;)*) => {
        $(fn $method(self, $(_: $arg),*) -> Result<$ret, NotAStruct> {
            Err(NotAStruct)
        })*
    };
}

type No = Impossible<Fingerprints, NotAStruct>;

impl Serializer for Fields {
    type Ok = Fingerprints;
    type Error = NotAStruct;
    type SerializeSeq = No;
    type SerializeTuple = No;
    type SerializeTupleStruct = No;
    type SerializeTupleVariant = No;
    type SerializeMap = No;
    type SerializeStruct = Collect;
    type SerializeStructVariant = No;

    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Collect, NotAStruct> {
        Ok(Collect(Vec::with_capacity(len)))
    }

    refuse! {
        serialize_bool(bool) -> Fingerprints;
        serialize_i8(i8) -> Fingerprints;
        serialize_i16(i16) -> Fingerprints;
        serialize_i32(i32) -> Fingerprints;
        serialize_i64(i64) -> Fingerprints;
        serialize_u8(u8) -> Fingerprints;
        serialize_u16(u16) -> Fingerprints;
        serialize_u32(u32) -> Fingerprints;
        serialize_u64(u64) -> Fingerprints;
        serialize_f32(f32) -> Fingerprints;
        serialize_f64(f64) -> Fingerprints;
        serialize_char(char) -> Fingerprints;
        serialize_str(&str) -> Fingerprints;
        serialize_bytes(&[u8]) -> Fingerprints;
        serialize_none() -> Fingerprints;
        serialize_unit() -> Fingerprints;
        serialize_unit_struct(&'static str) -> Fingerprints;
        serialize_unit_variant(&'static str, u32, &'static str) -> Fingerprints;
        serialize_seq(Option<usize>) -> No;
        serialize_tuple(usize) -> No;
        serialize_tuple_struct(&'static str, usize) -> No;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> No;
        serialize_map(Option<usize>) -> No;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> No;
    }

    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<Fingerprints, NotAStruct> {
        Err(NotAStruct)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<Fingerprints, NotAStruct> {
        Err(NotAStruct)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Fingerprints, NotAStruct> {
        Err(NotAStruct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Task {
        lr: f32,
        perm: Vec<u32>,
        epoch: usize,
    }

    /// The fields whose values changed are named, in field order; equal values hash
    /// alike; a value that is no struct has no fingerprints.
    #[test]
    fn changed_fields_are_named() {
        let a = Task {
            lr: 0.1,
            perm: (0..1000).collect(),
            epoch: 1,
        };
        let b = Task {
            perm: (0..1000).rev().collect(),
            ..a
        };
        let same = Task {
            perm: (0..1000).collect(),
            ..b
        };
        let (fa, fb) = (fingerprints(&a), fingerprints(&b));
        assert_eq!(
            fa.iter().map(|f| f.0).collect::<Vec<_>>(),
            ["lr", "perm", "epoch"]
        );
        // Lengths as postcard encodes them: an f32 in 4 bytes; a length, then 1000 varints
        // (128 of one byte, 872 of two); a small usize in 1.
        assert_eq!(
            fa.iter().map(|f| f.2).collect::<Vec<_>>(),
            [4, 2 + 128 + 2 * 872, 1]
        );
        let names = |c: Vec<(&'static str, usize)>| c.into_iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(names(changed(&fa, &fb)), ["perm"]);
        assert!(changed(&fa, &fingerprints(&same)).is_empty());
        let later = Task { epoch: 2, ..b };
        assert_eq!(
            names(changed(&fa, &fingerprints(&later))),
            ["perm", "epoch"]
        );
        assert!(fingerprints(&vec![1u32, 2]).is_empty());
        #[derive(serde::Serialize)]
        struct Empty {}
        assert!(fingerprints(&Empty {}).is_empty());
    }
}
