//! MCP servers: a server code that exposes one app (Dify-style) or several (workspace-style).

use serde_json::{Map, Value};

use super::error::{ApiError, Errors};
use super::quote::{plain_or_quoted, quote_input};

pub const MAX_APPS_PER_SERVER: usize = 50;
const MAX_DESCRIPTION: usize = 4096;
const MAX_PARAMETER_TEXT: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Inactive,
}

impl crate::pure::named::Named for Status {
    const ALL: &'static [Self] = &[Status::Active, Status::Inactive];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Status);

impl Status {
    pub fn parse(s: &str) -> Option<Status> {
        <Status as crate::pure::named::Named>::from_name(s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Inactive => "inactive",
        }
    }
}

/// The fields a create or update body sets; `None` leaves the stored value as it is.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServerFields {
    pub id: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// `{variable: description}`: overrides the descriptions in the tools' input schemas.
    pub parameters: Option<Map<String, Value>>,
    pub status: Option<Status>,
    pub app_ids: Option<Vec<String>>,
}

/// Which body is being read; each accepts a different set of keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerBody {
    /// `POST /apps/{id}/server`: `{description?, parameters?}`
    CreateForApp,
    /// `PUT /apps/{id}/server`: `{id, description?, parameters?, status?}`
    UpdateForApp,
    /// `POST /servers`: `{name, app_ids, description?, parameters?}`
    CreateMulti,
    /// `PUT /servers/{id}`: any of `{name, app_ids, description, parameters, status}`
    UpdateMulti,
}

pub fn validate_server(body: &Value, kind: ServerBody) -> Result<ServerFields, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    let allowed: &[&str] = match kind {
        ServerBody::CreateForApp => &["description", "parameters"],
        ServerBody::UpdateForApp => &["id", "description", "parameters", "status", "name"],
        ServerBody::CreateMulti => &["name", "description", "parameters", "app_ids"],
        ServerBody::UpdateMulti => &["name", "description", "parameters", "app_ids", "status"],
    };
    let mut errs = Errors::default();
    for k in obj.keys().filter(|k| !allowed.contains(&k.as_str())) {
        errs.add(plain_or_quoted(k), format!("is not a server field here (known: {})", allowed.join(", ")));
    }
    // Keys this body does not take were reported above; read only the others.
    let get = |k: &str| if allowed.contains(&k) { obj.get(k) } else { None };
    let mut f = ServerFields::default();
    if kind == ServerBody::UpdateForApp {
        match get("id") {
            Some(Value::String(id)) if !id.is_empty() => f.id = Some(id.clone()),
            _ => errs.add("id", "is required: the id of the server being updated"),
        }
    }
    match get("name") {
        None | Some(Value::Null) if kind == ServerBody::CreateMulti => errs.add("name", "is required"),
        None | Some(Value::Null) => {}
        // A Dify-style server takes its name from its app; the field is accepted and ignored.
        Some(_) if kind == ServerBody::UpdateForApp => {}
        Some(Value::String(n)) if !n.trim().is_empty() && n.chars().count() <= 255 => f.name = Some(n.clone()),
        Some(_) => errs.add("name", "must be a non-empty string of at most 255 characters"),
    }
    match get("description") {
        None | Some(Value::Null) => {}
        Some(Value::String(d)) if d.chars().count() <= MAX_DESCRIPTION => f.description = Some(d.clone()),
        Some(Value::String(_)) => errs.add("description", format!("must be at most {MAX_DESCRIPTION} characters")),
        Some(_) => errs.add("description", "must be a string"),
    }
    match get("parameters") {
        None | Some(Value::Null) => {}
        Some(Value::Object(p)) => {
            for (k, v) in p {
                match v.as_str() {
                    Some(s) if s.chars().count() <= MAX_PARAMETER_TEXT => {}
                    Some(_) => errs.add(
                        format!("parameters.{}", plain_or_quoted(k)),
                        format!("must be at most {MAX_PARAMETER_TEXT} characters"),
                    ),
                    None => errs.add(
                        format!("parameters.{}", plain_or_quoted(k)),
                        "must be a string: the description of the variable",
                    ),
                }
            }
            f.parameters = Some(p.clone());
        }
        Some(_) => errs.add("parameters", "must be an object mapping variable names to descriptions"),
    }
    match get("status") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => match Status::parse(s) {
            Some(st) => f.status = Some(st),
            None => errs.add("status", format!("{} is not a status; expected active or inactive", quote_input(s))),
        },
        Some(_) => errs.add("status", "must be \"active\" or \"inactive\""),
    }
    match get("app_ids") {
        None | Some(Value::Null) if kind == ServerBody::CreateMulti => errs.add("app_ids", "is required"),
        None | Some(Value::Null) => {}
        Some(Value::Array(ids)) => match parse_app_ids(ids) {
            Ok(ids) => f.app_ids = Some(ids),
            Err(msg) => errs.add("app_ids", msg),
        },
        Some(_) => errs.add("app_ids", "must be an array of app ids"),
    }
    errs.into_result(f)
}

fn parse_app_ids(ids: &[Value]) -> Result<Vec<String>, String> {
    if ids.is_empty() || ids.len() > MAX_APPS_PER_SERVER {
        return Err(format!("must list 1 to {MAX_APPS_PER_SERVER} app ids"));
    }
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        match id.as_str() {
            Some(s) if out.iter().any(|x| x == s) => return Err(format!("lists {} twice", quote_input(s))),
            Some(s) if !s.is_empty() => out.push(s.to_string()),
            _ => return Err("must hold only non-empty strings".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value, kind: ServerBody) -> Vec<String> {
        validate_server(&v, kind).unwrap_err().errors.into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn dify_style_bodies() {
        let f = validate_server(&json!({"description": "d", "parameters": {"x": "the x"}}), ServerBody::CreateForApp)
            .unwrap();
        assert_eq!(f.description.as_deref(), Some("d"));
        assert_eq!(
            fields(json!({"parameters": {"x": 1}, "status": "on"}), ServerBody::CreateForApp),
            ["status", "parameters.x"]
        );
        assert_eq!(fields(json!({"description": "d", "status": "paused"}), ServerBody::UpdateForApp), ["id", "status"]);
        let f = validate_server(&json!({"id": "s1", "status": "inactive"}), ServerBody::UpdateForApp).unwrap();
        assert_eq!(f.status, Some(Status::Inactive));
    }

    #[test]
    fn multi_app_bodies() {
        assert_eq!(fields(json!({}), ServerBody::CreateMulti), ["name", "app_ids"]);
        assert_eq!(fields(json!({"name": "w", "app_ids": []}), ServerBody::CreateMulti), ["app_ids"]);
        assert_eq!(fields(json!({"name": "w", "app_ids": ["a", "a"]}), ServerBody::CreateMulti), ["app_ids"]);
        let f = validate_server(&json!({"name": "w", "app_ids": ["a", "b"]}), ServerBody::CreateMulti).unwrap();
        assert_eq!(f.app_ids.unwrap(), ["a", "b"]);
        assert_eq!(fields(json!("x"), ServerBody::UpdateMulti).len(), 0, "non-object is a plain 400");
    }
}
