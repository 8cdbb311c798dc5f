//! The deterministic simulator (see runtime): filled in next.
