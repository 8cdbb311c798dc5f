//! An upstream MCP server's tools and prompts as a Flowgate server exposes them: named per app
//! (prefixed, valid, unique), filtered by `allowed_*` / `denied_*`; its resources filtered.

use serde_json::Value;

use super::config::McpConfig;

use crate::pure::protocol::names::sanitize_name;
use crate::pure::protocol::param_headers::{self, ParamHeader};

/// SEP-986's limit for a tool name.
pub const MAX_EXPOSED_NAME: usize = 128;

/// One upstream tool as a Flowgate server exposes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExposedTool {
    /// The name Flowgate's clients see and call.
    pub name: String,
    /// The name to call upstream.
    pub upstream_name: String,
    /// The upstream's tool definition, untouched.
    pub tool: Value,
    /// The arguments the tool mirrors into `Mcp-Param-*` headers (SEP-2243 `x-mcp-header`),
    /// read once here; empty for most tools.
    pub params: Vec<ParamHeader>,
}

/// The upstream's tools as a Flowgate server exposes them. Names are `<app>_<tool>` by default
/// (the app part via `names::sanitize_name`; `tool_name_prefix: false` keeps the upstream name), so tools
/// of several apps cannot clash. `allowed_tools` / `denied_tools` match the UPSTREAM name,
/// before prefixing (absent: all allowed; `[]`: none allowed; denied wins); Names are made valid per SEP-986
/// (`[A-Za-z0-9_.-]{1,128}`) and unique (`_2`, `_3`, … on a clash). A tool with an invalid
/// `x-mcp-header` declaration is left out, as SEP-2243 asks of clients (one bad tool does not
/// cost the others).
pub fn aggregate(app_name: &str, app_id: &str, config: &McpConfig, upstream_tools: &[Value]) -> Vec<ExposedTool> {
    let prefix = config.tool_name_prefix.unwrap_or(true);
    let (allowed, denied) = (config.allowed_tools.as_deref(), &config.denied_tools);
    expose(app_name, app_id, prefix, allowed, denied, upstream_tools, |t| param_headers::declared(t).ok())
}

/// The upstream's prompts as a Flowgate server exposes them: named, filtered (by
/// `allowed_prompts` / `denied_prompts`) and made unique exactly as tools are.
pub fn aggregate_prompts(app_name: &str, app_id: &str, config: &McpConfig, prompts: &[Value]) -> Vec<ExposedTool> {
    let prefix = config.tool_name_prefix.unwrap_or(true);
    expose(app_name, app_id, prefix, config.allowed_prompts.as_deref(), &config.denied_prompts, prompts, |_| {
        Some(Vec::new())
    })
}

/// Whether a resource URI or a template's URI template passes `allowed_resources` /
/// `denied_resources` (matched as the upstream lists it; absent: all; denied wins).
pub fn resource_allowed(config: &McpConfig, uri: &str) -> bool {
    config.allowed_resources.as_ref().is_none_or(|a| a.iter().any(|n| n == uri)) && !resource_denied(config, uri)
}

/// Whether `denied_resources` names a URI (or URI template). Deny wins on every route: such a
/// URI is never sent to the app, whether the app listed it, a template of the app matches it, it
/// lies in a skill's directory, or a completion names it.
pub fn resource_denied(config: &McpConfig, uri: &str) -> bool {
    config.denied_resources.iter().any(|n| n == uri)
}

/// Whether a file of an exposed skill (SEP-2640) is routed: everything under the skill's
/// directory goes with the skill (whose SKILL.md passed [`resource_allowed`]) except the URIs
/// `denied_resources` names; `allowed_resources` need not list each file.
pub fn skill_file_allowed(config: &McpConfig, uri: &str) -> bool {
    !resource_denied(config, uri)
}

