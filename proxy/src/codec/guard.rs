//! The allocation guard around kafka-protocol's decoders.
//!
//! kafka-protocol 0.18 reserves `Vec::with_capacity(n)` for every array,
//! with `n` taken from the wire before a single element is read: an `Int32`
//! count in non-flexible versions, an unsigned varint minus one in flexible
//! (compact) ones. A few bytes claiming 2^31 elements make it ask for
//! hundreds of GiB, and an allocation failure aborts the process: there is
//! no panic to catch. The crate decodes from any [`ByteBuf`], so instead of
//! changing it we feed it a [`GuardBuf`] that lies about no byte but refuses
//! (or clamps) any count that cannot fit in what is left of the frame.
//!
//! # Varints
//!
//! The crate reads every unsigned varint byte by byte with `try_get_u8`,
//! and the only other `try_get_u8` caller is `Boolean` (one byte). In request
//! and response schemas no scalar field is a varint (`VarInt`/`VarLong`
//! only occur inside record batches, which the crate hands over as opaque
//! `Bytes`): a varint is always a compact array count, a compact
//! string/bytes length, a tagged-field count, a tag or a tagged-field size.
//! For all of those except the tag, a value `v >= 2` with `v - 1` larger than
//! the bytes left after the varint cannot be valid (each element, byte or
//! tagged field takes at least one byte). The guard refuses such a value
//! unless it fits in two bytes (`v <= 16383`): a reservation of 16383
//! elements is cheap whatever the frame, and the slack keeps tags legal (see
//! below).
//!
//! The guard does not know where a varint starts, so it checks every
//! candidate: it keeps the last four bytes of the current run of consecutive
//! `try_get_u8` calls (any other read ends the run) and, on each byte, looks
//! at every window of 1..=5 bytes ending with it whose earlier bytes all
//! have the continuation bit set and that is complete (the byte has no
//! continuation bit, or the window is five bytes long, where the crate stops).
//! It computes the value as the crate does (7-bit groups, little end first,
//! truncated to `u32`) and fails the read if any candidate is too big. The
//! real varint is always one of the windows, and it is checked when its last
//! byte is read, before the crate can use the value.
//!
//! Extra windows only make the check stricter. For well-formed input they
//! never reject anything: booleans are 0 or 1 and canonical varints end with
//! a byte below 0x80, so the only windows are suffixes of the real varint,
//! whose values are at most the real value. The one false positive is an
//! *unknown tag* above 16383 that is larger than the rest of the frame plus
//! one. Kafka numbers tags from 0 in each struct (the largest kafka-protocol
//! 0.18 knows is 1 in requests and 3 in responses), so no real client sends
//! one; without the two-byte slack, a future tag 5 with an empty value at
//! the end of a request would have been refused.
//!
//! # Int32 counts: two passes
//!
//! An `Int32` count looks exactly like an `Int32` scalar (`max_bytes`,
//! timeouts, correlation ids), and scalars legitimately exceed the bytes
//! left. So [`decode_two_pass`] decodes twice:
//!
//! 1. Pass 1 replaces every `Int32` `v` larger than the `r` bytes left after
//!    it with `r + 1` and records where it did. `r + 1` still exceeds what is
//!    left, but reserving `r + 1` elements is bounded by the frame. If the
//!    value was an array count, `r + 1` elements of at least one byte each
//!    cannot fit in `r` bytes, so the pass fails, which is right, because the
//!    real count `v > r` could not fit either. A `Bytes` length fails the same
//!    way. A scalar's value steers nothing: the crate's decoders branch only
//!    on the version, counts, lengths, null markers (`-1`, never clamped)
//!    and `Int8` presence flags. So pass 1 succeeds exactly when the real
//!    decode would, and if it clamped nothing its result is the answer.
//! 2. If pass 1 succeeded after clamping, every clamped value was a scalar.
//!    Pass 2 decodes again with the real values. The control flow is the
//!    same as in pass 1, so every count is one pass 1 already bounded. Pass 2
//!    does not take that on trust: a too-big `Int32` at an offset where pass
//!    1 did not clamp, in another order, or a different number of them fails
//!    the decode.
//!
//! Both passes keep the varint check. The second pass costs as much as the
//! first; in Produce the records are zero-copy `Bytes` slices, so a pass is
//! a walk over the structure, not over the data.
//!
//! ## Assumption: array elements are at least one byte
//!
//! The argument needs every element of an `Int32`-counted array to take at
//! least one byte at the version it is decoded at. A zero-byte element (a
//! struct whose fields all belong to other versions) would let a huge count
//! through pass 1 unnoticed, and pass 2 would reserve it. In kafka-protocol
//! 0.18.0 the non-compact arrays hold `Int32` (4 bytes), `String` (at least
//! 2) or structs. Some nested structs do decode from zero bytes at early
//! versions (e.g. `OffsetFetchRequestTopics` at v5), but only in fields
//! those versions don't have. The test
//! `kinds::tests::no_int32_counted_array_has_zero_byte_elements` checks every
//! non-flexible version of every request and response (250 of them): it
//! decodes each from a synthetic buffer and looks for an `Int32` that changes
//! the decoded value's size without changing the bytes read. It finds none,
//! and it will fail if a crate upgrade adds one. Compact arrays don't need
//! the assumption, because the varint check bounds their counts whatever
//! the element size.
//!
//! # Memory of the decoded value
//!
//! Bounding counts by bytes is not enough: kafka-protocol turns each wire
//! element into a struct of up to [`MAX_ELEMENT_SIZE`] bytes, and an element
//! can be three bytes on the wire (an empty `TopicProduceData` in a flexible
//! Produce is 96 bytes in memory), so a well-formed 100 MiB Produce of empty
//! topics would decode into more than 3 GB. The guard cannot tell which type
//! is being decoded, but every element costs the decoder at least one read
//! of a value (an integer, a varint, a boolean, a UUID); reading the bytes of
//! a string or a record set after its length is not a new value. So each pass
//! counts values read and charges [`MAX_ELEMENT_SIZE`] for each: the charge
//! is at least the memory the decoded arrays take (it overestimates, by about
//! four for Produce). Once the charge passes the [`MemoryBudget`] the buffer
//! refuses every further read and the decode fails, before the decoder has
//! grown the value any further. The budget is set by the caller, from the
//! frame size and a flag (see `codec::decode_budget`).
//!
//! # What remains
//!
//! Every reservation is at most `max(bytes left + 1, 16383)` elements, so it
//! is bounded by the frame size (or 16383) times the element size. Frames are limited
//! before decoding (see [`super::MAX_NON_PRODUCE_FRAME`]). A reservation for
//! a count that turns out false lives only until the decode fails, and only
//! the arrays being decoded at that moment (one per nesting level) hold one.
//! Other allocations (the tagged-field maps, `Bytes` slices) grow only with
//! the bytes actually read. A reservation for a count that turns out
//! false is charged nothing (it is not known to be an array); it is address
//! space the decoder never writes to, freed as soon as the decode fails.

