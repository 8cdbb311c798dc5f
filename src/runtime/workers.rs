//! The boundary implemented for Cloudflare Workers (workers-rs, wasm32): the Worker's entry
//! points, its Durable Object classes, and every platform call of [`Runtime`]. The only module
//! that names `worker`, `web_sys` or `js_sys`.
//!
//! Platform values are converted once, here, at the edge: requests and responses to the
//! boundary's plain types, storage values through their JSON text (one `JSON.stringify` or
//! `JSON.parse` in JavaScript, serde_json in Rust: workers-rs's typed reads walk a value with a
//! call into JavaScript per field, and their deserializers were 15 KiB of the gzip bundle).

use std::rc::Rc;

use futures::StreamExt;
use serde_json::Value;
use wasm_bindgen::prelude::{wasm_bindgen, Closure};
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{self, Object, Promise, Reflect, JSON};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{durable_object, event, web_sys, DurableObject, State};

use super::{
    Abort, Body, ByteStream, Context, Env, Error, Fetched, Fut, Headers, Kind, LazyHeaders, Method, ObjectHandler,
    ObjectStorage, Outbound, PlatformBody, Request, Response, Result, Runtime, RuntimeTimer, SignError, SqlValue,
    Statement, Worker,
};
use crate::shell::Flowgate;

#[event(start)]
fn start() {
    // Panic messages in the log. A Worker built with `-Cpanic=immediate-abort`
    // (scripts/build-wasm.sh) has none: its panics trap at once, without calling a hook.
    #[cfg(not(panic = "immediate-abort"))]
    console_error_panic_hook::set_once();
}

/// This event's runtime, installed for the shell's ambient calls (clock, log, fetch).
fn enter(env: worker::Env) -> Env {
    let rt: Rc<dyn Runtime> = Rc::new(Workers { env });
    super::install(rt.clone());
    Env::new(rt)
}

/// The Worker's fetch handler, as worker-build's JavaScript calls it (worker/entry.mjs calls
/// that directly). Not `#[event(fetch)]`, which makes every answer a promise: a request whose
/// answer is ready on the first poll (`/healthz`, an error before any platform call) is
/// answered with the `Response` itself, with no promise, no task and no microtask to settle
/// them. A request that waits on the platform becomes a promise, polled from then on by
/// wasm-bindgen's executor (its first poll there replaces the wakers the first one left: a
/// future registers the latest waker each time it is polled).
#[wasm_bindgen(js_name = fetch)]
pub fn fetch(req: web_sys::Request, env: worker::Env, ctx: worker::worker_sys::Context) -> JsValue {
    let env = enter(env);
    let ctx = Rc::new(worker::Context::new(ctx));
    let context = Context::new(Rc::new(move |work| ctx.wait_until(work)));
    let mut pending = Flowgate.serve(incoming(req), env, context);
    match pending.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(resp) => answer(resp),
        std::task::Poll::Pending => {
            worker::wasm_bindgen_futures::future_to_promise(async move { Ok(answer(pending.await)) }).into()
        }
    }
}

#[wasm_bindgen(module = "/worker/http.mjs")]
extern "C" {
    /// The request's method and URL and whether it has a body, in one string.
    #[wasm_bindgen(js_name = requestHead)]
    fn request_head(request: &web_sys::Request) -> String;
    /// `Headers` as [`Headers::from_lines`] reads them.
    #[wasm_bindgen(js_name = headerText)]
    fn header_text(headers: &web_sys::Headers) -> String;
    /// `Headers` from [`Headers::lines`].
    #[wasm_bindgen(js_name = headersOf)]
    fn headers_of_lines(lines: &str) -> web_sys::Headers;
    /// `new Response(body, {status, headers})`, `body` a stream or null.
    #[wasm_bindgen(catch)]
    fn respond(status: u16, body: &JsValue, headers: &str) -> std::result::Result<web_sys::Response, JsValue>;
    /// The same with bytes, which the constructor copies out of the wasm memory.
    #[wasm_bindgen(catch, js_name = respond)]
    fn respond_bytes(status: u16, body: &[u8], headers: &str) -> std::result::Result<web_sys::Response, JsValue>;
}

