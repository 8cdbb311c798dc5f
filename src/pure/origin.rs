//! Which browser origins may call the MCP endpoint (DNS-rebinding protection).
//!
//! Requests without `Origin` (desktop, CLI and server clients) are always fine. A browser
//! origin must be listed in `ALLOWED_ORIGINS` (`*` allows any), except that a page on the
//! endpoint's own loopback origin may call it during local development. Same-origin is not
//! trusted for other hosts: under DNS rebinding the attacker's page *is* same-origin with the
//! `Host` it forged.

/// The entries of `ALLOWED_ORIGINS` (comma-separated, each trimmed). A blank entry, which an
/// unset value is, is kept: it matches an empty `Origin` header, as it always has.
pub fn allowed_origins(setting: Option<&str>) -> Vec<String> {
    setting.unwrap_or_default().split(',').map(|o| o.trim().to_string()).collect()
}

/// `allowed`: the entries of `ALLOWED_ORIGINS` ([`allowed_origins`]).
pub fn origin_allowed(origin: &str, host: Option<&str>, allowed: &[String]) -> bool {
    if allowed.iter().any(|o| o == "*" || o.eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some(host) = host else { return false };
    let origin_host = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    origin_host.is_some_and(|oh| oh.eq_ignore_ascii_case(host)) && is_loopback(host)
}

/// The `Host` header names a loopback host: an IPv4 address in 127.0.0.0/8, `::1`, or exactly
/// `localhost` (any case; `localhost.` with its trailing dot is refused). Read by the URL
/// standard's host parser, so `127.attacker.example` is a domain, not loopback, and `127.1`
/// is 127.0.0.1. A value that is more than `host[:port]` is refused.
fn is_loopback(host: &str) -> bool {
    let Ok(url) = crate::pure::web_url::Url::parse(&format!("http://{host}/")) else { return false };
    let only_host = url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    only_host
        && match url.host() {
            Some(crate::pure::web_url::Host::Ipv4(a)) => a.is_loopback(),
            Some(crate::pure::web_url::Host::Ipv6(a)) => a.is_loopback(),
            Some(crate::pure::web_url::Host::Domain(d)) => d == "localhost",
            None => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(setting: &str) -> Vec<String> {
        allowed_origins(Some(setting))
    }

    #[test]
    fn the_setting_is_a_list() {
        assert_eq!(allowed_origins(Some(" https://a.example ,*,")), ["https://a.example", "*", ""]);
        assert_eq!(allowed_origins(None), [""]);
        // The blank entry of an unset value matches an empty Origin header, as before.
        assert!(origin_allowed("", None, &allowed_origins(None)));
        assert!(!origin_allowed("", None, &list("https://a.example")));
    }

    #[test]
    fn listed_origins_pass() {
        assert!(origin_allowed(
            "https://app.example.com",
            Some("gw.example.com"),
            &list("https://app.example.com, http://x")
        ));
        assert!(origin_allowed("https://anything.example", None, &list("*")));
        assert!(!origin_allowed("https://evil.example", Some("gw.example.com"), &list("https://app.example.com")));
        assert!(!origin_allowed("https://evil.example", Some("gw.example.com"), &list("")));
    }

    #[test]
    fn same_origin_only_on_loopback() {
        assert!(origin_allowed("http://127.0.0.1:8787", Some("127.0.0.1:8787"), &list("")));
        assert!(origin_allowed("http://localhost:8787", Some("localhost:8787"), &list("")));
        assert!(origin_allowed("http://[::1]:8787", Some("[::1]:8787"), &list("")));
        // DNS rebinding: the forged Host matches the attacker's origin, and is refused.
        assert!(!origin_allowed("http://evil.example.com", Some("evil.example.com"), &list("")));
        assert!(!origin_allowed("http://localhost:9999", Some("localhost:8787"), &list("")));
        assert!(origin_allowed("http://LOCALHOST:8787", Some("localhost:8787"), &list("")));
        assert!(origin_allowed("http://127.8.9.10", Some("127.8.9.10"), &list("")));
    }

    #[test]
    fn loopback_means_the_parsed_host() {
        for host in ["127.0.0.1", "127.0.0.1:8787", "127.255.0.9", "127.1", "localhost", "LocalHost:80", "[::1]:8787"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "127.attacker.example",
            "127.0.0.1.nip.io",
            "127.0.0.1.nip.io:8787",
            "localhost.evil.com",
            "localhost.",
            "evil.localhost.com",
            "128.0.0.1",
            "[::2]",
            "[::ffff:127.0.0.1]",
            "evil.com@127.0.0.1",
            "127.0.0.1@evil.com",
            "127.0.0.1/x",
            "127.0.0.1\\evil.com",
            "127.0.0.1?x",
            "127.0.0.1#x",
            "127.0.0.1:99999",
            "",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
        // A forged Host naming a look-alike name gets no same-origin pass.
        for host in ["127.attacker.example", "127.0.0.1.nip.io", "localhost.evil.com"] {
            assert!(!origin_allowed(&format!("http://{host}"), Some(host), &list("")), "{host}");
        }
    }
}
