//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka speaks
//! them, without I/O:
//!
//! - [`ScramServer`]: the listener's side of an exchange, checking a
//!   client's proof against the user's stored [`ScramCredential`];
//! - [`ScramClient`]: a client's side (the `floe` tools log in with it);
//! - the derivation of a stored credential from a password
//!   ([`new_credential`], [`salted_password`],
//!   [`credential_from_salted_password`]) and the check of a password
//!   against one ([`verify_password`], used by PLAIN).
//!
//! Channel binding is not served: a client may send the gs2 flag `n` (or
//! `y`, since the server advertises none), never `p=`. Kafka's
//! `tokenauth=true` extension (delegation tokens) is refused; other
//! extensions are ignored. Names are not SASLprep-normalized, as in Kafka.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::LazyLock;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use aws_lc_rs::{digest, hmac, pbkdf2};
use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use floe_metadata::scram::{ScramCredential, ScramMechanism};

use super::{AuthError, AuthFailure, Credentials, Exchange, Step};

/// Longest message either side accepts (a real one is well under 1 KiB).
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;
/// Most iterations a [`ScramClient`] accepts from a server (each one costs
/// the client two HMACs).
pub const CLIENT_MAX_ITERATIONS: u32 = 1_000_000;
/// Iteration count announced for a user that has no credential.
const UNKNOWN_USER_ITERATIONS: u32 = 4096;
/// Length of a salt made by [`new_credential`] (and of a fake salt).
const SALT_LEN: usize = 32;
/// Random bytes in a nonce (hex on the wire).
const NONCE_BYTES: usize = 24;

/// Standard base64 with padding when encoding; padding optional when
/// decoding (Java's decoder, which Kafka clients use, is as lenient).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

// ---------------------------------------------------------------------------
// Derivation

/// PBKDF2-HMAC of `password` with the mechanism's hash, as long as the
/// hash's output: RFC 5802's SaltedPassword. An iteration count of 0
/// counts as 1 (PBKDF2 has no 0).
pub fn salted_password(
    mech: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut out = vec![0; hash_len(mech)];
    let iterations = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(pbkdf2_algorithm(mech), iterations, salt, password, &mut out);
    out
}

/// The stored credential of a salted password: StoredKey = H(ClientKey)
/// and ServerKey, with ClientKey = HMAC(SaltedPassword, "Client Key") and
/// ServerKey = HMAC(SaltedPassword, "Server Key").
pub fn credential_from_salted_password(
    mech: ScramMechanism,
    salted_password: &[u8],
    salt: Vec<u8>,
    iterations: u32,
) -> ScramCredential {
    let client_key = hmac_of(mech, salted_password, b"Client Key");
    ScramCredential {
        salt,
        stored_key: hash_of(mech, &client_key),
        server_key: hmac_of(mech, salted_password, b"Server Key"),
        iterations,
    }
}

/// A new credential for `password`, with a random 32-byte salt.
pub fn new_credential(mech: ScramMechanism, password: &str, iterations: u32) -> ScramCredential {
    let salt = random_bytes::<SALT_LEN>().to_vec();
    let salted = salted_password(mech, password.as_bytes(), &salt, iterations);
    credential_from_salted_password(mech, &salted, salt, iterations)
}

/// Whether `password` is the one `cred` was derived from (compared in
/// constant time). A credential with 0 iterations matches nothing.
pub fn verify_password(mech: ScramMechanism, cred: &ScramCredential, password: &[u8]) -> bool {
    if cred.iterations == 0 {
        return false;
    }
    let salted = salted_password(mech, password, &cred.salt, cred.iterations);
    let client_key = hmac_of(mech, &salted, b"Client Key");
    same_bytes(&hash_of(mech, &client_key), &cred.stored_key)
}

fn hmac_algorithm(mech: ScramMechanism) -> hmac::Algorithm {
    match mech {
        ScramMechanism::Sha256 => hmac::HMAC_SHA256,
        ScramMechanism::Sha512 => hmac::HMAC_SHA512,
    }
}

fn digest_algorithm(mech: ScramMechanism) -> &'static digest::Algorithm {
    match mech {
        ScramMechanism::Sha256 => &digest::SHA256,
        ScramMechanism::Sha512 => &digest::SHA512,
    }
}

fn pbkdf2_algorithm(mech: ScramMechanism) -> pbkdf2::Algorithm {
    match mech {
        ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
        ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
    }
}

/// The length of the mechanism's hash, so of its keys, proofs and
/// signatures.
fn hash_len(mech: ScramMechanism) -> usize {
    digest_algorithm(mech).output_len()
}

fn hmac_of(mech: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac_algorithm(mech), key);
    hmac::sign(&key, data).as_ref().to_vec()
}

fn hash_of(mech: ScramMechanism, data: &[u8]) -> Vec<u8> {
    digest::digest(digest_algorithm(mech), data)
        .as_ref()
        .to_vec()
}

/// Equality in time independent of the contents (not of the lengths).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    verify_slices_are_equal(a, b).is_ok()
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// `N` bytes from the system's secure generator.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if SystemRandom::new().fill(&mut out).is_err() {
        // Dead code in practice: AWS-LC's RAND_bytes aborts the process
        // itself rather than fail. Never go on with predictable bytes.
        std::process::abort();
    }
    out
}

