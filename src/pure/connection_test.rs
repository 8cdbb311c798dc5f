//! "Test connection" for an app: what each probe's answer means, in words a person can act on
//! (what is wrong, and how to fix it). The shell sends the probes (`shell/console/connection_test.rs`):
//! a Dify app's `GET /info` and `GET /parameters`, an HTTP tool's endpoint (a `GET`, which runs
//! nothing), an upstream MCP server's `initialize` and `tools/list`.

use crate::json;
use serde::Serialize;
use serde_json::Value;

use super::backend::dify::mode::DifyMode;
use super::named::Named;
use super::quote::quote_input;

/// What a probe came back with.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// An HTTP answer: its status and (capped) body text.
    Answered { status: u16, body: String },
    /// No HTTP answer: refused, DNS, TLS, reset, or refused by Flowgate's outbound guard.
    Unreachable(String),
    /// No answer within the probe's timeout (seconds).
    TimedOut(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warning,
    Error,
}

/// One step of a test: what was tried, how it went, and (unless it went well) what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub step: String,
    pub level: Level,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(step: &str, detail: impl Into<String>) -> Check {
        Check { step: step.into(), level: Level::Ok, detail: detail.into(), fix: None }
    }

    pub fn error(step: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { step: step.into(), level: Level::Error, detail: detail.into(), fix: Some(fix.into()) }
    }

    pub fn warning(step: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { step: step.into(), level: Level::Warning, detail: detail.into(), fix: Some(fix.into()) }
    }
}

/// The console's answer: `ok` when no step failed (warnings allowed), the steps, and the first
/// failure's words as `problem` and `fix`.
pub fn report(checks: &[Check]) -> Value {
    let failed = checks.iter().find(|c| c.level == Level::Error);
    let mut out = json!({ "ok": failed.is_none(), "checks": checks });
    if let Some(f) = failed {
        out["problem"] = json!(f.detail);
        out["fix"] = json!(f.fix);
    }
    out
}

/// A credential that does not resolve (an unset or disallowed `$NAME`, a sealing problem):
/// `why` completes "the credential …".
pub fn credential_problem(field: &str, why: &str) -> Check {
    Check::error(
        "credentials",
        format!("{field} {why}"),
        "set the secret it names (`.dev.vars` when running locally, `wrangler secret put NAME` when deployed), \
         or save the app with the credential itself",
    )
}

/// What every probe's failure to get an answer means.
fn unreachable(step: &str, what: &str, host: &str, probe: &Probe) -> Option<Check> {
    match probe {
        Probe::Unreachable(e) => Some(Check::error(
            step,
            format!("could not connect to {what} at {host}: {}", quote_input(e)),
            format!(
                "check the host and port ({host}) and that the service is running there; Flowgate runs on \
                 Cloudflare's network, which reaches only public addresses (not localhost or a private network, \
                 unless ALLOW_PRIVATE_BACKENDS allows it)"
            ),
        )),
        Probe::TimedOut(s) => Some(Check::error(
            step,
            format!("{what} at {host} did not answer within {s} s"),
            "check that the address is the service's and that no firewall drops the connection; if the service \
             is only slow, raise the app's first_byte_timeout_seconds",
        )),
        Probe::Answered { .. } => None,
    }
}

/// Dify's `message` in an error answer, quoted, or nothing.
fn said(body: &str) -> String {
    let msg = serde_json::from_str::<Value>(body).ok().and_then(|v| v["message"].as_str().map(str::to_string));
    msg.map(|m| format!(": {}", quote_input(&m))).unwrap_or_default()
}

/// Whether a Dify base URL's path ends in `/v1` (the Service API's prefix).
fn has_v1(base_url: &str) -> bool {
    crate::pure::path::of_url(base_url).trim_end_matches('/').ends_with("/v1")
}

fn missing_v1(step: &str, base_url: &str, seen: &str) -> Check {
    let path = crate::pure::path::of_url(base_url).trim_end_matches('/').to_string();
    Check::error(
        step,
        format!("{seen}: base_url does not end in /v1, so this is not Dify's Service API"),
        format!("add /v1 to base_url (its path {} becomes {path}/v1), e.g. https://api.dify.ai/v1", quote_input(&path)),
    )
}

