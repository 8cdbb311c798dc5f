//! Conversations of Dify chat apps (`backend.conversations`): a result names Dify's
//! conversation, the next call continues it, and a conversation stays its caller's: another
//! client key, or another client of an open server, cannot continue it and is told so in words
//! that do not say whether the id exists.

use serde_json::{json, Value};

use super::*;
use crate::sim::backends::dify;

const FORM: &str = r#"[{"text-input": {"variable": "text", "label": "Text", "required": false}}]"#;

/// A published chat-mode app answering "Hi." with `backend` settings; its (server id, code).
fn chat_server(fx: &Fx, name: &str, mode: &str, key: &str, backend: Value) -> (String, String) {
    fx.dify.add_app(key, dify::App { name: name.into(), answer: "Hi.".into(), ..dify::App::new(mode) });
    fx.secret(key);
    let mut b = json!({"base_url": format!("{DIFY}/v1"), "api_key": key});
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let form: Value = serde_json::from_str(FORM).unwrap_or_default();
    let body = json!({"name": name, "description": "A chat", "mode": mode, "backend": b, "user_input_form": form});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "creating the app: {}", r.text());
    let app = r.json().unwrap_or_default()["id"].as_str().unwrap_or_default().to_string();
    let r = fx.console(Method::Post, &format!("/apps/{app}/server"), Some(&json!({"description": ""})));
    assert_eq!(r.status, 201, "publishing: {}", r.text());
    let v = r.json().unwrap_or_default();
    let code = v["server_code"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(code.clone());
    (v["id"].as_str().unwrap_or_default().to_string(), code)
}

