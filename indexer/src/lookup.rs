//! Searches one export file by key and time range.
//!
//! Row groups are skipped, cheapest test first, when the `timestamp`
//! column's min/max statistics lie outside the range, when the `key`
//! column's min/max statistics exclude the key, or when the key's bloom
//! filter says it is absent. Inside the remaining row groups the page index
//! skips pages whose min/max exclude the range or key, and a row filter
//! decodes `key` and `timestamp` first so that `value` and `headers` are
//! decoded only for matching rows. Typed index columns are never read, so
//! files written with different index definitions are searched alike.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::{
    Array, BinaryArray, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampMillisecondArray,
};
use arrow_schema::{ArrowError, DataType, Schema, TimeUnit};
use bytes::Bytes;
use floe_storage::records::{Record, RecordHeader};
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderOptions, RowFilter, RowSelection, RowSelector,
};
use parquet::arrow::async_reader::{
    AsyncFileReader, ParquetRecordBatchStreamBuilder, RowGroupSelection,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData,
};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics;

use crate::columns::{
    COL_HEADERS, COL_KEY, COL_OFFSET, COL_PARTITION, COL_TIMESTAMP, COL_VALUE, HEADER_KEY,
    HEADER_VALUE,
};

/// What to look for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Records whose key equals these bytes (a null key never matches).
    pub key: Option<Bytes>,
    /// Inclusive lower bound of the record timestamp, epoch milliseconds.
    pub from_ms: Option<i64>,
    /// Exclusive upper bound of the record timestamp, epoch milliseconds.
    pub to_ms: Option<i64>,
    /// Most records to return.
    pub limit: usize,
}

impl Query {
    /// Whether a record with this key and timestamp matches (the limit aside).
    pub fn matches(&self, key: Option<&[u8]>, timestamp: i64) -> bool {
        self.key_matches(key) && self.time_matches(timestamp)
    }

    fn key_matches(&self, key: Option<&[u8]>) -> bool {
        match &self.key {
            Some(wanted) => key == Some(wanted.as_ref()),
            None => true,
        }
    }

    fn time_matches(&self, timestamp: i64) -> bool {
        self.from_ms.is_none_or(|from| timestamp >= from)
            && self.to_ms.is_none_or(|to| timestamp < to)
    }

    fn has_time_range(&self) -> bool {
        self.from_ms.is_some() || self.to_ms.is_some()
    }

    /// Whether some timestamp in `[min, max]` may be in the range.
    fn time_overlaps(&self, min: i64, max: i64) -> bool {
        self.from_ms.is_none_or(|from| max >= from) && self.to_ms.is_none_or(|to| min < to)
    }

    /// Whether the key may lie in `[min, max]` (byte-wise order, as Parquet
    /// orders binary statistics; truncated statistics are still bounds).
    fn key_within(&self, min: &[u8], max: &[u8]) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| min <= k.as_ref() && k.as_ref() <= max)
    }

    /// True when no timestamp can match (`from >= to`).
    fn range_is_empty(&self) -> bool {
        matches!((self.from_ms, self.to_ms), (Some(from), Some(to)) if from >= to)
    }
}

/// One matching record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub partition: u32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys (stored as UTF-8, invalid bytes replaced when written).
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl Found {
    /// `r`, a record of `partition`, as a lookup answers it (header keys
    /// as UTF-8, invalid bytes replaced, as the exports store them).
    pub fn of(partition: u32, r: Record) -> Self {
        Self {
            partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: r
                .headers
                .into_iter()
                .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                .collect(),
        }
    }

    /// The record again, as an export file holds it (a compaction
    /// rewrites what it read).
    pub fn into_record(self) -> Record {
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key,
            value: self.value,
            headers: self
                .headers
                .into_iter()
                .map(|(k, v)| RecordHeader {
                    key: k.into_bytes().into(),
                    value: v,
                })
                .collect(),
        }
    }
}

/// What searching one file did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileSearch {
    /// Row groups in the file.
    pub row_groups: usize,
    /// Row groups whose data was fetched and decoded.
    pub row_groups_read: usize,
    /// Row groups skipped by row-group statistics or the page index.
    pub pruned_by_stats: usize,
    /// Row groups skipped by the key's bloom filter.
    pub pruned_by_bloom: usize,
    /// Rows decoded: those whose `key`/`timestamp` the filter tested, or,
    /// without a key or time range, the rows returned.
    pub rows_read: u64,
}

/// Why a file could not be searched.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The store failed, or the file is corrupt or truncated.
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: ParquetError,
    },
    /// Decoding the file's data failed (a corrupt file).
    #[error("decoding {path}: {source}")]
    Decode {
        path: String,
        #[source]
        source: ArrowError,
    },
    /// The file lacks a column of an export file, or has it with another type.
    #[error("{path} is not an export file: {why}")]
    Schema { path: String, why: String },
}