/// Named items (`name` field) as exposed: prefixed with the app's name when `prefix`, filtered
/// by upstream name, valid per SEP-986 and unique; `admit` gives an item's `Mcp-Param-*`
/// arguments, `None` to leave it out.
fn expose(
    app_name: &str,
    app_id: &str,
    prefix: bool,
    allowed: Option<&[String]>,
    denied: &[String],
    items: &[Value],
    admit: fn(&Value) -> Option<Vec<ParamHeader>>,
) -> Vec<ExposedTool> {
    let prefix = prefix.then(|| sanitize_name(app_name, app_id));
    let mut out: Vec<ExposedTool> = Vec::new();
    for tool in items {
        let Some(upstream) = tool.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            continue;
        };
        if allowed.is_some_and(|a| !a.iter().any(|n| n == upstream)) || denied.iter().any(|n| n == upstream) {
            continue;
        }
        let Some(params) = admit(tool) else { continue };
        let wanted = match &prefix {
            Some(p) => format!("{p}_{upstream}"),
            None => upstream.to_string(),
        };
        let base = valid_tool_name(&wanted);
        let mut name = base.clone();
        let mut n = 2;
        while out.iter().any(|t| t.name == name) {
            let suffix = format!("_{n}");
            name = format!("{}{suffix}", &base[..base.len().min(MAX_EXPOSED_NAME - suffix.len())]);
            n += 1;
        }
        out.push(ExposedTool { name, upstream_name: upstream.to_string(), tool: tool.clone(), params });
    }
    out
}

/// `[A-Za-z0-9_.-]{1,128}`: other characters become `_`; ASCII, so byte truncation is safe.
fn valid_tool_name(s: &str) -> String {
    let mut name: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' }).collect();
    name.truncate(MAX_EXPOSED_NAME);
    name
}

#[cfg(test)]
mod tests {
    fn cfg(mut v: Value) -> McpConfig {
        v["url"] = "https://mcp.example/mcp".into();
        crate::pure::fields::read(v).unwrap()
    }

    use serde_json::json;

    use super::*;

    fn upstream_tools() -> Vec<Value> {
        vec![
            json!({"name": "search", "description": "Search", "inputSchema": {"type": "object"}}),
            json!({"name": "create issue", "inputSchema": {"type": "object"}}),
            json!({"name": "create_issue", "inputSchema": {"type": "object"}}),
            json!({"name": "delete", "inputSchema": {"type": "object"}}),
            json!({"description": "no name"}),
            json!({"name": ""}),
        ]
    }

    fn names(tools: &[ExposedTool]) -> Vec<(&str, &str)> {
        tools.iter().map(|t| (t.name.as_str(), t.upstream_name.as_str())).collect()
    }

    #[test]
    fn aggregation_names_and_uniqueness() {
        let all = aggregate("My GitHub", "0123abcd", &cfg(json!({})), &upstream_tools());
        assert_eq!(
            names(&all),
            [
                ("My_GitHub_search", "search"),
                ("My_GitHub_create_issue", "create issue"),
                ("My_GitHub_create_issue_2", "create_issue"),
                ("My_GitHub_delete", "delete")
            ]
        );
        assert_eq!(all[0].tool, upstream_tools()[0], "the upstream definition is kept as it came");
        let cjk = aggregate("工具", "0123abcd-ef", &cfg(json!({"tool_name_prefix": true})), &upstream_tools()[..1]);
        assert_eq!(cjk[0].name, "app_0123abcd_search");
        let bare = aggregate("gh", "id", &cfg(json!({"tool_name_prefix": false})), &upstream_tools());
        assert_eq!(bare[0].name, "search");
        assert_eq!(bare[1].name, "create_issue");
        assert_eq!(bare[2].name, "create_issue_2");

        let long = "x".repeat(200);
        let tools = vec![json!({"name": long}), json!({"name": format!("{long}y")})];
        let got = aggregate("gh", "id", &cfg(json!({})), &tools);
        assert_eq!(got[0].name.len(), MAX_EXPOSED_NAME);
        assert_eq!(got[1].name.len(), MAX_EXPOSED_NAME);
        assert!(got[1].name.ends_with("_2"));
        for t in &got {
            assert!(t.name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)));
        }
    }

    #[test]
    fn aggregation_filters_match_upstream_names() {
        let t = upstream_tools();
        let got = aggregate("gh", "id", &cfg(json!({"allowed_tools": ["search", "delete", "gh_search"]})), &t);
        assert_eq!(names(&got), [("gh_search", "search"), ("gh_delete", "delete")]);
        let got = aggregate("gh", "id", &cfg(json!({"denied_tools": ["delete", "gh_search"]})), &t);
        assert_eq!(names(&got).len(), 3);
        assert!(got.iter().all(|x| x.upstream_name != "delete"));
        let got =
            aggregate("gh", "id", &cfg(json!({"allowed_tools": ["search", "delete"], "denied_tools": ["delete"]})), &t);
        assert_eq!(names(&got), [("gh_search", "search")]);
        assert!(aggregate("gh", "id", &cfg(json!({"allowed_tools": []})), &t).is_empty());
    }
}
