//! The console API's one route table: every route under `/console/api` (path pattern, method,
//! handler, least role, success status), decided without IO.
//!
//! Everything about a console route is read from [`ROUTES`]: the shell resolves a request
//! against it once ([`resolve`]) and runs the handler it names, `console_roles::decide` takes
//! the role from the same entry, a 405's `Allow` is the methods of the entries of the path, and
//! a unit test holds the OpenAPI document (`console/openapi.json`) to it. A route missing here
//! is a 404 or 405 for everyone, never open.

/// The methods console routes take, in the order an `Allow` list names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Delete,
    /// Last, so the `Allow` texts of the other four keep their places in [`ALLOW`].
    Patch,
}

impl Verb {
    pub const ALL: [Verb; 5] = [Verb::Get, Verb::Post, Verb::Put, Verb::Delete, Verb::Patch];

    pub fn parse(method: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == method)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Delete => "DELETE",
            Verb::Patch => "PATCH",
        }
    }

    const fn bit(self) -> usize {
        1 << self as usize
    }
}

/// `Allow` for each set of [`Verb`]s (bit `1 << verb`), in [`Verb::ALL`]'s order: static text
/// (an `ApiError` carries `&'static str`), checked against the order by a test.
const ALLOW: [&str; 32] = [
    "",
    "GET",
    "POST",
    "GET, POST",
    "PUT",
    "GET, PUT",
    "POST, PUT",
    "GET, POST, PUT",
    "DELETE",
    "GET, DELETE",
    "POST, DELETE",
    "GET, POST, DELETE",
    "PUT, DELETE",
    "GET, PUT, DELETE",
    "POST, PUT, DELETE",
    "GET, POST, PUT, DELETE",
    "PATCH",
    "GET, PATCH",
    "POST, PATCH",
    "GET, POST, PATCH",
    "PUT, PATCH",
    "GET, PUT, PATCH",
    "POST, PUT, PATCH",
    "GET, POST, PUT, PATCH",
    "DELETE, PATCH",
    "GET, DELETE, PATCH",
    "POST, DELETE, PATCH",
    "GET, POST, DELETE, PATCH",
    "PUT, DELETE, PATCH",
    "GET, PUT, DELETE, PATCH",
    "POST, PUT, DELETE, PATCH",
    "GET, POST, PUT, DELETE, PATCH",
];

/// What a console route does: one `Console` method in `shell/console/` each (the shell's
/// `match` on this enum is the dispatch; the compiler holds it exhaustive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    Index,
    ListApps,
    CreateApp,
    ImportApp,
    GetApp,
    ReplaceApp,
    DeleteApp,
    RefreshTools,
    GetAppServer,
    CreateAppServer,
    UpdateAppServer,
    DeleteAppServer,
    RotateAppServer,
    ListServers,
    CreateServer,
    GetServer,
    UpdateServer,
    DeleteServer,
    RotateServer,
    GetAuth,
    SetAuth,
    ListKeys,
    CreateKey,
    RevokeKey,
    ListTasks,
    GetTask,
    CancelTask,
    Usage,
    AuditLog,
    ResealSecrets,
    ListTokens,
    CreateToken,
    RevokeToken,
    ListTools,
    CallTool,
    CallLog,
    GetCallLogSettings,
    SetCallLogSettings,
    EditServer,
    RevealServerUrl,
    TestApp,
}

/// One route and method. `path` is under `/console/api`, `{name}` one path parameter (named as
/// in the OpenAPI document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub verb: Verb,
    pub path: &'static str,
    pub handler: Handler,
    /// The least role the route needs.
    pub role: Role,
    /// The status of a success.
    pub ok: u16,
    /// It changes what is stored: every method but GET, and the GETs marked `.writing()`.
    pub writes: bool,
}

const fn at(verb: Verb, path: &'static str, handler: Handler, role: Role, ok: u16) -> Route {
    Route { verb, path, handler, role, ok, writes: !matches!(verb, Verb::Get) }
}

impl Route {
    /// A GET that writes (Dify's code rotation): `console_access::writing_get` refuses it to
    /// callers a browser authenticates.
    const fn writing(self) -> Route {
        Route { writes: true, ..self }
    }

