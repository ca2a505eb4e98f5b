//! Cross-check of ixora-wire against an independent implementation: packets
//! built by scapy, with the header fields scapy reads back from the bytes,
//! stored in `fixtures/scapy.txt` by `scripts/gen_wire_fixtures.py` (Python
//! is not needed to run this test).
//!
//! For every fixture the frame is parsed from the Ethernet layer down with
//! `new_checked` and `Repr::parse(.., Checksum::Both)` (scapy computes
//! correct checksums) and every field scapy reported is compared. The frame
//! is then re-emitted from the reprs: fixtures marked `canon=1` must come back
//! byte for byte (minus Ethernet padding); the others differ by design (IPv4
//! options and fragment fields dropped, 802.1Q priority dropped, TCP options
//! rewritten in the emitter's order, unknown TCP options dropped, the NS
//! bit and an urgent pointer without URG not kept) and must re-parse to the
//! same reprs.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::str::FromStr;

use ixora_wire::arp::{ArpPacket, ArpRepr, PACKET_LEN};
use ixora_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ixora_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ixora_wire::ipv4::{Ipv4Packet, Ipv4Repr, Protocol};
use ixora_wire::tcp::{SeqNum, TcpPacket, TcpRepr};
use ixora_wire::udp::{UdpPacket, UdpRepr};
use ixora_wire::{Checksum, Ipv4Addr};

const FIXTURES: &str = include_str!("fixtures/scapy.txt");

struct Fixture {
    name: String,
    bytes: Vec<u8>,
    fields: BTreeMap<String, String>,
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn load() -> Vec<Fixture> {
    FIXTURES
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let mut cols = line.split('\t');
            let (name, hex, kv) = (
                cols.next().unwrap(),
                cols.next().unwrap(),
                cols.next().unwrap(),
            );
            assert!(cols.next().is_none(), "{name}: extra columns");
            let fields = kv
                .split(';')
                .map(|f| {
                    let (k, v) = f
                        .split_once('=')
                        .unwrap_or_else(|| panic!("{name}: bad field {f:?}"));
                    (k.to_string(), v.to_string())
                })
                .collect();
            Fixture {
                name: name.to_string(),
                bytes: unhex(hex),
                fields,
            }
        })
        .collect()
}

/// The fields scapy reported for one fixture. Records which were read so
/// that the test can insist that every one of them was checked.
struct Expect<'f> {
    name: &'f str,
    fields: &'f BTreeMap<String, String>,
    used: RefCell<BTreeSet<String>>,
}

impl<'f> Expect<'f> {
    fn new(f: &'f Fixture) -> Self {
        Expect {
            name: &f.name,
            fields: &f.fields,
            used: RefCell::new(BTreeSet::new()),
        }
    }

    fn get(&self, k: &str) -> Option<&'f str> {
        self.used.borrow_mut().insert(k.to_string());
        self.fields.get(k).map(String::as_str)
    }

    fn req(&self, k: &str) -> &'f str {
        self.get(k)
            .unwrap_or_else(|| panic!("{}: scapy reported no `{k}`", self.name))
    }

    fn parse<T: FromStr>(&self, k: &str, v: &str) -> T
    where
        T::Err: Debug,
    {
        v.parse()
            .unwrap_or_else(|e| panic!("{}: `{k}={v}` does not parse: {e:?}", self.name))
    }

    fn num<T: FromStr>(&self, k: &str) -> T
    where
        T::Err: Debug,
    {
        self.parse(k, self.req(k))
    }

    fn opt_num<T: FromStr>(&self, k: &str) -> Option<T>
    where
        T::Err: Debug,
    {
        self.get(k).map(|v| self.parse(k, v))
    }

    fn hex16(&self, k: &str) -> u16 {
        u16::from_str_radix(self.req(k), 16).expect("hex u16")
    }

    fn bytes(&self, k: &str) -> Vec<u8> {
        unhex(self.req(k))
    }

    fn flag(&self, k: &str) -> bool {
        match self.req(k) {
            "0" => false,
            "1" => true,
            v => panic!("{}: `{k}={v}` is not 0/1", self.name),
        }
    }

    /// Assert that ixora's value equals scapy's.
    #[track_caller]
    fn eq<T: PartialEq + Debug>(&self, k: &str, ours: T, scapy: T) {
        assert_eq!(
            ours, scapy,
            "{}: field `{k}` (ixora left, scapy right)",
            self.name
        );
    }

    fn finish(&self) {
        let used = self.used.borrow();
        let unchecked: Vec<_> = self.fields.keys().filter(|k| !used.contains(*k)).collect();
        assert!(
            unchecked.is_empty(),
            "{}: fields never checked: {unchecked:?}",
            self.name
        );
    }
}