/// A fresh nonce: random bytes in hex. Letters and digits only, as
/// Kafka's own: librdkafka 2.0 misreads a server-first message whose nonce
/// holds `=` (it took base64 padding for the next attribute and sent a
/// client-final with another nonce).
fn random_nonce() -> String {
    random_bytes::<NONCE_BYTES>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------------------
// Message syntax

fn malformed(detail: &str) -> AuthError {
    AuthError::new(AuthFailure::Malformed, detail)
}

fn out_of_order() -> AuthError {
    AuthError::new(
        AuthFailure::OutOfOrder,
        "SCRAM message after the exchange ended",
    )
}

/// A message as text, bounded.
fn message_text(message: &[u8]) -> Result<&str, AuthError> {
    if message.len() > MAX_MESSAGE_LEN {
        return Err(malformed("SCRAM message too long"));
    }
    std::str::from_utf8(message).map_err(|_| malformed("SCRAM message is not UTF-8"))
}

/// The value of attribute `name` (`name=value`) in `field`.
fn attribute(field: &str, name: char) -> Option<&str> {
    field.strip_prefix(name)?.strip_prefix('=')
}

fn required(field: Option<&str>, name: char) -> Result<&str, AuthError> {
    field
        .and_then(|f| attribute(f, name))
        .ok_or_else(|| malformed("SCRAM message lacks an expected attribute"))
}

/// Decodes a saslname: `=2C` is `,` and `=3D` is `=`; no other `=`, no
/// NUL, not empty.
fn decode_saslname(name: &str) -> Option<String> {
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// Encodes a name as a saslname.
fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A nonce: printable ASCII but comma, not empty.
fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// An extension `key=value`, key alphanumeric (Kafka's keys are words,
/// RFC 5802's one letter).
fn extension(field: &str) -> Result<(&str, &str), AuthError> {
    match field.split_once('=') {
        Some((key, value)) if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            Ok((key, value))
        }
        _ => Err(malformed("SCRAM extension is not key=value")),
    }
}

fn decode_base64(text: &str) -> Result<Vec<u8>, AuthError> {
    BASE64
        .decode(text)
        .map_err(|_| malformed("SCRAM attribute is not base64"))
}

// ---------------------------------------------------------------------------
// Server

/// What the server keeps of a client-first message.
struct ClientFirst<'a> {
    /// The gs2 header, as sent (`n,,` for most clients).
    gs2_header: &'a str,
    /// The message without the gs2 header, part of the AuthMessage.
    bare: &'a str,
    user: String,
    nonce: &'a str,
}

/// Parses a client-first message, refusing what Floe does not serve.
fn parse_client_first(text: &str) -> Result<ClientFirst<'_>, AuthError> {
    let (flag, rest) = text
        .split_once(',')
        .ok_or_else(|| malformed("SCRAM client-first lacks a gs2 header"))?;
    check_gs2_flag(flag)?;
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or_else(|| malformed("SCRAM client-first lacks a gs2 header"))?;
    let gs2_header = &text[..text.len() - bare.len()];
    let mut fields = bare.split(',');
    let first = fields.next();
    if first.is_some_and(|f| f.starts_with("m=")) {
        return Err(AuthError::new(
            AuthFailure::Unsupported,
            "SCRAM mandatory extension (m=)",
        ));
    }
    let user = decode_saslname(required(first, 'n')?)
        .ok_or_else(|| malformed("SCRAM user name is not a valid saslname"))?;
    let nonce = required(fields.next(), 'r')?;
    if !valid_nonce(nonce) {
        return Err(malformed("SCRAM client nonce is not printable"));
    }
    fields.try_for_each(check_client_extension)?;
    check_authzid(authzid, &user)?;
    Ok(ClientFirst {
        gs2_header,
        bare,
        user,
        nonce,
    })
}

/// `n` (no channel binding) or `y` (the client could bind, but believes
/// the server cannot: true, Floe advertises no `-PLUS` mechanism).
fn check_gs2_flag(flag: &str) -> Result<(), AuthError> {
    match flag {
        "n" | "y" => Ok(()),
        f if f.starts_with("p=") => Err(AuthError::new(
            AuthFailure::Unsupported,
            "SCRAM channel binding requested",
        )),
        _ => Err(malformed("SCRAM gs2 flag is not n, y or p=")),
    }
}

/// The authorization id must be absent or the user.
fn check_authzid(authzid: &str, user: &str) -> Result<(), AuthError> {
    if authzid.is_empty() {
        return Ok(());
    }
    let name = attribute(authzid, 'a')
        .and_then(decode_saslname)
        .ok_or_else(|| malformed("SCRAM authzid is not a=saslname"))?;
    if name != user {
        return Err(AuthError::new(
            AuthFailure::Unsupported,
            "SCRAM authorization id other than the user",
        ));
    }
    Ok(())
}

/// Extensions are ignored but Kafka's delegation tokens, not served.
fn check_client_extension(field: &str) -> Result<(), AuthError> {
    let (key, value) = extension(field)?;
    if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
        return Err(AuthError::new(
            AuthFailure::Unsupported,
            "SCRAM delegation token authentication",
        ));
    }
    Ok(())
}

/// What the server keeps between the first and the final message.
struct Pending {
    user: String,
    /// Whether `credential` is the user's (else a fake one for an unknown
    /// user, so the exchange runs the same way and fails at the end).
    known: bool,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    /// The combined nonce, client's then server's.
    nonce: String,
}

enum ServerState {
    ClientFirst,
    ClientFinal(Box<Pending>),
    Ended,
}

/// The server's side of a SCRAM exchange: client-first → server-first,
/// client-final → server-final (`v=`) and the user.
pub struct ScramServer {
    mechanism: ScramMechanism,
    server_nonce: String,
    state: ServerState,
}