use std::ops::Range;

use bytes::{Buf, Bytes, TryGetError};
use kafka_protocol::protocol::buf::{ByteBuf, NotEnoughBytesError};

/// The error type the decoders are reduced to (kafka-protocol returns
/// `anyhow::Error`, which converts into this).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Longest unsigned varint kafka-protocol reads: five 7-bit groups.
const MAX_VARINT_LEN: usize = 5;

/// Varints up to this value (any one or two-byte varint) are never refused.
const ALWAYS_ALLOWED_VARINT: u32 = (1 << 14) - 1;

/// The largest in-memory size of an element of any request or response
/// array in kafka-protocol 0.18.0 (request side: `AclCreation`,
/// `DeleteAclsFilter` and `ScramCredentialUpsertion`, 128 bytes; a Produce
/// topic is 96, a partition 64). Each value read is charged this much. The
/// test `charged_size_covers_the_largest_elements` keeps it honest across
/// crate upgrades.
pub(crate) const MAX_ELEMENT_SIZE: usize = 128;

/// How much memory one decode may take, as estimated by the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryBudget {
    /// Bytes of decoded structure allowed.
    pub(crate) bytes: usize,
}

impl MemoryBudget {
    /// No limit (the estimate is still kept).
    #[cfg(test)]
    pub(crate) const UNLIMITED: MemoryBudget = MemoryBudget { bytes: usize::MAX };

