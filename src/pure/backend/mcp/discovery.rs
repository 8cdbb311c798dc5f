//! OAuth discovery for an upstream's client credentials (`backend.oauth.issuer`): where the
//! protected-resource metadata (RFC 9728) and the authorization server metadata (RFC 8414,
//! OpenID Connect Discovery) are, what a `WWW-Authenticate` challenge asks for, and the choices
//! made from them (token endpoint, client authentication, scope, `resource`). The rule that
//! keeps the client secret safe is [`read_as_metadata`]'s: metadata is used only when its
//! `issuer` is exactly the one the admin configured, so the secret goes only to the token
//! endpoint of that authorization server, whatever the upstream's metadata says.

use crate::pure::web_url::Url;
use serde_json::Value;

use super::error::quote;
use super::transport::auth_params;
use crate::pure::url::check_backend_url;

/// What a `WWW-Authenticate: Bearer ...` challenge says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

pub fn parse_challenge(header: &str) -> Challenge {
    let params = auth_params(header);
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
    Challenge { resource_metadata: get("resource_metadata"), scope: get("scope"), error: get("error") }
}

/// What a refused request leads to, once per request (the retry limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// 401: the token is missing, expired or revoked: a new one, with the challenge's hints.
    Reauthorize,
    /// 403 `insufficient_scope`: a new token with the challenged scope added (step-up).
    StepUp,
}

pub fn reaction(status: u16, challenge: &Challenge) -> Option<Reaction> {
    match status {
        401 => Some(Reaction::Reauthorize),
        403 if challenge.error.as_deref() == Some("insufficient_scope") => Some(Reaction::StepUp),
        _ => None,
    }
}

/// RFC 9728 §3.1: the path-based location first (`/.well-known/oauth-protected-resource/<path>`),
/// then the root one. Query and fragment of the MCP URL are not part of it.
pub fn resource_metadata_urls(mcp_url: &str) -> Vec<String> {
    let Ok(u) = Url::parse(mcp_url) else { return Vec::new() };
    let origin = u.origin().ascii_serialization();
    let path = u.path().trim_end_matches('/');
    let mut out = Vec::new();
    if !path.is_empty() {
        out.push(format!("{origin}/.well-known/oauth-protected-resource{path}"));
    }
    out.push(format!("{origin}/.well-known/oauth-protected-resource"));
    out
}

/// RFC 8414 §3.1 and OpenID Connect Discovery for `issuer`: for an issuer with a path, the
/// well-known segment goes before the path (8414), then after it (OIDC); without a path both
/// sit at the root.
pub fn as_metadata_urls(issuer: &str) -> Vec<String> {
    let Ok(u) = Url::parse(issuer) else { return Vec::new() };
    let origin = u.origin().ascii_serialization();
    let path = u.path().trim_end_matches('/');
    if path.is_empty() {
        return vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ];
    }
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ]
}

/// The parts of protected-resource metadata Flowgate uses.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceMetadata {
    /// Sent as `resource` (RFC 8707) exactly as published.
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// Reads protected-resource metadata for `mcp_url`: its `resource` must be the MCP URL or a
/// prefix of it on the same origin (a server's root metadata covers its endpoints), else it
/// describes another resource and is refused.
pub fn read_resource_metadata(v: &Value, mcp_url: &str) -> Result<ResourceMetadata, String> {
    let resource =
        v.get("resource").and_then(Value::as_str).ok_or("the protected-resource metadata has no resource")?;
    if !covers(resource, mcp_url) {
        return Err(format!(
            "the protected-resource metadata is for {}, not for this MCP server; it was not used",
            quote(resource)
        ));
    }
    let strings = |k: &str| -> Option<Vec<String>> {
        v.get(k)?.as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
    };
    Ok(ResourceMetadata {
        resource: resource.to_string(),
        authorization_servers: strings("authorization_servers").unwrap_or_default(),
        scopes_supported: strings("scopes_supported").filter(|s| !s.is_empty()),
    })
}

fn covers(resource: &str, mcp_url: &str) -> bool {
    let (Ok(r), Ok(m)) = (Url::parse(resource), Url::parse(mcp_url)) else { return false };
    if r.origin() != m.origin() || r.fragment().is_some() {
        return false;
    }
    let (rp, mp) = (r.path().trim_end_matches('/'), m.path().trim_end_matches('/'));
    mp == rp || mp.strip_prefix(rp).is_some_and(|rest| rest.starts_with('/'))
}

/// The configured issuer must be one the upstream names (exact string comparison, as
/// RFC 8414 §3.3 compares issuers).
pub fn check_issuer_listed(prm: &ResourceMetadata, issuer: &str) -> Result<(), String> {
    if prm.authorization_servers.iter().any(|a| a == issuer) {
        return Ok(());
    }
    let named: Vec<String> = prm.authorization_servers.iter().map(|a| quote(a)).collect();
    Err(format!(
        "the MCP server names the authorization server{} {}, not the configured backend.oauth.issuer {}; \
         the client secret was not sent (set the issuer the server names, if you trust it)",
        if named.len() == 1 { "" } else { "s" },
        if named.is_empty() { "(none)".to_string() } else { named.join(", ") },
        quote(issuer)
    ))
}