impl LookupError {
    /// True when the object is not in the store (deleted since it was listed,
    /// e.g. by retention or a backfill): the caller may skip it.
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::Read {
                source: ParquetError::External(e),
                ..
            } => matches!(
                e.downcast_ref::<object_store::Error>(),
                Some(object_store::Error::NotFound { .. })
            ),
            _ => false,
        }
    }
}

/// Bytes fetched with the footer in one request, enough for the metadata of
/// a file with a few dozen row groups.
const FOOTER_PREFETCH: usize = 64 * 1024;

/// An export file read by ranges from an object store (what the deprecated
/// `ParquetObjectReader` did, with the size known from the listing).
struct StoreFile {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
}

impl StoreFile {
    fn check(&self, range: &Range<u64>) -> parquet::errors::Result<()> {
        if range.start > range.end || range.end > self.size {
            return Err(ParquetError::General(format!(
                "byte range {}..{} outside a file of {} bytes",
                range.start, range.end, self.size
            )));
        }
        Ok(())
    }
}

fn store_err(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.check(&range)?;
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(store_err)
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            for range in &ranges {
                self.check(range)?;
            }
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(store_err)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .with_prefetch_hint(Some(FOOTER_PREFETCH))
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// Indexes of the columns a search uses: leaf (Parquet column chunk) indexes
/// of `timestamp` and `key`, root (top-level field) indexes of the output.
struct Layout {
    timestamp_leaf: usize,
    key_leaf: usize,
    output_roots: Vec<usize>,
}

/// Searches the export file at `path` (`size` bytes) and returns the matching
/// records in file order, at most `q.limit` of them.
///
/// Fetches are async; decoding the `key`/`timestamp` pages of the row groups
/// left after pruning runs on the calling task.
///
/// `max_rows` bounds the rows the footer may claim (the export's row count,
/// which the metadata keeps): a footer claiming more is a corrupt or foreign
/// file, refused before any page is decoded (a hostile row count can make
/// the decoder skip through rows for a very long time).
///
/// The footer is checked before the reader uses it (`check_layout`); the
/// pages themselves are decoded by parquet, which asserts on some malformed
/// data (fuzzing found one in its definition-level decoder). Such a panic is
/// caught here and becomes an error naming the file.
pub async fn search_file(
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    q: &Query,
    max_rows: u64,
) -> Result<(Vec<Found>, FileSearch), LookupError> {
    let name = path.to_string();
    let search = std::panic::AssertUnwindSafe(search_checked(store, path, size, q, max_rows));
    match search.catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(LookupError::Schema {
                path: name,
                why: format!("the Parquet reader failed on it: {why}"),
            })
        }
    }
}

async fn search_checked(
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    q: &Query,
    max_rows: u64,
) -> Result<(Vec<Found>, FileSearch), LookupError> {
    let read_err = |source: ParquetError| LookupError::Read {
        path: path.to_string(),
        source,
    };
    let reader = StoreFile {
        store,
        path: path.clone(),
        size,
    };
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_options(reader, options)
        .await
        .map_err(read_err)?;
    let layout = layout(builder.schema(), builder.parquet_schema().columns()).map_err(|why| {
        LookupError::Schema {
            path: path.to_string(),
            why,
        }
    })?;
    let metadata = Arc::clone(builder.metadata());
    let claimed = metadata.row_groups().iter().try_fold(0u64, |sum, rg| {
        u64::try_from(rg.num_rows())
            .ok()
            .and_then(|n| sum.checked_add(n))
    });
    if claimed.is_none_or(|n| n > max_rows)
        || u64::try_from(metadata.file_metadata().num_rows()).map_or(true, |n| n > max_rows)
    {
        return Err(LookupError::Schema {
            path: path.to_string(),
            why: format!("the footer claims more rows than the export's {max_rows}"),
        });
    }
    check_layout(&metadata, size).map_err(|why| LookupError::Schema {
        path: path.to_string(),
        why,
    })?;
    let mut stats = FileSearch {
        row_groups: metadata.num_row_groups(),
        ..FileSearch::default()
    };
    if q.limit == 0 {
        return Ok((Vec::new(), stats));
    }

    let mut selections = Vec::new();
    for rg in 0..metadata.num_row_groups() {
        let rg_meta = metadata.row_group(rg);
        if q.range_is_empty() || !row_group_may_match(rg_meta, &layout, q) {
            stats.pruned_by_stats += 1;
            continue;
        }
        if let Some(key) = &q.key {
            let bloom = builder
                .get_row_group_column_bloom_filter(rg, layout.key_leaf)
                .await
                .map_err(read_err)?;
            if bloom.is_some_and(|b| !b.check(key.as_ref())) {
                stats.pruned_by_bloom += 1;
                continue;
            }
        }
        let selection = page_selection(&metadata, rg, &layout, q);
        if selection.as_ref().is_some_and(|s| !s.selects_any()) {
            stats.pruned_by_stats += 1;
            continue;
        }
        selections.push(RowGroupSelection::new(rg, selection));
    }
    if selections.is_empty() {
        return Ok((Vec::new(), stats));
    }

    let descr = builder.parquet_schema();
    let output = ProjectionMask::roots(descr, layout.output_roots.iter().copied());
    let mut filter_leaves = Vec::new();
    if q.has_time_range() {
        filter_leaves.push(layout.timestamp_leaf);
    }
    if q.key.is_some() {
        filter_leaves.push(layout.key_leaf);
    }
    let filtered = !filter_leaves.is_empty();
    let tested = Arc::new(AtomicU64::new(0));
    let filter = filtered.then(|| {
        let mask = ProjectionMask::leaves(descr, filter_leaves);
        let query = q.clone();
        let tested = Arc::clone(&tested);
        RowFilter::new(vec![Box::new(ArrowPredicateFn::new(
            mask,
            move |batch: RecordBatch| {
                tested.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                filter_batch(&batch, &query)
            },
        ))])
    });

    let mut builder = builder
        .with_projection(output)
        .with_row_group_selections(selections)
        .with_limit(q.limit);
    if let Some(filter) = filter {
        builder = builder.with_row_filter(filter);
    }
    let mut stream = builder.build().map_err(read_err)?;

    let mut found = Vec::new();
    let mut returned = 0u64;
    'row_groups: while let Some(reader) = stream.next_row_group().await.map_err(read_err)? {
        stats.row_groups_read += 1;
        for batch in reader {
            let batch = batch.map_err(|source| LookupError::Decode {
                path: path.to_string(),
                source,
            })?;
            returned += batch.num_rows() as u64;
            append_found(&batch, &mut found).map_err(|source| LookupError::Decode {
                path: path.to_string(),
                source,
            })?;
            if found.len() >= q.limit {
                found.truncate(q.limit);
                break 'row_groups;
            }
        }
    }
    stats.rows_read = if filtered {
        tested.load(Ordering::Relaxed)
    } else {
        returned
    };
    Ok((found, stats))
}

