//! Server-Sent Events: an incremental parser for the streams backends send us, and a writer
//! for the streams we send to clients.
//!
//! The parser follows the WHATWG HTML "event stream interpretation" with three deliberate
//! differences, all because we relay single events rather than run an `EventSource`:
//! - `id` and `retry` belong to the event they appear in and are reset at every blank line
//!   (no last-event-id carried across events), so a relayed event never inherits a stale id;
//! - at end of stream a last event that has data but no terminating blank line is still
//!   dispatched, because backends often close the connection right after the final `data:`;
//! - each event is capped in size, so a backend cannot make us buffer without bound;
//! - an event's data is handed over as bytes, not decoded: whoever reads it checks its UTF-8
//!   (a JSON reader does as it reads strings, see [`read_json`]), so a relay that skips most
//!   events by their opening never checks their text at all.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;

/// Only skipped at the very start of a stream; anywhere else it is ordinary content.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// One dispatched event, with owned fields so it outlives the chunk it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// `""` when the stream gave no `event:` field; clients treat that as `"message"`, and so
    /// must callers, rather than us inventing a name the backend never sent.
    pub event: String,
    /// Data lines joined with `\n` (the final line end removed), as `EventSource` delivers it:
    /// invalid UTF-8 decoded as U+FFFD.
    pub data: String,
    /// Only the `id:` given in this event: we do not carry a last-event-id across events.
    pub id: Option<String>,
    /// Only the `retry:` given in this event, so callers can pass the hint on to their client.
    pub retry: Option<u64>,
}

/// Why a stream had to be abandoned; the caller aborts the stream on any of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// Refusing to grow past the cap keeps memory bounded whatever the backend sends.
    EventTooLarge { limit: usize },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::EventTooLarge { limit } => write!(
                f,
                "the backend sent a server-sent event (or a line) larger than {limit} bytes, so \
                 the stream was stopped; make the backend send smaller events, or check that it \
                 really speaks text/event-stream"
            ),
        }
    }
}

impl std::error::Error for SseError {}

/// One dispatched event as [`SseParser::feed_each`] hands it over: borrowed, valid until the
/// callback returns. An event whose only data line lies whole in the chunk being fed (the usual
/// case) is handed over straight from that chunk, with no copy and no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// As [`SseEvent::event`].
    pub event: &'a str,
    /// As [`SseEvent::data`], but the bytes as sent, UTF-8 not yet checked: read it with
    /// [`read_json`] or [`SseEventRef::data_text`].
    pub data: &'a [u8],
    pub id: Option<&'a str>,
    pub retry: Option<u64>,
}

impl<'a> SseEventRef<'a> {
    /// The data as text, invalid UTF-8 decoded as U+FFFD (as `EventSource` does); borrowed
    /// when it is valid.
    pub fn data_text(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.data)
    }

    pub fn to_owned(self) -> SseEvent {
        SseEvent {
            event: self.event.into(),
            data: self.data_text().into_owned(),
            id: self.id.map(Into::into),
            retry: self.retry,
        }
    }
}

/// Reads an event's data as JSON. Data with invalid bytes is read as `EventSource` would deliver
/// it (U+FFFD), so a backend's stray byte costs a character, not the message.
///
/// The UTF-8 is checked first and the text read with `from_str`, which checks no string again:
/// as fast as `from_slice` (which checks each string it reads), and the Worker then links one of
/// serde_json's two readers, not both (every JSON read in Flowgate is from text).
pub fn read_json<T: DeserializeOwned>(data: &[u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(data) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_str(&String::from_utf8_lossy(data)),
    }
}

/// Incremental parser: bytes arrive in arbitrary chunks, so it keeps only the current partial
/// line and the current event's fields between calls.
#[derive(Default)]
pub struct SseParser {
    max_event_bytes: usize,
    /// The unfinished line; bytes, not text, because a chunk may end inside a UTF-8 character.
    line: Vec<u8>,
    /// Until decided, `line` holds only the BOM prefix matched so far.
    bom_done: bool,
    /// The previous chunk ended with CR, so an LF opening this one ends no further line.
    after_cr: bool,
    event: EventBuf,
}

impl SseParser {
    /// Large enough for any sane single event, small enough that a broken backend cannot
    /// exhaust a Worker's memory.
    pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

    /// `max_event_bytes` bounds the partial line plus the event's data, type and id together,
    /// since that is everything the parser holds at once.
    pub fn new(max_event_bytes: usize) -> Self {
        SseParser { max_event_bytes, ..SseParser::default() }
    }

