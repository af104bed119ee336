//! The delay headers a producer puts on a record, read the same way by
//! share groups (the share module's arrival) and by delayed topics
//! (`crate::partitions::delayed`): `floe-deliver-at` (epoch ms) and `floe-delay-ms`
//! (ms after the record's timestamp), decimal text. Nothing here trusts
//! the record: a malformed value is an error the caller counts, never a
//! panic.

use floe_storage::records::Record;

/// The header with a record's due time, in epoch milliseconds as decimal
/// text.
pub const DELIVER_AT_HEADER: &str = "floe-deliver-at";
/// The header with a record's delay in milliseconds (decimal text) after
/// its timestamp.
pub const DELAY_MS_HEADER: &str = "floe-delay-ms";
/// The header a delayed topic's re-append carries: the delayed entry it
/// comes from, `<offset>.<index in batch>` (`crate::partitions::delayed`).
pub const DELAYED_FROM_HEADER: &str = "floe-delayed-from";

/// Longest decimal text a time or delay header may hold (u64's digits).
const MAX_DIGITS: usize = 20;

/// What the names of all three headers start with: an uncompressed batch
/// without these bytes anywhere holds none of them, so it need not be
/// decoded.
pub const DELAY_PREFIX: &[u8] = b"floe-de";

/// A delay header whose value is not a decimal time (or a `floe-delay-ms`
/// on a record without a timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Whether `needle` (not empty) occurs in `hay`.
pub fn mentions(hay: &[u8], needle: &[u8]) -> bool {
    // SIMD substring search: a producer's batch can be a megabyte, and a
    // share fetch that acquires part of it looks at all of it.
    memchr::memmem::find(hay, needle).is_some()
}

/// The decimal text of a time or delay header, or `None` if it is not
/// one (empty, a sign, another character, too long).
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > MAX_DIGITS || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A record's due time from its headers: `Ok(None)` without a delay
/// header. `floe-deliver-at` wins over `floe-delay-ms` when both are
/// there; the last header of a name counts.
pub fn due_time(record: &Record) -> Result<Option<u64>, Malformed> {
    let last = |name: &str| {
        record
            .headers
            .iter()
            .rev()
            .find(|h| h.key.as_ref() == name.as_bytes())
    };
    if let Some(h) = last(DELIVER_AT_HEADER) {
        return h
            .value
            .as_deref()
            .and_then(decimal)
            .map(Some)
            .ok_or(Malformed);
    }
    if let Some(h) = last(DELAY_MS_HEADER) {
        let delay = h.value.as_deref().and_then(decimal).ok_or(Malformed)?;
        let ts = u64::try_from(record.timestamp).map_err(|_| Malformed)?;
        return Ok(Some(ts.saturating_add(delay)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_found_anywhere_and_only_whole() {
        assert!(mentions(b"xxfloe-delay-ms", DELAY_PREFIX));
        assert!(mentions(b"ffloe-de", DELAY_PREFIX));
        assert!(!mentions(b"floe-d", DELAY_PREFIX));
        assert!(!mentions(b"", DELAY_PREFIX));
        for name in [DELIVER_AT_HEADER, DELAY_MS_HEADER, DELAYED_FROM_HEADER] {
            assert!(name.as_bytes().starts_with(DELAY_PREFIX));
        }
    }
}
