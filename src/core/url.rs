//! Minimal checks on backend URLs given to the console (the full guard against private
//! addresses lives with the request path).

/// Why a URL was refused, as a phrase that completes "<field> ...".
pub fn check_backend_url(s: &str) -> Result<(), &'static str> {
    let rest = if let Some(r) = s.strip_prefix("https://") {
        r
    } else if let Some(r) = s.strip_prefix("http://") {
        r
    } else {
        return Err("must be an http:// or https:// URL");
    };
    if s.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("must not contain spaces or control characters");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err("must not carry credentials (user:password@); put keys in api_key or headers");
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (h, tail) = bracketed.split_once(']').ok_or("has an unclosed [IPv6] host")?;
        match tail.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if tail.is_empty() => (h, None),
            None => return Err("has an invalid host"),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if let Some(p) = port {
        if !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().map_or(true, |p| p == 0) {
            return Err("has an invalid port");
        }
    }
    if host.is_empty() {
        return Err("has no host");
    }
    if rest.contains('#') {
        return Err("must not have a #fragment");
    }
    Ok(())
}

/// Why a backend URL points inside a private network (loopback, private ranges, link-local,
/// cloud metadata, `localhost` names), or `None`. Such backends are refused unless the
/// deployment sets `ALLOW_PRIVATE_BACKENDS` (local development and tests do).
pub fn private_host_reason(url: &str) -> Option<&'static str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
    .trim_end_matches('.')
    .to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("is a loopback name");
    }
    if host == "metadata.google.internal" || host.ends_with(".internal") {
        return Some("is an internal or cloud-metadata name");
    }
    if let Some(v4) = parse_ipv4(&host) {
        return ipv4_reason(v4);
    }
    if host.contains(':') {
        return ipv6_reason(&host);
    }
    None
}

fn parse_ipv4(host: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = host.split('.');
    for slot in &mut out {
        *slot = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

fn ipv4_reason([a, b, ..]: [u8; 4]) -> Option<&'static str> {
    match (a, b) {
        (127, _) => Some("is a loopback address"),
        (10, _) | (192, 168) => Some("is a private address"),
        (172, 16..=31) => Some("is a private address"),
        (169, 254) => Some("is a link-local or cloud-metadata address"),
        (100, 64..=127) => Some("is a carrier-grade NAT address"),
        (0, _) => Some("is an unspecified address"),
        _ => None,
    }
}

fn ipv6_reason(host: &str) -> Option<&'static str> {
    let h = host.to_ascii_lowercase();
    if h == "::1" || h == "::" {
        return Some("is a loopback address");
    }
    if let Some(v4) = h.strip_prefix("::ffff:").and_then(parse_ipv4) {
        return ipv4_reason(v4);
    }
    let first = u16::from_str_radix(h.split(':').next().unwrap_or(""), 16).unwrap_or(0);
    match first {
        0xfc00..=0xfdff => Some("is a private (unique local) address"),
        0xfe80..=0xfebf => Some("is a link-local address"),
        _ => None,
    }
}

