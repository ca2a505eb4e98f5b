//! `exec` and the loader's secure-execution mode.
//!
//! The kernel runs a new image in secure-execution mode (`AT_SECURE`)
//! when the `exec` changes its identity — a set-user-ID or set-group-ID
//! file of another user or group — and also when the process's real and
//! effective ids differ as it executes. The dynamic loader then ignores
//! `LD_PRELOAD` (a path with a slash in it), so the new program runs on the
//! kernel's sockets, which cannot bind the service's address.
//!
//! The second case is common among daemons started as root: Squid's
//! master keeps root as its effective and saved user and its own user
//! (`proxy`) as the real one, and in that state executes each kid of its
//! SMP mode (`workers 2`); its coordinator kid then failed to bind its
//! listener ("Cannot assign requested address") and no worker served. For
//! a root process (effective user 0) that was not itself run in secure
//! mode, the shim makes such an `exec` an ordinary one: for the `exec`
//! alone, and on the calling thread alone, the real ids are set to the
//! effective ones ([`lend`]); the new image sets them back in the shim's
//! constructor, before `main` ([`restore`]), and gets what the kernel and
//! the loader would have done to a secure image: no parent-death signal,
//! not dumpable unless `fs.suid_dumpable` is 1, a stack limit of at most
//! 8 MiB, and none of the variables the loader removes (`LD_LIBRARY_PATH`,
//! `TMPDIR`, ...; `LD_PRELOAD` names the shim alone). What it does not
//! get: the C library's own secure mode (`secure_getenv` answers). The
//! file's set-user-ID and set-group-ID bits are never worked around: such
//! a program, and a non-root process whose ids differ, run without the
//! shim, as the loader decides, and the shim says so once.

use crate::exec::{under_shim, value};
use crate::real::{self, errno, say_once, set_errno};
use libc::{c_char, c_int, gid_t, uid_t};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the new image sets its real ids back to: `<uid>:<gid>`, -1 for
/// one not changed.
const VAR: &str = "IXORA_REAL_IDS";

/// The variables the loader removes from a secure image's environment
/// (the C library's `UNSECURE_ENVVARS`, glibc 2.36).
const UNSECURE: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_LIBRARY_PATH",
    "LD_ORIGIN_PATH",
    "LD_PRELOAD",
    "LD_PROFILE",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
];

/// The kernel's stack limit for a secure image (`_STK_LIM`).
const STK_LIM: u64 = 8 << 20;

/// What an `exec` runs.
pub enum Target {
    /// A path (`execve`).
    Path(*const c_char),
    /// A name searched in `PATH` when it has no slash (`execvp`).
    Search(*const c_char),
    /// An open file (`fexecve`).
    Fd(c_int),
    /// A path from a directory descriptor, with `execveat`'s flags.
    At(c_int, *const c_char, c_int),
}

/// The status of `path` (relative to `dir`, with `fstatat` flags).
fn stat_at(dir: c_int, path: *const c_char, flags: c_int) -> Option<libc::stat> {
    if path.is_null() {
        return None;
    }
    // SAFETY: all-zero is a valid stat; `path` is the caller's
    // NUL-terminated string, as `exec` reads it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstatat(dir, path, &mut st, flags) } == 0).then_some(st)
}

/// `at` (a `*at` call: directory, path, flags) of the file the `exec`
/// runs (None if there is none): for a name searched in `PATH`, the first
/// candidate that exists and may be executed, as the C library's
/// `execvp` finds it (its default path when `PATH` is unset).
fn resolved<R>(t: &Target, at: impl Fn(c_int, *const c_char, c_int) -> Option<R>) -> Option<R> {
    match *t {
        Target::Path(p) => at(libc::AT_FDCWD, p, 0),
        Target::Fd(fd) => at(fd, c"".as_ptr(), libc::AT_EMPTY_PATH),
        Target::At(dir, p, fl) => at(
            dir,
            p,
            fl & (libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW),
        ),
        Target::Search(p) => {
            if p.is_null() {
                return None;
            }
            // SAFETY: the caller's NUL-terminated string.
            let name = unsafe { CStr::from_ptr(p) }.to_bytes();
            if name.contains(&b'/') {
                return at(libc::AT_FDCWD, p, 0);
            }
            let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
            let path = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
            path.split(|&b| b == b':').find_map(|dir| {
                let dir = if dir.is_empty() { &b"."[..] } else { dir };
                let full = CString::new([dir, b"/", name].concat()).ok()?;
                // SAFETY: a NUL-terminated path of ours.
                if unsafe { libc::access(full.as_ptr(), libc::X_OK) } != 0 {
                    return None;
                }
                at(libc::AT_FDCWD, full.as_ptr(), 0)
            })
        }
    }
}

/// How to name what the `exec` runs in a message: its path or name as
/// given, or "the program" for a descriptor.
pub fn name(t: &Target) -> String {
    let p = match *t {
        Target::Path(p) | Target::Search(p) | Target::At(_, p, _) => p,
        Target::Fd(_) => std::ptr::null(),
    };
    if p.is_null() {
        return "the program".into();
    }
    // SAFETY: the caller's NUL-terminated string.
    let n = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    if n.is_empty() {
        "the program".into()
    } else {
        n.into_owned()
    }
}

