//! The columns of an export file and the writer that turns records into one
//! Parquet file.
//!
//! Fixed columns come first (`partition`, `offset`, `timestamp`, `key`,
//! `value`, `headers`), then one nullable column per entry of the topic's
//! index definition, extracted from the record value parsed as JSON. A value
//! that is not JSON, a missing path or a JSON value of another type gives
//! NULL; the row is always written. Typing is strict: `int64` takes JSON
//! integers that fit i64, `float64` any JSON number, `string` only strings,
//! `bool` only booleans, `timestamp` an integer (epoch milliseconds) or an
//! RFC 3339 string.
//!
//! Files carry page statistics, the page index, bloom filters on `key` and
//! every indexed column, row groups of `row_group_rows` rows, and the index
//! definition as JSON in the key-value metadata under [`INDEX_METADATA_KEY`].

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, OffsetBufferBuilder,
    StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use floe_metadata::export_def::{ColumnType, IndexDefinition, PathStep};
use floe_storage::records::Record;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{BloomFilterProperties, EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use serde_json::Value;

/// Column names of the fixed columns, in file order.
pub const COL_PARTITION: &str = "partition";
pub const COL_OFFSET: &str = "offset";
pub const COL_TIMESTAMP: &str = "timestamp";
pub const COL_KEY: &str = "key";
pub const COL_VALUE: &str = "value";
pub const COL_HEADERS: &str = "headers";
/// Field names inside a `headers` list element.
pub const HEADER_KEY: &str = "key";
pub const HEADER_VALUE: &str = "value";
/// Name of the `headers` list's element field (the Parquet standard name).
pub const HEADERS_ELEMENT: &str = "element";

/// Parquet key-value metadata key holding the index definition as JSON
/// (the `export.index` format: an array of `{"name","path","type"}`).
pub const INDEX_METADATA_KEY: &str = "floe.index";

/// Timezone of the timestamp columns.
const UTC: &str = "UTC";

/// Target false-positive rate of the bloom filters.
const BLOOM_FPP: f64 = 0.01;

/// Most bytes of keys, values and headers gathered into one Arrow batch. Arrow
/// `Binary`/`Utf8` arrays address their data with i32 offsets, so a batch is
/// cut well before 2 GiB; a row group may span several batches.
const BATCH_BYTES: usize = 256 * 1024 * 1024;

/// Most bytes one record may take (see [`BATCH_BYTES`]): one row must fit
/// the i32 offsets of every column by itself.
const MAX_RECORD_BYTES: usize = i32::MAX as usize;

/// Compression codec of an export file (topic config `export.compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileCompression {
    #[default]
    Zstd,
    Snappy,
    /// Parquet `LZ4_RAW` (not the deprecated Hadoop-framed `LZ4`).
    Lz4,
    Gzip,
    None,
}

impl FileCompression {
    /// Parses a config value: `zstd`, `snappy`, `lz4`, `gzip` or `none`
    /// (ASCII case ignored).
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Zstd, Self::Snappy, Self::Lz4, Self::Gzip, Self::None]
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// The config name of this codec.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Zstd => "zstd",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Gzip => "gzip",
            Self::None => "none",
        }
    }

    fn codec(self) -> Compression {
        match self {
            Self::Zstd => Compression::ZSTD(ZstdLevel::default()),
            Self::Snappy => Compression::SNAPPY,
            Self::Lz4 => Compression::LZ4_RAW,
            Self::Gzip => Compression::GZIP(GzipLevel::default()),
            Self::None => Compression::UNCOMPRESSED,
        }
    }
}

/// How a file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    pub compression: FileCompression,
    /// Rows per row group (the last one may hold fewer); 0 is taken as 1.
    pub row_group_rows: usize,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            compression: FileCompression::Zstd,
            row_group_rows: 65_536,
        }
    }
}

/// Why a file could not be written. Writing is deterministic: retrying the
/// same records gives the same error.
#[derive(Debug, thiserror::Error)]
pub enum ColumnsError {
    #[error("partition {0} does not fit the Int32 `partition` column")]
    Partition(u32),
    #[error(
        "record at offset {offset} holds {bytes} bytes of key, value and headers; \
         an export file takes at most {MAX_RECORD_BYTES} per record"
    )]
    RecordTooLarge { offset: i64, bytes: usize },
    #[error("building Arrow columns: {0}")]
    Arrow(#[from] ArrowError),
    #[error("encoding Parquet: {0}")]
    Parquet(#[from] ParquetError),
    #[error("{ids} field ids for {columns} typed columns")]
    FieldIds { columns: usize, ids: usize },
    #[error("encoding the index definition as JSON: {0}")]
    Definition(#[source] serde_json::Error),
}

/// The fields of one `headers` list element.
fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new(HEADER_KEY, DataType::Utf8, false),
        Field::new(HEADER_VALUE, DataType::Binary, true),
    ])
}

/// The element field of the `headers` list.
fn headers_element() -> FieldRef {
    Arc::new(Field::new(
        HEADERS_ELEMENT,
        DataType::Struct(header_fields()),
        false,
    ))
}

fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into()))
}

