//! The kind of an app (its `mode`): which Dify Service API mode, an HTTP tool, or another MCP
//! server. One place, so that every module can name a kind without depending on app validation.

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

impl crate::pure::named::Named for Mode {
    const ALL: &'static [Self] =
        &[Mode::Workflow, Mode::Chat, Mode::AdvancedChat, Mode::AgentChat, Mode::Completion, Mode::HttpTool, Mode::Mcp];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Mode);

const MODES: [(&str, Mode); 7] = [
    ("workflow", Mode::Workflow),
    ("chat", Mode::Chat),
    ("advanced-chat", Mode::AdvancedChat),
    ("agent-chat", Mode::AgentChat),
    ("completion", Mode::Completion),
    ("http-tool", Mode::HttpTool),
    ("mcp", Mode::Mcp),
];

impl Mode {
    /// Every mode's name, in the console's order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        MODES.iter().map(|(n, _)| *n)
    }

    pub fn parse(s: &str) -> Option<Mode> {
        MODES.iter().find(|(n, _)| *n == s).map(|(_, m)| *m)
    }

    pub fn as_str(self) -> &'static str {
        MODES.iter().find(|(_, m)| *m == self).map_or("", |(n, _)| n)
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
