//! The session with an upstream MCP server and the messages sent in it: the `initialize` handshake
//! (or, for a stateless 2026-07-28 server, `server/discover`), the requests that follow, and the
//! headers each request carries for its session.

use crate::json;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::pure::protocol::meta;
use crate::pure::protocol::methods;
use crate::pure::protocol::param_headers::encode_value;
use crate::pure::protocol::version::Version;

use super::error::quote;
use super::transport::Transport;

/// The revision offered in `initialize`: the newest one that still has the handshake.
pub const OFFERED_VERSION: Version = Version::LATEST_WITH_INITIALIZE;
/// How Flowgate names itself to upstream servers.
pub const CLIENT_NAME: &str = "flowgate";

/// What Flowgate keeps between requests to one upstream; stored by the shell, so serializable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Session {
    pub transport: Transport,
    /// The negotiated revision, sent as `MCP-Protocol-Version` on every later request.
    pub protocol_version: String,
    /// `Mcp-Session-Id` from the initialize answer, echoed on every later request.
    pub session_id: Option<String>,
    /// 2026-07-28: no handshake, no session id; every request carries `_meta`.
    pub stateless: bool,
    /// The upstream's server capabilities from its initialize (or discover) result: whether it
    /// has resources, prompts, completions. `None` for a session stored before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
}

impl crate::pure::fields::FromFields for Session {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(Session {
            transport: f.named("transport")?,
            protocol_version: f.text("protocol_version")?,
            session_id: f.opt_text("session_id")?,
            stateless: f.flag("stateless")?,
            capabilities: f.opt_value("capabilities"),
        })
    }
}
crate::pure::fields::deserialize_by_fields!(Session);

impl Session {
    /// The negotiated revision (always one Flowgate speaks, once parsed).
    pub fn version(&self) -> Option<Version> {
        Version::parse(&self.protocol_version)
    }
}

fn client_info() -> Value {
    json!({ "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") })
}

fn request(id: u64, method: &str, params: Map<String, Value>) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// The `_meta` entries a 2026-07-28 request carries in place of the handshake.
fn add_stateless_meta(params: &mut Map<String, Value>, protocol_version: &str) {
    let entry = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Some(keys) = entry.as_object_mut() {
        keys.insert(meta::PROTOCOL_VERSION.into(), protocol_version.into());
        // The capabilities of the client whose request this is (`mcp::input_required`): what
        // the upstream may ask it for; none when Flowgate asks on its own behalf.
        keys.entry(meta::CLIENT_CAPABILITIES).or_insert_with(|| json!({}));
        keys.insert(meta::CLIENT_INFO.into(), client_info());
    }
}

fn add_session_meta(params: &mut Map<String, Value>, session: &Session) {
    if session.stateless {
        add_stateless_meta(params, &session.protocol_version);
    } else if let Some(Value::Object(m)) = params.get_mut("_meta") {
        // An upstream with a session learnt Flowgate's capabilities at initialize.
        m.remove(meta::CLIENT_CAPABILITIES);
        if m.is_empty() {
            params.remove("_meta");
        }
    }
}

/// The handshake offering `version` (an app's `backend.protocol_version`, else
/// [`OFFERED_VERSION`]) with `capabilities`: what the calling client declared
/// (`variant::Variant::capabilities`), so the upstream offers it what it offers that client.
pub fn initialize_offering(id: u64, version: Version, capabilities: &Value) -> Value {
    let mut p = Map::new();
    p.insert("protocolVersion".into(), version.as_str().into());
    p.insert("capabilities".into(), capabilities.clone());
    p.insert("clientInfo".into(), client_info());
    request(id, methods::INITIALIZE, p)
}

/// `params` with the client capabilities a 2026-07-28 upstream is told in `_meta` (an upstream
/// with a session learnt them at initialize, and they are left out again by the request
/// builders); ones already there (a client's own round trip) stay.
pub fn declaring(mut params: Map<String, Value>, capabilities: &Value) -> Map<String, Value> {
    let entry = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Some(keys) = entry.as_object_mut() {
        keys.entry(meta::CLIENT_CAPABILITIES).or_insert_with(|| capabilities.clone());
    }
    params
}

