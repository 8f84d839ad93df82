//! How a persistence layer follows the DDSs without the DDSs depending on it: a per-rank
//! [`Persist`] hook. The checkpoints install one on a rank while they are on.
//!
//! Driver operators that change a table outside the loops report it ([`modified`]); data
//! operators that make a DDS ask whether to make it or load it ([`begin_input`]) and hand
//! over what they made ([`Input::made`]). Without a hook these cost a lookup and do
//! nothing.

use std::sync::Arc;

use super::table::TableHandle;
use crate::error::{Error, Result};
use crate::sync::RwLock;

/// What a persistence layer learns from the DDS operators of its rank.
pub(crate) trait Persist: Send + Sync {
    /// A driver operator (`transform`, `set`, `insert`, `remove`) is changing `table`
    /// outside the loops.
    fn modified(&self, table: Arc<dyn TableHandle>);
    /// A data operator starts; `site` names it and its call site (see [`input_site`]).
    fn begin_input(&self, site: String) -> Result<Input>;
    /// The operator told to [`Input::Record`] as `number` made `table`, with its extra
    /// outcome encoded as `meta`.
    fn made_input(
        &self,
        number: u64,
        site: String,
        table: Arc<dyn TableHandle>,
        meta: Vec<u8>,
    ) -> Result<()>;
}

/// What a data operator (one that makes a DDS) should do.
pub(crate) enum Input {
    /// Nothing persists: just run.
    Off,
    /// Run, then hand the DDS to [`Input::made`].
    Record { number: u64, site: String },
    /// Recovery: don't run; make the DDS from this state (and return the operator's
    /// extra outcome, `meta`) instead.
    Load {
        id: u64,
        state: Saved,
        meta: Vec<u8>,
    },
}

/// A table's saved state, as a job of this size or of another saved it.
pub(crate) enum Saved {
    /// This rank's part ([`Snapshot::snapshot_into`](super::table::Snapshot)), saved by a
    /// job of as many ranks as this one.
    Own(Vec<u8>),
    /// Every rank's part, in rank order, saved by a job of another size: the table is
    /// repartitioned as it loads ([`Snapshot::restore_parts`](super::table::Snapshot)).
    Parts(Vec<Vec<u8>>),
}

impl Saved {
    /// Replaces `table`'s part on this rank with this state.
    pub(crate) fn restore(
        &self,
        op: &'static str,
        table: &dyn super::table::Snapshot,
    ) -> Result<()> {
        match self {
            Saved::Own(bytes) => table.restore(op, bytes),
            Saved::Parts(parts) => {
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                table.restore_parts(op, &parts)
            }
        }
    }
}

/// A rank's hook, if any (see [`RankCtx::local`](crate::cluster::RankCtx::local)).
#[derive(Default)]
struct Hook(RwLock<Option<Arc<dyn Persist>>>);

/// Installs `hook` on this thread's rank (`None`: removes it).
pub(crate) fn install(hook: Option<Arc<dyn Persist>>) {
    *crate::cluster::here().local::<Hook>().0.write() = hook;
}

/// This thread's rank's hook.
fn hook() -> Option<Arc<dyn Persist>> {
    let here = crate::cluster::here();
    let hook = here.local::<Hook>();
    let installed = hook.0.read().clone();
    installed
}

/// A driver operator is changing `table` outside the loops: tells the hook (for
/// checkpoints: the next one writes its state, so that a replay resuming after the
/// change loads it rather than depending on the replayed driver code to redo it).
pub(crate) fn modified<T: TableHandle + 'static>(table: &Arc<T>) {
    // The handle is cloned only when there is a hook: driver loops of `insert`s pay
    // nothing more otherwise.
    if let Some(hook) = hook() {
        hook.modified(table.clone());
    }
}

/// Where a data operator was called, as its key in the checkpoints.
pub(crate) fn input_site(op: &str, at: &std::panic::Location<'_>) -> String {
    format!("{op} at {}:{}:{}", at.file(), at.line(), at.column())
}

/// A data operator `op`, called at `at`, starts: what to do (see [`Input`]).
pub(crate) fn begin_input(op: &str, at: &std::panic::Location<'_>) -> Result<Input> {
    match hook() {
        Some(hook) => hook.begin_input(input_site(op, at)),
        None => Ok(Input::Off),
    }
}

