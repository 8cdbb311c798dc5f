//! What every backend kind shares on the way back: the outcome of a call, the signals a
//! running call sends toward the client, the `max_result_bytes` cut, and failure wording.

use crate::json;
use serde_json::Value;

/// What a tool call produced: text for every client, structured output for newer ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Ok {
        text: String,
        structured: Option<Value>,
    },
    /// A backend failure, said in words a person can act on.
    Failed(String),
}

/// A call that could not draw the random bytes it needs fails in the platform's words.
impl From<crate::pure::random::Unavailable> for Outcome {
    fn from(e: crate::pure::random::Unavailable) -> Outcome {
        Outcome::Failed(e.to_string())
    }
}

impl Outcome {
    /// Applies an app's `max_result_bytes` to a finished result, on every path (one piece or
    /// streamed, any backend kind). A longer text is cut on a character boundary with a note;
    /// chat-style structured output (`{answer}`) follows the cut text. Other structured output
    /// cannot be cut without breaking its schema, so a result whose structured part is over the
    /// cap fails with a message saying how to fix it.
    pub fn capped(self, app: &str, max: usize) -> Outcome {
        let Outcome::Ok { mut text, structured } = self else { return self };
        let structured_len = structured.as_ref().map_or(0, json_len);
        // A chat answer: `{answer}`, with the conversation it belongs to when it names one.
        let is_answer = structured.as_ref().is_some_and(|s| {
            s.as_object().is_some_and(|o| {
                o.get("answer").is_some_and(Value::is_string)
                    // `conversation_id`: the conversation the answer belongs to (Dify chat apps).
                    && o.keys().all(|k| k == "answer" || k == "conversation_id")
            })
        });
        if structured_len > max && !is_answer {
            return Outcome::Failed(format!(
                "the result of app '{app}' is larger than its max_result_bytes ({max} bytes); raise max_result_bytes \
                 or make the result smaller"
            ));
        }
        if text.len() <= max {
            return Outcome::Ok { text, structured };
        }
        let cut = truncate(&text, max).len();
        text.truncate(cut);
        text.push_str(&format!(
            "\n\n[truncated: the answer was longer than {max} bytes, the limit set by the app's max_result_bytes]"
        ));
        let structured = match structured {
            Some(mut s) if is_answer => {
                s["answer"] = json!(text);
                Some(s)
            }
            other => other,
        };
        Outcome::Ok { text, structured }
    }
}

/// The length of a value as JSON, without building the text.
fn json_len(v: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Something to send to the MCP client while the call runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// One more step done (a node finished, a thought was made); `message` says which.
    Progress { message: String },
    /// The backend's own percentage (HTTP tools).
    Percent { percent: f64, message: String },
    /// A `notifications/message` at `level`.
    Log { level: &'static str, data: Value },
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A non-2xx answer of `who` in words; a 429 says when to retry.
pub fn http_failure(who: &str, status: u16, retry_after: Option<&str>, parsed: Option<&Value>, body: &str) -> String {
    let message = http_failure_text(who, status, parsed, body);
    match (status, retry_after.map(str::trim).filter(|r| !r.is_empty())) {
        (429, Some(r)) if r.bytes().all(|b| b.is_ascii_digit()) => format!("{message}; retry after {r} s"),
        (429, Some(r)) => format!("{message}; retry after {}", r.chars().take(64).collect::<String>()),
        (429, None) => format!("{message}; retry later"),
        _ => message,
    }
}

fn http_failure_text(who: &str, status: u16, parsed: Option<&Value>, body: &str) -> String {
    if let Some(message) = parsed.and_then(|v| v.get("message")).and_then(Value::as_str) {
        let code = parsed.and_then(|v| v.get("code")).and_then(Value::as_str).unwrap_or("error");
        return format!("{who} refused the call (HTTP {status}, {code}): {message}");
    }
    let snippet: String = body.trim().chars().take(200).collect();
    if snippet.is_empty() {
        format!("{who} answered HTTP {status} with an empty body")
    } else {
        format!("{who} answered HTTP {status}: {snippet}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_capped_on_every_path() {
        let ok = |text: &str, structured: Option<Value>| Outcome::Ok { text: text.into(), structured };
        // Within the cap: unchanged.
        assert_eq!(ok("short", None).capped("A", 10), ok("short", None));
        // A longer text is cut on a character boundary, with the note.
        let Outcome::Ok { text, structured } = ok("héllo wörld", None).capped("A", 2) else { panic!() };
        assert!(text.starts_with("h\n\n[truncated: the answer was longer than 2 bytes"), "{text}");
        assert_eq!(structured, None);
        // A chat answer's structured output follows the cut text.
        let Outcome::Ok { text, structured } = ok("abcdef", Some(json!({"answer": "abcdef"}))).capped("A", 3) else {
            panic!()
        };
        assert!(text.starts_with("abc\n\n[truncated"));
        assert_eq!(structured, Some(json!({"answer": text})));
        // Other structured output over the cap fails, naming the app and the setting.
        let big = json!({"report": "x".repeat(100)});
        match ok(&big.to_string(), Some(big)).capped("Reports", 50) {
            Outcome::Failed(m) => {
                assert!(m.contains("app 'Reports'") && m.contains("max_result_bytes (50 bytes)"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        // Failures pass through.
        assert_eq!(Outcome::Failed("x".into()).capped("A", 0), Outcome::Failed("x".into()));
        assert_eq!(json_len(&json!({"a": [1, "é"]})), json!({"a": [1, "é"]}).to_string().len());
    }

    #[test]
    fn the_cap_is_inclusive_and_keeps_small_structured_output() {
        // Structured output of exactly the cap is kept.
        let s = json!({"k": "v"});
        let n = s.to_string().len();
        let Outcome::Ok { structured, .. } =
            Outcome::Ok { text: "t".into(), structured: Some(s.clone()) }.capped("A", n)
        else {
            panic!()
        };
        assert_eq!(structured, Some(s));
        // A long text beside small, non-chat structured output: the text is cut, the structured
        // output stays as it was.
        let small = json!({"count": 3});
        let Outcome::Ok { text, structured } =
            Outcome::Ok { text: "x".repeat(100), structured: Some(small.clone()) }.capped("A", 50)
        else {
            panic!()
        };
        assert!(text.starts_with(&"x".repeat(50)) && text.contains("[truncated"));
        assert_eq!(structured, Some(small));
    }

    #[test]
    fn rate_limits_carry_their_hint() {
        let f = |retry: Option<&str>| http_failure("the app", 429, retry, None, "");
        assert!(f(Some("7")).ends_with("; retry after 7 s"), "{}", f(Some("7")));
        let date = "Wed, 21 Oct 2026 07:28:00 GMT";
        assert!(f(Some(date)).ends_with(&format!("; retry after {date}")), "{}", f(Some(date)));
        assert!(f(None).ends_with("; retry later"));
        assert!(!http_failure("the app", 500, Some("7"), None, "").contains("retry"));
    }
}