    fn segments(&self) -> impl Iterator<Item = &'static str> {
        self.path.split('/').filter(|s| !s.is_empty())
    }

    fn matches(&self, rest: &[&str]) -> bool {
        let mut parts = self.segments();
        let mut segs = rest.iter();
        loop {
            match (parts.next(), segs.next()) {
                (None, None) => return true,
                (Some(p), Some(_)) if p.starts_with('{') => {}
                (Some(p), Some(s)) if p == *s => {}
                _ => return false,
            }
        }
    }
}

use Handler::*;
use Role::{Admin, Publisher, Viewer};

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

use Verb::{Delete, Get, Patch, Post, Put};

/// Every console route and method. The first path that matches a request is its path (so a
/// literal segment comes before `{…}` in the same place: `apps/import` before `apps/{app_id}`);
/// the method then picks the entry of that path. GETs are for viewers except the two
/// Dify-compatible GETs that rotate a server code: those write, so they need a publisher.
pub const ROUTES: &[Route] = &[
    // `/console/api` itself: where the OpenAPI document is, and who is asking.
    at(Get, "", Index, Viewer, 200),
    at(Get, "apps", ListApps, Viewer, 200),
    at(Post, "apps", CreateApp, Publisher, 201),
    at(Post, "apps/import", ImportApp, Publisher, 201),
    at(Get, "apps/{app_id}", GetApp, Viewer, 200),
    at(Put, "apps/{app_id}", ReplaceApp, Publisher, 200),
    at(Delete, "apps/{app_id}", DeleteApp, Publisher, 200),
    at(Post, "apps/{app_id}/tools/refresh", RefreshTools, Publisher, 200),
    // Reaches the app's backend with its stored credentials: not for viewers.
    at(Post, "apps/{app_id}/test", TestApp, Publisher, 200),
    at(Get, "apps/{app_id}/server", GetAppServer, Viewer, 200),
    at(Post, "apps/{app_id}/server", CreateAppServer, Publisher, 201),
    at(Put, "apps/{app_id}/server", UpdateAppServer, Publisher, 200),
    at(Delete, "apps/{app_id}/server", DeleteAppServer, Publisher, 200),
    // Dify's route is a GET keyed by the server id; POST is accepted too, and so is the app id.
    at(Get, "apps/{app_id}/server/refresh", RotateAppServer, Publisher, 200).writing(),
    at(Post, "apps/{app_id}/server/refresh", RotateAppServer, Publisher, 200),
    at(Get, "servers", ListServers, Viewer, 200),
    at(Post, "servers", CreateServer, Publisher, 201),
    at(Get, "servers/{server_id}", GetServer, Viewer, 200),
    at(Put, "servers/{server_id}", UpdateServer, Publisher, 200),
    at(Delete, "servers/{server_id}", DeleteServer, Publisher, 200),
    at(Patch, "servers/{server_id}", EditServer, Publisher, 200),
    // The server's code opened from its sealed copy: admins only, each reveal audited (a POST).
    at(Post, "servers/{server_id}/reveal", RevealServerUrl, Admin, 200),
    at(Get, "servers/{server_id}/refresh", RotateServer, Publisher, 200).writing(),
    at(Post, "servers/{server_id}/refresh", RotateServer, Publisher, 200),
    at(Get, "servers/{server_id}/auth", GetAuth, Viewer, 200),
    at(Put, "servers/{server_id}/auth", SetAuth, Publisher, 200),
    at(Get, "servers/{server_id}/keys", ListKeys, Viewer, 200),
    at(Post, "servers/{server_id}/keys", CreateKey, Publisher, 201),
    at(Delete, "servers/{server_id}/keys/{key_id}", RevokeKey, Publisher, 200),
    at(Get, "servers/{server_id}/tasks", ListTasks, Viewer, 200),
    at(Get, "servers/{server_id}/tasks/{task_id}", GetTask, Viewer, 200),
    at(Post, "servers/{server_id}/tasks/{task_id}/cancel", CancelTask, Publisher, 200),
    at(Get, "servers/{server_id}/usage", Usage, Viewer, 200),
    // The tool playground: the tools as a client sees them, and a call through the endpoint's path.
    at(Get, "servers/{server_id}/tools", ListTools, Viewer, 200),
    at(Post, "servers/{server_id}/tools/call", CallTool, Publisher, 200),
    at(Get, "servers/{server_id}/calls", CallLog, Viewer, 200),
    at(Get, "servers/{server_id}/calls/settings", GetCallLogSettings, Viewer, 200),
    at(Put, "servers/{server_id}/calls/settings", SetCallLogSettings, Publisher, 200),
    at(Get, "audit", AuditLog, Viewer, 200),
    at(Post, "secrets/reseal", ResealSecrets, Admin, 200),
    // Console tokens are admin business, reading them included: a list of who holds which role.
    at(Get, "tokens", ListTokens, Admin, 200),
    at(Post, "tokens", CreateToken, Admin, 201),
    at(Delete, "tokens/{token_id}", RevokeToken, Admin, 200),
];