/// A request as the boundary's value: method and URL read at once (in one call), the headers
/// when first used (in one call), the body left in the runtime until it is read. Not a `worker::Request`: building one reads
/// `request.cf`, which the runtime materializes from JSON on first read (about a tenth of a
/// `/healthz`'s CPU in the profile) and which Flowgate never uses.
fn incoming(raw: web_sys::Request) -> Request {
    let head = request_head(&raw);
    let (has_body, rest) = match head.strip_prefix('b') {
        Some(rest) => (true, rest),
        None => (false, head.strip_prefix('-').unwrap_or(&head)),
    };
    let (method, url) = rest.split_once('\n').unwrap_or((rest, ""));
    let (method, url) = (Method::from(method), url.to_string());
    // The handle (not `Request.clone()`, which would copy the request).
    let source = Clone::clone(&raw);
    let headers = LazyHeaders::deferred(move || headers_of(&source.headers()));
    let body = if has_body { Body::Platform(Box::new(HeldBody::Request(raw))) } else { Body::Empty };
    Request { method, url, headers, body }
}

fn headers_of(js: &web_sys::Headers) -> Headers {
    Headers::from_lines(&header_text(js))
}

/// The boundary's headers as `fetch`'s. A field `fetch` refuses is left out and logged (the
/// shell checks values from configuration and clients with `Headers::try_set` first).
fn js_headers(headers: &Headers) -> web_sys::Headers {
    headers_of_lines(&header_lines(headers))
}

