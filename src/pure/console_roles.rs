//! Who may call which console route, decided without IO: the roles, the caller, and the
//! decision on a request the route table (`pure::console_routes`, which names each route's
//! least role) resolved.
//!
//! The shell asks [`decide`] before any handler runs, and runs only the route an
//! [`Decision::Allowed`] carries: no console route is reached without a decision.

use super::console_routes::{Matched, Resolved};
// The roles are the route table's vocabulary (each route names its least role).
pub use super::console_routes::Role;
use super::error::ApiError;
use super::quote::quote_input;

/// Who is calling the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub role: Role,
    /// `None`: the bootstrap `ADMIN_TOKEN` (or Access). `Some`: a named console token.
    pub token: Option<NamedToken>,
    /// A user let in by Cloudflare Access (`console_access`): their email, else the `sub`.
    pub access_user: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedToken {
    pub id: String,
    pub name: String,
}

impl Identity {
    /// The `ADMIN_TOKEN` secret: the bootstrap admin.
    pub fn bootstrap() -> Identity {
        Identity { role: Role::Admin, token: None, access_user: None }
    }

    /// A named console token of `role`.
    pub fn named(role: Role, token: NamedToken) -> Identity {
        Identity { role, token: Some(token), access_user: None }
    }

    /// A user Cloudflare Access let in, with the role Access users get.
    pub fn access(role: Role, user: String) -> Identity {
        Identity { role, token: None, access_user: Some(user) }
    }

    /// The audit log's actor: `admin` for `ADMIN_TOKEN`, `token:<name>` for a named token (the
    /// prefix keeps a token named "admin" apart from the bootstrap secret), `access:<email>`
    /// for a user let in by Cloudflare Access.
    pub fn actor(&self) -> String {
        match (&self.token, &self.access_user) {
            (Some(t), _) => format!("token:{}", t.name),
            (None, Some(user)) => format!("access:{user}"),
            (None, None) => "admin".to_string(),
        }
    }
}

