//! Files a Dify app returns: a workflow output of type `file` or `array[file]`, a chat answer's
//! `message_files`, a streamed `message_file` event. Each becomes a `resource_link` content
//! item (its URL, name, MIME type, size), the shape an upstream MCP tool returns one in; the
//! file object itself stays in `structuredContent`, as the output schema declares it
//! ([`file_schema`]). Clients of revisions before 2025-06-18 get a text line with the link
//! (`downgrade::resource_link_text`, the same line an upstream's link becomes).

use crate::json;
use serde_json::Value;

use super::files::{extension_of, mime_of_extension};
use super::mode::DifyMode;
use crate::pure::protocol::version::Version;

/// Dify marks its serialized file objects with this identity.
const DIFY_FILE: &str = "__dify__file__";

/// Most files one result links (the rest stay in `structuredContent`).
pub const MAX_LINKS: usize = 32;

/// Whether `v` is a file object Dify returned: a URL and Dify's identity mark, or one of the
/// members only its file objects carry.
pub fn is_file(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let has_url = o.get("url").and_then(Value::as_str).is_some_and(|u| !u.is_empty());
    has_url
        && (o.get("dify_model_identity").and_then(Value::as_str) == Some(DIFY_FILE)
            || ["transfer_method", "belongs_to", "mime_type", "filename", "upload_file_id"]
                .iter()
                .any(|k| o.contains_key(*k)))
}

/// The file objects of a result's structured output: a workflow's outputs that are files or
/// lists of files; a chat answer's `files`.
pub fn files_in(structured: &Value, mode: DifyMode) -> Vec<&Value> {
    let Some(o) = structured.as_object() else { return Vec::new() };
    let mut found = Vec::new();
    let values: Box<dyn Iterator<Item = &Value>> = match mode {
        DifyMode::Workflow => Box::new(o.values()),
        _ => Box::new(o.get(FILES_KEY).into_iter()),
    };
    for v in values {
        match v {
            Value::Array(items) => found.extend(items.iter().filter(|i| is_file(i))),
            v if is_file(v) => found.push(v),
            _ => {}
        }
    }
    found.truncate(MAX_LINKS);
    found
}

/// Where a chat answer's files sit in its structured output.
pub const FILES_KEY: &str = "files";

/// A file object as a `resource_link` content item; `None` when its URL is not absolute
/// (a Dify without `FILES_URL` set answers paths: see [`content_items`]).
pub fn resource_link(file: &Value) -> Option<Value> {
    let s = |k: &str| file.get(k).and_then(Value::as_str).map(str::trim).filter(|v| !v.is_empty());
    let uri = s("url")?;
    if !(uri.starts_with("https://") || uri.starts_with("http://")) {
        return None;
    }
    let name = s("filename").or(s("name")).map(str::to_string).unwrap_or_else(|| last_segment(uri));
    let mut link = json!({"type": "resource_link", "uri": uri, "name": name});
    let ext = match s("extension") {
        Some(e) => e.trim_start_matches('.').to_ascii_lowercase(),
        None => extension_of(&name),
    };
    match s("mime_type") {
        Some(m) => link["mimeType"] = m.into(),
        None if !ext.is_empty() && mime_of_extension(&ext) != "application/octet-stream" => {
            link["mimeType"] = mime_of_extension(&ext).into()
        }
        None => {}
    }
    if let Some(size) = file.get("size").and_then(Value::as_u64) {
        link["size"] = size.into();
    }
    Some(link)
}

fn last_segment(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or("");
    match path.rsplit('/').next() {
        Some(last) if !last.is_empty() && !last.contains(':') => last.to_string(),
        _ => "file".into(),
    }
}

/// The content items a result's files add after its text, for a client of `version`: a
/// `resource_link` each (a text line with the link before 2025-06-18). A file whose URL is a
/// path gets a line saying so.
pub fn content_items(structured: Option<&Value>, mode: DifyMode, version: Version) -> Vec<Value> {
    let Some(structured) = structured else { return Vec::new() };
    files_in(structured, mode)
        .into_iter()
        .map(|f| match resource_link(f) {
            Some(link) if version.structured_output() => link,
            Some(link) => {
                json!({"type": "text", "text": crate::pure::backend::mcp::downgrade::resource_link_text(&link)})
            }
            None => json!({"type": "text", "text": format!(
                "file {}: the Dify app gave the path {} without its host (its FILES_URL is not set)",
                f.get("filename").and_then(Value::as_str).unwrap_or("(no name)"),
                f.get("url").and_then(Value::as_str).unwrap_or("")
            )}),
        })
        .collect()
}

/// The schema of a file object in `outputSchema`: what Dify's file objects carry, loosely (Dify
/// versions differ, and a client checks `structuredContent` against it).
pub fn file_schema() -> Value {
    // Read from text: a `json!` of this size is kilobytes of the Worker bundle.
    serde_json::from_str(FILE_OBJECT).unwrap_or_else(|_| json!({"type": "object"}))
}

