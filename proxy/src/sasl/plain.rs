//! SASL PLAIN (RFC 4616), without I/O: one client message,
//! `[authzid] NUL authcid NUL passwd` in UTF-8, checked against the users
//! file's password if it names the user, else against the user's SCRAM
//! credential (SCRAM-SHA-512, then SCRAM-SHA-256). An authorization id
//! other than the user is refused. PLAIN sends the password in the clear:
//! a listener offers it over TLS.

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest;
use floe_metadata::scram::ScramMechanism;

use super::scram::verify_password;
use super::{AuthError, AuthFailure, Credentials, Exchange, Step};

/// Longest message accepted (RFC 4616 asks servers to take at least 255
/// octets per field).
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// The server's side of a PLAIN exchange: a single step.
#[derive(Debug, Default)]
pub struct PlainServer {
    ended: bool,
}

impl Exchange for PlainServer {
    fn step(&mut self, client: &[u8], creds: &dyn Credentials) -> Result<Step, AuthError> {
        if self.ended {
            return Err(AuthError::new(
                AuthFailure::OutOfOrder,
                "PLAIN message after the exchange ended",
            ));
        }
        self.ended = true;
        let message = parse(client)?;
        authenticate(&message, creds)?;
        Ok(Step::Done {
            user: message.user.to_owned(),
            reply: Vec::new(),
        })
    }
}

/// A PLAIN message's parts.
struct PlainMessage<'a> {
    user: &'a str,
    password: &'a str,
}

fn malformed(detail: &str) -> AuthError {
    AuthError::new(AuthFailure::Malformed, detail)
}

/// Splits `[authzid] NUL authcid NUL passwd`; the authzid must be empty
/// or the authcid.
fn parse(message: &[u8]) -> Result<PlainMessage<'_>, AuthError> {
    if message.len() > MAX_MESSAGE_LEN {
        return Err(malformed("PLAIN message too long"));
    }
    let text = std::str::from_utf8(message).map_err(|_| malformed("PLAIN message is not UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed(
            "PLAIN message is not authzid NUL user NUL password",
        ));
    };
    if user.is_empty() || password.is_empty() {
        return Err(malformed("PLAIN message has an empty user or password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(AuthError::new(
            AuthFailure::Unsupported,
            "PLAIN authorization id other than the user",
        ));
    }
    Ok(PlainMessage { user, password })
}

/// Checks the password: the users file's first, else a SCRAM credential.
fn authenticate(message: &PlainMessage<'_>, creds: &dyn Credentials) -> Result<(), AuthError> {
    let password = message.password.as_bytes();
    let matches = if let Some(expected) = creds.plain_password(message.user) {
        same_password(expected.as_bytes(), password)
    } else if let Some((mech, cred)) = scram_credential(message.user, creds) {
        verify_password(mech, &cred, password)
    } else {
        return Err(AuthError::new(
            AuthFailure::UnknownUser,
            "no PLAIN password or SCRAM credential for the user",
        ));
    };
    if !matches {
        return Err(AuthError::new(
            AuthFailure::BadCredentials,
            "PLAIN password does not match",
        ));
    }
    Ok(())
}

