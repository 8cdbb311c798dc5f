//! Who may call which console route, decided without IO: the console's route table (path
//! pattern, the methods it takes, the least role each needs), the roles, and the caller.
//!
//! The shell asks [`decide`] before it routes, so a route missing here is unreachable (404 or
//! 405 from this table) rather than open: no console route exists without a decision. A unit
//! test reads the router in `shell/console/mod.rs` and fails when the two disagree.

use super::error::ApiError;
use super::quote::quote_input;

/// A console caller's role. Ordered: each role may do everything the one before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read only: apps, servers, keys (names, hints), tasks, the audit log.
    Viewer,
    /// Apps and servers: create, change, delete, rotate codes, client keys, auth modes, tasks.
    Publisher,
    /// Everything, console tokens and re-sealing credentials included.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Publisher, Role::Admin];

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "publisher" => Some(Role::Publisher),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Publisher => "publisher",
            Role::Admin => "admin",
        }
    }
}

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

/// One console route: its path under `/console/api` (`{}` is any one segment), the methods it
/// takes (the `Allow` of a 405, in the router's order) and the least role of each method.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub pattern: &'static str,
    pub allow: &'static str,
    pub methods: &'static [(&'static str, Role)],
}

use Role::{Admin, Publisher, Viewer};

/// Every console route, in the router's order (the first pattern that matches a path is its
/// route, so literal segments come before `{}`). GET routes are for viewers except the two
/// Dify-compatible GETs that rotate a server code: those write, so they need a publisher.
pub const ROUTES: &[Route] = &[
    // `/console/api` itself: where the OpenAPI document is.
    Route { pattern: "", allow: "GET", methods: &[("GET", Viewer)] },
    Route { pattern: "apps", allow: "GET, POST", methods: &[("GET", Viewer), ("POST", Publisher)] },
    Route { pattern: "apps/import", allow: "POST", methods: &[("POST", Publisher)] },
    Route {
        pattern: "apps/{}",
        allow: "GET, PUT, DELETE",
        methods: &[("GET", Viewer), ("PUT", Publisher), ("DELETE", Publisher)],
    },
    Route { pattern: "apps/{}/tools/refresh", allow: "POST", methods: &[("POST", Publisher)] },
    Route {
        pattern: "apps/{}/server",
        allow: "GET, POST, PUT, DELETE",
        methods: &[("GET", Viewer), ("POST", Publisher), ("PUT", Publisher), ("DELETE", Publisher)],
    },
    Route {
        pattern: "apps/{}/server/refresh",
        allow: "GET, POST",
        methods: &[("GET", Publisher), ("POST", Publisher)],
    },
    Route { pattern: "servers", allow: "GET, POST", methods: &[("GET", Viewer), ("POST", Publisher)] },
    Route {
        pattern: "servers/{}",
        allow: "GET, PUT, DELETE",
        methods: &[("GET", Viewer), ("PUT", Publisher), ("DELETE", Publisher)],
    },
    Route { pattern: "servers/{}/refresh", allow: "GET, POST", methods: &[("GET", Publisher), ("POST", Publisher)] },
    Route { pattern: "servers/{}/auth", allow: "GET, PUT", methods: &[("GET", Viewer), ("PUT", Publisher)] },
    Route { pattern: "servers/{}/keys", allow: "GET, POST", methods: &[("GET", Viewer), ("POST", Publisher)] },
    Route { pattern: "servers/{}/keys/{}", allow: "DELETE", methods: &[("DELETE", Publisher)] },
    Route { pattern: "servers/{}/tasks", allow: "GET", methods: &[("GET", Viewer)] },
    Route { pattern: "servers/{}/tasks/{}", allow: "GET", methods: &[("GET", Viewer)] },
    Route { pattern: "servers/{}/tasks/{}/cancel", allow: "POST", methods: &[("POST", Publisher)] },
    Route { pattern: "servers/{}/usage", allow: "GET", methods: &[("GET", Viewer)] },
    Route { pattern: "audit", allow: "GET", methods: &[("GET", Viewer)] },
    Route { pattern: "secrets/reseal", allow: "POST", methods: &[("POST", Admin)] },
    // Console tokens are admin business, reading them included: a list of who holds which role.
    Route { pattern: "tokens", allow: "GET, POST", methods: &[("GET", Admin), ("POST", Admin)] },
    Route { pattern: "tokens/{}", allow: "DELETE", methods: &[("DELETE", Admin)] },
];

impl Route {
    fn matches(&self, rest: &[&str]) -> bool {
        let mut parts = self.pattern.split('/').filter(|p| !p.is_empty());
        let mut segs = rest.iter();
        loop {
            match (parts.next(), segs.next()) {
                (None, None) => return true,
                (Some("{}"), Some(_)) => {}
                (Some(p), Some(s)) if p == *s => {}
                _ => return false,
            }
        }
    }

