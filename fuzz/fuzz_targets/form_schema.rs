#![no_main]
//! See `flowgate_fuzz::form_schema` for what one input goes through and what is checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flowgate_fuzz::form_schema(data));
