//! Request paths: the one canonical form the router matches (the non-empty segments), and the
//! same path as it may be logged or quoted back, with every server code masked.
//!
//! A server code is a bearer credential, so it must not reach a log line, whatever spelling
//! the client used: `//mcp/server/<code>/mcp`, `/MCP/Server/<code>/mcp/extra`, percent-encoded
//! characters, or a code in some other position.

/// What a masked server code is logged as.
pub const CODE_MASK: &str = "<code>";

/// The path of a URL as the runtime serializes it (WHATWG: `scheme://host[:port]/path?query`),
/// without parsing it: the first `/` after `//` starts the path, which ends at `?` or `#`.
pub fn of_url(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let Some(start) = url[after_scheme..].find('/').map(|i| after_scheme + i) else {
        return "/";
    };
    let path = &url[start..];
    &path[..path.find(['?', '#']).unwrap_or(path.len())]
}

/// The path's non-empty segments: `//mcp//server/x/` and `/mcp/server/x` route alike.
pub fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// The canonical path as logged: `/` + the segments, the segment after `mcp/server` (in any
/// case or encoding) and any segment that holds something shaped like a server code (a run of
/// exactly 16 ASCII letters and digits, also after percent-decoding) replaced by `<code>`.
pub fn loggable(segments: &[&str]) -> String {
    let mut out = String::new();
    for (i, seg) in segments.iter().enumerate() {
        out.push('/');
        let after_mcp_server = i >= 2 && is_word(segments[i - 2], "mcp") && is_word(segments[i - 1], "server");
        if after_mcp_server || holds_code_shape(seg) {
            out.push_str(CODE_MASK);
        } else {
            out.push_str(seg);
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// `seg` is `word` in any case, percent-encoded or not.
fn is_word(seg: &str, word: &str) -> bool {
    decodings(seg).iter().any(|d| d.eq_ignore_ascii_case(word))
}

/// The segment holds a run of exactly 16 ASCII alphanumerics, as sent or after one to three
/// rounds of percent-decoding (so `%41…` or `%2541…` spellings are caught too).
fn holds_code_shape(seg: &str) -> bool {
    decodings(seg).iter().any(|d| {
        d.split(|c: char| !c.is_ascii_alphanumeric()).any(|run| run.len() == crate::pure::ids::SERVER_CODE_LEN)
    })
}

/// `seg` and its percent-decodings, until nothing changes (at most three rounds).
fn decodings(seg: &str) -> Vec<String> {
    let mut out = vec![seg.to_string()];
    for _ in 0..3 {
        let Some(last) = out.last() else { break };
        let next = percent_decode(last);
        if &next == last {
            break;
        }
        out.push(next);
    }
    out
}

/// `%XX` sequences decoded (invalid UTF-8 replaced); malformed escapes kept as they are.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).and_then(|&c| hex(c)), b.get(i + 2).and_then(|&c| hex(c))) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODE: &str = "AbCdEfGh12345678";

    fn log(path: &str) -> String {
        loggable(&segments(path))
    }

    #[test]
    fn the_path_of_a_url_is_between_the_host_and_the_query() {
        assert_eq!(of_url("https://flowgate.example/mcp/server/x/mcp?a=1#f"), "/mcp/server/x/mcp");
        assert_eq!(of_url("http://127.0.0.1:8787/healthz"), "/healthz");
        assert_eq!(of_url("http://127.0.0.1:8787"), "/");
        assert_eq!(of_url("http://h/a#x?y"), "/a");
        assert_eq!(of_url("http://h/?q=/x"), "/");
        assert_eq!(of_url("http://h/%2F/x"), "/%2F/x");
    }

    #[test]
    fn segments_drop_empty_parts() {
        assert_eq!(segments("//mcp//server/x/"), ["mcp", "server", "x"]);
        assert_eq!(segments("/"), Vec::<&str>::new());
    }

    #[test]
    fn the_code_is_masked_in_every_spelling() {
        for path in [
            format!("/mcp/server/{CODE}/mcp"),
            format!("//mcp/server/{CODE}/mcp"),
            format!("/mcp//server///{CODE}//mcp/"),
            format!("/MCP/Server/{CODE}/mcp"),
            format!("/mcp/server/{CODE}/mcp/extra/parts"),
            format!("/%6Dcp/server/{CODE}/mcp"),
            format!("/mcp/server/%41{}/mcp", &CODE[1..]),
            format!("/mcp/server/%2541{}/mcp", &CODE[1..]),
            format!("/mcp/server/{CODE}x/mcp"),
            format!("/mcp/server/{CODE}"),
            format!("/prefix/{CODE}/mcp"),
            format!("/x/{CODE}.json"),
            format!("/x/server%2F{CODE}%2Fmcp"),
            format!("/console/api/apps/{CODE}"),
        ] {
            let logged = log(&path);
            assert!(!logged.contains(&CODE[4..]), "{path} logged as {logged}");
            assert!(logged.contains(CODE_MASK), "{path} logged as {logged}");
        }
        assert_eq!(log(&format!("//mcp/server/{CODE}/mcp")), "/mcp/server/<code>/mcp");
        assert_eq!(log(&format!("/MCP/Server/{CODE}/mcp/x")), "/MCP/Server/<code>/mcp/x");
    }

    #[test]
    fn other_paths_are_logged_as_they_are() {
        assert_eq!(log("/healthz"), "/healthz");
        assert_eq!(log("/"), "/");
        assert_eq!(log(""), "/");
        let app = "/console/api/apps/3f2b8c1e-9d4a-4b7e-8c2d-1a2b3c4d5e6f/server";
        assert_eq!(log(app), app);
        // A 32-character task id is not a code.
        let task = format!("/console/api/servers/x/tasks/{}", "f".repeat(32));
        assert_eq!(log(&task), task);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("%41b%2Fc"), "Ab/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{FFFD}");
    }
}
