use super::*;
use crate::pure::error::Errors;

fn field(item: Value) -> FormField {
    let mut errs = Errors::default();
    let mut f = crate::pure::form::parse_form(&json!([item]), "f", &mut errs);
    assert!(errs.0.is_empty(), "{:?}", errs.0);
    f.remove(0)
}

fn slot() -> Slot {
    Slot::Input { variable: "doc".into(), list: false }
}

#[test]
fn every_argument_shape_reads() {
    let any = FileRule::default();
    let read = |v: Value| read_file(&v, "doc", slot(), &any).unwrap();
    let f = read(json!("https://files.example.com/q3/report.pdf?x=1"));
    assert_eq!(f.source, Source::Url("https://files.example.com/q3/report.pdf?x=1".into()));
    assert_eq!(
        (f.name.as_str(), f.mime_type.as_str(), f.file_type),
        ("report.pdf", "application/pdf", FileType::Document)
    );
    let f = read(json!({"url": "https://x.example/a", "name": "photo.JPG"}));
    assert_eq!((f.name.as_str(), f.mime_type.as_str(), f.file_type), ("photo.JPG", "image/jpeg", FileType::Image));
    let f = read(json!({"data": "aGVsbG8=", "name": "notes.txt", "mime_type": "text/plain"}));
    assert_eq!(f.source, Source::Base64("aGVsbG8=".into()));
    assert_eq!(f.file_type, FileType::Document);
    // A name from the MIME type when only that is given.
    let f = read(json!({"data": "aGVsbG8=", "mime_type": "image/png"}));
    assert_eq!((f.name.as_str(), f.file_type), ("file.png", FileType::Image));
    let f = read(json!("data:audio/mpeg;base64,aGVsbG8="));
    assert_eq!(
        (f.source, f.name.as_str(), f.file_type),
        (Source::Base64("aGVsbG8=".into()), "file.mp3", FileType::Audio)
    );
    // MCP embedded resources, bare or as a content item.
    let f = read(
        json!({"type": "resource", "resource": {"uri": "file:///tmp/scan.png", "mimeType": "image/png", "blob": "aGk="}}),
    );
    assert_eq!((f.source, f.name.as_str(), f.file_type), (Source::Base64("aGk=".into()), "scan.png", FileType::Image));
    let f = read(json!({"resource": {"uri": "memo://today", "text": "buy milk"}}));
    assert_eq!(
        (f.source, f.name.as_str(), f.mime_type.as_str()),
        (Source::Text("buy milk".into()), "today.txt", "text/plain")
    );
    let f = read(json!({"resource": {"uri": "https://x.example/v.mp4"}}));
    assert_eq!((f.source, f.file_type), (Source::Url("https://x.example/v.mp4".into()), FileType::Video));
    // A resource_link as an upstream MCP tool returns it goes back in as a URL.
    let f = read(json!({"type": "resource_link", "uri": "https://x.example/d/7", "name": "deck.pptx"}));
    assert_eq!((f.source, f.file_type), (Source::Url("https://x.example/d/7".into()), FileType::Document));
}

#[test]
fn bad_shapes_say_what_a_file_is() {
    let any = FileRule::default();
    for (v, says) in [
        (json!(3), "is not a file: A file: an https URL string"),
        (json!({}), "is not a file"),
        (json!({"url": "https://a", "data": "aGk="}), "has both `url` and `data`"),
        (json!({"data": 5, "name": "a.txt"}), "`data` that is not a base64 string"),
        (json!({"data": "aGk="}), "needs a `name` with the file's extension"),
        (json!("data:text/plain,hello"), "not base64"),
        (json!(""), "is an empty URL"),
        (json!({"resource": {"uri": "file:///x"}}), "neither `blob` nor `text`"),
    ] {
        let e = read_file(&v, "doc", slot(), &any).unwrap_err();
        assert!(e.starts_with("argument 'doc' ") && e.contains(says), "{v}: {e}");
    }
}