/// The URLs of a backend object, by field path, that point inside a private network.
pub fn private_backend_urls(backend: &serde_json::Value) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let candidates = [
        ("backend.base_url", &backend["base_url"]),
        ("backend.api_endpoint", &backend["api_endpoint"]),
        ("backend.url", &backend["url"]),
        ("backend.async.status_endpoint", &backend["async"]["status_endpoint"]),
        ("backend.async.cancel_endpoint", &backend["async"]["cancel_endpoint"]),
        ("backend.oauth.token_url", &backend["oauth"]["token_url"]),
    ];
    for (field, v) in candidates {
        if let Some(why) = v.as_str().and_then(private_host_reason) {
            out.push((field.to_string(), why));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_urls() {
        for u in [
            "https://api.dify.ai/v1",
            "http://127.0.0.1:5001/v1",
            "http://localhost:8080",
            "https://[::1]:8443/x?y=1",
            "https://[::1]/x",
        ] {
            assert_eq!(check_backend_url(u), Ok(()), "{u}");
        }
    }

    #[test]
    fn private_hosts() {
        for u in [
            "http://127.0.0.1:5001/v1",
            "http://localhost/x",
            "http://api.localhost/x",
            "http://10.1.2.3",
            "http://172.20.0.1",
            "http://192.168.1.1",
            "http://169.254.169.254/latest/meta-data",
            "http://metadata.google.internal/",
            "http://100.64.0.1",
            "http://0.0.0.0",
            "http://[::1]:8080",
            "http://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://user@127.0.0.1/",
        ] {
            assert!(private_host_reason(u).is_some(), "{u}");
        }
        for u in [
            "https://api.dify.ai/v1",
            "http://8.8.8.8",
            "http://172.32.0.1",
            "https://[2001:db8::1]/",
            "http://mcp.example.com",
        ] {
            assert_eq!(private_host_reason(u), None, "{u}");
        }
        let b = serde_json::json!({"url": "http://10.0.0.1/mcp", "oauth": {"token_url": "https://auth.example.com/t"}});
        assert_eq!(private_backend_urls(&b), vec![("backend.url".to_string(), "is a private address")]);
    }

    #[test]
    fn refuses_bad_urls() {
        for (u, why) in [
            ("ftp://x", "http"),
            ("api.dify.ai/v1", "http"),
            ("https://", "no host"),
            ("https://user:pw@host/", "credentials"),
            ("https://host:99999/", "port"),
            ("https://host:abc/", "port"),
            ("https://host/a b", "spaces"),
            ("https://host/#frag", "fragment"),
        ] {
            let err = check_backend_url(u).unwrap_err();
            assert!(err.contains(why), "{u}: {err}");
        }
    }
}

// --- TEMPORARY STUBS (replaced by the guard branch) ---
pub enum PrivateAllow {
    Nothing,
    Everything,
    Hosts(Vec<String>),
}
impl PrivateAllow {
    pub fn from_setting(v: Option<&str>) -> PrivateAllow {
        match v.map(str::trim) {
            None | Some("") | Some("false") => PrivateAllow::Nothing,
            Some("true") => PrivateAllow::Everything,
            Some(list) => PrivateAllow::Hosts(list.split(',').map(|h| h.trim().to_ascii_lowercase()).collect()),
        }
    }
    pub fn allows(&self, host: &str) -> bool {
        match self {
            PrivateAllow::Nothing => false,
            PrivateAllow::Everything => true,
            PrivateAllow::Hosts(h) => h.iter().any(|x| x.eq_ignore_ascii_case(host)),
        }
    }
}
pub fn parse_outbound(url: &str, allow: &PrivateAllow) -> Result<::url::Url, String> {
    let u = ::url::Url::parse(url).map_err(|_| "the backend URL is not a valid URL".to_string())?;
    if let Some(why) = private_host_reason(u.as_str()) {
        if !allow.allows(u.host_str().unwrap_or("")) {
            return Err(format!("blocked: the backend host {why}; private backends need ALLOW_PRIVATE_BACKENDS=true"));
        }
    }
    Ok(u)
}
pub fn host_for_display(url: &str) -> String {
    match ::url::Url::parse(url) {
        Ok(u) => match u.port() {
            Some(p) => format!("{}:{p}", u.host_str().unwrap_or("")),
            None => u.host_str().unwrap_or("").to_string(),
        },
        Err(_) => "an invalid URL".into(),
    }
}
pub fn scrub_urls(text: &str) -> String {
    text.to_string()
}
pub const MAX_REDIRECTS: u8 = 3;
pub enum Redirect {
    Follow { url: ::url::Url, method_becomes_get: bool, same_origin: bool },
    Refuse(String),
}
pub fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}
pub fn follow_redirect(
    from: &::url::Url,
    status: u16,
    is_post: bool,
    location: Option<&str>,
    hops_so_far: u8,
    allow: &PrivateAllow,
) -> Redirect {
    if hops_so_far >= MAX_REDIRECTS {
        return Redirect::Refuse(format!("the backend redirected more than {MAX_REDIRECTS} times"));
    }
    let Some(loc) = location else {
        return Redirect::Refuse(format!("the backend answered HTTP {status} without a Location"));
    };
    let Ok(to) = from.join(loc) else { return Redirect::Refuse("bad location".into()) };
    match parse_outbound(to.as_str(), allow) {
        Ok(url) => Redirect::Follow {
            same_origin: url.origin() == from.origin(),
            method_becomes_get: status == 303 || (is_post && matches!(status, 301 | 302)),
            url,
        },
        Err(e) => Redirect::Refuse(format!(
            "the backend redirected (HTTP {status}) to {}, which is {e}",
            host_for_display(to.as_str())
        )),
    }
}
