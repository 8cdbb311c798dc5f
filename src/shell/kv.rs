//! The KV namespace (`CACHE`): text values in and out, JSON read by serde_json.

use serde::de::DeserializeOwned;

use crate::runtime::{Env, Error, Kind, Result};

pub struct Kv(Env);

impl Kv {
    /// The `CACHE` namespace of this deploy.
    pub fn new(env: &Env) -> Kv {
        Kv(env.clone())
    }

    /// [`Kv::new`], as a `Result` (the form `call::stream` still takes; opening cannot fail).
    pub fn open(env: &Env) -> Result<Kv> {
        Ok(Kv::new(env))
    }

    pub async fn get_text(&self, key: &str) -> Result<Option<String>> {
        self.0.runtime().kv_get(crate::shell::platform::KV, key).await
    }

    /// The value under `key` read as JSON; `Ok(None)` when there is none.
    pub async fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let Some(text) = self.get_text(key).await? else { return Ok(None) };
        serde_json::from_str(&text).map(Some).map_err(|e| Error::new(Kind::Json, format!("the KV value of {key}: {e}")))
    }

    /// Writes `value` as JSON under `key`, as [`Kv::put`].
    pub async fn put_json<T: serde::Serialize>(&self, key: &str, value: &T, ttl_seconds: u64) -> Result<()> {
        self.put(key, &serde_json::to_string(value)?, ttl_seconds).await
    }

    /// Writes `value` under `key`, to expire after `ttl_seconds` (KV's minimum is 60).
    pub async fn put(&self, key: &str, value: &str, ttl_seconds: u64) -> Result<()> {
        self.0.runtime().kv_put(crate::shell::platform::KV, key, value, ttl_seconds.max(60)).await
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        self.0.runtime().kv_delete(crate::shell::platform::KV, key).await
    }
}