fn column_type(kind: ColumnType) -> DataType {
    match kind {
        ColumnType::String => DataType::Utf8,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Timestamp => timestamp_type(),
    }
}

/// The Arrow schema of a file written with `def`: the fixed columns, then one
/// nullable column per indexed column, in definition order.
pub fn schema(def: &IndexDefinition) -> SchemaRef {
    let mut fields = vec![
        Field::new(COL_PARTITION, DataType::Int32, false),
        Field::new(COL_OFFSET, DataType::Int64, false),
        Field::new(COL_TIMESTAMP, timestamp_type(), false),
        Field::new(COL_KEY, DataType::Binary, true),
        Field::new(COL_VALUE, DataType::Binary, true),
        Field::new(COL_HEADERS, DataType::List(headers_element()), false),
    ];
    fields.extend(
        def.columns
            .iter()
            .map(|c| Field::new(&c.name, column_type(c.kind), true)),
    );
    Arc::new(Schema::new(fields))
}

/// Iceberg's field ids of the fixed columns, as the files of a topic's
/// table carry them (`floe_metadata::table`): partition, offset, timestamp,
/// key, value, headers, then the headers' element, key and value.
pub const FIXED_FIELD_IDS: [i32; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

fn with_id(field: Field, id: i32) -> Field {
    field.with_metadata(std::collections::HashMap::from([(
        parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
        id.to_string(),
    )]))
}

/// [`schema`] with Iceberg field ids on every field, nested ones too:
/// [`FIXED_FIELD_IDS`] for the fixed columns, `ids` (in definition order)
/// for the typed ones.
pub fn schema_with_ids(def: &IndexDefinition, ids: &[i32]) -> Result<SchemaRef, ColumnsError> {
    if ids.len() != def.columns.len() {
        return Err(ColumnsError::FieldIds {
            columns: def.columns.len(),
            ids: ids.len(),
        });
    }
    let [p, o, t, k, v, h, he, hk, hv] = FIXED_FIELD_IDS;
    let element = Field::new(
        HEADERS_ELEMENT,
        DataType::Struct(Fields::from(vec![
            with_id(Field::new(HEADER_KEY, DataType::Utf8, false), hk),
            with_id(Field::new(HEADER_VALUE, DataType::Binary, true), hv),
        ])),
        false,
    );
    let mut fields = vec![
        with_id(Field::new(COL_PARTITION, DataType::Int32, false), p),
        with_id(Field::new(COL_OFFSET, DataType::Int64, false), o),
        with_id(Field::new(COL_TIMESTAMP, timestamp_type(), false), t),
        with_id(Field::new(COL_KEY, DataType::Binary, true), k),
        with_id(Field::new(COL_VALUE, DataType::Binary, true), v),
        with_id(
            Field::new(
                COL_HEADERS,
                DataType::List(Arc::new(with_id(element, he))),
                false,
            ),
            h,
        ),
    ];
    fields.extend(
        def.columns
            .iter()
            .zip(ids)
            .map(|(c, id)| with_id(Field::new(&c.name, column_type(c.kind), true), *id)),
    );
    Ok(Arc::new(Schema::new(fields)))
}

/// Writer settings: codec, row groups, statistics and page index (the
/// defaults: page-level statistics, column and offset indexes), bloom filters
/// on `key` and the indexed columns, and the definition in the metadata.
fn writer_properties(
    def: &IndexDefinition,
    opts: &FileOptions,
    rows: usize,
) -> Result<WriterProperties, ColumnsError> {
    let row_group_rows = opts.row_group_rows.max(1);
    // Size the filters for the rows a row group really holds: a filter sized
    // for a huge configured row group would be allocated in full before
    // being folded down.
    let ndv = u64::try_from(row_group_rows.min(rows).max(1)).unwrap_or(u64::MAX);
    let bloom = BloomFilterProperties::builder()
        .with_fpp(BLOOM_FPP)
        .with_max_ndv(ndv)
        .try_build()?;
    let definition = serde_json::to_string(&def.columns).map_err(ColumnsError::Definition)?;

    let mut props = WriterProperties::builder()
        .set_compression(opts.compression.codec())
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_offset_index_disabled(false)
        .set_column_dictionary_enabled(ColumnPath::from(COL_VALUE), false)
        .set_column_bloom_filter_properties(ColumnPath::from(COL_KEY), bloom.clone())
        .set_key_value_metadata(Some(vec![KeyValue::new(
            INDEX_METADATA_KEY.to_string(),
            definition,
        )]));
    for column in &def.columns {
        props = props.set_column_bloom_filter_properties(
            ColumnPath::from(column.name.as_str()),
            bloom.clone(),
        );
    }
    Ok(props.build())
}

/// Writes `records` (in the order given) as one Parquet file of `partition`.
///
/// CPU-heavy (JSON parsing, encoding, compression): call it from
/// `spawn_blocking` or a pool, not on the async runtime.
pub fn write_file(
    partition: u32,
    records: &[Record],
    def: &IndexDefinition,
    opts: &FileOptions,
) -> Result<Vec<u8>, ColumnsError> {
    write_with_schema(partition, records, def, opts, schema(def), true)
}

/// [`write_file`] for a topic's Iceberg table: the same file, with Iceberg
/// field ids on its columns ([`schema_with_ids`]).
pub fn write_table_file(
    partition: u32,
    records: &[Record],
    def: &IndexDefinition,
    opts: &FileOptions,
    ids: &[i32],
) -> Result<Vec<u8>, ColumnsError> {
    write_with_schema(
        partition,
        records,
        def,
        opts,
        schema_with_ids(def, ids)?,
        true,
    )
}

/// [`write_table_file`] for rows that were written before (a compaction):
/// the same file, without counting its values again in the typing metrics.
pub fn rewrite_table_file(
    partition: u32,
    records: &[Record],
    def: &IndexDefinition,
    opts: &FileOptions,
    ids: &[i32],
) -> Result<Vec<u8>, ColumnsError> {
    write_with_schema(
        partition,
        records,
        def,
        opts,
        schema_with_ids(def, ids)?,
        false,
    )
}

fn write_with_schema(
    partition: u32,
    records: &[Record],
    def: &IndexDefinition,
    opts: &FileOptions,
    schema: SchemaRef,
    count: bool,
) -> Result<Vec<u8>, ColumnsError> {
    let partition_value =
        i32::try_from(partition).map_err(|_| ColumnsError::Partition(partition))?;
    let props = writer_properties(def, opts, records.len())?;
    let extractors: Vec<(ColumnType, Vec<PathStep>)> =
        def.columns.iter().map(|c| (c.kind, c.steps())).collect();
    let batch_rows = opts.row_group_rows.max(1);

    let mut writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))?;
    let mut start = 0;
    while start < records.len() {
        let end = batch_end(records, start, batch_rows)?;
        let (batch, typing) =
            build_batch(&schema, partition_value, &records[start..end], &extractors)?;
        if count {
            crate::metrics::typing(typing.0, typing.1);
        }
        writer.write(&batch)?;
        start = end;
    }
    Ok(writer.into_inner()?)
}