    /// Values that may be read before the budget is spent.
    fn max_values(self) -> usize {
        self.bytes / MAX_ELEMENT_SIZE
    }
}

/// A decode that failed, with the guard's reason if the guard refused a read.
#[derive(Debug)]
pub(crate) struct DecodeFailure {
    /// What the decoder reported.
    pub(crate) source: BoxError,
    /// Why the guard refused a read, if it did (the decoder's own error
    /// then only says that bytes were missing).
    pub(crate) guard: Option<String>,
}

impl std::fmt::Display for DecodeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.guard {
            Some(why) => write!(f, "{why}"),
            None => {
                write!(f, "{}", self.source)?;
                let mut cause = self.source.source();
                while let Some(c) = cause {
                    write!(f, ": {c}")?;
                    cause = c.source();
                }
                Ok(())
            }
        }
    }
}

/// How a pass treats an `Int32` larger than the bytes left after it.
#[derive(Debug)]
enum Int32Pass {
    /// Pass 1: return the bytes left plus one.
    Clamp,
    /// Pass 2: return the real value, but only at the offsets pass 1
    /// clamped, in the same order.
    Replay { expected: Vec<usize> },
}

/// A [`Buf`] over a frame that refuses varint lengths and clamps (or
/// replays) `Int32` values that cannot fit in the bytes left. See the
/// module docs.
#[derive(Debug)]
pub(crate) struct GuardBuf {
    buf: Bytes,
    /// Length of the buffer at the start, to turn `remaining` into offsets.
    start_len: usize,
    pass: Int32Pass,
    /// Offsets of the `Int32` reads whose value exceeded the bytes left.
    big_i32_at: Vec<usize>,
    /// The bytes of the current `try_get_u8` run before the latest, oldest
    /// first (only the last `MAX_VARINT_LEN - 1` matter).
    run: [u8; MAX_VARINT_LEN - 1],
    run_len: usize,
    /// Set when the guard refuses a read.
    refused: Option<String>,
    /// Values read so far (see "Memory of the decoded value").
    values: usize,
    /// Values allowed by the budget.
    max_values: usize,
    /// The budget, for the refusal message.
    budget: MemoryBudget,
    /// Set once the budget is spent: every read fails from then on.
    spent: bool,
}

impl GuardBuf {
    #[cfg(test)]
    fn new(buf: Bytes, pass: Int32Pass) -> Self {
        Self::with_budget(buf, pass, MemoryBudget::UNLIMITED)
    }

    fn with_budget(buf: Bytes, pass: Int32Pass, budget: MemoryBudget) -> Self {
        Self {
            start_len: buf.len(),
            buf,
            pass,
            big_i32_at: Vec::new(),
            run: [0; MAX_VARINT_LEN - 1],
            run_len: 0,
            refused: None,
            values: 0,
            max_values: budget.max_values(),
            budget,
            spent: false,
        }
    }

    /// Counts one value read; once over the budget, refuses (and every
    /// read after this one fails too).
    fn charge(&mut self) -> Result<(), TryGetError> {
        self.values += 1;
        if self.values <= self.max_values {
            return Ok(());
        }
        if !self.spent {
            self.spent = true;
            let why = format!(
                "decoding would take more than {} bytes of memory (about {} values of up to \
                 {MAX_ELEMENT_SIZE} bytes each by offset {}); the budget for this request is {} bytes",
                self.max_values.saturating_mul(MAX_ELEMENT_SIZE),
                self.values,
                self.offset(),
                self.budget.bytes
            );
            self.refused = Some(why);
        }
        Err(TryGetError {
            requested: 1,
            available: 0,
        })
    }

    /// Fails a read once the budget is spent.
    fn check_spent(&self) -> Result<(), TryGetError> {
        if self.spent {
            return Err(TryGetError {
                requested: 1,
                available: 0,
            });
        }
        Ok(())
    }

    /// Offset of the next unread byte from the start of the buffer.
    fn offset(&self) -> usize {
        self.start_len - self.buf.len()
    }

