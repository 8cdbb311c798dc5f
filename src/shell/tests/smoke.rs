//! The whole request path once: console, MCP endpoint, a Dify backend.

use serde_json::json;

use super::*;

#[test]
fn a_published_workflow_answers_initialize_list_and_call() {
    for seed in crate::sim::seeds(0..4) {
        let fx = Fx::new(seed);
        let app = fx.workflow("Echo", "app-key-1");
        let code = fx.publish(&app);
        let init = fx.mcp(
            &code,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": V2025, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        );
        assert_eq!(init.status, 200, "{}", init.text());
        assert_eq!(last(&init)["result"]["protocolVersion"], V2025);
        let list = fx.mcp(&code, &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        assert_eq!(last(&list)["result"]["tools"][0]["name"], "Echo", "{}", list.text());
        let call = fx.call(&code, "Echo", json!({"text": "hi"}));
        let result = last(&call);
        assert_eq!(result["result"]["isError"], false, "{}", call.text());
        assert!(result["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("hi")), "{}", call.text());
        fx.assert_invariants();
    }
}
