//! Files a client sends to a Dify app: the argument shapes a tool takes for `file` and
//! `file-list` inputs (and a chat app's `files`), their schema in words a model can follow, the
//! form's rules (types, extensions, transfer methods, counts) checked before anything is sent,
//! Dify's file `type` from the extension or MIME type, the size a file may have, base64 decoded
//! only after its size is known, and the Dify file values put into the request body.
//!
//! A file argument is one of (docs/files-and-conversations.md):
//! - a URL string, `"https://…"` (or a `data:` URL with base64 content);
//! - `{"url": "https://…", "name"?, "mime_type"?}`;
//! - `{"data": "<base64>", "name": "report.pdf", "mime_type"?: "application/pdf"}`;
//! - an MCP embedded resource `{"resource": {"uri", "mimeType"?, "blob" | "text"}}` (the
//!   `{"type": "resource", ...}` content item as is), or a `resource_link` content item
//!   `{"type": "resource_link", "uri", "name"?, "mimeType"?}` as an upstream MCP tool returns it.
//!
//! URLs go to Dify as `remote_url` once the guard ([`judge_url`]) has accepted them; data is
//! uploaded by the shell (`POST /files/upload`) and goes as `local_file`.

use crate::json;
use serde_json::{Map, Value};

use crate::pure::form::{FieldType, FormField};
use crate::pure::named::Named;
use crate::pure::url::{PrivateAllow, Refusal};

/// Dify's file types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Document,
    Image,
    Audio,
    Video,
    Custom,
}

impl Named for FileType {
    const ALL: &'static [Self] =
        &[FileType::Document, FileType::Image, FileType::Audio, FileType::Video, FileType::Custom];

    fn name(self) -> &'static str {
        match self {
            FileType::Document => "document",
            FileType::Image => "image",
            FileType::Audio => "audio",
            FileType::Video => "video",
            FileType::Custom => "custom",
        }
    }
}

/// How a file reaches Dify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// Dify fetches the URL.
    RemoteUrl,
    /// Uploaded first (`/files/upload`), then named by its id.
    LocalFile,
}

impl Named for Transfer {
    const ALL: &'static [Self] = &[Transfer::RemoteUrl, Transfer::LocalFile];

    fn name(self) -> &'static str {
        match self {
            Transfer::RemoteUrl => "remote_url",
            Transfer::LocalFile => "local_file",
        }
    }
}

/// Extensions Dify counts as each type (its `*_EXTENSIONS` constants), lowercase, no dot.
const DOCUMENT_EXTENSIONS: &[&str] = &[
    "txt",
    "markdown",
    "md",
    "mdx",
    "pdf",
    "html",
    "htm",
    "xlsx",
    "xls",
    "vtt",
    "properties",
    "doc",
    "docx",
    "csv",
    "eml",
    "msg",
    "pptx",
    "ppt",
    "xml",
    "epub",
    "json",
];
const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp", "gif", "svg"];
const AUDIO_EXTENSIONS: &[&str] = &["mp3", "m4a", "wav", "amr", "mpga"];
const VIDEO_EXTENSIONS: &[&str] = &["mp4", "mov", "mpeg", "webm"];

