//! Following a Dify streaming answer event by event: what to tell the MCP client as it
//! happens, and the final outcome. Memory stays bounded whatever the stream's length: only the
//! answer text (capped), the last thought (capped) and the final outputs are kept.

use std::borrow::Cow;

use crate::json;
use serde::Deserialize;
use serde_json::Value;

use super::mode::DifyMode;
use crate::pure::outcome::{truncate, Outcome, Signal};
use crate::pure::sse::read_json;

/// Longest log message built from one event (thoughts, observations).
const MAX_LOG_TEXT: usize = 2000;

#[derive(Debug)]
pub struct DifyStream {
    mode: DifyMode,
    max_text: usize,
    answer: String,
    last_thought: String,
    truncated: bool,
    task_id: Option<String>,
    malformed: u32,
    /// Nodes finished so far: how far along a workflow is (its graph, and so the number of
    /// nodes a run will take, is not in the Service API's answers).
    nodes_finished: u32,
    done: Option<Outcome>,
    /// `message_file` events so far (at most `file_outputs::MAX_LINKS`).
    files: Vec<Value>,
    /// The request body, when it takes part in conversations (`conversation`): the final
    /// outcome then names the conversation.
    conversation: Option<Value>,
}

impl DifyStream {
    pub fn new(mode: DifyMode, max_text: usize) -> Self {
        DifyStream {
            mode,
            max_text,
            answer: String::new(),
            last_thought: String::new(),
            truncated: false,
            task_id: None,
            malformed: 0,
            nodes_finished: 0,
            done: None,
            files: Vec::new(),
            conversation: None,
        }
    }

    /// A chat stream whose outcome names the conversation, when `sent` (the request body)
    /// takes part in conversations.
    pub fn answering(mut self, sent: &Value) -> Self {
        if super::conversation::is_on(sent) {
            self.conversation = Some(json!({ super::conversation::ARGUMENT: sent[super::conversation::ARGUMENT] }));
        }
        self
    }

    /// The run's task id (for the stop endpoint), once the stream has named it.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// Whether the final event has arrived (the rest of the stream can be dropped).
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Events whose data was not JSON; they are skipped (the documented rule) and counted.
    pub fn malformed_events(&self) -> u32 {
        self.malformed
    }

