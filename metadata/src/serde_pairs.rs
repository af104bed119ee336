//! Serializes a map as a list of (key, value) pairs, for maps whose keys are
//! not strings (JSON objects only take string keys). Any ordered map will
//! do (`BTreeMap`, `imbl::OrdMap`): the pairs are written in key order.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub fn serialize<'a, M, K, V, S>(map: &'a M, s: S) -> Result<S::Ok, S::Error>
where
    &'a M: IntoIterator<Item = (&'a K, &'a V)>,
    K: Serialize + 'a,
    V: Serialize + 'a,
    S: Serializer,
{
    s.collect_seq(map)
}

pub fn deserialize<'de, M, K, V, D>(d: D) -> Result<M, D::Error>
where
    M: FromIterator<(K, V)>,
    K: Deserialize<'de>,
    V: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
}
