//! Values read from and written to the platform's storage (D1 rows, Durable Object storage) as
//! JSON text: one `JSON.stringify` or `JSON.parse` in JavaScript and serde_json in Rust.
//!
//! Why not workers-rs's typed reads (serde_wasm_bindgen): they walk a value with a call into
//! JavaScript per field, and their deserializers were 45 KB of the wasm (about 15 KiB of the
//! gzip bundle) beside serde_json's, which Flowgate links anyway.

use serde::de::DeserializeOwned;
use serde::Serialize;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::js_sys::{Promise, Reflect, JSON};
use worker::wasm_bindgen_futures::JsFuture;
use worker::worker_sys::DurableObjectStorage;
use worker::{D1PreparedStatement, Error, Result};

#[wasm_bindgen(module = "/worker/stored-json.mjs")]
extern "C" {
    /// `JSON.stringify`, with a `Map` written as an object: the storage records of deploys
    /// before this one were written by serde_wasm_bindgen, which stores a JSON object as a
    /// `Map` (tests/integration/stored-json.test.mjs). `undefined` for `undefined`.
    #[wasm_bindgen(catch, js_name = storedJson)]
    fn stored_json(value: &JsValue) -> std::result::Result<JsValue, JsValue>;
}

/// The JSON text of a value the platform returned; `None` for `null` or `undefined`.
fn text_of(value: &JsValue) -> Result<Option<String>> {
    if value.is_null() || value.is_undefined() {
        return Ok(None);
    }
    Ok(stored_json(value)?.as_string())
}

fn read<T: DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::RustError(format!("a stored value does not read: {e}")))
}

async fn settle(promise: std::result::Result<Promise, JsValue>) -> Result<JsValue> {
    Ok(JsFuture::from(promise?).await?)
}

/// Every row of a D1 query.
pub async fn all_rows<T: DeserializeOwned>(stmt: &D1PreparedStatement) -> Result<Vec<T>> {
    let result = settle(stmt.inner().all()).await?;
    let rows = Reflect::get(&result, &JsValue::from_str("results"))?;
    match text_of(&rows)? {
        Some(text) => read(&text),
        None => Ok(Vec::new()),
    }
}

/// The first row of a D1 query; `None` when there is none.
pub async fn first_row<T: DeserializeOwned>(stmt: &D1PreparedStatement) -> Result<Option<T>> {
    let row = settle(stmt.inner().first(None)).await?;
    text_of(&row)?.map(|text| read(&text)).transpose()
}

/// The value stored under `key` in a Durable Object's storage.
pub async fn storage_get<T: DeserializeOwned>(storage: &DurableObjectStorage, key: &str) -> Result<Option<T>> {
    let value = settle(storage.get(key)).await?;
    text_of(&value)?.map(|text| read(&text)).transpose()
}

/// Stores `value` under `key` in a Durable Object's storage, as the plain object its JSON
/// parses to (what deploys before this one read, too).
pub async fn storage_put<T: Serialize>(storage: &DurableObjectStorage, key: &str, value: &T) -> Result<()> {
    let text = serde_json::to_string(value).map_err(|e| Error::RustError(format!("a value to store: {e}")))?;
    settle(storage.put(key, JSON::parse(&text)?)).await.map(drop)
}
