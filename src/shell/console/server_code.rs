//! A server's code from the console: drawn and sealed, rotated with an optional grace period,
//! revealed again to an admin, re-sealed after a key rotation (rules in `pure::server_code`).

use crate::json;
use serde_json::Value;

use crate::pure::error::ApiError;
use crate::pure::ids;
use crate::pure::sealed;
use crate::pure::server_code::{self, sealing_context};
use crate::runtime::Method;

use crate::shell::cache;
use crate::shell::http::{internal, read_json, Doing, Incoming, MAX_CONSOLE_BODY};
use crate::shell::platform;
use crate::shell::store::codes::{self, Rotation};
use crate::shell::store::{self, ServerRow};

use super::{misconfigured, reseal_failed, Console, Result};

/// A code just drawn: the code (shown once, or to an admin's reveal), its hash, and its sealed
/// copy (`None` without SECRETS_KEY).
pub(super) struct Drawn {
    pub code: String,
    pub hash: String,
    pub sealed: Option<String>,
}

/// The grace a rotation asks for: `grace_seconds` in a POST's JSON body (which may be empty);
/// Dify's GET takes none.
pub(super) async fn rotation_grace(req: &mut Incoming) -> Result<u64> {
    if req.method() == Method::Get {
        return Ok(0);
    }
    server_code::rotation_grace(&read_json(req, MAX_CONSOLE_BODY, true).await?)
}

impl Console<'_> {
    /// Draws a code for server `server_id` and seals it to that server.
    pub(super) fn draw_code(&self, server_id: &str) -> Result<Drawn> {
        let code = ids::server_code_from(&mut crate::runtime::fill_random).doing("drawing a server code")?;
        let hash = ids::sha256_hex(&code);
        let sealed = self.seal_code(server_id, &code)?;
        Ok(Drawn { code, hash, sealed })
    }

    /// The code sealed under the current SECRETS_KEY; `None` when none is set (the server
    /// works, its URL cannot be shown again) or it does not read (said in the log).
    fn seal_code(&self, server_id: &str, code: &str) -> Result<Option<String>> {
        let key = match crate::shell::secrets::keys(self.env) {
            Ok(keys) => keys.first().copied(),
            Err(e) => {
                crate::shell::log::error(&format!("server {server_id}: its code is not kept sealed: {e}"));
                None
            }
        };
        let Some(key) = key else { return Ok(None) };
        let mut nonce = [0u8; 12];
        crate::runtime::fill_random(&mut nonce).doing("drawing a nonce")?;
        sealed::seal_bound(&key, nonce, code, &sealing_context(server_id)).map(Some).doing("sealing the server code")
    }

    /// Replaces a server's code. With `grace_seconds` > 0 the code being replaced keeps working
    /// that long (its entry marked with the end, see `cache`); a code still in an earlier
    /// grace stops now in any case: one previous code at a time.
    pub(super) async fn rotate_code(&self, row: ServerRow, grace_seconds: u64) -> Result<Value> {
        self.public_base()?;
        let now_ms = platform::now_ms();
        let until = now_ms.saturating_add(grace_seconds.saturating_mul(1000));
        let until = i64::try_from(until).doing("computing the grace's end")?;
        let previous = (grace_seconds > 0).then_some((row.code_hash.as_str(), row.code_hint.as_str(), until));
        for _ in 0..3 {
            let drawn = self.draw_code(&row.id)?;
            let rotation = Rotation {
                code_hash: &drawn.hash,
                code_hint: ids::code_hint(&drawn.code),
                code_sealed: drawn.sealed.as_deref(),
                previous,
            };
            if codes::rotate(self.db, &row.id, &rotation, platform::now_s()).await? {
                if let Some(earlier) = &row.previous_code_hash {
                    cache::remove(self.env, earlier).await?;
                }
                if previous.is_none() {
                    cache::remove(self.env, &row.code_hash).await?;
                }
                // The new code's entry, and the graced one's marked with its end.
                let fresh = self.server_row(&row.id).await?;
                cache::write(self.env, self.db, &fresh).await?;
                return self.server_json(&fresh, Some(&drawn.code)).await;
            }
        }
        Err(internal("rotating the server code", "server code collided three times"))
    }

    /// `POST /servers/{id}/reveal`: the server's URL again, opened from its sealed code (the
    /// route is the admin's; the console audits each call).
    pub(super) async fn reveal_url(&self, id: &str) -> Result<Value> {
        let row = self.server_row(id).await?;
        let base = self.public_base()?.to_string();
        let keys = crate::shell::secrets::keys(self.env).map_err(misconfigured)?;
        let Some(sealed_code) = &row.code_sealed else {
            return Err(ApiError::new(409, "not_revealable", server_code::not_revealable(&row.id, !keys.is_empty())));
        };
        let opened = sealed::open_bound(&keys, sealed_code, &sealing_context(&row.id));
        // A sealed code that opens to another code's hash (a row edited by hand) is not shown.
        let code = opened.ok().filter(|c| ids::sha256_hex(c) == row.code_hash).ok_or_else(|| {
            ApiError::new(
                409,
                "not_revealable",
                "this server's sealed code does not open with this Worker's SECRETS_KEY (or SECRETS_KEY_PREVIOUS) \
                 or is not its current code; rotate the code to get a URL that can be shown again",
            )
        })?;
        Ok(json!({
            "id": row.id,
            "name": row.name,
            "server_code": code,
            "server_code_hint": row.code_hint,
            "mcp_url": format!("{base}/mcp/server/{code}/mcp"),
        }))
    }

    /// Seals every kept server code again with the current key (step two of a key rotation);
    /// how many were.
    pub(super) async fn reseal_codes(&self) -> Result<usize> {
        let keys = crate::shell::secrets::keys(self.env).map_err(reseal_failed)?;
        let Some(current) = keys.first().copied() else { return Ok(0) };
        let mut resealed = 0;
        for row in store::list_servers(self.db).await? {
            let Some(old) = &row.code_sealed else { continue };
            let context = sealing_context(&row.id);
            let code = sealed::open_bound(&keys, old, &context).map_err(|e| {
                ApiError::new(409, "reseal_failed", format!("the sealed code of server {}: {e}", row.id))
            })?;
            let mut nonce = [0u8; 12];
            crate::runtime::fill_random(&mut nonce).doing("drawing a nonce")?;
            let again = sealed::seal_bound(&current, nonce, &code, &context).doing("sealing a server code")?;
            codes::set_sealed(self.db, &row.id, &again).await?;
            resealed += 1;
        }
        Ok(resealed)
    }
}

/// What the console shows of a server's codes (never a code): whether its URL can be shown
/// again, and the previous code's hint and end while its grace lasts.
pub(super) fn codes_json(row: &ServerRow, out: &mut Value) {
    out["url_revealable"] = json!(row.code_sealed.is_some());
    if let Some((_, until)) = cache::codes_of(row).in_grace(platform::now_ms()) {
        out["previous_code"] = json!({
            "hint": row.previous_code_hint,
            "until_ms": until,
        });
    }
}
