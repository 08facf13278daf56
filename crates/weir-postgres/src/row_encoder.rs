//! Records to rows: each record is serialized with serde into a JSON object whose fields
//! are named like the table's columns; a batch is a JSON array of them.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::error::PostgresError;
use crate::statements::TableSpec;

/// A batch of rows being collected, with upsert deduplication: within one statement an
/// `ON CONFLICT DO UPDATE` may not touch a row twice, so a later record with the same key
/// replaces the earlier one (the later value is the one an upsert would leave anyway).
#[derive(Debug, Default)]
pub struct RowBatch {
    rows: Vec<Value>,
    by_key: HashMap<String, usize>,
}

impl RowBatch {
    /// Adds `record`, checking that it has every column as a field.
    pub fn push<T: Serialize>(
        &mut self,
        record: &T,
        spec: &TableSpec,
    ) -> Result<(), PostgresError> {
        let value = serde_json::to_value(record).map_err(|e| PostgresError::Mapping {
            table: spec.table.clone(),
            message: e.to_string(),
        })?;
        let Value::Object(fields) = &value else {
            return Err(PostgresError::Mapping {
                table: spec.table.clone(),
                message: format!("a record must serialize to a struct or map, not {value}"),
            });
        };
        if let Some(missing) = spec.columns.iter().find(|c| !fields.contains_key(*c)) {
            return Err(PostgresError::Mapping {
                table: spec.table.clone(),
                message: format!("record {value} has no field `{missing}`"),
            });
        }
        if spec.key_columns.is_empty() {
            self.rows.push(value);
            return Ok(());
        }
        let key: Vec<&Value> = spec.key_columns.iter().map(|k| &fields[k]).collect();
        let key = serde_json::to_string(&key).unwrap_or_default();
        match self.by_key.get(&key) {
            Some(&index) => self.rows[index] = value,
            None => {
                self.by_key.insert(key, self.rows.len());
                self.rows.push(value);
            }
        }
        Ok(())
    }

    /// Rows collected.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is collected.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The batch as the statement's JSON parameter, leaving the batch empty.
    pub fn take_json(&mut self) -> String {
        self.by_key.clear();
        let rows = std::mem::take(&mut self.rows);
        Value::Array(rows).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row {
        word: String,
        count: u64,
    }

    fn spec(keys: &[&str]) -> TableSpec {
        TableSpec {
            table: "counts".into(),
            columns: vec!["word".into(), "count".into()],
            key_columns: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    fn row(word: &str, count: u64) -> Row {
        Row {
            word: word.into(),
            count,
        }
    }

    #[test]
    fn upsert_batches_keep_the_last_record_per_key() {
        let mut batch = RowBatch::default();
        let spec = spec(&["word"]);
        for r in [row("a", 1), row("b", 1), row("a", 2)] {
            batch.push(&r, &spec).unwrap();
        }
        assert_eq!(batch.len(), 2);
        assert_eq!(
            batch.take_json(),
            r#"[{"count":2,"word":"a"},{"count":1,"word":"b"}]"#
        );
        assert!(batch.is_empty());
    }

    #[test]
    fn insert_batches_keep_every_record() {
        let mut batch = RowBatch::default();
        let spec = spec(&[]);
        for r in [row("a", 1), row("a", 1)] {
            batch.push(&r, &spec).unwrap();
        }
        assert_eq!(batch.len(), 2);
    }

    #[test]
    fn records_without_a_column_or_not_a_struct_are_refused() {
        let mut batch = RowBatch::default();
        let error = batch.push(&("a", 1), &spec(&[])).unwrap_err().to_string();
        assert!(error.contains("struct or map"), "{error}");
        #[derive(Serialize)]
        struct Partial {
            word: String,
        }
        let error = batch
            .push(&Partial { word: "a".into() }, &spec(&[]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no field `count`"), "{error}");
    }
}