/// An upper bound of the bytes a record adds to any one column of a batch
/// (header keys may triple when invalid UTF-8 is replaced; a typed string
/// column holds at most the value's length), plus one per header for the
/// list offsets.
fn record_bytes(record: &Record) -> usize {
    let key = record.key.as_ref().map_or(0, |k| k.len());
    let value = record.value.as_ref().map_or(0, |v| v.len());
    let headers = record.headers.iter().fold(0usize, |sum, h| {
        sum.saturating_add(h.key.len().saturating_mul(3))
            .saturating_add(h.value.as_ref().map_or(0, |v| v.len()))
            .saturating_add(1)
    });
    key.saturating_add(value).saturating_add(headers)
}

/// The end of the batch starting at `start`: at most `max_rows` rows and
/// [`BATCH_BYTES`] bytes, and at least one row.
fn batch_end(records: &[Record], start: usize, max_rows: usize) -> Result<usize, ColumnsError> {
    let mut bytes = 0usize;
    let mut end = start;
    while end < records.len() && end - start < max_rows {
        let record = &records[end];
        let size = record_bytes(record);
        if size > MAX_RECORD_BYTES {
            return Err(ColumnsError::RecordTooLarge {
                offset: record.offset,
                bytes: size,
            });
        }
        if end > start && bytes.saturating_add(size) > BATCH_BYTES {
            break;
        }
        bytes = bytes.saturating_add(size);
        end += 1;
    }
    Ok(end)
}