/// Everything ixora read from one frame, as reprs.
#[derive(Debug, PartialEq)]
struct Parsed<'a> {
    eth: EthernetRepr,
    l3: L3<'a>,
}

#[derive(Debug, PartialEq)]
enum L3<'a> {
    Arp(ArpRepr),
    Ipv4(Ipv4Repr, L4<'a>),
    /// An EtherType ixora does not parse (IPv6 here): the raw payload.
    Other(&'a [u8]),
}

#[derive(Debug, PartialEq)]
enum L4<'a> {
    /// A fragment: the stack does not look past the IPv4 header.
    Fragment(&'a [u8]),
    Icmp(Icmpv4Repr<'a>),
    /// `UdpRepr` holds only the ports; the payload and whether a checksum was
    /// sent (non-zero field) are kept beside it.
    Udp {
        repr: UdpRepr,
        payload: &'a [u8],
        has_checksum: bool,
    },
    Tcp(TcpRepr<'a>),
}

impl L4<'_> {
    /// Bytes the emitter writes for this layer.
    fn buffer_len(&self) -> usize {
        match self {
            L4::Fragment(b) => b.len(),
            L4::Icmp(r) => r.buffer_len(),
            L4::Udp { repr, payload, .. } => repr.buffer_len(payload.len()),
            L4::Tcp(r) => r.buffer_len(),
        }
    }
}

/// Kinds of the options in a raw TCP options area (an independent walk, used
/// only to confirm that an option ixora skips is really there).
fn option_kinds(mut b: &[u8]) -> Vec<u8> {
    let mut kinds = Vec::new();
    while let Some(&k) = b.first() {
        match k {
            0 => break,
            1 => b = &b[1..],
            _ => {
                kinds.push(k);
                b = &b[usize::from(b[1])..];
            }
        }
    }
    kinds
}

/// Parse a frame from the Ethernet layer down. With `ex`, compare every field
/// scapy reported. `as_fragment` forces the IPv4 payload to be kept raw (for
/// re-parsing a re-emitted fragment, which no longer says it is one).
fn dissect<'a>(bytes: &'a [u8], ex: Option<&Expect>, as_fragment: bool) -> Parsed<'a> {
    let frame = EthernetFrame::new_checked(bytes).expect("ethernet new_checked");
    let eth = EthernetRepr::parse(&frame).expect("ethernet parse");
    let eth_hl = frame.header_len();
    // `payload()` borrows the view, not the buffer; slice the buffer instead.
    let l3_bytes: &'a [u8] = &bytes[eth_hl..];
    assert_eq!(frame.payload(), l3_bytes);
    let pad: usize = ex.and_then(|e| e.opt_num("eth_pad")).unwrap_or(0);
    if let Some(e) = ex {
        e.eq(
            "eth_dst",
            frame.dst_addr(),
            MacAddr::from_str(e.req("eth_dst")).unwrap(),
        );
        e.eq(
            "eth_src",
            frame.src_addr(),
            MacAddr::from_str(e.req("eth_src")).unwrap(),
        );
        e.eq("eth_dst", eth.dst_addr, frame.dst_addr());
        e.eq("eth_src", eth.src_addr, frame.src_addr());
        e.eq(
            "eth_type",
            u16::from(frame.ethertype()),
            e.hex16("eth_type"),
        );
        e.eq("eth_type", eth.ethertype, frame.ethertype());
        let vlan: Option<u16> = e.opt_num("vlan");
        e.eq("vlan", frame.vlan_id(), vlan);
        e.eq("vlan", eth.vlan, vlan);
        e.eq("vlan_pcp", frame.vlan_pcp(), e.opt_num("vlan_pcp"));
        e.eq("header_len", eth_hl, if vlan.is_some() { 18 } else { 14 });
    }

    let l3 = match eth.ethertype {
        EtherType::Arp => {
            let p = ArpPacket::new_checked(l3_bytes).expect("arp new_checked");
            let r = ArpRepr::parse(&p).expect("arp parse");
            if let Some(e) = ex {
                e.eq("eth_pad", l3_bytes.len() - PACKET_LEN, pad);
                e.eq("arp_op", u16::from(p.operation()), e.num("arp_op"));
                e.eq("arp_op", r.operation, p.operation());
                let sha = MacAddr::from_str(e.req("arp_sha")).unwrap();
                let tha = MacAddr::from_str(e.req("arp_tha")).unwrap();
                let spa: Ipv4Addr = e.num("arp_spa");
                let tpa: Ipv4Addr = e.num("arp_tpa");
                e.eq("arp_sha", (p.sender_mac(), r.sender_mac), (sha, sha));
                e.eq("arp_tha", (p.target_mac(), r.target_mac), (tha, tha));
                e.eq("arp_spa", (p.sender_ip(), r.sender_ip), (spa, spa));
                e.eq("arp_tpa", (p.target_ip(), r.target_ip), (tpa, tpa));
            }
            L3::Arp(r)
        }
        EtherType::Ipv4 => {
            let (ip, l4) = dissect_ipv4(l3_bytes, ex, pad, as_fragment);
            L3::Ipv4(ip, l4)
        }
        _ => {
            if let Some(e) = ex {
                e.eq("eth_pad", 0, pad);
            }
            L3::Other(l3_bytes)
        }
    };
    Parsed { eth, l3 }
}

