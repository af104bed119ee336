use super::*;
use floe_storage::delayed::read_delayed;
use floe_storage::records::{BatchBuilder, RecordSpec};

const NOW: u64 = 1_700_000_000_000;

fn rules() -> HoldRules {
    HoldRules {
        retention_ms: Some(86_400_000),
        max_batch: 1 << 20,
    }
}

fn rec(value: &str, headers: &[(&str, &str)]) -> RecordSpec {
    let mut r = RecordSpec::new(Some(b"key".to_vec()), Some(value.as_bytes().to_vec()), 0);
    r.headers = headers
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
        .collect();
    r
}

fn batch(records: Vec<RecordSpec>, transactional: bool, codec: Compression) -> Bytes {
    let mut b = BatchBuilder::new(0, NOW as i64).producer(9, 2, 40, transactional);
    for r in records {
        b.push(r);
    }
    b.build(codec).unwrap()
}

fn later(ms: u64) -> String {
    (NOW + ms).to_string()
}

#[test]
fn a_batch_with_a_record_due_later_becomes_a_delayed_batch_with_its_producer() {
    for codec in [Compression::None, Compression::Lz4] {
        let due = later(60_000);
        let plain = batch(vec![rec("a", &[])], false, Compression::None);
        let delayed = batch(
            vec![
                rec("now", &[]),
                rec("later", &[("floe-deliver-at", &due), ("x", "y")]),
            ],
            false,
            codec,
        );
        let mut req = plain.to_vec();
        req.extend_from_slice(&delayed);
        let out = hold(&req, NOW, rules()).unwrap().expect("held");
        // The plain batch is untouched, the other replaced.
        assert_eq!(&out[..plain.len()], &plain[..]);
        let held = out.slice(plain.len()..);
        let view = BatchView::parse(&held, usize::MAX).unwrap();
        view.verify_crc().unwrap();
        assert!(view.is_control() && !view.is_transactional());
        assert_eq!(
            (
                view.producer_id(),
                view.producer_epoch(),
                view.base_sequence()
            ),
            (9, 2, 40)
        );
        assert_eq!(view.last_offset_delta(), 1, "one record per offset");
        let records = read_delayed(&held, DecodeLimits::DEFAULT).unwrap().unwrap();
        assert_eq!(records[0].1.due_ms, 0, "the record due already");
        assert_eq!(records[1].1.due_ms, NOW + 60_000);
        assert_eq!(records[1].1.value.as_deref(), Some(&b"later"[..]));
        assert_eq!(records[1].1.key.as_deref(), Some(&b"key"[..]));
        assert_eq!(records[1].1.headers.len(), 2);
        assert_eq!(records[1].1.timestamp, NOW as i64);
    }
}

#[test]
fn records_due_now_or_malformed_are_not_held() {
    let soon = later(HOLD_MARGIN_MS);
    let req = batch(
        vec![
            rec("a", &[]),
            rec("b", &[("floe-deliver-at", &soon)]),
            rec("c", &[("floe-deliver-at", "-5")]),
            rec("d", &[("floe-delay-ms", "0")]),
        ],
        false,
        Compression::None,
    );
    assert_eq!(hold(&req, NOW, rules()).unwrap(), None);
    assert!(!may_hold(&batch(
        vec![rec("a", &[])],
        false,
        Compression::None
    )));
    assert!(may_hold(&req));
}

#[test]
fn a_delay_relative_to_the_timestamp_is_held_too() {
    let req = batch(
        vec![rec("a", &[("floe-delay-ms", "30000")])],
        false,
        Compression::None,
    );
    let out = hold(&req, NOW, rules()).unwrap().expect("held");
    let records = read_delayed(&out, DecodeLimits::DEFAULT).unwrap().unwrap();
    assert_eq!(records[0].1.due_ms, NOW + 30_000);
}

#[test]
fn a_transactional_batch_with_a_delayed_record_is_refused() {
    let due = later(60_000);
    let req = batch(
        vec![rec("a", &[("floe-deliver-at", &due)])],
        true,
        Compression::None,
    );
    let e = hold(&req, NOW, rules()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRecord);
    assert!(e.to_string().contains("transaction"), "{e}");
    // Without a delay, a transactional batch goes on as it is.
    let plain = batch(vec![rec("a", &[])], true, Compression::None);
    assert_eq!(hold(&plain, NOW, rules()).unwrap(), None);
}

#[test]
fn a_due_time_past_retention_and_the_brokers_own_header_are_refused() {
    let due = later(86_400_000 + 1);
    let req = batch(
        vec![rec("a", &[("floe-deliver-at", &due)])],
        false,
        Compression::None,
    );
    let e = hold(&req, NOW, rules()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRecord);
    assert!(e.to_string().contains("retention.ms"), "{e}");
    let forever = HoldRules {
        retention_ms: None,
        ..rules()
    };
    assert!(hold(&req, NOW, forever).unwrap().is_some());
    let mut forged = BatchBuilder::new(0, NOW as i64);
    forged.push(rec("a", &[("floe-delayed-from", "1.0")]));
    let forged = forged.build(Compression::None).unwrap();
    let e = hold(&forged, NOW, rules()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRecord);
    // An idempotent producer may carry it on (recovery does not trust it).
    let copied = batch(
        vec![rec("a", &[("floe-delayed-from", "1.0")])],
        false,
        Compression::None,
    );
    assert_eq!(hold(&copied, NOW, rules()).unwrap(), None);
}

#[test]
fn a_client_control_batch_is_refused_and_a_damaged_batch_left_to_sequencing() {
    let mut c = BatchBuilder::new(0, 1).control();
    c.push(RecordSpec::new(
        Some(floe_storage::delayed::control_key().to_vec()),
        None,
        0,
    ));
    let c = c.build(Compression::None).unwrap();
    assert!(may_hold(&c));
    assert_eq!(
        hold(&c, NOW, rules()).unwrap_err().kind(),
        ErrorKind::InvalidRecord
    );
    let mut bad = batch(vec![rec("a", &[])], false, Compression::None).to_vec();
    let n = bad.len();
    bad[n - 1] ^= 1;
    assert_eq!(hold(&bad, NOW, rules()).unwrap(), None);
}
