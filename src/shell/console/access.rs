//! Console routes of who may call a server: its client authentication mode and client keys,
//! and the console's own named tokens.

use crate::json;
use serde_json::Value;

use crate::pure::client_auth::{self, AuthMode, MAX_KEYS_PER_SERVER};
use crate::pure::console_roles::Identity;
use crate::pure::console_tokens::{self, MAX_TOKENS};
use crate::pure::error::ApiError;
use crate::pure::quote::quote_input;

use crate::shell::cache;
use crate::shell::http::{internal, Doing};
use crate::shell::memo;
use crate::shell::platform;
use crate::shell::store::{self, KeyInsert};

use super::apps::auth_json;
use super::{new_id, Console, Result};

impl Console<'_> {
    // ---- client authentication ----

    pub(super) async fn get_auth(&self, server_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        Ok(auth_json(&row))
    }

    /// Sets how the server's clients authenticate; the cached definition follows at once.
    pub(super) async fn set_auth(&self, server_id: &str, body: &Value) -> Result<Value> {
        let (mode, oauth) = client_auth::validate_auth_body(body)?;
        let row = self.server_row(server_id).await?;
        if let Some(o) = &oauth {
            let mut urls = vec![("oauth.issuer", o.issuer.as_str())];
            urls.extend(o.jwks_uri.as_deref().map(|u| ("oauth.jwks_uri", u)));
            self.check_private(&urls)?;
        }
        store::set_auth_mode(self.db, &row.id, mode, oauth.as_ref(), platform::now_s()).await?;
        let row = self.server_row(&row.id).await?;
        cache::write(self.env, self.db, &row).await?;
        let mut out = self.server_json(&row, None).await?;
        let no_keys = mode == AuthMode::Key && store::list_keys(self.db, &row.id).await?.is_empty();
        out["warnings"] = json!(if no_keys {
            vec![format!(
                "the server has no client key yet: every MCP request is refused until one is created with \
                 POST /console/api/servers/{}/keys",
                row.id
            )]
        } else {
            Vec::new()
        });
        Ok(out)
    }

    pub(super) async fn list_keys(&self, server_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        let keys = store::list_keys(self.db, &row.id).await?;
        Ok(json!({ "data": keys.iter().map(store::KeyRow::to_console_json).collect::<Vec<_>>() }))
    }

    /// Draws a client key: shown in this answer only, stored as its SHA-256 and a hint.
    pub(super) async fn create_key(&self, server_id: &str, body: &Value) -> Result<Value> {
        let name = client_auth::validate_key_body(body)?;
        let row = self.server_row(server_id).await?;
        // The name's uniqueness and the cap are the insert's to decide (one statement: see
        // `store::insert_key`), so nothing is read first.
        let taken = || {
            ApiError::conflict(format!(
                "server '{}' already has a client key named {}; choose another name, or revoke that key first",
                row.id,
                quote_input(&name)
            ))
        };
        let full = || {
            ApiError::conflict(format!(
                "server '{}' has {MAX_KEYS_PER_SERVER} client keys, the most it may have; revoke one first",
                row.id
            ))
        };
        let id = new_id()?;
        // Two random 190-bit keys hashing alike is not expected; retry a few times anyway.
        for _ in 0..3 {
            let key = client_auth::new_key_from(&mut crate::runtime::fill_random).doing("drawing a client key")?;
            let new = store::NewKey {
                id: &id,
                server_id: &row.id,
                name: &name,
                key_hash: &key.hash,
                hint: &key.hint,
                now: platform::now_s(),
            };
            match store::insert_key(self.db, &new, MAX_KEYS_PER_SERVER).await? {
                KeyInsert::Stored => {}
                KeyInsert::NameTaken => return Err(taken()),
                KeyInsert::Full => return Err(full()),
                KeyInsert::HashCollision => continue,
            }
            cache::write(self.env, self.db, &row).await?;
            let stored = store::get_key(self.db, &row.id, &id)
                .await?
                .ok_or_else(|| internal("storing the client key", "the key was not found after it was stored"))?;
            return Ok(json!({
                "id": stored.id,
                "name": stored.name,
                "key": key.secret,
                "hint": stored.hint,
                "created_at": stored.created_at,
            }));
        }
        Err(internal("storing the client key", "the key's hash collided three times"))
    }

    /// Revokes a client key; on this isolate it stops working before the answer.
    pub(super) async fn revoke_key(&self, server_id: &str, key_id: &str) -> Result<Value> {
        let row = self.server_row(server_id).await?;
        if store::get_key(self.db, &row.id, key_id).await?.is_none() {
            return Err(ApiError::not_found(format!(
                "server '{}' has no client key with id {}",
                row.id,
                quote_input(key_id)
            )));
        }
        store::delete_key(self.db, &row.id, key_id).await?;
        cache::write(self.env, self.db, &row).await?;
        Ok(json!({ "result": "success", "id": key_id }))
    }

    // ---- console tokens ----

    pub(super) async fn list_tokens(&self) -> Result<Value> {
        let tokens = store::list_console_tokens(self.db).await?;
        Ok(json!({ "data": tokens.iter().map(store::ConsoleTokenRow::to_console_json).collect::<Vec<_>>() }))
    }

    /// Draws a console token: shown in this answer only, stored as its SHA-256 and a hint.
    pub(super) async fn create_token(&self, caller: &Identity, body: &Value) -> Result<Value> {
        let (name, role) = console_tokens::validate_token_body(body)?;
        let taken = || {
            ApiError::conflict(format!(
                "a console token named {} already exists; choose another name, or revoke that token first",
                quote_input(&name)
            ))
        };
        let full = || {
            ApiError::conflict(format!(
                "there are {MAX_TOKENS} console tokens, the most there may be; revoke one first"
            ))
        };
        let id = new_id()?;
        let created_by = caller.actor();
        // Two random 190-bit tokens hashing alike is not expected; retry a few times anyway.
        for _ in 0..3 {
            let token =
                console_tokens::new_token_from(&mut crate::runtime::fill_random).doing("drawing a console token")?;
            let new = store::NewConsoleToken {
                id: &id,
                name: &name,
                role: role.as_str(),
                token_hash: &token.hash,
                hint: &token.hint,
                created_by: &created_by,
                now: platform::now_s(),
            };
            match store::insert_console_token(self.db, &new, MAX_TOKENS).await? {
                KeyInsert::Stored => {}
                KeyInsert::NameTaken => return Err(taken()),
                KeyInsert::Full => return Err(full()),
                KeyInsert::HashCollision => continue,
            }
            let stored = store::get_console_token(self.db, &id)
                .await?
                .ok_or_else(|| internal("storing the console token", "the token was not found after it was stored"))?;
            let mut out = stored.to_console_json();
            out["token"] = json!(token.secret);
            return Ok(out);
        }
        Err(internal("storing the console token", "the token's hash collided three times"))
    }

    /// Revokes a console token: D1 first, then this isolate's memo, so here it stops working
    /// before the answer (other isolates within the memo's few seconds).
    pub(super) async fn revoke_token(&self, id: &str) -> Result<Value> {
        let Some(hash) = store::console_token_hash(self.db, id).await? else {
            return Err(ApiError::not_found(format!("no console token with id {}", quote_input(id))));
        };
        store::delete_console_token(self.db, id).await?;
        memo::forget_console_token(&hash);
        Ok(json!({ "result": "success", "id": id }))
    }
}
