//! Ixora sockets across `exec`, as the kernel's sockets cross it: a
//! descriptor without close-on-exec stays open in the new program, and
//! one with it is closed.
//!
//! inetd-style servers depend on it: `socat ... EXEC:prog,nofork`,
//! `tcpserver`, `sshd` (which re-executes itself for each connection),
//! `ncat -e` accept a connection, put it on the child's standard input
//! and output, and `exec` the program that serves it. Without this the
//! new program got the placeholder, a kernel socket that carries nothing.
//!
//! The new image is the same process of the same application, so nothing
//! moves: the old image leaves its control connection open across the
//! `exec` (close-on-exec cleared just before, set again if the `exec`
//! fails) and tells the new one, in `IXORA_EXEC`, that connection, its
//! row of the holders table, and which descriptors carry which sockets.
//! When the library loads in the new image (before `main`), it asks the
//! service for the application's regions again on that connection
//! (`REMAP`), maps them, installs the descriptors, and drops the
//! references of the descriptors that `exec` closed (a socket that no
//! other process holds is then closed, as on Linux). A listener keeps its
//! accept queue, a connection its unread bytes.
//!
//! The new program runs under `ixora run` as the old one did: where the
//! environment given to `exec` (or `posix_spawn`) lost `LD_PRELOAD`'s
//! entry for the library or `IXORA_SOCKET` — daemons that clean their
//! children's environment: Dovecot, Exim, nginx's binary upgrade — the
//! shim puts them back ([`shimmed`]). Only an environment that says
//! `IXORA_SOCKET=` (empty) takes the new program off Ixora: then nothing
//! is carried, said once on standard error. Without an Ixora socket
//! nothing is carried, unless the
//! attachment was made for a change of credentials (`crate::creds`) or
//! came so across an `exec` itself: a root wrapper's program, another
//! user's, takes it up. Not carried: the shim's own state of the old image —
//! its epoll sets' Ixora items (an epoll descriptor that survives keeps
//! only its kernel descriptors), options it keeps for a socket
//! (`SO_RCVTIMEO`, `SO_SNDTIMEO`, values read back by `getsockopt`), and
//! sockets not yet bound or connected (they stay the kernel's).
//!
//! `posix_spawn` and `posix_spawnp` run their child's `exec` inside the C
//! library, where the shim is not called; they are interposed instead
//! (see [`posix_spawn`]). `system` and `popen` call the C library's own
//! `posix_spawn`, which cannot be interposed: while the process has Ixora
//! sockets they are replaced by [`system`] and [`popen`] (with
//! [`pclose`]), which do as the C library's do through the interposed
//! `posix_spawn`.

use crate::handover::int_opt;
use crate::real::{self, errno, real, set_errno, sys_write};
use crate::secure::{self, Target};
use crate::state;
use libc::{c_char, c_int};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable that tells a new image what it inherits:
/// `IXORA_EXEC=<ctl>:<row>:<app>:<fd>.<slot>.<gen>.<flags>,...:<slot>.<gen>,...`
/// — the control connection's descriptor, the process's holders-table
/// row, the application's id, the descriptors kept, and the sockets of
/// the descriptors that `exec` closes (one entry per descriptor).
const VAR: &str = "IXORA_EXEC";

/// The environment of an `exec` that carries Ixora sockets.
pub struct Carry {
    ctl: c_int,
    _var: CString,
    /// The new image's environment entries (no terminating NULL).
    env: Vec<*const c_char>,
}

impl Carry {
    /// The `exec` failed: the control connection is close-on-exec again
    /// (errno kept).
    pub fn undo(self) {
        let e = errno();
        set_cloexec(self.ctl, true);
        set_errno(e);
    }
}

/// The environment of a program this one executes or spawns: the
/// caller's entries, with the variables that run it under `ixora run` put
/// back where they were lost ([`shimmed`]).
struct ChildEnv {
    _vars: Vec<CString>,
    /// Its entries (no terminating NULL).
    env: Vec<*const c_char>,
    /// Variables were put back: `env` is not the caller's array.
    changed: bool,
}

