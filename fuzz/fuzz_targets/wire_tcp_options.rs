//! TCP options: `TcpOptions::parse` on arbitrary bytes, then an
//! emit/re-parse round trip; and `TcpOptions::emit` on arbitrary option
//! values (not only parsed ones), which must never panic into a buffer of
//! `buffer_len()` bytes nor write more than 40 bytes.
//!
//! (`TcpOptions::parse` has no `Checksum` argument: options are covered by
//! the TCP checksum, which the `wire_tcp` target exercises.)
#![no_main]

use ixora_wire::tcp::{SackBlock, SeqNum, TcpOptions, MAX_OPTIONS_LEN, MAX_SACK_BLOCKS};
use libfuzzer_sys::fuzz_target;

/// SACK blocks the emitter keeps (see `wire_tcp`).
fn sacks_that_fit(o: &TcpOptions) -> usize {
    let fixed = TcpOptions { sack_len: 0, ..*o }.buffer_len();
    o.sacks()
        .len()
        .min(MAX_OPTIONS_LEN.saturating_sub(fixed + 4) / 8)
}

/// Emit into exactly `buffer_len()` bytes, re-parse, and check what must
/// survive. Returns the emitted bytes.
fn roundtrip(o: &TcpOptions) -> Vec<u8> {
    let n = o.buffer_len();
    assert!(
        n <= MAX_OPTIONS_LEN,
        "options area is at most 40 bytes, got {n}"
    );
    assert_eq!(n % 4, 0, "options are padded to a multiple of 4");
    let mut buf = vec![0u8; n];
    assert_eq!(o.emit(&mut buf), n);
    let back = TcpOptions::parse(&buf).expect("emitted options must parse");
    assert_eq!(
        (
            back.mss,
            back.window_scale,
            back.sack_permitted,
            back.timestamp
        ),
        (o.mss, o.window_scale, o.sack_permitted, o.timestamp)
    );
    // Exception: SACK blocks beyond what fits are dropped (and sack_len
    // values above MAX_SACK_BLOCKS are read as MAX_SACK_BLOCKS).
    let fit = sacks_that_fit(o);
    assert_eq!(back.sacks(), &o.sacks()[..fit]);
    // Canonical: emitting what was parsed gives the same bytes.
    let mut again = vec![0u8; back.buffer_len()];
    back.emit(&mut again);
    assert_eq!(again, buf);
    buf
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    let mut w = [0u8; 4];
    for (k, x) in w.iter_mut().enumerate() {
        *x = b.get(i + k).copied().unwrap_or(0);
    }
    u32::from_be_bytes(w)
}

fuzz_target!(|data: &[u8]| {
    // 1. Parse arbitrary bytes (of any length, not only <= 40).
    if let Ok(o) = TcpOptions::parse(data) {
        assert!(o.sacks().len() <= MAX_SACK_BLOCKS);
        roundtrip(&o);
        if sacks_that_fit(&o) == o.sacks().len() {
            // Nothing dropped: the parsed value itself round-trips. (Unknown
            // options, NOPs, EOL and duplicate options are not in the repr.)
            let n = o.buffer_len();
            let mut buf = vec![0u8; n];
            o.emit(&mut buf);
            assert_eq!(TcpOptions::parse(&buf).unwrap(), o);
        }
    }

    // 2. Build options directly from the bytes: emit must cope with any
    // value, including sack_len > MAX_SACK_BLOCKS and every combination.
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let sel = b(0);
    let mut o = TcpOptions {
        mss: (sel & 1 != 0).then(|| u16::from_be_bytes([b(1), b(2)])),
        window_scale: (sel & 2 != 0).then(|| b(3)),
        sack_permitted: sel & 4 != 0,
        timestamp: (sel & 8 != 0).then(|| (u32_at(data, 4), u32_at(data, 8))),
        sack_blocks: [SackBlock::default(); MAX_SACK_BLOCKS],
        sack_len: b(12),
    };
    for (i, blk) in o.sack_blocks.iter_mut().enumerate() {
        *blk = SackBlock {
            left: SeqNum(u32_at(data, 13 + i * 8)),
            right: SeqNum(u32_at(data, 17 + i * 8)),
        };
    }
    roundtrip(&o);
});