    /// Any read other than `try_get_u8` ends the run of single bytes.
    fn end_run(&mut self) {
        self.run_len = 0;
    }

    fn push_run(&mut self, byte: u8) {
        if self.run_len < self.run.len() {
            self.run[self.run_len] = byte;
            self.run_len += 1;
        } else {
            self.run.rotate_left(1);
            if let Some(last) = self.run.last_mut() {
                *last = byte;
            }
        }
    }

    /// The largest too-big value among the varint windows ending with
    /// `last` (just read), if any.
    fn oversized_varint(&self, last: u8) -> Option<u32> {
        let before = &self.run[..self.run_len];
        // Bytes right before `last` with the continuation bit set: windows
        // may reach back over those only.
        let continued = before.iter().rev().take_while(|b| **b & 0x80 != 0).count();
        let lens = if last & 0x80 == 0 {
            1..=continued + 1
        } else if continued + 1 >= MAX_VARINT_LEN {
            MAX_VARINT_LEN..=MAX_VARINT_LEN
        } else {
            return None;
        };
        let left = self.buf.remaining();
        lens.filter_map(|len| {
            let earlier = before.iter().skip(before.len() + 1 - len);
            let value = varint_value(earlier.chain(std::iter::once(&last)));
            length_exceeds(value, left).then_some(value)
        })
        .max()
    }

    fn refuse(&mut self, why: String, requested: usize) -> TryGetError {
        let available = self.buf.remaining();
        self.refused = Some(why);
        TryGetError {
            requested,
            available,
        }
    }
}

/// The value of a varint given its bytes, as kafka-protocol computes it.
fn varint_value<'a>(bytes: impl Iterator<Item = &'a u8>) -> u32 {
    let wide = bytes
        .enumerate()
        .fold(0u64, |acc, (i, b)| acc | (u64::from(b & 0x7f) << (7 * i)));
    // The crate accumulates in a u32: high bits of the fifth group are lost.
    (wide & u64::from(u32::MAX)) as u32
}

/// Whether a varint `value`, read as "length + 1", claims more than `left`
/// bytes and is not small enough to let through anyway.
fn length_exceeds(value: u32, left: usize) -> bool {
    value > ALWAYS_ALLOWED_VARINT && (value - 1) as usize > left
}

impl Buf for GuardBuf {
    /// Nothing is left once the budget is spent, so the default readers
    /// (`try_get_i16`, `try_get_i64`, `try_copy_to_slice`, …) fail too.
    fn remaining(&self) -> usize {
        if self.spent {
            return 0;
        }
        self.buf.remaining()
    }

    fn chunk(&self) -> &[u8] {
        if self.spent {
            return &[];
        }
        self.buf.chunk()
    }

    /// Only the default readers of fixed-size values call this (the bytes
    /// of strings and records are taken with `get_bytes`), so each call is
    /// one value read.
    fn advance(&mut self, cnt: usize) {
        self.end_run();
        // Over the budget, `remaining` is 0 from now on: the next read fails.
        let _ = self.charge();
        let cnt = cnt.min(self.buf.len());
        self.buf.advance(cnt);
    }

    fn try_get_u8(&mut self) -> Result<u8, TryGetError> {
        self.check_spent()?;
        let byte = self.buf.try_get_u8()?;
        if let Some(value) = self.oversized_varint(byte) {
            let left = self.buf.remaining();
            let why = format!(
                "varint length or count {value} at offset {} exceeds the {left} bytes left",
                self.offset()
            );
            return Err(self.refuse(why, value as usize));
        }
        // A value ends here: a varint's last byte, the fifth byte (where
        // the crate stops), or a boolean.
        if byte & 0x80 == 0 || self.run_len + 1 >= MAX_VARINT_LEN {
            self.charge()?;
        }
        self.push_run(byte);
        Ok(byte)
    }

    fn try_get_i8(&mut self) -> Result<i8, TryGetError> {
        self.end_run();
        self.check_spent()?;
        let value = self.buf.try_get_i8()?;
        self.charge()?;
        Ok(value)
    }