/// A few MIME types by extension, for data sent without one (and the other way round).
const MIME_BY_EXTENSION: &[(&str, &str)] = &[
    ("pdf", "application/pdf"),
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("markdown", "text/markdown"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("csv", "text/csv"),
    ("json", "application/json"),
    ("xml", "application/xml"),
    ("doc", "application/msword"),
    ("docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ("xls", "application/vnd.ms-excel"),
    ("xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    ("ppt", "application/vnd.ms-powerpoint"),
    ("pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    ("epub", "application/epub+zip"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("svg", "image/svg+xml"),
    ("mp3", "audio/mpeg"),
    ("m4a", "audio/mp4"),
    ("wav", "audio/wav"),
    ("mp4", "video/mp4"),
    ("mov", "video/quicktime"),
    ("webm", "video/webm"),
    ("mpeg", "video/mpeg"),
];

/// A file's extension (lowercase, no dot) from its name or URL path; `""` when it has none.
pub fn extension_of(name: &str) -> String {
    let path = name.split(['?', '#']).next().unwrap_or("");
    let last = path.rsplit('/').next().unwrap_or("");
    match last.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() && ext.len() <= 16 => ext.to_ascii_lowercase(),
        _ => String::new(),
    }
}

/// The MIME type of an extension, or `application/octet-stream`.
pub fn mime_of_extension(ext: &str) -> &'static str {
    MIME_BY_EXTENSION.iter().find(|(e, _)| *e == ext).map_or("application/octet-stream", |(_, m)| m)
}

/// An extension for a MIME type (for data sent without a name).
fn extension_of_mime(mime: &str) -> Option<&'static str> {
    MIME_BY_EXTENSION.iter().find(|(_, m)| m.eq_ignore_ascii_case(mime)).map(|(e, _)| *e)
}

/// Dify's type of a file, by its extension first (as Dify decides it), then its MIME type;
/// `Custom` when neither says.
pub fn classify(ext: &str, mime: &str) -> FileType {
    for (list, ty) in [
        (IMAGE_EXTENSIONS, FileType::Image),
        (DOCUMENT_EXTENSIONS, FileType::Document),
        (AUDIO_EXTENSIONS, FileType::Audio),
        (VIDEO_EXTENSIONS, FileType::Video),
    ] {
        if list.contains(&ext) {
            return ty;
        }
    }
    let mime = mime.to_ascii_lowercase();
    match mime.split('/').next().unwrap_or("") {
        "image" => FileType::Image,
        "audio" => FileType::Audio,
        "video" => FileType::Video,
        "text" => FileType::Document,
        _ if mime == "application/pdf" || mime.contains("officedocument") || mime == "application/msword" => {
            FileType::Document
        }
        _ => FileType::Custom,
    }
}

/// What a file input (or a chat app's `file_upload`) accepts. Empty lists accept anything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FileRule {
    pub types: Vec<FileType>,
    /// Lowercase, without the dot.
    pub extensions: Vec<String>,
    pub methods: Vec<Transfer>,
    /// Most files one argument takes (file-list: the form's `max_length`; a file: 1).
    pub max_count: Option<u64>,
}

impl FileRule {
    /// The rule of a `file` or `file-list` form input (Dify keeps its settings beside the
    /// variable: `allowed_file_types`, `allowed_file_extensions`, `allowed_file_upload_methods`;
    /// a file-list's `max_length` is its count limit).
    pub fn of_field(f: &FormField) -> FileRule {
        let mut rule = read_rule(&f.extra);
        rule.max_count = match f.ty {
            FieldType::FileList => f.max_length,
            _ => Some(1),
        };
        rule
    }

    /// The rule of an app's `file_upload` feature (its `/parameters`), or `None` when the
    /// feature is off. Both of Dify's shapes: the flat one (`enabled`, `allowed_file_types`,
    /// ..., `number_limits`) and the older one by type (`{"image": {"enabled", "number_limits",
    /// "transfer_methods"}}`).
    pub fn of_upload(file_upload: &Value) -> Option<FileRule> {
        let obj = file_upload.as_object()?;
        if obj.get("enabled") == Some(&Value::Bool(true)) {
            let mut rule = read_rule(obj);
            rule.max_count = obj.get("number_limits").and_then(Value::as_u64).filter(|n| *n > 0);
            return Some(rule);
        }
        let mut rule = FileRule::default();
        let mut count = 0u64;
        for ty in FileType::ALL {
            let Some(feature) = obj.get(ty.name()).filter(|f| f.get("enabled") == Some(&Value::Bool(true))) else {
                continue;
            };
            rule.types.push(*ty);
            count = count.max(feature.get("number_limits").and_then(Value::as_u64).unwrap_or(0));
            for m in feature.get("transfer_methods").and_then(Value::as_array).into_iter().flatten() {
                if let Some(m) = m.as_str().and_then(Transfer::from_name) {
                    if !rule.methods.contains(&m) {
                        rule.methods.push(m);
                    }
                }
            }
        }
        if rule.types.is_empty() {
            return None;
        }
        rule.max_count = (count > 0).then_some(count);
        Some(rule)
    }

