//! A hello-world workers-rs Worker: every request gets `{"status":"ok"}`, as Flowgate's and the
//! floor's `GET /healthz` do. Nothing else: its CPU per request is what the runtime, the
//! wasm-bindgen glue and workers-rs cost a Rust Worker that does no work.

use worker::{event, Context, Env, Request, Response, Result};

#[event(fetch)]
async fn fetch(_req: Request, _env: Env, _ctx: Context) -> Result<Response> {
    let mut resp = Response::ok(r#"{"status":"ok"}"#)?;
    resp.headers_mut().set("content-type", "application/json")?;
    Ok(resp)
}
