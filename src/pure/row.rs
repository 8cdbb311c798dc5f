//! A D1 row read by column. D1 answers a row as an object of column → value (text, number or
//! null), which the shell reads as one JSON `Value`; the registry's row types are read from it
//! with these accessors. Why not serde's derive: it compiles a reader of its own for every row
//! type, with the JSON text parser inlined in each (about 15 KB of wasm for the registry's rows).

use serde_json::{Map, Value};

/// One row's columns.
pub struct Row<'a>(&'a Map<String, Value>);

/// A type read from one row of a query that selects the columns it reads.
pub trait FromRow: Sized {
    fn from_row(row: &Row<'_>) -> Result<Self, String>;
}

/// Every row of `rows`, each as a `T`.
pub fn read_all<T: FromRow>(rows: &[Value]) -> Result<Vec<T>, String> {
    rows.iter().map(read_one).collect()
}

/// `row` as a `T`.
pub fn read_one<T: FromRow>(row: &Value) -> Result<T, String> {
    match row {
        Value::Object(columns) => T::from_row(&Row(columns)),
        _ => Err("a row is not an object of columns".into()),
    }
}

impl Row<'_> {
    /// A text column (`NOT NULL`).
    pub fn text(&self, column: &str) -> Result<String, String> {
        self.opt_text(column)?.ok_or_else(|| format!("column {column} is null or missing"))
    }

    /// A text column that may be null.
    pub fn opt_text(&self, column: &str) -> Result<Option<String>, String> {
        match self.0.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("column {column} is not text")),
        }
    }

    /// An integer column (`NOT NULL`).
    pub fn int(&self, column: &str) -> Result<i64, String> {
        self.opt_int(column)?.ok_or_else(|| format!("column {column} is null or missing"))
    }

    /// An integer column that may be null.
    pub fn opt_int(&self, column: &str) -> Result<Option<i64>, String> {
        match self.0.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| format!("column {column} is not an integer")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq)]
    struct Key {
        id: String,
        note: Option<String>,
        created_at: i64,
        used_at: Option<i64>,
    }

    impl FromRow for Key {
        fn from_row(row: &Row<'_>) -> Result<Self, String> {
            Ok(Key {
                id: row.text("id")?,
                note: row.opt_text("note")?,
                created_at: row.int("created_at")?,
                used_at: row.opt_int("used_at")?,
            })
        }
    }

    #[test]
    fn reads_rows_by_column() {
        let rows = [
            json!({"id": "k1", "note": "n", "created_at": 1_700_000_000_123_i64, "used_at": 5, "extra": 1.5}),
            json!({"id": "k2", "note": null, "created_at": 2, "used_at": null}),
            json!({"id": "k3", "created_at": -3}),
        ];
        let keys: Vec<Key> = read_all(&rows).unwrap();
        assert_eq!(
            keys,
            [
                Key { id: "k1".into(), note: Some("n".into()), created_at: 1_700_000_000_123, used_at: Some(5) },
                Key { id: "k2".into(), note: None, created_at: 2, used_at: None },
                Key { id: "k3".into(), note: None, created_at: -3, used_at: None },
            ]
        );
    }

    #[test]
    fn a_column_of_the_wrong_shape_names_the_column() {
        let err = |row: Value| read_one::<Key>(&row).unwrap_err();
        assert_eq!(err(json!({"created_at": 1})), "column id is null or missing");
        assert_eq!(err(json!({"id": null, "created_at": 1})), "column id is null or missing");
        assert_eq!(err(json!({"id": 7, "created_at": 1})), "column id is not text");
        assert_eq!(err(json!({"id": "k"})), "column created_at is null or missing");
        assert_eq!(err(json!({"id": "k", "created_at": 1.5})), "column created_at is not an integer");
        assert_eq!(err(json!({"id": "k", "created_at": "1"})), "column created_at is not an integer");
        assert_eq!(err(json!({"id": "k", "created_at": 1, "note": 2})), "column note is not text");
        assert_eq!(err(json!({"id": "k", "created_at": 1, "used_at": true})), "column used_at is not an integer");
        assert_eq!(err(json!(["k", 1])), "a row is not an object of columns");
    }
}