    /// What the rule allows, in words (for the schema and for refusals).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.types.is_empty() {
            let names: Vec<&str> = self.types.iter().filter(|t| **t != FileType::Custom).map(|t| t.name()).collect();
            let mut kinds = names.join(", ");
            if self.types.contains(&FileType::Custom) {
                let custom = if self.extensions.is_empty() {
                    "other files".to_string()
                } else {
                    format!("files ending {}", self.dotted_extensions())
                };
                kinds = if kinds.is_empty() { custom } else { format!("{kinds}, or {custom}") };
            }
            parts.push(format!("accepted: {kinds}"));
        } else if !self.extensions.is_empty() {
            parts.push(format!("accepted: files ending {}", self.dotted_extensions()));
        }
        match self.methods.as_slice() {
            [Transfer::RemoteUrl] => parts.push("by URL only".into()),
            [Transfer::LocalFile] => parts.push("as data only (no URLs)".into()),
            _ => {}
        }
        if let Some(n) = self.max_count.filter(|n| *n > 1) {
            parts.push(format!("at most {n} files"));
        }
        parts.join("; ")
    }

    fn dotted_extensions(&self) -> String {
        self.extensions.iter().map(|e| format!(".{e}")).collect::<Vec<_>>().join(", ")
    }

    /// Dify's type for a file of `ext` and `mime` under this rule, or why the rule refuses it:
    /// the detected type when allowed, else `custom` when the rule takes custom files (and the
    /// extension, when it lists extensions), as Dify's own check goes.
    fn type_for(&self, ext: &str, mime: &str) -> Result<FileType, String> {
        let detected = classify(ext, mime);
        if detected != FileType::Custom && (self.types.is_empty() || self.types.contains(&detected)) {
            return Ok(detected);
        }
        let listed = self.extensions.is_empty() || self.extensions.iter().any(|e| e == ext);
        if (self.types.is_empty() || self.types.contains(&FileType::Custom)) && listed {
            return Ok(FileType::Custom);
        }
        let shown = if ext.is_empty() { "a file without an extension".to_string() } else { format!("a .{ext} file") };
        Err(format!("{shown} ({}) is not accepted here ({})", detected.name(), self.describe()))
    }
}

fn read_rule(obj: &Map<String, Value>) -> FileRule {
    let names = |key: &str| -> Vec<String> {
        obj.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|s| s.trim().trim_start_matches('.').to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let mut rule = FileRule::default();
    for t in names("allowed_file_types") {
        if let Some(t) = FileType::from_name(&t).filter(|t| !rule.types.contains(t)) {
            rule.types.push(t);
        }
    }
    rule.extensions = names("allowed_file_extensions");
    for m in names("allowed_file_upload_methods") {
        // Dify writes "all" for both in some versions.
        if m == "all" {
            rule.methods = Vec::new();
            break;
        }
        if let Some(m) = Transfer::from_name(&m).filter(|m| !rule.methods.contains(m)) {
            rule.methods.push(m);
        }
    }
    rule
}

/// Where a file goes in the Dify request.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot {
    /// `inputs[variable]`: one file value, or (`list`) a list of them.
    Input { variable: String, list: bool },
    /// The request's top-level `files` (a chat app's `file_upload` feature).
    Files,
}

/// A file's content as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A URL Dify fetches (after the guard, in the shell: [`judge_url`]).
    Url(String),
    /// Base64 content, decoded by the shell within its size cap ([`decode_bounded`]).
    Base64(String),
    /// Text content of an embedded resource.
    Text(String),
}

/// One file of a call, checked against its rule, not yet sent.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFile {
    pub slot: Slot,
    /// The argument it came from, for messages (`doc`, `docs[1]`, `files[0]`).
    pub at: String,
    pub source: Source,
    pub name: String,
    pub mime_type: String,
    pub file_type: FileType,
}