    /// Takes one SSE event's `data`. Unknown events are ignored, as Dify adds events often.
    pub fn on_event(&mut self, data: &[u8], out: &mut Vec<Signal>) {
        if self.done.is_some() || data.trim_ascii().is_empty() {
            return;
        }
        // Most of a stream is token-sized events that are skipped (`text_chunk`, `ping`) or
        // appended (`message`). A skipped one is known by its opening, as Dify writes every
        // event, and not read further once the run's task id is known (so a malformed one
        // among them goes unreported); the appended ones are read without building the event.
        // The few that say more, and anything the head cannot read, are built whole below.
        if self.task_id.is_some() && leading_event(data).is_some_and(|e| !is_read(e)) {
            return;
        }
        // (Data with invalid bytes is read whole below, with replacement characters.)
        let head = std::str::from_utf8(data).ok().and_then(|text| serde_json::from_str::<Head<'_>>(text).ok());
        if let Some(head) = head {
            if self.task_id.is_none() {
                self.task_id = head.task_id.map(Cow::into_owned);
            }
            match head.event.as_deref().unwrap_or("") {
                e @ ("message" | "agent_message" | "message_replace") => {
                    return self.on_answer(e == "message_replace", head.answer.as_deref());
                }
                // A node event says what the head already holds: a workflow sends two per node.
                "node_started" => {
                    let d = head.data.unwrap_or_default();
                    return out.push(node_started(d.title.as_deref(), d.node_type.as_deref()));
                }
                "node_finished" => {
                    let d = head.data.unwrap_or_default();
                    self.nodes_finished += 1;
                    return out.push(node_finished(d.title.as_deref(), d.status.as_deref(), self.nodes_finished));
                }
                e if is_read(e.as_bytes()) => {}
                _ => return,
            }
        }
        let Ok(v) = read_json::<Value>(data) else {
            self.malformed += 1;
            out.push(Signal::Log {
                level: "warning",
                data: json!({"event": "malformed", "message": "the backend sent an event that is not JSON; it was skipped"}),
            });
            return;
        };
        if self.task_id.is_none() {
            if let Some(t) = v.get("task_id").and_then(Value::as_str) {
                self.task_id = Some(t.to_string());
            }
        }
        let d = &v["data"];
        match v.get("event").and_then(Value::as_str).unwrap_or("") {
            "node_started" => out.push(node_started(d["title"].as_str(), d["node_type"].as_str())),
            "node_finished" => {
                self.nodes_finished += 1;
                out.push(node_finished(d["title"].as_str(), d["status"].as_str(), self.nodes_finished))
            }
            "agent_thought" => {
                let thought = text(&v["thought"]);
                if !thought.is_empty() {
                    self.last_thought = truncate(&thought, self.max_text).to_string();
                }
                let tool = text(&v["tool"]);
                out.push(Signal::Progress {
                    message: if tool.is_empty() { "thinking".into() } else { format!("using {tool}") },
                });
                out.push(Signal::Log {
                    level: "info",
                    data: json!({
                        "event": "agent_thought",
                        "thought": truncate(&thought, MAX_LOG_TEXT),
                        "tool": tool,
                        "observation": truncate(&text(&v["observation"]), MAX_LOG_TEXT),
                    }),
                });
            }
            e @ ("message" | "agent_message" | "message_replace") => {
                self.on_answer(e == "message_replace", v.get("answer").and_then(Value::as_str));
            }
            "message_file" if self.files.len() < super::file_outputs::MAX_LINKS && super::file_outputs::is_file(&v) => {
                let mut file = v.clone();
                if let Some(o) = file.as_object_mut() {
                    o.retain(|k, _| !matches!(k.as_str(), "event" | "task_id" | "conversation_id" | "message_id"));
                }
                self.files.push(file);
            }
            "message_end" if self.mode.takes_query() || self.mode == DifyMode::Completion => {
                let outcome = self.answer_outcome();
                self.done = Some(match &self.conversation {
                    Some(sent) => super::conversation::attach(outcome, sent, &v),
                    None => outcome,
                });
            }
            "workflow_finished" if self.mode == DifyMode::Workflow => {
                self.done = Some(workflow_outcome(d));
            }
            "error" => {
                let code = v.get("code").and_then(Value::as_str).unwrap_or("error");
                let message = v.get("message").and_then(Value::as_str).unwrap_or("no message");
                self.done = Some(Outcome::Failed(format!("the Dify app reported an error ({code}): {message}")));
            }
            _ => {}
        }
    }

    /// An answer chunk appended, or (`message_replace`) the answer so far replaced by it.
    fn on_answer(&mut self, replace: bool, chunk: Option<&str>) {
        if replace {
            self.answer.clear();
            self.truncated = false;
        }
        if let Some(chunk) = chunk {
            self.push_answer(chunk);
        }
    }

    fn push_answer(&mut self, chunk: &str) {
        if self.truncated {
            return;
        }
        let room = self.max_text.saturating_sub(self.answer.len());
        if chunk.len() <= room {
            self.answer.push_str(chunk);
        } else {
            self.answer.push_str(truncate(chunk, room));
            self.truncated = true;
        }
    }

    /// agent-chat answers come from the message chunks; only when there is no answer text at
    /// all does the last thought stand in (Dify's own server got this wrong, #22403/#32526).
    fn answer_outcome(&mut self) -> Outcome {
        let mut answer = if self.answer.is_empty() && self.mode == DifyMode::AgentChat {
            std::mem::take(&mut self.last_thought)
        } else {
            std::mem::take(&mut self.answer)
        };
        if self.truncated {
            answer.push_str(&format!(
                "\n\n[truncated: the answer was longer than {} bytes, the limit set by the app's max_result_bytes]",
                self.max_text
            ));
        }
        let mut structured = json!({"answer": answer});
        if !self.files.is_empty() {
            structured[super::file_outputs::FILES_KEY] = Value::Array(std::mem::take(&mut self.files));
        }
        Outcome::Ok { structured: Some(structured), text: answer }
    }

    /// The outcome once the stream has ended (a stream that ended before its final event is a
    /// failure, never a silent empty success).
    pub fn finish(self) -> Outcome {
        self.done.unwrap_or_else(|| Outcome::Failed("the backend stream ended before a result".into()))
    }
}

fn workflow_outcome(d: &Value) -> Outcome {
    match d["status"].as_str() {
        Some("succeeded") | None => {
            let outputs = match &d["outputs"] {
                Value::Null => json!({}),
                o => o.clone(),
            };
            let structured = outputs.is_object().then(|| outputs.clone());
            Outcome::Ok { text: outputs.to_string(), structured }
        }
        Some(other) => {
            let err = d["error"].as_str().filter(|e| !e.is_empty()).unwrap_or("no error message");
            Outcome::Failed(format!("the workflow ended {other}: {err}"))
        }
    }
}

/// What every event is first read for, borrowed from its text where it has no escapes; the
/// other fields are checked as JSON and skipped.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    event: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    task_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    answer: Option<Cow<'a, str>>,
    /// Read for node events; other events' `data` (a `text_chunk`'s text) is checked and skipped
    /// field by field all the same. A `data` of another shape sends the event the whole way.
    #[serde(borrow, default)]
    data: Option<HeadData<'a>>,
}

