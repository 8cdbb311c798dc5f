//! Custom HTTP tools (docs/http-tool-protocol.md, mode `http-tool`): one endpoint called with a JSON body, that
//! answers in one piece or as an SSE stream of `thought` / `progress` / `result` events. The
//! manifest (`manifest`), a call and its one-piece answer (`call`), a streamed answer (`stream`),
//! an async tool polled to its end within a call (`polled`).

pub mod call;
pub mod config;
pub mod manifest;
pub mod polled;
pub mod stream;

/// A backend with a manifest, as the tests of this kind use it.
#[cfg(test)]
mod fixtures {
    use serde_json::{json, Value};

    pub fn manifest() -> Value {
        json!({
            "api_endpoint": "https://tools.example.com/weather",
            "form_values": {"unit": "fahrenheit"},
            "manifest": {
                "name": "get_weather",
                "parameters": [
                    {"name": "location", "type": "string", "required": true, "description": "City and state", "form": "llm"},
                    {"name": "days", "type": "integer", "required": false, "default": 1},
                    {"name": "unit", "type": "string", "form": "form", "default": "celsius"},
                    {"name": "verbose", "type": "boolean", "form": "form", "default": false}
                ],
                "outputs": [{"name": "temperature", "type": "number", "description": "Now"}, {"name": "condition", "type": "string"}]
            }
        })
    }
}
