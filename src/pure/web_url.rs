//! A URL as the WHATWG URL Standard parses it, the one way Flowgate reads a URL.
//!
//! In the Worker the runtime's own `URL` parses (`worker/url.mjs`): the parser the runtime's
//! `fetch` uses, so the backend URL guard (`pure::url`) judges exactly the URL that is fetched,
//! and the bundle carries no second parser (the `url` crate was 14.5 KiB of it, gzip). On the host
//! (`cargo test`, the benches, the fuzz target) the `url` crate parses, which implements the same
//! standard. Either parser hands back the URL's serialization (`href`), and [`Url`] reads its
//! parts from that canonical text, so everything past the parse is the same code in both.

use std::borrow::Cow;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A parsed URL: its serialization and where each part of it lies.
#[derive(Clone, PartialEq, Eq)]
pub struct Url {
    href: String,
    /// The `:` after the scheme.
    scheme_end: u32,
    username: (u32, u32),
    /// After the `:` in the userinfo, when there is one.
    password: Option<(u32, u32)>,
    /// The host as serialized (an IPv6 address in brackets); `None` without an authority.
    host: Option<(u32, u32)>,
    port: Option<u16>,
    path_start: u32,
    /// The `?`, when there is a query.
    query_start: Option<u32>,
    /// The `#`, when there is a fragment.
    fragment_start: Option<u32>,
}

/// Why a text is not a URL, read from the text itself (the runtime's parser only says "invalid").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    EmptyHost,
    InvalidPort,
    /// A host that is not a domain, an IPv4 address or an IPv6 address the standard accepts.
    InvalidHost,
    Invalid,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::EmptyHost => "empty host",
            ParseError::InvalidPort => "invalid port number",
            ParseError::InvalidHost => "invalid host",
            ParseError::Invalid => "not a URL",
        })
    }
}

/// A URL's host, as `url::Host` has it: a domain (or an opaque host) or an IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host<'a> {
    Domain(&'a str),
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
}

/// A URL's origin. Two opaque origins (any scheme but http, https, ws, wss and ftp) are never
/// the same origin, as the standard says.
#[derive(Debug, Clone)]
pub struct Origin(Option<String>);

impl Origin {
    /// `scheme://host[:port]`, or `null` for an opaque origin.
    pub fn ascii_serialization(&self) -> String {
        self.0.clone().unwrap_or_else(|| "null".into())
    }
}

impl PartialEq for Origin {
    fn eq(&self, other: &Origin) -> bool {
        matches!((&self.0, &other.0), (Some(a), Some(b)) if a == b)
    }
}

impl Url {
    pub fn parse(input: &str) -> Result<Url, ParseError> {
        parser::parse(input, None).map(Url::from_href).ok_or_else(|| why_invalid(input))
    }

    /// `input` resolved against this URL, as a link or a `Location` header is.
    pub fn join(&self, input: &str) -> Result<Url, ParseError> {
        parser::parse(input, Some(&self.href)).map(Url::from_href).ok_or_else(|| why_invalid(input))
    }

    /// Reads the parts of a serialization (an `href` as a parser wrote it): `scheme:`, then
    /// `//userinfo@host:port` when there is an authority, the path, `?query`, `#fragment`. In
    /// that text every `@`, `:`, `/`, `?` and `#` that is not a delimiter is percent-encoded
    /// (an IPv6 host's colons are inside its brackets), so the first of each delimits.
    fn from_href(href: String) -> Url {
        let at = |i: usize| i as u32;
        let len = href.len();
        let scheme_end = href.find(':').unwrap_or(len);
        let fragment_start = href.find('#');
        let before_fragment = fragment_start.unwrap_or(len);
        let mut url = Url {
            href: String::new(),
            scheme_end: at(scheme_end),
            username: (at(scheme_end + 1), at(scheme_end + 1)),
            password: None,
            host: None,
            port: None,
            path_start: at((scheme_end + 1).min(len)),
            query_start: None,
            fragment_start: fragment_start.map(at),
        };
        let rest = href.get(scheme_end + 1..before_fragment).unwrap_or("");
        let mut path_start = scheme_end + 1;
        if let Some(authority_and_more) = rest.strip_prefix("//") {
            let start = scheme_end + 3;
            let end = start + authority_and_more.find(['/', '?']).unwrap_or(authority_and_more.len());
            let authority = &href[start..end];
            let host_start = match authority.rfind('@') {
                Some(i) => {
                    let userinfo = &authority[..i];
                    match userinfo.find(':') {
                        Some(c) => {
                            url.username = (at(start), at(start + c));
                            url.password = Some((at(start + c + 1), at(start + i)));
                        }
                        None => url.username = (at(start), at(start + i)),
                    }
                    start + i + 1
                }
                None => {
                    url.username = (at(start), at(start));
                    start
                }
            };
            let host_and_port = &href[host_start..end];
            let host_len = match host_and_port.strip_prefix('[') {
                Some(v6) => v6.find(']').map_or(host_and_port.len(), |i| i + 2),
                None => host_and_port.find(':').unwrap_or(host_and_port.len()),
            };
            url.host = Some((at(host_start), at(host_start + host_len)));
            url.port = host_and_port.get(host_len + 1..).and_then(|p| p.parse().ok());
            path_start = end;
        }
        url.path_start = at(path_start);
        url.query_start = href.get(path_start..before_fragment).and_then(|s| s.find('?')).map(|i| at(path_start + i));
        url.href = href;
        url
    }