/// A client key named `name` on a server in auth mode `key`: the key.
fn key_named(fx: &Fx, server_id: &str, name: &str) -> String {
    let r = fx.console(Method::Put, &format!("/servers/{server_id}/auth"), Some(&json!({"mode": "key"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = fx.console(Method::Post, &format!("/servers/{server_id}/keys"), Some(&json!({"name": name})));
    assert_eq!(r.status, 201, "{}", r.text());
    let key = r.json().unwrap_or_default()["key"].as_str().unwrap_or_default().to_string();
    fx.codes.borrow_mut().push(key.clone());
    key
}

/// How a call is made: JSON only or SSE, and the caller's headers.
#[derive(Clone, Copy)]
enum Via {
    Json,
    Sse,
}

fn call_as(fx: &Fx, code: &str, via: Via, headers: &[(&str, &str)], tool: &str, args: Value) -> Value {
    let accept = match via {
        Via::Json => "application/json",
        Via::Sse => "application/json, text/event-stream",
    };
    let mut all = vec![("content-type", "application/json"), ("accept", accept), ("mcp-protocol-version", V2025)];
    all.extend_from_slice(headers);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let r = fx.sim.request(request(Method::Post, &Fx::mcp_url(code), &all, Some(&body)));
    assert_eq!(r.status, 200, "{}", r.text());
    last(&r)["result"].clone()
}

/// The bodies Dify got for chat messages under `key`.
fn chat_bodies(fx: &Fx, key: &str) -> Vec<Value> {
    fx.dify.requests_for(key).iter().filter(|r| r.path == "/v1/chat-messages").filter_map(|r| r.json()).collect()
}

fn conversation_of(result: &Value) -> String {
    result["structuredContent"]["conversation_id"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_chat_app_with_conversations_continues_them_on_every_path() {
    let fx = Fx::new(4101);
    for (i, (mode, via)) in
        [("chat", Via::Json), ("chat", Via::Sse), ("advanced-chat", Via::Json), ("agent-chat", Via::Json)]
            .into_iter()
            .enumerate()
    {
        let (key, name) = (format!("app-conv-{i}"), format!("Talk{i}"));
        let (_, code) = chat_server(&fx, &name, mode, &key, json!({"conversations": true}));
        // The tool says how to hold a conversation, in its description and both schemas.
        let list = last(&fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})));
        let tool = &list["result"]["tools"][0];
        assert!(tool["description"].as_str().unwrap_or_default().contains("pass that conversation_id"), "{tool}");
        assert_eq!(tool["inputSchema"]["properties"]["conversation_id"]["type"], "string", "{tool}");
        assert_eq!(tool["inputSchema"]["required"], json!(["query"]), "conversation_id is optional");
        assert_eq!(tool["outputSchema"]["properties"]["conversation_id"]["type"], "string", "{tool}");

        let first = call_as(&fx, &code, via, &[], &name, json!({"query": "first"}));
        assert_eq!(first["isError"], false, "{mode}: {first}");
        let id = conversation_of(&first);
        assert_eq!(id.len(), 36, "{mode}: a conversation is named: {first}");
        assert_eq!(first["structuredContent"]["answer"], "Hi.");
        assert_eq!(first["_meta"]["flowgate/conversationId"], id.as_str(), "{first}");
        let note = first["content"][1]["text"].as_str().unwrap_or_default();
        assert!(note.starts_with(&format!("conversation_id: {id}")), "{note}");

        let second = call_as(&fx, &code, via, &[], &name, json!({"query": "second", "conversation_id": id}));
        assert_eq!(conversation_of(&second), id, "{mode}: {second}");
        let third = call_as(&fx, &code, via, &[], &name, json!({"query": "third", "conversation_id": id}));
        assert_eq!(conversation_of(&third), id);
        // Dify saw the earlier turns of the one conversation.
        assert_eq!(third["content"][0]["text"], r#"Hi. (turn 3; earlier: "first", "second")"#, "{mode}: {third}");
        let sent: Vec<Value> = chat_bodies(&fx, &key).iter().map(|b| b["conversation_id"].clone()).collect();
        assert_eq!(sent, [json!(""), json!(id), json!(id)], "{mode}: a new conversation is asked for with \"\"");
        // Leaving the id out starts another.
        let again = call_as(&fx, &code, via, &[], &name, json!({"query": "new"}));
        assert_ne!(conversation_of(&again), id);
        assert_eq!(again["content"][0]["text"], "Hi.");
    }
    fx.assert_invariants();
}

#[test]
fn a_conversation_stays_with_the_client_key_that_started_it() {
    let fx = Fx::new(4102);
    let key = "app-conv-keys";
    let (server_id, code) = chat_server(&fx, "Talk", "chat", key, json!({"conversations": true}));
    let (alice, bob) = (key_named(&fx, &server_id, "alice"), key_named(&fx, &server_id, "bob"));
    let (alice, bob) = (format!("Bearer {alice}"), format!("Bearer {bob}"));
    let as_alice = [("authorization", alice.as_str())];
    let as_bob = [("authorization", bob.as_str())];

    let started = call_as(&fx, &code, Via::Json, &as_alice, "Talk", json!({"query": "secret plans"}));
    let id = conversation_of(&started);
    assert!(!id.is_empty(), "{started}");
    // Bob holds alice's id: refused in words, on both paths; Dify ran nothing for him.
    for via in [Via::Json, Via::Sse] {
        let stolen = call_as(&fx, &code, via, &as_bob, "Talk", json!({"query": "what plans?", "conversation_id": id}));
        assert_eq!(stolen["isError"], true, "{stolen}");
        let text = stolen["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains(&format!("no conversation {id} of yours")), "{text}");
        assert!(text.contains("omit conversation_id to start a new conversation"), "{text}");
        assert!(!text.contains("secret plans") && stolen.get("structuredContent").is_none(), "{stolen}");
        // The same words as for an id that never existed: nothing says the id is someone's.
        let unknown = "0badc0de-0000-4000-8000-000000000000";
        let made_up =
            call_as(&fx, &code, via, &as_bob, "Talk", json!({"query": "what plans?", "conversation_id": unknown}));
        assert_eq!(made_up["content"][0]["text"].as_str().unwrap_or_default().replace(unknown, &id), text);
    }
    let turns = fx.dify.conversations.borrow().get(&id).cloned().map(|c| (c.user, c.queries));
    assert_eq!(turns, Some(("alice".to_string(), vec!["secret plans".to_string()])), "bob's turn reached it");
    // Dify got bob's attempts as bob's: the end user is the caller's, whichever path.
    let users: Vec<Value> = chat_bodies(&fx, key).iter().map(|b| b["user"].clone()).collect();
    assert_eq!(users, ["alice", "bob", "bob", "bob", "bob"]);
    // Alice goes on, also streamed.
    let next = call_as(&fx, &code, Via::Sse, &as_alice, "Talk", json!({"query": "go on", "conversation_id": id}));
    assert_eq!(next["content"][0]["text"], r#"Hi. (turn 2; earlier: "secret plans")"#, "{next}");
    fx.assert_invariants();
}

#[test]
fn on_an_open_server_each_client_is_its_own_caller() {
    let fx = Fx::new(4103);
    let (_, code) = chat_server(&fx, "Talk", "chat", "app-conv-open", json!({"conversations": true}));
    let a = [("user-agent", "agent-a/1.0")];
    let b = [("user-agent", "agent-b/2.0")];
    let id = conversation_of(&call_as(&fx, &code, Via::Json, &a, "Talk", json!({"query": "one"})));
    let other = call_as(&fx, &code, Via::Json, &b, "Talk", json!({"query": "two", "conversation_id": id}));
    assert_eq!(other["isError"], true, "{other}");
    // The same client, even over another path, is the same caller.
    let same = call_as(&fx, &code, Via::Sse, &a, "Talk", json!({"query": "two", "conversation_id": id}));
    assert_eq!(same["isError"], false, "{same}");
    assert_eq!(conversation_of(&same), id);
    fx.assert_invariants();
}

#[test]
fn conversations_are_off_by_default_and_only_for_chat_modes() {
    let fx = Fx::new(4104);
    let key = "app-conv-off";
    let (_, code) = chat_server(&fx, "Plain", "chat", key, json!({}));
    let list = last(&fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})));
    let tool = &list["result"]["tools"][0];
    assert!(tool["inputSchema"]["properties"].get("conversation_id").is_none(), "{tool}");
    assert_eq!(tool["outputSchema"]["properties"]["answer"], json!({"type": "string"}));
    assert!(tool["outputSchema"]["properties"].get("conversation_id").is_none(), "{tool}");
    assert!(!tool["description"].as_str().unwrap_or_default().contains("conversation"), "{tool}");
    let id = "6f9619ff-8b86-d011-b42d-00cf4fc964ff";
    let r = call_as(&fx, &code, Via::Json, &[], "Plain", json!({"query": "hi", "conversation_id": id}));
    assert_eq!(r["structuredContent"], json!({"answer": "Hi."}), "{r}");
    assert!(r.get("_meta").is_none() && r["content"].as_array().map(Vec::len) == Some(1), "{r}");
    assert!(chat_bodies(&fx, key).iter().all(|b| b.get("conversation_id").is_none()), "an id went to Dify");

    // Refused where there is no conversation, or when not a flag.
    let create = |mode: &str, backend: Value, form: Value| {
        let mut b = json!({"base_url": format!("{DIFY}/v1"), "api_key": "app-x"});
        if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
            o.extend(x.clone());
        }
        let body = json!({"name": "X", "mode": mode, "backend": b, "user_input_form": form});
        fx.console(Method::Post, "/apps", Some(&body))
    };
    for (mode, value, field, needle) in [
        ("workflow", json!(true), "backend.conversations", "a workflow app has no conversations"),
        ("completion", json!(true), "backend.conversations", "a completion app has no conversations"),
        ("chat", json!("yes"), "backend.conversations", "must be true or false"),
    ] {
        let r = create(mode, json!({"conversations": value}), json!([]));
        assert_eq!(r.status, 400, "{}", r.text());
        let errors = r.json().unwrap_or_default()["errors"].clone();
        assert!(
            errors
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["field"] == field && e["message"].as_str().unwrap_or_default().contains(needle)),
            "{mode}: {errors}"
        );
    }
    let form = json!([{"text-input": {"variable": "conversation_id", "label": "C"}}]);
    let r = create("chat", json!({"conversations": true}), form.clone());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("'conversation_id' is reserved"), "{}", r.text());
    assert_eq!(create("chat", json!({}), form).status, 201, "a variable of that name is fine without conversations");
    // Off and false are the same; the setting reads back as it was written.
    let r = create("agent-chat", json!({"conversations": true}), json!([]));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json().unwrap_or_default()["backend"]["conversations"], true, "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn a_conversation_id_that_is_no_uuid_is_an_argument_error_before_dify() {
    let fx = Fx::new(4105);
    let key = "app-conv-bad";
    let (_, code) = chat_server(&fx, "Talk", "chat", key, json!({"conversations": true}));
    for bad in [json!("last one"), json!(7)] {
        let r = call_as(&fx, &code, Via::Json, &[], "Talk", json!({"query": "hi", "conversation_id": bad}));
        assert_eq!(r["isError"], true, "{r}");
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.starts_with("Invalid arguments for tool 'Talk': argument 'conversation_id'"), "{text}");
    }
    assert!(chat_bodies(&fx, key).is_empty(), "a refused call reached Dify");
    fx.assert_invariants();
}
