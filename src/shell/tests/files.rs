//! Files in and out of Dify apps: file inputs in the tool schema, URLs judged by the guard
//! before Dify sees them, data uploaded (`/files/upload`, multipart, the call's end user) and
//! sent as `local_file`, the form's rules and the size caps enforced before anything is sent,
//! a chat app's `files`, imports that keep `file_upload`; file outputs, chat files and
//! `message_file` events as resource links.

use serde_json::{json, Value};

use super::*;
use crate::sim::backends::dify;

const KEY: &str = "app-files-0123456789abcdef";

fn form() -> Value {
    json!([
        {"text-input": {"variable": "text", "label": "Text", "required": false}},
        {"file": {"variable": "doc", "label": "Document", "required": true, "allowed_file_types": ["document"],
                  "allowed_file_upload_methods": ["remote_url", "local_file"]}},
        {"file-list": {"variable": "pics", "label": "Pictures", "max_length": 2, "allowed_file_types": ["image"]}}
    ])
}

/// A Dify app with `form` and `outputs`, its backend settings merged with `backend`, published.
fn server(fx: &Fx, mode: &str, app: dify::App, outputs: Value, backend: Value) -> String {
    let form = app.user_input_form.clone();
    fx.dify.add_app(KEY, app);
    fx.secret(KEY);
    let mut b = json!({"base_url": format!("{DIFY}/v1"), "api_key": KEY});
    if let (Some(o), Some(x)) = (b.as_object_mut(), backend.as_object()) {
        o.extend(x.clone());
    }
    let body = json!({"name": "Reader", "description": "Reads files", "mode": mode, "backend": b,
        "user_input_form": form, "outputs": outputs});
    let r = fx.console(Method::Post, "/apps", Some(&body));
    assert_eq!(r.status, 201, "creating the app: {}", r.text());
    let id = r.json().and_then(|v| v["id"].as_str().map(str::to_string)).unwrap_or_default();
    fx.publish(&id)
}

fn workflow(fx: &Fx) -> String {
    let app = dify::App { user_input_form: form(), ..dify::App::new("workflow") };
    server(fx, "workflow", app, json!([{"variable": "echo", "type": "object"}]), json!({}))
}

/// The run requests the scripted Dify got (not uploads).
fn runs(fx: &Fx) -> Vec<Value> {
    fx.dify
        .requests_for(KEY)
        .iter()
        .filter(|r| r.path.ends_with("/run") || r.path.ends_with("-messages"))
        .filter_map(|r| r.json())
        .collect()
}

/// A tools/call of the Reader tool as a client of `version` that accepts `accept`.
fn call_as(fx: &Fx, code: &str, version: &str, accept: &str, arguments: Value) -> ClientResponse {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "Reader", "arguments": arguments}});
    let headers = [("content-type", "application/json"), ("accept", accept), ("mcp-protocol-version", version)];
    fx.sim.request(request(Method::Post, &Fx::mcp_url(code), &headers, Some(&body)))
}

fn result(resp: &ClientResponse) -> Value {
    last(resp)["result"].clone()
}

fn tool_error(resp: &ClientResponse) -> String {
    let r = result(resp);
    assert_eq!(r["isError"], true, "expected a tool error: {}", resp.text());
    r["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn file_inputs_are_in_the_schema_and_required_when_the_form_says_so() {
    let fx = Fx::new(41);
    let code = workflow(&fx);
    let list = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let schema = &last(&list)["result"]["tools"][0]["inputSchema"];
    assert_eq!(schema["required"], json!(["doc"]));
    assert_eq!(schema["properties"]["doc"]["anyOf"].as_array().map(Vec::len), Some(4));
    let words = schema["properties"]["doc"]["description"].as_str().unwrap_or_default();
    assert!(
        words.contains("{\"data\": \"<base64>\", \"name\": \"report.pdf\"") && words.contains("accepted: document"),
        "{words}"
    );
    assert_eq!(schema["properties"]["pics"]["type"], "array");
    assert_eq!(schema["properties"]["pics"]["maxItems"], 2);
    fx.assert_invariants();
}

#[test]
fn a_url_goes_to_dify_as_remote_url_with_its_type() {
    let fx = Fx::new(42);
    let code = workflow(&fx);
    let r = fx.call(
        &code,
        "Reader",
        json!({"doc": "https://files.example.com/q3/report.pdf",
        "pics": [{"url": "https://files.example.com/a.png"}]}),
    );
    assert_eq!(result(&r)["isError"], false, "{}", r.text());
    let runs = runs(&fx);
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0]["inputs"]["doc"],
        json!({"type": "document", "transfer_method": "remote_url", "url": "https://files.example.com/q3/report.pdf"})
    );
    assert_eq!(
        runs[0]["inputs"]["pics"],
        json!([{"type": "image", "transfer_method": "remote_url", "url": "https://files.example.com/a.png"}])
    );
    assert!(fx.dify.uploads.borrow().is_empty());
    fx.assert_invariants();
}

