//! Tools: one per app of a server. Names, input schemas from the Dify form, output schemas,
//! and the validation of call arguments against the same form.

use crate::json;
use crate::pure::error::json_kind;
use serde_json::{Map, Value};

use crate::pure::backend::dify::conversation;
use crate::pure::backend::dify::file_outputs::{add_files_to_answer_schema, output_type_schema};
use crate::pure::backend::dify::files::FileRule;
use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::backend::mcp::aggregate::{aggregate, ExposedTool};
use crate::pure::backend::mcp::downgrade::tool_for_client;
use crate::pure::definition::{AppDefinition, ServerDefinition};
use crate::pure::form::{FieldType, FormField};
use crate::pure::mcp::tool_files::{self, FILES_ARGUMENT};
use std::collections::HashMap;

use crate::pure::protocol::names::{sanitize_name, truncate, MAX_TOOL_NAME};
use crate::pure::protocol::tasks::TaskSupport;
use crate::pure::protocol::version::Version;

/// A tool of a server: the app behind it and its parsed form, or one tool of an upstream MCP
/// server the app stands for.
pub struct Tool<'a> {
    pub name: String,
    pub app: &'a AppDefinition,
    pub form: &'a [FormField],
    pub upstream: Option<ExposedTool>,
}

/// The tool lists of a server's upstream MCP apps (`mode: mcp`), by app id, as the shell
/// fetched or cached them.
#[derive(Debug, Default, Clone)]
pub struct Upstreams(pub HashMap<String, Vec<Value>>);

/// The tools of a server, in order, with names valid per SEP-986 and unique.
pub fn tools(def: &ServerDefinition) -> Vec<Tool<'_>> {
    tools_with(def, &Upstreams::default())
}

/// The tools of a server including those of its upstream MCP apps.
pub fn tools_with<'a>(def: &'a ServerDefinition, upstreams: &Upstreams) -> Vec<Tool<'a>> {
    let mut out: Vec<Tool<'a>> = Vec::with_capacity(def.apps.len());
    for app in &def.apps {
        if let Some(config) = app.backend.as_mcp() {
            let listed = upstreams.0.get(&app.id).map(Vec::as_slice).unwrap_or(&[]);
            // A task toolset's status and cancel tools are the task runner's, not the client's.
            for mut exposed in aggregate(&app.name, &app.id, config, listed) {
                if config.is_toolset_helper(&exposed.upstream_name) {
                    continue;
                }
                exposed.name = unique(&out, &exposed.name);
                out.push(Tool { name: exposed.name.clone(), app, form: &[], upstream: Some(exposed) });
            }
            continue;
        }
        let base = sanitize_name(&app.name, &app.id);
        let mut name = base.clone();
        let mut n = 2;
        while out.iter().any(|t| t.name == name) {
            let suffix = format!("_{n}");
            name = format!("{}{suffix}", truncate(&base, MAX_TOOL_NAME - suffix.len()));
            n += 1;
        }
        out.push(Tool { name, app, form: &app.form, upstream: None });
    }
    out
}

