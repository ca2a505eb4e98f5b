//! The engine property harness (also the `engine_ops` fuzz target) under
//! proptest: random operation sequences never panic or break invariants.

use arbitrary::{Arbitrary, Unstructured};
use ixora_sim::fuzz::{run, Op};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_operations_keep_invariants(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut u = Unstructured::new(&bytes);
        let ops: Vec<Op> = Vec::arbitrary(&mut u).unwrap_or_default();
        if let Err(e) = run(&ops) {
            prop_assert!(false, "{}\nops: {:?}", e, ops);
        }
    }
}

/// A well-behaved scenario: connect, exchange, close — with losses and
/// reordering from the operation list.
#[test]
fn scripted_exchange() {
    use Op::*;
    let mut ops = vec![Connect, Deliver, Deliver, Deliver, Deliver];
    for i in 0..200u16 {
        ops.push(Send(i % 2 == 0, 3000));
        ops.push(Advance(50));
        ops.push(if i % 7 == 0 {
            Drop(i as u8)
        } else {
            DeliverAt(i as u8)
        });
        ops.push(Deliver);
        ops.push(RecvDone(i % 3 == 0, 5000));
    }
    ops.extend([Shutdown(false), Shutdown(true), AdvanceMs(250)]);
    run(&ops).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Arbitrary frames at a live stack (also the `engine_frames` fuzz target).
    #[test]
    fn arbitrary_frames_are_counted_not_fatal(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        if let Err(e) = ixora_sim::fuzz::frames(&bytes) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Regression: shutdown in SYN-SENT placed the FIN before the data start.
#[test]
fn shutdown_before_established() {
    use Op::*;
    run(&[Connect, Shutdown(false)]).unwrap();
    run(&[Connect, Deliver, Shutdown(true), Deliver, Deliver, Deliver]).unwrap();
}

/// Regression (fuzz): a 2-byte raw frame after close in CLOSING left the
/// transmission records short of SND.MAX.
#[test]
fn records_follow_snd_max_through_closing() {
    use Op::*;
    run(&[
        Connect,
        Deliver,
        Deliver,
        Send(true, 59175),
        Deliver,
        Deliver,
        Deliver,
        Deliver,
        Send(true, 10537),
        Connect,
        Deliver,
        Deliver,
        Send(true, 10537),
        Shutdown(false),
        Advance(41094),
        Close(true),
        RawFrame(true, vec![41, 0]),
        Advance(0),
    ])
    .unwrap();
}
