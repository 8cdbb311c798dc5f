//! Values read from and written to the platform's storage (D1 rows, Durable Object storage) as
//! JSON text: one `JSON.stringify` or `JSON.parse` in JavaScript and serde_json in Rust.
//!
//! Why not workers-rs's typed reads (serde_wasm_bindgen): they walk a value with a call into
//! JavaScript per field, and their deserializers were 45 KB of the wasm (about 15 KiB of the
//! gzip bundle) beside serde_json's, which Flowgate links anyway.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::js_sys::{Promise, Reflect, JSON};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{D1PreparedStatement, Error, Result, State};

#[wasm_bindgen(module = "/worker/stored-json.mjs")]
extern "C" {
    /// `JSON.stringify`, with a `Map` written as an object: the storage records of deploys
    /// before this one were written by serde_wasm_bindgen, which stores a JSON object as a
    /// `Map` (tests/integration/stored-json.test.mjs). `undefined` for `undefined`.
    #[wasm_bindgen(catch, js_name = storedJson)]
    fn stored_json(value: &JsValue) -> std::result::Result<JsValue, JsValue>;
}

/// A value the platform returned, read through its JSON text; `None` for `null` or `undefined`.
fn read<T: DeserializeOwned>(value: &JsValue) -> Result<Option<T>> {
    if value.is_null() || value.is_undefined() {
        return Ok(None);
    }
    let Some(text) = stored_json(value)?.as_string() else { return Ok(None) };
    serde_json::from_str(&text).map(Some).map_err(|e| Error::RustError(format!("a stored value does not read: {e}")))
}

async fn settle(promise: std::result::Result<Promise, JsValue>) -> Result<JsValue> {
    Ok(JsFuture::from(promise?).await?)
}

/// Every row of a D1 query, each an object of its columns (typed by `pure::row`).
pub async fn all_rows(stmt: &D1PreparedStatement) -> Result<Vec<Value>> {
    let result = settle(stmt.inner().all()).await?;
    match read(&Reflect::get(&result, &JsValue::from_str("results"))?)? {
        Some(Value::Array(rows)) => Ok(rows),
        None => Ok(Vec::new()),
        Some(_) => Err(Error::RustError("a D1 result's rows are not a list".into())),
    }
}

/// The first row of a D1 query; `None` when there is none.
pub async fn first_row(stmt: &D1PreparedStatement) -> Result<Option<Value>> {
    read(&settle(stmt.inner().first(None)).await?)
}

/// The value stored under `key` in a Durable Object's storage.
pub async fn storage_get<T: DeserializeOwned>(state: &State, key: &str) -> Result<Option<T>> {
    read(&settle(state.as_raw().storage()?.get(key)).await?)
}

/// Stores `value` under `key` in a Durable Object's storage, as the plain object its JSON
/// parses to (what deploys before this one read, too).
pub async fn storage_put<T: Serialize>(state: &State, key: &str, value: &T) -> Result<()> {
    let text = serde_json::to_string(value).map_err(|e| Error::RustError(format!("a value to store: {e}")))?;
    settle(state.as_raw().storage()?.put(key, JSON::parse(&text)?)).await.map(drop)
}
