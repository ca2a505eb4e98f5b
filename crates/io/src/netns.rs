//! Test networks: network namespaces joined by veth pairs, created and torn
//! down by whoever needs them (tests, benchmarks), with addresses from
//! 198.18.0.0/15 only.
//!
//! Names carry the process id and a counter (`ixora-<tag>-<pid>-<n>`), so
//! concurrent runs and leftovers from crashed ones never collide. Dropping a
//! [`NetNs`] deletes the namespace (and with it the interfaces inside);
//! dropping a [`Veth`] deletes the pair if it still exists.

use std::io;
use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Is `ip` inside 198.18.0.0/15, the range reserved for benchmarking
/// (RFC 2544)? Test networks use nothing else.
pub fn is_bench_addr(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 198 && (o[1] == 18 || o[1] == 19)
}

fn run(cmd: &mut Command) -> io::Result<Output> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

/// `ip` with arguments.
fn ip(args: &[&str]) -> io::Result<Output> {
    run(Command::new("ip").args(args))
}

/// A unique name: `ixora-<tag>-<pid>-<n>`, at most 15 characters for
/// interfaces when `short`.
pub fn unique_name(tag: &str, short: bool) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    if short {
        // Interface names are limited to 15 bytes.
        let s = format!("{tag}{}{n}", pid % 100_000);
        s.chars().take(15).collect()
    } else {
        format!("ixora-{tag}-{pid}-{n}")
    }
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Create a fresh namespace with its loopback up.
    pub fn new(tag: &str) -> io::Result<NetNs> {
        let name = unique_name(tag, false);
        ip(&["netns", "add", &name])?;
        let ns = NetNs { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the namespace file (for `setns` / `nsenter --net=`).
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// Run `ip -n <ns> args...`.
    pub fn ip(&self, args: &[&str]) -> io::Result<Output> {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// A command that runs inside the namespace (`nsenter --net=...`, which
    /// unlike `ip netns exec` keeps /sys and a mounted bpffs visible).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.path()))
            .arg("--")
            .arg(program);
        c
    }

    /// Run a command in the namespace to completion; error on failure.
    pub fn exec(&self, program: &str, args: &[&str]) -> io::Result<Output> {
        run(self.command(program).args(args))
    }

    /// Move the calling thread into this namespace (sockets it opens then
    /// belong here). Threads spawned afterwards inherit it.
    pub fn enter(&self) -> io::Result<()> {
        let f = std::fs::File::open(self.path())?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
    }

    /// Run `f` on a fresh thread inside this namespace and return its
    /// result (sockets it opens belong here; threads it spawns inherit the
    /// namespace); the calling thread stays where it is. A panic in `f` is
    /// resumed in the caller.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter().expect("enter network namespace");
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Turn IPv6 off in the namespace, so no router solicitations or MLD
    /// reports appear on test links.
    pub fn disable_ipv6(&self) -> io::Result<()> {
        self.exec(
            "sysctl",
            &[
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        )
        .map(|_| ())
    }

    /// Add an IPv4 address (must be in 198.18.0.0/15) to `dev` and bring it up.
    pub fn addr(&self, dev: &str, ip: Ipv4Addr, prefix: u8) -> io::Result<()> {
        if !is_bench_addr(ip) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{ip} is outside 198.18.0.0/15; test networks use nothing else"),
            ));
        }
        self.ip(&["addr", "add", &format!("{ip}/{prefix}"), "dev", dev])?;
        self.ip(&["link", "set", dev, "up"])?;
        Ok(())
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A veth pair, each end moved into a namespace (or left in the current
/// one when `None`). Deleted on drop if still present.
#[derive(Debug)]
pub struct Veth {
    /// First end's name.
    pub a: String,
    /// Second end's name.
    pub b: String,
    ns_a: Option<String>,
}

impl Veth {
    /// Create a pair with `queues` TX and RX queues on each end.
    pub fn new(
        tag: &str,
        queues: u32,
        ns_a: Option<&NetNs>,
        ns_b: Option<&NetNs>,
    ) -> io::Result<Veth> {
        let a = unique_name(&format!("{tag}a"), true);
        let b = unique_name(&format!("{tag}b"), true);
        let q = queues.to_string();
        ip(&[
            "link",
            "add",
            &a,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &b,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        let v = Veth {
            a,
            b,
            ns_a: ns_a.map(|n| n.name.clone()),
        };
        if let Some(ns) = ns_a {
            ip(&["link", "set", &v.a, "netns", ns.name()])?;
        }
        if let Some(ns) = ns_b {
            ip(&["link", "set", &v.b, "netns", ns.name()])?;
        }
        Ok(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes the pair; if its namespace is already gone
        // the pair went with it.
        let mut c = Command::new("ip");
        if let Some(ns) = &self.ns_a {
            c.args(["-n", ns]);
        }
        let _ = c.args(["link", "del", &self.a]).output();
    }
}

/// Are we root (namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)?
pub fn can_create_namespaces() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// A test cannot run here (`why`: what is missing). Prints `skipped: why`
/// and returns false, so the test passes without running; but when the
/// environment variable `IXORA_TEST_STRICT` is set (`make test` sets it,
/// after installing everything) it panics, so a missing tool or privilege
/// fails the run instead of hiding a test.
pub fn skip(why: &str) -> bool {
    if std::env::var_os("IXORA_TEST_STRICT").is_some() {
        panic!("cannot run: {why} (IXORA_TEST_STRICT is set)");
    }
    eprintln!("skipped: {why}");
    false
}

/// Root (namespaces need it)? Otherwise [`skip`]s.
pub fn need_root() -> bool {
    can_create_namespaces() || skip("needs root (network namespaces)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_addresses_outside_the_bench_range() {
        assert!(is_bench_addr(Ipv4Addr::new(198, 18, 0, 1)));
        assert!(is_bench_addr(Ipv4Addr::new(198, 19, 255, 1)));
        assert!(!is_bench_addr(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!is_bench_addr(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn namespace_and_veth_come_and_go() {
        if !can_create_namespaces() {
            eprintln!("skipped: needs root");
            return;
        }
        let (a, b) = (NetNs::new("t").unwrap(), NetNs::new("t").unwrap());
        let v = Veth::new("t", 2, Some(&a), Some(&b)).unwrap();
        a.addr(&v.a, Ipv4Addr::new(198, 18, 9, 1), 24).unwrap();
        b.addr(&v.b, Ipv4Addr::new(198, 18, 9, 2), 24).unwrap();
        assert!(a.addr(&v.a, Ipv4Addr::new(10, 1, 1, 1), 24).is_err());
        let out = a
            .exec("ping", &["-c", "1", "-W", "2", "198.18.9.2"])
            .unwrap();
        assert!(out.status.success());
        let name = a.name().to_string();
        drop(v);
        drop(a);
        drop(b);
        let list = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&name));
    }
}