/// The entries of the caller's `envp` with `LD_PRELOAD` naming this
/// library and `IXORA_SOCKET` (and `IXORA_SPIN_US`) as this process has
/// them, if it lacks them: `ixora run` runs the process tree. Daemons that
/// clean their children's environment (Dovecot keeps `TZ` and a few of its
/// own, Exim, nginx's binary upgrade keeps `TZ`) started them off Ixora,
/// with the Ixora sockets they pass on (a listener inherited, a
/// connection passed over a Unix socket) dead placeholders. A program
/// that gives a child `IXORA_SOCKET` empty takes it off Ixora.
fn shimmed(envp: *const *const c_char) -> ChildEnv {
    let env = entries(envp);
    let as_given = |env| ChildEnv {
        _vars: Vec::new(),
        env,
        changed: false,
    };
    if under_shim(&env) {
        return as_given(env);
    }
    let e = state::env();
    let (Some(socket), Some(preload)) = (e.socket.as_ref(), e.preload.as_ref()) else {
        return as_given(env);
    };
    let find = |name: &str| env.iter().find_map(|&x| value(x, name));
    if find("IXORA_SOCKET").is_some_and(|v| v.is_empty()) {
        return as_given(env);
    }
    use std::os::unix::ffi::OsStrExt;
    let var = |name: &str, v: &[u8]| CString::new([name.as_bytes(), b"=", v].concat()).ok();
    let mut ld = preload.as_bytes().to_vec();
    if let Some(old) = find("LD_PRELOAD").filter(|v| !v.is_empty()) {
        ld.push(b':');
        ld.extend_from_slice(old);
    }
    let Some(vars) = [
        var("LD_PRELOAD", &ld),
        var("IXORA_SOCKET", socket.as_bytes()),
        var("IXORA_SPIN_US", e.spin_us.to_string().as_bytes()),
    ]
    .into_iter()
    .collect::<Option<Vec<CString>>>() else {
        return as_given(env);
    };
    let mut out: Vec<*const c_char> = env
        .iter()
        .copied()
        .filter(|&x| {
            ["LD_PRELOAD", "IXORA_SOCKET", "IXORA_SPIN_US"]
                .iter()
                .all(|n| value(x, n).is_none())
        })
        .collect();
    out.extend(vars.iter().map(|v| v.as_ptr()));
    ChildEnv {
        _vars: vars,
        env: out,
        changed: true,
    }
}

/// `env` with its terminating NULL, as `exec` takes it.
fn terminated(mut env: Vec<*const c_char>) -> Vec<*const c_char> {
    env.push(std::ptr::null());
    env
}

/// Descriptor flags of `fd` (`F_GETFD`, raw); None if it is not open.
fn fd_flags(fd: c_int) -> Option<c_int> {
    let r = real::sys3(libc::SYS_fcntl, fd.into(), libc::F_GETFD.into(), 0);
    (r >= 0).then_some(r as c_int)
}

fn set_cloexec(fd: c_int, on: bool) -> bool {
    let v = if on { libc::FD_CLOEXEC } else { 0 };
    real::sys3(libc::SYS_fcntl, fd.into(), libc::F_SETFD.into(), v.into()) == 0
}

/// The entries of the NULL-terminated `envp` (none if it is NULL).
pub(crate) fn entries(envp: *const *const c_char) -> Vec<*const c_char> {
    let mut v = Vec::new();
    if envp.is_null() {
        return v;
    }
    // SAFETY: `envp` is the program's NULL-terminated array for `exec`
    // (the kernel reads it the same way); we stop at its NULL.
    unsafe {
        let mut p = envp;
        while !(*p).is_null() {
            v.push(*p);
            p = p.add(1);
        }
    }
    v
}

/// The value of entry `e` if it is `name=...`.
pub(crate) fn value<'a>(e: *const c_char, name: &str) -> Option<&'a [u8]> {
    // SAFETY: an environment entry is a NUL-terminated string that lives
    // at least as long as the `exec` call we are in.
    let b = unsafe { std::ffi::CStr::from_ptr(e) }.to_bytes();
    b.strip_prefix(name.as_bytes())?.strip_prefix(b"=")
}

/// Whether environment `env` runs a program under `ixora run`.
pub(crate) fn under_shim(env: &[*const c_char]) -> bool {
    let has =
        |name: &str, f: &dyn Fn(&[u8]) -> bool| env.iter().any(|&e| value(e, name).is_some_and(f));
    has("IXORA_SOCKET", &|v| !v.is_empty())
        && has("LD_PRELOAD", &|v| {
            v.windows(16).any(|w| w == b"libixora_preload")
        })
}

