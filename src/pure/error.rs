//! Console API errors: an HTTP status, a stable machine code and a message a person can act on.

use crate::json;
use serde_json::Value;

/// One bad field of a request body, named by its JSON path (`backend.base_url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// One bad query parameter or body field, for a 400 that names it: the field and what is wrong
/// with it (completing "the field …").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadField(pub &'static str, pub String);

impl From<BadField> for ApiError {
    fn from(BadField(field, message): BadField) -> ApiError {
        ApiError::field(field, message)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub errors: Vec<FieldError>,
    /// For 405: the methods the route takes (sent as `Allow`).
    pub allow: Option<&'static str>,
    /// Other response headers the answer needs (`WWW-Authenticate`, `Retry-After`).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), errors: Vec::new(), allow: None, headers: Vec::new() }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, "conflict", message)
    }

    /// 400 listing every bad field; the message repeats them so a client that only shows
    /// `message` still tells the user everything.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let message = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ");
        ApiError { status: 400, code: "validation_failed", message, errors, allow: None, headers: Vec::new() }
    }

    /// 400 for one bad field (`validation` with one entry).
    pub fn field(field: &str, message: String) -> Self {
        Self::validation(vec![FieldError { field: field.to_string(), message }])
    }

    /// Adds a response header to the answer.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn method_not_allowed(method: &str, path: &str, allow: &'static str) -> Self {
        let mut e = Self::new(405, "method_not_allowed", format!("{method} is not allowed on {path}; use {allow}"));
        e.allow = Some(allow);
        e
    }

    pub fn to_json(&self) -> Value {
        let mut body = json!({ "error": self.code, "message": self.message });
        if !self.errors.is_empty() {
            body["errors"] =
                Value::Array(self.errors.iter().map(|e| json!({ "field": e.field, "message": e.message })).collect());
        }
        body
    }
}

/// The rules of a credential's name (see [`Errors::credential_name`]).
pub struct NameRule {
    pub max_chars: usize,
    /// What is held, for "who holds …": "the key", "the token".
    pub holds: &'static str,
    pub example: &'static str,
    /// Why the name must be printable ASCII: where it goes.
    pub why_ascii: &'static str,
}

/// Collects field errors while a body is validated, so one response reports all of them.
#[derive(Debug, Default)]
pub struct Errors(pub Vec<FieldError>);

impl Errors {
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError { field: field.into(), message: message.into() });
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A required name a person gives a credential (a client key, a console token), checked by
    /// `rule`; a missing, bad or non-string value is recorded and gives `None`.
    pub fn credential_name(&mut self, value: Option<&Value>, field: &str, rule: &NameRule) -> Option<String> {
        let max = rule.max_chars;
        let problem = match value {
            None | Some(Value::Null) => {
                format!("is required: who holds {}, e.g. \"{}\" (1 to {max} characters)", rule.holds, rule.example)
            }
            Some(Value::String(name)) => {
                let chars = name.chars().count();
                if name.trim().is_empty() {
                    format!("must not be empty: 1 to {max} characters, e.g. \"{}\"", rule.example)
                } else if chars > max {
                    format!("must be at most {max} characters (got {chars})")
                } else if !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                    format!("must be printable ASCII (letters, digits, spaces and punctuation): {}", rule.why_ascii)
                } else if name.trim() != name {
                    "must not begin or end with a space".to_string()
                } else {
                    return Some(name.clone());
                }
            }
            Some(other) => format!("must be a string (got {})", json_kind(other)),
        };
        self.add(field, problem);
        None
    }

    /// A required field whose value is one of a few names (a mode, a role): `parse` reads it,
    /// `what` names it and `hint` lists the choices; a missing, unknown or non-string value
    /// is recorded with a message saying which, and gives `None`.
    pub fn choice<T>(
        &mut self,
        value: Option<&Value>,
        field: &str,
        what: &str,
        hint: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        match value {
            None | Some(Value::Null) => self.add(field, format!("is required: {hint}")),
            Some(Value::String(s)) => match parse(s) {
                Some(v) => return Some(v),
                None => self.add(field, format!("{} is not a {what}; expected {hint}", super::quote::quote_input(s))),
            },
            Some(other) => self.add(field, format!("must be a string (got {})", json_kind(other))),
        }
        None
    }

    pub fn into_result<T>(self, value: T) -> Result<T, ApiError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ApiError::validation(self.0))
        }
    }
}

/// A JSON value's type in words, for messages ("must be a string (got a number)").
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_error_names_every_field() {
        let mut e = Errors::default();
        e.add("name", "is required");
        e.add("backend.base_url", "must be an http or https URL");
        let err: ApiError = e.into_result(()).unwrap_err();
        assert_eq!(err.status, 400);
        let body = err.to_json();
        assert_eq!(body["error"], "validation_failed");
        assert_eq!(body["errors"][1]["field"], "backend.base_url");
        assert!(body["message"].as_str().unwrap().contains("name: is required"));
    }
}
