//! Reading a partition's committed batches back: whole batches from a byte
//! range of a log object (a WAL object's range for one partition, or a
//! segment's `.log`), in bounded chunks, through any [`RangeRead`] (the pool
//! or a [`crate::CachedReader`] in front of it).
//!
//! What names the ranges (the metadata's committed index) is the caller's
//! business: this takes plain inputs, an [`ObjectRef`], a byte range and the
//! offsets wanted. The broker's fetch and timestamp lookups and the indexer's
//! export and queries read through it, so they agree on what a range holds
//! and on the budget rule.

use std::ops::Range;

use bytes::Bytes;

use crate::batch::{BatchError, BatchHead, BatchIter, BatchView, HEADER_LEN, LOG_OVERHEAD};
use crate::error::{Result, StorageError};
use crate::ids::ObjectRef;
use crate::pool::RangeRead;

/// Bytes read from the store at a time (more when one batch is larger).
pub const READ_CHUNK: u64 = 8 * 1024 * 1024;

/// Fewest bytes asked of the store at a time, however small the budget left
/// (a read this small costs about what a smaller one does).
pub const MIN_READ: u64 = 64 * 1024;

/// Which batches a read takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// Batches that end before this offset are skipped.
    pub from: i64,
    /// The first batch that starts at or after this offset ends the read.
    pub until: i64,
    /// Batch bytes to take: the first batch always, later ones only while the
    /// total stays within it.
    pub max_bytes: u64,
}

/// Why a read ended before the end of its ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A batch at or after [`Wanted::until`].
    Until,
    /// The next batch would not fit [`Wanted::max_bytes`], or it is reached.
    Budget,
}

/// Whole batches taken, across one or more ranges, in offset order.
#[derive(Debug, Clone, Default)]
pub struct Batches {
    /// The batches, each one element; or, made with [`Batches::pieces`],
    /// pieces whose concatenation is the batches back to back.
    pub batches: Vec<Bytes>,
    /// Bytes of `batches`.
    pub bytes: u64,
    /// The offset after the last batch taken; `None` until one is.
    pub next_offset: Option<i64>,
    /// Set once the read is over: later ranges add nothing.
    pub stopped: Option<Stop>,
    /// A batch may be handed out in pieces.
    pieces: bool,
}

/// What [`Batches::admit`] decides for one batch.
enum Admit {
    Take,
    Skip,
    Stop,
}

impl Batches {
    /// For bytes that go on as they are (a fetch answer): a batch that
    /// lies across a cache block boundary is taken as its pieces, slices
    /// of the cached blocks, instead of being copied into one buffer.
    pub fn pieces() -> Self {
        Self {
            pieces: true,
            ..Self::default()
        }
    }

    /// Whether the batch at `head` is taken, skipped, or ends the read (then
    /// `stopped` says why).
    fn admit(&mut self, head: &BatchHead, wanted: &Wanted) -> Admit {
        if head.last_offset < wanted.from {
            return Admit::Skip;
        }
        if head.base_offset >= wanted.until {
            self.stopped = Some(Stop::Until);
            return Admit::Stop;
        }
        if !self.batches.is_empty() && self.bytes + head.size as u64 > wanted.max_bytes {
            self.stopped = Some(Stop::Budget);
            return Admit::Stop;
        }
        Admit::Take
    }

    /// Counts a taken batch.
    fn took(&mut self, head: &BatchHead, wanted: &Wanted) {
        self.bytes += head.size as u64;
        self.next_offset = Some(head.next_offset());
        if self.bytes >= wanted.max_bytes {
            self.stopped = Some(Stop::Budget);
        }
    }

    /// Takes the batches of `buf` (batches back to back, the last one
    /// possibly cut short) as `wanted` says. Returns the bytes of `buf` that
    /// are done with: a cut batch at the end is left for the next read,
    /// unless it is the first one (then it is an error).
    pub fn take(&mut self, buf: &Bytes, wanted: &Wanted) -> std::result::Result<usize, BatchError> {
        let mut done = 0usize;
        for item in BatchIter::new(buf, usize::MAX) {
            if self.stopped.is_some() {
                break;
            }
            let (at, view) = match item {
                Ok(v) => v,
                Err(BatchError::Truncated { .. }) if done > 0 => break,
                Err(e) => return Err(e),
            };
            let head = BatchHead {
                size: view.size(),
                base_offset: view.base_offset(),
                last_offset: view.last_offset(),
            };
            match self.admit(&head, wanted) {
                Admit::Stop => break,
                Admit::Skip => {}
                Admit::Take => {
                    self.batches.push(buf.slice(at..at + head.size));
                    self.took(&head, wanted);
                }
            }
            done = at + head.size;
        }
        Ok(done)
    }

