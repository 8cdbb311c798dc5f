//! Server definitions by the SHA-256 of the server code: the isolate's memo (`memo`) in front
//! of the KV cache in front of D1.
//!
//! Console writes rewrite or delete the KV entry and the isolate's memo before they answer, so
//! on the isolate that made the change a rotated or deactivated code stops working at once.
//! Other isolates of that location see it within the memo's window (`DEFINITION_MEMO_SECONDS`,
//! 5 s by default, at most twice that); other locations when KV propagates it (up to ~60 s)
//! plus that window. The D1 row stays the authority.
//!
//! A code rotated with a grace period keeps an entry of its own until the grace ends, holding
//! the server's definition marked with that end (`code_expires_at`); every use checks the mark,
//! so the previous code stops at that moment in every isolate and location, whatever copy they
//! hold (`served`).

use std::rc::Rc;

use crate::runtime::{Context, Db, Env};

use crate::pure::mcp::prepared::Prepared;
use crate::pure::memo::Lookup;
use crate::pure::server_code::{self, CodeUse, Codes};

use crate::pure::definition::{refill_verdict, Refill, ServerDefinition, TTL_SECONDS};

use crate::shell::kv::Kv;
use crate::shell::platform;
use crate::shell::store::{self, doing, Error, ServerRow};

pub fn key(code_hash: &str) -> String {
    platform::server_key(code_hash)
}

/// Rewrites the entry of `server` from D1 (and this isolate's memo); during a rotation's grace,
/// the previous code's entry too, marked with the moment it stops working.
pub async fn write(env: &Env, db: &Db, server: &ServerRow) -> Result<(), Error> {
    let def = store::load_definition(db, server).await?;
    let now = platform::now_ms();
    if let Some((previous, until)) = codes_of(server).in_grace(now) {
        let grace = ServerDefinition { code_expires_at: Some(until), ..def.clone() };
        refill(env, previous, &grace).await?;
        crate::shell::memo::remember(previous, grace, now);
    }
    refill(env, &server.code_hash, &def).await?;
    crate::shell::memo::remember(&server.code_hash, def, now);
    Ok(())
}

/// Removes the entries of both codes of a server (deleted, or its previous code ended early).
pub async fn remove_server(env: &Env, server: &ServerRow) -> Result<(), Error> {
    if let Some(previous) = &server.previous_code_hash {
        remove(env, previous).await?;
    }
    remove(env, &server.code_hash).await
}

/// A row's codes as `pure::server_code` reads them.
pub fn codes_of(row: &ServerRow) -> Codes<'_> {
    Codes {
        current_hash: &row.code_hash,
        previous_hash: row.previous_code_hash.as_deref(),
        previous_until_ms: row.previous_code_until_ms.and_then(|t| u64::try_from(t).ok()),
    }
}

/// The definition a code hash serves now, read from D1: the server's, marked with the end of
/// its grace when the hash is its previous code; `None` when no server has this code now.
pub async fn definition_for_code(db: &Db, code_hash: &str) -> Result<Option<ServerDefinition>, Error> {
    let Some(row) = store::codes::server_by_any_code(db, code_hash).await? else { return Ok(None) };
    let expires = match codes_of(&row).of(code_hash, platform::now_ms()) {
        CodeUse::Current => None,
        CodeUse::Grace { until_ms } => Some(until_ms),
        CodeUse::No => return Ok(None),
    };
    let def = store::load_definition(db, &row).await?;
    Ok(Some(ServerDefinition { code_expires_at: expires, ..def }))
}

pub async fn remove(env: &Env, code_hash: &str) -> Result<(), Error> {
    crate::shell::memo::forget(code_hash);
    doing("deleting from the KV cache", Kv::new(env).delete(&key(code_hash)).await)
}

/// The prepared definition behind a code hash, as [`lookup`] finds it, unless the code was
/// rotated and its grace is over: whatever copy this isolate or KV still holds, it answers 404
/// from that moment. A use during the grace writes a log line saying so (never the code).
pub async fn served(env: &Env, ctx: &Context, code_hash: &str) -> Result<Option<Rc<Prepared>>, Error> {
    let Some(p) = lookup(env, ctx, code_hash).await? else { return Ok(None) };
    let Some(until) = p.def.code_expires_at else { return Ok(Some(p)) };
    let now = platform::now_ms();
    if !server_code::still_works(Some(until), now) {
        crate::shell::memo::forget(code_hash);
        return Ok(None);
    }
    crate::shell::log::info(
        &server_code::grace_use_line(&p.def.name, until, now),
        crate::json!({ "server_id": p.def.server_id, "previous_code_until_ms": until }),
    );
    Ok(Some(p))
}

