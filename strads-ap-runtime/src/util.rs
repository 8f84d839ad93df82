//! Small helpers shared by several modules.

use std::hash::{Hash, Hasher};

/// A warning the user must see: on stderr (no `tracing` subscriber needed), and through
/// `tracing` for programs that collect logs.
pub(crate) fn warn(message: &str) {
    tracing::warn!("{message}");
    eprintln!("strads-ap: warning: {message}");
}

/// FNV-1a's state before any byte.
pub(crate) const FNV1A_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64 bit, continued from state `h` over `bytes` (from [`FNV1A_START`] for a
/// whole): a stable checksum that does not change between processes, builds or Rust
/// versions, and that a file read or written in pieces, in order, gets piece by piece.
pub(crate) fn fnv1a_extend(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A hasher with a fixed seed, so that a key lands in the same shard on every rank.
#[derive(Default, Clone, Copy)]
pub(crate) struct StableHasher(u64);

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        // A final avalanche (splitmix64) so that consecutive integer keys spread out.
        let mut z = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0 ^ i).wrapping_mul(0x0100_0000_01b3).rotate_left(29) ^ i;
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
}

/// The stable hash of a map key.
pub(crate) fn stable_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = StableHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// Shortens a line for an error message.
pub(crate) fn excerpt(line: &str) -> String {
    const MAX: usize = 80;
    if line.chars().count() <= MAX {
        line.to_string()
    } else {
        let mut s: String = line.chars().take(MAX).collect();
        s.push('…');
        s
    }
}

/// The message of a caught panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Keys of one table in an order two ranks agree on (what one rank sends another),
/// kept as `u32` while every key fits: a plan keeps its transfer lists for its life, and
/// at half the bytes of `u64` (4 simulated ranks of model-heavy SGDMF: 12.6 MB -> 6.3 MB
/// a rank). A key above `u32::MAX` widens the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Keys {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
}

impl Default for Keys {
    fn default() -> Self {
        Keys::Narrow(Vec::new())
    }
}

impl Keys {
    /// Appends `key`.
    pub fn push(&mut self, key: u64) {
        match self {
            Keys::Narrow(narrow) => match u32::try_from(key) {
                Ok(k) => narrow.push(k),
                Err(_) => {
                    let mut wide: Vec<u64> = narrow.iter().map(|&k| u64::from(k)).collect();
                    wide.push(key);
                    *self = Keys::Wide(wide);
                }
            },
            Keys::Wide(wide) => wide.push(key),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Keys::Narrow(k) => k.len(),
            Keys::Wide(k) => k.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys, borrowed.
    pub fn as_slice(&self) -> KeySlice<'_> {
        match self {
            Keys::Narrow(k) => KeySlice::Narrow(k),
            Keys::Wide(k) => KeySlice::Wide(k),
        }
    }
}

/// Borrowed [`Keys`], or any list of `u64` keys.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeySlice<'a> {
    Narrow(&'a [u32]),
    Wide(&'a [u64]),
}

impl<'a> From<&'a [u64]> for KeySlice<'a> {
    fn from(keys: &'a [u64]) -> Self {
        KeySlice::Wide(keys)
    }
}

impl KeySlice<'_> {
    /// Calls `f` with each key in order, up to the first error.
    pub fn try_for_each<E>(self, mut f: impl FnMut(u64) -> Result<(), E>) -> Result<(), E> {
        match self {
            KeySlice::Narrow(keys) => keys.iter().try_for_each(|&k| f(u64::from(k))),
            KeySlice::Wide(keys) => keys.iter().try_for_each(|&k| f(k)),
        }
    }
}

/// Files for tests of the readers: plain and gzip-compressed.
#[cfg(test)]
pub(crate) mod test_files {
    use std::path::{Path, PathBuf};

    /// Writes `bytes` to `dir/name` and returns the path.
    pub fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// `text`, gzip-compressed.
    pub fn gzip(text: &str) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }
}
