//! The HTTP vocabulary of the boundary: methods, headers, bodies (whole or streamed), and the
//! requests and responses the shell receives, sends and answers with. Plain Rust values: the
//! runtime converts at its edge, once per message.

use std::pin::Pin;

use futures::{Stream, StreamExt};

use super::{Error, Fut, Kind, Result};

/// A body read chunk by chunk.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>>>>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
    Other(String),
}

impl Method {
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Other(m) => m,
        }
    }
}

impl AsRef<str> for Method {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Method {
    fn from(m: String) -> Method {
        match m.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            _ => Method::Other(m),
        }
    }
}

impl From<&str> for Method {
    fn from(m: &str) -> Method {
        Method::from(m.to_string())
    }
}

/// Header fields in order, names compared without regard to case (stored lowercase).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    fields: Vec<(String, String)>,
}

impl Headers {
    pub fn new() -> Headers {
        Headers::default()
    }

    /// The field's value; several fields of one name are joined with ", " (as `fetch`'s
    /// `Headers.get` does).
    pub fn get(&self, name: &str) -> Option<String> {
        let mut found = self.fields.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        let first = found.next()?;
        match found.next() {
            None => Some(first.to_string()),
            Some(second) => {
                let mut all = format!("{first}, {second}");
                for v in found {
                    all.push_str(", ");
                    all.push_str(v);
                }
                Some(all)
            }
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// Replaces every field of `name` with one, after checking both as `fetch`'s `Headers` does
    /// (a token for a name; no NUL, CR or LF, and nothing past Latin-1, in a value). For values
    /// from configuration or a client; [`Headers::set`] is for the shell's own.
    pub fn try_set(&mut self, name: &str, value: &str) -> Result<(), InvalidHeader> {
        check_header(name, value)?;
        self.set(name, value.trim_matches([' ', '\t']));
        Ok(())
    }

    /// Replaces every field of `name` with one (a name and value the shell itself chose).
    pub fn set(&mut self, name: &str, value: &str) {
        self.delete(name);
        self.append(name, value);
    }

    pub fn append(&mut self, name: &str, value: &str) {
        self.fields.push((name.to_ascii_lowercase(), value.to_string()));
    }

    pub fn delete(&mut self, name: &str) {
        self.fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    /// Every field, name (lowercase) and value, in order.
    pub fn entries(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.fields.iter().cloned()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The fields of `<name>\n<value>\n` lines, the form the Worker's JavaScript hands a
    /// request's or a backend answer's headers over in (`worker/http.mjs`): one string instead of
    /// several calls into JavaScript per field. Neither a name nor a value can hold a line feed
    /// (the runtime's `Headers` refuse one), so the lines pair up; a last, unpaired line is
    /// ignored.
    pub fn from_lines(text: &str) -> Headers {
        let mut lines = text.split('\n');
        std::iter::from_fn(|| Some((lines.next()?, lines.next()?))).collect()
    }

    /// The fields as [`Headers::from_lines`] reads them, for the runtime to build its `Headers`
    /// from. A field with a line feed in its name or value (which the runtime would refuse) is
    /// left out and given to `refused`.
    pub fn lines(&self, mut refused: impl FnMut(&str)) -> String {
        let mut text = String::with_capacity(self.fields.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
        for (name, value) in &self.fields {
            if name.contains('\n') || value.contains('\n') {
                refused(name);
                continue;
            }
            text.push_str(name);
            text.push('\n');
            text.push_str(value);
            text.push('\n');
        }
        text
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Headers {
        let mut h = Headers::new();
        for (n, v) in iter {
            h.append(n.as_ref(), v.as_ref());
        }
        h
    }
}

/// A header `fetch` would refuse, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidHeader(pub &'static str);

impl std::fmt::Display for InvalidHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

fn check_header(name: &str, value: &str) -> Result<(), InvalidHeader> {
    if !crate::pure::http_field::is_header_name(name) {
        return Err(InvalidHeader("invalid header name"));
    }
    if value.chars().any(|c| matches!(c, '\0' | '\r' | '\n') || c as u32 > 0xFF) {
        return Err(InvalidHeader("invalid header value"));
    }
    Ok(())
}

/// A body the runtime still holds: read whole in one call, or chunk by chunk.
pub trait PlatformBody {
    fn whole(self: Box<Self>) -> Fut<'static, Result<Vec<u8>>>;
    fn chunks(self: Box<Self>) -> ByteStream;
}

/// A message body.
pub enum Body {
    Empty,
    Bytes(Vec<u8>),
    Stream(ByteStream),
    Platform(Box<dyn PlatformBody>),
}

impl Body {
    pub fn is_empty(&self) -> bool {
        matches!(self, Body::Empty)
    }

    /// The whole body (for one with an announced length, or a small one).
    pub async fn bytes(self) -> Result<Vec<u8>> {
        match self {
            Body::Empty => Ok(Vec::new()),
            Body::Bytes(b) => Ok(b),
            Body::Platform(p) => p.whole().await,
            Body::Stream(mut s) => {
                let mut all = Vec::new();
                while let Some(chunk) = s.next().await {
                    all.extend_from_slice(&chunk?);
                }
                Ok(all)
            }
        }
    }

    /// The body chunk by chunk.
    pub fn into_stream(self) -> ByteStream {
        match self {
            Body::Empty => Box::pin(futures::stream::empty()),
            Body::Bytes(b) => Box::pin(futures::stream::once(async move { Ok(b) })),
            Body::Stream(s) => s,
            Body::Platform(p) => p.chunks(),
        }
    }
}

/// A request: the client's, or one to a Durable Object.
pub struct Request {
    pub method: Method,
    pub url: String,
    pub headers: LazyHeaders,
    pub body: Body,
}

/// A request's headers, which the runtime hands over when they are first used: a request whose
/// route reads none (`/healthz`) never has them read out of the platform, which was a tenth of
/// its CPU there. A request's headers cannot change while it is served, so a later read sees
/// what an earlier one would have. Reads as [`Headers`] (`Deref`).
pub struct LazyHeaders {
    read: std::cell::OnceCell<Headers>,
    pending: std::cell::Cell<Option<Box<dyn FnOnce() -> Headers>>>,
}

impl LazyHeaders {
    /// Headers read by `read` when first used.
    pub fn deferred(read: impl FnOnce() -> Headers + 'static) -> LazyHeaders {
        LazyHeaders { read: std::cell::OnceCell::new(), pending: std::cell::Cell::new(Some(Box::new(read))) }
    }
}

impl From<Headers> for LazyHeaders {
    fn from(headers: Headers) -> LazyHeaders {
        LazyHeaders { read: std::cell::OnceCell::from(headers), pending: std::cell::Cell::new(None) }
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for LazyHeaders {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> LazyHeaders {
        iter.into_iter().collect::<Headers>().into()
    }
}

impl std::ops::Deref for LazyHeaders {
    type Target = Headers;

    fn deref(&self) -> &Headers {
        self.read.get_or_init(|| self.pending.take().map_or_else(Headers::new, |read| read()))
    }
}

impl Request {
    /// A POST of JSON text (a Durable Object call).
    pub fn post(url: &str, json: String) -> Request {
        let mut headers = Headers::new();
        headers.set("content-type", "application/json");
        Request {
            method: Method::Post,
            url: url.to_string(),
            headers: headers.into(),
            body: Body::Bytes(json.into_bytes()),
        }
    }

    /// The body as text (a Durable Object call's JSON).
    pub async fn text(self) -> Result<String> {
        let bytes = self.body.bytes().await?;
        String::from_utf8(bytes).map_err(|_| Error::new(Kind::Body, "the request body is not UTF-8"))
    }
}

/// A response: the shell's answer to its client, or a Durable Object's to the shell.
pub struct Response {
    status: u16,
    headers: Headers,
    body: Body,
}

impl Response {
    pub fn new(status: u16, headers: Headers, body: Body) -> Response {
        Response { status, headers, body }
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Response {
        Response { status: 200, headers: Headers::new(), body: Body::Bytes(bytes) }
    }

    pub fn from_stream(stream: ByteStream) -> Response {
        Response { status: 200, headers: Headers::new(), body: Body::Stream(stream) }
    }

    /// A JSON body, `content-type: application/json`.
    pub fn from_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Response> {
        let bytes = serde_json::to_vec(value).map_err(|e| Error::new(Kind::Json, format!("a JSON body: {e}")))?;
        let mut resp = Response::from_bytes(bytes);
        resp.headers.set("content-type", "application/json");
        Ok(resp)
    }

    /// A plain-text body with `status`.
    pub fn text_with_status(text: impl Into<String>, status: u16) -> Response {
        let mut resp = Response::from_bytes(text.into().into_bytes());
        resp.headers.set("content-type", "text/plain;charset=UTF-8");
        resp.status = status;
        resp
    }

    pub fn empty() -> Response {
        Response { status: 200, headers: Headers::new(), body: Body::Empty }
    }

    pub fn with_status(mut self, status: u16) -> Response {
        self.status = status;
        self
    }

    /// Sets each of `headers` (replacing fields of the same name).
    pub fn with_headers(mut self, headers: Headers) -> Response {
        for (n, v) in headers.fields {
            self.headers.set(&n, &v);
        }
        self
    }

    pub fn status_code(&self) -> u16 {
        self.status
    }

    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    pub fn headers_mut(&mut self) -> &mut Headers {
        &mut self.headers
    }

    pub fn into_parts(self) -> (u16, Headers, Body) {
        (self.status, self.headers, self.body)
    }

    /// The body as text.
    pub async fn text(self) -> Result<String> {
        let bytes = self.body.bytes().await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_read_back_as_the_same_fields_in_order() {
        let mut h = Headers::new();
        h.append("content-type", "application/json");
        h.append("x-multi", "a");
        h.append("x-multi", "b");
        h.append("x-empty", "");
        h.append("x-spaced", "a, b; q=1");
        let text = h.lines(|name| panic!("{name} refused"));
        assert_eq!(text, "content-type\napplication/json\nx-multi\na\nx-multi\nb\nx-empty\n\nx-spaced\na, b; q=1\n");
        assert_eq!(Headers::from_lines(&text), h);
        assert_eq!(Headers::from_lines(""), Headers::new());
        // What the runtime's iterator gives: names in lower case already, one line each.
        let read = Headers::from_lines("host\nexample.com\naccept\n*/*\n");
        assert_eq!(read.get("Host").as_deref(), Some("example.com"));
        assert_eq!(read.iter().collect::<Vec<_>>(), vec![("host", "example.com"), ("accept", "*/*")]);
        // A last line without its value is no field.
        assert_eq!(Headers::from_lines("a\n1\nb").iter().collect::<Vec<_>>(), vec![("a", "1")]);
    }

    #[test]
    fn deferred_headers_are_read_once_when_first_used_and_never_when_not() {
        let reads = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = |reads: &std::rc::Rc<std::cell::Cell<u32>>| {
            let reads = reads.clone();
            LazyHeaders::deferred(move || {
                reads.set(reads.get() + 1);
                Headers::from_lines("accept\ntext/plain\n")
            })
        };
        let unused = counted(&reads);
        drop(unused);
        assert_eq!(reads.get(), 0);
        let used = counted(&reads);
        assert_eq!(used.get("accept").as_deref(), Some("text/plain"));
        assert!(used.has("Accept") && !used.has("host"));
        assert_eq!(reads.get(), 1);
        let ready = LazyHeaders::from(Headers::from_lines("host\nexample.com\n"));
        assert_eq!(ready.get("host").as_deref(), Some("example.com"));
    }

    #[test]
    fn a_field_with_a_line_feed_is_left_out_of_the_lines_and_reported() {
        let mut h = Headers::new();
        h.append("x-ok", "1");
        h.append("x-bad", "one\ntwo");
        h.append("x-ok-too", "2");
        let mut refused = Vec::new();
        let text = h.lines(|name| refused.push(name.to_string()));
        assert_eq!(refused, vec!["x-bad"]);
        assert_eq!(Headers::from_lines(&text).iter().collect::<Vec<_>>(), vec![("x-ok", "1"), ("x-ok-too", "2")]);
    }
}
