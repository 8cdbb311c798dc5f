//! Types read from a JSON object by member name, by hand: D1 rows (an object of column →
//! text, number or null), task records, definitions, sessions and backend settings. Why not
//! serde's derive: it compiles a reader for every type and every JSON reader, with the parser's
//! handling of each member's type inlined in it; read through [`Fields`], a type costs one call
//! per member, and the text is parsed by `Value`'s reader, which the Worker links anyway. With
//! `pure::named`, 31 KB less gzip wasm (448.0 → 416.6 KB). serde still writes these types; the
//! tests read back what it writes.
//!
//! The rules are serde's: a missing member or `null` is `None` for an `Option` and an error
//! otherwise, a member of the wrong type is an error, members not read are ignored. One is
//! looser: a list or map with a default (`list`, `texts`, `text_map`) reads `null` as empty,
//! which serde's `default` refused.

use serde::de::{Deserialize, Deserializer, Error};
use serde_json::{Map, Value};

use super::named::Named;

/// An object's members, taken out one by one as they are read.
pub struct Fields(Map<String, Value>);

/// A type read from a JSON object's members.
pub trait FromFields: Sized {
    fn from_fields(f: &mut Fields) -> Result<Self, String>;
}

/// `value` (an object) as a `T`.
pub fn read<T: FromFields>(value: Value) -> Result<T, String> {
    read_with(value, T::from_fields)
}

/// `value` (an object) read by `read`: a shape used once, such as one column of a row.
pub fn read_with<T>(value: Value, read: impl FnOnce(&mut Fields) -> Result<T, String>) -> Result<T, String> {
    match value {
        Value::Object(members) => read(&mut Fields(members)),
        _ => Err("is not a JSON object".into()),
    }
}

/// A JSON list of texts, or `None` when `value` is anything else.
pub fn text_list(value: Value) -> Option<Vec<String>> {
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Every object of `values` as a `T`.
pub fn read_all<T: FromFields>(values: Vec<Value>) -> Result<Vec<T>, String> {
    values.into_iter().map(read).collect()
}

/// The `Deserialize` of a [`FromFields`] type (see [`deserialize_by_fields`]).
pub fn deserialize<'de, D: Deserializer<'de>, T: FromFields>(d: D) -> Result<T, D::Error> {
    read(Value::deserialize(d)?).map_err(D::Error::custom)
}

/// `impl Deserialize` through [`FromFields`] for each type listed.
macro_rules! deserialize_by_fields {
    ($($t:ty),+) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::pure::fields::deserialize(d)
            }
        }
    )+};
}
pub(crate) use deserialize_by_fields;

fn missing(key: &str) -> String {
    format!("{key} is null or missing")
}

impl Fields {
    /// The member `key`, taken out; `None` when it is missing or `null`.
    pub fn opt_value(&mut self, key: &str) -> Option<Value> {
        self.0.remove(key).filter(|v| !v.is_null())
    }

    /// Any JSON value, `null` included (a missing member is an error).
    pub fn value(&mut self, key: &str) -> Result<Value, String> {
        self.0.remove(key).ok_or_else(|| format!("{key} is missing"))
    }