const FILE_OBJECT: &str = r#"{"type": "object",
  "description": "A file the app returned; its url is also sent as a resource_link",
  "properties": {"url": {"type": ["string", "null"]}, "filename": {"type": ["string", "null"]},
    "mime_type": {"type": ["string", "null"]}, "size": {"type": ["number", "null"]},
    "type": {"type": ["string", "null"]}, "extension": {"type": ["string", "null"]}}}"#;

/// The schema of an output variable of Dify type `ty` (`file`, `array[file]`), or `None` for
/// the other types (their name is their JSON Schema type).
pub fn output_type_schema(ty: &str) -> Option<Value> {
    match ty {
        "file" => Some(file_schema()),
        "array[file]" => Some(json!({"type": "array", "items": file_schema()})),
        _ => None,
    }
}

/// A chat answer's output schema gains its optional `files`.
pub fn add_files_to_answer_schema(schema: &mut Value) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            FILES_KEY.into(),
            json!({"type": "array", "items": file_schema(), "description": "files the app attached to its answer"}),
        );
    }
}

/// The files a blocking chat answer carries (`message_files`), put into its structured output.
pub fn attach_message_files(structured: &mut Value, answer: &Value) {
    let files: Vec<Value> = answer
        .get("message_files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|f| is_file(f))
        .take(MAX_LINKS)
        .cloned()
        .collect();
    if !files.is_empty() {
        structured[FILES_KEY] = Value::Array(files);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dify_file(url: &str) -> Value {
        json!({"dify_model_identity": "__dify__file__", "id": null, "type": "image", "transfer_method": "tool_file",
               "filename": "chart.png", "extension": ".png", "mime_type": "image/png", "size": 2048, "url": url})
    }

    #[test]
    fn workflow_file_outputs_become_resource_links() {
        let out = json!({"summary": "s", "chart": dify_file("https://dify.example/files/tools/1.png?sign=x"),
                         "pages": [dify_file("https://dify.example/files/a.png"), {"not": "a file"}],
                         "plain": {"url": "https://x.example", "title": "a link, not a file"}});
        let items = content_items(Some(&out), DifyMode::Workflow, Version::V2025_06_18);
        assert_eq!(
            items[0],
            json!({"type": "resource_link", "uri": "https://dify.example/files/tools/1.png?sign=x", "name": "chart.png",
                   "mimeType": "image/png", "size": 2048})
        );
        assert_eq!(items.len(), 2, "{items:#?}");
        // Older revisions: a text line with the link, as an upstream's resource_link becomes.
        let old = content_items(Some(&out), DifyMode::Workflow, Version::V2025_03_26);
        assert_eq!(old[0], json!({"type": "text", "text": "chart.png: https://dify.example/files/tools/1.png?sign=x"}));
    }

    #[test]
    fn chat_files_and_message_file_events() {
        let answer = json!({"answer": "here", "message_files": [
            {"id": "f1", "type": "image", "belongs_to": "assistant", "url": "https://dify.example/files/f1.webp"},
            {"id": "f2", "type": "image", "belongs_to": "assistant", "url": ""}]});
        let mut structured = json!({"answer": "here"});
        attach_message_files(&mut structured, &answer);
        assert_eq!(structured["files"].as_array().unwrap().len(), 1, "a file without a URL is not linked");
        let items = content_items(Some(&structured), DifyMode::Chat, Version::V2025_11_25);
        assert_eq!(
            items,
            [
                json!({"type": "resource_link", "uri": "https://dify.example/files/f1.webp", "name": "f1.webp", "mimeType": "image/webp"})
            ]
        );
        // A workflow's "files" key is only a file when it holds files; a chat's other keys never are.
        let chat = json!({"answer": "a", "other": dify_file("https://x.example/f.png")});
        assert!(content_items(Some(&chat), DifyMode::Chat, Version::V2025_06_18).is_empty());
    }

    #[test]
    fn a_path_without_a_host_is_said_in_words() {
        let out = json!({"f": dify_file("/files/tools/1.png?sign=x")});
        let items = content_items(Some(&out), DifyMode::Workflow, Version::V2025_06_18);
        assert_eq!(items[0]["type"], "text");
        assert!(items[0]["text"].as_str().unwrap().contains("FILES_URL"), "{items:?}");
    }

    #[test]
    fn output_schemas_of_file_types() {
        assert_eq!(output_type_schema("file").unwrap()["type"], "object");
        assert_eq!(output_type_schema("array[file]").unwrap()["items"]["type"], "object");
        assert_eq!(output_type_schema("string"), None);
        let mut s = json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
        add_files_to_answer_schema(&mut s);
        assert_eq!(s["properties"]["files"]["type"], "array");
        assert_eq!(s["required"], json!(["answer"]));
    }
}