#[test]
fn data_is_uploaded_as_the_calls_end_user_and_sent_as_local_file() {
    let fx = Fx::new(43);
    let code = workflow(&fx);
    let png = [0x89u8, b'P', b'N', b'G', 0, 0xff, 0x10];
    let r = fx.call(
        &code,
        "Reader",
        json!({
        "doc": {"data": crate::pure::base64::encode(b"quarterly numbers"), "name": "q3.txt", "mime_type": "text/plain"},
        "pics": [{"type": "resource", "resource": {"uri": "file:///scan.png", "mimeType": "image/png",
                  "blob": crate::pure::base64::encode(png)}}]}),
    );
    assert_eq!(result(&r)["isError"], false, "{}", r.text());
    let uploads = fx.dify.uploads.borrow().clone();
    assert_eq!(uploads.len(), 2);
    let (doc, pic) = (&uploads["upload-1"], &uploads["upload-2"]);
    assert_eq!(
        (doc.name.as_str(), doc.mime_type.as_str(), doc.bytes.as_slice()),
        ("q3.txt", "text/plain", &b"quarterly numbers"[..])
    );
    assert_eq!((pic.name.as_str(), pic.bytes.as_slice()), ("scan.png", &png[..]), "binary bytes arrive as sent");
    let runs = runs(&fx);
    assert_eq!(doc.user, runs[0]["user"].as_str().unwrap_or_default(), "uploaded as the call's end user");
    assert_eq!(
        runs[0]["inputs"]["doc"],
        json!({"type": "document", "transfer_method": "local_file", "upload_file_id": "upload-1"})
    );
    assert_eq!(runs[0]["inputs"]["pics"][0]["upload_file_id"], "upload-2");
    fx.assert_invariants();
}

