//! The application's side of `ATTACH`, as the preload shim and the
//! service's testkit both make it: ask on a fresh control connection, take
//! the four descriptors (down region, up region, doorbell, the first
//! waiter's wait end; three after `REMAP`, which has no waiter), map both
//! regions at the layout the reply names (the down region read-only) once
//! they are known to be sealed memfds that long, and check that the
//! service writes the layout this library reads.

use crate::ctl::{op, Msg};
use crate::layout::{self, Layout, Regions};
use crate::os::{self, Mapping};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What an accepted `ATTACH` gives the application.
pub struct Granted {
    /// The application's id at the service.
    pub id: u32,
    /// The layout of both regions.
    pub layout: Layout,
    /// The down region, mapped read-only (`layout.down_len()` bytes).
    pub down: Mapping,
    /// The up region, mapped read-write (`layout.up_len()` bytes).
    pub up: Mapping,
    /// The application's doorbell: ring it when the service sleeps.
    pub bell: OwnedFd,
    /// The wait end of waiter 0, which the service made for the attaching
    /// process (its holders row 0) and marked its own in the up header
    /// (`ATTACH` only): the process's first sleep needs no `WAITER`
    /// round trip.
    pub waiter: Option<OwnedFd>,
}

fn context(what: &str) -> impl Fn(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Attach as process `pid` over control connection `ctl` (one that has
/// not attached yet), waiting for the service until `deadline`.
pub fn attach(ctl: BorrowedFd<'_>, pid: u32, deadline: Instant) -> io::Result<Granted> {
    grant(ctl, Msg::new(op::ATTACH, 0, i64::from(pid), 0), deadline)
}

/// The regions and doorbell of the application that control connection
/// `ctl` already belongs to ([`op::REMAP`]: an `exec`ed image of one of
/// its processes), mapped and checked as [`attach`] does.
pub fn remap(ctl: BorrowedFd<'_>, deadline: Instant) -> io::Result<Granted> {
    grant(ctl, Msg::new(op::REMAP, 0, 0, 0), deadline)
}

fn grant(ctl: BorrowedFd<'_>, ask: Msg, deadline: Instant) -> io::Result<Granted> {
    os::send_msg(ctl, &ask.encode(), &[], deadline).map_err(context("attach"))?;
    let mut buf = [0u8; 64];
    let (n, mut fds) = os::recv_msg(ctl, &mut buf, deadline).map_err(context("attach"))?;
    let m = Msg::decode(&buf[..n])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "attach: malformed reply"))?;
    if m.a < 0 {
        let e = io::Error::from_raw_os_error(i32::try_from(-m.a).unwrap_or(libc::EPROTO));
        return Err(context("attach refused")(e));
    }
    let expected = if ask.op == op::ATTACH { 4 } else { 3 };
    if fds.len() != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "attach: {} descriptors in the reply, {expected} expected",
                fds.len()
            ),
        ));
    }
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, format!("attach: {e}"));
    let l = Layout::new(m.b as u32, m.c as u32).map_err(bad)?;
    let waiter = (expected == 4).then(|| fds.pop().expect("4 descriptors"));
    let bell = fds.pop().expect("3 descriptors");
    let up_fd = fds.pop().expect("3 descriptors");
    let down_fd = fds.pop().expect("3 descriptors");
    // Sealed against shrinking, at least as long as the layout says: no
    // access to a region can fault past its end (SIGBUS) later.
    os::check_memfd(down_fd.as_fd(), l.down_len(), libc::F_SEAL_SHRINK)
        .map_err(context("down region"))?;
    os::check_memfd(up_fd.as_fd(), l.up_len(), libc::F_SEAL_SHRINK)
        .map_err(context("up region"))?;
    let down = Mapping::map_with(down_fd.as_fd(), l.down_len(), false, false)
        .map_err(context("map down region"))?;
    let up = Mapping::map_with(up_fd.as_fd(), l.up_len(), true, false)
        .map_err(context("map up region"))?;
    // SAFETY: both mappings are page-aligned, of the layout's lengths, and
    // outlive `r`, which is used only within this function.
    let r = unsafe { Regions::new(down.as_ptr(), up.as_ptr(), l) };
    let h = r.down_header();
    let version = h.version.load(Ordering::Relaxed);
    if h.magic.load(Ordering::Acquire) != layout::MAGIC_DOWN || version != layout::VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the service writes layout version {version}, this library reads {}",
                layout::VERSION
            ),
        ));
    }
    Ok(Granted {
        id: m.a as u32,
        layout: l,
        down,
        up,
        bell,
        waiter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;
    use std::time::Duration;

    /// A service that answers one ATTACH with `reply` and `fds`; what the
    /// application side made of it.
    fn against(reply: Msg, fds: Vec<OwnedFd>) -> io::Result<Granted> {
        let mut sv = [0 as libc::c_int; 2];
        // SAFETY: socketpair writes two descriptors into the live array.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: both descriptors were just made and are owned only here.
        let (app, svc) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let d = Instant::now() + Duration::from_secs(5);
        let t = std::thread::spawn(move || {
            let mut b = [0u8; 64];
            let (n, _) = os::recv_msg(svc.as_fd(), &mut b, d).unwrap();
            assert_eq!(Msg::decode(&b[..n]).unwrap().op, op::ATTACH);
            let f: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            os::send_msg(svc.as_fd(), &reply.encode(), &f, d).unwrap();
        });
        let g = attach(app.as_fd(), 1, d);
        t.join().unwrap();
        g
    }

    fn regions(l: Layout) -> Vec<OwnedFd> {
        let down = os::memfd("t-down", l.down_len()).unwrap();
        let up = os::memfd("t-up", l.up_len()).unwrap();
        os::seal(down.as_fd(), libc::F_SEAL_SHRINK).unwrap();
        os::seal(up.as_fd(), libc::F_SEAL_SHRINK).unwrap();
        let (_, wait) = os::wake_line().unwrap();
        vec![down, up, os::eventfd(0).unwrap(), wait]
    }

    fn granted(l: Layout) -> Msg {
        Msg {
            op: op::REPLY,
            slot: 0,
            a: 7,
            b: u64::from(l.slots),
            c: u64::from(l.ring),
        }
    }

    fn err(r: io::Result<Granted>) -> String {
        match r {
            Ok(_) => panic!("attached"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn attach_names_what_is_wrong_with_the_reply() {
        let l = Layout::new(64, 4096).unwrap();
        let e = err(against(Msg::reply(-i64::from(libc::EPERM)), Vec::new()));
        assert!(e.starts_with("attach refused:"), "{e}");
        let e = err(against(
            granted(l),
            regions(l).into_iter().take(3).collect(),
        ));
        assert!(e.contains("3 descriptors in the reply, 4 expected"), "{e}");
        let bad = Msg {
            b: 100,
            ..granted(l)
        };
        let e = err(against(bad, regions(l)));
        assert!(e.contains("not a multiple of 64"), "{e}");
        // Regions shorter than the layout they claim: not mapped (an
        // access past a memfd's end is a SIGBUS).
        let short = Layout::new(128, 4096).unwrap();
        let e = err(against(granted(short), regions(l)));
        assert!(e.starts_with("down region: peer memfd holds"), "{e}");
        // A region that could shrink under the mapping later.
        let mut fds = regions(l);
        fds[1] = os::memfd("t-up", l.up_len()).unwrap();
        let e = err(against(granted(l), fds));
        assert!(e.starts_with("up region: peer memfd lacks seals"), "{e}");
        // A zeroed down header: not this library's layout.
        let e = err(against(granted(l), regions(l)));
        assert!(
            e.contains("writes layout version 0, this library reads"),
            "{e}"
        );
    }

    #[test]
    fn attach_maps_a_current_service_s_regions() {
        let l = Layout::new(64, 4096).unwrap();
        let fds = regions(l);
        let down = Mapping::map(fds[0].as_fd(), l.down_len(), true).unwrap();
        // SAFETY: `down` is mapped at the layout's length for the whole
        // block; the up pointer is never used by the header accessors.
        let r = unsafe { Regions::new(down.as_ptr(), down.as_ptr(), l) };
        r.down_header()
            .version
            .store(layout::VERSION, Ordering::Relaxed);
        r.down_header()
            .magic
            .store(layout::MAGIC_DOWN, Ordering::Release);
        let g = against(granted(l), fds).unwrap();
        assert_eq!((g.id, g.layout.slots, g.layout.ring), (7, 64, 4096));
        assert_eq!(g.down.len(), l.down_len());
        assert!(g.waiter.is_some(), "ATTACH gives the first waiter");
    }
}
