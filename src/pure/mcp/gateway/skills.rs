//! The Skills extension (SEP-2640, `io.modelcontextprotocol/skills`) of a server's upstream apps,
//! passed through: `skills/list` aggregated and paged like the other lists, `skills/get` and
//! `resources/directory/read` routed to the upstream that serves the skill, and a skill's files
//! routed with it. Offered to 2026-07-28 clients only: the extension is specified against that
//! revision, the first whose capabilities carry `extensions`.
//!
//! Rules:
//! - a skill is exposed when its `uri` (its SKILL.md) passes `allowed_resources` /
//!   `denied_resources`; the first app, in the server's order, that lists a skill URI serves it,
//!   a later app's entry for it is a collision, left out and reported;
//! - the skill's directory (its `uri` less `/SKILL.md`) and every URI under it belong to that
//!   app (the deepest directory, for nested skills), except URIs `denied_resources` names;
//! - `skills/get` of a SKILL.md no app lists goes to the app a URI would be routed to, if that
//!   app offers skills (an upstream may serve skills it does not list); anything else is
//!   "unknown skill" (`-32602`), answered by Flowgate.

use crate::json;
use serde_json::{Map, Value};

use crate::pure::backend::mcp::aggregate::{resource_allowed, skill_file_allowed};
use crate::pure::backend::mcp::catalog::{self, SKILLS_EXTENSION};
use crate::pure::definition::ServerDefinition;
use crate::pure::protocol::jsonrpc::{self, RpcError};
use crate::pure::protocol::version::Version;
use crate::pure::quote::plain_or_quoted;

use super::{collision, not_offered, truncated, Answer, Catalogs, Gateway};

/// The methods of the extension.
pub const METHODS: [&str; 3] = ["skills/list", "skills/get", "resources/directory/read"];

const SKILL_MD: &str = "/SKILL.md";

/// The skills of a server's upstream apps.
#[derive(Debug, Default)]
pub struct Skills {
    /// (app index, the upstream's entry), the first lister of a skill URI only.
    pub(super) entries: Vec<(usize, Value)>,
    /// App indexes whose upstream declared the extension; and `directoryRead`.
    apps: Vec<usize>,
    directory_read: Vec<usize>,
}

impl Skills {
    pub fn new(def: &ServerDefinition, catalogs: &Catalogs, collisions: &mut Vec<String>) -> Skills {
        let mut s = Skills::default();
        for (i, app) in def.apps.iter().enumerate() {
            let (Some(config), Some(cat)) = (app.backend.as_mcp(), catalogs.0.get(&app.id)) else { continue };
            if !cat.offers_skills() {
                continue;
            }
            s.apps.push(i);
            if cat.offers_directory_read() {
                s.directory_read.push(i);
            }
            for e in &cat.skills {
                let Some(uri) = e.get("uri").and_then(Value::as_str).filter(|u| root(u).is_some()) else { continue };
                if !resource_allowed(config, uri) {
                    continue;
                }
                match s.entries.iter().find(|(_, have)| have["uri"] == uri) {
                    Some((owner, _)) => collisions.push(collision("skill", uri, &def.apps[*owner].name, &app.name)),
                    None => s.entries.push((i, e.clone())),
                }
            }
        }
        s
    }

    /// Whether some upstream app declared the extension.
    pub fn offered(&self) -> bool {
        !self.apps.is_empty()
    }

    /// The extension as this server declares it (with `directoryRead` when an upstream reads
    /// directories).
    pub fn capability(&self) -> Value {
        if self.directory_read.is_empty() {
            json!({})
        } else {
            json!({"directoryRead": true})
        }
    }

    /// The app whose exposed skill's directory holds `uri` (the directory itself or anything
    /// under it; the deepest directory wins), unless that app denies the URI.
    pub fn owner_of(&self, def: &ServerDefinition, uri: &str) -> Option<usize> {
        let holds = |dir: &str| uri.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        let (app, _) = self
            .entries
            .iter()
            .filter_map(|(i, e)| Some((*i, root(e["uri"].as_str()?)?)))
            .filter(|(_, dir)| holds(dir))
            .max_by_key(|(_, dir)| dir.len())?;
        def.apps[app].backend.as_mcp().is_some_and(|c| skill_file_allowed(c, uri)).then_some(app)
    }