impl Input {
    /// The operator made `table`: hands it over if asked to by [`begin_input`].
    pub(crate) fn made(self, table: Arc<dyn TableHandle>, meta: Vec<u8>) -> Result<()> {
        let Input::Record { number, site } = self else {
            return Ok(());
        };
        match hook() {
            Some(hook) => hook.made_input(number, site, table, meta),
            None => Ok(()),
        }
    }
}

/// Checks that a DDS made from a saved state got the id it had when saved.
pub(crate) fn check_input_id(expected: u64, got: u64, site: &str) -> Result<()> {
    if expected == got {
        return Ok(());
    }
    Err(Error::Config(format!(
        "recovery: {site} made DDS {got}, but its checkpoint holds DDS {expected} (the \
         program changed since the checkpoint?)"
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::simulate;
    use crate::sync::Mutex;
    use crate::DVector;

    /// A hook that notes what it is told and loads `load` for data operator 2.
    #[derive(Default)]
    struct Notes {
        seen: Mutex<Vec<String>>,
        load: Mutex<Option<(u64, Vec<u8>)>>,
        inputs: Mutex<u64>,
    }

    impl Persist for Notes {
        fn modified(&self, table: Arc<dyn TableHandle>) {
            self.seen.lock().push(format!("modified {}", table.id()));
        }

        fn begin_input(&self, site: String) -> Result<Input> {
            let site = site.split(" at ").next().unwrap().to_string();
            self.seen.lock().push(format!("begin {site}"));
            let mut inputs = self.inputs.lock();
            *inputs += 1;
            Ok(match (*inputs, self.load.lock().take()) {
                (2, Some((id, state))) => Input::Load {
                    id,
                    state: Saved::Own(state),
                    meta: postcard::to_stdvec(&()).unwrap(),
                },
                (number, _) => Input::Record { number, site },
            })
        }

        fn made_input(
            &self,
            number: u64,
            site: String,
            table: Arc<dyn TableHandle>,
            _meta: Vec<u8>,
        ) -> Result<()> {
            let made = format!("made {number} {site} {}", table.id());
            self.seen.lock().push(made);
            Ok(())
        }
    }

    #[test]
    fn without_a_hook_operators_just_run() {
        simulate(1, || {
            let at = std::panic::Location::caller();
            assert!(matches!(begin_input("op", at).unwrap(), Input::Off));
            let v = DVector::from_fn(3, |i| i as u32).unwrap();
            v.set(0, 5).unwrap();
            assert_eq!(v.to_vec().unwrap(), [5, 1, 2]);
        });
    }

    #[test]
    fn operators_tell_the_hook_and_load_what_it_gives() {
        simulate(1, || {
            let notes = Arc::new(Notes::default());
            install(Some(notes.clone()));
            let a = DVector::from_fn(3, |i| i as u32).unwrap();
            a.set(1, 7).unwrap();
            // The second data operator is loaded from a state saved from `a`.
            let mut state = Vec::new();
            let table = crate::dds::table::lookup_handle(a.id()).unwrap();
            table.snapshot_into(&mut state).unwrap();
            *notes.load.lock() = Some((a.id() + 1, state));
            let b = DVector::from_fn(3, |_| 0u32).unwrap();
            assert_eq!(b.to_vec().unwrap(), [0, 7, 2]);
            install(None);
            b.set(0, 1).unwrap();
            let (a_id, b_id) = (a.id(), b.id());
            assert_eq!(
                *notes.seen.lock(),
                [
                    "begin DVector::from_fn".to_string(),
                    format!("made 1 DVector::from_fn {a_id}"),
                    format!("modified {a_id}"),
                    "begin DVector::from_fn".to_string(),
                ]
            );
            assert_eq!(b_id, a_id + 1);
        });
    }

    #[test]
    fn a_loaded_dds_must_get_its_saved_id() {
        assert!(check_input_id(4, 4, "DVector::from_fn at src/main.rs:1:1").is_ok());
        let e = check_input_id(4, 5, "DVector::from_fn at src/main.rs:1:1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "configuration: recovery: DVector::from_fn at src/main.rs:1:1 made DDS 5, but \
             its checkpoint holds DDS 4 (the program changed since the checkpoint?)"
        );
    }
}