#[test]
fn a_private_url_is_refused_before_dify_sees_anything() {
    let fx = Fx::new(44);
    let code = workflow(&fx);
    let before = fx.dify.requests_for(KEY).len();
    for url in ["http://10.0.0.1/x.pdf", "http://127.0.0.1:5001/x.pdf", "http://169.254.169.254/latest/meta-data/a.txt"]
    {
        // A URL among data: nothing is uploaded either.
        let r = fx.call(&code, "Reader", json!({"doc": url, "pics": [{"data": "aGk=", "name": "a.png"}]}));
        let text = tool_error(&r);
        assert!(
            text.contains("argument 'doc' was refused: its host is a") && text.contains("public addresses"),
            "{url}: {text}"
        );
    }
    assert_eq!(fx.dify.requests_for(KEY).len(), before, "Dify saw nothing");
    // The deployment's own allowance applies to files too.
    fx.sim.set_setting("ALLOW_PRIVATE_BACKENDS", "10.0.0.1");
    fx.sim.evict_isolate();
    let r = fx.call(&code, "Reader", json!({"doc": "http://10.0.0.1/x.pdf"}));
    assert_eq!(result(&r)["isError"], false, "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn the_forms_rules_are_enforced_before_anything_is_sent() {
    let fx = Fx::new(45);
    let code = workflow(&fx);
    let before = fx.dify.requests_for(KEY).len();
    let r = fx.call(
        &code,
        "Reader",
        json!({"doc": "https://x.example/cat.png",
        "pics": ["https://x.example/1.png", "https://x.example/2.png", "https://x.example/3.png"]}),
    );
    let text = tool_error(&r);
    assert!(text.contains("argument 'doc': a .png file (image) is not accepted here (accepted: document)"), "{text}");
    assert!(text.contains("argument 'pics' takes at most 2 files (got 3)"), "{text}");
    let text = tool_error(&fx.call(&code, "Reader", json!({"pics": ["https://x.example/1.png"]})));
    assert!(text.contains("missing required argument 'doc'"), "{text}");
    let text = tool_error(&fx.call(&code, "Reader", json!({"doc": {"data": "not base64!", "name": "a.pdf"}})));
    assert!(text.contains("argument 'doc' has `data` that is not valid base64"), "{text}");
    assert_eq!(fx.dify.requests_for(KEY).len(), before, "Dify saw nothing");
    fx.assert_invariants();
}

#[test]
fn every_upload_is_capped_by_max_file_bytes_and_by_difys_answer() {
    let fx = Fx::new(46);
    fx.sim.set_setting("MAX_FILE_BYTES", "16");
    let app = dify::App { user_input_form: form(), upload_limit: 8, ..dify::App::new("workflow") };
    let code = server(&fx, "workflow", app, json!([]), json!({}));
    let data = |n: usize| json!({"doc": {"data": crate::pure::base64::encode(vec![b'a'; n]), "name": "a.txt"}});
    let text = tool_error(&fx.call(&code, "Reader", data(17)));
    assert!(text.contains("argument 'doc' is a file of 17 bytes; at most 16 bytes (16 bytes) may be sent"), "{text}");
    assert!(fx.dify.requests_for(KEY).is_empty(), "refused before any upload");
    // Within Flowgate's cap, over Dify's: Dify's refusal, in words.
    let text = tool_error(&fx.call(&code, "Reader", data(12)));
    assert!(
        text.contains("the file of argument 'doc' could not be uploaded") && text.contains("HTTP 413, file_too_large"),
        "{text}"
    );
    assert!(runs(&fx).is_empty(), "no run after a failed upload");
    let r = fx.call(&code, "Reader", data(8));
    assert_eq!(result(&r)["isError"], false, "{}", r.text());
    fx.assert_invariants();
}

#[test]
fn a_chat_app_takes_files_when_its_upload_feature_is_on() {
    let fx = Fx::new(47);
    let upload =
        json!({"image": {"enabled": true, "number_limits": 2, "transfer_methods": ["remote_url", "local_file"]}});
    let app = dify::App { file_upload: upload.clone(), ..dify::App::new("chat") };
    let code = server(&fx, "chat", app, json!([]), json!({"file_upload": upload}));
    let list = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let schema = &last(&list)["result"]["tools"][0]["inputSchema"];
    assert_eq!(schema["properties"]["files"]["maxItems"], 2);
    assert_eq!(schema["required"], json!(["query"]));
    let r = fx.call(
        &code,
        "Reader",
        json!({"query": "What is in the picture?",
        "files": ["https://files.example.com/a.png", {"data": "aGk=", "name": "b.webp"}]}),
    );
    assert_eq!(result(&r)["isError"], false, "{}", r.text());
    let runs = runs(&fx);
    assert_eq!(
        runs[0]["files"],
        json!([{"type": "image", "transfer_method": "remote_url", "url": "https://files.example.com/a.png"},
               {"type": "image", "transfer_method": "local_file", "upload_file_id": "upload-1"}])
    );
    let text =
        tool_error(&fx.call(&code, "Reader", json!({"query": "q", "files": ["https://files.example.com/a.pdf"]})));
    assert!(
        text.contains("argument 'files[0]': a .pdf file (document) is not accepted here (accepted: image"),
        "{text}"
    );
    fx.assert_invariants();
}

#[test]
fn an_import_keeps_file_inputs_and_the_upload_feature() {
    let fx = Fx::new(48);
    let upload = json!({"image": {"enabled": true, "number_limits": 3, "transfer_methods": ["local_file"]}});
    let form =
        json!([{"file": {"variable": "doc", "label": "Doc", "required": true, "allowed_file_types": ["document"]}}]);
    fx.dify.add_app(
        KEY,
        dify::App { user_input_form: form, file_upload: upload.clone(), ..dify::App::new("advanced-chat") },
    );
    fx.secret(KEY);
    let r = fx.console(Method::Post, "/apps/import", Some(&json!({"base_url": format!("{DIFY}/v1"), "api_key": KEY})));
    assert_eq!(r.status, 201, "{}", r.text());
    let app = r.json().unwrap_or_default();
    assert_eq!(app["backend"]["file_upload"], upload);
    assert_eq!(app["backend"]["system_parameters"]["image_file_size_limit"], 10);
    assert_eq!(app["user_input_form"][0]["file"]["allowed_file_types"], json!(["document"]));
    let code = fx.publish(app["id"].as_str().unwrap_or_default());
    let list = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let schema = &last(&list)["result"]["tools"][0]["inputSchema"];
    assert_eq!(schema["required"], json!(["query", "doc"]));
    assert!(schema["properties"]["files"]["description"].as_str().unwrap_or_default().contains("as data only"));
    fx.assert_invariants();
}

fn dify_file(name: &str) -> Value {
    json!({"dify_model_identity": "__dify__file__", "type": "image", "transfer_method": "tool_file",
           "filename": name, "extension": ".png", "mime_type": "image/png", "size": 2048,
           "url": format!("https://dify.test/files/tools/{name}?timestamp=1&sign=s")})
}

#[test]
fn workflow_file_outputs_become_resource_links() {
    let fx = Fx::new(49);
    let app = dify::App {
        outputs: Some(json!({"chart": dify_file("chart.png"), "pages": [dify_file("p1.png")], "summary": "s"})),
        ..dify::App::new("workflow")
    };
    let outputs = json!([{"variable": "chart", "type": "file"}, {"variable": "pages", "type": "array[file]"},
                         {"variable": "summary", "type": "string"}]);
    let code = server(&fx, "workflow", app, outputs, json!({}));
    let list = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let out = &last(&list)["result"]["tools"][0]["outputSchema"];
    assert_eq!(out["properties"]["chart"]["type"], "object");
    assert_eq!(out["properties"]["pages"]["items"]["type"], "object");
    let r = result(&fx.call(&code, "Reader", json!({})));
    assert_eq!(
        r["content"][1],
        json!({"type": "resource_link", "uri": "https://dify.test/files/tools/chart.png?timestamp=1&sign=s",
               "name": "chart.png", "mimeType": "image/png", "size": 2048})
    );
    assert_eq!(r["content"][2]["name"], "p1.png");
    assert_eq!(r["structuredContent"]["chart"]["filename"], "chart.png");
    // A client of 2025-03-26 gets a text line with the link.
    let old = call_as(&fx, &code, "2025-03-26", "application/json, text/event-stream", json!({}));
    assert_eq!(
        result(&old)["content"][1],
        json!({"type": "text", "text": "chart.png: https://dify.test/files/tools/chart.png?timestamp=1&sign=s"})
    );
    fx.assert_invariants();
}

#[test]
fn a_chats_message_file_events_become_resource_links() {
    let fx = Fx::new(50);
    let file = json!({"id": "f1", "type": "image", "belongs_to": "assistant", "url": "https://dify.test/files/f1.png"});
    let app = dify::App { message_files: vec![file.clone()], ..dify::App::new("chat") };
    let code = server(&fx, "chat", app, json!([]), json!({}));
    let link = json!({"type": "resource_link", "uri": "https://dify.test/files/f1.png", "name": "f1.png", "mimeType": "image/png"});
    // A client that takes SSE: Dify streams, and the message_file event is read.
    let streamed = fx.call(&code, "Reader", json!({"query": "draw"}));
    assert!(streamed.headers.get("content-type").is_some_and(|c| c.contains("event-stream")));
    let r = result(&streamed);
    assert_eq!(r["content"][1], link, "{r}");
    assert_eq!(
        (&r["structuredContent"]["files"][0]["id"], &r["structuredContent"]["files"][0]["url"]),
        (&file["id"], &file["url"])
    );
    fx.assert_invariants();
}
