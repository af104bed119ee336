//! Dynamic broker configs ([`crate::broker_config`]) as the model keeps
//! them: by broker resource name (a broker's id, or empty for every
//! broker), only those with any set.

use std::collections::BTreeMap;

use crate::broker_config::BrokerConfigs;
use crate::error::MetaError;

/// The dynamic configs of every broker resource with any set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerConfigsState {
    /// By broker resource name (an id, or empty for every broker).
    pub by_resource: BTreeMap<String, BrokerConfigs>,
}

impl BrokerConfigsState {
    /// Sets and deletes a resource's configs, all or none; a resource left
    /// with none set has no entry.
    pub(crate) fn alter(
        &mut self,
        broker: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), MetaError> {
        crate::broker_config::check_resource(broker)?;
        let mut configs = self.by_resource.get(broker).cloned().unwrap_or_default();
        configs.alter(set, delete)?;
        if configs.is_empty() {
            self.by_resource.remove(broker);
        } else {
            self.by_resource.insert(broker.to_string(), configs);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_configs_are_kept_per_resource_only_while_any_is_set() {
        let mut s = BrokerConfigsState::default();
        let set = BTreeMap::from([("background.threads".to_string(), "4".to_string())]);
        s.alter("", &set, &[]).unwrap();
        s.alter("1", &set, &[]).unwrap();
        assert_eq!(s.by_resource.len(), 2);
        // Not a broker resource, or a bad value: refused, nothing changes.
        assert!(s.alter("x", &set, &[]).is_err());
        let bad = BTreeMap::from([("background.threads".to_string(), "many".to_string())]);
        assert!(s.alter("1", &bad, &[]).is_err());
        assert_eq!(s.by_resource.len(), 2);
        s.alter("1", &BTreeMap::new(), &["background.threads".to_string()])
            .unwrap();
        assert_eq!(s.by_resource.keys().collect::<Vec<_>>(), vec![""]);
    }
}
