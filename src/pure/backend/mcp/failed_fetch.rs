//! Failed fetches of an upstream MCP app's tool list or catalog, remembered briefly. Both are
//! shared by every client and cached once fetched, but a failure was not: with the upstream
//! down, every `tools/list` or handshake asked it again. The shell keeps a failure for
//! [`REMEMBER_MS`] per isolate, app, credential scope and list: requests in that window do
//! without the list (as when the fetch fails) and do not ask; after it, one request asks the
//! upstream again while the others still do without until twice the window (`pure::memo`'s
//! refresh), then it is forgotten.

use crate::pure::definition::AppDefinition;
use crate::pure::ids::sha256_hex;

/// How long a failed fetch is remembered.
pub const REMEMBER_MS: u64 = 5_000;

/// What was fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Tools,
    Catalog,
}

/// The memo key of a fetch: the list, the app and its settings as they are now (an app whose
/// settings were changed, to fix them say, is asked at once), and the credential scope it is
/// fetched with (empty: the app's own credentials, which is how lists and catalogs are read).
pub fn key(list: List, app: &AppDefinition, scope: &str) -> String {
    let what = match list {
        List::Tools => "tools",
        List::Catalog => "catalog",
    };
    let settings = serde_json::to_string(&app.backend).unwrap_or_default();
    format!("{what}\n{}\n{scope}\n{}", app.id, &sha256_hex(&settings)[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::memo::{Lookup, Memo};

    fn app(id: &str, url: &str) -> AppDefinition {
        let settings = serde_json::json!({"url": url});
        let backend = crate::pure::backend::config::Backend::from_settings(crate::pure::mode::Mode::Mcp, &settings);
        let (a, b) = (serde_json::json!([]), serde_json::json!([]));
        AppDefinition::new(id.into(), "App".into(), "".into(), backend.unwrap(), a, b)
    }

    #[test]
    fn keys_part_lists_apps_settings_and_scopes() {
        let (one, two) = (app("app-1", "https://a.example/mcp"), app("app-2", "https://a.example/mcp"));
        let fixed = app("app-1", "https://b.example/mcp");
        let keys = [
            key(List::Tools, &one, ""),
            key(List::Catalog, &one, ""),
            key(List::Tools, &two, ""),
            key(List::Tools, &one, "scope"),
            key(List::Tools, &fixed, ""),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(key(List::Tools, &one, ""), key(List::Tools, &app("app-1", "https://a.example/mcp"), ""));
    }

    #[test]
    fn a_failure_is_answered_from_memory_for_the_window_then_asked_again_once() {
        let mut m: Memo<()> = Memo::new(8);
        let k = key(List::Tools, &app("app-1", "https://a.example/mcp"), "");
        m.put(&k, (), 1_000);
        // Within the window: from memory, however many requests.
        for now in [1_000, 3_000, 1_000 + REMEMBER_MS - 1] {
            assert_eq!(m.get(&k, now, REMEMBER_MS), Lookup::Fresh(()), "{now}");
        }
        // After it: one request asks again, the others still get the failure meanwhile.
        let later = 1_000 + REMEMBER_MS;
        assert!(matches!(m.get(&k, later, REMEMBER_MS), Lookup::Refresh(_)));
        assert!(matches!(m.get(&k, later + 1, REMEMBER_MS), Lookup::Fresh(_)));
        // Long after: forgotten.
        assert_eq!(m.get(&k, 1_000 + 2 * REMEMBER_MS, REMEMBER_MS), Lookup::Missing);
    }
}
