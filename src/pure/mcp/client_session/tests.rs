use serde_json::json;

use super::*;

#[test]
fn one_object_per_session_and_server() {
    let a = object_name("srv-1", "fg-session.aaa");
    assert_eq!(a, object_name("srv-1", "fg-session.aaa"));
    assert_ne!(a, object_name("srv-1", "fg-session.aab"));
    assert_ne!(a, object_name("srv-2", "fg-session.aaa"));
    assert!(!a.contains("fg-session"), "the session id is not in the name: {a}");
}

#[test]
fn only_2025_streamable_revisions_stay() {
    assert!(!can_stay(Version::V2024_11_05));
    assert!(can_stay(Version::V2025_03_26));
    assert!(can_stay(Version::V2025_11_25));
    assert!(!can_stay(Version::V2026_07_28));
}

#[test]
fn an_update_reaches_the_client_only_for_a_uri_it_subscribed_to_with_that_app() {
    let mut subs = Subscriptions::default();
    subs.add("test://watched", "app-a").unwrap();
    let update =
        |uri: &str| json!({"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": uri, "title": "x"}});
    let sub = Source::Subscription { lists_followed: true };
    assert_eq!(
        route("app-a", &subs, sub, &update("test://watched")),
        Relay::Client(json!({"jsonrpc": "2.0", "method": RESOURCE_UPDATED, "params": {"uri": "test://watched"}}))
    );
    assert_eq!(route("app-a", &subs, sub, &update("test://other")), Relay::Drop);
    // Another app's resource of the same URI is not the one subscribed to.
    assert_eq!(route("app-b", &subs, sub, &update("test://watched")), Relay::Drop);
    // Nor is the same update on the object's own session of the app: not subscribed there.
    assert_eq!(route("app-a", &subs, Source::Lists, &update("test://watched")), Relay::Drop);
    assert_eq!(subs.remove("test://watched"), Some("app-a".to_string()), "the app's last subscription");
    assert_eq!(route("app-a", &subs, sub, &update("test://watched")), Relay::Drop);
    assert_eq!(subs.remove("test://watched"), None);
    subs.add("test://x", "app-a").unwrap();
    subs.add("test://y", "app-a").unwrap();
    assert_eq!(subs.remove("test://x"), None, "app-a still has test://y");
    assert_eq!(subs.remove("test://y"), Some("app-a".to_string()));
}

#[test]
fn list_changes_pass_once_requests_are_refused_and_the_rest_dropped() {
    let subs = Subscriptions::default();
    let (alone, beside) =
        (Source::Subscription { lists_followed: false }, Source::Subscription { lists_followed: true });
    for m in LIST_CHANGED {
        let n = json!({"jsonrpc": "2.0", "method": m, "params": {"x": 1}});
        let changed = Relay::Changed(json!({"jsonrpc": "2.0", "method": m}));
        assert_eq!(route("a", &subs, Source::Lists, &n), changed);
        assert_eq!(route("a", &subs, alone, &n), changed, "no lists stream: the subscription's passes it");
        assert_eq!(route("a", &subs, beside, &n), Relay::Drop, "the lists stream passes it: once");
    }
    for source in [Source::Lists, alone] {
        let request = json!({"jsonrpc": "2.0", "id": 8, "method": "sampling/createMessage"});
        assert!(matches!(route("a", &subs, source, &request), Relay::Refuse(_)), "{source:?}");
    }
    let Relay::Refuse(r) = route("a", &subs, beside, &json!({"jsonrpc": "2.0", "id": 7, "method": "roots/list"}))
    else {
        panic!("a request must be refused")
    };
    assert_eq!(r["id"], 7);
    assert_eq!(r["error"]["code"], jsonrpc::METHOD_NOT_FOUND);
    assert!(r["error"]["message"].as_str().unwrap().contains("roots/list"), "{r}");
    for m in [
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}),
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}),
        json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
    ] {
        for source in [Source::Lists, beside, alone] {
            assert_eq!(route("a", &subs, source, &m), Relay::Drop, "{m}");
        }
    }
}

#[test]
fn subscriptions_are_bounded() {
    let mut subs = Subscriptions::default();
    for i in 0..MAX_SUBSCRIPTIONS {
        subs.add(&format!("test://{i}"), "a").unwrap();
    }
    // The same URI again is no new entry.
    subs.add("test://0", "a").unwrap();
    let e = subs.add("test://one-more", "a").unwrap_err();
    assert!(e.contains("unsubscribe"), "{e}");
    assert_eq!(subs.len(), MAX_SUBSCRIPTIONS);
}

#[test]
fn declare_widens_only_what_is_declared() {
    let none = ListChanges::default();
    let fresh = || json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": false}, "resources": {"subscribe": false, "listChanged": false}, "prompts": {"listChanged": false}, "logging": {}}});
    let mut r = fresh();
    declare(&mut r, none);
    assert_eq!(
        r["capabilities"],
        json!({"tools": {"listChanged": false}, "resources": {"subscribe": true, "listChanged": false}, "prompts": {"listChanged": false}, "logging": {}})
    );
    // List changes where some upstream tells them.
    let upstreams =
        [json!({"tools": {"listChanged": true}}), json!({"prompts": {"listChanged": true}, "resources": {}})];
    let changes = ListChanges::of(&upstreams);
    assert_eq!(changes, ListChanges { tools: true, resources: false, prompts: true });
    let mut r = fresh();
    declare(&mut r, changes);
    assert_eq!(
        r["capabilities"],
        json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": false}, "prompts": {"listChanged": true}, "logging": {}})
    );
    let all = ListChanges { tools: true, resources: true, prompts: true };
    let mut bare = json!({"protocolVersion": "2025-03-26", "capabilities": {"tools": {}}});
    declare(&mut bare, all);
    assert_eq!(bare["capabilities"], json!({"tools": {"listChanged": true}}), "no resources, nothing to subscribe to");
    // A revision that cannot open the stream is told nothing more.
    for v in ["2024-11-05", "2026-07-28"] {
        let mut old = json!({"protocolVersion": v, "capabilities": {"tools": {"listChanged": false}, "resources": {"subscribe": false}}});
        declare(&mut old, all);
        assert_eq!(
            old["capabilities"],
            json!({"tools": {"listChanged": false}, "resources": {"subscribe": false}}),
            "{v}"
        );
    }
}

#[test]
fn the_refusals_say_what_to_do() {
    let e = no_stream("resources/subscribe", Version::V2025_06_18, NoStream::NotOpen);
    assert_eq!(e.code, jsonrpc::METHOD_NOT_FOUND);
    assert!(e.message.contains("GET"), "{}", e.message);
    let e = no_stream("resources/subscribe", Version::V2026_07_28, NoStream::Stateless);
    assert_eq!(e.status, 404);
}

#[test]
fn events_are_sse_frames() {
    assert_eq!(sse_event(&json!({"a": 1})), b"event: message\ndata: {\"a\":1}\n\n".to_vec());
}
