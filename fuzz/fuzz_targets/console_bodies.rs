#![no_main]
//! See `flowgate_fuzz::console_bodies` for what one input goes through and what is checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flowgate_fuzz::console_bodies(data));
