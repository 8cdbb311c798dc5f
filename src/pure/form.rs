//! Dify's `user_input_form`: the list of input variables an app takes.
//!
//! Accepted in both shapes Dify emits (`{"text-input": {...}}` and `{"type": "text-input", ...}`),
//! validated, and stored in the first shape, which every Dify version reads.

use serde_json::{Map, Value};

use super::decimal::parse_finite_f64;
use super::error::Errors;
use super::quote::quote_input;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    TextInput,
    Paragraph,
    Select,
    Number,
    Checkbox,
    JsonObject,
    File,
    FileList,
    ExternalDataTool,
}

const TYPES: [(&str, FieldType); 9] = [
    ("text-input", FieldType::TextInput),
    ("paragraph", FieldType::Paragraph),
    ("select", FieldType::Select),
    ("number", FieldType::Number),
    ("checkbox", FieldType::Checkbox),
    ("json_object", FieldType::JsonObject),
    ("file", FieldType::File),
    ("file-list", FieldType::FileList),
    ("external_data_tool", FieldType::ExternalDataTool),
];

impl FieldType {
    pub fn from_dify(s: &str) -> Option<Self> {
        TYPES.iter().find(|(name, _)| *name == s).map(|(_, t)| *t)
    }

    pub fn as_dify(self) -> &'static str {
        TYPES.iter().find(|(_, t)| *t == self).map_or("", |(name, _)| name)
    }

    /// Whether an MCP client passes the input as a tool argument: all but `external_data_tool`,
    /// which Dify fills itself (files too: `pure::backend::dify::files`).
    pub fn reaches_mcp(self) -> bool {
        self != FieldType::ExternalDataTool
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FormField {
    pub ty: FieldType,
    pub variable: String,
    pub label: String,
    pub required: bool,
    pub max_length: Option<u64>,
    pub default: Option<Value>,
    pub options: Vec<String>,
    pub json_schema: Option<Value>,
    /// Everything else the item carried (hints, placeholders, file settings), kept verbatim.
    pub extra: Map<String, Value>,
}

impl FormField {
    /// A number field that takes whole numbers only: an HTTP tool's `integer` parameter, kept
    /// as `"integer": true` in the Dify-shaped item (Dify's own forms have no such field).
    pub fn is_integer(&self) -> bool {
        self.ty == FieldType::Number && self.extra.get("integer") == Some(&Value::Bool(true))
    }

    /// The item in Dify's `{"<type>": {...}}` shape.
    pub fn to_dify(&self) -> Value {
        let mut body = self.extra.clone();
        body.insert("variable".into(), Value::String(self.variable.clone()));
        body.insert("label".into(), Value::String(self.label.clone()));
        body.insert("required".into(), Value::Bool(self.required));
        if let Some(n) = self.max_length {
            body.insert("max_length".into(), n.into());
        }
        if let Some(d) = &self.default {
            body.insert("default".into(), d.clone());
        }
        if self.ty == FieldType::Select {
            body.insert("options".into(), self.options.clone().into());
        }
        if let Some(s) = &self.json_schema {
            body.insert("json_schema".into(), s.clone());
        }
        let mut item = Map::with_capacity(1);
        item.insert(self.ty.as_dify().into(), Value::Object(body));
        Value::Object(item)
    }
}

pub fn form_to_dify(fields: &[FormField]) -> Value {
    Value::Array(fields.iter().map(FormField::to_dify).collect())
}

/// A Dify variable name: what Dify itself accepts, and safe as a JSON Schema property.
pub fn is_variable_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && s.len() <= 64
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parses and validates a form; every problem is added to `errs` under `path[i]...`.
pub fn parse_form(value: &Value, path: &str, errs: &mut Errors) -> Vec<FormField> {
    let Some(items) = value.as_array() else {
        errs.add(path, "must be an array of form items");
        return Vec::new();
    };
    let mut fields: Vec<FormField> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if let Some(field) = parse_item(item, &at, errs) {
            if fields.iter().any(|f| f.variable == field.variable) {
                errs.add(format!("{at}.variable"), format!("'{}' is used twice", field.variable));
            } else {
                fields.push(field);
            }
        }
    }
    fields
}

