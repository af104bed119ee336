//! The Kafka tools' flags, properties and formats, without a cluster (the
//! tools against a real `floe standalone` are in tests/test_kafka_tools.py).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use floe_client::{ConfigEntry, ConfigSource, PartitionMetadata, StartAt, TopicMetadata};

use super::pattern::Pattern;
use super::*;

fn args(s: &[&str]) -> Vec<String> {
    s.iter().map(|a| (*a).to_owned()).collect()
}

fn parsed(spec: &Spec, s: &[&str]) -> Parsed {
    parse(spec, &args(s)).unwrap()
}

fn refused(spec: &Spec, s: &[&str]) -> String {
    parse(spec, &args(s)).unwrap_err()
}

#[test]
fn flags_take_values_after_a_space_or_an_equals_sign_and_repeat() {
    let p = parsed(
        &topics::SPEC,
        &[
            "--bootstrap-server",
            "h:1",
            "--create",
            "--topic=t",
            "--config",
            "a=1",
            "--config=b=2",
        ],
    );
    assert_eq!(p.value("bootstrap-server"), Some("h:1"));
    assert!(p.has("create"));
    assert_eq!(p.value("topic"), Some("t"));
    assert_eq!(p.values("config"), ["a=1", "b=2"]);
    assert!(!p.has("delete"));
}

#[test]
fn a_unique_prefix_names_a_flag_and_an_ambiguous_one_is_refused() {
    let p = parsed(&topics::SPEC, &["--bootstrap", "h:1", "--repl", "1"]);
    assert_eq!(p.value("bootstrap-server"), Some("h:1"));
    assert_eq!(p.value("replication-factor"), Some("1"));
    // --partitions, not a prefix of anything else: exact wins.
    let p = parsed(&topics::SPEC, &["--partitions", "3"]);
    assert_eq!(p.value("partitions"), Some("3"));
    let e = refused(&topics::SPEC, &["--de"]);
    assert!(
        e.contains("ambiguous") && e.contains("--describe") && e.contains("--delete"),
        "{e}"
    );
}

#[test]
fn unknown_flags_missing_values_and_stray_words_are_named() {
    let e = refused(&topics::SPEC, &["--list", "--bogus"]);
    assert!(
        e.contains("--bogus") && e.contains("not a recognized option"),
        "{e}"
    );
    let e = refused(&topics::SPEC, &["--topic"]);
    assert!(
        e.contains("--topic") && e.contains("requires an argument"),
        "{e}"
    );
    let e = refused(&topics::SPEC, &["--list", "orders"]);
    assert!(e.contains("\"orders\""), "{e}");
    let e = refused(&topics::SPEC, &["--list=yes"]);
    assert!(e.contains("takes no value"), "{e}");
}

#[test]
fn kafka_flags_floe_does_not_support_say_so() {
    for (spec, flag) in [
        (&topics::SPEC, "--zookeeper"),
        (&configs::SPEC, "--zookeeper"),
        (&topics::SPEC, "--replica-assignment"),
        (&consumer_groups::SPEC, "--from-file"),
        (&acls::SPEC, "--authorizer-properties"),
    ] {
        let e = refused(spec, &[flag, "x"]);
        assert!(
            e.contains(flag) && e.contains("not supported by Floe"),
            "{e}"
        );
    }
}

#[test]
fn an_optional_value_is_taken_only_when_one_follows() {
    let p = parsed(
        &consumer_groups::SPEC,
        &["--list", "--state", "--bootstrap-server", "h"],
    );
    assert_eq!(p.value("state"), Some(""));
    assert_eq!(p.value("bootstrap-server"), Some("h"));
    let p = parsed(
        &consumer_groups::SPEC,
        &["--list", "--state", "Stable,Empty"],
    );
    assert_eq!(p.value("state"), Some("Stable,Empty"));
}

