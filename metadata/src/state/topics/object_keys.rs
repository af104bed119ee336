//! The store objects the metadata knows, looked up by where they are
//! (endpoint and key) rather than by id: what an orphan scan asks of a
//! page of listed keys (`broker/src/orphans`).
//!
//! The index is derived from the object table and never written to a
//! snapshot: [`ObjectKeys::build`] makes it when a state is loaded, and
//! the two changes of the table (a new object, a forgotten one) keep it in
//! step. It holds a 64-bit hash of each endpoint and key with the object's
//! id (16 bytes an object, not a second copy of every key: the table may
//! hold millions), and a lookup checks the key in the table, so a hash
//! collision costs a comparison, never a wrong answer. Like the table, the
//! hashes are a persistent set, shared by a copy of the state.

use std::collections::BTreeMap;

use imbl::{OrdMap, OrdSet};

use crate::ids::ObjectId;

use super::{ObjectInfo, TopicsState};

/// Object ids by a hash of their endpoint and key, and how many objects
/// each endpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectKeys {
    by_hash: OrdSet<(u64, ObjectId)>,
    per_endpoint: BTreeMap<String, u64>,
}

/// 64-bit FNV-1a of the endpoint, a separator no endpoint id holds, and
/// the key.
fn hash(endpoint: &str, key: &str) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    endpoint
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(key.bytes())
        .fold(OFFSET_BASIS, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

impl ObjectKeys {
    /// The index of a loaded object table.
    pub fn build(objects: &OrdMap<ObjectId, ObjectInfo>) -> Self {
        let mut keys = Self::default();
        for (id, o) in objects {
            keys.insert(*id, o);
        }
        keys
    }

    pub(super) fn insert(&mut self, id: ObjectId, o: &ObjectInfo) {
        self.by_hash.insert((hash(&o.endpoint, &o.key), id));
        *self.per_endpoint.entry(o.endpoint.clone()).or_default() += 1;
    }

    pub(super) fn remove(&mut self, id: ObjectId, o: &ObjectInfo) {
        let h = hash(&o.endpoint, &o.key);
        if self.by_hash.remove(&(h, id)).is_none() {
            return;
        }
        if let Some(n) = self.per_endpoint.get_mut(&o.endpoint) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_endpoint.remove(&o.endpoint);
            }
        }
    }
}

impl TopicsState {
    /// Whether the object table holds the object at `endpoint` / `key`
    /// (referenced by an index entry, or unreferenced and not yet
    /// forgotten).
    pub fn knows_object(&self, endpoint: &str, key: &str) -> bool {
        let h = hash(endpoint, key);
        self.object_keys
            .by_hash
            .range((h, ObjectId(0))..=(h, ObjectId(u64::MAX)))
            .any(|(_, id)| {
                self.objects
                    .get(id)
                    .is_some_and(|o| o.endpoint == endpoint && o.key == key)
            })
    }

    /// The endpoints the object table holds objects on, with how many.
    pub fn object_endpoints(&self) -> impl Iterator<Item = (&str, u64)> {
        self.object_keys
            .per_endpoint
            .iter()
            .map(|(e, n)| (e.as_str(), *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(endpoint: &str, key: &str) -> ObjectInfo {
        ObjectInfo {
            endpoint: endpoint.into(),
            key: key.into(),
            size: 1,
            refs: 0,
        }
    }

    #[test]
    fn the_index_built_on_load_equals_the_one_kept_in_step() {
        let mut kept = ObjectKeys::default();
        let mut table = OrdMap::new();
        for i in 0..100u64 {
            let o = info(
                if i % 3 == 0 { "a" } else { "b" },
                &format!("wal/1/{i}.wal"),
            );
            kept.insert(ObjectId(i), &o);
            table.insert(ObjectId(i), o);
        }
        for i in (0..100u64).step_by(2) {
            let o = table.remove(&ObjectId(i)).expect("in the table");
            kept.remove(ObjectId(i), &o);
        }
        assert_eq!(kept, ObjectKeys::build(&table));
        assert_eq!(kept.per_endpoint.values().sum::<u64>(), table.len() as u64);
    }

    #[test]
    fn a_lookup_checks_the_key_not_only_its_hash() {
        let mut s = TopicsState::default();
        let o = info("a", "segments/t/0/1.x.log");
        // A planted collision: another key's entry under this key's hash.
        s.object_keys
            .by_hash
            .insert((hash("a", "wal/other"), ObjectId(7)));
        s.objects.insert(ObjectId(7), o.clone());
        assert!(!s.knows_object("a", "wal/other"));
        s.object_keys.insert(ObjectId(7), &o);
        assert!(s.knows_object("a", "segments/t/0/1.x.log"));
        assert!(!s.knows_object("b", "segments/t/0/1.x.log"));
    }
}
