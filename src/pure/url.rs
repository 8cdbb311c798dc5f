//! The backend URL guard: which URLs Flowgate may store and fetch.
//!
//! Every decision is taken on the URL as the WHATWG URL standard parses it (`pure::web_url`: in
//! the Worker the runtime's own `URL`, the parser its `fetch` uses): a hand parser disagrees on
//! spellings such as `http://0x7f.1/`, `http://[::ffff:7f00:1]/` or `http://127.0.0.1\@evil/`.
//! Outbound calls go through [`parse_outbound`] and fetch the `Url` it returns, so the host that
//! was judged is the host that is connected to.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::web_url::{Host, ParseError, Url};

/// Why a URL was refused, as a phrase that completes "<field> ...".
pub fn check_backend_url(s: &str) -> Result<(), &'static str> {
    let Some(rest) = strip_prefix_ignore_case(s, "https://").or_else(|| strip_prefix_ignore_case(s, "http://")) else {
        return Err("must be an http:// or https:// URL");
    };
    // The parser would silently drop or encode these; a stored URL should be what is fetched.
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain spaces or control characters");
    }
    // `http:///x` means host `x` to the standard: refuse rather than guess what was meant.
    if rest.is_empty() || rest.starts_with(['/', '\\', '?', '#']) {
        return Err("has no host");
    }
    // The runtime's parser maps a Unicode host to its Punycode form, the host's parser (the url
    // crate without IDNA tables) refuses it: refuse it here for both, naming the form that works.
    let authority = &rest[..rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if !host.is_ascii()
        || host.split('%').skip(1).any(|e| e.as_bytes().first().is_some_and(|b| b"89abcdefABCDEF".contains(b)))
    {
        return Err("has a host name with non-ASCII characters; write it in its Punycode form (xn--…)");
    }
    let url = Url::parse(s).map_err(|e| match e {
        ParseError::EmptyHost => "has no host",
        ParseError::InvalidPort => "has an invalid port",
        ParseError::InvalidHost => "has an invalid host",
        ParseError::Invalid => "is not a valid URL",
    })?;
    if !is_http(&url) {
        return Err("must be an http:// or https:// URL");
    }
    if has_userinfo(&url) {
        return Err("must not carry credentials (user:password@); put keys in api_key or headers");
    }
    if url.port() == Some(0) {
        return Err("has an invalid port");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if url.fragment().is_some() {
        return Err("must not have a #fragment");
    }
    Ok(())
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

fn is_http(url: &Url) -> bool {
    matches!(url.scheme(), "http" | "https")
}

fn has_userinfo(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// Why a backend URL points inside a private network (loopback, private and other non-public
/// ranges, cloud metadata, `localhost` and `.internal` names), or `None`; judged on the host
/// the URL standard parses out of it. An unparseable URL is refused too.
pub fn private_host_reason(url: &str) -> Option<&'static str> {
    match Url::parse(url) {
        Ok(u) => host_reason(&u),
        Err(_) => Some("is not a valid URL"),
    }
}

fn host_reason(url: &Url) -> Option<&'static str> {
    match url.host() {
        None => Some("is missing"),
        Some(Host::Domain("")) => Some("is missing"),
        Some(Host::Domain(d)) => domain_reason(d),
        Some(Host::Ipv4(a)) => ipv4_reason(a),
        Some(Host::Ipv6(a)) => ipv6_reason(a),
    }
}

/// `d` is as the parser yields it: lowercase ASCII (IDNA applied), maybe with trailing dots.
fn domain_reason(d: &str) -> Option<&'static str> {
    let name = d.trim_end_matches('.');
    let last = name.rsplit('.').next().unwrap_or(name);
    match last {
        // Only dots (`..`): nothing a DNS lookup could reach.
        "" => Some("is missing"),
        "localhost" => Some("is a loopback name"),
        // Covers metadata.google.internal and the other clouds' internal zones.
        "internal" => Some("is an internal or cloud-metadata name"),
        _ => None,
    }
}

fn ipv4_reason(a: Ipv4Addr) -> Option<&'static str> {
    let [a0, a1, a2, _] = a.octets();
    Some(match (a0, a1, a2) {
        (0, ..) => "is an unspecified address",
        (127, ..) => "is a loopback address",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "is a private address",
        (169, 254, _) => "is a link-local or cloud-metadata address",
        (100, 64..=127, _) => "is a carrier-grade NAT address",
        (192, 0, 0) => "is an IETF protocol-assignment address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "is a documentation address",
        (198, 18..=19, _) => "is a benchmarking address",
        (224..=239, ..) => "is a multicast address",
        _ if a.is_broadcast() => "is the broadcast address",
        (240..=255, ..) => "is a reserved address",
        _ => return None,
    })
}

fn ipv6_reason(a: Ipv6Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        return Some("is an unspecified address");
    }
    if a.is_loopback() {
        return Some("is a loopback address");
    }
    if let Some(v4) = embedded_ipv4(a) {
        return ipv4_reason(v4);
    }
    let s = a.segments();
    Some(match s {
        [0xfc00..=0xfdff, ..] => "is a private (unique local) address",
        [0xfe80..=0xfebf, ..] => "is a link-local address",
        [0xfec0..=0xfeff, ..] => "is a site-local address",
        [0xff00..=0xffff, ..] => "is a multicast address",
        [0x2001, 0x0db8, ..] => "is a documentation address",
        [0x0100, 0, 0, 0, ..] => "is a discard-only address",
        [0x0064, 0xff9b, 0x0001, ..] => "is a local-use NAT64 address",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 address stands for, in the forms that reach an IPv4 host:
/// IPv4-mapped (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), IPv4-compatible (::/96),
/// NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
fn embedded_ipv4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0xffff, 0, ..] | [0, 0, 0, 0, 0, 0, ..] => Some(low),
        [0x0064, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)),
        _ => None,
    }
}

/// Which private hosts a deployment lets backends use (`ALLOW_PRIVATE_BACKENDS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivateAllow {
    Nothing,
    Everything,
    /// These hosts, as `Url::host_str` serializes them (`localhost`, `127.0.0.1`, `[::1]`).
    Hosts(Vec<String>),
}

impl PrivateAllow {
    /// Absent, empty or `false`: nothing; `true`: everything; otherwise a comma-separated list
    /// of hosts. Entries are normalized by the URL host parser (`127.1` means `127.0.0.1`);
    /// an entry that is not a host allows nothing.
    pub fn from_setting(v: Option<&str>) -> PrivateAllow {
        let v = v.map_or("", str::trim);
        if v.is_empty() || v.eq_ignore_ascii_case("false") {
            return PrivateAllow::Nothing;
        }
        if v.eq_ignore_ascii_case("true") {
            return PrivateAllow::Everything;
        }
        let hosts =
            v.split(',').map(str::trim).filter(|h| !h.is_empty()).filter_map(super::web_url::parse_host).collect();
        PrivateAllow::Hosts(hosts)
    }