    /// The least role `method` needs here; `None`: the route does not take it.
    pub fn role_for(&self, method: &str) -> Option<Role> {
        self.methods.iter().find(|(m, _)| *m == method).map(|(_, r)| *r)
    }
}

/// The route of a path (`rest`: its segments after `/console/api`).
pub fn route_of(rest: &[&str]) -> Option<&'static Route> {
    ROUTES.iter().find(|r| r.matches(rest))
}

/// What the console does with a request, before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The caller's role suffices: route it.
    Allowed,
    /// 403: the route needs `needed`.
    Forbidden { needed: Role },
    /// 405: the route does not take the method.
    MethodNotAllowed { allow: &'static str },
    /// 404: no such route.
    NotFound,
}

/// Decides `method` on `rest` for a caller with `role`. A path or method missing from
/// [`ROUTES`] is answered here (404/405) for every role, so a handler cannot be reached
/// without a role decision.
pub fn decide(rest: &[&str], method: &str, role: Role) -> Decision {
    let Some(route) = route_of(rest) else { return Decision::NotFound };
    match route.role_for(method) {
        None => Decision::MethodNotAllowed { allow: route.allow },
        Some(needed) if role >= needed => Decision::Allowed,
        Some(needed) => Decision::Forbidden { needed },
    }
}

