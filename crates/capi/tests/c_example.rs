//! The C example, compiled and run: `examples/c/echo_server.c` is built
//! with gcc (`-std=c11 -Wall -Wextra -Werror -pedantic`) against
//! `libixora.so` and `include/ixora.h`, started in a network namespace on
//! one end of a veth pair, and checked against the Linux stack on the
//! other end (198.18.46.0/24):
//!
//! * a `std::net` client sends 1 MB in 16 KB chunks while reading the echo,
//!   and checks every byte;
//! * a slow reader: 512 KB sent at once, the echo read only after 300 ms,
//!   so the client's receive window fills, the server's send window closes
//!   while it still holds received bytes, and more data arrives meanwhile
//!   (the window-full path, and each received byte handed out once);
//! * eight clients at once send 128 KB each, half-close, and must read
//!   exactly their bytes back followed by end of stream (the server closes
//!   on the peer's close once everything is echoed);
//! * a client that resets its connection (closes with unread echo) is a
//!   `dead` event, and the server keeps serving;
//! * `ping` gets its answers (ICMP from the same dataplane);
//! * SIGINT or SIGTERM stop the server through the `stop` flag, with exit
//!   status 0 and a summary line whose counts match what the clients did.
//!
//! One test per backend: af_xdp with the zero-copy echo (`ixora_sendv`,
//! `recv_done` on acknowledgement) on one core, af_packet with the copying
//! echo (`ixora_send_copy`) on two cores.
//!
//! `libixora.so` is taken from this test's own profile directory (built
//! together with the test, as the crate is a cdylib too); if it is missing
//! it is built with `cargo build -p ixora-capi` for the same profile. The
//! example links a private copy through DT_RPATH, runs without cargo's
//! `LD_LIBRARY_PATH`, and the test checks in `/proc/<pid>/maps` that this
//! copy is the one loaded. With clang installed the example is compiled
//! with it too (same flags; not run).
//!
//! Needs root (namespaces); skipped with a message otherwise. Namespaces
//! and links are removed on drop (also when an assertion fails), every loop
//! is bounded in count and time, and the server is ended by its PID.

use ixora_io::netns::{unique_name, NetNs, Veth};
use nix::sys::signal::Signal;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 46, 2);
const LINUX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 46, 1);
const PREFIX: u8 = 24;
const PORT: u16 = 7;

/// The big transfer: 1 MB in 16 KB chunks.
const BIG: usize = 1 << 20;
const CHUNK: usize = 16 * 1024;
/// The slow reader: bytes, and how long before it starts reading.
const SLOW: usize = 512 * 1024;
const SLOW_DELAY: Duration = Duration::from_millis(300);
/// Concurrent half-closing clients, and what each sends.
const CLIENTS: usize = 8;
const EACH: usize = 128 * 1024;
/// The probe's message and the resetting client's bytes.
const HELLO: &[u8] = b"hello, ixora\n";
const RESET_BYTES: usize = 1000;

/// One test at a time (each runs a dataplane; keep their timing apart).
static SERIAL: Mutex<()> = Mutex::new(());

fn root() -> bool {
    ixora_io::netns::need_root()
}

/// The workspace root.
fn workspace() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.canonicalize().unwrap_or(p)
}

/// `target/<profile>`: this test binary lives in its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// `libixora.so` of this profile: the newest of `target/<profile>/` and its
/// `deps/` (cargo writes the cdylib there when it builds the tests), built
/// with cargo if neither exists.
fn libixora() -> PathBuf {
    let dir = profile_dir();
    let newest = || {
        [
            dir.join("libixora.so"),
            dir.join("deps").join("libixora.so"),
        ]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
    };
    if let Some(p) = newest() {
        return p;
    }
    let profile = dir
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("debug")
        .to_string();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(workspace())
        .args(["build", "-p", "ixora-capi"]);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("libixora.so missing in {}: running {cmd:?}", dir.display());
    let child = cmd
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cargo}: {e}"));
    let mut child = Guard(Some(child));
    let status = child.wait_for(Duration::from_secs(900), "cargo build -p ixora-capi");
    assert!(status.success(), "cargo build -p ixora-capi failed");
    newest().unwrap_or_else(|| panic!("cargo built no libixora.so in {}", dir.display()))
}

/// A child process killed by its PID if not collected.
struct Guard(Option<Child>);

