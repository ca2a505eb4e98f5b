//! The stack service against an application that sends any control
//! message and stores anything into its shared memory (see
//! `ixora_service::testkit::vandalise`). After each input the vandal
//! disconnects; the service must still run, have torn its app down, and
//! echo a well-behaved app's bytes intact. The service runs in-process on
//! the loopback wire, once for the whole fuzzing run.
#![no_main]

use ixora_service::testkit::{self, wait_gone, RawApp, Rig, VandalOp};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;

struct World {
    rig: Rig,
    good: RawApp,
}

/// The service's control socket, removed when the fuzzer exits (the
/// world lives in a static and is never dropped).
static SOCKET: OnceLock<std::path::PathBuf> = OnceLock::new();

extern "C" fn remove_socket() {
    if let Some(p) = SOCKET.get() {
        let _ = std::fs::remove_file(p);
    }
}

unsafe extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rig = Rig::start("fuzz").expect("service starts");
        let _ = SOCKET.set(rig.socket.clone());
        // SAFETY: atexit(3) registers a function taking nothing that only
        // removes a file; libFuzzer ends with exit(3), which runs it.
        unsafe { atexit(remove_socket) };
        let good = RawApp::attach(&rig).expect("good app attaches");
        World { rig, good }
    })
}

fuzz_target!(|ops: Vec<VandalOp>| {
    let w = world();
    let vandal = RawApp::attach(&w.rig).expect("vandal attaches");
    let id = vandal.id;
    let mut socks = Vec::new();
    let ops = &ops[..ops.len().min(256)];
    if let Err(e) = testkit::vandalise(&vandal, ops, &mut socks) {
        panic!("the service stopped answering: {e}");
    }
    assert!(w.rig.alive(), "the service died");
    drop(vandal);
    if let Err(e) = wait_gone(&w.good, id, Duration::from_secs(5)) {
        panic!("{e}");
    }
    let data: Vec<u8> = (0..2000u32).map(|i| (i * 13) as u8).collect();
    if let Err(e) = w.good.echo(&data, Duration::from_secs(5)) {
        panic!("good app's echo: {e}");
    }
});
