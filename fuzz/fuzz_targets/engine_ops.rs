//! The TCP engine under arbitrary sequences of network events and
//! application calls (see `ixora_sim::fuzz`): no panic, invariants hold,
//! delivered bytes are the bytes sent.
#![no_main]

use ixora_sim::fuzz::{run, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|ops: Vec<Op>| {
    if let Err(e) = run(&ops) {
        panic!("{e}");
    }
});
