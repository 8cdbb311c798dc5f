//! Which of Dify's app modes an app is: what its Service API call looks like, how its answer
//! reads, and how a run of it is stopped. A field of the Dify config ([`super::config::DifyConfig`]),
//! so only a Dify backend has one.

use crate::pure::named::Named;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DifyMode {
    Workflow,
    Chat,
    AdvancedChat,
    AgentChat,
    Completion,
}

impl Named for DifyMode {
    const ALL: &'static [Self] =
        &[DifyMode::Workflow, DifyMode::Chat, DifyMode::AdvancedChat, DifyMode::AgentChat, DifyMode::Completion];

    fn name(self) -> &'static str {
        match self {
            DifyMode::Workflow => "workflow",
            DifyMode::Chat => "chat",
            DifyMode::AdvancedChat => "advanced-chat",
            DifyMode::AgentChat => "agent-chat",
            DifyMode::Completion => "completion",
        }
    }
}
crate::pure::named::deserialize_by_name!(DifyMode);

impl DifyMode {
    /// Chat modes take the user's message as a `query` argument.
    pub fn takes_query(self) -> bool {
        matches!(self, DifyMode::Chat | DifyMode::AdvancedChat | DifyMode::AgentChat)
    }
}