    /// The exposed skill URIs, in order (for the console).
    pub fn uris(&self) -> Vec<&str> {
        self.entries.iter().filter_map(|(_, e)| e["uri"].as_str()).collect()
    }
}

/// A skill's directory: its SKILL.md URI less `/SKILL.md` (none for another URI).
fn root(uri: &str) -> Option<&str> {
    uri.strip_suffix(SKILL_MD).filter(|r| !r.is_empty() && !r.ends_with('/'))
}

impl Gateway<'_> {
    /// Answers one of [`METHODS`].
    pub(super) fn answer_skills(
        &self,
        id: &Value,
        method: &'static str,
        params: &Map<String, Value>,
        version: Version,
    ) -> Result<Answer, RpcError> {
        if !self.skills.offered() {
            return Err(not_offered(method, version, "skills"));
        }
        if !version.is_stateless() {
            return Err(RpcError::new(
                version.method_not_found_status(),
                jsonrpc::METHOD_NOT_FOUND,
                format!(
                    "Method not found: {method} (the {SKILLS_EXTENSION} extension is offered to clients of protocol \
                     2026-07-28, the revision it is specified for; this request speaks {})",
                    version.as_str()
                ),
            ));
        }
        if method == "skills/list" {
            return self.page(catalog::SKILLS, params, version).map(Answer::Result);
        }
        let uri = params.get("uri").and_then(Value::as_str).filter(|u| !u.is_empty()).ok_or_else(|| {
            RpcError::new(200, jsonrpc::INVALID_PARAMS, "Invalid params: `uri` is required (a string)")
        })?;
        if method == "skills/get" {
            let listed = self.skills.entries.iter().find(|(_, e)| e["uri"] == uri).map(|(i, _)| *i);
            // A skill an upstream serves without listing it, under a URI routed to it.
            let unlisted = || root(uri).and_then(|_| self.owner_of_uri(uri)).filter(|i| self.skills.apps.contains(i));
            let app_index = listed.or_else(unlisted).ok_or_else(|| {
                not_served(uri, "Unknown skill: no upstream of this server serves a skill whose SKILL.md is")
            })?;
            return self.forward(id, version, app_index, method, params, None);
        }
        if self.skills.directory_read.is_empty() {
            return Err(not_offered(method, version, "directory reads (the skills extension's directoryRead)"));
        }
        let app_index = self
            .owner_of_uri(uri)
            .ok_or_else(|| not_served(uri, "Not a directory resource: no upstream of this server serves"))?;
        if !self.skills.directory_read.contains(&app_index) {
            let why = "Not a directory resource: the upstream app serving it does not read directories (it did not \
                       declare directoryRead):";
            return Err(not_served(uri, why));
        }
        let mut fwd = self.forward(id, version, app_index, method, params, None)?;
        if let (Answer::Forward(f), Some(config)) = (&mut fwd, self.def.apps[app_index].backend.as_mcp()) {
            f.hide = config.denied_resources.clone();
        }
        Ok(fwd)
    }
}

fn not_served(uri: &str, what: &str) -> RpcError {
    RpcError::new(200, jsonrpc::INVALID_PARAMS, format!("{what} {}", plain_or_quoted(truncated(uri))))
        .with_data(json!({"uri": truncated(uri)}))
}

/// A `resources/directory/read` result without the children the app denies.
pub fn directory_for_client(result: &Value, hide: &[String]) -> Value {
    let mut r = result.clone();
    if let Some(Value::Array(children)) = r.get_mut("resources") {
        children.retain(|c| c["uri"].as_str().is_none_or(|u| !hide.iter().any(|h| h == u)));
    }
    r
}
