//! Dynamic broker configs over the API (`crate::broker_config`): the routes
//! that read and alter them.

use super::proto;
use super::server::AppState;
use crate::command::Command;
use crate::error::MetaError;

/// The configs set on the broker resource asked, and those set for every
/// broker (the empty name).
pub async fn configs(
    s: AppState,
    req: proto::BrokerConfigsRequest,
) -> Result<proto::BrokerConfigsResponse, MetaError> {
    crate::broker_config::check_resource(&req.broker)?;
    s.linearizable().await?;
    let (set, cluster_default) = s.shared.read(|st| {
        let of = |name: &str| {
            st.broker_configs
                .by_resource
                .get(name)
                .map(|c| c.overrides().clone().into_iter().collect())
                .unwrap_or_default()
        };
        (of(&req.broker), of(""))
    });
    Ok(proto::BrokerConfigsResponse {
        set,
        cluster_default,
    })
}

pub async fn alter(
    s: AppState,
    req: proto::AlterBrokerConfigRequest,
) -> Result<proto::Empty, MetaError> {
    s.write(Command::AlterBrokerConfig {
        broker: req.broker,
        set: req.set.into_iter().collect(),
        delete: req.delete,
    })
    .await?;
    Ok(proto::Empty {})
}
