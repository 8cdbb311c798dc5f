#![no_main]
//! See `flowgate_fuzz::uri_template` for what one input goes through and what is checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flowgate_fuzz::uri_template(data));
