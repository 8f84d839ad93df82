//! Reconnaissance of a planning call across ranks that fetches what its tasks read,
//! instead of gathering every table whole on every rank.
//!
//! The hollow tables (see [`Spread::expand_hollow`](crate::dds::table::Spread)) hold this
//! rank's range and fillers elsewhere, with a bitmap of the elements present. The rank's
//! share of the tasks is reconnoitred a window of chunks at a time, in rounds that every
//! rank takes together:
//!
//! 1. the window's chunks not yet logged run; a task that reads an absent element notes it
//!    and goes on with a stand-in (or stops), and its chunk's log is dropped;
//! 2. the absent elements go to their owners as requests (an all-to-all), and the owners
//!    answer with the values (an exchange); they are installed and marked present;
//! 3. a chunk that ran with nothing absent keeps its log; once every chunk of the window
//!    has, the fetched elements are dropped again (fillers), so what a rank holds beyond
//!    its range is bounded by what one window reads, and the next window starts.
//!
//! A chunk runs again only after something it missed was fetched, so every round makes
//! progress; the rounds end when every rank has logged its whole share. SGDMF runs each
//! window twice: the tasks' ratings are this rank's, so one pass meets every absent factor
//! row. A window's second pass and the next window's first share a round.

use std::ops::Range;

use rayon::prelude::*;

use super::reconnoitre::{chunk_ranges, record_chunk};
use super::Loop;
use crate::access::LoopIndex;
use crate::cluster::collective::Comm;
use crate::engine::Base;
use crate::error::{Error, Result};
use crate::recon::{AccessLog, Presence};
use crate::store::RangePartition;

/// Tasks reconnoitred between two droppings of what was fetched: bounds what a rank holds
/// beyond its own range to what this many tasks read.
const WINDOW: usize = 1 << 16;

/// Absent elements read, as (slot, key).
type Misses = Vec<(usize, u64)>;

/// What a rank says in a round: whether it failed, whether it has logged its whole
/// share, and the elements it asks of the rank it sends this to, per slot.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Round {
    failure: Option<String>,
    done: bool,
    want: Vec<(u32, Vec<u64>)>,
}

/// The elements present of one hollow table here.
struct Here {
    bits: Vec<u64>,
    /// Keys fetched in the current window.
    fetched: Vec<u64>,
    /// This rank's range.
    own: Range<usize>,
}

impl Here {
    fn new(len: usize, own: Range<usize>) -> Self {
        let mut bits = vec![0u64; len.div_ceil(64)];
        for k in own.clone() {
            bits[k / 64] |= 1 << (k % 64);
        }
        Here {
            bits,
            fetched: Vec::new(),
            own,
        }
    }

    fn set(&mut self, k: u64, on: bool) {
        let (w, b) = (k as usize / 64, k % 64);
        match on {
            true => self.bits[w] |= 1 << b,
            false => self.bits[w] &= !(1 << b),
        }
    }
}

/// Reconnoitres tasks `start..start + n` (this rank's share) of a planning call whose
/// `hollow` slots hold only this rank's range (a collective: every rank calls it). Returns
/// the share's access log in index order, as [`reconnoitre`](super::reconnoitre::reconnoitre).
pub(super) fn reconnoitre_fetching<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    bases: &[Base],
    hollow: &[bool],
    start: usize,
    n: usize,
) -> Result<AccessLog> {
    let (world, me) = (comm.world_size(), comm.rank());
    let threads = l.call.threads;
    let mut here: Vec<Option<Here>> = (0..bases.len())
        .map(|s| {
            let own = RangePartition::new(bases[s].len, world).range(me);
            hollow[s].then(|| Here::new(bases[s].len, own))
        })
        .collect();
    // Chunks of 2^shift tasks, so that their logs join without copying.
    let chunk = n
        .div_ceil(threads * 8)
        .clamp(1024, (WINDOW / threads).max(1024))
        .next_power_of_two();
    let shift = chunk.trailing_zeros();
    let chunks = chunk_ranges(start, n, chunk);
    let per_window = (WINDOW / chunk).max(threads);
    let mut logs: Vec<Option<AccessLog>> = chunks.iter().map(|_| None).collect();
    let mut next = 0;
    let mut failure: Option<Error> = None;
    loop {
        // Windows run until one misses something (or the share is done): a window
        // finished in this round hands over to the next without waiting for one.
        let mut want = Vec::new();
        while failure.is_none() && next < chunks.len() {
            let window = next..(next + per_window).min(chunks.len());
            match pass(l, bases, &here, &chunks, window.clone(), &mut logs) {
                Ok(missed) => want = missed,
                Err(e) => failure = Some(e),
            }
            if !want.is_empty() || failure.is_some() {
                break;
            }
            drop_fetched(l, bases, &mut here);
            next = window.end;
        }
        let done = next >= chunks.len() || failure.is_some();
        let mut out = vec![Round::default(); world];
        for r in &mut out {
            r.done = done;
            r.failure = failure.as_ref().map(|e| e.to_string());
        }
        for (slot, key) in want {
            let owner = RangePartition::new(bases[slot].len, world).owner(key as usize);
            let asks = &mut out[owner].want;
            match asks.last_mut() {
                Some((s, keys)) if *s as usize == slot => keys.push(key),
                _ => asks.push((slot as u32, vec![key])),
            }
        }
        let mine: Vec<Vec<(u32, Vec<u64>)>> = out.iter().map(|r| r.want.clone()).collect();
        let rounds = comm.all_to_all(out)?;
        if let Some(e) = failure {
            return Err(e);
        }
        if let Some((rank, r)) = rounds.iter().enumerate().find(|(_, r)| r.failure.is_some()) {
            let message = r.failure.clone().unwrap_or_default();
            return Err(Error::RemoteFailure { rank, message });
        }
        if rounds.iter().all(|r| r.done) {
            break;
        }
        serve_round(l, comm, bases, &mut here, &rounds, &mine)?;
    }
    let logs = logs.into_iter().map(|l| l.expect("every chunk logged"));
    Ok(AccessLog::from_chunks(shift, logs.collect()))
}

