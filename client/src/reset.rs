//! Where an offset reset moves a partition: the one set of rules that
//! `floe group reset-offsets` and the web console follow (Kafka's
//! `kafka-consumer-groups.sh --reset-offsets` rules).

/// What a reset moves a partition to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// The partition's first offset.
    Earliest,
    /// Its end (the next offset to be written).
    Latest,
    /// This offset.
    Offset(i64),
    /// The committed offset moved by this many (negative: back).
    ShiftBy(i64),
    /// The first record at or after this time (ms since the epoch).
    Time(i64),
}

/// Why a partition has no target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// A shift from a committed offset the group does not have.
    #[error("the group has no committed offset in this partition to shift from")]
    NoCommittedOffset,
}

/// The partition's new offset: `to`, kept within `[first, end]`.
/// `current` is the group's committed offset (for a shift); `at_time` is
/// ListOffsets' answer for a time (none, or negative: no record at or
/// after it, and the end is taken, as Kafka does).
pub fn reset_target(
    to: ResetTo,
    first: i64,
    end: i64,
    current: Option<i64>,
    at_time: Option<i64>,
) -> Result<i64, ResetError> {
    let target = match to {
        ResetTo::Earliest => first,
        ResetTo::Latest => end,
        ResetTo::Offset(o) => o,
        ResetTo::ShiftBy(n) => current
            .ok_or(ResetError::NoCommittedOffset)?
            .saturating_add(n),
        ResetTo::Time(_) => match at_time {
            Some(o) if o >= 0 => o,
            _ => end,
        },
    };
    Ok(clamp(target, first, end))
}

/// `target` kept within `[earliest, latest]` (an end before the start is
/// taken as the start).
pub fn clamp(target: i64, earliest: i64, latest: i64) -> i64 {
    target.max(earliest).min(latest.max(earliest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_kept_within_the_partition() {
        assert_eq!(reset_target(ResetTo::Earliest, 2, 10, None, None), Ok(2));
        assert_eq!(reset_target(ResetTo::Latest, 2, 10, None, None), Ok(10));
        assert_eq!(reset_target(ResetTo::Offset(99), 2, 10, None, None), Ok(10));
        assert_eq!(reset_target(ResetTo::Offset(-3), 2, 10, None, None), Ok(2));
        assert_eq!(
            reset_target(ResetTo::ShiftBy(-3), 2, 10, Some(7), None),
            Ok(4)
        );
        assert_eq!(
            reset_target(ResetTo::ShiftBy(-30), 2, 10, Some(7), None),
            Ok(2)
        );
        assert_eq!(
            reset_target(ResetTo::ShiftBy(1), 2, 10, None, None),
            Err(ResetError::NoCommittedOffset)
        );
        assert_eq!(reset_target(ResetTo::Time(5), 2, 10, None, Some(6)), Ok(6));
        // No record at or after the time: the end.
        assert_eq!(
            reset_target(ResetTo::Time(5), 2, 10, None, Some(-1)),
            Ok(10)
        );
        assert_eq!(reset_target(ResetTo::Time(5), 2, 10, None, None), Ok(10));
    }

    #[test]
    fn an_end_before_the_start_is_the_start() {
        assert_eq!(clamp(5, 2, 10), 5);
        assert_eq!(clamp(-3, 2, 10), 2);
        assert_eq!(clamp(99, 2, 10), 10);
        assert_eq!(clamp(7, 4, 3), 4);
    }
}
