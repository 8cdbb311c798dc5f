use crate::json;

use super::*;
use crate::pure::backend::config::Backend;
use crate::pure::definition::{AppDefinition, FORMAT};
use crate::pure::mode::Mode;

fn mcp_app(id: &str, name: &str, extra: Value) -> AppDefinition {
    let mut settings = json!({"url": "https://mcp.example/mcp"});
    if let (Some(s), Value::Object(e)) = (settings.as_object_mut(), extra) {
        s.extend(e);
    }
    AppDefinition::new(
        id.into(),
        name.into(),
        "".into(),
        Backend::from_settings(Mode::Mcp, &settings).unwrap(),
        json!([]),
        json!([]),
    )
}

fn def(apps: Vec<AppDefinition>) -> ServerDefinition {
    ServerDefinition {
        format: FORMAT,
        server_id: "srv-1".into(),
        name: "S".into(),
        description: "".into(),
        status: crate::pure::server::Status::Active,
        parameters: Map::new(),
        auth: Default::default(),
        call_log_payloads: false,
        code_expires_at: None,
        apps,
    }
}

fn catalog(prefix: &str, completions: bool) -> Catalog {
    let mut caps = json!({"resources": {}, "prompts": {}});
    if completions {
        caps["completions"] = json!({});
    }
    Catalog {
        capabilities: caps,
        resources: vec![
            json!({"uri": format!("{prefix}://one"), "name": "one", "title": "One", "icons": []}),
            json!({"uri": "shared://same", "name": "same"}),
            json!({"uri": format!("{prefix}://two"), "name": "two"}),
        ],
        resource_templates: vec![json!({"uriTemplate": format!("{prefix}://item/{{id}}/data"), "name": "item"})],
        prompts: vec![
            json!({"name": "greet", "title": "Greet", "arguments": [{"name": "who", "title": "Who", "required": true}]}),
            json!({"name": "secret"}),
        ],
        skills: Vec::new(),
        fetched_ms: 0,
        has_stream: false,
    }
}

fn two() -> (ServerDefinition, Catalogs) {
    let d = def(vec![
        mcp_app("a", "Alpha", json!({"denied_prompts": ["secret"]})),
        mcp_app("b", "Beta", json!({"denied_resources": ["beta://one"]})),
    ]);
    let mut c = Catalogs::default();
    c.0.insert("a".into(), Rc::new(catalog("alpha", true)));
    c.0.insert("b".into(), Rc::new(catalog("beta", false)));
    (d, c)
}

fn result(a: Result<Answer, RpcError>) -> Value {
    match a {
        Ok(Answer::Result(v)) => v,
        other => panic!("expected a result, got {other:?}"),
    }
}

fn forward(a: Result<Answer, RpcError>) -> Forward {
    match a {
        Ok(Answer::Forward(f)) => *f,
        other => panic!("expected a forward, got {other:?}"),
    }
}