/// The status of the file the `exec` runs ([`resolved`]).
fn file(t: &Target) -> Option<libc::stat> {
    resolved(t, stat_at)
}

/// The file the `exec` runs ([`resolved`]), open for reading its image
/// (without blocking: a FIFO, which `exec` refuses, must not hold it).
pub fn image(t: &Target) -> Option<std::fs::File> {
    use std::os::fd::FromRawFd;
    resolved(t, |dir, path, flags| {
        if path.is_null() {
            return None;
        }
        // (An empty path names `dir` itself: opened again through /proc.)
        // SAFETY: `path` is the caller's NUL-terminated string.
        let fd = if flags & libc::AT_EMPTY_PATH != 0 && unsafe { *path } == 0 {
            let me = CString::new(format!("/proc/self/fd/{dir}")).ok()?;
            // SAFETY: a NUL-terminated path of ours.
            unsafe {
                libc::open(
                    me.as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
                )
            }
        } else {
            let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
            let o = libc::O_RDONLY
                | libc::O_CLOEXEC
                | libc::O_NONBLOCK
                | if nofollow { libc::O_NOFOLLOW } else { 0 };
            // SAFETY: as above.
            unsafe { libc::openat(dir, path, o) }
        };
        // SAFETY: a descriptor just opened, ours alone.
        (fd >= 0).then(|| unsafe { std::fs::File::from_raw_fd(fd) })
    })
}

/// Whether a file with this `mode` is set-user-ID or set-group-ID (the
/// latter with group execute: without it, mandatory locking).
fn set_id(mode: u32) -> bool {
    mode & libc::S_ISUID != 0 || (mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0)
}

/// Whether the loader runs a program with this file's `mode`, owner and
/// group in secure-execution mode when this process (effective `euid`,
/// `egid`) executes it: set-user-ID to another user, or set-group-ID to
/// another group.
fn secure_file(mode: u32, owner: u32, group: u32, euid: u32, egid: u32) -> bool {
    (mode & libc::S_ISUID != 0 && owner != euid)
        || (mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 && group != egid)
}

fn ids() -> ([uid_t; 3], [gid_t; 3]) {
    let (mut u, mut g) = ([0; 3], [0; 3]);
    // SAFETY: getresuid(2) and getresgid(2) write three ids into live
    // arrays.
    unsafe {
        libc::getresuid(&mut u[0], &mut u[1], &mut u[2]);
        libc::getresgid(&mut g[0], &mut g[1], &mut g[2]);
    }
    (u, g)
}

/// Set this thread's real user and group (-1: unchanged) by the system
/// calls themselves: the C library's wrappers would set every thread's.
fn set_real(uid: i64, gid: i64) -> bool {
    let keep = -1i64;
    (gid < 0 || real::sys3(libc::SYS_setresgid, gid, keep, keep) == 0)
        && (uid < 0 || real::sys3(libc::SYS_setresuid, uid, keep, keep) == 0)
}

/// An `exec` made ordinary: the real ids lent to the effective ones on
/// this thread, the environment the new image is to get.
pub struct Lent {
    /// The real user and group to set back (-1: not changed).
    uid: i64,
    gid: i64,
    var: CString,
    preload: Option<CString>,
}

impl Lent {
    /// `env` (the `exec`'s entries) as a secure image would see it, with
    /// the ids to set back (entries, no terminating NULL).
    pub fn environment(&self, env: &[*const c_char]) -> Vec<*const c_char> {
        let mut v: Vec<*const c_char> = env
            .iter()
            .copied()
            .filter(|&e| value(e, VAR).is_none() && !UNSECURE.iter().any(|n| value(e, n).is_some()))
            .collect();
        v.extend(self.preload.as_ref().map(|p| p.as_ptr()));
        v.push(self.var.as_ptr());
        v
    }

    /// The `exec` failed: the real ids are set back (errno kept).
    pub fn undo(self) {
        let e = errno();
        set_real(self.uid, self.gid);
        set_errno(e);
    }
}

