//! The KV namespace (`CACHE`): text values in and out, JSON read by serde_json.
//!
//! Called through JavaScript directly rather than workers-rs's `KvStore`, whose builders convert
//! every get's and put's options with serde_wasm_bindgen (see `js_json` for why that is left out
//! of the bundle) and parse JSON values into Rust with it, a call into JavaScript per field.

use serde::de::DeserializeOwned;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{Env, Error, Result};

#[wasm_bindgen]
extern "C" {
    /// A KV namespace binding, called structurally (the local simulator's class has another name).
    type KvNamespace;

    #[wasm_bindgen(method, catch)]
    fn get(this: &KvNamespace, key: &str, kind: &str) -> std::result::Result<Promise, JsValue>;

    #[wasm_bindgen(method, catch)]
    fn put(this: &KvNamespace, key: &str, value: &str, options: &Object) -> std::result::Result<Promise, JsValue>;

    #[wasm_bindgen(method, catch)]
    fn delete(this: &KvNamespace, key: &str) -> std::result::Result<Promise, JsValue>;
}

pub struct Kv(KvNamespace);

impl Kv {
    /// The `CACHE` namespace of this deploy.
    pub fn open(env: &Env) -> Result<Kv> {
        let binding = Reflect::get(env, &JsValue::from_str(super::platform::KV))?;
        if binding.is_undefined() {
            return Err(Error::RustError(format!("the {} KV binding is missing", super::platform::KV)));
        }
        Ok(Kv(binding.unchecked_into()))
    }

    pub async fn get_text(&self, key: &str) -> Result<Option<String>> {
        Ok(JsFuture::from(self.0.get(key, "text")?).await?.as_string())
    }

    /// The value under `key` read as JSON; `Ok(None)` when there is none.
    pub async fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let Some(text) = self.get_text(key).await? else { return Ok(None) };
        serde_json::from_str(&text).map(Some).map_err(|e| Error::RustError(format!("the KV value of {key}: {e}")))
    }

    /// Writes `value` under `key`, to expire after `ttl_seconds` (KV's minimum is 60).
    pub async fn put(&self, key: &str, value: &str, ttl_seconds: u64) -> Result<()> {
        let options = Object::new();
        Reflect::set(&options, &JsValue::from_str("expirationTtl"), &JsValue::from_f64(ttl_seconds.max(60) as f64))?;
        JsFuture::from(self.0.put(key, value, &options)?).await.map(drop).map_err(Error::from)
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        JsFuture::from(self.0.delete(key)?).await.map(drop).map_err(Error::from)
    }
}
