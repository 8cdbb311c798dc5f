//! Which browser origins may call the MCP endpoint (DNS-rebinding protection).
//!
//! Requests without `Origin` (desktop, CLI and server clients) are always fine. A browser
//! origin must be listed in `ALLOWED_ORIGINS` (`*` allows any), except that a page on the
//! endpoint's own loopback origin may call it during local development. Same-origin is not
//! trusted for other hosts: under DNS rebinding the attacker's page *is* same-origin with the
//! `Host` it forged.

pub fn origin_allowed(origin: &str, host: Option<&str>, allowed: &str) -> bool {
    if allowed.split(',').map(str::trim).any(|o| o == "*" || o.eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some(host) = host else { return false };
    let origin_host = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    origin_host.is_some_and(|oh| oh.eq_ignore_ascii_case(host)) && is_loopback(host)
}

fn is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost") || name == "::1" || name.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_origins_pass() {
        assert!(origin_allowed("https://app.example.com", Some("gw.example.com"), "https://app.example.com, http://x"));
        assert!(origin_allowed("https://anything.example", None, "*"));
        assert!(!origin_allowed("https://evil.example", Some("gw.example.com"), "https://app.example.com"));
        assert!(!origin_allowed("https://evil.example", Some("gw.example.com"), ""));
    }

    #[test]
    fn same_origin_only_on_loopback() {
        assert!(origin_allowed("http://127.0.0.1:8787", Some("127.0.0.1:8787"), ""));
        assert!(origin_allowed("http://localhost:8787", Some("localhost:8787"), ""));
        assert!(origin_allowed("http://[::1]:8787", Some("[::1]:8787"), ""));
        // DNS rebinding: the forged Host matches the attacker's origin, and is refused.
        assert!(!origin_allowed("http://evil.example.com", Some("evil.example.com"), ""));
        assert!(!origin_allowed("http://localhost:9999", Some("localhost:8787"), ""));
    }
}
