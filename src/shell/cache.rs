//! The KV cache of server definitions, keyed by the SHA-256 of the server code.
//!
//! Console writes rewrite or delete entries before they answer, so on the location that made
//! the change a rotated or deactivated code stops working at once. Other locations see the
//! change when KV propagates it (up to ~60 s); the D1 row stays the authority.

use worker::{D1Database, Env, KvStore};

use crate::core::definition::TTL_SECONDS;
use crate::core::error::ApiError;

use super::http::internal;
use super::store::{self, ServerRow};

pub const BINDING: &str = "CACHE";

pub fn key(code_hash: &str) -> String {
    format!("server:{code_hash}")
}

fn kv(env: &Env) -> Result<KvStore, ApiError> {
    env.kv(BINDING).map_err(|e| internal("opening the KV cache", e))
}

/// Rewrites the entry of `server` from D1.
pub async fn write(env: &Env, db: &D1Database, server: &ServerRow) -> Result<(), ApiError> {
    let def = store::load_definition(db, server).await?;
    let text = serde_json::to_string(&def).map_err(|e| internal("encoding a server definition", e))?;
    kv(env)?
        .put(&key(&server.code_hash), text)
        .map_err(|e| internal("writing the KV cache", e))?
        .expiration_ttl(TTL_SECONDS)
        .execute()
        .await
        .map_err(|e| internal("writing the KV cache", e))
}

pub async fn remove(env: &Env, code_hash: &str) -> Result<(), ApiError> {
    kv(env)?.delete(&key(code_hash)).await.map_err(|e| internal("deleting from the KV cache", e))
}
