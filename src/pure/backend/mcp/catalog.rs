//! What an upstream MCP server offers besides tools: its capabilities (from the handshake), its
//! resources, resource templates, prompts and skills (SEP-2640), each list read whole (every
//! page), the way its tools are. The shell reads and caches it (`shell::upstream::catalog_of`); nothing here does IO.

use serde::Serialize;
use serde_json::Value;

use crate::pure::protocol::jsonrpc;

/// Most pages of one list read from an upstream (as for tools).
pub const MAX_PAGES: usize = 50;

/// The Skills extension (SEP-2640): `skills/list`, `skills/get` and, with `directoryRead`,
/// `resources/directory/read`; declared under `capabilities.extensions`.
pub const SKILLS_EXTENSION: &str = "io.modelcontextprotocol/skills";

/// An upstream's resources, templates, prompts and skills, as it listed them, and its capabilities.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Catalog {
    /// The upstream's server capabilities (initialize or server/discover result).
    #[serde(default)]
    pub capabilities: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_templates: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<Value>,
    /// `skills/list` entries (`{uri, frontmatter, resources}`), as the upstream listed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<Value>,
    /// When it was read from the upstream (ms since the epoch): a refresh after it makes the
    /// catalogs of other variants stale (`variant::still_current`).
    #[serde(default)]
    pub fetched_ms: u64,
    /// Whether the session it was read in has a standalone stream (Streamable HTTP with a
    /// session id), on which the upstream can tell a client that stays of list changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_stream: bool,
}

impl crate::pure::fields::FromFields for Catalog {
    fn from_fields(f: &mut crate::pure::fields::Fields) -> Result<Self, String> {
        Ok(Catalog {
            capabilities: f.opt_value("capabilities").unwrap_or_default(),
            resources: f.values("resources")?,
            resource_templates: f.values("resource_templates")?,
            prompts: f.values("prompts")?,
            skills: f.values("skills")?,
            fetched_ms: f.opt_uint("fetched_ms")?.unwrap_or(0),
            has_stream: f.opt_flag("has_stream")?.unwrap_or(false),
        })
    }
}
crate::pure::fields::deserialize_by_fields!(Catalog);

/// One list an upstream is asked for: its method and the key of its items in the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct List {
    pub method: &'static str,
    pub key: &'static str,
}

pub const RESOURCES: List = List { method: "resources/list", key: "resources" };
pub const RESOURCE_TEMPLATES: List = List { method: "resources/templates/list", key: "resourceTemplates" };
pub const PROMPTS: List = List { method: "prompts/list", key: "prompts" };
pub const SKILLS: List = List { method: "skills/list", key: "skills" };

impl Catalog {
    fn declares(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some_and(Value::is_object)
    }

    pub fn offers_resources(&self) -> bool {
        self.declares("resources")
    }

    pub fn offers_prompts(&self) -> bool {
        self.declares("prompts")
    }

    pub fn offers_completions(&self) -> bool {
        self.declares("completions")
    }

    /// The upstream's settings of the Skills extension, when it declared it (an object).
    fn skills_settings(&self) -> Option<&Value> {
        self.capabilities.get("extensions")?.get(SKILLS_EXTENSION).filter(|s| s.is_object())
    }

    pub fn offers_skills(&self) -> bool {
        self.skills_settings().is_some()
    }

    /// `directoryRead: true`: the upstream answers `resources/directory/read`.
    pub fn offers_directory_read(&self) -> bool {
        self.skills_settings().is_some_and(|s| s["directoryRead"] == true)
    }

    /// The lists to read from an upstream with these capabilities: only what it declared.
    pub fn lists_for(capabilities: &Value) -> Vec<List> {
        let c = Catalog { capabilities: capabilities.clone(), ..Catalog::default() };
        let mut lists = Vec::new();
        if c.offers_resources() {
            lists.extend([RESOURCES, RESOURCE_TEMPLATES]);
        }
        if c.offers_prompts() {
            lists.push(PROMPTS);
        }
        if c.offers_skills() {
            lists.push(SKILLS);
        }
        lists
    }

    /// Where the items of `list` go.
    pub fn items_mut(&mut self, list: List) -> &mut Vec<Value> {
        match list.key {
            "resources" => &mut self.resources,
            "resourceTemplates" => &mut self.resource_templates,
            "skills" => &mut self.skills,
            _ => &mut self.prompts,
        }
    }
}

/// Whether an upstream's answer to a list request is "method not found": a server that declared
/// `resources` but has no templates often answers `resources/templates/list` so; the list is
/// then empty rather than the whole catalog failing.
pub fn is_method_not_found(response: &Value) -> bool {
    response.pointer("/error/code").and_then(Value::as_i64) == Some(jsonrpc::METHOD_NOT_FOUND)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_follow_the_declared_capabilities() {
        assert!(Catalog::lists_for(&json!({"tools": {}})).is_empty());
        assert_eq!(Catalog::lists_for(&json!({"resources": {}})), [RESOURCES, RESOURCE_TEMPLATES]);
        assert_eq!(Catalog::lists_for(&json!({"prompts": {"listChanged": true}})), [PROMPTS]);
        assert_eq!(Catalog::lists_for(&json!({"resources": {}, "prompts": {}})).len(), 3);
        // `true` or `null` is not a declared capability object.
        assert!(Catalog::lists_for(&json!({"resources": true, "prompts": null})).is_empty());
        let c = Catalog { capabilities: json!({"completions": {}}), ..Catalog::default() };
        assert!(c.offers_completions() && !c.offers_resources() && !c.offers_prompts());
    }

    #[test]
    fn skills_follow_the_extension_declaration() {
        let caps = json!({"resources": {}, "extensions": {(SKILLS_EXTENSION): {"directoryRead": true}}});
        assert_eq!(Catalog::lists_for(&caps), [RESOURCES, RESOURCE_TEMPLATES, SKILLS]);
        let c = Catalog { capabilities: caps, ..Catalog::default() };
        assert!(c.offers_skills() && c.offers_directory_read());
        let plain = Catalog { capabilities: json!({"extensions": {(SKILLS_EXTENSION): {}}}), ..Catalog::default() };
        assert!(plain.offers_skills() && !plain.offers_directory_read());
        // Not an object, or another extension: not declared.
        for caps in [json!({"extensions": {(SKILLS_EXTENSION): true}}), json!({"extensions": {"x/skills": {}}})] {
            let c = Catalog { capabilities: caps, ..Catalog::default() };
            assert!(!c.offers_skills() && !c.offers_directory_read());
        }
        let mut c = Catalog::default();
        c.items_mut(SKILLS).push(json!({"uri": "skill://a/SKILL.md"}));
        assert_eq!(c.skills.len(), 1);
        let back: Catalog = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn items_and_serialization() {
        let mut c = Catalog::default();
        c.items_mut(PROMPTS).push(json!({"name": "p"}));
        c.items_mut(RESOURCE_TEMPLATES).push(json!({"uriTemplate": "a://{x}"}));
        c.items_mut(RESOURCES).push(json!({"uri": "a://b"}));
        assert_eq!((c.prompts.len(), c.resource_templates.len(), c.resources.len()), (1, 1, 1));
        let back: Catalog = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert_eq!(serde_json::from_value::<Catalog>(json!({})).unwrap(), Catalog::default());
        assert!(is_method_not_found(&json!({"error": {"code": -32601, "message": "x"}})));
        assert!(!is_method_not_found(&json!({"error": {"code": -32602, "message": "x"}})));
        assert!(!is_method_not_found(&json!({"result": {}})));
    }
}
