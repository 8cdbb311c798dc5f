//! Editing a server in place (`PATCH /servers/{id}`): which fields a server of each kind may
//! change, and parameter descriptions held to the inputs its apps really have.
//!
//! `PUT` stays as Dify's API has it; `PATCH` is the console's edit: any of name, description,
//! parameter descriptions, status and (for a server of several apps) its apps, checked so that
//! an edit cannot silently do nothing (a description for a variable no app has, a name a
//! one-app server would lose at its app's next change).

use serde_json::{Map, Value};

use super::error::{ApiError, Errors};
use super::quote::plain_or_quoted;
use super::server::{validate_server, ServerBody, ServerFields};

/// Which routes manage the server: one app (`/apps/{id}/server`) or several (`/servers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    OneApp,
    Multi,
}

const FIELDS: &str = "name, description, parameters, app_ids, status";

/// The fields of a `PATCH` body for a server of `kind`. A parameter whose description is
/// empty is dropped (the console's table removes a row by clearing it).
pub fn validate_edit(body: &Value, kind: ServerKind, app_id: Option<&str>) -> Result<ServerFields, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object with any of: ".to_string() + FIELDS));
    };
    if obj.is_empty() {
        return Err(ApiError::bad_request(format!("nothing to change: send any of {FIELDS}")));
    }
    let mut errs = Errors::default();
    if kind == ServerKind::OneApp {
        let app = app_id.unwrap_or("{app_id}");
        if obj.contains_key("name") {
            errs.add(
                "name",
                format!(
                    "a one-app server is named after its app: rename the app instead (PUT /console/api/apps/{app})"
                ),
            );
        }
        if obj.contains_key("app_ids") {
            errs.add(
                "app_ids",
                "a one-app server exposes its own app only: publish the apps together on a server of several apps (POST /console/api/servers)",
            );
        }
    }
    let mut fields = match validate_server(body, ServerBody::UpdateMulti) {
        Ok(f) => f,
        Err(e) => {
            // Both lists, the kind's refusals first, each field once.
            for fe in e.errors {
                if !errs.0.iter().any(|x| x.field == fe.field) {
                    errs.0.push(fe);
                }
            }
            return Err(ApiError::validation(errs.0));
        }
    };
    if let Some(p) = fields.parameters.take() {
        fields.parameters =
            Some(p.into_iter().filter(|(_, v)| v.as_str().is_some_and(|s| !s.trim().is_empty())).collect());
    }
    errs.into_result(fields)
}

/// Holds each described parameter to the input variables of the server's apps (`inputs`:
/// (app name, its variables)); `Err` names the unknown ones and the inputs there are.
pub fn check_parameters(parameters: &Map<String, Value>, inputs: &[(String, Vec<String>)]) -> Result<(), ApiError> {
    let known: Vec<&str> = inputs.iter().flat_map(|(_, vars)| vars.iter().map(String::as_str)).collect();
    let mut errs = Errors::default();
    for name in parameters.keys().filter(|k| !known.contains(&k.as_str())) {
        let message = if known.is_empty() {
            "names no input: this server's apps have no input form of their own (an upstream MCP server's tools keep their own descriptions)".to_string()
        } else {
            let mut listed: Vec<&str> = known.clone();
            listed.sort_unstable();
            listed.dedup();
            format!("names no input of this server's apps (their inputs: {})", listed.join(", "))
        };
        errs.add(format!("parameters.{}", plain_or_quoted(name)), message);
    }
    errs.into_result(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields_of(e: ApiError) -> Vec<String> {
        e.errors.into_iter().map(|f| f.field).collect()
    }

    #[test]
    fn a_one_app_server_keeps_its_name_and_app() {
        let e = validate_edit(&json!({"name": "x", "app_ids": ["a"]}), ServerKind::OneApp, Some("app-1")).unwrap_err();
        assert_eq!((e.status, e.code), (400, "validation_failed"));
        assert!(e.errors[0].message.contains("PUT /console/api/apps/app-1"), "{}", e.errors[0].message);
        assert_eq!(fields_of(e), ["name", "app_ids"]);
        let f = validate_edit(&json!({"description": "d", "parameters": {"text": "t"}}), ServerKind::OneApp, Some("a"))
            .unwrap();
        assert_eq!(f.description.as_deref(), Some("d"));
        assert_eq!(f.parameters.unwrap()["text"], "t");
    }

    #[test]
    fn a_multi_app_server_takes_every_field_checked() {
        let f =
            validate_edit(&json!({"name": "N", "app_ids": ["a", "b"], "status": "inactive"}), ServerKind::Multi, None)
                .unwrap();
        assert_eq!((f.name.as_deref(), f.app_ids.unwrap().len()), (Some("N"), 2));
        let e = validate_edit(&json!({"name": "", "app_ids": [], "colour": 1}), ServerKind::Multi, None).unwrap_err();
        assert_eq!(fields_of(e), ["colour", "name", "app_ids"]);
        // Kind refusals and shape errors together, each field once.
        let e = validate_edit(&json!({"name": 5, "status": "on"}), ServerKind::OneApp, None).unwrap_err();
        assert_eq!(fields_of(e), ["name", "status"]);
    }

    #[test]
    fn nothing_to_change_is_said_and_cleared_rows_go() {
        let e = validate_edit(&json!({}), ServerKind::Multi, None).unwrap_err();
        assert!(e.message.contains("nothing to change"), "{}", e.message);
        assert_eq!(validate_edit(&json!([]), ServerKind::Multi, None).unwrap_err().status, 400);
        let f =
            validate_edit(&json!({"parameters": {"a": "kept", "b": "", "c": "  "}}), ServerKind::Multi, None).unwrap();
        assert_eq!(f.parameters.unwrap().keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn parameters_name_inputs_that_exist() {
        let inputs = vec![
            ("A".to_string(), vec!["text".to_string()]),
            ("B".to_string(), vec!["lang".to_string(), "text".to_string()]),
        ];
        let p = |v: Value| v.as_object().cloned().unwrap();
        assert!(check_parameters(&p(json!({"text": "t", "lang": "l"})), &inputs).is_ok());
        let e = check_parameters(&p(json!({"txt": "t"})), &inputs).unwrap_err();
        assert_eq!(e.errors[0].field, "parameters.txt");
        assert!(e.errors[0].message.contains("(their inputs: lang, text)"), "{}", e.errors[0].message);
        let e = check_parameters(&p(json!({"q": "t"})), &[("U".into(), vec![])]).unwrap_err();
        assert!(e.errors[0].message.contains("upstream MCP"), "{}", e.errors[0].message);
        assert!(check_parameters(&Map::new(), &[]).is_ok());
    }
}