#[test]
fn topics_needs_exactly_one_action_and_flags_that_go_with_it() {
    let act = |s: &[&str]| topics::action(&parsed(&topics::SPEC, s));
    let e = act(&[
        "--bootstrap-server",
        "h",
        "--list",
        "--create",
        "--topic",
        "t",
    ])
    .unwrap_err();
    assert!(e.to_string().contains("exactly one action"), "{e}");
    let e = act(&["--list"]).unwrap_err();
    assert!(e.to_string().contains("--bootstrap-server"), "{e}");
    let e = act(&["--bootstrap-server", "h", "--list", "--partitions", "3"]).unwrap_err();
    assert!(e.to_string().contains("--partitions"), "{e}");
    let e = act(&["--bootstrap-server", "h", "--create"]).unwrap_err();
    assert!(e.to_string().contains("topic"), "{e}");
    let e = act(&[
        "--bootstrap-server",
        "h",
        "--create",
        "--topic",
        "t",
        "--partitions",
        "0",
    ])
    .unwrap_err();
    assert!(e.to_string().contains("greater than 0"), "{e}");
    assert_eq!(
        act(&[
            "--bootstrap-server",
            "h",
            "--create",
            "--topic",
            "t",
            "--partitions",
            "4",
            "--replication-factor",
            "3",
            "--config",
            "retention.ms=1000",
            "--if-not-exists",
        ])
        .unwrap(),
        topics::TopicsAction::Create {
            topic: "t".into(),
            partitions: 4,
            configs: vec![("retention.ms".into(), "1000".into())],
            if_not_exists: true,
        }
    );
    let e = act(&["--bootstrap-server", "h", "--alter", "--topic", "t"]).unwrap_err();
    assert!(e.to_string().contains("partitions"), "{e}");
}

#[test]
fn topic_patterns_match_whole_names_like_java_regexes() {
    let m = |p: &str, n: &str| Pattern::new(p).unwrap().matches(n);
    assert!(m("orders", "orders"));
    assert!(!m("orders", "orders-eu"));
    assert!(m("orders.*", "orders-eu"));
    assert!(m("orders.*", "orders"));
    assert!(m("test_[0-9]+", "test_42"));
    assert!(!m("test_[0-9]+", "test_"));
    assert!(m("a|b", "b"));
    assert!(m("(eu|us)-orders", "us-orders"));
    assert!(!m("(eu|us)-orders", "ap-orders"));
    assert!(m("my\\.topic", "my.topic"));
    assert!(!m("my\\.topic", "myXtopic"));
    assert!(m("[^_].*", "x_"));
    assert!(!m("[^_].*", "_x"));
    assert!(m("(a*)*b", "aaab"));
    assert!(m("colou?r", "color"));
    assert!(m("a{2}", "aa"));
    for bad in ["(a", "a)", "[a", "*a", "\\p"] {
        assert!(Pattern::new(bad).is_err(), "{bad}");
    }
}

#[test]
fn describe_lines_have_kafkas_shape() {
    let t = TopicMetadata {
        name: "t".into(),
        id: uuid::Uuid::from_bytes([
            0xe6, 0x5e, 0x88, 0x46, 0x4b, 0x36, 0x48, 0x17, 0xa2, 0x9e, 0x53, 0x5a, 0xcc, 0x34,
            0x21, 0xc2,
        ]),
        partitions: vec![PartitionMetadata {
            partition: 0,
            leader: 1,
            replicas: vec![1],
            isr: vec![1],
            error: None,
        }],
    };
    let configs = vec![
        ConfigEntry {
            name: "retention.ms".into(),
            value: Some("1000".into()),
            sensitive: false,
            source: ConfigSource::Topic,
        },
        ConfigEntry {
            name: "segment.bytes".into(),
            value: Some("1".into()),
            sensitive: false,
            source: ConfigSource::Default,
        },
    ];
    assert_eq!(
        topics::topic_line(&t, &configs),
        "Topic: t\tTopicId: 5l6IRks2SBeinlNazDQhwg\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: retention.ms=1000"
    );
    assert_eq!(
        topics::partition_line("t", &t.partitions[0]),
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A"
    );
    let leaderless = PartitionMetadata {
        leader: -1,
        ..t.partitions[0].clone()
    };
    assert!(topics::partition_line("t", &leaderless).contains("Leader: none"));
}

