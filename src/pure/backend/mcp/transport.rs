//! The two HTTP transports an upstream MCP server may speak: which one to try first, when to fall
//! back from Streamable HTTP to the legacy HTTP+SSE one, and what to tell a person when the first
//! `initialize` fails (WWW-Authenticate details included).

use serde::Serialize;

use super::error::quote;

/// Streamable HTTP requires clients to accept both answer forms on every POST.
pub const ACCEPT: &str = "application/json, text/event-stream";

/// The two HTTP transports an upstream may speak; stored in the session so later requests go
/// the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// 2025-03-26 and later: one endpoint, POST per message.
    StreamableHttp,
    /// 2024-11-05 HTTP+SSE: a GET event stream plus the POST endpoint it announces.
    Sse,
}

impl crate::pure::named::Named for Transport {
    const ALL: &'static [Self] = &[Transport::StreamableHttp, Transport::Sse];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Transport);

impl Transport {
    /// The spelling used in `backend.transport` and in stored sessions.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::StreamableHttp => "streamable-http",
            Transport::Sse => "sse",
        }
    }
}

/// `backend.transport`: a person may pin the transport when auto-detection guesses wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportChoice {
    #[default]
    Auto,
    StreamableHttp,
    Sse,
}

impl crate::pure::named::Named for TransportChoice {
    const ALL: &'static [Self] = &[TransportChoice::Auto, TransportChoice::StreamableHttp, TransportChoice::Sse];

    fn name(self) -> &'static str {
        match self {
            TransportChoice::Auto => "auto",
            TransportChoice::StreamableHttp => "streamable-http",
            TransportChoice::Sse => "sse",
        }
    }
}

impl TransportChoice {
    /// Absent means `auto`, so most apps need only a URL.
    pub fn parse(s: Option<&str>) -> Result<Self, String> {
        match s {
            None | Some("auto") => Ok(TransportChoice::Auto),
            Some("streamable-http") => Ok(TransportChoice::StreamableHttp),
            Some("sse") => Ok(TransportChoice::Sse),
            Some(other) => Err(format!("backend.transport must be auto, streamable-http or sse, not {other:?}")),
        }
    }
}

/// The transport to try first. In auto mode a URL whose path ends in `/sse` is the legacy
/// transport's conventional endpoint, so it goes straight to SSE; every other URL tries
/// Streamable HTTP first (the current transport, and its probe fails fast on old servers).
pub fn first_transport(choice: TransportChoice, url: &str) -> Transport {
    match choice {
        TransportChoice::StreamableHttp => Transport::StreamableHttp,
        TransportChoice::Sse => Transport::Sse,
        TransportChoice::Auto if url_path(url).trim_end_matches('/').ends_with("/sse") => Transport::Sse,
        TransportChoice::Auto => Transport::StreamableHttp,
    }
}

/// The path of a URL (no query or fragment); `""` when it has none.
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    rest.find('/').map_or("", |i| &rest[i..])
}

/// Why the first `initialize` attempt failed, as the shell saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum InitFailure {
    /// The server answered with a non-success status.
    Http { status: u16, www_authenticate: Option<String>, body: String },
    /// No HTTP answer: connection refused, DNS, TLS, reset, or an answer that is not MCP.
    Transport(String),
    /// No answer in time (e.g. an SSE-only server holding the POST open).
    Timeout,
}

/// The handshake's answer did not make a session, in these words.
impl From<String> for InitFailure {
    fn from(why: String) -> InitFailure {
        InitFailure::Transport(why)
    }
}

/// Only in auto mode after a Streamable HTTP attempt: fall back to SSE on the signals of an old
/// server (HTTP 400, 404, 405 to the initialize POST, per the spec's back-compat probe) or a
/// transport-level failure or timeout. Never on 401/403 (the server exists and wants
/// credentials; trying another transport would only hide that) or any other status.
pub fn falls_back_to_sse(choice: TransportChoice, tried: Transport, failure: &InitFailure) -> bool {
    if choice != TransportChoice::Auto || tried != Transport::StreamableHttp {
        return false;
    }
    match failure {
        InitFailure::Http { status, .. } => matches!(status, 400 | 404 | 405),
        InitFailure::Transport(_) | InitFailure::Timeout => true,
    }
}

