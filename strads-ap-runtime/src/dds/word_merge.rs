//! Lock-free merging for small tables of machine words (see `VectorMerger`'s
//! `push_lock_free`): Hybrid workers that push a whole table after every mini-batch add
//! their deltas to its master word by word with atomic operations, instead of taking a
//! lock per element. `pegasos`'s 21 weights, pushed after every mini-batch of 100
//! samples by each of two workers, spent 72% of their merging time on the locks'
//! compare-and-swap, whose cache line the two cores passed back and forth.
//!
//! Each word of the master is only ever read or written atomically while workers run,
//! so two workers may merge the same word at once: each add is applied exactly once
//! (floats by a compare-and-swap loop, integers by `fetch_add`, wrapping as
//! [`Aggregate`](crate::Aggregate)'s integers do). An element of several words (an
//! array) may be seen by a refresh with some words merged and others not: Hybrid
//! workers see each other's progress asynchronously anyway, and a replica's two copies
//! always hold the same values, so its next delta is exactly its own change.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::value::Word;

/// Whether a `T` laid out as `count` words of `word` can be reached through that word's
/// atomic type (same size, alignment at least the atomic's).
pub(crate) fn fits<T>(word: Word, count: usize) -> bool {
    let align = match word {
        Word::F32 | Word::U32 => std::mem::align_of::<AtomicU32>(),
        Word::F64 | Word::U64 => std::mem::align_of::<AtomicU64>(),
    };
    std::mem::size_of::<T>() == word.size() * count && std::mem::align_of::<T>() >= align
}

macro_rules! float_words {
    ($master:ident, $work:ident, $base:ident, $words:ident, $f:ty, $atomic:ty, $bits:ty) => {{
        let (work, base) = ($work.cast::<$f>(), $base.cast::<$f>());
        for i in 0..$words {
            // SAFETY: the caller's guarantee: `i` is below `words`, the master's words are
            // aligned for the atomic type and touched only atomically meanwhile, and the
            // replica's copies are the caller's alone.
            unsafe {
                let m = <$atomic>::from_ptr($master.cast::<$bits>().add(i));
                let (w, b) = (&mut *work.add(i), &mut *base.add(i));
                // The difference is computed first, as `Aggregate::add_difference` does.
                let delta = *w - *b;
                let mut now = m.load(Relaxed);
                if delta != 0.0 {
                    loop {
                        let next = (<$f>::from_bits(now) + delta).to_bits();
                        match m.compare_exchange_weak(now, next, Relaxed, Relaxed) {
                            Ok(_) => {
                                now = next;
                                break;
                            }
                            Err(seen) => now = seen,
                        }
                    }
                }
                *w = <$f>::from_bits(now);
                *b = *w;
            }
        }
    }};
}

macro_rules! int_words {
    ($master:ident, $work:ident, $base:ident, $words:ident, $int:ty, $atomic:ty) => {{
        let (work, base) = ($work.cast::<$int>(), $base.cast::<$int>());
        for i in 0..$words {
            // SAFETY: as for the floats above.
            unsafe {
                let m = <$atomic>::from_ptr($master.cast::<$int>().add(i));
                let (w, b) = (&mut *work.add(i), &mut *base.add(i));
                let delta = w.wrapping_sub(*b);
                let now = match delta {
                    0 => m.load(Relaxed),
                    d => m.fetch_add(d, Relaxed).wrapping_add(d),
                };
                *w = now;
                *b = now;
            }
        }
    }};
}

/// Adds `work - base`, word by word, to `master` with atomic operations, and makes both
/// `work` and `base` the master's value just after the add (so the replica's next delta
/// is its own change alone).
///
/// # Safety
/// `master`, `work` and `base` each point to `words` initialised words of kind `word`,
/// `master`'s aligned for its atomic type; `work` and `base` are the caller's alone and
/// do not overlap; while the call runs, `master`'s words are read and written by no one
/// but through this module's functions.
pub(crate) unsafe fn push(word: Word, master: *mut u8, work: *mut u8, base: *mut u8, words: usize) {
    match word {
        Word::F32 => float_words!(master, work, base, words, f32, AtomicU32, u32),
        Word::F64 => float_words!(master, work, base, words, f64, AtomicU64, u64),
        Word::U32 => int_words!(master, work, base, words, u32, AtomicU32),
        Word::U64 => int_words!(master, work, base, words, u64, AtomicU64),
    }
}

