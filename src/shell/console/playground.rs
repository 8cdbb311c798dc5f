//! The tool playground: a server's tools as an MCP client sees them, and a call of one from the
//! console through the endpoint's own dispatch (`endpoint::dispatch`): the same protocol checks,
//! call path, notifications, usage metrics and call log as a client's call, streamed back as the
//! SSE a client would read. The caller is the console user.

use std::rc::Rc;

use crate::json;
use serde_json::Value;

use crate::pure::backend::mcp::binding::{Caller as UpstreamCaller, CALLER_ENTRY};
use crate::pure::backend::mcp::variant::Variant;
use crate::pure::error::ApiError;
use crate::pure::mcp::gateway::Catalogs;
use crate::pure::mcp::prepared::Prepared;
use crate::pure::mcp::server::{self, RequestHeaders, Step};
use crate::pure::mcp::tools::Upstreams;
use crate::pure::protocol::meta;
use crate::pure::protocol::version::Version;
use crate::pure::server::Status;
use crate::runtime::Response;

use crate::shell::endpoint::{self, Via};
use crate::shell::http::Doing;
use crate::shell::store;
use crate::shell::VERSION;

use super::{field_error, Console, Result};

/// The revision the playground speaks: the newest with `initialize`, the one most clients use
/// (progress with messages, log notifications at `info`, outputSchema and structuredContent).
const REVISION: Version = Version::LATEST_WITH_INITIALIZE;
/// The progress token of a playground call.
const PROGRESS_TOKEN: &str = "playground";

impl Console<'_> {
    /// The server's definition as the endpoint would serve it, read from D1 (the authority), and
    /// its upstream MCP apps' tool lists.
    async fn prepared(&self, server_id: &str) -> Result<(Rc<Prepared>, Upstreams)> {
        let row = self.server_row(server_id).await?;
        let def = store::load_definition(self.db, &row).await?;
        let upstreams = if def.apps.iter().any(|a| a.backend.as_mcp().is_some()) {
            endpoint::load_upstreams(&def, self.env, Variant::none()).await
        } else {
            Upstreams::default()
        };
        Ok((Rc::new(Prepared::new(def)), upstreams))
    }

    /// `GET /servers/{id}/tools`: the `tools/list` result a client of [`REVISION`] gets.
    pub(super) async fn list_tools(&self, server_id: &str) -> Result<Value> {
        let (prepared, upstreams) = self.prepared(server_id).await?;
        let def = &prepared.def;
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let h = RequestHeaders { protocol_version: Some(REVISION.as_str()), ..RequestHeaders::default() };
        let result = match server::handle_full(def, &upstreams, &Catalogs::default(), &msg, &h, VERSION) {
            Step::ToolsList { version, .. } => {
                serde_json::from_str::<Value>(&prepared.tools_list(version, VERSION)).doing("reading the tool list")?
            }
            Step::Reply { body: Some(body), .. } if body.get("result").is_some() => body["result"].clone(),
            _ => return Err(ApiError::new(500, "internal", "the tool list could not be made")),
        };
        Ok(json!({
            "server_id": server_id,
            "protocol_version": REVISION.as_str(),
            "status": def.status.as_str(),
            "tools": result.get("tools").cloned().unwrap_or_else(|| json!([])),
        }))
    }

    /// `POST /servers/{id}/tools/call` `{name, arguments?}`: runs the tool as a client's
    /// `tools/call` of [`REVISION`] with a progress token; the answer is the endpoint's own (an
    /// SSE stream of notifications and the response, or one JSON-RPC response).
    pub(super) async fn call_tool(&self, server_id: &str, actor: &str, body: &Value) -> Result<Response> {
        let name = match body.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => return Err(field_error("name", "is required: the name of the tool to run (see GET …/tools)")),
        };
        let arguments = match body.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(a @ Value::Object(_)) => a.clone(),
            Some(_) => return Err(field_error("arguments", "must be an object of the tool's arguments")),
        };
        let (prepared, upstreams) = self.prepared(server_id).await?;
        if prepared.def.status != Status::Active {
            return Err(ApiError::conflict(format!(
                "server '{}' is inactive: its clients are refused, and so is the playground; activate it first",
                prepared.def.name
            )));
        }
        // The console user is the call's authenticated caller (the backend's `user`, the owner
        // of what it starts); the user's own headers never go upstream.
        let identity = format!("console:{actor}");
        let has_upstreams = !upstreams.0.is_empty() || prepared.def.apps.iter().any(|a| a.backend.as_mcp().is_some());
        let incoming = if has_upstreams {
            vec![(CALLER_ENTRY.to_string(), UpstreamCaller::Subject(&identity).tag())]
        } else {
            Vec::new()
        };
        let h = RequestHeaders {
            protocol_version: Some(REVISION.as_str()),
            user_agent: Some("flowgate-console-playground"),
            identity: Some(&identity),
            ..RequestHeaders::default()
        };
        let msg = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": {meta::PROGRESS_TOKEN: PROGRESS_TOKEN}},
        });
        let (env, ctx) = (self.env, self.ctx);
        endpoint::dispatch(
            &msg,
            &prepared,
            env,
            ctx,
            h,
            &upstreams,
            &Catalogs::default(),
            incoming,
            true,
            None,
            Via::Console(actor),
        )
        .await
        .doing("running the tool")
    }
}
