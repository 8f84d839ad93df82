//! How much a driver operator may gather whole on a rank.
//!
//! `DVector::to_vec`, `iter` and (across ranks) `with_all`, and `DMap::to_vec`, put a
//! copy of every element on every rank. On a table partitioned because it is large that
//! copy would not fit, and the process would be killed by the system with nothing said. So
//! such an operator first checks the table's estimated size against the *gather limit*
//! and fails with an error that says so, and what to use instead. The limit is half the
//! machine's memory unless set: [`Config::gather_limit`](crate::Config::gather_limit),
//! `STRADS_GATHER_LIMIT` (bytes), or [`set_gather_limit`] on a rank.

use std::sync::OnceLock;

use crate::cluster::collective::Comm;
use crate::error::{Error, Result};
use crate::sync::Mutex;

/// This rank's limit, when set (see [`set_gather_limit`]).
#[derive(Default)]
struct Limit(Mutex<Option<u64>>);

/// Sets the gather limit of this thread's rank, in bytes (`None`: back to the default,
/// half the machine's memory). [`init_with`](crate::init_with) sets it from
/// [`Config::gather_limit`](crate::Config::gather_limit).
///
/// # Examples
/// ```
/// use strads_ap_runtime::{dds::set_gather_limit, DVector};
///
/// let rows = DVector::from_fn(1000, |i| vec![i as f32; 100])?;
/// set_gather_limit(Some(10_000));
/// let refused = rows.to_vec().unwrap_err().to_string();
/// assert!(refused.contains("gather limit"), "{refused}");
/// // Work on the ranks' parts instead: a reduction moves one value per rank.
/// let sum = rows.map_reduce(|r| r[0] as f64, |a, b| a + b)?;
/// assert_eq!(sum, 499_500.0);
/// set_gather_limit(None);
/// # Ok::<(), strads_ap_runtime::Error>(())
/// ```
pub fn set_gather_limit(bytes: Option<u64>) {
    *crate::cluster::here().local::<Limit>().0.lock() = bytes;
}

/// This rank's gather limit: set, or half the machine's memory (none where the system
/// does not say how much it has).
pub(crate) fn gather_limit() -> Option<u64> {
    let set = *crate::cluster::here().local::<Limit>().0.lock();
    set.or_else(half_the_memory)
}

/// Half of `MemTotal` in `/proc/meminfo`, read once.
fn half_the_memory() -> Option<u64> {
    static HALF: OnceLock<Option<u64>> = OnceLock::new();
    *HALF.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024 / 2)
    })
}

/// This rank's size above which a planning call fetches a table's elements (see
/// [`set_fetch_above`]).
#[derive(Default)]
struct FetchAbove(Mutex<Option<u64>>);

/// Tables smaller than this many bytes (estimated, the whole table) are gathered whole on
/// every rank when a distributed `async_for!` is planned, unless set otherwise.
pub const FETCH_ABOVE_DEFAULT: u64 = 64 << 20;

/// Sets the size, in bytes, above which a distributed `async_for!` that is being planned
/// leaves a captured `DVector` partitioned and fetches from their owners only the elements
/// its tasks read (`None`: back to the default, `STRADS_FETCH_ABOVE` or
/// [`FETCH_ABOVE_DEFAULT`]). Smaller tables are gathered whole for the planning call, which
/// is quicker: fetching runs reconnaissance twice (once to find what is read). The ranks
/// agree on the smallest setting among them.
///
/// # Examples
/// ```
/// use strads_ap_runtime::dds::set_fetch_above;
///
/// // Plan loops over tables of more than 1 MiB without gathering them whole
/// // (`strads_ap::loop_stats()` then counts the elements fetched, per loop).
/// set_fetch_above(Some(1 << 20));
/// // Back to the default.
/// set_fetch_above(None);
/// ```
pub fn set_fetch_above(bytes: Option<u64>) {
    *crate::cluster::here().local::<FetchAbove>().0.lock() = bytes;
}

/// This rank's size above which a planning call fetches (see [`set_fetch_above`]).
pub(crate) fn fetch_above() -> u64 {
    static ENV: OnceLock<Option<u64>> = OnceLock::new();
    let set = *crate::cluster::here().local::<FetchAbove>().0.lock();
    let env = *ENV.get_or_init(|| {
        std::env::var(crate::cluster::env::FETCH_ABOVE)
            .ok()?
            .parse()
            .ok()
    });
    set.or(env).unwrap_or(FETCH_ABOVE_DEFAULT)
}

