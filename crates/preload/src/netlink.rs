//! Address dumps a program asks of the kernel itself over rtnetlink
//! (dnsmasq, iproute2's `ip addr`, libnl and libmnl programs): the
//! service's address is added to the kernel's answer, on the service's
//! interface, as `getifaddrs` and `SIOCGIFCONF` list it (see the shim).
//! The kernel's interfaces do not hold that address, so without this
//! dnsmasq's `--local-service` (Debian's default) ignored every query as
//! "from non-local network" and `--bind-dynamic --interface` never
//! listened.
//!
//! The shim marks `socket(AF_NETLINK, _, NETLINK_ROUTE)` descriptors
//! (`kind::NETLINK`) and shows this module what the program sends on them
//! ([`sent`]) and what it receives ([`received`]). A request for an
//! `RTM_GETADDR` dump of IPv4 (or every family) opens a dump; in the
//! datagram that ends it (`NLMSG_DONE` with the request's sequence
//! number) an `RTM_NEWADDR` for the service's address goes in before the
//! `NLMSG_DONE`, unless the kernel listed that address itself or the
//! request asked for another interface. Everything is parsed within the
//! bytes received; a datagram that is not well formed is left as it came.
//!
//! Room: the entry (at most 96 bytes) must fit the program's buffer
//! beside the datagram. A peek with `MSG_TRUNC` (dnsmasq sizes its buffer
//! so) that finds no room says the datagram is that much longer, and the
//! program's next buffer has room. A receive without room leaves the
//! datagram as it came and the dump without the entry; the kernel fills a
//! dump's datagrams up to the largest buffer the program has read with,
//! so only a dump of many addresses can meet that.

use std::sync::Mutex;

use libc::c_int;

const HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const NLM_F_MULTI: u16 = 2;
const NLM_F_DUMP: u16 = 0x300;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_LABEL: u16 = 3;
const IFA_BROADCAST: u16 = 4;
const IFA_CACHEINFO: u16 = 6;
const IFA_FLAGS: u16 = 8;
const IFA_F_PERMANENT: u8 = 0x80;
const AF_INET: u8 = libc::AF_INET as u8;

/// The service's address as the entry shows it.
pub struct Iface {
    /// Host-order IPv4 address.
    pub ip: u32,
    /// Prefix length of its subnet.
    pub prefix: u8,
    /// Interface index (0 when the service's port is not this namespace's).
    pub index: u32,
    /// Interface name, NUL-terminated.
    pub name: [u8; libc::IFNAMSIZ],
}

/// An open dump on descriptor `fd`.
struct Dump {
    fd: c_int,
    seq: u32,
    /// The interface the request asked for (0: any).
    index: u32,
    /// The kernel listed the service's address itself.
    listed: bool,
}

static DUMPS: Mutex<Vec<Dump>> = Mutex::new(Vec::new());

fn dumps() -> std::sync::MutexGuard<'static, Vec<Dump>> {
    DUMPS.lock().unwrap_or_else(|p| p.into_inner())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The netlink messages in `b`: (offset, length), each whole within `b`;
/// parsing stops at the first that is not.
fn messages(b: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + HDR > b.len() {
            return None;
        }
        let len = u32_at(b, at) as usize;
        if len < HDR || len > b.len() - at {
            return None;
        }
        let m = (at, len);
        at += (len + 3) & !3;
        Some(m)
    })
}

/// Descriptor `fd` is a new rtnetlink socket (or was closed): it has no
/// dump open.
pub fn forget(fd: c_int) {
    dumps().retain(|d| d.fd != fd);
}

/// The program sent `req` on rtnetlink socket `fd`: an `RTM_GETADDR` dump
/// of IPv4 or of every family opens a dump (replacing one left open).
pub fn sent(fd: c_int, req: &[u8]) {
    for (at, len) in messages(req) {
        let m = &req[at..at + len];
        if u16_at(m, 4) != RTM_GETADDR || u16_at(m, 6) & NLM_F_DUMP != NLM_F_DUMP {
            continue;
        }
        // The body is an ifaddrmsg (family, prefix, flags, scope, index)
        // or, from older programs, a bare rtgenmsg (the family).
        let family = m.get(HDR).copied().unwrap_or(0);
        if family != 0 && family != AF_INET {
            continue;
        }
        let index = if len >= HDR + 8 {
            u32_at(m, HDR + 4)
        } else {
            0
        };
        let seq = u32_at(m, 8);
        let mut d = dumps();
        d.retain(|d| d.fd != fd);
        d.push(Dump {
            fd,
            seq,
            index,
            listed: false,
        });
    }
}

/// What [`received`] made of a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Left as it came.
    AsItCame,
    /// The entry went in: the datagram is now this long.
    Grew(usize),
    /// The entry belongs in it, but the buffer has no room: the datagram
    /// would be this long.
    NoRoom(usize),
}