/// The lines `worker/http.mjs` builds `Headers` from; it logs a field the runtime refuses, and
/// this one a field the lines cannot carry, in the same words.
fn header_lines(headers: &Headers) -> String {
    headers.lines(|name| {
        super::log_line(&format!(r#"{{"level":"error","msg":"a header fetch refuses was left out: {name}"}}"#))
    })
}

/// The shell's answer as the runtime's `Response`, made in one call.
fn outgoing(resp: Response) -> std::result::Result<web_sys::Response, JsValue> {
    let (status, headers, body) = resp.into_parts();
    let lines = header_lines(&headers);
    match body {
        Body::Empty => respond(status, &JsValue::NULL, &lines),
        Body::Bytes(b) => respond_bytes(status, &b, &lines),
        // One instantiation of `from_stream` for every streamed body (bundle size).
        streamed => {
            let made = worker::Response::from_stream(streamed.into_stream().map(|c| c.map_err(rust_error)))?;
            match made.body() {
                worker::ResponseBody::Stream(s) => respond(status, s, &lines),
                _ => respond(status, &JsValue::NULL, &lines),
            }
        }
    }
}

/// [`outgoing`] for the fetch handler: a `Response` the runtime refuses to make (a status out
/// of its range) is logged and answered 500, as `#[event(fetch)]` answers one.
fn answer(resp: Response) -> JsValue {
    outgoing(resp).map(JsValue::from).unwrap_or_else(|e| {
        super::log_line(&format!(
            r#"{{"level":"error","msg":"the answer could not be made: {}"}}"#,
            js_text(e.clone())
        ));
        respond(500, &JsValue::from_str("INTERNAL SERVER ERROR"), "").map(JsValue::from).unwrap_or(e)
    })
}

/// A body the runtime still holds: a client's request's or a backend's answer's.
enum HeldBody {
    Request(web_sys::Request),
    Response(web_sys::Response),
}

impl HeldBody {
    fn array_buffer(&self) -> std::result::Result<Promise, JsValue> {
        match self {
            HeldBody::Request(r) => r.array_buffer(),
            HeldBody::Response(r) => r.array_buffer(),
        }
    }

    fn stream(&self) -> Option<web_sys::ReadableStream> {
        match self {
            HeldBody::Request(r) => r.body(),
            HeldBody::Response(r) => r.body(),
        }
    }
}

impl PlatformBody for HeldBody {
    fn whole(self: Box<Self>) -> Fut<'static, Result<Vec<u8>>> {
        in_kind(Kind::Body, async move {
            let buffer = JsFuture::from(self.array_buffer()?).await?;
            Ok(js_sys::Uint8Array::new(&buffer).to_vec())
        })
    }

    fn chunks(self: Box<Self>) -> ByteStream {
        match self.stream() {
            Some(body) => chunks_of(body),
            None => Box::pin(futures::stream::empty()),
        }
    }
}

fn chunks_of(body: web_sys::ReadableStream) -> ByteStream {
    Box::pin(worker::ByteStream::from(body).map(|c| c.map_err(|e| Error::new(Kind::Body, e.to_string()))))
}

/// A platform failure before it is known which call it belongs to: an exception, a workers-rs
/// error, or the words of this module. [`in_kind`] makes it the boundary's [`Error`].
enum Fail {
    Js(JsValue),
    Worker(worker::Error),
    Said(String),
}

impl From<JsValue> for Fail {
    fn from(e: JsValue) -> Fail {
        Fail::Js(e)
    }
}

impl From<worker::Error> for Fail {
    fn from(e: worker::Error) -> Fail {
        Fail::Worker(e)
    }
}

impl From<&str> for Fail {
    fn from(s: &str) -> Fail {
        Fail::Said(s.to_string())
    }
}

impl From<serde_json::Error> for Fail {
    fn from(e: serde_json::Error) -> Fail {
        Fail::Said(Error::from(e).message)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Said(e.message)
    }
}

impl Fail {
    /// The failure as a call of `kind`. A D1 failure's text has its cause's message too (where
    /// SQLite's words are: the shell tells a unique-constraint conflict by them).
    fn of(self, kind: Kind) -> Error {
        let text = match self {
            Fail::Js(e) if kind == Kind::D1 => {
                let cause = Reflect::get(&e, &JsValue::from_str("cause"))
                    .ok()
                    .filter(|c| !c.is_undefined() && !c.is_null())
                    .map(js_text);
                let text = js_text(e);
                match cause {
                    Some(c) if !text.contains(&c) => format!("{text}: {c}"),
                    _ => text,
                }
            }
            Fail::Js(e) => js_text(e),
            Fail::Worker(e) => e.to_string(),
            Fail::Said(s) => s,
        };
        Error::new(kind, text)
    }
}

/// An exception's text (its name and message; never a value the shell sent).
fn js_text(e: JsValue) -> String {
    match e.dyn_ref::<js_sys::Error>() {
        Some(err) => format!("{}: {}", String::from(err.name()), String::from(err.message())),
        None => worker::Error::from(e).to_string(),
    }
}

/// `work` as a platform call of `kind`: its failures become the boundary's [`Error`].
fn in_kind<T: 'static>(
    kind: Kind,
    work: impl std::future::Future<Output = std::result::Result<T, Fail>> + 'static,
) -> Fut<'static, Result<T>> {
    Box::pin(async move { work.await.map_err(|f| f.of(kind)) })
}

/// A boundary error as workers-rs reports it to the runtime.
fn rust_error(e: Error) -> worker::Error {
    worker::Error::RustError(e.message)
}

#[wasm_bindgen(module = "/worker/stored-json.mjs")]
extern "C" {
    /// `JSON.stringify`, with a `Map` written as an object: the storage records of deploys
    /// before this one were written by serde_wasm_bindgen, which stores a JSON object as a
    /// `Map` (tests/integration/stored-json.test.mjs). `undefined` for `undefined`.
    #[wasm_bindgen(catch, js_name = storedJson)]
    fn stored_json(value: &JsValue) -> std::result::Result<JsValue, JsValue>;
}