    /// Takes the one batch whose bytes are `pieces` joined (the first
    /// holding its whole header), as `wanted` says; returns its size.
    fn take_pieces(
        &mut self,
        pieces: Vec<Bytes>,
        wanted: &Wanted,
    ) -> std::result::Result<usize, BatchError> {
        let first = pieces.first().map(|p| &p[..]).unwrap_or_default();
        let head = BatchHead::parse(first, usize::MAX)?;
        let len: usize = pieces.iter().map(Bytes::len).sum();
        if len != head.size {
            return Err(BatchError::Truncated {
                needed: head.size,
                available: len,
            });
        }
        if let Admit::Take = self.admit(&head, wanted) {
            self.batches.extend(pieces);
            self.took(&head, wanted);
        }
        Ok(head.size)
    }
}

/// Reads the batches of `object` at `bytes` (whole batches back to back)
/// into `out`, as `wanted` says, [`READ_CHUNK`] at a time. A batch that runs
/// past the range, or bytes that are not a batch, are a corrupt error.
pub async fn read_batches<R: RangeRead>(
    reader: &R,
    object: &ObjectRef,
    bytes: Range<u64>,
    wanted: &Wanted,
    out: &mut Batches,
) -> Result<()> {
    read_in_chunks(reader, object, bytes, wanted, out, READ_CHUNK).await
}

