//! The KV cache of server definitions, keyed by the SHA-256 of the server code.
//!
//! Console writes rewrite or delete entries before they answer, so on the location that made
//! the change a rotated or deactivated code stops working at once. Other locations see the
//! change when KV propagates it (up to ~60 s); the D1 row stays the authority.

use worker::{D1Database, Env, KvStore};

use crate::pure::definition::{refill_verdict, Refill, ServerDefinition, TTL_SECONDS};
use crate::pure::error::ApiError;

use super::http::internal;
use super::platform;
use super::store::{self, ServerRow};

pub fn key(code_hash: &str) -> String {
    platform::server_key(code_hash)
}

fn kv(env: &Env) -> Result<KvStore, ApiError> {
    env.kv(platform::KV).map_err(|e| internal("opening the KV cache", e))
}

/// Rewrites the entry of `server` from D1.
pub async fn write(env: &Env, db: &D1Database, server: &ServerRow) -> Result<(), ApiError> {
    let def = store::load_definition(db, server).await?;
    refill(env, &server.code_hash, &def).await
}

pub async fn remove(env: &Env, code_hash: &str) -> Result<(), ApiError> {
    kv(env)?.delete(&key(code_hash)).await.map_err(|e| internal("deleting from the KV cache", e))
}

/// The definition behind a code hash: KV first, then D1 (refilling KV off the response path
/// through `refill`). `None` when no server has this code.
pub async fn resolve(env: &Env, code_hash: &str) -> Result<Option<(ServerDefinition, bool)>, ApiError> {
    let cached = kv(env)?.get(&key(code_hash)).text().await.map_err(|e| internal("reading the KV cache", e))?;
    if let Some(def) = cached.as_deref().and_then(ServerDefinition::from_cache) {
        return Ok(Some((def, true)));
    }
    let db = env.d1(platform::D1).map_err(|e| internal("opening the D1 registry", e))?;
    match store::get_server_by_code_hash(&db, code_hash).await? {
        Some(row) => Ok(Some((store::load_definition(&db, &row).await?, false))),
        None => Ok(None),
    }
}

/// Writes a definition read from D1 after a miss back to KV, then reads D1 again and takes the
/// entry back if a console write changed the server meanwhile (see `refill_verdict`).
pub async fn refill_after_miss(env: &Env, code_hash: &str, def: &ServerDefinition) -> Result<(), ApiError> {
    refill(env, code_hash, def).await?;
    let db = env.d1(platform::D1).map_err(|e| internal("opening the D1 registry", e))?;
    let now = match store::get_server_by_code_hash(&db, code_hash).await? {
        Some(row) => Some(store::load_definition(&db, &row).await?),
        None => None,
    };
    if refill_verdict(def, now.as_ref()) == Refill::Remove {
        remove(env, code_hash).await?;
    }
    Ok(())
}

/// Writes a definition read from D1 back to KV.
pub async fn refill(env: &Env, code_hash: &str, def: &ServerDefinition) -> Result<(), ApiError> {
    let text = serde_json::to_string(def).map_err(|e| internal("encoding a server definition", e))?;
    kv(env)?
        .put(&key(code_hash), text)
        .map_err(|e| internal("writing the KV cache", e))?
        .expiration_ttl(TTL_SECONDS)
        .execute()
        .await
        .map_err(|e| internal("writing the KV cache", e))
}
