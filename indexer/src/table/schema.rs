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
    HEADER_KEY, HEADER_VALUE,
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

/// Iceberg's name mapping (`schema.name-mapping.default`) of a schema:
/// how a reader finds the columns of a file written without field ids
/// (exported before the topic became a table), every field by its name.
pub fn name_mapping(schema: &Schema) -> String {
    fn mapped(f: &NestedField) -> Value {
        let children: Vec<Value> = match f.field_type.as_ref() {
            Type::Struct(s) => s.fields().iter().map(|c| mapped(c)).collect(),
            Type::List(l) => vec![mapped(&l.element_field)],
            Type::Map(m) => vec![mapped(&m.key_field), mapped(&m.value_field)],
            Type::Primitive(_) => vec![],
        };
        let mut v = json!({"field-id": f.id, "names": [f.name]});
        if !children.is_empty() {
            v["fields"] = Value::Array(children);
        }
        v
    }
    Value::Array(
        schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| mapped(f))
            .collect(),
    )
    .to_string()
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
        let m: Value =
            serde_json::from_str(&name_mapping(&table_schema(&def(), &[10, 11]).unwrap())).unwrap();
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