/// Before an `exec` of `target` with environment `env` (its entries): if
/// Ixora sockets stay open across it and the new program runs under the
/// shim, leave the control connection open for it and return the
/// environment that tells it what it inherits. None: the `exec` goes as
/// it is.
fn prepare(target: &Target, env: &[*const c_char]) -> Option<Carry> {
    static SAID: AtomicBool = AtomicBool::new(false);
    let a = state::attached()?;
    if !state::has_ctl() || state::gone(a) {
        return None;
    }
    let (mut kept, mut closed) = (Vec::new(), Vec::new());
    for (fd, s, gen, flags) in state::ixora_fds() {
        match fd_flags(fd) {
            Some(f) if f & libc::FD_CLOEXEC == 0 => kept.push(format!("{fd}.{s}.{gen}.{flags}")),
            _ => closed.push(format!("{s}.{gen}")),
        }
    }
    // (Nothing to carry, unless the attachment crosses every exec.)
    if kept.is_empty() && !CARRY_ALWAYS.load(Ordering::Relaxed) {
        return None;
    }
    if !under_shim(env) {
        if !SAID.swap(true, Ordering::Relaxed) {
            let m = format!(
                "ixora-preload: {} Ixora socket descriptor(s) stay open across exec, but the \
                 new program does not run under `ixora run` (its environment says IXORA_SOCKET \
                 empty, or this library was not preloaded by LD_PRELOAD): it gets kernel sockets \
                 that carry nothing\n",
                kept.len()
            );
            sys_write(2, m.as_bytes());
        }
        return None;
    }
    if !kept.is_empty() {
        // A program the shim cannot reach (statically linked, or Go's own
        // system calls) would read and write the sockets' unconnected
        // kernel placeholders (ENOTCONN): they are not carried, so the
        // service closes them with this image, and the shim says why.
        // Found with inetd and systemd-socket-activate starting a Go
        // program on a connection; until 2026-11-29 it failed in silence.
        if let ixora_channel::reach::Reach::Nothing(why) = secure::image(target).map_or(
            ixora_channel::reach::Reach::All,
            ixora_channel::reach::reach_of,
        ) {
            let m = format!(
                "ixora-preload: {} {why}: the connections of the {} Ixora socket \
                 descriptor(s) it would inherit across exec close with this program (it gets \
                 unconnected kernel sockets there)\n",
                secure::name(target),
                kept.len()
            );
            sys_write(2, m.as_bytes());
            return None;
        }
    }
    // Another thread's request holds the lock for a round trip; a forked
    // child whose parent's thread held it at the fork finds it held for
    // ever: after 100 ms the exec goes as it is.
    let mut ctl = None;
    for _ in 0..1000 {
        match a.ctl.try_lock() {
            Ok(g) => ctl = Some(g.as_raw_fd()),
            Err(std::sync::TryLockError::Poisoned(p)) => ctl = Some(p.into_inner().as_raw_fd()),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_micros(100));
                continue;
            }
        }
        break;
    }
    let ctl = ctl?;
    let var = format!(
        "{VAR}={ctl}:{}:{}:{}:{}",
        state::row(),
        a.app_id,
        kept.join(","),
        closed.join(",")
    );
    // The kernel refuses a single string over 128 KiB (E2BIG).
    if var.len() > 120 * 1024 || !set_cloexec(ctl, false) {
        return None;
    }
    let var = CString::new(var).ok()?;
    // What the program wrote and asked is seen before its image goes, as
    // at exit; this thread's waiter is given back.
    state::kick(a);
    state::release_thread_waiter();
    let mut env: Vec<*const c_char> = env
        .iter()
        .copied()
        .filter(|&e| value(e, VAR).is_none())
        .collect();
    env.push(var.as_ptr());
    Some(Carry {
        ctl,
        _var: var,
        env,
    })
}

/// The attachment crosses `exec` even without an Ixora socket: it was made
/// for a change of credentials (`crate::creds`), or came across an `exec`
/// itself, so that a chain of them (`su` starts a shell, the shell the
/// program) keeps it. A forked child's copy is its parent's.
static CARRY_ALWAYS: AtomicBool = AtomicBool::new(false);

/// Carry this process's attachment across every `exec` ([`CARRY_ALWAYS`]).
pub(crate) fn carry_always() {
    CARRY_ALWAYS.store(true, Ordering::Relaxed);
}

/// A parsed `IXORA_EXEC`.
struct Inherited {
    ctl: c_int,
    row: u32,
    app: u32,
    kept: Vec<(c_int, u32, u32, u32)>,
    closed: Vec<(u32, u32)>,
}

fn parse(v: &str) -> Option<Inherited> {
    let mut f = v.split(':');
    let ctl = f.next()?.parse().ok()?;
    let row = f.next()?.parse().ok()?;
    let app = f.next()?.parse().ok()?;
    let nums = |s: &str| -> Option<Vec<u32>> { s.split('.').map(|n| n.parse().ok()).collect() };
    fn list(s: Option<&str>) -> impl Iterator<Item = &str> {
        s.unwrap_or("").split(',').filter(|e| !e.is_empty())
    }
    let mut kept = Vec::new();
    for e in list(f.next()) {
        match nums(e)?[..] {
            [fd, s, gen, flags] => kept.push((c_int::try_from(fd).ok()?, s, gen, flags)),
            _ => return None,
        }
    }
    let mut closed = Vec::new();
    for e in list(f.next()) {
        match nums(e)?[..] {
            [s, gen] => closed.push((s, gen)),
            _ => return None,
        }
    }
    (f.next().is_none()).then_some(Inherited {
        ctl,
        row,
        app,
        kept,
        closed,
    })
}

fn say(what: &str) {
    let m = format!(
        "ixora-preload: the Ixora sockets this program inherited across exec carry nothing \
         ({what})\n"
    );
    sys_write(2, m.as_bytes());
}