/// A platform value's JSON text; `None` for `null` or `undefined`.
fn json_text(value: &JsValue) -> std::result::Result<Option<String>, Fail> {
    if value.is_null() || value.is_undefined() {
        return Ok(None);
    }
    Ok(stored_json(value)?.as_string())
}

#[wasm_bindgen]
extern "C" {
    /// The global `fetch(url, init)`: no `Request` object to build, and none of the getters
    /// (`cf`, ...) that wrapping one in a `worker::Request` reads.
    #[wasm_bindgen(catch, js_name = fetch)]
    fn global_fetch(url: &str, init: &web_sys::RequestInit) -> std::result::Result<Promise, JsValue>;

    // The handle is whatever the runtime returns (a number in Workers), passed back as is.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &js_sys::Function, ms: f64) -> JsValue;
    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(handle: &JsValue);

    /// A KV namespace binding, called structurally (the local simulator's class has another name).
    type KvNamespace;
    #[wasm_bindgen(method, catch)]
    fn get(this: &KvNamespace, key: &str, kind: &str) -> std::result::Result<Promise, JsValue>;
    #[wasm_bindgen(method, catch)]
    fn put(this: &KvNamespace, key: &str, value: &str, options: &Object) -> std::result::Result<Promise, JsValue>;
    #[wasm_bindgen(method, catch)]
    fn delete(this: &KvNamespace, key: &str) -> std::result::Result<Promise, JsValue>;
}

/// A `setTimeout` with one callback for its life (see `runtime::timer`).
struct JsTimer {
    callback: Closure<dyn FnMut()>,
    armed: Option<JsValue>,
}

impl RuntimeTimer for JsTimer {
    fn set(&mut self, ms: u64) {
        self.clear();
        self.armed = Some(set_timeout(self.callback.as_ref().unchecked_ref(), ms as f64));
    }

    fn clear(&mut self) {
        if let Some(handle) = self.armed.take() {
            clear_timeout(&handle);
        }
    }
}

struct Controller(web_sys::AbortController);

impl Abort for Controller {
    fn abort(&self) {
        self.0.abort();
    }
}

/// Aborts the exchange when dropped before its answer came (a deadline won the race).
struct AbortOnDrop(Option<web_sys::AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.abort();
        }
    }
}

/// The Workers platform, as the boundary's [`Runtime`].
struct Workers {
    env: worker::Env,
}

impl Workers {
    fn binding(&self, name: &str) -> std::result::Result<JsValue, Fail> {
        let b = Reflect::get(&self.env, &JsValue::from_str(name))?;
        if b.is_undefined() || b.is_null() {
            return Err(Fail::Said(format!("the {name} binding is missing")));
        }
        Ok(b)
    }

    fn kv(&self, binding: &str) -> std::result::Result<KvNamespace, Fail> {
        Ok(self.binding(binding)?.unchecked_into())
    }

    fn prepare(db: &worker::D1Database, stmt: &Statement) -> std::result::Result<worker::D1PreparedStatement, Fail> {
        let args: Vec<JsValue> = stmt
            .args
            .iter()
            .map(|a| match a {
                SqlValue::Null => JsValue::NULL,
                SqlValue::Int(n) => JsValue::from_f64(*n as f64),
                SqlValue::Text(t) => JsValue::from_str(t),
            })
            .collect();
        Ok(db.prepare(&stmt.sql).bind(&args)?)
    }
}

impl Runtime for Workers {
    fn spawn(&self, work: Fut<'static, ()>) {
        worker::wasm_bindgen_futures::spawn_local(work);
    }

    fn setting(&self, name: &str) -> Option<String> {
        self.env.var(name).map(|v| v.to_string()).or_else(|_| self.env.secret(name).map(|v| v.to_string())).ok()
    }

    fn now_ms(&self) -> u64 {
        // `Date.now()`, one call into JavaScript (`worker::Date::now` makes a Date object and
        // asks it: two, and an allocation; a call reads the clock a dozen times).
        js_sys::Date::now() as u64
    }

