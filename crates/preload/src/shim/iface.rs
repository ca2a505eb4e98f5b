//! Interface queries: the SIOCGIF* ioctls, getifaddrs and rtnetlink answered with Ixora's address,
//! and getaddrinfo's AI_ADDRCONFIG counting it.

use super::*;

/// The entry the shim adds to `getifaddrs`'s list: the service's address,
/// on the service's interface. The kernel's interfaces do not hold it
/// (Ixora owns it), so a program that binds one socket per listed address
/// (BIND's `named`) or looks its local address up among them never found
/// it.
#[repr(C)]
struct ServiceIfa {
    ifa: libc::ifaddrs,
    name: [libc::c_char; libc::IFNAMSIZ],
    addr: libc::sockaddr_in,
    mask: libc::sockaddr_in,
    bcast: libc::sockaddr_in,
}

/// The service's address as an interface of this host shows it: on the
/// interface of the service's port (its name; "ixora" if that is not
/// this namespace's), with the subnet's mask.
struct ServiceIface {
    name: [libc::c_char; libc::IFNAMSIZ],
    ip: u32,
    mask: u32,
    prefix: u8,
    /// Its interface's index (0 when not this namespace's).
    index: u32,
}

impl ServiceIface {
    /// The service's, attaching to it; None without one, or before it
    /// has an address.
    fn get() -> Option<ServiceIface> {
        let a = state::attach()?;
        let h = a.r.down_header();
        let ip = h.ip.load(Ordering::Relaxed);
        let prefix = h.prefix.load(Ordering::Relaxed).min(32);
        if ip == 0 {
            return None;
        }
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        let index = h.ifindex.load(Ordering::Relaxed);
        // SAFETY: if_indextoname(3) writes at most IFNAMSIZ bytes into `name`.
        let named =
            index != 0 && !unsafe { libc::if_indextoname(index, name.as_mut_ptr()) }.is_null();
        let index = if named { index } else { 0 };
        if !named {
            for (d, s) in name.iter_mut().zip(b"ixora\0") {
                *d = *s as libc::c_char;
            }
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Some(ServiceIface {
            name,
            ip,
            mask,
            prefix: prefix as u8,
            index,
        })
    }
}

/// The shim's answer after the kernel's receive of `r` bytes into the
/// program's buffer (`buf`, `n` bytes) on descriptor `fd`: an rtnetlink
/// socket's address dump gets the service's address (see `netlink`).
/// Returns the length to give the program, and whether the datagram was
/// longer than the buffer (a peek that found no room for the entry).
///
/// # Safety
/// `buf` has `n` writable bytes (or is null), the kernel's `r` of them
/// received.
pub(super) unsafe fn netlink_received(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    r: ssize_t,
    flags: c_int,
) -> (ssize_t, bool) {
    if r <= 0 || buf.is_null() || state::kind_of(fd) != kind::NETLINK {
        return (r, false);
    }
    // SAFETY (caller): `n` writable bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    let peek = flags & libc::MSG_PEEK != 0;
    let iface = || {
        ServiceIface::get().map(|s| crate::netlink::Iface {
            ip: s.ip,
            prefix: s.prefix,
            index: s.index,
            name: s.name.map(|c| c as u8),
        })
    };
    match crate::netlink::received(fd, b, r as usize, peek, iface) {
        crate::netlink::Received::Grew(len) => (len as ssize_t, false),
        // (A peek with MSG_TRUNC is told the whole length, as the kernel
        // tells it; the bytes are a view of the datagram cut short.)
        crate::netlink::Received::NoRoom(len) if peek => {
            let told = if flags & libc::MSG_TRUNC != 0 {
                len
            } else {
                r as usize
            };
            (told as ssize_t, true)
        }
        _ => (r, false),
    }
}

/// After the kernel took `r` bytes of the program's `n` at `buf` on
/// descriptor `fd`: an rtnetlink socket's request may open an address
/// dump (see `netlink`).
///
/// # Safety
/// `buf` has `n` readable bytes (or is null).
pub(super) unsafe fn netlink_sent(fd: c_int, buf: *const c_void, n: size_t, r: ssize_t) {
    if r > 0 && !buf.is_null() && state::kind_of(fd) == kind::NETLINK {
        // SAFETY (caller): `n` readable bytes, of which the kernel took `r`.
        let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n.min(r as usize)) };
        crate::netlink::sent(fd, b);
    }
}