/// Take up application `app` again on control connection `ctl`, which
/// the old image (`exec`) or the parent (`posix_spawn`) left open for
/// this one, as holders-table row `row`. `Ok(None)`: not under `ixora
/// run` after all. On failure or `Ok(None)` the connection is closed: the
/// service then drops the row's references, as at a process's exit.
fn take_up(ctl: c_int, row: u32, app: u32) -> Result<Option<&'static state::Attached>, String> {
    set_cloexec(ctl, true);
    // SAFETY: the descriptor was left open for this image, and nothing
    // else in it knows the number.
    let sock = unsafe { OwnedFd::from_raw_fd(ctl) };
    if state::env().socket.is_none() {
        return Ok(None);
    }
    let a = state::attach_after_exec(sock, row)?;
    if a.app_id != app {
        return Err("another application's control connection".into());
    }
    Ok(Some(a))
}

/// Slot `s` of `a` still has generation `gen` (its socket was not closed).
fn live(a: &state::Attached, s: u32, gen: u32) -> bool {
    s < a.r.layout().slots && a.r.down_slot(s).gen.load(Ordering::Acquire) == gen
}

/// As the library loads in a new image: take up the Ixora sockets the
/// old image left open across `exec` (see the module's documentation).
pub fn adopt() {
    let Some(v) = std::env::var_os(VAR) else {
        return;
    };
    // Not passed on to the programs this one starts.
    // SAFETY: the library's constructor runs before `main`, while the
    // program has no other thread to read the environment meanwhile.
    unsafe { libc::unsetenv(c"IXORA_EXEC".as_ptr()) };
    let Some(inh) = v.to_str().and_then(parse) else {
        say("malformed IXORA_EXEC");
        return;
    };
    // Only our control connection is ever named there: a Unix socket.
    if int_opt(inh.ctl, libc::SO_DOMAIN) != Some(libc::AF_UNIX) {
        say("its control connection is not open");
        return;
    }
    let a = match take_up(inh.ctl, inh.row, inh.app) {
        Ok(Some(a)) => a,
        Ok(None) => return,
        Err(e) => return say(&e),
    };
    if inh.kept.is_empty() {
        // Carried for a change of credentials (nothing else crosses
        // without a socket): on across this image's own exec.
        carry_always();
    }
    let live = |s, gen| live(a, s, gen);
    for &(fd, s, gen, flags) in &inh.kept {
        // The descriptor is still the socket's placeholder (nothing ran
        // in between); a socket closed meanwhile leaves a kernel socket.
        if live(s, gen) && fd_flags(fd).is_some() && int_opt(fd, libc::SO_TYPE).is_some() {
            // (Kept: not close-on-exec.)
            let f = flags & !(state::fl::CLOEXEC_KNOWN | state::fl::CLOEXEC);
            state::install(fd, s, gen, f | state::fl::cloexec(false));
            // A socket given an owner for SIGURG (its file keeps it).
            if let Some(sk) = state::sock(fd) {
                if a.r
                    .up_urgent(s)
                    .owned
                    .load(std::sync::atomic::Ordering::Acquire)
                    != 0
                {
                    state::note_owner(sk, fd, true);
                }
            }
        }
    }
    for &(s, gen) in &inh.closed {
        if live(s, gen) {
            state::drop_ref(a, s, false);
        }
    }
    crate::stdio::adopt_standard_streams();
    state::kick(a);
}

/// Call `exec` (one of the C library's) with `envp`, or with the
/// environment the new program needs: the shim's variables put back
/// ([`shimmed`]), the sockets that stay open carried ([`prepare`]), the
/// real ids lent ([`secure::lend`]); if it returns (it failed), the carry
/// and the lending are undone.
fn carrying(
    target: Target,
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let child = shimmed(envp);
    let carry = prepare(&target, &child.env);
    let env = carry.as_ref().map_or(&child.env[..], |c| &c.env[..]);
    let lent = secure::lend(&target, env);
    let secured = lent.as_ref().map(|l| l.environment(env));
    let env = secured.as_deref().unwrap_or(env);
    // The caller's own array where nothing changed.
    let changed = child.changed || carry.is_some() || lent.is_some();
    let owned = changed.then(|| terminated(env.to_vec()));
    let r = exec(owned.as_ref().map_or(envp, |v| v.as_ptr()));
    if let Some(l) = lent {
        l.undo();
    }
    if let Some(c) = carry {
        c.undo();
    }
    r
}

/// `execve` after [`prepare`]; the C library's execl family (variadic,
/// `execl.c`) ends here too.
#[no_mangle]
pub extern "C" fn ixora_execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    carrying(Target::Path(path), envp, |env| {
        real!(execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int)(
            path, argv, env,
        )
    })
}

/// `execvpe` after [`prepare`] (the C library searches `PATH`).
#[no_mangle]
pub extern "C" fn ixora_execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    carrying(Target::Search(file), envp, |env| {
        real!(execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int)(
            file, argv, env,
        )
    })
}

extern "C" {
    static environ: *const *const c_char;
}

/// The process's environment (`environ`).
fn environment() -> *const *const c_char {
    // SAFETY: `environ` is the C library's; reading the pointer is what
    // execv and execvp do themselves.
    unsafe { environ }
}

