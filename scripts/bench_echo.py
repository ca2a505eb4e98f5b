#!/usr/bin/python3
"""Echo benchmark of issue 3: Ixora against the Linux kernel stack, one run,
same machine, same cores, same message plan.

Setups (server pinned to one CPU, client to the other):
  (a) linux_veth      Linux <-> Linux over a veth pair, epoll echo server and client
  (b) ixora_af_xdp    Ixora <-> Ixora over the same kind of veth pair, AF_XDP
  (c) ixora_shm       Ixora <-> Ixora over the shared-memory wire
  (d) linux_loopback  Linux over loopback (inside a private namespace)

For each: messages per second for s = 64 B, n in {1, 1024} round trips per
connection, c in {1, 64, 1024} connections; the round-trip time of a single
64 B ping-pong (p50/p99/p99.9); CPU seconds of server and client. Then,
from outside: a plain Linux ping-pong client (one connection, 64 B, every
byte checked) against Ixora's echo server and against the kernel epoll echo
server on the same kind of veth pair.

Results: docs/bench/echo.json, docs/bench/echo.md, docs/bench/echo*.png.
Reproduce with `make bench` (or `scripts/bench_echo.py --help`).

Test-network rules: namespaces and links carry this process's PID, use
198.18.0.0/15 only, and are removed on exit (also on failure or Ctrl-C);
every process started is bounded in time and ended by its PID.
"""

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "ixora"
OUT = ROOT / "docs" / "bench"
PID = os.getpid()
CLK_TCK = os.sysconf("SC_CLK_TCK")

SETUPS = {
    "linux_veth": "(a) Linux <-> Linux, veth, epoll",
    "ixora_af_xdp": "(b) Ixora <-> Ixora, veth, AF_XDP",
    "ixora_shm": "(c) Ixora <-> Ixora, shared-memory wire",
    "linux_loopback": "(d) Linux, loopback, epoll",
}

SERVER_IP = "198.18.70.1"
CLIENT_IP = "198.18.70.2"
LOOP_IP = "198.18.71.1"
SHM_SERVER_IP = "198.18.72.1"
SHM_CLIENT_IP = "198.18.72.2"

# ----------------------------------------------------------------- helpers

_cleanup = []
_children = []


def sh(*args, check=True, quiet=True):
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r


def in_ns(ns, *args):
    """A command line run inside network namespace `ns` (nsenter keeps /sys)."""
    return ["nsenter", f"--net=/var/run/netns/{ns}", "--", *args]


def pinned(cpu, *args):
    return ["taskset", "-c", str(cpu), *args]


def cleanup():
    for p in _children:
        stop_proc(p)
    _children.clear()
    while _cleanup:
        f = _cleanup.pop()
        try:
            f()
        except Exception as e:  # keep cleaning
            print(f"cleanup: {e}", file=sys.stderr)


def on_signal(sig, _frame):
    cleanup()
    sys.exit(128 + sig)


def netns(tag):
    name = f"ixb-{tag}-{PID}"
    sh("ip", "netns", "add", name)
    _cleanup.append(lambda: sh("ip", "netns", "del", name, check=False))
    sh(*in_ns(name, "ip", "link", "set", "lo", "up"))
    sh(*in_ns(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
              "net.ipv6.conf.default.disable_ipv6=1"))
    # Many short connections: wide port range, TIME-WAIT reuse, deep backlogs.
    sh(*in_ns(name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535",
              "net.ipv4.tcp_tw_reuse=1", "net.core.somaxconn=4096",
              "net.ipv4.tcp_max_syn_backlog=4096"))
    return name


def veth(ns_a, ns_b, tag):
    a, b = f"ixb{tag}a{PID}"[:15], f"ixb{tag}b{PID}"[:15]
    sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
    sh("ip", "link", "set", a, "netns", ns_a)
    sh("ip", "link", "set", b, "netns", ns_b)
    _cleanup.append(lambda: sh(*in_ns(ns_a, "ip", "link", "del", a), check=False))
    for ns, dev in ((ns_a, a), (ns_b, b)):
        sh(*in_ns(ns, "ip", "link", "set", dev, "up"))
    return a, b