/// `GET {base_url}/info`: reachable, the key accepted, and the app's mode the one Flowgate calls.
pub fn dify_info(base_url: &str, probe: &Probe, configured: DifyMode) -> Check {
    let configured_mode = configured.name();
    const STEP: &str = "GET /info";
    let host = crate::pure::url::host_for_display(base_url);
    if let Some(c) = unreachable(STEP, "the Dify API", &host, probe) {
        return c;
    }
    let Probe::Answered { status, body } = probe else { unreachable!("handled above") };
    let json = serde_json::from_str::<Value>(body).ok().filter(Value::is_object);
    match (*status, json) {
        (401 | 403, _) => Check::error(
            STEP,
            format!("Dify refused the API key (HTTP {status}{})", said(body)),
            "use this app's own Service API key (app-…), from the app's API Access page in Dify: a key of \
             another app, a deleted key or a workspace key is refused",
        ),
        (404, _) if !has_v1(base_url) => missing_v1(STEP, base_url, "Dify answered 404"),
        (200..=299, None) if !has_v1(base_url) => missing_v1(STEP, base_url, "the answer is not JSON"),
        (404, _) => Check::error(
            STEP,
            format!("{host} has no {STEP} (HTTP 404)"),
            "base_url is the Service API address on the app's API Access page in Dify, ending in /v1 \
             (e.g. https://api.dify.ai/v1)",
        ),
        (200..=299, None) => Check::error(
            STEP,
            format!("{host} answered with something other than a JSON object"),
            "base_url must be Dify's Service API (…/v1), not the Dify web console",
        ),
        (200..=299, Some(info)) => {
            let name = info["name"].as_str().unwrap_or("(unnamed)").to_string();
            let said_mode = info["mode"].as_str();
            match said_mode.map(|m| (m, DifyMode::from_name(m))) {
                Some((mode, Some(m))) if m == configured => {
                    Check::ok(STEP, format!("Dify app {} answers; its mode is {mode}", quote_input(&name)))
                }
                Some((mode, None)) => Check::warning(
                    STEP,
                    format!("Dify says app {} is a {} app, a mode Flowgate does not know", quote_input(&name), quote_input(mode)),
                    "Flowgate calls workflow, chat, advanced-chat, agent-chat and completion apps; check the app in Dify",
                ),
                Some((mode, Some(_))) => Check::error(
                    STEP,
                    format!(
                        "Dify says app {} is a {} app, but Flowgate calls it as {configured_mode}",
                        quote_input(&name),
                        quote_input(mode)
                    ),
                    format!("set the app's mode to {} (edit the app) so Flowgate calls the right endpoint", quote_input(mode)),
                ),
                None => Check::warning(
                    STEP,
                    format!("Dify app {} answers, without saying its mode", quote_input(&name)),
                    format!("check by hand that the app is a {configured_mode} app in Dify"),
                ),
            }
        }
        (status, _) => Check::error(
            STEP,
            format!("Dify answered HTTP {status}{}", said(body)),
            "see Dify's logs for the cause; try again once Dify answers",
        ),
    }
}

/// `GET {base_url}/parameters`: the input form Dify has, against the one Flowgate stored
/// (`stored`: its variables).
pub fn dify_parameters(base_url: &str, probe: &Probe, stored: &[String]) -> Check {
    const STEP: &str = "GET /parameters";
    let host = crate::pure::url::host_for_display(base_url);
    if let Some(c) = unreachable(STEP, "the Dify API", &host, probe) {
        return c;
    }
    let Probe::Answered { status, body } = probe else { unreachable!("handled above") };
    let json = serde_json::from_str::<Value>(body).ok().filter(Value::is_object);
    let Some(params) = json.filter(|_| (200..300).contains(status)) else {
        return Check::error(
            STEP,
            format!("Dify answered HTTP {status}{}", said(body)),
            "see the GET /info step; if it passed, check Dify's logs",
        );
    };
    let dify: Vec<(String, bool)> = params["user_input_form"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_object()?.values().next())
                .filter_map(|f| Some((f["variable"].as_str()?.to_string(), f["required"].as_bool().unwrap_or(false))))
                .collect()
        })
        .unwrap_or_default();
    let missing: Vec<&str> = dify.iter().filter(|(v, _)| !stored.contains(v)).map(|(v, _)| v.as_str()).collect();
    let extra: Vec<&str> = stored.iter().filter(|s| !dify.iter().any(|(v, _)| v == *s)).map(String::as_str).collect();
    let required_missing = dify.iter().any(|(v, req)| *req && missing.contains(&v.as_str()));
    if missing.is_empty() && extra.is_empty() {
        let n = dify.len();
        return Check::ok(
            STEP,
            format!("the input form matches Dify's ({n} variable{})", if n == 1 { "" } else { "s" }),
        );
    }
    let mut detail = Vec::new();
    if !missing.is_empty() {
        detail.push(format!("Dify's form has {} that Flowgate's has not", missing.join(", ")));
    }
    if !extra.is_empty() {
        detail.push(format!("Flowgate's form has {} that Dify's has not", extra.join(", ")));
    }
    let fix = "edit the app's input form to match Dify's (or import the app again)";
    if required_missing {
        Check::error(STEP, format!("{}: calls will fail on a required input", detail.join("; ")), fix)
    } else {
        Check::warning(STEP, detail.join("; "), fix)
    }
}

