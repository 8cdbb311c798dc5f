//! Unit enums written as their names in JSON (stored definitions, task records, sessions). Their
//! `Serialize` is serde's derive; their `Deserialize` reads the name as a `String` and looks it
//! up in [`Named::ALL`]. Why: serde's derived reader is compiled again for every enum and every
//! JSON reader, each with the name matching and the parser's string handling inlined (about
//! 1 KB of wasm each); this way every enum shares `String`'s reader, which the Worker links
//! anyway.

use serde::de::{Deserialize, Deserializer, Error};

/// A unit enum and the name of each variant: `name` is what the derived `Serialize` writes
/// (`tests::every_enum_reads_what_it_writes` holds them to it).
pub trait Named: Copy + 'static {
    /// Every variant.
    const ALL: &'static [Self];

    fn name(self) -> &'static str;

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }
}

/// The `Deserialize` of a [`Named`] enum (see [`deserialize_by_name`]).
pub fn deserialize<'de, D: Deserializer<'de>, T: Named>(d: D) -> Result<T, D::Error> {
    let name = String::deserialize(d)?;
    T::from_name(&name).ok_or_else(|| D::Error::custom(format_args!("unknown variant {name:?}")))
}

/// `impl Deserialize` by name for each [`Named`] enum listed.
macro_rules! deserialize_by_name {
    ($($t:ty),+) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::pure::named::deserialize(d)
            }
        }
    )+};
}
pub(crate) use deserialize_by_name;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::{json, Value};
    use std::fmt::Debug;

    fn reads_what_it_writes<T: Named + Serialize + DeserializeOwned + PartialEq + Debug>() {
        assert!(!T::ALL.is_empty());
        for v in T::ALL {
            let written = serde_json::to_value(v).unwrap();
            assert_eq!(written, json!(v.name()), "{v:?}");
            assert_eq!(serde_json::from_value::<T>(written.clone()).unwrap(), *v);
            assert_eq!(serde_json::from_str::<T>(&written.to_string()).unwrap(), *v);
            assert_eq!(T::from_name(v.name()), Some(*v));
        }
        let unknown = serde_json::from_str::<T>(r#""no-such-name""#).unwrap_err().to_string();
        assert!(unknown.starts_with(r#"unknown variant "no-such-name""#), "{unknown}");
        assert!(serde_json::from_value::<T>(Value::from(1)).is_err());
        assert!(serde_json::from_value::<T>(Value::Null).is_err());
    }

    #[test]
    fn every_enum_reads_what_it_writes() {
        reads_what_it_writes::<crate::pure::mode::Mode>();
        reads_what_it_writes::<crate::pure::backend::dify::mode::DifyMode>();
        reads_what_it_writes::<crate::pure::server::Status>();
        reads_what_it_writes::<crate::pure::client_auth::AuthMode>();
        reads_what_it_writes::<crate::pure::task_contract::Kind>();
        reads_what_it_writes::<crate::pure::task_contract::McpTaskStatus>();
        reads_what_it_writes::<crate::pure::protocol::version::Version>();
        reads_what_it_writes::<crate::pure::task::Status>();
        reads_what_it_writes::<crate::pure::backend::mcp::transport::Transport>();
        reads_what_it_writes::<crate::pure::protocol::tasks::TaskSupport>();
    }
}