/// The prepared definition behind a code hash: from the isolate's memo while it is fresh (a
/// stale one is used once more while `ctx` refreshes it), else through [`resolve`]. `None`
/// when no server has this code.
async fn lookup(env: &Env, ctx: &Context, code_hash: &str) -> Result<Option<Rc<Prepared>>, Error> {
    let fresh_ms = crate::shell::memo::fresh_ms(env);
    let stale = match crate::shell::memo::definition(code_hash, platform::now_ms(), fresh_ms) {
        Lookup::Fresh(p) => return Ok(Some(p)),
        Lookup::Refresh(p) => Some(p),
        Lookup::Missing => None,
    };
    if let Some(p) = stale {
        let (env, hash) = (env.clone(), code_hash.to_string());
        ctx.wait_until(async move {
            let refreshed = match load(&env, &hash, fresh_ms).await {
                Ok(Some((_, Some(from_d1)))) => refill_after_miss(&env, &hash, &from_d1).await,
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = refreshed {
                crate::shell::memo::refresh_failed(&hash);
                crate::shell::log::error(&format!("refreshing a definition: {}", e.report().message));
            }
        });
        return Ok(Some(p));
    }
    let Some((prepared, from_d1)) = load(env, code_hash, fresh_ms).await? else { return Ok(None) };
    if let Some(def) = from_d1 {
        let (env, hash) = (env.clone(), code_hash.to_string());
        ctx.wait_until(async move {
            if let Err(e) = refill_after_miss(&env, &hash, &def).await {
                crate::shell::log::error(&format!("refilling the cache: {}", e.report().message));
            }
        });
    }
    Ok(Some(prepared))
}

/// The definition through KV, else D1, kept in the memo (unless it is off); with it the
/// definition to write back to KV when it came from D1. `None` (and nothing kept) when no
/// server has this code.
async fn load(
    env: &Env,
    code_hash: &str,
    fresh_ms: u64,
) -> Result<Option<(Rc<Prepared>, Option<ServerDefinition>)>, Error> {
    let Some((def, from_cache)) = resolve(env, code_hash).await? else {
        crate::shell::memo::forget(code_hash);
        return Ok(None);
    };
    let from_d1 = (!from_cache).then(|| def.clone());
    let prepared = if fresh_ms == 0 {
        Rc::new(Prepared::new(def))
    } else {
        crate::shell::memo::remember(code_hash, def, platform::now_ms())
    };
    Ok(Some((prepared, from_d1)))
}

/// The definition behind a code hash: KV first (`true`), then D1 (`false`: the caller writes it
/// back). `None` when no server has this code.
async fn resolve(env: &Env, code_hash: &str) -> Result<Option<(ServerDefinition, bool)>, Error> {
    let cached = doing("reading the KV cache", Kv::new(env).get_text(&key(code_hash)).await)?;
    if let Some(def) = cached.as_deref().and_then(ServerDefinition::from_cache) {
        return Ok(Some((def, true)));
    }
    let db = env.d1(platform::D1);
    Ok(definition_for_code(&db, code_hash).await?.map(|def| (def, false)))
}

/// Writes a definition read from D1 after a miss back to KV, then reads D1 again and takes the
/// entry back if a console write changed the server meanwhile (see `refill_verdict`).
pub async fn refill_after_miss(env: &Env, code_hash: &str, def: &ServerDefinition) -> Result<(), Error> {
    refill(env, code_hash, def).await?;
    let db = env.d1(platform::D1);
    let now = definition_for_code(&db, code_hash).await?;
    if refill_verdict(def, now.as_ref()) == Refill::Remove {
        remove(env, code_hash).await?;
    }
    Ok(())
}

/// Writes a definition read from D1 back to KV (a previous code's for about its grace).
pub async fn refill(env: &Env, code_hash: &str, def: &ServerDefinition) -> Result<(), Error> {
    let text = doing("encoding a server definition", serde_json::to_string(def))?;
    let ttl = server_code::kv_ttl_seconds(def.code_expires_at, platform::now_ms(), TTL_SECONDS);
    doing("writing the KV cache", Kv::new(env).put(&key(code_hash), &text, ttl).await)
}