/// execve(2).
#[no_mangle]
pub extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    ixora_execve(path, argv, envp)
}

/// execv(3).
#[no_mangle]
pub extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    ixora_execve(path, argv, environment())
}

/// execvp(3).
#[no_mangle]
pub extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    ixora_execvpe(file, argv, environment())
}

/// execvpe(3).
#[no_mangle]
pub extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    ixora_execvpe(file, argv, envp)
}

/// fexecve(3).
#[no_mangle]
pub extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    carrying(Target::Fd(fd), envp, |env| {
        real!(fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int)(
            fd, argv, env,
        )
    })
}

/// execveat(2).
#[no_mangle]
pub extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    carrying(Target::At(dirfd, path, flags), envp, |env| {
        real!(
            execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int
        )(dirfd, path, argv, env, flags)
    })
}

// execl, execlp and execle are variadic: `execl.c` collects their
// arguments (as the C library does) and calls `ixora_execve` or
// `ixora_execvpe`. Rust cannot define a variadic function, and the
// cdylib exports only Rust's symbols, so each is a naked function here
// whose only instruction jumps to the C one: the C function receives the
// caller's registers and stack exactly as they were.
macro_rules! to_c {
    ($name:ident, $c:ident) => {
        extern "C" {
            fn $c();
        }
        #[cfg(target_arch = "x86_64")]
        #[no_mangle]
        #[unsafe(naked)]
        pub extern "C" fn $name() {
            core::arch::naked_asm!("jmp {f}@PLT", f = sym $c)
        }
        #[cfg(target_arch = "aarch64")]
        #[no_mangle]
        #[unsafe(naked)]
        pub extern "C" fn $name() {
            core::arch::naked_asm!("b {f}", f = sym $c)
        }
    };
}
to_c!(execl, ixora_c_execl);
to_c!(execlp, ixora_c_execlp);
to_c!(execle, ixora_c_execle);

/// The variable that tells a child started by `posix_spawn` what it may
/// take up: `IXORA_SPAWN=<ctl>:<ctl inode>:<row>:<app>:<inode>.<slot>.<gen>.<flags>,...`
/// — its control connection's descriptor and inode, its holders-table
/// row, the application's id, and per socket the inode of its kernel
/// placeholder (the same in every descriptor of it), slot, generation
/// and flags.
const SPAWN_VAR: &str = "IXORA_SPAWN";

/// A spawn that offers Ixora sockets to its child: the environment to
/// give it, and our copy of its control connection.
struct Offer {
    ctl: c_int,
    _var: CString,
    /// The child's environment entries (no terminating NULL).
    env: Vec<*const c_char>,
}

/// Before `posix_spawn` with environment `envp`: if this process has
/// Ixora sockets and the child's program runs under the shim, offer them
/// all to the child (its file actions may `dup2` any of them — one with
/// close-on-exec too — onto the descriptors it keeps, which only the
/// child can see): a control connection of its own with one reference to
/// each socket (`state::offer`), named in `IXORA_SPAWN` with the inodes
/// of their placeholders. None: the spawn goes as it is.
fn prepare_spawn(env: &[*const c_char]) -> Option<Offer> {
    static SAID: AtomicBool = AtomicBool::new(false);
    let a = state::attached()?;
    if !state::has_ctl() || state::gone(a) {
        return None;
    }
    // One entry per socket (its descriptors share the placeholder).
    let mut fds = state::ixora_fds();
    fds.sort_unstable_by_key(|f| f.1);
    fds.dedup_by_key(|f| f.1);
    let offers: Vec<(u64, u32, u32, u32)> = fds
        .into_iter()
        .filter_map(|(fd, s, gen, flags)| Some((state::socket_inode(fd)?, s, gen, flags)))
        .collect();
    if offers.is_empty() {
        return None;
    }
    if !under_shim(env) {
        if !SAID.swap(true, Ordering::Relaxed) {
            let m = "ixora-preload: a program started by posix_spawn does not run under `ixora \
                     run` (its environment says IXORA_SOCKET empty, or this library was not \
                     preloaded by LD_PRELOAD): the Ixora sockets it inherits are kernel sockets \
                     that carry nothing\n";
            sys_write(2, m.as_bytes());
        }
        return None;
    }
    let list: Vec<String> = offers
        .iter()
        .map(|(ino, s, gen, flags)| format!("{ino}.{s}.{gen}.{flags}"))
        .collect();
    let list = list.join(",");
    // The kernel refuses a single string over 128 KiB (E2BIG).
    if list.len() > 120 * 1024 {
        return None;
    }
    let slots: Vec<u32> = offers.iter().map(|o| o.1).collect();
    let (ctl, row) = state::offer(a, &slots)?;
    let ctl_ino = state::socket_inode(ctl);
    let var = format!(
        "{SPAWN_VAR}={ctl}:{}:{row}:{}:{list}",
        ctl_ino.unwrap_or(0),
        a.app_id,
    );
    if ctl_ino.is_none() || !set_cloexec(ctl, false) {
        state::offer_done(ctl);
        return None;
    }
    let Ok(var) = CString::new(var) else {
        state::offer_done(ctl);
        return None;
    };
    let mut env: Vec<*const c_char> = env
        .iter()
        .copied()
        .filter(|&e| value(e, SPAWN_VAR).is_none() && value(e, VAR).is_none())
        .collect();
    env.push(var.as_ptr());
    Some(Offer {
        ctl,
        _var: var,
        env,
    })
}