/// Finds the columns a search needs and checks their types.
fn layout(
    schema: &Schema,
    leaves: &[parquet::schema::types::ColumnDescPtr],
) -> Result<Layout, String> {
    let expect = |name: &str, ok: fn(&DataType) -> bool| -> Result<usize, String> {
        let (index, field) = schema
            .column_with_name(name)
            .ok_or_else(|| format!("no `{name}` column"))?;
        if ok(field.data_type()) {
            Ok(index)
        } else {
            Err(format!("column `{name}` is {}", field.data_type()))
        }
    };
    let binary = |t: &DataType| *t == DataType::Binary;
    let output_roots = vec![
        expect(COL_PARTITION, |t| *t == DataType::Int32)?,
        expect(COL_OFFSET, |t| *t == DataType::Int64)?,
        expect(COL_TIMESTAMP, |t| {
            matches!(t, DataType::Timestamp(TimeUnit::Millisecond, _))
        })?,
        expect(COL_KEY, binary)?,
        expect(COL_VALUE, binary)?,
        expect(COL_HEADERS, |t| match t {
            DataType::List(element) => match element.data_type() {
                DataType::Struct(fields) => {
                    fields
                        .find(HEADER_KEY)
                        .is_some_and(|(_, f)| *f.data_type() == DataType::Utf8)
                        && fields
                            .find(HEADER_VALUE)
                            .is_some_and(|(_, f)| *f.data_type() == DataType::Binary)
                }
                _ => false,
            },
            _ => false,
        })?,
    ];
    let leaf = |name: &str| {
        leaves
            .iter()
            .position(|c| c.path().parts() == [name])
            .ok_or_else(|| format!("no `{name}` leaf column"))
    };
    Ok(Layout {
        timestamp_leaf: leaf(COL_TIMESTAMP)?,
        key_leaf: leaf(COL_KEY)?,
        output_roots,
    })
}

/// Whether a row group's statistics allow a match (true when unknown).
fn row_group_may_match(rg: &RowGroupMetaData, layout: &Layout, q: &Query) -> bool {
    if q.has_time_range()
        && let Some(Statistics::Int64(s)) = rg.column(layout.timestamp_leaf).statistics()
        && let (Some(min), Some(max)) = (s.min_opt(), s.max_opt())
        && !q.time_overlaps(*min, *max)
    {
        return false;
    }
    if q.key.is_some()
        && let Some(Statistics::ByteArray(s)) = rg.column(layout.key_leaf).statistics()
    {
        let num_rows = u64::try_from(rg.num_rows()).ok();
        if num_rows.is_some() && s.null_count_opt() == num_rows {
            return false; // every key is null
        }
        if let (Some(min), Some(max)) = (s.min_opt(), s.max_opt())
            && !q.key_within(min.data(), max.data())
        {
            return false;
        }
    }
    true
}

