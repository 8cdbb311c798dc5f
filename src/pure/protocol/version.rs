//! Protocol revisions and every behaviour that differs between them. Nothing else in the
//! crate compares version strings: it asks a `Version` what it supports.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Version {
    #[serde(rename = "2024-11-05")]
    V2024_11_05,
    #[serde(rename = "2025-03-26")]
    V2025_03_26,
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
}

impl crate::pure::named::Named for Version {
    const ALL: &'static [Self] = &Version::ALL;

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Version);

use Version::*;

impl Version {
    pub const ALL: [Version; 5] = [V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25, V2026_07_28];
    /// What a request without `MCP-Protocol-Version` speaks (the spec's back-compat rule).
    pub const DEFAULT: Version = V2025_03_26;
    /// The newest revision that has an `initialize` handshake; answered to unknown versions.
    pub const LATEST_WITH_INITIALIZE: Version = V2025_11_25;

    pub fn parse(s: &str) -> Option<Version> {
        <Version as crate::pure::named::Named>::from_name(s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            V2024_11_05 => "2024-11-05",
            V2025_03_26 => "2025-03-26",
            V2025_06_18 => "2025-06-18",
            V2025_11_25 => "2025-11-25",
            V2026_07_28 => "2026-07-28",
        }
    }

    /// Negotiation in `initialize`: echo a supported revision that has the handshake, else
    /// answer the latest such revision.
    pub fn negotiate(requested: Option<&str>) -> Version {
        match requested.and_then(Version::parse) {
            Some(v) if v.has_initialize() => v,
            _ => Self::LATEST_WITH_INITIALIZE,
        }
    }

    /// JSON-RPC batches: added in 2025-03-26 (and tolerated before), removed in 2025-06-18.
    pub fn allows_batches(self) -> bool {
        self <= V2025_03_26
    }

    /// `title`, `outputSchema` and `structuredContent` (2025-06-18).
    pub fn structured_output(self) -> bool {
        self >= V2025_06_18
    }

    /// Tool `annotations` (2025-03-26).
    pub fn tool_annotations(self) -> bool {
        self >= V2025_03_26
    }

    /// `message` on `notifications/progress` (2025-03-26).
    pub fn progress_message(self) -> bool {
        self >= V2025_03_26
    }

    /// The log level a request gets `notifications/message` at, when it did not say: older
    /// revisions set it per session with `logging/setLevel`, which a stateless endpoint cannot
    /// keep, so they get `info`; 2026-07-28 requests ask per request (`_meta` logLevel) and get
    /// no log messages without it.
    pub fn default_log_level(self) -> Option<&'static str> {
        if self.is_stateless() {
            None
        } else {
            Some("info")
        }
    }

    /// Bad tool arguments are tool results with `isError` (SEP-1303, 2025-11-25), not -32602.
    pub fn argument_errors_as_tool_results(self) -> bool {
        self >= V2025_11_25
    }

    /// Tasks (`params.task`, `tasks/*`) in core: 2025-11-25 only; 2026-07-28 has them as an
    /// extension (see `mcp::tasks`).
    pub fn has_tasks(self) -> bool {
        self == V2025_11_25
    }

    /// The stateless revision: no `initialize`, `_meta` carries the version, `server/discover`,
    /// `Mcp-Method`/`Mcp-Name` headers, `resultType`, serverInfo in `_meta`.
    pub fn is_stateless(self) -> bool {
        self >= V2026_07_28
    }

    pub fn has_initialize(self) -> bool {
        !self.is_stateless()
    }

    /// `ping` and `logging/setLevel` were removed in 2026-07-28.
    pub fn has_ping_and_logging(self) -> bool {
        !self.is_stateless()
    }

    /// Code for an unsupported `MCP-Protocol-Version`.
    pub fn unsupported_version_code(self) -> i64 {
        if self.is_stateless() {
            super::jsonrpc::UNSUPPORTED_PROTOCOL_VERSION
        } else {
            super::jsonrpc::INVALID_REQUEST
        }
    }

    /// HTTP status for an unknown method: 2026-07-28 maps it to 404, earlier revisions to 200.
    pub fn method_not_found_status(self) -> u16 {
        if self.is_stateless() {
            404
        } else {
            200
        }
    }

    pub fn all_strs() -> impl Iterator<Item = &'static str> {
        Self::ALL.into_iter().map(Version::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_negotiate() {
        for v in Version::ALL {
            assert_eq!(Version::parse(v.as_str()), Some(v));
        }
        assert_eq!(Version::negotiate(Some("2025-06-18")), V2025_06_18);
        assert_eq!(Version::negotiate(Some("2024-11-05")), V2024_11_05);
        assert_eq!(Version::negotiate(Some("1999-01-01")), V2025_11_25);
        assert_eq!(Version::negotiate(None), V2025_11_25);
        // The stateless revision has no handshake to negotiate.
        assert_eq!(Version::negotiate(Some("2026-07-28")), V2025_11_25);
    }

    #[test]
    fn gates() {
        assert!(V2025_03_26.allows_batches() && !V2025_06_18.allows_batches());
        assert!(!V2025_03_26.structured_output() && V2025_06_18.structured_output());
        assert!(!V2025_06_18.argument_errors_as_tool_results() && V2025_11_25.argument_errors_as_tool_results());
        assert!(!V2025_11_25.is_stateless() && V2026_07_28.is_stateless());
        assert_eq!(V2026_07_28.unsupported_version_code(), -32022);
        assert_eq!(V2025_06_18.unsupported_version_code(), -32600);
    }
}