fn dissect_ipv4<'a>(
    b: &'a [u8],
    ex: Option<&Expect>,
    pad: usize,
    as_fragment: bool,
) -> (Ipv4Repr, L4<'a>) {
    let p = Ipv4Packet::new_checked(b).expect("ipv4 new_checked");
    assert!(p.verify_checksum());
    let r = Ipv4Repr::parse(&p, Checksum::Both).expect("ipv4 parse");
    let hl = p.header_len();
    let range = p.payload_range();
    let payload: &'a [u8] = &b[range.clone()];
    assert_eq!(p.payload(), payload);
    if let Some(e) = ex {
        e.eq("ip_version", p.version(), e.num("ip_version"));
        e.eq("ip_ihl", hl / 4, e.num("ip_ihl"));
        e.eq(
            "ip_tos",
            (p.dscp_ecn(), r.dscp_ecn),
            (e.num("ip_tos"), e.num("ip_tos")),
        );
        let total: u16 = e.num("ip_len");
        e.eq("ip_len", p.total_len(), total);
        e.eq("ip_len", r.payload_len, usize::from(total) - hl);
        e.eq("eth_pad", b.len() - usize::from(total), pad);
        e.eq(
            "ip_id",
            (p.ident(), r.ident),
            (e.num("ip_id"), e.num("ip_id")),
        );
        e.eq(
            "ip_df",
            (p.dont_frag(), r.dont_frag),
            (e.flag("ip_df"), e.flag("ip_df")),
        );
        e.eq("ip_mf", p.more_frags(), e.flag("ip_mf"));
        e.eq("ip_frag", p.frag_offset(), e.num("ip_frag"));
        e.eq(
            "ip_ttl",
            (p.ttl(), r.ttl),
            (e.num("ip_ttl"), e.num("ip_ttl")),
        );
        let proto = Protocol::from(e.num::<u8>("ip_proto"));
        e.eq("ip_proto", (p.protocol(), r.protocol), (proto, proto));
        e.eq("ip_chksum", p.checksum(), e.hex16("ip_chksum"));
        let src: Ipv4Addr = e.num("ip_src");
        let dst: Ipv4Addr = e.num("ip_dst");
        e.eq("ip_src", (p.src_addr(), r.src_addr), (src, src));
        e.eq("ip_dst", (p.dst_addr(), r.dst_addr), (dst, dst));
        if p.is_fragment() {
            e.eq("ip_payload", payload, &e.bytes("ip_payload")[..]);
        }
    }
    if p.is_fragment() || as_fragment {
        return (r, L4::Fragment(payload));
    }
    let (src, dst) = (r.src_addr, r.dst_addr);
    let l4 = match r.protocol {
        Protocol::Icmp => {
            let p = Icmpv4Packet::new_checked(payload).expect("icmp new_checked");
            assert!(p.verify_checksum());
            let r = Icmpv4Repr::parse(&p, Checksum::Both).expect("icmp parse");
            if let Some(e) = ex {
                e.eq("icmp_type", p.msg_type(), e.num("icmp_type"));
                e.eq("icmp_code", p.msg_code(), e.num("icmp_code"));
                e.eq("icmp_chksum", p.checksum(), e.hex16("icmp_chksum"));
                let data = e.bytes("icmp_data");
                e.eq("icmp_data", p.data(), &data[..]);
                match r {
                    Icmpv4Repr::EchoRequest {
                        ident,
                        seq_no,
                        data: d,
                    }
                    | Icmpv4Repr::EchoReply {
                        ident,
                        seq_no,
                        data: d,
                    } => {
                        e.eq(
                            "icmp_type",
                            p.msg_type() == 8,
                            matches!(r, Icmpv4Repr::EchoRequest { .. }),
                        );
                        e.eq(
                            "icmp_id",
                            (ident, p.echo_ident()),
                            (e.num("icmp_id"), e.num("icmp_id")),
                        );
                        e.eq(
                            "icmp_seq",
                            (seq_no, p.echo_seq_no()),
                            (e.num("icmp_seq"), e.num("icmp_seq")),
                        );
                        e.eq("icmp_data", d, &data[..]);
                    }
                    Icmpv4Repr::DstUnreachable {
                        code,
                        next_hop_mtu,
                        original,
                    } => {
                        e.eq("icmp_type", p.msg_type(), 3);
                        e.eq("icmp_code", code, p.msg_code());
                        e.eq("icmp_mtu", next_hop_mtu, e.num("icmp_mtu"));
                        e.eq("icmp_data", original, &data[..]);
                    }
                    Icmpv4Repr::TimeExceeded { code, original } => {
                        e.eq("icmp_type", p.msg_type(), 11);
                        e.eq("icmp_code", code, p.msg_code());
                        e.eq("icmp_data", original, &data[..]);
                    }
                }
                if let Icmpv4Repr::DstUnreachable { original, .. }
                | Icmpv4Repr::TimeExceeded { original, .. } = r
                {
                    // The quoted datagram's header is readable with the IPv4
                    // view; it is one that the error's recipient sent.
                    let q = Ipv4Packet::new_unchecked(original);
                    assert_eq!(q.version(), 4);
                    assert_eq!(q.src_addr(), dst);
                }
            }
            L4::Icmp(r)
        }
        Protocol::Udp => {
            let p = UdpPacket::new_checked(payload).expect("udp new_checked");
            assert!(p.verify_checksum(src, dst));
            let r = UdpRepr::parse(&p, src, dst, Checksum::Both).expect("udp parse");
            let body: &'a [u8] = &payload[p.payload_range()];
            if let Some(e) = ex {
                e.eq(
                    "udp_sport",
                    (r.src_port, p.src_port()),
                    (e.num("udp_sport"), e.num("udp_sport")),
                );
                e.eq(
                    "udp_dport",
                    (r.dst_port, p.dst_port()),
                    (e.num("udp_dport"), e.num("udp_dport")),
                );
                e.eq("udp_len", p.len(), e.num("udp_len"));
                e.eq("udp_chksum", p.checksum(), e.hex16("udp_chksum"));
                e.eq("payload", body, &e.bytes("payload")[..]);
                e.eq("payload", p.payload(), body);
            }
            L4::Udp {
                repr: r,
                payload: body,
                has_checksum: p.checksum() != 0,
            }
        }
        Protocol::Tcp => {
            let p = TcpPacket::new_checked(payload).expect("tcp new_checked");
            assert!(p.verify_checksum(src, dst));
            let r = TcpRepr::parse(&p, src, dst, Checksum::Both).expect("tcp parse");
            if let Some(e) = ex {
                check_tcp(e, &p, &r);
            }
            L4::Tcp(r)
        }
        Protocol::Unknown(x) => panic!("no fixture carries IP protocol {x}"),
    };
    (r, l4)
}

