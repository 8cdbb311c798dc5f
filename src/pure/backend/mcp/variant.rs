//! Catalogs per client: an upstream may offer other tools (and resources, prompts) to a client
//! that declares sampling, elicitation or roots than to one that declares none (the reference
//! server registers its sampling tool only for clients that can sample). So Flowgate declares
//! to the upstream what the calling client declared, not a set of its own, and keeps one
//! upstream session and one cached catalog per declared set: a [`Variant`].
//!
//! Only what Flowgate can relay counts (`relay::ClientCaps`: sampling, `sampling.tools`,
//! elicitation form and URL mode, roots), so there are a handful of variants, each named by a
//! short canonical key. Flowgate's own reads (the console's refresh, background task polls)
//! declare nothing: the empty variant.

use serde_json::{json, Map, Value};

use crate::pure::mcp::relay::ClientCaps;
use crate::pure::protocol::meta;
use crate::pure::protocol::version::Version;

/// The entry the MCP endpoint adds to a request's header list with the [`Variant::key`] of what
/// its client declared. Not a valid header name, so no client can send it and no
/// `forward_headers` setting can name it.
pub const DECLARED_ENTRY: &str = ":flowgate-declared";

/// What a client declared, of what an upstream may ask it for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Variant(ClientCaps);

/// One letter per capability, in this order: the key lists those declared.
const LETTERS: [char; 5] = ['s', 't', 'f', 'u', 'r'];

impl Variant {
    /// The set as declared; `sampling.tools` without `sampling` is not sampling at all.
    pub fn of(caps: ClientCaps) -> Variant {
        Variant(ClientCaps { sampling_tools: caps.sampling && caps.sampling_tools, ..caps })
    }

    /// Nothing declared: what Flowgate's own reads use.
    pub fn none() -> Variant {
        Variant::default()
    }

    /// Every variant there is, once each (24: `sampling.tools` only with sampling).
    pub fn all() -> impl Iterator<Item = Variant> {
        let on = |bits: u8, i: u8| bits & (1 << i) != 0;
        (0..32u8).filter(move |b| on(*b, 0) || !on(*b, 1)).map(move |b| {
            Variant(ClientCaps {
                sampling: on(b, 0),
                sampling_tools: on(b, 1),
                elicitation_form: on(b, 2),
                elicitation_url: on(b, 3),
                roots: on(b, 4),
            })
        })
    }

    pub fn caps(self) -> ClientCaps {
        self.0
    }

    fn flags(self) -> [bool; 5] {
        let c = self.0;
        [c.sampling, c.sampling_tools, c.elicitation_form, c.elicitation_url, c.roots]
    }

    /// The canonical name of the set: the letters of what was declared (`s` sampling, `t`
    /// sampling.tools, `f` elicitation form mode, `u` URL mode, `r` roots), `none` for nothing.
    pub fn key(self) -> String {
        let key: String = LETTERS.iter().zip(self.flags()).filter(|(_, on)| *on).map(|(l, _)| *l).collect();
        if key.is_empty() {
            "none".into()
        } else {
            key
        }
    }

    /// The set a [`Variant::key`] names; anything else (a made-up entry) is nothing declared.
    pub fn parse(key: &str) -> Variant {
        let has = |l: char| key != "none" && key.contains(l);
        if !key.chars().all(|c| LETTERS.contains(&c)) && key != "none" {
            return Variant::none();
        }
        Variant::of(ClientCaps {
            sampling: has('s'),
            sampling_tools: has('t'),
            elicitation_form: has('f'),
            elicitation_url: has('u'),
            roots: has('r'),
        })
    }

    /// The client capabilities declared to the upstream (in `initialize`, or a 2026-07-28
    /// request's `_meta`): exactly the set, each as the spec writes it with no sub-feature
    /// Flowgate cannot relay (no `roots.listChanged`: list changes do not pass through).
    pub fn capabilities(self) -> Value {
        let c = self.0;
        let mut caps = Map::new();
        if c.sampling {
            caps.insert("sampling".into(), if c.sampling_tools { json!({"tools": {}}) } else { json!({}) });
        }
        if c.elicitation_form || c.elicitation_url {
            let mut e = Map::new();
            if c.elicitation_form {
                e.insert("form".into(), json!({}));
            }
            if c.elicitation_url {
                e.insert("url".into(), json!({}));
            }
            caps.insert("elicitation".into(), Value::Object(e));
        }
        if c.roots {
            caps.insert("roots".into(), json!({}));
        }
        Value::Object(caps)
    }

    /// What the client of a request declared: a 2026-07-28 client in the message's own
    /// `_meta` (each request says it), an earlier one at `initialize` (this message, or the one
    /// Flowgate's session id carries: `session`; `None`: no valid session id, so nothing
    /// declared). A batch (earlier revisions only) is its session's.
    pub fn of_request(message: &Value, version: Option<Version>, session: Option<ClientCaps>) -> Variant {
        if message.get("method").and_then(Value::as_str) == Some("initialize") {
            return Variant::of(ClientCaps::from_declared(message.pointer("/params/capabilities")));
        }
        if version.is_some_and(Version::is_stateless) {
            let declared = message.pointer("/params/_meta").and_then(|m| m.get(meta::CLIENT_CAPABILITIES));
            return Variant::of(ClientCaps::from_declared(declared));
        }
        Variant::of(session.unwrap_or_default())
    }
}

