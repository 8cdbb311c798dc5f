//! `uri_template`: routing a `resources/read` URI by the upstreams' RFC 6570 resource templates
//! (`pure::mcp::gateway`): the template comes from an upstream, the URI from a client, both
//! free-form. The input is a template, a newline, and a URI. Checked: matching takes bounded
//! time on any input (libFuzzer's -timeout); where the matcher's step budget suffices, it
//! agrees with an independent reference (a table of reachable positions); a URI produced from
//! the template by expanding each expression matches it; a match is never wrong.

use std::rc::Rc;

use serde_json::{json, Map};

use flowgate::pure::backend::mcp::catalog::Catalog;
use flowgate::pure::mcp::gateway::{Answer, Gateway, MAX_URI};
use flowgate::pure::protocol::version::Version;

use super::list_cursor::server;

/// The matcher's step budget (`gateway::MATCH_BUDGET`).
const BUDGET: usize = 100_000;

/// A template as the gateway reads it: literals, and expressions by operator (`'\0'`: none).
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(Vec<u8>),
    Var(u8),
}

/// RFC 6570 expressions (`{` up to the next `}`) and the literal text between them; an
/// unclosed `{` is literal.
fn parse(t: &str) -> Vec<Part> {
    let b = t.as_bytes();
    let mut parts = Vec::new();
    let mut i = 0;
    let mut literal = Vec::new();
    while i < b.len() {
        if b[i] == b'{' {
            if let Some(len) = b[i..].iter().position(|&c| c == b'}') {
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                let op = b.get(i + 1).copied().filter(|c| b"+#./;?&".contains(c) && len > 1).unwrap_or(0);
                parts.push(Part::Var(op));
                i += len + 1;
                continue;
            }
            literal.extend_from_slice(&b[i..]);
            break;
        }
        literal.push(b[i]);
        i += 1;
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    parts
}

/// What an expression's value may be: the bytes that end it, its least length, and the byte it
/// must start with when not empty.
fn shape(op: u8) -> (&'static [u8], usize, Option<u8>) {
    match op {
        b'+' => (b"", 1, None),
        b'#' => (b"", 1, None),
        b'?' | b'&' => (b"#", 0, Some(op)),
        b'/' | b'.' | b';' => (b"?#", 0, Some(op)),
        _ => (b"/?#", 1, None),
    }
}

/// Whether `uri` is an expansion of `parts`: the set of positions reachable after each part.
fn reference(parts: &[Part], uri: &[u8]) -> bool {
    let mut reach = vec![false; uri.len() + 1];
    reach[0] = true;
    for part in parts {
        let mut next = vec![false; uri.len() + 1];
        for at in (0..=uri.len()).filter(|&a| reach[a]) {
            match part {
                Part::Literal(l) => {
                    if uri[at..].starts_with(l) {
                        next[at + l.len()] = true;
                    }
                }
                Part::Var(op) => {
                    let (stop, min, lead) = shape(*op);
                    let mut end = at;
                    loop {
                        let len = end - at;
                        if len >= min && (len == 0 || lead.is_none_or(|c| uri[at] == c)) {
                            next[end] = true;
                        }
                        if end >= uri.len() || stop.contains(&uri[end]) {
                            break;
                        }
                        end += 1;
                    }
                }
            }
        }
        reach = next;
    }
    reach[uri.len()]
}

/// The template expanded with one short value per expression, as a client would.
fn expand(parts: &[Part]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        match part {
            Part::Literal(l) => out.extend_from_slice(l),
            Part::Var(b'+') => out.extend_from_slice(b"v1"),
            Part::Var(b'#') => out.extend_from_slice(b"#v1"),
            Part::Var(op @ (b'?' | b'&' | b';')) => {
                out.push(*op);
                out.extend_from_slice(b"x=v1");
            }
            Part::Var(op @ (b'/' | b'.')) => {
                out.push(*op);
                out.extend_from_slice(b"v1");
            }
            Part::Var(_) => out.extend_from_slice(b"v1"),
        }
    }
    out
}

/// Whether the matcher's budget covers every (part, position) it may try for this input.
fn within_budget(parts: &[Part], uri_len: usize) -> bool {
    (parts.len() + 1) * (uri_len + 2) * (uri_len + 2) <= BUDGET
}

/// The app a template routes `uri` to, on a gateway whose only template is `template`; a read
/// of a URI the template matches goes there (one it does not match may still go to the app, as
/// the one that could own it: `Gateway::answer`'s unlisted-URI rule).
fn routed(g: &Gateway, uri: &str) -> Option<usize> {
    let params: Map<String, serde_json::Value> = [("uri".to_string(), json!(uri))].into_iter().collect();
    let answer = g.answer(&json!(1), "resources/read", &params, Version::V2025_11_25);
    let read = match answer {
        Ok(Answer::Forward(f)) => Some(f.app_index),
        Ok(Answer::Result(v)) => panic!("resources/read of {uri:?} answered by Flowgate: {v}"),
        Err(_) => None,
    };
    if uri.is_empty() {
        return read;
    }
    let owner = g.owner_of_uri(uri);
    if owner.is_some() {
        assert_eq!(read, owner, "a matched URI is read from the app whose template matches it");
    }
    owner
}

pub fn uri_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (template, uri) = text.split_once('\n').unwrap_or((&text, ""));
    if template.is_empty() {
        return;
    }
    let (def, mut catalogs) = server("srv-templates", &[0]);
    let catalog = Catalog {
        capabilities: json!({"resources": {}}),
        resource_templates: vec![json!({"uriTemplate": template, "name": "t"})],
        ..Default::default()
    };
    catalogs.0.insert("a0".into(), Rc::new(catalog));
    let g = Gateway::new(&def, &catalogs);
    let parts = parse(template);

    let got = routed(&g, uri);
    assert!(got.is_none() || got == Some(0));
    if !uri.is_empty() && uri.len() <= MAX_URI && within_budget(&parts, uri.len()) {
        assert_eq!(got.is_some(), reference(&parts, uri.as_bytes()), "{template:?} against {uri:?}");
    } else if got.is_some() && (parts.len() + 1) * (uri.len() + 1) * (uri.len() + 1) <= 2_000_000 {
        assert!(reference(&parts, uri.as_bytes()), "{template:?} matched {uri:?}");
    }

    let produced = expand(&parts);
    if let Ok(produced) = String::from_utf8(produced) {
        if produced.len() <= MAX_URI && within_budget(&parts, produced.len()) {
            assert!(reference(&parts, produced.as_bytes()), "{template:?} does not match its expansion {produced:?}");
            assert_eq!(routed(&g, &produced), Some(0), "{template:?} does not route its expansion {produced:?}");
        }
    }
}
