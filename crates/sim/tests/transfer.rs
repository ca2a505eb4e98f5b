//! Transfers in both directions over impaired simulated links: every byte
//! arrives intact and the connection closes cleanly, whatever the seed.

use ixora_core::CcAlgorithm;
use ixora_sim::{LinkConfig, Transfer, TransferConfig, TransferReport};
use proptest::prelude::*;

fn transfer(bytes: usize, seed: u64, cc: CcAlgorithm, link: LinkConfig) -> TransferReport {
    Transfer::new(TransferConfig {
        bytes,
        seed,
        cc,
        link,
        ..TransferConfig::default()
    })
    .run()
}

fn assert_clean(r: &TransferReport) {
    assert!(r.intact, "data corrupted or incomplete: {r:?}");
    assert!(r.clean_close, "unclean close: {r:?}");
    assert!(r.error.is_none(), "{r:?}");
}

#[test]
fn clean_link_reaches_line_rate() {
    let r = transfer(4 << 20, 1, CcAlgorithm::Cubic, LinkConfig::default());
    assert_clean(&r);
    // The send buffer grows with the window (up to 4 MiB), so nothing but
    // slow start's own exit keeps the window from overflowing the 256 KiB
    // queue: HyStart's ACK train (without it, 1,686 retransmissions).
    assert_eq!(r.retransmits, 0);
    // Each direction of the 1 Gbit/s link should be mostly busy.
    assert!(r.goodput_mbps > 500.0, "{r:?}");
}

/// RFC 8985 §6.2: a link that reorders (2% of frames held up to 1 ms
/// more, about one round trip; nothing lost). The first reordered segment
/// is resent needlessly and the peer's D-SACK says so (RFC 2883); from
/// then on the sender gives a hole RACK's reordering window (min_RTT/4,
/// grown by each round trip's D-SACK up to SRTT) instead of calling it
/// lost when three segments are SACKed above it, and a recovery whose
/// resends all come back D-SACKed gives its window cut back (RFC 3708).
/// Before 2026-11-30 most reordered segments were sent again, each
/// halving the window: 374 and 357 retransmissions and 95 and 106 Mbit/s
/// for seeds 1 and 2, against 23 and 15, 444 and 467 Mbit/s now.
//= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
//= type=test
#[test]
fn reordering_alone_costs_few_retransmissions() {
    for seed in [1, 2] {
        let r = reordering_only(seed, 1);
        assert!(r.dsacks > 0, "{r:?}");
        assert!(r.retransmits * 10 < r.link.reordered, "{r:?}");
        assert!(r.goodput_mbps > 300.0, "{r:?}");
    }
}

/// 100 Mbit/s, 20 ms each way, no queue limit; the path stalls for
/// 400 ms about once a second, longer than any RTO.
fn stalling_link() -> LinkConfig {
    LinkConfig {
        rate_bps: 100_000_000,
        delay: ixora_core::Duration::from_millis(20),
        queue_bytes: 0,
        stall_every: ixora_core::Duration::from_millis(1000),
        stall: ixora_core::Duration::from_millis(400),
        ..LinkConfig::default()
    }
}

/// A path that stalls for 400 ms about once a second (a radio handover,
/// a paused virtual machine; nothing lost), 40 ms round trip: each stall
/// outlasts the retransmission timeout, so the timeout is needless, and
/// the ACK of the originals says so by the timestamp it echoes (RFC 3522,
/// Eifel). The window cut is given back by the Eifel response (RFC 4015)
/// and sending goes on with new data, where before 2026-12-01 the sender
/// resent its whole flight in slow start from one segment: for seed 3,
/// 102 segments resent and 9.5 Mbit/s then, 2 and 44.9 Mbit/s now.
//= https://www.rfc-editor.org/rfc/rfc3522#section-3
//= type=test
#[test]
fn a_stalling_path_costs_no_go_back_resend() {
    let (mut timeouts, mut goodput) = (0, vec![]);
    for seed in [1, 2, 3, 4] {
        let r = transfer(8 << 20, seed, CcAlgorithm::Cubic, stalling_link());
        assert_clean(&r);
        assert!(r.link.lost == 0 && r.link.queue_drops == 0, "{r:?}");
        // Every timeout was found needless, and each cost one resend.
        assert_eq!(r.spurious_rtos, r.timeouts, "{r:?}");
        assert!(r.retransmits <= r.timeouts, "{r:?}");
        timeouts += r.timeouts;
        goodput.push(r.goodput_mbps);
    }
    assert!(
        timeouts >= 4,
        "the stalls should outlast the RTO: {timeouts} timeouts"
    );
    goodput.sort_by(f64::total_cmp);
    assert!(goodput[1] > 30.0, "{goodput:?} Mbit/s");
}

