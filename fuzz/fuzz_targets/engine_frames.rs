//! Arbitrary frames (raw, or as TCP/UDP/ICMP/ARP payloads behind valid
//! headers) at a stack with live connections: counted drops, never a panic,
//! invariants hold (see `ixora_sim::fuzz::frames`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = ixora_sim::fuzz::frames(data) {
        panic!("{e}");
    }
});
