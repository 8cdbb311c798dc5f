//! Resources, resource templates, prompts and completions of a server's upstream MCP apps, passed
//! through: the lists aggregated in the server's app order (prompt names prefixed like tool
//! names, resource URIs kept intact), paged with a cursor Flowgate signs, and `resources/read`,
//! `prompts/get` and `completion/complete` routed to the upstream that owns the URI, prompt or
//! template; the Skills extension likewise (`skills`). No IO: the shell fetched the upstreams' catalogs (`backend::mcp::catalog`) and makes
//! the routed request ([`Forward`]).
//!
//! Routing rules:
//! - a resource URI belongs to the first app, in the server's order, that lists it; the same
//!   URI listed by a later app is a collision, left out of the list and reported
//!   ([`Gateway::collisions`]); likewise a URI template listed by two apps;
//! - a URI no app lists that lies in an exposed skill's directory goes to the skill's app
//!   (`skills`);
//! - a URI no app lists goes to the first app with a resource template that matches it
//!   (RFC 6570: `{x}` one or more characters other than `/ ? #`, `{+x}` / `{#x}` any, `{?x}` /
//!   `{&x}` the rest of the query), unless that app's `denied_resources` names the URI;
//! - a read of a URI nothing above routes goes to the first app that lists a resource or a
//!   template under the same scheme and authority (`demo://resource/…`), when that app's filters
//!   would let the URI through (no `allowed_resources`, not denied): the upstream that could
//!   own it answers (its own "not found", usually), as it would if asked directly;
//! - deny wins on every route (read, template match, skill file, directory read, completion):
//!   a URI an app's `denied_resources` names is never sent to that app;
//! - anything else is "resource not found", answered by Flowgate: a URI an upstream could not
//!   own (or that `allowed_resources` / `denied_resources` left out) is never forwarded.

use std::collections::HashMap;
use std::rc::Rc;

use crate::json;
use serde_json::{Map, Value};

use crate::pure::backend::mcp::aggregate::{aggregate_prompts, resource_allowed, resource_denied, ExposedTool};
use crate::pure::backend::mcp::catalog::{self, Catalog, List};
use crate::pure::definition::ServerDefinition;
use crate::pure::ids::sha256_hex;
use crate::pure::mcp::client_session;
use crate::pure::quote::plain_or_quoted;

use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::protocol::version::Version;

pub mod skills;

use skills::Skills;

/// Items per page of an aggregated list; a page never spans two upstream apps.
pub const PAGE_SIZE: usize = 100;
/// Longest URI routed (template matching is bounded by it).
pub const MAX_URI: usize = 8192;

/// The catalogs of a server's upstream MCP apps, by app id, as the shell fetched or cached them.
#[derive(Debug, Default, Clone)]
pub struct Catalogs(pub HashMap<String, Rc<Catalog>>);

/// The methods this module answers (with [`skills::METHODS`]).
pub const METHODS: [&str; 11] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "skills/list",
    "skills/get",
    "resources/directory/read",
];

/// A request for the upstream that owns what it names, with the client's params rewritten for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward {
    pub id: Value,
    pub version: Version,
    pub app_index: usize,
    pub method: &'static str,
    pub params: Map<String, Value>,
    /// `Mcp-Name` for a stateless upstream (the prompt's upstream name, or the URI).
    pub name: Option<String>,
    /// URIs left out of a `resources/directory/read` result (the app's `denied_resources`).
    pub hide: Vec<String>,
    /// The backend `user` of the caller (`server::end_user`, set by the server): an upstream's
    /// `requestState` is sealed to it.
    pub user: String,
}

/// What a gateway request comes to: a result Flowgate has, or a request to forward.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Result(Value),
    Forward(Box<Forward>),
}

/// A resource template, parsed for matching.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    /// An expression: its operator (`'\0'` for none).
    Var(char),
}

struct Template {
    app_index: usize,
    uri_template: String,
    parts: Vec<Part>,
    item: Value,
}

