//! The incoming request, response helpers and bounded body reading shared by every route.

use futures::StreamExt;
use serde_json::Value;

use crate::pure::error::ApiError;
use crate::pure::mcp::http_rules::is_json_content_type;
use crate::pure::quote::quote_input;
use crate::runtime::{Body, Headers, LazyHeaders, Method, Request, Response};

/// The request a client sent.
pub struct Incoming {
    method: Method,
    url: String,
    /// Read from the runtime when first used (`/healthz` uses none).
    headers: LazyHeaders,
    body: Body,
}

impl Incoming {
    pub fn new(req: Request) -> Incoming {
        Incoming { method: req.method, url: req.url, headers: req.headers, body: req.body }
    }

    pub fn method(&self) -> Method {
        self.method.clone()
    }

    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The raw URL, as the runtime serialized it.
    pub fn url_text(&self) -> String {
        self.url.clone()
    }

    /// The URL, parsed (for its origin or query).
    pub fn url(&self) -> Result<crate::pure::web_url::Url, ApiError> {
        crate::pure::web_url::Url::parse(&self.url)
            .map_err(|e| ApiError::bad_request(format!("the request URL does not parse: {e}")))
    }

    /// The body, taken (a second take reads as empty).
    fn take_body(&mut self) -> Body {
        std::mem::replace(&mut self.body, Body::Empty)
    }
}

/// Largest console request body accepted.
pub const MAX_CONSOLE_BODY: usize = 1 << 20;

/// An event stream of what arrives on `rx` (SSE text, framed by the sender), with a comment line
/// after `keepalive_ms` of silence (proxies keep the stream open, and a client that went away is
/// noticed on the write), until every sender is gone. `hold` lives as long as the stream: what
/// must end with it (a guard, the receiving end of a stop signal).
pub fn event_stream(
    rx: futures::channel::mpsc::UnboundedReceiver<Vec<u8>>,
    keepalive_ms: u64,
    hold: Box<dyn std::any::Any>,
) -> crate::runtime::ByteStream {
    Box::pin(futures::stream::unfold((rx, hold), move |(mut rx, hold)| async move {
        let next = rx.next();
        let tick = crate::runtime::sleep(keepalive_ms);
        futures::pin_mut!(next, tick);
        match futures::future::select(next, tick).await {
            futures::future::Either::Left((Some(bytes), _)) => Some((Ok(bytes), (rx, hold))),
            futures::future::Either::Left((None, _)) => None,
            futures::future::Either::Right(_) => Some((Ok(b": keep-alive\n\n".to_vec()), (rx, hold))),
        }
    }))
}

pub fn json(status: u16, body: &Value) -> Response {
    // A `Value` always serializes.
    let mut resp = Response::from_bytes(serde_json::to_vec(body).unwrap_or_default()).with_status(status);
    let headers = resp.headers_mut();
    headers.set("content-type", "application/json");
    headers.set("cache-control", "no-store");
    resp
}

pub fn error(err: &ApiError) -> Response {
    let mut resp = json(err.status, &err.to_json());
    if let Some(allow) = err.allow {
        resp.headers_mut().set("allow", allow);
    }
    for (name, value) in &err.headers {
        resp.headers_mut().set(name, value);
    }
    resp
}

/// Storage and platform failures: logged in full, reported without internals.
pub fn internal(context: &str, e: impl std::fmt::Display) -> ApiError {
    reported(context, &e)
}

/// [`internal`], one copy for every kind of failure.
#[inline(never)]
fn reported(context: &str, e: &dyn std::fmt::Display) -> ApiError {
    crate::shell::log::error(&format!("{context}: {e}"));
    ApiError::new(
        503,
        "storage_unavailable",
        format!("{context} failed; retry, and check the Worker logs if it persists"),
    )
}

/// A platform failure met while doing something the answer needs (drawing random bytes,
/// reading D1): the words of what was being done are what the client reads (see [`internal`]).
pub trait Doing<T> {
    /// `Err` logged in full and answered 503, "`what` failed; retry …".
    fn doing(self, what: &str) -> Result<T, ApiError>;
}

impl<T, E: std::fmt::Display> Doing<T> for Result<T, E> {
    fn doing(self, what: &str) -> Result<T, ApiError> {
        match self {
            Ok(v) => Ok(v),
            Err(e) => Err(internal(what, e)),
        }
    }
}

/// Why a request body was not read.
pub enum BodyError {
    /// Longer than the limit (announced, or found while reading): nothing past it was read.
    TooLarge,
    Unreadable(crate::runtime::Error),
}

impl From<crate::runtime::Error> for BodyError {
    fn from(e: crate::runtime::Error) -> BodyError {
        BodyError::Unreadable(e)
    }
}

/// A request body of at most `limit` bytes. An announced length is judged before reading, and
/// the runtime reads such a body in one piece; a body sent without one (chunked) is read chunk
/// by chunk and abandoned as soon as it passes the limit, so it is never held whole.
pub async fn body_capped(req: &mut Incoming, limit: usize) -> Result<Vec<u8>, BodyError> {
    let announced = req.headers().get("content-length").and_then(|l| l.trim().parse::<usize>().ok());
    if announced.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let body = req.take_body();
    if announced.is_some() || body.is_empty() {
        let bytes = body.bytes().await?;
        return if bytes.len() > limit { Err(BodyError::TooLarge) } else { Ok(bytes) };
    }
    let mut stream = body.into_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if bytes.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Reads a JSON body of at most `limit` bytes. An empty body reads as `{}` when `empty_ok`.
pub async fn read_json(req: &mut Incoming, limit: usize, empty_ok: bool) -> Result<Value, ApiError> {
    let bytes = match body_capped(req, limit).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => return Err(too_large(limit)),
        Err(BodyError::Unreadable(e)) => return Err(internal("reading the request body", e)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return if empty_ok {
            Ok(Value::Object(Default::default()))
        } else {
            Err(ApiError::bad_request("the request body is empty; send a JSON object"))
        };
    }
    let content_type = req.headers().get("content-type").unwrap_or_default();
    if !is_json_content_type(&content_type) {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            format!(
                "send the body as JSON with `Content-Type: application/json` (got {})",
                if content_type.is_empty() { "no Content-Type".to_string() } else { quote_input(&content_type) }
            ),
        ));
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ApiError::new(400, "invalid_json", format!("the body is not UTF-8 text: {e}")))?;
    // serde_json's message gives a position, never the input; bounded anyway.
    serde_json::from_str(text).map_err(|e| {
        let why: String = e.to_string().chars().take(200).collect();
        ApiError::new(400, "invalid_json", format!("the body is not valid JSON: {why}"))
    })
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(413, "payload_too_large", format!("the body is larger than {} KiB", limit / 1024))
}
