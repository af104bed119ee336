//! What signing and checking an internal request with the cluster secret
//! costs, by body size (a broker RPC produce carries up to a few MiB).
//!
//! `cargo bench -p floe-metadata --bench cluster_auth`

use std::time::SystemTime;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe_metadata::cluster_auth::ClusterSecret;

fn sign_and_verify(c: &mut Criterion) {
    let secret = match ClusterSecret::parse("bench-cluster-secret-0123456789") {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let mut g = c.benchmark_group("cluster_auth");
    for size in [0usize, 4 << 10, 64 << 10, 1 << 20] {
        let body = vec![7u8; size];
        g.throughput(Throughput::Bytes(size.max(1) as u64));
        g.bench_with_input(BenchmarkId::new("sign", size), &body, |b, body| {
            b.iter(|| secret.sign("POST", "/v1/produce", body, SystemTime::now()))
        });
        g.bench_with_input(
            BenchmarkId::new("sign_and_verify", size),
            &body,
            |b, body| {
                b.iter(|| {
                    let now = SystemTime::now();
                    let h = secret.sign("POST", "/v1/produce", body, now);
                    secret.verify(Some(&h), "POST", "/v1/produce", body, now)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, sign_and_verify);
criterion_main!(benches);