/// The error text for a failure that does not fall back. 401/403 include the WWW-Authenticate
/// details (resource_metadata, scope, error) so a person can act on them.
pub fn init_failure_message(app: &str, failure: &InitFailure) -> String {
    match failure {
        InitFailure::Http { status: status @ (401 | 403), www_authenticate, .. } => {
            let details = www_authenticate.as_deref().map(auth_details).unwrap_or_default();
            let details = if details.is_empty() {
                " (it sent no WWW-Authenticate details)".to_string()
            } else {
                format!(" ({details})")
            };
            if *status == 401 {
                format!(
                    "the MCP server of app {app} requires authorization (HTTP 401){details}; give the app \
                     credentials it accepts: backend.oauth (client credentials or a refresh token) or a \
                     header in backend.headers"
                )
            } else {
                format!(
                    "the MCP server of app {app} refused access (HTTP 403){details}; the credentials were \
                     accepted but lack permission: grant them the scope the server asks for"
                )
            }
        }
        InitFailure::Http { status, body, .. } => {
            let hint = match status {
                400 | 405 => "; if it is a legacy HTTP+SSE server, set backend.transport to \"sse\" (or \"auto\")",
                404 => "; check backend.url: there is no MCP endpoint there",
                500..=599 => "; the server failed, try again later or ask its operator",
                _ => "",
            };
            let body = quote(body);
            let said = if body.is_empty() { String::new() } else { format!(": {body}") };
            format!("the MCP server of app {app} answered initialize with HTTP {status}{said}{hint}")
        }
        InitFailure::Transport(e) => {
            format!(
                "could not reach the MCP server of app {app}: {}; check backend.url and that the server is up",
                quote(e)
            )
        }
        InitFailure::Timeout => format!(
            "the MCP server of app {app} did not answer initialize in time; check backend.url and that the \
             server is up (a legacy HTTP+SSE server needs backend.transport \"sse\" or \"auto\")"
        ),
    }
}

/// The auth-params of a WWW-Authenticate value that tell a person what to do, in words.
fn auth_details(header: &str) -> String {
    let params = auth_params(header);
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut parts: Vec<String> = Vec::new();
    if let Some(e) = get("error") {
        match get("error_description") {
            Some(d) => parts.push(format!("error {e}: {d}")),
            None => parts.push(format!("error {e}")),
        }
    }
    if let Some(s) = get("scope") {
        parts.push(format!("scope \"{s}\""));
    }
    if let Some(m) = get("resource_metadata") {
        parts.push(format!("resource metadata at {m}"));
    }
    quote(&parts.join("; "))
}