/// A `GET` of an HTTP tool's endpoint: it exists and answers (tools are called with `POST`; the
/// probe runs nothing).
pub fn http_tool_endpoint(endpoint: &str, probe: &Probe) -> Check {
    const STEP: &str = "GET api_endpoint";
    let host = crate::pure::url::host_for_display(endpoint);
    if let Some(c) = unreachable(STEP, "the HTTP tool", &host, probe) {
        return c;
    }
    let Probe::Answered { status, .. } = probe else { unreachable!("handled above") };
    match *status {
        404 | 410 => Check::error(
            STEP,
            format!("the HTTP tool's host {host} has no such endpoint (HTTP {status})"),
            "check the path of backend.api_endpoint",
        ),
        401 | 403 => Check::error(
            STEP,
            format!("the HTTP tool refused the key (HTTP {status})"),
            "check backend.api_key (or the secret its $NAME names)",
        ),
        500..=599 => Check::error(
            STEP,
            format!("the HTTP tool's server failed (HTTP {status})"),
            "see the tool's logs; try again once it answers",
        ),
        _ => Check::ok(
            STEP,
            format!(
                "the endpoint answers (HTTP {status} to a GET; calls are POSTs, and this probe ran nothing, so the key is checked at the first call)"
            ),
        ),
    }
}