/// A parsed `IXORA_SPAWN`.
struct Offered {
    ctl: c_int,
    ctl_ino: u64,
    row: u32,
    app: u32,
    socks: Vec<(u64, u32, u32, u32)>,
}

fn parse_spawn(v: &str) -> Option<Offered> {
    let mut f = v.split(':');
    let ctl = f.next()?.parse().ok()?;
    let ctl_ino = f.next()?.parse().ok()?;
    let row = f.next()?.parse().ok()?;
    let app = f.next()?.parse().ok()?;
    let mut socks = Vec::new();
    for e in f.next()?.split(',').filter(|e| !e.is_empty()) {
        let n: Vec<u64> = e
            .split('.')
            .map(|n| n.parse().ok())
            .collect::<Option<_>>()?;
        match n[..] {
            [ino, s, gen, flags] => socks.push((
                ino,
                u32::try_from(s).ok()?,
                u32::try_from(gen).ok()?,
                u32::try_from(flags).ok()?,
            )),
            _ => return None,
        }
    }
    (f.next().is_none()).then_some(Offered {
        ctl,
        ctl_ino,
        row,
        app,
        socks,
    })
}

/// As the library loads in a child that `posix_spawn` started: take up
/// the Ixora sockets among its descriptors — those whose kernel
/// placeholder is one the parent offered, wherever the spawn's file
/// actions put it — and give back the offer's references.
pub fn adopt_spawned() {
    let Some(v) = std::env::var_os(SPAWN_VAR) else {
        return;
    };
    // SAFETY: the library's constructor runs before `main`, while the
    // program has no other thread to read the environment meanwhile.
    unsafe { libc::unsetenv(c"IXORA_SPAWN".as_ptr()) };
    let say = |what: &str| {
        let m = format!(
            "ixora-preload: the Ixora sockets this program inherited from posix_spawn carry \
             nothing ({what})\n"
        );
        sys_write(2, m.as_bytes());
    };
    let Some(o) = v.to_str().and_then(parse_spawn) else {
        return say("malformed IXORA_SPAWN");
    };
    // The spawn's file actions may have closed the connection, or put
    // another descriptor at its number.
    if state::socket_inode(o.ctl) != Some(o.ctl_ino)
        || int_opt(o.ctl, libc::SO_DOMAIN) != Some(libc::AF_UNIX)
    {
        return say("its control connection was not passed on");
    }
    let a = match take_up(o.ctl, o.row, o.app) {
        Ok(Some(a)) => a,
        Ok(None) => return,
        Err(e) => return say(&e),
    };
    let mut found = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        for e in dir.flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else {
                continue;
            };
            if fd == o.ctl {
                continue;
            }
            let Some(ino) = state::socket_inode(fd) else {
                continue;
            };
            if let Some(&(_, s, gen, flags)) = o.socks.iter().find(|x| x.0 == ino) {
                if live(a, s, gen) {
                    found.push((fd, s, gen, flags));
                }
            }
        }
    }
    let offered: Vec<u32> = o.socks.iter().map(|x| x.1).collect();
    state::take_offer(a, &found, &offered);
    crate::stdio::adopt_standard_streams();
    state::kick(a);
}

/// Call `posix_spawn` or `posix_spawnp` (`spawn`) with `envp`, or with the
/// environment that offers our sockets to the child ([`prepare_spawn`]).
fn spawning(
    envp: *const *const c_char,
    spawn: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let child = shimmed(envp);
    let offer = prepare_spawn(&child.env);
    let env = offer.as_ref().map_or(&child.env[..], |o| &o.env[..]);
    // The caller's own array where nothing changed.
    let owned = (child.changed || offer.is_some()).then(|| terminated(env.to_vec()));
    let r = spawn(owned.as_ref().map_or(envp, |v| v.as_ptr()));
    if let Some(o) = offer {
        // The child has its own copy (or was never started: the
        // connection then ends, and the service gives the offer back).
        state::offer_done(o.ctl);
    }
    r
}