/// The aggregated view of one server's upstream catalogs.
pub struct Gateway<'a> {
    def: &'a ServerDefinition,
    /// (app index, the upstream's resource), first lister of a URI only.
    resources: Vec<(usize, Value)>,
    templates: Vec<Template>,
    /// (app index, the prompt as exposed).
    prompts: Vec<(usize, ExposedTool)>,
    collisions: Vec<String>,
    resources_offered: bool,
    prompts_offered: bool,
    completions_offered: bool,
    /// App indexes whose upstream declared `completions`.
    completes: Vec<usize>,
    skills: Skills,
}

impl<'a> Gateway<'a> {
    pub fn new(def: &'a ServerDefinition, catalogs: &Catalogs) -> Gateway<'a> {
        let mut g = Gateway {
            def,
            resources: Vec::new(),
            templates: Vec::new(),
            prompts: Vec::new(),
            collisions: Vec::new(),
            resources_offered: false,
            prompts_offered: false,
            completions_offered: false,
            completes: Vec::new(),
            skills: Skills::default(),
        };
        for (i, app) in def.apps.iter().enumerate() {
            let (Some(config), Some(cat)) = (app.backend.as_mcp(), catalogs.0.get(&app.id)) else { continue };
            g.resources_offered |= cat.offers_resources();
            g.prompts_offered |= cat.offers_prompts();
            if cat.offers_completions() {
                g.completions_offered = true;
                g.completes.push(i);
            }
            for r in &cat.resources {
                let Some(uri) = r.get("uri").and_then(Value::as_str).filter(|u| !u.is_empty()) else { continue };
                if !resource_allowed(config, uri) {
                    continue;
                }
                match g.resources.iter().find(|(_, have)| have["uri"] == uri) {
                    Some((owner, _)) => {
                        let owner = &def.apps[*owner].name;
                        g.collisions.push(collision("resource", uri, owner, &app.name));
                    }
                    None => g.resources.push((i, r.clone())),
                }
            }
            for t in &cat.resource_templates {
                let Some(ut) = t.get("uriTemplate").and_then(Value::as_str).filter(|u| !u.is_empty()) else {
                    continue;
                };
                if !resource_allowed(config, ut) {
                    continue;
                }
                match g.templates.iter().find(|have| have.uri_template == ut) {
                    Some(have) => {
                        let owner = &def.apps[have.app_index].name;
                        g.collisions.push(collision("resource template", ut, owner, &app.name));
                    }
                    None => g.templates.push(Template {
                        app_index: i,
                        uri_template: ut.to_string(),
                        parts: parse_template(ut),
                        item: t.clone(),
                    }),
                }
            }
            for mut p in aggregate_prompts(&app.name, &app.id, config, &cat.prompts) {
                p.name = unique(&g.prompts, &p.name);
                g.prompts.push((i, p));
            }
        }
        g.skills = Skills::new(def, catalogs, &mut g.collisions);
        // Skill files are resources: a server with skills declares resources (SEP-2640).
        g.resources_offered |= g.skills.offered();
        g
    }

    /// URIs and URI templates two apps list, and which app kept each (for the console and logs).
    pub fn collisions(&self) -> &[String] {
        &self.collisions
    }

    /// The exposed prompt names, in order.
    pub fn prompt_names(&self) -> Vec<&str> {
        self.prompts.iter().map(|(_, p)| p.name.as_str()).collect()
    }

    /// The exposed skills' URIs (their SKILL.md), in order.
    pub fn skill_uris(&self) -> Vec<&str> {
        self.skills.uris()
    }

    /// The resource URIs and URI templates exposed, in order.
    pub fn resource_uris(&self) -> Vec<&str> {
        let uris = self.resources.iter().filter_map(|(_, r)| r["uri"].as_str());
        uris.chain(self.templates.iter().map(|t| t.uri_template.as_str())).collect()
    }

    /// What the server declares in `capabilities` for these upstreams, for a client of `version`:
    /// `resources` and `prompts` when some upstream offers them (no subscriptions and no
    /// list-changed notifications here: the shell widens them for a client that can keep a
    /// session's stream, `client_session::declare`),
    /// `completions` from 2025-03-26, where the capability exists; the Skills extension to
    /// 2026-07-28 clients.
    pub fn add_capabilities(&self, c: &mut Value, version: Version) {
        if self.resources_offered {
            c["resources"] = json!({"subscribe": false, "listChanged": false});
        }
        if self.prompts_offered {
            c["prompts"] = json!({"listChanged": false});
        }
        if self.completions_offered && version >= Version::V2025_03_26 {
            c["completions"] = json!({});
        }
        if self.skills.offered() && version.is_stateless() {
            c["extensions"][catalog::SKILLS_EXTENSION] = self.skills.capability();
        }
    }

    /// Answers one of [`METHODS`].
    pub fn answer(
        &self,
        id: &Value,
        method: &str,
        params: &Map<String, Value>,
        version: Version,
    ) -> Result<Answer, RpcError> {
        if let Some(m) = skills::METHODS.iter().find(|m| **m == method) {
            return self.answer_skills(id, m, params, version);
        }
        match method {
            "resources/list" | "resources/templates/list" | "resources/read" if !self.resources_offered => {
                Err(not_offered(method, version, "resources"))
            }
            "resources/subscribe" | "resources/unsubscribe" if !self.resources_offered => {
                Err(not_offered(method, version, "resources"))
            }
            // Delivered on the session's standalone stream, which only 2025 clients have.
            "resources/subscribe" | "resources/unsubscribe" if !client_session::can_stay(version) => {
                Err(client_session::no_stream(method, version, client_session::NoStream::Stateless))
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = uri_param(params, "uri", method)?;
                let app_index = self.owner_of_uri(uri).ok_or_else(|| self.not_found(uri, version))?;
                let method =
                    if method == "resources/subscribe" { "resources/subscribe" } else { "resources/unsubscribe" };
                self.forward(id, version, app_index, method, params, Some(uri.to_string()))
            }
            "prompts/list" | "prompts/get" if !self.prompts_offered => Err(not_offered(method, version, "prompts")),
            "completion/complete" if !self.completions_offered => Err(not_offered(method, version, "completions")),
            "resources/list" => self.page(catalog::RESOURCES, params, version).map(Answer::Result),
            "resources/templates/list" => self.page(catalog::RESOURCE_TEMPLATES, params, version).map(Answer::Result),
            "prompts/list" => self.page(catalog::PROMPTS, params, version).map(Answer::Result),
            "resources/read" => {
                let uri = uri_param(params, "uri", method)?;
                let app_index = self
                    .owner_of_uri(uri)
                    .or_else(|| self.could_own(uri))
                    .ok_or_else(|| self.not_found(uri, version))?;
                self.forward(id, version, app_index, "resources/read", params, Some(uri.to_string()))
            }
            "prompts/get" => {
                let name = params.get("name").and_then(Value::as_str).ok_or_else(|| {
                    RpcError::new(200, jsonrpc::INVALID_PARAMS, "Invalid params: prompts/get needs `name`, the prompt")
                })?;
                let (app_index, p) = self.prompt(name)?;
                let mut fwd = self.forward(id, version, *app_index, "prompts/get", params, None)?;
                if let Answer::Forward(f) = &mut fwd {
                    f.params.insert("name".into(), p.upstream_name.clone().into());
                    f.name = Some(p.upstream_name.clone());
                }
                Ok(fwd)
            }
            _ => self.complete(id, params, version),
        }
    }

    /// `completion/complete`, routed by its `ref`: a prompt (renamed to its upstream name) or a
    /// resource template (or a URI one matches). An owner that does not complete gets no values.
    fn complete(&self, id: &Value, params: &Map<String, Value>, version: Version) -> Result<Answer, RpcError> {
        let bad = |why: &str| RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("Invalid params: {why}"));
        let reference = params.get("ref").and_then(Value::as_object).ok_or_else(|| {
            bad("completion/complete needs `ref`: {type: \"ref/prompt\", name} or {type: \"ref/resource\", uri}")
        })?;
        let (app_index, upstream_ref) = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name =
                    reference.get("name").and_then(Value::as_str).ok_or_else(|| bad("ref/prompt needs `name`"))?;
                let (app_index, p) = self.prompt(name)?;
                let mut r = reference.clone();
                r.insert("name".into(), p.upstream_name.clone().into());
                (*app_index, r)
            }
            Some("ref/resource") => {
                let uri =
                    reference.get("uri").and_then(Value::as_str).ok_or_else(|| bad("ref/resource needs `uri`"))?;
                let owner = self.templates.iter().find(|t| t.uri_template == uri).map(|t| t.app_index);
                let owner = owner.or_else(|| self.owner_of_uri(uri)).ok_or_else(|| {
                    let why = if self.denied_anywhere(uri) { " (an app of this server denies it)" } else { "" };
                    bad(&format!(
                        "no resource template or resource of this server is {}{why}",
                        plain_or_quoted(truncated(uri))
                    ))
                })?;
                (owner, reference.clone())
            }
            _ => return Err(bad("`ref.type` must be \"ref/prompt\" or \"ref/resource\"")),
        };
        if !self.completes.contains(&app_index) {
            return Ok(Answer::Result(json!({"completion": {"values": [], "hasMore": false}})));
        }
        let mut fwd = self.forward(id, version, app_index, "completion/complete", params, None)?;
        if let Answer::Forward(f) = &mut fwd {
            f.params.insert("ref".into(), Value::Object(upstream_ref));
        }
        Ok(fwd)
    }

    fn prompt(&self, name: &str) -> Result<&(usize, ExposedTool), RpcError> {
        self.prompts.iter().find(|(_, p)| p.name == name).ok_or_else(|| {
            RpcError::new(
                200,
                jsonrpc::INVALID_PARAMS,
                format!(
                    "Unknown prompt: {}. This server has: {}",
                    plain_or_quoted(truncated(name)),
                    self.prompt_names().join(", ")
                ),
            )
        })
    }

    /// The app a URI is routed to: the app that listed it, else the first whose template matches.
    pub fn owner_of_uri(&self, uri: &str) -> Option<usize> {
        if let Some((i, _)) = self.resources.iter().find(|(_, r)| r["uri"] == uri) {
            return Some(*i);
        }
        if let Some(i) = self.skills.owner_of(self.def, uri) {
            return Some(i);
        }
        if uri.len() > MAX_URI {
            return None;
        }
        self.templates
            .iter()
            .find(|t| !self.denies(t.app_index, uri) && matches_template(&t.parts, uri))
            .map(|t| t.app_index)
    }

    /// The first app that lists a resource or template with `uri`'s scheme and authority and
    /// whose filters let `uri` through: the upstream that could own a URI it did not list.
    fn could_own(&self, uri: &str) -> Option<usize> {
        let origin = uri_origin(uri)?;
        let listed = self.resources.iter().filter_map(|(i, r)| Some((*i, r["uri"].as_str()?)));
        let templated = self.templates.iter().map(|t| (t.app_index, t.uri_template.as_str()));
        let mut apps: Vec<usize> =
            listed.chain(templated).filter(|(_, u)| uri_origin(u) == Some(origin)).map(|(i, _)| i).collect();
        apps.sort_unstable();
        apps.into_iter()
            .find(|i| self.def.apps.get(*i).and_then(|a| a.backend.as_mcp()).is_some_and(|c| resource_allowed(c, uri)))
    }

    /// Whether app `app_index`'s `denied_resources` names `uri`.
    fn denies(&self, app_index: usize, uri: &str) -> bool {
        self.def.apps.get(app_index).and_then(|a| a.backend.as_mcp()).is_some_and(|c| resource_denied(c, uri))
    }

    /// Whether some app of the server denies `uri` (for the error that says why it is not read).
    fn denied_anywhere(&self, uri: &str) -> bool {
        (0..self.def.apps.len()).any(|i| self.denies(i, uri))
    }

    /// "Resource not found" for a URI no app serves; saying so when an app denies it.
    fn not_found(&self, uri: &str, version: Version) -> RpcError {
        let mut e = resource_not_found(uri, version);
        if self.denied_anywhere(uri) {
            e.message = format!(
                "Resource not found: {} (this server does not expose it: an app's denied_resources names it)",
                plain_or_quoted(truncated(uri))
            );
        }
        e
    }

    fn forward(
        &self,
        id: &Value,
        version: Version,
        app_index: usize,
        method: &'static str,
        params: &Map<String, Value>,
        name: Option<String>,
    ) -> Result<Answer, RpcError> {
        // The client's `_meta` is about its connection to Flowgate (revision, capabilities),
        // not the upstream's; the upstream session adds its own, and the client's capabilities
        // an upstream's input request may need.
        let input = super::input_required::client_params(params)?;
        let mut params = params.clone();
        params.remove("_meta");
        params.extend(input);
        Ok(Answer::Forward(Box::new(Forward {
            id: id.clone(),
            version,
            app_index,
            method,
            params,
            name,
            hide: Vec::new(),
            user: String::new(),
        })))
    }

    /// One page of an aggregated list: items of one app from an offset, and the cursor of the
    /// next page (the same app further on, or the next app with items).
    fn page(&self, list: List, params: &Map<String, Value>, version: Version) -> Result<Value, RpcError> {
        let items: Vec<(usize, Value)> = match list.key {
            "resources" => self.resources.iter().map(|(i, r)| (*i, resource_for_client(r, version))).collect(),
            "resourceTemplates" => {
                self.templates.iter().map(|t| (t.app_index, resource_for_client(&t.item, version))).collect()
            }
            "skills" => self.skills.entries.clone(),
            _ => self.prompts.iter().map(|(i, p)| (*i, prompt_for_client(p, version))).collect(),
        };
        let (app, offset) = match params.get("cursor") {
            None | Some(Value::Null) => (items.first().map_or(0, |(i, _)| *i), 0),
            Some(Value::String(c)) => {
                let (app, offset) = decode_cursor(&self.def.server_id, list, c)?;
                if app >= self.def.apps.len() {
                    return Err(bad_cursor(list, "it names an app this server no longer has"));
                }
                (app, offset)
            }
            Some(_) => return Err(bad_cursor(list, "a cursor is a string")),
        };
        let of_app: Vec<&Value> = items.iter().filter(|(i, _)| *i == app).map(|(_, v)| v).collect();
        let page: Vec<Value> = of_app.iter().skip(offset).take(PAGE_SIZE).map(|v| (*v).clone()).collect();
        let next = if offset + PAGE_SIZE < of_app.len() {
            Some((app, offset + PAGE_SIZE))
        } else {
            items.iter().find(|(i, _)| *i > app).map(|(i, _)| (*i, 0))
        };
        let mut r = Map::new();
        r.insert(list.key.into(), Value::Array(page));
        if let Some((a, o)) = next {
            r.insert("nextCursor".into(), encode_cursor(&self.def.server_id, list, a, o).into());
        }
        Ok(Value::Object(r))
    }
}