/// An upstream MCP server's `initialize` and `tools/list`: `Ok` with the tool names, or the
/// client's error, whose words already end in what to do (`…; check backend.url …`).
pub fn mcp_initialize(result: &Result<Vec<String>, String>) -> Check {
    const STEP: &str = "initialize and tools/list";
    match result {
        Ok(names) if names.is_empty() => Check::warning(
            STEP,
            "the upstream MCP server answers and lists no tools",
            "check the server's configuration, or the app's tool filters",
        ),
        Ok(names) => {
            Check::ok(STEP, format!("the upstream MCP server answers with {} tools: {}", names.len(), names.join(", ")))
        }
        Err(e) => match e.split_once("; ") {
            Some((what, fix)) => Check::error(STEP, what, fix),
            None => Check::error(STEP, e.as_str(), "check backend.url and that the server is up"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, body: Value) -> Probe {
        Probe::Answered { status, body: body.to_string() }
    }

    const V1: &str = "https://dify.example/v1";

    #[test]
    fn dify_info_names_each_cause() {
        let ok = dify_info(V1, &answered(200, json!({"name": "Summ", "mode": "workflow"})), DifyMode::Workflow);
        assert_eq!(ok.level, Level::Ok, "{ok:?}");
        let key = dify_info(V1, &answered(401, json!({"message": "Access token is invalid"})), DifyMode::Workflow);
        assert_eq!(key.level, Level::Error);
        assert!(key.detail.contains("refused the API key") && key.detail.contains("Access token is invalid"));
        assert!(key.fix.unwrap().contains("API Access"));
        let no_v1 = dify_info("https://dify.example", &answered(404, json!({})), DifyMode::Workflow);
        assert!(no_v1.detail.contains("does not end in /v1"), "{no_v1:?}");
        assert!(no_v1.fix.unwrap().contains("add /v1"));
        // The web console answers HTML at that path: the same advice.
        let html = dify_info(
            "https://dify.example/app",
            &Probe::Answered { status: 200, body: "<html>".into() },
            DifyMode::Chat,
        );
        assert!(html.fix.as_deref().unwrap_or_default().contains("\"/app\" becomes /app/v1"), "{html:?}");
        let mode = dify_info(V1, &answered(200, json!({"name": "Bot", "mode": "chat"})), DifyMode::Workflow);
        assert_eq!(mode.level, Level::Error);
        assert!(mode.detail.contains("is a \"chat\" app") && mode.detail.contains("as workflow"), "{}", mode.detail);
        assert!(mode.fix.unwrap().contains("set the app's mode to \"chat\""));
        let silent = dify_info(V1, &answered(200, json!({"name": "Old"})), DifyMode::Workflow);
        assert_eq!(silent.level, Level::Warning);
        let unknown = dify_info(V1, &answered(200, json!({"name": "New", "mode": "rag-pipeline"})), DifyMode::Workflow);
        assert_eq!(unknown.level, Level::Warning);
        let refused = dify_info(V1, &Probe::Unreachable("connection refused".into()), DifyMode::Workflow);
        assert!(refused.detail.contains("could not connect to the Dify API at dify.example"), "{refused:?}");
        assert!(refused.fix.unwrap().contains("not localhost"));
        let slow = dify_info(V1, &Probe::TimedOut(10), DifyMode::Workflow);
        assert!(slow.detail.contains("within 10 s"));
        let down = dify_info(V1, &answered(502, json!({})), DifyMode::Workflow);
        assert!(down.detail.contains("HTTP 502"));
    }

    #[test]
    fn dify_parameters_compares_the_forms() {
        let form = json!({"user_input_form": [{"text-input": {"variable": "text", "required": true}}, {"select": {"variable": "lang"}}]});
        let stored = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let same = dify_parameters(V1, &answered(200, form.clone()), &stored(&["text", "lang"]));
        assert_eq!((same.level, same.detail.as_str()), (Level::Ok, "the input form matches Dify's (2 variables)"));
        let one = json!({"user_input_form": [{"text-input": {"variable": "text"}}]});
        assert!(dify_parameters(V1, &answered(200, one), &stored(&["text"])).detail.ends_with("(1 variable)"));
        let optional = dify_parameters(V1, &answered(200, form.clone()), &stored(&["text", "extra"]));
        assert_eq!(optional.level, Level::Warning);
        assert!(
            optional.detail.contains("Dify's form has lang") && optional.detail.contains("Flowgate's form has extra")
        );
        let required = dify_parameters(V1, &answered(200, form), &stored(&["lang"]));
        assert_eq!(required.level, Level::Error);
        assert!(required.detail.contains("required input"));
        assert_eq!(dify_parameters(V1, &answered(500, json!({})), &[]).level, Level::Error);
    }

    #[test]
    fn http_tools_and_upstreams() {
        let e = "https://tool.example/run";
        assert_eq!(http_tool_endpoint(e, &answered(405, json!({}))).level, Level::Ok);
        assert!(http_tool_endpoint(e, &answered(404, json!({}))).fix.unwrap().contains("api_endpoint"));
        assert!(http_tool_endpoint(e, &answered(401, json!({}))).detail.contains("refused the key"));
        assert_eq!(http_tool_endpoint(e, &Probe::TimedOut(5)).level, Level::Error);
        let up = mcp_initialize(&Ok(vec!["a".into(), "b".into()]));
        assert!(up.detail.contains("2 tools: a, b"));
        let down =
            mcp_initialize(&Err("could not reach the MCP server of app U: \"refused\"; check backend.url".into()));
        assert_eq!(
            (down.detail.as_str(), down.fix.as_deref()),
            ("could not reach the MCP server of app U: \"refused\"", Some("check backend.url"))
        );
        assert_eq!(mcp_initialize(&Ok(vec![])).level, Level::Warning);
    }

    #[test]
    fn the_report_says_the_first_failure() {
        let r = report(&[Check::ok("a", "fine"), Check::error("b", "broken", "mend it"), Check::error("c", "x", "y")]);
        assert_eq!(r["ok"], false);
        assert_eq!((r["problem"].as_str(), r["fix"].as_str()), (Some("broken"), Some("mend it")));
        assert_eq!(r["checks"][1]["level"], "error");
        let fine = report(&[Check::ok("a", "fine"), Check::warning("b", "odd", "look")]);
        assert_eq!(fine["ok"], true);
        assert!(fine.get("problem").is_none());
        assert!(credential_problem("backend.api_key", "refers to $X, which is not set")
            .fix
            .unwrap()
            .contains(".dev.vars"));
    }
}
