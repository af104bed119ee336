//! Who asks the console: the principal the admin port's bearer token names
//! (or `User:ANONYMOUS` on a cluster without security), as the proxy's
//! request handling knows a client.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use floe_metadata::http_server::{Caller, PeerAddr};
use floe_proxy::groups::ClientInfo;
use floe_proxy::principal::Principal;

use crate::Console;
use crate::error::{ApiError, Kind};

/// The principal of a console request, as a Kafka client of the proxy.
pub struct Asker(pub ClientInfo);

/// `User:alice` → its kind and name (a name without a kind is a user's).
fn principal_of(s: &str) -> Principal {
    match s.split_once(':') {
        Some((kind, name)) if !kind.is_empty() => Principal {
            kind: kind.to_string(),
            name: name.to_string(),
        },
        _ => Principal::user(s),
    }
}

/// The principal for a caller, or why the console does not serve it.
/// `anonymous`: whether a caller with no credentials (an admin port without
/// security) is served as `User:ANONYMOUS`, which is only so when the
/// proxy's Kafka listeners do not authenticate clients either (else the
/// console would let anyone past them).
pub(crate) fn principal(caller: Option<&Caller>, anonymous: bool) -> Result<Principal, ApiError> {
    match caller {
        // No security on the admin port: as a PLAINTEXT Kafka client.
        Some(Caller::Open) if anonymous => Ok(Principal::anonymous()),
        Some(Caller::Open) => Err(ApiError::new(
            Kind::Unauthenticated,
            "this proxy's Kafka listeners authenticate clients, and its admin port has no \
             --admin-token-file: the console serves no one until it has one",
        )),
        Some(Caller::User(p)) => Ok(principal_of(p)),
        Some(Caller::Member(_)) => Err(ApiError::new(
            Kind::Denied,
            "the console serves people: sign in with a bearer token of --admin-token-file",
        )),
        Some(Caller::Anonymous) | None => Err(ApiError::new(
            Kind::Unauthenticated,
            "sign in with a bearer token of --admin-token-file",
        )),
    }
}

impl FromRequestParts<Arc<Console>> for Asker {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        c: &Arc<Console>,
    ) -> Result<Self, Self::Rejection> {
        let principal = principal(parts.extensions.get::<Caller>(), c.anonymous)?;
        let host = parts
            .extensions
            .get::<PeerAddr>()
            .map(|p| format!("/{}", p.0.ip()))
            .unwrap_or_default();
        Ok(Asker(ClientInfo {
            client_id: "floe-console".to_string(),
            host,
            principal,
            authz: Arc::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_a_principal_and_no_one_is_refused() {
        let p = principal(Some(&Caller::User("User:alice".into())), false).expect("a user");
        assert_eq!(p.to_string(), "User:alice");
        let open = principal(Some(&Caller::Open), true).expect("open");
        assert_eq!(open.to_string(), "User:ANONYMOUS");
        assert_eq!(
            principal(None, true).unwrap_err().kind,
            Kind::Unauthenticated
        );
        assert_eq!(
            principal(Some(&Caller::Anonymous), true).unwrap_err().kind,
            Kind::Unauthenticated
        );
        assert_eq!(
            principal(Some(&Caller::Member(None)), true)
                .unwrap_err()
                .kind,
            Kind::Denied
        );
        assert_eq!(principal_of("bob").to_string(), "User:bob");
    }

    #[test]
    fn no_credentials_are_refused_where_kafka_clients_authenticate() {
        let e = principal(Some(&Caller::Open), false).unwrap_err();
        assert_eq!(e.kind, Kind::Unauthenticated);
        assert!(e.message.contains("--admin-token-file"), "{}", e.message);
    }
}