fn collision(what: &str, uri: &str, kept: &str, dropped: &str) -> String {
    format!(
        "{what} {} is listed by apps '{kept}' and '{dropped}'; '{kept}' comes first in the server, so it serves it",
        plain_or_quoted(truncated(uri))
    )
}

fn unique(prompts: &[(usize, ExposedTool)], base: &str) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while prompts.iter().any(|(_, p)| p.name == name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

fn truncated(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A URI's scheme and authority (`demo://resource` of `demo://resource/a/b`), or its scheme
/// for a URI without an authority (`urn:` of `urn:x:y`); `None` when it has none, or for a
/// template whose origin is itself a variable.
fn uri_origin(uri: &str) -> Option<&str> {
    let colon = uri.find(':')?;
    let scheme = &uri[..colon];
    if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
        return None;
    }
    let origin = match uri[colon + 1..].strip_prefix("//") {
        Some(rest) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            &uri[..colon + 3 + end]
        }
        None => &uri[..=colon],
    };
    (!origin.contains('{')).then_some(origin)
}

fn uri_param<'p>(params: &'p Map<String, Value>, key: &str, method: &str) -> Result<&'p str, RpcError> {
    params.get(key).and_then(Value::as_str).filter(|u| !u.is_empty()).ok_or_else(|| {
        RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("Invalid params: {method} needs `{key}`, the resource URI"))
    })
}