    fn part(&self, (start, end): (u32, u32)) -> &str {
        self.href.get(start as usize..end as usize).unwrap_or("")
    }

    pub fn as_str(&self) -> &str {
        &self.href
    }

    pub fn scheme(&self) -> &str {
        self.part((0, self.scheme_end))
    }

    pub fn username(&self) -> &str {
        self.part(self.username)
    }

    /// The password, when the userinfo has a non-empty one.
    pub fn password(&self) -> Option<&str> {
        self.password.map(|p| self.part(p)).filter(|p| !p.is_empty())
    }

    /// The host as serialized: lowercase ASCII (IDNA applied), an IPv4 address in dotted
    /// decimal, an IPv6 address in brackets. `None` without a host (`mailto:`, `file:///`).
    pub fn host_str(&self) -> Option<&str> {
        self.host.map(|h| self.part(h)).filter(|h| !h.is_empty())
    }

    /// The host, with an IP address read as one. Only the special schemes have domains and
    /// IPv4 addresses; any other scheme's host is opaque (a `Domain`, as the `url` crate says).
    pub fn host(&self) -> Option<Host<'_>> {
        let h = self.host_str()?;
        if let Some(v6) = h.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6.parse().ok().map(Host::Ipv6);
        }
        if self.is_special() {
            if let Ok(v4) = h.parse() {
                return Some(Host::Ipv4(v4));
            }
        }
        Some(Host::Domain(h))
    }

    /// The port, unless it is the scheme's default (a parser leaves a default port out).
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    pub fn path(&self) -> &str {
        let end = self.query_start.or(self.fragment_start).unwrap_or(self.href.len() as u32);
        self.part((self.path_start, end))
    }

    pub fn query(&self) -> Option<&str> {
        let end = self.fragment_start.unwrap_or(self.href.len() as u32);
        self.query_start.map(|q| self.part((q + 1, end)))
    }

    pub fn fragment(&self) -> Option<&str> {
        self.fragment_start.map(|f| self.part((f + 1, self.href.len() as u32)))
    }

    /// The query's `application/x-www-form-urlencoded` name and value pairs, decoded.
    pub fn query_pairs(&self) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
        self.query().unwrap_or("").split('&').filter(|p| !p.is_empty()).map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (form_decode(name), form_decode(value))
        })
    }

    pub fn origin(&self) -> Origin {
        let tuple = matches!(self.scheme(), "http" | "https" | "ws" | "wss" | "ftp");
        Origin(match (tuple, self.host_str()) {
            (true, Some(host)) => Some(match self.port {
                Some(port) => format!("{}://{host}:{port}", self.scheme()),
                None => format!("{}://{host}", self.scheme()),
            }),
            _ => None,
        })
    }

    fn is_special(&self) -> bool {
        matches!(self.scheme(), "http" | "https" | "ws" | "wss" | "ftp" | "file")
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.href)
    }
}

impl fmt::Debug for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Url({:?})", self.href)
    }
}

/// The host `input` stands for (`127.1` is `127.0.0.1`, `LocalHost` is `localhost`), as
/// [`Url::host_str`] serializes it, when `input` is a host and nothing more.
pub fn parse_host(input: &str) -> Option<String> {
    let port_or_more = |c: char| matches!(c, '/' | '\\' | '?' | '#' | '@') || c.is_whitespace() || c.is_control();
    let bracketed = input.starts_with('[') && input.ends_with(']');
    if input.is_empty() || input.contains(port_or_more) || (input.contains(':') && !bracketed) {
        return None;
    }
    let url = Url::parse(&format!("http://{input}/")).ok()?;
    (url.path() == "/" && url.port().is_none()).then(|| url.host_str().map(String::from)).flatten()
}