/// Before an `exec` of `t` with environment `env`: if the new program runs
/// under `ixora run` but the loader would run it in secure-execution mode
/// only because this root process's real ids differ from its effective
/// ones, lend them (see the module's documentation); if it would for a
/// reason the shim does not work around, say so once. None: the `exec`
/// goes as it is.
pub fn lend(t: &Target, env: &[*const c_char]) -> Option<Lent> {
    static SAID_FILE: AtomicBool = AtomicBool::new(false);
    static SAID_IDS: AtomicBool = AtomicBool::new(false);
    if !under_shim(env) {
        return None;
    }
    let ([ruid, euid, _], [rgid, egid, _]) = ids();
    let apart = ruid != euid || rgid != egid;
    if !apart && SAID_FILE.load(Ordering::Relaxed) {
        return None; // (nothing to lend, and said already)
    }
    let file = file(t);
    if file.is_some_and(|st| secure_file(st.st_mode, st.st_uid, st.st_gid, euid, egid)) {
        say_once(
            &SAID_FILE,
            "ixora-preload: the program executed is set-user-ID or set-group-ID: the dynamic \
             loader does not preload libraries into it, so it runs on the kernel's sockets, not \
             Ixora's\n",
        );
        return None;
    }
    if !apart {
        return None;
    }
    // SAFETY: getauxval(3) reads the process's auxiliary vector.
    let own_secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    if euid != 0 || own_secure || file.is_some_and(|st| set_id(st.st_mode)) {
        say_once(
            &SAID_IDS,
            "ixora-preload: a program executed while the real and effective user or group \
             differ runs in the dynamic loader's secure mode, which does not preload libraries: \
             it runs on the kernel's sockets, not Ixora's (the shim works around it only for a \
             process whose effective user is root)\n",
        );
        return None;
    }
    let uid = if ruid != euid { i64::from(ruid) } else { -1 };
    let gid = if rgid != egid { i64::from(rgid) } else { -1 };
    let preload = env.iter().find_map(|&e| value(e, "LD_PRELOAD")).map(|v| {
        let ours: Vec<&[u8]> = v
            .split(|&b| b == b' ' || b == b':')
            .filter(|p| p.windows(16).any(|w| w == b"libixora_preload"))
            .collect();
        CString::new([&b"LD_PRELOAD="[..], &ours.join(&b' ')].concat()).expect("no NUL")
    });
    let var = CString::new(format!("{VAR}={uid}:{gid}")).expect("no NUL");
    if !set_real(i64::from(euid), if gid >= 0 { i64::from(egid) } else { -1 }) {
        set_real(uid, gid);
        return None;
    }
    Some(Lent {
        uid,
        gid,
        var,
        preload,
    })
}

/// The ids a new image is to set back: `(uid, gid)`, -1 unchanged.
fn parse(v: &str) -> Option<(i64, i64)> {
    let (u, g) = v.split_once(':')?;
    let id = |s: &str| {
        s.parse::<i64>()
            .ok()
            .filter(|&n| (-1..=i64::from(u32::MAX - 1)).contains(&n))
    };
    Some((id(u)?, id(g)?))
}

/// As the library loads: the old image lent its real ids for the `exec`
/// ([`lend`]); set them back, and do what a secure `exec` would have done.
pub fn restore() {
    let Some(v) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: the library's constructor runs before `main`, while the
    // program has no other thread to read the environment meanwhile.
    unsafe { libc::unsetenv(c"IXORA_REAL_IDS".as_ptr()) };
    let Some((uid, gid)) = v.to_str().and_then(parse) else {
        return;
    };
    let ([ruid, euid, _], [rgid, egid, _]) = ids();
    // Only what was lent: a root image whose real ids are its effective.
    if euid != 0 || ruid != euid || rgid != egid {
        return;
    }
    set_real(uid, gid);
    // What the kernel does to a secure image (fs/exec.c): no parent-death
    // signal; dumpable as `fs.suid_dumpable` says (2, "root only", is not
    // a value prctl sets: not dumpable); the stack's soft limit at most
    // 8 MiB.
    let dumpable =
        std::fs::read_to_string("/proc/sys/fs/suid_dumpable").is_ok_and(|s| s.trim() == "1");
    // SAFETY: prctl(2) and the rlimit calls take integers and a live
    // struct.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, 0);
        if !dumpable {
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
        }
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_STACK, &mut rl) == 0 && rl.rlim_cur > STK_LIM {
            rl.rlim_cur = STK_LIM;
            libc::setrlimit(libc::RLIMIT_STACK, &rl);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_id_programs_of_another_user_or_group_run_without_the_preload() {
        let (suid, sgid) = (libc::S_ISUID | 0o755, libc::S_ISGID | 0o755);
        // (mode, owner, group, euid, egid) -> secure
        assert!(
            secure_file(suid, 0, 0, 101, 101),
            "set-user-ID root run by a user"
        );
        assert!(
            !secure_file(suid, 0, 0, 0, 0),
            "set-user-ID root run by root"
        );
        assert!(
            secure_file(sgid, 0, 8, 0, 0),
            "set-group-ID mail run by root"
        );
        assert!(!secure_file(sgid | 0o010, 0, 8, 0, 8), "its own group");
        // Set-group-ID without group execute is mandatory locking, not an
        // identity change.
        assert!(!secure_file(libc::S_ISGID | 0o744, 0, 8, 0, 0));
        assert!(!set_id(libc::S_ISGID | 0o744));
        assert!(set_id(suid) && set_id(sgid));
        assert!(!secure_file(0o755, 0, 0, 101, 101), "a plain program");
    }

    #[test]
    fn the_ids_variable_reads_back_what_was_written() {
        assert_eq!(parse("13:-1"), Some((13, -1)));
        assert_eq!(parse("-1:65534"), Some((-1, 65534)));
        for bad in ["", "13", "13:", "x:1", "-2:1", "1:4294967295", "1:2:3"] {
            assert!(parse(bad).is_none(), "{bad:?} accepted");
        }
    }
}
