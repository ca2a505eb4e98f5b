#!/usr/bin/env python3
"""Generate crates/wire/tests/fixtures/scapy.txt: real packets built by scapy,
with the header fields scapy itself reads back from the bytes, so that
crates/wire/tests/scapy_fixtures.rs can cross-check ixora-wire against an
independent implementation without needing Python at test time.

Run from the repository root with a Python that has scapy (Debian/Ubuntu:
`apt-get install python3-scapy`, then use the system interpreter):

    /usr/bin/python3 scripts/gen_wire_fixtures.py

Output format, one packet per line, tab-separated:

    name <TAB> frame as hex <TAB> key=value;key=value;...

Keys (present only for the layers the frame has):

  canon         1 if ixora's emitter is expected to reproduce the frame byte
                for byte (after dropping Ethernet padding), else 0 (IPv4
                options, fragments, 802.1Q priority bits, TCP options not in
                the emitter's order, unknown TCP options, an urgent pointer,
                the NS bit are all dropped or rewritten by design)
  eth_dst eth_src eth_type(hex, inner type when tagged) vlan vlan_pcp eth_pad
  arp_op arp_sha arp_spa arp_tha arp_tpa
  ip_version ip_ihl ip_tos ip_len ip_id ip_df ip_mf ip_frag(bytes) ip_ttl
  ip_proto ip_chksum(hex) ip_src ip_dst ip_payload(hex, fragments only: the
  stack does not parse past the IPv4 header of a fragment)
  icmp_type icmp_code icmp_chksum icmp_id icmp_seq icmp_mtu icmp_data(hex)
  udp_sport udp_dport udp_len udp_chksum
  tcp_sport tcp_dport tcp_seq tcp_ack tcp_flags(int, scapy's, NS=0x100)
  tcp_window tcp_dataofs tcp_urgptr tcp_chksum mss wscale sack_ok
  ts(val,ecr) sack(left-right,...) tcp_unknown(kinds, comma-separated)
  payload(hex, the TCP/UDP payload)

Integers are decimal unless marked hex. The file is deterministic: rerunning
the script reproduces it exactly.
"""

import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.layers.inet import (  # noqa: E402
    ICMP,
    IP,
    TCP,
    UDP,
    IPOption_NOP,
    IPOption_Router_Alert,
    TCPOptions,
)
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import ARP, Dot1Q, Ether  # noqa: E402
from scapy.packet import Padding, Raw  # noqa: E402

A_MAC = "02:00:00:00:00:01"
B_MAC = "02:00:00:00:00:02"
BCAST = "ff:ff:ff:ff:ff:ff"
A_IP = "198.18.0.1"
B_IP = "198.18.0.2"


def eth(vlan=None, prio=0, dst=B_MAC, src=A_MAC):
    e = Ether(dst=dst, src=src)
    if vlan is not None:
        e = e / Dot1Q(vlan=vlan, prio=prio)
    return e


def ip(**kw):
    base = dict(src=A_IP, dst=B_IP, id=0x1234, flags="DF", ttl=64)
    base.update(kw)
    return IP(**base)


def data(n, seed=0):
    """n deterministic payload bytes."""
    return bytes((seed + i * 7) & 0xFF for i in range(n))


def linux_syn_opts(ts_val=0x0A0B0C0D, ts_ecr=0, wscale=7):
    # Linux order: MSS, SACK-permitted, timestamps, NOP, window scale.
    return [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (ts_val, ts_ecr)),
            ("NOP", None), ("WScale", wscale)]


def sack_opts(n, ts=True):
    blocks = []
    for i in range(n):
        left = 0x10000000 + i * 3000
        blocks += [left, left + 1448]
    opts = []
    if ts:
        opts += [("NOP", None), ("NOP", None), ("Timestamp", (123456, 654321))]
    opts += [("NOP", None), ("NOP", None), ("SAck", tuple(blocks))]
    return opts


def original_datagram(l4, extra=0):
    """The IP header and first 8 (+extra) bytes of a datagram A -> B, as an
    ICMP error sent back to A quotes it."""
    orig = IP(src=A_IP, dst=B_IP, id=0x4321, ttl=1) / l4
    return bytes(orig)[: 28 + extra]


def udp_ffff_payload():
    """A 2-byte UDP payload that makes the computed checksum 0, which RFC 768
    says to send as 0xffff."""
    base = IP(bytes(ip(proto=17) / UDP(sport=1000, dport=2000) / b"\x00\x00"))
    c = base[UDP].chksum
    return c.to_bytes(2, "big")