/// Rows of row group `rg` left after pruning pages with the page index, or
/// None when the index does not narrow them (absent, or every page may match).
fn page_selection(
    metadata: &ParquetMetaData,
    rg: usize,
    layout: &Layout,
    q: &Query,
) -> Option<RowSelection> {
    let num_rows = usize::try_from(metadata.row_group(rg).num_rows()).ok()?;
    let page_index = metadata.page_index_for_row_group(rg);
    let pages = |leaf: usize, keep: &dyn Fn(&ColumnIndexMetaData, usize) -> bool| {
        let column_index = page_index.column_index(leaf)?;
        let locations = page_index.offset_index(leaf)?.page_locations();
        pages_to_selection(locations, num_rows, |page| {
            usize::try_from(column_index.num_pages())
                .ok()
                .is_none_or(|n| page >= n || keep(column_index, page))
        })
    };
    let by_time = if q.has_time_range() {
        pages(layout.timestamp_leaf, &|index, page| match index {
            ColumnIndexMetaData::INT64(index) if index.is_null_page(page) => false,
            ColumnIndexMetaData::INT64(index) => {
                match (index.min_value(page), index.max_value(page)) {
                    (Some(min), Some(max)) => q.time_overlaps(*min, *max),
                    _ => true,
                }
            }
            _ => true,
        })
    } else {
        None
    };
    let by_key = if q.key.is_some() {
        pages(layout.key_leaf, &|index, page| match index {
            ColumnIndexMetaData::BYTE_ARRAY(index) if index.is_null_page(page) => false,
            ColumnIndexMetaData::BYTE_ARRAY(index) => {
                match (index.min_value(page), index.max_value(page)) {
                    (Some(min), Some(max)) => q.key_within(min, max),
                    _ => true,
                }
            }
            _ => true,
        })
    } else {
        None
    };
    let selection = match (by_time, by_key) {
        (Some(a), Some(b)) => a.intersection(&b),
        (a, b) => a.or(b)?,
    };
    (selection.skipped_row_count() > 0).then_some(selection)
}

/// Checks that every byte range and row number the footer gives lies where a
/// valid file has it, before the reader uses one: column chunks and bloom
/// filters inside the file, the pages of the offset index inside their
/// column chunk and in order, starting at row 0 with first rows that never
/// go back nor past the row group. Parquet's reader adds and subtracts such
/// numbers unchecked (or asserts on them), so a hostile footer could
/// overflow or panic there.
fn check_layout(metadata: &ParquetMetaData, size: u64) -> Result<(), String> {
    // The range start..start+len as u64, if it lies within `within`.
    let inside = |what: &str, start: i64, len: i64, within: Range<u64>| {
        let range = u64::try_from(start)
            .ok()
            .zip(u64::try_from(len).ok())
            .and_then(|(s, l)| Some(s..s.checked_add(l)?))
            .filter(|r| r.start >= within.start && r.end <= within.end);
        range.ok_or_else(|| {
            format!("the footer puts {what} at {start}+{len}, outside its bounds {within:?}")
        })
    };
    for (rg, rg_meta) in metadata.row_groups().iter().enumerate() {
        for (c, col) in rg_meta.columns().iter().enumerate() {
            let start = col
                .dictionary_page_offset()
                .unwrap_or(col.data_page_offset());
            let what = format!("row group {rg} column {c}");
            let chunk = inside(&what, start, col.compressed_size(), 0..size)?;
            inside(&what, col.data_page_offset(), 0, chunk.clone())?;
            if let Some(offset) = col.bloom_filter_offset() {
                let len = col.bloom_filter_length().map_or(0, i64::from);
                inside(&format!("{what}'s bloom filter"), offset, len, 0..size)?;
            }
            let page_index = metadata.page_index_for_row_group(rg);
            let pages = page_index.offset_index(c).map(|i| i.page_locations());
            let mut next = chunk.start;
            let mut row = 0;
            for (page, loc) in pages.into_iter().flatten().enumerate() {
                let what = format!("{what} page {page}");
                let len = i64::from(loc.compressed_page_size);
                next = inside(&what, loc.offset, len, next..chunk.end)?.end;
                let first = loc.first_row_index;
                if (page == 0 && first != 0) || first < row || first > rg_meta.num_rows() {
                    return Err(format!(
                        "the footer starts {what} at row {first} (the page before at row {row}) in a row group of {} rows",
                        rg_meta.num_rows()
                    ));
                }
                row = first;
            }
        }
    }
    Ok(())
}

