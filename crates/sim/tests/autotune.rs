//! Buffer auto-tuning on a long path: a connection's receive buffer grows
//! with what its application reads each round trip (Linux's
//! `tcp_rcv_space_adjust`), and its send buffer with the congestion window
//! (`tcp_sndbuf_expand`), so one connection fills a path whose
//! bandwidth-delay product is many times the initial 256 KiB.

use ixora_core::{CcAlgorithm, Duration, StackConfig};
use ixora_sim::{LinkConfig, Transfer, TransferConfig, TransferReport};

/// 1 Gbit/s with a 20 ms round trip (2.5 MB in flight to fill it), and a
/// queue that holds that much: no loss, so the buffers alone set the pace.
fn long_path() -> LinkConfig {
    LinkConfig {
        rate_bps: 1_000_000_000,
        delay: Duration::from_millis(10),
        queue_bytes: 4 << 20,
        ..LinkConfig::default()
    }
}

fn run(tweak: Option<fn(&mut StackConfig)>) -> TransferReport {
    let r = Transfer::new(TransferConfig {
        bytes: 24 << 20,
        seed: 7,
        cc: CcAlgorithm::Cubic,
        link: long_path(),
        tweak,
        ..TransferConfig::default()
    })
    .run();
    assert!(r.intact && r.clean_close && r.error.is_none(), "{r:?}");
    assert_eq!(r.retransmits, 0, "{r:?}");
    r
}

#[test]
fn buffers_grow_until_one_connection_fills_a_long_path() {
    // Without auto-tuning: at most one 256 KiB buffer per 20 ms round
    // trip, 105 Mbit/s, whatever the link could carry.
    let fixed = run(Some(|c| {
        c.tcp.recv_buffer_max = 0;
        c.tcp.send_buffer_max = 0;
    }));
    assert!(fixed.goodput_mbps < 110.0, "{fixed:?}");
    // With it (the defaults): slow start doubles the window each round
    // trip, and both buffers keep ahead of it up to the path's 2.5 MB.
    let tuned = run(None);
    assert!(
        tuned.goodput_mbps > 3.0 * fixed.goodput_mbps,
        "auto-tuned {:.0} Mbit/s against {:.0} fixed",
        tuned.goodput_mbps,
        fixed.goodput_mbps
    );
}

#[test]
fn only_the_receive_buffer_tuned_still_limits_the_sender() {
    // The receiver's window grows, but the sender keeps at most its fixed
    // 256 KiB unacknowledged: the send buffer must grow too.
    let send_fixed = run(Some(|c| c.tcp.send_buffer_max = 0));
    assert!(send_fixed.goodput_mbps < 110.0, "{send_fixed:?}");
    // And the other way round: a sender that could go on is held to the
    // receiver's fixed 256 KiB window.
    let recv_fixed = run(Some(|c| c.tcp.recv_buffer_max = 0));
    assert!(recv_fixed.goodput_mbps < 110.0, "{recv_fixed:?}");
}
