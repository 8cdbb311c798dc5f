//! A small memo for isolate memory: values by key, each fresh for a while, then served once
//! more while one refresh runs beside the response ("stale while revalidate"), then gone. The
//! clock comes in as an argument, so the policy is tested here; the shell keeps one memo of
//! resolved server definitions and one of end users already recorded.
//!
//! Bounded: at most `capacity` entries; adding one more evicts the oldest. An isolate serves
//! many server codes only under a scan, and then the oldest entries are the ones to lose.

use std::collections::HashMap;

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<V> {
    /// Younger than the freshness window: use it.
    Fresh(V),
    /// Past the window but within twice it, and no refresh is running: use it, and refresh
    /// it now (off the response path). Later lookups see `Fresh` until the refresh lands
    /// ([`Memo::put`]) or fails ([`Memo::refresh_failed`]).
    Refresh(V),
    /// Nothing usable: look it up before answering.
    Missing,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    stored_ms: u64,
    refreshing: bool,
}

#[derive(Debug)]
pub struct Memo<V> {
    entries: HashMap<String, Slot<V>>,
    capacity: usize,
}

impl<V: Clone> Memo<V> {
    pub fn new(capacity: usize) -> Memo<V> {
        Memo { entries: HashMap::new(), capacity: capacity.max(1) }
    }

    /// The value of `key` at `now_ms` for values fresh for `fresh_ms`.
    pub fn get(&mut self, key: &str, now_ms: u64, fresh_ms: u64) -> Lookup<V> {
        let Some(slot) = self.entries.get_mut(key) else { return Lookup::Missing };
        let age = now_ms.saturating_sub(slot.stored_ms);
        if age < fresh_ms {
            Lookup::Fresh(slot.value.clone())
        } else if age < fresh_ms.saturating_mul(2) {
            if slot.refreshing {
                Lookup::Fresh(slot.value.clone())
            } else {
                slot.refreshing = true;
                Lookup::Refresh(slot.value.clone())
            }
        } else {
            self.entries.remove(key);
            Lookup::Missing
        }
    }

    pub fn put(&mut self, key: &str, value: V, now_ms: u64) {
        if !self.entries.contains_key(key) && self.entries.len() >= self.capacity {
            let oldest = self.entries.iter().min_by_key(|(_, s)| s.stored_ms).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(key.to_string(), Slot { value, stored_ms: now_ms, refreshing: false });
    }

    pub fn remove(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// A refresh that could not finish: the next lookup past the window may start another.
    pub fn refresh_failed(&mut self, key: &str) {
        if let Some(slot) = self.entries.get_mut(key) {
            slot.refreshing = false;
        }
    }

    /// Whether `key` was not marked within `window_ms`; marks it. For work done once per key
    /// and window (recording an end user).
    pub fn first_in(&mut self, key: &str, now_ms: u64, window_ms: u64) -> bool
    where
        V: Default,
    {
        match self.entries.get(key) {
            Some(slot) if now_ms.saturating_sub(slot.stored_ms) < window_ms => false,
            _ => {
                self.put(key, V::default(), now_ms);
                true
            }
        }
    }

    /// Whether `key` was put within `window_ms` of `now_ms` (a plain look: nothing is marked,
    /// nothing refreshed).
    pub fn within(&self, key: &str, now_ms: u64, window_ms: u64) -> bool {
        self.entries.get(key).is_some_and(|slot| now_ms.saturating_sub(slot.stored_ms) < window_ms)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_then_one_refresh_then_missing() {
        let mut m = Memo::new(8);
        assert_eq!(m.get("a", 0, 5000), Lookup::Missing);
        m.put("a", 1, 1000);
        assert_eq!(m.get("a", 1000, 5000), Lookup::Fresh(1));
        assert_eq!(m.get("a", 5999, 5000), Lookup::Fresh(1));
        // Past the window: one caller refreshes, the others keep using the value meanwhile.
        assert_eq!(m.get("a", 6000, 5000), Lookup::Refresh(1));
        assert_eq!(m.get("a", 7000, 5000), Lookup::Fresh(1));
        // The refresh landed: fresh again from its time.
        m.put("a", 2, 7500);
        assert_eq!(m.get("a", 12_000, 5000), Lookup::Fresh(2));
        assert_eq!(m.get("a", 12_500, 5000), Lookup::Refresh(2));
        // A failed refresh lets the next lookup try again.
        m.refresh_failed("a");
        assert_eq!(m.get("a", 13_000, 5000), Lookup::Refresh(2));
        // Twice the window without a refresh landing: gone, looked up before answering.
        assert_eq!(m.get("a", 17_500, 5000), Lookup::Missing);
        assert!(m.is_empty());
    }

    #[test]
    fn removal_and_a_zero_window() {
        let mut m = Memo::new(8);
        m.put("a", 1, 0);
        m.remove("a");
        assert_eq!(m.get("a", 0, 5000), Lookup::Missing);
        // A window of 0 turns the memo off: nothing is ever served from it.
        m.put("a", 1, 100);
        assert_eq!(m.get("a", 100, 0), Lookup::Missing);
    }

    #[test]
    fn bounded_evicting_the_oldest() {
        let mut m = Memo::new(3);
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            m.put(k, i, i as u64);
        }
        m.put("b", 10, 10); // replacing keeps the count
        assert_eq!(m.len(), 3);
        m.put("d", 4, 11);
        assert_eq!(m.len(), 3);
        assert_eq!(m.get("a", 11, 1000), Lookup::Missing, "the oldest went");
        assert_eq!(m.get("c", 11, 1000), Lookup::Fresh(2));
        assert_eq!(m.get("b", 11, 1000), Lookup::Fresh(10));
    }

    #[test]
    fn within_a_window_without_marking() {
        let mut refused: Memo<()> = Memo::new(4);
        assert!(!refused.within("code", 0, 1000));
        refused.put("code", (), 5000);
        assert!(refused.within("code", 5000, 1000));
        assert!(refused.within("code", 5999, 1000));
        assert!(!refused.within("code", 6000, 1000), "the window is over");
        assert!(!refused.within("code", 6500, 1000), "and looking did not renew it");
        assert!(!refused.within("other", 5500, 1000));
    }

    #[test]
    fn first_in_a_window() {
        let mut seen: Memo<()> = Memo::new(4);
        let hour = 3_600_000;
        assert!(seen.first_in("srv/user", 0, hour));
        assert!(!seen.first_in("srv/user", hour - 1, hour));
        assert!(seen.first_in("srv/other", 10, hour));
        assert!(seen.first_in("srv/user", hour, hour), "an hour later it is recorded again");
        assert!(!seen.first_in("srv/user", hour + 5, hour));
    }
}
