//! Tool names as MCP clients see them (SEP-986): made from display names, shared by the tools a
//! server's own apps expose and those re-exported from upstream MCP servers.

/// Longest tool name emitted: SEP-986 allows 128, OpenAI-compatible clients take 64.
pub const MAX_TOOL_NAME: usize = 64;

/// `[A-Za-z0-9_.-]{1,64}` from a display name: other characters become `_`, runs collapse.
/// A name with nothing usable left (e.g. all CJK) becomes `app_<id prefix>`.
pub fn sanitize_name(display: &str, id: &str) -> String {
    let mut s = String::with_capacity(display.len());
    for c in display.trim().chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' };
        if !(c == '_' && s.ends_with('_')) {
            s.push(c);
        }
    }
    let s = s.trim_matches('_');
    if s.chars().any(|c| c.is_ascii_alphanumeric()) {
        truncate(s, MAX_TOOL_NAME).to_string()
    } else {
        let prefix: String = id.chars().filter(char::is_ascii_alphanumeric).take(8).collect();
        format!("app_{prefix}")
    }
}

pub fn truncate(s: &str, max: usize) -> &str {
    // Names are ASCII here, so byte and char boundaries agree.
    &s[..s.len().min(max)]
}

/// Where one of a server's tool names comes from, for advice on a clash.
#[derive(Debug, Clone, Copy)]
pub enum ToolOrigin<'a> {
    /// A Dify app or HTTP tool: the tool is named after the app.
    App,
    /// A tool of an upstream MCP app: its upstream name, and whether the app prefixes it.
    Upstream { upstream_name: &'a str, prefixed: bool },
}

/// The message for two apps of one server that would expose the same tool name, with the fix
/// that applies to each (a setting only an upstream MCP app has is never suggested for another).
pub fn clash_message(name: &str, first: (&str, ToolOrigin<'_>), second: (&str, ToolOrigin<'_>)) -> String {
    let fix = |(app, origin): (&str, ToolOrigin<'_>)| {
        match origin {
        ToolOrigin::App => format!("rename app '{app}' (its tool is named after it)"),
        ToolOrigin::Upstream { upstream_name, prefixed: false } => format!(
            "set \"tool_name_prefix\": true on app '{app}' (its tools become '<app name>_<tool>') or add \"{upstream_name}\" to its denied_tools"
        ),
        ToolOrigin::Upstream { upstream_name, prefixed: true } => {
            format!("rename app '{app}' (its name prefixes its tools) or add \"{upstream_name}\" to its denied_tools")
        }
    }
    };
    format!(
        "apps '{}' and '{}' would both expose a tool named '{name}'; {}, or {}",
        first.0,
        second.0,
        fix(second),
        fix(first)
    )
}

#[cfg(test)]
mod tests {

    #[test]
    fn clash_advice_fits_the_kind_of_each_app() {
        let two_apps = clash_message("Summariser", ("Summariser", ToolOrigin::App), ("Summariser ", ToolOrigin::App));
        assert!(two_apps.contains("rename app 'Summariser '"), "{two_apps}");
        assert!(!two_apps.contains("tool_name_prefix") && !two_apps.contains("denied_tools"), "{two_apps}");
        let bare = ToolOrigin::Upstream { upstream_name: "search", prefixed: false };
        let mixed = clash_message("search", ("search", ToolOrigin::App), ("GitHub", bare));
        assert_eq!(
            mixed,
            "apps 'search' and 'GitHub' would both expose a tool named 'search'; set \"tool_name_prefix\": true on \
             app 'GitHub' (its tools become '<app name>_<tool>') or add \"search\" to its denied_tools, or rename \
             app 'search' (its tool is named after it)"
        );
        let prefixed = ToolOrigin::Upstream { upstream_name: "search", prefixed: true };
        let both = clash_message("gh_search", ("gh", prefixed), ("gh", prefixed));
        assert!(
            both.contains("rename app 'gh' (its name prefixes its tools)") && !both.contains("tool_name_prefix"),
            "{both}"
        );
    }
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize_name("My Workflow!", "x"), "My_Workflow");
        assert_eq!(sanitize_name("  翻译 助手 ", "ab-12cd34ef99"), "app_ab12cd34");
        assert_eq!(sanitize_name("report.v2-final", "x"), "report.v2-final");
        assert_eq!(sanitize_name(&"x".repeat(200), "x").len(), 64);
    }
}