fn build_batch(
    schema: &SchemaRef,
    partition: i32,
    records: &[Record],
    extractors: &[(ColumnType, Vec<PathStep>)],
) -> Result<(RecordBatch, (u64, u64)), ColumnsError> {
    let rows = records.len();
    let key_bytes: usize = records
        .iter()
        .map(|r| r.key.as_ref().map_or(0, |k| k.len()))
        .sum();
    let value_bytes: usize = records
        .iter()
        .map(|r| r.value.as_ref().map_or(0, |v| v.len()))
        .sum();
    let header_count: usize = records.iter().map(|r| r.headers.len()).sum();

    let mut partitions = Int32Builder::with_capacity(rows);
    let mut offsets = Int64Builder::with_capacity(rows);
    let mut timestamps = TimestampMillisecondBuilder::with_capacity(rows).with_timezone(UTC);
    let mut keys = BinaryBuilder::with_capacity(rows, key_bytes);
    let mut values = BinaryBuilder::with_capacity(rows, value_bytes);
    let mut header_lengths = OffsetBufferBuilder::<i32>::new(rows);
    let mut header_keys = StringBuilder::with_capacity(header_count, 0);
    let mut header_values = BinaryBuilder::with_capacity(header_count, 0);
    let mut typed: Vec<TypedBuilder> = extractors
        .iter()
        .map(|(kind, _)| TypedBuilder::new(*kind, rows))
        .collect();

    let (mut not_json, mut mistyped) = (0u64, 0u64);
    for record in records {
        partitions.append_value(partition);
        offsets.append_value(record.offset);
        timestamps.append_value(record.timestamp);
        keys.append_option(record.key.as_deref());
        values.append_option(record.value.as_deref());
        header_lengths.push_length(record.headers.len());
        for header in &record.headers {
            header_keys.append_value(String::from_utf8_lossy(&header.key));
            header_values.append_option(header.value.as_deref());
        }

        if typed.is_empty() {
            continue;
        }
        let json: Option<Value> = record
            .value
            .as_deref()
            .and_then(|v| serde_json::from_slice(v).ok());
        not_json += u64::from(json.is_none());
        for (builder, (_, steps)) in typed.iter_mut().zip(extractors) {
            mistyped += u64::from(builder.append(json.as_ref().and_then(|j| walk(j, steps))));
        }
    }

    // The headers' fields as the schema has them (with field ids or not).
    let element = match schema.field(5).data_type() {
        DataType::List(element) => element.clone(),
        _ => headers_element(),
    };
    let element_fields = match element.data_type() {
        DataType::Struct(fields) => fields.clone(),
        _ => header_fields(),
    };
    let header_struct = StructArray::try_new(
        element_fields,
        vec![
            Arc::new(header_keys.finish()) as ArrayRef,
            Arc::new(header_values.finish()) as ArrayRef,
        ],
        None,
    )?;
    let header_offsets = header_lengths
        .try_finish()
        .map_err(|e| ArrowError::InvalidArgumentError(format!("headers list: {e}")))?;
    let headers = ListArray::try_new(element, header_offsets, Arc::new(header_struct), None)?;

    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(partitions.finish()),
        Arc::new(offsets.finish()),
        Arc::new(timestamps.finish()),
        Arc::new(keys.finish()),
        Arc::new(values.finish()),
        Arc::new(headers),
    ];
    columns.extend(typed.iter_mut().map(TypedBuilder::finish));
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok((batch, (not_json, mistyped)))
}

/// Follows a parsed path from the root of a JSON document.
fn walk<'a>(root: &'a Value, steps: &[PathStep]) -> Option<&'a Value> {
    steps.iter().try_fold(root, |node, step| match step {
        PathStep::Field(name) => node.as_object()?.get(name),
        PathStep::Index(i) => node.as_array()?.get(*i),
    })
}

/// A JSON integer that fits i64 (not 1.5, not "7", not 2^63).
fn json_i64(v: &Value) -> Option<i64> {
    v.as_number()?.as_i64()
}

/// Epoch milliseconds from an integer or an RFC 3339 string.
fn json_timestamp_ms(v: &Value) -> Option<i64> {
    match v {
        Value::Number(_) => json_i64(v),
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp_millis()),
        _ => None,
    }
}

/// The builder of one indexed column.
enum TypedBuilder {
    String(StringBuilder),
    Int64(Int64Builder),
    Float64(Float64Builder),
    Bool(BooleanBuilder),
    Timestamp(TimestampMillisecondBuilder),
}

impl TypedBuilder {
    fn new(kind: ColumnType, rows: usize) -> Self {
        match kind {
            ColumnType::String => Self::String(StringBuilder::with_capacity(rows, 0)),
            ColumnType::Int64 => Self::Int64(Int64Builder::with_capacity(rows)),
            ColumnType::Float64 => Self::Float64(Float64Builder::with_capacity(rows)),
            ColumnType::Bool => Self::Bool(BooleanBuilder::with_capacity(rows)),
            ColumnType::Timestamp => {
                Self::Timestamp(TimestampMillisecondBuilder::with_capacity(rows).with_timezone(UTC))
            }
        }
    }