fn check_tcp(e: &Expect, p: &TcpPacket<&[u8]>, r: &TcpRepr) {
    e.eq(
        "tcp_sport",
        (r.src_port, p.src_port()),
        (e.num("tcp_sport"), e.num("tcp_sport")),
    );
    e.eq(
        "tcp_dport",
        (r.dst_port, p.dst_port()),
        (e.num("tcp_dport"), e.num("tcp_dport")),
    );
    let seq = SeqNum(e.num("tcp_seq"));
    e.eq("tcp_seq", (r.seq, p.seq_number()), (seq, seq));
    let ack = SeqNum(e.num("tcp_ack"));
    e.eq("tcp_ack", p.ack_number(), ack);
    // scapy's flags include NS (0x100), which ixora ignores; ACK lives in
    // `TcpRepr::ack`, not in `TcpRepr::flags`.
    let flags: u16 = e.num("tcp_flags");
    e.eq("tcp_flags", p.flags().0, flags & 0xff);
    e.eq("tcp_flags", r.flags.0, flags & 0xff & !0x10);
    e.eq("tcp_ack", r.ack, (flags & 0x10 != 0).then_some(ack));
    e.eq(
        "tcp_window",
        (r.window_len, p.window_len()),
        (e.num("tcp_window"), e.num("tcp_window")),
    );
    e.eq("tcp_dataofs", p.header_len() / 4, e.num("tcp_dataofs"));
    e.eq("tcp_urgptr", p.urgent_at(), e.num("tcp_urgptr"));
    // (Kept only with URG: without it the pointer means nothing.)
    if flags & 0x20 != 0 {
        e.eq("tcp_urgptr", r.urgent, e.num("tcp_urgptr"));
    }
    e.eq("tcp_chksum", p.checksum(), e.hex16("tcp_chksum"));
    let payload = e.bytes("payload");
    e.eq(
        "payload",
        (r.payload, p.payload()),
        (&payload[..], &payload[..]),
    );
    e.eq("tcp_segment_len", r.segment_len(), p.segment_len());

    let o = &r.options;
    e.eq("mss", o.mss, e.opt_num("mss"));
    e.eq("wscale", o.window_scale, e.opt_num("wscale"));
    e.eq("sack_ok", o.sack_permitted, e.flag("sack_ok"));
    let ts = e.get("ts").map(|v| {
        let (a, b) = v.split_once(',').expect("ts=val,ecr");
        (e.parse::<u32>("ts", a), e.parse::<u32>("ts", b))
    });
    e.eq("ts", o.timestamp, ts);
    let sacks: Vec<(u32, u32)> = e
        .get("sack")
        .map(|v| {
            v.split(',')
                .map(|blk| {
                    let (l, r) = blk.split_once('-').expect("sack=l-r,...");
                    (e.parse("sack", l), e.parse("sack", r))
                })
                .collect()
        })
        .unwrap_or_default();
    let ours: Vec<(u32, u32)> = o.sacks().iter().map(|b| (b.left.0, b.right.0)).collect();
    e.eq("sack", ours, sacks);
    // Options ixora does not know are skipped (not in the repr): check they
    // are really in the header, and of a kind ixora does not parse.
    let kinds = option_kinds(p.options());
    if let Some(v) = e.get("tcp_unknown") {
        for k in v.split(',') {
            let k: u8 = e.parse("tcp_unknown", k);
            assert!(
                kinds.contains(&k),
                "{}: option {k} not in {kinds:?}",
                e.name
            );
            assert!(
                ![2, 3, 4, 5, 8].contains(&k),
                "{}: {k} is a known kind",
                e.name
            );
        }
    } else {
        assert!(
            kinds.iter().all(|k| [2, 3, 4, 5, 8].contains(k)),
            "{}: {kinds:?}",
            e.name
        );
    }
}

