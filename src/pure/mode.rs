//! The kind of an app (its `mode`): which Dify Service API mode, an HTTP tool, or another MCP
//! server. One place, so that every module can name a kind without depending on app validation.

use crate::pure::named::Named;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Workflow,
    Chat,
    AdvancedChat,
    AgentChat,
    Completion,
    HttpTool,
    Mcp,
}

impl Named for Mode {
    const ALL: &'static [Self] =
        &[Mode::Workflow, Mode::Chat, Mode::AdvancedChat, Mode::AgentChat, Mode::Completion, Mode::HttpTool, Mode::Mcp];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Mode);

impl Mode {
    /// Every mode's name, in the console's order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        <Mode as Named>::ALL.iter().map(|m| m.as_str())
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::from_name(s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Workflow => "workflow",
            Mode::Chat => "chat",
            Mode::AdvancedChat => "advanced-chat",
            Mode::AgentChat => "agent-chat",
            Mode::Completion => "completion",
            Mode::HttpTool => "http-tool",
            Mode::Mcp => "mcp",
        }
    }

    /// Modes served by Dify's Service API.
    pub fn is_dify(self) -> bool {
        !matches!(self, Mode::HttpTool | Mode::Mcp)
    }

    /// Chat modes take the user's message as a `query` argument.
    pub fn takes_query(self) -> bool {
        matches!(self, Mode::Chat | Mode::AdvancedChat | Mode::AgentChat)
    }
}