/// SIOCGIFCONF, SIOCGIFADDR, SIOCGIFNETMASK and SIOCGIFBRDADDR on any
/// socket (`real`: the kernel's answer): as for [`getifaddrs`], the
/// service's address is listed, after the kernel's, on the service's
/// interface, which no kernel address is on (Java's `NetworkInterface`
/// lists interfaces with SIOCGIFCONF); asked by that interface's name,
/// the address calls answer with it.
///
/// # Safety
/// `arg` is what the ioctl's contract says: an `ifconf` or `ifreq`.
pub(super) unsafe fn iface_ioctl(req: c_ulong, arg: usize, real: impl FnOnce() -> c_int) -> c_int {
    const IFREQ: usize = std::mem::size_of::<libc::ifreq>();
    if arg == 0 {
        return real();
    }
    if req == libc::SIOCGIFCONF {
        // SAFETY (caller): an ifconf.
        let ifc = unsafe { &mut *(arg as *mut libc::ifconf) };
        let room = ifc.ifc_len.max(0) as usize;
        let r = real();
        let Some(svc) = (r == 0).then(ServiceIface::get).flatten() else {
            return r;
        };
        // SAFETY: the union's pointer member is the buffer (or null).
        let buf = unsafe { ifc.ifc_ifcu.ifcu_req };
        let used = ifc.ifc_len.max(0) as usize;
        if buf.is_null() {
            // The length a full list needs.
            ifc.ifc_len = (used + IFREQ) as c_int;
            return r;
        }
        // SAFETY: the kernel wrote `used` bytes of ifreqs into `buf`.
        let listed = unsafe { std::slice::from_raw_parts(buf, used / IFREQ) };
        let has = listed.iter().any(|q| {
            // SAFETY: SIOCGIFCONF's entries hold AF_INET addresses.
            let a = unsafe { &*(&q.ifr_ifru.ifru_addr as *const _ as *const libc::sockaddr_in) };
            u32::from_be(a.sin_addr.s_addr) == svc.ip
        });
        if !has && used + IFREQ <= room {
            // SAFETY: room for one more entry (checked).
            let q = unsafe { &mut *buf.add(used / IFREQ) };
            // SAFETY: all-zero is a valid ifreq.
            *q = unsafe { std::mem::zeroed() };
            q.ifr_name = svc.name;
            // SAFETY: a sockaddr_in fits the union's sockaddr.
            unsafe { put_ifr_addr(q, svc.ip) };
            ifc.ifc_len = (used + IFREQ) as c_int;
        }
        return r;
    }
    let r = real();
    if r == 0 || errno() != libc::EADDRNOTAVAIL {
        return r;
    }
    // SAFETY (caller): an ifreq.
    let q = unsafe { &mut *(arg as *mut libc::ifreq) };
    match ServiceIface::get() {
        Some(svc) if svc.name == q.ifr_name => {
            let v = match req {
                libc::SIOCGIFADDR => svc.ip,
                libc::SIOCGIFNETMASK => svc.mask,
                _ => svc.ip | !svc.mask,
            };
            // SAFETY: as above.
            unsafe { put_ifr_addr(q, v) };
            0
        }
        _ => r,
    }
}

/// An ifreq's address: AF_INET `ip`.
///
/// # Safety
/// `q` is a whole ifreq.
unsafe fn put_ifr_addr(q: &mut libc::ifreq, ip: u32) {
    // SAFETY (caller): the union is as large as a sockaddr, which a
    // sockaddr_in fills.
    unsafe {
        std::ptr::write_unaligned(
            &mut q.ifr_ifru.ifru_addr as *mut sockaddr as *mut libc::sockaddr_in,
            sin(ip, 0),
        )
    };
}