/// The program received a datagram of `n` bytes into `buf` on rtnetlink
/// socket `fd` (`peek`: it stays queued; `n` may exceed `buf`'s length
/// when it was truncated, and is then left alone). Puts the service's
/// address in before the `NLMSG_DONE` of an open dump; `iface` is asked
/// for only then.
pub fn received(
    fd: c_int,
    buf: &mut [u8],
    n: usize,
    peek: bool,
    iface: impl FnOnce() -> Option<Iface>,
) -> Received {
    if n > buf.len() {
        return Received::AsItCame;
    }
    let Some((seq, want, mut listed)) = dumps()
        .iter()
        .find(|d| d.fd == fd)
        .map(|d| (d.seq, d.index, d.listed))
    else {
        return Received::AsItCame;
    };
    let Some(i) = iface() else {
        return Received::AsItCame;
    };
    let mut end = None;
    for (at, len) in messages(&buf[..n]) {
        let m = &buf[at..at + len];
        if u32_at(m, 8) != seq {
            continue;
        }
        match u16_at(m, 4) {
            RTM_NEWADDR if len >= HDR + 8 && m[HDR] == AF_INET => {
                listed |= holds(&m[HDR + 8..], i.ip);
            }
            NLMSG_DONE => {
                end = Some((at, u32_at(m, 12), true));
                break;
            }
            NLMSG_ERROR => {
                end = Some((at, 0, false));
                break;
            }
            _ => {}
        }
    }
    if !peek {
        let mut all = dumps();
        if end.is_some() {
            all.retain(|d| d.fd != fd);
        } else if let Some(d) = all.iter_mut().find(|d| d.fd == fd && d.seq == seq) {
            d.listed = listed;
        }
    }
    let Some((at, pid, true)) = end else {
        return Received::AsItCame;
    };
    if listed || (want != 0 && want != i.index) {
        return Received::AsItCame;
    }
    let e = entry(&i, seq, pid);
    if n + e.len() > buf.len() {
        return Received::NoRoom(n + e.len());
    }
    buf.copy_within(at..n, at + e.len());
    buf[at..at + e.len()].copy_from_slice(&e);
    Received::Grew(n + e.len())
}

/// Whether the attributes `attrs` of an `RTM_NEWADDR` give `ip` as the
/// local or the peer address.
fn holds(attrs: &[u8], ip: u32) -> bool {
    let mut at = 0;
    while at + 4 <= attrs.len() {
        let len = u16_at(attrs, at) as usize;
        if len < 4 || at + len > attrs.len() {
            return false;
        }
        let ty = u16_at(attrs, at + 2) & 0x3fff; // (less the nesting flags)
        if (ty == IFA_LOCAL || ty == IFA_ADDRESS)
            && len == 8
            && attrs[at + 4..at + 8] == ip.to_be_bytes()
        {
            return true;
        }
        at += (len + 3) & !3;
    }
    false
}

