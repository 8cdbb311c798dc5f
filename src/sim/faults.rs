//! What may go wrong in a run, and how often: each field a probability per opportunity, decided
//! by the seeded generator, so a failing seed replays the same faults at the same moments.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// A KV call fails (`Err`, nothing written or read).
    pub kv_error: f64,
    /// A KV call waits 1..=`kv_latency_max_ms` of virtual time first.
    pub kv_latency: f64,
    pub kv_latency_max_ms: u64,
    /// A D1 call fails (`Err`; a batch changes nothing).
    pub d1_error: f64,
    pub d1_latency: f64,
    pub d1_latency_max_ms: u64,
    /// `fetch` never answers (no headers, ever): the caller's own deadline must end it.
    pub fetch_hang: f64,
    /// `fetch` fails as if the connection were reset before any answer.
    pub fetch_reset: f64,
    /// The body stream yields `Err` after a random number of its chunks.
    pub body_reset: f64,
    /// The body stream ends cleanly after a random number of its chunks (short body).
    pub body_truncate: f64,
    /// Before a call to a Durable Object, its instance is dropped (storage and alarm kept) and
    /// created again, as after a restart or a move.
    pub object_restart: f64,
    /// Before a client request, the isolate is evicted (`Worker::evict_isolate`).
    pub isolate_evict: f64,
}

impl Faults {
    /// Every kind at `p`, latencies up to `max_ms` (a soak run's setting).
    pub fn all(p: f64, max_ms: u64) -> Faults {
        Faults {
            kv_error: p,
            kv_latency: p,
            kv_latency_max_ms: max_ms,
            d1_error: p,
            d1_latency: p,
            d1_latency_max_ms: max_ms,
            fetch_hang: p,
            fetch_reset: p,
            body_reset: p,
            body_truncate: p,
            object_restart: p,
            isolate_evict: p,
        }
    }
}

/// How many times each fault was considered and how many times it happened.
#[derive(Debug, Clone, Default)]
pub struct FaultCounts {
    pub considered: BTreeMap<&'static str, u64>,
    pub happened: BTreeMap<&'static str, u64>,
}

impl FaultCounts {
    pub fn record(&mut self, kind: &'static str, happened: bool) {
        *self.considered.entry(kind).or_default() += 1;
        if happened {
            *self.happened.entry(kind).or_default() += 1;
        }
    }

    pub fn happened(&self, kind: &str) -> u64 {
        self.happened.get(kind).copied().unwrap_or(0)
    }

    pub fn considered(&self, kind: &str) -> u64 {
        self.considered.get(kind).copied().unwrap_or(0)
    }
}