    /// Appends the value at the column's path (None when the path is
    /// missing or the value was not JSON); NULL unless it has the column's
    /// type. Returns whether a value was there, not JSON `null`, and of
    /// another type (a NULL the data asked for does not count).
    fn append(&mut self, v: Option<&Value>) -> bool {
        let typed = match self {
            Self::String(b) => {
                let x = v.and_then(Value::as_str);
                b.append_option(x);
                x.is_some()
            }
            Self::Int64(b) => {
                let x = v.and_then(json_i64);
                b.append_option(x);
                x.is_some()
            }
            Self::Float64(b) => {
                let x = v.and_then(Value::as_number).and_then(|n| n.as_f64());
                b.append_option(x);
                x.is_some()
            }
            Self::Bool(b) => {
                let x = v.and_then(Value::as_bool);
                b.append_option(x);
                x.is_some()
            }
            Self::Timestamp(b) => {
                let x = v.and_then(json_timestamp_ms);
                b.append_option(x);
                x.is_some()
            }
        };
        !typed && v.is_some_and(|v| !v.is_null())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::String(b) => Arc::new(b.finish()),
            Self::Int64(b) => Arc::new(b.finish()),
            Self::Float64(b) => Arc::new(b.finish()),
            Self::Bool(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        Array, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray,
        StringArray, StructArray, TimestampMillisecondArray,
    };
    use bytes::Bytes;
    use floe_storage::records::RecordHeader;
    use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
    use parquet::file::metadata::PageIndexPolicy;
    use parquet::file::properties::ReaderProperties;
    use parquet::file::reader::FileReader;
    use parquet::file::serialized_reader::{ReadOptionsBuilder, SerializedFileReader};

    const T0: i64 = 1_764_400_000_000;

    fn record(
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> Record {
        Record {
            offset,
            timestamp: T0 + offset,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: headers
                .iter()
                .map(|(k, v)| RecordHeader {
                    key: Bytes::copy_from_slice(k),
                    value: v.map(Bytes::copy_from_slice),
                })
                .collect(),
        }
    }

    fn def(json: &str) -> IndexDefinition {
        IndexDefinition::parse(json).expect("valid definition")
    }

    fn typed_def() -> IndexDefinition {
        def(r#"[
            {"name":"amount","path":"$.amount","type":"float64"},
            {"name":"n","path":"$.n","type":"int64"},
            {"name":"name","path":"$.name","type":"string"},
            {"name":"ok","path":"$.ok","type":"bool"},
            {"name":"at","path":"$.at","type":"timestamp"},
            {"name":"sku","path":"$.items[0][\"the sku\"]","type":"string"},
            {"name":"whole","path":"$","type":"string"}
        ]"#)
    }

    fn opts(row_group_rows: usize) -> FileOptions {
        FileOptions {
            compression: FileCompression::Zstd,
            row_group_rows,
        }
    }

    fn read_all(file: &[u8]) -> Vec<RecordBatch> {
        ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(file))
            .expect("footer")
            .build()
            .expect("reader")
            .map(|b| b.expect("batch"))
            .collect()
    }

    /// One column's values across all batches.
    fn gather<A: 'static, T>(
        batches: &[RecordBatch],
        name: &str,
        get: impl Fn(&A, usize) -> T,
    ) -> Vec<Option<T>> {
        let mut out = Vec::new();
        for batch in batches {
            let column = batch.column_by_name(name).expect("column");
            let array = column.as_any().downcast_ref::<A>().expect("type");
            out.extend((0..column.len()).map(|i| column.is_valid(i).then(|| get(array, i))));
        }
        out
    }

    fn binaries(batches: &[RecordBatch], name: &str) -> Vec<Option<Vec<u8>>> {
        gather(batches, name, |a: &BinaryArray, i| a.value(i).to_vec())
    }

    fn strings(batches: &[RecordBatch], name: &str) -> Vec<Option<String>> {
        gather(batches, name, |a: &StringArray, i| a.value(i).to_string())
    }

    fn headers(batches: &[RecordBatch]) -> Vec<Vec<(String, Option<Vec<u8>>)>> {
        gather(batches, COL_HEADERS, |a: &ListArray, i| {
            let element = a.value(i);
            let s = element
                .as_any()
                .downcast_ref::<StructArray>()
                .expect("struct");
            let keys = s
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("keys");
            let values = s
                .column(1)
                .as_any()
                .downcast_ref::<BinaryArray>()
                .expect("values");
            (0..s.len())
                .map(|h| {
                    (
                        keys.value(h).to_string(),
                        values.is_valid(h).then(|| values.value(h).to_vec()),
                    )
                })
                .collect::<Vec<_>>()
        })
        .into_iter()
        .map(|h| h.expect("headers list is never null"))
        .collect()
    }

    #[test]
    fn compression_names_parse() {
        assert_eq!(FileCompression::parse("zstd"), Some(FileCompression::Zstd));
        assert_eq!(
            FileCompression::parse("snappy"),
            Some(FileCompression::Snappy)
        );
        assert_eq!(FileCompression::parse("LZ4"), Some(FileCompression::Lz4));
        assert_eq!(FileCompression::parse("gzip"), Some(FileCompression::Gzip));
        assert_eq!(FileCompression::parse("none"), Some(FileCompression::None));
        assert_eq!(FileCompression::parse("brotli"), None);
        assert_eq!(FileCompression::parse(""), None);
        for c in [
            FileCompression::Zstd,
            FileCompression::Snappy,
            FileCompression::Lz4,
            FileCompression::Gzip,
            FileCompression::None,
        ] {
            assert_eq!(FileCompression::parse(c.as_str()), Some(c));
        }
    }