fn params(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

const V: Version = Version::V2025_11_25;

#[test]
fn lists_are_aggregated_filtered_and_paged_per_app() {
    let (d, c) = two();
    let g = Gateway::new(&d, &c);
    let id = json!(1);
    let p1 = result(g.answer(&id, "resources/list", &Map::new(), V));
    let uris: Vec<&str> = p1["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["alpha://one", "shared://same", "alpha://two"], "the first page is the first app's");
    let cursor = p1["nextCursor"].as_str().expect("a cursor to the second app");
    let p2 = result(g.answer(&id, "resources/list", &params(json!({"cursor": cursor})), V));
    // beta://one is denied; shared://same is Alpha's (first in the server).
    assert_eq!(p2["resources"], json!([{"uri": "beta://two", "name": "two"}]), "{p2}");
    assert!(p2.get("nextCursor").is_none());

    let t1 = result(g.answer(&id, "resources/templates/list", &Map::new(), V));
    assert_eq!(t1["resourceTemplates"][0]["uriTemplate"], "alpha://item/{id}/data");
    let t2 = result(g.answer(&id, "resources/templates/list", &params(json!({"cursor": t1["nextCursor"]})), V));
    assert_eq!(t2["resourceTemplates"][0]["uriTemplate"], "beta://item/{id}/data");

    let p = result(g.answer(&id, "prompts/list", &Map::new(), V));
    assert_eq!(p["prompts"][0]["name"], "Alpha_greet");
    assert_eq!(p["prompts"].as_array().unwrap().len(), 1, "Alpha's secret prompt is denied");
    let p2 = result(g.answer(&id, "prompts/list", &params(json!({"cursor": p["nextCursor"]})), V));
    assert_eq!(
        p2["prompts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["Beta_greet", "Beta_secret"]
    );
    assert_eq!(g.collisions().len(), 1);
    assert!(g.collisions()[0].contains("shared://same") && g.collisions()[0].contains("'Alpha' comes first"));
}

#[test]
fn lists_downgrade_per_revision() {
    let (d, c) = two();
    let g = Gateway::new(&d, &c);
    let old = result(g.answer(&json!(1), "resources/list", &Map::new(), Version::V2025_03_26));
    assert!(old["resources"][0].get("title").is_none() && old["resources"][0].get("icons").is_none());
    let mid = result(g.answer(&json!(1), "resources/list", &Map::new(), Version::V2025_06_18));
    assert_eq!(mid["resources"][0]["title"], "One");
    assert!(mid["resources"][0].get("icons").is_none());
    let new = result(g.answer(&json!(1), "resources/list", &Map::new(), V));
    assert_eq!(new["resources"][0]["icons"], json!([]));
    let p = result(g.answer(&json!(1), "prompts/list", &Map::new(), Version::V2024_11_05));
    assert!(p["prompts"][0].get("title").is_none() && p["prompts"][0]["arguments"][0].get("title").is_none());
}

#[test]
fn long_lists_page_within_an_app() {
    let d = def(vec![mcp_app("a", "A", json!({}))]);
    let many: Vec<Value> = (0..PAGE_SIZE + 5).map(|i| json!({"uri": format!("x://{i}"), "name": "n"})).collect();
    let mut c = Catalogs::default();
    c.0.insert(
        "a".into(),
        Rc::new(Catalog { capabilities: json!({"resources": {}}), resources: many, ..Default::default() }),
    );
    let g = Gateway::new(&d, &c);
    let p1 = result(g.answer(&json!(1), "resources/list", &Map::new(), V));
    assert_eq!(p1["resources"].as_array().unwrap().len(), PAGE_SIZE);
    let p2 = result(g.answer(&json!(1), "resources/list", &params(json!({"cursor": p1["nextCursor"]})), V));
    assert_eq!(p2["resources"].as_array().unwrap().len(), 5);
    assert_eq!(p2["resources"][0]["uri"], format!("x://{PAGE_SIZE}"));
}

#[test]
fn bad_cursors_are_invalid_params() {
    let (d, c) = two();
    let g = Gateway::new(&d, &c);
    let good =
        result(g.answer(&json!(1), "resources/list", &Map::new(), V))["nextCursor"].as_str().unwrap().to_string();
    let raw = String::from_utf8(crate::pure::base64::decode_url(&good).unwrap()).unwrap();
    let forged = crate::pure::base64::encode_url(raw.replacen(".1.", ".0.", 1));
    let other_server = {
        let mut d2 = d.clone();
        d2.server_id = "srv-2".into();
        let g2 = Gateway::new(&d2, &c);
        result(g2.answer(&json!(1), "resources/list", &Map::new(), V))["nextCursor"].as_str().unwrap().to_string()
    };
    for (cursor, why) in [
        (json!("not a cursor!"), "not valid"),
        (json!(forged), "altered"),
        (json!(other_server), "altered or belongs to another server"),
        (json!(7), "a cursor is a string"),
        (json!(encode_cursor("srv-1", catalog::RESOURCES, 9, 0)), "no longer has"),
    ] {
        let e = g.answer(&json!(1), "resources/list", &params(json!({"cursor": cursor})), V).unwrap_err();
        assert_eq!(e.code, jsonrpc::INVALID_PARAMS, "{cursor}");
        assert!(e.message.contains(why) && e.message.contains("resources/list"), "{cursor}: {}", e.message);
    }
    // A resources cursor does not page prompts.
    let e = g.answer(&json!(1), "prompts/list", &params(json!({"cursor": good})), V).unwrap_err();
    assert!(e.message.contains("another list"), "{}", e.message);
}

#[test]
fn an_unlisted_uri_goes_only_where_the_filters_let_it() {
    let d = def(vec![
        mcp_app("a", "Alpha", json!({"allowed_resources": ["alpha://one"]})),
        mcp_app("b", "Beta", json!({"denied_resources": ["beta://two/hidden"]})),
        mcp_app("c", "Gamma", json!({})),
    ]);
    let mut c = Catalogs::default();
    c.0.insert("a".into(), Rc::new(catalog("alpha", false)));
    c.0.insert("b".into(), Rc::new(catalog("beta", false)));
    c.0.insert("c".into(), Rc::new(catalog("alpha", false)));
    let g = Gateway::new(&d, &c);
    let read = |uri: &str| g.answer(&json!(1), "resources/read", &params(json!({"uri": uri})), V);
    // Alpha allows only what it names: another URI under alpha://one reaches no app (Gamma's
    // alpha://one collided with Alpha's); one under alpha://two (Gamma's, Alpha left it out)
    // goes to Gamma, which filters nothing.
    assert_eq!(forward(read("alpha://one")).app_index, 0);
    assert_eq!(read("alpha://one/elsewhere").unwrap_err().code, -32002);
    assert_eq!(forward(read("alpha://two/elsewhere")).app_index, 2);
    assert_eq!(forward(read("beta://two/other")).app_index, 1);
    // Beta's denied URI reaches no app, and the error says why.
    let e = read("beta://two/hidden").unwrap_err();
    assert_eq!(e.code, -32002);
    assert!(e.message.contains("denied_resources"), "{}", e.message);
    assert_eq!(uri_origin("demo://resource/static/a.md"), Some("demo://resource"));
    assert_eq!(uri_origin("demo://resource"), Some("demo://resource"));
    assert_eq!(uri_origin("demo://res?x#y"), Some("demo://res"));
    assert_eq!(uri_origin("urn:isbn:1"), Some("urn:"));
    assert_eq!(uri_origin("demo://{host}/x"), None);
    assert_eq!(uri_origin("{+base}/x"), None);
    assert_eq!(uri_origin("no scheme"), None);
    assert_eq!(uri_origin(":x"), None);
}

#[test]
fn reads_gets_and_completions_are_routed() {
    let (d, c) = two();
    let g = Gateway::new(&d, &c);
    let id = json!("r1");
    let f = forward(g.answer(&id, "resources/read", &params(json!({"uri": "alpha://one", "_meta": {"x": 1}})), V));
    assert_eq!((f.app_index, f.method, f.name.as_deref()), (0, "resources/read", Some("alpha://one")));
    assert_eq!(f.params, params(json!({"uri": "alpha://one"})), "the client's _meta stays with Flowgate");
    assert_eq!(f.id, id);
    // The colliding URI goes to the first app; a template URI to the app whose template matches.
    assert_eq!(forward(g.answer(&id, "resources/read", &params(json!({"uri": "shared://same"})), V)).app_index, 0);
    assert_eq!(
        forward(g.answer(&id, "resources/read", &params(json!({"uri": "beta://item/42/data"})), V)).app_index,
        1
    );
    // A URI neither listed nor matched goes to the upstream that could own it (the first app
    // listing its scheme and authority), which answers for it as it would directly.
    for (uri, app) in
        [("beta://item/4/2/data", 1), ("beta://item//data", 1), ("alpha://one/three", 0), ("beta://two?page=2", 1)]
    {
        let f = forward(g.answer(&id, "resources/read", &params(json!({"uri": uri})), V));
        assert_eq!((f.app_index, f.name.as_deref()), (app, Some(uri)), "{uri}");
    }
    // Denied and unknown URIs are not found, with the URI in data; -32002 before 2026-07-28.
    for uri in ["beta://one", "nowhere://x", "alpha://three", "beta:one", "alpha:/x", "item/4/data"] {
        let e = g.answer(&id, "resources/read", &params(json!({"uri": uri})), V).unwrap_err();
        assert_eq!((e.code, e.data.clone()), (-32002, Some(json!({"uri": uri}))), "{uri}");
        assert!(e.message.starts_with("Resource not found"), "{}", e.message);
    }
    let e = g.answer(&id, "resources/read", &params(json!({"uri": "nowhere://x"})), Version::V2026_07_28).unwrap_err();
    assert_eq!(e.code, jsonrpc::INVALID_PARAMS);
    let e = g.answer(&id, "resources/read", &Map::new(), V).unwrap_err();
    assert!(e.message.contains("needs `uri`"));

    let f = forward(g.answer(&id, "prompts/get", &params(json!({"name": "Beta_greet", "arguments": {"who": "x"}})), V));
    assert_eq!((f.app_index, f.name.as_deref()), (1, Some("greet")));
    assert_eq!(f.params, params(json!({"name": "greet", "arguments": {"who": "x"}})));
    let e = g.answer(&id, "prompts/get", &params(json!({"name": "Alpha_secret"})), V).unwrap_err();
    assert_eq!(e.code, jsonrpc::INVALID_PARAMS);
    assert!(e.message.contains("Unknown prompt: Alpha_secret") && e.message.contains("Beta_greet"), "{}", e.message);

    let complete = |r: Value| params(json!({"ref": r, "argument": {"name": "who", "value": "a"}}));
    let f = forward(g.answer(
        &id,
        "completion/complete",
        &complete(json!({"type": "ref/prompt", "name": "Alpha_greet"})),
        V,
    ));
    assert_eq!((f.app_index, &f.params["ref"]), (0, &json!({"type": "ref/prompt", "name": "greet"})));
    let f = forward(g.answer(
        &id,
        "completion/complete",
        &complete(json!({"type": "ref/resource", "uri": "alpha://item/{id}/data"})),
        V,
    ));
    assert_eq!(f.app_index, 0);
    // Beta does not complete: no values, not an error.
    let r =
        result(g.answer(&id, "completion/complete", &complete(json!({"type": "ref/prompt", "name": "Beta_greet"})), V));
    assert_eq!(r, json!({"completion": {"values": [], "hasMore": false}}));
    for (r, want) in [
        (json!({"type": "ref/prompt", "name": "nope"}), "Unknown prompt"),
        (json!({"type": "ref/resource", "uri": "zzz://{x}"}), "no resource template"),
        (json!({"type": "ref/tool"}), "ref.type"),
    ] {
        let e = g.answer(&id, "completion/complete", &complete(r.clone()), V).unwrap_err();
        assert!(e.code == jsonrpc::INVALID_PARAMS && e.message.contains(want), "{r}: {}", e.message);
    }
}

#[test]
fn capabilities_and_methods_follow_the_upstreams() {
    let (d, c) = two();
    let g = Gateway::new(&d, &c);
    let mut caps = json!({});
    g.add_capabilities(&mut caps, V);
    assert_eq!(
        caps,
        json!({"resources": {"subscribe": false, "listChanged": false}, "prompts": {"listChanged": false}, "completions": {}})
    );
    let mut old = json!({});
    g.add_capabilities(&mut old, Version::V2024_11_05);
    assert!(old.get("completions").is_none(), "completions is a 2025-03-26 capability");

    let mut only_tools = Catalogs::default();
    only_tools.0.insert("a".into(), Rc::new(Catalog { capabilities: json!({"tools": {}}), ..Default::default() }));
    let g = Gateway::new(&d, &only_tools);
    let mut caps = json!({});
    g.add_capabilities(&mut caps, V);
    assert_eq!(caps, json!({}));
    for m in ["resources/list", "resources/read", "prompts/get", "completion/complete"] {
        let e = g.answer(&json!(1), m, &Map::new(), V).unwrap_err();
        assert_eq!(e.code, jsonrpc::METHOD_NOT_FOUND, "{m}");
        assert!(e.message.contains("no upstream MCP server"), "{}", e.message);
    }
    let e = g.answer(&json!(1), "resources/subscribe", &Map::new(), Version::V2025_06_18).unwrap_err();
    assert!(e.code == jsonrpc::METHOD_NOT_FOUND && e.message.contains("no upstream MCP server"), "{}", e.message);
}

#[test]
fn subscriptions_go_to_the_owner_of_the_uri_for_clients_with_sessions_only() {
    let (d, c) = two();
    let g = Gateway::new(&d, &c);
    let p = params(json!({"uri": "beta://item/7/data"}));
    for m in ["resources/subscribe", "resources/unsubscribe"] {
        let f = forward(g.answer(&json!(3), m, &p, V));
        assert_eq!((f.method, f.app_index, f.name.as_deref()), (m, 1, Some("beta://item/7/data")));
        // 2026-07-28 has no sessions, so no stream to deliver updates on.
        let e = g.answer(&json!(3), m, &p, Version::V2026_07_28).unwrap_err();
        assert!(e.code == jsonrpc::METHOD_NOT_FOUND && e.message.contains("no sessions"), "{}", e.message);
    }
    let e = g.answer(&json!(3), "resources/subscribe", &params(json!({"uri": "nowhere://x"})), V).unwrap_err();
    assert_eq!(e.code, -32002, "a URI no app owns is not forwarded: {}", e.message);
    let e = g.answer(&json!(3), "resources/subscribe", &Map::new(), V).unwrap_err();
    assert_eq!(e.code, jsonrpc::INVALID_PARAMS, "{}", e.message);
}

#[test]
fn uri_templates_match_rfc6570_expansions() {
    let m = |t: &str, uri: &str| matches_template(&parse_template(t), uri);
    assert!(m("test://template/{id}/data", "test://template/123/data"));
    assert!(!m("test://template/{id}/data", "test://template/1/2/data"), "a simple value has no /");
    assert!(!m("test://template/{id}/data", "test://template//data"));
    assert!(!m("test://template/{id}/data", "test://template/123/data/more"));
    assert!(!m("test://template/{id}/data", "other://template/123/data"));
    assert!(m("file:///{+path}", "file:///a/b/c.txt"));
    assert!(m("api://search{?q,lang}", "api://search?q=x&lang=en"));
    assert!(m("api://search{?q,lang}", "api://search"));
    assert!(!m("api://search{?q,lang}", "api://searchx"));
    assert!(m("x://{a}-{b}", "x://1-2-3"), "backtracks over the first value");
    assert!(m("x://{/path}", "x:///a"));
    assert!(m("plain://no-vars", "plain://no-vars") && !m("plain://no-vars", "plain://no-vars2"));
    assert!(m("broken://{x", "broken://{x"), "an unclosed brace is literal");
    // Bounded: a long URI against a template of many variables costs at most the budget.
    let t = "x://{+a}{+b}{+c}{+d}{+e}{+f}{+g}{+h}/end";
    let uri = format!("x://{}", "a".repeat(MAX_URI - 4));
    let started = std::time::Instant::now();
    assert!(!m(t, &uri));
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn prompt_results_downgrade() {
    let r = json!({"messages": [
        {"role": "user", "content": {"type": "audio", "data": "AA", "mimeType": "audio/wav"}},
        {"role": "user", "content": {"type": "resource_link", "uri": "a://b", "name": "b"}},
        {"role": "user", "content": {"type": "text", "text": "t"}}
    ]});
    assert_eq!(prompt_result_for_client(&r, V), r);
    let old = prompt_result_for_client(&r, Version::V2024_11_05);
    assert_eq!(old["messages"][0]["content"]["type"], "text");
    assert_eq!(old["messages"][1]["content"], json!({"type": "text", "text": "a://b"}));
    assert_eq!(old["messages"][2], r["messages"][2]);
}

const V26: Version = Version::V2026_07_28;

fn skill(uri: &str) -> Value {
    json!({"uri": uri, "frontmatter": {"name": uri.rsplit('/').nth(1).unwrap(), "description": "d"}, "resources": "dynamic"})
}

/// Alpha reads directories; Beta does not, and denies one skill and one file.
fn skilled() -> (ServerDefinition, Catalogs) {
    let d = def(vec![
        mcp_app("a", "Alpha", json!({})),
        mcp_app(
            "b",
            "Beta",
            json!({"denied_resources": ["skill://beta/secret/SKILL.md", "skill://beta/y/private.md"]}),
        ),
        mcp_app("c", "Plain", json!({})),
    ]);
    let ext = |settings: Value| json!({"extensions": {(catalog::SKILLS_EXTENSION): settings}});
    let mut c = Catalogs::default();
    let a = Catalog {
        capabilities: ext(json!({"directoryRead": true})),
        skills: vec![
            skill("skill://alpha/x/SKILL.md"),
            skill("skill://shared/SKILL.md"),
            json!({"uri": "no-skill-md"}),
        ],
        ..Default::default()
    };
    let b = Catalog {
        capabilities: ext(json!({})),
        skills: vec![
            skill("skill://shared/SKILL.md"),
            skill("skill://beta/y/SKILL.md"),
            skill("skill://beta/secret/SKILL.md"),
        ],
        ..Default::default()
    };
    let plain = Catalog {
        capabilities: json!({"resources": {}}),
        resources: vec![json!({"uri": "skill://plain/p/SKILL.md", "name": "p"})],
        ..Default::default()
    };
    c.0.insert("a".into(), Rc::new(a));
    c.0.insert("b".into(), Rc::new(b));
    c.0.insert("c".into(), Rc::new(plain));
    (d, c)
}

#[test]
fn skills_are_aggregated_paged_and_collide_like_resources() {
    let (d, c) = skilled();
    let g = Gateway::new(&d, &c);
    let uris = |page: &Value| page["skills"].as_array().unwrap().iter().map(|s| s["uri"].clone()).collect::<Vec<_>>();
    let p1 = result(g.answer(&json!(1), "skills/list", &Map::new(), V26));
    assert_eq!(uris(&p1), [json!("skill://alpha/x/SKILL.md"), json!("skill://shared/SKILL.md")], "{p1}");
    assert_eq!(p1["skills"][0], skill("skill://alpha/x/SKILL.md"), "entries pass as the upstream gave them");
    let p2 = result(g.answer(&json!(1), "skills/list", &params(json!({"cursor": p1["nextCursor"]})), V26));
    // Beta's copy of the shared skill is Alpha's; its secret skill is denied.
    assert_eq!(uris(&p2), [json!("skill://beta/y/SKILL.md")], "{p2}");
    assert!(p2.get("nextCursor").is_none());
    assert_eq!(g.skill_uris(), ["skill://alpha/x/SKILL.md", "skill://shared/SKILL.md", "skill://beta/y/SKILL.md"]);
    assert!(g.collisions().iter().any(|c| c.starts_with("skill skill://shared/SKILL.md") && c.contains("'Alpha'")));
    // A skills cursor does not page resources, nor the other way round.
    let e = g.answer(&json!(1), "resources/list", &params(json!({"cursor": p1["nextCursor"]})), V26).unwrap_err();
    assert!(e.message.contains("another list"), "{}", e.message);
}

#[test]
fn skills_are_declared_to_2026_clients_only_with_resources() {
    let (d, c) = skilled();
    let g = Gateway::new(&d, &c);
    let mut caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    g.add_capabilities(&mut caps, V26);
    assert_eq!(
        caps["extensions"],
        json!({"io.modelcontextprotocol/tasks": {}, (catalog::SKILLS_EXTENSION): {"directoryRead": true}})
    );
    assert!(caps["resources"].is_object(), "skill files are resources");
    let mut old = json!({});
    g.add_capabilities(&mut old, V);
    assert!(old.get("extensions").is_none() && old["resources"].is_object(), "{old}");
    for m in skills::METHODS {
        let e = g.answer(&json!(1), m, &params(json!({"uri": "skill://alpha/x/SKILL.md"})), V).unwrap_err();
        assert_eq!(e.code, jsonrpc::METHOD_NOT_FOUND, "{m}");
        assert!(e.message.contains("2026-07-28"), "{}", e.message);
    }
    // Without Alpha, nobody reads directories: the extension is declared without directoryRead.
    let mut no_dirs = c.clone();
    no_dirs.0.remove("a");
    let g = Gateway::new(&d, &no_dirs);
    let mut caps = json!({});
    g.add_capabilities(&mut caps, V26);
    assert_eq!(caps["extensions"], json!({(catalog::SKILLS_EXTENSION): {}}));
    let e =
        g.answer(&json!(1), "resources/directory/read", &params(json!({"uri": "skill://beta/y"})), V26).unwrap_err();
    assert!(e.code == jsonrpc::METHOD_NOT_FOUND && e.message.contains("directoryRead"), "{}", e.message);
    // No upstream offers skills: none declared, the methods are not found.
    let mut none = Catalogs::default();
    none.0.insert("c".into(), Rc::clone(&c.0["c"]));
    let g = Gateway::new(&d, &none);
    let mut caps = json!({});
    g.add_capabilities(&mut caps, V26);
    assert!(caps.get("extensions").is_none());
    let e = g.answer(&json!(1), "skills/list", &Map::new(), V26).unwrap_err();
    assert!(e.code == jsonrpc::METHOD_NOT_FOUND && e.message.contains("offers skills"), "{}", e.message);
}

#[test]
fn skill_gets_files_and_directories_are_routed_to_the_skill_app() {
    let (d, c) = skilled();
    let g = Gateway::new(&d, &c);
    let id = json!(3);
    let get = |uri: &str| g.answer(&id, "skills/get", &params(json!({"uri": uri, "_meta": {"x": 1}})), V26);
    let f = forward(get("skill://beta/y/SKILL.md"));
    assert_eq!((f.app_index, f.method, f.name.as_deref()), (1, "skills/get", None));
    assert_eq!(f.params, params(json!({"uri": "skill://beta/y/SKILL.md"})));
    assert_eq!(forward(get("skill://shared/SKILL.md")).app_index, 0, "the first lister serves a shared skill");
    // A nested skill Alpha did not list lies in its skill's directory: Alpha is asked.
    assert_eq!(forward(get("skill://alpha/x/nested/inner/SKILL.md")).app_index, 0);
    // Unknown, denied, or not a SKILL.md, or a SKILL.md of an app without skills: -32602, no upstream.
    for uri in [
        "skill://nowhere/SKILL.md",
        "skill://beta/secret/SKILL.md",
        "skill://alpha/x/notes.md",
        "skill://plain/p/SKILL.md",
    ] {
        let e = get(uri).unwrap_err();
        assert_eq!((e.code, e.data.clone()), (jsonrpc::INVALID_PARAMS, Some(json!({"uri": uri}))), "{uri}");
        assert!(e.message.starts_with("Unknown skill"), "{}", e.message);
    }
    let e = g.answer(&id, "skills/get", &Map::new(), V26).unwrap_err();
    assert!(e.code == jsonrpc::INVALID_PARAMS && e.message.contains("`uri` is required"), "{}", e.message);

    // A skill's files go to its app, unlisted; a denied file, a look-alike prefix, or a denied skill's do not.
    let read = |uri: &str| g.answer(&id, "resources/read", &params(json!({"uri": uri})), V26);
    assert_eq!(forward(read("skill://alpha/x/references/A.md")).app_index, 0);
    assert_eq!(forward(read("skill://beta/y/SKILL.md")).app_index, 1);
    assert_eq!(forward(read("skill://plain/p/SKILL.md")).app_index, 2, "a listed resource stays its lister's");
    for uri in ["skill://beta/y/private.md", "skill://alpha/xy/file.md", "skill://beta/secret/a.md"] {
        assert_eq!(read(uri).unwrap_err().code, jsonrpc::INVALID_PARAMS, "{uri}");
    }

    let dir = |uri: &str| g.answer(&id, "resources/directory/read", &params(json!({"uri": uri, "cursor": "c2"})), V26);
    let f = forward(dir("skill://alpha/x/templates"));
    assert_eq!((f.app_index, f.method), (0, "resources/directory/read"));
    assert_eq!(f.params, params(json!({"uri": "skill://alpha/x/templates", "cursor": "c2"})), "the upstream's cursor");
    let e = dir("skill://beta/y").unwrap_err();
    assert!(e.code == jsonrpc::INVALID_PARAMS && e.message.contains("declare directoryRead"), "{}", e.message);
    let e = dir("skill://nowhere").unwrap_err();
    assert_eq!((e.code, e.data), (jsonrpc::INVALID_PARAMS, Some(json!({"uri": "skill://nowhere"}))));
}

#[test]
fn directory_results_leave_out_denied_children() {
    let r = json!({"resources": [{"uri": "s://a/x.md"}, {"uri": "s://a/secret.md"}, {"name": "no uri"}], "nextCursor": "2"});
    let out = skills::directory_for_client(&r, &["s://a/secret.md".to_string()]);
    assert_eq!(out, json!({"resources": [{"uri": "s://a/x.md"}, {"name": "no uri"}], "nextCursor": "2"}));
    let (d, c) = skilled();
    let mut d = d;
    // Alpha's denied list travels with its directory reads.
    d.apps[0] = mcp_app("a", "Alpha", json!({"denied_resources": ["skill://alpha/x/t/secret.md"]}));
    let g = Gateway::new(&d, &c);
    let f = forward(g.answer(&json!(1), "resources/directory/read", &params(json!({"uri": "skill://alpha/x/t"})), V26));
    assert_eq!(f.hide, ["skill://alpha/x/t/secret.md"]);
}

#[test]
fn deny_wins_on_every_route_to_a_resource() {
    let (mut d, mut c) = two();
    // Beta denies a URI its own template matches, and a template of its own.
    d.apps[1] = mcp_app(
        "b",
        "Beta",
        json!({"denied_resources": ["beta://one", "beta://item/7/data", "beta://open/{x}", "any://x/secret"]}),
    );
    let mut beta = catalog("beta", true);
    beta.resource_templates.push(json!({"uriTemplate": "beta://open/{x}", "name": "open"}));
    beta.resource_templates.push(json!({"uriTemplate": "any://{+rest}", "name": "any"}));
    c.0.insert("b".into(), Rc::new(beta));
    let g = Gateway::new(&d, &c);
    let id = json!(1);
    let read = |uri: &str| g.answer(&id, "resources/read", &params(json!({"uri": uri})), V);
    // Read through the template: refused by Flowgate, saying why.
    for uri in ["beta://item/7/data", "any://x/secret"] {
        let e = read(uri).unwrap_err();
        assert_eq!((e.code, e.data.clone()), (-32002, Some(json!({"uri": uri}))), "{uri}");
        assert!(e.message.starts_with("Resource not found") && e.message.contains("denied_resources"), "{}", e.message);
    }
    // Other URIs of the same templates still go to Beta.
    assert_eq!(forward(read("beta://item/8/data")).app_index, 1);
    assert_eq!(forward(read("any://x/public")).app_index, 1);
    // Completion: neither the denied URI nor the denied template (which `any://{+rest}` matches
    // as a string) reaches Beta.
    let complete = |uri: &str| {
        g.answer(
            &id,
            "completion/complete",
            &params(json!({"ref": {"type": "ref/resource", "uri": uri}, "argument": {"name": "x", "value": ""}})),
            V,
        )
    };
    for uri in ["beta://item/7/data", "any://x/secret"] {
        let e = complete(uri).unwrap_err();
        assert!(e.code == jsonrpc::INVALID_PARAMS && e.message.contains("denies it"), "{uri}: {}", e.message);
    }
    assert_eq!(forward(complete("beta://item/{id}/data")).app_index, 1);
    // Nor is a subscription to it forwarded.
    let e = g.answer(&id, "resources/subscribe", &params(json!({"uri": "beta://item/7/data"})), V).unwrap_err();
    assert_eq!(e.code, -32002, "{}", e.message);

    // A URI one app denies goes to a later app whose template matches it (its own resource), as
    // a listed URI does.
    d.apps[0] = mcp_app("a", "Alpha", json!({"denied_resources": ["shared://item/1/data"]}));
    let (mut a, mut b) = (catalog("alpha", false), catalog("beta", false));
    a.resource_templates = vec![json!({"uriTemplate": "shared://item/{id}/data", "name": "a"})];
    b.resource_templates = vec![json!({"uriTemplate": "shared://{+rest}", "name": "b"})];
    c.0.insert("a".into(), Rc::new(a));
    c.0.insert("b".into(), Rc::new(b));
    let g = Gateway::new(&d, &c);
    let read = |uri: &str| g.answer(&id, "resources/read", &params(json!({"uri": uri})), V);
    assert_eq!(forward(read("shared://item/1/data")).app_index, 1);
    assert_eq!(forward(read("shared://item/2/data")).app_index, 0);
}
