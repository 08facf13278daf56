//! Operator (non-keyed) state: named lists whose items are redistributed evenly on restore
//! at another parallelism, handed whole to every subtask (union), or passed whole from old
//! subtask `s` to new subtask `s mod P` (modulo subtask).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::checkpoint::metadata::{ListRedistribution, ListStateEntry};
use crate::error::StateError;

/// The operator state of one operator subtask. Items are kept serialized: operator state is
/// small and updated at snapshot time, so a snapshot simply copies the bytes.
#[derive(Debug, Clone, Default)]
pub struct OperatorStateBackend {
    lists: Vec<ListStateEntry>,
    restored: bool,
}

impl OperatorStateBackend {
    /// A backend holding the restored `lists` (`restored` tells whether this subtask
    /// starts from a checkpoint).
    pub fn new(lists: Vec<ListStateEntry>, restored: bool) -> Self {
        Self { lists, restored }
    }

    /// Whether the operator was restored from a checkpoint or savepoint.
    pub fn is_restored(&self) -> bool {
        self.restored
    }

    fn get<T: DeserializeOwned>(
        &self,
        name: &str,
        mode: ListRedistribution,
    ) -> Result<Vec<T>, StateError> {
        let Some(entry) = self.lists.iter().find(|l| l.name == name) else {
            return Ok(Vec::new());
        };
        if entry.mode != mode {
            return Err(StateError::Corrupt {
                state: name.to_string(),
                reason: format!("registered as {:?}, requested as {mode:?}", entry.mode),
            });
        }
        entry
            .items
            .iter()
            .map(|bytes| postcard::from_bytes(bytes).map_err(StateError::from))
            .collect()
    }

    fn update<T: Serialize>(
        &mut self,
        name: &str,
        mode: ListRedistribution,
        items: &[T],
    ) -> Result<(), StateError> {
        let items = items
            .iter()
            .map(|item| postcard::to_allocvec(item).map_err(StateError::from))
            .collect::<Result<Vec<_>, _>>()?;
        match self.lists.iter_mut().find(|l| l.name == name) {
            Some(entry) => {
                entry.mode = mode;
                entry.items = items;
            }
            None => self.lists.push(ListStateEntry {
                name: name.to_string(),
                mode,
                items,
            }),
        }
        Ok(())
    }

    /// The items of even-split list state `name` this subtask holds.
    pub fn get_list<T: DeserializeOwned>(&self, name: &str) -> Result<Vec<T>, StateError> {
        self.get(name, ListRedistribution::EvenSplit)
    }

    /// Replaces the items of even-split list state `name`.
    pub fn update_list<T: Serialize>(&mut self, name: &str, items: &[T]) -> Result<(), StateError> {
        self.update(name, ListRedistribution::EvenSplit, items)
    }

    /// The items of union list state `name` (after a restore: every subtask's items).
    pub fn get_union_list<T: DeserializeOwned>(&self, name: &str) -> Result<Vec<T>, StateError> {
        self.get(name, ListRedistribution::Union)
    }

    /// Replaces this subtask's items of union list state `name`.
    pub fn update_union_list<T: Serialize>(
        &mut self,
        name: &str,
        items: &[T],
    ) -> Result<(), StateError> {
        self.update(name, ListRedistribution::Union, items)
    }

    /// The items of modulo-subtask list state `name` this subtask holds: after a restore at
    /// parallelism `P`, those of every old subtask `s` with `s mod P` equal to this subtask's
    /// index — each old subtask's items reach exactly one new subtask, and only that one
    /// reads them (where union state would hand everything to everyone).
    pub fn get_modulo_subtask_list<T: DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Vec<T>, StateError> {
        self.get(name, ListRedistribution::ModuloSubtask)
    }

    /// Replaces this subtask's items of modulo-subtask list state `name`.
    pub fn update_modulo_subtask_list<T: Serialize>(
        &mut self,
        name: &str,
        items: &[T],
    ) -> Result<(), StateError> {
        self.update(name, ListRedistribution::ModuloSubtask, items)
    }

    /// The lists as they go into a checkpoint.
    pub fn snapshot(&self) -> Vec<ListStateEntry> {
        self.lists.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip_and_modes_are_checked() {
        let mut backend = OperatorStateBackend::default();
        backend.update_list("offsets", &[1u64, 2, 3]).unwrap();
        backend
            .update_union_list("config", &["a".to_string()])
            .unwrap();
        assert_eq!(backend.get_list::<u64>("offsets").unwrap(), vec![1, 2, 3]);
        assert_eq!(
            backend.get_union_list::<String>("config").unwrap(),
            vec!["a"]
        );
        assert!(backend.get_union_list::<u64>("offsets").is_err());
        assert!(backend.get_list::<u64>("missing").unwrap().is_empty());
        let restored = OperatorStateBackend::new(backend.snapshot(), true);
        assert!(restored.is_restored());
        assert_eq!(restored.get_list::<u64>("offsets").unwrap(), vec![1, 2, 3]);
    }
}
