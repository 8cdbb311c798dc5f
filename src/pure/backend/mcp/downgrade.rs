//! Upstream tools and results downgraded for a client of an older MCP revision: what its revision
//! cannot carry is left out or turned into text.

use crate::json;
use serde_json::{Map, Value};

use crate::pure::protocol::version::Version;

use super::aggregate::ExposedTool;

/// A tool as a client of `version` may see it: title and outputSchema dropped before
/// 2025-06-18, annotations before 2025-03-26, icons and execution before 2025-11-25; the name
/// replaced by the exposed name, and an input schema supplied when the upstream gave none.
pub fn tool_for_client(t: &ExposedTool, version: Version) -> Value {
    let mut tool = match &t.tool {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    tool.insert("name".into(), t.name.clone().into());
    if !tool.get("inputSchema").is_some_and(Value::is_object) {
        tool.insert("inputSchema".into(), json!({ "type": "object" }));
    }
    // `retain`, not `remove`: with preserve_order, `remove` would reorder the remaining keys.
    tool.retain(|k, _| match k.as_str() {
        "title" | "outputSchema" => version.structured_output(),
        "annotations" => version.tool_annotations(),
        "icons" | "execution" => version >= Version::V2025_11_25,
        _ => true,
    });
    Value::Object(tool)
}

/// An upstream CallToolResult as a client of `version` may see it: structuredContent dropped
/// before 2025-06-18 (its JSON becomes a text item if there is no content at all, so the client
/// still gets the answer); resource_link items become text before 2025-06-18; audio items
/// become text before 2025-03-26; everything else intact.
pub fn result_for_client(result: &Value, version: Version) -> Value {
    let Value::Object(mut r) = result.clone() else { return result.clone() };
    if let Some(Value::Array(items)) = r.get_mut("content") {
        for item in items.iter_mut() {
            let ty = item.get("type").and_then(Value::as_str).unwrap_or("");
            let text = match ty {
                "resource_link" if !version.structured_output() => Some(resource_link_text(item)),
                "audio" if !version.tool_annotations() => Some(format!(
                    "[audio ({}) left out: this client's MCP revision {} cannot receive audio]",
                    item.get("mimeType").and_then(Value::as_str).unwrap_or("unknown type"),
                    version.as_str()
                )),
                _ => None,
            };
            if let Some(text) = text {
                *item = json!({ "type": "text", "text": text });
            }
        }
    }
    if !version.structured_output() {
        if let Some(structured) = r.shift_remove("structuredContent") {
            let empty = r.get("content").and_then(Value::as_array).is_none_or(Vec::is_empty);
            if empty {
                r.insert("content".into(), json!([{ "type": "text", "text": structured.to_string() }]));
            }
        }
    }
    Value::Object(r)
}

pub fn resource_link_text(item: &Value) -> String {
    let s = |k: &str| item.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    let uri = s("uri").unwrap_or("");
    let mut text = match s("title").or(s("name")) {
        Some(label) => format!("{label}: {uri}"),
        None => uri.to_string(),
    };
    if let Some(d) = s("description") {
        text.push_str(&format!(" ({d})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use Version::*;

    #[test]
    fn tools_downgraded_per_version() {
        let t = ExposedTool {
            name: "gh_search".into(),
            upstream_name: "search".into(),
            tool: json!({"name": "search", "title": "Search", "description": "d", "inputSchema": {"type": "object"},
                         "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true},
                         "icons": [{"src": "https://x/i.png"}], "execution": {"taskSupport": "optional"}, "_meta": {"k": 1}}),
            params: vec![],
        };
        let keys =
            |v: Version| -> Vec<String> { tool_for_client(&t, v).as_object().unwrap().keys().cloned().collect() };
        assert_eq!(keys(V2024_11_05), ["name", "description", "inputSchema", "_meta"]);
        assert_eq!(keys(V2025_03_26), ["name", "description", "inputSchema", "annotations", "_meta"]);
        assert_eq!(
            keys(V2025_06_18),
            ["name", "title", "description", "inputSchema", "outputSchema", "annotations", "_meta"]
        );
        let all = [
            "name",
            "title",
            "description",
            "inputSchema",
            "outputSchema",
            "annotations",
            "icons",
            "execution",
            "_meta",
        ];
        assert_eq!(keys(V2025_11_25), all);
        assert_eq!(keys(V2026_07_28), all);
        assert_eq!(tool_for_client(&t, V2025_11_25)["name"], "gh_search");
        let bare =
            ExposedTool { name: "n".into(), upstream_name: "n".into(), tool: json!({"name": "n"}), params: vec![] };
        assert_eq!(tool_for_client(&bare, V2025_11_25), json!({"name": "n", "inputSchema": {"type": "object"}}));
    }

    #[test]
    fn results_downgraded_per_version() {
        let r = json!({
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "description": "the file"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                {"type": "image", "data": "BBBB", "mimeType": "image/png"}
            ],
            "structuredContent": {"n": 1},
            "isError": false
        });
        for v in [V2025_06_18, V2025_11_25, V2026_07_28] {
            assert_eq!(result_for_client(&r, v), r, "{v:?}");
        }
        let old = result_for_client(&r, V2025_03_26);
        assert!(old.get("structuredContent").is_none());
        assert_eq!(old["content"][1], json!({"type": "text", "text": "a.txt: file:///a.txt (the file)"}));
        assert_eq!(old["content"][2], r["content"][2], "audio is fine in 2025-03-26");
        assert_eq!(old["content"][3], r["content"][3]);
        assert_eq!(old["isError"], false);
        let oldest = result_for_client(&r, V2024_11_05);
        assert_eq!(oldest["content"][2]["type"], "text");
        assert!(oldest["content"][2]["text"].as_str().unwrap().contains("audio/wav"));
        assert_eq!(oldest["content"][0], r["content"][0]);

        // Only structured content: old clients get its JSON as text.
        let s = result_for_client(&json!({"content": [], "structuredContent": {"n": 1}}), V2025_03_26);
        assert_eq!(s, json!({"content": [{"type": "text", "text": "{\"n\":1}"}]}));
        assert_eq!(result_for_client(&json!("odd"), V2024_11_05), json!("odd"));
    }
}