/// `name=value` pairs (names lowercased, quoted values unescaped) of every challenge in a
/// WWW-Authenticate value; scheme names and token68 values are skipped.
pub(super) fn auth_params(header: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = header.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != ',' && *c != '=') {
            name.push(c);
        }
        if name.is_empty() && chars.peek().is_none() {
            return out;
        }
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            // A scheme name (or a stray token): the next token starts the params.
            if name.is_empty() {
                chars.next();
            }
            continue;
        }
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if_eq(&'"').is_some();
        if quoted {
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',' && !c.is_whitespace()) {
                value.push(c);
            }
        }
        // A token68 (`abc==`) reads as `abc` = `=`: padding, not a param.
        if !name.is_empty() && (quoted || (!value.is_empty() && !value.bytes().all(|b| b == b'='))) {
            out.push((name.to_ascii_lowercase(), value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::pairs;
    use super::*;

    #[test]
    fn transport_choice_parses() {
        assert_eq!(TransportChoice::parse(None), Ok(TransportChoice::Auto));
        assert_eq!(TransportChoice::parse(Some("auto")), Ok(TransportChoice::Auto));
        assert_eq!(TransportChoice::parse(Some("streamable-http")), Ok(TransportChoice::StreamableHttp));
        assert_eq!(TransportChoice::parse(Some("sse")), Ok(TransportChoice::Sse));
        assert!(TransportChoice::parse(Some("http")).unwrap_err().contains("\"http\""));
    }

    #[test]
    fn first_transport_by_choice_and_url() {
        use TransportChoice as C;
        let cases = [
            (C::Auto, "https://x.example/mcp", Transport::StreamableHttp),
            (C::Auto, "https://x.example/sse", Transport::Sse),
            (C::Auto, "https://x.example/v1/sse/", Transport::Sse),
            (C::Auto, "https://x.example/sse?key=1", Transport::Sse),
            (C::Auto, "https://x.example/", Transport::StreamableHttp),
            (C::Auto, "https://x.example", Transport::StreamableHttp),
            (C::Auto, "https://x.example/events-sse", Transport::StreamableHttp),
            (C::Auto, "https://x.example/mcp?transport=/sse", Transport::StreamableHttp),
            (C::StreamableHttp, "https://x.example/sse", Transport::StreamableHttp),
            (C::Sse, "https://x.example/mcp", Transport::Sse),
        ];
        for (choice, url, want) in cases {
            assert_eq!(first_transport(choice, url), want, "{choice:?} {url}");
        }
    }

    #[test]
    fn fallback_table() {
        use TransportChoice as C;
        let http = |status: u16| InitFailure::Http {
            status,
            www_authenticate: (status == 401).then(|| "Bearer resource_metadata=\"https://x/prm\"".to_string()),
            body: String::new(),
        };
        let failures = [
            ("200", http(200), false),
            ("400", http(400), true),
            ("401", http(401), false),
            ("403", http(403), false),
            ("404", http(404), true),
            ("405", http(405), true),
            ("500", http(500), false),
            ("transport", InitFailure::Transport("connection refused".into()), true),
            ("timeout", InitFailure::Timeout, true),
        ];
        for (label, failure, auto_falls_back) in &failures {
            for choice in [C::Auto, C::StreamableHttp, C::Sse] {
                for tried in [Transport::StreamableHttp, Transport::Sse] {
                    let want = *auto_falls_back && choice == C::Auto && tried == Transport::StreamableHttp;
                    assert_eq!(falls_back_to_sse(choice, tried, failure), want, "{label} {choice:?} {tried:?}");
                }
            }
        }
    }

    #[test]
    fn failure_messages_help_a_person_act() {
        let f = InitFailure::Http {
            status: 401,
            www_authenticate: Some(
                "Bearer realm=\"mcp\", error=\"invalid_token\", error_description=\"expired \\\"yesterday\\\"\", \
                 resource_metadata=\"https://auth.example/.well-known/oauth-protected-resource\", scope=\"repo read:org\""
                    .into(),
            ),
            body: "nope".into(),
        };
        let m = init_failure_message("github", &f);
        assert!(m.contains("github") && m.contains("401"), "{m}");
        assert!(m.contains("https://auth.example/.well-known/oauth-protected-resource"), "{m}");
        assert!(m.contains("scope \"repo read:org\""), "{m}");
        assert!(m.contains("invalid_token: expired \"yesterday\""), "{m}");
        assert!(m.contains("backend.oauth"), "{m}");

        let f =
            InitFailure::Http { status: 403, www_authenticate: Some("Bearer scope=admin".into()), body: String::new() };
        let m = init_failure_message("gh", &f);
        assert!(m.contains("403") && m.contains("scope \"admin\"") && m.contains("lack permission"), "{m}");
        let f = InitFailure::Http { status: 401, www_authenticate: None, body: String::new() };
        assert!(init_failure_message("gh", &f).contains("no WWW-Authenticate"));

        let f = InitFailure::Http { status: 405, www_authenticate: None, body: String::new() };
        assert!(init_failure_message("a", &f).contains("backend.transport"));
        let f = InitFailure::Http { status: 404, www_authenticate: None, body: "Not Found".into() };
        let m = init_failure_message("a", &f);
        assert!(m.contains("HTTP 404: Not Found") && m.contains("backend.url"), "{m}");
        let f = InitFailure::Http { status: 502, www_authenticate: None, body: "x".repeat(5000) + "\nline" };
        let m = init_failure_message("a", &f);
        assert!(m.len() < 1000 && !m.contains('\n'), "{m}");
        assert!(init_failure_message("a", &InitFailure::Transport("dns error".into())).contains("dns error"));
        assert!(init_failure_message("a", &InitFailure::Timeout).contains("in time"));
    }

    #[test]
    fn www_authenticate_params() {
        let p = auth_params("Basic realm=\"x\", Bearer error=invalid_token, scope=\"a b\",resource_metadata=\"u\"");
        assert_eq!(
            p,
            pairs(&[("realm", "x"), ("error", "invalid_token"), ("scope", "a b"), ("resource_metadata", "u")])
        );
        assert_eq!(auth_params("Negotiate abc=="), Vec::new());
        assert_eq!(auth_params("Bearer realm=\"\""), pairs(&[("realm", "")]));
        assert_eq!(auth_params(""), Vec::new());
        assert_eq!(auth_params("Bearer SCOPE=\"unterminated"), pairs(&[("scope", "unterminated")]));
    }
}
