//! Fuzzes what a Kafka listener's TLS path reads from a client before any
//! Kafka frame: arbitrary bytes as the client's side of a handshake with
//! the listener's own configuration (client certificates requested), and
//! as a client certificate whose subject becomes a principal; and
//! arbitrary text as `--ssl-principal-mapping-rules`.

#![no_main]

use std::sync::{Arc, OnceLock};

use floe_proxy::principal::{PrincipalRules, subject_of};
use floe_proxy::tls::{ClientAuth, TlsSettings};
use libfuzzer_sys::fuzz_target;

/// The listener's configuration, made once: a CA, a server certificate
/// it signed, client certificates requested.
fn config() -> Arc<rustls::ServerConfig> {
    static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("floe-fuzz-tls-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca_key = rcgen::KeyPair::generate().expect("key");
            let ca_cert = ca.self_signed(&ca_key).expect("ca");
            let issuer = rcgen::Issuer::new(ca, ca_key);
            let leaf =
                rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
            let key = rcgen::KeyPair::generate().expect("key");
            let cert = leaf.signed_by(&key, &issuer).expect("leaf");
            let write = |name: &str, pem: String| {
                let p = dir.join(name);
                std::fs::write(&p, pem).expect("write");
                p
            };
            let settings = TlsSettings {
                cert_file: write("server.pem", cert.pem()),
                key_file: write("server.key", key.serialize_pem()),
                client_ca_file: Some(write("ca.pem", ca_cert.pem())),
                client_auth: ClientAuth::Requested,
                principal_rules: PrincipalRules::default(),
            };
            Arc::new(
                settings
                    .load()
                    .expect("the fuzz target's TLS settings load"),
            )
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    // The client's bytes, fed in pieces as a socket might deliver them.
    if let Ok(mut conn) = rustls::ServerConnection::new(config()) {
        for piece in data.chunks(257) {
            let mut rd = piece;
            while !rd.is_empty() {
                match conn.read_tls(&mut rd) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if conn.process_new_packets().is_err() {
                    return;
                }
            }
            // What the server would send back.
            let mut out = Vec::new();
            while conn.wants_write() {
                if conn.write_tls(&mut out).is_err() {
                    break;
                }
            }
        }
    }
    // The same bytes as a client certificate.
    if let Some(subject) = subject_of(data) {
        let _ = PrincipalRules::default().map(&subject);
    }
    // And as mapping rules, applied to a subject.
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(rules) = PrincipalRules::parse(text)
    {
        let _ = rules.map("CN=alice,OU=eng,O=Example");
    }
});