impl ScramServer {
    /// A new exchange, with a random server nonce.
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer::with_nonce(mechanism, random_nonce())
    }

    /// A new exchange with a chosen server nonce (for tests: printable
    /// ASCII, no comma).
    pub fn with_nonce(mechanism: ScramMechanism, server_nonce: String) -> ScramServer {
        ScramServer {
            mechanism,
            server_nonce,
            state: ServerState::ClientFirst,
        }
    }

    /// Answers a client-first message with a server-first one.
    fn client_first(&self, message: &[u8], creds: &dyn Credentials) -> Result<Pending, AuthError> {
        let first = parse_client_first(message_text(message)?)?;
        let found = creds.scram(&first.user, self.mechanism);
        let known = found.is_some();
        let credential = found.unwrap_or_else(|| fake_credential(self.mechanism, &first.user));
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        Ok(Pending {
            user: first.user,
            known,
            credential,
            gs2_header: first.gs2_header.to_owned(),
            client_first_bare: first.bare.to_owned(),
            server_first,
            nonce,
        })
    }

    /// Checks a client-final message's proof; answers the server-final.
    fn client_final(&self, pending: &Pending, message: &[u8]) -> Result<Step, AuthError> {
        let fin = parse_client_final(message_text(message)?)?;
        check_channel_binding(fin.channel_binding, &pending.gs2_header)?;
        // Kafka's rule: the nonce ends with the exchange's (client's then
        // server's). librdkafka up to 2.x sends its client nonce once more
        // in front of it, and Kafka accepts that; the proof covers the
        // message as sent.
        if !fin.nonce.ends_with(&pending.nonce) {
            return Err(AuthError::new(
                AuthFailure::BadCredentials,
                "SCRAM client-final nonce does not match the exchange's",
            ));
        }
        let proof = decode_base64(fin.proof)?;
        if proof.len() != hash_len(self.mechanism) {
            return Err(malformed("SCRAM proof has the wrong length"));
        }
        let auth_message = format!(
            "{},{},{}",
            pending.client_first_bare, pending.server_first, fin.without_proof
        );
        let proof_ok = proof_matches(
            self.mechanism,
            &pending.credential,
            &proof,
            auth_message.as_bytes(),
        );
        if !pending.known {
            return Err(AuthError::new(
                AuthFailure::UnknownUser,
                format!("no {} credential for the user", self.mechanism.name()),
            ));
        }
        if !proof_ok {
            return Err(AuthError::new(
                AuthFailure::BadCredentials,
                "SCRAM proof does not match",
            ));
        }
        let signature = hmac_of(
            self.mechanism,
            &pending.credential.server_key,
            auth_message.as_bytes(),
        );
        Ok(Step::Done {
            user: pending.user.clone(),
            reply: format!("v={}", BASE64.encode(signature)).into_bytes(),
        })
    }
}

impl Exchange for ScramServer {
    fn step(&mut self, client: &[u8], creds: &dyn Credentials) -> Result<Step, AuthError> {
        // The exchange has ended unless a step succeeds and says otherwise.
        match std::mem::replace(&mut self.state, ServerState::Ended) {
            ServerState::ClientFirst => {
                let pending = self.client_first(client, creds)?;
                let reply = pending.server_first.clone().into_bytes();
                self.state = ServerState::ClientFinal(Box::new(pending));
                Ok(Step::Challenge(reply))
            }
            ServerState::ClientFinal(pending) => self.client_final(&pending, client),
            ServerState::Ended => Err(out_of_order()),
        }
    }
}

impl fmt::Debug for ScramServer {
    /// Names the mechanism and the step; never the credential.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            ServerState::ClientFirst => "client-first",
            ServerState::ClientFinal(_) => "client-final",
            ServerState::Ended => "ended",
        };
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism.name())
            .field("awaiting", &state)
            .finish_non_exhaustive()
    }
}

/// The key fake credentials are derived from: random, one per process, so
/// that an unknown user's salt is the same on every attempt (as a real
/// one's is) but cannot be computed from outside.
static FAKE_KEY: LazyLock<hmac::Key> =
    LazyLock::new(|| hmac::Key::new(hmac::HMAC_SHA512, &random_bytes::<64>()));

/// A credential for a user that has none, derived from the name: the
/// server-first message then looks like a real user's.
fn fake_credential(mech: ScramMechanism, user: &str) -> ScramCredential {
    let derive = |purpose: &str, len: usize| {
        let mut ctx = hmac::Context::with_key(&FAKE_KEY);
        for part in [purpose, mech.name(), user] {
            ctx.update(part.as_bytes());
            ctx.update(&[0]);
        }
        let tag = ctx.sign();
        tag.as_ref()[..len].to_vec()
    };
    ScramCredential {
        salt: derive("salt", SALT_LEN),
        stored_key: derive("stored key", hash_len(mech)),
        server_key: derive("server key", hash_len(mech)),
        iterations: UNKNOWN_USER_ITERATIONS,
    }
}

/// The parts of a client-final message.
struct ClientFinal<'a> {
    channel_binding: &'a str,
    nonce: &'a str,
    proof: &'a str,
    /// The message up to the proof, part of the AuthMessage.
    without_proof: &'a str,
}