fn not_offered(method: &str, version: Version, what: &str) -> RpcError {
    RpcError::new(
        version.method_not_found_status(),
        jsonrpc::METHOD_NOT_FOUND,
        format!("Method not found: {method} (no upstream MCP server of this Flowgate server offers {what})"),
    )
}

/// SEP-2164 (2026-07-28) standardizes "resource not found" on -32602; earlier revisions
/// used -32002. Either way the URI is in `data`.
fn resource_not_found(uri: &str, version: Version) -> RpcError {
    let code = if version.is_stateless() { jsonrpc::INVALID_PARAMS } else { -32002 };
    RpcError::new(
        200,
        code,
        format!(
            "Resource not found: {} (no upstream of this server lists it or has a resource template that matches it)",
            plain_or_quoted(truncated(uri))
        ),
    )
    .with_data(json!({"uri": truncated(uri)}))
}

fn bad_cursor(list: List, why: &str) -> RpcError {
    RpcError::new(
        200,
        jsonrpc::INVALID_PARAMS,
        format!(
            "Invalid params: the cursor is not one this server handed out for {} ({why}); list again without a cursor",
            list.method
        ),
    )
}

fn kind_char(list: List) -> char {
    match list.key {
        "resources" => 'r',
        "resourceTemplates" => 't',
        "skills" => 's',
        _ => 'p',
    }
}