/// `posix_spawn` and `posix_spawnp` (the latter searches `PATH`), each
/// after [`prepare_spawn`]: one signature, one body.
macro_rules! spawn_call {
    ($name:ident) => {
        #[doc = concat!(stringify!($name), "(3): see [`prepare_spawn`].")]
        #[no_mangle]
        pub extern "C" fn $name(
            pid: *mut libc::pid_t,
            path: *const c_char,
            file_actions: *const libc::c_void,
            attrp: *const libc::c_void,
            argv: *const *const c_char,
            envp: *const *const c_char,
        ) -> c_int {
            spawning(envp, |env| {
                real!($name: fn(*mut libc::pid_t, *const c_char, *const libc::c_void, *const libc::c_void, *const *const c_char, *const *const c_char) -> c_int)(
                    pid, path, file_actions, attrp, argv, env,
                )
            })
        }
    };
}
spawn_call!(posix_spawn);
spawn_call!(posix_spawnp);

/// The process holds Ixora sockets a child could inherit.
fn has_sockets() -> bool {
    state::attached().is_some() && !state::ixora_fds().is_empty()
}

/// Spawn `/bin/sh -c -- command` through the interposed `posix_spawn`
/// (which offers the child our sockets), with file actions `fa` and
/// attributes `attr` (either may be null): the child's pid, or the
/// spawn's error number.
fn spawn_shell(
    command: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
) -> Result<libc::pid_t, c_int> {
    extern "C" {
        static environ: *const *const c_char;
    }
    let argv = [
        c"sh".as_ptr(),
        c"-c".as_ptr(),
        c"--".as_ptr(),
        command,
        std::ptr::null(),
    ];
    let mut pid: libc::pid_t = -1;
    // SAFETY: `environ` is the C library's; reading the pointer is what
    // its own `system` does.
    let env = unsafe { environ };
    let r = posix_spawn(
        &mut pid,
        c"/bin/sh".as_ptr(),
        fa.cast(),
        attr.cast(),
        argv.as_ptr(),
        env,
    );
    if r == 0 {
        Ok(pid)
    } else {
        Err(r)
    }
}

/// `waitpid(pid)` until it is not interrupted: the status, or -1.
fn wait_child(pid: libc::pid_t) -> c_int {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int for waitpid to write.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return status;
        }
        if r < 0 && errno() != libc::EINTR {
            return -1;
        }
    }
}

/// `system` calls in progress, and the SIGINT and SIGQUIT actions the
/// first of them replaced (restored by the last), as the C library does.
static SYSTEM_CALLS: std::sync::Mutex<(usize, Option<(libc::sigaction, libc::sigaction)>)> =
    std::sync::Mutex::new((0, None));

/// system(3). The C library's runs its shell through its own
/// `posix_spawn`, where the shim is not called: while this process has
/// Ixora sockets this one does the same through the interposed
/// `posix_spawn`, so that the shell — and the program it runs — can use
/// those it inherits. As the C library's (and POSIX): SIGINT and SIGQUIT
/// ignored and SIGCHLD blocked in the caller while the command runs, set
/// back to their defaults (unless ignored) and the caller's mask in the
/// child; the shell's wait status, or 127 as its exit status if it could
/// not be started.
#[no_mangle]
pub extern "C" fn system(command: *const c_char) -> c_int {
    if command.is_null() || !has_sockets() {
        return real!(system: fn(*const c_char) -> c_int)(command);
    }
    // SAFETY (all blocks below): plain calls on sigaction, sigset and
    // spawn-attribute values that live on this stack frame, as the C
    // library's own `system` makes them.
    let mut ign: libc::sigaction = unsafe { std::mem::zeroed() };
    ign.sa_sigaction = libc::SIG_IGN;
    let (intr, quit) = {
        let mut g = SYSTEM_CALLS.lock().unwrap_or_else(|e| e.into_inner());
        if g.0 == 0 {
            let mut intr: libc::sigaction = unsafe { std::mem::zeroed() };
            let mut quit: libc::sigaction = unsafe { std::mem::zeroed() };
            unsafe {
                libc::sigaction(libc::SIGINT, &ign, &mut intr);
                libc::sigaction(libc::SIGQUIT, &ign, &mut quit);
            }
            g.1 = Some((intr, quit));
        }
        g.0 += 1;
        g.1.expect("set by the first call")
    };
    let mut omask: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut chld: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut reset: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut omask);
        libc::sigemptyset(&mut reset);
        if intr.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut reset, libc::SIGINT);
        }
        if quit.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut reset, libc::SIGQUIT);
        }
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawnattr_setsigmask(&mut attr, &omask);
        libc::posix_spawnattr_setsigdefault(&mut attr, &reset);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK) as libc::c_short,
        );
    }
    let status = match spawn_shell(command, std::ptr::null(), &attr) {
        Ok(pid) => wait_child(pid),
        Err(e) => {
            set_errno(e);
            127 << 8
        }
    };
    let e = errno();
    unsafe { libc::posix_spawnattr_destroy(&mut attr) };
    {
        let mut g = SYSTEM_CALLS.lock().unwrap_or_else(|e| e.into_inner());
        g.0 -= 1;
        if g.0 == 0 {
            if let Some((intr, quit)) = g.1.take() {
                unsafe {
                    libc::sigaction(libc::SIGINT, &intr, std::ptr::null_mut());
                    libc::sigaction(libc::SIGQUIT, &quit, std::ptr::null_mut());
                }
            }
        }
    }
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, &omask, std::ptr::null_mut()) };
    set_errno(e);
    status
}

