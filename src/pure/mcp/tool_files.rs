//! The file arguments of a tool (`pure::backend::dify::files` has their shapes and rules): the
//! `file` and `file-list` inputs of its form and, for a chat or completion app whose
//! `file_upload` feature is on, the optional `files` argument; their schema properties, and
//! the files of a call checked before anything is sent. (`tools` asks these of a tool's app and
//! form.)

use serde_json::{Map, Value};

use crate::pure::backend::dify::files::{file_list_schema, file_schema, read_file, FileRule, PendingFile, Slot};
use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::definition::AppDefinition;
use crate::pure::form::{FieldType, FormField};

/// The argument a chat or completion app takes its attached files in.
pub const FILES_ARGUMENT: &str = "files";

/// The rule of the app's `files` argument: chat and completion apps whose `file_upload`
/// feature is on (and whose form has no variable of that name).
pub fn upload_rule(app: &AppDefinition, form: &[FormField]) -> Option<FileRule> {
    let config = app.backend.as_dify()?;
    if !(config.app_mode.takes_query() || config.app_mode == DifyMode::Completion) {
        return None;
    }
    if form.iter().any(|f| f.variable == FILES_ARGUMENT) {
        return None;
    }
    FileRule::of_upload(config.files.file_upload.as_ref()?)
}

/// The schema of a file input of the form (`None` for other types) with `about` as its
/// description.
pub fn file_property(ty: FieldType, about: &str, rule: &FileRule) -> Option<Value> {
    match ty {
        FieldType::File => Some(file_schema(about, rule)),
        FieldType::FileList => Some(file_list_schema(about, rule)),
        _ => None,
    }
}

/// The `files` property of a chat app that takes files.
pub fn files_property(app: &AppDefinition, form: &[FormField]) -> Option<Value> {
    let rule = upload_rule(app, form)?;
    Some(file_list_schema("Files to attach to the message (optional)", &rule))
}

/// The files of a call of a Dify app, each checked against its input's rule (or the app's
/// `file_upload`), in the order they go to Dify; every problem is said. Missing required file
/// inputs are `check_arguments`' to report.
pub fn check_files(
    app: &AppDefinition,
    form: &[FormField],
    args: Option<&Map<String, Value>>,
) -> Result<Vec<PendingFile>, Vec<String>> {
    let Some(args) = args.filter(|_| app.backend.as_dify().is_some()) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for f in form.iter().filter(|f| matches!(f.ty, FieldType::File | FieldType::FileList)) {
        let Some(v) = args.get(&f.variable).filter(|v| !v.is_null()) else { continue };
        let rule = FileRule::of_field(f);
        let list = f.ty == FieldType::FileList;
        let slot = Slot::Input { variable: f.variable.clone(), list };
        read_files(&f.variable, v, list, slot, &rule, &mut files, &mut problems);
    }
    if let Some(v) = args.get(FILES_ARGUMENT).filter(|v| !v.is_null()) {
        // Only an app that takes files has the argument; another's `files` is an unknown
        // argument, dropped like any other.
        if let Some(rule) = upload_rule(app, form) {
            read_files(FILES_ARGUMENT, v, true, Slot::Files, &rule, &mut files, &mut problems);
        }
    }
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(problems)
    }
}

