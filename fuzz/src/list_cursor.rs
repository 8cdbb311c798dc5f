//! `list_cursor`: the pagination cursors of the aggregated resource, template and prompt lists
//! (`pure::mcp::gateway`), which a client sends back as it likes. A cursor opens only if this
//! server handed it out for this list; a cursor altered in any way, or one of another server,
//! is refused with `-32602`; never a panic. Paging from the start visits every item once.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use serde_json::{json, Map, Value};

use flowgate::pure::backend::config::Backend;
use flowgate::pure::backend::mcp::catalog::Catalog;
use flowgate::pure::definition::{AppDefinition, ServerDefinition, FORMAT};
use flowgate::pure::mcp::gateway::{Answer, Catalogs, Gateway, PAGE_SIZE};
use flowgate::pure::mode::Mode;
use flowgate::pure::protocol::jsonrpc::INVALID_PARAMS;
use flowgate::pure::protocol::version::Version;

use super::input::tampered;

/// The lists that are paged, and the key of their items.
pub const LISTS: [(&str, &str); 3] =
    [("resources/list", "resources"), ("resources/templates/list", "resourceTemplates"), ("prompts/list", "prompts")];

/// A server of MCP apps whose catalogs have `counts[i]` items of each kind.
pub fn server(server_id: &str, counts: &[usize]) -> (ServerDefinition, Catalogs) {
    let mut apps = Vec::new();
    let mut catalogs = Catalogs::default();
    for (i, &n) in counts.iter().enumerate() {
        let id = format!("a{i}");
        let backend = Backend::from_settings(Mode::Mcp, &json!({"url": "https://mcp.example/mcp"}))
            .expect("fixture settings read");
        apps.push(AppDefinition::new(id.clone(), format!("App{i}"), "".into(), backend, json!([]), json!([])));
        let catalog = Catalog {
            capabilities: json!({"resources": {}, "prompts": {}}),
            resources: (0..n).map(|k| json!({"uri": format!("app{i}://r/{k}"), "name": format!("r{k}")})).collect(),
            resource_templates: (0..n)
                .map(|k| json!({"uriTemplate": format!("app{i}://t/{k}/{{id}}"), "name": format!("t{k}")}))
                .collect(),
            prompts: (0..n).map(|k| json!({"name": format!("p{k}")})).collect(),
            skills: Vec::new(),
            fetched_ms: 0,
            has_stream: false,
        };
        catalogs.0.insert(id, Rc::new(catalog));
    }
    let def = ServerDefinition {
        format: FORMAT,
        server_id: server_id.into(),
        name: "Fuzz Gateway".into(),
        description: "".into(),
        status: flowgate::pure::server::Status::Active,
        parameters: Map::new(),
        auth: Default::default(),
        call_log_payloads: false,
        code_expires_at: None,
        apps,
    };
    (def, catalogs)
}

/// Items per app: more than a page, none, a page and one, a few.
const COUNTS: [usize; 4] = [250, 0, PAGE_SIZE + 1, 3];

fn list(
    g: &Gateway,
    method: &str,
    cursor: Option<Value>,
) -> Result<Value, flowgate::pure::protocol::jsonrpc::RpcError> {
    let mut params = Map::new();
    if let Some(c) = cursor {
        params.insert("cursor".into(), c);
    }
    match g.answer(&json!(1), method, &params, Version::V2025_11_25)? {
        Answer::Result(v) => Ok(v),
        Answer::Forward(f) => panic!("{method} forwarded: {f:?}"),
    }
}

/// Every cursor a list hands out when paged from the start, checking that the pages hold every
/// item once, at most a page at a time.
fn page_through(g: &Gateway, method: &str, key: &str) -> Vec<String> {
    let mut cursors = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor = None;
    loop {
        let page = list(g, method, cursor.map(Value::String)).expect("a cursor handed out opens");
        let items = page[key].as_array().expect("a page of items");
        assert!(items.len() <= PAGE_SIZE);
        for item in items {
            assert!(seen.insert(item.to_string()), "{method}: {item} listed twice");
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) => {
                cursors.push(next.to_string());
                cursor = Some(next.to_string());
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), COUNTS.iter().sum::<usize>(), "{method}: paging skipped items");
    cursors
}

struct Fixture {
    gateway: Gateway<'static>,
    /// The cursors each list hands out, by method.
    issued: HashMap<&'static str, Vec<String>>,
}

/// The two servers' definitions, for the life of the process (a gateway borrows its server's).
static DEFS: std::sync::OnceLock<[ServerDefinition; 2]> = std::sync::OnceLock::new();