#[test]
fn the_forms_rules_are_enforced_with_what_is_allowed() {
    let f = field(json!({"file": {"variable": "doc", "allowed_file_types": ["document"],
        "allowed_file_extensions": [], "allowed_file_upload_methods": ["remote_url"]}}));
    let rule = FileRule::of_field(&f);
    assert_eq!(rule.types, [FileType::Document]);
    assert_eq!(rule.max_count, Some(1));
    let e = read_file(&json!("https://x.example/cat.png"), "doc", slot(), &rule).unwrap_err();
    assert_eq!(e, "argument 'doc': a .png file (image) is not accepted here (accepted: document; by URL only)");
    let e = read_file(&json!({"data": "aGk=", "name": "a.pdf"}), "doc", slot(), &rule).unwrap_err();
    assert!(e.contains("takes files by URL only"), "{e}");
    assert!(read_file(&json!("https://x.example/a.pdf"), "doc", slot(), &rule).is_ok());

    // Custom files by extension, as Dify checks them.
    let f = field(json!({"file-list": {"variable": "docs", "max_length": 3, "allowed_file_types": ["image", "custom"],
        "allowed_file_extensions": [".ZIP"], "allowed_file_upload_methods": ["local_file", "remote_url"]}}));
    let rule = FileRule::of_field(&f);
    assert_eq!(rule.max_count, Some(3));
    assert_eq!(rule.describe(), "accepted: image, or files ending .zip; at most 3 files");
    let zip = read_file(&json!("https://x.example/a.zip"), "docs[0]", slot(), &rule).unwrap();
    assert_eq!(zip.file_type, FileType::Custom);
    let e = read_file(&json!("https://x.example/a.exe"), "docs[1]", slot(), &rule).unwrap_err();
    assert!(e.contains("a .exe file (custom) is not accepted here (accepted: image, or files ending .zip"), "{e}");
    let e = read_file(&json!("https://x.example/a.pdf"), "docs[1]", slot(), &rule).unwrap_err();
    assert!(e.contains("a .pdf file (document)"), "{e}");
    // Data only.
    let f = field(json!({"file": {"variable": "img", "allowed_file_upload_methods": ["local_file"]}}));
    let e = read_file(&json!("https://x.example/a.png"), "img", slot(), &FileRule::of_field(&f)).unwrap_err();
    assert!(e.contains("takes files as data only, not URLs"), "{e}");
}

#[test]
fn types_by_extension_then_mime() {
    assert_eq!(classify("pdf", "application/octet-stream"), FileType::Document);
    assert_eq!(classify("png", "text/plain"), FileType::Image, "the extension decides first");
    assert_eq!(classify("", "audio/ogg"), FileType::Audio);
    assert_eq!(classify("", "video/x-matroska"), FileType::Video);
    assert_eq!(classify("bin", "application/octet-stream"), FileType::Custom);
    assert_eq!(extension_of("https://x.example/a.b/c?d.e"), "");
    assert_eq!(extension_of("Report.Final.PDF"), "pdf");
    assert_eq!(extension_of(".hidden"), "");
}

#[test]
fn the_upload_feature_in_both_shapes() {
    assert_eq!(FileRule::of_upload(&json!({"image": {"enabled": false}})), None);
    assert_eq!(FileRule::of_upload(&json!(null)), None);
    let old = FileRule::of_upload(
        &json!({"image": {"enabled": true, "number_limits": 3, "transfer_methods": ["remote_url", "local_file"]}}),
    )
    .unwrap();
    assert_eq!((old.types, old.max_count, old.methods.len()), (vec![FileType::Image], Some(3), 2));
    let new = FileRule::of_upload(&json!({"enabled": true, "allowed_file_types": ["document", "image"],
        "allowed_file_upload_methods": ["local_file"], "number_limits": 5}))
    .unwrap();
    assert_eq!((new.types.len(), new.methods, new.max_count), (2, vec![Transfer::LocalFile], Some(5)));
}

#[test]
fn base64_is_measured_before_it_is_decoded() {
    assert_eq!(decode_bounded("d", "aGVsbG8=", 5).unwrap(), b"hello");
    assert_eq!(decode_bounded("d", "aGVs\nbG8", 5).unwrap(), b"hello", "line breaks and missing padding");
    assert_eq!(decode_bounded("d", "_-8", 2).unwrap(), [0xff, 0xef], "URL-safe alphabet");
    let e = decode_bounded("d", "aGVsbG8=", 4).unwrap_err().to_string();
    assert_eq!(e, "argument 'd' is a file of 5 bytes; at most 4 bytes (4 bytes) may be sent");
    // A huge text is refused by its length alone.
    let huge = "A".repeat(4 << 20);
    assert!(decode_bounded("d", &huge, 1 << 20)
        .unwrap_err()
        .to_string()
        .contains("3145728 bytes; at most 1048576 bytes (1 MiB)"));
    let not_base64 = FileError { at: "d".into(), problem: FileProblem::NotBase64 };
    assert_eq!(decode_bounded("d", "a*==", 10), Err(not_base64.clone()));
    assert_eq!(not_base64.to_string(), "argument 'd' has `data` that is not valid base64");
}