def rps(ns, dev, cpu):
    """Steer `dev`'s receive processing (in namespace `ns`) to CPU `cpu`
    with RPS, where a NIC's interrupt for that side would run it (a veth
    otherwise receives on the sending CPU). `ip netns exec` mounts the
    namespace's own /sys."""
    sh("ip", "netns", "exec", ns, "sh", "-c",
       f"echo {1 << cpu:x} > /sys/class/net/{dev}/queues/rx-0/rps_cpus")


def start(cmd, log):
    f = open(log, "w")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    p._log = log
    _children.append(p)
    return p


def stop_proc(p, timeout=10):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in _children:
        _children.remove(p)
    # The log, for the caller's error message; the file goes (a run
    # leaves nothing in /tmp).
    if not hasattr(p, "_log"):
        return ""
    log = Path(p._log)
    try:
        text = log.read_text()
    except OSError:
        return ""
    log.unlink(missing_ok=True)
    return text


def cpu_of(pid):
    """CPU seconds (user + system) a live process has used."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def run_client(cmd, limit):
    """Run a client to completion; (report dict or None, CPU s, output)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _children.append(p)
    t0 = time.time()
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    _children.remove(p)
    ru = None
    try:
        import resource
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    except Exception:
        pass
    rep = None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rep = json.loads(line)
            except json.JSONDecodeError:
                pass
    return rep, time.time() - t0, out + err, ru


def wait_tcp(ns, ip, port, limit=15.0):
    """Wait until a TCP listener answers (a connect from `ns` succeeds)."""
    t = time.time()
    code = (f"import socket;s=socket.create_connection(('{ip}',{port}),timeout=0.5);"
            f"s.close()")
    while time.time() - t < limit:
        if subprocess.run(in_ns(ns, sys.executable, "-c", code),
                          capture_output=True).returncode == 0:
            return True
        time.sleep(0.2)
    return False


class Progress:
    def __init__(self, total):
        self.total, self.done, self.t0 = total, 0, time.time()

    def step(self, label):
        self.done += 1
        el = time.time() - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0
        print(f"[{self.done:2d}/{self.total}] {el:5.0f}s (eta {eta:4.0f}s) {label}",
              end="", flush=True)

    def result(self, text):
        print(f"  {text}", flush=True)


# ------------------------------------------------------------------- setups

class Setup:
    """A server (long-running) and how to run a client against it."""

    def __init__(self, key, args):
        self.key, self.args = key, args
        self.server = None
        self.server_cpu0 = None

    def client_cmd(self, n, c, s, duration, warmup):
        raise NotImplementedError

    def before_client(self):
        pass

    def after_client(self):
        pass


def kernel_client(ns, server, n, c, s, duration, warmup, cpu=1):
    return in_ns(ns, *pinned(cpu, str(BIN), "kernel-echo-client", "--server", server,
                            "-c", str(c), "-n", str(n), "-s", str(s),
                            "--duration", str(duration), "--warmup", str(warmup)))


class KernelPair(Setup):
    """The kernel's epoll echo server in `ns_s` on `ip`, clients in `ns_c`."""

    def __init__(self, key, args, ns_s, ns_c, ip):
        super().__init__(key, args)
        self.ns_c, self.ip = ns_c, ip
        self.server = start(in_ns(ns_s, *pinned(0, str(BIN), "kernel-echo-server",
                                                "--addr", f"{ip}:7")),
                            f"/tmp/ixb-{PID}-{key}.log")
        if not wait_tcp(ns_c, ip, 7):
            raise RuntimeError(f"{key}: kernel echo server not reachable")

    def client_cmd(self, n, c, s, duration, warmup):
        return kernel_client(self.ns_c, f"{self.ip}:7", n, c, s, duration, warmup)


def linux_veth(args, ns_s, ns_c):
    a, b = veth(ns_s, ns_c, "k")
    sh(*in_ns(ns_s, "ip", "addr", "add", f"{SERVER_IP}/24", "dev", a))
    sh(*in_ns(ns_c, "ip", "addr", "add", f"{CLIENT_IP}/24", "dev", b))
    return KernelPair("linux_veth", args, ns_s, ns_c, SERVER_IP)


def linux_loopback(args, ns):
    sh(*in_ns(ns, "ip", "addr", "add", f"{LOOP_IP}/32", "dev", "lo"))
    return KernelPair("linux_loopback", args, ns, ns, LOOP_IP)


def ixora_client_args(n, c, s, duration, warmup, poll):
    a = ["--server", None, "-c", str(c), "-n", str(n), "-s", str(s),
         "--duration", str(duration), "--warmup", str(warmup), "--cpus", "1",
         "--local-ports", "1024-65535"]
    if poll:
        a.append("--poll")
    return a


