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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize_name("My Workflow!", "x"), "My_Workflow");
        assert_eq!(sanitize_name("  翻译 助手 ", "ab-12cd34ef99"), "app_ab12cd34");
        assert_eq!(sanitize_name("report.v2-final", "x"), "report.v2-final");
        assert_eq!(sanitize_name(&"x".repeat(200), "x").len(), 64);
    }
}