#[test]
fn add_config_keeps_bracketed_lists_together() {
    assert_eq!(
        configs::parse_add_config("a=1, b = [x,y] ,c=").unwrap(),
        vec![
            ("a".into(), "1".into()),
            ("b".into(), "x,y".into()),
            ("c".into(), String::new())
        ]
    );
    assert!(configs::parse_add_config("novalue").is_err());
    assert!(configs::parse_add_config("bad key=1").is_err());
}

#[test]
fn configs_entities_come_from_either_spelling() {
    let e = |s: &[&str]| configs::entity(&parsed(&configs::SPEC, s));
    assert_eq!(
        e(&["--entity-type", "topics", "--entity-name", "t"]).unwrap(),
        configs::Entity::Topic(Some("t".into()))
    );
    assert_eq!(
        e(&["--topic", "t"]).unwrap(),
        configs::Entity::Topic(Some("t".into()))
    );
    assert_eq!(
        e(&["--entity-type", "brokers", "--entity-default"]).unwrap(),
        configs::Entity::Broker(Some(String::new()))
    );
    assert_eq!(
        e(&["--entity-type", "groups"]).unwrap(),
        configs::Entity::Group(None)
    );
    assert!(e(&["--entity-type", "brokers", "--entity-name", "x"]).is_err());
    assert!(
        e(&["--entity-type", "users", "--entity-name", "x"])
            .unwrap_err()
            .to_string()
            .contains("not supported")
    );
    assert!(e(&["--topic", "t", "--entity-type", "topics"]).is_err());
    assert!(e(&[]).is_err());
}

#[test]
fn config_lines_name_their_source() {
    let c = ConfigEntry {
        name: "retention.ms".into(),
        value: Some("5".into()),
        sensitive: false,
        source: ConfigSource::Topic,
    };
    assert_eq!(
        configs::config_line(&c),
        "  retention.ms=5 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5}"
    );
}

#[test]
fn java_properties_continue_lines_and_unescape() {
    let p = parse_java_properties(
        "# comment\n! also\nsecurity.protocol = SASL_SSL\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n    username=\"alice\" \\\n    password=\"s3cr=t\";\nclient.id: tools\nkey\\ with\\ space value\n",
    );
    assert_eq!(p["security.protocol"], "SASL_SSL");
    assert_eq!(p["client.id"], "tools");
    assert_eq!(p["key with space"], "value");
    assert_eq!(
        p["sasl.jaas.config"],
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"s3cr=t\";"
    );
}

#[test]
fn jaas_logins_give_user_and_password() {
    let l = parse_jaas(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"bob\" password=\"p \\\" w\";",
    )
    .unwrap();
    assert_eq!(l.username, "bob");
    assert_eq!(l.password, "p \" w");
    let l = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=u password=p;",
    )
    .unwrap();
    assert_eq!((l.username.as_str(), l.password.as_str()), ("u", "p"));
    let e = parse_jaas("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;")
        .unwrap_err();
    assert!(e.contains("Krb5LoginModule"), "{e}");
    assert!(
        parse_jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\";"
        )
        .unwrap_err()
        .contains("password")
    );
}