/// A request's route and its path parameters, in the path's order (`""` past the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matched<'a> {
    pub route: &'static Route,
    pub params: [&'a str; 2],
}

/// What the table says of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved<'a> {
    Found(Matched<'a>),
    /// The path is a route's, the method is not one it takes.
    MethodNotAllowed {
        allow: &'static str,
    },
    NotFound,
}

/// Resolves `method` on `rest` (the path's segments after `/console/api`).
pub fn resolve<'a>(rest: &[&'a str], method: &str) -> Resolved<'a> {
    let Some(path) = ROUTES.iter().find(|r| r.matches(rest)).map(|r| r.path) else {
        return Resolved::NotFound;
    };
    let verb = Verb::parse(method);
    match ROUTES.iter().find(|r| r.path == path && Some(r.verb) == verb) {
        Some(route) => {
            let mut params = [""; 2];
            let values = route.segments().zip(rest).filter(|(p, _)| p.starts_with('{')).map(|(_, s)| *s);
            for (slot, value) in params.iter_mut().zip(values) {
                *slot = value;
            }
            Resolved::Found(Matched { route, params })
        }
        None => Resolved::MethodNotAllowed { allow: allow_of(path) },
    }
}

/// The `Allow` of a path: the methods of its entries.
fn allow_of(path: &str) -> &'static str {
    let bits = ROUTES.iter().filter(|r| r.path == path).fold(0, |bits, r| bits | r.verb.bit());
    ALLOW[bits]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn segs(path: &str) -> Vec<&str> {
        path.split('/').filter(|s| !s.is_empty()).collect()
    }

    /// The route's path with its parameters filled in (`p1`, `p2`, …).
    fn concrete(route: &Route) -> String {
        let mut n = 0;
        route
            .segments()
            .map(|s| {
                if s.starts_with('{') {
                    n += 1;
                    format!("p{n}")
                } else {
                    s.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    #[test]
    fn every_route_resolves_to_itself_with_its_parameters() {
        for route in ROUTES {
            let path = concrete(route);
            let n = route.segments().filter(|s| s.starts_with('{')).count();
            assert!(n <= 2, "{}: Matched carries two parameters", route.path);
            let mut want = [""; 2];
            for (i, slot) in want.iter_mut().enumerate().take(n) {
                *slot = ["p1", "p2"][i];
            }
            let got = resolve(&segs(&path), route.verb.as_str());
            assert_eq!(got, Resolved::Found(Matched { route, params: want }), "{} {path}", route.verb.as_str());
        }
    }

    #[test]
    fn one_entry_per_path_and_method_and_literals_before_parameters() {
        let mut seen = BTreeSet::new();
        for route in ROUTES {
            assert!(seen.insert((route.path, route.verb.as_str())), "{} {} twice", route.verb.as_str(), route.path);
        }
        // No entry is shadowed by an earlier one of another path (the first match wins).
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                let b_segs: Vec<&str> = b.segments().collect();
                assert!(!a.matches(&b_segs) || a.path == b.path, "{} shadows {}", a.path, b.path);
            }
        }
    }

    #[test]
    fn the_allow_texts_list_their_methods_in_order() {
        for (bits, allow) in ALLOW.iter().enumerate() {
            let names: Vec<&str> = Verb::ALL.into_iter().filter(|v| bits & v.bit() != 0).map(Verb::as_str).collect();
            assert_eq!(*allow, names.join(", "), "bits {bits:04b}");
        }
        for v in Verb::ALL {
            assert_eq!(Verb::parse(v.as_str()), Some(v));
        }
        assert_eq!(Verb::parse("get"), None);
        assert_eq!(Verb::parse("patch"), None);
    }

    /// The `Allow` of every path, written out by hand (as the router answered before the table
    /// drove it): a method dropped from or added to an entry fails here.
    #[test]
    fn method_not_allowed_lists_the_methods_of_the_path() {
        const EXPECTED: &[(&str, &str)] = &[
            ("", "GET"),
            ("apps", "GET, POST"),
            ("apps/import", "POST"),
            ("apps/X", "GET, PUT, DELETE"),
            ("apps/X/tools/refresh", "POST"),
            ("apps/X/test", "POST"),
            ("apps/X/server", "GET, POST, PUT, DELETE"),
            ("apps/X/server/refresh", "GET, POST"),
            ("servers", "GET, POST"),
            ("servers/X", "GET, PUT, DELETE, PATCH"),
            ("servers/X/reveal", "POST"),
            ("servers/X/refresh", "GET, POST"),
            ("servers/X/auth", "GET, PUT"),
            ("servers/X/keys", "GET, POST"),
            ("servers/X/keys/Y", "DELETE"),
            ("servers/X/tasks", "GET"),
            ("servers/X/tasks/Y", "GET"),
            ("servers/X/tasks/Y/cancel", "POST"),
            ("servers/X/usage", "GET"),
            ("servers/X/tools", "GET"),
            ("servers/X/tools/call", "POST"),
            ("servers/X/calls", "GET"),
            ("servers/X/calls/settings", "GET, PUT"),
            ("audit", "GET"),
            ("secrets/reseal", "POST"),
            ("tokens", "GET, POST"),
            ("tokens/Y", "DELETE"),
        ];
        for &(path, allow) in EXPECTED {
            for method in ["PATCH", "HEAD", "OPTIONS", "get", "GET", "POST", "PUT", "DELETE"] {
                let takes = allow.split(", ").any(|m| m == method);
                match resolve(&segs(path), method) {
                    Resolved::Found(_) => assert!(takes, "{method} {path} is routed"),
                    Resolved::MethodNotAllowed { allow: got } => {
                        assert!(!takes, "{method} {path} is refused");
                        assert_eq!(got, allow, "Allow of {path}");
                    }
                    Resolved::NotFound => panic!("{method} {path}: not found"),
                }
            }
        }
        let paths: BTreeSet<&str> = ROUTES.iter().map(|r| r.path).collect();
        assert_eq!(paths.len(), EXPECTED.len(), "a path of ROUTES has no expected Allow here");
    }

    #[test]
    fn unknown_paths_are_not_found() {
        for path in ["nope", "apps/X/Y", "apps/X/tools", "servers/X/keys/Y/Z", "console", "tokens/X/Y"] {
            assert_eq!(resolve(&segs(path), "GET"), Resolved::NotFound, "{path}");
        }
    }

    #[test]
    fn only_gets_read_and_writing_routes_need_a_publisher() {
        for route in ROUTES {
            assert_eq!(
                route.writes,
                route.verb != Get || route.handler == RotateAppServer || route.handler == RotateServer
            );
            if route.writes {
                assert!(route.role >= Publisher, "{:?} {} must not be open to viewers", route.verb, route.path);
            }
            if route.path.starts_with("tokens") || route.path.starts_with("secrets") || route.handler == RevealServerUrl
            {
                assert_eq!(route.role, Admin, "{:?} {}", route.verb, route.path);
            }
        }
    }

    /// The OpenAPI document (`console/openapi.json`, written by `console/openapi.mjs` and served
    /// at `/console/api/openapi.json`) has exactly the paths (parameter names included) and
    /// methods of [`ROUTES`], each with the entry's least role and its success status.
    #[test]
    fn the_openapi_document_and_the_table_agree() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../console/openapi.json")).expect("console/openapi.json is JSON");
        let mut documented: BTreeMap<(String, String), (String, Vec<String>)> = BTreeMap::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                let role = operation["x-flowgate-role"].as_str().unwrap_or("(none)").to_string();
                let codes = operation["responses"].as_object().expect("responses");
                let ok = codes.keys().filter(|c| c.starts_with('2')).cloned().collect();
                documented.insert((path.clone(), method.to_ascii_uppercase()), (role, ok));
            }
        }
        let table: BTreeMap<(String, String), (String, Vec<String>)> = ROUTES
            .iter()
            .map(|r| {
                let key = (format!("/{}", r.path), r.verb.as_str().to_string());
                (key, (r.role.as_str().to_string(), vec![r.ok.to_string()]))
            })
            .collect();
        assert_eq!(
            documented, table,
            "console/openapi.json and ROUTES differ: (path, method) → (role, success status); change console/openapi.mjs and run node console/openapi.mjs"
        );
    }
}