    /// `host` as `Url::host_str` gives it.
    pub fn allows(&self, host: &str) -> bool {
        match self {
            PrivateAllow::Nothing => false,
            PrivateAllow::Everything => true,
            PrivateAllow::Hosts(list) => list.iter().any(|h| h.eq_ignore_ascii_case(host)),
        }
    }
}

/// Why the guard refuses a URL, for each caller to word: a backend's URL (`parse_outbound`) or
/// a URL a client hands over to be fetched by a backend (a Dify file input).
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Not a URL: the parser's words.
    Invalid(String),
    NotHttp,
    Userinfo,
    /// The host is private (loopback, private ranges, metadata, ...): the phrase says how.
    Private(&'static str),
}

/// The guard's decision on a URL to fetch: the parsed URL, or why not.
pub fn judge(url: &str, allow: &PrivateAllow) -> Result<Url, Refusal> {
    judge_parsed(Url::parse(url).map_err(|e| Refusal::Invalid(e.to_string()))?, allow)
}

fn judge_parsed(url: Url, allow: &PrivateAllow) -> Result<Url, Refusal> {
    if !is_http(&url) {
        return Err(Refusal::NotHttp);
    }
    if has_userinfo(&url) {
        return Err(Refusal::Userinfo);
    }
    if !url.host_str().is_some_and(|h| allow.allows(h)) {
        if let Some(why) = host_reason(&url) {
            return Err(Refusal::Private(why));
        }
    }
    Ok(url)
}

/// The one decision every outbound fetch goes through: the parsed URL to fetch (fetch
/// `url.as_str()`), or why not. Error texts never repeat the URL (its query may hold keys).
pub fn parse_outbound(url: &str, allow: &PrivateAllow) -> Result<Url, String> {
    judge(url, allow).map_err(backend_words)
}

fn backend_words(refusal: Refusal) -> String {
    match refusal {
        Refusal::Invalid(e) => format!("the backend URL is not a valid URL ({e})"),
        Refusal::NotHttp => "the backend URL must be an http:// or https:// URL".into(),
        Refusal::Userinfo => "the backend URL must not carry credentials (user:password@)".into(),
        Refusal::Private(why) => {
            format!("blocked: the backend host {why}; private backends need ALLOW_PRIVATE_BACKENDS=true")
        }
    }
}

/// "host" or "host:port" (explicit, non-default port only) of a URL, for messages shown to
/// clients: never userinfo, path or query.
pub fn host_for_display(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => display_host(&u),
        Err(_) => "an invalid URL".into(),
    }
}

fn display_host(u: &Url) -> String {
    match (u.host_str(), u.port()) {
        (None | Some(""), _) => "a URL without a host".into(),
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
    }
}

/// Replaces every `http://…` and `https://…` URL (scheme matched in any case; the URL runs to
/// the next whitespace or control character) in `text` with `scheme://host[:port]`, so a
/// runtime error shown to a client names the host and nothing else. Trailing punctuation
/// (`.,;:!)}'">`) is kept as text; a URL that does not parse is replaced whole.
pub fn scrub_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_url_start(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail.find(|c: char| c.is_whitespace() || c.is_control()).unwrap_or(tail.len());
        let run = &tail[..end];
        let url = run.trim_end_matches(['.', ',', ';', ':', '!', ')', '}', '\'', '"', '>']);
        match Url::parse(url) {
            Ok(u) => {
                out.push_str(u.scheme());
                out.push_str("://");
                out.push_str(&display_host(&u));
            }
            Err(_) => {
                let scheme =
                    if url.as_bytes().get(4).is_some_and(|b| b.eq_ignore_ascii_case(&b's')) { "https" } else { "http" };
                out.push_str(scheme);
                out.push_str("://(invalid URL)");
            }
        }
        out.push_str(&run[url.len()..]);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Byte offset of the first `http://` or `https://` (any case) in `s`.
fn find_url_start(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    (0..bytes.len()).find(|&i| {
        let at = &bytes[i..];
        let has = |p: &[u8]| at.len() >= p.len() && at[..p.len()].eq_ignore_ascii_case(p);
        has(b"http://") || has(b"https://")
    })
}

/// Redirects followed per outbound call.
pub const MAX_REDIRECTS: u8 = 3;

/// What to do with a redirect answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// Fetch `url` next. `method_becomes_get`: 301/302 after POST and 303 turn the request into a
    /// body-less GET (as browsers and the fetch standard do); 307/308 keep method and body.
    /// `same_origin`: the new URL has the origin of the one that redirected; credentials
    /// (Authorization and any configured credential headers) are sent only then.
    Follow {
        url: Url,
        method_becomes_get: bool,
        same_origin: bool,
    },
    Refuse(String),
}

pub fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// Whether and where to follow a redirect answer `status` of `from`. `hops_so_far` counts the
/// redirects already followed for this call; the target passes the same guard as any fetch.
pub fn follow_redirect(
    from: &Url,
    status: u16,
    is_post: bool,
    location: Option<&str>,
    hops_so_far: u8,
    allow: &PrivateAllow,
) -> Redirect {
    if !is_redirect(status) {
        return Redirect::Refuse(format!("the backend answered HTTP {status}, which is not a redirect"));
    }
    if hops_so_far >= MAX_REDIRECTS {
        return Redirect::Refuse(format!("the backend redirected more than {MAX_REDIRECTS} times"));
    }
    let Some(location) = location.filter(|l| !l.trim().is_empty()) else {
        return Redirect::Refuse(format!("the backend answered HTTP {status} without a Location"));
    };
    let Ok(url) = from.join(location) else {
        return Redirect::Refuse(format!("the backend redirected (HTTP {status}) to an invalid URL"));
    };
    if !is_http(&url) {
        return Redirect::Refuse("the backend redirected to a non-http(s) URL".into());
    }
    if has_userinfo(&url) {
        return Redirect::Refuse(format!("the backend redirected (HTTP {status}) to a URL with credentials"));
    }
    let target = display_host(&url);
    match judge_parsed(url, allow).map_err(backend_words) {
        Ok(url) => {
            let method_becomes_get = status == 303 || (is_post && matches!(status, 301 | 302));
            // Origins compare scheme too, so an https -> http downgrade is never same-origin.
            let same_origin = url.origin() == from.origin();
            Redirect::Follow { url, method_becomes_get, same_origin }
        }
        Err(why) => Redirect::Refuse(format!("the backend redirected (HTTP {status}) to {target}, which is {why}")),
    }
}