/// Parses `c=…,r=…[,extensions],p=…`.
fn parse_client_final(text: &str) -> Result<ClientFinal<'_>, AuthError> {
    let (without_proof, last) = text
        .rsplit_once(',')
        .ok_or_else(|| malformed("SCRAM client-final lacks a proof"))?;
    let proof = required(Some(last), 'p')?;
    let mut fields = without_proof.split(',');
    let channel_binding = required(fields.next(), 'c')?;
    let nonce = required(fields.next(), 'r')?;
    for field in fields {
        extension(field)?;
    }
    Ok(ClientFinal {
        channel_binding,
        nonce,
        proof,
        without_proof,
    })
}

/// `c=` must be the gs2 header the client sent, in base64 (`biws` for
/// `n,,`, which is accepted whatever the header).
fn check_channel_binding(value: &str, gs2_header: &str) -> Result<(), AuthError> {
    if value == "biws" || decode_base64(value)? == gs2_header.as_bytes() {
        return Ok(());
    }
    Err(malformed(
        "SCRAM channel binding does not match the gs2 header",
    ))
}

/// Whether `proof` is the one of the credential's password:
/// H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey.
fn proof_matches(
    mech: ScramMechanism,
    cred: &ScramCredential,
    proof: &[u8],
    auth_message: &[u8],
) -> bool {
    let client_signature = hmac_of(mech, &cred.stored_key, auth_message);
    let client_key = xor(proof, &client_signature);
    same_bytes(&hash_of(mech, &client_key), &cred.stored_key)
}

// ---------------------------------------------------------------------------
// Client

enum ClientState {
    Initial,
    SentFirst { bare: String },
    SentFinal { server_signature: Vec<u8> },
    Failed,
}

/// A client's side of a SCRAM exchange: [`ScramClient::client_first`],
/// then [`ScramClient::client_final`] with the server's answer, then
/// [`ScramClient::verify_server_final`], which proves the server knew the
/// credential.
pub struct ScramClient {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    nonce: String,
    state: ClientState,
}

impl ScramClient {
    /// Whether the client-final message was sent: the server's next
    /// message is its last, for [`ScramClient::verify_server_final`].
    pub fn awaits_server_final(&self) -> bool {
        matches!(self.state, ClientState::SentFinal { .. })
    }

    /// A new exchange for `user`, with a random client nonce.
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> ScramClient {
        ScramClient::with_nonce(mechanism, user, password, random_nonce())
    }

    /// A new exchange with a chosen client nonce (for tests: printable
    /// ASCII, no comma).
    pub fn with_nonce(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        nonce: String,
    ) -> ScramClient {
        ScramClient {
            mechanism,
            user: user.to_owned(),
            password: password.to_owned(),
            nonce,
            state: ClientState::Initial,
        }
    }

    /// The client-first message, `n,,n=user,r=nonce` (starts the exchange
    /// over if called again).
    pub fn client_first(&mut self) -> Vec<u8> {
        let bare = format!("n={},r={}", encode_saslname(&self.user), self.nonce);
        let message = format!("n,,{bare}").into_bytes();
        self.state = ClientState::SentFirst { bare };
        message
    }

    /// The client-final message answering the server-first one, with the
    /// proof of the password.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, AuthError> {
        let ClientState::SentFirst { bare } =
            std::mem::replace(&mut self.state, ClientState::Failed)
        else {
            return Err(out_of_order());
        };
        let text = message_text(server_first)?;
        let first = parse_server_first(text)?;
        if first.nonce.len() <= self.nonce.len() || !first.nonce.starts_with(&self.nonce) {
            return Err(AuthError::new(
                AuthFailure::BadCredentials,
                "SCRAM server nonce does not extend the client's",
            ));
        }
        let salted = salted_password(
            self.mechanism,
            self.password.as_bytes(),
            &first.salt,
            first.iterations,
        );
        let without_proof = format!("c=biws,r={}", first.nonce);
        let auth_message = format!("{bare},{text},{without_proof}");
        let (proof, server_signature) = self.proof(&salted, auth_message.as_bytes());
        self.state = ClientState::SentFinal { server_signature };
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// The client's proof and the server signature to expect.
    fn proof(&self, salted: &[u8], auth_message: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mech = self.mechanism;
        let cred = credential_from_salted_password(mech, salted, Vec::new(), 0);
        let client_key = hmac_of(mech, salted, b"Client Key");
        let client_signature = hmac_of(mech, &cred.stored_key, auth_message);
        let proof = xor(&client_key, &client_signature);
        (proof, hmac_of(mech, &cred.server_key, auth_message))
    }

