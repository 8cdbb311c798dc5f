//! An app's `mode` as the console, D1 rows and stored definitions spell it: the name of its
//! backend kind, and of the Dify app mode for a Dify app. Parsed once where it arrives and turned
//! into a [`Backend`](crate::pure::backend::config::Backend) with its settings
//! (`Backend::from_settings`); the backend alone says the kind from then on, and writes its
//! mode back (`Backend::mode`).

use crate::pure::backend::dify::mode::DifyMode;
use crate::pure::named::Named;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Dify(DifyMode),
    HttpTool,
    Mcp,
}

impl Named for Mode {
    const ALL: &'static [Self] = &[
        Mode::Dify(DifyMode::Workflow),
        Mode::Dify(DifyMode::Chat),
        Mode::Dify(DifyMode::AdvancedChat),
        Mode::Dify(DifyMode::AgentChat),
        Mode::Dify(DifyMode::Completion),
        Mode::HttpTool,
        Mode::Mcp,
    ];

    fn name(self) -> &'static str {
        self.as_str()
    }
}
crate::pure::named::deserialize_by_name!(Mode);

impl serde::Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

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
            Mode::Dify(m) => m.name(),
            Mode::HttpTool => "http-tool",
            Mode::Mcp => "mcp",
        }
    }

    /// The Dify app mode, for a Dify app.
    pub fn dify(self) -> Option<DifyMode> {
        match self {
            Mode::Dify(m) => Some(m),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each wire name reads into one mode and is written back as it came.
    #[test]
    fn every_wire_mode_round_trips() {
        let names = ["workflow", "chat", "advanced-chat", "agent-chat", "completion", "http-tool", "mcp"];
        assert_eq!(Mode::names().collect::<Vec<_>>(), names);
        for name in names {
            let mode = Mode::parse(name).unwrap();
            assert_eq!(serde_json::to_value(mode).unwrap(), serde_json::json!(name));
            assert_eq!(serde_json::from_value::<Mode>(serde_json::json!(name)).unwrap(), mode);
        }
        assert_eq!(Mode::parse("advanced-chat"), Some(Mode::Dify(DifyMode::AdvancedChat)));
        assert_eq!(Mode::parse("Workflow"), None);
        assert_eq!(Mode::parse("dify"), None);
    }
}