fn parse_item(item: &Value, at: &str, errs: &mut Errors) -> Option<FormField> {
    let Some(obj) = item.as_object() else {
        errs.add(at, "must be an object such as {\"text-input\": {\"variable\": \"x\", ...}}");
        return None;
    };
    // New shape: {"type": "...", ...}; old shape: exactly one key naming the type.
    let (type_name, body, body_path) = match obj.get("type") {
        Some(Value::String(t)) => (t.as_str(), obj, at.to_string()),
        _ => match (obj.len(), obj.iter().next()) {
            (1, Some((t, Value::Object(body)))) => (t.as_str(), body, format!("{at}.{t}")),
            _ => {
                errs.add(at, "must have exactly one key naming its type, e.g. {\"select\": {...}}");
                return None;
            }
        },
    };
    let Some(ty) = FieldType::from_dify(type_name) else {
        let known: Vec<&str> = TYPES.iter().map(|(n, _)| *n).collect();
        errs.add(at, format!("unknown form type {}; expected one of {}", quote_input(type_name), known.join(", ")));
        return None;
    };
    let before = errs.0.len();
    let variable = match body.get("variable") {
        Some(Value::String(v)) if is_variable_name(v) => v.clone(),
        Some(Value::String(v)) => {
            errs.add(
                format!("{body_path}.variable"),
                format!(
                    "{} is not a valid variable name (letters, digits and _, not starting with a digit, at most 64)",
                    quote_input(v)
                ),
            );
            String::new()
        }
        _ => {
            errs.add(format!("{body_path}.variable"), "is required and must be a string");
            String::new()
        }
    };
    let label = match body.get("label") {
        None | Some(Value::Null) => variable.clone(),
        Some(Value::String(l)) => l.clone(),
        Some(_) => {
            errs.add(format!("{body_path}.label"), "must be a string");
            String::new()
        }
    };
    let required = match body.get("required") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errs.add(format!("{body_path}.required"), "must be true or false");
            false
        }
    };
    let max_length = match body.get("max_length") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => {
                errs.add(format!("{body_path}.max_length"), "must be a positive integer");
                None
            }
        },
    };
    let options = if ty == FieldType::Select {
        parse_options(body.get("options"), &format!("{body_path}.options"), errs)
    } else {
        Vec::new()
    };
    let json_schema = match (ty, body.get("json_schema")) {
        (_, None | Some(Value::Null)) => None,
        (FieldType::JsonObject, Some(Value::Object(s))) => Some(Value::Object(s.clone())),
        // Dify stores the schema as a JSON string in some versions.
        (FieldType::JsonObject, Some(Value::String(s))) if s.trim().is_empty() => None,
        (FieldType::JsonObject, Some(Value::String(s))) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Some(v),
            _ => {
                errs.add(format!("{body_path}.json_schema"), "must be a JSON Schema object");
                None
            }
        },
        (FieldType::JsonObject, Some(_)) => {
            errs.add(format!("{body_path}.json_schema"), "must be a JSON Schema object");
            None
        }
        (_, Some(_)) => None,
    };
    let default = parse_default(ty, body.get("default"), &options, &format!("{body_path}.default"), errs);
    // A default the field itself would refuse cannot be advertised in the schema.
    if let (Some(max), Some(Value::String(d))) = (max_length, &default) {
        if d.chars().count() as u64 > max {
            errs.add(format!("{body_path}.default"), format!("is longer than max_length ({max})"));
        }
    }
    if errs.0.len() > before {
        return None;
    }
    let extra = body
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "type" | "variable" | "label" | "required" | "max_length" | "default" | "options" | "json_schema"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(FormField { ty, variable, label, required, max_length, default, options, json_schema, extra })
}

fn parse_options(v: Option<&Value>, at: &str, errs: &mut Errors) -> Vec<String> {
    let Some(list) = v.and_then(Value::as_array).filter(|l| !l.is_empty()) else {
        errs.add(at, "a select needs a non-empty array of option strings");
        return Vec::new();
    };
    let mut options: Vec<String> = Vec::with_capacity(list.len());
    for (i, o) in list.iter().enumerate() {
        match o.as_str() {
            Some("") | None => errs.add(format!("{at}[{i}]"), "must be a non-empty string"),
            Some(s) if options.iter().any(|x| x == s) => {
                errs.add(format!("{at}[{i}]"), format!("{} is listed twice", quote_input(s)))
            }
            Some(s) => options.push(s.to_string()),
        }
    }
    options
}

/// Dify often stores defaults as strings (`""` meaning none); keep them in the type the
/// schema will advertise.
fn parse_default(ty: FieldType, v: Option<&Value>, options: &[String], at: &str, errs: &mut Errors) -> Option<Value> {
    let v = match v {
        None | Some(Value::Null) => return None,
        Some(Value::String(s)) if s.is_empty() => return None,
        Some(v) => v,
    };
    match ty {
        FieldType::TextInput | FieldType::Paragraph => match v {
            Value::String(_) => Some(v.clone()),
            _ => bad(errs, at, "must be a string"),
        },
        // Bad options were reported already; a default cannot be checked against them.
        FieldType::Select if options.is_empty() => None,
        FieldType::Select => match v.as_str() {
            Some(s) if options.iter().any(|o| o == s) => Some(v.clone()),
            _ => bad(errs, at, "must be one of the options"),
        },
        FieldType::Number => match v {
            Value::Number(_) => Some(v.clone()),
            // `str::parse::<f64>` as far as finite numbers go, without core's float parser
            // (14 KiB of the Worker bundle).
            Value::String(s) => match parse_finite_f64(s.trim()) {
                Some(n) => serde_json::Number::from_f64(n).map(|n| {
                    // Keep integers integral: "3" becomes 3, not 3.0.
                    s.trim().parse::<i64>().map_or(Value::Number(n), Value::from)
                }),
                _ => bad(errs, at, "must be a number"),
            },
            _ => bad(errs, at, "must be a number"),
        },
        FieldType::Checkbox => match v {
            Value::Bool(_) => Some(v.clone()),
            Value::String(s) if s == "true" || s == "false" => Some(Value::Bool(s == "true")),
            _ => bad(errs, at, "must be true or false"),
        },
        FieldType::JsonObject => match v {
            Value::Object(_) => Some(v.clone()),
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(o @ Value::Object(_)) => Some(o),
                _ => bad(errs, at, "must be a JSON object"),
            },
            _ => bad(errs, at, "must be a JSON object"),
        },
        FieldType::File | FieldType::FileList | FieldType::ExternalDataTool => Some(v.clone()),
    }
}