/// The parts of authorization server metadata Flowgate uses.
#[derive(Debug, Clone, PartialEq)]
pub struct AsMetadata {
    pub token_endpoint: String,
    pub auth_methods: Option<Vec<String>>,
}

/// Reads authorization server metadata fetched for `issuer`: its `issuer` must be exactly the
/// configured one (no normalization), else it is refused, whatever else it says.
pub fn read_as_metadata(v: &Value, issuer: &str) -> Result<AsMetadata, String> {
    match v.get("issuer").and_then(Value::as_str) {
        Some(i) if i == issuer => {}
        Some(i) => {
            return Err(format!(
                "the authorization server metadata names the issuer {}, not the configured {}; it was not used \
                 and the client secret was not sent",
                quote(i),
                quote(issuer)
            ))
        }
        None => return Err("the authorization server metadata has no issuer; it was not used".into()),
    }
    let token_endpoint = v
        .get("token_endpoint")
        .and_then(Value::as_str)
        .ok_or("the authorization server metadata has no token_endpoint")?;
    check_backend_url(token_endpoint)
        .map_err(|why| format!("the authorization server's token_endpoint {why}, so it was not used"))?;
    let auth_methods = v
        .get("token_endpoint_auth_methods_supported")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect());
    Ok(AsMetadata { token_endpoint: token_endpoint.to_string(), auth_methods })
}

/// How the client authenticates at the token endpoint (`backend.oauth.token_endpoint_auth_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// HTTP Basic with the client id and secret (RFC 6749 §2.3.1): `client_secret_basic`.
    Basic,
    /// Both in the form body: `client_secret_post`.
    Post,
    /// A public client: the client id in the form, no secret: `none`.
    None,
    /// A JWT signed with the client's private key (RFC 7523 §2.2): `private_key_jwt`.
    PrivateKeyJwt,
}