#[derive(Deserialize, Default)]
struct HeadData<'a> {
    #[serde(borrow, default)]
    title: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    node_type: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
}

/// The log notification of a node that started (a missing or non-text field shown empty).
fn node_started(title: Option<&str>, node_type: Option<&str>) -> Signal {
    Signal::Log {
        level: "info",
        data: json!({"event": "node_started", "node": title.unwrap_or(""), "type": node_type.unwrap_or("")}),
    }
}

/// The progress of a node that finished, with its status and how many have finished so far
/// (the progress value counts them too).
fn node_finished(title: Option<&str>, status: Option<&str>, finished: u32) -> Signal {
    let nodes = if finished == 1 { "node" } else { "nodes" };
    Signal::Progress {
        message: format!("{} {} ({finished} {nodes} finished)", title.unwrap_or(""), status.unwrap_or("finished")),
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

/// The events this reader acts on; any other is skipped.
fn is_read(event: &[u8]) -> bool {
    matches!(
        event,
        b"message"
            | b"agent_message"
            | b"message_replace"
            | b"node_started"
            | b"node_finished"
            | b"agent_thought"
            | b"message_end"
            | b"message_file"
            | b"workflow_finished"
            | b"error"
    )
}

/// The event's name when `data` opens with it (`{"event": "text_chunk", ...`) and names it only
/// there: a later `"event"` (a repeated key, which a JSON read would take instead) or an escape
/// in the name leaves it to the JSON read. Bytes, not chars: this runs for every event.
fn leading_event(data: &[u8]) -> Option<&[u8]> {
    fn skip_space(b: &[u8]) -> &[u8] {
        let n = b.iter().take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')).count();
        &b[n..]
    }
    // (Byte patterns: "z" leaves `strip_prefix` a call to `memcmp`.)
    let [b'{', rest @ ..] = data else { return None };
    let [b'"', b'e', b'v', b'e', b'n', b't', b'"', rest @ ..] = skip_space(rest) else { return None };
    let [b':', rest @ ..] = skip_space(rest) else { return None };
    let [b'"', rest @ ..] = skip_space(rest) else { return None };
    let len = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
    let (name, after) = rest.split_at(len);
    (after[0] == b'"' && !has_event_key(&after[1..])).then_some(name)
}

/// Whether `"event"` occurs later in the event. Found by its `v`, the rarest of its bytes in
/// Dify's events, with `memchr` (which the SSE parser links anyway; a `memmem` searcher was 2.7 KB
/// of the bundle for this one search), then the bytes around it compared.
fn has_event_key(rest: &[u8]) -> bool {
    memchr::memchr_iter(b'v', rest).any(|at| at >= 2 && rest[at - 2..].starts_with(b"\"event\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: DifyMode, events: &[Value], max: usize) -> (Outcome, Vec<Signal>) {
        let mut s = DifyStream::new(mode, max);
        let mut out = Vec::new();
        for e in events {
            s.on_event(e.to_string().as_bytes(), &mut out);
        }
        (s.finish(), out)
    }

    #[test]
    fn message_file_events_become_the_answers_files() {
        let events = [
            json!({"event": "message", "task_id": "t", "answer": "Here is "}),
            json!({"event": "message_file", "task_id": "t", "id": "f1", "type": "image", "belongs_to": "assistant",
                   "url": "https://dify.example/files/f1.png", "conversation_id": "c"}),
            json!({"event": "message", "task_id": "t", "answer": "the chart"}),
            json!({"event": "message_end", "task_id": "t"}),
        ];
        let (outcome, _) = run(DifyMode::Chat, &events, 1000);
        assert_eq!(
            outcome,
            Outcome::Ok {
                text: "Here is the chart".into(),
                structured: Some(json!({"answer": "Here is the chart", "files": [
                    {"id": "f1", "type": "image", "belongs_to": "assistant", "url": "https://dify.example/files/f1.png"}]}))
            }
        );
    }

    #[test]
    fn a_later_event_key_is_found_wherever_it_lies() {
        for (rest, found) in [
            (&b""[..], false),
            (b"v", false),
            (b"ev", false),
            (b"\"event\"", true),
            (b"vv\"event\": 1", true),
            (b", \"data\": {\"value\": \"v\"}, \"event\": \"x\"}", true),
            (b", \"events\": 1, \"even\": \"vvv\"}", false),
            // Inside a string the closing quote is escaped: not the key.
            (b", \"data\": \"\\\"event\\\"\"}", false),
        ] {
            assert_eq!(has_event_key(rest), found, "{:?}", String::from_utf8_lossy(rest));
        }
    }

    #[test]
    fn events_read_by_their_head_alone_and_events_it_cannot_read() {
        let mut s = DifyStream::new(DifyMode::Chat, 100);
        let mut out = Vec::new();
        // Escaped text is decoded (an owned head), plain text borrowed: both appended.
        s.on_event(r#"{"event": "message", "task_id": "t9", "answer": "caf\u00e9 \"ok\" "}"#.as_bytes(), &mut out);
        s.on_event(
            r#"{"event": "message", "answer": "plain", "extra": {"deep": [1, 2, {"x": null}]}}"#.as_bytes(),
            &mut out,
        );
        assert_eq!(s.task_id(), Some("t9"));
        assert_eq!(s.answer, "café \"ok\" plain");
        // Fields of another type than the head expects: read whole, as before (a numeric task
        // id is not a task id; the answer chunk still counts).
        let mut n = DifyStream::new(DifyMode::Chat, 100);
        n.on_event(r#"{"event": "message", "task_id": 7, "answer": "a"}"#.as_bytes(), &mut out);
        assert_eq!(n.task_id(), None);
        assert_eq!(n.answer, "a");
        // A repeated key (the whole read keeps the last) and skipped events change nothing else.
        n.on_event(r#"{"event": "ping", "event": "message", "answer": "b"}"#.as_bytes(), &mut out);
        n.on_event(r#"{"event": "text_chunk", "data": {"text": "zzz"}}"#.as_bytes(), &mut out);
        n.on_event(r#"{"event": "tts_message", "audio": "AAAA"}"#.as_bytes(), &mut out);
        assert_eq!(n.answer, "ab");
        // Not JSON at all: still skipped with one warning, whatever the head made of it.
        n.on_event(r#"{"event": "message", "answer": "c""#.as_bytes(), &mut out);
        assert_eq!(n.malformed_events(), 1);
        assert_eq!(n.answer, "ab");
        // A stray byte (the parser hands data over unchecked): the text read with a replacement
        // character, as a browser would show it; skipped events are not read at all.
        n.on_event(b"{\"event\": \"message\", \"answer\": \"\xFF!\"}", &mut out);
        n.on_event(b"{\"event\": \"text_chunk\", \"data\": {\"text\": \"\xFF\"}}", &mut out);
        assert_eq!(n.malformed_events(), 1);
        n.on_event(r#"{"event": "message_end", "task_id": "t"}"#.as_bytes(), &mut out);
        assert_eq!(
            n.finish(),
            Outcome::Ok { text: "ab\u{FFFD}!".into(), structured: Some(json!({"answer": "ab\u{FFFD}!"})) }
        );
    }

    #[test]
    fn skipped_events_are_known_by_their_opening() {
        for (data, name) in [
            (r#"{"event": "text_chunk", "data": {"text": "x"}}"#, Some("text_chunk")),
            (r#"{"event":"ping"}"#, Some("ping")),
            (" {\n \"event\" :\t\"tts_message\", \"audio\": \"AAAA\"}".trim_start(), Some("tts_message")),
            // A text quoting "event" is still text.
            (r#"{"event": "text_chunk", "data": {"text": "an \"event\" here"}}"#, Some("text_chunk")),
            // Left to the JSON read: a repeated or nested key, an escape, another first key.
            (r#"{"event": "ping", "event": "message", "answer": "b"}"#, None),
            (r#"{"event": "text_chunk", "data": {"event": "x"}}"#, None),
            (r#"{"event": "mess\u0061ge", "answer": "b"}"#, None),
            (r#"{"task_id": "t", "event": "text_chunk"}"#, None),
            (r#"{"event": 7}"#, None),
            (r#"{"event": "unterminated"#, None),
        ] {
            assert_eq!(leading_event(data.as_bytes()), name.map(str::as_bytes), "{data}");
        }
        // What the opening says is what the JSON read says, for events read and skipped alike.
        let mut fast = DifyStream::new(DifyMode::Chat, 100);
        let mut out = Vec::new();
        fast.on_event(r#"{"event": "text_chunk", "task_id": "t1", "data": {"text": "zzz"}}"#.as_bytes(), &mut out);
        assert_eq!(fast.task_id(), Some("t1"), "the first events are read for the task id");
        for data in [
            r#"{"event": "text_chunk", "data": {"text": "zzz"}}"#,
            r#"{"event": "ping", "event": "message", "answer": "b"}"#,
            r#"{"event": "mess\u0061ge", "answer": "c"}"#,
            r#"{"event": "message", "answer": "d"}"#,
            r#"{"event": "tts_message", "audio": "AAAA"}"#,
        ] {
            fast.on_event(data.as_bytes(), &mut out);
        }
        assert_eq!(fast.answer, "bcd");
        assert!(out.is_empty());
    }

    #[test]
    fn node_events_give_the_same_signals_read_by_their_head_or_whole() {
        let signals = |data: &str| {
            let mut s = DifyStream::new(DifyMode::Workflow, 100);
            let mut out = Vec::new();
            s.on_event(data.as_bytes(), &mut out);
            out
        };
        let started = |node: &str, ty: &str| Signal::Log {
            level: "info",
            data: json!({"event": "node_started", "node": node, "type": ty}),
        };
        let finished = |m: &str| Signal::Progress { message: format!("{m} (1 node finished)") };
        // Read by the head: plain, escaped, missing fields, data null or absent.
        assert_eq!(
            signals(r#"{"event": "node_started", "data": {"title": "LLM", "node_type": "llm", "inputs": {"a": [1]}}}"#),
            [started("LLM", "llm")]
        );
        assert_eq!(
            signals(r#"{"event": "node_started", "data": {"title": "R\u00e9sum\u00e9"}}"#),
            [started("Résumé", "")]
        );
        assert_eq!(
            signals(r#"{"event": "node_finished", "data": {"title": "LLM", "status": "failed"}}"#),
            [finished("LLM failed")]
        );
        assert_eq!(signals(r#"{"event": "node_finished", "data": null}"#), [finished(" finished")]);
        assert_eq!(signals(r#"{"event": "node_finished"}"#), [finished(" finished")]);
        // Read whole (the head cannot take a numeric title or a repeated key): the same rules.
        assert_eq!(
            signals(r#"{"event": "node_started", "data": {"title": 7, "node_type": "code"}}"#),
            [started("", "code")]
        );
        assert_eq!(
            signals(r#"{"event": "node_finished", "data": {"title": "A", "title": "B", "status": 1}}"#),
            [finished("B finished")]
        );
        assert_eq!(signals(r#"{"event": "node_finished", "data": "odd"}"#), [finished(" finished")]);
    }

    #[test]
    fn workflow_stream() {
        let events = [
            json!({"event": "workflow_started", "task_id": "t1", "workflow_run_id": "r", "data": {"id": "r"}}),
            json!({"event": "node_started", "task_id": "t1", "data": {"title": "LLM", "node_type": "llm"}}),
            json!({"event": "text_chunk", "task_id": "t1", "data": {"text": "x"}}),
            json!({"event": "node_finished", "task_id": "t1", "data": {"title": "LLM", "status": "succeeded"}}),
            json!({"event": "workflow_finished", "task_id": "t1", "data": {"status": "succeeded", "outputs": {"summary": "s"}}}),
        ];
        let (outcome, signals) = run(DifyMode::Workflow, &events, 100);
        assert_eq!(
            outcome,
            Outcome::Ok { text: r#"{"summary":"s"}"#.into(), structured: Some(json!({"summary": "s"})) }
        );
        assert_eq!(signals.len(), 2);
        assert_eq!(signals[1], Signal::Progress { message: "LLM succeeded (1 node finished)".into() });
        let failed = [json!({"event": "workflow_finished", "data": {"status": "failed", "error": "boom"}})];
        assert_eq!(run(DifyMode::Workflow, &failed, 100).0, Outcome::Failed("the workflow ended failed: boom".into()));
    }

    #[test]
    fn workflow_progress_says_how_many_nodes_have_finished() {
        let node = |title: &str| json!({"event": "node_finished", "task_id": "t1", "data": {"title": title, "status": "succeeded"}});
        // The last names its event after its data (not read by the opening): counted all the same.
        let events = [
            node("Start"),
            json!({"event": "node_started", "task_id": "t1", "data": {"title": "LLM", "node_type": "llm"}}),
            node("LLM"),
            json!({"task_id": "t1", "data": {"title": "End", "status": "succeeded"}, "event": "node_finished"}),
        ];
        let (_, signals) = run(DifyMode::Workflow, &events, 100);
        let messages: Vec<&str> = signals
            .iter()
            .filter_map(|s| match s {
                Signal::Progress { message } => Some(message.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            messages,
            [
                "Start succeeded (1 node finished)",
                "LLM succeeded (2 nodes finished)",
                "End succeeded (3 nodes finished)"
            ]
        );
    }

    #[test]
    fn chat_answer_is_assembled_and_replaced() {
        let events = [
            json!({"event": "message", "task_id": "t", "answer": "Hel"}),
            json!({"event": "message", "answer": "lo"}),
            json!({"event": "message_end"}),
        ];
        assert_eq!(
            run(DifyMode::Chat, &events, 100).0,
            Outcome::Ok { text: "Hello".into(), structured: Some(json!({"answer": "Hello"})) }
        );
        let replaced = [
            json!({"event": "message", "answer": "bad"}),
            json!({"event": "message_replace", "answer": "moderated"}),
            json!({"event": "message_end"}),
        ];
        assert!(matches!(run(DifyMode::Chat, &replaced, 100).0, Outcome::Ok { text, .. } if text == "moderated"));
    }

    #[test]
    fn agent_chat_prefers_the_answer_over_thoughts() {
        let thought = |t: &str| json!({"event": "agent_thought", "thought": t, "tool": "search", "observation": "obs"});
        let with_answer = [
            thought("first"),
            thought("second"),
            json!({"event": "agent_message", "answer": "Final"}),
            json!({"event": "message_end"}),
        ];
        let (outcome, signals) = run(DifyMode::AgentChat, &with_answer, 100);
        assert!(matches!(outcome, Outcome::Ok { text, .. } if text == "Final"));
        assert_eq!(signals.iter().filter(|s| matches!(s, Signal::Progress { .. })).count(), 2);
        let only_thoughts =
            [thought("first"), thought("the last thought"), thought(""), json!({"event": "message_end"})];
        assert!(
            matches!(run(DifyMode::AgentChat, &only_thoughts, 100).0, Outcome::Ok { text, .. } if text == "the last thought")
        );
    }

    #[test]
    fn the_answer_is_capped_with_a_note() {
        let events = [
            json!({"event": "message", "answer": "0123456789"}),
            json!({"event": "message", "answer": "abcdef"}),
            json!({"event": "message_end"}),
        ];
        let Outcome::Ok { text, .. } = run(DifyMode::Completion, &events, 12).0 else { panic!() };
        assert!(text.starts_with("0123456789ab\n\n[truncated: the answer was longer than 12 bytes"), "{text}");
        assert_eq!(truncate("héllo", 2), "h");
    }

    #[test]
    fn errors_early_ends_and_malformed_events() {
        let err = [json!({"event": "error", "code": "provider_quota_exceeded", "message": "quota"})];
        assert_eq!(
            run(DifyMode::Chat, &err, 100).0,
            Outcome::Failed("the Dify app reported an error (provider_quota_exceeded): quota".into())
        );
        let early = [json!({"event": "message", "answer": "partial"})];
        assert_eq!(
            run(DifyMode::Chat, &early, 100).0,
            Outcome::Failed("the backend stream ended before a result".into())
        );
        let mut s = DifyStream::new(DifyMode::Chat, 100);
        let mut out = Vec::new();
        s.on_event("{not json".as_bytes(), &mut out);
        s.on_event(json!({"event": "message", "answer": "ok", "task_id": "tid"}).to_string().as_bytes(), &mut out);
        s.on_event(json!({"event": "message_end"}).to_string().as_bytes(), &mut out);
        assert_eq!(s.malformed_events(), 1);
        assert_eq!(s.task_id(), Some("tid"));
        assert!(s.is_done());
        assert!(matches!(s.finish(), Outcome::Ok { text, .. } if text == "ok"));
    }
}