class IxoraXdp(Setup):
    def __init__(self, args, ns_s, ns_c):
        super().__init__("ixora_af_xdp", args)
        self.ns_s, self.ns_c = ns_s, ns_c
        self.a, self.b = veth(ns_s, ns_c, "x")
        cmd = [str(BIN), "echo-server", "--backend", "af_xdp", "--iface", self.a,
               "--ip", f"{SERVER_IP}/24", "--cpus", "0"]
        if args.poll:
            cmd.append("--poll")
        self.server = start(in_ns(ns_s, *cmd), f"/tmp/ixb-{PID}-xserver.log")
        time.sleep(1.0)
        if self.server.poll() is not None:
            raise RuntimeError("ixora echo-server exited: " + Path(self.server._log).read_text())

    def client_cmd(self, n, c, s, duration, warmup):
        a = ixora_client_args(n, c, s, duration, warmup, self.args.poll)
        a[1] = f"{SERVER_IP}:7"
        return in_ns(self.ns_c, str(BIN), "echo-client", "--backend", "af_xdp",
                     "--iface", self.b, "--ip", f"{CLIENT_IP}/24", *a)

    def after_client(self):
        # The kernel refuses to re-bind an AF_XDP queue for about a second.
        time.sleep(1.2)


class IxoraShm(Setup):
    def __init__(self, args):
        super().__init__("ixora_shm", args)
        self.sock = f"/tmp/ixb-{PID}-shm.sock"
        _cleanup.append(lambda: Path(self.sock).unlink(missing_ok=True))

    def before_client(self):
        # The server ends with its peer: one per client run.
        Path(self.sock).unlink(missing_ok=True)
        cmd = [str(BIN), "echo-server", "--backend", "shm", "--shm-role", "listen",
               "--iface", self.sock, "--ip", f"{SHM_SERVER_IP}/24", "--cpus", "0"]
        if self.args.poll:
            cmd.append("--poll")
        self.server = start(cmd, f"/tmp/ixb-{PID}-sserver.log")
        t = time.time()
        while not Path(self.sock).exists() and time.time() - t < 10:
            time.sleep(0.02)
        self.server_cpu0 = cpu_of(self.server.pid)

    def client_cmd(self, n, c, s, duration, warmup):
        a = ixora_client_args(n, c, s, duration, warmup, self.args.poll)
        a[1] = f"{SHM_SERVER_IP}:7"
        return [str(BIN), "echo-client", "--backend", "shm", "--shm-role", "connect",
                "--iface", self.sock, "--ip", f"{SHM_CLIENT_IP}/24", *a]

    def after_client(self):
        if self.server is not None:
            stop_proc(self.server)
            self.server = None


# ---------------------------------------------------------------- measuring

def measure(setup, n, c, s, duration, warmup):
    """One client run; returns a result row."""
    setup.before_client()
    srv = setup.server
    cpu0 = cpu_of(srv.pid) if srv is not None else None
    cmd = setup.client_cmd(n, c, s, duration, warmup)
    rep, wall, output, _ = None, 0.0, "", None
    for attempt in range(3):
        rep, wall, output, _ = run_client(cmd, duration + warmup + 30)
        if rep is not None:
            break
        if "busy" not in output.lower() and "EBUSY" not in output:
            break
        time.sleep(1.5)  # an AF_XDP queue still being released
    cpu1 = cpu_of(srv.pid) if srv is not None else None
    setup.after_client()
    row = {"setup": setup.key, "n": n, "c": c, "s": s, "wall_s": round(wall, 3)}
    if rep is None:
        row["error"] = output.strip().splitlines()[-1] if output.strip() else "no report"
        return row
    row.update({
        "msgs_per_sec": rep["msgs_per_sec"],
        "conns_per_sec": rep.get("conns_per_sec"),
        "rtt_us": rep["rtt_us"],
        "errors": rep["errors"],
        "client_cpu_s": rep.get("cpu_seconds"),
        "server_cpu_s": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 3),
        "measured_s": rep.get("seconds"),
    })
    return row