/// The streams [`popen`] made, with their children (for [`pclose`]).
static POPENED: std::sync::Mutex<Vec<(usize, libc::pid_t)>> = std::sync::Mutex::new(Vec::new());

/// popen(3), for the reason [`system`] gives: while this process has
/// Ixora sockets the shell is started through the interposed
/// `posix_spawn`. As the C library's: mode "r" or "w", with "e" for a
/// stream that is close-on-exec; the pipe's other end becomes the child's
/// standard output or input; the child gets none of the streams earlier
/// `popen` calls left open (POSIX).
#[no_mangle]
pub extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    if command.is_null() || mode.is_null() || !has_sockets() {
        return real!(popen: fn(*const c_char, *const c_char) -> *mut libc::FILE)(command, mode);
    }
    // SAFETY: `mode` is a NUL-terminated string (popen's contract).
    let m = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
    let read = match m.first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
    };
    let cloexec = m[1..].contains(&b'e');
    let mut p = [-1 as c_int; 2];
    // SAFETY: `p` has room for the two descriptors.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return std::ptr::null_mut();
    }
    // Ours, and the child's (put on its standard output or input).
    let (ours, theirs, target) = if read {
        (p[0], p[1], libc::STDOUT_FILENO)
    } else {
        (p[1], p[0], libc::STDIN_FILENO)
    };
    // SAFETY (the blocks below): spawn file actions on a value of this
    // frame; descriptors this call just made.
    let mut fa: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::posix_spawn_file_actions_init(&mut fa);
        libc::posix_spawn_file_actions_adddup2(&mut fa, theirs, target);
        for &(f, _) in POPENED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let fd = libc::fileno(f as *mut libc::FILE);
            if fd >= 0 && fd != target {
                libc::posix_spawn_file_actions_addclose(&mut fa, fd);
            }
        }
    }
    let r = spawn_shell(command, &fa, std::ptr::null());
    unsafe {
        libc::posix_spawn_file_actions_destroy(&mut fa);
        libc::close(theirs);
    }
    let pid = match r {
        Ok(pid) => pid,
        Err(e) => {
            unsafe { libc::close(ours) };
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    if !cloexec {
        set_cloexec(ours, false);
    }
    let fmode = if read { c"r" } else { c"w" };
    // SAFETY: `ours` is an open pipe end this call owns.
    let f = unsafe { libc::fdopen(ours, fmode.as_ptr()) };
    if f.is_null() {
        let e = errno();
        unsafe { libc::close(ours) };
        wait_child(pid);
        set_errno(e);
        return f;
    }
    POPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((f as usize, pid));
    f
}

/// pclose(3): a stream of [`popen`]'s is closed and its child waited for;
/// any other goes to the C library's.
#[no_mangle]
pub extern "C" fn pclose(f: *mut libc::FILE) -> c_int {
    let pid = {
        let mut v = POPENED.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .position(|&(p, _)| p == f as usize)
            .map(|i| v.swap_remove(i).1)
    };
    let Some(pid) = pid else {
        return real!(pclose: fn(*mut libc::FILE) -> c_int)(f);
    };
    // SAFETY: `f` is a stream popen made and the caller still owns.
    unsafe { libc::fclose(f) };
    wait_child(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_reads_back_what_was_written() {
        let i = parse("7:3:12:0.5.9.1024,4.5.9.1024:6.2").expect("parses");
        assert_eq!((i.ctl, i.row, i.app), (7, 3, 12));
        assert_eq!(i.kept, vec![(0, 5, 9, 1024), (4, 5, 9, 1024)]);
        assert_eq!(i.closed, vec![(6, 2)]);
        let none = parse("7:3:12:1.2.3.4:").expect("parses");
        assert!(none.closed.is_empty());
        for bad in [
            "",
            "7:3",
            "7:3:12:1.2.3:",
            "7:3:12:1.2.3.4:5",
            "x:3:12::",
            "7:3:12:::",
        ] {
            assert!(parse(bad).is_none(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_spawn_variable_reads_back_what_was_written() {
        let o = parse_spawn("9:123456789012:4:12:77.5.9.1024,78.6.1.0").expect("parses");
        assert_eq!((o.ctl, o.ctl_ino, o.row, o.app), (9, 123456789012, 4, 12));
        assert_eq!(o.socks, vec![(77, 5, 9, 1024), (78, 6, 1, 0)]);
        for bad in [
            "",
            "9:1:4:12",
            "9:1:4:12:77.5.9",
            "9:1:4:12:77.5.9.1:",
            "9:1:4:12:77.5.99999999999.1",
        ] {
            assert!(parse_spawn(bad).is_none(), "{bad:?} accepted");
        }
    }
}