    fn fill_random(&self, buf: &mut [u8]) -> Result<()> {
        crate::pure::random::fill(buf).map_err(|e| Error::new(Kind::Random, e.to_string()))
    }

    fn timer(&self, on_fire: Rc<dyn Fn()>) -> Box<dyn RuntimeTimer> {
        Box::new(JsTimer { callback: Closure::new(move || on_fire()), armed: None })
    }

    fn log(&self, line: &str) {
        worker::console_log!("{line}");
    }

    fn fetch(&self, req: Outbound) -> Fut<'static, Result<Fetched>> {
        in_kind(Kind::Fetch, async move {
            let init = web_sys::RequestInit::new();
            init.set_method(req.method.as_str());
            init.set_headers(&js_headers(&req.headers));
            init.set_redirect(web_sys::RequestRedirect::Manual);
            if let Some(b) = &req.body {
                init.set_body(&JsValue::from(js_sys::Uint8Array::from(b.as_slice())));
            }
            let controller = web_sys::AbortController::new()?;
            init.set_signal(Some(&controller.signal()));
            let mut guard = AbortOnDrop(Some(controller));
            let answer = JsFuture::from(global_fetch(&req.url, &init)?).await?;
            let controller = guard.0.take().ok_or("the exchange was aborted")?;
            let raw: web_sys::Response = answer.unchecked_into();
            let headers = headers_of(&raw.headers());
            let status = raw.status();
            let body = match raw.body() {
                Some(_) => Body::Platform(Box::new(HeldBody::Response(raw))),
                None => Body::Empty,
            };
            Ok(Fetched { status, headers, body, abort: Box::new(Controller(controller)) })
        })
    }

    fn kv_get(&self, binding: &str, key: &str) -> Fut<'static, Result<Option<String>>> {
        let started = self.kv(binding).and_then(|kv| Ok(kv.get(key, "text")?));
        in_kind(Kind::Kv, async move { Ok(JsFuture::from(started?).await?.as_string()) })
    }

    fn kv_put(&self, binding: &str, key: &str, value: &str, ttl_seconds: u64) -> Fut<'static, Result<()>> {
        let started = self.kv(binding).and_then(|kv| {
            let options = Object::new();
            let ttl = JsValue::from_f64(ttl_seconds.max(60) as f64);
            Reflect::set(&options, &JsValue::from_str("expirationTtl"), &ttl)?;
            Ok(kv.put(key, value, &options)?)
        });
        in_kind(Kind::Kv, async move { Ok(JsFuture::from(started?).await.map(drop)?) })
    }

    fn kv_delete(&self, binding: &str, key: &str) -> Fut<'static, Result<()>> {
        let started = self.kv(binding).and_then(|kv| Ok(kv.delete(key)?));
        in_kind(Kind::Kv, async move { Ok(JsFuture::from(started?).await.map(drop)?) })
    }

    fn d1_rows(&self, binding: &str, stmt: Statement) -> Fut<'static, Result<Vec<Value>>> {
        let prepared = (|| Workers::prepare(&self.env.d1(binding)?, &stmt))();
        in_kind(Kind::D1, async move {
            let promise = prepared?.inner().all()?;
            let result = JsFuture::from(promise).await?;
            let rows = Reflect::get(&result, &JsValue::from_str("results"))?;
            match json_text(&rows)? {
                None => Ok(Vec::new()),
                Some(text) => match serde_json::from_str(&text)? {
                    Value::Array(rows) => Ok(rows),
                    _ => Err(Fail::from("a D1 result's rows are not a list")),
                },
            }
        })
    }

    fn d1_batch(&self, binding: &str, stmts: Vec<Statement>) -> Fut<'static, Result<Vec<u64>>> {
        // Called through JS: workers-rs reads a result's `meta` with serde_wasm_bindgen.
        let started = (|| -> std::result::Result<Promise, Fail> {
            let raw = self.binding(binding)?;
            let db = self.env.d1(binding)?;
            let list = js_sys::Array::new();
            for s in &stmts {
                list.push(Workers::prepare(&db, s)?.inner());
            }
            let batch: js_sys::Function = Reflect::get(&raw, &JsValue::from_str("batch"))?.unchecked_into();
            Ok(batch.call1(&raw, &list)?.dyn_into()?)
        })();
        in_kind(Kind::D1, async move {
            let results: js_sys::Array = JsFuture::from(started?).await?.dyn_into()?;
            Ok(results.iter().map(|r| changes(&r)).collect())
        })
    }

    fn object_fetch(&self, namespace: &str, name: &str, req: Request) -> Fut<'static, Result<Response>> {
        let stub = self.env.durable_object(namespace).and_then(|ns| ns.id_from_name(name)?.get_stub());
        in_kind(Kind::Object, async move {
            let stub = stub?;
            // Built as a `web_sys::Request`: `worker::Request::new_with_init` also converts the
            // init's `cf` options (image resizing and more), code the bundle otherwise does without.
            let init = web_sys::RequestInit::new();
            init.set_method(req.method.as_str());
            init.set_headers(&js_headers(&req.headers));
            let body = req.body.bytes().await?;
            if !body.is_empty() {
                init.set_body(&JsValue::from(js_sys::Uint8Array::from(body.as_slice())));
            }
            let raw = web_sys::Request::new_with_str_and_init(&req.url, &init)?;
            let mut resp = stub.fetch_with_request(raw.into()).await?;
            let status = resp.status_code();
            let headers = headers_of(&resp.headers().0);
            // A streamed answer (a legacy session's lines) is read as it comes.
            let body = match resp.body() {
                worker::ResponseBody::Stream(s) => Body::Stream(chunks_of(s.clone())),
                _ => Body::Bytes(resp.bytes().await?),
            };
            Ok(Response::new(status, headers, body))
        })
    }

    fn rate_limit(&self, binding: &str, key: &str) -> Fut<'static, Result<bool>> {
        // Called through JS directly: the binding's class name differs between the runtime and
        // the local simulator, so the typed wrapper's class check would refuse one of them.
        let started = (|| -> std::result::Result<Option<Promise>, Fail> {
            let Ok(binding) = self.binding(binding) else { return Ok(None) };
            let limit = Reflect::get(&binding, &JsValue::from_str("limit"))?;
            let limit: js_sys::Function =
                limit.dyn_into().map_err(|_| Fail::from("the rate limiter's limit is not a function"))?;
            let arg = Object::new();
            Reflect::set(&arg, &JsValue::from_str("key"), &JsValue::from_str(key))?;
            let promise = limit.call1(&binding, &arg)?;
            Ok(Some(promise.dyn_into().map_err(|_| Fail::from("the rate limiter did not answer a promise"))?))
        })();
        in_kind(Kind::RateLimit, async move {
            let Some(promise) = started? else { return Ok(true) };
            let outcome = JsFuture::from(promise).await?;
            Ok(Reflect::get(&outcome, &JsValue::from_str("success")).ok().and_then(|v| v.as_bool()).unwrap_or(true))
        })
    }

    fn verify_signature(
        &self,
        jwk: &str,
        import: &str,
        verify: &str,
        signature: &[u8],
        data: &[u8],
    ) -> Fut<'static, Result<bool>> {
        let (jwk, import, verify) = (jwk.to_string(), import.to_string(), verify.to_string());
        let (signature, data) = (signature.to_vec(), data.to_vec());
        in_kind(Kind::Crypto, async move {
            let subtle = subtle()?;
            let jwk: Object = JSON::parse(&jwk)?.unchecked_into();
            let import: Object = JSON::parse(&import)?.unchecked_into();
            let usages = js_sys::Array::of1(&JsValue::from_str("verify"));
            let imported = subtle.import_key_with_object("jwk", &jwk, &import, false, &usages)?;
            let key: web_sys::CryptoKey = JsFuture::from(imported).await?.unchecked_into();
            let params: Object = JSON::parse(&verify)?.unchecked_into();
            let verified = subtle.verify_with_object_and_u8_array_and_u8_array(&params, &key, &signature, &data)?;
            Ok(JsFuture::from(verified).await?.as_bool() == Some(true))
        })
    }

    fn sign(
        &self,
        pkcs8: &[u8],
        import: &str,
        sign: &str,
        data: Option<&[u8]>,
    ) -> Fut<'static, Result<Vec<u8>, SignError>> {
        let (pkcs8, import, sign) = (pkcs8.to_vec(), import.to_string(), sign.to_string());
        let data = data.map(<[u8]>::to_vec);
        Box::pin(async move {
            let imported = async {
                let subtle = subtle()?;
                let key_data: Object = js_sys::Uint8Array::from(pkcs8.as_slice()).unchecked_into();
                let params: Object = JSON::parse(&import)?.unchecked_into();
                let usages = js_sys::Array::of1(&JsValue::from_str("sign"));
                let promise = subtle.import_key_with_object("pkcs8", &key_data, &params, false, &usages)?;
                let key: web_sys::CryptoKey = JsFuture::from(promise).await?.unchecked_into();
                Ok::<_, Fail>((subtle, key))
            };
            let (subtle, key) = imported.await.map_err(|f| SignError::Import(f.of(Kind::Crypto).message))?;
            let Some(data) = data else { return Ok(Vec::new()) };
            let signed = async {
                let params: Object = JSON::parse(&sign)?.unchecked_into();
                let promise = subtle.sign_with_object_and_u8_array(&params, &key, &data)?;
                Ok::<_, Fail>(JsFuture::from(promise).await?)
            };
            let signature = signed.await.map_err(|f| SignError::Sign(f.of(Kind::Crypto).message))?;
            Ok(js_sys::Uint8Array::new(&signature).to_vec())
        })
    }
}

