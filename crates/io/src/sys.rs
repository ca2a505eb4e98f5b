//! Small system-call helpers shared by the backends: interface lookups done
//! through a socket of the *calling thread's* network namespace (not
//! /sys, which shows the namespace it was mounted in), and errno handling.
#![allow(unsafe_code)]

use ixora_wire::ethernet::MacAddr;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turn a -1 return into the errno as an `io::Error`.
pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A socket of `domain`/`ty`/`proto`, close-on-exec.
pub fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) has no memory arguments; the returned descriptor is
    // fresh and owned by the OwnedFd from here on.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: `fd` is a valid descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "interface name {name:?} is longer than {} bytes",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

fn ioctl_ifreq(req: libc::c_ulong, name: &str) -> io::Result<libc::ifreq> {
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut r = ifreq(name)?;
    // SAFETY: `r` is a valid, writable ifreq for an interface ioctl; the
    // socket is open for the duration of the call.
    cvt(unsafe { libc::ioctl(s.as_raw_fd(), req as _, &mut r as *mut libc::ifreq) })
        .map_err(|e| io::Error::new(e.kind(), format!("interface {name}: {e}")))?;
    Ok(r)
}

/// Index of interface `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let r = ioctl_ifreq(libc::SIOCGIFINDEX, name)?;
    // SAFETY: SIOCGIFINDEX filled the ifindex member of the union.
    Ok(unsafe { r.ifr_ifru.ifru_ifindex } as u32)
}

/// Ethernet address of interface `name`.
pub fn hwaddr(name: &str) -> io::Result<MacAddr> {
    let r = ioctl_ifreq(libc::SIOCGIFHWADDR, name)?;
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(MacAddr(m))
}

/// MTU of interface `name`.
pub fn mtu(name: &str) -> io::Result<u32> {
    let r = ioctl_ifreq(libc::SIOCGIFMTU, name)?;
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    Ok(unsafe { r.ifr_ifru.ifru_mtu } as u32)
}

/// Number of RX queues of interface `name` (from ETHTOOL_GCHANNELS when
/// the driver answers, else 1).
pub fn rx_queues(name: &str) -> u32 {
    #[repr(C)]
    struct Channels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    let Ok(s) = socket(libc::AF_INET, libc::SOCK_DGRAM, 0) else {
        return 1;
    };
    let Ok(mut r) = ifreq(name) else { return 1 };
    let mut ch = Channels {
        cmd: 0x3c, // ETHTOOL_GCHANNELS
        max_rx: 0,
        max_tx: 0,
        max_other: 0,
        max_combined: 0,
        rx_count: 0,
        tx_count: 0,
        other_count: 0,
        combined_count: 0,
    };
    r.ifr_ifru.ifru_data = (&mut ch as *mut Channels).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GCHANNELS reads and writes exactly
    // one `struct ethtool_channels`, which `ch` is and which outlives the
    // call.
    let ok = unsafe {
        libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCETHTOOL as _,
            &mut r as *mut libc::ifreq,
        )
    } == 0;
    if !ok {
        return 1;
    }
    ch.rx_count.max(ch.combined_count).max(1)
}

/// Kernel driver of interface `name` (ETHTOOL_GDRVINFO), e.g. `veth`.
pub fn driver(name: &str) -> io::Result<String> {
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut r = ifreq(name)?;
    let mut info = DrvInfo {
        cmd: 0x03, // ETHTOOL_GDRVINFO
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    r.ifr_ifru.ifru_data = (&mut info as *mut DrvInfo).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GDRVINFO reads and writes exactly one
    // `struct ethtool_drvinfo`, which `info` is and which outlives the call.
    cvt(unsafe {
        libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCETHTOOL as _,
            &mut r as *mut libc::ifreq,
        )
    })
    .map_err(|e| io::Error::new(e.kind(), format!("interface {name}: driver info: {e}")))?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Ok(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// Wait until `fd` is readable or `timeout_ms` passes (-1: forever).
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(n > 0)
}

/// An eventfd: a counter the kernel can wait on (a doorbell).
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd starting at zero.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd(2) takes no pointers; the result is a fresh fd we
        // own from here on.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is valid and ours.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Ring: add one to the counter (wakes a waiter).
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor.
        unsafe {
            libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Reset the counter to zero (non-blocking).
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our own
        // non-blocking descriptor.
        unsafe {
            libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        }
    }

    /// The descriptor (readable while the counter is non-zero).
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Wait until any of `fds` (at most 8) is readable or `timeout` passes
/// (`None`: forever; to the microsecond, as `ppoll`). Returns which became
/// readable: bit `i` for `fds[i]` (0 after a timeout or a signal).
pub fn wait_any(fds: &[RawFd], timeout: Option<std::time::Duration>) -> io::Result<u8> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 8];
    let n = fds.len().min(p.len());
    for (slot, &fd) in p.iter_mut().zip(fds) {
        slot.fd = fd;
    }
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `p[..n]` are valid pollfds in a live array; ppoll writes
    // only their `revents` and reads the timespec (or none), no sigmask.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(p[..n]
        .iter()
        .enumerate()
        .filter(|(_, q)| q.revents != 0)
        .fold(0u8, |m, (i, _)| m | 1 << i))
}

/// `CLOCK_MONOTONIC` now: machine time since boot, the same clock in
/// every process.
pub fn monotonic() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec into a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Run the calling thread under `SCHED_FIFO` at `priority` (1 to 99): it
/// then preempts every normal thread of its CPU as soon as it is
/// runnable, and runs until it blocks — as the kernel's own softirq
/// processing does.
pub fn set_fifo(priority: u8) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: libc::c_int::from(priority),
    };
    // SAFETY: pid 0 is the calling thread; `p` is a live sched_param.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) }).map(|_| ())
}

/// Set the calling thread's timer slack (how late the kernel may fire its
/// timers to batch wake-ups; 50 µs by default), in nanoseconds.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer argument.
    cvt(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) }).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_lookups() {
        assert!(ifindex("lo").unwrap() >= 1);
        assert_eq!(hwaddr("lo").unwrap(), MacAddr([0; 6]));
        assert!(mtu("lo").unwrap() >= 1500);
        assert!(ifindex("no-such-if0").is_err());
        assert!(ifindex("a-name-much-too-long-for-linux").is_err());
        assert!(rx_queues("lo") >= 1);
    }
}
