//! The audit log in words: a recorded action (`PUT /apps/{id}/server`) read back through the
//! console's route table into what it did ("changed the server of app"), and the kind of thing
//! its target id names, so that the console can show the target's name instead of its id.

use crate::pure::console_routes::{self, Handler, Resolved};

/// What a recorded target id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    App,
    Server,
    Token,
    /// `…/server/refresh` takes a server id or an app id (Dify's route).
    AppOrServer,
}

/// The handler a recorded action was served by (`None` for an action no route has now).
pub fn handler_of(action: &str) -> Option<Handler> {
    let (method, path) = action.split_once(' ')?;
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match console_routes::resolve(&segs, method) {
        Resolved::Found(m) => Some(m.route.handler),
        _ => None,
    }
}

/// What a handler does, as the audit log says it (a verb phrase whose object's name follows).
pub fn words(handler: Handler) -> &'static str {
    use Handler::*;
    match handler {
        Index => "read the console index",
        ListApps => "listed the apps",
        CreateApp => "created app",
        ImportApp => "imported an app from Dify",
        GetApp => "read app",
        ReplaceApp => "changed app",
        DeleteApp => "deleted app",
        RefreshTools => "re-read the tools of app",
        GetAppServer => "read the server of app",
        CreateAppServer => "published app",
        UpdateAppServer => "changed the server of app",
        DeleteAppServer => "deleted the server of app",
        RotateAppServer => "rotated the code of",
        ListServers => "listed the servers",
        CreateServer => "created a multi-app server",
        GetServer => "read server",
        UpdateServer => "changed server",
        DeleteServer => "deleted server",
        RotateServer => "rotated the code of server",
        GetAuth => "read the client authentication of server",
        SetAuth => "set the client authentication of server",
        ListKeys => "listed the client keys of server",
        CreateKey => "created a client key of server",
        RevokeKey => "revoked a client key of server",
        ListTasks => "listed the tasks of server",
        GetTask => "read a task of server",
        CancelTask => "cancelled a task of server",
        Usage => "read the usage of server",
        AuditLog => "read the audit log",
        ResealSecrets => "re-sealed the stored credentials",
        ListTokens => "listed the console tokens",
        CreateToken => "created a console token",
        RevokeToken => "revoked console token",
        ListTools => "listed the tools of server",
        CallTool => "ran a tool in the playground of server",
        CallLog => "read the call log of server",
        GetCallLogSettings => "read the call log settings of server",
        SetCallLogSettings => "changed the call log settings of server",
        EditServer => "edited server",
        RevealServerUrl => "revealed the URL of server",
        TestApp => "tested the connection of app",
    }
}

/// What the first id of a route's path names.
pub fn target_kind(handler: Handler) -> Option<TargetKind> {
    let route = console_routes::ROUTES.iter().find(|r| r.handler == handler)?;
    if matches!(handler, Handler::RotateAppServer) {
        return Some(TargetKind::AppOrServer);
    }
    match route.path.split('/').next()? {
        "apps" if route.path.contains('{') => Some(TargetKind::App),
        "servers" if route.path.contains('{') => Some(TargetKind::Server),
        "tokens" if route.path.contains('{') => Some(TargetKind::Token),
        _ => None,
    }
}

/// The entry in words: what was done, to what (its name quoted when known, else a short id, or
/// "one since deleted"), and how it ended when it did not succeed.
pub fn summary(action: &str, target: Option<&str>, target_name: Option<&str>, status: u16) -> String {
    let what = match handler_of(action) {
        Some(h) => words(h).to_string(),
        None => action.to_string(),
    };
    let object = match (target, target_name) {
        (_, Some(name)) => format!(" “{}”", crate::pure::usage::clip(name, 64)),
        (Some(id), None) => format!(" {} (since deleted)", id.chars().take(8).collect::<String>()),
        (None, None) => String::new(),
    };
    let ended = match status {
        200..=299 => String::new(),
        401 | 403 => " — refused: the role was not enough".to_string(),
        404 => " — not found".to_string(),
        s if s < 500 => format!(" — refused ({s})"),
        s => format!(" — failed ({s})"),
    };
    let mut out = format!("{what}{object}{ended}");
    if let Some(first) = out.get(..1) {
        out.replace_range(..1, &first.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_actions_read_as_words_with_names() {
        assert_eq!(handler_of("PUT /apps/{id}/server"), Some(Handler::UpdateAppServer));
        assert_eq!(handler_of("POST /apps/import"), Some(Handler::ImportApp));
        assert_eq!(handler_of("GET /servers/{id}/refresh"), Some(Handler::RotateServer));
        assert_eq!(handler_of("PATCH /apps"), None);
        assert_eq!(handler_of("nonsense"), None);
        assert_eq!(
            summary("POST /servers/{id}/keys", Some("0123456789abcdef"), Some("Docs"), 201),
            "Created a client key of server “Docs”"
        );
        assert_eq!(
            summary("DELETE /apps/{id}", Some("0123456789abcdef"), None, 200),
            "Deleted app 01234567 (since deleted)"
        );
        assert_eq!(
            summary("POST /tokens", None, None, 403),
            "Created a console token — refused: the role was not enough"
        );
        assert_eq!(summary("POST /secrets/reseal", None, None, 503), "Re-sealed the stored credentials — failed (503)");
        // An action no route has any more is shown as recorded.
        assert_eq!(summary("POST /gone/{id}", None, None, 200), "POST /gone/{id}");
    }

    #[test]
    fn every_writing_route_names_what_its_target_is() {
        for route in console_routes::ROUTES.iter().filter(|r| r.writes) {
            let words = words(route.handler);
            assert!(!words.contains('/') && !words.contains('{'), "{words}");
            if route.path.contains('{') {
                assert!(target_kind(route.handler).is_some(), "{} {}", route.verb.as_str(), route.path);
            }
        }
        assert_eq!(target_kind(Handler::RotateAppServer), Some(TargetKind::AppOrServer));
        assert_eq!(target_kind(Handler::RevokeToken), Some(TargetKind::Token));
        assert_eq!(target_kind(Handler::CreateApp), None);
    }
}
