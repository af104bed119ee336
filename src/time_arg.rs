//! Points in time on the command line (`--to-datetime`, `--time`,
//! `--from-time`, `--timestamp`): ms since the Unix epoch, a date and time
//! (UTC unless it names an offset), or a duration before now.

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDate, NaiveDateTime};

/// What a time argument may look like, for error messages and help.
pub const TIME_FORMS: &str = "ms since the epoch, 2024-05-01T12:00:00[.sss][Z|+02:00] (UTC \
     without an offset), 2024-05-01, or -DURATION before now (-90s, -15m, -2h, -1d)";

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Parses a time argument into ms since the epoch, `now` being the current
/// time in ms (a parameter, for tests).
pub fn parse_time_at(s: &str, now: i64) -> Result<i64, String> {
    let s = s.trim();
    let bad = || format!("expected {TIME_FORMS}; got {s:?}");
    if let Some(ago) = s.strip_prefix('-') {
        return parse_duration_ms(ago)
            .map(|d| now.saturating_sub(d))
            .ok_or_else(bad);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<i64>().map_err(|_| bad());
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(t.and_utc().timestamp_millis());
    }
    Err(bad())
}

/// A clap value parser for a time argument.
pub fn parse_time(s: &str) -> Result<i64, String> {
    parse_time_at(s, now_ms())
}

/// `90s`, `15m`, `2h`, `1d`, `500ms` as milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<i64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: i64 = n.parse().ok()?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_to_epoch_ms() {
        let now = 1_700_000_000_000;
        assert_eq!(parse_time_at("1234", now), Ok(1234));
        assert_eq!(
            parse_time_at("2024-05-01T12:00:00Z", now),
            Ok(1_714_564_800_000)
        );
        assert_eq!(
            parse_time_at("2024-05-01T14:00:00+02:00", now),
            Ok(1_714_564_800_000)
        );
        assert_eq!(
            parse_time_at("2024-05-01T12:00:00.250", now),
            Ok(1_714_564_800_250)
        );
        assert_eq!(parse_time_at("2024-05-01", now), Ok(1_714_521_600_000));
        assert_eq!(parse_time_at("-15m", now), Ok(now - 900_000));
        assert_eq!(parse_time_at("-1d", now), Ok(now - 86_400_000));
    }

    #[test]
    fn nonsense_is_refused_with_the_forms() {
        for s in ["", "yesterday", "-5y", "2024-13-01", "-"] {
            let err = parse_time_at(s, 0).expect_err(s);
            assert!(err.contains("ms since the epoch"), "{err}");
        }
    }
}