/// The schema of one file argument, with `about` (the input's description) and what the rule
/// allows said in words.
pub fn file_schema(about: &str, rule: &FileRule) -> Value {
    let mut description = String::new();
    if !about.trim().is_empty() {
        description.push_str(about.trim());
        description.push_str(". ");
    }
    description.push_str(HOW_TO_SEND);
    let allowed = rule.describe();
    if !allowed.is_empty() {
        description.push_str(&format!(" ({allowed})"));
    }
    // Read from text: a `json!` of this size is kilobytes of the Worker bundle.
    let mut schema: Value = serde_json::from_str(FILE_SHAPES).unwrap_or_else(|_| json!({}));
    schema["description"] = description.into();
    schema
}

/// The shapes of a file argument, as JSON Schema (`anyOf`).
const FILE_SHAPES: &str = r#"{"anyOf": [
  {"type": "string", "description": "an http(s) URL of the file, or a data: URL"},
  {"type": "object", "properties": {
     "url": {"type": "string", "description": "an http(s) URL of the file"},
     "name": {"type": "string"}, "mime_type": {"type": "string"}},
   "required": ["url"]},
  {"type": "object", "properties": {
     "data": {"type": "string", "description": "the file's bytes, base64-encoded"},
     "name": {"type": "string", "description": "the file name with its extension, e.g. report.pdf"},
     "mime_type": {"type": "string", "description": "e.g. application/pdf"}},
   "required": ["data", "name"]},
  {"type": "object", "properties": {
     "resource": {"type": "object", "properties": {
        "uri": {"type": "string"}, "mimeType": {"type": "string"},
        "blob": {"type": "string", "description": "base64"}, "text": {"type": "string"}},
      "required": ["uri"]}},
   "required": ["resource"]}
]}"#;

/// The words every file argument's schema carries.
pub const HOW_TO_SEND: &str = "A file: an https URL string, {\"url\": \"https://...\"}, \
{\"data\": \"<base64>\", \"name\": \"report.pdf\", \"mime_type\": \"application/pdf\"}, or an MCP \
embedded resource {\"resource\": {\"uri\", \"mimeType\", \"blob\" or \"text\"}}";

/// The schema of a list of files (a `file-list` input, a chat app's `files`).
pub fn file_list_schema(about: &str, rule: &FileRule) -> Value {
    let mut items = file_schema("", rule);
    let description = items["description"].as_str().unwrap_or("").replacen("A file:", "Each file:", 1);
    if let Some(o) = items.as_object_mut() {
        o.remove("description");
    }
    let about = about.trim();
    let mut s = json!({
        "type": "array",
        "items": items,
        "description": if about.is_empty() { format!("A list of files. {description}") } else { format!("{about}. A list of files. {description}") },
    });
    if let Some(n) = rule.max_count {
        s["maxItems"] = n.into();
    }
    s
}

/// Reads a file argument (`v`, at `at`) under `rule`: its source, name, MIME type and Dify
/// type, or why it cannot be sent.
pub fn read_file(v: &Value, at: &str, slot: Slot, rule: &FileRule) -> Result<PendingFile, String> {
    let (source, name, mime) = read_shape(v).map_err(|why| format!("argument '{at}' {why}"))?;
    let method = match source {
        Source::Url(_) => Transfer::RemoteUrl,
        _ => Transfer::LocalFile,
    };
    if !rule.methods.is_empty() && !rule.methods.contains(&method) {
        let how = match method {
            Transfer::RemoteUrl => "takes files as data only, not URLs: send {\"data\": \"<base64>\", \"name\": ...}",
            Transfer::LocalFile => "takes files by URL only: send \"https://...\" or {\"url\": ...}",
        };
        return Err(format!("argument '{at}' {how}"));
    }
    let ext = extension_of(&name);
    let mime = if mime.is_empty() { mime_of_extension(&ext).to_string() } else { mime };
    let file_type = rule.type_for(&ext, &mime).map_err(|why| format!("argument '{at}': {why}"))?;
    Ok(PendingFile { slot, at: at.to_string(), source, name, mime_type: mime, file_type })
}

