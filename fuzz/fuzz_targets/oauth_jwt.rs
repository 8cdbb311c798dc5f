#![no_main]
//! See `flowgate_fuzz::oauth_jwt` for what one input goes through and what is checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flowgate_fuzz::oauth_jwt(data));