fn read_files(
    at: &str,
    v: &Value,
    list: bool,
    slot: Slot,
    rule: &FileRule,
    files: &mut Vec<PendingFile>,
    problems: &mut Vec<String>,
) {
    if !list {
        match read_file(v, at, slot, rule) {
            Ok(f) => files.push(f),
            Err(e) => problems.push(e),
        }
        return;
    }
    let Some(items) = v.as_array() else {
        problems.push(format!("argument '{at}' must be a list of files ([...], each one file)"));
        return;
    };
    if let Some(max) = rule.max_count.filter(|max| items.len() as u64 > *max) {
        problems.push(format!("argument '{at}' takes at most {max} files (got {})", items.len()));
        return;
    }
    for (i, item) in items.iter().enumerate() {
        match read_file(item, &format!("{at}[{i}]"), slot.clone(), rule) {
            Ok(f) => files.push(f),
            Err(e) => problems.push(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::pure::backend::dify::files::{FileType, Source};
    use crate::pure::definition::{AppDefinition, ServerDefinition, FORMAT};

    use super::*;

    /// A one-app server, and the app's form as parsed.
    fn def(mode: &str, form: Value, file_upload: Option<Value>) -> ServerDefinition {
        let mode = crate::pure::mode::Mode::parse(mode).unwrap();
        let mut backend = crate::pure::backend::config::Backend::example(mode);
        if let crate::pure::backend::config::Backend::Dify(c) = &mut backend {
            c.files.file_upload = file_upload;
        }
        ServerDefinition {
            format: FORMAT,
            server_id: "s".into(),
            name: "srv".into(),
            description: "d".into(),
            status: crate::pure::server::Status::Active,
            parameters: Map::new(),
            auth: Default::default(),
            call_log_payloads: false,
            code_expires_at: None,
            apps: vec![AppDefinition::new("a1".into(), "App".into(), "d".into(), backend, form, json!([]))],
        }
    }

    fn form() -> Value {
        json!([{"file": {"variable": "doc", "label": "Document", "required": true, "allowed_file_types": ["document"]}},
               {"file-list": {"variable": "pics", "label": "Pictures", "max_length": 2, "allowed_file_types": ["image"]}}])
    }

    #[test]
    fn files_of_a_call_in_order_with_every_problem() {
        let d = def("workflow", form(), None);
        let a = &d.apps[0];
        let check = |args: Value| check_files(a, &a.form, args.as_object());
        let files = check(
            json!({"doc": {"data": "aGk=", "name": "a.pdf"}, "pics": ["https://x.example/1.png", "https://x.example/2.gif"]}),
        )
        .unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].slot, Slot::Input { variable: "doc".into(), list: false });
        assert_eq!((&files[0].source, files[0].file_type), (&Source::Base64("aGk=".into()), FileType::Document));
        assert_eq!(files[2].at, "pics[1]");
        assert_eq!(files[2].slot, Slot::Input { variable: "pics".into(), list: true });
        assert_eq!(
            check(json!({"doc": "https://x.example/a.png", "pics": ["a.png", "b.png", "c.png"]})).unwrap_err(),
            [
                "argument 'doc': a .png file (image) is not accepted here (accepted: document)",
                "argument 'pics' takes at most 2 files (got 3)"
            ]
        );
        assert_eq!(
            check(json!({"pics": {"url": "https://x.example/a.png"}})).unwrap_err(),
            ["argument 'pics' must be a list of files ([...], each one file)"]
        );
    }

    #[test]
    fn chat_apps_take_files_when_their_upload_feature_is_on() {
        let upload =
            json!({"image": {"enabled": true, "number_limits": 2, "transfer_methods": ["remote_url", "local_file"]}});
        let d = def("chat", json!([]), Some(upload));
        let a = &d.apps[0];
        let s = files_property(a, &a.form).unwrap();
        assert_eq!((&s["type"], &s["maxItems"]), (&json!("array"), &json!(2)));
        let files = check_files(a, &a.form, json!({"query": "q", "files": ["https://x.example/a.png"]}).as_object());
        assert_eq!(files.unwrap()[0].slot, Slot::Files);
        let e = check_files(a, &a.form, json!({"files": ["https://x.example/a.pdf"]}).as_object()).unwrap_err();
        assert!(e[0].starts_with("argument 'files[0]': a .pdf file (document) is not accepted here"), "{e:?}");
        // Off: no argument, and a `files` sent anyway is dropped like any unknown argument.
        let off = def("chat", json!([]), Some(json!({"image": {"enabled": false}})));
        let a = &off.apps[0];
        assert_eq!(files_property(a, &a.form), None);
        assert_eq!(check_files(a, &a.form, json!({"files": ["https://x.example/a.png"]}).as_object()).unwrap(), []);
        // Workflows take files through their form only.
        let wf = def("workflow", json!([]), Some(json!({"enabled": true})));
        assert_eq!(files_property(&wf.apps[0], &wf.apps[0].form), None);
    }
}
