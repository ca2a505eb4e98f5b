//! Interface queries: the SIOCGIF* ioctls, getifaddrs and rtnetlink answered with Ixora's address.

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
    matches!(req, libc::FIOCLEX | libc::FIONCLEX)
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