/// Sent after a successful initialize, before any other request (the spec's handshake order).
pub fn initialized_notification() -> Value {
    json!({ "jsonrpc": "2.0", "method": methods::INITIALIZED })
}

/// `tools/list`, one page, for a client that declared `capabilities`; the caller follows
/// `nextCursor`.
pub fn tools_list_request(id: u64, cursor: Option<&str>, session: &Session, capabilities: &Value) -> Value {
    let mut p = Map::new();
    if let Some(c) = cursor {
        p.insert("cursor".into(), c.into());
    }
    let mut p = declaring(p, capabilities);
    add_session_meta(&mut p, session);
    request(id, methods::TOOLS_LIST, p)
}

/// Any other request of a session (`resources/*`, `prompts/*`, `completion/complete`) with the
/// params as given; the session's `_meta` is added for a stateless upstream.
pub fn session_request(id: u64, method: &str, mut params: Map<String, Value>, session: &Session) -> Value {
    add_session_meta(&mut params, session);
    request(id, method, params)
}

/// `tools/call` with the upstream's own tool name and the client's round-trip `input`
/// (`mcp::input_required`); a progress token is passed on so the upstream's progress can be
/// relayed to Flowgate's client.
pub fn tools_call_request(
    id: u64,
    name: &str,
    arguments: &Value,
    progress_token: Option<&Value>,
    input: &Map<String, Value>,
    session: &Session,
) -> Value {
    let mut p = input.clone();
    p.insert("name".into(), name.into());
    p.insert("arguments".into(), if arguments.is_null() { json!({}) } else { arguments.clone() });
    if let Some(t) = progress_token {
        p.entry("_meta").or_insert_with(|| json!({}))[meta::PROGRESS_TOKEN] = t.clone();
    }
    add_session_meta(&mut p, session);
    request(id, methods::TOOLS_CALL, p)
}

/// 2026-07-28's probe: a server that answers it is stateless and needs no initialize.
pub fn discover_request(id: u64) -> Value {
    let mut p = Map::new();
    add_stateless_meta(&mut p, Version::V2026_07_28.as_str());
    request(id, methods::DISCOVER, p)
}

/// Headers for a request after initialization: MCP-Protocol-Version, Mcp-Session-Id when there
/// is one, and for 2026-07-28 Mcp-Method / Mcp-Name (which the server checks against the body).
/// A name that is not plain visible ASCII is sent `=?base64?…?=`-encoded, as the spec asks.
pub fn request_headers(session: &Session, method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![("MCP-Protocol-Version", session.protocol_version.clone())];
    if let Some(id) = &session.session_id {
        h.push(("Mcp-Session-Id", id.clone()));
    }
    if session.stateless {
        h.push(("Mcp-Method", method.to_string()));
        if let Some(n) = name {
            h.push(("Mcp-Name", encode_value(n)));
        }
    }
    h
}

/// The call's `Mcp-Param-*` headers (`param_headers::outgoing`) as this upstream takes them:
/// only a 2026-07-28 (stateless) upstream has them (SEP-2243).
pub fn param_headers<'p>(session: &Session, params: &'p [(String, String)]) -> &'p [(String, String)] {
    if session.stateless {
        params
    } else {
        &[]
    }
}