    #[test]
    fn schema_has_fixed_columns_then_indexed_columns() {
        let plain = schema(&IndexDefinition::default());
        let names: Vec<&str> = plain.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "partition",
                "offset",
                "timestamp",
                "key",
                "value",
                "headers"
            ]
        );
        assert!(!plain.field(0).is_nullable());
        assert!(!plain.field(1).is_nullable());
        assert!(!plain.field(2).is_nullable());
        assert!(plain.field(3).is_nullable());
        assert!(plain.field(4).is_nullable());
        assert!(!plain.field(5).is_nullable());
        assert_eq!(plain.field(2).data_type(), &timestamp_type());

        let typed = schema(&typed_def());
        assert_eq!(typed.fields().len(), 13);
        let expected = [
            ("amount", DataType::Float64),
            ("n", DataType::Int64),
            ("name", DataType::Utf8),
            ("ok", DataType::Boolean),
            ("at", timestamp_type()),
            ("sku", DataType::Utf8),
            ("whole", DataType::Utf8),
        ];
        for (field, (name, data_type)) in typed.fields().iter().skip(6).zip(expected) {
            assert_eq!(field.name(), name);
            assert_eq!(field.data_type(), &data_type);
            assert!(field.is_nullable());
        }
    }

    #[test]
    fn typed_columns_are_extracted_strictly() {
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let records = vec![
            // 0: every column has its type
            record(
                0,
                Some(b"k0"),
                Some(
                    br#"{"amount":12.5,"n":7,"name":"a","ok":true,"at":"2025-01-02T03:04:05.678Z",
                         "items":[{"the sku":"x1"}]}"#,
                ),
                &[(b"h", Some(b"v")), (b"empty", None)],
            ),
            // 1: not JSON
            record(1, None, Some(b"hello, not json"), &[]),
            // 2: every value has the wrong type
            record(
                2,
                Some(b"k2"),
                Some(br#"{"amount":"12","n":1.5,"name":5,"ok":"true","at":1.5,"items":{"the sku":"x"}}"#),
                &[],
            ),
            // 3: paths missing
            record(3, Some(b"k3"), Some(br#"{"other":1}"#), &[]),
            // 4: null value, key and header key not UTF-8
            record(4, Some(&[0xff, 0xfe, 0x00]), None, &[(&[0x66, 0xff], None)]),
            // 5: integers: beyond i64 for int64, any number for float64, epoch ms
            record(
                5,
                Some(b"k5"),
                Some(br#"{"amount":1000,"n":9223372036854775808,"at":1700000000000,"ok":false}"#),
                &[],
            ),
            // 6: a JSON string as the whole value; numbers beyond f64 are not JSON to serde
            record(6, Some(b""), Some(br#""just a string""#), &[]),
            // 7: nested deeper than the parser allows
            record(7, Some(b"k7"), Some(deep.as_bytes()), &[]),
            // 8: invalid UTF-8 inside a JSON string
            record(8, Some(b"k8"), Some(b"{\"name\":\"\xff\"}"), &[]),
            // 9: RFC 3339 with an offset, negative int64
            record(
                9,
                Some(b"k9"),
                Some(br#"{"at":"2025-01-02T05:04:05+02:00","n":-3,"amount":-0.0}"#),
                &[],
            ),
        ];
        let file = write_file(3, &records, &typed_def(), &opts(4)).expect("write");
        let batches = read_all(&file);
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, records.len());

        assert_eq!(
            gather(&batches, COL_PARTITION, |a: &Int32Array, i| a.value(i)),
            vec![Some(3); 10]
        );
        assert_eq!(
            gather(&batches, COL_OFFSET, |a: &Int64Array, i| a.value(i)),
            (0..10).map(Some).collect::<Vec<_>>()
        );
        assert_eq!(
            gather(
                &batches,
                COL_TIMESTAMP,
                |a: &TimestampMillisecondArray, i| a.value(i)
            ),
            (0..10).map(|o| Some(T0 + o)).collect::<Vec<_>>()
        );
        let keys = binaries(&batches, COL_KEY);
        assert_eq!(keys[0].as_deref(), Some(&b"k0"[..]));
        assert_eq!(keys[1], None);
        assert_eq!(keys[4].as_deref(), Some(&[0xff, 0xfe, 0x00][..]));
        assert_eq!(keys[6].as_deref(), Some(&b""[..]));
        let values = binaries(&batches, COL_VALUE);
        assert_eq!(values[1].as_deref(), Some(&b"hello, not json"[..]));
        assert_eq!(values[4], None);
        assert_eq!(values[7].as_deref(), Some(deep.as_bytes()));

        let h = headers(&batches);
        assert_eq!(
            h[0],
            vec![
                ("h".to_string(), Some(b"v".to_vec())),
                ("empty".to_string(), None)
            ]
        );
        assert!(h[1].is_empty());
        assert_eq!(h[4], vec![("f\u{fffd}".to_string(), None)]);

        assert_eq!(
            gather(&batches, "amount", |a: &Float64Array, i| a.value(i)),
            vec![
                Some(12.5),
                None,
                None,
                None,
                None,
                Some(1000.0),
                None,
                None,
                None,
                Some(-0.0)
            ]
        );
        assert_eq!(
            gather(&batches, "n", |a: &Int64Array, i| a.value(i)),
            vec![
                Some(7),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                Some(-3)
            ]
        );
        let mut name = vec![None; 10];
        name[0] = Some("a".to_string());
        assert_eq!(strings(&batches, "name"), name);
        let mut ok = vec![None; 10];
        ok[0] = Some(true);
        ok[5] = Some(false);
        assert_eq!(gather(&batches, "ok", |a: &BooleanArray, i| a.value(i)), ok);
        let mut at = vec![None; 10];
        at[0] = Some(1_735_787_045_678);
        at[5] = Some(1_700_000_000_000);
        at[9] = Some(1_735_787_045_000);
        assert_eq!(
            gather(&batches, "at", |a: &TimestampMillisecondArray, i| a
                .value(i)),
            at
        );
        let mut sku = vec![None; 10];
        sku[0] = Some("x1".to_string());
        assert_eq!(strings(&batches, "sku"), sku);
        let mut whole = vec![None; 10];
        whole[6] = Some("just a string".to_string());
        assert_eq!(strings(&batches, "whole"), whole);
    }

    #[test]
    fn without_index_columns_values_are_not_parsed() {
        let records = vec![
            record(0, Some(b"a"), Some(b"{\"x\":1}"), &[]),
            record(1, None, Some(&[0xff; 16]), &[]),
        ];
        let file = write_file(0, &records, &IndexDefinition::default(), &opts(10)).expect("write");
        let batches = read_all(&file);
        assert_eq!(batches[0].num_columns(), 6);
        assert_eq!(
            binaries(&batches, COL_VALUE)[1].as_deref(),
            Some(&[0xff; 16][..])
        );
    }

    #[test]
    fn large_values_round_trip() {
        let big: Vec<u8> = (0..2 * 1024 * 1024)
            .map(|i: u32| (i * 7 % 251) as u8)
            .collect();
        let mut big_json = b"{\"name\":\"".to_vec();
        big_json.extend(std::iter::repeat_n(b'x', 2 * 1024 * 1024));
        big_json.extend(b"\",\"n\":1}");
        let records = vec![
            record(0, Some(b"big"), Some(&big), &[(b"h", Some(&big[..1000]))]),
            record(1, Some(b"big-json"), Some(&big_json), &[]),
            record(2, Some(b"small"), Some(b"{}"), &[]),
        ];
        let file = write_file(0, &records, &typed_def(), &opts(2)).expect("write");
        let batches = read_all(&file);
        let values = binaries(&batches, COL_VALUE);
        assert_eq!(values[0].as_deref(), Some(&big[..]));
        assert_eq!(values[1].as_deref(), Some(&big_json[..]));
        assert_eq!(
            strings(&batches, "name")[1].as_ref().map(|s| s.len()),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(
            gather(&batches, "n", |a: &Int64Array, i| a.value(i)),
            vec![None, Some(1), None]
        );
    }

    #[test]
    fn rows_beyond_row_group_rows_make_several_row_groups() {
        let records: Vec<Record> = (0..1000)
            .map(|i| {
                let key = format!("key-{}", i % 37);
                let value = format!("{{\"n\":{i}}}");
                record(i, Some(key.as_bytes()), Some(value.as_bytes()), &[])
            })
            .collect();
        let d = def(r#"[{"name":"n","path":"$.n","type":"int64"}]"#);
        let file = write_file(1, &records, &d, &opts(128)).expect("write");
        let reader = SerializedFileReader::new(Bytes::from(file.clone())).expect("reader");
        let meta = reader.metadata();
        assert_eq!(meta.num_row_groups(), 8);
        let sizes: Vec<i64> = meta.row_groups().iter().map(|rg| rg.num_rows()).collect();
        assert_eq!(sizes, [128, 128, 128, 128, 128, 128, 128, 104]);

        // Records are in the order given.
        let batches = read_all(&file);
        assert_eq!(
            gather(&batches, COL_OFFSET, |a: &Int64Array, i| a.value(i)),
            (0..1000).map(Some).collect::<Vec<_>>()
        );
        assert_eq!(
            gather(&batches, "n", |a: &Int64Array, i| a.value(i)),
            (0..1000).map(Some).collect::<Vec<_>>()
        );
    }

    #[test]
    fn files_carry_bloom_filters_statistics_page_index_and_definition() {
        let records: Vec<Record> = (0..300)
            .map(|i| {
                let key = format!("key-{i}");
                let value = format!("{{\"name\":\"n{i}\"}}");
                record(i, Some(key.as_bytes()), Some(value.as_bytes()), &[])
            })
            .collect();
        let d = def(r#"[{"name":"name","path":"$.name","type":"string"}]"#);
        let file = Bytes::from(write_file(0, &records, &d, &opts(100)).expect("write"));

        let options = ReadOptionsBuilder::new()
            .with_reader_properties(
                ReaderProperties::builder()
                    .set_read_bloom_filter(true)
                    .build(),
            )
            .build();
        let reader = SerializedFileReader::new_with_options(file.clone(), options).expect("reader");
        let meta = reader.metadata();
        let leaves = meta.file_metadata().schema_descr().columns();
        let leaf = |name: &str| {
            leaves
                .iter()
                .position(|c| c.path().parts() == [name])
                .expect("leaf")
        };
        let (key_leaf, name_leaf, value_leaf) = (leaf("key"), leaf("name"), leaf("value"));
        for rg in 0..meta.num_row_groups() {
            let row_group = reader.get_row_group(rg).expect("row group");
            let bloom = row_group
                .get_column_bloom_filter(key_leaf)
                .expect("bloom filter on key");
            let absent = (1000..1100)
                .filter(|i| bloom.check(format!("key-{i}").as_bytes()))
                .count();
            assert!(absent < 10, "{absent} false positives of 100");
            for i in rg * 100..(rg + 1) * 100 {
                assert!(bloom.check(format!("key-{i}").as_bytes()));
            }
            let names = row_group
                .get_column_bloom_filter(name_leaf)
                .expect("bloom filter on indexed column");
            assert!(names.check(format!("n{}", rg * 100).as_str()));
            assert!(row_group.get_column_bloom_filter(value_leaf).is_none());

            let stats = meta
                .row_group(rg)
                .column(key_leaf)
                .statistics()
                .expect("stats");
            assert!(stats.min_bytes_opt().is_some());
        }

        let kv = meta.file_metadata().key_value_metadata().expect("kv");
        let index = kv
            .iter()
            .find(|kv| kv.key == INDEX_METADATA_KEY)
            .and_then(|kv| kv.value.clone())
            .expect("floe.index");
        assert_eq!(IndexDefinition::parse(&index).expect("definition"), d);

        let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(
            file,
            ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required),
        )
        .expect("page index");
        let page_index = builder.metadata().page_index_for_row_group(0);
        assert!(page_index.column_index(key_leaf).is_some());
        assert!(page_index.offset_index(key_leaf).is_some());
    }

    #[test]
    fn every_codec_round_trips() {
        let records: Vec<Record> = (0..50)
            .map(|i| {
                let value = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "ab".repeat(100));
                record(i, Some(b"k"), Some(value.as_bytes()), &[(b"h", Some(b"v"))])
            })
            .collect();
        let d = def(r#"[{"name":"n","path":"$.n","type":"int64"}]"#);
        for compression in [
            FileCompression::Zstd,
            FileCompression::Snappy,
            FileCompression::Lz4,
            FileCompression::Gzip,
            FileCompression::None,
        ] {
            let o = FileOptions {
                compression,
                row_group_rows: 20,
            };
            let file = write_file(0, &records, &d, &o).expect("write");
            let reader = SerializedFileReader::new(Bytes::from(file.clone())).expect("reader");
            let codec = reader.metadata().row_group(0).column(0).compression();
            let expected = match compression {
                FileCompression::Zstd => matches!(codec, Compression::ZSTD(_)),
                FileCompression::Snappy => codec == Compression::SNAPPY,
                FileCompression::Lz4 => codec == Compression::LZ4_RAW,
                FileCompression::Gzip => matches!(codec, Compression::GZIP(_)),
                FileCompression::None => codec == Compression::UNCOMPRESSED,
            };
            assert!(expected, "{compression:?} wrote {codec:?}");
            let batches = read_all(&file);
            assert_eq!(
                gather(&batches, "n", |a: &Int64Array, i| a.value(i)),
                (0..50).map(Some).collect::<Vec<_>>(),
                "{compression:?}"
            );
            assert_eq!(
                headers(&batches)[49],
                vec![("h".into(), Some(b"v".to_vec()))]
            );
        }
    }

    #[test]
    fn file_schema_follows_the_definition() {
        let records = vec![record(0, Some(b"k"), Some(br#"{"a":1,"b":"x"}"#), &[])];
        let one = def(r#"[{"name":"a","path":"$.a","type":"int64"}]"#);
        let two = def(
            r#"[{"name":"b","path":"$.b","type":"string"},{"name":"a","path":"$.a","type":"float64"}]"#,
        );
        for d in [IndexDefinition::default(), one, two] {
            let file = write_file(0, &records, &d, &opts(10)).expect("write");
            let builder =
                ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file)).expect("footer");
            let read: Vec<_> = builder.schema().fields().iter().cloned().collect();
            let expected: Vec<_> = schema(&d).fields().iter().cloned().collect();
            assert_eq!(read, expected);
        }
    }

    #[test]
    fn empty_input_gives_an_empty_file() {
        let file = write_file(0, &[], &typed_def(), &opts(10)).expect("write");
        let reader = SerializedFileReader::new(Bytes::from(file)).expect("reader");
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
    }

    #[test]
    fn zero_row_group_rows_is_one_row_per_group() {
        let records: Vec<Record> = (0..3).map(|i| record(i, None, None, &[])).collect();
        let file = write_file(0, &records, &IndexDefinition::default(), &opts(0)).expect("write");
        let reader = SerializedFileReader::new(Bytes::from(file)).expect("reader");
        assert_eq!(reader.metadata().num_row_groups(), 3);
    }

    #[test]
    fn partition_beyond_i32_is_an_error() {
        let err = write_file(u32::MAX, &[], &IndexDefinition::default(), &opts(1))
            .expect_err("too large");
        assert!(matches!(err, ColumnsError::Partition(_)));
    }

    #[test]
    fn batches_are_cut_by_bytes() {
        // One shared buffer: the records only borrow it.
        let value = Bytes::from(vec![0u8; BATCH_BYTES / 3 + 1]);
        let records: Vec<Record> = (0..4)
            .map(|i| Record {
                offset: i,
                timestamp: T0,
                key: None,
                value: Some(value.clone()),
                headers: Vec::new(),
            })
            .collect();
        assert_eq!(batch_end(&records, 0, 100).expect("end"), 2);
        assert_eq!(batch_end(&records, 2, 100).expect("end"), 4);
        assert_eq!(batch_end(&records, 0, 1).expect("end"), 1);
    }
}