    /// Checks the server-final message: `v=` must be the server signature
    /// (the server knew the credential); `e=` is the server's refusal.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), AuthError> {
        let ClientState::SentFinal { server_signature } = &self.state else {
            return Err(out_of_order());
        };
        let text = message_text(server_final)?;
        let first = text.split(',').next().unwrap_or_default();
        if let Some(error) = attribute(first, 'e') {
            return Err(server_error(error));
        }
        let signature = decode_base64(required(Some(first), 'v')?)?;
        if !same_bytes(&signature, server_signature) {
            return Err(AuthError::new(
                AuthFailure::BadCredentials,
                "SCRAM server signature does not match",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for ScramClient {
    /// Names the mechanism and the user; never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism.name())
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// The parts of a server-first message.
struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// Parses `r=…,s=…,i=…[,extensions]`.
fn parse_server_first(text: &str) -> Result<ServerFirst<'_>, AuthError> {
    let mut fields = text.split(',');
    let first = fields.next();
    if first.is_some_and(|f| f.starts_with("m=")) {
        return Err(AuthError::new(
            AuthFailure::Unsupported,
            "SCRAM mandatory extension (m=)",
        ));
    }
    let nonce = required(first, 'r')?;
    if !valid_nonce(nonce) {
        return Err(malformed("SCRAM server nonce is not printable"));
    }
    let salt = decode_base64(required(fields.next(), 's')?)?;
    let iterations: u32 = required(fields.next(), 'i')?
        .parse()
        .map_err(|_| malformed("SCRAM iteration count is not a number"))?;
    if iterations == 0 {
        return Err(malformed("SCRAM iteration count is 0"));
    }
    if iterations > CLIENT_MAX_ITERATIONS {
        return Err(AuthError::new(
            AuthFailure::Unsupported,
            format!("SCRAM iteration count {iterations} over {CLIENT_MAX_ITERATIONS}"),
        ));
    }
    for field in fields {
        extension(field)?;
    }
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// A server's `e=` answer as an error (the value, shortened, in the
/// detail: it is the server's, and no secret).
fn server_error(value: &str) -> AuthError {
    let failure = match value {
        "unknown-user" => AuthFailure::UnknownUser,
        "invalid-encoding" => AuthFailure::Malformed,
        "extensions-not-supported"
        | "channel-bindings-dont-match"
        | "server-does-support-channel-binding"
        | "channel-binding-not-supported"
        | "unsupported-channel-binding-type" => AuthFailure::Unsupported,
        _ => AuthFailure::BadCredentials,
    };
    let shown: String = value.chars().filter(|c| !c.is_control()).take(64).collect();
    AuthError::new(failure, format!("SCRAM server refused: {shown}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;

    /// Credentials held in maps.
    #[derive(Default)]
    struct Creds {
        scram: HashMap<(String, ScramMechanism), ScramCredential>,
    }

    impl Creds {
        fn with(mut self, user: &str, mech: ScramMechanism, cred: ScramCredential) -> Creds {
            self.scram.insert((user.to_owned(), mech), cred);
            self
        }
    }

    impl Credentials for Creds {
        fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
            self.scram.get(&(user.to_owned(), mechanism)).cloned()
        }
        fn plain_password(&self, _user: &str) -> Option<String> {
            None
        }
    }

    const SHA256: ScramMechanism = ScramMechanism::Sha256;
    const SHA512: ScramMechanism = ScramMechanism::Sha512;

    // RFC 7677, section 3.
    const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_credential() -> ScramCredential {
        let salt = BASE64.decode(SALT).unwrap();
        let salted = salted_password(SHA256, b"pencil", &salt, 4096);
        credential_from_salted_password(SHA256, &salted, salt, 4096)
    }

    fn rfc_creds() -> Creds {
        Creds::default().with("user", SHA256, rfc_credential())
    }

    fn server() -> ScramServer {
        ScramServer::with_nonce(SHA256, SERVER_NONCE.to_owned())
    }

    fn challenge(step: Result<Step, AuthError>) -> String {
        match step.unwrap() {
            Step::Challenge(c) => String::from_utf8(c).unwrap(),
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    fn failure(step: Result<Step, AuthError>) -> AuthFailure {
        step.unwrap_err().failure
    }

    #[test]
    fn rfc7677_server() {
        let creds = rfc_creds();
        let mut s = server();
        assert_eq!(
            challenge(s.step(CLIENT_FIRST.as_bytes(), &creds)),
            SERVER_FIRST
        );
        let done = s.step(CLIENT_FINAL.as_bytes(), &creds).unwrap();
        assert_eq!(
            done,
            Step::Done {
                user: "user".to_owned(),
                reply: SERVER_FINAL.as_bytes().to_vec()
            }
        );
    }

    #[test]
    fn rfc7677_client() {
        let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", CLIENT_NONCE.to_owned());
        assert_eq!(c.client_first(), CLIENT_FIRST.as_bytes());
        let fin = c.client_final(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(fin).unwrap(), CLIENT_FINAL);
        c.verify_server_final(SERVER_FINAL.as_bytes()).unwrap();
        let wrong = "v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
        let err = c.verify_server_final(wrong.as_bytes()).unwrap_err();
        assert_eq!(err.failure, AuthFailure::BadCredentials);
    }

    /// SCRAM-SHA-512 against values computed apart (Python's hashlib and
    /// hmac); the fuzz target's seed corpus holds the same exchange.
    #[test]
    fn sha512_known_answer() {
        let salt = b"floe-fuzz-salt!!".to_vec();
        let salted = salted_password(SHA512, b"secret", &salt, 64);
        let creds = Creds::default().with(
            "alice",
            SHA512,
            credential_from_salted_password(SHA512, &salted, salt, 64),
        );
        let server_first = "r=cnonce512fuzz,s=ZmxvZS1mdXp6LXNhbHQhIQ==,i=64";
        let client_final = "c=biws,r=cnonce512fuzz,p=f+msEfHaobTr8ocwIhnIwkaN4IsBiuCg9uqhJkhts\
                            lW6NJ2whPx/7mF4CpAWaNOSIlRU5V4RvUojytWA/5BUyg==";
        let server_final = "v=MxspIbJ+ec1ry+qd4Pe42yszXkGf9mdMC/tGg0KroG+FbDwluGDAzdyCVdz4pSkj\
                            +GX6IE6jtKj6OAPLjmHA/g==";

        let mut s = ScramServer::with_nonce(SHA512, "fuzz".to_owned());
        assert_eq!(
            challenge(s.step(b"n,,n=alice,r=cnonce512", &creds)),
            server_first
        );
        let Step::Done { user, reply } = s.step(client_final.as_bytes(), &creds).unwrap() else {
            panic!("server-final expected");
        };
        assert_eq!(
            (user.as_str(), reply),
            ("alice", server_final.as_bytes().to_vec())
        );

        let mut c = ScramClient::with_nonce(SHA512, "alice", "secret", "cnonce512".to_owned());
        assert_eq!(c.client_first(), b"n,,n=alice,r=cnonce512");
        let fin = c.client_final(server_first.as_bytes()).unwrap();
        assert_eq!(fin, client_final.as_bytes());
        c.verify_server_final(server_final.as_bytes()).unwrap();
    }

    #[test]
    fn verify_password_against_credential() {
        let cred = rfc_credential();
        assert!(verify_password(SHA256, &cred, b"pencil"));
        assert!(!verify_password(SHA256, &cred, b"pencil "));
        assert!(!verify_password(SHA512, &cred, b"pencil"));
        let zero = ScramCredential {
            iterations: 0,
            ..cred
        };
        assert!(!verify_password(SHA256, &zero, b"pencil"));
    }

    #[test]
    fn new_credential_is_salted_and_verifies() {
        let a = new_credential(SHA512, "secret", 4096);
        let b = new_credential(SHA512, "secret", 4096);
        assert_eq!(a.salt.len(), 32);
        assert_eq!(a.stored_key.len(), 64);
        assert_eq!(a.server_key.len(), 64);
        assert_eq!(a.iterations, 4096);
        assert_ne!(a.salt, b.salt);
        assert!(verify_password(SHA512, &a, b"secret"));
        assert!(!verify_password(SHA512, &a, b"Secret"));
    }

    /// A whole exchange between a client and a server.
    fn round_trip(
        mech: ScramMechanism,
        creds: &Creds,
        user: &str,
        password: &str,
    ) -> Result<String, AuthError> {
        let mut c = ScramClient::new(mech, user, password);
        let mut s = ScramServer::new(mech);
        let Step::Challenge(first) = s.step(&c.client_first(), creds)? else {
            panic!("server-first expected");
        };
        let fin = c.client_final(&first)?;
        let Step::Done { user, reply } = s.step(&fin, creds)? else {
            panic!("server-final expected");
        };
        c.verify_server_final(&reply)?;
        Ok(user)
    }

    #[test]
    fn sha512_round_trip() {
        let creds = Creds::default().with("alice", SHA512, new_credential(SHA512, "s3cr3t", 4096));
        assert_eq!(
            round_trip(SHA512, &creds, "alice", "s3cr3t").unwrap(),
            "alice"
        );
        // The credential is per mechanism.
        let err = round_trip(SHA256, &creds, "alice", "s3cr3t").unwrap_err();
        assert_eq!(err.failure, AuthFailure::UnknownUser);
    }

    #[test]
    fn wrong_password() {
        let creds = Creds::default().with("alice", SHA512, new_credential(SHA512, "s3cr3t", 4096));
        let err = round_trip(SHA512, &creds, "alice", "guess").unwrap_err();
        assert_eq!(err.failure, AuthFailure::BadCredentials);
        assert!(!err.detail.contains("guess"));
        let err = round_trip(SHA512, &creds, "alice", "").unwrap_err();
        assert_eq!(err.failure, AuthFailure::BadCredentials);
    }

    #[test]
    fn unknown_user_fails_at_final_message() {
        let creds = rfc_creds();
        let first = |user: &str| {
            let mut s = server();
            challenge(s.step(format!("n,,n={user},r=abc").as_bytes(), &creds))
        };
        let answer = first("nobody");
        assert!(answer.starts_with(&format!("r=abc{SERVER_NONCE},s=")));
        assert!(answer.ends_with(",i=4096"));
        // The same fake salt on every attempt, another for another name.
        assert_eq!(answer, first("nobody"));
        assert_ne!(answer, first("somebody"));

        let mut c = ScramClient::with_nonce(SHA256, "nobody", "pencil", "abc".to_owned());
        let mut s = server();
        let server_first = challenge(s.step(&c.client_first(), &creds));
        let fin = c.client_final(server_first.as_bytes()).unwrap();
        assert_eq!(failure(s.step(&fin, &creds)), AuthFailure::UnknownUser);
        assert_eq!(failure(s.step(&fin, &creds)), AuthFailure::OutOfOrder);
    }

    #[test]
    fn saslname_escapes() {
        assert_eq!(decode_saslname("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(decode_saslname("=3D=2C").as_deref(), Some("=,"));
        for bad in ["", "a=", "a=2", "a=2c", "a=41", "a=3D=", "a\0b", "=é"] {
            assert_eq!(decode_saslname(bad), None, "{bad:?}");
        }
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");

        let user = "o=u,x";
        let creds = Creds::default().with(user, SHA256, new_credential(SHA256, "pw", 4096));
        assert_eq!(round_trip(SHA256, &creds, user, "pw").unwrap(), user);
        let mut s = server();
        let sent = b"n,,n=o=3Du=2Cx,r=abc";
        assert!(challenge(s.step(sent, &creds)).starts_with("r=abc"));
        let mut s = server();
        assert_eq!(
            failure(s.step(b"n,,n=o=u,r=abc", &creds)),
            AuthFailure::Malformed
        );
    }

    #[test]
    fn client_first_refusals() {
        let creds = rfc_creds();
        let cases: &[(&[u8], AuthFailure)] = &[
            (b"p=tls-unique,,n=user,r=abc", AuthFailure::Unsupported),
            (b"n,a=admin,n=user,r=abc", AuthFailure::Unsupported),
            (b"n,,n=user,r=abc,tokenauth=true", AuthFailure::Unsupported),
            (b"n,,m=x,n=user,r=abc", AuthFailure::Unsupported),
            (b"x,,n=user,r=abc", AuthFailure::Malformed),
            (b"n,,n=user", AuthFailure::Malformed),
            (b"n,,n=user,r=", AuthFailure::Malformed),
            (b"n,,n=user,r=a b", AuthFailure::Malformed),
            (b"n,,n=,r=abc", AuthFailure::Malformed),
            (b"n,,r=abc,n=user", AuthFailure::Malformed),
            (b"n,,n=user,r=abc,=x", AuthFailure::Malformed),
            (b"n,b=user,n=user,r=abc", AuthFailure::Malformed),
            (b"n,,n=us\xffer,r=abc", AuthFailure::Malformed),
            (b"n", AuthFailure::Malformed),
            (b"", AuthFailure::Malformed),
        ];
        for (message, expected) in cases {
            let mut s = server();
            let got = failure(s.step(message, &creds));
            assert_eq!(got, *expected, "{}", String::from_utf8_lossy(message));
            assert_eq!(
                failure(s.step(CLIENT_FIRST.as_bytes(), &creds)),
                AuthFailure::OutOfOrder
            );
        }
        let mut long = b"n,,n=user,r=".to_vec();
        long.resize(MAX_MESSAGE_LEN + 1, b'a');
        assert_eq!(
            failure(server().step(&long, &creds)),
            AuthFailure::Malformed
        );
    }

    #[test]
    fn client_first_accepted_variants() {
        let creds = rfc_creds();
        for message in [
            "y,,n=user,r=abc",
            "n,a=user,n=user,r=abc",
            "n,,n=user,r=abc,tokenauth=false,foo=bar",
        ] {
            let mut s = server();
            assert!(challenge(s.step(message.as_bytes(), &creds)).starts_with("r=abc%"));
        }
    }

    /// The RFC exchange up to the client-final, whose message is `fin`.
    fn rfc_final(fin: &str) -> Result<Step, AuthError> {
        let creds = rfc_creds();
        let mut s = server();
        challenge(s.step(CLIENT_FIRST.as_bytes(), &creds));
        s.step(fin.as_bytes(), &creds)
    }

    #[test]
    fn nonce_mismatch() {
        let fin = CLIENT_FINAL.replace("NlF$k0", "NlF$k1");
        assert_eq!(failure(rfc_final(&fin)), AuthFailure::BadCredentials);
        let fin = CLIENT_FINAL.replace(
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            "r=rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(failure(rfc_final(&fin)), AuthFailure::BadCredentials);

        // The client refuses a server nonce that does not extend its own.
        let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", CLIENT_NONCE.to_owned());
        c.client_first();
        let err = c
            .client_final(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap_err();
        assert_eq!(err.failure, AuthFailure::BadCredentials);
        let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", CLIENT_NONCE.to_owned());
        c.client_first();
        let same = format!("r={CLIENT_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        assert!(c.client_final(same.as_bytes()).is_err());
    }

    #[test]
    fn the_nonce_of_librdkafka_2_0_with_its_client_nonce_twice_is_accepted() {
        // librdkafka up to 2.x writes r= as its client nonce followed by the
        // whole server nonce (which starts with the client nonce); Kafka
        // accepts a nonce that ends with the exchange's.
        let creds = rfc_creds();
        let mut s = server();
        challenge(s.step(CLIENT_FIRST.as_bytes(), &creds));
        let nonce = format!(
            "rOprNGfwEbeRWgbNEkqO{}",
            "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
        );
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{SERVER_FIRST},{without_proof}", &CLIENT_FIRST[3..]);
        let salted = salted_password(
            SHA256,
            b"pencil",
            &BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        );
        let client_key = hmac_of(SHA256, &salted, b"Client Key");
        let signature = hmac_of(SHA256, &hash_of(SHA256, &client_key), auth.as_bytes());
        let proof = BASE64.encode(xor(&client_key, &signature));
        let fin = format!("{without_proof},p={proof}");
        match s.step(fin.as_bytes(), &creds).unwrap() {
            Step::Done { user, .. } => assert_eq!(user, "user"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn proof_of_wrong_length() {
        let short =
            CLIENT_FINAL.replace("p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "p=dHzb");
        assert_eq!(failure(rfc_final(&short)), AuthFailure::Malformed);
        let long = short.replace("p=dHzb", &format!("p={}", BASE64.encode([7u8; 33])));
        assert_eq!(failure(rfc_final(&long)), AuthFailure::Malformed);
        let not_base64 = CLIENT_FINAL.replace("p=dHzb", "p=*Hzb");
        assert_eq!(failure(rfc_final(&not_base64)), AuthFailure::Malformed);
    }

    #[test]
    fn client_final_refusals() {
        let nonce = format!("{CLIENT_NONCE}{SERVER_NONCE}");
        let proof = "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        // Base64 of "y,,": the wrong header for this exchange.
        let cases = [
            (format!("c=eSws,r={nonce},{proof}"), AuthFailure::Malformed),
            (format!("c=b!ws,r={nonce},{proof}"), AuthFailure::Malformed),
            (format!("r={nonce},c=biws,{proof}"), AuthFailure::Malformed),
            (format!("c=biws,r={nonce}"), AuthFailure::Malformed),
            (format!("c=biws,{proof}"), AuthFailure::Malformed),
            (
                format!("c=biws,r={nonce},{proof},x=y"),
                AuthFailure::Malformed,
            ),
            ("".to_owned(), AuthFailure::Malformed),
            // A flipped proof bit.
            (
                format!("c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVU="),
                AuthFailure::BadCredentials,
            ),
            // An extension changes the AuthMessage, so the proof.
            (
                format!("c=biws,r={nonce},x=y,{proof}"),
                AuthFailure::BadCredentials,
            ),
        ];
        for (fin, expected) in cases {
            assert_eq!(failure(rfc_final(&fin)), expected, "{fin}");
        }
        // c= may also carry the header itself (here "n,,", so "biws").
        let creds = rfc_creds();
        let mut s = server();
        let server_first = challenge(s.step(b"n,a=user,n=user,r=abc", &creds));
        let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", "abc".to_owned());
        c.client_first();
        let fin = String::from_utf8(c.client_final(server_first.as_bytes()).unwrap()).unwrap();
        let header = BASE64.encode("n,a=user,");
        let fin = fin.replacen("c=biws", &format!("c={header}"), 1);
        // The client's proof covered c=biws, so this one fails on the proof,
        // not on the channel binding.
        assert_eq!(
            failure(s.step(fin.as_bytes(), &creds)),
            AuthFailure::BadCredentials
        );
    }

    #[test]
    fn messages_after_done() {
        let creds = rfc_creds();
        let mut s = server();
        challenge(s.step(CLIENT_FIRST.as_bytes(), &creds));
        assert!(matches!(
            s.step(CLIENT_FINAL.as_bytes(), &creds),
            Ok(Step::Done { .. })
        ));
        for message in [CLIENT_FIRST, CLIENT_FINAL, ""] {
            assert_eq!(
                failure(s.step(message.as_bytes(), &creds)),
                AuthFailure::OutOfOrder
            );
        }
        // And after a failure.
        let mut s = server();
        assert_eq!(failure(s.step(b"junk", &creds)), AuthFailure::Malformed);
        assert_eq!(
            failure(s.step(CLIENT_FIRST.as_bytes(), &creds)),
            AuthFailure::OutOfOrder
        );
    }

    #[test]
    fn client_out_of_order_and_server_refusals() {
        let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", CLIENT_NONCE.to_owned());
        let err = c.client_final(SERVER_FIRST.as_bytes()).unwrap_err();
        assert_eq!(err.failure, AuthFailure::OutOfOrder);
        assert_eq!(
            c.verify_server_final(SERVER_FINAL.as_bytes())
                .unwrap_err()
                .failure,
            AuthFailure::OutOfOrder
        );
        c.client_first();
        c.client_final(SERVER_FIRST.as_bytes()).unwrap();
        let err = c.verify_server_final(b"e=invalid-proof").unwrap_err();
        assert_eq!(err.failure, AuthFailure::BadCredentials);
        assert!(err.detail.contains("invalid-proof"));
        let err = c.verify_server_final(b"e=unknown-user").unwrap_err();
        assert_eq!(err.failure, AuthFailure::UnknownUser);
        assert!(c.verify_server_final(b"x=1").is_err());
        assert!(c.verify_server_final(b"").is_err());
        assert!(c.verify_server_final(b"v=!!").is_err());
    }

    #[test]
    fn client_refuses_bad_server_first() {
        let n = format!("{CLIENT_NONCE}x");
        let cases = [
            (format!("r={n},s={SALT},i=0"), AuthFailure::Malformed),
            (format!("r={n},s={SALT},i=-1"), AuthFailure::Malformed),
            (
                format!("r={n},s={SALT},i=1000001"),
                AuthFailure::Unsupported,
            ),
            (format!("r={n},s=!!,i=4096"), AuthFailure::Malformed),
            (format!("r={n},i=4096"), AuthFailure::Malformed),
            (
                format!("m=x,r={n},s={SALT},i=4096"),
                AuthFailure::Unsupported,
            ),
            (format!("s={SALT},r={n},i=4096"), AuthFailure::Malformed),
            ("".to_owned(), AuthFailure::Malformed),
        ];
        for (first, expected) in cases {
            let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", CLIENT_NONCE.to_owned());
            c.client_first();
            assert_eq!(
                c.client_final(first.as_bytes()).unwrap_err().failure,
                expected,
                "{first}"
            );
            // A failed client does not go on.
            let again = c.client_final(SERVER_FIRST.as_bytes()).unwrap_err();
            assert_eq!(again.failure, AuthFailure::OutOfOrder);
        }
        // Few iterations and an empty salt are the server's business.
        let mut c = ScramClient::with_nonce(SHA256, "user", "pencil", CLIENT_NONCE.to_owned());
        c.client_first();
        assert!(c.client_final(format!("r={n},s=,i=1").as_bytes()).is_ok());
    }

    #[test]
    fn nonces_are_random_and_printable() {
        let a = random_nonce();
        assert!(a.len() >= 32);
        assert!(valid_nonce(&a));
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, random_nonce());
    }

    #[test]
    fn debug_shows_no_secret() {
        let c = ScramClient::new(SHA256, "user", "pencil");
        assert!(!format!("{c:?}").contains("pencil"));
        let creds = rfc_creds();
        let mut s = server();
        challenge(s.step(CLIENT_FIRST.as_bytes(), &creds));
        let shown = format!("{s:?}");
        assert!(shown.contains("client-final"), "{shown}");
        assert!(!shown.contains("stored"), "{shown}");
    }
}