fn bad(errs: &mut Errors, at: &str, message: &str) -> Option<Value> {
    errs.add(at, message);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> (Vec<FormField>, Vec<String>) {
        let mut errs = Errors::default();
        let fields = parse_form(&v, "user_input_form", &mut errs);
        (fields, errs.0.into_iter().map(|e| format!("{}: {}", e.field, e.message)).collect())
    }

    #[test]
    fn parses_every_type_in_both_shapes() {
        let (fields, errs) = parse(json!([
            {"text-input": {"variable": "name", "label": "Name", "required": true, "max_length": 48, "default": ""}},
            {"paragraph": {"variable": "body", "label": "Body"}},
            {"select": {"variable": "lang", "options": ["en", "fr"], "default": "en"}},
            {"number": {"variable": "n", "default": "3"}},
            {"checkbox": {"variable": "flag", "default": "true"}},
            {"json_object": {"variable": "cfg", "json_schema": "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}"}},
            {"file": {"variable": "doc", "required": true, "allowed_file_types": ["document"]}},
            {"type": "file-list", "variable": "docs"},
            {"external_data_tool": {"variable": "ext"}}
        ]));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(fields.len(), 9);
        assert_eq!(fields[0].max_length, Some(48));
        assert_eq!(fields[0].default, None, "empty default means none");
        assert_eq!(fields[1].label, "Body");
        assert_eq!(fields[2].label, "lang", "label falls back to the variable");
        assert_eq!(fields[3].default, Some(json!(3)));
        assert_eq!(fields[4].default, Some(json!(true)));
        assert_eq!(fields[5].json_schema.as_ref().unwrap()["properties"]["a"]["type"], "string");
        assert_eq!(fields[6].extra["allowed_file_types"], json!(["document"]));
        assert_eq!(fields[7].ty, FieldType::FileList);
        assert!(!fields[8].ty.reaches_mcp());
        // Round trip through the stored shape.
        let (again, errs) = parse(form_to_dify(&fields));
        assert!(errs.is_empty());
        assert_eq!(again, fields);
    }

    #[test]
    fn names_every_bad_field() {
        let (_, errs) = parse(json!([
            {"text-input": {"label": "no variable"}},
            {"colour-picker": {"variable": "c"}},
            {"select": {"variable": "s", "options": []}},
            {"select": {"variable": "t", "options": ["a", "a", 3]}},
            {"select": {"variable": "u", "options": ["a"], "default": "b"}},
            {"text-input": {"variable": "1bad"}},
            {"text-input": {"variable": "ok", "max_length": -1, "required": "yes"}},
            {"text-input": {"variable": "dup"}},
            {"paragraph": {"variable": "dup"}},
            {"number": {"variable": "n", "default": "many"}},
            {"text-input": {"variable": "short", "max_length": 3, "default": "toolong"}},
            {"json_object": {"variable": "j", "json_schema": "[1]"}},
            "not an object",
            {"a": {}, "b": {}}
        ]));
        let expect = [
            "user_input_form[0].text-input.variable: is required",
            "user_input_form[1]: unknown form type \"colour-picker\"",
            "user_input_form[2].select.options: a select needs",
            "user_input_form[3].select.options[1]: \"a\" is listed twice",
            "user_input_form[3].select.options[2]: must be a non-empty string",
            "user_input_form[4].select.default: must be one of the options",
            "user_input_form[5].text-input.variable: \"1bad\" is not a valid variable name",
            "user_input_form[6].text-input.required: must be true or false",
            "user_input_form[6].text-input.max_length: must be a positive integer",
            "user_input_form[8].variable: 'dup' is used twice",
            "user_input_form[9].number.default: must be a number",
            "user_input_form[10].text-input.default: is longer than max_length (3)",
            "user_input_form[11].json_object.json_schema: must be a JSON Schema object",
            "user_input_form[12]: must be an object",
            "user_input_form[13]: must have exactly one key",
        ];
        for e in expect {
            assert!(errs.iter().any(|x| x.starts_with(e)), "missing {e:?} in {errs:#?}");
        }
        assert_eq!(errs.len(), expect.len(), "{errs:#?}");
    }

    #[test]
    fn form_must_be_an_array() {
        let (_, errs) = parse(json!({"text-input": {}}));
        assert_eq!(errs, vec!["user_input_form: must be an array of form items"]);
    }
}