/// `base`, or `base_2`, `base_3`… when a tool of the server already has the name.
fn unique(tools: &[Tool<'_>], base: &str) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while tools.iter().any(|t| t.name == name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

impl Tool<'_> {
    /// Whether the tool runs as a task: the app's `task_support`; for an upstream MCP app the
    /// submit tools of its task toolsets (which only make sense as tasks), and the upstream's
    /// own task tools (relayed, `upstream_tasks`).
    pub fn task_support(&self) -> TaskSupport {
        match &self.upstream {
            Some(e) if self.app.backend.as_mcp().is_some_and(|m| m.toolset_of(&e.upstream_name).is_some()) => {
                TaskSupport::Required
            }
            Some(e) => super::upstream_tasks::upstream_support(&e.tool),
            None => self.app.backend.task_support(),
        }
    }

    /// The tool as `tools/list` shows it to a client speaking `version`.
    pub fn to_json(&self, def: &ServerDefinition, version: Version) -> Value {
        if let Some(exposed) = &self.upstream {
            // The upstream's own definition, as far as this client's revision can carry it.
            let mut t = tool_for_client(exposed, version);
            if let Some(o) = t.as_object_mut() {
                let given = o.remove("execution");
                if version.has_tasks() || version.is_stateless() {
                    match self.task_support() {
                        // The upstream's own "forbidden" stays as it gave it.
                        TaskSupport::Forbidden => {
                            if let Some(e) = given.filter(|e| e["taskSupport"] == "forbidden") {
                                o.insert("execution".into(), e);
                            }
                        }
                        support => {
                            o.insert("execution".into(), json!({"taskSupport": support.as_str()}));
                        }
                    }
                }
            }
            return t;
        }
        let mut t = Map::new();
        t.insert("name".into(), self.name.clone().into());
        if version.structured_output() {
            t.insert("title".into(), self.app.name.clone().into());
        }
        t.insert("description".into(), self.description(def).into());
        t.insert("inputSchema".into(), self.input_schema(def));
        if version.structured_output() {
            t.insert("outputSchema".into(), self.output_schema());
        }
        let support = self.task_support();
        if (version.has_tasks() || version.is_stateless()) && support != TaskSupport::Forbidden {
            t.insert("execution".into(), json!({"taskSupport": support.as_str()}));
        }
        if version.tool_annotations() {
            // Backends reach outside systems (LLMs, APIs); nothing more is known about them.
            t.insert("annotations".into(), json!({ "openWorldHint": true }));
        }
        Value::Object(t)
    }

    /// A one-app server describes its tool; in a multi-app server each app describes itself.
    fn description(&self, def: &ServerDefinition) -> String {
        let (first, second) = if def.apps.len() == 1 {
            (&def.description, &self.app.description)
        } else {
            (&self.app.description, &def.description)
        };
        let described = match [first, second].into_iter().find(|d| !d.trim().is_empty()) {
            Some(d) => d.clone(),
            // Clients need some description to decide when to call a tool.
            None => format!("Runs the {} app '{}'", self.app.backend.mode().as_str(), self.app.name),
        };
        if self.keeps_conversations() {
            return format!("{} {}", described.trim_end(), conversation::DESCRIPTION_NOTE);
        }
        described
    }

    /// A Dify chat app with `conversations` on (`conversation`).
    fn keeps_conversations(&self) -> bool {
        self.upstream.is_none() && self.app.backend.as_dify().is_some_and(|c| c.keeps_conversations())
    }

    /// Chat modes of Dify apps take the user's message as a `query` argument.
    fn takes_query(&self) -> bool {
        self.app.backend.as_dify().is_some_and(|c| c.app_mode.takes_query())
    }

    pub fn input_schema(&self, def: &ServerDefinition) -> Value {
        let mut props = Map::new();
        let mut required: Vec<Value> = Vec::new();
        if self.takes_query() {
            props.insert(
                "query".into(),
                json!({"type": "string", "description": param_description(def, "query").unwrap_or("User Input/Question content")}),
            );
            required.push("query".into());
        }
        if self.keeps_conversations() {
            props.insert(conversation::ARGUMENT.into(), conversation::input_property());
        }
        for f in self.form.iter().filter(|f| f.ty.reaches_mcp()) {
            let about = param_description(def, &f.variable).unwrap_or(&f.label);
            if let Some(p) = tool_files::file_property(f.ty, about, &FileRule::of_field(f)) {
                props.insert(f.variable.clone(), p);
                if f.required {
                    required.push(f.variable.clone().into());
                }
                continue;
            }
            let mut p = match f.ty {
                FieldType::TextInput | FieldType::Paragraph => {
                    let mut p = json!({"type": "string"});
                    if let Some(n) = f.max_length {
                        p["maxLength"] = n.into();
                    }
                    p
                }
                FieldType::Select => json!({"type": "string", "enum": f.options}),
                FieldType::Number if f.is_integer() => json!({"type": "integer"}),
                FieldType::Number => json!({"type": "number"}),
                FieldType::Checkbox => json!({"type": "boolean"}),
                FieldType::JsonObject => {
                    let mut p = json!({"type": "object"});
                    if let Some(Value::Object(s)) = &f.json_schema {
                        for key in ["properties", "required", "additionalProperties"] {
                            if let Some(v) = s.get(key) {
                                p[key] = v.clone();
                            }
                        }
                    }
                    p
                }
                FieldType::File | FieldType::FileList | FieldType::ExternalDataTool => continue,
            };
            p["description"] = param_description(def, &f.variable).unwrap_or(&f.label).into();
            if let Some(d) = &f.default {
                p["default"] = d.clone();
            }
            props.insert(f.variable.clone(), p);
            if f.required {
                required.push(f.variable.clone().into());
            }
        }
        if let Some(p) = self.upstream.is_none().then(|| tool_files::files_property(self.app, self.form)).flatten() {
            props.insert(FILES_ARGUMENT.into(), p);
        }
        json!({"type": "object", "properties": props, "required": required})
    }

    /// Workflow and http-tool apps: declared outputs as properties (an open object when none
    /// are declared); chat and completion modes: `{answer}`.
    pub fn output_schema(&self) -> Value {
        match self.app.backend.as_dify().map(|c| c.app_mode) {
            None | Some(DifyMode::Workflow) => {
                let mut props = Map::new();
                for o in self.app.outputs.as_array().into_iter().flatten() {
                    let (Some(var), Some(ty)) = (o.get("variable").and_then(Value::as_str), o.get("type")) else {
                        continue;
                    };
                    let mut p = ty.as_str().and_then(output_type_schema).unwrap_or_else(|| json!({"type": ty}));
                    if let Some(d) = o.get("description") {
                        p["description"] = d.clone();
                    }
                    props.insert(var.into(), p);
                }
                if props.is_empty() {
                    json!({"type": "object"})
                } else {
                    json!({"type": "object", "properties": props})
                }
            }
            _ => {
                let mut schema = json!({
                    "type": "object",
                    "properties": {"answer": {"type": "string"}},
                    "required": ["answer"]
                });
                add_files_to_answer_schema(&mut schema);
                if self.keeps_conversations() {
                    conversation::add_output_property(&mut schema);
                }
                schema
            }
        }
    }

    /// The conversation a call continues (`""`: a new one), for a tool that keeps conversations;
    /// `Ok(None)` for any other tool.
    pub fn conversation(&self, args: Option<&Map<String, Value>>) -> Result<Option<String>, String> {
        if self.keeps_conversations() {
            conversation::argument(args).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The files of a call (`tool_files::check_files`): none for an upstream's tool.
    pub fn check_files(
        &self,
        args: Option<&Map<String, Value>>,
    ) -> Result<Vec<crate::pure::backend::dify::files::PendingFile>, Vec<String>> {
        if self.upstream.is_some() {
            return Ok(Vec::new());
        }
        tool_files::check_files(self.app, self.form, args)
    }

    /// Checks `args` against the input schema; on success returns the Dify `inputs` (form
    /// variables only; unknown arguments are dropped) and the `query` for chat modes.
    pub fn check_arguments(
        &self,
        args: Option<&Map<String, Value>>,
    ) -> Result<(Map<String, Value>, String), Vec<String>> {
        let empty = Map::new();
        let args = args.unwrap_or(&empty);
        if self.upstream.is_some() {
            // The upstream validates its own arguments; they go through as sent.
            return Ok((args.clone(), String::new()));
        }
        let mut problems = Vec::new();
        let mut query = String::new();
        if self.takes_query() {
            match args.get("query") {
                Some(Value::String(q)) => query = q.clone(),
                None | Some(Value::Null) => problems.push("missing required argument 'query'".to_string()),
                Some(v) => problems.push(format!("argument 'query' must be a string (got {})", json_kind(v))),
            }
        }
        let mut inputs = Map::new();
        for f in self.form.iter().filter(|f| f.ty.reaches_mcp()) {
            let v = match args.get(&f.variable) {
                None | Some(Value::Null) => {
                    if f.required {
                        problems.push(format!("missing required argument '{}'", f.variable));
                    }
                    continue;
                }
                Some(v) => v,
            };
            // Files go their own way (`check_files`): uploaded or judged first.
            if matches!(f.ty, FieldType::File | FieldType::FileList) {
                continue;
            }
            if let Some(problem) = check_value(f, v) {
                problems.push(problem);
            } else {
                inputs.insert(f.variable.clone(), v.clone());
            }
        }
        if problems.is_empty() {
            Ok((inputs, query))
        } else {
            Err(problems)
        }
    }
}

fn param_description<'a>(def: &'a ServerDefinition, var: &str) -> Option<&'a str> {
    def.parameters.get(var).and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

fn check_value(f: &FormField, v: &Value) -> Option<String> {
    let var = &f.variable;
    match f.ty {
        FieldType::TextInput | FieldType::Paragraph => match v.as_str() {
            None => Some(format!("argument '{var}' must be a string (got {})", json_kind(v))),
            Some(s) => match f.max_length {
                Some(max) if s.chars().count() as u64 > max => Some(format!(
                    "argument '{var}' is {} characters long; at most {max} are allowed",
                    s.chars().count()
                )),
                _ => None,
            },
        },
        FieldType::Select => match v.as_str() {
            Some(s) if f.options.iter().any(|o| o == s) => None,
            Some(s) => Some(format!(
                "argument '{var}' must be one of {} (got {})",
                quoted(&f.options),
                crate::pure::quote::quote_input(s)
            )),
            None => Some(format!("argument '{var}' must be one of {} (got {})", quoted(&f.options), json_kind(v))),
        },
        FieldType::Number if f.is_integer() => match v.as_f64() {
            // JSON Schema's integer: any number with no fractional part (3.0 included).
            Some(n) if v.is_i64() || v.is_u64() || n.fract() == 0.0 => None,
            _ => Some(format!("argument '{var}' must be a whole number (got {})", describe_number(v))),
        },
        FieldType::Number if v.is_number() => None,
        FieldType::Number => Some(format!("argument '{var}' must be a number (got {})", json_kind(v))),
        FieldType::Checkbox if v.is_boolean() => None,
        FieldType::Checkbox => Some(format!("argument '{var}' must be true or false (got {})", json_kind(v))),
        FieldType::JsonObject if v.is_object() => None,
        FieldType::JsonObject => Some(format!("argument '{var}' must be a JSON object (got {})", json_kind(v))),
        FieldType::File | FieldType::FileList | FieldType::ExternalDataTool => None,
    }
}

fn describe_number(v: &Value) -> String {
    if v.is_number() {
        format!("{v}")
    } else {
        json_kind(v).to_string()
    }
}

fn quoted(options: &[String]) -> String {
    options.iter().map(|o| format!("\"{o}\"")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::definition::FORMAT;

    fn def(apps: Vec<(&str, &str, Value, Value)>) -> ServerDefinition {
        ServerDefinition {
            format: FORMAT,
            server_id: "s".into(),
            name: "srv".into(),
            description: "Server description".into(),
            status: crate::pure::server::Status::Active,
            parameters: json!({"text": "The text to summarise"}).as_object().unwrap().clone(),
            auth: Default::default(),
            call_log_payloads: false,
            code_expires_at: None,
            apps: apps
                .into_iter()
                .enumerate()
                .map(|(i, (name, mode, form, outputs))| {
                    let mode = crate::pure::mode::Mode::parse(mode).unwrap();
                    let backend = crate::pure::backend::config::Backend::example(mode);
                    AppDefinition::new(
                        format!("{i}abcdef0-1234"),
                        name.into(),
                        format!("{name} app"),
                        backend,
                        form,
                        outputs,
                    )
                })
                .collect(),
        }
    }

    fn form() -> Value {
        json!([
            {"text-input": {"variable": "text", "label": "Text", "required": true, "max_length": 10}},
            {"select": {"variable": "lang", "label": "Language", "options": ["en", "fr"], "default": "en"}},
            {"number": {"variable": "n", "label": "N"}},
            {"checkbox": {"variable": "flag", "label": "Flag"}},
            {"json_object": {"variable": "cfg", "label": "Cfg", "json_schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false, "title": "x"}}},
            {"file": {"variable": "doc", "label": "Doc", "required": true}}
        ])
    }

    #[test]
    fn names_are_valid_and_unique() {
        let d = def(vec![
            ("Same Name", "workflow", json!([]), json!([])),
            ("Same  Name", "workflow", json!([]), json!([])),
            ("Same-Name", "chat", json!([]), json!([])),
        ]);
        let names: Vec<String> = tools(&d).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["Same_Name", "Same_Name_2", "Same-Name"]);
    }

    #[test]
    fn input_schema_from_the_form() {
        let d = def(vec![("Summariser", "workflow", form(), json!([]))]);
        let t = &tools(&d)[0];
        let s = t.input_schema(&d);
        assert_eq!(
            s["properties"]["text"],
            json!({"type": "string", "maxLength": 10, "description": "The text to summarise"})
        );
        assert_eq!(
            s["properties"]["lang"],
            json!({"type": "string", "enum": ["en", "fr"], "description": "Language", "default": "en"})
        );
        assert_eq!(s["properties"]["n"]["type"], "number");
        assert_eq!(s["properties"]["flag"]["type"], "boolean");
        assert_eq!(s["properties"]["cfg"]["required"], json!(["a"]));
        assert_eq!(s["properties"]["cfg"]["additionalProperties"], false);
        assert!(s["properties"]["cfg"].get("title").is_none());
        assert_eq!(s["properties"]["doc"]["anyOf"].as_array().map(Vec::len), Some(4), "file inputs are in");
        assert!(s["properties"]["doc"]["description"].as_str().unwrap().starts_with("Doc. A file: "));
        assert_eq!(s["required"], json!(["text", "doc"]));
    }

    #[test]
    fn integer_number_fields_are_integer_in_the_schema_and_the_checks() {
        let form = json!([{"number": {"variable": "days", "label": "Days", "integer": true}}, {"number": {"variable": "x", "label": "X"}}]);
        let d = def(vec![("Weather", "http-tool", form, json!([]))]);
        let t = &tools(&d)[0];
        let s = t.input_schema(&d);
        assert_eq!(s["properties"]["days"]["type"], "integer");
        assert_eq!(s["properties"]["x"]["type"], "number");
        for whole in [json!(3), json!(-2), json!(3.0), json!(u64::MAX)] {
            let args = json!({"days": whole, "x": 1.5});
            assert!(t.check_arguments(args.as_object()).is_ok(), "{whole}");
        }
        let bad = json!({"days": 1.5});
        assert_eq!(
            t.check_arguments(bad.as_object()).unwrap_err(),
            ["argument 'days' must be a whole number (got 1.5)"]
        );
        let bad = json!({"days": "3"});
        assert_eq!(
            t.check_arguments(bad.as_object()).unwrap_err(),
            ["argument 'days' must be a whole number (got a string)"]
        );
    }

    #[test]
    fn chat_modes_take_a_query_first() {
        let d = def(vec![("Chat", "chat", form(), json!([]))]);
        let s = tools(&d)[0].input_schema(&d);
        let keys: Vec<&String> = s["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "query");
        assert_eq!(s["required"], json!(["query", "text", "doc"]));
    }

    #[test]
    fn tool_json_per_version() {
        let d = def(vec![("Sum", "workflow", json!([]), json!([{"variable": "summary", "type": "string"}]))]);
        let t = &tools(&d)[0];
        let old = t.to_json(&d, Version::V2024_11_05);
        assert!(old.get("title").is_none() && old.get("outputSchema").is_none() && old.get("annotations").is_none());
        assert_eq!(old["description"], "Server description");
        let new = t.to_json(&d, Version::V2025_06_18);
        assert_eq!(new["title"], "Sum");
        assert_eq!(new["outputSchema"], json!({"type": "object", "properties": {"summary": {"type": "string"}}}));
        let chat = def(vec![("C", "chat", json!([]), json!([]))]);
        assert_eq!(tools(&chat)[0].output_schema()["required"], json!(["answer"]));
        let none = def(vec![("W", "workflow", json!([]), json!([]))]);
        assert_eq!(tools(&none)[0].output_schema(), json!({"type": "object"}));
    }

    #[test]
    fn multi_app_servers_describe_each_app() {
        let d = def(vec![("A", "workflow", json!([]), json!([])), ("B", "chat", json!([]), json!([]))]);
        assert_eq!(tools(&d)[1].to_json(&d, Version::V2025_06_18)["description"], "B app");
        let mut bare = def(vec![("Quiet", "workflow", json!([]), json!([]))]);
        bare.description.clear();
        bare.apps[0].description.clear();
        assert_eq!(
            tools(&bare)[0].to_json(&bare, Version::V2025_06_18)["description"],
            "Runs the workflow app 'Quiet'"
        );
    }

    #[test]
    fn arguments_are_checked() {
        let d = def(vec![("Chat", "chat", form(), json!([]))]);
        let t = &tools(&d)[0];
        let ok = json!({"query": "hi", "text": "short", "lang": "fr", "n": 2, "flag": true, "cfg": {"a": "x"},
                        "doc": "https://x.example/a.pdf", "extra": 1});
        let (inputs, query) = t.check_arguments(ok.as_object()).unwrap();
        assert_eq!(query, "hi");
        assert_eq!(inputs.len(), 5, "unknown arguments are dropped, files go their own way");
        let bad = json!({"text": "much too long", "lang": "de", "n": "2", "flag": "yes", "cfg": [], "doc": "x"});
        let problems = t.check_arguments(bad.as_object()).unwrap_err();
        assert_eq!(
            problems,
            [
                "missing required argument 'query'",
                "argument 'text' is 13 characters long; at most 10 are allowed",
                "argument 'lang' must be one of \"en\", \"fr\" (got \"de\")",
                "argument 'n' must be a number (got a string)",
                "argument 'flag' must be true or false (got a string)",
                "argument 'cfg' must be a JSON object (got an array)",
            ]
        );
        assert_eq!(
            t.check_arguments(None).unwrap_err(),
            [
                "missing required argument 'query'",
                "missing required argument 'text'",
                "missing required argument 'doc'"
            ]
        );
    }
}