/// The [`ServiceIfa`]s handed out and not yet freed (their addresses).
static SERVICE_IFAS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// getifaddrs(3): the kernel's list, and the service's address at its end
/// (on the interface of the service's port, up) unless the kernel's
/// interfaces hold it too. Programs that ask the kernel for its addresses
/// over rtnetlink themselves (dnsmasq, `ip addr`) get it too: see
/// `netlink`.
#[no_mangle]
pub unsafe extern "C" fn getifaddrs(out: *mut *mut libc::ifaddrs) -> c_int {
    let r = real!(getifaddrs: fn(*mut *mut libc::ifaddrs) -> c_int)(out);
    if r != 0 || out.is_null() {
        return r;
    }
    let Some(svc) = ServiceIface::get() else {
        return r;
    };
    let (ip, mask) = (svc.ip, svc.mask);
    // SAFETY: `*out` is the list the C library just built, every node
    // with a valid (or null) address.
    let mut last: *mut libc::ifaddrs = std::ptr::null_mut();
    let mut p = unsafe { *out };
    while !p.is_null() {
        // SAFETY: as above.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null()
            // SAFETY: as above; an AF_INET address is a sockaddr_in.
            && unsafe { (*i.ifa_addr).sa_family } == libc::AF_INET as libc::sa_family_t
            && u32::from_be(unsafe { (*(i.ifa_addr as *const libc::sockaddr_in)).sin_addr.s_addr })
                == ip
        {
            return r;
        }
        last = p;
        p = i.ifa_next;
    }
    // SAFETY: all-zero is a valid ifaddrs (null pointers) and name.
    let mut node: Box<ServiceIfa> = Box::new(unsafe { std::mem::zeroed() });
    node.addr = sin(ip, 0);
    node.mask = sin(mask, 0);
    node.bcast = sin(ip | !mask, 0);
    node.name = svc.name;
    let raw = Box::into_raw(node);
    // SAFETY: `raw` is ours until freeifaddrs; its pointers point into it.
    unsafe {
        let n = &mut *raw;
        n.ifa.ifa_name = n.name.as_mut_ptr();
        n.ifa.ifa_flags = (libc::IFF_UP
            | libc::IFF_RUNNING
            | libc::IFF_LOWER_UP
            | libc::IFF_BROADCAST
            | libc::IFF_MULTICAST) as c_uint;
        n.ifa.ifa_addr = &mut n.addr as *mut libc::sockaddr_in as *mut sockaddr;
        n.ifa.ifa_netmask = &mut n.mask as *mut libc::sockaddr_in as *mut sockaddr;
        n.ifa.ifa_ifu = &mut n.bcast as *mut libc::sockaddr_in as *mut sockaddr;
        if last.is_null() {
            *out = raw as *mut libc::ifaddrs;
        } else {
            (*last).ifa_next = raw as *mut libc::ifaddrs;
        }
    }
    SERVICE_IFAS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(raw as usize);
    r
}

/// freeifaddrs(3): the shim's entry, then the C library's list.
#[no_mangle]
pub unsafe extern "C" fn freeifaddrs(list: *mut libc::ifaddrs) {
    let mut ours = SERVICE_IFAS.lock().unwrap_or_else(|p| p.into_inner());
    let mut prev: *mut libc::ifaddrs = std::ptr::null_mut();
    let mut p = list;
    while !ours.is_empty() && !p.is_null() {
        // SAFETY: a list getifaddrs returned, as freeifaddrs's contract
        // says.
        let next = unsafe { (*p).ifa_next };
        if let Some(k) = ours.iter().position(|&x| x == p as usize) {
            ours.swap_remove(k);
            if !prev.is_null() {
                // SAFETY: as above.
                unsafe { (*prev).ifa_next = next };
            }
            // SAFETY: made by Box::into_raw in getifaddrs, freed once.
            drop(unsafe { Box::from_raw(p as *mut ServiceIfa) });
            if p == list {
                // The kernel's list was empty.
                return;
            }
            break;
        }
        prev = p;
        p = next;
    }
    drop(ours);
    real!(freeifaddrs: fn(*mut libc::ifaddrs) -> ())(list)
}

/// `AI_DEFAULT` in glibc's `include/netdb.h`: the flags of a
/// `getaddrinfo` called with NULL hints.
const AI_DEFAULT: c_int = libc::AI_V4MAPPED | libc::AI_ADDRCONFIG;