/// The `RTM_NEWADDR` the kernel would send for `i` in a dump (its
/// `IFA_CACHEINFO` says "forever", as for an address set by hand).
fn entry(i: &Iface, seq: u32, pid: u32) -> Vec<u8> {
    let mut e = Vec::with_capacity(96);
    e.extend_from_slice(&[0; 4]); // length, below
    e.extend_from_slice(&RTM_NEWADDR.to_ne_bytes());
    e.extend_from_slice(&NLM_F_MULTI.to_ne_bytes());
    e.extend_from_slice(&seq.to_ne_bytes());
    e.extend_from_slice(&pid.to_ne_bytes());
    e.extend_from_slice(&[AF_INET, i.prefix, IFA_F_PERMANENT, 0]); // scope universe
    e.extend_from_slice(&i.index.to_ne_bytes());
    let mask = if i.prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(i.prefix.min(32)))
    };
    let mut attr = |ty: u16, v: &[u8]| {
        e.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        e.extend_from_slice(&ty.to_ne_bytes());
        e.extend_from_slice(v);
        e.resize((e.len() + 3) & !3, 0);
    };
    attr(IFA_ADDRESS, &i.ip.to_be_bytes());
    attr(IFA_LOCAL, &i.ip.to_be_bytes());
    attr(IFA_BROADCAST, &(i.ip | !mask).to_be_bytes());
    let named = i
        .name
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(libc::IFNAMSIZ - 1);
    let mut label = i.name[..named].to_vec();
    label.push(0);
    attr(IFA_LABEL, &label);
    attr(IFA_FLAGS, &u32::from(IFA_F_PERMANENT).to_ne_bytes());
    let mut cache = [0u8; 16];
    cache[..4].copy_from_slice(&u32::MAX.to_ne_bytes());
    cache[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    attr(IFA_CACHEINFO, &cache);
    let len = e.len() as u32;
    e[..4].copy_from_slice(&len.to_ne_bytes());
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 0xc612_0902; // 198.18.9.2
    const FD: c_int = 900;

    fn me() -> Option<Iface> {
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..5].copy_from_slice(b"veth0");
        Some(Iface {
            ip: ME,
            prefix: 24,
            index: 7,
            name,
        })
    }

    fn msg(ty: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = ((HDR + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(body);
        m.resize((m.len() + 3) & !3, 0);
        m
    }

    /// The kernel's entry for `ip` on interface `index`.
    fn newaddr(seq: u32, ip: u32, index: u32) -> Vec<u8> {
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..2].copy_from_slice(b"lo");
        entry(
            &Iface {
                ip,
                prefix: 8,
                index,
                name,
            },
            seq,
            4242,
        )
    }

    fn request(fd: c_int, family: u8, index: u32, seq: u32) {
        let mut body = vec![family, 0, 0, 0];
        body.extend_from_slice(&index.to_ne_bytes());
        sent(fd, &msg(RTM_GETADDR, 1 | NLM_F_DUMP, seq, &body));
    }

    fn done(seq: u32) -> Vec<u8> {
        msg(NLMSG_DONE, NLM_F_MULTI, seq, &0u32.to_ne_bytes())
    }

    /// The (type, ip of IFA_LOCAL, index) of each message in `b`.
    fn parsed(b: &[u8]) -> Vec<(u16, Option<u32>, u32)> {
        messages(b)
            .map(|(at, len)| {
                let m = &b[at..at + len];
                let ty = u16_at(m, 4);
                if ty != RTM_NEWADDR {
                    return (ty, None, 0);
                }
                let mut ip = None;
                let attrs = &m[HDR + 8..];
                let mut a = 0;
                while a + 4 <= attrs.len() {
                    let l = u16_at(attrs, a) as usize;
                    if u16_at(attrs, a + 2) == IFA_LOCAL {
                        ip = Some(u32::from_be_bytes(attrs[a + 4..a + 8].try_into().unwrap()));
                    }
                    a += (l + 3) & !3;
                }
                (ty, ip, u32_at(m, HDR + 4))
            })
            .collect()
    }

    #[test]
    fn the_entry_is_at_most_96_bytes() {
        let mut i = me().unwrap();
        i.name = [b'x'; libc::IFNAMSIZ];
        assert_eq!(entry(&i, 1, 2).len(), 96);
    }

    #[test]
    fn an_ipv4_address_dump_lists_the_service_before_its_end() {
        request(FD, AF_INET, 0, 5);
        let mut d = newaddr(5, 0x7f00_0001, 1);
        d.extend(done(5));
        let n = d.len();
        d.resize(4096, 0);
        let got = received(FD, &mut d, n, false, me);
        let Received::Grew(len) = got else {
            panic!("{got:?}")
        };
        assert_eq!(
            parsed(&d[..len]),
            [
                (RTM_NEWADDR, Some(0x7f00_0001), 1),
                (RTM_NEWADDR, Some(ME), 7),
                (NLMSG_DONE, None, 0)
            ]
        );
        // The dump is over: a second datagram is left alone.
        let mut again = done(5);
        let n = again.len();
        again.resize(4096, 0);
        assert_eq!(received(FD, &mut again, n, false, me), Received::AsItCame);
    }

    #[test]
    fn a_peek_that_finds_no_room_says_how_long_the_datagram_would_be() {
        let fd = FD + 1;
        request(fd, 0, 0, 9);
        let mut d = newaddr(9, 0x7f00_0001, 1);
        d.extend(done(9));
        let n = d.len();
        let mut tight = d.clone();
        let Received::NoRoom(len) = received(fd, &mut tight, n, true, me) else {
            panic!("room?")
        };
        assert_eq!(tight, d, "left as it came");
        // The peek kept the dump open; a buffer that long takes it.
        let mut roomy = d.clone();
        roomy.resize(len, 0);
        assert_eq!(received(fd, &mut roomy, n, true, me), Received::Grew(len));
        // The real receive: the kernel's bytes again.
        roomy[..n].copy_from_slice(&d);
        assert_eq!(received(fd, &mut roomy, n, false, me), Received::Grew(len));
        assert_eq!(parsed(&roomy).len(), 3);
    }

    #[test]
    fn listed_by_the_kernel_or_another_interface_or_family_is_left_alone() {
        // The kernel holds the address itself (in an earlier datagram).
        let fd = FD + 2;
        request(fd, AF_INET, 0, 1);
        let mut first = newaddr(1, ME, 3);
        let n = first.len();
        first.resize(4096, 0);
        assert_eq!(received(fd, &mut first, n, false, me), Received::AsItCame);
        let mut end = done(1);
        let n = end.len();
        end.resize(4096, 0);
        assert_eq!(received(fd, &mut end, n, false, me), Received::AsItCame);
        // A dump of another interface, of IPv6, or with another sequence.
        for (family, index, seq) in [
            (AF_INET, 3, 2),
            (libc::AF_INET6 as u8, 0, 3),
            (AF_INET, 0, 4),
        ] {
            request(fd, family, index, seq);
            let mut end = done(if seq == 4 { 99 } else { seq });
            let n = end.len();
            end.resize(4096, 0);
            assert_eq!(received(fd, &mut end, n, false, me), Received::AsItCame);
        }
        forget(fd);
    }

    #[test]
    fn malformed_or_truncated_datagrams_are_left_as_they_came() {
        let fd = FD + 3;
        let long_done = {
            let mut m = done(7);
            m[0] = 200; // longer than the datagram
            m
        };
        let cut = msg(RTM_NEWADDR, 0, 7, &[AF_INET])[..10].to_vec();
        for bad in [vec![0u8; 3], cut, long_done] {
            request(fd, AF_INET, 0, 7);
            let mut b = bad.clone();
            let n = b.len();
            b.resize(4096, 0);
            assert_eq!(received(fd, &mut b, n, false, me), Received::AsItCame);
            assert_eq!(b[..n], bad[..]);
        }
        // An attribute longer than its message: the kernel's entry is not
        // read as the service's, and its bytes stay as they came.
        request(fd, AF_INET, 0, 7);
        let mut odd = newaddr(7, ME, 1);
        odd[HDR + 8] = 200;
        let kept = odd.len();
        odd.extend(done(7));
        let mut b = odd.clone();
        let n = b.len();
        b.resize(4096, 0);
        assert!(matches!(
            received(fd, &mut b, n, false, me),
            Received::Grew(_)
        ));
        assert_eq!(b[..kept], odd[..kept]);
        // Truncated by the kernel (n beyond the buffer).
        request(fd, AF_INET, 0, 8);
        let mut short = done(8);
        let n = short.len() + 100;
        assert_eq!(received(fd, &mut short, n, false, me), Received::AsItCame);
        forget(fd);
    }

    proptest::proptest! {
        /// Any bytes as a request or as a datagram: no panic, the program's
        /// buffer is only ever grown by one entry put in whole before an
        /// `NLMSG_DONE`, every other byte kept in its order.
        #[test]
        fn any_bytes_are_parsed_without_harm(
            req in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            msgs in proptest::collection::vec(
                (0u16..24, 2u32..5, proptest::collection::vec(proptest::num::u8::ANY, 0..48)),
                0..5,
            ),
            corrupt in proptest::option::of((0usize..400, proptest::num::u8::ANY)),
            room in 0usize..200,
            peek in proptest::bool::ANY,
        ) {
            let fd = FD + 10;
            sent(fd, &req);
            request(fd, AF_INET, 0, 3);
            // Messages of any type and body (an NLMSG_DONE among them
            // when the dice say so), one byte perhaps changed.
            let mut d = Vec::new();
            for (ty, seq, body) in &msgs {
                d.extend(msg(*ty, NLM_F_MULTI, *seq, body));
            }
            if let Some((at, v)) = corrupt {
                if let Some(x) = d.get_mut(at) {
                    *x = v;
                }
            }
            let n = d.len();
            let mut b = d.clone();
            b.resize(n + room, 0xee);
            match received(fd, &mut b, n, peek, me) {
                Received::AsItCame => proptest::prop_assert_eq!(&b[..n], &d[..]),
                Received::NoRoom(len) => {
                    proptest::prop_assert!(len > n + room);
                    proptest::prop_assert_eq!(&b[..n], &d[..]);
                }
                Received::Grew(len) => {
                    proptest::prop_assert!(len <= b.len());
                    // Before the first NLMSG_DONE of the dump (sequence 3).
                    let at = messages(&d)
                        .find(|&(at, _)| u16_at(&d, at + 4) == NLMSG_DONE && u32_at(&d, at + 8) == 3)
                        .map(|(at, _)| at)
                        .expect("an end");
                    let e = len - n;
                    proptest::prop_assert_eq!(&b[..at], &d[..at]);
                    // The entry carries the port id of the NLMSG_DONE it
                    // was put before (a corrupted byte may have changed it).
                    let pid = u32_at(&d, at + 12);
                    proptest::prop_assert_eq!(&b[at..at + e], &entry(&me().unwrap(), 3, pid)[..]);
                    proptest::prop_assert_eq!(&b[at + e..len], &d[at..]);
                }
            }
            forget(fd);
        }
    }
}