async fn read_in_chunks<R: RangeRead>(
    reader: &R,
    object: &ObjectRef,
    bytes: Range<u64>,
    wanted: &Wanted,
    out: &mut Batches,
    chunk: u64,
) -> Result<()> {
    let corrupt = |at: u64, e: BatchError| {
        StorageError::with_source(
            crate::ErrorKind::Corrupt,
            format!("{object}: bad batch at {at}"),
            e,
        )
    };
    let boundary = reader.read_boundary().filter(|b| *b > 0);
    let mut pos = bytes.start;
    while pos < bytes.end && out.stopped.is_none() {
        // No more than the budget left (the store is not asked for a whole
        // chunk to answer a small fetch), and at least a batch's size
        // prefix, so the first batch's size is known.
        let left = wanted.max_bytes.saturating_sub(out.bytes);
        let mut want = chunk
            .min(left.max(MIN_READ))
            .max(LOG_OVERHEAD as u64)
            .min(bytes.end - pos);
        if let Some(b) = boundary {
            // Up to the reader's next boundary only: a cached block is then
            // handed out as a slice instead of blocks being copied together.
            // A batch across the boundary is read alone below.
            let to_boundary = b - pos % b;
            if to_boundary >= LOG_OVERHEAD as u64 {
                want = want.min(to_boundary);
            }
        }
        let mut buf = reader.read_range(object, pos..pos + want).await?;
        let first = BatchView::peek_size(&buf).map_err(|e| corrupt(pos, e))? as u64;
        if first > buf.len() as u64 {
            // A batch larger than what was read: once batches are taken, one
            // that cannot fit the budget ends the read (later batches follow
            // it in offset order); otherwise it is read whole.
            if !out.batches.is_empty() && out.bytes.saturating_add(first) > wanted.max_bytes {
                out.stopped = Some(Stop::Budget);
                break;
            }
            if first > bytes.end - pos {
                return Err(StorageError::corrupt(format!(
                    "{object}: batch at {pos} runs past the range's end {}",
                    bytes.end
                )));
            }
            if let Some(b) = boundary.filter(|b| out.pieces && b - pos % b >= HEADER_LEN as u64) {
                // Block by block, each piece a slice of a cached block.
                let cuts: Vec<Range<u64>> = std::iter::successors(Some(pos), |at| {
                    Some((at / b + 1) * b).filter(|next| *next < pos + first)
                })
                .map(|at| at..((at / b + 1) * b).min(pos + first))
                .collect();
                let pieces = futures::future::try_join_all(
                    cuts.into_iter().map(|r| reader.read_range(object, r)),
                )
                .await?;
                let done = out
                    .take_pieces(pieces, wanted)
                    .map_err(|e| corrupt(pos, e))?;
                pos += done as u64;
                continue;
            }
            buf = reader.read_range(object, pos..pos + first).await?;
        }
        let done = out.take(&buf, wanted).map_err(|e| corrupt(pos, e))?;
        pos += done as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::batch::Compression;
    use crate::ids::{EndpointId, ObjectKey};
    use crate::records::{BatchBuilder, RecordSpec};

    /// One object in memory, counting reads.
    struct Mem {
        bytes: Bytes,
        reads: AtomicUsize,
        /// Bytes asked of the store, over every read.
        read_bytes: AtomicUsize,
        /// What it says of itself as [`RangeRead::read_boundary`].
        boundary: Option<u64>,
        /// Every range asked for.
        asked: std::sync::Mutex<Vec<Range<u64>>>,
    }

    impl Mem {
        fn new(bytes: Vec<u8>) -> Self {
            Self {
                bytes: Bytes::from(bytes),
                reads: AtomicUsize::new(0),
                read_bytes: AtomicUsize::new(0),
                boundary: None,
                asked: Default::default(),
            }
        }
    }

    impl RangeRead for Mem {
        async fn read_range(&self, _obj: &ObjectRef, range: Range<u64>) -> Result<Bytes> {
            self.asked.lock().unwrap().push(range.clone());
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.read_bytes
                .fetch_add((range.end - range.start) as usize, Ordering::Relaxed);
            Ok(self.bytes.slice(range.start as usize..range.end as usize))
        }

        fn read_boundary(&self) -> Option<u64> {
            self.boundary
        }
    }

    /// Batches of 3 records from offset 100, back to back; a control batch at 106.
    fn log(count: usize) -> (Mem, ObjectRef, Vec<Bytes>) {
        let mut all = Vec::new();
        let mut batches = Vec::new();
        for i in 0..count {
            let mut b = BatchBuilder::new(100 + 3 * i as i64, 0);
            for r in 0..3 {
                b.push(RecordSpec::new(None, Some(vec![r; 40 + i]), 0));
            }
            let batch = b.build(Compression::None).unwrap();
            all.extend_from_slice(&batch);
            batches.push(batch);
        }
        let object = ObjectRef {
            endpoint: EndpointId::new("m"),
            key: ObjectKey::new("wal/1"),
            size: all.len() as u64,
        };
        (Mem::new(all), object, batches)
    }

    fn want(from: i64, until: i64, max_bytes: u64) -> Wanted {
        Wanted {
            from,
            until,
            max_bytes,
        }
    }

    #[tokio::test]
    async fn reads_whole_batches_from_the_one_holding_from_until_until() {
        let (mem, obj, bs) = log(10);
        for chunk in [1, 100, READ_CHUNK] {
            let mut out = Batches::default();
            read_in_chunks(
                &mem,
                &obj,
                0..obj.size,
                &want(104, 115, u64::MAX),
                &mut out,
                chunk,
            )
            .await
            .unwrap();
            // 104 is inside the batch at 103; 115 starts the batch that ends it.
            assert_eq!(out.batches, bs[1..5], "chunk {chunk}");
            assert_eq!(out.next_offset, Some(115));
            assert_eq!(out.stopped, Some(Stop::Until));
        }
    }

    #[tokio::test]
    async fn reads_end_at_the_readers_boundary_and_a_batch_across_one_is_read_alone() {
        let (mut mem, obj, bs) = log(20);
        let starts: Vec<u64> = bs
            .iter()
            .scan(0u64, |at, b| {
                let s = *at;
                *at += b.len() as u64;
                Some(s)
            })
            .collect();
        for boundary in [64u64, 100, 257, 1000, 1 << 20] {
            mem.boundary = Some(boundary);
            mem.asked.lock().unwrap().clear();
            let mut out = Batches::default();
            read_all(&mem, &obj, u64::MAX, &mut out).await;
            assert_eq!(out.batches, bs, "boundary {boundary}");
            for r in mem.asked.lock().unwrap().iter() {
                let within = r.start / boundary == (r.end - 1) / boundary;
                let one_batch = starts
                    .iter()
                    .position(|s| *s == r.start)
                    .is_some_and(|i| bs[i].len() as u64 == r.end - r.start);
                // A read shorter than a size prefix may cross (it would be
                // no read at all otherwise).
                let tiny = boundary - r.start % boundary < LOG_OVERHEAD as u64;
                assert!(
                    within || one_batch || tiny,
                    "boundary {boundary}: {r:?} crosses it"
                );
            }
        }
    }

    #[tokio::test]
    async fn in_pieces_a_batch_across_a_boundary_is_sliced_not_joined() {
        let (mut mem, obj, bs) = log(20);
        let all = bs.concat();
        for boundary in [64u64, 100, 257, 1000, 1 << 20] {
            mem.boundary = Some(boundary);
            mem.asked.lock().unwrap().clear();
            let mut out = Batches::pieces();
            read_all(&mem, &obj, u64::MAX, &mut out).await;
            assert_eq!(out.batches.concat(), all, "boundary {boundary}");
            assert_eq!(out.bytes, all.len() as u64);
            assert_eq!(out.next_offset, Some(160));
            for r in mem.asked.lock().unwrap().iter() {
                let within = r.start / boundary == (r.end - 1) / boundary;
                // Joined only where the header itself is cut, or where the
                // read is shorter than a size prefix.
                let header_cut = boundary - r.start % boundary < HEADER_LEN as u64;
                assert!(
                    within || header_cut,
                    "boundary {boundary}: {r:?} crosses it"
                );
            }
            if boundary == 257 {
                assert!(out.batches.len() > bs.len(), "some batches came in pieces");
            }
        }
    }

    #[tokio::test]
    async fn in_pieces_the_offsets_and_budget_decide_as_for_whole_batches() {
        let (mut mem, obj, _) = log(20);
        mem.boundary = Some(257);
        for (from, until, max_bytes) in [(104, 115, u64::MAX), (130, i64::MAX, 300), (0, 101, 1)] {
            let wanted = want(from, until, max_bytes);
            let (mut whole, mut pieces) = (Batches::default(), Batches::pieces());
            read_batches(&mem, &obj, 0..obj.size, &wanted, &mut whole)
                .await
                .unwrap();
            read_batches(&mem, &obj, 0..obj.size, &wanted, &mut pieces)
                .await
                .unwrap();
            assert_eq!(
                pieces.batches.concat(),
                whole.batches.concat(),
                "{wanted:?}"
            );
            assert_eq!(
                (pieces.bytes, pieces.next_offset, pieces.stopped),
                (whole.bytes, whole.next_offset, whole.stopped),
                "{wanted:?}"
            );
        }
    }

    #[test]
    fn a_batch_head_reads_what_the_whole_view_reads() {
        let (_, _, bs) = log(3);
        for b in &bs {
            let view = BatchView::parse(b, usize::MAX).unwrap();
            let head = BatchHead::parse(&b[..HEADER_LEN], usize::MAX).unwrap();
            assert_eq!(
                (head.size, head.base_offset, head.last_offset),
                (view.size(), view.base_offset(), view.last_offset())
            );
            assert!(BatchHead::parse(&b[..HEADER_LEN - 1], usize::MAX).is_err());
            let mut bad = b.to_vec();
            bad[16] = 1; // magic
            assert!(BatchHead::parse(&bad, usize::MAX).is_err());
        }
    }

    /// Reads all of `obj` into `out` from offset 100 on, within `max_bytes`.
    async fn read_all(mem: &Mem, obj: &ObjectRef, max_bytes: u64, out: &mut Batches) {
        let wanted = want(100, i64::MAX, max_bytes);
        read_batches(mem, obj, 0..obj.size, &wanted, out)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn budget_takes_the_first_batch_always_then_only_what_fits() {
        let (mem, obj, bs) = log(10);
        let mut out = Batches::default();
        read_all(&mem, &obj, 1, &mut out).await;
        assert_eq!(out.batches, bs[..1]);
        assert_eq!(out.stopped, Some(Stop::Budget));
        let two = (bs[0].len() + bs[1].len()) as u64;
        let mut out = Batches::default();
        read_all(&mem, &obj, two + 1, &mut out).await;
        assert_eq!(out.batches, bs[..2]);
        assert_eq!(out.bytes, two);
        assert_eq!(out.stopped, Some(Stop::Budget));
        // The budget holds across ranges: a second range adds nothing.
        let before = mem.reads.load(Ordering::Relaxed);
        read_all(&mem, &obj, two + 1, &mut out).await;
        assert_eq!(out.batches.len(), 2);
        assert_eq!(mem.reads.load(Ordering::Relaxed), before);
    }

    #[tokio::test]
    async fn a_small_budget_reads_little_of_a_large_range() {
        // ~2,000 batches of ~150 bytes: about 300 KiB, read with 1 KiB wanted.
        let (mem, obj, bs) = log(2000);
        assert!(obj.size > 4 * MIN_READ, "{}", obj.size);
        let mut out = Batches::default();
        read_all(&mem, &obj, 1024, &mut out).await;
        let taken: u64 = out.batches.iter().map(|b| b.len() as u64).sum();
        assert!(taken <= 1024 && !out.batches.is_empty());
        assert_eq!(out.batches[0], bs[0]);
        let asked = mem.read_bytes.load(Ordering::Relaxed) as u64;
        assert!(
            asked <= MIN_READ,
            "asked the store for {asked} bytes to answer 1 KiB of a {} byte range",
            obj.size
        );
    }

    #[tokio::test]
    async fn a_batch_larger_than_the_budget_left_ends_the_read_unread() {
        // One small batch, then one larger than the minimum read.
        let mut small = BatchBuilder::new(0, 0);
        small.push(RecordSpec::new(None, Some(vec![1; 10]), 0));
        let small = small.build(Compression::None).unwrap();
        let mut big = BatchBuilder::new(1, 0);
        big.push(RecordSpec::new(None, Some(vec![2; 200_000]), 0));
        let big = big.build(Compression::None).unwrap();
        let all = [small.clone(), big.clone()].concat();
        let obj = ObjectRef {
            endpoint: EndpointId::new("m"),
            key: ObjectKey::new("wal/2"),
            size: all.len() as u64,
        };
        let mem = Mem::new(all);
        let mut out = Batches::default();
        read_batches(&mem, &obj, 0..obj.size, &want(0, i64::MAX, 1000), &mut out)
            .await
            .unwrap();
        assert_eq!(out.batches, vec![small]);
        assert_eq!(out.stopped, Some(Stop::Budget));
        assert!(mem.read_bytes.load(Ordering::Relaxed) as u64 <= 2 * MIN_READ);
        // Alone, the large batch comes whole, whatever the budget.
        let mut out = Batches::default();
        let wanted = want(1, i64::MAX, 1);
        read_batches(&mem, &obj, 0..obj.size, &wanted, &mut out)
            .await
            .unwrap();
        assert_eq!(out.batches, vec![big]);
    }

    #[tokio::test]
    async fn a_range_of_one_partition_inside_a_larger_object() {
        let (mem, obj, bs) = log(6);
        let start = bs[0].len() as u64;
        let end = start + (bs[1].len() + bs[2].len()) as u64;
        let mut out = Batches::default();
        read_batches(
            &mem,
            &obj,
            start..end,
            &want(0, i64::MAX, u64::MAX),
            &mut out,
        )
        .await
        .unwrap();
        assert_eq!(out.batches, bs[1..3]);
        assert_eq!(out.stopped, None, "the range ended, not the read");
        assert_eq!(
            mem.reads.load(Ordering::Relaxed),
            1,
            "one read for a small range"
        );
    }

    #[tokio::test]
    async fn a_batch_cut_by_the_range_or_garbage_is_corrupt() {
        let (mem, obj, _) = log(3);
        let mut out = Batches::default();
        let err = read_batches(
            &mem,
            &obj,
            0..obj.size - 1,
            &want(0, i64::MAX, u64::MAX),
            &mut out,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{err}");
        let err = read_batches(
            &mem,
            &obj,
            5..obj.size,
            &want(0, i64::MAX, u64::MAX),
            &mut out,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{err}");
    }
}