/// getaddrinfo(3). With `AI_ADDRCONFIG` (which NULL hints mean too) glibc
/// decides which families this host has from the kernel's addresses, read
/// over netlink by calls of its own (`__check_pf`) that the shim does not
/// see: where no kernel interface holds an IPv4 address but 127.0.0.1, the
/// service's address did not count, and a lookup of it failed —
/// `EAI_NONAME` with `AF_INET`, `EAI_ADDRFAMILY` with `AF_UNSPEC` where
/// the kernel has an IPv6 address (icecast2 resolves its `<bind-address>`
/// so: "Server startup failed"). There the shim makes glibc's decision
/// itself, the service's address counted, and asks without
/// `AI_ADDRCONFIG`, every other field of the hints kept; otherwise the C
/// library's answer as it comes.
#[no_mangle]
pub unsafe extern "C" fn getaddrinfo(
    node: *const libc::c_char,
    service: *const libc::c_char,
    hints: *const libc::addrinfo,
    res: *mut *mut libc::addrinfo,
) -> c_int {
    let real = real!(getaddrinfo: fn(
        *const libc::c_char,
        *const libc::c_char,
        *const libc::addrinfo,
        *mut *mut libc::addrinfo
    ) -> c_int);
    // SAFETY (caller): `hints` is null or a readable addrinfo; it is
    // copied whole, its pointers not followed (glibc copies it so too).
    let asked = (!hints.is_null()).then(|| unsafe { std::ptr::read(hints) });
    let (flags, family) = asked
        .as_ref()
        .map_or((AI_DEFAULT, libc::AF_UNSPEC), |h| (h.ai_flags, h.ai_family));
    if flags & libc::AI_ADDRCONFIG == 0 {
        return real(node, service, hints, res);
    }
    // (The look at the interfaces leaves errno as it was.)
    let e = errno();
    let decided = addrconfig_with_service(family);
    set_errno(e);
    let Some(decided) = decided else {
        return real(node, service, hints, res);
    };
    let Some(family) = decided else {
        return libc::EAI_NONAME;
    };
    let mut h = asked.unwrap_or_else(|| {
        // SAFETY: all-zero is a valid addrinfo (null pointers), as
        // glibc's default hints are but for the flags.
        unsafe { std::mem::zeroed() }
    });
    h.ai_flags = flags & !libc::AI_ADDRCONFIG;
    h.ai_family = family;
    real(node, service, &h, res)
}

/// glibc's `AI_ADDRCONFIG` decision (`getaddrinfo` in
/// sysdeps/posix/getaddrinfo.c, 2.36) for a lookup of `family` on a host
/// with an IPv4 address other than 127.0.0.1 (`v4`) and an IPv6 one other
/// than ::1 (`v6`; a link-local one counts): the family to look up (a
/// host with one of the two narrows `AF_UNSPEC` to it), or None for
/// `EAI_NONAME` (the family asked for is not there).
fn addrconfig_family(family: c_int, v4: bool, v6: bool) -> Option<c_int> {
    match family {
        libc::AF_UNSPEC if v4 != v6 => Some(if v4 { libc::AF_INET } else { libc::AF_INET6 }),
        libc::AF_INET if !v4 => None,
        libc::AF_INET6 if !v6 => None,
        f => Some(f),
    }
}

/// [`addrconfig_family`] with the service's address counted as this
/// host's, where that changes glibc's decision: None (let the C library
/// decide) if the family is neither `AF_UNSPEC` nor `AF_INET`, the
/// kernel's interfaces hold an IPv4 address already (or cannot be read:
/// glibc then counts both families), or there is no service address.
fn addrconfig_with_service(family: c_int) -> Option<Option<c_int>> {
    if family != libc::AF_UNSPEC && family != libc::AF_INET {
        return None;
    }
    let (v4, v6) = kernel_families()?;
    if v4 {
        return None;
    }
    // (The service's address as getifaddrs learns it, attaching: asked
    // only here, where it decides.)
    let svc = ServiceIface::get()?;
    if svc.ip == libc::INADDR_LOOPBACK {
        return None;
    }
    Some(addrconfig_family(family, true, v6))
}