thread_local! {
    static FIXTURE: Fixture = {
        let defs = DEFS.get_or_init(|| [server("srv-cursor", &COUNTS).0, server("srv-other", &COUNTS).0]);
        let gateway = Gateway::new(&defs[0], &server("srv-cursor", &COUNTS).1);
        let other = Gateway::new(&defs[1], &server("srv-other", &COUNTS).1);
        let issued: HashMap<&'static str, Vec<String>> =
            LISTS.iter().map(|(method, key)| (*method, page_through(&gateway, method, key))).collect();
        // A cursor is good for its own list and server only.
        for (method, cursors) in &issued {
            for c in cursors {
                assert!(list(&other, method, Some(c.as_str().into())).is_err(), "{c:?} opened on another server");
                for (m, _) in LISTS.iter().filter(|(m, _)| m != method) {
                    let theirs = &issued[m];
                    if !theirs.contains(c) {
                        assert!(list(&gateway, m, Some(c.as_str().into())).is_err(), "{method}'s {c:?} opened for {m}");
                    }
                }
            }
        }
        for (method, _) in LISTS {
            refused(list(&gateway, method, Some(json!({"cursor": "x"}))), "an object cursor");
            refused(list(&gateway, method, Some(json!(7))), "a number cursor");
        }
        Fixture { gateway, issued }
    };
}

fn refused(r: Result<Value, flowgate::pure::protocol::jsonrpc::RpcError>, what: &str) {
    match r {
        Ok(v) => panic!("{what} opened: {v}"),
        Err(e) => {
            assert_eq!(e.code, INVALID_PARAMS, "{what}: {e:?}");
            assert!(e.message.contains("cursor"), "{what}: {e:?}");
        }
    }
}

/// A cursor that opened names this list, an app of the server and an offset in it, and the
/// page is that app's items from there.
fn check_opened(cursor: &str, method: &str, key: &str, page: &Value) {
    let raw = flowgate::pure::base64::decode_url(cursor).expect("an opened cursor is base64url");
    let raw = String::from_utf8(raw).expect("an opened cursor is text");
    let [kind, app, offset, tag]: [&str; 4] = raw.split('.').collect::<Vec<_>>().try_into().expect("four parts");
    let kind_of = match method {
        "resources/list" => "r",
        "resources/templates/list" => "t",
        _ => "p",
    };
    assert_eq!(kind, kind_of, "{method} opened {raw:?}");
    assert!(tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit()), "{raw:?}");
    let (app, offset): (usize, usize) = (app.parse().expect("an app"), offset.parse().expect("an offset"));
    assert!(app < COUNTS.len(), "{raw:?}");
    let items = page[key].as_array().expect("a page of items");
    assert_eq!(items.len(), COUNTS[app].saturating_sub(offset).min(PAGE_SIZE), "{method} {raw:?}");
    if let Some(first) = items.first() {
        match kind {
            "r" => assert_eq!(first["uri"], format!("app{app}://r/{offset}")),
            "t" => assert_eq!(first["uriTemplate"], format!("app{app}://t/{offset}/{{id}}")),
            _ => {
                let name = format!("p{offset}");
                let ok = |n: &str| n == name || n.ends_with(&format!("_{name}"));
                assert!(first["name"].as_str().is_some_and(ok), "{first}");
            }
        }
    }
}

pub fn list_cursor(data: &[u8]) {
    FIXTURE.with(|f| {
        let text = String::from_utf8_lossy(data);
        for (method, key) in LISTS {
            let issued = &f.issued[method];
            match list(&f.gateway, method, Some(text.as_ref().into())) {
                // A cursor made up with the right tag opens too (libFuzzer learns the tag from
                // the comparison; a client would need the server id, which it never sees): it
                // pages the list it names, like a handed-out one.
                Ok(page) => check_opened(&text, method, key, &page),
                Err(e) => assert!(!issued.iter().any(|c| *c == text), "{method}: a cursor handed out refused: {e:?}"),
            }
        }
        // A cursor handed out, altered.
        let all: Vec<(&str, &String)> =
            LISTS.iter().flat_map(|(m, _)| f.issued[m].iter().map(move |c| (*m, c))).collect();
        if let [pick, how, pos, to, ..] = *data {
            let (method, cursor) = all[pick as usize % all.len()];
            if let Some(changed) = tampered(cursor, how, pos, to) {
                if !f.issued[method].contains(&changed) {
                    refused(
                        list(&f.gateway, method, Some(changed.clone().into())),
                        &format!("{cursor:?} altered to {changed:?}"),
                    );
                }
            }
            let longer = format!("{cursor}{}", String::from_utf8_lossy(&data[4..]));
            if longer != *cursor {
                refused(list(&f.gateway, method, Some(longer.into())), "a cursor with more after it");
            }
        }
    });
}