/// `base64url("<list>.<app>.<offset>.<tag>")`, the tag a SHA-256 over the server's id (which
/// clients never see) and the rest: a cursor cannot be made up, moved to another list or server.
fn encode_cursor(server_id: &str, list: List, app: usize, offset: usize) -> String {
    let body = format!("{}.{app}.{offset}", kind_char(list));
    let tag = &sha256_hex(&format!("{server_id}\n{body}"))[..16];
    crate::pure::base64::encode_url(format!("{body}.{tag}"))
}

fn decode_cursor(server_id: &str, list: List, cursor: &str) -> Result<(usize, usize), RpcError> {
    let raw = crate::pure::base64::decode_url(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| bad_cursor(list, "it is not valid"))?;
    let mut parts = raw.split('.');
    let (Some(kind), Some(app), Some(offset), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad_cursor(list, "it is not valid"));
    };
    let (Ok(app), Ok(offset)) = (app.parse::<usize>(), offset.parse::<usize>()) else {
        return Err(bad_cursor(list, "it is not valid"));
    };
    if kind.len() != 1 || !kind.starts_with(kind_char(list)) {
        return Err(bad_cursor(list, "it belongs to another list"));
    }
    if encode_cursor(server_id, list, app, offset) != cursor || tag.len() != 16 {
        return Err(bad_cursor(list, "it was altered or belongs to another server"));
    }
    Ok((app, offset))
}