/// The rows a D1 statement changed (`meta.changes`), read without serde_wasm_bindgen.
fn changes(result: &JsValue) -> u64 {
    Reflect::get(result, &JsValue::from_str("meta"))
        .and_then(|meta| Reflect::get(&meta, &JsValue::from_str("changes")))
        .ok()
        .and_then(|c| c.as_f64())
        .map_or(0, |c| c as u64)
}

fn subtle() -> std::result::Result<web_sys::SubtleCrypto, Fail> {
    let crypto: web_sys::Crypto = Reflect::get(&js_sys::global(), &JsValue::from_str("crypto"))?.unchecked_into();
    Ok(crypto.subtle())
}

/// A Durable Object's storage, as the boundary's [`ObjectStorage`].
struct Storage(State);

impl ObjectStorage for Storage {
    fn get(&self, key: &str) -> Fut<'static, Result<Option<String>>> {
        let started = self.0.as_raw().storage().and_then(|s| s.get(key));
        in_kind(Kind::Storage, async move { json_text(&JsFuture::from(started?).await?) })
    }

    fn put(&self, key: &str, json: &str) -> Fut<'static, Result<()>> {
        // Stored as the plain object its JSON parses to (what deploys before this one read, too).
        let started = JSON::parse(json).and_then(|v| self.0.as_raw().storage().and_then(|s| s.put(key, v)));
        in_kind(Kind::Storage, async move { Ok(JsFuture::from(started?).await.map(drop)?) })
    }

    fn delete(&self, key: &str) -> Fut<'static, Result<()>> {
        let storage = self.0.storage();
        let key = key.to_string();
        in_kind(Kind::Storage, async move { Ok(storage.delete(&key).await.map(drop)?) })
    }

    fn delete_all(&self) -> Fut<'static, Result<()>> {
        let storage = self.0.storage();
        in_kind(Kind::Storage, async move { Ok(storage.delete_all().await?) })
    }

    fn set_alarm(&self, at_ms: u64) -> Fut<'static, Result<()>> {
        let storage = self.0.storage();
        let offset = at_ms as i64 - js_sys::Date::now() as i64;
        in_kind(Kind::Storage, async move { Ok(storage.set_alarm(offset).await?) })
    }

    fn get_alarm(&self) -> Fut<'static, Result<Option<u64>>> {
        let storage = self.0.storage();
        in_kind(Kind::Storage, async move { Ok(storage.get_alarm().await?.map(|t| t.max(0) as u64)) })
    }

    fn delete_alarm(&self) -> Fut<'static, Result<()>> {
        let storage = self.0.storage();
        in_kind(Kind::Storage, async move { Ok(storage.delete_alarm().await?) })
    }
}