/// Re-emit a frame from its reprs into a buffer of exactly the stated length.
fn emit(p: &Parsed) -> Vec<u8> {
    let eth_hl = p.eth.header_len();
    let l3_len = match &p.l3 {
        L3::Arp(r) => r.buffer_len(),
        L3::Ipv4(ip, l4) => Ipv4Repr {
            payload_len: l4.buffer_len(),
            ..*ip
        }
        .buffer_len(),
        L3::Other(b) => b.len(),
    };
    let mut buf = vec![0u8; eth_hl + l3_len];
    assert_eq!(p.eth.emit(&mut buf), eth_hl);
    let l3 = &mut buf[eth_hl..];
    match &p.l3 {
        L3::Arp(r) => r.emit(l3),
        L3::Other(b) => l3.copy_from_slice(b),
        L3::Ipv4(ip, l4) => {
            // The IPv4 payload length follows what the layer above emits (the
            // TCP header can shrink when unknown options are dropped).
            let ip = Ipv4Repr {
                payload_len: l4.buffer_len(),
                ..*ip
            };
            assert_eq!(ip.buffer_len(), l3.len());
            ip.emit(l3, Checksum::Both);
            let (src, dst) = (ip.src_addr, ip.dst_addr);
            let body = &mut l3[ip.header_len()..];
            match l4 {
                L4::Fragment(b) => body.copy_from_slice(b),
                L4::Icmp(r) => r.emit(body, Checksum::Both),
                L4::Udp {
                    repr,
                    payload,
                    has_checksum,
                } => {
                    // A datagram sent without a checksum is re-sent without.
                    let csum = if *has_checksum {
                        Checksum::Both
                    } else {
                        Checksum::None
                    };
                    repr.emit(body, src, dst, payload, csum)
                }
                L4::Tcp(r) => {
                    assert_eq!(r.emit(body, src, dst, Checksum::Both), body.len());
                }
            }
        }
    }
    buf
}

