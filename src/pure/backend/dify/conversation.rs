//! Conversations that continue across calls, for Dify chat apps (chat, advanced-chat,
//! agent-chat) whose settings say `conversations: true`.
//!
//! Dify keeps a chat app's conversations and binds each to the end user (`user`) that started
//! it: a `conversation_id` sent with another user is answered 404 "Conversation Not Exists",
//! exactly as an unknown one is. Flowgate's `user` is stable per caller (a client key's name,
//! an OAuth subject, or the client on an open server: `mcp::server::end_user`), so a caller can
//! continue only its own conversations, and is never told whether an id exists for someone else.
//!
//! A call of such an app always sends `conversation_id` (empty to start a new conversation, as
//! Dify accepts): the request body itself says the call takes part in conversations, so a call
//! stored by a durable task reads back the same way.

use crate::json;
use serde_json::{Map, Value};

use crate::pure::error::json_kind;
use crate::pure::outcome::Outcome;

/// The tool argument, the request member, the structured output member.
pub const ARGUMENT: &str = "conversation_id";
/// The setting in a Dify app's backend settings (off by default).
pub const SETTING: &str = "conversations";
/// Where a result carries the conversation in `_meta`, for clients that read it there.
pub const META_KEY: &str = "flowgate/conversationId";

/// Said in the tool's description, so that a model knows how to hold a conversation.
pub const DESCRIPTION_NOTE: &str = "This tool keeps conversations: each result carries a conversation_id. To continue \
the same conversation (the app remembers the earlier messages), pass that conversation_id with the next query; omit \
it to start a new conversation.";

const ARGUMENT_DESCRIPTION: &str = "Optional. The conversation_id of an earlier result of this tool, to continue that \
conversation; omit it to start a new one.";

/// The `conversation_id` property of the tool's input schema.
pub fn input_property() -> Value {
    json!({"type": "string", "description": ARGUMENT_DESCRIPTION})
}

/// Adds `conversation_id` to a chat tool's output schema (`{answer}`).
pub fn add_output_property(schema: &mut Value) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            ARGUMENT.into(),
            json!({"type": "string", "description": "Pass it as conversation_id to continue this conversation"}),
        );
    }
}

/// The conversation a call continues, from its arguments: `""` starts a new one. Dify takes only
/// UUIDs; anything else is refused here with what to send instead.
pub fn argument(args: Option<&Map<String, Value>>) -> Result<String, String> {
    match args.and_then(|a| a.get(ARGUMENT)) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(String::new()),
        Some(Value::String(s)) if is_uuid(s) => Ok(s.to_ascii_lowercase()),
        Some(Value::String(s)) => Err(format!(
            "argument '{ARGUMENT}' must be the conversation_id an earlier result of this tool returned (a UUID, got {}); \
             omit it to start a new conversation",
            crate::pure::quote::quote_input(s)
        )),
        Some(v) => Err(format!("argument '{ARGUMENT}' must be a string (got {})", json_kind(v))),
    }
}

/// `8-4-4-4-12` hexadecimal digits: the shape of Dify's ids.
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Puts the conversation into a chat request body (see the module's note on `""`).
pub fn put(body: &mut Value, conversation_id: String) {
    body[ARGUMENT] = conversation_id.into();
}

/// Whether a request body takes part in conversations.
pub fn is_on(sent: &Value) -> bool {
    sent.get(ARGUMENT).is_some_and(Value::is_string)
}

/// The conversation a request continues, if it continues one.
fn continued(sent: &Value) -> Option<&str> {
    sent.get(ARGUMENT).and_then(Value::as_str).filter(|c| !c.is_empty())
}

/// The outcome with the conversation Dify named (`answer` is its blocking answer or its
/// `message_end` event) in the structured output, when the request takes part in conversations.
pub fn attach(outcome: Outcome, sent: &Value, answer: &Value) -> Outcome {
    let id = answer.get(ARGUMENT).and_then(Value::as_str).filter(|c| !c.is_empty());
    match (outcome, id) {
        (Outcome::Ok { text, structured: Some(Value::Object(mut s)) }, Some(id)) if is_on(sent) => {
            s.insert(ARGUMENT.into(), id.into());
            Outcome::Ok { text, structured: Some(Value::Object(s)) }
        }
        (outcome, _) => outcome,
    }
}

/// A refusal of a call that continues a conversation, in words: Dify answers 404 for an id that
/// is unknown and for one that belongs to another user alike, and so does this message.
pub fn refused(sent: &Value, status: u16) -> Option<String> {
    let id = continued(sent)?;
    is_refusal(sent, status).then(|| {
        format!(
            "no conversation {id} of yours: a conversation_id continues only a conversation that this caller \
             started with this tool (it may also have been deleted in Dify); omit conversation_id to start a new \
             conversation"
        )
    })
}

/// Whether a non-2xx answer to `sent` is Dify refusing the conversation ([`refused`]).
pub fn is_refusal(sent: &Value, status: u16) -> bool {
    status == 404 && continued(sent).is_some()
}

/// The conversation of a finished call's structured output, when its request took part in
/// conversations.
pub fn of_result<'a>(sent: Option<&Value>, structured: Option<&'a Value>) -> Option<&'a str> {
    if !sent.is_some_and(is_on) {
        return None;
    }
    structured?.get(ARGUMENT)?.as_str()
}