/// What the console does with a request, before any handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a> {
    /// The caller's role suffices: run the route.
    Allowed(Matched<'a>),
    /// 403: the route needs `needed`.
    Forbidden { needed: Role },
    /// 405: the route does not take the method.
    MethodNotAllowed { allow: &'static str },
    /// 404: no such route.
    NotFound,
}

/// Decides a request the route table resolved for a caller with `role`: the role is the
/// route's entry's. A path or method missing from `console_routes::ROUTES` is answered here
/// (404/405) for every role, so a handler cannot be reached without a role decision.
pub fn decide(resolved: Resolved<'_>, role: Role) -> Decision<'_> {
    match resolved {
        Resolved::NotFound => Decision::NotFound,
        Resolved::MethodNotAllowed { allow } => Decision::MethodNotAllowed { allow },
        Resolved::Found(found) if role >= found.route.role => Decision::Allowed(found),
        Resolved::Found(found) => Decision::Forbidden { needed: found.route.role },
    }
}

impl<'a> Decision<'a> {
    /// The route to run, or the refusal to answer; `shown_path` is the request path as
    /// messages may quote it.
    pub fn into_result(self, caller: &Identity, method: &str, shown_path: &str) -> Result<Matched<'a>, ApiError> {
        let path = quote_input(shown_path);
        match self {
            Decision::Allowed(found) => Ok(found),
            Decision::Forbidden { needed } => Err(forbidden(caller, method, &path, needed)),
            Decision::MethodNotAllowed { allow } => Err(ApiError::method_not_allowed(method, &path, allow)),
            Decision::NotFound => Err(ApiError::not_found(format!("no console route {method} {path}"))),
        }
    }

    /// The refusal answered for a decision other than [`Decision::Allowed`].
    pub fn error(&self, caller: &Identity, method: &str, shown_path: &str) -> Option<ApiError> {
        self.into_result(caller, method, shown_path).err()
    }
}

fn forbidden(caller: &Identity, method: &str, path: &str, needed: Role) -> ApiError {
    let who = match (&caller.token, &caller.access_user) {
        (Some(t), _) => format!("console token {}", quote_input(&t.name)),
        (None, Some(user)) => format!("Cloudflare Access user {} (ACCESS_ROLE)", quote_input(user)),
        (None, None) => "the caller".to_string(),
    };
    let at_least = if needed == Role::Admin { "" } else { " (or higher)" };
    ApiError::new(
        403,
        "forbidden",
        format!(
            "{method} {path} needs the {} role{at_least}; {who} has the {} role. Ask an admin for a token \
             with that role",
            needed.as_str(),
            caller.role.as_str()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::console_routes::{resolve, ROUTES};

    fn named(role: Role) -> Identity {
        Identity::named(role, NamedToken { id: "t1".into(), name: "deploy-bot".into() })
    }

    fn segs(path: &str) -> Vec<&str> {
        path.split('/').filter(|s| !s.is_empty()).collect()
    }

    /// The decision on `method` `path` for `role`, as the shell takes it.
    fn decide(path: &'static str, method: &str, role: Role) -> Decision<'static> {
        super::decide(resolve(&segs(path), method), role)
    }

    /// The decision of every route × method × role, written out by hand: the route table must
    /// give exactly this. (`-` viewer refused, `P` publisher and up, `A` admin only, `*` all.)
    const EXPECTED: &[(&str, &str, char)] = &[
        ("GET", "", '*'),
        ("GET", "apps", '*'),
        ("POST", "apps", 'P'),
        ("POST", "apps/import", 'P'),
        ("GET", "apps/X", '*'),
        ("PUT", "apps/X", 'P'),
        ("DELETE", "apps/X", 'P'),
        ("POST", "apps/X/tools/refresh", 'P'),
        ("POST", "apps/X/test", 'P'),
        ("GET", "apps/X/server", '*'),
        ("POST", "apps/X/server", 'P'),
        ("PUT", "apps/X/server", 'P'),
        ("DELETE", "apps/X/server", 'P'),
        ("GET", "apps/X/server/refresh", 'P'),
        ("POST", "apps/X/server/refresh", 'P'),
        ("GET", "servers", '*'),
        ("POST", "servers", 'P'),
        ("GET", "servers/X", '*'),
        ("PUT", "servers/X", 'P'),
        ("DELETE", "servers/X", 'P'),
        ("PATCH", "servers/X", 'P'),
        ("POST", "servers/X/reveal", 'A'),
        ("GET", "servers/X/refresh", 'P'),
        ("POST", "servers/X/refresh", 'P'),
        ("GET", "servers/X/auth", '*'),
        ("PUT", "servers/X/auth", 'P'),
        ("GET", "servers/X/keys", '*'),
        ("POST", "servers/X/keys", 'P'),
        ("DELETE", "servers/X/keys/Y", 'P'),
        ("GET", "servers/X/tasks", '*'),
        ("GET", "servers/X/tasks/Y", '*'),
        ("POST", "servers/X/tasks/Y/cancel", 'P'),
        ("GET", "servers/X/usage", '*'),
        ("GET", "servers/X/tools", '*'),
        ("POST", "servers/X/tools/call", 'P'),
        ("GET", "servers/X/calls", '*'),
        ("GET", "servers/X/calls/settings", '*'),
        ("PUT", "servers/X/calls/settings", 'P'),
        ("GET", "audit", '*'),
        ("POST", "secrets/reseal", 'A'),
        ("GET", "tokens", 'A'),
        ("POST", "tokens", 'A'),
        ("DELETE", "tokens/Y", 'A'),
    ];

    #[test]
    fn every_route_and_method_for_every_role() {
        for &(method, path, who) in EXPECTED {
            let least = match who {
                '*' => Role::Viewer,
                'P' => Role::Publisher,
                'A' => Role::Admin,
                _ => unreachable!(),
            };
            for role in Role::ALL {
                let got = decide(path, method, role);
                if role >= least {
                    let allowed = matches!(got, Decision::Allowed(m) if m.route.role == least);
                    assert!(allowed, "{method} {path} as {}: {got:?}", role.as_str());
                } else {
                    assert_eq!(got, Decision::Forbidden { needed: least }, "{method} {path} as {}", role.as_str());
                }
            }
        }
        // And nothing else: every (route, method) of the table is in the list above.
        assert_eq!(ROUTES.len(), EXPECTED.len(), "a route or method in ROUTES has no expectation here");
    }
    #[test]
    fn unknown_paths_and_methods_are_404_and_405_for_everyone() {
        for role in Role::ALL {
            assert_eq!(decide("nope", "GET", role), Decision::NotFound);
            assert_eq!(decide("apps/X/Y", "GET", role), Decision::NotFound);
            assert_eq!(decide("apps/X/tools", "GET", role), Decision::NotFound);
            assert_eq!(decide("", "POST", role), Decision::MethodNotAllowed { allow: "GET" });
            assert_eq!(decide("apps", "PATCH", role), Decision::MethodNotAllowed { allow: "GET, POST" });
            assert_eq!(decide("apps", "HEAD", role), Decision::MethodNotAllowed { allow: "GET, POST" });
            // A literal segment wins over `{}`, as in the router.
            assert_eq!(decide("apps/import", "GET", role), Decision::MethodNotAllowed { allow: "POST" });
            assert_eq!(decide("tokens/Y", "GET", role), Decision::MethodNotAllowed { allow: "DELETE" });
        }
    }
    #[test]
    fn refusals_name_both_roles() {
        let e = decide("apps", "POST", Role::Viewer).error(&named(Role::Viewer), "POST", "/console/api/apps");
        let e = e.unwrap();
        assert_eq!((e.status, e.code), (403, "forbidden"));
        assert_eq!(
            e.message,
            "POST \"/console/api/apps\" needs the publisher role (or higher); console token \"deploy-bot\" has the \
             viewer role. Ask an admin for a token with that role"
        );
        let e = decide("tokens", "GET", Role::Publisher)
            .error(&named(Role::Publisher), "GET", "/console/api/tokens")
            .unwrap();
        assert!(e.message.contains("needs the admin role;"), "{}", e.message);
        assert!(e.message.contains("has the publisher role"), "{}", e.message);
        let e = Decision::MethodNotAllowed { allow: "GET" }.error(&named(Role::Admin), "PATCH", "/x").unwrap();
        assert_eq!((e.status, e.allow), (405, Some("GET")));
        assert_eq!(decide("apps", "GET", Role::Viewer).error(&named(Role::Viewer), "GET", "/x"), None);
    }
}