/// Reads an initialize result: the negotiated version must be one Flowgate speaks (else an
/// error naming it), and a session id must be echoable in a header.
pub fn parse_initialize(result: &Value, session_id: Option<String>, transport: Transport) -> Result<Session, String> {
    let Some(v) = result.get("protocolVersion").and_then(Value::as_str) else {
        return Err("the upstream's initialize result has no protocolVersion, so it is not an MCP server".into());
    };
    let Some(version) = Version::parse(v) else {
        return Err(format!(
            "the upstream chose MCP revision {:?}, which Flowgate does not speak (it speaks {})",
            quote(v),
            Version::all_strs().collect::<Vec<_>>().join(", ")
        ));
    };
    let session_id = if version.is_stateless() { None } else { session_id };
    if let Some(id) = &session_id {
        if id.is_empty() || !id.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
            return Err("the upstream's Mcp-Session-Id is not visible ASCII, so it cannot be sent back".into());
        }
    }
    let capabilities = Some(result.get("capabilities").filter(|c| c.is_object()).cloned().unwrap_or_else(|| json!({})));
    Ok(Session {
        transport,
        protocol_version: v.to_string(),
        session_id,
        stateless: version.is_stateless(),
        capabilities,
    })
}

/// An app pinned to one revision (`backend.protocol_version`) speaks that one or none.
pub fn check_pinned(session: &Session, pinned: Version) -> Result<(), String> {
    if session.version() == Some(pinned) {
        return Ok(());
    }
    Err(format!(
        "the upstream answered with MCP revision {}, but the app is pinned to {} (backend.protocol_version); \
         pin the revision the server speaks or leave the setting out to negotiate",
        quote(&session.protocol_version),
        pinned.as_str()
    ))
}

/// Whether a 400 answer to a stateless request is the "unsupported protocol version" error
/// (-32022) that lists `version` among the supported ones: then the same request is retried once.
pub fn retry_rejected_version(body: &str, version: Version) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else { return false };
    let e = &v["error"];
    e["code"] == -32022
        && e["data"]["supported"].as_array().is_some_and(|l| l.iter().any(|s| s.as_str() == Some(version.as_str())))
}

