//! A small Dify Service API client: what the console's import needs.

use std::time::Duration;

use crate::runtime::{Headers, Method};
use serde_json::Value;

use crate::shell::outbound::{self, SendError};

use crate::pure::error::ApiError;

const IMPORT_TIMEOUT: Duration = Duration::from_secs(15);
/// Dify's /info and /parameters answers are small; nothing larger is read.
const IMPORT_BODY_CAP: usize = 1 << 20;

fn import_error(code: &'static str, message: String) -> ApiError {
    ApiError::new(422, code, message)
}

/// `GET {base_url}{path}` with the app key; every failure becomes a 422 naming the cause.
pub async fn get_json(base_url: &str, api_key: &str, path: &str) -> Result<Value, ApiError> {
    let url = format!("{base_url}{path}");
    // Messages name the host and path, never a query string that may carry a key.
    let shown = format!("{}{path}", crate::pure::url::host_for_display(base_url));
    let mut headers = Headers::new();
    let auth = format!("Bearer {api_key}");
    headers.set("accept", "application/json");
    headers.try_set("authorization", &auth).map_err(|_| {
        import_error("invalid_api_key", "the API key contains characters not allowed in an HTTP header".into())
    })?;
    let mut resp = match outbound::send(Method::Get, &url, headers, None, IMPORT_TIMEOUT).await {
        Ok(r) => r,
        Err(SendError::Unreachable(e)) => {
            let why = outbound::advice(&e, "base_url");
            return Err(import_error("dify_unreachable", format!("could not reach the Dify API at {shown}: {why}")));
        }
        Err(SendError::TimedOut | SendError::TooLarge(_)) => {
            return Err(import_error(
                "dify_timeout",
                format!("the Dify API at {shown} did not answer within {} s", IMPORT_TIMEOUT.as_secs()),
            ))
        }
    };
    let status = resp.status_code();
    let text = match outbound::text(&mut resp, IMPORT_TIMEOUT, IMPORT_BODY_CAP).await {
        Ok(t) => t,
        Err(SendError::TooLarge(cap)) => {
            return Err(import_error(
                "dify_error",
                format!(
                    "the Dify API at {shown} answered more than {} KiB; is base_url the Dify Service API (…/v1)?",
                    cap / 1024
                ),
            ))
        }
        Err(_) => String::new(),
    };
    let body: Option<Value> = serde_json::from_str(&text).ok();
    let dify_message = body.as_ref().and_then(|b| b.get("message")).and_then(Value::as_str).unwrap_or("");
    match status {
        200..=299 => body.filter(Value::is_object).ok_or_else(|| {
            import_error(
                "not_a_dify_app",
                format!(
                    "{shown} answered with something other than a JSON object; is base_url the Dify Service API (…/v1)?"
                ),
            )
        }),
        401 | 403 => Err(import_error(
            "dify_unauthorized",
            format!(
                "Dify refused the API key ({status}{}{dify_message}); use the app's Service API key (app-…)",
                if dify_message.is_empty() { "" } else { ": " }
            ),
        )),
        404 => Err(import_error(
            "not_a_dify_app",
            format!("{shown} does not exist (404); is base_url the Dify Service API (…/v1)?"),
        )),
        _ => Err(import_error(
            "dify_error",
            format!(
                "the Dify API answered {status} for {path}{}{dify_message}",
                if dify_message.is_empty() { "" } else { ": " }
            ),
        )),
    }
}