def fixtures():
    f = []

    def add(name, pkt, canon):
        f.append((name, pkt, canon))

    # --- ARP -----------------------------------------------------------------
    add("arp_request", eth(dst=BCAST) / ARP(op=1, hwsrc=A_MAC, psrc=A_IP,
                                            hwdst="00:00:00:00:00:00", pdst=B_IP), True)
    add("arp_reply", eth(dst=A_MAC, src=B_MAC) / ARP(op=2, hwsrc=B_MAC, psrc=B_IP,
                                                     hwdst=A_MAC, pdst=A_IP), True)
    add("arp_request_padded_60",
        eth(dst=BCAST) / ARP(op=1, hwsrc=A_MAC, psrc="10.1.2.3", hwdst="00:00:00:00:00:00",
                             pdst="10.1.2.4") / Padding(load=b"\x00" * 18), True)
    add("arp_gratuitous", eth(dst=BCAST) / ARP(op=1, hwsrc=A_MAC, psrc=A_IP,
                                               hwdst=BCAST, pdst=A_IP), True)
    add("arp_vlan", eth(vlan=42, dst=BCAST) / ARP(op=1, hwsrc=A_MAC, psrc=A_IP,
                                                  hwdst="00:00:00:00:00:00", pdst=B_IP), True)

    # --- Ethernet with a payload ixora does not parse -------------------------
    add("eth_ipv6_udp", eth() / IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=1, dport=2)
        / b"v6", True)

    # --- ICMP ------------------------------------------------------------------
    add("icmp_echo_request", eth() / ip(proto=1) / ICMP(type=8, id=0x1A2B, seq=1)
        / data(56), True)
    add("icmp_echo_reply", eth(dst=A_MAC, src=B_MAC) / ip(src=B_IP, dst=A_IP, id=0x9999)
        / ICMP(type=0, id=0x1A2B, seq=1) / data(56), True)
    add("icmp_echo_odd_data", eth() / ip() / ICMP(type=8, id=7, seq=65535) / b"abc", True)
    add("icmp_echo_empty", eth() / ip(flags=0, ttl=255) / ICMP(type=8, id=0, seq=0), True)
    add("icmp_unreach_port", eth(dst=A_MAC, src=B_MAC) / ip(src=B_IP, dst=A_IP, tos=0xC0)
        / ICMP(type=3, code=3)
        / original_datagram(UDP(sport=5353, dport=9999) / b"hello"), True)
    add("icmp_unreach_frag_needed", eth(dst=A_MAC, src=B_MAC) / ip(src=B_IP, dst=A_IP)
        / ICMP(type=3, code=4, nexthopmtu=1400)
        / original_datagram(TCP(sport=80, dport=40000, seq=1000, flags="PA") / data(1400)),
        True)
    add("icmp_unreach_host_long_original", eth(dst=A_MAC, src=B_MAC)
        / ip(src=B_IP, dst=A_IP) / ICMP(type=3, code=1)
        / original_datagram(UDP(sport=1111, dport=2222) / data(64), extra=32), True)
    add("icmp_time_exceeded", eth(dst=A_MAC, src=B_MAC) / ip(src="192.0.2.254", dst=A_IP)
        / ICMP(type=11, code=0)
        / original_datagram(UDP(sport=33434, dport=33435) / data(12)), True)

    # --- UDP -------------------------------------------------------------------
    add("udp_dns_query", eth() / ip(flags=0) / UDP(sport=53000, dport=53) / data(29, 3), True)
    add("udp_checksum_zero", eth() / ip() / UDP(sport=4000, dport=4001, chksum=0)
        / b"no checksum", True)
    add("udp_odd_payload", eth() / ip() / UDP(sport=1, dport=65535) / data(13, 9), True)
    add("udp_empty_payload", eth() / ip() / UDP(sport=68, dport=67), True)
    add("udp_computed_zero_sent_as_ffff", eth() / ip(proto=17) / UDP(sport=1000, dport=2000)
        / udp_ffff_payload(), True)
    add("udp_large", eth() / ip(id=0) / UDP(sport=50000, dport=9) / data(1472, 1), True)
    add("udp_vlan_prio0", eth(vlan=100) / ip() / UDP(sport=123, dport=123) / data(48), True)
    add("udp_vlan_prio5", eth(vlan=4094, prio=5) / ip() / UDP(sport=123, dport=123)
        / data(48), False)  # PCP is not in EthernetRepr
    add("udp_padded_60", eth() / ip() / UDP(sport=7, dport=7) / b"hi"
        / Padding(load=b"\x00" * 16), True)
    add("udp_tos_ttl1", eth() / ip(tos=0xB8, ttl=1, id=65535) / UDP(sport=5004, dport=5004)
        / data(160), True)

    # --- IPv4 options and fragments (never byte-identical by design) ------------
    add("ip_opt_nop_router_alert_udp", eth()
        / ip(options=[IPOption_NOP(), IPOption_Router_Alert()])
        / UDP(sport=1000, dport=2000) / b"with options", False)
    add("ip_opt_router_alert_icmp", eth() / ip(options=[IPOption_Router_Alert()])
        / ICMP(type=8, id=1, seq=2) / b"ra", False)
    add("ip_opt_router_alert_tcp", eth() / ip(options=[IPOption_Router_Alert()])
        / TCP(sport=179, dport=40000, seq=5, ack=6, flags="A", window=1000), False)
    add("ip_frag_first", eth() / ip(flags="MF", frag=0, id=7)
        / UDP(sport=9000, dport=9001, len=8 + 3000) / data(1472, 2), False)
    add("ip_frag_middle", eth() / ip(flags="MF", frag=185, id=7, proto=17)
        / Raw(load=data(1480, 3)), False)
    add("ip_frag_last", eth() / ip(flags=0, frag=370, id=7, proto=17)
        / Raw(load=data(47, 4)), False)

    # --- TCP, canonical option layouts -----------------------------------------
    add("tcp_syn_linux", eth() / ip() / TCP(sport=50000, dport=80, seq=0x11223344,
                                            flags="S", window=64240, options=linux_syn_opts()),
        True)
    add("tcp_synack_linux", eth(dst=A_MAC, src=B_MAC) / ip(src=B_IP, dst=A_IP, id=0)
        / TCP(sport=80, dport=50000, seq=0xAABBCCDD, ack=0x11223345, flags="SA", window=65160,
              options=linux_syn_opts(ts_val=999, ts_ecr=0x0A0B0C0D)), True)
    add("tcp_syn_linux_ws14", eth() / ip() / TCP(sport=50001, dport=443, seq=1, flags="S",
                                                 window=65535,
                                                 options=linux_syn_opts(wscale=14)), True)
    add("tcp_syn_mss_only", eth() / ip() / TCP(sport=1025, dport=23, seq=7, flags="S",
                                               window=4096, options=[("MSS", 536)]), True)
    add("tcp_syn_no_options", eth() / ip() / TCP(sport=1026, dport=23, seq=8, flags="S",
                                                 window=8192), True)
    add("tcp_syn_sackok_no_ts", eth() / ip() / TCP(
        sport=1027, dport=80, seq=9, flags="S", window=64240,
        options=[("MSS", 1460), ("NOP", None), ("NOP", None), ("SAckOK", b""),
                 ("NOP", None), ("WScale", 8)]), True)
    add("tcp_syn_ts_no_sackok", eth() / ip() / TCP(
        sport=1028, dport=80, seq=10, flags="S", window=64240,
        options=[("MSS", 1400), ("NOP", None), ("NOP", None), ("Timestamp", (1, 0)),
                 ("NOP", None), ("WScale", 2)]), True)
    add("tcp_ack_ts", eth() / ip() / TCP(
        sport=50000, dport=80, seq=0x11223345, ack=0xAABBCCDE, flags="A", window=502,
        options=[("NOP", None), ("NOP", None), ("Timestamp", (1000, 999))]), True)
    add("tcp_data_psh_ts", eth() / ip() / TCP(
        sport=50000, dport=80, seq=0x11223345, ack=0xAABBCCDE, flags="PA", window=502,
        options=[("NOP", None), ("NOP", None), ("Timestamp", (1001, 999))]) / data(100, 5),
        True)
    for n in (1, 2, 3):
        add(f"tcp_sack{n}_ts", eth() / ip() / TCP(
            sport=80, dport=50000, seq=0xAABBCCDE, ack=0x11223345 + n, flags="A",
            window=1000, options=sack_opts(n)), True)
    for n in (1, 4):
        add(f"tcp_sack{n}_no_ts", eth() / ip() / TCP(
            sport=80, dport=50000, seq=0xAABBCCDE, ack=0x11223345, flags="A", window=1000,
            options=sack_opts(n, ts=False)), True)
    add("tcp_fin_ack", eth() / ip() / TCP(sport=50000, dport=80, seq=100, ack=200,
                                          flags="FA", window=501), True)
    add("tcp_fin_psh_ack_data", eth() / ip() / TCP(sport=50000, dport=80, seq=100, ack=200,
                                                   flags="FPA", window=501) / b"bye\n", True)
    add("tcp_rst", eth() / ip(flags=0) / TCP(sport=80, dport=50000, seq=12345, flags="R",
                                             window=0), True)
    add("tcp_rst_ack", eth() / ip(flags=0) / TCP(sport=80, dport=50000, seq=0, ack=777,
                                                 flags="RA", window=0), True)
    add("tcp_syn_ece_cwr", eth() / ip(tos=0x02) / TCP(sport=50002, dport=80, seq=1,
                                                      flags="SEC", window=64240,
                                                      options=linux_syn_opts()), True)
    add("tcp_odd_payload", eth() / ip() / TCP(sport=2000, dport=3000, seq=5, ack=6,
                                              flags="PA", window=100) / b"1234567", True)
    add("tcp_seq_wrap", eth() / ip() / TCP(sport=2001, dport=3001, seq=0xFFFFFF00,
                                           ack=0xFFFFFFF0, flags="A", window=65535)
        / data(512, 6), True)
    add("tcp_vlan", eth(vlan=7) / ip() / TCP(sport=2002, dport=3002, seq=1, ack=1,
                                             flags="A", window=10), True)
    add("tcp_padded_60", eth() / ip() / TCP(sport=2003, dport=3003, seq=1, ack=1, flags="A",
                                            window=10) / Padding(load=b"\x00" * 6), True)

    # --- TCP, not byte-identical by design -------------------------------------
    add("tcp_syn_windows_order", eth() / ip() / TCP(
        sport=49152, dport=445, seq=0x01020304, flags="S", window=64240,
        options=[("MSS", 1460), ("NOP", None), ("WScale", 8), ("NOP", None), ("NOP", None),
                 ("SAckOK", b"")]), False)
    add("tcp_syn_eol_padded", eth() / ip() / TCP(
        sport=49153, dport=80, seq=1, flags="S", window=1024,
        options=[("MSS", 1460), ("WScale", 0)]), False)  # scapy pads with EOL
    add("tcp_sack_before_ts", eth() / ip() / TCP(
        sport=80, dport=50000, seq=1, ack=2, flags="A", window=1000,
        options=[("NOP", None), ("NOP", None), ("SAck", (100, 200)), ("NOP", None),
                 ("NOP", None), ("Timestamp", (5, 6))]), False)
    add("tcp_unknown_option_experimental", eth() / ip() / TCP(
        sport=50003, dport=80, seq=1, flags="S", window=64240,
        options=[("MSS", 1460), ("NOP", None), ("NOP", None), (254, b"\x12\x34")]), False)
    add("tcp_unknown_option_md5", eth() / ip() / TCP(
        sport=50004, dport=179, seq=1, ack=1, flags="A", window=16384,
        options=[(19, bytes(range(16))), ("NOP", None), ("NOP", None)]) / b"bgp", False)
    add("tcp_urgent", eth() / ip() / TCP(sport=50005, dport=23, seq=1, ack=1, flags="UPA",
                                         window=100, urgptr=1) / b"\xff\xf4", True)
    add("tcp_ns_bit", eth() / ip() / TCP(sport=50006, dport=80, seq=1, ack=1, flags="NA",
                                         window=100), False)
    return f