/// The source, name and MIME type (maybe empty) of one file argument.
fn read_shape(v: &Value) -> Result<(Source, String, String), String> {
    let text =
        |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_str).map(str::trim).unwrap_or("").to_string();
    match v {
        Value::String(s) => read_url_text(s.trim(), "", ""),
        Value::Object(o) => {
            if let Some(Value::Object(r)) = o.get("resource") {
                return read_resource(r);
            }
            if o.get("type").and_then(Value::as_str) == Some("resource_link") {
                return read_url_text(&text(o, "uri"), &text(o, "name"), &text(o, "mimeType"));
            }
            let (name, mime) = (text(o, "name"), text(o, "mime_type"));
            match (o.get("url"), o.get("data")) {
                (Some(Value::String(u)), None) => read_url_text(u.trim(), &name, &mime),
                (None, Some(Value::String(d))) => {
                    let name = data_name(&name, &mime)?;
                    Ok((Source::Base64(d.clone()), name, mime))
                }
                (Some(_), Some(_)) => Err("has both `url` and `data`; send one".into()),
                (Some(_), None) => Err("has a `url` that is not a string".into()),
                (None, Some(_)) => Err("has `data` that is not a base64 string".into()),
                (None, None) => Err(format!("is not a file: {HOW_TO_SEND}")),
            }
        }
        _ => Err(format!("is not a file: {HOW_TO_SEND}")),
    }
}

/// A URL string: http(s), or a `data:` URL with base64 content.
fn read_url_text(url: &str, name: &str, mime: &str) -> Result<(Source, String, String), String> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (head, data) = rest.split_once(',').ok_or("is a data: URL without a comma before its content")?;
        let Some(data_mime) = head.strip_suffix(";base64") else {
            return Err("is a data: URL that is not base64 (data:<type>;base64,...)".into());
        };
        let mime = if mime.is_empty() { data_mime.to_string() } else { mime.to_string() };
        let name = data_name(name, &mime)?;
        return Ok((Source::Base64(data.to_string()), name, mime));
    }
    if url.is_empty() {
        return Err("is an empty URL".into());
    }
    let name = if name.is_empty() { name_from_url(url) } else { name.to_string() };
    Ok((Source::Url(url.to_string()), name, mime.to_string()))
}

fn read_resource(r: &Map<String, Value>) -> Result<(Source, String, String), String> {
    let uri = r.get("uri").and_then(Value::as_str).unwrap_or("").trim();
    let mime = r.get("mimeType").and_then(Value::as_str).unwrap_or("").trim().to_string();
    let named = r.get("name").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| name_from_url(uri));
    let name =
        |named: String| if extension_of(&named).is_empty() { data_name("", &mime).unwrap_or(named) } else { named };
    match (r.get("blob"), r.get("text")) {
        (Some(Value::String(b)), _) => Ok((Source::Base64(b.clone()), name(named), mime)),
        (_, Some(Value::String(t))) => {
            let mime = if mime.is_empty() { "text/plain".to_string() } else { mime };
            let named = if extension_of(&named).is_empty() { format!("{}.txt", stem(&named)) } else { named };
            Ok((Source::Text(t.clone()), named, mime))
        }
        _ if uri.starts_with("https://") || uri.starts_with("http://") => read_url_text(uri, &named, &mime),
        _ => Err("is an embedded resource with neither `blob` nor `text` nor an http(s) `uri`".into()),
    }
}

fn stem(name: &str) -> &str {
    if name.is_empty() {
        "file"
    } else {
        name
    }
}

/// The name of data sent without a URL: the one given, else `file.<ext>` from its MIME type.
fn data_name(name: &str, mime: &str) -> Result<String, String> {
    if !name.is_empty() {
        return Ok(name.to_string());
    }
    match extension_of_mime(mime) {
        Some(ext) => Ok(format!("file.{ext}")),
        None => Err("needs a `name` with the file's extension (e.g. \"report.pdf\") or a known `mime_type`".into()),
    }
}