/// Compare the re-parsed reprs with the original ones where bytes differ by
/// design. The IPv4 payload length may legitimately change (dropped TCP
/// options); everything else in the reprs must be equal.
fn assert_semantically_equal(name: &str, orig: &Parsed, again: &Parsed) {
    assert_eq!(again.eth, orig.eth, "{name}: ethernet repr");
    match (&orig.l3, &again.l3) {
        (L3::Ipv4(a, l4a), L3::Ipv4(b, l4b)) => {
            assert_eq!(
                Ipv4Repr {
                    payload_len: 0,
                    ..*b
                },
                Ipv4Repr {
                    payload_len: 0,
                    ..*a
                },
                "{name}: ipv4 repr"
            );
            assert_eq!(
                b.payload_len,
                l4b.buffer_len(),
                "{name}: ipv4 payload length"
            );
            assert_eq!(l4b, l4a, "{name}: layer-4 repr");
        }
        (a, b) => assert_eq!(b, a, "{name}: layer-3 repr"),
    }
}

fn check_fixture(f: &Fixture) {
    let ex = Expect::new(f);
    let parsed = dissect(&f.bytes, Some(&ex), false);
    let canon = ex.flag("canon");
    ex.finish();

    let pad: usize = f.fields.get("eth_pad").map_or(0, |v| v.parse().unwrap());
    let expected = &f.bytes[..f.bytes.len() - pad];
    let out = emit(&parsed);
    if canon {
        assert_eq!(
            hex(&out),
            hex(expected),
            "{}: re-emitted frame differs",
            f.name
        );
    } else {
        assert_ne!(
            out, expected,
            "{}: marked non-canonical but re-emitted byte for byte",
            f.name
        );
    }
    // Either way the emitted frame must parse back to the same reprs.
    let was_fragment = matches!(parsed.l3, L3::Ipv4(_, L4::Fragment(_)));
    let again = dissect(&out, None, was_fragment);
    assert_semantically_equal(&f.name, &parsed, &again);
    if canon {
        assert_eq!(again, parsed, "{}", f.name);
    }
    if was_fragment {
        // By design: Ipv4Repr has no MF/offset, so a re-emitted fragment
        // no longer says it is one.
        let p = Ipv4Packet::new_checked(&out[parsed.eth.header_len()..]).unwrap();
        assert!(!p.is_fragment(), "{}", f.name);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn fixture_file_is_well_formed() {
    let all = load();
    assert!(all.len() >= 40, "only {} fixtures", all.len());
    let names: BTreeSet<_> = all.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), all.len(), "duplicate fixture names");
    let canon = all.iter().filter(|f| f.fields["canon"] == "1").count();
    assert!(canon >= 30, "only {canon} byte-identical fixtures");
    assert!(
        canon < all.len(),
        "no fixture exercises the by-design differences"
    );
}