/// The user's SCRAM credential, SCRAM-SHA-512's first.
fn scram_credential(
    user: &str,
    creds: &dyn Credentials,
) -> Option<(ScramMechanism, floe_metadata::scram::ScramCredential)> {
    [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .find_map(|mech| creds.scram(user, mech).map(|cred| (mech, cred)))
}

/// Compares two passwords in time independent of their contents and
/// lengths (their digests are compared).
fn same_password(expected: &[u8], given: &[u8]) -> bool {
    let expected = digest::digest(&digest::SHA256, expected);
    let given = digest::digest(&digest::SHA256, given);
    verify_slices_are_equal(expected.as_ref(), given.as_ref()).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use floe_metadata::scram::ScramCredential;

    use super::*;
    use crate::sasl::scram::new_credential;

    #[derive(Default)]
    struct Creds {
        plain: HashMap<String, String>,
        scram: HashMap<(String, ScramMechanism), ScramCredential>,
    }

    impl Credentials for Creds {
        fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
            self.scram.get(&(user.to_owned(), mechanism)).cloned()
        }
        fn plain_password(&self, user: &str) -> Option<String> {
            self.plain.get(user).cloned()
        }
    }

    fn creds() -> Creds {
        let mut c = Creds::default();
        c.plain.insert("alice".to_owned(), "wonder land".to_owned());
        // Bob is in SCRAM only, with a different password per mechanism.
        let bob = |mech, pw| ((("bob".to_owned()), mech), new_credential(mech, pw, 4096));
        c.scram.extend([
            bob(ScramMechanism::Sha512, "builder512"),
            bob(ScramMechanism::Sha256, "builder256"),
        ]);
        c.scram.insert(
            ("carol".to_owned(), ScramMechanism::Sha256),
            new_credential(ScramMechanism::Sha256, "c", 4096),
        );
        // The file wins over SCRAM.
        c.plain.insert("carol".to_owned(), "file".to_owned());
        c
    }

    fn run(message: &[u8]) -> Result<Step, AuthError> {
        PlainServer::default().step(message, &creds())
    }

    fn failure(message: &[u8]) -> AuthFailure {
        run(message).unwrap_err().failure
    }

    fn done(user: &str) -> Step {
        Step::Done {
            user: user.to_owned(),
            reply: Vec::new(),
        }
    }

    #[test]
    fn file_password() {
        assert_eq!(run(b"\0alice\0wonder land").unwrap(), done("alice"));
        assert_eq!(run(b"alice\0alice\0wonder land").unwrap(), done("alice"));
        assert_eq!(failure(b"\0alice\0wonderland"), AuthFailure::BadCredentials);
        assert_eq!(
            failure(b"\0alice\0wonder land!"),
            AuthFailure::BadCredentials
        );
        assert_eq!(failure(b"\0alice\0w"), AuthFailure::BadCredentials);
        assert_eq!(run(b"\0carol\0file").unwrap(), done("carol"));
        assert_eq!(failure(b"\0carol\0c"), AuthFailure::BadCredentials);
    }

    #[test]
    fn scram_credential() {
        assert_eq!(run(b"\0bob\0builder512").unwrap(), done("bob"));
        // SCRAM-SHA-512's credential is the one checked.
        assert_eq!(failure(b"\0bob\0builder256"), AuthFailure::BadCredentials);
        let mut only256 = Creds::default();
        only256.scram.insert(
            ("dave".to_owned(), ScramMechanism::Sha256),
            new_credential(ScramMechanism::Sha256, "pw", 4096),
        );
        let mut s = PlainServer::default();
        assert_eq!(s.step(b"\0dave\0pw", &only256).unwrap(), done("dave"));
    }

    #[test]
    fn unknown_user() {
        assert_eq!(failure(b"\0nobody\0pw"), AuthFailure::UnknownUser);
        assert_eq!(failure(b"\0Alice\0wonder land"), AuthFailure::UnknownUser);
    }

    #[test]
    fn bad_authzid() {
        assert_eq!(
            failure(b"admin\0alice\0wonder land"),
            AuthFailure::Unsupported
        );
    }

    #[test]
    fn malformed_messages() {
        let cases: &[&[u8]] = &[
            b"",
            b"alice",
            b"\0alice",
            b"alicewonder land",
            b"\0alice\0wonder\0land",
            b"\0\0wonder land",
            b"\0alice\0",
            b"\0\0",
            b"\0ali\xffce\0wonder land",
            b"\0alice\0wonder \xc3",
        ];
        for message in cases {
            assert_eq!(failure(message), AuthFailure::Malformed, "{message:?}");
        }
        let mut long = b"\0alice\0".to_vec();
        long.resize(MAX_MESSAGE_LEN + 1, b'x');
        assert_eq!(failure(&long), AuthFailure::Malformed);
    }

    #[test]
    fn one_step_only() {
        let creds = creds();
        let mut s = PlainServer::default();
        assert_eq!(
            s.step(b"\0alice\0wonder land", &creds).unwrap(),
            done("alice")
        );
        let err = s.step(b"\0alice\0wonder land", &creds).unwrap_err();
        assert_eq!(err.failure, AuthFailure::OutOfOrder);
        // And after a failure.
        let mut s = PlainServer::default();
        assert!(s.step(b"junk", &creds).is_err());
        let err = s.step(b"\0alice\0wonder land", &creds).unwrap_err();
        assert_eq!(err.failure, AuthFailure::OutOfOrder);
    }

    #[test]
    fn errors_hold_no_password() {
        for message in [
            &b"\0alice\0hunter2"[..],
            b"\0nobody\0hunter2",
            b"x\0alice\0hunter2",
        ] {
            let err = run(message).unwrap_err();
            assert!(!err.detail.contains("hunter2"), "{}", err.detail);
        }
    }

    #[test]
    fn via_exchange() {
        let mut e = crate::sasl::exchange(crate::sasl::Mechanism::Plain);
        assert_eq!(
            e.step(b"\0alice\0wonder land", &creds()).unwrap(),
            done("alice")
        );
    }
}
