//! Workers KV in memory: text values by (binding, key), each with its expiry on the virtual
//! clock. Eventual consistency is not modelled: a write is read back at once.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::runtime::{Error, Kind, Result};

#[derive(Default)]
pub struct Kv {
    entries: RefCell<BTreeMap<(String, String), (String, u64)>>,
}

impl Kv {
    pub fn get(&self, binding: &str, key: &str, now_ms: u64) -> Option<String> {
        let mut entries = self.entries.borrow_mut();
        let k = (binding.to_string(), key.to_string());
        match entries.get(&k) {
            Some((_, expires)) if *expires <= now_ms => {
                entries.remove(&k);
                None
            }
            Some((v, _)) => Some(v.clone()),
            None => None,
        }
    }

    /// KV refuses a TTL under 60 seconds; so does this, so the shell cannot rely on one.
    pub fn put(&self, binding: &str, key: &str, value: &str, ttl_seconds: u64, now_ms: u64) -> Result<()> {
        if ttl_seconds < 60 {
            return Err(Error::new(
                Kind::Kv,
                format!(
                    "KV PUT failed: 400 Invalid expiration_ttl of {ttl_seconds}. Expiration TTL must be at least 60."
                ),
            ));
        }
        let expires = now_ms.saturating_add(ttl_seconds.saturating_mul(1000));
        self.entries.borrow_mut().insert((binding.to_string(), key.to_string()), (value.to_string(), expires));
        Ok(())
    }

    pub fn delete(&self, binding: &str, key: &str) {
        self.entries.borrow_mut().remove(&(binding.to_string(), key.to_string()));
    }

    /// Every live key of `binding` (a test's view).
    pub fn keys(&self, binding: &str, now_ms: u64) -> Vec<String> {
        self.entries
            .borrow()
            .iter()
            .filter(|((b, _), (_, exp))| b == binding && *exp > now_ms)
            .map(|((_, k), _)| k.clone())
            .collect()
    }
}