#[test]
fn scapy_fixtures_parse_and_reemit() {
    let all = load();
    let mut failed = Vec::new();
    for f in &all {
        if let Err(e) = std::panic::catch_unwind(|| check_fixture(f)) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{}: {msg}", f.name));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} fixtures failed:\n{}",
        failed.len(),
        all.len(),
        failed.join("\n")
    );
}

#[test]
fn scapy_fixtures_fail_checksum_when_corrupted() {
    // Flip one payload bit in every checksummed fixture: the innermost
    // checksum must catch it (a cheap sanity check that the fixtures' valid
    // checksums are not passing by accident).
    for f in load() {
        let Ok(frame) = EthernetFrame::new_checked(&f.bytes[..]) else {
            panic!()
        };
        if frame.ethertype() != EtherType::Ipv4 {
            continue;
        }
        let l3 = &f.bytes[frame.header_len()..];
        let ip = Ipv4Packet::new_checked(l3).unwrap();
        if ip.is_fragment() {
            continue;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let mut body = ip.payload().to_vec();
        let last = body.len() - 1;
        body[last] ^= 0x01;
        let bad = match ip.protocol() {
            Protocol::Icmp => Icmpv4Repr::parse(
                &Icmpv4Packet::new_checked(&body[..]).unwrap(),
                Checksum::Both,
            )
            .is_err(),
            Protocol::Udp => {
                let p = UdpPacket::new_checked(&body[..]).unwrap();
                if p.checksum() == 0 {
                    continue;
                }
                UdpRepr::parse(&p, src, dst, Checksum::Both).is_err()
            }
            Protocol::Tcp => TcpRepr::parse(
                &TcpPacket::new_checked(&body[..]).unwrap(),
                src,
                dst,
                Checksum::Both,
            )
            .is_err(),
            Protocol::Unknown(_) => continue,
        };
        assert!(bad, "{}: corrupted payload still verifies", f.name);
    }
}
