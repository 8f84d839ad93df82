//! The tables a loop body captured, and where their elements are while a call runs.

use std::sync::Arc;

use super::reduce::ReductionSlot;
use super::CallSite;
use crate::access::Binding;
use crate::dds::table::{Merger, TableHandle, TableLock};
use crate::error::Error;

/// The DDSs a task captured, filled in by generated code.
#[derive(Default)]
pub struct Registry {
    pub(crate) entries: Vec<Registered>,
    /// The captured reduction variables (see `super::reduce`), with their names.
    pub(crate) reductions: Vec<(Arc<dyn ReductionSlot>, &'static str)>,
    /// Two captured variables naming one table (first, second).
    duplicate: Option<(&'static str, &'static str)>,
}

pub(crate) struct Registered {
    pub table: Arc<dyn TableHandle>,
    pub name: &'static str,
    pub merger: Option<Arc<dyn Merger>>,
}

impl Registry {
    pub(crate) fn add_reduction(&mut self, slot: Arc<dyn ReductionSlot>, name: &'static str) {
        self.reductions.push((slot, name));
    }

    pub(crate) fn add(
        &mut self,
        table: Arc<dyn TableHandle>,
        name: &'static str,
        merger: Option<Arc<dyn Merger>>,
    ) {
        match self.entries.iter().find(|e| e.table.id() == table.id()) {
            Some(first) => {
                self.duplicate.get_or_insert((first.name, name));
            }
            None => self.entries.push(Registered {
                table,
                name,
                merger,
            }),
        }
    }

    /// Locks every captured table for the operator; returns the locks and, per slot,
    /// where the table's elements are.
    #[allow(clippy::type_complexity)]
    pub(crate) fn lock_all(
        &self,
        site: &CallSite,
    ) -> crate::Result<(Vec<Box<dyn TableLock + '_>>, Vec<Base>)> {
        let op = site.operator();
        let mut locks: Vec<Box<dyn TableLock + '_>> = self
            .entries
            .iter()
            .map(|e| {
                e.table.lock(op).map_err(|_| {
                    Error::invalid(
                        op,
                        format!(
                            "{site}: DDS `{}` is in use by another running operator \
                             (loop operators cannot be nested)",
                            e.name
                        ),
                    )
                })
            })
            .collect::<crate::Result<_>>()?;
        let bases = self
            .entries
            .iter()
            .zip(&mut locks)
            .map(|(e, l)| Base {
                id: e.table.id(),
                ptr: l.ptr(),
                len: l.len(),
                index: l.index(),
                shape: e.table.shape(),
            })
            .collect();
        Ok((locks, bases))
    }

    /// Refuses two captured handles of one table: their views would alias.
    pub(crate) fn check(&self, site: &CallSite) -> crate::Result<()> {
        match self.duplicate {
            Some((a, b)) => Err(Error::invalid(
                site.operator(),
                format!(
                    "{site}: `{a}` and `{b}` are handles of the same DDS; a body must capture \
                     each DDS through one variable"
                ),
            )),
            None => Ok(()),
        }
    }
}

/// Where a locked table's elements are, as handed to worker threads.
///
/// The engines share these pointers with their workers; what each worker may do through
/// them is governed by the plan and checked by the views (see `dds::view`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Base {
    pub id: u64,
    /// Element 0 (type-erased `*mut T`).
    pub ptr: *mut u8,
    pub len: usize,
    /// A map's key index (type-erased `*const HashMap<K, u32>`), or null for a vector.
    pub index: *const u8,
    /// The table's shape: a vector's length, a map's structural version.
    pub shape: u64,
}

// SAFETY: a `Base` is only pointer values; every dereference is done by views or mergers
// whose own SAFETY arguments rely on the plan (one writer per element at a time) or on a
// lock held by the engine.
unsafe impl Send for Base {}
// SAFETY: as above.
unsafe impl Sync for Base {}

impl Base {
    /// A binding that reads and writes the table directly, unchecked.
    pub fn binding(&self) -> Binding {
        Binding::direct(self.id, self.ptr, self.len, self.index)
    }

    /// What a recorder needs: id, elements, length, key index.
    pub fn recorded(&self) -> (u64, *mut u8, usize, *const u8) {
        (self.id, self.ptr, self.len, self.index)
    }
}