/// Checks that gathering the whole of a table (`what`, of `len` elements, of which this
/// rank holds about `held_bytes`) on this rank stays within the gather limit. Across ranks
/// (`comm`) a collective: the ranks exchange their parts' sizes and limits, so that every
/// rank decides alike, by the smallest limit.
pub(crate) fn check_gather(
    op: &'static str,
    what: &str,
    len: usize,
    held_bytes: u64,
    comm: Option<&Comm>,
) -> Result<()> {
    let mine = (held_bytes, gather_limit());
    let (bytes, limit) = match comm {
        None => mine,
        Some(comm) => {
            let all = comm.allgather(mine)?;
            let bytes = all.iter().map(|p| p.0).fold(0u64, u64::saturating_add);
            (bytes, all.iter().filter_map(|p| p.1).min())
        }
    };
    match limit {
        Some(limit) if bytes > limit => Err(Error::invalid(
            op,
            format!(
                "a copy of all {len} elements of {what} (about {}) on every rank would pass \
                 the gather limit of {} (by default half the machine's memory); compute on \
                 the ranks' parts instead (map_reduce, map, filter, or a loop with a \
                 reduction), or raise the limit (STRADS_GATHER_LIMIT, in bytes, or \
                 Config::with_gather_limit)",
                human(bytes),
                human(limit)
            ),
        )),
        _ => Ok(()),
    }
}

/// `bytes` for a reader: `1.5 GB`, `340 MB`, `12 KB`, `512 bytes`.
fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")];
    for (size, unit) in UNITS {
        if bytes >= size {
            let x = bytes as f64 / size as f64;
            return match x < 10.0 {
                true => format!("{x:.1} {unit}"),
                false => format!("{x:.0} {unit}"),
            };
        }
    }
    format!("{bytes} bytes")
}

/// The result of a data operator `op` that each rank reduced over its own part to
/// `partial` (`None` for an empty part): the parts combined with `reduce` in rank order,
/// so every rank gets the same value; an [`Error::Empty`] when every part was empty.
pub(crate) fn combine_in_rank_order<U>(
    op: &'static str,
    comm: Option<&Comm>,
    partial: Option<U>,
    reduce: impl Fn(U, U) -> U,
) -> Result<U>
where
    U: serde::Serialize + serde::de::DeserializeOwned,
{
    let total = match comm {
        None => partial,
        Some(comm) => comm
            .allgather(partial)?
            .into_iter()
            .flatten()
            .reduce(reduce),
    };
    total.ok_or(Error::Empty { op })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::simulate;
    use crate::DVector;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(512), "512 bytes");
        assert_eq!(human(12 * 1024), "12 KB");
        assert_eq!(human(1536 << 20), "1.5 GB");
        assert_eq!(human(340 << 20), "340 MB");
    }

    /// Across ranks every rank decides alike, by the smallest limit: a rank whose own
    /// limit allows the copy fails with the others rather than waiting for them.
    #[test]
    fn every_rank_refuses_a_gather_past_the_smallest_limit() {
        let outcomes = simulate(3, || {
            let rank = crate::cluster::here().rank();
            let rows = DVector::from_fn(3000, |i| vec![i as u32; 50]).unwrap();
            set_gather_limit(Some(if rank == 1 { 100_000 } else { 1 << 30 }));
            let all = rows.to_vec().map(|v| v.len()).map_err(|e| e.to_string());
            let with = rows.with_all(|v| v.len()).map_err(|e| e.to_string());
            set_gather_limit(Some(1 << 30));
            let fits = rows.to_vec().map(|v| v.len()).map_err(|e| e.to_string());
            (all, with, fits)
        });
        for (rank, (all, with, fits)) in outcomes.into_iter().enumerate() {
            for refused in [all, with] {
                let message = refused.unwrap_err();
                assert!(
                    message.contains("a copy of all 3000 elements of DVector")
                        && message.contains("would pass the gather limit of 98 KB"),
                    "rank {rank}: {message}"
                );
            }
            assert_eq!(fits, Ok(3000), "rank {rank}");
        }
    }
}