# --- dissection: what scapy reads back from the bytes --------------------------


def tcp_option_fields(opts):
    out = {"sack_ok": "0"}
    unknown = []
    for kind, val in opts:
        if kind == "MSS":
            out["mss"] = str(val)
        elif kind == "WScale":
            out["wscale"] = str(val)
        elif kind == "SAckOK":
            out["sack_ok"] = "1"
        elif kind == "Timestamp":
            out["ts"] = f"{val[0]},{val[1]}"
        elif kind == "SAck":
            pairs = [f"{val[i]}-{val[i + 1]}" for i in range(0, len(val), 2)]
            out["sack"] = ",".join(pairs)
        elif kind in ("NOP", "EOL"):
            pass
        elif isinstance(kind, int):
            unknown.append(str(kind))
        else:
            # An option scapy knows by name but ixora does not parse (MD5, ...).
            unknown.append(str(TCPOptions[1][kind]))
    if unknown:
        out["tcp_unknown"] = ",".join(unknown)
    return out


def describe(raw):
    p = Ether(raw)
    out = {}
    out["eth_dst"] = p.dst
    out["eth_src"] = p.src
    l3 = p.payload
    if Dot1Q in p:
        d = p[Dot1Q]
        out["vlan"] = str(d.vlan)
        out["vlan_pcp"] = str(d.prio)
        out["eth_type"] = f"{d.type:04x}"
        l3 = d.payload
    else:
        out["eth_type"] = f"{p.type:04x}"
    if Padding in p:
        out["eth_pad"] = str(len(p[Padding].load))

    if isinstance(l3, ARP):
        a = l3
        out.update(arp_op=str(a.op), arp_sha=a.hwsrc, arp_spa=a.psrc, arp_tha=a.hwdst,
                   arp_tpa=a.pdst)
        return out
    if not isinstance(l3, IP):
        return out

    i = l3
    hl = i.ihl * 4
    ip_raw = bytes(i)  # cached from dissection: the original bytes (+ padding)
    out.update(
        ip_version=str(i.version), ip_ihl=str(i.ihl), ip_tos=str(i.tos), ip_len=str(i.len),
        ip_id=str(i.id), ip_df=str(int(i.flags.DF)), ip_mf=str(int(i.flags.MF)),
        ip_frag=str(i.frag * 8), ip_ttl=str(i.ttl), ip_proto=str(i.proto),
        ip_chksum=f"{i.chksum:04x}", ip_src=i.src, ip_dst=i.dst,
    )
    if i.flags.MF or i.frag:
        # A fragment: the stack does not look past IPv4.
        out["ip_payload"] = ip_raw[hl:i.len].hex()
        return out

    l4 = i.payload
    l4_raw = ip_raw[hl:i.len]
    if isinstance(l4, ICMP):
        c = l4
        out.update(icmp_type=str(c.type), icmp_code=str(c.code), icmp_chksum=f"{c.chksum:04x}",
                   icmp_data=l4_raw[8:].hex())
        if c.type in (0, 8):
            out.update(icmp_id=str(c.id), icmp_seq=str(c.seq))
        if c.type == 3:
            out["icmp_mtu"] = str(c.nexthopmtu)
    elif isinstance(l4, UDP):
        u = l4
        out.update(udp_sport=str(u.sport), udp_dport=str(u.dport), udp_len=str(u.len),
                   udp_chksum=f"{u.chksum:04x}", payload=l4_raw[8:u.len].hex())
        if Raw in u and not isinstance(u[Raw], Padding):
            assert u[Raw].load == l4_raw[8:u.len]
    elif isinstance(l4, TCP):
        t = l4
        out.update(tcp_sport=str(t.sport), tcp_dport=str(t.dport), tcp_seq=str(t.seq),
                   tcp_ack=str(t.ack), tcp_flags=str(int(t.flags)), tcp_window=str(t.window),
                   tcp_dataofs=str(t.dataofs), tcp_urgptr=str(t.urgptr),
                   tcp_chksum=f"{t.chksum:04x}", payload=l4_raw[t.dataofs * 4:].hex())
        out.update(tcp_option_fields(t.options))
    else:
        raise ValueError(f"unexpected IPv4 payload {l4!r}")
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "crates", "wire", "tests", "fixtures", "scapy.txt")
    lines = []
    names = set()
    for name, pkt, canon in fixtures():
        assert name not in names, name
        names.add(name)
        raw = bytes(pkt)
        fields = {"canon": "1" if canon else "0"}
        fields.update(describe(raw))
        for k, v in fields.items():
            assert ";" not in v and "=" not in v and "\t" not in v, (k, v)
        kv = ";".join(f"{k}={v}" for k, v in fields.items())
        lines.append(f"{name}\t{raw.hex()}\t{kv}")
    header = [
        "# Generated by scripts/gen_wire_fixtures.py (scapy); do not edit by hand.",
        "# name<TAB>frame hex<TAB>key=value;... (keys documented in the script)",
    ]
    with open(path, "w") as fh:
        fh.write("\n".join(header + lines) + "\n")
    print(f"wrote {len(lines)} fixtures to {os.path.relpath(path, root)}", file=sys.stderr)


if __name__ == "__main__":
    main()