/// A stateless upstream (2026-07-28 `server/discover` answered with a stateless revision among
/// `supportedVersions`) needs no initialize: this is its session.
pub fn stateless_session(discover_result: &Value) -> Option<Session> {
    let version = discover_result
        .get("supportedVersions")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .filter_map(Version::parse)
        .filter(|v| v.is_stateless())
        .max()?;
    Some(Session {
        transport: Transport::StreamableHttp,
        protocol_version: version.as_str().to_string(),
        session_id: None,
        stateless: true,
        capabilities: Some(
            discover_result.get("capabilities").filter(|c| c.is_object()).cloned().unwrap_or_else(|| json!({})),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Version::*;

    fn session(version: &str) -> Session {
        let v = Version::parse(version).unwrap();
        Session {
            transport: Transport::StreamableHttp,
            protocol_version: version.into(),
            session_id: if v.is_stateless() { None } else { Some("sess-1".into()) },
            stateless: v.is_stateless(),
            capabilities: Some(json!({})),
        }
    }

    #[test]
    fn handshake_messages() {
        let declared = json!({"sampling": {}, "roots": {}});
        let r = initialize_offering(1, OFFERED_VERSION, &declared);
        assert_eq!(r["jsonrpc"], "2.0");
        assert_eq!(r["id"], 1);
        assert_eq!(r["method"], "initialize");
        assert_eq!(r["params"]["protocolVersion"], "2025-11-25");
        // What the calling client declared, nothing more.
        assert_eq!(r["params"]["capabilities"], declared);
        assert_eq!(initialize_offering(1, OFFERED_VERSION, &json!({}))["params"]["capabilities"], json!({}));
        assert_eq!(r["params"]["clientInfo"]["name"], "flowgate");
        assert_eq!(r["params"]["clientInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(initialized_notification(), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let d = discover_request(2);
        assert_eq!(d["method"], "server/discover");
        assert_eq!(d["params"]["_meta"][meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(d["params"]["_meta"][meta::CLIENT_INFO]["name"], "flowgate");
        assert_eq!(d["params"]["_meta"][meta::CLIENT_CAPABILITIES], json!({}));
    }

    #[test]
    fn list_and_call_requests_per_session() {
        let old = session("2025-06-18");
        let sampling = json!({"sampling": {}});
        // An upstream with a session learnt the capabilities at initialize.
        let l = tools_list_request(3, None, &old, &sampling);
        assert_eq!(l, json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}));
        let l = tools_list_request(4, Some("page2"), &old, &json!({}));
        assert_eq!(l["params"], json!({"cursor": "page2"}));
        let c = tools_call_request(5, "search", &json!({"q": "x"}), Some(&json!("tok")), &Map::new(), &old);
        assert_eq!(c["params"], json!({"name": "search", "arguments": {"q": "x"}, "_meta": {"progressToken": "tok"}}));
        let c = tools_call_request(6, "search", &Value::Null, None, &Map::new(), &old);
        assert_eq!(c["params"], json!({"name": "search", "arguments": {}}));

        let new = session("2026-07-28");
        let l = tools_list_request(7, Some("c"), &new, &sampling);
        assert_eq!(l["params"]["cursor"], "c");
        assert_eq!(l["params"]["_meta"][meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(l["params"]["_meta"][meta::CLIENT_CAPABILITIES], sampling);
        let l = tools_list_request(7, None, &new, &json!({}));
        assert_eq!(l["params"]["_meta"][meta::CLIENT_CAPABILITIES], json!({}));
        // Any other list likewise; a client's own declaration is not replaced.
        let r = session_request(8, "prompts/list", declaring(Map::new(), &sampling), &new);
        assert_eq!(r["params"]["_meta"][meta::CLIENT_CAPABILITIES], sampling);
        assert!(session_request(8, "prompts/list", declaring(Map::new(), &sampling), &old)["params"]
            .get("_meta")
            .is_none());
        let own = json!({"_meta": {meta::CLIENT_CAPABILITIES: {"roots": {}}}});
        let kept = declaring(own.as_object().unwrap().clone(), &sampling);
        assert_eq!(kept["_meta"][meta::CLIENT_CAPABILITIES], json!({"roots": {}}));
        let c = tools_call_request(8, "search", &json!({}), Some(&json!(9)), &Map::new(), &new);
        assert_eq!(c["params"]["_meta"]["progressToken"], 9);
        assert_eq!(c["params"]["_meta"][meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(c["params"]["_meta"][meta::CLIENT_INFO]["name"], "flowgate");
        assert_eq!(c["params"]["_meta"][meta::CLIENT_CAPABILITIES], json!({}));
        // A client's round trip: its input and capabilities reach a stateless upstream; an
        // upstream with a session is not told the capabilities again.
        let input = json!({"inputResponses": {"a": {}}, "requestState": "s", "_meta": {meta::CLIENT_CAPABILITIES: {"roots": {}}}});
        let input = input.as_object().unwrap();
        let c = tools_call_request(9, "search", &json!({}), Some(&json!(1)), input, &new);
        assert_eq!((&c["params"]["inputResponses"], &c["params"]["requestState"]), (&json!({"a": {}}), &json!("s")));
        assert_eq!(c["params"]["_meta"][meta::CLIENT_CAPABILITIES], json!({"roots": {}}));
        assert_eq!(c["params"]["_meta"]["progressToken"], 1);
        let c = tools_call_request(10, "search", &json!({}), None, input, &old);
        assert!(c["params"].get("_meta").is_none());
    }

    #[test]
    fn headers_per_session() {
        let old = session("2025-11-25");
        assert_eq!(
            request_headers(&old, "tools/call", Some("search")),
            vec![("MCP-Protocol-Version", "2025-11-25".to_string()), ("Mcp-Session-Id", "sess-1".to_string())]
        );
        let none = Session { session_id: None, ..old };
        assert_eq!(request_headers(&none, "tools/list", None), vec![("MCP-Protocol-Version", "2025-11-25".into())]);
        let new = session("2026-07-28");
        assert_eq!(
            request_headers(&new, "tools/call", Some("search")),
            vec![
                ("MCP-Protocol-Version", "2026-07-28".to_string()),
                ("Mcp-Method", "tools/call".to_string()),
                ("Mcp-Name", "search".to_string())
            ]
        );
        assert_eq!(request_headers(&new, "tools/list", None).len(), 2);
        let h = request_headers(&new, "tools/call", Some("Hello, 世界"));
        assert_eq!(h[2].1, "=?base64?SGVsbG8sIOS4lueVjA==?=");
    }

    #[test]
    fn param_headers_only_for_a_stateless_upstream() {
        let params = vec![("Mcp-Param-Region".to_string(), "us-west1".to_string())];
        assert_eq!(param_headers(&session("2026-07-28"), &params), &params[..]);
        assert!(param_headers(&session("2025-11-25"), &params).is_empty());
    }

    #[test]
    fn initialize_results() {
        let s = parse_initialize(
            &json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
            Some("abc".into()),
            Transport::StreamableHttp,
        )
        .unwrap();
        assert_eq!(
            s,
            Session {
                transport: Transport::StreamableHttp,
                protocol_version: "2025-06-18".into(),
                session_id: Some("abc".into()),
                stateless: false,
                capabilities: Some(json!({}))
            }
        );
        assert_eq!(s.version(), Some(V2025_06_18));
        let s = parse_initialize(&json!({"protocolVersion": "2024-11-05"}), None, Transport::Sse).unwrap();
        assert_eq!((s.transport, s.session_id), (Transport::Sse, None));
        let err = parse_initialize(&json!({"protocolVersion": "2030-01-01"}), None, Transport::Sse).unwrap_err();
        assert!(err.contains("2030-01-01") && err.contains("2025-11-25"), "{err}");
        assert!(parse_initialize(&json!({}), None, Transport::Sse).unwrap_err().contains("protocolVersion"));
        let err = parse_initialize(&json!({"protocolVersion": "2025-06-18"}), Some("a b".into()), Transport::Sse);
        assert!(err.unwrap_err().contains("Mcp-Session-Id"));
        // A server that picks the stateless revision gets no session id echoed.
        let s =
            parse_initialize(&json!({"protocolVersion": "2026-07-28"}), Some("x".into()), Transport::StreamableHttp)
                .unwrap();
        assert!(s.stateless && s.session_id.is_none());
    }

    #[test]
    fn session_serializes_transport_by_name() {
        let s = session("2025-11-25");
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["transport"], "streamable-http");
        assert_eq!(serde_json::from_value::<Session>(v).unwrap(), s);
        let sse = Session { transport: Transport::Sse, ..s };
        assert_eq!(serde_json::to_value(&sse).unwrap()["transport"], "sse");
        assert_eq!(Transport::Sse.as_str(), "sse");
        assert_eq!(Transport::StreamableHttp.as_str(), "streamable-http");
    }

    #[test]
    fn pinned_revisions() {
        assert_eq!(initialize_offering(1, V2025_06_18, &json!({}))["params"]["protocolVersion"], "2025-06-18");
        assert!(check_pinned(&session("2025-06-18"), V2025_06_18).is_ok());
        let err = check_pinned(&session("2025-11-25"), V2025_06_18).unwrap_err();
        assert!(err.contains("2025-11-25") && err.contains("pinned to 2025-06-18"), "{err}");
        let rejected = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"]}}}"#;
        assert!(retry_rejected_version(rejected, V2026_07_28));
        assert!(!retry_rejected_version(rejected, V2025_11_25));
        assert!(!retry_rejected_version(r#"{"error":{"code":-32600}}"#, V2026_07_28));
        assert!(!retry_rejected_version("not json", V2026_07_28));
    }

    #[test]
    fn discover_gives_a_stateless_session() {
        let s =
            stateless_session(&json!({"supportedVersions": ["2025-11-25", "2026-07-28"], "capabilities": {}})).unwrap();
        assert_eq!(s, session("2026-07-28"));
        assert!(stateless_session(&json!({"supportedVersions": ["2025-11-25"]})).is_none());
        assert!(stateless_session(&json!({})).is_none());
    }
}