/// Whether the kernel's interfaces hold an IPv4 address other than
/// 127.0.0.1 and an IPv6 one other than ::1, counted as glibc's
/// `__check_pf` counts them; None if the list cannot be read.
fn kernel_families() -> Option<(bool, bool)> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    if real!(getifaddrs: fn(*mut *mut libc::ifaddrs) -> c_int)(&mut list) != 0 {
        return None;
    }
    let (mut v4, mut v6) = (false, false);
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `list` is the list the C library just built, every node
        // with a valid (or null) address of its family's size.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null() {
            // SAFETY: as above.
            match c_int::from(unsafe { (*i.ifa_addr).sa_family }) {
                libc::AF_INET => {
                    // SAFETY: as above; an AF_INET address is a sockaddr_in.
                    let a = unsafe { &*(i.ifa_addr as *const libc::sockaddr_in) };
                    v4 |= u32::from_be(a.sin_addr.s_addr) != libc::INADDR_LOOPBACK;
                }
                libc::AF_INET6 => {
                    // SAFETY: as above; an AF_INET6 address is a
                    // sockaddr_in6.
                    let a = unsafe { &*(i.ifa_addr as *const libc::sockaddr_in6) };
                    v6 |= a.sin6_addr.s6_addr != std::net::Ipv6Addr::LOCALHOST.octets();
                }
                _ => {}
            }
        }
        p = i.ifa_next;
    }
    real!(freeifaddrs: fn(*mut libc::ifaddrs) -> ())(list);
    Some((v4, v6))
}

/// After a successful `FIOCLEX` / `FIONCLEX` on `fd`: its close-on-exec.
pub(super) fn note_ioctl_cloexec(fd: c_int, req: c_ulong) {
    match req {
        libc::FIOCLEX => state::note_cloexec(fd, true),
        libc::FIONCLEX => state::note_cloexec(fd, false),
        _ => {}
    }
}

/// ioctl requests on an Ixora socket that its kernel placeholder answers
/// rightly: close-on-exec (`FIOCLEX`, `FIONCLEX`: Python's
/// `os.set_inheritable`), and the socket-configuration calls about the
/// kernel's interfaces, routes and ARP table (`SIOCGIFCONF`,
/// `SIOCGIFADDR`, `SIOCETHTOOL`, ..., `SIOCGSKNS`), which Linux answers on
/// any socket. Not `SIOCOUTQNSD` (this socket's unsent bytes, which the
/// placeholder would call 0): like the other requests about the socket's
/// data that Ixora does not answer, `ENOTTY`.
/// The interface ioctls [`iface_ioctl`] answers.
pub(super) fn is_iface_ioctl(req: c_ulong) -> bool {
    matches!(
        req,
        libc::SIOCGIFCONF | libc::SIOCGIFADDR | libc::SIOCGIFNETMASK | libc::SIOCGIFBRDADDR
    )
}

pub(super) fn passes_to_placeholder(req: c_ulong) -> bool {
    const SIOCOUTQNSD: c_ulong = 0x894B;
    // FIOSETOWN, SIOCSPGRP, FIOGETOWN, SIOCGPGRP: the owner `SIGURG` goes
    // to, which the placeholder keeps (as `F_SETOWN` sets it).
    const OWNER: std::ops::RangeInclusive<c_ulong> = 0x8901..=0x8904;
    matches!(req, libc::FIOCLEX | libc::FIONCLEX)
        || OWNER.contains(&req)
        || (req != SIOCOUTQNSD && (libc::SIOCADDRT..=0x89FF).contains(&req))
}

pub(super) unsafe fn put_int(val: *mut c_void, len: *mut socklen_t, v: c_int) -> c_int {
    if val.is_null() || len.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY (caller): `len` readable/writable, `val` has `*len` bytes.
    unsafe {
        let n = (*len as usize).min(4);
        std::ptr::copy_nonoverlapping(&v as *const c_int as *const u8, val as *mut u8, n);
        *len = n as socklen_t;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36's `AI_ADDRCONFIG` decision: a host with one family
    /// narrows `AF_UNSPEC` to it, with both or neither leaves it; a
    /// family the host lacks is `EAI_NONAME` (None).
    #[test]
    fn addrconfig_decides_as_glibc() {
        use libc::{AF_INET, AF_INET6, AF_UNSPEC};
        for (family, v4, v6, want) in [
            (AF_UNSPEC, true, false, Some(AF_INET)),
            (AF_UNSPEC, false, true, Some(AF_INET6)),
            (AF_UNSPEC, true, true, Some(AF_UNSPEC)),
            (AF_UNSPEC, false, false, Some(AF_UNSPEC)),
            (AF_INET, true, false, Some(AF_INET)),
            (AF_INET, false, true, None),
            (AF_INET, false, false, None),
            (AF_INET6, true, false, None),
            (AF_INET6, false, true, Some(AF_INET6)),
        ] {
            assert_eq!(
                addrconfig_family(family, v4, v6),
                want,
                "{family} {v4} {v6}"
            );
        }
    }
}