/// Why `input` did not parse, from its text: a parser that fails says nothing more useful, and
/// the two parsers (see the module comment) word their failures differently.
fn why_invalid(input: &str) -> ParseError {
    let Some((_, rest)) = input.trim().split_once("://") else { return ParseError::Invalid };
    let authority = &rest[..rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len())];
    let host_and_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port = match host_and_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(_, after)| after.strip_prefix(':')),
        None => Some(host_and_port.split_once(':').map(|(_, p)| p)),
    };
    match port {
        Some(Some(p)) if !p.is_empty() && (!p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err()) => {
            ParseError::InvalidPort
        }
        _ if host_and_port.is_empty() || host_and_port.starts_with(':') => ParseError::EmptyHost,
        _ => ParseError::InvalidHost,
    }
}

/// `+` as a space, then percent-decoding; bytes that are not UTF-8 become U+FFFD.
fn form_decode(s: &str) -> Cow<'_, str> {
    if !s.contains(['+', '%']) {
        return Cow::Borrowed(s);
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// The parser: the runtime's `URL` in the Worker.
#[cfg(target_arch = "wasm32")]
mod parser {
    use wasm_bindgen::prelude::wasm_bindgen;

    #[wasm_bindgen(module = "/worker/url.mjs")]
    extern "C" {
        #[wasm_bindgen(js_name = parseUrl)]
        fn parse_url(input: &str, base: Option<&str>) -> Option<String>;
    }

    pub fn parse(input: &str, base: Option<&str>) -> Option<String> {
        parse_url(input, base)
    }
}

/// The parser: the `url` crate on the host.
#[cfg(not(target_arch = "wasm32"))]
mod parser {
    pub fn parse(input: &str, base: Option<&str>) -> Option<String> {
        let url = match base {
            Some(base) => url::Url::parse(base).ok()?.join(input),
            None => url::Url::parse(input),
        };
        url.ok().map(String::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spellings across every part of a URL: userinfo, IPv4 and IPv6 hosts, ports (default and
    /// not), paths, queries and fragments with delimiters inside them, non-special schemes.
    const CORPUS: &[&str] = &[
        "http://example.com",
        "HTTPS://User:Pa%3Ass@Example.COM:8443/a/b/../c?x=1&y=2#frag",
        "http://u@example.com/",
        "http://:pw@example.com/",
        "http://u:@example.com/",
        "http://a:b:c@example.com/",
        "http://a@b@example.com/",
        "https://example.com:443/",
        "http://example.com:80/x",
        "http://example.com:8080",
        "http://0x7f.1/",
        "http://127.1:9000/p?q#f",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]:8080/a",
        "http://[2001:db8::1]:443/",
        "http://127.0.0.1\\@evil.com/",
        "http://example.com/a?b?c#d#e",
        "http://example.com/?",
        "http://example.com/#",
        "http://example.com/a%3Fb%23c?%26=%3D",
        "http://example.com?only",
        "http://example.com#only",
        "http://example.com/p@th:x",
        "ws://example.com/socket",
        "ftp://example.com:21/file",
        "file:///etc/passwd",
        "file://host/share",
        "mailto:someone@example.com?subject=hi",
        "foo://opaque.host:99/path?q#f",
        "foo://1.2.3.4/",
        "foo:///x",
        "data:text/plain,hello",
        "http://xn--bcher-kva.example/",
        "http://localhost./",
        "http://%6c%6f%63%61%6c%68%6f%73%74/",
    ];

    #[test]
    fn every_part_reads_as_the_url_crate_reads_it() {
        for input in CORPUS {
            let want = url::Url::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            let got = Url::parse(input).unwrap();
            assert_eq!(got.as_str(), want.as_str(), "{input:?}");
            assert_eq!(got.scheme(), want.scheme(), "{input:?}");
            assert_eq!(got.username(), want.username(), "{input:?}");
            assert_eq!(got.password(), want.password(), "{input:?}");
            assert_eq!(
                got.host_str().filter(|h| !h.is_empty()),
                want.host_str().filter(|h| !h.is_empty()),
                "{input:?}"
            );
            let want_host = want.host().map(|h| match h {
                url::Host::Domain(d) => Host::Domain(d),
                url::Host::Ipv4(a) => Host::Ipv4(a),
                url::Host::Ipv6(a) => Host::Ipv6(a),
            });
            assert_eq!(got.host(), want_host.filter(|h| *h != Host::Domain("")), "{input:?}");
            assert_eq!(got.port(), want.port(), "{input:?}");
            assert_eq!(got.path(), want.path(), "{input:?}");
            assert_eq!(got.query(), want.query(), "{input:?}");
            assert_eq!(got.fragment(), want.fragment(), "{input:?}");
            assert_eq!(got.origin().ascii_serialization(), want.origin().ascii_serialization(), "{input:?}");
            let pairs: Vec<(String, String)> =
                got.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
            let want_pairs: Vec<(String, String)> =
                want.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
            assert_eq!(pairs, want_pairs, "{input:?}");
        }
    }

    #[test]
    fn a_reference_resolves_against_the_url() {
        let base = Url::parse("https://api.example.com/v1/run?key=1").unwrap();
        for (reference, want) in [
            ("/login", "https://api.example.com/login"),
            ("next?page=2", "https://api.example.com/v1/next?page=2"),
            ("//other.example/x", "https://other.example/x"),
            ("http://127.0.0.1:9/", "http://127.0.0.1:9/"),
            ("?q", "https://api.example.com/v1/run?q"),
        ] {
            assert_eq!(base.join(reference).map(|u| u.to_string()), Ok(want.to_string()), "{reference:?}");
        }
        assert_eq!(base.join("http://[::1/").err(), Some(ParseError::InvalidHost));
    }

    #[test]
    fn origins_compare_as_the_standard_says() {
        let o = |s: &str| Url::parse(s).unwrap().origin();
        assert_eq!(o("https://a.example/x"), o("https://A.example:443/y?z"));
        assert_ne!(o("https://a.example/"), o("http://a.example/"));
        assert_ne!(o("https://a.example/"), o("https://a.example:8443/"));
        assert_eq!(o("http://a.example:8080/").ascii_serialization(), "http://a.example:8080");
        // Opaque origins are never the same, not even as themselves.
        assert_ne!(o("mailto:x@y"), o("mailto:x@y"));
        assert_eq!(o("mailto:x@y").ascii_serialization(), "null");
    }

    #[test]
    fn a_failure_is_named_from_the_text() {
        for (input, want) in [
            ("http://example.com:99999/", ParseError::InvalidPort),
            ("http://example.com:8o/", ParseError::InvalidPort),
            ("http://[::1]:x/", ParseError::InvalidPort),
            ("http://:80/", ParseError::EmptyHost),
            ("http://user@/", ParseError::EmptyHost),
            ("http://exa mple.com/", ParseError::InvalidHost),
            ("http://[::1/", ParseError::InvalidHost),
            ("http://999.1.1.1/", ParseError::InvalidHost),
            ("not a url", ParseError::Invalid),
            ("", ParseError::Invalid),
        ] {
            assert_eq!(Url::parse(input).err(), Some(want), "{input:?}");
        }
        assert_eq!(ParseError::InvalidPort.to_string(), "invalid port number");
    }

    #[test]
    fn a_host_alone_is_normalized_and_anything_more_is_not_a_host() {
        for (input, want) in [
            ("127.1", Some("127.0.0.1")),
            ("LocalHost", Some("localhost")),
            ("[0:0::1]", Some("[::1]")),
            ("0x7f.0.0.1", Some("127.0.0.1")),
            ("api.example.com.", Some("api.example.com.")),
            ("localhost:8080", None),
            ("a/b", None),
            ("a@b", None),
            ("a b", None),
            ("", None),
            ("[::1", None),
            ("[::1]:80", None),
        ] {
            assert_eq!(parse_host(input).as_deref(), want, "{input:?}");
        }
    }

    #[test]
    fn form_pairs_decode_plus_and_percent() {
        let u = Url::parse("http://x/?a=1+2&b=%41%zz&&c&d=%E2%82%AC&e=%ff&=v").unwrap();
        let pairs: Vec<(String, String)> = u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let want = [("a", "1 2"), ("b", "A%zz"), ("c", ""), ("d", "€"), ("e", "\u{fffd}"), ("", "v")];
        assert_eq!(pairs, want.map(|(k, v)| (k.to_string(), v.to_string())));
        let borrowed = u.query_pairs().next().map(|(k, _)| matches!(k, Cow::Borrowed(_)));
        assert_eq!(borrowed, Some(true), "a name with nothing to decode is not copied");
    }
}