/// RFC 6570 expressions and literals; an unclosed `{` is a literal.
fn parse_template(t: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        if open > 0 {
            parts.push(Part::Literal(rest[..open].to_string()));
        }
        let expr = &rest[open + 1..open + close];
        let op = expr.chars().next().filter(|c| "+#./;?&".contains(*c)).unwrap_or('\0');
        parts.push(Part::Var(op));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest.to_string()));
    }
    parts
}

/// Steps one template match may take: a client's URI and an upstream's template cannot make a
/// request spend more than this (a match that needs more is no match).
const MATCH_BUDGET: usize = 100_000;

/// Whether `uri` is an expansion of the template. Memoized on (part, position) and bounded by
/// [`MATCH_BUDGET`], whatever the template and the URI.
fn matches_template(parts: &[Part], uri: &str) -> bool {
    let mut m = Matcher { failed: std::collections::HashSet::new(), budget: MATCH_BUDGET };
    match_from(parts, 0, uri.as_bytes(), 0, &mut m)
}

struct Matcher {
    failed: std::collections::HashSet<(usize, usize)>,
    budget: usize,
}

fn match_from(parts: &[Part], p: usize, uri: &[u8], at: usize, m: &mut Matcher) -> bool {
    let Some(part) = parts.get(p) else { return at == uri.len() };
    if m.budget == 0 || m.failed.contains(&(p, at)) {
        return false;
    }
    m.budget -= 1;
    let ok = match part {
        Part::Literal(l) => uri[at..].starts_with(l.as_bytes()) && match_from(parts, p + 1, uri, at + l.len(), m),
        Part::Var(op) => {
            // How far a value of this expression may reach, and whether it may be empty.
            let (stop, min): (&[u8], usize) = match op {
                '+' | '#' => (b"", 1),
                '?' | '&' => (b"#", 0),
                '/' | '.' | ';' => (b"?#", 0),
                _ => (b"/?#", 1),
            };
            let lead = match op {
                '?' | '&' | '/' | '.' | ';' => Some(*op as u8),
                _ => None,
            };
            let mut end = at;
            let mut ok = false;
            loop {
                let len = end - at;
                let shaped = len == 0 || lead.is_none_or(|c| uri[at] == c);
                if len >= min && shaped && match_from(parts, p + 1, uri, end, m) {
                    ok = true;
                    break;
                }
                if end >= uri.len() || stop.contains(&uri[end]) || m.budget == 0 {
                    break;
                }
                m.budget -= 1;
                end += 1;
            }
            ok
        }
    };
    if !ok {
        m.failed.insert((p, at));
    }
    ok
}