/// The same without timestamps (as Windows peers by default), with SACK
/// and without: F-RTO (RFC 5682) finds each timeout needless — the ACK
/// after the new data it lets out acknowledges originals never sent
/// again — so each costs one resend. Before 2026-12-01, seeds 1–4
/// without SACK resent 1,636, 629, 461 and 2,078 segments go-back-N
/// after 2, 31, 18 and 4 timeouts, and moved 33.2, 3.8, 5.7 and 14.9
/// Mbit/s; 39.1, 31.5, 23.0 and 23.3 now.
//= https://www.rfc-editor.org/rfc/rfc5682#section-2
//= type=test
#[test]
fn a_stalling_path_without_timestamps_costs_no_go_back_resend() {
    for sack in [true, false] {
        let mut timeouts = 0;
        for seed in [1, 2, 3, 4] {
            let r = Transfer::new(TransferConfig {
                bytes: 8 << 20,
                seed,
                link: stalling_link(),
                timestamps: false,
                sack,
                ..TransferConfig::default()
            })
            .run();
            assert_clean(&r);
            assert!(r.link.lost == 0 && r.link.queue_drops == 0, "{r:?}");
            assert_eq!(r.spurious_rtos, r.timeouts, "sack {sack}: {r:?}");
            assert!(r.retransmits <= r.timeouts, "sack {sack}: {r:?}");
            assert!(r.goodput_mbps > 20.0, "sack {sack}: {r:?}");
            timeouts += r.timeouts;
        }
        assert!(timeouts >= 4, "sack {sack}: {timeouts} timeouts");
    }
}

/// 16 MiB each way over a link that holds 2% of frames back up to
/// `hold_ms` more and loses none: delivered whole.
fn reordering_only(seed: u64, hold_ms: u64) -> TransferReport {
    let link = LinkConfig {
        reorder: 0.02,
        reorder_delay: ixora_core::Duration::from_millis(hold_ms),
        ..LinkConfig::default()
    };
    let r = transfer(16 << 20, seed, CcAlgorithm::Cubic, link);
    assert_clean(&r);
    assert!(r.link.reordered > 500 && r.link.lost == 0, "{r:?}");
    r
}

/// Reordering deeper than the reordering window may grow (frames held up
/// to 2 ms, past SRTT): segments are still sent again needlessly, but
/// each such recovery's window cut is given back once the D-SACKs of its
/// resends are all in (RFC 3708; Linux's `tcp_try_undo_dsack`). Before
/// 2026-11-30: 93 and 96 Mbit/s for seeds 1 and 2, with 458 and 414
/// retransmissions; 246 and 249 Mbit/s now, with 236 and 220.
#[test]
fn needless_recoveries_give_their_window_back() {
    for seed in [1, 2] {
        let r = reordering_only(seed, 2);
        assert!(r.retransmits > 100 && r.undos > 10, "{r:?}");
        assert!(r.goodput_mbps > 180.0, "{r:?}");
    }
}

#[test]
fn every_impairment_at_once() {
    for cc in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
        let link = LinkConfig {
            loss: 0.05,
            reorder: 0.05,
            duplicate: 0.05,
            corrupt: 0.02,
            ..LinkConfig::default()
        };
        let r = transfer(512 << 10, 3, cc, link);
        assert_clean(&r);
        assert!(r.link.corrupted > 0 && r.link.duplicated > 0);
        assert!(
            r.drops.iter().any(|(n, _)| n.ends_with("bad_checksum")),
            "{r:?}"
        );
    }
}

/// Urgent data both ways over a lossy, reordering link (RFC 9293 §3.8.5):
/// each side marks its data urgent every 100,000 bytes offered; every
/// urgent byte the other's stack reports is at one of those marks and is
/// the byte sent there, and the last mark is reported, whatever is lost
/// or retransmitted.
#[test]
fn urgent_marks_survive_loss_and_reordering() {
    for seed in [5, 6] {
        let r = Transfer::new(TransferConfig {
            bytes: 1 << 20,
            seed,
            link: LinkConfig {
                loss: 0.03,
                reorder: 0.05,
                duplicate: 0.02,
                ..LinkConfig::default()
            },
            write_size: 7_000,
            urgent_every: 100_000,
            ..TransferConfig::default()
        })
        .run();
        assert_clean(&r);
        assert!(r.retransmits > 0, "{r:?}");
    }
}

#[test]
fn same_seed_same_result() {
    let link = LinkConfig {
        loss: 0.03,
        reorder: 0.03,
        ..LinkConfig::default()
    };
    let a = transfer(256 << 10, 9, CcAlgorithm::Cubic, link.clone());
    let b = transfer(256 << 10, 9, CcAlgorithm::Cubic, link);
    assert_eq!(a.sim_time_ms, b.sim_time_ms);
    assert_eq!(a.retransmits, b.retransmits);
    assert_eq!(a.link, b.link);
}

#[test]
fn slow_link_with_small_queue() {
    // 10 Mbit/s with a 16 KiB drop-tail queue: losses come from congestion.
    let link = LinkConfig {
        rate_bps: 10_000_000,
        queue_bytes: 16 << 10,
        delay: ixora_core::Duration::from_millis(5),
        ..LinkConfig::default()
    };
    for cc in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
        let r = transfer(1 << 20, 5, cc, link.clone());
        assert_clean(&r);
        assert!(r.link.queue_drops > 0, "{r:?}");
        assert!(r.goodput_mbps > 5.0, "{r:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The property: for any seed, loss and reordering up to 10%, a
    /// transfer in both directions finishes with identical bytes and a
    /// clean close.
    #[test]
    fn any_seed_loss_and_reorder_up_to_10_percent(
        seed in any::<u64>(),
        loss in 0.0f64..=0.10,
        reorder in 0.0f64..=0.10,
        newreno in any::<bool>(),
        kib in 16usize..160,
    ) {
        let cc = if newreno { CcAlgorithm::NewReno } else { CcAlgorithm::Cubic };
        let link = LinkConfig { loss, reorder, ..LinkConfig::default() };
        let r = transfer(kib << 10, seed, cc, link);
        prop_assert!(r.intact, "{:?}", r);
        prop_assert!(r.clean_close, "{:?}", r);
    }
}
