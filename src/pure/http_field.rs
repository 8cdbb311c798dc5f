//! HTTP field (header) syntax, as RFC 9110 and `fetch` define it: shared by the boundary's
//! header checks, the MCP vocabulary's `Mcp-Param-*` names and the upstream client's settings.

/// An RFC 9110 field name (a `token`).
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
