//! Request paths: the one canonical form the router matches (the non-empty segments), and the
//! same path as it may be logged or quoted back, with every server code masked.
//!
//! A server code is a bearer credential, so it must not reach a log line, whatever spelling
//! the client used: `//mcp/server/<code>/mcp`, `/MCP/Server/<code>/mcp/extra`, percent-encoded
//! characters, or a code in some other position.

/// What a path under `/mcp` that is not the endpoint lacks, in words that never repeat its code
/// (the router answers it with a JSON-RPC 404, so MCP clients show this).
pub fn endpoint_hint(segments: &[&str]) -> &'static str {
    match segments {
        ["mcp", "server", _] => {
            "the URL ends after the server code: the MCP endpoint is /mcp/server/<code>/mcp; add /mcp to the end of the URL"
        }
        ["mcp", "server", _, "sse", ..] => {
            "Flowgate has no /sse endpoint: it serves Streamable HTTP at /mcp/server/<code>/mcp; use that URL (and the \
             Streamable HTTP transport)"
        }
        ["mcp", "server", _, "mcp", ..] => {
            "the MCP endpoint is /mcp/server/<code>/mcp with nothing after it; remove what follows /mcp"
        }
        _ => "the MCP endpoint is /mcp/server/<code>/mcp, with the server's code (the URL the console showed when \
              the server was published)",
    }
}

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
/// case or encoding) and every segment that [`holds_code`] replaced by `<code>`.
pub fn loggable(segments: &[&str]) -> String {
    let mut out = String::new();
    for (i, seg) in segments.iter().enumerate() {
        out.push('/');
        let after_mcp_server = i >= 2 && is_word(segments[i - 2], "mcp") && is_word(segments[i - 1], "server");
        if after_mcp_server || holds_code(seg) {
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

/// Rounds of percent-decoding a segment is taken through, looking for a fixed point: a segment
/// still changing after this many (a code under more levels of encoding) is masked whole.
pub const MAX_DECODE_ROUNDS: usize = 8;

/// Whether `seg` may hold a server code, so that it must not be logged: some spelling of it (as
/// sent, or after each round of percent-decoding, `%2f` and `%2F` alike, up to its fixed point)
/// has a run of ASCII letters and digits long enough to contain a code (16 or more: a code
/// inside a longer run, `a<code>` or `<code>0`, is caught too); or it has not reached its fixed
/// point within [`MAX_DECODE_ROUNDS`]. One run is let through: exactly 32 lowercase hex digits,
/// the shape of a task id (a code is all lowercase hex digits once in about 2.6 billion).
pub fn holds_code(seg: &str) -> bool {
    some_spelling(seg, has_code_run).unwrap_or(true)
}

/// Whether some spelling of `seg` (as sent, then after each round of percent-decoding until it
/// stops changing) passes `test`; `None` when it was still changing after [`MAX_DECODE_ROUNDS`].
fn some_spelling(seg: &str, test: impl Fn(&str) -> bool) -> Option<bool> {
    let mut spelling = seg.to_string();
    for _ in 0..=MAX_DECODE_ROUNDS {
        if test(&spelling) {
            return Some(true);
        }
        let next = percent_decode(&spelling);
        if next == spelling {
            return Some(false);
        }
        spelling = next;
    }
    None
}

fn has_code_run(s: &str) -> bool {
    let task_id = |run: &str| run.len() == 32 && run.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|run| run.len() >= crate::pure::ids::SERVER_CODE_LEN && !task_id(run))
}

/// `seg` is `word` in any case, percent-encoded or not.
fn is_word(seg: &str, word: &str) -> bool {
    some_spelling(seg, |s| s.eq_ignore_ascii_case(word)).unwrap_or(false)
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
mod hint_tests {
    use super::*;

    #[test]
    fn each_wrong_endpoint_path_says_what_it_lacks() {
        let code = "AbCdEfGhIjKlMnOp";
        let hint = |p: &str| endpoint_hint(&segments(p));
        assert!(hint(&format!("/mcp/server/{code}")).contains("add /mcp to the end"));
        assert!(hint(&format!("/mcp/server/{code}/")).contains("add /mcp to the end"));
        assert!(hint(&format!("/mcp/server/{code}/sse")).contains("no /sse endpoint"));
        assert!(hint(&format!("/mcp/server/{code}/mcp/extra")).contains("remove what follows /mcp"));
        for p in ["/mcp", "/mcp/server", &format!("/mcp/{code}")] {
            assert!(hint(p).starts_with("the MCP endpoint is /mcp/server/<code>/mcp, with the server's code"), "{p}");
        }
        for p in [format!("/mcp/server/{code}"), format!("/mcp/server/{code}/sse"), format!("/mcp/{code}")] {
            assert!(!hint(&p).contains(code), "{p}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::test_rng::Rng;

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
            // A code inside a longer run, and under four levels of encoding.
            format!("/mcps/server/{CODE}0/mcp"),
            format!("/y/a{CODE}"),
            format!("/y/%25252541{}", &CODE[1..]),
            format!("/y/x%2525252f{CODE}"),
        ] {
            let logged = log(&path);
            assert!(!logged.contains(&CODE[4..]), "{path} logged as {logged}");
            assert!(logged.contains(CODE_MASK), "{path} logged as {logged}");
        }
        assert_eq!(log(&format!("//mcp/server/{CODE}/mcp")), "/mcp/server/<code>/mcp");
        assert_eq!(log(&format!("/MCP/Server/{CODE}/mcp/x")), "/MCP/Server/<code>/mcp/x");
    }

    /// `s` percent-encoded once: `%` always (so each level decodes back to the one before),
    /// other bytes now and then, the hex digits in either case.
    fn encode_once(rng: &mut Rng, s: &str) -> String {
        let mut out = String::new();
        for b in s.bytes() {
            if b == b'%' || rng.chance(30) {
                let hex = format!("{b:02X}");
                out.push('%');
                out.push_str(&if rng.chance(50) { hex.to_lowercase() } else { hex });
            } else {
                out.push(b as char);
            }
        }
        out
    }

    fn random_run(rng: &mut Rng, alphabet: &[u8], max: u64) -> String {
        (0..rng.below(max + 1)).map(|_| *rng.pick(alphabet) as char).collect()
    }

    #[test]
    fn a_code_anywhere_in_a_run_and_under_any_encoding_up_to_the_bound_is_masked() {
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        const ANY: &[u8] = b"ABCxyz019-._~!$&'()*+,;=:@/%";
        let mut rng = Rng(0x5eed_c0de);
        for _ in 0..4000 {
            let code: String = (0..16).map(|_| *rng.pick(ALNUM) as char).collect();
            // Letters and digits on either side (a longer run), or anything else.
            let (before, after) = if rng.chance(50) {
                (random_run(&mut rng, ALNUM, 6), random_run(&mut rng, ALNUM, 6))
            } else {
                (random_run(&mut rng, ANY, 6), random_run(&mut rng, ANY, 6))
            };
            let mut seg = format!("{before}{code}{after}");
            for _ in 0..rng.below(MAX_DECODE_ROUNDS as u64 + 1) {
                seg = encode_once(&mut rng, &seg);
            }
            let first = random_run(&mut rng, b"abcmps", 5);
            let path = format!("/{first}/{seg}/mcp");
            let logged = log(&path);
            assert!(!logged.contains(&code), "{path} logged as {logged}");
            assert!(logged.contains(CODE_MASK), "{path} logged as {logged}");
        }
    }

    #[test]
    fn encodings_past_the_bound_are_masked_whole_and_short_runs_are_not() {
        // Every byte encoded at every level: no run grows past two characters.
        let encode = |seg: &str, levels: usize| {
            (0..levels).fold(seg.to_string(), |s, _| s.bytes().map(|b| format!("%{b:02x}")).collect::<String>())
        };
        let at_bound = encode("a-b", MAX_DECODE_ROUNDS);
        assert_eq!(log(&format!("/x/{at_bound}")), format!("/x/{at_bound}"));
        // Past the bound, a segment is masked whole whatever it decodes to.
        let past = encode("a-b", MAX_DECODE_ROUNDS + 1);
        assert!(!holds_code_within_bound(&past));
        assert_eq!(log(&format!("/x/{past}")), "/x/<code>");
        // A partly encoded segment lengthens its runs (`%73` → `%2573` → `%252573`): deeply
        // encoded, it is masked like a code; under a few levels, it is not.
        let partly = (0..3).fold("short-name".to_string(), |s, _| s.replace('%', "%25").replacen('s', "%73", 1));
        assert_eq!(log(&format!("/x/{partly}")), format!("/x/{partly}"));
        // Runs shorter than a code, however many, are logged as they are.
        let mut rng = Rng(0xfeed);
        for _ in 0..2000 {
            let seg: Vec<String> = (0..rng.below(6) + 1).map(|_| random_run(&mut rng, b"aB9", 15)).collect();
            let path = format!("/console/{}", seg.join("-"));
            assert_eq!(log(&path), path.trim_end_matches('/'));
        }
    }

    /// [`holds_code`] without its bound: whether some decoding holds a code-length run.
    fn holds_code_within_bound(seg: &str) -> bool {
        let mut s = seg.to_string();
        loop {
            if s.split(|c: char| !c.is_ascii_alphanumeric()).any(|r| r.len() >= 16) {
                return true;
            }
            let next = percent_decode(&s);
            if next == s {
                return false;
            }
            s = next;
        }
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