/// The URLs of a backend (`Backend::urls`: field path and URL) that point inside a private
/// network, with the reason.
pub fn private_backend_urls(urls: &[(&'static str, &str)]) -> Vec<(&'static str, &'static str)> {
    urls.iter().filter_map(|(field, u)| private_host_reason(u).map(|why| (*field, why))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCKED_LOOPBACK: &str =
        "blocked: the backend host is a loopback address; private backends need ALLOW_PRIVATE_BACKENDS=true";

    #[test]
    fn accepts_ordinary_urls() {
        for u in [
            "https://api.dify.ai/v1",
            "http://127.0.0.1:5001/v1",
            "http://localhost:8080",
            "https://[::1]:8443/x?y=1",
            "https://[::1]/x",
            "HTTPS://API.example.com/v1",
            "http://0x7f.1/",
        ] {
            assert_eq!(check_backend_url(u), Ok(()), "{u}");
        }
    }

    #[test]
    fn refuses_bad_urls() {
        for (u, why) in [
            ("ftp://x", "http"),
            ("api.dify.ai/v1", "http"),
            ("http:/\\x/", "http"),
            ("http:x", "http"),
            ("https://", "no host"),
            ("http:///x", "no host"),
            ("http://\\x", "no host"),
            ("https://?q", "no host"),
            ("https://user:pw@host/", "credentials"),
            ("https://user@host/", "credentials"),
            ("https://host:99999/", "port"),
            ("https://host:abc/", "port"),
            ("https://host:0/", "port"),
            ("https://host/a b", "spaces"),
            ("https://host/a\tb", "spaces"),
            ("https://host/a\u{3000}b", "spaces"),
            (" https://host/", "http"),
            ("https://host/#frag", "fragment"),
            ("https://host/#", "fragment"),
            ("https://ho%00st/", "invalid host"),
            ("https://1.2.3.4.5/", "invalid host"),
            ("https://[::1/", "invalid host"),
        ] {
            let err = check_backend_url(u).unwrap_err();
            assert!(err.contains(why), "{u}: {err}");
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
            "https://[2001:db8::1]/",
            "not a url",
        ] {
            assert!(private_host_reason(u).is_some(), "{u}");
        }
        for u in ["https://api.dify.ai/v1", "http://8.8.8.8", "http://172.32.0.1", "http://mcp.example.com"] {
            assert_eq!(private_host_reason(u), None, "{u}");
        }
        let b = [("backend.url", "http://10.0.0.1/mcp"), ("backend.oauth.token_url", "https://auth.example.com/t")];
        assert_eq!(private_backend_urls(&b), vec![("backend.url", "is a private address")]);
        let b = [
            ("backend.base_url", "http://0x7f.1/v1"),
            ("backend.async.status_endpoint", "http://[::ffff:a9fe:a9fe]/s"),
            ("backend.async.cancel_endpoint", "https://api.dify.ai/c"),
        ];
        assert_eq!(
            private_backend_urls(&b),
            vec![
                ("backend.base_url", "is a loopback address"),
                ("backend.async.status_endpoint", "is a link-local or cloud-metadata address"),
            ]
        );
    }

    /// Spellings of non-public hosts, what the URL standard makes of each (the host it
    /// connects to, `None` when it refuses the URL), and why the guard refuses it.
    const REFUSED: &[(&str, Option<&str>, &str)] = &[
        // IPv4 loopback as one integer, in hex, octal, shortened, padded.
        ("http://2130706433/", Some("127.0.0.1"), "is a loopback address"),
        ("http://0x7f000001/", Some("127.0.0.1"), "is a loopback address"),
        ("http://0x7f000001./", Some("127.0.0.1"), "is a loopback address"),
        ("http://017700000001/", Some("127.0.0.1"), "is a loopback address"),
        ("http://0177.0.0.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://0x7f.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://0x7F.0X0.0.01/", Some("127.0.0.1"), "is a loopback address"),
        ("http://127.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://127.0.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://00000000000000000000177.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://127.000000000000000.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://127.255.255.254:9000/", Some("127.255.255.254"), "is a loopback address"),
        ("http://0/", Some("0.0.0.0"), "is an unspecified address"),
        ("http://0.0.0.0/", Some("0.0.0.0"), "is an unspecified address"),
        // IPv6 loopback long-hand, and IPv4 loopback inside IPv6.
        ("http://[0:0:0:0:0:0:0:1]/", Some("[::1]"), "is a loopback address"),
        ("http://[0000:0000:0000:0000:0000:0000:0000:0001]/", Some("[::1]"), "is a loopback address"),
        ("http://[::0:1]/", Some("[::1]"), "is a loopback address"),
        ("http://[::]/", Some("[::]"), "is an unspecified address"),
        ("http://[::ffff:127.0.0.1]/", Some("[::ffff:7f00:1]"), "is a loopback address"),
        ("http://[::ffff:7f00:1]/", Some("[::ffff:7f00:1]"), "is a loopback address"),
        ("http://[::127.0.0.1]/", Some("[::7f00:1]"), "is a loopback address"),
        ("http://[::ffff:0:7f00:1]/", Some("[::ffff:0:7f00:1]"), "is a loopback address"),
        ("http://[2002:7f00:1::]/", Some("[2002:7f00:1::]"), "is a loopback address"),
        ("https://[::ffff:10.0.0.1]:8443/", Some("[::ffff:a00:1]"), "is a private address"),
        // Percent-encoded spellings the host parser maps.
        ("http://%31%32%37.0.0.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://127%2e0%2e0%2e1/", Some("127.0.0.1"), "is a loopback address"),
        ("http://LOCALHOST./", Some("localhost."), "is a loopback name"),
        ("http://localhost%2e/", Some("localhost."), "is a loopback name"),
        ("http://%6c%6f%63%61%6c%68%6f%73%74/", Some("localhost"), "is a loopback name"),
        // Full-width and other Unicode spellings: the standard maps them to 127.0.0.1 and
        // localhost; the url crate here has no Unicode IDNA tables (idna_adapter 1.0, see
        // Cargo.toml), so to it a non-ASCII host is no valid URL, which is refused too.
        ("http://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}/", None, "is not a valid URL"),
        ("http://127\u{3002}0\u{3002}0\u{3002}1/", None, "is not a valid URL"),
        ("http://127\u{ff0e}0\u{ff0e}0\u{ff0e}1/", None, "is not a valid URL"),
        ("http://localhost\u{3002}/", None, "is not a valid URL"),
        (
            "http://\u{24db}\u{24de}\u{24d2}\u{24d0}\u{24db}\u{24d7}\u{24de}\u{24e2}\u{24e3}/",
            None,
            "is not a valid URL",
        ),
        ("http://lo\u{ad}calhost/", None, "is not a valid URL"),
        ("http://LOCAL\u{ad}HOST/", None, "is not a valid URL"),
        ("http://loc\talhost/", Some("localhost"), "is a loopback name"),
        ("http://api.LocalHost:8080/", Some("api.localhost"), "is a loopback name"),
        // Backslash, slash and whitespace tricks: the standard treats `\` as `/` in http(s).
        ("http://127.0.0.1\\@evil.com/", Some("127.0.0.1"), "is a loopback address"),
        ("http://127.0.0.1\\evil.com", Some("127.0.0.1"), "is a loopback address"),
        ("http:\\\\127.0.0.1\\", Some("127.0.0.1"), "is a loopback address"),
        ("http:/\\127.0.0.1/", Some("127.0.0.1"), "is a loopback address"),
        ("http:127.0.0.1/", Some("127.0.0.1"), "is a loopback address"),
        (" http://127.0.0.1/ ", Some("127.0.0.1"), "is a loopback address"),
        ("http://evil.com@127.0.0.1/", Some("127.0.0.1"), "is a loopback address"),
        // Cloud metadata.
        ("http://169.254.169.254./", Some("169.254.169.254"), "is a link-local or cloud-metadata address"),
        ("http://0251.0376.0251.0376/", Some("169.254.169.254"), "is a link-local or cloud-metadata address"),
        ("http://169.254.43518/", Some("169.254.169.254"), "is a link-local or cloud-metadata address"),
        ("http://2852039166/", Some("169.254.169.254"), "is a link-local or cloud-metadata address"),
        ("http://0xa9.0xfe.0xa9.0xfe/", Some("169.254.169.254"), "is a link-local or cloud-metadata address"),
        ("http://[::ffff:a9fe:a9fe]/", Some("[::ffff:a9fe:a9fe]"), "is a link-local or cloud-metadata address"),
        ("http://[::a9fe:a9fe]/", Some("[::a9fe:a9fe]"), "is a link-local or cloud-metadata address"),
        ("http://[64:ff9b::a9fe:a9fe]/", Some("[64:ff9b::a9fe:a9fe]"), "is a link-local or cloud-metadata address"),
        (
            "http://metadata.google.internal./",
            Some("metadata.google.internal."),
            "is an internal or cloud-metadata name",
        ),
        ("http://METADATA.GOOGLE.INTERNAL/", Some("metadata.google.internal"), "is an internal or cloud-metadata name"),
        // A zone id is not URL syntax: the standard refuses the URL.
        ("http://[fe80::1%25eth0]/", None, "is not a valid URL"),
        ("http://../", Some(".."), "is missing"),
        ("http://127.0.0.1%09/", None, "is not a valid URL"),
        // The other non-public IPv4 ranges.
        ("http://10.0.0.1/", Some("10.0.0.1"), "is a private address"),
        ("http://012.1/", Some("10.0.0.1"), "is a private address"),
        ("http://172.16.0.1/", Some("172.16.0.1"), "is a private address"),
        ("http://0xac1fffff/", Some("172.31.255.255"), "is a private address"),
        ("http://3232235521/", Some("192.168.0.1"), "is a private address"),
        ("http://100.64.0.1/", Some("100.64.0.1"), "is a carrier-grade NAT address"),
        ("http://100.127.255.255/", Some("100.127.255.255"), "is a carrier-grade NAT address"),
        ("http://192.0.0.1/", Some("192.0.0.1"), "is an IETF protocol-assignment address"),
        ("http://192.0.2.1/", Some("192.0.2.1"), "is a documentation address"),
        ("http://198.51.100.7/", Some("198.51.100.7"), "is a documentation address"),
        ("http://203.0.113.9/", Some("203.0.113.9"), "is a documentation address"),
        ("http://198.18.0.1/", Some("198.18.0.1"), "is a benchmarking address"),
        ("http://198.19.255.1/", Some("198.19.255.1"), "is a benchmarking address"),
        ("http://224.0.0.1/", Some("224.0.0.1"), "is a multicast address"),
        ("http://239.255.255.250/", Some("239.255.255.250"), "is a multicast address"),
        ("http://240.0.0.1/", Some("240.0.0.1"), "is a reserved address"),
        ("http://255.255.255.255/", Some("255.255.255.255"), "is the broadcast address"),
        ("http://0xffffffff/", Some("255.255.255.255"), "is the broadcast address"),
        // The other non-public IPv6 ranges.
        ("http://[fd00::1]/", Some("[fd00::1]"), "is a private (unique local) address"),
        ("http://[FC00::1]/", Some("[fc00::1]"), "is a private (unique local) address"),
        ("http://[FE80::1]/", Some("[fe80::1]"), "is a link-local address"),
        ("http://[febf::1]/", Some("[febf::1]"), "is a link-local address"),
        ("http://[fec0::1]/", Some("[fec0::1]"), "is a site-local address"),
        ("http://[ff02::1]/", Some("[ff02::1]"), "is a multicast address"),
        ("http://[2001:db8::1]/", Some("[2001:db8::1]"), "is a documentation address"),
        ("http://[100::1]/", Some("[100::1]"), "is a discard-only address"),
        ("http://[64:ff9b:1::1]/", Some("[64:ff9b:1::1]"), "is a local-use NAT64 address"),
    ];

    /// Public hosts, spelled oddly too, and what the standard makes of each.
    const PASSED: &[(&str, &str)] = &[
        ("https://api.dify.ai/v1", "api.dify.ai"),
        ("http://8.8.8.8/", "8.8.8.8"),
        ("http://134744072/", "8.8.8.8"),
        ("http://0x08080808/", "8.8.8.8"),
        ("http://1.1/", "1.0.0.1"),
        ("http://11.0.0.1/", "11.0.0.1"),
        ("http://172.15.255.255/", "172.15.255.255"),
        ("http://172.32.0.1/", "172.32.0.1"),
        ("http://100.63.255.255/", "100.63.255.255"),
        ("http://100.128.0.1/", "100.128.0.1"),
        ("http://169.255.0.1/", "169.255.0.1"),
        ("http://192.0.3.1/", "192.0.3.1"),
        ("http://198.20.0.1/", "198.20.0.1"),
        ("http://223.255.255.255/", "223.255.255.255"),
        ("http://[2606:4700:4700::1111]/", "[2606:4700:4700::1111]"),
        ("http://[::ffff:8.8.8.8]/", "[::ffff:808:808]"),
        ("http://[64:ff9b::808:808]/", "[64:ff9b::808:808]"),
        ("http://[2002:808:808::1]/", "[2002:808:808::1]"),
        ("http://[2001:db9::1]/", "[2001:db9::1]"),
        // The standard sends this one to evil.com (path `/@127.0.0.1/`), a public name.
        ("http://evil.com\\@127.0.0.1/", "evil.com"),
        ("http://evil.com#@127.0.0.1/", "evil.com"),
        ("http://evil.com?@127.0.0.1/", "evil.com"),
        // Public names, whatever they resolve to (a Worker cannot resolve DNS).
        ("http://127.0.0.1.nip.io/", "127.0.0.1.nip.io"),
        ("http://localhost.evil.com/", "localhost.evil.com"),
        ("http://internal.example.com/", "internal.example.com"),
        ("https://mcp.example.com:8443/x?y=1", "mcp.example.com"),
        // An internationalized name in its Punycode form (the Unicode form is refused: see
        // `non_ascii_host_names_are_refused`).
        ("https://xn--bcher-kva.example/", "xn--bcher-kva.example"),
        ("https://XN--BCHER-KVA.example/", "xn--bcher-kva.example"),
    ];

    #[test]
    fn refuses_every_spelling_of_a_non_public_host() {
        assert!(REFUSED.len() >= 40);
        for &(input, standard_host, why) in REFUSED {
            let parsed = Url::parse(input);
            assert_eq!(parsed.as_ref().ok().and_then(|u| u.host_str()), standard_host, "standard reading of {input:?}");
            assert_eq!(private_host_reason(input), Some(why), "{input:?}");
            let err = parse_outbound(input, &PrivateAllow::Nothing).unwrap_err();
            match standard_host {
                Some(_) if !input.contains('@') || input.contains('\\') => assert_eq!(
                    err,
                    format!("blocked: the backend host {why}; private backends need ALLOW_PRIVATE_BACKENDS=true"),
                    "{input:?}"
                ),
                Some(_) => assert!(err.contains("credentials"), "{input:?}: {err}"),
                None => assert!(err.starts_with("the backend URL is not a valid URL"), "{input:?}: {err}"),
            }
        }
    }

    #[test]
    fn passes_public_hosts() {
        for &(input, standard_host) in PASSED {
            assert_eq!(Url::parse(input).ok().as_ref().and_then(Url::host_str), Some(standard_host), "{input:?}");
            assert_eq!(private_host_reason(input), None, "{input:?}");
            let url = parse_outbound(input, &PrivateAllow::Nothing).unwrap();
            assert_eq!(url.host_str(), Some(standard_host), "{input:?}");
        }
    }

    #[test]
    fn outbound_refuses_what_fetch_must_not_get() {
        let nothing = PrivateAllow::Nothing;
        assert_eq!(parse_outbound("http://127.0.0.1:9/", &nothing).unwrap_err(), BLOCKED_LOOPBACK);
        let err = parse_outbound("ftp://example.com/", &nothing).unwrap_err();
        assert_eq!(err, "the backend URL must be an http:// or https:// URL");
        let err = parse_outbound("https://u:secret@example.com/", &nothing).unwrap_err();
        assert!(err.contains("credentials") && !err.contains("secret"), "{err}");
        let err = parse_outbound("https://exa mple.com/?key=secret", &nothing).unwrap_err();
        assert!(err.starts_with("the backend URL is not a valid URL") && !err.contains("secret"), "{err}");
        // What is fetched is the standard's serialization, whose host is the one judged.
        let url = parse_outbound("HTTP://Example.COM:80\\a\\..\\b?x=1", &nothing).unwrap();
        assert_eq!(url.as_str(), "http://example.com/b?x=1");
    }

    #[test]
    fn private_allow_settings() {
        assert_eq!(PrivateAllow::from_setting(None), PrivateAllow::Nothing);
        assert_eq!(PrivateAllow::from_setting(Some("")), PrivateAllow::Nothing);
        assert_eq!(PrivateAllow::from_setting(Some(" false ")), PrivateAllow::Nothing);
        assert_eq!(PrivateAllow::from_setting(Some("true")), PrivateAllow::Everything);
        assert_eq!(PrivateAllow::from_setting(Some("TRUE")), PrivateAllow::Everything);
        assert_eq!(
            PrivateAllow::from_setting(Some("127.1, LOCALHOST,[::1], ,not a host,0x0a000001")),
            PrivateAllow::Hosts(vec!["127.0.0.1".into(), "localhost".into(), "[::1]".into(), "10.0.0.1".into()])
        );

        let one = PrivateAllow::from_setting(Some("127.0.0.1"));
        assert!(one.allows("127.0.0.1") && !one.allows("127.0.0.2") && !one.allows("localhost"));
        assert_eq!(parse_outbound("http://127.0.0.1:9000/x", &one).unwrap().as_str(), "http://127.0.0.1:9000/x");
        assert!(parse_outbound("http://0x7f000001:9000/x", &one).is_ok(), "the same host, spelled otherwise");
        assert_eq!(parse_outbound("http://127.0.0.2/", &one).unwrap_err(), BLOCKED_LOOPBACK);
        assert!(parse_outbound("http://localhost/", &one).is_err());
        assert!(parse_outbound("http://[::1]/", &one).is_err());
        // Allowing a host does not allow credentials or other schemes.
        assert!(parse_outbound("http://u@127.0.0.1/", &one).is_err());

        let v6 = PrivateAllow::from_setting(Some("[::1]"));
        assert!(parse_outbound("http://[0:0::1]:8080/", &v6).is_ok());

        let all = PrivateAllow::Everything;
        for u in ["http://localhost/", "http://10.0.0.1/", "http://[fe80::1]/", "http://x.internal/"] {
            assert!(parse_outbound(u, &all).is_ok(), "{u}");
        }
        assert!(!PrivateAllow::Nothing.allows("example.com"));
    }

    #[test]
    fn host_for_display_shows_host_and_port_only() {
        for (input, shown) in [
            ("https://user:pw@api.example.com:8443/v1?key=secret#f", "api.example.com:8443"),
            ("https://api.example.com:443/x", "api.example.com"),
            ("http://[::1]:80/", "[::1]"),
            ("http://0x7f.1:9000/?k=v", "127.0.0.1:9000"),
            ("HTTP://API.EXAMPLE.COM", "api.example.com"),
            ("nonsense", "an invalid URL"),
            ("http://exa mple/?key=secret", "an invalid URL"),
            ("mailto:someone@example.com?subject=x", "a URL without a host"),
        ] {
            assert_eq!(host_for_display(input), shown, "{input}");
        }
    }

    #[test]
    fn scrub_urls_keeps_only_scheme_and_host() {
        for (input, scrubbed) in [
            (
                "fetch failed: https://user:pw@api.example.com/v1/run?key=secret.",
                "fetch failed: https://api.example.com.",
            ),
            ("(see http://h:8080/a?b=c)", "(see http://h:8080)"),
            ("a http://x/?k=1 and HTTPS://Y.example:443/p?q=2, done", "a http://x and https://y.example, done"),
            ("url=\"http://u:p@h/?k=s\"", "url=\"http://h\""),
            ("<http://a@b/c?d>", "<http://b>"),
            ("bad http://[oops/x?k=secret here", "bad http://(invalid URL) here"),
            ("bad https://u:p@exa%zzmple/?k=secret", "bad https://(invalid URL)"),
            ("no url here, only http: and https:/ and http:/x", "no url here, only http: and https:/ and http:/x"),
            ("\u{e9}\u{e8} http://h/?x=\u{e9}\tnext", "\u{e9}\u{e8} http://h\tnext"),
            ("xhttp://u@h/y", "xhttp://h"),
            ("http://a/http://u:p@b/?q", "http://a"),
            ("", ""),
        ] {
            assert_eq!(scrub_urls(input), scrubbed, "{input}");
        }
    }

    fn from() -> Url {
        Url::parse("https://api.example.com/v1/run?key=1").unwrap()
    }

    fn follow(status: u16, is_post: bool, location: &str) -> (String, bool, bool) {
        match follow_redirect(&from(), status, is_post, Some(location), 0, &PrivateAllow::Nothing) {
            Redirect::Follow { url, method_becomes_get, same_origin } => {
                (url.to_string(), method_becomes_get, same_origin)
            }
            Redirect::Refuse(why) => panic!("{status} {location}: {why}"),
        }
    }

    fn refused(status: u16, location: Option<&str>, hops: u8) -> String {
        match follow_redirect(&from(), status, true, location, hops, &PrivateAllow::Nothing) {
            Redirect::Refuse(why) => why,
            Redirect::Follow { url, .. } => panic!("{status} {location:?} followed to {url}"),
        }
    }

    #[test]
    fn redirect_statuses() {
        for s in [301, 302, 303, 307, 308] {
            assert!(is_redirect(s), "{s}");
        }
        for s in [200, 204, 300, 304, 305, 306, 309, 400] {
            assert!(!is_redirect(s), "{s}");
        }
    }

    #[test]
    fn redirects_followed() {
        let same = "https://api.example.com/v2/run".to_string();
        assert_eq!(follow(302, true, "/v2/run"), (same.clone(), true, true));
        assert_eq!(follow(301, true, "../v2/run"), (same.clone(), true, true));
        assert_eq!(follow(301, false, "/v2/run"), (same.clone(), false, true));
        assert_eq!(follow(302, false, "/v2/run"), (same.clone(), false, true));
        assert_eq!(follow(303, false, "/v2/run"), (same.clone(), true, true));
        assert_eq!(follow(307, true, "/v2/run"), (same.clone(), false, true));
        assert_eq!(follow(308, true, "https://API.example.com:443/v2/run"), (same, false, true));
        let other = follow(307, true, "https://other.example.com/x");
        assert_eq!(other, ("https://other.example.com/x".into(), false, false));
        // A downgrade to http is another origin: no credentials follow it.
        assert_eq!(follow(302, false, "http://api.example.com/v1"), ("http://api.example.com/v1".into(), false, false));
        assert_eq!(
            follow(302, false, "https://api.example.com:8443/"),
            ("https://api.example.com:8443/".into(), false, false)
        );
        assert_eq!(follow(302, false, "//cdn.example.com/x").0, "https://cdn.example.com/x");
        assert!(matches!(
            follow_redirect(&from(), 307, true, Some("/x"), MAX_REDIRECTS - 1, &PrivateAllow::Nothing),
            Redirect::Follow { .. }
        ));
    }

    #[test]
    fn redirects_refused() {
        assert_eq!(
            refused(307, Some("http://127.0.0.2:9000/admin?token=secret"), 0),
            "the backend redirected (HTTP 307) to 127.0.0.2:9000, which is blocked: the backend host is a loopback \
             address; private backends need ALLOW_PRIVATE_BACKENDS=true"
        );
        assert_eq!(
            refused(302, Some("//0x7f.1/"), 1),
            "the backend redirected (HTTP 302) to 127.0.0.1, which is blocked: the backend host is a loopback \
             address; private backends need ALLOW_PRIVATE_BACKENDS=true"
        );
        assert!(refused(301, Some("http://169.254.169.254/latest/meta-data/"), 0).contains("cloud-metadata"));
        assert!(refused(308, Some("http://[::ffff:10.0.0.1]/"), 0).contains("is a private address"));
        assert_eq!(refused(302, Some("/x"), MAX_REDIRECTS), "the backend redirected more than 3 times");
        assert_eq!(refused(302, None, 0), "the backend answered HTTP 302 without a Location");
        assert_eq!(refused(302, Some("  "), 0), "the backend answered HTTP 302 without a Location");
        assert_eq!(refused(303, Some("ftp://example.com/"), 0), "the backend redirected to a non-http(s) URL");
        assert_eq!(refused(303, Some("javascript:alert(1)"), 0), "the backend redirected to a non-http(s) URL");
        assert_eq!(
            refused(307, Some("http://[oops/?k=secret"), 0),
            "the backend redirected (HTTP 307) to an invalid URL"
        );
        assert_eq!(
            refused(307, Some("https://user:secret@example.com/"), 0),
            "the backend redirected (HTTP 307) to a URL with credentials"
        );
        assert_eq!(refused(200, Some("/x"), 0), "the backend answered HTTP 200, which is not a redirect");
    }

    #[test]
    fn redirect_to_an_allowed_private_host() {
        let allow = PrivateAllow::from_setting(Some("127.0.0.1"));
        let start = Url::parse("http://127.0.0.1:9000/a").unwrap();
        match follow_redirect(&start, 302, false, Some("/b"), 0, &allow) {
            Redirect::Follow { url, same_origin, .. } => {
                assert_eq!(url.as_str(), "http://127.0.0.1:9000/b");
                assert!(same_origin);
            }
            Redirect::Refuse(why) => panic!("{why}"),
        }
        match follow_redirect(&start, 302, false, Some("http://localhost:9000/b"), 0, &allow) {
            Redirect::Refuse(why) => assert!(why.contains("is a loopback name"), "{why}"),
            Redirect::Follow { url, .. } => panic!("followed to {url}"),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Property: the guard's verdict is an independent classification of the host the URL
    // standard yields, over thousands of generated spellings.

    use crate::pure::test_rng::Rng;

    /// Non-public IPv4 networks, as (network, prefix length).
    const V4_NON_PUBLIC: &[(u32, u32)] = &[
        (0x0000_0000, 8),
        (0x0a00_0000, 8),
        (0x6440_0000, 10),
        (0x7f00_0000, 8),
        (0xa9fe_0000, 16),
        (0xac10_0000, 12),
        (0xc000_0000, 24),
        (0xc000_0200, 24),
        (0xc0a8_0000, 16),
        (0xc612_0000, 15),
        (0xc633_6400, 24),
        (0xcb00_7100, 24),
        (0xe000_0000, 4),
        (0xf000_0000, 4),
    ];

    /// Non-public IPv6 networks that carry no IPv4 address.
    const V6_NON_PUBLIC: &[(u128, u32)] = &[
        (0xfc00 << 112, 7),
        (0xfe80 << 112, 10),
        (0xfec0 << 112, 10),
        (0xff00 << 112, 8),
        (0x2001_0db8 << 96, 32),
        (0x0100 << 112, 64),
        (0x0064_ff9b_0001 << 80, 48),
    ];

    fn in_v4(a: u32) -> bool {
        V4_NON_PUBLIC.iter().any(|&(net, len)| a >> (32 - len) == net >> (32 - len))
    }

    fn in_v6(a: u128) -> bool {
        let v4 = a as u32;
        let embeds_v4 = match a >> 32 {
            0 | 0xffff | 0xffff_0000 => true,
            high => high == 0x0064_ff9b << 64,
        };
        if embeds_v4 {
            return in_v4(v4);
        }
        if a >> 112 == 0x2002 {
            return in_v4((a >> 80) as u32);
        }
        V6_NON_PUBLIC.iter().any(|&(net, len)| a >> (128 - len) == net >> (128 - len))
    }

    /// The test's own verdict on a parsed URL: should the guard refuse its host?
    fn independently_private(u: &Url) -> bool {
        match u.host() {
            None => true,
            Some(Host::Domain(d)) => {
                let name = d.trim_end_matches('.');
                let labels: Vec<&str> = name.split('.').collect();
                name.is_empty() || matches!(labels.last(), Some(&"localhost") | Some(&"internal"))
            }
            Some(Host::Ipv4(a)) => in_v4(u32::from(a)),
            Some(Host::Ipv6(a)) => in_v6(u128::from(a)),
        }
    }

    fn gen_ipv4(rng: &mut Rng) -> u32 {
        if rng.chance(60) {
            let &(net, len) = rng.pick(V4_NON_PUBLIC);
            let size = 1u64 << (32 - len);
            // Inside the network, or just outside either end of it.
            let offset = match rng.below(4) {
                0 => size as i64,
                1 => -1,
                _ => rng.below(size) as i64,
            };
            (net as i64).wrapping_add(offset) as u32
        } else if rng.chance(10) {
            u32::MAX
        } else {
            rng.next_u64() as u32
        }
    }

    /// `n` as the IPv4 parser reads numbers: decimal, 0x-hex or 0-octal, with padding.
    fn number(rng: &mut Rng, n: u64) -> String {
        match rng.below(4) {
            0 => {
                let x = if rng.chance(50) { "0x" } else { "0X" };
                let digits = if rng.chance(50) { format!("{n:x}") } else { format!("{n:X}") };
                format!("{x}{}{digits}", "0".repeat(rng.below(3) as usize))
            }
            1 => format!("0{}{n:o}", "0".repeat(rng.below(3) as usize)),
            _ => n.to_string(),
        }
    }

    fn ipv4_spelling(rng: &mut Rng, a: u32) -> String {
        let [b0, b1, b2, b3] = a.to_be_bytes().map(u64::from);
        let parts: Vec<u64> = match rng.below(5) {
            0 => vec![u64::from(a)],
            1 => vec![b0, u64::from(a) & 0xff_ffff],
            2 => vec![b0, b1, u64::from(a) & 0xffff],
            _ => vec![b0, b1, b2, b3],
        };
        let mut s: Vec<String> = parts.iter().map(|&p| number(rng, p)).collect();
        if rng.chance(3) {
            // Out of range or one part too many: the standard refuses these.
            let n = rng.below(300);
            s.push(number(rng, n));
        }
        s.join(".")
    }

    fn gen_ipv6(rng: &mut Rng) -> u128 {
        let v4 = u128::from(gen_ipv4(rng));
        let random = u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64());
        match rng.below(14) {
            0 => 1,
            1 => 0,
            2 => 0xffff << 32 | v4,
            3 => 0xffff_0000 << 32 | v4,
            4 => v4,
            5 => 0x0064_ff9b << 96 | v4,
            6 => 0x2002 << 112 | v4 << 80 | (random & 0xffff_ffff_ffff),
            7 => {
                let &(net, len) = rng.pick(V6_NON_PUBLIC);
                net | (random >> len)
            }
            8 => 0x2606_4700 << 96 | (random >> 32),
            9 => 0x0064_ff9b << 96 | (random >> 32) & (0xffff << 32) | v4,
            _ => random,
        }
    }

    fn ipv6_spelling(rng: &mut Rng, a: u128) -> String {
        let ip = Ipv6Addr::from(a);
        if rng.chance(30) {
            return format!("[{ip}]");
        }
        let segs = ip.segments();
        let upper = rng.chance(30);
        let mut groups: Vec<String> = segs
            .iter()
            .map(|g| {
                let pad = rng.below(5) as usize;
                let g = format!("{g:0pad$x}");
                if upper {
                    g.to_uppercase()
                } else {
                    g
                }
            })
            .collect();
        if rng.chance(30) {
            groups.truncate(6);
            let v4 = Ipv4Addr::from(a as u32);
            groups.push(v4.to_string());
        }
        // Compress one run of zero groups (not necessarily the longest) to "::".
        let zero = |g: &String| g.trim_start_matches('0').is_empty();
        let starts: Vec<usize> = (0..groups.len()).filter(|&i| zero(&groups[i])).collect();
        if !starts.is_empty() && rng.chance(60) {
            let i = *rng.pick(&starts);
            let mut j = i;
            while j < groups.len() && zero(&groups[j]) {
                j += 1;
            }
            let head = groups[..i].join(":");
            let tail = groups[j..].join(":");
            return format!("[{head}::{tail}]");
        }
        let zone = if rng.chance(3) { "%25eth0" } else { "" };
        format!("[{}{zone}]", groups.join(":"))
    }

    fn domain(rng: &mut Rng) -> String {
        const LABELS: &[&str] = &[
            "localhost",
            "internal",
            "metadata",
            "google",
            "api",
            "example",
            "com",
            "io",
            "nip",
            "127",
            "0x7f",
            "a-b",
        ];
        const LAST: &[&str] = &["localhost", "internal", "com", "example", "io", "localhost.", "internal.", "com."];
        let mut labels: Vec<String> = (0..rng.below(3)).map(|_| rng.pick(LABELS).to_string()).collect();
        if rng.chance(20) {
            let random: String = (0..1 + rng.below(6)).map(|_| *rng.pick(&['a', 'z', 'q', '0', '9', '-'])).collect();
            labels.push(random);
        }
        labels.push(rng.pick(LAST).to_string());
        labels.join(".")
    }

    /// Respells a host the way the URL standard's host parser maps back: case, percent-encoding,
    /// full-width and ideographic characters, soft hyphens, trailing dots.
    fn disguise(rng: &mut Rng, host: &str) -> String {
        let mut out = String::new();
        for c in host.chars() {
            match rng.below(40) {
                0 | 1 => out.push(c.to_ascii_uppercase()),
                2 if c.is_ascii() => {
                    let hex = if rng.chance(50) { format!("%{:02x}", c as u32) } else { format!("%{:02X}", c as u32) };
                    out.push_str(&hex);
                }
                3 if c.is_ascii_digit() => out.push(char::from_u32(0xff10 + (c as u32 - '0' as u32)).unwrap()),
                3 if c.is_ascii_lowercase() => out.push(char::from_u32(0xff41 + (c as u32 - 'a' as u32)).unwrap()),
                3 if c == '.' => out.push(*rng.pick(&['\u{3002}', '\u{ff0e}', '\u{ff61}'])),
                4 => {
                    out.push(c);
                    out.push('\u{ad}');
                }
                _ => out.push(c),
            }
        }
        if rng.chance(10) && !out.ends_with(']') {
            out.push('.');
        }
        out
    }

    fn gen_url(rng: &mut Rng) -> String {
        let host = match rng.below(10) {
            0..=3 => {
                let a = gen_ipv4(rng);
                ipv4_spelling(rng, a)
            }
            4..=6 => {
                let a = gen_ipv6(rng);
                ipv6_spelling(rng, a)
            }
            _ => domain(rng),
        };
        let host = if rng.chance(40) { disguise(rng, &host) } else { host };
        let scheme = *rng.pick(&[
            "http://",
            "https://",
            "http://",
            "https://",
            "HTTP://",
            "http:\\\\",
            "http:/\\",
            "http:",
            "ftp://",
            "ws://",
        ]);
        let before = *rng.pick(&["", "", "", "", "user:pw@", "u@", "@", "evil.com\\@", "evil.com@"]);
        let after = *rng.pick(&[
            "",
            "/",
            "/v1/run",
            ":8080/",
            ":0/",
            ":65536/",
            "\\@evil.com/",
            "@evil.com/",
            "?q=1",
            "#f",
            "\t/",
            ".",
        ]);
        let lead = if rng.chance(5) { " \t" } else { "" };
        format!("{lead}{scheme}{before}{host}{after}")
    }

    #[test]
    fn guard_matches_an_independent_classification_of_the_standard_host() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut private, mut public, mut invalid) = (0, 0, 0);
        for _ in 0..20_000 {
            let s = gen_url(&mut rng);
            let parsed = Url::parse(&s);
            let verdict = private_host_reason(&s);
            let Ok(u) = parsed else {
                invalid += 1;
                assert_eq!(verdict, Some("is not a valid URL"), "{s:?}");
                assert!(parse_outbound(&s, &PrivateAllow::Everything).is_err(), "{s:?}");
                continue;
            };
            let expect_private = independently_private(&u);
            if expect_private {
                private += 1;
            } else {
                public += 1;
            }
            assert_eq!(verdict.is_some(), expect_private, "{s:?} parsed as {:?}: {verdict:?}", u.host());
            let fetchable = matches!(u.scheme(), "http" | "https") && u.username().is_empty() && u.password().is_none();
            for (allow, refuses_private) in [
                (PrivateAllow::Nothing, true),
                (PrivateAllow::Everything, false),
                (PrivateAllow::Hosts(u.host_str().into_iter().map(String::from).collect()), false),
            ] {
                let out = parse_outbound(&s, &allow);
                assert_eq!(out.is_ok(), fetchable && !(refuses_private && expect_private), "{s:?} {allow:?}: {out:?}");
                if let Ok(o) = out {
                    assert_eq!(o.host_str(), u.host_str(), "{s:?}");
                    assert_eq!(o, u, "{s:?}");
                }
            }
            let shown = host_for_display(&s);
            assert!(!shown.contains(['@', '?', '/']), "{s:?} shown as {shown:?}");
        }
        // The generator reaches all three outcomes often, not by accident.
        assert!(private > 4_000 && public > 4_000 && invalid > 1_000, "{private} {public} {invalid}");
    }

    /// A stored backend URL's host must be ASCII (its Punycode `xn--` form passes), written
    /// or percent-encoded: the runtime's parser would map a Unicode name, the host's url crate
    /// (no IDNA tables, for the bundle of the worker crate that depends on it) refuses it, and a
    /// stored URL means the same to both. At call time each parser judges its own reading: the
    /// runtime the Punycode name it maps to, the url crate nothing (not a URL).
    #[test]
    fn non_ascii_host_names_are_refused() {
        for s in ["https://b\u{fc}cher.example/", "https://ex%C3%A4mple.com/", "http://M\u{fc}nchen.de:8080/x"] {
            let want = "has a host name with non-ASCII characters; write it in its Punycode form (xn--…)";
            assert_eq!(check_backend_url(s), Err(want), "{s:?}");
            assert_eq!(private_host_reason(s), Some("is not a valid URL"), "{s:?}");
            assert!(parse_outbound(s, &PrivateAllow::Everything).is_err(), "{s:?}");
        }
        assert_eq!(
            check_backend_url("https://example.com/caf%C3%A9?q=%E2%82%AC"),
            Ok(()),
            "only the host must be ASCII"
        );
        assert_eq!(check_backend_url("https://xn--bcher-kva.example/"), Ok(()));
        assert_eq!(check_backend_url("http://xn--mnchen-3ya.de:8080/x"), Ok(()));
    }

    #[test]
    fn an_empty_host_after_the_scheme_is_named() {
        assert_eq!(check_backend_url("http://:80/"), Err("has no host"));
        assert_eq!(check_backend_url("https://:443/x"), Err("has no host"));
    }
}