    pub fn opt_text(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.opt_value(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("{key} is not text")),
        }
    }

    pub fn text(&mut self, key: &str) -> Result<String, String> {
        self.opt_text(key)?.ok_or_else(|| missing(key))
    }

    pub fn opt_int(&mut self, key: &str) -> Result<Option<i64>, String> {
        self.opt_value(key).map(|v| v.as_i64().ok_or_else(|| format!("{key} is not an integer"))).transpose()
    }

    pub fn int(&mut self, key: &str) -> Result<i64, String> {
        self.opt_int(key)?.ok_or_else(|| missing(key))
    }

    pub fn opt_uint(&mut self, key: &str) -> Result<Option<u64>, String> {
        self.opt_value(key).map(|v| v.as_u64().ok_or_else(|| format!("{key} is not a whole number"))).transpose()
    }

    pub fn uint(&mut self, key: &str) -> Result<u64, String> {
        self.opt_uint(key)?.ok_or_else(|| missing(key))
    }

    /// A whole number that fits in 32 bits.
    pub fn uint32(&mut self, key: &str) -> Result<u32, String> {
        u32::try_from(self.uint(key)?).map_err(|_| format!("{key} is too large"))
    }

    pub fn flag(&mut self, key: &str) -> Result<bool, String> {
        self.value(key)?.as_bool().ok_or_else(|| format!("{key} is not true or false"))
    }

    /// A [`Named`] enum, by its name.
    pub fn named<T: Named>(&mut self, key: &str) -> Result<T, String> {
        self.opt_named(key)?.ok_or_else(|| missing(key))
    }

    pub fn opt_named<T: Named>(&mut self, key: &str) -> Result<Option<T>, String> {
        let Some(name) = self.opt_text(key)? else { return Ok(None) };
        T::from_name(&name).map(Some).ok_or_else(|| format!("{key} is not a known name ({name:?})"))
    }

    pub fn opt_flag(&mut self, key: &str) -> Result<Option<bool>, String> {
        self.opt_value(key).map(|v| v.as_bool().ok_or_else(|| format!("{key} is not true or false"))).transpose()
    }

    /// A nested object, read as a `T`; its errors say where.
    pub fn object<T: FromFields>(&mut self, key: &str) -> Result<T, String> {
        read(self.value(key)?).map_err(|e| format!("{key}: {e}"))
    }

    /// A nested object that may be missing or `null`.
    pub fn opt_object<T: FromFields>(&mut self, key: &str) -> Result<Option<T>, String> {
        self.opt_value(key).map(|v| read(v).map_err(|e| format!("{key}: {e}"))).transpose()
    }

    /// An object's members as they are (`Map`).
    pub fn members(&mut self, key: &str) -> Result<Map<String, Value>, String> {
        self.opt_members(key)?.ok_or_else(|| missing(key))
    }

    pub fn opt_members(&mut self, key: &str) -> Result<Option<Map<String, Value>>, String> {
        match self.opt_value(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(format!("{key} is not a JSON object")),
        }
    }

    /// An object of texts (name → text); missing or `null` is an empty one.
    pub fn text_map(&mut self, key: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
        let members = self.opt_members(key)?.unwrap_or_default();
        members
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                _ => Err(format!("{key}.{k} is not text")),
            })
            .collect()
    }

    /// A list of objects, each a `T`; missing or `null` is an empty list.
    pub fn list<T: FromFields>(&mut self, key: &str) -> Result<Vec<T>, String> {
        match self.opt_value(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => read_all(items).map_err(|e| format!("{key}: {e}")),
            Some(_) => Err(format!("{key} is not a list")),
        }
    }

    /// A list of any values; missing or `null` is an empty list.
    pub fn values(&mut self, key: &str) -> Result<Vec<Value>, String> {
        match self.opt_value(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items),
            Some(_) => Err(format!("{key} is not a list")),
        }
    }

    /// A list of texts; missing or `null` is an empty list.
    pub fn texts(&mut self, key: &str) -> Result<Vec<String>, String> {
        Ok(self.opt_texts(key)?.unwrap_or_default())
    }

    /// A list of texts that may be missing or `null` (unlike an empty list).
    pub fn opt_texts(&mut self, key: &str) -> Result<Option<Vec<String>>, String> {
        match self.opt_value(key) {
            None => Ok(None),
            Some(v) => text_list(v).map(Some).ok_or_else(|| format!("{key} is not a list of texts")),
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
        uses: u32,
        size: Option<u64>,
        on: bool,
        extra: Option<Value>,
    }

    impl FromFields for Key {
        fn from_fields(f: &mut Fields) -> Result<Self, String> {
            Ok(Key {
                id: f.text("id")?,
                note: f.opt_text("note")?,
                created_at: f.int("created_at")?,
                used_at: f.opt_int("used_at")?,
                uses: f.uint32("uses")?,
                size: f.opt_uint("size")?,
                on: f.flag("on")?,
                extra: f.opt_value("extra"),
            })
        }
    }

    #[derive(Debug, PartialEq)]
    struct Outer {
        mode: crate::pure::mode::Mode,
        key: Key,
    }

    impl FromFields for Outer {
        fn from_fields(f: &mut Fields) -> Result<Self, String> {
            Ok(Outer { mode: f.named("mode")?, key: f.object("key")? })
        }
    }

    fn key(extra: Value) -> Value {
        let mut k = json!({"id": "k", "created_at": 1, "uses": 0, "on": false});
        k.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        k
    }

    #[test]
    fn reads_members_by_name_as_serde_would() {
        let rows = vec![
            json!({"id": "k1", "note": "n", "created_at": 1_700_000_000_123_i64, "used_at": 5, "uses": 4_000_000_000_u32,
                   "size": 9, "on": true, "extra": {"a": [1]}, "unread": 1.5}),
            json!({"id": "k2", "note": null, "created_at": -2, "used_at": null, "uses": 0, "size": null, "on": false,
                   "extra": null}),
        ];
        let keys: Vec<Key> = read_all(rows).unwrap();
        assert_eq!(
            keys,
            [
                Key {
                    id: "k1".into(),
                    note: Some("n".into()),
                    created_at: 1_700_000_000_123,
                    used_at: Some(5),
                    uses: 4_000_000_000,
                    size: Some(9),
                    on: true,
                    extra: Some(json!({"a": [1]})),
                },
                Key {
                    id: "k2".into(),
                    note: None,
                    created_at: -2,
                    used_at: None,
                    uses: 0,
                    size: None,
                    on: false,
                    extra: None
                },
            ]
        );
        let outer: Outer = read(json!({"mode": "http-tool", "key": key(json!({}))})).unwrap();
        assert_eq!(outer.mode, crate::pure::mode::Mode::HttpTool);
        assert_eq!(outer.key.id, "k");
    }

    #[test]
    fn a_member_of_the_wrong_shape_is_named() {
        let err = |v: Value| read::<Key>(v).unwrap_err();
        assert_eq!(err(json!({"created_at": 1})), "id is null or missing");
        assert_eq!(err(key(json!({"id": null}))), "id is null or missing");
        assert_eq!(err(key(json!({"id": 7}))), "id is not text");
        assert_eq!(err(key(json!({"note": 2}))), "note is not text");
        assert_eq!(err(key(json!({"created_at": 1.5}))), "created_at is not an integer");
        assert_eq!(err(key(json!({"created_at": "1"}))), "created_at is not an integer");
        assert_eq!(err(key(json!({"used_at": true}))), "used_at is not an integer");
        assert_eq!(err(key(json!({"uses": -1}))), "uses is not a whole number");
        assert_eq!(err(key(json!({"uses": 4_294_967_296_u64}))), "uses is too large");
        assert_eq!(err(key(json!({"size": 1.5}))), "size is not a whole number");
        assert_eq!(err(key(json!({"on": 1}))), "on is not true or false");
        assert_eq!(err(json!(["k", 1])), "is not a JSON object");
        assert_eq!(read_with(json!({"n": 3}), |f| f.int("n")), Ok(3));
        assert_eq!(read_with(json!({"n": "3"}), |f| f.int("n")), Err("n is not an integer".to_string()));
        assert_eq!(read_with(json!(3), |f| f.int("n")), Err("is not a JSON object".to_string()));
        let outer = |v: Value| read::<Outer>(v).unwrap_err();
        assert_eq!(outer(json!({"mode": "nope", "key": key(json!({}))})), r#"mode is not a known name ("nope")"#);
        assert_eq!(outer(json!({"mode": "mcp", "key": key(json!({"on": null}))})), "key: on is not true or false");
        assert_eq!(outer(json!({"mode": "mcp"})), "key is missing");
        assert_eq!(outer(json!({"mode": "mcp", "key": 3})), "key: is not a JSON object");
    }
}