/// The last path segment of a URL (percent-encoding left as is), or `file`.
fn name_from_url(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or("");
    // An http(s) URL's host is not a file name; another scheme's first part may be (memo://today).
    let after_host = match path.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
            rest.split_once('/').map_or("", |(_, p)| p)
        }
        Some((_, rest)) => rest,
        None => path,
    };
    match after_host.rsplit('/').next() {
        Some(last) if !last.is_empty() => last.chars().take(200).collect(),
        _ => "file".into(),
    }
}

/// Why a file argument is not sent: the call's tool error, naming the argument (`at`).
#[derive(Debug, Clone, PartialEq)]
pub struct FileError {
    pub at: String,
    pub problem: FileProblem,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FileProblem {
    /// The guard refused the URL.
    Url(Refusal),
    /// The file is larger than its cap (bytes).
    TooLarge {
        size: usize,
        cap: usize,
    },
    NotBase64,
    /// The upload failed: why (completing "could not be uploaded: …").
    NotUploaded(String),
    /// Dify took the upload but named no file id.
    NoFileId,
}

impl FileError {
    fn of(at: &str, problem: FileProblem) -> FileError {
        FileError { at: at.to_string(), problem }
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = &self.at;
        match &self.problem {
            FileProblem::NotUploaded(_) | FileProblem::NoFileId => write!(f, "the file of argument '{at}' ")?,
            _ => write!(f, "argument '{at}' ")?,
        }
        match &self.problem {
            FileProblem::Url(Refusal::Invalid(e)) => write!(f, "is not a valid URL ({e})"),
            FileProblem::Url(Refusal::NotHttp) => f.write_str("must be an http:// or https:// URL"),
            FileProblem::Url(Refusal::Userinfo) => f.write_str("must not carry credentials (user:password@)"),
            FileProblem::Url(Refusal::Private(why)) => {
                write!(f, "was refused: its host {why}, and files are only fetched from public addresses")
            }
            FileProblem::TooLarge { size, cap } => {
                write!(f, "is a file of {size} bytes; at most {cap} bytes ({}) may be sent", in_units(*cap))
            }
            FileProblem::NotBase64 => f.write_str("has `data` that is not valid base64"),
            FileProblem::NotUploaded(why) => write!(f, "could not be uploaded: {why}"),
            FileProblem::NoFileId => f.write_str("was uploaded, but Dify's answer names no file id"),
        }
    }
}

impl From<FileError> for crate::pure::outcome::Outcome {
    fn from(e: FileError) -> Self {
        crate::pure::outcome::Outcome::Failed(format!("{e}"))
    }
}

/// The URL as it goes to Dify, or why Flowgate will not let Dify fetch it: the same rules as
/// a backend URL (http or https, no credentials, no private, loopback, link-local or metadata
/// host unless `ALLOW_PRIVATE_BACKENDS` allows it). Dify fetches it from its own network, so
/// without this check a caller could make Dify reach addresses only Dify can reach.
pub fn judge_url(at: &str, url: &str, allow: &PrivateAllow) -> Result<String, FileError> {
    // The same guard as every backend fetch (`pure::url::judge`), in words about the argument.
    match crate::pure::url::judge(url, allow) {
        Ok(parsed) => Ok(parsed.as_str().to_string()),
        Err(refusal) => Err(FileError::of(at, FileProblem::Url(refusal))),
    }
}

/// Base64 content decoded, refusing it before any allocation when its decoded size would pass
/// `cap` bytes. ASCII whitespace (line breaks) is ignored; the URL-safe alphabet and missing
/// padding are accepted.
pub fn decode_bounded(at: &str, text: &str, cap: usize) -> Result<Vec<u8>, FileError> {
    let significant = text.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=').count();
    // Every 4 characters carry 3 bytes; a trailing 2 or 3 carry 1 or 2.
    let size = significant / 4 * 3 + (significant % 4).saturating_sub(1);
    if size > cap {
        return Err(too_large(at, size, cap));
    }
    let compact: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .map(|b| match b {
            b'+' => b'-',
            b'/' => b'_',
            b => b,
        })
        .collect();
    crate::pure::base64::decode_url(&compact).map_err(|_| FileError::of(at, FileProblem::NotBase64))
}

/// The refusal of a file over its cap.
pub fn too_large(at: &str, size: usize, cap: usize) -> FileError {
    FileError::of(at, FileProblem::TooLarge { size, cap })
}

fn in_units(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// Dify's size limits of an app (its `/parameters` `system_parameters`, in MB) and Flowgate's
/// own cap (`MAX_FILE_BYTES`): the smaller applies to a file of `ty`.
pub fn size_cap(ty: FileType, system_parameters: Option<&Value>, max_file_bytes: usize) -> usize {
    let key = match ty {
        FileType::Image => "image_file_size_limit",
        FileType::Audio => "audio_file_size_limit",
        FileType::Video => "video_file_size_limit",
        FileType::Document | FileType::Custom => "file_size_limit",
    };
    let dify = system_parameters.and_then(|s| s.get(key)).and_then(Value::as_u64).filter(|mb| *mb > 0);
    match dify {
        Some(mb) => max_file_bytes.min(usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)),
        None => max_file_bytes,
    }
}

/// Dify's value for a file sent by URL.
pub fn remote_value(ty: FileType, url: &str) -> Value {
    json!({"type": ty.name(), "transfer_method": Transfer::RemoteUrl.name(), "url": url})
}

/// Dify's value for an uploaded file.
pub fn local_value(ty: FileType, upload_file_id: &str) -> Value {
    json!({"type": ty.name(), "transfer_method": Transfer::LocalFile.name(), "upload_file_id": upload_file_id})
}

/// Puts the files' Dify values into the request `body`, in the order they came: a single
/// file input gets its value, a file-list input and the top-level `files` a list.
pub fn place(body: &mut Value, files: Vec<(Slot, Value)>) {
    for (slot, value) in files {
        let target = match &slot {
            Slot::Input { variable, list } => {
                if !body["inputs"].is_object() {
                    body["inputs"] = json!({});
                }
                if !*list {
                    body["inputs"][variable.as_str()] = value;
                    continue;
                }
                &mut body["inputs"][variable.as_str()]
            }
            Slot::Files => &mut body["files"],
        };
        match target {
            Value::Array(list) => list.push(value),
            other => *other = Value::Array(vec![value]),
        }
    }
}

/// A multipart/form-data body for Dify's `/files/upload`: the `file` part and the `user`
/// field, with its boundary (drawn by the caller so tests see fixed bytes).
pub fn multipart(boundary: &str, name: &str, mime: &str, user: &str, content: &[u8]) -> Vec<u8> {
    // Quotes and line breaks cannot be escaped in a part's header: they are replaced.
    let clean = |s: &str| s.chars().map(|c| if c == '"' || c.is_control() { '_' } else { c }).collect::<String>();
    let mut body = Vec::with_capacity(content.len() + 512);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\n{}\r\n--{boundary}\r\n\
             Content-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
            clean(user),
            clean(name),
            clean(mime)
        )
        .as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

/// The upload's id from Dify's answer (`{"id": ..., "name", "size", ...}`), or why not.
pub fn uploaded_id(at: &str, status: u16, body: &str) -> Result<String, FileError> {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    if !(200..300).contains(&status) {
        let why = crate::pure::outcome::http_failure("the Dify app", status, None, parsed.as_ref(), body);
        return Err(FileError::of(at, FileProblem::NotUploaded(why)));
    }
    match parsed.as_ref().and_then(|v| v.get("id")).and_then(Value::as_str) {
        Some(id) if !id.is_empty() => Ok(id.to_string()),
        _ => Err(FileError::of(at, FileProblem::NoFileId)),
    }
}

#[cfg(test)]
mod tests;