/// Copies `master`'s words into `work` and `base`, reading each atomically.
///
/// # Safety
/// As for [`push`].
pub(crate) unsafe fn refresh(
    word: Word,
    master: *mut u8,
    work: *mut u8,
    base: *mut u8,
    words: usize,
) {
    macro_rules! copy {
        ($bits:ty, $atomic:ty) => {{
            let (work, base) = (work.cast::<$bits>(), base.cast::<$bits>());
            for i in 0..words {
                // SAFETY: the caller's guarantee, as for `push`.
                unsafe {
                    let now = <$atomic>::from_ptr(master.cast::<$bits>().add(i)).load(Relaxed);
                    *work.add(i) = now;
                    *base.add(i) = now;
                }
            }
        }};
    }
    match word {
        Word::F32 | Word::U32 => copy!(u32, AtomicU32),
        Word::F64 | Word::U64 => copy!(u64, AtomicU64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads pushing their changes into one master concurrently lose none: every
    /// float word ends at the start plus every thread's increments (exact in `f64` for
    /// these small integers), every integer word likewise with wraparound, and each
    /// thread's copies always equal each other after a push.
    #[test]
    fn concurrent_pushes_add_every_change_once() {
        let (threads, rounds, words) = (4usize, 2000usize, 5usize);
        let mut floats = vec![0.5f64; words];
        let mut ints = vec![u64::MAX - 3; words];
        let (fp, ip) = (floats.as_mut_ptr() as usize, ints.as_mut_ptr() as usize);
        std::thread::scope(|scope| {
            for t in 0..threads {
                scope.spawn(move || {
                    let (mut fw, mut fb) = (vec![0.0f64; words], vec![0.0f64; words]);
                    let (mut iw, mut ib) = (vec![0u64; words], vec![0u64; words]);
                    // SAFETY: the masters outlive the scope and are touched only through
                    // `push` and `refresh` while it runs; the copies are this thread's.
                    unsafe {
                        let f = |w: &mut Vec<f64>, b: &mut Vec<f64>| {
                            (w.as_mut_ptr().cast::<u8>(), b.as_mut_ptr().cast::<u8>())
                        };
                        let (w, b) = f(&mut fw, &mut fb);
                        refresh(Word::F64, fp as *mut u8, w, b, words);
                        let (w, b) = (iw.as_mut_ptr().cast(), ib.as_mut_ptr().cast());
                        refresh(Word::U64, ip as *mut u8, w, b, words);
                        for r in 0..rounds {
                            for i in 0..words {
                                fw[i] += (t + 1) as f64;
                                iw[i] = iw[i].wrapping_add((r % 3) as u64);
                            }
                            let (w, b) = f(&mut fw, &mut fb);
                            push(Word::F64, fp as *mut u8, w, b, words);
                            let (w, b) = (iw.as_mut_ptr().cast(), ib.as_mut_ptr().cast());
                            push(Word::U64, ip as *mut u8, w, b, words);
                            assert_eq!(fw, fb);
                            assert_eq!(iw, ib);
                        }
                    }
                });
            }
        });
        let float_total = 0.5 + (rounds * (1..=threads).sum::<usize>()) as f64;
        assert_eq!(floats, vec![float_total; words]);
        let per_thread: u64 = (0..rounds).map(|r| (r % 3) as u64).sum();
        let int_total = (u64::MAX - 3).wrapping_add(per_thread * threads as u64);
        assert_eq!(ints, vec![int_total; words]);
    }

    #[test]
    fn only_word_layouts_with_the_atomics_alignment_fit() {
        assert!(fits::<f32>(Word::F32, 1));
        assert!(fits::<[f32; 3]>(Word::F32, 3));
        assert!(fits::<u64>(Word::U64, 1));
        assert!(!fits::<[f32; 3]>(Word::F32, 2));
        assert!(!fits::<[u8; 8]>(Word::U64, 1));
    }
}