def measure_median(setup, n, c, s, duration, warmup, repeat):
    """`repeat` runs of one point; the run with the median rate is kept
    (all rates recorded), so one noisy run does not decide a ratio."""
    runs = [measure(setup, n, c, s, duration, warmup) for _ in range(max(1, repeat))]
    ok = sorted((r for r in runs if "msgs_per_sec" in r), key=lambda r: r["msgs_per_sec"])
    if not ok:
        return runs[-1]
    row = dict(ok[len(ok) // 2])
    if len(runs) > 1:
        row["all_msgs_per_sec"] = [r.get("msgs_per_sec") for r in runs]
    return row


def fmt_rate(x):
    if x is None:
        return "—"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3.0,
                    help="measured seconds per throughput point (default 3)")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="unmeasured seconds before each (default 1)")
    ap.add_argument("--latency-duration", type=float, default=3.0,
                    help="measured seconds of each ping-pong run (default 3)")
    ap.add_argument("--no-poll", dest="poll", action="store_false",
                    help="let Ixora sleep when idle instead of polling (default: poll, as IX)")
    ap.add_argument("--setups", default=",".join(SETUPS),
                    help="comma-separated subset of " + ",".join(SETUPS))
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per point; the median is reported (default 1)")
    ap.add_argument("--quick", action="store_true",
                    help="short runs (1 s, 0.3 s warm-up) for a smoke test")
    ap.add_argument("--out", default=str(OUT), help="output directory (default docs/bench)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.latency_duration = 1.0, 0.3, 1.0
    if os.geteuid() != 0:
        sys.exit("bench_echo: needs root (network namespaces, AF_XDP)")
    if not BIN.exists():
        sys.exit(f"bench_echo: {BIN} missing: run `cargo build --release` first")
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench_echo: needs two CPUs (server and client pinned apart)")
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    wanted = [k for k in args.setups.split(",") if k]
    for k in wanted:
        if k not in SETUPS:
            sys.exit(f"bench_echo: unknown setup {k!r}; choose from {', '.join(SETUPS)}")

    plan = [(n, c) for n in (1, 1024) for c in (1, 64, 1024)]
    total = len(wanted) * (len(plan) + 1) + (2 if "linux_veth" in wanted or "ixora_af_xdp" in wanted else 0)
    prog = Progress(total)
    rows, lat, outside = [], {}, {}
    try:
        for key in wanted:
            if key == "linux_veth":
                setup = linux_veth(args, netns("ks"), netns("kc"))
            elif key == "linux_loopback":
                setup = linux_loopback(args, netns("lo"))
            elif key == "ixora_af_xdp":
                setup = IxoraXdp(args, netns("xs"), netns("xc"))
            else:
                setup = IxoraShm(args)
            for n, c in plan:
                prog.step(f"{SETUPS[key]:<42} n={n:<5} c={c:<5}")
                r = measure_median(setup, n, c, 64, args.duration, args.warmup, args.repeat)
                rows.append(r)
                prog.result(f"{fmt_rate(r.get('msgs_per_sec'))} msg/s"
                            + (f"  ERROR {r['error']}" if "error" in r else ""))
            prog.step(f"{SETUPS[key]:<42} ping-pong 64 B")
            r = measure_median(setup, 1_000_000_000, 1, 64, args.latency_duration,
                               args.warmup, args.repeat)
            lat[key] = r
            rt = r.get("rtt_us") or {}
            prog.result(f"p50 {rt.get('p50', 0):.1f} µs  p99 {rt.get('p99', 0):.1f} µs"
                        + (f"  ERROR {r['error']}" if "error" in r else ""))
            if setup.server is not None:
                setup.server_log = stop_proc(setup.server)
            cleanup()
        # From outside: a plain Linux client against each server on veth.
        if "linux_veth" in wanted or "ixora_af_xdp" in wanted:
            for kind in ("kernel", "ixora"):
                ns_s, ns_c = netns("os"), netns("oc")
                a, b = veth(ns_s, ns_c, "o")
                sh(*in_ns(ns_c, "ip", "addr", "add", f"{CLIENT_IP}/24", "dev", b))
                if kind == "kernel":
                    sh(*in_ns(ns_s, "ip", "addr", "add", f"{SERVER_IP}/24", "dev", a))
                    cmd = [str(BIN), "kernel-echo-server", "--addr", f"{SERVER_IP}:7"]
                else:
                    cmd = [str(BIN), "echo-server", "--backend", "af_xdp", "--iface", a,
                           "--ip", f"{SERVER_IP}/24", "--cpus", "0"]
                    if args.poll:
                        cmd.append("--poll")
                srv = start(in_ns(ns_s, *pinned(0, *cmd)), f"/tmp/ixb-{PID}-o{kind}.log")
                ok = wait_tcp(ns_c, SERVER_IP, 7)
                s = Setup(f"outside_{kind}", args)
                s.server = srv
                s.client_cmd = lambda n, c, sz, d, w, ns_c=ns_c: kernel_client(
                    ns_c, f"{SERVER_IP}:7", n, c, sz, d, w)
                prog.step(f"Linux client -> {kind} echo server (veth)       ping-pong 64 B")
                r = measure(s, 1_000_000_000, 1, 64, args.latency_duration, args.warmup) if ok \
                    else {"error": "server not reachable"}
                outside[kind] = r
                rt = r.get("rtt_us") or {}
                prog.result(f"p50 {rt.get('p50', 0):.1f} µs  p99 {rt.get('p99', 0):.1f} µs"
                            + (f"  ERROR {r['error']}" if "error" in r else ""))
                stop_proc(srv)
                cleanup()
    finally:
        cleanup()

    report(args, rows, lat, outside)


def get(rows, setup, n, c):
    for r in rows:
        if r["setup"] == setup and r["n"] == n and r["c"] == c:
            return r.get("msgs_per_sec")
    return None


def ratio(x, y):
    return None if not x or not y else x / y


def report(args, rows, lat, outside):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    p50 = {k: (v.get("rtt_us") or {}).get("p50") for k, v in lat.items()}
    targets = []

    def target(name, value, goal, better="higher"):
        if value is None:
            targets.append({"target": name, "value": None, "goal": goal, "met": None})
            return
        met = value >= goal if better == "higher" else value <= goal
        targets.append({"target": name, "value": round(value, 3), "goal": goal, "met": met})

    target("(b)/(a) msgs/s at n=1024, c=64", ratio(get(rows, "ixora_af_xdp", 1024, 64),
                                                   get(rows, "linux_veth", 1024, 64)), 3.0)
    target("(c)/(d) msgs/s at n=1024, c=64", ratio(get(rows, "ixora_shm", 1024, 64),
                                                   get(rows, "linux_loopback", 1024, 64)), 10.0)
    target("(b)/(a) 64 B RTT p50", ratio(p50.get("ixora_af_xdp"), p50.get("linux_veth")), 0.5,
           better="lower")
    target("(c) 64 B RTT p50, µs", p50.get("ixora_shm"), 2.0, better="lower")
    ko = ratio((outside.get("kernel", {}).get("rtt_us") or {}).get("p50"),
               (outside.get("ixora", {}).get("rtt_us") or {}).get("p50"))

    doc = {
        "command": "make bench  (scripts/bench_echo.py"
                   + (" --no-poll" if not args.poll else "")
                   + f" --duration {args.duration} --warmup {args.warmup}"
                   + f" --repeat {args.repeat})",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "cpu": cpu_model()},
        "ixora_polls": args.poll,
        "message_size": 64,
        "setups": SETUPS,
        "throughput": rows,
        "latency": lat,
        "outside": {**outside, "kernel_over_ixora_p50": ko},
        "targets": targets,
    }
    (out / "echo.json").write_text(json.dumps(doc, indent=2) + "\n")

    md = ["# Echo benchmark: Ixora vs the Linux kernel stack", "",
          f"Command: `{doc['command']}` — {doc['date']}, {doc['machine']['cpus']} CPUs "
          f"({doc['machine']['cpu']}), Linux {doc['machine']['kernel']}. Server pinned to CPU 0, "
          f"client to CPU 1; Ixora {'polls' if args.poll else 'sleeps when idle'}. "
          "A shared, noisy machine: read the ratios, not the absolute numbers.", "",
          "## Messages per second (s = 64 B)", "",
          "| n | c | (a) Linux veth | (b) Ixora AF_XDP | (c) Ixora shm | (d) Linux loopback | (b)/(a) | (c)/(d) |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in (1, 1024):
        for c in (1, 64, 1024):
            a, b, cc, d = (get(rows, k, n, c) for k in SETUPS)
            rba, rcd = ratio(b, a), ratio(cc, d)
            md.append(f"| {n} | {c} | {fmt_rate(a)} | {fmt_rate(b)} | {fmt_rate(cc)} | "
                      f"{fmt_rate(d)} | {'—' if rba is None else f'{rba:.2f}×'} | "
                      f"{'—' if rcd is None else f'{rcd:.2f}×'} |")
    md += ["", "## Round-trip time, one connection, 64 B ping-pong (µs)", "",
           "| setup | p50 | p99 | p99.9 | msgs/s | server CPU s | client CPU s |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for k, v in lat.items():
        rt = v.get("rtt_us") or {}
        md.append(f"| {SETUPS[k]} | {rt.get('p50', 0):.1f} | {rt.get('p99', 0):.1f} | "
                  f"{rt.get('p999', 0):.1f} | {fmt_rate(v.get('msgs_per_sec'))} | "
                  f"{v.get('server_cpu_s') or 0:.2f} | {v.get('client_cpu_s') or 0:.2f} |")
    md += ["", "## From outside: a Linux client (one connection, 64 B, bytes checked) on veth", "",
           "| server | p50 µs | p99 µs | p99.9 µs |", "|---|---:|---:|---:|"]
    for k, name in (("kernel", "kernel epoll echo server"), ("ixora", "Ixora echo server (AF_XDP)")):
        rt = (outside.get(k) or {}).get("rtt_us") or {}
        md.append(f"| {name} | {rt.get('p50', 0):.1f} | {rt.get('p99', 0):.1f} | {rt.get('p999', 0):.1f} |")
    md += ["", f"Kernel / Ixora median RTT: **{'—' if ko is None else f'{ko:.2f}×'}**", "",
           "## CPU (throughput runs)", "",
           "| setup | n | c | server CPU s | client CPU s | measured s |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['setup']} | {r['n']} | {r['c']} | {r.get('server_cpu_s') or 0:.2f} | "
                  f"{r.get('client_cpu_s') or 0:.2f} | {r.get('measured_s') or 0:.1f} |")
    md += ["", "## Targets (issue 3)", "", "| target | goal | measured | met |", "|---|---:|---:|---|"]
    for t in targets:
        op = "≥" if "msgs" in t["target"] else "≤"
        v = "—" if t["value"] is None else f"{t['value']:.2f}"
        md.append(f"| {t['target']} | {op} {t['goal']} | {v} | "
                  f"{'—' if t['met'] is None else ('yes' if t['met'] else '**no**')} |")
    errs = [r for r in rows if "error" in r or r.get("errors")]
    if errs:
        md += ["", "Errors: " + "; ".join(f"{r['setup']} n={r['n']} c={r['c']}: "
                                          f"{r.get('error') or str(r.get('errors')) + ' errors'}"
                                          for r in errs)]
    md += ["", "Plots: `echo.png` (messages per second), `echo_latency.png` (RTT).", ""]
    (out / "echo.md").write_text("\n".join(md))
    plots(out, rows, lat, outside)
    print("\n".join(md[-(len(targets) + 3):]))
    print(f"\nwrote {out}/echo.json, echo.md, echo.png, echo_latency.png")


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def plots(out, rows, lat, outside):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots", file=sys.stderr)
        return
    groups = [(n, c) for n in (1, 1024) for c in (1, 64, 1024)]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    w = 0.2
    for i, k in enumerate(SETUPS):
        vals = [get(rows, k, n, c) or 0 for n, c in groups]
        ax.bar([g + (i - 1.5) * w for g in range(len(groups))], vals, w, label=SETUPS[k])
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"n={n}\nc={c}" for n, c in groups])
    ax.set_yscale("log")
    ax.set_ylabel("messages / s (64 B, log)")
    ax.set_title("Echo: Ixora vs Linux (same machine, same cores)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "echo.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4.5))
    entries = [(SETUPS[k], v) for k, v in lat.items()]
    entries += [(f"Linux client -> {k} server", v) for k, v in outside.items()
                if isinstance(v, dict) and k in ("kernel", "ixora")]
    qs = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"))
    for j, (q, name) in enumerate(qs):
        vals = [((v.get("rtt_us") or {}).get(q) or 0) for _, v in entries]
        ax.bar([i + (j - 1) * 0.25 for i in range(len(entries))], vals, 0.25, label=name)
    ax.set_xticks(range(len(entries)))
    ax.set_xticklabels([e[0].replace(", ", "\n", 1) for e in entries], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("round-trip time, µs (log)")
    ax.set_title("64 B ping-pong, one connection")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "echo_latency.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
