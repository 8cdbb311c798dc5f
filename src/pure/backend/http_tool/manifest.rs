//! The manifest of an HTTP tool (docs/http-tool-protocol.md): checked, and turned into the app's form and outputs.

use crate::json;
use serde_json::{Map, Value};

use crate::pure::error::Errors;
use crate::pure::form;
use crate::pure::quote::quote_input;

const PARAM_TYPES: [&str; 5] = ["string", "number", "integer", "boolean", "object"];

/// Checks `backend.manifest` and derives the app's inputs from it: `form: llm` parameters (the
/// default) become the Dify-shaped `user_input_form` the tool schema is built from, and the
/// manifest's outputs become the app's `outputs`. `form: form` parameters are not shown to the
/// client; they take `backend.form_values[name]`, else their `default`.
pub fn derive_from_manifest(backend: &Map<String, Value>, errs: &mut Errors) -> (Value, Value) {
    let Some(manifest) = backend.get("manifest") else {
        return (json!([]), json!([]));
    };
    let Some(manifest) = manifest.as_object() else {
        errs.add("backend.manifest", "must be an object {name, description, parameters, outputs}");
        return (json!([]), json!([]));
    };
    let form_values = backend.get("form_values").and_then(Value::as_object);
    if backend.get("form_values").is_some_and(|v| !v.is_object()) {
        errs.add("backend.form_values", "must be an object mapping form parameters to values");
    }
    let mut items = Vec::new();
    for (i, p) in manifest.get("parameters").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = format!("backend.manifest.parameters[{i}]");
        let name = match p.get("name").and_then(Value::as_str) {
            Some(n) if form::is_variable_name(n) => n,
            _ => {
                errs.add(format!("{at}.name"), "must be a valid parameter name (letters, digits, _)");
                continue;
            }
        };
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("string");
        let Some(kind) = (match ty {
            "string" => Some("text-input"),
            "number" | "integer" => Some("number"),
            "boolean" => Some("checkbox"),
            "object" => Some("json_object"),
            _ => None,
        }) else {
            errs.add(
                format!("{at}.type"),
                format!("{} is not supported; use one of {}", quote_input(ty), PARAM_TYPES.join(", ")),
            );
            continue;
        };
        let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
        match p.get("form").and_then(Value::as_str).unwrap_or("llm") {
            "llm" => {
                let mut body = json!({"variable": name, "label": p.get("description").and_then(Value::as_str).unwrap_or(name), "required": required});
                if ty == "integer" {
                    // The tool's input schema says `integer`, and arguments are checked as such.
                    body["integer"] = true.into();
                }
                if let Some(d) = p.get("default").filter(|d| !d.is_null()) {
                    body["default"] = d.clone();
                }
                items.push(json!({ kind: body }));
            }
            "form" => {
                let has_value =
                    form_values.is_some_and(|f| f.contains_key(name)) || p.get("default").is_some_and(|d| !d.is_null());
                if required && !has_value {
                    errs.add(
                        at.clone(),
                        format!(
                            "{} is a required form parameter: give it a value in backend.form_values or a default",
                            quote_input(name)
                        ),
                    );
                }
            }
            other => errs.add(format!("{at}.form"), format!("{} is not llm or form", quote_input(other))),
        }
    }
    if manifest.get("parameters").is_some_and(|p| !p.is_array()) {
        errs.add("backend.manifest.parameters", "must be an array");
    }
    let outputs: Vec<Value> = manifest
        .get("outputs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let name = o.get("name").and_then(Value::as_str)?;
            let mut out = json!({"variable": name, "type": o.get("type").and_then(Value::as_str).unwrap_or("string")});
            if let Some(d) = o.get("description") {
                out["description"] = d.clone();
            }
            Some(out)
        })
        .collect();
    (Value::Array(items), Value::Array(outputs))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::manifest;
    use super::*;

    #[test]
    fn manifest_becomes_form_and_outputs() {
        let mut errs = Errors::default();
        let (form, outputs) = derive_from_manifest(manifest().as_object().unwrap(), &mut errs);
        assert!(errs.is_empty(), "{:?}", errs.0);
        assert_eq!(
            form,
            json!([
                {"text-input": {"variable": "location", "label": "City and state", "required": true}},
                {"number": {"variable": "days", "label": "days", "required": false, "default": 1, "integer": true}}
            ])
        );
        // The tool the client sees says `integer`, not `number`, and takes whole numbers only.
        let fields = crate::pure::form::parse_form(&form, "form", &mut errs);
        assert!(errs.is_empty() && fields[1].is_integer() && !fields[0].is_integer(), "{:?}", errs.0);
        let mut m = manifest();
        m["manifest"]["parameters"][1]["type"] = "number".into();
        let (form, _) = derive_from_manifest(m.as_object().unwrap(), &mut errs);
        assert!(!crate::pure::form::parse_form(&form, "form", &mut errs)[1].is_integer());
        assert_eq!(outputs[0], json!({"variable": "temperature", "type": "number", "description": "Now"}));
    }

    #[test]
    fn bad_manifests_name_the_field() {
        let mut errs = Errors::default();
        let b = json!({"manifest": {"parameters": [
            {"name": "x y"}, {"name": "a", "type": "array"}, {"name": "b", "form": "ui"}, {"name": "c", "form": "form", "required": true}
        ]}, "form_values": 3});
        derive_from_manifest(b.as_object().unwrap(), &mut errs);
        let fields: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "backend.form_values",
                "backend.manifest.parameters[0].name",
                "backend.manifest.parameters[1].type",
                "backend.manifest.parameters[2].form",
                "backend.manifest.parameters[3]"
            ]
        );
    }
}