impl Guard {
    /// Wait for the child, at most `limit`; killed (and the test failed)
    /// after that.
    fn wait_for(&mut self, limit: Duration, what: &str) -> ExitStatus {
        let child = self.0.as_mut().expect("child");
        let t = Instant::now();
        loop {
            if let Some(s) = child.try_wait().expect("wait") {
                self.0 = None;
                return s;
            }
            assert!(t.elapsed() < limit, "{what} took longer than {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(unique_name(tag, false));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compile the example into `dir`, against a private copy of
/// `libixora.so` (so a concurrent rebuild cannot swap it mid-test).
fn compile_example(dir: &Path) -> PathBuf {
    let lib = libixora();
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).expect("lib dir");
    std::fs::copy(&lib, libdir.join("libixora.so")).expect("copy libixora.so");
    let ws = workspace();
    let src = ws.join("examples/c/echo_server.c");
    let exe = dir.join("echo_server");
    let libdir_s = libdir.to_string_lossy().to_string();
    let mut cmd = Command::new("gcc");
    cmd.args([
        "-std=c11",
        "-O2",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
    ])
    .arg("-I")
    .arg(ws.join("include"))
    .arg(&src)
    .arg("-L")
    .arg(&libdir)
    .arg("-lixora")
    // DT_RPATH (not RUNPATH): searched before LD_LIBRARY_PATH.
    .arg(format!("-Wl,--disable-new-dtags,-rpath,{libdir_s}"))
    .arg("-o")
    .arg(&exe);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("gcc not runnable ({e}); install gcc (make deps)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // -Werror already refuses warnings; nothing else may be printed either.
    assert!(
        out.stderr.is_empty(),
        "gcc said:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("compiled {} with {lib:?}", src.display());
    exe
}

/// Compile the example with clang too when one is installed (the header
/// and the example promise gcc and clang); the binary is not run.
fn compile_with_clang(dir: &Path) {
    let ws = workspace();
    let Some(clang) = ["clang", "clang-14"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        eprintln!("no clang installed: compiled with gcc only");
        return;
    };
    let libdir = dir.join("lib");
    let mut cmd = Command::new(clang);
    cmd.args([
        "-std=c11",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-I",
    ])
    .arg(ws.join("include"))
    .arg(ws.join("examples/c/echo_server.c"))
    .arg("-L")
    .arg(&libdir)
    .arg("-lixora")
    .arg("-o")
    .arg(dir.join("echo_server.clang"));
    let out = cmd.output().expect("run clang");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{cmd:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("compiled with {clang} as well");
}

/// The example running: stopped by its PID (SIGTERM, then SIGKILL) on drop;
/// standard output and error go to files.
struct Server {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Server {
    fn spawn(mut cmd: Command, dir: &Path) -> Server {
        let out = dir.join("stdout");
        let err = dir.join("stderr");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("start echo_server");
        Server { child, out, err }
    }

    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Send `sig` and wait (bounded) for the exit; `None` if it had to be
    /// killed.
    fn signal_and_wait(&mut self, sig: Signal, limit: Duration) -> Option<ExitStatus> {
        if let Ok(Some(s)) = self.child.try_wait() {
            return Some(s);
        }
        let _ = nix::sys::signal::kill(self.pid(), sig);
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.signal_and_wait(Signal::SIGTERM, Duration::from_secs(10));
        }
        if std::thread::panicking() {
            eprintln!(
                "--- echo_server stdout ---\n{}--- echo_server stderr ---\n{}",
                self.stdout(),
                self.stderr()
            );
        }
    }
}

/// The example's side and the Linux side of one veth pair.
struct Net {
    server_if: String,
    // Drop order: the link, then the namespaces.
    _veth: Veth,
    lx: NetNs,
    ix: NetNs,
}

impl Net {
    fn new(queues: u32) -> Net {
        let ix = NetNs::new("ce").expect("namespace");
        let lx = NetNs::new("ce").expect("namespace");
        ix.disable_ipv6().expect("sysctl");
        lx.disable_ipv6().expect("sysctl");
        let veth = Veth::new("ce", queues, Some(&ix), Some(&lx)).expect("veth");
        ix.ip(&["link", "set", &veth.a, "up"]).expect("link up");
        lx.addr(&veth.b, LINUX_IP, PREFIX).expect("address");
        // Frames towards the dataplane must fit a packet buffer: no TSO/GSO
        // super-frames from the Linux end (docs: backends).
        lx.exec("ethtool", &["-K", &veth.b, "tso", "off", "gso", "off"])
            .expect("ethtool -K tso off gso off");
        Net {
            server_if: veth.a.clone(),
            _veth: veth,
            lx,
            ix,
        }
    }

    /// Run `f` on a thread inside the Linux namespace (its sockets live
    /// there; threads it spawns inherit the namespace).
    fn in_linux<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.lx.run(f)
    }
}

fn addr() -> SocketAddrV4 {
    SocketAddrV4::new(SERVER_IP, PORT)
}

/// The test pattern: byte `i` of a stream (`salt` tells streams apart).
fn pattern(i: usize, salt: usize) -> u8 {
    ((i.wrapping_add(salt * 7919)).wrapping_mul(2_654_435_761) >> 13) as u8
}

fn connect() -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&addr().into(), Duration::from_secs(5))
        .map_err(|e| format!("connect {}: {e}", addr()))?;
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.set_write_timeout(Some(Duration::from_secs(10))).ok();
    Ok(s)
}

/// Wait until the server echoes a short message (bounded: 20 s). Returns
/// the connection attempts that failed before (each may, at worst, have
/// become a connection the server counted).
fn wait_ready(net: &Net, srv: &mut Server) -> u64 {
    let t = Instant::now();
    let mut failed = 0;
    loop {
        assert!(srv.running(), "echo_server exited early");
        let up = net.in_linux(|| {
            TcpStream::connect_timeout(&addr().into(), Duration::from_millis(500)).ok()
        });
        if let Some(mut s) = up {
            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            s.write_all(HELLO).expect("probe write");
            let mut back = vec![0u8; HELLO.len()];
            s.read_exact(&mut back).expect("probe echo");
            assert_eq!(back, HELLO, "probe echo differs");
            return failed;
        }
        failed += 1;
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "echo_server not reachable after {failed} attempts"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Read from `r` until `total` bytes came back, checking each against
/// `pattern(_, salt)`; bounded by `deadline`.
fn read_checked(
    r: &mut TcpStream,
    total: usize,
    salt: usize,
    deadline: Instant,
) -> Result<(), String> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < total {
        if Instant::now() > deadline {
            return Err(format!("time limit after receiving {got} of {total} bytes"));
        }
        let want = buf.len().min(total - got);
        match r.read(&mut buf[..want]) {
            Ok(0) => return Err(format!("connection closed after {got} of {total} bytes")),
            Ok(n) => {
                if let Some(k) = (0..n).find(|&k| buf[k] != pattern(got + k, salt)) {
                    return Err(format!("byte {} differs", got + k));
                }
                got += n;
            }
            Err(e) => return Err(format!("read at {got} of {total}: {e}")),
        }
    }
    Ok(())
}

/// How a client runs an echo transfer.
#[derive(Clone, Copy)]
struct Transfer {
    /// Bytes to send.
    total: usize,
    /// Bytes per write.
    chunk: usize,
    /// Tells this stream's pattern apart.
    salt: usize,
    /// Shut down the write side after sending and require end of stream
    /// right after the echo.
    half_close: bool,
    /// Start reading the echo only after this.
    read_delay: Duration,
    /// Time limit of the whole transfer.
    limit: Duration,
}

impl Transfer {
    fn new(total: usize, chunk: usize, salt: usize) -> Transfer {
        Transfer {
            total,
            chunk,
            salt,
            half_close: false,
            read_delay: Duration::ZERO,
            limit: Duration::from_secs(60),
        }
    }
}

/// Send `total` bytes in `chunk`s on a writer thread while reading the
/// echo back and checking it; then (if `half_close`) shut down the write
/// side and require end of stream right after the echo. Bounded by
/// `limit`.
fn echo_transfer(t: Transfer) -> Result<(), String> {
    let Transfer {
        total,
        chunk,
        salt,
        half_close,
        read_delay,
        limit,
    } = t;
    let deadline = Instant::now() + limit;
    let mut r = connect()?;
    let mut w = r.try_clone().map_err(|e| e.to_string())?;
    let writer = std::thread::spawn(move || -> Result<(), String> {
        let mut buf = vec![0u8; chunk];
        let mut sent = 0;
        while sent < total {
            if Instant::now() > deadline {
                return Err(format!("time limit after sending {sent} bytes"));
            }
            let n = chunk.min(total - sent);
            for (k, b) in buf[..n].iter_mut().enumerate() {
                *b = pattern(sent + k, salt);
            }
            w.write_all(&buf[..n])
                .map_err(|e| format!("write at {sent}: {e}"))?;
            sent += n;
        }
        if half_close {
            w.shutdown(Shutdown::Write)
                .map_err(|e| format!("shutdown(write): {e}"))?;
        }
        Ok(())
    });
    std::thread::sleep(read_delay);
    let mut result = read_checked(&mut r, total, salt, deadline);
    if result.is_ok() && half_close {
        // The server closes once the peer closed and all is echoed.
        let mut b = [0u8; 1];
        result = match r.read(&mut b) {
            Ok(0) => Ok(()),
            Ok(_) => Err("bytes after the echo".into()),
            Err(e) => Err(format!("no end of stream after the echo: {e}")),
        };
    }
    let _ = r.shutdown(Shutdown::Both);
    let w = writer.join().map_err(|_| "writer panicked".to_string())?;
    result?;
    w
}

/// A client that sends `RESET_BYTES`, reads half of the echo, waits until
/// the rest has arrived, and closes with it unread: Linux resets the
/// connection, which the server sees as `dead`.
fn resetting_client() -> Result<(), String> {
    let mut s = connect()?;
    let data: Vec<u8> = (0..RESET_BYTES).map(|i| pattern(i, 99)).collect();
    s.write_all(&data).map_err(|e| format!("write: {e}"))?;
    let half = RESET_BYTES / 2;
    let mut back = vec![0u8; half];
    s.read_exact(&mut back)
        .map_err(|e| format!("read half of the echo: {e}"))?;
    if back != data[..half] {
        return Err("echo differs".into());
    }
    // Wait (bounded) until the other half is in our receive queue, so the
    // close below has unread data and resets.
    let t = Instant::now();
    let mut peek = vec![0u8; RESET_BYTES];
    loop {
        let n = s.peek(&mut peek).map_err(|e| format!("peek: {e}"))?;
        if n >= RESET_BYTES - half {
            break;
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "only {n} of {} echoed bytes arrived",
                RESET_BYTES - half
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(s);
    Ok(())
}

/// The `libixora.so` process `pid` has mapped.
fn mapped_libixora(pid: u32) -> Option<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libixora.so"))
        .map(PathBuf::from)
}

/// The summary line: `echo_server: N connections, B bytes echoed, C
/// closed, D died`.
#[derive(Debug, Default, PartialEq)]
struct Summary {
    connections: u64,
    bytes: u64,
    closed: u64,
    died: u64,
}

fn summary(stdout: &str) -> Option<Summary> {
    let line = stdout.lines().find(|l| l.starts_with("echo_server:"))?;
    let words: Vec<&str> = line
        .trim_start_matches("echo_server:")
        .split([' ', ','])
        .filter(|w| !w.is_empty())
        .collect();
    let mut s = Summary::default();
    let mut seen = 0;
    for pair in words.windows(2) {
        let Ok(n) = pair[0].parse::<u64>() else {
            continue;
        };
        let field = match pair[1] {
            "connections" => &mut s.connections,
            "bytes" => &mut s.bytes,
            "closed" => &mut s.closed,
            "died" => &mut s.died,
            _ => continue,
        };
        *field = n;
        seen += 1;
    }
    (seen == 4).then_some(s)
}

fn run_example(backend: &str, cores: u32, copy: bool, stop: Signal) {
    if !root() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let dir = TempDir::new("c-example");
    let exe = compile_example(&dir.0);
    compile_with_clang(&dir.0);
    let net = Net::new(cores);

    let mut cmd = net.ix.command(&exe.to_string_lossy());
    let ip = format!("{SERVER_IP}/{PREFIX}");
    let port = PORT.to_string();
    let cores_s = cores.to_string();
    cmd.args([
        "--backend",
        backend,
        "--iface",
        &net.server_if,
        "--ip",
        &ip,
        "--port",
        &port,
        "--cores",
        &cores_s,
    ]);
    if copy {
        cmd.arg("--copy");
    }
    let mode = if copy { "copy" } else { "zero-copy" };
    // cargo test sets LD_LIBRARY_PATH (target/<profile>/ among others),
    // which could load another libixora.so than the one compiled against.
    cmd.env_remove("LD_LIBRARY_PATH");
    let mut srv = Server::spawn(cmd, &dir.0);
    let failed_probes = wait_ready(&net, &mut srv);
    let loaded = mapped_libixora(srv.child.id());
    assert_eq!(
        loaded,
        Some(dir.0.join("lib").join("libixora.so")),
        "echo_server runs with another libixora.so"
    );

    // A connection reset by the client: `dead`; the server keeps serving.
    net.in_linux(resetting_client)
        .unwrap_or_else(|e| panic!("resetting client: {e}"));

    // 1 MB in 16 KB chunks, every byte checked.
    let t = Instant::now();
    net.in_linux(|| echo_transfer(Transfer::new(BIG, CHUNK, 1)))
        .unwrap_or_else(|e| panic!("1 MB echo: {e}"));
    let big_secs = t.elapsed().as_secs_f64();
    assert!(srv.running(), "echo_server exited");

    // A slow reader: the server's send window closes while it holds
    // received bytes, and more arrive.
    let slow = Transfer {
        read_delay: SLOW_DELAY,
        ..Transfer::new(SLOW, 64 * 1024, 2)
    };
    net.in_linux(|| echo_transfer(slow))
        .unwrap_or_else(|e| panic!("slow reader: {e}"));

    // Eight half-closing clients at once.
    let t = Instant::now();
    let results: Vec<Result<(), String>> = net.in_linux(|| {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..CLIENTS)
                .map(|i| {
                    s.spawn(move || {
                        echo_transfer(Transfer {
                            half_close: true,
                            ..Transfer::new(EACH, 8 * 1024, 10 + i)
                        })
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("client panicked".into())))
                .collect()
        })
    });
    let many_secs = t.elapsed().as_secs_f64();
    for (i, r) in results.iter().enumerate() {
        if let Err(e) = r {
            panic!("client {i} of {CLIENTS}: {e}");
        }
    }

    // ICMP echo from the same dataplane.
    let out = net
        .lx
        .exec(
            "ping",
            &["-c", "3", "-i", "0.2", "-W", "2", &SERVER_IP.to_string()],
        )
        .unwrap_or_else(|e| panic!("ping: {e}"));
    let ping = String::from_utf8_lossy(&out.stdout);
    assert!(ping.contains(" 3 received"), "ping:\n{ping}");

    // Stop through the flag, by the signal under test.
    let status = srv
        .signal_and_wait(stop, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("echo_server did not stop on {stop:?} within 10 s"));
    let (stdout, stderr) = (srv.stdout(), srv.stderr());
    assert!(
        status.success(),
        "echo_server exit status {status} after {stop:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let got = summary(&stdout).unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    let bytes = (HELLO.len() + RESET_BYTES + BIG + SLOW + CLIENTS * EACH) as u64;
    // The probe, the reset one, the big one, the slow one, the concurrent
    // ones.
    let conns = 4 + CLIENTS as u64;
    assert_eq!(got.bytes, bytes, "bytes echoed: {got:?}");
    assert_eq!(got.died, 1, "the reset connection must die: {got:?}");
    assert_eq!(got.closed, conns - 1, "closed on peer close: {got:?}");
    assert!(
        got.connections >= conns && got.connections <= conns + failed_probes,
        "connections {} (expected {conns}, {failed_probes} failed probes)",
        got.connections
    );
    eprintln!(
        "{backend}, {cores} core(s), {mode} echo: {} bytes echoed and checked \
         (1 MB in {:.3} s = {:.0} Mbit/s each way; {} KB to a slow reader; \
         {CLIENTS} x {} KB at once in {:.3} s), \
         ping 3/3, stopped by {stop:?}; summary `{}`; {:.1} s in all",
        got.bytes,
        big_secs,
        BIG as f64 * 8.0 / big_secs / 1e6,
        SLOW / 1024,
        EACH / 1024,
        many_secs,
        stdout.trim(),
        t0.elapsed().as_secs_f64()
    );
}

/// The default backend, the zero-copy echo, one core; stopped by SIGINT.
#[test]
fn c_echo_server_af_xdp_zero_copy() {
    run_example("af_xdp", 1, false, Signal::SIGINT);
}

/// af_packet, the copying echo, two cores (the C code's per-core state
/// under concurrent callbacks); stopped by SIGTERM.
#[test]
fn c_echo_server_af_packet_copy_two_cores() {
    run_example("af_packet", 2, true, Signal::SIGTERM);
}

#[test]
fn summary_line_parses() {
    assert_eq!(
        summary("echo_server: 11 connections, 2097152 bytes echoed, 10 closed, 1 died\n"),
        Some(Summary {
            connections: 11,
            bytes: 2_097_152,
            closed: 10,
            died: 1
        })
    );
    assert_eq!(summary("echo_server: 3 connections\n"), None);
}