/// Runs the chunks of `window` not logged yet, in parallel; keeps the logs of those that
/// read nothing absent and returns what the others read absent, as sorted (slot, key).
fn pass<Task: Sync, I: LoopIndex>(
    l: &Loop<'_, '_, Task, I>,
    bases: &[Base],
    here: &[Option<Here>],
    chunks: &[Range<usize>],
    window: Range<usize>,
    logs: &mut [Option<AccessLog>],
) -> Result<Misses> {
    let (site, task, record) = (l.call.site, l.call.task(), l.record);
    let presence: Vec<Option<Presence>> = here
        .iter()
        .map(|h| {
            h.as_ref().map(|h| Presence {
                bits: h.bits.as_ptr(),
                stand_in: (!h.own.is_empty()).then_some(h.own.start),
            })
        })
        .collect();
    let todo: Vec<usize> = window.filter(|&c| logs[c].is_none()).collect();
    let pool = crate::cluster::here().pool(l.call.threads);
    let ran: Vec<Result<(Option<AccessLog>, Misses)>> = pool.install(|| {
        todo.par_iter()
            .map(|&c| {
                let r = chunks[c].clone();
                let (rec, failed) =
                    record_chunk(site, task, record, bases, r.clone(), presence.clone());
                let misses = rec.take_misses();
                match (failed, misses.is_empty()) {
                    // Stopped at an absent element, or failed on a stand-in's value: run
                    // again once they are here (a real failure then shows).
                    (_, false) => Ok((None, misses)),
                    (Some(e), true) => Err(e),
                    (None, true) => {
                        crate::progress::count(r.len());
                        Ok((Some(rec.into_log()), misses))
                    }
                }
            })
            .collect()
    });
    let mut want = Vec::new();
    for (c, outcome) in todo.into_iter().zip(ran) {
        let (log, misses) = outcome?;
        logs[c] = log;
        want.extend(misses);
    }
    want.sort_unstable();
    want.dedup();
    Ok(want)
}

/// Answers the other ranks' requests of this round and installs the answers to this
/// rank's (`mine`, per owner), marking them present.
fn serve_round<Task, I>(
    l: &Loop<'_, '_, Task, I>,
    comm: &Comm,
    bases: &[Base],
    here: &mut [Option<Here>],
    rounds: &[Round],
    mine: &[Vec<(u32, Vec<u64>)>],
) -> Result<()> {
    let registry = &l.call.registry;
    let me = comm.rank();
    let bad = |rank: usize, message: String| Error::BadPeerData {
        rank,
        what: format!("reconnaissance request for {}", l.call.site),
        message,
    };
    let mut out = vec![Vec::new(); rounds.len()];
    for (peer, round) in rounds.iter().enumerate() {
        if peer == me {
            continue;
        }
        for (slot, keys) in &round.want {
            let slot = *slot as usize;
            let Some(h) = here.get(slot).and_then(Option::as_ref) else {
                return Err(bad(
                    peer,
                    format!("asks for table slot {slot}, not fetched"),
                ));
            };
            if let Some(k) = keys.iter().find(|&&k| !h.own.contains(&(k as usize))) {
                return Err(bad(
                    peer,
                    format!("asks for element {k} of slot {slot}, not held here"),
                ));
            }
            // SAFETY: the tables are locked by the engine and no worker runs between
            // passes; the keys are in this rank's range, below the length.
            unsafe {
                registry.entries[slot].table.pack(
                    bases[slot].ptr,
                    keys[..].into(),
                    &mut out[peer],
                )?
            };
        }
    }
    let got = comm.exchange(out)?;
    for (peer, bytes) in got.iter().enumerate() {
        if peer == me {
            continue;
        }
        let mut rest = &bytes[..];
        for (slot, keys) in &mine[peer] {
            let slot = *slot as usize;
            // SAFETY: as above; the keys are this rank's own requests, below the length.
            unsafe {
                registry.entries[slot]
                    .table
                    .unpack(bases[slot].ptr, keys[..].into(), &mut rest)?
            };
            let h = here[slot].as_mut().expect("asked only of hollow slots");
            for &k in keys {
                h.set(k, true);
            }
            h.fetched.extend_from_slice(keys);
            l.call.note(|f| f.fetched += keys.len() as u64);
        }
        if !rest.is_empty() {
            return Err(Error::Codec {
                what: format!("reconnaissance answer from rank {peer}"),
                message: format!("{} bytes more than expected", rest.len()),
            });
        }
    }
    Ok(())
}

/// Drops what the window fetched: fillers again, marked absent.
fn drop_fetched<Task, I>(l: &Loop<'_, '_, Task, I>, bases: &[Base], here: &mut [Option<Here>]) {
    for (slot, h) in here.iter_mut().enumerate() {
        let Some(h) = h else { continue };
        let fetched = std::mem::take(&mut h.fetched);
        // SAFETY: the tables are locked by the engine and no worker runs between passes;
        // the keys were fetched into them, below the length.
        unsafe {
            l.call.registry.entries[slot]
                .table
                .refill(bases[slot].ptr, &fetched)
        };
        for k in fetched {
            h.set(k, false);
        }
    }
}