/// A selection keeping the rows of the pages `keep` accepts; None when the
/// page locations are not consistent with the row group.
fn pages_to_selection(
    locations: &[parquet::file::page_index::offset_index::PageLocation],
    num_rows: usize,
    keep: impl Fn(usize) -> bool,
) -> Option<RowSelection> {
    let mut selectors = Vec::with_capacity(locations.len());
    for (page, location) in locations.iter().enumerate() {
        let first = usize::try_from(location.first_row_index).ok()?;
        let end = match locations.get(page + 1) {
            Some(next) => usize::try_from(next.first_row_index).ok()?,
            None => num_rows,
        };
        if (page == 0 && first != 0) || end < first || end > num_rows {
            return None;
        }
        let rows = end - first;
        selectors.push(if keep(page) {
            RowSelector::select(rows)
        } else {
            RowSelector::skip(rows)
        });
    }
    if locations.is_empty() && num_rows > 0 {
        return None;
    }
    Some(RowSelection::from(selectors))
}

/// The row filter: which rows of a `key`/`timestamp` batch match.
fn filter_batch(batch: &RecordBatch, q: &Query) -> Result<BooleanArray, ArrowError> {
    let timestamps = if q.has_time_range() {
        Some(downcast::<TimestampMillisecondArray>(batch, COL_TIMESTAMP)?)
    } else {
        None
    };
    let keys = if q.key.is_some() {
        Some(downcast::<BinaryArray>(batch, COL_KEY)?)
    } else {
        None
    };
    Ok((0..batch.num_rows())
        .map(|i| {
            let time_ok = timestamps.is_none_or(|t| t.is_valid(i) && q.time_matches(t.value(i)));
            let key_ok = keys.is_none_or(|k| q.key_matches(k.is_valid(i).then(|| k.value(i))));
            Some(time_ok && key_ok)
        })
        .collect())
}

fn downcast<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, ArrowError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| ArrowError::SchemaError(format!("column `{name}` missing or mistyped")))
}

fn optional_bytes(array: &BinaryArray, i: usize) -> Option<Bytes> {
    array
        .is_valid(i)
        .then(|| Bytes::copy_from_slice(array.value(i)))
}