    fn try_get_i32(&mut self) -> Result<i32, TryGetError> {
        self.end_run();
        self.check_spent()?;
        self.charge()?;
        let at = self.offset();
        let value = self.buf.try_get_i32()?;
        let left = self.buf.remaining();
        let Ok(wide) = usize::try_from(value) else {
            return Ok(value); // negative: null marker, error or scalar
        };
        if wide <= left {
            return Ok(value);
        }
        let seen = self.big_i32_at.len();
        self.big_i32_at.push(at);
        match &self.pass {
            Int32Pass::Clamp => Ok(i32::try_from(left + 1).unwrap_or(i32::MAX)),
            Int32Pass::Replay { expected } if expected.get(seen) == Some(&at) => Ok(value),
            Int32Pass::Replay { .. } => {
                let why = format!(
                    "int32 {value} at offset {at} exceeds the {left} bytes left \
                     and was not seen there by the first pass"
                );
                Err(self.refuse(why, wide))
            }
        }
    }
}

impl ByteBuf for GuardBuf {
    fn peek_bytes(&mut self, r: Range<usize>) -> Bytes {
        if !self.spent && r.start <= r.end && r.end <= self.buf.len() {
            self.buf.slice(r)
        } else {
            Bytes::new()
        }
    }

    fn get_bytes(&mut self, size: usize) -> Bytes {
        self.end_run();
        if self.spent {
            return Bytes::new();
        }
        let size = size.min(self.buf.len());
        self.buf.split_to(size)
    }

    fn try_get_bytes(&mut self, size: usize) -> Result<Bytes, NotEnoughBytesError> {
        self.end_run();
        if self.spent || size > self.buf.len() {
            return Err(NotEnoughBytesError);
        }
        Ok(self.buf.split_to(size))
    }
}

/// Runs one pass; returns the value, the unread bytes and where big `Int32`s
/// were read.
fn run_pass<T>(
    input: &Bytes,
    pass: Int32Pass,
    budget: MemoryBudget,
    decode: &impl Fn(&mut GuardBuf) -> Result<T, BoxError>,
) -> Result<(T, Bytes, Vec<usize>), DecodeFailure> {
    let mut buf = GuardBuf::with_budget(input.clone(), pass, budget);
    match decode(&mut buf) {
        Ok(value) => Ok((value, buf.buf, buf.big_i32_at)),
        Err(source) => Err(DecodeFailure {
            source,
            guard: buf.refused,
        }),
    }
}

