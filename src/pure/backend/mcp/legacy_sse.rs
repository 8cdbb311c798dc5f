//! The legacy HTTP+SSE transport (2024-11-05): the POST endpoint its event stream announces,
//! resolved against the stream's URL and held to the same origin.

use super::error::quote;

struct AbsUrl<'a> {
    scheme: String,
    /// As written (host casing kept), for building the resolved URL.
    authority: &'a str,
    host: String,
    port: u16,
    /// Path and query, no fragment.
    rest: &'a str,
}

impl AbsUrl<'_> {
    /// The origin as browsers serialize it: the default port left out.
    fn origin(&self) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        if self.port == default {
            format!("{}://{}", self.scheme, self.host)
        } else {
            format!("{}://{}:{}", self.scheme, self.host, self.port)
        }
    }

    fn same_origin(&self, other: &AbsUrl<'_>) -> bool {
        self.scheme == other.scheme && self.host == other.host && self.port == other.port
    }
}

fn parse_abs(url: &str) -> Result<AbsUrl<'_>, String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{url:?} is not an absolute URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(format!("{:?} is not an http or https URL", quote(url))),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let tail = &rest[end..];
    let tail = tail.split('#').next().unwrap_or("");
    if authority.contains('@') {
        return Err(format!("{:?} carries credentials (user@host)", quote(url)));
    }
    let (host, port) = if let Some(b) = authority.strip_prefix('[') {
        let (h, t) = b.split_once(']').ok_or_else(|| format!("{:?} has an unclosed [IPv6] host", quote(url)))?;
        (format!("[{h}]"), t.strip_prefix(':'))
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("{:?} has no host", quote(url)));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(p) => p.parse::<u16>().map_err(|_| format!("{:?} has an invalid port", quote(url)))?,
    };
    Ok(AbsUrl { scheme, authority, host: host.to_ascii_lowercase(), port, rest: tail })
}

/// RFC 3986 §5.2.4: `.` and `..` segments removed, so `../` cannot climb out unnoticed.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if path.starts_with('/') && !joined.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Legacy HTTP+SSE: the `endpoint` event's data resolved against the SSE URL. It must be the
/// same origin (scheme, host, port): otherwise a server could make Flowgate post the session's
/// traffic, with its credentials, elsewhere. The error names both origins.
pub fn resolve_endpoint(sse_url: &str, data: &str) -> Result<String, String> {
    let base = parse_abs(sse_url)?;
    let data = data.trim();
    if data.is_empty() {
        return Err("the upstream's endpoint event is empty".into());
    }
    if data.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("the upstream's endpoint event is not a URL (it contains spaces or control characters)".into());
    }
    let data = data.split('#').next().unwrap_or("");
    let has_scheme = data.find("://").is_some_and(|i| !data[..i].contains(['/', '?']));
    if has_scheme || data.starts_with("//") {
        let absolute = if has_scheme { data.to_string() } else { format!("{}:{data}", base.scheme) };
        let target = parse_abs(&absolute).map_err(|e| format!("the upstream's endpoint event: {e}"))?;
        if !target.same_origin(&base) {
            return Err(format!(
                "the upstream's endpoint event points to {}, not to the SSE server's origin {}; Flowgate only \
                 posts to the server it connected to",
                target.origin(),
                base.origin()
            ));
        }
        let (path, query) = split_query(target.rest);
        let path = if path.is_empty() { "/".to_string() } else { remove_dot_segments(path) };
        return Ok(format!("{}://{}{path}{query}", target.scheme, target.authority));
    }
    let (base_path, base_query) = split_query(base.rest);
    let (path, query) = if let Some(q) = data.strip_prefix('?') {
        (base_path.to_string(), format!("?{q}"))
    } else {
        let (p, q) = split_query(data);
        let joined = if p.starts_with('/') {
            p.to_string()
        } else if p.is_empty() {
            base_path.to_string()
        } else {
            let dir = base_path.rfind('/').map_or("/", |i| &base_path[..=i]);
            format!("{dir}{p}")
        };
        let q = if p.is_empty() && q.is_empty() { base_query } else { q };
        (joined, q.to_string())
    };
    let path = if path.is_empty() { "/".to_string() } else { remove_dot_segments(&path) };
    Ok(format!("{}://{}{path}{query}", base.scheme, base.authority))
}

fn split_query(s: &str) -> (&str, &str) {
    match s.find('?') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_resolution() {
        let base = "https://mcp.example.com/v1/sse?team=a";
        let ok = [
            ("/messages?sessionId=1", "https://mcp.example.com/messages?sessionId=1"),
            ("messages?sessionId=1", "https://mcp.example.com/v1/messages?sessionId=1"),
            ("../messages", "https://mcp.example.com/messages"),
            ("./a/../b", "https://mcp.example.com/v1/b"),
            ("?sessionId=2", "https://mcp.example.com/v1/sse?sessionId=2"),
            ("https://mcp.example.com/m?s=1#frag", "https://mcp.example.com/m?s=1"),
            ("HTTPS://MCP.example.com:443/m", "https://MCP.example.com:443/m"),
            ("//mcp.example.com/m", "https://mcp.example.com/m"),
            ("  /padded \n", "https://mcp.example.com/padded"),
            ("https://mcp.example.com", "https://mcp.example.com/"),
        ];
        for (data, want) in ok {
            assert_eq!(resolve_endpoint(base, data).as_deref(), Ok(want), "{data}");
        }
        assert_eq!(
            resolve_endpoint("http://127.0.0.1:8000/sse", "/messages/?session_id=x").as_deref(),
            Ok("http://127.0.0.1:8000/messages/?session_id=x")
        );
        let refused = [
            ("https://evil.example/messages", "https://evil.example", "https://mcp.example.com"),
            ("https://mcp.example.com:8443/m", "https://mcp.example.com:8443", "https://mcp.example.com"),
            ("http://mcp.example.com/m", "http://mcp.example.com", "https://mcp.example.com"),
            ("//evil.example/m", "https://evil.example", "https://mcp.example.com"),
        ];
        for (data, theirs, ours) in refused {
            let err = resolve_endpoint(base, data).unwrap_err();
            assert!(err.contains(theirs) && err.contains(ours), "{data}: {err}");
        }
        for bad in ["", "  ", "/a b", "https://user@mcp.example.com/m", "ftp://mcp.example.com/m", "/a\r\nX: y"] {
            assert!(resolve_endpoint(base, bad).is_err(), "{bad:?}");
        }
        assert!(resolve_endpoint("not a url", "/m").is_err());
    }

    #[test]
    fn dot_segments() {
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("/../../x"), "/x");
        assert_eq!(remove_dot_segments("/a/b/.."), "/a/");
        assert_eq!(remove_dot_segments("/a/."), "/a/");
    }
}