impl AuthMethod {
    pub fn parse(s: &str) -> Option<AuthMethod> {
        match s {
            "client_secret_basic" => Some(AuthMethod::Basic),
            "client_secret_post" => Some(AuthMethod::Post),
            "none" => Some(AuthMethod::None),
            "private_key_jwt" => Some(AuthMethod::PrivateKeyJwt),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AuthMethod::Basic => "client_secret_basic",
            AuthMethod::Post => "client_secret_post",
            AuthMethod::None => "none",
            AuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }
}

/// The configured method, else the first of basic / post the server supports (basic when it
/// does not say: RFC 8414's default), `none` for a client without a secret.
pub fn choose_auth_method(
    configured: Option<AuthMethod>,
    supported: Option<&[String]>,
    has_secret: bool,
) -> Result<AuthMethod, String> {
    if let Some(m) = configured {
        return Ok(m);
    }
    if !has_secret {
        return Ok(AuthMethod::None);
    }
    let Some(supported) = supported else { return Ok(AuthMethod::Basic) };
    for (name, m) in [("client_secret_basic", AuthMethod::Basic), ("client_secret_post", AuthMethod::Post)] {
        if supported.iter().any(|s| s == name) {
            return Ok(m);
        }
    }
    Err(format!(
        "the authorization server takes client authentication by {} only; with a client secret Flowgate sends \
         client_secret_basic or client_secret_post (for private_key_jwt, configure backend.oauth.private_key)",
        quote(&supported.join(", "))
    ))
}

/// The scope to ask for: on a step-up the scope asked before plus the challenged one; else the
/// challenge's, the configured one, all of `scopes_supported`, or none (omitted).
pub fn choose_scope(
    challenged: Option<&str>,
    step_up_from: Option<&str>,
    configured: Option<&str>,
    supported: Option<&[String]>,
) -> Option<String> {
    if let (Some(c), Some(before)) = (challenged, step_up_from) {
        let mut all: Vec<&str> = before.split_whitespace().collect();
        for s in c.split_whitespace() {
            if !all.contains(&s) {
                all.push(s);
            }
        }
        return Some(all.join(" "));
    }
    challenged.or(configured).map(String::from).or_else(|| supported.filter(|s| !s.is_empty()).map(|s| s.join(" ")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn challenges() {
        let c = parse_challenge(
            r#"Bearer error="insufficient_scope", scope="mcp:write mcp:read", resource_metadata="https://m.example/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("mcp:write mcp:read"));
        assert_eq!(c.resource_metadata.as_deref(), Some("https://m.example/.well-known/oauth-protected-resource/mcp"));
        assert_eq!(reaction(403, &c), Some(Reaction::StepUp));
        assert_eq!(reaction(401, &Challenge::default()), Some(Reaction::Reauthorize));
        assert_eq!(reaction(403, &Challenge::default()), None, "a plain 403 is not a scope problem");
        assert_eq!(reaction(500, &c), None);
        assert_eq!(parse_challenge("Bearer"), Challenge::default());
    }

    #[test]
    fn metadata_locations() {
        assert_eq!(
            resource_metadata_urls("https://m.example:8443/a/mcp?x=1"),
            vec![
                "https://m.example:8443/.well-known/oauth-protected-resource/a/mcp",
                "https://m.example:8443/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            resource_metadata_urls("https://m.example/"),
            vec!["https://m.example/.well-known/oauth-protected-resource"]
        );
        assert_eq!(
            as_metadata_urls("https://as.example"),
            vec![
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            as_metadata_urls("https://as.example/tenant1"),
            vec![
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration"
            ]
        );
        assert!(as_metadata_urls("not a url").is_empty());
    }

    #[test]
    fn resource_metadata() {
        let v = json!({"resource": "https://m.example/mcp", "authorization_servers": ["https://as.example"], "scopes_supported": ["a", "b"]});
        let m = read_resource_metadata(&v, "https://m.example/mcp").unwrap();
        assert_eq!(m.scopes_supported, Some(vec!["a".to_string(), "b".to_string()]));
        assert!(check_issuer_listed(&m, "https://as.example").is_ok());
        let err = check_issuer_listed(&m, "https://as.example/").unwrap_err();
        assert!(err.contains("not the configured") && err.contains("not sent"), "{err}");
        // The root metadata of the server covers its endpoints; another origin or path does not.
        assert!(read_resource_metadata(&json!({"resource": "https://m.example"}), "https://m.example/mcp").is_ok());
        for other in
            ["https://evil.example/mcp", "https://m.example/mcp2", "https://m.example/other", "http://m.example/mcp"]
        {
            let err = read_resource_metadata(&json!({"resource": other}), "https://m.example/mcp").unwrap_err();
            assert!(err.contains("not for this MCP server"), "{other}: {err}");
        }
        assert!(read_resource_metadata(&json!({}), "https://m.example/mcp").is_err());
    }

    #[test]
    fn issuer_must_match_exactly() {
        let v = json!({"issuer": "https://as.example", "token_endpoint": "https://as.example/token",
                       "token_endpoint_auth_methods_supported": ["client_secret_post"]});
        let m = read_as_metadata(&v, "https://as.example").unwrap();
        assert_eq!(m.token_endpoint, "https://as.example/token");
        assert_eq!(m.auth_methods, Some(vec!["client_secret_post".to_string()]));
        for configured in ["https://as.example/", "https://AS.example", "https://attacker.example"] {
            let err = read_as_metadata(&v, configured).unwrap_err();
            assert!(err.contains("not the configured") && err.contains("not sent"), "{configured}: {err}");
        }
        assert!(read_as_metadata(&json!({"token_endpoint": "https://a/t"}), "https://a").is_err());
        assert!(read_as_metadata(&json!({"issuer": "https://a"}), "https://a").unwrap_err().contains("token_endpoint"));
        let bad = json!({"issuer": "https://a", "token_endpoint": "ftp://a/t"});
        assert!(read_as_metadata(&bad, "https://a").unwrap_err().contains("token_endpoint"));
    }

    #[test]
    fn auth_methods() {
        let s = |l: &[&str]| l.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(choose_auth_method(None, None, true), Ok(AuthMethod::Basic));
        assert_eq!(choose_auth_method(None, Some(&s(&["client_secret_post"])), true), Ok(AuthMethod::Post));
        assert_eq!(
            choose_auth_method(None, Some(&s(&["client_secret_post", "client_secret_basic"])), true),
            Ok(AuthMethod::Basic)
        );
        assert_eq!(choose_auth_method(None, Some(&s(&["client_secret_basic"])), false), Ok(AuthMethod::None));
        assert_eq!(
            choose_auth_method(Some(AuthMethod::Post), Some(&s(&["client_secret_basic"])), true),
            Ok(AuthMethod::Post)
        );
        let err = choose_auth_method(None, Some(&s(&["private_key_jwt"])), true).unwrap_err();
        assert!(err.contains("private_key_jwt"), "{err}");
        assert_eq!(AuthMethod::parse("client_secret_basic"), Some(AuthMethod::Basic));
        assert_eq!(AuthMethod::parse("none"), Some(AuthMethod::None));
        assert_eq!(AuthMethod::parse("private_key_jwt"), Some(AuthMethod::PrivateKeyJwt));
        assert_eq!(AuthMethod::parse("tls_client_auth"), None);
    }

    #[test]
    fn scopes() {
        let sup = vec!["a".to_string(), "b".to_string()];
        assert_eq!(choose_scope(Some("x"), None, Some("cfg"), Some(&sup)).as_deref(), Some("x"));
        assert_eq!(choose_scope(None, None, Some("cfg"), Some(&sup)).as_deref(), Some("cfg"));
        assert_eq!(choose_scope(None, None, None, Some(&sup)).as_deref(), Some("a b"));
        assert_eq!(choose_scope(None, None, None, None), None);
        assert_eq!(choose_scope(None, None, None, Some(&[])), None);
        // Step-up keeps what was asked before (SEP-2350's union) and adds the challenged scope.
        assert_eq!(choose_scope(Some("b c"), Some("a b"), None, None).as_deref(), Some("a b c"));
    }
}