    /// Feeds the next chunk of the byte stream; completed events are pushed to `out`, owned.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.feed_each(chunk, |e| out.push(e.to_owned()))
    }

    /// Feeds the next chunk of the byte stream; `emit` gets each event as it completes,
    /// borrowed (see [`SseEventRef`]): the relay's path, which allocates nothing per event.
    ///
    /// Fails as soon as the current event would outgrow the cap, before buffering the excess,
    /// so an endless line is refused early. After an error the parser is unusable.
    pub fn feed_each(&mut self, chunk: &[u8], mut emit: impl FnMut(SseEventRef<'_>)) -> Result<(), SseError> {
        self.feed_dyn(chunk, &mut emit)
    }

    /// One copy of the parser for every caller (a generic one would be compiled into the
    /// Worker once per call site); one indirect call per event costs nothing next to a line.
    fn feed_dyn(&mut self, chunk: &[u8], emit: &mut dyn FnMut(SseEventRef<'_>)) -> Result<(), SseError> {
        let mut chunk = chunk;
        if !self.bom_done {
            chunk = self.skip_bom(chunk);
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if self.after_cr {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        // The current event's first data line while it is still only in this chunk.
        let mut pending: Option<&[u8]> = None;
        let max = self.max_event_bytes;
        let rest = 'lines: {
            if !self.line.is_empty() {
                // A line begun in an earlier chunk: completed from this one, parsed from `line`.
                let Some(end) = line_end(chunk) else { break 'lines chunk };
                self.check(self.line.len() + end)?;
                self.line.extend_from_slice(&chunk[..end]);
                let mut from_line = None;
                let fed = self.event.line(&self.line, &mut from_line, max, emit);
                self.event.keep(&mut from_line);
                fed?;
                self.line.clear();
                chunk = &chunk[self.next_line_start(chunk, end)..];
            }
            let mut at = 0;
            loop {
                let end = match chunk.get(at) {
                    // A blank line, as after every event: no need to look further.
                    Some(b'\n' | b'\r') => at,
                    Some(_) => match line_end(&chunk[at..]) {
                        Some(len) => at + len,
                        None => break,
                    },
                    None => break,
                };
                self.check(end - at)?;
                if end == at {
                    self.event.dispatch(pending.take(), emit);
                } else {
                    // In place, without copying.
                    self.event.line(&chunk[at..end], &mut pending, max, emit)?;
                }
                at = self.next_line_start(chunk, end);
            }
            &chunk[at..]
        };
        // The chunk is going away: what the event still borrows from it is copied now.
        self.event.keep(&mut pending);
        self.check(self.line.len() + rest.len())?;
        self.line.extend_from_slice(rest);
        Ok(())
    }

    /// Steps over the line end at `chunk[end]`: CRLF is one line end, and so is a CR that ends
    /// the chunk with an LF that opens the next one.
    #[inline(always)]
    fn next_line_start(&mut self, chunk: &[u8], end: usize) -> usize {
        let next = end + 1;
        if chunk[end] == b'\r' {
            match chunk.get(next) {
                Some(b'\n') => return next + 1,
                None => self.after_cr = true,
                Some(_) => {}
            }
        }
        next
    }

    /// End of stream. A last event that has data but no terminating blank line IS dispatched
    /// (backends often omit it); a partial line is processed as a line first. Afterwards the
    /// parser is reset, ready for a new stream.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.finish_each(|e| out.push(e.to_owned()))
    }

    /// [`SseParser::finish`], handing the last event to `emit` as [`SseParser::feed_each`] does.
    pub fn finish_each(&mut self, mut emit: impl FnMut(SseEventRef<'_>)) -> Result<(), SseError> {
        let result = self.finish_stream(&mut emit as &mut dyn FnMut(SseEventRef<'_>));
        self.line.clear();
        self.bom_done = false;
        self.after_cr = false;
        self.event.clear();
        result
    }

    fn finish_stream(&mut self, emit: &mut dyn FnMut(SseEventRef<'_>)) -> Result<(), SseError> {
        let max = self.max_event_bytes;
        let mut pending = None;
        if !self.line.is_empty() {
            let fed = self.event.line(&self.line, &mut pending, max, emit);
            self.event.keep(&mut pending);
            fed?;
        }
        // As if the missing blank line had arrived.
        self.event.line(b"", &mut pending, max, emit)
    }

    /// Consumes BOM bytes at the start of the stream; a BOM split across chunks is matched
    /// byte by byte, and a prefix that turns out not to be a BOM stays in `line` as content.
    fn skip_bom<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let matched = self.line.len();
        let take = (BOM.len() - matched).min(chunk.len());
        if chunk[..take] != BOM[matched..matched + take] {
            self.bom_done = true;
            return chunk;
        }
        self.line.extend_from_slice(&chunk[..take]);
        if self.line.len() == BOM.len() {
            self.line.clear();
            self.bom_done = true;
        }
        &chunk[take..]
    }

    /// Checked before buffering, so the cap bounds memory rather than reporting after the fact.
    /// (Inlined: once per line, and "z" would otherwise leave it a call.)
    #[inline(always)]
    fn check(&self, line_bytes: usize) -> Result<(), SseError> {
        if line_bytes.saturating_add(self.event.size()) > self.max_event_bytes {
            return Err(SseError::EventTooLarge { limit: self.max_event_bytes });
        }
        Ok(())
    }
}

/// The event being assembled, kept apart from the line buffer so a buffered line can be parsed
/// while the fields are updated. Its buffers are reused across events.
#[derive(Default)]
struct EventBuf {
    event_type: String,
    /// The data so far, except a first line still borrowed from the chunk (`pending`).
    data: Vec<u8>,
    /// The length of that borrowed first line, so the cap counts it.
    pending_len: usize,
    /// `data` lines so far: they are joined with '\n', and an event with none is dropped.
    data_lines: usize,
    id: String,
    has_id: bool,
    retry: Option<u64>,
}

impl EventBuf {
    /// The bytes this event holds, counted against the cap (`retry` is fixed-size; each data
    /// line counts its line end, as on the wire).
    #[inline(always)]
    fn size(&self) -> usize {
        self.event_type.len()
            + self.data.len()
            + self.pending_len
            + self.data_lines
            + if self.has_id { self.id.len() } else { 0 }
    }

    fn clear(&mut self) {
        self.event_type.clear();
        self.data.clear();
        self.pending_len = 0;
        self.data_lines = 0;
        self.id.clear();
        self.has_id = false;
        self.retry = None;
    }

    /// Copies a borrowed first data line into `data`, before what it borrows from goes away or
    /// another data line is appended to it.
    fn keep(&mut self, pending: &mut Option<&[u8]>) {
        if let Some(first) = pending.take() {
            self.data.extend_from_slice(first);
            self.pending_len = 0;
        }
    }

    /// Applies one complete line (without its line end). A first data line is not copied but
    /// left in `pending`, borrowed from `line`. (Inlined: the usual event's data line is handled
    /// here, any other line in [`EventBuf::field`].)
    #[inline(always)]
    fn line<'c>(
        &mut self,
        line: &'c [u8],
        pending: &mut Option<&'c [u8]>,
        max: usize,
        emit: &mut dyn FnMut(SseEventRef<'_>),
    ) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(pending.take(), emit);
            return Ok(());
        }
        // (A byte pattern: "z" would make `strip_prefix` a call to `memcmp`.)
        if let (0, [b'd', b'a', b't', b'a', b':', b' ', value @ ..] | [b'd', b'a', b't', b'a', b':', value @ ..]) =
            (self.data_lines, line)
        {
            *pending = Some(value);
            self.pending_len = value.len();
            self.data_lines = 1;
            return Ok(());
        }
        self.field(line, pending, max)
    }

    /// [`EventBuf::line`] for a line that is not blank and not the event's first data line.
    fn field(&mut self, line: &[u8], pending: &mut Option<&[u8]>, max: usize) -> Result<(), SseError> {
        if line.first() == Some(&b':') {
            return Ok(());
        }
        // The colon is a few bytes in (a field name), so a byte loop beats a search call.
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => match line.split_at(colon) {
                (name, [_, b' ', value @ ..] | [_, value @ ..]) => (name, value),
                (name, []) => (name, &[][..]),
            },
            None => (line, &[][..]),
        };
        if name == b"data" {
            self.keep(pending);
            if self.data_lines > 0 {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.data_lines += 1;
            return Ok(());
        }
        // The other fields are short, and few events have them: decoded here.
        let value = String::from_utf8_lossy(value);
        match name {
            b"event" => {
                self.event_type.clear();
                self.event_type.push_str(&value);
            }
            b"id" if !value.contains('\0') => {
                self.id.clear();
                self.id.push_str(&value);
                self.has_id = true;
            }
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // A value too large for u64 is ignored like any other invalid retry.
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        // Invalid bytes decode to 3-byte U+FFFD, so these fields can outgrow their line.
        if self.size() > max {
            return Err(SseError::EventTooLarge { limit: max });
        }
        Ok(())
    }

    /// A blank line ends the event; one without data is dropped, as `EventSource` does.
    fn dispatch(&mut self, pending: Option<&[u8]>, emit: &mut dyn FnMut(SseEventRef<'_>)) {
        if self.data_lines > 0 {
            emit(SseEventRef {
                event: &self.event_type,
                data: pending.unwrap_or(&self.data),
                id: self.has_id.then_some(self.id.as_str()),
                retry: self.retry,
            });
        }
        self.clear();
    }
}

/// Finds the first CR or LF in `bytes`: `memchr2` where it is vector code (the host; a wasm
/// built with simd128).
#[cfg(not(all(target_arch = "wasm32", not(target_feature = "simd128"))))]
#[inline(always)]
fn line_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', bytes)
}

/// The Worker's wasm is built without simd128 (it made the requests that parse no stream ≈ 5%
/// dearer in workerd), and there memchr's fallback is slower than this word-at-a-time search.
#[cfg(all(target_arch = "wasm32", not(target_feature = "simd128")))]
#[inline(always)]
fn line_end(bytes: &[u8]) -> Option<usize> {
    word_line_end(bytes)
}

/// Finds the first CR or LF in `bytes` 8 bytes at a time, with plain integer operations: each
/// byte below 0x0E found is checked, since in text they are almost only line ends.
#[cfg(any(test, all(target_arch = "wasm32", not(target_feature = "simd128"))))]
fn word_line_end(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    loop {
        let at = from + first_below_0e(bytes.get(from..)?)?;
        if matches!(bytes[at], b'\n' | b'\r') {
            return Some(at);
        }
        from = at + 1;
    }
}

/// Finds the first byte below 0x0E (LF is 0x0A, CR 0x0D) in 8-byte words, four at a time.
#[cfg(any(test, all(target_arch = "wasm32", not(target_feature = "simd128"))))]
#[inline(always)]
fn first_below_0e(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    /// The high bit set of each byte below 0x0E, and of no byte before the first one: a borrow
    /// only runs on from a byte that is below 0x0E. (A 0x0E after one may be set too.)
    #[inline(always)]
    fn low(w: &[u8; 8]) -> u64 {
        let w = u64::from_le_bytes(*w);
        w.wrapping_sub(ONES * 0x0E) & !w & (ONES * 0x80)
    }
    let (words, tail) = bytes.as_chunks::<8>();
    let (quads, _) = words.as_chunks::<4>();
    let quad = quads.iter().position(|[a, b, c, d]| low(a) | low(b) | low(c) | low(d) != 0);
    let from = 4 * quad.unwrap_or(quads.len());
    for (i, word) in words[from..].iter().enumerate() {
        let found = low(word);
        if found != 0 {
            return Some((from + i) * 8 + found.trailing_zeros() as usize / 8);
        }
    }
    tail.iter().position(|&b| b < 0x0E).map(|j| words.len() * 8 + j)
}

/// Appends one event in SSE wire format to `out`: optional `event:` and `id:` lines, the data
/// split on \n / \r\n / \r into one `data:` line each (an empty data string still gives one
/// `data:` line, or the client would see no event), then a blank line.
///
/// Line breaks inside `event` or `id` become spaces, so a value taken from a backend can never
/// inject fields or end the event early. Line ends in `data` arrive at the client as `\n`.
///
/// The relay writes only JSON messages ([`write_json_event`]) and comments; this general form
/// is the reference they are tested against, and writes the parser's round-trip inputs.
#[cfg(test)]
pub fn write_event(out: &mut String, event: Option<&str>, id: Option<&str>, data: &str) {
    for (name, value) in [("event", event), ("id", id)] {
        if let Some(value) = value {
            out.push_str(name);
            out.push(':');
            if !value.is_empty() {
                out.push(' ');
            }
            for_each_line(value, |i, part| {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(part);
            });
            out.push('\n');
        }
    }
    for_each_line(data, |_, line| push_line(out, "data", line));
    out.push('\n');
}

/// Appends a JSON message as one event: what `write_event` writes for its text, serialized
/// straight into `out` (compact JSON has no line break: control characters are escaped).
pub fn write_json_event(out: &mut String, message: &serde_json::Value) {
    use std::fmt::Write;
    // Writing to a String cannot fail.
    let _ = write!(out, "data: {message}\n\n");
}

/// A comment line (": text\n\n") used as a keep-alive / priming event: clients ignore it, but
/// it makes proxies flush and keeps idle connections open. Multi-line text stays all comment.
pub fn write_comment(out: &mut String, text: &str) {
    for_each_line(text, |_, line| push_line(out, "", line));
    out.push('\n');
}

/// Always writes `name: value`, so a value starting with a space survives the parser removing
/// one space after the colon; an empty value gets no trailing space.
fn push_line(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push(':');
    if !value.is_empty() {
        out.push(' ');
        out.push_str(value);
    }
    out.push('\n');
}

/// Splits on the same line ends the parser accepts (CRLF counted once); always yields at least
/// one, possibly empty, line so that empty text still produces a line. (JSON text, what we
/// write, is one line: one search.)
fn for_each_line(text: &str, mut f: impl FnMut(usize, &str)) {
    let mut rest = text;
    let mut i = 0;
    while let Some(end) = line_end(rest.as_bytes()) {
        f(i, &rest[..end]);
        i += 1;
        let skip = if rest[end..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[end + skip..];
    }
    f(i, rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str, id: Option<&str>, retry: Option<u64>) -> SseEvent {
        SseEvent { event: event.into(), data: data.into(), id: id.map(Into::into), retry }
    }

    fn data(d: &str) -> SseEvent {
        ev("", d, None, None)
    }

    /// Parses `input` fed in the given chunks, then finishes the stream.
    fn parse_chunks<'a>(max: usize, chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<SseEvent>, SseError> {
        let mut parser = SseParser::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out)?;
        }
        parser.finish(&mut out)?;
        Ok(out)
    }

    fn parse(input: &[u8]) -> Vec<SseEvent> {
        parse_chunks(SseParser::DEFAULT_MAX_EVENT_BYTES, [input]).unwrap()
    }

    /// Every way of chunking `input` we test: two chunks split at each byte position, single
    /// bytes, and fixed sizes 3 and 7 (with empty chunks sprinkled in for good measure).
    fn chunkings(input: &[u8]) -> Vec<(String, Vec<&[u8]>)> {
        let mut ways = Vec::new();
        for at in 0..=input.len() {
            ways.push((format!("split at {at}"), vec![&input[..at], &[][..], &input[at..]]));
        }
        for size in [1, 3, 7] {
            ways.push((format!("chunks of {size}"), input.chunks(size).collect()));
        }
        ways
    }

    /// Asserts the unsplit parse gives `expected` and every chunking gives the same.
    fn assert_all_chunkings(name: &str, max: usize, input: &[u8], expected: &Result<Vec<SseEvent>, SseError>) {
        assert_eq!(&parse_chunks(max, [input]), expected, "{name}: unsplit");
        for (how, chunks) in chunkings(input) {
            assert_eq!(&parse_chunks(max, chunks), expected, "{name}: {how}");
        }
    }

    fn samples() -> Vec<(&'static str, &'static [u8], Vec<SseEvent>)> {
        vec![
            ("empty stream", b"", vec![]),
            ("LF", b"data: a\n\ndata: b\n\n", vec![data("a"), data("b")]),
            ("CRLF", b"data: a\r\n\r\ndata: b\r\n\r\n", vec![data("a"), data("b")]),
            ("CR", b"data: a\r\rdata: b\r\r", vec![data("a"), data("b")]),
            ("mixed line ends", b"data: a\r\ndata: b\rdata: c\n\r\n", vec![data("a\nb\nc")]),
            ("CR then CRLF is two line ends", b"data: x\r\r\ndata: y\n\n", vec![data("x"), data("y")]),
            ("LF then CR is two line ends", b"data: x\n\rdata: y\n\r", vec![data("x"), data("y")]),
            ("CRLF then LF", b"data: a\r\n\ndata: b\n\r\n", vec![data("a"), data("b")]),
            ("comments", b": hello\ndata: a\n: another\n:\n\n", vec![data("a")]),
            ("comment only", b": keep-alive\n\n", vec![]),
            ("multi-line data", b"data: a\ndata: b\ndata: c\n\n", vec![data("a\nb\nc")]),
            (
                "event, id and retry",
                b"event: update\nid: 42\nretry: 3000\ndata: x\n\n",
                vec![ev("update", "x", Some("42"), Some(3000))],
            ),
            (
                "invalid retry ignored",
                b"retry: 12a\nretry: -5\nretry:\nretry:  7\nretry: +7\nretry: 99999999999999999999999\ndata: x\n\n",
                vec![data("x")],
            ),
            (
                "invalid retry keeps earlier valid one",
                b"retry: 10\nretry: x\ndata: x\n\n",
                vec![ev("", "x", None, Some(10))],
            ),
            ("id with NUL ignored", b"id: 1\nid: a\0b\ndata: x\n\n", vec![ev("", "x", Some("1"), None)]),
            ("empty id", b"id:\ndata: x\n\n", vec![ev("", "x", Some(""), None)]),
            ("field without colon: data", b"data\n\n", vec![data("")]),
            ("field without colon: event and id", b"event\nid\ndata: x\n\n", vec![ev("", "x", Some(""), None)]),
            ("value without the space", b"data:x\nevent:e\nid:7\n\n", vec![ev("e", "x", Some("7"), None)]),
            ("only the first space is removed", b"data:  x\ndata:   two\n\n", vec![data(" x\n  two")]),
            ("colons in the value", b"data: a:b: c\n\n", vec![data("a:b: c")]),
            ("empty data lines", b"data:\ndata:\n\ndata:\n\n", vec![data("\n"), data("")]),
            ("blank lines only", b"\n\n\r\n\r\r\n", vec![]),
            ("extra blank lines", b"\n\ndata: a\n\n\n\n", vec![data("a")]),
            (
                "event without data is not dispatched and resets the event",
                b"event: ping\nid: 1\nretry: 5\n\ndata: x\n\n",
                vec![data("x")],
            ),
            (
                "event type and id reset after dispatch",
                b"event: a\nid: 1\ndata: 1\n\ndata: 2\n\n",
                vec![ev("a", "1", Some("1"), None), data("2")],
            ),
            ("unknown fields ignored", b"foo: bar\ndata: x\nDATA: y\n data: z\n\n", vec![data("x")]),
            ("missing final blank line", b"data: a\n\ndata: b", vec![data("a"), data("b")]),
            ("missing final blank line after LF", b"event: e\ndata: b\n", vec![ev("e", "b", None, None)]),
            ("stream ends with CR", b"data: a\r", vec![data("a")]),
            ("missing final blank line, no data", b"data: a\n\nevent: e", vec![data("a")]),
            ("leading BOM", b"\xEF\xBB\xBFdata: a\n\n", vec![data("a")]),
            ("BOM only", b"\xEF\xBB\xBF", vec![]),
            ("BOM then blank line", b"\xEF\xBB\xBF\ndata: a\n\n", vec![data("a")]),
            // The second BOM is part of the first line's field name, which is then unknown.
            ("second BOM kept", b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n", vec![data("b")]),
            (
                "BOM not at start kept as data",
                b"data: a\n\ndata: \xEF\xBB\xBFb\n\n",
                vec![data("a"), data("\u{FEFF}b")],
            ),
            ("BOM at a later line start", b"data: a\n\xEF\xBB\xBFdata: b\n\n", vec![data("a")]),
            // A partial BOM is ordinary (invalid) content of the first line.
            ("partial BOM at start", b"\xEF\xBBdata: a\n\ndata: b\n\n", vec![data("b")]),
            ("partial BOM as a whole stream", b"\xEF\xBB", vec![]),
            ("partial BOM then line end", b"\xEF\ndata: a\n\n", vec![data("a")]),
            (
                "multi-byte UTF-8",
                "data: héllo 世界 🎉\nevent: 世界\n\n".as_bytes(),
                vec![ev("世界", "héllo 世界 🎉", None, None)],
            ),
            (
                "invalid UTF-8",
                b"data: a\xFFb\xC3\nevent: \xE4\xB8\n\n",
                vec![ev("\u{FFFD}", "a\u{FFFD}b\u{FFFD}", None, None)],
            ),
            ("invalid UTF-8 at line end before CR", b"data: \xF0\x9F\x8E\r\r", vec![data("\u{FFFD}")]),
            (
                "Dify message, stream closed without blank line",
                br#"data: {"event":"message","answer":"Hi"}"#,
                vec![data(r#"{"event":"message","answer":"Hi"}"#)],
            ),
            (
                "Dify message with blank line",
                b"data: {\"event\":\"message\",\"answer\":\"Hi\"}\n\n",
                vec![data(r#"{"event":"message","answer":"Hi"}"#)],
            ),
            ("Dify ping", b"event: ping\n\n", vec![]),
            (
                "Dify stream",
                concat!(
                    "event: ping\n\n",
                    "data: {\"event\":\"message\",\"answer\":\"H\"}\n\n",
                    "data: {\"event\":\"message\",\"answer\":\"i\"}\r\n\r\n",
                    "event: ping\n\n",
                    "data: {\"event\":\"message_end\"}\n\n",
                )
                .as_bytes(),
                vec![
                    data(r#"{"event":"message","answer":"H"}"#),
                    data(r#"{"event":"message","answer":"i"}"#),
                    data(r#"{"event":"message_end"}"#),
                ],
            ),
        ]
    }

    /// The parsing rules written as plainly as possible, for the whole stream at once: the
    /// differential test below holds the incremental parser to it.
    fn reference(max: usize, input: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let too_large = Err(SseError::EventTooLarge { limit: max });
        let input = input.strip_prefix(BOM).unwrap_or(input);
        // Lines: CRLF, CR or LF end one; a last line without an end is a line too.
        let mut lines = Vec::new();
        let mut start = 0;
        let mut at = 0;
        while at < input.len() {
            if input[at] == b'\r' || input[at] == b'\n' {
                lines.push(&input[start..at]);
                at += if input[at..].starts_with(b"\r\n") { 2 } else { 1 };
                start = at;
            } else {
                at += 1;
            }
        }
        if start < input.len() {
            lines.push(&input[start..]);
        }
        lines.push(b""); // the blank line a stream's end stands for
        let (mut out, mut event, mut data, mut id, mut retry) = (Vec::new(), String::new(), None::<String>, None, None);
        let mut data_lines = 0;
        for line in lines {
            // The cap: what the event holds, each data line counted with its line end.
            let held = |event: &String, data: &Option<String>, id: &Option<String>, data_lines: usize| {
                event.len() + data.as_ref().map_or(0, String::len) + data_lines + id.as_ref().map_or(0, String::len)
            };
            if line.len() + held(&event, &data, &id, data_lines) > max {
                return too_large;
            }
            if line.is_empty() {
                if let Some(d) = data.take() {
                    out.push(SseEvent {
                        event: std::mem::take(&mut event),
                        data: d,
                        id: id.take(),
                        retry: retry.take(),
                    });
                }
                (event, id, retry, data_lines) = (String::new(), None, None, 0);
                continue;
            }
            if line[0] == b':' {
                continue;
            }
            let (name, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], if value.first() == Some(&b' ') { &value[1..] } else { value })
                }
                None => (line, &b""[..]),
            };
            let value = String::from_utf8_lossy(value).into_owned();
            match name {
                b"event" => event = value,
                b"data" => {
                    data = Some(match data.take() {
                        Some(d) => format!("{d}\n{value}"),
                        None => value,
                    });
                    data_lines += 1;
                }
                b"id" if !value.contains('\0') => id = Some(value),
                b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                    retry = value.parse().ok().or(retry);
                }
                _ => {}
            }
            if held(&event, &data, &id, data_lines) > max {
                return too_large;
            }
        }
        Ok(out)
    }

    /// A small deterministic generator (xorshift), so a failure is reproducible from its seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Streams built from SSE's own pieces, with runs long enough to cross the words and vectors
    /// the line search reads, non-ASCII and invalid bytes, and control bytes that are not line
    /// ends.
    fn random_stream(rng: &mut Rng) -> Vec<u8> {
        const PIECES: [&[u8]; 28] = [
            b"data",
            b"data:",
            b"data: ",
            b"event: ",
            b"id: ",
            b"retry: ",
            b"id",
            b":",
            b" ",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"x",
            b"12",
            b"\xC3\xA9",
            b"\xE6\x91\x98",
            b"\xF0\x9F\x8E\x89",
            b"\xFF",
            b"\xE4\xB8",
            b"\0",
            b"\t",
            b"\x0B\x0C\x0E",
            BOM,
            b"{\"event\": \"text_chunk\"}",
            b"retry",
            b": comment",
            b"\x7F\x80",
        ];
        let mut out = Vec::new();
        for _ in 0..rng.below(40) {
            match rng.below(10) {
                0 => out.extend(std::iter::repeat_n(b'a', rng.below(80))),
                1 => out.extend("é".repeat(rng.below(30)).bytes()),
                _ => out.extend_from_slice(PIECES[rng.below(PIECES.len())]),
            }
        }
        out
    }

    #[test]
    fn random_streams_parse_as_the_reference_however_chunked() {
        let mut rng = Rng(0x5EED_CAFE_F00D_0001);
        for case in 0..20_000 {
            let input = random_stream(&mut rng);
            let max = [SseParser::DEFAULT_MAX_EVENT_BYTES, 8 + rng.below(200)][rng.below(2)];
            let expected = reference(max, &input);
            assert_eq!(parse_chunks(max, [input.as_slice()]), expected, "case {case}: {input:?} (max {max}), unsplit");
            // Random cuts, empty chunks included.
            let mut cuts: Vec<usize> = (0..rng.below(6)).map(|_| rng.below(input.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut from = 0;
            for cut in cuts {
                chunks.push(&input[from..cut]);
                from = cut;
            }
            chunks.push(&input[from..]);
            assert_eq!(
                parse_chunks(max, chunks.iter().copied()),
                expected,
                "case {case}: {input:?} (max {max}), {chunks:?}"
            );
        }
    }

    #[test]
    fn samples_parse_to_expected_events() {
        for (name, input, expected) in samples() {
            assert_eq!(parse(input), expected, "{name}");
        }
    }

    #[test]
    fn samples_parse_the_same_however_chunked() {
        for (name, input, expected) in samples() {
            assert_all_chunkings(name, SseParser::DEFAULT_MAX_EVENT_BYTES, input, &Ok(expected));
        }
    }

    #[test]
    fn feed_pushes_events_as_soon_as_they_end() {
        let mut parser = SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES);
        let mut out = Vec::new();
        parser.feed(b"data: a\n\ndata: b", &mut out).unwrap();
        assert_eq!(out, [data("a")]);
        parser.feed(b"\n", &mut out).unwrap();
        assert_eq!(out, [data("a")]);
        parser.feed(b"\n", &mut out).unwrap();
        assert_eq!(out, [data("a"), data("b")]);
        parser.finish(&mut out).unwrap();
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn a_single_line_event_is_handed_over_from_the_chunk_itself() {
        let chunk = b"event: x\ndata: {\"a\":1}\n\ndata: one\ndata: two\n\n";
        let mut parser = SseParser::new(1024);
        let mut seen = Vec::new();
        parser
            .feed_each(chunk, |e| seen.push((e.to_owned(), chunk.as_ptr_range().contains(&e.data.as_ptr()))))
            .unwrap();
        // The first event's data is a view of the chunk (no copy); two data lines are joined
        // in the parser's own buffer.
        assert_eq!(seen, vec![(ev("x", r#"{"a":1}"#, None, None), true), (data("one\ntwo"), false)]);
    }

    #[test]
    fn a_first_data_line_ending_in_the_next_chunk_is_kept() {
        let mut parser = SseParser::new(1024);
        let mut seen = Vec::new();
        parser.feed_each(b"data: a\ndata: b", |e| seen.push(e.to_owned())).unwrap();
        parser.feed_each(b"c\n\ndata: d\n", |e| seen.push(e.to_owned())).unwrap();
        parser.feed_each(b"\n", |e| seen.push(e.to_owned())).unwrap();
        assert_eq!(seen, vec![data("a\nbc"), data("d")]);
    }

    #[test]
    fn lines_after_a_line_completed_from_the_last_chunk_are_handed_over_from_the_chunk() {
        let mut parser = SseParser::new(1024);
        let mut seen = Vec::new();
        for chunk in [&b"data: one\n\ndata: h\xC3"[..], b"\xA9\n\nid: 7\ndata: \xE6\x91\x98 three\n\n"] {
            parser
                .feed_each(chunk, |e| seen.push((e.to_owned(), chunk.as_ptr_range().contains(&e.data.as_ptr()))))
                .unwrap();
        }
        // "hé" was cut inside its "é": joined in the parser's buffer. The next event is a view of
        // the chunk again, non-ASCII and all.
        assert_eq!(seen, vec![(data("one"), true), (data("hé"), false), (ev("", "摘 three", Some("7"), None), true)]);
    }

    #[test]
    fn invalid_bytes_in_a_chunk_spoil_only_their_own_line() {
        let long = "x".repeat(40);
        let mut input = format!("data: {long}\n\ndata: a").into_bytes();
        input.push(0xFF);
        input.extend(format!("b\nevent: é\n\ndata: {long}é\n\n").bytes());
        let expected = Ok(vec![data(&long), ev("é", "a\u{FFFD}b", None, None), data(&format!("{long}é"))]);
        assert_all_chunkings("invalid in the middle", 1024, &input, &expected);
    }

    #[test]
    fn control_bytes_that_are_not_line_ends_stay_in_the_line() {
        // Bytes below 0x0E other than CR and LF, at every position of a 32-byte vector of the
        // line search and across its edges, and 0x0E right after them.
        for pad in 0..40 {
            let value = format!("{}\t\0\x0E\x0B\x0C\x01\x0E{}", "y".repeat(pad), "z".repeat(40 - pad));
            let input = format!("data: {value}\r\n\r\ndata:{value}\r\r");
            let expected = Ok(vec![data(&value), data(&value)]);
            assert_all_chunkings(&format!("pad {pad}"), 1024, input.as_bytes(), &expected);
        }
    }

    #[test]
    fn the_word_search_finds_what_memchr2_finds() {
        // The Worker's line search (wasm without simd128) against the host's, on lines with CR,
        // LF and other control bytes at every position of the 8-byte words, read four at a time.
        let mut rng = Rng(7);
        for len in 0..100 {
            for _ in 0..20 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| match rng.below(8) {
                        0 => [b'\n', b'\r', b'\t', 0, 0x0B, 0x0C, 0x0E, 0xFF][rng.below(8)],
                        _ => b'a' + rng.below(26) as u8,
                    })
                    .collect();
                assert_eq!(word_line_end(&bytes), memchr::memchr2(b'\n', b'\r', &bytes), "{bytes:?}");
            }
        }
    }

    #[test]
    fn cr_at_chunk_end_waits_for_the_next_chunk() {
        let mut parser = SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES);
        let mut out = Vec::new();
        parser.feed(b"data: a\r", &mut out).unwrap();
        parser.feed(b"", &mut out).unwrap(); // an empty chunk must not forget the CR
        parser.feed(b"\n", &mut out).unwrap(); // same line end as the CR: not a blank line
        assert!(out.is_empty());
        parser.feed(b"\r", &mut out).unwrap(); // a blank line
        assert_eq!(out, [data("a")]);
    }

    #[test]
    fn finish_resets_for_a_new_stream() {
        let mut parser = SseParser::new(SseParser::DEFAULT_MAX_EVENT_BYTES);
        let mut out = Vec::new();
        parser.feed(b"\xEF\xBB\xBFevent: e\nid: 1\ndata: a", &mut out).unwrap();
        parser.finish(&mut out).unwrap();
        parser.feed(b"\xEF\xBB\xBFdata: b\r", &mut out).unwrap();
        parser.feed(b"\ndata: c\n\n", &mut out).unwrap();
        parser.finish(&mut out).unwrap();
        assert_eq!(out, [ev("e", "a", Some("1"), None), data("b\nc")]);
    }

    #[test]
    fn event_over_the_limit_with_many_lines_errors() {
        let line = b"data: 0123456789\n";
        let mut parser = SseParser::new(100);
        let mut out = Vec::new();
        let mut fed = 0;
        let err = loop {
            match parser.feed(line, &mut out) {
                Ok(()) => fed += 1,
                Err(e) => break e,
            }
            assert!(fed < 100, "never refused");
        };
        assert_eq!(err, SseError::EventTooLarge { limit: 100 });
        // Each line adds 11 bytes of data: the 9th line would bring 88 + 16 over 100.
        assert_eq!(fed, 8);
        assert!(out.is_empty());
    }

    #[test]
    fn endless_line_errors_before_it_is_all_buffered() {
        let limit = 1024;
        let mut parser = SseParser::new(limit);
        let mut out = Vec::new();
        parser.feed(b"data: ", &mut out).unwrap();
        let piece = [b'x'; 16];
        let total = 100 * limit;
        let mut fed = 6;
        let mut result = Ok(());
        while fed < total {
            result = parser.feed(&piece, &mut out);
            if result.is_err() {
                break;
            }
            fed += piece.len();
        }
        assert_eq!(result, Err(SseError::EventTooLarge { limit }));
        assert!(fed <= limit, "refused only after {fed} bytes");
        assert!(parser.line.len() <= limit);
    }

    #[test]
    fn huge_chunk_without_line_end_is_refused_without_copying() {
        let mut parser = SseParser::new(1024);
        let mut out = Vec::new();
        let chunk = vec![b'x'; 10 << 20];
        assert_eq!(parser.feed(&chunk, &mut out), Err(SseError::EventTooLarge { limit: 1024 }));
        assert!(parser.line.capacity() <= 1024);
    }

    #[test]
    fn huge_line_in_one_chunk_with_line_end_is_refused() {
        let mut input = b"data: ".to_vec();
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend(b"\n\n");
        assert_all_chunkings("huge line", 1024, &input, &Err(SseError::EventTooLarge { limit: 1024 }));
    }

    #[test]
    fn event_at_the_limit_passes_and_one_byte_less_fails() {
        // The peak is the last data line while buffered: "data: " + 20 x's plus nothing else.
        let input = format!("data: {}\n\n", "x".repeat(20));
        let expected = Ok(vec![data(&"x".repeat(20))]);
        assert_all_chunkings("at limit", 26, input.as_bytes(), &expected);
        assert_all_chunkings("well below limit", 27, input.as_bytes(), &expected);
        assert_all_chunkings("over limit", 25, input.as_bytes(), &Err(SseError::EventTooLarge { limit: 25 }));

        // Type and id count too: "data: xxxx" (10) + "e" (1) + "1" (1) = 12 at the peak.
        let input = b"event: e\nid: 1\ndata: xxxx\n\n";
        let expected = Ok(vec![ev("e", "xxxx", Some("1"), None)]);
        assert_all_chunkings("fields at limit", 12, input, &expected);
        assert_all_chunkings("fields over limit", 11, input, &Err(SseError::EventTooLarge { limit: 11 }));

        // Without the final blank line, finish gives the same verdicts.
        let input = b"event: e\nid: 1\ndata: xxxx";
        assert_all_chunkings("unterminated at limit", 12, input, &expected);
        assert_all_chunkings("unterminated over limit", 11, input, &Err(SseError::EventTooLarge { limit: 11 }));
    }

    #[test]
    fn invalid_bytes_count_as_bytes_in_data_and_as_replacement_characters_in_other_fields() {
        // Data is held as the bytes sent: the 15-byte line fits a cap of 15, and its 10 invalid
        // bytes count 10 (they become 30 bytes of U+FFFD only when the data is read as text).
        let mut input = b"data:".to_vec();
        input.extend([0xFF; 10]);
        input.extend(b"\n\n");
        assert_eq!(parse_chunks(15, [input.as_slice()]), Ok(vec![data(&"\u{FFFD}".repeat(10))]));
        assert_eq!(parse_chunks(14, [input.as_slice()]), Err(SseError::EventTooLarge { limit: 14 }));
        // An event type is decoded as it is read: 10 invalid bytes become 30 bytes of U+FFFD, so
        // the line fits and the decoded field does not.
        let mut input = b"event:".to_vec();
        input.extend([0xFF; 10]);
        input.extend(b"\ndata: x\n\n");
        assert_eq!(parse_chunks(20, [input.as_slice()]), Err(SseError::EventTooLarge { limit: 20 }));
        assert_eq!(parse_chunks(37, [input.as_slice()]), Ok(vec![ev(&"\u{FFFD}".repeat(10), "x", None, None)]));
    }

    #[test]
    fn limit_applies_per_event() {
        let input = "data: 0123456789\n\n".repeat(1000);
        let events = parse_chunks(64, [input.as_bytes()]).unwrap();
        assert_eq!(events.len(), 1000);
        assert!(events.iter().all(|e| *e == data("0123456789")));
        let events = parse_chunks(64, input.as_bytes().chunks(5)).unwrap();
        assert_eq!(events.len(), 1000);
    }

    #[test]
    fn comments_count_as_lines_against_the_limit() {
        let input = format!(": {}\n\n", "c".repeat(100));
        assert_eq!(parse_chunks(64, [input.as_bytes()]), Err(SseError::EventTooLarge { limit: 64 }));
    }

    #[test]
    fn error_message_says_what_to_do() {
        let msg = SseError::EventTooLarge { limit: 1024 }.to_string();
        assert!(msg.contains("1024 bytes"), "{msg}");
        assert!(msg.contains("smaller events"), "{msg}");
    }

    #[test]
    fn write_event_format() {
        let mut out = String::from("before\n");
        write_event(&mut out, Some("update"), Some("7"), "a\nb");
        assert_eq!(out, "before\nevent: update\nid: 7\ndata: a\ndata: b\n\n");

        let mut out = String::new();
        write_event(&mut out, None, None, "");
        assert_eq!(out, "data:\n\n");

        let mut out = String::new();
        write_event(&mut out, None, None, "x\r\ny\rz\n");
        assert_eq!(out, "data: x\ndata: y\ndata: z\ndata:\n\n");
    }

    #[test]
    fn write_event_round_trips() {
        let datas = [
            "hello",
            "",
            "a\nb",
            "a\r\nb",
            "a\rb",
            "\n",
            "\r\n",
            "\r",
            "trailing\n",
            "x\r\n\r\ny\n\rz",
            "  leading spaces",
            ": looks like a comment",
            "data: nested",
            "héllo 世界 🎉",
            "\u{FEFF}bom",
            r#"{"event":"message","answer":"Hi"}"#,
        ];
        for d in datas {
            for (event, id) in [(None, None), (Some("update"), Some("42")), (Some(" sp"), Some(""))] {
                let mut out = String::new();
                write_event(&mut out, event, id, d);
                // SSE has only one line end on the receiving side: \n.
                let expected = SseEvent {
                    event: event.unwrap_or("").into(),
                    data: d.replace("\r\n", "\n").replace('\r', "\n"),
                    id: id.map(Into::into),
                    retry: None,
                };
                assert_all_chunkings(&format!("{d:?}"), 1 << 10, out.as_bytes(), &Ok(vec![expected]));
            }
        }
    }

    #[test]
    fn write_event_cannot_be_split_by_line_breaks_in_event_or_id() {
        let mut out = String::new();
        write_event(&mut out, Some("a\n\ndata: evil"), Some("1\r\nevent: x"), "ok");
        assert_eq!(parse(out.as_bytes()), [ev("a  data: evil", "ok", Some("1 event: x"), None)]);
    }

    #[test]
    fn write_json_event_writes_what_write_event_writes_for_the_text() {
        // Line breaks and other control characters inside strings, U+2028, non-ASCII keys.
        let messages = [
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "a\nb\r\nc\rd"}}),
            serde_json::json!({"text": "tab\there\u{0}nul \u{2028} é", "ключ": [1, 2.5, null, true]}),
            serde_json::json!("plain"),
        ];
        for m in messages {
            let (mut direct, mut via_text) = (String::new(), String::new());
            write_json_event(&mut direct, &m);
            write_event(&mut via_text, None, None, &m.to_string());
            assert_eq!(direct, via_text);
            assert_eq!(parse(direct.as_bytes()), [data(&m.to_string())]);
        }
    }

    #[test]
    fn data_is_handed_over_as_sent_and_read_as_text_with_replacement_characters() {
        let chunk = b"data: {\"text\": \"caf\xC3\xA9 \xFF ok\"}\n\n";
        let mut seen = Vec::new();
        SseParser::new(1024).feed_each(chunk, |e| seen.push((e.data.to_vec(), e.data_text().into_owned()))).unwrap();
        assert_eq!(seen, [(chunk[6..chunk.len() - 2].to_vec(), "{\"text\": \"café \u{FFFD} ok\"}".to_string())]);
        // JSON: valid data is read as it is, data with a stray byte as its text would read, and
        // what is not JSON stays an error either way.
        assert_eq!(read_json::<serde_json::Value>(b"{\"a\": \"\xC3\xA9\"}").unwrap(), serde_json::json!({"a": "é"}));
        assert_eq!(
            read_json::<serde_json::Value>(&chunk[6..chunk.len() - 2]).unwrap(),
            serde_json::json!({"text": "café \u{FFFD} ok"})
        );
        assert!(read_json::<serde_json::Value>(b"{not json").is_err());
        assert!(read_json::<serde_json::Value>(b"{not \xFF json").is_err());
    }

    #[test]
    fn write_comment_parses_to_nothing() {
        let mut out = String::new();
        write_comment(&mut out, "keep-alive");
        assert_eq!(out, ": keep-alive\n\n");
        assert!(parse(out.as_bytes()).is_empty());

        let mut out = String::new();
        write_comment(&mut out, "");
        write_comment(&mut out, "two\nlines\r\ndata: not data");
        write_event(&mut out, None, None, "after");
        assert_eq!(parse(out.as_bytes()), [data("after")]);
    }
}
