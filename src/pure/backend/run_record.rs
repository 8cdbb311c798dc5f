//! A call in progress, recorded under its cancel key (this isolate's memory, then KV) so that a
//! `notifications/cancelled`, which may land on any isolate, can stop it: what to stop, by the
//! backend kind that runs it. Records written by earlier deploys read as before: a Dify run's
//! record has no `kind`, the others `"kind": "async_tool"` or `"mcp"`.

use crate::json;
use serde_json::Value;

use crate::pure::fields::{Fields, FromFields};

#[derive(Debug, Clone, PartialEq)]
pub enum RunRecord {
    /// A streamed Dify run: its stop endpoint takes Dify's task id and the `user` that started it.
    Dify { app_index: usize, task_id: String, user: String },
    /// An async HTTP tool's run polled within the call: cancelled at its cancel endpoint with
    /// the same user headers as the submit.
    AsyncTool { app_index: usize, task_id: String, user: String },
    /// An upstream MCP request: cancelled by a notification on the session it went out on.
    Mcp { app_index: usize, request_id: u64, session: Option<Value> },
}

const ASYNC_TOOL: &str = "async_tool";
const MCP: &str = "mcp";

impl RunRecord {
    /// The stored shape (unchanged from earlier deploys, which read it too).
    pub fn to_json(&self) -> Value {
        match self {
            RunRecord::Dify { app_index, task_id, user } => {
                json!({"task_id": task_id, "app_index": app_index, "user": user})
            }
            RunRecord::AsyncTool { app_index, task_id, user } => {
                json!({"kind": ASYNC_TOOL, "app_index": app_index, "task_id": task_id, "user": user})
            }
            RunRecord::Mcp { app_index, request_id, session } => {
                json!({"kind": MCP, "app_index": app_index, "request_id": request_id, "session": session})
            }
        }
    }

    /// Reads a stored record; `Err` names what does not read.
    pub fn read(text: &str) -> Result<RunRecord, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        crate::pure::fields::read(value)
    }

    pub fn app_index(&self) -> usize {
        match self {
            RunRecord::Dify { app_index, .. }
            | RunRecord::AsyncTool { app_index, .. }
            | RunRecord::Mcp { app_index, .. } => *app_index,
        }
    }
}

impl FromFields for RunRecord {
    fn from_fields(f: &mut Fields) -> Result<Self, String> {
        let kind = f.opt_text("kind")?;
        let app_index = usize::try_from(f.uint("app_index")?).map_err(|_| "app_index is too large".to_string())?;
        // A record without `user` (none was written so) stops the run as no one in particular.
        let user = |f: &mut Fields| f.opt_text("user").map(Option::unwrap_or_default);
        Ok(match kind.as_deref() {
            None => RunRecord::Dify { app_index, task_id: f.text("task_id")?, user: user(f)? },
            Some(ASYNC_TOOL) => RunRecord::AsyncTool { app_index, task_id: f.text("task_id")?, user: user(f)? },
            Some(MCP) => RunRecord::Mcp {
                app_index,
                request_id: f.uint("request_id")?,
                session: f.opt_value("session").filter(|s| !s.is_null()),
            },
            Some(other) => return Err(format!("kind {} is not a kind of run", crate::pure::quote::quote_input(other))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_reads_back_as_written() {
        let session = json!({"transport": "streamable_http", "protocol_version": "2025-06-18", "session_id": "s", "stateless": false});
        for r in [
            RunRecord::Dify { app_index: 0, task_id: "t1".into(), user: "u".into() },
            RunRecord::AsyncTool { app_index: 2, task_id: "r9".into(), user: "u".into() },
            RunRecord::Mcp { app_index: 1, request_id: 7, session: Some(session) },
            RunRecord::Mcp { app_index: 1, request_id: 7, session: None },
        ] {
            assert_eq!(RunRecord::read(&r.to_json().to_string()), Ok(r.clone()), "{r:?}");
        }
    }

    /// The shapes earlier deploys wrote (and still read: they compare `kind` as text).
    #[test]
    fn records_of_earlier_deploys_read() {
        let dify = r#"{"task_id":"t1","app_index":0,"user":"mcp-abc"}"#;
        assert_eq!(
            RunRecord::read(dify),
            Ok(RunRecord::Dify { app_index: 0, task_id: "t1".into(), user: "mcp-abc".into() })
        );
        assert_eq!(
            RunRecord::Dify { app_index: 0, task_id: "t1".into(), user: "mcp-abc".into() }.to_json().to_string(),
            dify
        );
        let tool = r#"{"kind":"async_tool","app_index":1,"task_id":"r","user":"u"}"#;
        assert_eq!(
            RunRecord::read(tool),
            Ok(RunRecord::AsyncTool { app_index: 1, task_id: "r".into(), user: "u".into() })
        );
        assert_eq!(RunRecord::read(tool).unwrap().to_json().to_string(), tool);
        let mcp = r#"{"kind":"mcp","app_index":0,"request_id":3,"session":null}"#;
        assert_eq!(RunRecord::read(mcp), Ok(RunRecord::Mcp { app_index: 0, request_id: 3, session: None }));
        assert_eq!(RunRecord::read(mcp).unwrap().to_json().to_string(), mcp);
    }

    #[test]
    fn a_record_that_does_not_fit_its_kind_is_refused() {
        assert_eq!(RunRecord::read(r#"{"kind":"mcp","app_index":0}"#), Err("request_id is null or missing".into()));
        assert_eq!(RunRecord::read(r#"{"app_index":0,"request_id":3}"#), Err("task_id is null or missing".into()));
        assert_eq!(
            RunRecord::read(r#"{"kind":"dify","app_index":0,"task_id":"t"}"#),
            Err(r#"kind "dify" is not a kind of run"#.into())
        );
        assert!(RunRecord::read("{").unwrap_err().starts_with("not JSON"));
    }
}