/// Turns a batch of output columns into found records.
fn append_found(batch: &RecordBatch, found: &mut Vec<Found>) -> Result<(), ArrowError> {
    let partitions = downcast::<Int32Array>(batch, COL_PARTITION)?;
    let offsets = downcast::<Int64Array>(batch, COL_OFFSET)?;
    let timestamps = downcast::<TimestampMillisecondArray>(batch, COL_TIMESTAMP)?;
    let keys = downcast::<BinaryArray>(batch, COL_KEY)?;
    let values = downcast::<BinaryArray>(batch, COL_VALUE)?;
    let headers = downcast::<ListArray>(batch, COL_HEADERS)?;
    let header_struct = headers
        .values()
        .as_any()
        .downcast_ref::<StructArray>()
        .ok_or_else(|| ArrowError::SchemaError("`headers` elements are not structs".into()))?;
    let header_keys = header_struct
        .column_by_name(HEADER_KEY)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| ArrowError::SchemaError("`headers` element has no Utf8 `key`".into()))?;
    let header_values = header_struct
        .column_by_name(HEADER_VALUE)
        .and_then(|c| c.as_any().downcast_ref::<BinaryArray>())
        .ok_or_else(|| ArrowError::SchemaError("`headers` element has no Binary `value`".into()))?;
    let header_offsets = headers.value_offsets();

    for row in 0..batch.num_rows() {
        let partition = u32::try_from(partitions.value(row)).map_err(|_| {
            ArrowError::InvalidArgumentError(format!(
                "negative partition {}",
                partitions.value(row)
            ))
        })?;
        let mut record_headers = Vec::new();
        if headers.is_valid(row) {
            let start = usize::try_from(header_offsets[row]).unwrap_or(0);
            let end = usize::try_from(header_offsets[row + 1]).unwrap_or(0);
            if end > header_keys.len() || end > header_values.len() || start > end {
                return Err(ArrowError::InvalidArgumentError(
                    "`headers` offsets out of bounds".into(),
                ));
            }
            record_headers.reserve(end - start);
            for h in start..end {
                let key = if header_keys.is_valid(h) {
                    header_keys.value(h).to_string()
                } else {
                    String::new()
                };
                record_headers.push((key, optional_bytes(header_values, h)));
            }
        }
        found.push(Found {
            partition,
            offset: offsets.value(row),
            timestamp: timestamps.value(row),
            key: optional_bytes(keys, row),
            value: optional_bytes(values, row),
            headers: record_headers,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::{FileCompression, FileOptions, write_file};
    use floe_metadata::export_def::IndexDefinition;
    use floe_storage::records::{Record, RecordHeader};
    use object_store::memory::InMemory;

    const T0: i64 = 1_764_400_000_000;

    /// Keys `k{row group}-{0..7}` (distinct per row group of `per_group`
    /// rows), every 11th key null, timestamps a second apart with every 13th
    /// record five seconds late.
    fn records(rows: i64, per_group: i64) -> Vec<Record> {
        (0..rows)
            .map(|i| Record {
                offset: 1000 + i,
                timestamp: T0 + i * 1000 - if i % 13 == 0 { 5000 } else { 0 },
                key: (i % 11 != 10).then(|| Bytes::from(format!("k{}-{}", i / per_group, i % 7))),
                value: Some(Bytes::from(format!("{{\"i\":{i},\"s\":\"v{i}\"}}"))),
                headers: vec![
                    RecordHeader {
                        key: Bytes::from_static(b"i"),
                        value: Some(Bytes::from(i.to_string())),
                    },
                    RecordHeader {
                        key: Bytes::from_static(&[b'x', 0xff]),
                        value: None,
                    },
                ],
            })
            .collect()
    }

    fn typed() -> IndexDefinition {
        IndexDefinition::parse(
            r#"[{"name":"i","path":"$.i","type":"int64"},{"name":"s","path":"$.s","type":"string"}]"#,
        )
        .expect("definition")
    }

    async fn stored(
        records: &[Record],
        def: &IndexDefinition,
        row_group_rows: usize,
    ) -> (Arc<dyn ObjectStore>, Path, u64) {
        let file = write_file(
            2,
            records,
            def,
            &FileOptions {
                compression: FileCompression::Zstd,
                row_group_rows,
            },
        )
        .expect("write");
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from(
            "exports/t/dt=2025-11-29/hr=07/2-00000000000000001000-00000000000000001499.parquet",
        );
        let size = file.len() as u64;
        store.put(&path, file.into()).await.expect("put");
        (store, path, size)
    }

    fn query(key: Option<&str>, from_ms: Option<i64>, to_ms: Option<i64>, limit: usize) -> Query {
        Query {
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            from_ms,
            to_ms,
            limit,
        }
    }

    fn brute_force(records: &[Record], q: &Query) -> Vec<i64> {
        records
            .iter()
            .filter(|r| q.matches(r.key.as_deref(), r.timestamp))
            .take(q.limit)
            .map(|r| r.offset)
            .collect()
    }

    async fn search(
        (store, path, size): &(Arc<dyn ObjectStore>, Path, u64),
        q: &Query,
    ) -> (Vec<Found>, FileSearch) {
        search_file(Arc::clone(store), path.clone(), *size, q, u64::MAX)
            .await
            .expect("search")
    }

    fn offsets(found: &[Found]) -> Vec<i64> {
        found.iter().map(|f| f.offset).collect()
    }

    #[test]
    fn query_matches_key_and_half_open_range() {
        let q = query(Some("a"), Some(10), Some(20), 1);
        assert!(q.matches(Some(b"a"), 10));
        assert!(q.matches(Some(b"a"), 19));
        assert!(!q.matches(Some(b"a"), 20));
        assert!(!q.matches(Some(b"a"), 9));
        assert!(!q.matches(Some(b"b"), 15));
        assert!(!q.matches(None, 15));
        let any = query(None, None, None, 1);
        assert!(any.matches(None, i64::MIN));
        assert!(any.matches(Some(b""), i64::MAX));
    }

    #[tokio::test]
    async fn key_lookup_equals_brute_force_and_reads_one_row_group() {
        let records = records(500, 100);
        for def in [IndexDefinition::default(), typed()] {
            let file = stored(&records, &def, 100).await;
            for key in ["k0-0", "k2-3", "k4-6"] {
                let q = query(Some(key), None, None, 1000);
                let (found, stats) = search(&file, &q).await;
                let expected = brute_force(&records, &q);
                assert!(!expected.is_empty());
                assert_eq!(offsets(&found), expected, "{key}");
                assert!(
                    found
                        .iter()
                        .all(|f| f.key.as_deref() == Some(key.as_bytes()))
                );
                assert_eq!(stats.row_groups, 5);
                assert_eq!(stats.row_groups_read, 1, "{key}");
                assert_eq!(stats.pruned_by_stats, 4, "{key}");
                assert!(stats.rows_read <= 100, "{stats:?}");
            }
        }
    }

    #[tokio::test]
    async fn time_range_lookup_equals_brute_force() {
        let records = records(500, 100);
        let file = stored(&records, &typed(), 100).await;
        let cases = [
            (Some(T0 + 120_000), Some(T0 + 180_000)),
            (Some(T0 + 99_000), Some(T0 + 101_000)),
            (Some(T0 + 450_000), None),
            (None, Some(T0 + 20_000)),
            (Some(T0 - 10_000), Some(T0 + 10_000_000)),
            (Some(T0 + 10_000_000), None),
            (Some(T0 + 50_000), Some(T0 + 50_000)),
        ];
        for (from, to) in cases {
            let q = query(None, from, to, 10_000);
            let (found, stats) = search(&file, &q).await;
            assert_eq!(
                offsets(&found),
                brute_force(&records, &q),
                "{from:?}..{to:?}"
            );
            assert_eq!(
                stats.row_groups_read + stats.pruned_by_stats + stats.pruned_by_bloom,
                5
            );
        }
        let narrow = query(None, Some(T0 + 120_000), Some(T0 + 180_000), 10_000);
        let (_, stats) = search(&file, &narrow).await;
        assert_eq!(stats.row_groups_read, 1);
        assert_eq!(stats.pruned_by_stats, 4);
        let empty = query(None, Some(T0 + 50_000), Some(T0 + 50_000), 10_000);
        assert_eq!(search(&file, &empty).await.1.row_groups_read, 0);
    }

    #[tokio::test]
    async fn key_and_time_range_combine() {
        let records = records(500, 100);
        let file = stored(&records, &typed(), 100).await;
        for (key, from, to) in [
            ("k1-2", T0 + 100_000, T0 + 150_000),
            ("k1-2", T0 + 150_000, T0 + 200_000),
            ("k3-0", T0, T0 + 100_000),
        ] {
            let q = query(Some(key), Some(from), Some(to), 100);
            let (found, _) = search(&file, &q).await;
            assert_eq!(
                offsets(&found),
                brute_force(&records, &q),
                "{key} {from} {to}"
            );
        }
    }

    #[tokio::test]
    async fn absent_key_reads_no_row_group() {
        let records = records(500, 100);
        let file = stored(&records, &typed(), 100).await;
        // Inside row group 2's key range ("k2-0".."k2-6"): only the bloom filter excludes it.
        let (found, stats) = search(&file, &query(Some("k2-35"), None, None, 10)).await;
        assert!(found.is_empty());
        assert_eq!(stats.row_groups_read, 0);
        assert_eq!(stats.pruned_by_bloom, 1, "{stats:?}");
        assert_eq!(stats.pruned_by_stats, 4, "{stats:?}");
        assert_eq!(stats.rows_read, 0);
        // Outside every row group's range.
        let (found, stats) = search(&file, &query(Some("zzz"), None, None, 10)).await;
        assert!(found.is_empty());
        assert_eq!(stats.row_groups_read, 0);
        assert_eq!(stats.pruned_by_stats, 5);
        // The empty key is below every minimum.
        let (found, stats) = search(&file, &query(Some(""), None, None, 10)).await;
        assert!(found.is_empty());
        assert_eq!(stats.row_groups_read, 0);
    }

    #[tokio::test]
    async fn limit_is_honoured_in_file_order() {
        let records = records(500, 100);
        let file = stored(&records, &typed(), 100).await;
        let all = query(None, None, None, 10);
        let (found, stats) = search(&file, &all).await;
        assert_eq!(offsets(&found), (1000..1010).collect::<Vec<_>>());
        assert_eq!(stats.row_groups_read, 1);

        let range = query(None, Some(T0 + 95_000), None, 30);
        let (found, _) = search(&file, &range).await;
        assert_eq!(found.len(), 30);
        assert_eq!(offsets(&found), brute_force(&records, &range));

        let key = query(Some("k1-1"), None, None, 3);
        let (found, _) = search(&file, &key).await;
        assert_eq!(offsets(&found), brute_force(&records, &key));
        assert_eq!(found.len(), 3);

        let (found, stats) = search(&file, &query(None, None, None, 0)).await;
        assert!(found.is_empty());
        assert_eq!(stats.row_groups_read, 0);
    }

    #[tokio::test]
    async fn found_records_carry_every_field() {
        let records = records(30, 100);
        let file = stored(&records, &IndexDefinition::default(), 8).await;
        let (found, stats) = search(&file, &query(None, None, None, 1000)).await;
        assert_eq!(stats.row_groups, 4);
        assert_eq!(stats.rows_read, 30);
        assert_eq!(found.len(), 30);
        for (f, r) in found.iter().zip(&records) {
            assert_eq!(f.partition, 2);
            assert_eq!(f.offset, r.offset);
            assert_eq!(f.timestamp, r.timestamp);
            assert_eq!(f.key, r.key);
            assert_eq!(f.value, r.value);
            let i = r.offset - 1000;
            assert_eq!(
                f.headers,
                vec![
                    ("i".to_string(), Some(Bytes::from(i.to_string()))),
                    ("x\u{fffd}".to_string(), None),
                ]
            );
        }
    }

    #[tokio::test]
    async fn page_index_skips_pages_inside_a_row_group() {
        // One row group of 50 000 rows: timestamp pages of about 20 000 rows.
        let records: Vec<Record> = (0..50_000)
            .map(|i| Record {
                offset: i,
                timestamp: T0 + i,
                key: Some(Bytes::from(format!("k{}", i % 100))),
                value: None,
                headers: Vec::new(),
            })
            .collect();
        let file = stored(&records, &IndexDefinition::default(), 65_536).await;
        let q = query(None, Some(T0 + 45_000), Some(T0 + 45_010), 100);
        let (found, stats) = search(&file, &q).await;
        assert_eq!(offsets(&found), (45_000..45_010).collect::<Vec<_>>());
        assert_eq!(stats.row_groups_read, 1);
        assert!(stats.rows_read < 25_000, "{stats:?}");
    }

    #[tokio::test]
    async fn corrupt_or_truncated_file_is_an_error() {
        let records = records(200, 100);
        let file = write_file(0, &records, &typed(), &FileOptions::default()).expect("write");
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let q = query(None, None, None, 1000);
        let put = |name: &str, bytes: Vec<u8>| {
            let store = Arc::clone(&store);
            let path = Path::from(name);
            async move {
                let size = bytes.len() as u64;
                store.put(&path, bytes.into()).await.expect("put");
                (path, size)
            }
        };

        // A footer claiming more rows than the export holds is refused.
        let (path, size) = put("whole", file.clone()).await;
        assert!(
            search_file(Arc::clone(&store), path.clone(), size, &q, 200)
                .await
                .is_ok()
        );
        let err = search_file(Arc::clone(&store), path, size, &q, 199)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("more rows"), "{err}");

        let (path, size) = put("half", file[..file.len() / 2].to_vec()).await;
        assert!(
            search_file(Arc::clone(&store), path, size, &q, u64::MAX)
                .await
                .is_err()
        );
        let (path, size) = put("no-last-byte", file[..file.len() - 1].to_vec()).await;
        assert!(
            search_file(Arc::clone(&store), path, size, &q, u64::MAX)
                .await
                .is_err()
        );
        let (path, size) = put("garbage", vec![7u8; 4096]).await;
        assert!(
            search_file(Arc::clone(&store), path, size, &q, u64::MAX)
                .await
                .is_err()
        );
        let (path, size) = put("tiny", b"PAR1".to_vec()).await;
        assert!(
            search_file(Arc::clone(&store), path, size, &q, u64::MAX)
                .await
                .is_err()
        );
        // The listing said the object was longer than it is.
        let (path, size) = put("shrunk", file[..file.len() - 100].to_vec()).await;
        assert!(
            search_file(Arc::clone(&store), path, size + 100, &q, u64::MAX)
                .await
                .is_err()
        );

        let missing = search_file(Arc::clone(&store), Path::from("missing"), 100, &q, u64::MAX)
            .await
            .expect_err("missing");
        assert!(missing.is_not_found(), "{missing}");

        // Data pages overwritten, footer intact: an error or wrong bytes, never a panic.
        let mut damaged = file.clone();
        for b in damaged.iter_mut().skip(4).take(file.len() / 3) {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        let (path, size) = put("damaged", damaged).await;
        let _ = search_file(Arc::clone(&store), path.clone(), size, &q, u64::MAX).await;
        let _ = search_file(
            Arc::clone(&store),
            path,
            size,
            &query(Some("k0-1"), None, None, 10),
            u64::MAX,
        )
        .await;
    }

    /// Files the fuzzer made, whose offset index has: a page where offset +
    /// size overflows (CI); a page before its column chunk (a negative
    /// length for the dictionary page); first rows that go backwards.
    /// Parquet's reader adds and subtracts those unchecked. And one whose
    /// definition levels make parquet's decoder assert (CI).
    #[tokio::test]
    async fn a_footer_pointing_outside_its_bounds_is_refused() {
        let files: [&'static [u8]; 4] = [
            include_bytes!("../testdata/page-offset-overflow.parquet"),
            include_bytes!("../testdata/page-before-chunk.parquet"),
            include_bytes!("../testdata/page-rows-backwards.parquet"),
            include_bytes!("../testdata/page-mask-out-of-bounds.parquet"),
        ];
        for file in files {
            let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let path = Path::from("f.parquet");
            let size = file.len() as u64;
            store
                .put(&path, Bytes::from_static(file).into())
                .await
                .expect("put");
            for q in [
                query(Some("k1"), Some(0), Some(i64::MAX), 10),
                query(None, None, None, 10),
            ] {
                let err = search_file(Arc::clone(&store), path.clone(), size, &q, 40)
                    .await
                    .expect_err("a hostile footer");
                assert!(matches!(err, LookupError::Schema { .. }), "{err}");
            }
        }
    }

    #[tokio::test]
    async fn searches_a_local_file_system_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn ObjectStore> = Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("store"),
        );
        let records = records(300, 100);
        let file = write_file(
            2,
            &records,
            &typed(),
            &FileOptions {
                compression: FileCompression::Snappy,
                row_group_rows: 100,
            },
        )
        .expect("write");
        let path = Path::from("exports/t/dt=2025-11-29/hr=07/2-a.parquet");
        let size = file.len() as u64;
        store.put(&path, file.into()).await.expect("put");
        let q = query(Some("k1-4"), None, None, 100);
        let (found, stats) = search_file(store, path, size, &q, u64::MAX)
            .await
            .expect("search");
        assert_eq!(offsets(&found), brute_force(&records, &q));
        assert_eq!(stats.row_groups_read, 1);
    }
}
