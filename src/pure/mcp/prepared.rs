//! A server definition with what every request of it would otherwise rebuild: the `tools/list`
//! result per protocol revision, serialized once on first use. Kept with the definition in the
//! isolate's memo, so a hot `tools/list` is a lookup and a copy.

use std::cell::RefCell;
use std::rc::Rc;

use crate::pure::definition::ServerDefinition;
use crate::pure::mcp::server::tools_list_result;
use crate::pure::mcp::tools::Upstreams;
use crate::pure::protocol::version::Version;

pub struct Prepared {
    pub def: ServerDefinition,
    /// By `Version::ALL` index.
    tools_lists: RefCell<[Option<Rc<str>>; Version::ALL.len()]>,
}

impl Prepared {
    pub fn new(def: ServerDefinition) -> Prepared {
        Prepared { def, tools_lists: RefCell::new(Default::default()) }
    }

    /// The JSON text of the `tools/list` result for `version` (a server without upstream MCP
    /// apps, whose list depends on nothing else).
    pub fn tools_list(&self, version: Version, server_version: &str) -> Rc<str> {
        let i = Version::ALL.iter().position(|v| *v == version).unwrap_or(0);
        if let Some(text) = &self.tools_lists.borrow()[i] {
            return Rc::clone(text);
        }
        let result = tools_list_result(&self.def, &Upstreams::default(), version, server_version);
        let text: Rc<str> = Rc::from(result.to_string());
        self.tools_lists.borrow_mut()[i] = Some(Rc::clone(&text));
        text
    }
}

/// A JSON-RPC response from the id and a result already serialized.
pub fn response_text(id: &serde_json::Value, result: &str) -> String {
    let id = id.to_string();
    let mut out = String::with_capacity(result.len() + id.len() + 36);
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    out.push_str(&id);
    out.push_str(",\"result\":");
    out.push_str(result);
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::protocol::jsonrpc::result_response;
    use serde_json::{json, Value};

    fn def() -> ServerDefinition {
        serde_json::from_value(json!({
            "format": crate::pure::definition::FORMAT, "server_id": "s", "name": "S", "description": "",
            "status": "active", "parameters": {},
            "apps": [{"id": "a1", "name": "Summariser", "description": "d", "mode": "workflow",
                      "backend": {"base_url": "https://d.example/v1", "api_key": "k"},
                      "user_input_form": [{"text-input": {"variable": "text", "required": true}}], "outputs": []}]
        }))
        .unwrap()
    }

    #[test]
    fn the_prepared_list_is_what_the_server_answers_and_is_made_once() {
        let p = Prepared::new(def());
        for version in Version::ALL {
            let text = p.tools_list(version, "v");
            let want = tools_list_result(&p.def, &Upstreams::default(), version, "v");
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), want, "{version:?}");
            assert!(Rc::ptr_eq(&text, &p.tools_list(version, "v")), "made once per revision");
            let id = json!("req-7");
            let whole: Value = serde_json::from_str(&response_text(&id, &text)).unwrap();
            assert_eq!(whole, result_response(&id, want));
        }
        assert!(p.tools_list(Version::V2025_06_18, "v").contains("\"text\""), "the form's input is in the schema");
    }
}