/// A resource or template as a client of `version` may see it: `title` from 2025-06-18,
/// `icons` from 2025-11-25.
fn resource_for_client(item: &Value, version: Version) -> Value {
    let Value::Object(m) = item else { return item.clone() };
    let mut m = m.clone();
    m.retain(|k, _| keep_field(k, version));
    Value::Object(m)
}

fn keep_field(key: &str, version: Version) -> bool {
    match key {
        "title" => version.structured_output(),
        "icons" => version >= Version::V2025_11_25,
        _ => true,
    }
}

/// A prompt under its exposed name, downgraded like a resource (its arguments' titles too).
fn prompt_for_client(p: &ExposedTool, version: Version) -> Value {
    let mut v = resource_for_client(&p.tool, version);
    if let Some(m) = v.as_object_mut() {
        m.insert("name".into(), p.name.clone().into());
        if let Some(Value::Array(args)) = m.get_mut("arguments") {
            for a in args.iter_mut() {
                *a = resource_for_client(a, version);
            }
        }
    }
    v
}

/// A `prompts/get` result as a client of `version` may carry it: audio (2025-03-26) and
/// resource links (2025-06-18) become text for older clients, as in tool results.
pub fn prompt_result_for_client(result: &Value, version: Version) -> Value {
    let mut r = result.clone();
    if let Some(Value::Array(messages)) = r.get_mut("messages") {
        for m in messages.iter_mut() {
            let Some(content) = m.get_mut("content") else { continue };
            let ty = content.get("type").and_then(Value::as_str).unwrap_or("");
            let text = match ty {
                "audio" if !version.tool_annotations() => Some(format!(
                    "[audio left out: this client's MCP revision {} cannot receive audio]",
                    version.as_str()
                )),
                "resource_link" if !version.structured_output() => {
                    Some(content.get("uri").and_then(Value::as_str).unwrap_or("").to_string())
                }
                _ => None,
            };
            if let Some(text) = text {
                *content = json!({"type": "text", "text": text});
            }
        }
    }
    r
}

#[cfg(test)]
mod tests;
