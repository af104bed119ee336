//! `share.isolation.level=read_committed`: which offsets of the batches a
//! share-partition's owner read must never be delivered to the group.
//! Those are the records of aborted transactions and the transaction
//! markers (control batches). The owner reads only below the last stable
//! offset, so every transaction in what it read is decided; the aborted
//! ones come with the read (`FetchData::aborted`).

use floe_metadata::txn::AbortedTxn;
use floe_storage::batch::BatchView;

/// Offset ranges (first, last, both included) of `records` (whole batches
/// in offset order, as a fetch returns them) that a `read_committed` group
/// must not see: control batches, and the transactional batches of a
/// producer within one of its `aborted` transactions. Stops at the first
/// batch that does not parse (a cut one at the end): what follows is not
/// acquired either, since acquisition stops at the last whole batch.
pub fn hidden(records: &[u8], aborted: &[AbortedTxn]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = records.get(pos..).filter(|r| !r.is_empty()) {
        let Ok(view) = BatchView::parse(rest, usize::MAX) else {
            break;
        };
        let (first, last) = (view.base_offset(), view.last_offset());
        let hide = view.is_control()
            || (view.is_transactional()
                && aborted.iter().any(|a| {
                    a.producer_id.0 == view.producer_id()
                        && a.first_offset <= first
                        && first <= a.last_offset
                }));
        if hide {
            match out.last_mut() {
                Some(prev) if prev.1 + 1 == first => prev.1 = last,
                _ => out.push((first, last)),
            }
        }
        pos += view.size();
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use floe_metadata::ids::ProducerId;
    use floe_storage::batch::Compression;
    use floe_storage::control::{ControlType, Marker, marker_batch};
    use floe_storage::records::{BatchBuilder, RecordSpec};

    use super::*;

    /// A batch of `n` records at `base`, transactional for `producer` if
    /// one is given.
    fn batch(base: i64, n: usize, producer: Option<i64>) -> Vec<u8> {
        let mut b = BatchBuilder::new(base, 1);
        if let Some(p) = producer {
            b = b.producer(p, 0, 0, true);
        }
        for i in 0..n {
            b.push(RecordSpec::new(None, Some(vec![i as u8]), 0));
        }
        b.build(Compression::None).unwrap().to_vec()
    }

    fn marker(at: i64, producer: i64, kind: ControlType) -> Vec<u8> {
        let m = Marker {
            kind,
            producer_id: producer,
            producer_epoch: 0,
            coordinator_epoch: 0,
        };
        let mut b = marker_batch(&m, 1).unwrap().to_vec();
        b[0..8].copy_from_slice(&at.to_be_bytes());
        b
    }

    fn aborted(producer: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: ProducerId(producer),
            first_offset: first,
            last_offset: last,
        }
    }

    #[test]
    fn aborted_records_and_markers_are_hidden_committed_and_plain_ones_are_not() {
        // 0–1 plain; 2–3 producer 7 (aborted at 6); 4 producer 8 (committed
        // at 7); 5 producer 7 again, same aborted transaction; 6 and 7 the
        // markers; 8–9 producer 7's next transaction (not aborted).
        let mut log = Vec::new();
        log.extend(batch(0, 2, None));
        log.extend(batch(2, 2, Some(7)));
        log.extend(batch(4, 1, Some(8)));
        log.extend(batch(5, 1, Some(7)));
        log.extend(marker(6, 7, ControlType::Abort));
        log.extend(marker(7, 8, ControlType::Commit));
        log.extend(batch(8, 2, Some(7)));
        let hidden = hidden(&log, &[aborted(7, 2, 6)]);
        assert_eq!(hidden, vec![(2, 3), (5, 7)]);
        // Nothing aborted: only the markers.
        assert_eq!(super::hidden(&log, &[]), vec![(6, 7)]);
    }

    #[test]
    fn a_cut_or_garbled_tail_ends_the_walk_without_a_panic() {
        let mut log = batch(0, 2, Some(7));
        log.extend(marker(2, 7, ControlType::Abort));
        let whole = hidden(&log, &[aborted(7, 0, 2)]);
        assert_eq!(whole, vec![(0, 2)]);
        let cut = &log[..log.len() - 3];
        assert_eq!(hidden(cut, &[aborted(7, 0, 2)]), vec![(0, 1)]);
        assert!(hidden(&[0xff; 100], &[]).is_empty());
        assert!(hidden(&[], &[]).is_empty());
    }
}