impl Decision {
    /// The refusal answered for a decision other than [`Decision::Allowed`]; `shown_path` is the
    /// request path as messages may quote it.
    pub fn error(&self, caller: &Identity, method: &str, shown_path: &str) -> Option<ApiError> {
        let path = quote_input(shown_path);
        match *self {
            Decision::Allowed => None,
            Decision::Forbidden { needed } => Some(forbidden(caller, method, &path, needed)),
            Decision::MethodNotAllowed { allow } => Some(ApiError::method_not_allowed(method, &path, allow)),
            Decision::NotFound => Some(ApiError::not_found(format!("no console route {method} {path}"))),
        }
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
    use std::collections::BTreeMap;

    fn named(role: Role) -> Identity {
        Identity::named(role, NamedToken { id: "t1".into(), name: "deploy-bot".into() })
    }

    fn segs(path: &str) -> Vec<&str> {
        path.split('/').filter(|s| !s.is_empty()).collect()
    }

    /// The decision of every route × method × role, written out by hand: the table above must
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
                let got = decide(&segs(path), method, role);
                let want = if role >= least { Decision::Allowed } else { Decision::Forbidden { needed: least } };
                assert_eq!(got, want, "{method} {path} as {}", role.as_str());
            }
        }
        // And nothing else: every (route, method) of the table is in the list above.
        let listed: usize = ROUTES.iter().map(|r| r.methods.len()).sum();
        assert_eq!(listed, EXPECTED.len(), "a route or method in ROUTES has no expectation here");
    }

    #[test]
    fn viewers_only_read_and_only_admins_touch_tokens_and_secrets() {
        for route in ROUTES {
            for &(method, role) in route.methods {
                if method != "GET" {
                    assert!(role >= Role::Publisher, "{method} {} must not be open to viewers", route.pattern);
                }
                if route.pattern.starts_with("tokens") || route.pattern.starts_with("secrets") {
                    assert_eq!(role, Role::Admin, "{method} {}", route.pattern);
                }
            }
        }
    }

    #[test]
    fn unknown_paths_and_methods_are_404_and_405_for_everyone() {
        for role in Role::ALL {
            assert_eq!(decide(&segs("nope"), "GET", role), Decision::NotFound);
            assert_eq!(decide(&segs("apps/X/Y"), "GET", role), Decision::NotFound);
            assert_eq!(decide(&segs("apps/X/tools"), "GET", role), Decision::NotFound);
            assert_eq!(decide(&[], "POST", role), Decision::MethodNotAllowed { allow: "GET" });
            assert_eq!(decide(&segs("apps"), "PATCH", role), Decision::MethodNotAllowed { allow: "GET, POST" });
            assert_eq!(decide(&segs("apps"), "HEAD", role), Decision::MethodNotAllowed { allow: "GET, POST" });
            // A literal segment wins over `{}`, as in the router.
            assert_eq!(decide(&segs("apps/import"), "GET", role), Decision::MethodNotAllowed { allow: "POST" });
            assert_eq!(decide(&segs("tokens/Y"), "GET", role), Decision::MethodNotAllowed { allow: "DELETE" });
        }
    }

    #[test]
    fn allow_lists_the_methods_in_order() {
        for route in ROUTES {
            let methods: Vec<&str> = route.methods.iter().map(|(m, _)| *m).collect();
            assert_eq!(route.allow, methods.join(", "), "{}", route.pattern);
        }
    }

    #[test]
    fn refusals_name_both_roles() {
        let e = decide(&segs("apps"), "POST", Role::Viewer).error(&named(Role::Viewer), "POST", "/console/api/apps");
        let e = e.unwrap();
        assert_eq!((e.status, e.code), (403, "forbidden"));
        assert_eq!(
            e.message,
            "POST \"/console/api/apps\" needs the publisher role (or higher); console token \"deploy-bot\" has the \
             viewer role. Ask an admin for a token with that role"
        );
        let e = decide(&segs("tokens"), "GET", Role::Publisher)
            .error(&named(Role::Publisher), "GET", "/console/api/tokens")
            .unwrap();
        assert!(e.message.contains("needs the admin role;"), "{}", e.message);
        assert!(e.message.contains("has the publisher role"), "{}", e.message);
        let e = Decision::MethodNotAllowed { allow: "GET" }.error(&named(Role::Admin), "PATCH", "/x").unwrap();
        assert_eq!((e.status, e.allow), (405, Some("GET")));
        assert_eq!(Decision::Allowed.error(&named(Role::Viewer), "GET", "/x"), None);
    }

    #[test]
    fn actors() {
        assert_eq!(Identity::bootstrap().actor(), "admin");
        assert_eq!(Identity::bootstrap().role, Role::Admin);
        assert_eq!(named(Role::Viewer).actor(), "token:deploy-bot");
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("Admin"), None);
        assert!(Role::Viewer < Role::Publisher && Role::Publisher < Role::Admin);
    }

    /// The OpenAPI document (`console/openapi.json`, served at `/console/api/openapi.json`)
    /// describes exactly the routes and methods of [`ROUTES`], each with its least role.
    #[test]
    fn the_openapi_document_and_the_table_agree() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../console/openapi.json")).expect("console/openapi.json is JSON");
        let mut documented: BTreeMap<(String, String), String> = BTreeMap::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            let pattern = path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(|s| if s.starts_with('{') { "{}" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            for (method, operation) in item.as_object().expect("a path item") {
                let role = operation["x-flowgate-role"].as_str().unwrap_or("(none)").to_string();
                documented.insert((pattern.clone(), method.to_ascii_uppercase()), role);
            }
        }
        let table: BTreeMap<(String, String), String> = ROUTES
            .iter()
            .flat_map(|r| {
                r.methods.iter().map(|(m, role)| ((r.pattern.to_string(), m.to_string()), role.as_str().into()))
            })
            .collect();
        assert_eq!(
            documented, table,
            "console/openapi.json and ROUTES differ (regenerate it: node console/openapi.mjs)"
        );
    }

    /// The router in `shell/console/mod.rs` and [`ROUTES`] name the same routes, methods and `Allow`
    /// lists: a route added to one and not the other fails here (and a route the table lacks is
    /// unreachable at run time, never open).
    #[test]
    fn the_router_and_the_table_agree() {
        let src = include_str!("../shell/console/mod.rs");
        let body = src.split("let (status, body) = match (rest, &method) {").nth(1).expect("the router's match");
        let body = body.split("\n    };").next().expect("the router's match ends");
        let mut router: BTreeMap<String, (Vec<String>, Option<String>)> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for line in body.lines().map(str::trim).filter(|l| l.starts_with("([")) {
            let (segments, after) = line[2..].split_once("], ").expect("a route arm");
            let pattern = segments
                .split(", ")
                .filter(|s| !s.is_empty())
                .map(|s| if s.starts_with('"') { s.trim_matches('"').to_string() } else { "{}".to_string() })
                .collect::<Vec<_>>()
                .join("/");
            let methods = after.split(')').next().unwrap_or("");
            if !order.contains(&pattern) {
                order.push(pattern.clone());
            }
            let entry = router.entry(pattern).or_default();
            if methods == "_" {
                let allow = after.split("not_allowed(\"").nth(1).and_then(|a| a.split('"').next());
                entry.1 = allow.map(str::to_string);
            } else {
                for m in methods.split(" | ") {
                    entry.0.push(m.trim_start_matches("Method::").to_ascii_uppercase());
                }
            }
        }
        let table: Vec<String> = ROUTES.iter().map(|r| r.pattern.to_string()).collect();
        let mut sorted_table = table.clone();
        sorted_table.sort();
        let mut sorted_router = order.clone();
        sorted_router.sort();
        assert_eq!(sorted_router, sorted_table, "the router's routes and ROUTES differ");
        for route in ROUTES {
            let (methods, allow) = &router[route.pattern];
            let mut want: Vec<String> = route.methods.iter().map(|(m, _)| m.to_string()).collect();
            let mut got = methods.clone();
            want.sort();
            got.sort();
            assert_eq!(got, want, "methods of {}", route.pattern);
            assert_eq!(allow.as_deref(), Some(route.allow), "Allow of {}", route.pattern);
        }
        // Literal segments before `{}` in both: the first match wins in each.
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                let segs_b: Vec<&str> = b.pattern.split('/').collect();
                assert!(!a.matches(&segs_b) || a.pattern == b.pattern, "{} shadows {}", a.pattern, b.pattern);
            }
        }
    }
}