/// Shows the conversation in a tool result for every client: in `_meta` and as a second text
/// item (clients that pass only text to the model, and revisions without structured output).
pub fn show(result: &mut Value, id: &str) {
    if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
        content.push(json!({
            "type": "text",
            "text": format!("conversation_id: {id} (pass it as conversation_id to continue this conversation)")
        }));
    }
    result["_meta"][META_KEY] = id.into();
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6f9619ff-8b86-d011-b42d-00cf4fc964ff";

    #[test]
    fn the_argument_is_a_uuid_or_nothing() {
        let args = |v: Value| json!({ ARGUMENT: v }).as_object().cloned();
        assert_eq!(argument(None), Ok(String::new()));
        assert_eq!(argument(args(Value::Null).as_ref()), Ok(String::new()));
        assert_eq!(argument(args(json!("")).as_ref()), Ok(String::new()));
        assert_eq!(argument(args(json!(ID.to_uppercase())).as_ref()), Ok(ID.to_string()));
        let e = argument(args(json!("yesterday's chat")).as_ref()).unwrap_err();
        assert!(e.contains("a UUID") && e.contains("omit it to start a new conversation"), "{e}");
        let e = argument(args(json!(42)).as_ref()).unwrap_err();
        assert!(e.contains("must be a string (got a number)"), "{e}");
        assert!(argument(args(json!("6f9619ff-8b86-d011-b42d-00cf4fc964f")).as_ref()).is_err());
        assert!(argument(args(json!("6f9619ff8b86-d011-b42d-00cf4fc964ff-")).as_ref()).is_err());
    }

    #[test]
    fn the_request_says_whether_the_call_takes_part() {
        let mut body = json!({"query": "hi", "user": "alice"});
        assert!(!is_on(&body));
        put(&mut body, String::new());
        assert!(is_on(&body) && continued(&body).is_none());
        put(&mut body, ID.into());
        assert_eq!(continued(&body), Some(ID));
    }

    #[test]
    fn the_answer_names_the_conversation_only_when_asked() {
        let ok = || Outcome::Ok { text: "hi".into(), structured: Some(json!({"answer": "hi"})) };
        let answer = json!({"answer": "hi", ARGUMENT: ID});
        let on = json!({ARGUMENT: ""});
        match attach(ok(), &on, &answer) {
            Outcome::Ok { structured, .. } => assert_eq!(structured, Some(json!({"answer": "hi", ARGUMENT: ID}))),
            other => panic!("{other:?}"),
        }
        assert_eq!(attach(ok(), &json!({}), &answer), ok(), "the setting is off");
        assert_eq!(attach(ok(), &on, &json!({"answer": "hi"})), ok(), "Dify named none");
        let failed = Outcome::Failed("x".into());
        assert_eq!(attach(failed.clone(), &on, &answer), failed);
        let with = json!({"answer": "hi", ARGUMENT: ID});
        assert_eq!(of_result(Some(&on), Some(&with)), Some(ID));
        assert_eq!(of_result(Some(&json!({})), Some(&with)), None, "a workflow output named conversation_id");
        assert_eq!(of_result(None, Some(&with)), None);
    }

    #[test]
    fn another_callers_conversation_is_refused_without_saying_it_exists() {
        let sent = json!({ARGUMENT: ID});
        let m = refused(&sent, 404).unwrap();
        assert!(m.starts_with(&format!("no conversation {ID} of yours")), "{m}");
        assert!(m.contains("omit conversation_id to start a new conversation"), "{m}");
        assert_eq!(refused(&sent, 400), None);
        assert_eq!(refused(&json!({ARGUMENT: ""}), 404), None, "a new conversation's 404 is something else");
        assert_eq!(refused(&json!({}), 404), None);
    }

    #[test]
    fn a_result_shows_the_conversation_to_every_client() {
        let mut r = json!({"content": [{"type": "text", "text": "hi"}], "isError": false});
        show(&mut r, ID);
        assert_eq!(r["content"].as_array().unwrap().len(), 2);
        assert!(r["content"][1]["text"].as_str().unwrap().starts_with(&format!("conversation_id: {ID}")));
        assert_eq!(r["_meta"][META_KEY], ID);
        let mut schema =
            json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
        add_output_property(&mut schema);
        assert_eq!(schema["properties"][ARGUMENT]["type"], "string");
        assert_eq!(schema["required"], json!(["answer"]), "a result without one still validates");
    }
}
