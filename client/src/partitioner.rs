//! Kafka's default partitioner for keyed records: murmur2 of the key, sign
//! bit dropped, modulo the partition count — so that a key lands on the
//! same partition as with the Java client (and librdkafka's
//! `murmur2_random`).

/// Kafka's `Utils.murmur2`: MurmurHash2 (32-bit) with seed `0x9747b28c`,
/// the hash its default partitioner applies to record keys.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka mixes in the length as a Java int.
    let mut h = SEED ^ (data.len() as u32);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: the sign bit dropped (not the value negated).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Kafka's default partitioner gives a keyed record:
/// `toPositive(murmur2(key)) % partitions`. A count below 1 counts as 1.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    to_positive(murmur2(key)) % partitions.max(1)
}

/// The partition of a record: `fixed` if given; else, for a key,
/// [`partition_for_key`]; else `round_robin`.
pub fn choose_partition(
    key: Option<&[u8]>,
    fixed: Option<i32>,
    partitions: i32,
    round_robin: i32,
) -> i32 {
    match (fixed, key) {
        (Some(p), _) => p,
        (None, Some(key)) => partition_for_key(key, partitions),
        (None, None) => round_robin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_murmur2() {
        // Values from Kafka's own tests of `Utils.murmur2` (UtilsTest).
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1_486_304_829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58_897_971
        );
        assert_eq!(murmur2(b"abc"), 479_470_107);
    }

    #[test]
    fn murmur2_matches_the_java_client_for_every_tail_length() {
        // The Java client's murmur2 of keys of 1 to 5 bytes (tails of 1, 2
        // and 3 bytes, one whole word, a word and a tail), as other Kafka
        // clients check theirs against it; and librdkafka's "kafka".
        let known: &[(&[u8], i32)] = &[
            (b"1", -1_993_445_489),
            (b"12", 126_087_238),
            (b"123", -267_702_483),
            (b"1234", -1_614_185_708),
            (b"12345", -1_188_365_604),
            (b"kafka", -798_503_068), // 0xd067cf64
        ];
        for (key, hash) in known {
            assert_eq!(murmur2(key), *hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn murmur2_of_the_empty_key_is_defined() {
        // Nothing to mix but the length: the finalizer of seed ^ 0.
        let mut h: u32 = 0x9747_b28c;
        h ^= h >> 13;
        h = h.wrapping_mul(0x5bd1_e995);
        h ^= h >> 15;
        assert_eq!(murmur2(b""), h as i32);
    }

    #[test]
    fn keyed_records_go_to_the_positive_hash_modulo_partitions() {
        // murmur2("21") is negative: the sign bit is dropped, not the value negated.
        assert_eq!(to_positive(-973_932_308), 1_173_551_340);
        assert_eq!(partition_for_key(b"21", 3), 1_173_551_340 % 3);
        assert_eq!(choose_partition(Some(b"21"), None, 3, 0), 1_173_551_340 % 3);
        // toPositive(murmur2("1")) = 154038159, a multiple of 3.
        assert_eq!(partition_for_key(b"1", 3), 0);
        assert_eq!(partition_for_key(b"1", 10), 9);
        for n in 1..20 {
            let p = choose_partition(Some(b"some key"), None, n, 0);
            assert!((0..n).contains(&p));
        }
    }

    #[test]
    fn a_partition_count_below_one_does_not_divide_by_zero() {
        assert_eq!(partition_for_key(b"21", 0), 0);
        assert_eq!(partition_for_key(b"21", -4), 0);
    }

    #[test]
    fn fixed_partition_wins_and_unkeyed_records_take_the_round_robin_one() {
        assert_eq!(choose_partition(Some(b"21"), Some(2), 3, 0), 2);
        assert_eq!(choose_partition(None, Some(1), 3, 2), 1);
        assert_eq!(choose_partition(None, None, 3, 2), 2);
    }

    #[test]
    fn same_key_always_lands_on_the_same_partition() {
        let keys: Vec<String> = (0..100).map(|i| format!("key-{i}")).collect();
        for k in &keys {
            let a = choose_partition(Some(k.as_bytes()), None, 7, 0);
            let b = choose_partition(Some(k.as_bytes()), None, 7, 5);
            assert_eq!(a, b);
        }
        // And keys spread over the partitions.
        let used: std::collections::BTreeSet<i32> = keys
            .iter()
            .map(|k| choose_partition(Some(k.as_bytes()), None, 7, 0))
            .collect();
        assert_eq!(used.len(), 7);
    }
}