/// Whether a cached list of some variant, read at `fetched_ms`, may still be used when the
/// list of the empty variant (the one a console refresh re-reads) was read at `base_ms`: a
/// refresh makes every variant read before it stale. `None`: no such list is cached.
pub fn still_current(fetched_ms: u64, base_ms: Option<u64>) -> bool {
    base_ms.is_none_or(|base| fetched_ms >= base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(v: Value) -> ClientCaps {
        ClientCaps::from_declared(Some(&v))
    }

    #[test]
    fn keys_are_canonical_and_read_back() {
        assert_eq!(Variant::none().key(), "none");
        let full = Variant::of(caps(
            json!({"sampling": {"tools": {}}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}}),
        ));
        assert_eq!(full.key(), "stfur");
        // `elicitation: {}` is form mode; sub-features Flowgate does not relay do not count.
        let plain =
            Variant::of(caps(json!({"sampling": {"context": {}}, "elicitation": {}, "experimental": {"x": {}}})));
        assert_eq!(plain.key(), "sf");
        assert_eq!(Variant::of(caps(json!({"elicitation": {"url": {}}}))).key(), "u");
        for v in [Variant::none(), full, plain, Variant::of(caps(json!({"roots": {}})))] {
            assert_eq!(Variant::parse(&v.key()), v, "{}", v.key());
        }
        // The same set, declared in other words, is the same variant.
        assert_eq!(Variant::of(caps(json!({"roots": {}, "sampling": {}}))).key(), "sr");
        assert_eq!(Variant::of(caps(json!({"sampling": {}, "roots": {"listChanged": false}}))).key(), "sr");
        // All 5 capabilities give 24 sets (tools only with sampling), each its own key.
        let keys: std::collections::BTreeSet<String> = Variant::all().map(Variant::key).collect();
        assert_eq!((keys.len(), Variant::all().count()), (24, 24));
        assert!(Variant::all().all(|v| Variant::parse(&v.key()) == v && Variant::of(v.caps()) == v));
    }

    #[test]
    fn the_declared_entry_is_no_header_a_client_or_an_app_can_name() {
        assert!(!crate::pure::http_field::is_header_name(DECLARED_ENTRY));
        let app = json!({"forward_headers": {"X-Declared": DECLARED_ENTRY}});
        assert!(crate::pure::backend::mcp::headers::check_forward_headers(app.as_object().unwrap()).is_err());
    }

    #[test]
    fn a_made_up_key_declares_nothing() {
        for k in ["", "x", "s x", "NONE", "sfz"] {
            assert_eq!(Variant::parse(k), Variant::none(), "{k:?}");
        }
        // sampling.tools alone is no sampling.
        assert_eq!(Variant::parse("t"), Variant::none());
        assert_eq!(Variant::parse("rs"), Variant::parse("sr"));
    }

    #[test]
    fn the_upstream_is_told_exactly_the_set() {
        assert_eq!(Variant::none().capabilities(), json!({}));
        assert_eq!(
            Variant::parse("stfur").capabilities(),
            json!({"sampling": {"tools": {}}, "elicitation": {"form": {}, "url": {}}, "roots": {}})
        );
        assert_eq!(Variant::parse("s").capabilities(), json!({"sampling": {}}));
        assert_eq!(Variant::parse("u").capabilities(), json!({"elicitation": {"url": {}}}));
        assert_eq!(Variant::parse("fr").capabilities(), json!({"elicitation": {"form": {}}, "roots": {}}));
        // What is declared reads back as the same variant (the round trip an upstream makes).
        for k in ["none", "s", "st", "f", "u", "fu", "r", "stfur", "sur"] {
            let v = Variant::parse(k);
            assert_eq!(Variant::of(ClientCaps::from_declared(Some(&v.capabilities()))), v, "{k}");
        }
    }

    #[test]
    fn a_request_is_its_clients() {
        let session = Some(caps(json!({"sampling": {}, "roots": {}})));
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        assert_eq!(Variant::of_request(&msg, Some(Version::V2025_11_25), session).key(), "sr");
        assert_eq!(Variant::of_request(&msg, None, session).key(), "sr");
        assert_eq!(Variant::of_request(&msg, Some(Version::V2025_06_18), None), Variant::none());
        // 2026-07-28: the message's own _meta, whatever a session id would say.
        let stateless = json!({"method": "tools/list", "params": {"_meta": {(meta::CLIENT_CAPABILITIES): {"elicitation": {"url": {}}}}}});
        assert_eq!(Variant::of_request(&stateless, Some(Version::V2026_07_28), session).key(), "u");
        assert_eq!(Variant::of_request(&msg, Some(Version::V2026_07_28), session), Variant::none());
        let init = json!({"method": "initialize", "params": {"capabilities": {"elicitation": {}}}});
        assert_eq!(Variant::of_request(&init, None, session).key(), "f");
        // A 2025 client's _meta is not where it declares.
        assert_eq!(Variant::of_request(&stateless, Some(Version::V2025_11_25), None), Variant::none());
    }

    #[test]
    fn a_refresh_makes_older_lists_stale() {
        assert!(still_current(100, None));
        assert!(still_current(100, Some(100)));
        assert!(still_current(101, Some(100)));
        assert!(!still_current(99, Some(100)));
    }
}