#[test]
fn size_caps_take_the_smaller_limit() {
    let sp = json!({"file_size_limit": 15, "image_file_size_limit": 1});
    assert_eq!(size_cap(FileType::Image, Some(&sp), 10 << 20), 1 << 20);
    assert_eq!(size_cap(FileType::Document, Some(&sp), 10 << 20), 10 << 20);
    assert_eq!(size_cap(FileType::Video, Some(&sp), 10 << 20), 10 << 20, "no Dify limit for the type");
    assert_eq!(size_cap(FileType::Custom, None, 7), 7);
}

#[test]
fn urls_are_judged_before_dify_sees_them() {
    let none = PrivateAllow::Nothing;
    assert_eq!(judge_url("doc", "https://files.example.com/a.pdf", &none).unwrap(), "https://files.example.com/a.pdf");
    for (url, says) in [
        ("http://10.0.0.1/x", "its host is a private address"),
        ("http://127.0.0.1:8080/x", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "cloud-metadata"),
        ("http://metadata.google.internal/", "internal"),
        ("http://[::1]/", "loopback"),
        ("http://0x7f.1/", "loopback"),
        ("ftp://x.example/a", "must be an http:// or https:// URL"),
        ("https://u:p@x.example/a", "credentials"),
        ("not a url", "is not a valid URL"),
    ] {
        let e = judge_url("doc", url, &none).unwrap_err().to_string();
        assert!(e.starts_with("argument 'doc' ") && e.contains(says), "{url}: {e}");
    }
    let allow = PrivateAllow::from_setting(Some("127.0.0.1"));
    assert!(judge_url("doc", "http://127.0.0.1:9/a.pdf", &allow).is_ok());
    assert!(judge_url("doc", "http://10.0.0.1/a.pdf", &allow).is_err());
}

#[test]
fn values_are_placed_where_dify_reads_them() {
    let mut body = json!({"inputs": {"text": "t"}, "query": "q"});
    place(
        &mut body,
        vec![
            (Slot::Input { variable: "doc".into(), list: false }, remote_value(FileType::Document, "https://x/a.pdf")),
            (Slot::Input { variable: "pics".into(), list: true }, local_value(FileType::Image, "u1")),
            (Slot::Input { variable: "pics".into(), list: true }, local_value(FileType::Image, "u2")),
            (Slot::Files, local_value(FileType::Image, "u3")),
        ],
    );
    assert_eq!(
        body,
        json!({"inputs": {"text": "t",
            "doc": {"type": "document", "transfer_method": "remote_url", "url": "https://x/a.pdf"},
            "pics": [{"type": "image", "transfer_method": "local_file", "upload_file_id": "u1"},
                     {"type": "image", "transfer_method": "local_file", "upload_file_id": "u2"}]},
            "query": "q",
            "files": [{"type": "image", "transfer_method": "local_file", "upload_file_id": "u3"}]})
    );
}

#[test]
fn the_multipart_upload_body() {
    let body = multipart("b0", "a\"b.txt", "text/plain", "mcp-1", b"hi");
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "--b0\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nmcp-1\r\n--b0\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"a_b.txt\"\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b0--\r\n"
    );
    assert_eq!(uploaded_id("doc", 201, r#"{"id":"u-1","name":"a.txt"}"#).unwrap(), "u-1");
    let e = uploaded_id("doc", 413, r#"{"code":"file_too_large","message":"File size exceeded.","status":413}"#)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "the file of argument 'doc' could not be uploaded: the Dify app refused the call (HTTP 413, file_too_large): File size exceeded.");
    assert!(uploaded_id("doc", 201, "{}").unwrap_err().to_string().contains("names no file id"));
}

#[test]
fn schemas_say_how_to_send_a_file() {
    let f = field(json!({"file-list": {"variable": "docs", "max_length": 2, "allowed_file_types": ["document"]}}));
    let s = file_list_schema("Documents to compare", &FileRule::of_field(&f));
    assert_eq!(s["type"], "array");
    assert_eq!(s["maxItems"], 2);
    let d = s["description"].as_str().unwrap();
    assert!(d.starts_with("Documents to compare. A list of files. Each file: an https URL string"), "{d}");
    assert!(d.ends_with("(accepted: document; at most 2 files)"), "{d}");
    assert_eq!(s["items"]["anyOf"].as_array().unwrap().len(), 4);
    let one = file_schema("Doc", &FileRule::default());
    assert!(one["description"].as_str().unwrap().starts_with("Doc. A file: "));
}
