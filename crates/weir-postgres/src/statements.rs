//! The SQL the sinks run, built from the configured table and columns (pure functions,
//! unit-tested), and the global ids of prepared transactions.
//!
//! Rows travel as one JSON array per batch and are turned into the table's row type by
//! `json_populate_recordset`, so PostgreSQL converts each field to its column's type and no
//! temporary table is needed (a prepared transaction may not touch temporary tables).

use crate::error::PostgresError;

/// A table and the columns the sink writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Table name, optionally `schema.table`.
    pub table: String,
    /// Columns written (the record's fields of the same names).
    pub columns: Vec<String>,
    /// Primary-key (or unique) columns, for upserts; empty for plain inserts.
    pub key_columns: Vec<String>,
}

impl TableSpec {
    /// Checks that there is a table, at least one column, and that every key column is
    /// written.
    pub fn validate(&self) -> Result<(), PostgresError> {
        if self.table.trim().is_empty() {
            return Err(PostgresError::Config("no table name".into()));
        }
        if self.columns.is_empty() || self.columns.iter().any(|c| c.is_empty()) {
            return Err(PostgresError::Config(format!(
                "no columns (or an empty column name) for table {}",
                self.table
            )));
        }
        if let Some(missing) = self.key_columns.iter().find(|k| !self.columns.contains(k)) {
            return Err(PostgresError::Config(format!(
                "key column {missing} of table {} is not among the written columns",
                self.table
            )));
        }
        Ok(())
    }

    /// The table as a quoted identifier.
    pub fn quoted_table(&self) -> String {
        self.table
            .split('.')
            .map(quote_identifier)
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The statement writing one batch, given as `$1`: a JSON array of objects whose fields
    /// are named like the columns. With key columns it upserts (updating the other columns,
    /// or doing nothing when every column is a key column); without, it inserts.
    pub fn write_statement(&self) -> String {
        let table = self.quoted_table();
        let columns: Vec<String> = self.columns.iter().map(|c| quote_identifier(c)).collect();
        let list = columns.join(", ");
        let mut sql = format!(
            "INSERT INTO {table} ({list}) SELECT {list} FROM json_populate_recordset(NULL::{table}, $1::text::json)"
        );
        if !self.key_columns.is_empty() {
            let keys: Vec<String> = self
                .key_columns
                .iter()
                .map(|c| quote_identifier(c))
                .collect();
            let updates: Vec<String> = self
                .columns
                .iter()
                .filter(|c| !self.key_columns.contains(c))
                .map(|c| {
                    let c = quote_identifier(c);
                    format!("{c} = EXCLUDED.{c}")
                })
                .collect();
            if updates.is_empty() {
                sql.push_str(&format!(" ON CONFLICT ({}) DO NOTHING", keys.join(", ")));
            } else {
                sql.push_str(&format!(
                    " ON CONFLICT ({}) DO UPDATE SET {}",
                    keys.join(", "),
                    updates.join(", ")
                ));
            }
        }
        sql
    }
}

/// `"name"`, with inner quotes doubled.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'`, with inner quotes doubled (for `PREPARE TRANSACTION`, which takes no parameters).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The global id of a prepared transaction: `{prefix}:{operator uid}:{subtask}:{sequence}`.
/// It names the sink and the subtask, so recovery can tell its own stray transactions
/// apart; the sequence is unique per run (a start timestamp plus a counter).
pub fn global_id(prefix: &str, operator_uid: &str, subtask: u32, sequence: &str) -> String {
    format!("{prefix}:{operator_uid}:{subtask}:{sequence}")
}

/// The subtask a global id of this sink (`{prefix}:{operator uid}:`) belongs to, or `None`
/// when the id is another sink's. The subtask and sequence are the last two fields, so a uid
/// that itself contains `:` cannot be mistaken for another.
pub fn subtask_of(global_id: &str, prefix: &str, operator_uid: &str) -> Option<u32> {
    let rest = global_id.strip_prefix(prefix)?.strip_prefix(':')?;
    let mut fields = rest.rsplitn(3, ':');
    let sequence = fields.next()?;
    let subtask = fields.next()?;
    let uid = fields.next()?;
    if uid != operator_uid
        || sequence.is_empty()
        || !sequence.bytes().all(|b| b.is_ascii_digit() || b == b'-')
    {
        return None;
    }
    subtask.parse().ok()
}

/// Checks that a name going into a global id is short and plain (letters, digits, `_`, `.`,
/// `-`), so that ids stay under PostgreSQL's 200-byte limit and need no escaping.
pub fn check_id_part(what: &str, value: &str) -> Result<(), PostgresError> {
    let plain = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if value.is_empty() || value.len() > 80 || !plain {
        return Err(PostgresError::Config(format!(
            "{what} `{value}` must be 1 to 80 characters of letters, digits, '_', '.' and '-' (it names prepared transactions)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(keys: &[&str]) -> TableSpec {
        TableSpec {
            table: "public.word counts".into(),
            columns: vec!["word".into(), "count".into()],
            key_columns: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn statements_quote_names_and_upsert_on_the_key() {
        assert_eq!(
            spec(&[]).write_statement(),
            r#"INSERT INTO "public"."word counts" ("word", "count") SELECT "word", "count" FROM json_populate_recordset(NULL::"public"."word counts", $1::text::json)"#
        );
        assert!(spec(&["word"])
            .write_statement()
            .ends_with(r#"ON CONFLICT ("word") DO UPDATE SET "count" = EXCLUDED."count""#));
        assert!(spec(&["word", "count"])
            .write_statement()
            .ends_with(r#"ON CONFLICT ("word", "count") DO NOTHING"#));
        assert_eq!(quote_identifier(r#"a"b"#), r#""a""b""#);
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    #[test]
    fn invalid_specs_are_refused_with_the_reason() {
        assert!(spec(&["missing"])
            .validate()
            .unwrap_err()
            .to_string()
            .contains("key column missing"));
        let mut no_columns = spec(&[]);
        no_columns.columns.clear();
        assert!(no_columns.validate().is_err());
        assert!(spec(&["word"]).validate().is_ok());
    }

    #[test]
    fn global_ids_name_sink_and_subtask() {
        let id = global_id("app", "sink-1", 3, "17-2");
        assert_eq!(id, "app:sink-1:3:17-2");
        assert_eq!(subtask_of(&id, "app", "sink-1"), Some(3));
        assert_eq!(subtask_of(&id, "app", "sink-2"), None);
        assert_eq!(subtask_of("other:sink-1:3:1", "app", "sink-1"), None);
        // A uid containing ':' is not confused with a shorter one.
        let other = global_id("app", "sink:1", 0, "5-1");
        assert_eq!(subtask_of(&other, "app", "sink"), None);
        assert_eq!(subtask_of(&other, "app", "sink:1"), Some(0));
        assert!(check_id_part("prefix", "word-count_1.v2").is_ok());
        assert!(check_id_part("prefix", "a'b").is_err());
        assert!(check_id_part("uid", &"x".repeat(81)).is_err());
    }
}
