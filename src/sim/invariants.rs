//! What must hold after every run, whatever the seed and the faults: no secret leaks, no
//! request to a refused address, every client response well-formed, no credential sent to an
//! origin it is not bound to, and (with the test's own check) every accepted task ended.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::rc::Rc;

use serde_json::Value;

use super::network::OutboundRecord;
use super::{ClientExchange, Sim};

/// A test's own check of a finished run: the violations it found.
pub type Check = Rc<dyn Fn(&Sim) -> Vec<String>>;

/// What the test knows and the simulator cannot guess.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Text that must never appear in a log line or in a client-visible header or body
    /// (server codes, API keys, tokens).
    pub secrets: Vec<String>,
    /// (credential, the one origin it may be sent to).
    pub credentials: Vec<(String, String)>,
    /// Private or loopback origins the test's backends live on (allowed destinations).
    pub allowed_origins: Vec<String>,
    /// Path prefixes whose responses may show a secret (the console answer that hands a new
    /// server code out once).
    pub exempt_paths: Vec<String>,
    /// Path prefix of the JSON-RPC endpoint; `None`: "/mcp/".
    pub mcp_path: Option<String>,
    /// The test's own checks (a task ended in a terminal state, say): violations found.
    pub checks: Vec<Check>,
}

pub fn check(sim: &Sim, spec: &Secrets) -> Vec<String> {
    let mut v = Vec::new();
    for line in sim.logs() {
        for s in spec.secrets.iter().filter(|s| !s.is_empty()) {
            if line.contains(s.as_str()) {
                v.push(format!("a secret in a log line: {line}"));
            }
        }
    }
    let mcp = spec.mcp_path.clone().unwrap_or_else(|| "/mcp/".to_string());
    for r in sim.responses() {
        check_response(&r, spec, &mcp, &mut v);
    }
    for o in sim.outbound() {
        check_outbound(&o, spec, &mut v);
    }
    for c in &spec.checks {
        v.extend(c(sim));
    }
    v
}

fn check_response(r: &ClientExchange, spec: &Secrets, mcp: &str, v: &mut Vec<String>) {
    let what = format!("response {} to {} {}", r.status, r.method, path_of(&r.url));
    let text = String::from_utf8_lossy(&r.body);
    let path = path_of(&r.url);
    let exempt = spec.exempt_paths.iter().any(|p| path.starts_with(p.as_str()));
    for s in spec.secrets.iter().filter(|s| !s.is_empty() && !exempt) {
        if text.contains(s.as_str()) {
            v.push(format!("a secret in the body of the {what}"));
        }
        if r.headers.iter().any(|(n, val)| n.contains(s.as_str()) || val.contains(s.as_str())) {
            v.push(format!("a secret in a header of the {what}"));
        }
    }
    if let Some(e) = &r.body_error {
        v.push(format!("the body of the {what} failed part way: {e}"));
    }
    if r.status >= 400 {
        if r.method != "HEAD" && serde_json::from_slice::<Value>(&r.body).is_err() {
            v.push(format!("the {what} is an error without a JSON body: {text:.200}"));
        }
        return;
    }
    if !path_of(&r.url).starts_with(mcp) || r.method == "HEAD" || !(200..300).contains(&r.status) {
        return;
    }
    if r.body.is_empty() {
        if r.status != 202 && r.status != 204 {
            v.push(format!("the {what} has an empty body"));
        }
        return;
    }
    let sse = r.headers.get("content-type").is_some_and(|c| c.starts_with("text/event-stream"));
    if sse {
        for data in sse_data(&text) {
            if !serde_json::from_str::<Value>(&data).is_ok_and(|d| is_json_rpc(&d)) {
                v.push(format!("an event of the {what} is not JSON-RPC: {data:.200}"));
            }
        }
    } else if !serde_json::from_slice::<Value>(&r.body).is_ok_and(|d| is_json_rpc(&d)) {
        v.push(format!("the {what} is not JSON-RPC: {text:.200}"));
    }
}

fn check_outbound(o: &OutboundRecord, spec: &Secrets, v: &mut Vec<String>) {
    let allowed = spec.allowed_origins.iter().any(|a| a == &o.origin);
    if !allowed && refused_destination(&o.url) {
        v.push(format!("a request to a refused address: {} {}", o.method, o.origin));
    }
    for (cred, origin) in &spec.credentials {
        if cred.is_empty() || origin == &o.origin {
            continue;
        }
        let sent = o.url.contains(cred.as_str())
            || o.body.contains(cred.as_str())
            || o.headers.iter().any(|(_, val)| val.contains(cred.as_str()));
        if sent {
            v.push(format!("a credential bound to {origin} sent to {}", o.origin));
        }
    }
}

fn path_of(url: &str) -> String {
    url::Url::parse(url).map(|u| u.path().to_string()).unwrap_or_else(|_| url.to_string())
}

/// One JSON-RPC 2.0 message, or a batch of them.
pub fn is_json_rpc(v: &Value) -> bool {
    let one = |m: &Value| {
        let Some(o) = m.as_object() else { return false };
        if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return false;
        }
        let answer = o.contains_key("id") && (o.contains_key("result") != o.contains_key("error"));
        let call = o.get("method").is_some_and(Value::is_string);
        answer || call
    };
    match v {
        Value::Array(items) => !items.is_empty() && items.iter().all(one),
        m => one(m),
    }
}

/// The data of each event of an event stream (its `data:` lines joined).
pub fn sse_data(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for event in text.replace("\r\n", "\n").split("\n\n") {
        let data: Vec<&str> =
            event.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| d.strip_prefix(' ').unwrap_or(d)).collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}

/// Loopback, private, link-local, metadata and unspecified destinations.
pub fn refused_destination(url: &str) -> bool {
    let Ok(u) = url::Url::parse(url) else { return false };
    match u.host() {
        Some(url::Host::Ipv4(a)) => refused_v4(a),
        Some(url::Host::Ipv6(a)) => refused_v6(a),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost") || d == "metadata.google.internal" || d == "metadata"
        }
        None => false,
    }
}

fn refused_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || (o[0] == 100 && (64..128).contains(&o[1]))
        || o[0] == 0
}

fn refused_v6(a: Ipv6Addr) -> bool {
    if let Some(v4) = a.to_ipv4_mapped() {
        return refused_v4(v4);
    }
    let first = a.segments()[0];
    a.is_loopback() || a.is_unspecified() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
}
