//! A topic's columns as an Iceberg schema: the fixed columns with the ids
//! [`crate::columns::FIXED_FIELD_IDS`] gives them, then the typed columns
//! of `export.index` with the ids the Raft state gave them
//! (`floe_metadata::table`).

use std::sync::Arc;

use floe_metadata::export_def::{ColumnType, IndexDefinition};
use iceberg::spec::{ListType, NestedField, PrimitiveType, Schema, StructType, Type};
use serde_json::{Value, json};

use crate::columns::{
    COL_HEADERS, COL_KEY, COL_OFFSET, COL_PARTITION, COL_TIMESTAMP, COL_VALUE, FIXED_FIELD_IDS,
    HEADER_KEY, HEADER_VALUE, HEADERS_ELEMENT,
};
use crate::error::{IndexerError, Result};

/// The Iceberg type of an index type. Floe's timestamps are milliseconds
/// in UTC: `timestamptz` (readers widen the files' milliseconds).
pub fn iceberg_type(kind: ColumnType) -> PrimitiveType {
    match kind {
        ColumnType::String => PrimitiveType::String,
        ColumnType::Int64 => PrimitiveType::Long,
        ColumnType::Float64 => PrimitiveType::Double,
        ColumnType::Bool => PrimitiveType::Boolean,
        ColumnType::Timestamp => PrimitiveType::Timestamptz,
    }
}

fn prim(p: PrimitiveType) -> Type {
    Type::Primitive(p)
}

/// The table's schema for `def`, whose typed columns have `ids` (in
/// definition order).
pub fn table_schema(def: &IndexDefinition, ids: &[i32]) -> Result<Schema> {
    if ids.len() != def.columns.len() {
        return Err(IndexerError::invalid(format!(
            "{} field ids for {} typed columns",
            ids.len(),
            def.columns.len()
        )));
    }
    let [p, o, t, k, v, h, he, hk, hv] = FIXED_FIELD_IDS;
    let header = StructType::new(vec![
        Arc::new(NestedField::required(
            hk,
            HEADER_KEY,
            prim(PrimitiveType::String),
        )),
        Arc::new(NestedField::optional(
            hv,
            HEADER_VALUE,
            prim(PrimitiveType::Binary),
        )),
    ]);
    let mut fields = vec![
        Arc::new(NestedField::required(
            p,
            COL_PARTITION,
            prim(PrimitiveType::Int),
        )),
        Arc::new(NestedField::required(
            o,
            COL_OFFSET,
            prim(PrimitiveType::Long),
        )),
        Arc::new(NestedField::required(
            t,
            COL_TIMESTAMP,
            prim(PrimitiveType::Timestamptz),
        )),
        Arc::new(NestedField::optional(
            k,
            COL_KEY,
            prim(PrimitiveType::Binary),
        )),
        Arc::new(NestedField::optional(
            v,
            COL_VALUE,
            prim(PrimitiveType::Binary),
        )),
        Arc::new(NestedField::required(
            h,
            COL_HEADERS,
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                he,
                Type::Struct(header),
                true,
            )))),
        )),
    ];
    fields.extend(def.columns.iter().zip(ids).map(|(c, id)| {
        Arc::new(NestedField::optional(
            *id,
            &c.name,
            prim(iceberg_type(c.kind)),
        ))
    }));
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| IndexerError::invalid(format!("the table's schema: {e}")))
}

/// Iceberg's name mapping (`schema.name-mapping.default`) of `def`'s
/// columns: how a reader finds the columns of a file written without field
/// ids (exported before the topic became a table).
pub fn name_mapping(def: &IndexDefinition, ids: &[i32]) -> String {
    let [p, o, t, k, v, h, he, hk, hv] = FIXED_FIELD_IDS;
    let mut fields = vec![
        json!({"field-id": p, "names": [COL_PARTITION]}),
        json!({"field-id": o, "names": [COL_OFFSET]}),
        json!({"field-id": t, "names": [COL_TIMESTAMP]}),
        json!({"field-id": k, "names": [COL_KEY]}),
        json!({"field-id": v, "names": [COL_VALUE]}),
        json!({"field-id": h, "names": [COL_HEADERS], "fields": [
            {"field-id": he, "names": [HEADERS_ELEMENT], "fields": [
                {"field-id": hk, "names": [HEADER_KEY]},
                {"field-id": hv, "names": [HEADER_VALUE]},
            ]},
        ]}),
    ];
    fields.extend(
        def.columns
            .iter()
            .zip(ids)
            .map(|(c, id)| json!({"field-id": id, "names": [c.name]})),
    );
    Value::Array(fields).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{FormatVersion, SortOrder, TableMetadataBuilder, UnboundPartitionSpec};

    fn def() -> IndexDefinition {
        IndexDefinition::parse(
            r#"[{"name":"amount","path":"$.amount","type":"float64"},
                {"name":"customer","path":"$.customer","type":"string"}]"#,
        )
        .unwrap()
    }

    #[test]
    fn the_schema_has_the_files_ids_and_a_new_table_keeps_them() {
        let s = table_schema(&def(), &[12, 10]).unwrap();
        assert_eq!(s.field_by_name("offset").unwrap().id, 2);
        assert_eq!(s.field_by_name("amount").unwrap().id, 12);
        assert_eq!(s.field_by_name("customer").unwrap().id, 10);
        assert_eq!(s.highest_field_id(), 12);
        // A new table's builder gives fresh ids to the schema it starts
        // from: the fixed columns' ids are the fresh ones, so files and
        // table agree.
        let fixed = table_schema(&IndexDefinition::default(), &[]).unwrap();
        let built = TableMetadataBuilder::new(
            fixed.clone(),
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "memory://t".into(),
            FormatVersion::V2,
            Default::default(),
        )
        .unwrap()
        .add_current_schema(s.clone())
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        assert_eq!(
            built.schema_by_id(0).unwrap().as_struct(),
            fixed.as_struct(),
            "fresh ids equal the files' ids"
        );
        assert_eq!(built.current_schema().as_struct(), s.as_struct());
        assert_eq!(built.last_column_id(), 12);
        assert!(table_schema(&def(), &[1]).is_err());
    }

    #[test]
    fn the_name_mapping_names_every_field_id() {
        let m: Value = serde_json::from_str(&name_mapping(&def(), &[10, 11])).unwrap();
        let ids: Vec<i64> = m
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field-id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 10, 11]);
        assert_eq!(m[5]["fields"][0]["fields"][1]["field-id"], 9);
    }
}