/// A Durable Object class of the shell, as workers-rs calls it: each request and alarm
/// converted at the edge and handed to the shell's handler.
async fn object_fetch(
    handler: &dyn ObjectHandler,
    env: &worker::Env,
    req: worker::Request,
) -> worker::Result<worker::Response> {
    enter(env.clone());
    let raw: web_sys::Request = JsValue::from(req.inner()).unchecked_into();
    Ok(worker::Response::from(outgoing(handler.fetch(incoming(raw)).await)?))
}

async fn object_alarm(handler: &dyn ObjectHandler, env: &worker::Env) -> worker::Result<worker::Response> {
    enter(env.clone());
    handler.alarm().await.map_err(rust_error)?;
    worker::Response::ok("ok")
}

fn open(namespace: &str, state: State, env: &worker::Env) -> Rc<dyn ObjectHandler> {
    let rt = enter(env.clone());
    let storage: Rc<dyn ObjectStorage> = Rc::new(Storage(state));
    // Both names are bound in wrangler.toml; an unknown one is a build error, not a request's.
    Flowgate.open_object(namespace, storage, rt).unwrap_or_else(|| panic!("no Durable Object class for {namespace}"))
}

/// A Durable Object class of the shell: the class name wrangler.toml binds, and the namespace
/// (binding) the shell knows it by; each request and alarm handed to the shell's handler.
macro_rules! object_class {
    ($(#[$doc:meta])* $class:ident, $namespace:expr) => {
        // `alarm`: the class exports `fetch` and `alarm` only; without it workers-rs also
        // exports WebSocket and socket `connect` handlers, which Flowgate never serves (each an
        // async export of its own: about 2 KB of wasm per class).
        $(#[$doc])*
        #[durable_object(alarm)]
        pub struct $class {
            handler: Rc<dyn ObjectHandler>,
            env: worker::Env,
        }

        impl DurableObject for $class {
            fn new(state: State, env: worker::Env) -> Self {
                $class { handler: open($namespace, state, &env), env }
            }

            async fn fetch(&self, req: worker::Request) -> worker::Result<worker::Response> {
                object_fetch(&*self.handler, &self.env, req).await
            }

            async fn alarm(&self) -> worker::Result<worker::Response> {
                object_alarm(&*self.handler, &self.env).await
            }
        }
    };
}

object_class!(
    /// The task poller's class (`TASKS`).
    TaskRunner,
    crate::pure::config::TASKS
);
object_class!(
    /// The OAuth token broker's class (`OAUTH`).
    TokenBroker,
    crate::pure::config::OAUTH
);
object_class!(
    /// The call bridge's class (`BRIDGES`): one 2025 upstream call held across a 2026-07-28
    /// client's input rounds.
    CallBridge,
    crate::pure::config::BRIDGES
);
object_class!(
    /// The class that keeps legacy HTTP+SSE upstream sessions (`LEGACY_SESSIONS`).
    LegacySession,
    crate::pure::config::LEGACY_SESSIONS
);
object_class!(
    /// The class that holds a client session's standalone stream and subscriptions
    /// (`CLIENT_SESSIONS`).
    ClientSession,
    crate::pure::config::CLIENT_SESSIONS
);