/// Decodes `input` with `decode` through the guard (see the module docs),
/// within `budget`. Returns the value and the bytes `decode` left unread.
pub(crate) fn decode_two_pass<T>(
    input: &Bytes,
    budget: MemoryBudget,
    decode: impl Fn(&mut GuardBuf) -> Result<T, BoxError>,
) -> Result<(T, Bytes), DecodeFailure> {
    let (value, rest, clamped_at) = run_pass(input, Int32Pass::Clamp, budget, &decode)?;
    if clamped_at.is_empty() {
        return Ok((value, rest));
    }
    drop(value);
    let expected = clamped_at.clone();
    let (value, rest, replayed_at) =
        run_pass(input, Int32Pass::Replay { expected }, budget, &decode)?;
    if replayed_at != clamped_at {
        return Err(DecodeFailure {
            source: "the second decoding pass read fewer large int32 values than the first".into(),
            guard: None,
        });
    }
    Ok((value, rest))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{MetadataRequest, RequestHeader};
    use kafka_protocol::protocol::{Decodable, StrBytes};

    use super::*;

    fn decode<T: Decodable>(bytes: &'static [u8], version: i16) -> Result<T, DecodeFailure> {
        let input = Bytes::from_static(bytes);
        decode_two_pass(&input, MemoryBudget::UNLIMITED, |b| {
            T::decode(b, version).map_err(BoxError::from)
        })
        .map(|(v, _)| v)
    }

    /// Reads the first `n` bytes with `try_get_u8` (as the crate reads a
    /// varint or booleans); the rest stands for the bytes after them.
    fn read_u8s(bytes: &[u8], n: usize) -> Result<(), String> {
        let mut g = GuardBuf::new(Bytes::copy_from_slice(bytes), Int32Pass::Clamp);
        for _ in 0..n {
            if g.try_get_u8().is_err() {
                return Err(g.refused.unwrap_or_default());
            }
        }
        Ok(())
    }

    #[test]
    fn varint_value_matches_the_crate_including_truncation() {
        assert_eq!(varint_value([0x05].iter()), 5);
        assert_eq!(varint_value([0xac, 0x02].iter()), 300);
        assert_eq!(
            varint_value([0xff, 0xff, 0xff, 0xff, 0x0f].iter()),
            u32::MAX
        );
        // Bits past 32 in the fifth group are dropped, as in the crate.
        assert_eq!(
            varint_value([0x80, 0x80, 0x80, 0x80, 0x7f].iter()),
            0xf000_0000
        );
    }

    #[test]
    fn varint_that_fits_is_allowed() {
        // 16385 (0x81 0x80 0x01) is length 16384: allowed with 16384 bytes
        // after it, refused with one fewer. Its one-byte suffix (1) and
        // two-byte suffix (0x80 0x01 = 128) are checked too and fit.
        let mut input = vec![0x81, 0x80, 0x01];
        input.resize(3 + 16384, 0);
        assert!(read_u8s(&input, 3).is_ok());
        input.pop();
        let why = read_u8s(&input, 3).unwrap_err();
        assert!(why.contains("varint length or count 16385"), "{why}");
        // 0 (null) and 1 (empty) with nothing after them.
        assert!(read_u8s(&[0x00], 1).is_ok());
        assert!(read_u8s(&[0x01], 1).is_ok());
    }

    #[test]
    fn two_byte_varints_are_always_allowed() {
        // Tags are varints but not lengths: a tag 110 near the end of a
        // frame is legal, as is anything up to 16383.
        assert!(read_u8s(&[0x6e, 0x00], 1).is_ok());
        assert!(read_u8s(&[0xff, 0x7f], 2).is_ok());
        assert!(read_u8s(&[0x80, 0x80, 0x01], 3).is_err());
    }

    #[test]
    fn varint_longer_than_the_rest_is_refused_at_its_last_byte() {
        let mut g = GuardBuf::new(
            Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2]),
            Int32Pass::Clamp,
        );
        for _ in 0..4 {
            assert!(g.try_get_u8().is_ok());
        }
        assert!(g.try_get_u8().is_err());
        let why = g.refused.unwrap_or_default();
        assert!(why.contains(&u32::MAX.to_string()), "{why}");
    }

    #[test]
    fn five_byte_window_is_complete_even_with_the_continuation_bit() {
        assert!(read_u8s(&[0xff, 0xff, 0xff, 0xff, 0xff], 5).is_err());
    }

    #[test]
    fn boolean_before_a_varint_does_not_hide_it() {
        // A boolean 1 then a three-byte varint: the windows starting at the
        // boolean are skipped (no continuation bit), the varint is checked.
        assert!(read_u8s(&[0x01, 0x80, 0x80, 0x01], 4).is_err());
        // A hostile boolean 0x80 glued to the varint only adds candidates.
        assert!(read_u8s(&[0x80, 0x80, 0x80, 0x01], 4).is_err());
        assert!(read_u8s(&[0x01, 0x05, 9, 9], 2).is_ok());
    }

    #[test]
    fn other_reads_end_the_run() {
        let mut g = GuardBuf::new(
            Bytes::from_static(&[0x80, 0, 0x00, 0x02, 7]),
            Int32Pass::Clamp,
        );
        assert_eq!(g.try_get_u8().unwrap(), 0x80);
        assert_eq!(g.try_get_i8().unwrap(), 0);
        // Had the run continued, [0x80, 0x00, ...] windows would be checked;
        // the run restarted, so 0x00 and 0x02 stand alone.
        assert_eq!(g.try_get_u8().unwrap(), 0x00);
        assert_eq!(g.try_get_u8().unwrap(), 0x02);
    }

    #[test]
    fn first_pass_clamps_big_int32_and_records_where() {
        let mut g = GuardBuf::new(
            Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 1, 2]),
            Int32Pass::Clamp,
        );
        assert_eq!(g.try_get_i32().unwrap(), 3);
        assert_eq!(g.big_i32_at, vec![0]);
    }

    #[test]
    fn second_pass_refuses_a_big_int32_the_first_did_not_see() {
        let mut g = GuardBuf::new(
            Bytes::from_static(&[0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff]),
            Int32Pass::Replay { expected: vec![0] },
        );
        assert_eq!(g.try_get_i32().unwrap(), 1);
        assert!(g.try_get_i32().is_err());
        assert!(g.refused.is_some());
    }

    #[test]
    fn big_scalar_survives_through_the_second_pass() {
        // Header v1: api key 3, version 1, correlation id i32::MAX, client "c".
        let h: RequestHeader =
            decode(&[0, 3, 0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 1, b'c'], 1).unwrap();
        assert_eq!(h.correlation_id, i32::MAX);
        assert_eq!(h.client_id, Some(StrBytes::from_static_str("c")));
    }

    #[test]
    fn huge_int32_count_is_refused_without_reserving_it() {
        let err = decode::<MetadataRequest>(&[0x7f, 0xff, 0xff, 0xff], 1).unwrap_err();
        assert!(err.guard.is_none(), "the clamped count fails on its own");
        let err = decode::<MetadataRequest>(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0], 9).unwrap_err();
        assert!(err.guard.is_some());
    }

    #[test]
    fn charged_size_covers_the_largest_elements() {
        use kafka_protocol::messages::*;
        use std::mem::size_of;
        let sizes = [
            size_of::<create_acls_request::AclCreation>(),
            size_of::<delete_acls_request::DeleteAclsFilter>(),
            size_of::<alter_user_scram_credentials_request::ScramCredentialUpsertion>(),
            size_of::<leave_group_request::MemberIdentity>(),
            size_of::<offset_fetch_request::OffsetFetchRequestGroup>(),
            size_of::<create_topics_request::CreatableTopic>(),
            size_of::<produce_request::TopicProduceData>(),
            size_of::<produce_request::PartitionProduceData>(),
            size_of::<fetch_request::FetchTopic>(),
            size_of::<metadata_request::MetadataRequestTopic>(),
            size_of::<StrBytes>(),
        ];
        for s in sizes {
            assert!(s <= MAX_ELEMENT_SIZE, "{s}");
        }
    }

    #[test]
    fn every_read_fails_once_the_budget_is_spent() {
        // Three values allowed: two i32 and one varint byte, then nothing.
        let budget = MemoryBudget {
            bytes: 3 * MAX_ELEMENT_SIZE,
        };
        let mut g = GuardBuf::with_budget(
            Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 2, 0x05, 0x01, 0, 0]),
            Int32Pass::Clamp,
            budget,
        );
        assert_eq!(g.try_get_i32().unwrap(), 1);
        assert_eq!(g.try_get_i32().unwrap(), 2);
        assert_eq!(g.try_get_u8().unwrap(), 5);
        assert!(g.try_get_u8().is_err());
        let why = g.refused.clone().unwrap_or_default();
        assert!(why.contains("bytes of memory"), "{why}");
        assert_eq!(g.remaining(), 0);
        assert!(g.try_get_i16().is_err());
        assert!(g.try_get_bytes(1).is_err());
    }

    #[test]
    fn bytes_after_a_length_are_not_charged() {
        let budget = MemoryBudget {
            bytes: MAX_ELEMENT_SIZE,
        };
        let mut g = GuardBuf::with_budget(
            Bytes::from_static(&[0x04, b'a', b'b', b'c']),
            Int32Pass::Clamp,
            budget,
        );
        assert_eq!(g.try_get_u8().unwrap(), 4);
        assert_eq!(g.try_get_bytes(3).unwrap().as_ref(), b"abc");
    }

    #[test]
    fn peek_out_of_range_is_empty_not_a_panic() {
        let mut g = GuardBuf::new(Bytes::from_static(&[1, 2]), Int32Pass::Clamp);
        assert!(g.peek_bytes(1..5).is_empty());
        assert!(g.try_peek_bytes(0..5).is_err());
        assert_eq!(g.peek_bytes(0..2).as_ref(), &[1, 2]);
    }
}