#[test]
fn java_security_properties_become_librdkafka_keys() {
    let props: BTreeMap<String, String> = [
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"b\";"),
        ("ssl.truststore.location", "/etc/ca.jks.pem"),
        ("ssl.truststore.type", "PEM"),
        ("client.id", "x"),
        ("request.timeout.ms", "5000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let t = translate_java_properties(&props).unwrap();
    assert_eq!(t.rdkafka["sasl.username"], "a");
    assert_eq!(t.rdkafka["sasl.password"], "b");
    assert_eq!(t.rdkafka["ssl.ca.location"], "/etc/ca.jks.pem");
    assert_eq!(t.rdkafka["sasl.mechanism"], "SCRAM-SHA-512");
    assert_eq!(t.request_timeout_ms, Some(5000));
    assert_eq!(t.ignored, vec!["client.id".to_owned()]);
    floe_client::security::ClientSecurity::from_properties(&BTreeMap::from([
        ("security.protocol".to_owned(), "SASL_PLAINTEXT".to_owned()),
        ("sasl.username".to_owned(), "a".to_owned()),
        ("sasl.password".to_owned(), "b".to_owned()),
    ]))
    .unwrap();
}

#[test]
fn java_keystores_are_refused_with_how_to_convert_them() {
    let one = |k: &str, v: &str, extra: Option<(&str, &str)>| {
        let mut m = BTreeMap::from([(k.to_owned(), v.to_owned())]);
        if let Some((k, v)) = extra {
            m.insert(k.to_owned(), v.to_owned());
        }
        translate_java_properties(&m)
    };
    let e = one("ssl.truststore.location", "/etc/kafka/truststore.jks", None).unwrap_err();
    assert!(
        e.contains("JKS") && e.contains("ssl.truststore.type=PEM"),
        "{e}"
    );
    let e = one(
        "ssl.keystore.location",
        "/k.p12",
        Some(("ssl.keystore.type", "PKCS12")),
    )
    .unwrap_err();
    assert!(e.contains("PKCS12"), "{e}");
    assert!(one("ssl.truststore.location", "/ca.pem", None).is_ok());
    let t = one(
        "ssl.keystore.location",
        "/me.bundle",
        Some(("ssl.keystore.type", "pem")),
    )
    .unwrap();
    assert_eq!(t.rdkafka["ssl.certificate.location"], "/me.bundle");
    assert_eq!(t.rdkafka["ssl.key.location"], "/me.bundle");
    assert!(
        one("sasl.mechanism", "GSSAPI", None)
            .unwrap_err()
            .contains("GSSAPI")
    );
}

#[test]
fn reset_flags_need_one_target_and_one_scope() {
    let r = |s: &[&str]| consumer_groups::reset_args(&parsed(&consumer_groups::SPEC, s));
    assert!(r(&["--topic", "t"]).is_err());
    assert!(r(&["--to-earliest"]).is_err());
    assert!(r(&["--to-earliest", "--topic", "t", "--all-topics"]).is_err());
    assert!(r(&["--to-earliest", "--to-latest", "--topic", "t"]).is_err());
    assert!(r(&["--to-earliest", "--topic", "t", "--dry-run", "--execute"]).is_err());
    let a = r(&["--shift-by", "-2", "--topic", "t:0,1", "--execute"]).unwrap();
    assert_eq!(a.shift_by, Some(-2));
    assert!(a.execute);
    assert_eq!(a.topics[0].partitions, Some(vec![0, 1]));
    let a = r(&["--to-current", "--all-topics"]).unwrap();
    assert_eq!(a.shift_by, Some(0));
    assert!(!a.execute);
    let a = r(&["--to-datetime", "2024-05-01T12:00:00.000", "--all-topics"]).unwrap();
    assert_eq!(a.to_datetime, Some(1_714_564_800_000));
}

#[test]
fn iso_durations_read_as_java_does() {
    assert_eq!(consumer_groups::parse_iso_duration("PT15M"), Ok(900_000));
    assert_eq!(
        consumer_groups::parse_iso_duration("P1DT2H"),
        Ok(93_600_000)
    );
    assert_eq!(consumer_groups::parse_iso_duration("pt0.5s"), Ok(500));
    for bad in ["15M", "P", "PT", "PT5X", "PT-5M"] {
        assert!(consumer_groups::parse_iso_duration(bad).is_err(), "{bad}");
    }
}

#[test]
fn get_offsets_times_and_partitions() {
    assert_eq!(get_offsets::parse_time("-1").unwrap(), floe_client::LATEST);
    assert_eq!(
        get_offsets::parse_time("earliest").unwrap(),
        floe_client::EARLIEST
    );
    assert_eq!(
        get_offsets::parse_time("1700000000000").unwrap(),
        1_700_000_000_000
    );
    assert!(
        get_offsets::parse_time("-3")
            .unwrap_err()
            .to_string()
            .contains("not supported")
    );
    assert!(get_offsets::parse_time("soon").is_err());
    assert_eq!(get_offsets::parse_partitions("0, 2").unwrap(), vec![0, 2]);
    assert!(get_offsets::parse_partitions("0,x").is_err());
}

#[test]
fn delete_records_json_is_kafkas() {
    let o = delete_records::parse_offset_json(
        r#"{"partitions":[{"topic":"t","partition":0,"offset":5},{"topic":"t","partition":1,"offset":-1}],"version":1}"#,
    )
    .unwrap();
    assert_eq!(o["t"][&0], 5);
    assert_eq!(o["t"][&1], -1);
    let dup = delete_records::parse_offset_json(
        r#"{"partitions":[{"topic":"t","partition":0,"offset":5},{"topic":"t","partition":0,"offset":6}]}"#,
    )
    .unwrap_err();
    assert!(
        dup.to_string().contains("duplicate topic partitions: t-0"),
        "{dup}"
    );
    assert!(delete_records::parse_offset_json(r#"{"version":2,"partitions":[]}"#).is_err());
    assert!(
        delete_records::parse_offset_json(r#"{"version":1}"#)
            .unwrap_err()
            .to_string()
            .contains("partitions")
    );
    assert!(delete_records::parse_offset_json("not json").is_err());
    assert!(delete_records::parse_offset_json(r#"{"partitions":[{"topic":"t"}]}"#).is_err());
}

#[test]
fn console_producer_reads_keys_with_the_separator_given() {
    let s = |a: &[&str]| {
        console_producer::settings(&parsed(&console_producer::SPEC, a), &BTreeMap::new())
    };
    let k = s(&[
        "--topic",
        "t",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
    ])
    .unwrap();
    assert_eq!(k.key_separator.as_deref(), Some(":"));
    let tab = s(&["--topic", "t", "--property", "parse.key=true"]).unwrap();
    assert_eq!(tab.key_separator.as_deref(), Some("\t"));
    let plain = s(&["--topic", "t", "--property", "key.separator=:"]).unwrap();
    assert_eq!(plain.key_separator, None);
    let p = s(&[
        "--topic",
        "t",
        "--producer-property",
        "acks=1",
        "--producer-property",
        "security.protocol=SASL_PLAINTEXT",
    ])
    .unwrap();
    assert_eq!(p.acks, floe_client::Acks::Leader);
    assert!(!p.idempotent);
    assert_eq!(p.client["security.protocol"], "SASL_PLAINTEXT");
    assert!(s(&["--property", "parse.key=true"]).is_err());
    assert!(s(&["--topic", "t", "--property", "parse.headers=true"]).is_err());
}

#[test]
fn console_consumer_starts_where_kafkas_does() {
    let s = |a: &[&str]| {
        console_consumer::settings(&parsed(&console_consumer::SPEC, a), &BTreeMap::new())
    };
    assert_eq!(s(&["--topic", "t"]).unwrap().start, StartAt::End);
    assert_eq!(
        s(&["--topic", "t", "--from-beginning"]).unwrap().start,
        StartAt::Beginning
    );
    let o = s(&["--topic", "t", "--partition", "1", "--offset", "7"]).unwrap();
    assert_eq!((o.partition, o.start), (Some(1), StartAt::Offset(7)));
    assert!(s(&["--topic", "t", "--offset", "7"]).is_err());
    assert!(
        s(&[
            "--topic",
            "t",
            "--partition",
            "0",
            "--offset",
            "7",
            "--from-beginning"
        ])
        .is_err()
    );
    assert!(s(&["--topic", "t", "--group", "g", "--partition", "0"]).is_err());
    let g = s(&[
        "--topic",
        "t",
        "--consumer-property",
        "group.id=g",
        "--consumer-property",
        "auto.offset.reset=earliest",
    ])
    .unwrap();
    assert_eq!(
        (g.group.as_deref(), g.start),
        (Some("g"), StartAt::Beginning)
    );
    assert!(
        s(&[
            "--topic",
            "t",
            "--group",
            "a",
            "--consumer-property",
            "group.id=b"
        ])
        .is_err()
    );
    assert!(
        s(&["--topic", "t", "--isolation-level", "read_committed"])
            .unwrap()
            .read_committed
    );
    assert!(
        s(&[
            "--topic",
            "t",
            "--value-deserializer",
            "org.apache.kafka.common.serialization.LongDeserializer"
        ])
        .is_err()
    );
}

#[test]
fn records_print_as_the_default_formatter_prints_them() {
    let rec = floe_client::Record {
        offset: 7,
        timestamp: 1000,
        key: Some(bytes::Bytes::from_static(b"k")),
        value: None,
        headers: Vec::new(),
    };
    let line = |f: &console_consumer::Format| {
        let mut out = Vec::new();
        console_consumer::format_record(&mut out, f, 2, &rec);
        String::from_utf8(out).unwrap()
    };
    let mut f = console_consumer::Format::default();
    assert_eq!(line(&f), "null\n");
    f.key = true;
    f.key_separator = ":".into();
    assert_eq!(line(&f), "k:null\n");
    f.timestamp = true;
    f.partition = true;
    f.offset = true;
    f.headers = true;
    f.key_separator = "\t".into();
    assert_eq!(
        line(&f),
        "CreateTime:1000\tPartition:2\tOffset:7\tNO_HEADERS\tk\tnull\n"
    );
}

#[test]
fn acls_flags_make_kafkas_resources_and_entries() {
    use floe_metadata::acl::{Operation as O, PatternFilter, Permission, ResourceType as R};
    let p = parsed(
        &acls::SPEC,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--producer",
            "--topic",
            "t",
            "--idempotent",
        ],
    );
    let m = acls::resource_entries(&p, PatternFilter::Literal).unwrap();
    let ops: Vec<(R, O)> = m
        .iter()
        .flat_map(|(r, es)| es.iter().map(move |e| (r.resource_type, e.operation)))
        .collect();
    assert_eq!(
        ops,
        vec![
            (R::Topic, O::Write),
            (R::Topic, O::Create),
            (R::Topic, O::Describe),
            (R::Cluster, O::IdempotentWrite),
        ]
    );
    let p = parsed(
        &acls::SPEC,
        &[
            "--add",
            "--deny-principal",
            "User:bob",
            "--deny-host",
            "10.0.0.1",
            "--operation",
            "Read",
            "--group",
            "g",
        ],
    );
    let m = acls::resource_entries(&p, PatternFilter::Prefixed).unwrap();
    let (r, es) = m.iter().next().unwrap();
    assert_eq!(
        r.to_string(),
        "ResourcePattern(resourceType=GROUP, name=g, patternType=PREFIXED)"
    );
    let e = es.iter().next().unwrap();
    assert_eq!(e.permission, Permission::Deny);
    assert_eq!(
        e.to_string(),
        "(principal=User:bob, host=10.0.0.1, operation=READ, permissionType=DENY)"
    );
    let bad = parsed(
        &acls::SPEC,
        &[
            "--add",
            "--allow-principal",
            "User:a",
            "--operation",
            "Write",
            "--group",
            "g",
        ],
    );
    assert!(
        acls::resource_entries(&bad, PatternFilter::Literal)
            .unwrap_err()
            .to_string()
            .contains("only supports")
    );
    let none = parsed(&acls::SPEC, &["--add", "--allow-principal", "User:a"]);
    assert!(acls::resource_entries(&none, PatternFilter::Literal).is_err());
    let no_type = parsed(
        &acls::SPEC,
        &["--add", "--allow-principal", "alice", "--topic", "t"],
    );
    assert!(acls::resource_entries(&no_type, PatternFilter::Literal).is_err());
}
