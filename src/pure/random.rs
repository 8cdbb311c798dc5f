//! Random bytes from the platform's CSPRNG: the runtime's `crypto.getRandomValues` in the
//! Worker, the `getrandom` crate on the host (tests, benches). The Worker called `getrandom`
//! too, whose JavaScript back end probes for Node.js and other hosts first and carries an error
//! text for every platform it knows (1 KiB of the bundle); the runtime's call is one import.

use std::fmt;

/// The platform gave no random bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the platform's random number generator gave no bytes")
    }
}

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) -> Result<(), Unavailable> {
    platform::fill(buf)
}

#[cfg(target_arch = "wasm32")]
mod platform {
    use wasm_bindgen::prelude::wasm_bindgen;

    #[wasm_bindgen]
    extern "C" {
        /// `crypto.getRandomValues` (at most 65,536 bytes a call, far more than any caller draws).
        #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues, catch)]
        fn get_random_values(buf: &mut [u8]) -> Result<(), wasm_bindgen::JsValue>;
    }

    pub fn fill(buf: &mut [u8]) -> Result<(), super::Unavailable> {
        get_random_values(buf).map_err(|_| super::Unavailable)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod platform {
    pub fn fill(buf: &mut [u8]) -> Result<(), super::Unavailable> {
        getrandom::getrandom(buf).map_err(|_| super::Unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_with_bytes_that_differ_between_calls() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        fill(&mut a).unwrap();
        fill(&mut b).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 32]);
    }
}
