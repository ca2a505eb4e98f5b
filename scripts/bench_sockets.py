#!/usr/bin/python3
"""Sockets benchmark of issue 4: the same unmodified server binary, the
same cores, the same client — on the Linux kernel stack, and under
`ixora run` on Ixora's socket service (af_xdp on a veth pair).

  * nginx (1 worker) and lighttpd serving a 20 B file to two clients,
    `ixora loadgen http` (its TCP in user space) and wrk (the kernel's):
    keep-alive, and 10 requests per connection: requests/s and server CPU
    seconds per request (CPU 0 busy time from /proc/stat: the server, its
    system calls, its softirqs and, for Ixora, the service);
  * memcached (-t 1), ETC and USR workloads from `ixora loadgen memcached`
    (open loop, Poisson, 4-deep pipelines; the generator runs on Ixora's
    native API in the client namespace for both servers): average and p99
    latency against achieved rate, and the highest rate with p99 <= 500 us;
  * the share of socket calls the shim resolved in user space at each load
    (`ixora stats`);
  * bulk transfer: iperf3 (a dual-stack program, its listener an AF_INET6
    socket on `::`) with the Linux iperf3 client, one stream each way:
    Gbit/s and server CPU seconds per GB (written to sockets-bulk.*);
  * relaying (`--only relay`): HAProxy in TCP mode between the iperf3
    client and an iperf3 server on the client's side, by splice and by
    copy (sockets-relay.*);
  * two programs on one host: redis-benchmark to redis-server, the
    kernel's loopback against one Ixora service (sockets-local.*);
  * UDP: sockperf's server (one socket, blocking recvfrom/sendto) with the
    Linux sockperf client, ping-pong (64-byte messages, and 8000-byte ones
    that travel in IPv4 fragments both ways) and under-load at fixed rates:
    round trips, drops and server CPU per message (sockets-udp.*);
  * NTP (`--only ntp`): chronyd as a server, measured by a client
    chronyd: the NTP delay, which receive timestamps make (sockets-ntp.*);
  * one program's burst (`--only burst`): sockperf's TCP ping-pong to a
    server beside a program writing 64 kB to each of 400 connections
    every 100 ms: the tail of the round trips (sockets-burst.*);
  * an impaired path (`--only path`): iperf3 each way through `ixora
    impair` in a namespace between client and server (500 Mbit/s, 0.5 ms
    each way, 256 KiB queue) clean, at 1% loss, with 2% of frames held up
    to 5 ms, and both; both stacks CUBIC, the kernel also with the
    host's default for reference (sockets-path.*).

Server side pinned to CPU 0 (with Ixora: the service and the program),
client to CPU 1. Both stacks are set up side by side (each in its own
pair of namespaces) and, at every point, the kernel run and the Ixora run
alternate `--repeat` times, so that the machine's drift hits both.
Receive work is put on each veth end's own side's CPU, as a NIC's
interrupts would (`--rx softirq`, the default: RPS, and generic XDP for
Ixora and the generators); `--rx napi`, `--rx rps`, `--rx sender` and
`--rx client-native` place it the other ways and write sockets-napi.*,
sockets-rps.*, sockets-no-rps.*, sockets-client-native.*.
Results: docs/bench/sockets.{json,md,png} and sockets-bulk.{json,md,png}.
Reproduce with `make bench-sockets` (or `scripts/bench_sockets.py --help`).

Test-network rules: namespaces and links carry this process's PID, use
198.18.0.0/15 only, and are removed on exit (also on failure or Ctrl-C);
every process started is bounded in time and ended by its PID.
"""

import argparse
import contextlib
import ctypes
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_echo as be  # noqa: E402  (shared namespace/process helpers)

ROOT = be.ROOT
BIN = be.BIN
OUT = be.OUT
PID = be.PID
SRV = "198.18.80.2"
CLI = "198.18.80.1"
GEN = "198.18.80.3"  # the loadgen's own address (it owns the client veth)
SPIN_US = 50  # `ixora run --spin-us` (set by --spin-us)
SERVICE_CPU = 0  # where `ixora serve` runs
SERVE_EXTRA = []  # more `ixora serve` options (e.g. --poll)
LISTEN_ANY = False  # web servers listen on any address (see --listen-any)
STALLS = None  # cpu_stalls() measured at the start
SLOWDOWNS = None  # cpu_slowdowns() measured at the start
IPI = None  # ipi_cost() measured at the start
RX = "softirq"  # where each veth end's receive processing runs (see --rx)
WEB_CONNS = 128  # connections of the web clients (--web-conns)
IDLE_CONNS = 0  # idle keep-alive connections held open during each web run (--idle-conns)
# `--only path`: the server's and the client's namespaces are joined through
# a third, where `ixora impair` bridges the two veth pairs and impairs the
# path (netem's job; this kernel has no netem). PATH_BASE is every
# condition's link (one-way delay, rate and its 256 KiB drop-tail queue:
# `--path-delay-us`, `--path-rate-mbps`); each condition adds its own.
PATH = False
PATH_BASE = ["--delay-us", "500", "--rate-mbps", "500"]
PATH_RING = 1 << 20  # Ixora's socket rings over the path (unless --ring)
# Each: a label, `ixora impair`'s options, and sysctls set in the
# client's namespace for it (the Linux client's TCP, both stacks' runs).
PATH_CONDITIONS = (
    ("clean", [], {}),
    ("loss 1%", ["--loss", "0.01"], {}),
    ("reorder 2% ≤5 ms", ["--reorder", "0.02", "--reorder-delay-us", "5000"], {}),
    ("loss 1%, reorder 2% ≤5 ms",
     ["--loss", "0.01", "--reorder", "0.02", "--reorder-delay-us", "5000"], {}),
    # Stalls longer than the 200 ms minimum RTO: every sender times out
    # needlessly, and what it does then is what this row compares.
    ("stalls of 300 ms, ~2 s apart", ["--stall-every-ms", "2000", "--stall-ms", "300"], {}),
    # The same with a client that does not agree timestamps (Windows'
    # default): a needless timeout is then found by F-RTO (RFC 5682).
    ("stalls, no timestamps", ["--stall-every-ms", "2000", "--stall-ms", "300"],
     {"net.ipv4.tcp_timestamps": "0"}),
)


def xdp_args(side="server"):
    """AF_XDP attach mode for Ixora's service (`side` "server") and the
    load generators ("client"): in `softirq` mode generic (skb) XDP, which
    runs after RPS on the receiving CPU; in `client-native` mode so for the
    service, native for the generators; otherwise the default (native on
    veth)."""
    skb = RX == "softirq" or (RX == "client-native" and side == "server")
    return ["--xdp-mode", "skb"] if skb else []
# Web servers the web tables and plots know, in their order (node and
# node-cluster and node-cluster-none run with `--only node`; the nginx
# reverse proxies with `--only proxy`).
WEB_SERVERS = ("nginx", "lighttpd", "apache", "node", "node-cluster", "node-cluster-none",
               "nginx-proxy", "nginx-proxy-keepalive", "varnish")
# The port of the proxies' backend: a kernel nginx in the client namespace.
BACKEND_PORT = 8081
# A Node.js server of the 20 B file: argv[2] workers (0: one process; else
# a cluster whose primary hands each connection to a worker), argv[3] the
# file, argv[4] the address, argv[5] the port.
NODE_JS = r"""
const cluster = require('cluster'), http = require('http'), fs = require('fs');
const workers = +process.argv[2], body = fs.readFileSync(process.argv[3]);
if (workers > 0 && cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
} else {
  http.createServer((q, s) => { s.setHeader('Content-Type', 'text/plain'); s.end(body); })
    .listen(+process.argv[5], process.argv[4]);
}
"""
NAME = "sockets"  # output basename (another for the service placement experiments)
CLIENTS = ("loadgen", "wrk")  # web clients (--clients)
SERVERS = ("nginx", "lighttpd")  # web servers of the web part (--servers)
TMP = "/tmp"  # this run's scratch directory (the wrk script)


def cpu_busy(cpu=0):
    """CPU `cpu`'s busy seconds so far (everything but idle and iowait)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            v = [int(x) for x in line.split()[1:]]
            return (sum(v) - v[3] - v[4]) / be.CLK_TCK
    return 0.0


def cpu0_busy():
    return cpu_busy(0)


class Net:
    """Two namespaces joined by a veth pair; the server side is either the
    kernel's (address on the interface) or Ixora's (the service owns it)."""

    def __init__(self, ixora):
        self.ixora = ixora
        # Both stacks may be up at once (memcached): names differ by stack.
        t = "i" if ixora else "k"
        self.sv = be.netns(f"sks{t}")
        self.cl = be.netns(f"skc{t}")
        self.relay = None
        if PATH:
            # server | a — ra | relay | rb — b | client: `ixora impair`
            # bridges ra and rb (and completes the checksums the ends
            # leave to offload, as a NIC would).
            self.rl = be.netns(f"skr{t}")
            self.a, ra = be.veth(self.sv, self.rl, f"s{t}")
            rb, self.b = be.veth(self.rl, self.cl, f"r{t}")
            self.relay_ends = (ra, rb)  # bridged per run by `impair`
        else:
            self.a, self.b = be.veth(self.sv, self.cl, f"s{t}")
        for ns, dev in ((self.sv, self.a), (self.cl, self.b)):
            be.sh(*be.in_ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off"), check=False)
        if RX == "napi":
            # Each end receives in a NAPI thread of its own (threaded NAPI;
            # a veth has NAPI once GRO is on), pinned to its side's CPU: the
            # whole receive path — XDP and the AF_XDP copy included, or the
            # kernel's TCP receive — runs on the receiver's CPU, as a NIC's
            # interrupt and poll would.
            for ns, dev in ((self.sv, self.a), (self.cl, self.b)):
                be.sh(*be.in_ns(ns, "ethtool", "-K", dev, "gro", "on"))
                be.sh("ip", "netns", "exec", ns, "sh", "-c",
                      f"echo 1 > /sys/class/net/{dev}/threaded")
            self.pin_napi()
        if RX in ("rps", "softirq", "client-native"):
            # Each side's receive on its own CPU (RPS), as with a NIC whose
            # interrupts go to that side's core (a veth receives on the
            # sender's CPU: without this the kernel server's TCP receive
            # runs on the client's CPU, and the client's on the server's).
            # In `softirq` mode Ixora and the load generators attach XDP in
            # skb (generic) mode, which runs after RPS, in the receiving
            # CPU's softirq; in `rps` mode native XDP runs before RPS, on
            # the sending CPU.
            be.rps(self.sv, self.a, 0)
            be.rps(self.cl, self.b, 1)
        self.serve = None
        self.sock = f"/tmp/ixb-{PID}-svc.sock"
        if ixora:
            self.serve = be.start(
                be.pinned(SERVICE_CPU, *be.in_ns(self.sv, str(BIN), "serve", "--iface", self.a,
                                       "--ip", f"{SRV}/24", "--socket", self.sock, *xdp_args(),
                                       *SERVE_EXTRA)),
                f"/tmp/ixb-{PID}-serve.log")
            t = time.time()
            while not Path(self.sock).exists():
                if self.serve.poll() is not None or time.time() - t > 10:
                    raise RuntimeError("ixora serve did not start:\n" + be.stop_proc(self.serve))
                time.sleep(0.05)
        else:
            be.sh(*be.in_ns(self.sv, "ip", "addr", "add", f"{SRV}/24", "dev", self.a))

    def pin_napi(self):
        """Pin each end's NAPI threads to its side's CPU (server end: CPU
        0, client end: CPU 1). Done again before every measurement: a
        thread made anew (an XDP program attached) must not float."""
        if RX != "napi":
            return
        for dev, cpu in ((self.a, 0), (self.b, 1)):
            want = f"napi/{dev}"[:15]
            found = 0
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    comm = (d / "comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith(want) or comm.startswith(f"napi/{dev}-"):
                    be.sh("taskset", "-pc", str(cpu), d.name)
                    found += 1
            if not found:
                raise RuntimeError(f"no NAPI thread for {dev}: threaded NAPI did not take")

    def impair(self, opts, secs):
        """(Re)start the path's bridge (`ixora impair` on CPU 1, with the
        client) with options `opts`, for at most `secs` seconds."""
        self.impair_stop()
        log = f"/tmp/ixb-{PID}-impair-{'i' if self.ixora else 'k'}.log"
        self.relay = be.start(be.pinned(1, *be.in_ns(
            self.rl, str(BIN), "impair", *self.relay_ends, "--json", "--duration-s", str(secs),
            *opts)), log)
        t = time.time()
        while "joining" not in Path(log).read_text():
            if self.relay.poll() is not None or time.time() - t > 10:
                raise RuntimeError("ixora impair did not start:\n" + be.stop_proc(self.relay))
            time.sleep(0.02)

    def impair_stop(self, check=True):
        """Stop the path's bridge; its report (what it did to each
        direction), or None."""
        if self.relay is None:
            return None
        rc = self.relay.poll()
        text, self.relay = be.stop_proc(self.relay), None
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        if check:
            raise RuntimeError(f"ixora impair (exit status {rc} before it was stopped) printed "
                               "no report:\n" + text[-2000:])
        return None

    def client_addr(self):
        be.sh(*be.in_ns(self.cl, "ip", "addr", "add", f"{CLI}/24", "dev", self.b))

    def server(self, argv, log):
        cmd = list(argv)
        if self.ixora:
            cmd = [str(BIN), "run", "--socket", self.sock, "--spin-us", str(SPIN_US), "--", *cmd]
        return be.start(be.pinned(0, *be.in_ns(self.sv, *cmd)), log)

    def stats(self):
        if not self.ixora:
            return None
        r = subprocess.run([str(BIN), "stats", "--json", "--socket", self.sock],
                           capture_output=True, text=True)
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError:
            return None

    def close(self):
        self.impair_stop(check=False)
        if self.serve is not None:
            be.stop_proc(self.serve)
            self.serve = None
        be.cleanup()
        Path(self.sock).unlink(missing_ok=True)


def user_calls(st):
    """(user, kernel) socket calls summed over the apps of a stats object."""
    if not st:
        return (0, 0)
    return (sum(a["user_calls"] for a in st["apps"]), sum(a["kernel_calls"] for a in st["apps"]))


def waits(st):
    """Times the apps' threads slept in the kernel (blocking calls)."""
    return sum(a.get("waits", {}).get("slept", 0) for a in st["apps"])


def call_deltas(before, after):
    """Per call type, the (user, kernel) calls made between two stats
    objects, summed over the apps; and the waits (spun, slept, doorbells)."""
    out = {}
    if not (before and after):
        return out
    for key in ("calls", "waits"):
        b, a = {}, {}
        for st, d in ((before, b), (after, a)):
            for app in st["apps"]:
                for name, v in app.get(key, {}).items():
                    if isinstance(v, dict):
                        u, k = d.get(name, (0, 0))
                        d[name] = (u + v["user"], k + v["kernel"])
                    else:
                        d[name] = d.get(name, 0) + v
        for name, v in a.items():
            w = b.get(name, (0, 0) if isinstance(v, tuple) else 0)
            if isinstance(v, tuple):
                du, dk = v[0] - w[0], v[1] - w[1]
                if du or dk:
                    out.setdefault(key, {})[name] = {"user": du, "kernel": dk}
            elif v - w:
                out.setdefault(key, {})[name] = v - w
    return out


def share(before, after):
    u = after[0] - before[0]
    k = after[1] - before[1]
    return u / (u + k) if u + k else None


LUA_10 = """
local n = 0
request = function()
  n = n + 1
  if n % 10 == 0 then
    return wrk.format("GET", "/f20", {["Connection"] = "close"})
  end
  return wrk.format("GET", "/f20")
end
"""


# Opens argv[1] connections to argv[2]:argv[3], each with one request
# answered (so each is a kept-alive connection the server has served), says
# "held N", then holds them until it is stopped (at most argv[4] s).
IDLE_HOLDER = r"""
import resource, socket, sys, time
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
n, host, port, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
req = b"GET /f20 HTTP/1.1\r\nHost: ixora\r\n\r\n"
held = []
for i in range(n):
    c = socket.create_connection((host, port), timeout=10)
    c.sendall(req)
    if not c.recv(4096).startswith(b"HTTP/1.1 200"):
        sys.exit(f"connection {i}: no 200 reply")
    held.append(c)
print("held", len(held), flush=True)
time.sleep(limit)
"""


@contextlib.contextmanager
def idle_conns(net, port, secs):
    """IDLE_CONNS keep-alive connections from the client namespace of
    `net` to the server's `port`, each served once, held open (on CPU 1)
    for the block; closed after it. The server must keep them (their
    timeout above the run's length)."""
    if not IDLE_CONNS:
        yield
        return
    p = subprocess.Popen(be.pinned(1, *be.in_ns(net.cl, sys.executable, "-c", IDLE_HOLDER,
                                                str(IDLE_CONNS), SRV, str(port),
                                                str(secs + 120))),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        if line != f"held {IDLE_CONNS}":
            p.kill()
            raise RuntimeError(f"idle connections not held ({line!r}): {p.stderr.read()[-2000:]}")
        yield
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def client_run(net, cmd, secs):
    """Run the client command `cmd` on CPU 1 in the client namespace of
    `net` (bounded by `secs` + 60 s): its result, CPU 0's busy seconds
    meanwhile (the server side), and how busy CPU 1 was (0..1)."""
    c0, k0 = cpu_busy(0), cpu_busy(1)
    t0 = time.time()
    r = subprocess.run(be.pinned(1, *be.in_ns(net.cl, *cmd)), capture_output=True, text=True,
                       timeout=secs + 60)
    wall = time.time() - t0
    c1, k1 = cpu_busy(0), cpu_busy(1)
    return r, c1 - c0, ((k1 - k0) / wall if wall else None)


@contextlib.contextmanager
def side_by_side(name, argv_of, port=None, client_addr=False):
    """Both stacks up side by side (each its own namespaces, Ixora's with
    its service), each running the server `argv_of(ixora)`; yields
    `{ixora: Net}`. With a `port`, the client namespace gets a kernel
    address and the server must answer there; without, the client
    interface is left to a load generator on AF_XDP (no kernel address to
    probe from). The servers are stopped, then the services and
    namespaces, however the block ends."""
    nets, procs = {}, []
    try:
        for ixora in (False, True):
            net = nets[ixora] = Net(ixora)
            if port is not None or client_addr:
                net.client_addr()
            p = net.server(argv_of(ixora), f"/tmp/ixb-{PID}-{name}-{ixora}.log")
            procs.append(p)
            if port is not None and not be.wait_tcp(net.cl, SRV, port):
                raise RuntimeError(f"{name} did not start:\n" + be.stop_proc(p))
        if port is None:
            time.sleep(0.5)
        yield nets
    finally:
        for p in procs:  # the programs before the service they use
            be.stop_proc(p)
        for ixora in (True, False):
            if ixora in nets:
                nets[ixora].close()


def alternate(repeat, run, key, stacks=(False, True)):
    """`run(ixora)` `repeat` times per stack of `stacks`, kernel and Ixora
    alternating (so the machine's drift hits both); per stack, the run of
    median `key(run)`, with every run's `key` as `all`."""
    rs = {ixora: [] for ixora in stacks}
    for _ in range(repeat):
        for ixora in stacks:
            rs[ixora].append(run(ixora))
    out = {}
    for ixora in stacks:
        runs = sorted(rs[ixora], key=key)
        out[ixora] = dict(runs[len(runs) // 2], stack="ixora" if ixora else "kernel",
                          all=[key(x) for x in rs[ixora]])
    return out


def keep(best, results, all_key, line, **extra):
    """The runs `alternate` kept (the kernel's, then Ixora's) into
    `results`, each with `extra` and every run's key as `all_key`;
    `line(r)` is what is printed for each."""
    for ixora in (False, True):
        r = best[ixora]
        r.update(extra, **{all_key: r.pop("all")})
        results.append(r)
        print(line(r), flush=True)


def meta_of(args, cmdline, **extra):
    """What a results file says about its run."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(), "kernel": platform.release(), "command": cmdline,
            "cpu_stalls": STALLS, "cpu_slowdowns": SLOWDOWNS, "ipi": IPI, "repeat": args.repeat, "rx": RX, **extra}


def web_run(net, port, secs, per_conn, client):
    """One measurement of the web server of `net` by `client`: wrk (the
    kernel's TCP in the client), or `ixora loadgen http` (the client's TCP
    in user space, so the client saturates later). WEB_CONNS connections; keep-
    alive, or `per_conn` requests per connection."""
    net.pin_napi()
    if client == "wrk":
        cmd = ["wrk", "-t", "1", "-c", str(WEB_CONNS), "-d", f"{secs}s"]
        if per_conn:
            cmd += ["-s", str(Path(TMP) / "ten.lua")]
        cmd.append(f"http://{SRV}:{port}/f20")
        warm = 0
    else:
        cmd = [str(BIN), "loadgen", "http", "--iface", net.b, "--ip", f"{GEN}/24",
               "--server", f"{SRV}:{port}", "--path", "/f20", "-c", str(WEB_CONNS),
               "--per-conn", str(per_conn), "--duration", str(secs), "--warmup", "1",
               "--body-len", "20", "--cpus", "1", *xdp_args("client")]
        warm = 1
    with idle_conns(net, port, secs):
        full0 = net.stats()
        st0 = user_calls(full0)
        r, cpu, client_busy = client_run(net, cmd, secs)
        full1 = net.stats()
    st1 = user_calls(full1)
    rps, reqs, errors, lat = 0.0, 0, 0, None
    if client == "wrk":
        for line in r.stdout.splitlines():
            line = line.strip()
            if line.startswith("Requests/sec:"):
                rps = float(line.split()[1])
            elif "requests in" in line:
                reqs = int(line.split()[0])
            elif line.startswith("Socket errors:"):
                errors += sum(int(x.split()[-1]) for x in line.split(":", 1)[1].split(","))
            elif line.startswith("Non-2xx"):
                errors += int(line.split()[-1])
    else:
        q = next((json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")), None)
        if q is None:
            raise RuntimeError(f"loadgen http produced nothing:\n{r.stderr[-3000:]}")
        rps, reqs, errors, lat = q["rps"], q["requests"], q["errors"], q["latency_us"]
        time.sleep(1.2)  # AF_XDP: a queue is busy for ~1 s after its socket closes
    # Requests over the whole run (a loadgen's warm-up included) for the
    # CPU per request.
    done = rps * (secs + warm)
    return {"client": client, "rps": rps, "requests": reqs, "errors": errors,
            "server_cpu_s": cpu, "cpu_us_per_req": cpu / done * 1e6 if done else None,
            "client_cpu_busy": client_busy, "latency_us": lat,
            "user_share": share(st0, st1) if net.ixora else None,
            "calls": call_deltas(full0, full1) if net.ixora else None}


def web(args, prog, www, tmp, prog_bar, results):
    """`prog` on both stacks side by side; for each client and mode the
    kernel run and the Ixora run alternate `--repeat` times, the run of
    median requests/s kept."""
    port = 8080

    def argv_of(ixora):
        if prog.startswith("nginx-proxy"):
            # A reverse proxy to the backend (the client's namespace, the
            # kernel's TCP): each request crosses the proxy's stack twice,
            # and without upstream keep-alive every request opens an
            # upstream connection from the proxy.
            ka = prog.endswith("keepalive")
            conf = tmp / f"{prog}-{ixora}.conf"
            conf.write_text(
                "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                f"error_log {tmp}/{prog}-error-{ixora}.log;\npid {tmp}/{prog}-{ixora}.pid;\n"
                "events { worker_connections 4096; }\n"
                f"http {{ access_log off; upstream be {{ server {CLI}:{BACKEND_PORT};"
                + (" keepalive 32;" if ka else "") + " }\n"
                f"server {{ listen {SRV}:{port}; location / {{ proxy_pass http://be;"
                + (' proxy_http_version 1.1; proxy_set_header Connection "";' if ka else "")
                + " } } }\n")
            return ["nginx", "-c", str(conf)]
        if prog == "nginx":
            conf = tmp / f"nginx-{ixora}.conf"
            conf.write_text(
                "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                f"error_log {tmp}/nginx-error-{ixora}.log;\npid {tmp}/nginx-{ixora}.pid;\n"
                + (f"worker_rlimit_nofile {2 * IDLE_CONNS + 8192};\n" if IDLE_CONNS else "")
                + f"events {{ worker_connections {IDLE_CONNS + 4096}; }}\n"
                f"http {{ access_log off; server {{ listen {'' if LISTEN_ANY else SRV + ':'}{port}; "
                f"root {www}; }} }}\n")
            return ["nginx", "-c", str(conf)]
        if prog.startswith("node"):
            js = tmp / "srv.js"
            js.write_text(NODE_JS)
            # node-cluster-none: the cluster's other scheduling (SCHED_NONE),
            # where each worker listens on the primary's bound socket.
            sched = "none" if prog == "node-cluster-none" else "rr"
            return ["env", f"NODE_CLUSTER_SCHED_POLICY={sched}", "node", str(js),
                    "0" if prog == "node" else "2", str(www / "f20"),
                    "0.0.0.0" if LISTEN_ANY else SRV, str(port)]
        if prog == "varnish":
            # Varnish with its defaults (two pools of worker threads, a
            # thread per connection being served), the backend on the
            # client's side: the 20 B file is fetched once, then served
            # from the cache. The cache process runs as user vcache.
            os.chmod(tmp, 0o755)
            return ["varnishd", "-F", "-a", f"{SRV}:{port}", "-b", f"{CLI}:{BACKEND_PORT}",
                    "-n", str(tmp / f"varnish-{ixora}"), "-s", "malloc,64m"]
        if prog == "apache":
            # Apache's event MPM, one process (as nginx's one worker): its
            # listener thread waits on the connections, a pool of worker
            # threads serves them and hands each kept-alive one back to
            # the listener's epoll set. Children run as www-data. More
            # threads than connections: with fewer, the MPM closes
            # kept-alive connections between requests.
            os.chmod(tmp, 0o755)
            mods = "/usr/lib/apache2/modules"
            conf = tmp / f"apache-{ixora}.conf"
            conf.write_text(
                f"ServerRoot /etc/apache2\nDefaultRuntimeDir {tmp}\n"
                f"LoadModule mpm_event_module {mods}/mod_mpm_event.so\n"
                f"LoadModule authz_core_module {mods}/mod_authz_core.so\n"
                f"LoadModule mime_module {mods}/mod_mime.so\nTypesConfig /etc/mime.types\n"
                f"Listen {'' if LISTEN_ANY else SRV + ':'}{port}\nServerName ixora\n"
                f"PidFile {tmp}/apache-{ixora}.pid\nErrorLog {tmp}/apache-error-{ixora}.log\n"
                f"Mutex file:{tmp} default\nUser www-data\nGroup www-data\n"
                "ThreadLimit 160\nStartServers 1\nServerLimit 1\nThreadsPerChild 160\n"
                "MaxRequestWorkers 160\n"
                "MinSpareThreads 1\nMaxSpareThreads 160\nMaxKeepAliveRequests 0\n"
                f"DocumentRoot {www}\n<Directory {www}>\nRequire all granted\n</Directory>\n")
            return ["apache2", "-f", str(conf), "-DFOREGROUND"]
        conf = tmp / f"lighttpd-{ixora}.conf"
        conf.write_text(
            f'server.document-root = "{www}"\nserver.port = {port}\n'
            + ('' if LISTEN_ANY else f'server.bind = "{SRV}"\n')
            + f'server.errorlog = "{tmp}/lighttpd-{ixora}.log"\n'
            f'server.max-connections = {IDLE_CONNS + 4096}\n'
            # Idle connections outlive the run (lighttpd's default: 5 s).
            + (f'server.max-fds = {2 * IDLE_CONNS + 8192}\n'
               'server.max-keep-alive-idle = 600\n' if IDLE_CONNS else ''))
        return ["lighttpd", "-D", "-f", str(conf)]

    # A proxy's backend listens on the client's kernel address, which the
    # load generator's XDP program would take for itself: wrk only.
    clients = [c for c in CLIENTS if c == "wrk"] if has_backend(prog) else CLIENTS
    with side_by_side(prog, argv_of, port) as nets, backends(prog, nets, www, tmp):
        for client in clients:
            for mode, per_conn in (("keepalive", 0), ("10_per_conn", 10)):
                best = alternate(args.repeat, lambda ixora: web_run(
                    nets[ixora], port, args.duration, per_conn, client), lambda r: r["rps"])
                prog_bar.step(f"{prog} {mode} ({client})\n")
                keep(best, results, "all_rps", lambda r: (
                    f"  {prog:9s} {mode:12s} {client:8s} {r['stack']:7s}"
                    f"{r['rps'] / 1000:7.1f} k req/s  {r['cpu_us_per_req'] or 0:6.1f} us CPU/req"
                    f"  client CPU {100 * (r['client_cpu_busy'] or 0):3.0f}%"
                    + (f"  user {r['user_share'] * 100:5.1f}%" if r["user_share"] is not None
                       else "")
                    + (f"  ERRORS {r['errors']}" if r["errors"] else "")), server=prog, mode=mode)


@contextlib.contextmanager
def client_side(nets, what, argv_of, port):
    """`argv_of(ixora)` (a kernel program: `what`) in each net's client
    namespace, on CPU 1 with the client, listening at CLI:`port`; stopped
    when the block ends."""
    procs = []
    try:
        for ixora, net in nets.items():
            p = be.start(be.pinned(1, *be.in_ns(net.cl, *argv_of(ixora))),
                         f"/tmp/ixb-{PID}-client-side-{ixora}.log")
            procs.append(p)
            if not be.wait_tcp(net.cl, CLI, port):
                raise RuntimeError(f"{what} did not start:\n" + be.stop_proc(p))
        yield
    finally:
        for p in procs:
            be.stop_proc(p)


def has_backend(prog):
    """Whether web server `prog` is a reverse proxy or cache in front of a
    backend (on the client's side, at CLI:BACKEND_PORT)."""
    return prog.startswith("nginx-proxy") or prog == "varnish"


def backends(prog, nets, www, tmp):
    """For a reverse proxy or cache `prog`: the backend it proxies to in
    each net's client namespace (a kernel nginx on CPU 1, with the
    client), stopped when the block ends; nothing for another server."""
    if not has_backend(prog):
        return contextlib.nullcontext()

    def argv_of(ixora):
        conf = tmp / f"backend-{ixora}.conf"
        conf.write_text(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n"
            f"error_log {tmp}/backend-error-{ixora}.log;\npid {tmp}/backend-{ixora}.pid;\n"
            "events { worker_connections 4096; }\n"
            f"http {{ access_log off; server {{ listen {CLI}:{BACKEND_PORT}; "
            f"root {www}; }} }}\n")
        return ["nginx", "-c", str(conf)]
    return client_side(nets, "the backend nginx", argv_of, BACKEND_PORT)


def iperf3_report(r, net):
    """The JSON report of iperf3 run `r` against `net`'s server; raises
    with what it printed when there is none or it is an error."""
    try:
        j = json.loads(r.stdout)
        if "error" not in j:
            j["end"]["sum_received"]["bytes"]
            return j
    except (json.JSONDecodeError, KeyError):
        pass
    raise RuntimeError(f"iperf3 ({'ixora' if net.ixora else 'kernel'}) printed no report:\n"
                       f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def bulk_run(net, port, secs, reverse, cc=None):
    """One iperf3 test (one TCP stream, `secs` seconds) from the Linux
    client against the iperf3 server of `net`; `reverse`: the server
    sends; `cc`: both ends' congestion control (iperf3 -C; Ixora's is
    CUBIC whatever is asked). Returns Gbit/s received, and CPU 0's busy
    seconds per GB."""
    cmd = ["iperf3", "-c", SRV, "-p", str(port), "-t", str(secs), "--json"]
    if reverse:
        cmd.append("-R")
    if cc:
        cmd += ["-C", cc]
    r, cpu, client_busy = client_run(net, cmd, secs)
    j = iperf3_report(r, net)
    got = j["end"]["sum_received"]["bytes"]
    sent = j["end"]["sum_sent"]["bytes"]
    gbps = j["end"]["sum_received"]["bits_per_second"] / 1e9
    return {"direction": "from_server" if reverse else "to_server", "gbps": gbps,
            "bytes": got, "sent_bytes": sent, "retransmits": j["end"]["sum_sent"].get("retransmits"),
            "server_cpu_s": cpu, "cpu_s_per_gb": cpu / (got / 1e9) if got else None,
            "client_cpu_busy": client_busy}


def bulk(args, prog_bar):
    """iperf3 (a dual-stack program: its listener is an AF_INET6 socket on
    `::`) on both stacks side by side, one TCP stream each way; kernel
    and Ixora runs alternate `--repeat` times, the run of median Gbit/s
    kept."""
    results, port = [], 5201
    with side_by_side("iperf3", lambda _: ["iperf3", "-s", "-p", str(port)], port) as nets:
        streams(args, prog_bar, nets, port, "iperf3", results, server="iperf3")
    return results


def streams(args, prog_bar, nets, port, label, results, **extra):
    """One iperf3 stream each way between the Linux client and `port` of
    each net's server side (kernel and Ixora runs alternating `--repeat`
    times, the run of median Gbit/s kept), into `results` with `extra`."""
    for reverse in (False, True):
        best = alternate(args.repeat, lambda ixora: bulk_run(
            nets[ixora], port, args.duration, reverse), lambda r: r["gbps"])
        prog_bar.step(f"{label.strip()} {'from' if reverse else 'to'} the server\n")
        keep(best, results, "all_gbps", lambda r: (
            f"  {label} {r['direction']:12s} {r['stack']:7s}"
            f"{r['gbps']:6.2f} Gbit/s  {r['cpu_s_per_gb'] or 0:5.2f} CPU s/GB"
            f"  client CPU {100 * (r['client_cpu_busy'] or 0):3.0f}%"), **extra)


def path(args, prog_bar):
    """iperf3 on both stacks side by side over an impaired path (see
    PATH): per condition of PATH_CONDITIONS, one TCP stream each way,
    kernel and Ixora runs alternating `--repeat` times, the run of median
    Gbit/s kept, each with what the bridge did to it."""
    results, ports = [], iter(range(5201, 6201))
    default_cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    line = (lambda r: f"  {r['condition']:26s} {r['direction']:12s} {r['stack']:7s}"
            f"{1000 * r['gbps']:7.1f} Mbit/s  {r['retransmits'] or 0:6d} retransmitted")
    nets = {}
    try:
        for ixora in (False, True):
            nets[ixora] = Net(ixora)
            nets[ixora].client_addr()
        for label, opts, sysctls in PATH_CONDITIONS:
            # (Set back after the condition.)
            before = [(net.cl, k, be.sh(*be.in_ns(net.cl, "sysctl", "-n", k)).stdout.strip())
                      for net in nets.values() for k in sysctls]
            for ns, k, _ in before:
                be.sh(*be.in_ns(ns, "sysctl", "-qw", f"{k}={sysctls[k]}"))
            for reverse in (True, False):
                def run(ixora, cc="cubic"):
                    # A fresh bridge and a fresh iperf3 server (on a port
                    # of its own) per run: over a slow, lossy path a
                    # server can take many seconds to end its last test
                    # ("the server is busy"), and a bridge restarted
                    # under it loses what it was sending.
                    # The server is probed over the path without the
                    # condition's impairments: iperf3 takes the probe for a
                    # client, and once its close arrives listens anew, so a
                    # probe whose FIN the path lost (the same frame in every
                    # run: a seeded bridge) had it refuse the real client.
                    # A run whose iperf3 fails anyway is tried again, twice
                    # at most; the failures are kept in the results.
                    failed = []
                    while True:
                        net, port = nets[ixora], next(ports)
                        net.impair(PATH_BASE, args.duration + 60)
                        server = net.server(["iperf3", "-s", "-p", str(port)],
                                            f"/tmp/ixb-{PID}-iperf3-{ixora}.log")
                        try:
                            if not be.wait_tcp(net.cl, SRV, port):
                                raise RuntimeError("iperf3 did not start")
                            time.sleep(0.3)  # the probe's end, and the new listener
                            net.impair(PATH_BASE + opts, args.duration + 60)
                            r = bulk_run(net, port, args.duration, reverse, cc)
                            break
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            log = be.stop_proc(server)
                            failed.append(f"{e}\n--- the iperf3 server ---\n{log}"[-3000:])
                            print(f"  iperf3 failed ({'ixora' if ixora else 'kernel'}), "
                                  f"tried again: {log.strip().splitlines()[-3:]}", flush=True)
                            net.impair_stop(check=False)
                            if len(failed) > 2:
                                raise RuntimeError("\n\n".join(failed))
                        finally:
                            be.stop_proc(server)
                    r["path"] = net.impair_stop()
                    r["failed_attempts"] = failed
                    return r
                # Both stacks with CUBIC (Ixora's; the kernel's is set
                # per socket), alternating; then, for reference, the
                # kernel with this host's default when that is another
                # (sending: to the server, the client's would differ).
                best = alternate(args.repeat, run, lambda r: r["gbps"])
                keep(best, results, "all_gbps", line, condition=label, cc="cubic")
                if default_cc != "cubic" and reverse:
                    runs = sorted((run(False, default_cc) for _ in range(args.repeat)),
                                  key=lambda r: r["gbps"])
                    r = dict(runs[len(runs) // 2], stack=f"kernel-{default_cc}",
                             all_gbps=[x["gbps"] for x in runs], condition=label, cc=default_cc)
                    results.append(r)
                    print(line(r), flush=True)
                prog_bar.step(f"{label}, {'from' if reverse else 'to'} the server\n")
            for ns, k, v in before:
                be.sh(*be.in_ns(ns, "sysctl", "-qw", f"{k}={v}"))
    finally:
        for ixora in (True, False):
            if ixora in nets:
                nets[ixora].close()
    return results


def write_path(results, args, cmdline):
    """sockets-path.{json,md,png}."""
    other = next((r["cc"] for r in results if r["stack"].startswith("kernel-")), None)
    name, meta, command = part_json("path", results, args, cmdline, duration_s=args.duration,
                                    ring=args.ring or PATH_RING, path_base=PATH_BASE,
                                    conditions={c[0]: c[1] for c in PATH_CONDITIONS},
                                    client_sysctls={c[0]: c[2] for c in PATH_CONDITIONS if c[2]})
    L = ["# A lossy, reordering, stalling path: iperf3 on the kernel vs under `ixora run`", "",
         command +
         "The server's and the client's namespaces are joined through a third, where "
         "`ixora impair` (the simulator's link model applied to real frames: netem's job, "
         "which this kernel lacks) bridges two veth pairs: "
         f"`{' '.join(PATH_BASE)}` (a one-way delay, a rate and its 256 KiB drop-tail queue, "
         "each direction) plus each condition's loss and reordering (a frame held back is "
         "held up to the given time on top of the delay, and overtaken) or stalls (each "
         "direction of the path, on its own schedule, holds what enters it for the stall "
         "and then sends it on at its rate behind the queue; a stall longer than the "
         "200 ms minimum RTO makes the sender time out needlessly, which timestamps "
         "reveal: RFC 3522; in the last condition the Linux client does not agree "
         "timestamps — `net.ipv4.tcp_timestamps=0` in its namespace, as Windows by "
         "default — so a sender finds it by F-RTO, RFC 5682). iperf3 server "
         f"pinned to CPU 0 (with Ixora: the service on CPU {SERVICE_CPU}), the Linux iperf3 "
         "client and the bridge to CPU 1. One TCP stream per run, "
         f"{args.duration} s; kernel and Ixora runs alternate ({args.repeat} each, the median "
         "kept). Server → client tests the server stack's sending side (loss recovery, "
         "RACK, congestion control), client → server its receiving side (SACK and D-SACK "
         "it reports, its window) against Linux's sender. TSO/GSO are off on the ends "
         "(frames as a wire carries them); checksums the ends leave to offload the bridge "
         "completes, as a NIC would. Ixora's socket "
         f"rings: {meta['ring'] // 1024} KiB each way (`ixora serve --ring`; more than the "
         "path's bandwidth-delay product and queue); the kernel autotunes. Retransmitted: "
         "iperf3's count from the sender's TCP_INFO; lost and held: what the bridge did to "
         "the data direction. Both stacks run CUBIC (iperf3 -C cubic; Ixora has no other "
         "congestion control for SACK peers)" +
         (f"; the kernel also runs with this host's default, {other.upper()}, for "
          "reference (a model-based sender that does not back off on random loss)"
          if other else "") + ".", "",
         "| condition | direction | kernel CUBIC Mbit/s | Ixora Mbit/s | ratio "
         f"| kernel {other.upper() if other else '—'} Mbit/s | ratio to it "
         "| retransmitted (k / i) | lost, tail-dropped, held back, stalled (k / i) "
         "| runs, Mbit/s (k / i) |",
         "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    bars = []
    for label, _, _ in PATH_CONDITIONS:
        for d in ("from_server", "to_server"):
            k, i, o = (next((r for r in results if r["condition"] == label and r["direction"] == d
                             and r["stack"] == stack), None)
                       for stack in ("kernel", "ixora", f"kernel-{other}"))
            if not (k and i):
                continue
            ratio = i["gbps"] / k["gbps"] if k["gbps"] else 0
            oth = (f"{1000 * o['gbps']:.1f} | {i['gbps'] / o['gbps']:.2f}×"
                   if o and o["gbps"] else "— | —")

            def did(r):
                # The data direction: server -> client leaves by the
                # bridge's client end (direction 0 enters at the server's).
                p = (r.get("path") or {}).get("directions")
                if not p:
                    return "?"
                x = p[0] if d == "from_server" else p[1]
                return (f"{x['lost']}, {x['queue_drops']}, {x['reordered']}, "
                        f"{x.get('stalled', 0)}")
            runs = " / ".join(", ".join(f"{1000 * g:.0f}" for g in x["all_gbps"]) for x in (k, i))
            what = "server → client (-R)" if d == "from_server" else "client → server"
            L.append(f"| {label} | {what} | {1000 * k['gbps']:.1f} | {1000 * i['gbps']:.1f} | "
                     f"**{ratio:.2f}×** | {oth} | {k['retransmits'] or 0} / {i['retransmits'] or 0} | "
                     f"{did(k)} / {did(i)} | {runs} |")
            bars.append((f"{label}\n{'server → client' if d == 'from_server' else 'client → server'}",
                         k, i, o))
    failed = sum(len(r.get("failed_attempts") or []) for r in results)
    if failed:
        L += ["", f"{failed} attempt(s) of the runs kept failed and were tried again "
              "(iperf3's errors are in the JSON, `failed_attempts`; the log of the run says "
              "those of the others)."]
    L += ["", f"Plot: `{name}.png`.", ""]
    plt = write_md(name, L)
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(4 + 1.6 * len(bars), 4.2))
    for j, stack in enumerate(("kernel", "ixora")):
        ax.bar([x + (j - 0.5) * 0.4 for x in range(len(bars))],
               [1000 * b[1 + j]["gbps"] for b in bars], 0.4,
               label="kernel (CUBIC)" if stack == "kernel" else "ixora run (CUBIC)")
    if other:
        ax.plot(range(len(bars)), [1000 * b[3]["gbps"] if b[3] else float("nan") for b in bars],
                "k_",
                markersize=18, label=f"kernel ({other.upper()}, host default)")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars], fontsize=8)
    ax.set_ylabel("Mbit/s")
    ax.set_title(f"iperf3 over an impaired path ({' '.join(PATH_BASE)})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


RELAY_PORTS = {"splice": 5300, "copy": 5302}  # HAProxy's two relays (--only relay)
RELAY_BACKEND_PORT = 5301  # the iperf3 server they relay to


def relay(args, prog_bar):
    """HAProxy in TCP mode relaying one iperf3 stream, each way, between
    the Linux client and an iperf3 server beside it on the client's side:
    by `splice` (`option splice-request` / `splice-response`: the bytes
    pass the proxy through pipes) and by copy (recv/send), on both stacks
    side by side; kernel and Ixora runs alternate `--repeat` times, the
    run of median Gbit/s kept."""
    results = []

    def argv_of(ixora):
        conf = Path(TMP) / f"haproxy-{ixora}.cfg"
        backend = f"  server b {CLI}:{RELAY_BACKEND_PORT}\n"
        conf.write_text(
            "global\n  maxpipes 256\n"
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n"
            "  timeout server 60s\n"
            f"listen splice\n  bind {SRV}:{RELAY_PORTS['splice']}\n  option splice-request\n"
            f"  option splice-response\n{backend}"
            f"listen copy\n  bind {SRV}:{RELAY_PORTS['copy']}\n{backend}")
        return ["haproxy", "-f", str(conf), "-db"]

    backend = ["iperf3", "-s", "-B", CLI, "-p", str(RELAY_BACKEND_PORT)]
    with side_by_side("haproxy", argv_of, RELAY_PORTS["copy"]) as nets, \
            client_side(nets, "the backend iperf3", lambda _: backend, RELAY_BACKEND_PORT):
        for mode, port in RELAY_PORTS.items():
            streams(args, prog_bar, nets, port, f"haproxy {mode:6s}", results,
                    server="haproxy", mode=mode)
    return results


def part_json(part, results, args, cmdline, **extra):
    """Write sockets-`part`.json (with the suffixes of NAME; no part:
    NAME.json) from `results`: its name, its meta (`extra` added) and the
    start of its markdown's command line."""
    name = NAME.replace("sockets", f"sockets-{part}", 1) if part else NAME
    meta = meta_of(args, cmdline, **extra)
    (OUT / f"{name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return name, meta, (f"Command: `{cmdline}` — {meta['date']}, {meta['cpus']} CPUs, "
                        f"Linux {meta['kernel']}. ")


def write_md(name, lines):
    """Write `name`.md from `lines`; the pyplot module for its plot, or
    None when matplotlib is missing (the table is written anyway)."""
    (OUT / f"{name}.md").write_text("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib missing in {sys.executable}: {name}.png not written "
              "(run the benchmark with a python3 that has it, e.g. Debian's python3-matplotlib)",
              file=sys.stderr)
        return None
    return plt


def write_bulk(results, args, cmdline, part="bulk"):
    """sockets-bulk.{json,md,png} (iperf3 to the server), or with `part`
    "relay" sockets-relay.* (iperf3 through HAProxy, by splice and by
    copy): files of their own, so that a part run alone leaves the
    request/response results alone."""
    name, meta, command = part_json(part, results, args, cmdline, duration_s=args.duration,
                                    ring=args.ring or 65536)
    if part == "relay":
        title = "# Relaying: HAProxy on the kernel vs under `ixora run`, by splice and by copy"
        what = (f"HAProxy (TCP mode) pinned to CPU 0 (with Ixora: the service on CPU {SERVICE_CPU}), "
                "relaying one iperf3 stream between the Linux iperf3 client and an iperf3 server "
                "on the client's side (both on CPU 1): two connections per stream through the "
                "proxy, both on the stack measured. splice: `option splice-request` and "
                "`splice-response`, the bytes pass HAProxy through pipes (under `ixora run`, "
                "through the shim's relay pipe: one copy out of or into the socket's ring, as "
                "docs/ARCHITECTURE.md says); copy: HAProxy's recv/send. Server CPU s/GB: CPU 0 "
                "busy time (HAProxy, its system calls and softirqs, and for Ixora the service) "
                "per GB received by the client's side.")
        plot_title = "HAProxy relay, one stream"
    else:
        title = "# Bulk transfer: iperf3 on the kernel vs under `ixora run`"
        what = (f"iperf3 server pinned to CPU 0 (with Ixora: the service on CPU {SERVICE_CPU}), "
                "the Linux iperf3 client to CPU 1. iperf3's listener is a dual-stack AF_INET6 "
                "socket on `::`: under `ixora run` it carries IPv4 as v4-mapped addresses. "
                "Server CPU s/GB: CPU 0 busy time (iperf3, its system calls and softirqs, and "
                "for Ixora the service) per GB received.")
        plot_title = "iperf3, one stream"
    L = [title, "",
         command + what +
         f" One TCP stream, {args.duration} s per run; kernel and Ixora runs alternate "
         f"({args.repeat} each, the median kept). Segmentation offloads (TSO/GSO) are off on both "
         "veth ends for both stacks, so every frame is MTU-sized, as on a wire (Ixora's AF_XDP "
         f"copy mode takes no super-frames). Ixora's socket rings: {meta['ring'] // 1024} KiB "
         "each way (`ixora serve --ring`; the receive ring bounds the window Ixora advertises, "
         "where the kernel autotunes its buffers up to 6 MiB).", "",
         RX_TEXT[RX], "",
         "| mode | direction | kernel Gbit/s | Ixora Gbit/s | ratio | kernel CPU s/GB "
         "| Ixora CPU s/GB | CPU ratio | client CPU (k/i) | runs, Gbit/s (k / i) |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    modes = list(dict.fromkeys(r.get("mode") for r in results))
    bars = []
    for mode in modes:
        for d in ("to_server", "from_server"):
            k, i = (next((r for r in results if r.get("mode") == mode and r["direction"] == d
                          and r["stack"] == stack), None) for stack in ("kernel", "ixora"))
            if not (k and i):
                continue
            ratio = i["gbps"] / k["gbps"] if k["gbps"] else 0
            cr = (i["cpu_s_per_gb"] / k["cpu_s_per_gb"]) if k["cpu_s_per_gb"] and i["cpu_s_per_gb"] else 0
            cc = "/".join(f"{100 * (x.get('client_cpu_busy') or 0):.0f}%" for x in (k, i))
            runs = " / ".join(", ".join(f"{g:.2f}" for g in x["all_gbps"]) for x in (k, i))
            server = "iperf3 server" if part == "relay" else "server"
            what = (f"client → {server} ({server} receives)" if d == "to_server"
                    else f"{server} → client ({server} sends, -R)")
            L.append(f"| {mode or '—'} | {what} | {k['gbps']:.2f} | {i['gbps']:.2f} | "
                     f"**{ratio:.2f}×** | {k['cpu_s_per_gb'] or 0:.3f} | "
                     f"{i['cpu_s_per_gb'] or 0:.3f} | {cr:.2f} | {cc} | {runs} |")
            label = ("client → server" if d == "to_server" else "server → client")
            bars.append(((f"{mode}\n" if mode else "") + label, k, i))
    L += ["", f"Plot: `{name}.png`.", ""]
    plt = write_md(name, L)
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(5 + 2.5 * len(bars), 4.2))
    for ax, (key, unit, what) in zip(axes, (("gbps", "Gbit/s", "throughput"),
                                            ("cpu_s_per_gb", "server CPU s per GB", "server CPU per GB"))):
        for j, stack in enumerate(("kernel", "ixora")):
            ax.bar([x + (j - 0.5) * 0.4 for x in range(len(bars))],
                   [(b[1 + j][key] or 0) for b in bars], 0.4,
                   label="kernel" if stack == "kernel" else "ixora run")
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars])
        ax.set_ylabel(unit)
        ax.set_title(f"{plot_title}: {what}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


def local_run(net, n, conns):
    """One redis-benchmark run (SET and GET, `n` requests each, `conns`
    connections) from the server's own namespace to the server's address:
    on the kernel through its loopback, under `ixora run` through the
    service's stack (the connection loops inside it). Returns requests/s
    per test, CPU seconds per request (both CPUs: client, server and
    service all run on this host) and the share of redis-server's socket
    calls answered in user space."""
    cmd = ["redis-benchmark", "-h", SRV, "-p", "6379", "-t", "set,get", "-n", str(n),
           "-c", str(conns), "--csv"]
    if net.ixora:
        cmd = [str(BIN), "run", "--socket", net.sock, "--spin-us", str(SPIN_US), "--", *cmd]
    st0 = net.stats()
    c0 = cpu_busy(0) + cpu_busy(1)
    t0 = time.time()
    r = subprocess.run(be.pinned(1, *be.in_ns(net.sv, *cmd)), capture_output=True, text=True,
                       timeout=300)
    wall = time.time() - t0
    cpu = cpu_busy(0) + cpu_busy(1) - c0
    st1 = net.stats()
    rps = {}
    for line in r.stdout.splitlines():
        f = [x.strip('"') for x in line.split(",")]
        if len(f) >= 2 and f[0] in ("SET", "GET"):
            rps[f[0].lower()] = float(f[1])
    if set(rps) != {"set", "get"}:
        raise RuntimeError(f"redis-benchmark printed no result:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    # (The client has detached by now: the share is redis-server's.)
    return {"rps": rps, "wall_s": wall, "cpu_us_per_req": cpu / (2 * n) * 1e6,
            "user_share": share(user_calls(st0), user_calls(st1)) if net.ixora else None}


def local_bulk_run(net, port, secs):
    """One iperf3 stream (`secs` seconds) from a client in the server's
    own namespace (CPU 1; under `ixora run` with Ixora) to the iperf3
    server of `net`: the kernel's loopback, or a connection looped inside
    the service. Gbit/s received and both CPUs' busy seconds per GB."""
    cmd = ["iperf3", "-c", SRV, "-p", str(port), "-t", str(secs), "--json"]
    if net.ixora:
        cmd = [str(BIN), "run", "--socket", net.sock, "--spin-us", str(SPIN_US), "--", *cmd]
    c0 = cpu_busy(0) + cpu_busy(1)
    r = subprocess.run(be.pinned(1, *be.in_ns(net.sv, *cmd)), capture_output=True, text=True,
                       timeout=secs + 60)
    cpu = cpu_busy(0) + cpu_busy(1) - c0
    j = iperf3_report(r, net)
    got = j["end"]["sum_received"]["bytes"]
    gbps = j["end"]["sum_received"]["bits_per_second"] / 1e9
    return {"gbps": gbps, "bytes": got, "cpu_s_per_gb": cpu / (got / 1e9) if got else None}


def local(args, prog_bar):
    """redis-server and redis-benchmark on one host, kernel loopback
    against one Ixora service (`ixora run` for both programs), then one
    iperf3 stream the same way; runs alternate `--repeat` times, the run
    of median GET requests/s (Gbit/s) kept."""
    results = []
    n = 200_000 if args.duration >= 5 else 50_000
    redis = ["redis-server", "--port", "6379", "--bind", SRV, "--save", "", "--appendonly", "no",
             "--protected-mode", "no"]
    with side_by_side("redis", lambda _: redis, 6379) as nets:
        best = alternate(args.repeat, lambda ixora: local_run(nets[ixora], n, 50),
                         lambda r: r["rps"]["get"])
        prog_bar.step("redis on one host\n")
        keep(best, results, "all_get_rps", lambda r: (
            f"  redis local {r['stack']:7s} SET {r['rps']['set'] / 1000:6.1f} k/s"
            f"  GET {r['rps']['get'] / 1000:6.1f} k/s  {r['cpu_us_per_req']:5.1f} us CPU/req"
            + (f"  user {r['user_share'] * 100:5.1f}%" if r["user_share"] is not None else "")),
            server="redis-local", requests=n)
    port = 5201
    with side_by_side("iperf3", lambda _: ["iperf3", "-s", "-p", str(port)], port) as nets:
        best = alternate(args.repeat, lambda ixora: local_bulk_run(nets[ixora], port, args.duration),
                         lambda r: r["gbps"])
        prog_bar.step("iperf3 on one host\n")
        keep(best, results, "all_gbps", lambda r: (
            f"  iperf3 local {r['stack']:7s} {r['gbps']:6.2f} Gbit/s"
            f"  {r['cpu_s_per_gb'] or 0:5.2f} CPU s/GB"), server="iperf3-local")
    return results


def write_local(results, args, cmdline):
    """sockets-local.{json,md,png}."""
    name, meta, command = part_json("local", results, args, cmdline)
    k = next(r for r in results if r["stack"] == "kernel" and r["server"] == "redis-local")
    i = next(r for r in results if r["stack"] == "ixora" and r["server"] == "redis-local")
    bk = next((r for r in results if r["stack"] == "kernel" and r["server"] == "iperf3-local"), None)
    bi = next((r for r in results if r["stack"] == "ixora" and r["server"] == "iperf3-local"), None)
    L = ["# Two programs on one host, kernel loopback vs one Ixora service: redis-benchmark to redis-server, and iperf3", "",
         command +
         f"redis-server on CPU 0 (with Ixora: the service on CPU {SERVICE_CPU}), redis-benchmark "
         f"(50 connections, {k['requests']} SETs then as many GETs) on CPU 1, both in the server's "
         "namespace, connecting to the server's address: on the kernel the connection goes "
         "through its loopback; under `ixora run` (both programs) it loops inside the service's "
         "stack and never reaches the wire. CPU µs/req: both CPUs' busy time per request (the "
         f"client is on this host too). Runs alternate ({args.repeat} each, the median GET run kept).", "",
         "| test | kernel req/s | Ixora req/s | ratio | kernel CPU µs/req | Ixora CPU µs/req | "
         "redis-server's user-space share (Ixora) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for t in ("set", "get"):
        L.append(f"| {t.upper()} | {k['rps'][t] / 1000:.1f} k | {i['rps'][t] / 1000:.1f} k | "
                 f"**{i['rps'][t] / k['rps'][t]:.2f}×** | {k['cpu_us_per_req']:.1f} | "
                 f"{i['cpu_us_per_req']:.1f} | {(i['user_share'] or 0) * 100:.2f}% |")
    L += ["", "GET runs, req/s (kernel / Ixora): "
          + ", ".join(f"{x / 1000:.1f} k" for x in k["all_get_rps"]) + " / "
          + ", ".join(f"{x / 1000:.1f} k" for x in i["all_get_rps"]), ""]
    if bk and bi:
        L += ["## Bulk: one iperf3 stream on one host", "",
              f"iperf3 server on CPU 0, client on CPU 1 in the same namespace, {args.duration} s per "
              "run, to the server's address: the kernel's loopback, or (both under `ixora run`) a "
              "connection looped inside the service, each end's window bounded by its 64 KiB "
              "socket rings. CPU s/GB: both CPUs' busy time per GB received. (Before 2026-11-26 "
              "this ran at 4 Mbit/s under Ixora: the service missed the receiver's window "
              "updates; see `Stack::tcp_send_blocked` in docs/ARCHITECTURE.md.)", "",
              "| | kernel Gbit/s | Ixora Gbit/s | ratio | kernel CPU s/GB | Ixora CPU s/GB | "
              "runs, Gbit/s (k / i) |", "|---|---:|---:|---:|---:|---:|---|",
              f"| iperf3, one stream | {bk['gbps']:.2f} | {bi['gbps']:.2f} | "
              f"**{bi['gbps'] / bk['gbps']:.2f}×** | {bk['cpu_s_per_gb'] or 0:.3f} | "
              f"{bi['cpu_s_per_gb'] or 0:.3f} | "
              + " / ".join(", ".join(f"{g:.2f}" for g in x["all_gbps"]) for x in (bk, bi)) + " |", ""]
    L += [f"Plot: `{name}.png`.", ""]
    plt = write_md(name, L)
    if plt is None:
        return
    bulk = bool(bk and bi)
    fig, axes = plt.subplots(1, 2 if bulk else 1, figsize=(10 if bulk else 6, 4), squeeze=False)
    ax = axes[0][0]
    if bulk:
        bx = axes[0][1]
        bx.bar([0, 1], [bk["gbps"], bi["gbps"]], 0.5, color=["C0", "C1"])
        bx.set_xticks([0, 1])
        bx.set_xticklabels(["kernel loopback", "ixora run (looped)"])
        bx.set_ylabel("Gbit/s")
        bx.set_title("iperf3, one stream, on one host")
    for j, (r, lab) in enumerate(((k, "kernel loopback"), (i, "ixora run (looped in the service)"))):
        ax.bar([x + (j - 0.5) * 0.4 for x in range(2)], [r["rps"]["set"] / 1000, r["rps"]["get"] / 1000],
               0.4, label=lab)
    ax.set_xticks(range(2))
    ax.set_xticklabels(["SET", "GET"])
    ax.set_ylabel("k requests/s")
    ax.set_title("redis-benchmark to redis-server on one host")
    top = max(r["rps"][t] for r in (k, i) for t in ("set", "get")) / 1000
    ax.set_ylim(0, top * 1.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


def pg_bin():
    """The directory of PostgreSQL's programs (Debian: /usr/lib/postgresql/N/bin), or None."""
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / "postgres").exists() and (d / "pgbench").exists():
            return d
    return None


PG_MODES = (("select-only", 1), ("select-only", 8), ("tpcb", 4))


def pg_run(net, bin_dir, mode, clients, secs):
    """One pgbench run (the Linux stack, CPU 1) against the postgres of
    `net`: transactions/s, average latency, failures, server CPU µs per
    transaction (CPU 0: postgres's processes and for Ixora the service)."""
    cmd = [str(bin_dir / "pgbench"), "-h", SRV, "-U", "postgres", "-c", str(clients), "-j", "1",
           "-T", str(secs), *(["-S"] if mode == "select-only" else []), "postgres"]
    st0 = net.stats()
    c0 = cpu0_busy()
    r = subprocess.run(be.pinned(1, *be.in_ns(net.cl, *cmd)), capture_output=True, text=True,
                       timeout=secs + 60)
    cpu = cpu0_busy() - c0
    st1 = net.stats()
    out = r.stdout + r.stderr
    num = lambda pat: float(m.group(1)) if (m := re.search(pat, out)) else None
    tps, done = num(r"tps = ([0-9.]+)"), num(r"actually processed: ([0-9]+)")
    if r.returncode or tps is None or not done:
        raise RuntimeError(f"pgbench failed:\n{out[-2000:]}")
    return {"mode": mode, "clients": clients, "tps": tps, "transactions": int(done),
            "latency_ms": num(r"latency average = ([0-9.]+) ms"),
            "failed": int(num(r"failed transactions: ([0-9]+)") or 0),
            "cpu_us_per_tx": cpu / done * 1e6,
            "user_share": share(user_calls(st0), user_calls(st1)) if net.ixora else None}


def pg(args, prog_bar):
    """PostgreSQL (a process per connection, run as its own user: the
    service admits it with --socket-mode 0666) on both stacks side by
    side, pgbench from the client's side: select-only with 1 and 8
    clients, TPC-B-like with 4; runs alternate `--repeat` times, the run
    of median transactions/s kept."""
    global SERVE_EXTRA
    bin_dir = pg_bin()
    if bin_dir is None:
        sys.exit("bench_sockets: PostgreSQL is not installed (make deps installs it)")
    SERVE_EXTRA = SERVE_EXTRA + ["--socket-mode", "666"]
    base = Path(TMP) / "pg"
    for t in ("k", "i"):
        for d in (base / t / "data", base / t / "sock"):
            d.mkdir(parents=True)
    be.sh("chown", "-R", "postgres:postgres", str(base))
    os.chmod(TMP, 0o755)
    for t in ("k", "i"):
        be.sh("runuser", "-u", "postgres", "--", str(bin_dir / "initdb"), "--auth=trust",
              "-U", "postgres", "-D", str(base / t / "data"))
        with open(base / t / "data" / "pg_hba.conf", "a") as f:
            f.write("host all all 198.18.0.0/15 trust\n")
    argv_of = lambda ixora: [
        "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", str(bin_dir / "postgres"),
        "-D", str(base / ("i" if ixora else "k") / "data"), "-p", "5432",
        "-c", f"listen_addresses={SRV}",
        "-c", f"unix_socket_directories={base / ('i' if ixora else 'k') / 'sock'}"]
    results = []
    with side_by_side("postgres", argv_of, 5432) as nets:
        for ixora in (False, True):
            be.sh(*be.in_ns(nets[ixora].cl, str(bin_dir / "pgbench"), "-h", SRV, "-U", "postgres",
                            "-i", "-s", "4", "postgres"))
        for mode, clients in PG_MODES:
            best = alternate(args.repeat, lambda ixora: pg_run(nets[ixora], bin_dir, mode, clients,
                                                               args.duration), lambda r: r["tps"])
            prog_bar.step(f"pgbench {mode}, {clients} client(s)\n")
            keep(best, results, "all_tps", lambda r: (
                f"  pgbench {mode:11s} {clients} {r['stack']:7s} {r['tps']:8.0f} tps"
                f"  {r['latency_ms']:6.3f} ms  {r['cpu_us_per_tx']:6.1f} us CPU/tx"),
                server="postgres")
    return results


def write_pg(results, args, cmdline):
    """sockets-pg.{json,md,png}."""
    name, meta, command = part_json("pg", results, args, cmdline, duration_s=args.duration)
    L = ["# PostgreSQL: pgbench against postgres on the kernel vs under `ixora run`", "",
         command +
         f"postgres (scale 4, run as user postgres; its postmaster forks a backend process per "
         f"connection) pinned to CPU 0, the Ixora service on CPU {SERVICE_CPU}, pgbench (the "
         f"Linux stack) on CPU 1; {args.duration} s per run, kernel and Ixora runs alternating "
         f"({args.repeat} each, the median kept). Server CPU µs/tx: CPU 0 busy time (postgres's "
         "processes, their system calls and softirqs, and for Ixora the service) per transaction. "
         "The service admits postgres's user with `--socket-mode 0666`.", "",
         RX_TEXT[RX], "",
         "| transactions | clients | kernel tps | Ixora tps | ratio | kernel latency ms | "
         "Ixora latency ms | kernel CPU µs/tx | Ixora CPU µs/tx | failed (k/i) | user-space share | "
         "runs, tps (k / i) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    pairs = []
    for mode, clients in PG_MODES:
        k = next((r for r in results if (r["mode"], r["clients"], r["stack"]) == (mode, clients, "kernel")), None)
        i = next((r for r in results if (r["mode"], r["clients"], r["stack"]) == (mode, clients, "ixora")), None)
        if not (k and i):
            continue
        pairs.append((f"{mode}, {clients}", k, i))
        runs = " / ".join(", ".join(f"{t:.0f}" for t in x["all_tps"]) for x in (k, i))
        L.append(f"| {mode} | {clients} | {k['tps']:.0f} | {i['tps']:.0f} | "
                 f"**{i['tps'] / k['tps']:.2f}×** | {k['latency_ms']:.3f} | {i['latency_ms']:.3f} | "
                 f"{k['cpu_us_per_tx']:.1f} | {i['cpu_us_per_tx']:.1f} | {k['failed']}/{i['failed']} | "
                 f"{(i['user_share'] or 0) * 100:.1f}% | {runs} |")
    L += ["", f"Plot: `{name}.png`.", ""]
    plot_pairs(write_md(name, L), name, "pgbench", pairs,
               ((lambda r: r["tps"], "transactions/s"),
                (lambda r: r["cpu_us_per_tx"], "server CPU µs per transaction")))


def plot_pairs(plt, name, what, pairs, panels):
    """`name`.png: a panel per `(value of a run, unit[, log scale])` of
    `panels`, with a kernel and an Ixora bar per `(label, kernel run,
    Ixora run)` of `pairs` (`plt`: what `write_md` gave; None writes no
    plot)."""
    if plt is None or not pairs:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2))
    for ax, (val, unit, *log) in zip(axes, panels):
        if log and log[0]:
            ax.set_yscale("log")
        for j, lab in enumerate(("kernel", "ixora run")):
            ax.bar([x + (j - 0.5) * 0.4 for x in range(len(pairs))], [val(p[1 + j]) for p in pairs],
                   0.4, label=lab)
        ax.set_xticks(range(len(pairs)))
        ax.set_xticklabels([p[0] for p in pairs], fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(f"{what}: {unit}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


# (label, connections, requests per test at --duration 5, redis-benchmark
# options): requests one at a time on kept connections, 16 pipelined, and
# a connection per request (the client closes it: its TIME-WAIT).
REDIS_MODES = (("keep-alive", 50, 200_000, []), ("pipelined 16", 50, 1_000_000, ["-P", "16"]),
               ("a connection per request", 50, 20_000, ["-k", "0"]))


def redis_run(net, mode, secs):
    """One redis-benchmark run (SET then GET; the Linux stack, CPU 1)
    against the redis-server of `net` in REDIS_MODES' mode `mode`:
    requests/s per test, server CPU µs per request (CPU 0: redis-server,
    its system calls and softirqs, and for Ixora the service) and the
    share of redis-server's socket calls answered in user space."""
    _, conns, n, opts = next(m for m in REDIS_MODES if m[0] == mode)
    n = max(1000, n * secs // 5)
    cmd = ["redis-benchmark", "-h", SRV, "-p", "6379", "-t", "set,get", "-n", str(n),
           "-c", str(conns), "--csv", *opts]
    st0 = net.stats()
    r, cpu, client_busy = client_run(net, cmd, 240)
    st1 = net.stats()
    rps = {}
    for line in r.stdout.splitlines():
        f = [x.strip('"') for x in line.split(",")]
        if len(f) >= 2 and f[0] in ("SET", "GET"):
            rps[f[0].lower()] = float(f[1])
    if r.returncode or set(rps) != {"set", "get"}:
        raise RuntimeError(f"redis-benchmark printed no result:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return {"mode": mode, "conns": conns, "requests": 2 * n, "rps": rps,
            "cpu_us_per_req": cpu / (2 * n) * 1e6, "client_cpu_busy": client_busy,
            "user_share": share(user_calls(st0), user_calls(st1)) if net.ixora else None,
            "calls": call_deltas(st0, st1)}


def redis(args, prog_bar):
    """redis-server on both stacks side by side, redis-benchmark (SET and
    GET) from the client's side in each of REDIS_MODES; runs alternate
    `--repeat` times, the run of median GET requests/s kept. The client
    namespaces may use every local port and reuse TIME-WAIT ones (a
    connection per request makes tens of thousands)."""
    results = []
    argv = ["redis-server", "--port", "6379", "--bind", SRV, "--save", "", "--appendonly", "no",
            "--protected-mode", "no"]
    with side_by_side("redis", lambda _: argv, 6379) as nets:
        for net in nets.values():
            be.sh(*be.in_ns(net.cl, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535",
                            "net.ipv4.tcp_tw_reuse=1"))
        for mode, *_ in REDIS_MODES:
            best = alternate(args.repeat, lambda ixora: redis_run(nets[ixora], mode, args.duration),
                             lambda r: r["rps"]["get"])
            prog_bar.step(f"redis-benchmark, {mode}\n")
            keep(best, results, "all_get_rps", lambda r: (
                f"  redis {mode:24s} {r['stack']:7s} SET {r['rps']['set'] / 1000:6.1f} k/s"
                f"  GET {r['rps']['get'] / 1000:6.1f} k/s  {r['cpu_us_per_req']:5.1f} us CPU/req"
                + (f"  user {r['user_share'] * 100:5.1f}%" if r["user_share"] is not None else "")),
                server="redis")
    return results


def write_redis(results, args, cmdline):
    """sockets-redis.{json,md,png}."""
    name, meta, command = part_json("redis", results, args, cmdline, duration_s=args.duration)
    L = ["# Redis: redis-benchmark against redis-server on the kernel vs under `ixora run`", "",
         command +
         f"redis-server 7 pinned to CPU 0, the Ixora service on CPU {SERVICE_CPU}, "
         "redis-benchmark (the Linux stack) on CPU 1, `-t set,get`; kernel and Ixora runs "
         f"alternating ({args.repeat} each, the run of median GET requests/s kept). Server CPU "
         "µs/req: CPU 0 busy time (redis-server, its system calls and softirqs, and for Ixora "
         "the service) per request; client CPU: how busy CPU 1 was (near 100%: the client set "
         "the pace, and the CPU per request is the figure to read). Redis sets four keep-alive "
         "options (`tcp-keepalive 300`) and TCP_NODELAY on every connection it accepts.", "",
         RX_TEXT[RX], "",
         "| mode | connections | kernel SET/s | Ixora SET/s | ratio | kernel GET/s | Ixora GET/s | "
         "ratio | kernel CPU µs/req | Ixora CPU µs/req | CPU ratio | client CPU (k/i) | "
         "user-space share | runs, GET/s (k / i) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    pairs = []
    for mode, *_ in REDIS_MODES:
        k, i = (next((r for r in results if (r["mode"], r["stack"]) == (mode, st)), None)
                for st in ("kernel", "ixora"))
        if not (k and i):
            continue
        pairs.append((mode, k, i))
        runs = " / ".join(", ".join(f"{t / 1000:.1f} k" for t in x["all_get_rps"]) for x in (k, i))
        busy = "/".join(f"{(x['client_cpu_busy'] or 0) * 100:.0f}%" for x in (k, i))
        L.append(f"| {mode} | {k['conns']} | {k['rps']['set'] / 1000:.1f} k | "
                 f"{i['rps']['set'] / 1000:.1f} k | **{i['rps']['set'] / k['rps']['set']:.2f}×** | "
                 f"{k['rps']['get'] / 1000:.1f} k | {i['rps']['get'] / 1000:.1f} k | "
                 f"**{i['rps']['get'] / k['rps']['get']:.2f}×** | {k['cpu_us_per_req']:.1f} | "
                 f"{i['cpu_us_per_req']:.1f} | {i['cpu_us_per_req'] / k['cpu_us_per_req']:.2f} | "
                 f"{busy} | {(i['user_share'] or 0) * 100:.1f}% | {runs} |")
    L += ["", f"Plot: `{name}.png`.", ""]
    plot_pairs(write_md(name, L), name, "redis-benchmark", pairs,
               ((lambda r: r["rps"]["get"], "GET requests/s", True),
                (lambda r: r["cpu_us_per_req"], "server CPU µs per request")))


def chrony_conf(tmp, who, lines):
    """A chronyd configuration `who` in `tmp` (its own pid file and log
    directory; no command port): its path."""
    d = Path(tmp) / f"chrony-{who}"
    d.mkdir(exist_ok=True)
    conf = d / "chrony.conf"
    conf.write_text("\n".join([*lines, "cmdport 0", f"pidfile {d}/pid", f"logdir {d}",
                               f"driftfile {d}/drift", ""]))
    return conf, d


def ntp_run(net, tmp, secs):
    """A client chronyd (the Linux stack, CPU 1) polling the server
    chronyd of `net` 16 times a second for `secs` seconds: the median and
    lowest NTP delay it measured (round trip less the server's hold
    between its receive and transmit stamps), the median |offset|, and
    how many measurements."""
    who = f"client-{'i' if net.ixora else 'k'}"
    conf, d = chrony_conf(tmp, who, [f"server {SRV} minpoll -4 maxpoll -4 iburst",
                                     "log measurements"])
    log = d / "measurements.log"
    log.unlink(missing_ok=True)
    p = be.start(be.pinned(1, *be.in_ns(net.cl, "chronyd", "-d", "-x", "-u", "root", "-f",
                                        str(conf))), f"/tmp/ixb-{PID}-{who}.log")
    time.sleep(secs)
    be.stop_proc(p)
    rows = []
    if log.exists():
        # Date Time IP L St 123 567 ABCD LP RP Score Offset Peer-del ...
        rows = [ln.split() for ln in log.read_text().splitlines() if ln[:1].isdigit()]
    if len(rows) < 10:
        raise RuntimeError(f"chronyd measured {len(rows)} times in {secs} s")
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    delay = [float(r[12]) * 1e6 for r in rows]
    offset = [abs(float(r[11])) * 1e6 for r in rows]
    return {"measurements": len(rows), "delay_us": med(delay), "min_delay_us": min(delay),
            "offset_us": med(offset)}


def ntp(args, prog_bar):
    """chronyd as an NTP server (`local stratum 8`, `-x`: the clock left
    alone) on both stacks side by side; a client chronyd on the client's
    side measures each, `--repeat` times alternating, the run of median
    delay kept. Both servers stamp what they receive with the stack's
    receive time (SO_TIMESTAMPING/SO_TIMESTAMPNS): the kernel's in its
    receive path, Ixora's in its XDP program."""
    tmp = tempfile.mkdtemp(prefix=f"ixb-{PID}-ntp-")
    results = []
    servers = {ixora: chrony_conf(tmp, f"server-{'i' if ixora else 'k'}",
                                  ["allow 198.18.0.0/15", "local stratum 8"])[0]
               for ixora in (False, True)}
    try:
        with side_by_side("ntp", lambda ixora: ["chronyd", "-d", "-x", "-u", "root", "-f",
                                                str(servers[ixora])], client_addr=True) as nets:
            time.sleep(1)
            secs = max(5, 4 * args.duration)
            best = alternate(args.repeat, lambda ixora: ntp_run(nets[ixora], tmp, secs),
                             lambda r: r["delay_us"])
            prog_bar.step("chronyd, NTP delay\n")
            keep(best, results, "all_delay_us", lambda r: (
                f"  ntp {r['stack']:7s} delay median {r['delay_us']:6.1f} us (lowest "
                f"{r['min_delay_us']:5.1f}), |offset| median {r['offset_us']:5.2f} us, "
                f"{r['measurements']} measurements"))
    finally:
        subprocess.run(["rm", "-rf", tmp])
    return results


def write_ntp(results, args, cmdline):
    """sockets-ntp.{json,md,png}."""
    name, meta, command = part_json("ntp", results, args, cmdline, duration_s=4 * args.duration)
    k, i = (next((r for r in results if r["stack"] == st), None) for st in ("kernel", "ixora"))
    L = ["# NTP: chronyd as a server on the kernel vs under `ixora run`", "",
         command +
         f"chronyd (`local stratum 8`, `-x`) pinned to CPU 0, the Ixora service on CPU "
         f"{SERVICE_CPU}; a client chronyd (the Linux stack) on CPU 1 polling it 16 times a "
         f"second for {max(5, 4 * args.duration)} s; kernel and Ixora runs alternating "
         f"({args.repeat} each, the run of median delay kept). The delay is what the client's "
         "NTP measures: the round trip less the server's hold between the receive stamp of a "
         "request and the transmit stamp of its reply. chronyd stamps a request with its "
         "receive timestamp (SO_TIMESTAMPING) — the kernel's, or under Ixora the one its XDP "
         "program takes as the frame arrives — and on the kernel its reply with the kernel's "
         "transmit timestamp (the error queue), which Ixora does not give: there chronyd "
         "stamps the reply itself before `sendmsg`, so the service's transmit path counts in "
         "the delay.", "",
         RX_TEXT[RX], "",
         "| | kernel | Ixora | ratio |", "|---|---:|---:|---:|"]
    if k and i:
        for key, label in (("delay_us", "median NTP delay, µs"),
                           ("min_delay_us", "lowest NTP delay, µs"),
                           ("offset_us", "median \\|offset\\|, µs")):
            L.append(f"| {label} | {k[key]:.1f} | {i[key]:.1f} | {i[key] / k[key]:.2f} |")
        runs = " / ".join(", ".join(f"{t:.1f}" for t in x["all_delay_us"]) for x in (k, i))
        L += ["", f"Runs, median delay µs (kernel / Ixora): {runs}. Measurements per run: "
              f"{k['measurements']} / {i['measurements']}."]
    L += ["", "Before 2026-11-28 an Ixora UDP socket gave no receive timestamps, and chronyd "
          "fell back to its own, taken after the service's turn and the program's wake-up: the "
          "same command at 27ec99c (03:35Z) measured a median delay of 171.8 µs (lowest 105.3, "
          "median |offset| 15.2) under Ixora against 24.9 µs on the kernel.", "",
          f"Plot: `{name}.png`.", ""]
    plot_pairs(write_md(name, L), name, "chronyd NTP server",
               [("chronyd", k, i)] if k and i else [],
               ((lambda r: r["delay_us"], "median NTP delay, µs"),
                (lambda r: r["offset_us"], "median |offset|, µs")))


# The kernel's p99 at the lowest memcached rate above which the sweep
# stops (see `memcached`): twice the target's 500 us.
NOISY_P99_US = 1000

UDP_PORT = 11111
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sockperf_run(net, mode, secs, rate=None, size=64, tcp=False):
    """One sockperf client run (the Linux stack, CPU 1) against the
    sockperf server of `net` (UDP, or `tcp` on BURST_PORT): `ping-pong`
    (one message in flight) or `under-load` at `rate` messages/s, every
    message answered; round-trip times, ping-pong payloads checked
    (--data-integrity). Returns the parsed summary with CPU 0's busy µs per
    message (the server side)."""
    cmd = ["sockperf", mode, "-i", SRV, "-p", str(BURST_PORT if tcp else UDP_PORT), "-t",
           str(secs), "-m", str(size), "--full-rtt", *(["--tcp"] if tcp else [])]
    if mode == "under-load":
        cmd += ["--mps", str(rate), "--reply-every", "1"]
    else:
        cmd.append("--data-integrity")  # (ping-pong only)
    full0 = net.stats()
    r, cpu, client_busy = client_run(net, cmd, secs)
    full1 = net.stats()
    out = ANSI.sub("", r.stdout + r.stderr)
    q = {"mode": mode, "target_mps": rate, "size": size}
    for line in out.splitlines():
        line = line.strip()
        m = re.search(r"avg-(?:latency|rtt)=([0-9.]+)", line)
        if m:
            q["avg_us"] = float(m.group(1))
        m = re.search(r"percentile (\d+\.\d+) =\s+([0-9.]+)", line)
        if m:
            q[{"50.000": "p50_us", "90.000": "p90_us", "99.000": "p99_us",
               "99.900": "p999_us", "99.990": "p9999_us"}.get(m.group(1), "_")] = float(m.group(2))
        m = re.search(r"<MAX> observation =\s+([0-9.]+)", line)
        if m:
            q["max_us"] = float(m.group(1))
        m = re.search(r"Total (\d+) observations", line)
        if m:
            q["observations"] = int(m.group(1))
        m = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                      r"# out-of-order messages = (\d+)", line)
        if m:
            q["dropped"], q["duplicated"], q["out_of_order"] = map(int, m.groups())
        if "data integrity" in line.lower() and ("fail" in line.lower() or "error" in line.lower()):
            q["integrity_errors"] = q.get("integrity_errors", 0) + 1
    q.pop("_", None)
    if "p50_us" not in q or "observations" not in q:
        raise RuntimeError(f"sockperf {mode} printed no result:\n{out[-3000:]}")
    q["mps"] = q["observations"] / secs
    q["cpu_us_per_msg"] = cpu / q["observations"] * 1e6 if q["observations"] else None
    q["client_cpu_busy"] = client_busy
    q["user_share"] = share(user_calls(full0), user_calls(full1)) if net.ixora else None
    return q


def udp(args, prog_bar):
    """sockperf's UDP server (one socket, blocking recvfrom/sendto) on
    both stacks side by side; the Linux sockperf client: ping-pong at each
    `--udp-sizes` size, then under-load (64 bytes) at each `--udp-rates`
    rate; kernel and Ixora runs alternate `--repeat` times, the run of
    median p99 kept."""
    results = []
    argv = ["sockperf", "server", "-i", "0.0.0.0" if LISTEN_ANY else SRV, "-p", str(UDP_PORT)]
    with side_by_side("sockperf", lambda _: argv, client_addr=True) as nets:
        for ixora in (False, True):  # warm-up (ARP, the server up)
            sockperf_run(nets[ixora], "ping-pong", 1)
        points = ([("ping-pong", None, int(x)) for x in args.udp_sizes.split(",")]
                  + [("under-load", int(x), 64) for x in args.udp_rates.split(",")])
        for mode, rate, size in points:
            best = alternate(args.repeat, lambda ixora: sockperf_run(
                nets[ixora], mode, args.duration, rate, size), lambda q: q["p99_us"])
            prog_bar.step(f"udp {mode} {rate or size}\n")
            keep(best, results, "all_p99", lambda q: (
                f"  udp {mode:10s} {str(rate or ''):>7s} {size:5d} B {q['stack']:7s}"
                f" {q['mps'] / 1000:6.1f} k msg/s  p50 {q['p50_us']:7.1f} us"
                f"  p99 {q['p99_us']:8.1f} us  dropped {q.get('dropped', 0)}"
                f"  {q['cpu_us_per_msg'] or 0:5.1f} us CPU/msg"))
    return results


BURST_PORT = 11113  # sockperf's TCP server of --only burst
BURST_SINK_PORT = 11114  # the reader of the bursting program's connections
BURSTER = r"""
import socket, sys, time
# burster ADDR PORT CONNS KB PERIOD_MS SECS: CONNS connections to ADDR:PORT;
# every PERIOD_MS, up to KB kB written on each (non-blocking: what the
# socket takes); for SECS seconds. Prints the bytes written and bursts.
a = (sys.argv[1], int(sys.argv[2])); n, kb = int(sys.argv[3]), int(sys.argv[4])
period, secs = int(sys.argv[5]) / 1000, float(sys.argv[6])
socks = []
for i in range(n):
    s = socket.create_connection(a, timeout=10); s.setblocking(False); socks.append(s)
print("connected", n, flush=True)
buf = b"x" * (kb * 1024)
t0, sent, bursts = time.time(), 0, 0
while time.time() - t0 < secs:
    for s in socks:
        try:
            sent += s.send(buf)
        except BlockingIOError:
            pass
    bursts += 1
    time.sleep(period)
print("sent", sent, "bursts", bursts, flush=True)
"""
BURST_SINK = r"""
import selectors, socket, sys, time
# sink ADDR PORT SECS: accept and read everything, for SECS seconds at most.
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4096); s.setblocking(False)
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
t0 = time.time()
while time.time() - t0 < float(sys.argv[3]):
    for k, _ in sel.select(0.5):
        if k.fileobj is s:
            try:
                c, _ = s.accept(); c.setblocking(False); sel.register(c, selectors.EVENT_READ)
            except BlockingIOError:
                pass
            continue
        try:
            if not k.fileobj.recv(1 << 16):
                sel.unregister(k.fileobj); k.fileobj.close()
        except (BlockingIOError, ConnectionError):
            pass
"""
BURST_CONNS, BURST_KB, BURST_PERIOD_MS = 400, 64, 100


def burst_run(net, secs, bursting):
    """sockperf TCP ping-pong (the Linux client, CPU 1) to the sockperf
    server of `net`, with (`bursting`) or without a second program beside
    the server, on its CPU and (for Ixora) the same service, writing up to
    BURST_KB kB to each of its BURST_CONNS connections to the client's
    namespace every BURST_PERIOD_MS ms."""
    b = None
    if bursting:
        log = f"/tmp/ixb-{PID}-burster-{net.ixora}.log"
        b = net.server([sys.executable, "-c", BURSTER, CLI, str(BURST_SINK_PORT), str(BURST_CONNS),
                        str(BURST_KB), str(BURST_PERIOD_MS), str(secs + 3)], log)
        t = time.time()
        while "connected" not in Path(log).read_text():
            if b.poll() is not None or time.time() - t > 20:
                raise RuntimeError("the bursting program did not connect:\n" + be.stop_proc(b))
            time.sleep(0.1)
        time.sleep(1)  # its bursts under way
    try:
        q = sockperf_run(net, "ping-pong", secs, tcp=True)
    finally:
        if b is not None:
            b.wait(timeout=secs + 30)
            out = Path(b._log).read_text()
            be.stop_proc(b)
    q["bursting"] = bursting
    # (CPU 0's time and socket calls would count the bursting program's.)
    q.pop("cpu_us_per_msg", None)
    q.pop("user_share", None)
    if b is not None:
        m = re.search(r"sent (\d+) bursts (\d+)", out)
        if not m:
            raise RuntimeError(f"the bursting program did not finish:\n{out[-2000:]}")
        q["burst_bytes"], q["bursts"] = int(m.group(1)), int(m.group(2))
    return q


def burst(args, prog_bar):
    """A latency-sensitive server beside a program that writes in bursts
    over many connections: sockperf's TCP server (ping-pong from the Linux
    client) alone, then with the bursting program on the same CPU (for
    Ixora: both programs on the one service); kernel and Ixora runs
    alternate `--repeat` times, the run of median p99.9 kept."""
    results = []
    argv = ["sockperf", "server", "--tcp", "-i", SRV, "-p", str(BURST_PORT)]
    with side_by_side("burst", lambda _: argv, client_addr=True) as nets:
        sinks = [be.start(be.pinned(1, *be.in_ns(nets[ixora].cl, sys.executable, "-c", BURST_SINK,
                                                   CLI, str(BURST_SINK_PORT),
                                                   str(20 * args.duration * args.repeat + 300))),
                          f"/tmp/ixb-{PID}-sink-{ixora}.log") for ixora in (False, True)]
        try:
            for ixora in (False, True):  # warm-up (ARP, the server up)
                sockperf_run(nets[ixora], "ping-pong", 1, tcp=True)
            for bursting in (False, True):
                best = alternate(args.repeat, lambda ixora: burst_run(nets[ixora], args.duration,
                                                                      bursting),
                                 lambda q: q.get("p999_us", q["p99_us"]))
                prog_bar.step(f"burst {'with' if bursting else 'without'} the bursting program\n")
                keep(best, results, "all_p999", lambda q: (
                    f"  burst {'on ' if q['bursting'] else 'off'} {q['stack']:7s}"
                    f" p50 {q['p50_us']:7.1f} us  p99 {q['p99_us']:8.1f} us"
                    f"  p99.9 {q.get('p999_us', 0):8.1f} us"
                    f"  p99.99 {q.get('p9999_us', 0):8.1f} us  max {q.get('max_us', 0):8.1f} us"
                    + (f"  burst {q['burst_bytes'] / 1e6:.0f} MB" if q["bursting"] else "")))
        finally:
            for s in sinks:
                be.stop_proc(s)
    return results


def write_burst(results, args, cmdline):
    """sockets-burst.{json,md,png}."""
    name, meta, command = part_json("burst", results, args, cmdline, duration_s=args.duration,
                                    burst_conns=BURST_CONNS, burst_kb=BURST_KB,
                                    burst_period_ms=BURST_PERIOD_MS)
    L = ["# One program's burst beside a latency-sensitive server: the kernel vs `ixora run`", "",
         command +
         "sockperf's TCP server pinned to CPU 0 (with Ixora: the service on CPU "
         f"{SERVICE_CPU}), the Linux `sockperf ping-pong --tcp` client on CPU 1 (64-byte "
         f"messages, one in flight, {args.duration} s); with the bursting program: a second "
         "program on CPU 0 (under `ixora run`: a second application of the same service) "
         f"holding {BURST_CONNS} connections to a reader in the client's namespace (CPU 1) and "
         f"writing up to {BURST_KB} kB on each every {BURST_PERIOD_MS} ms (what each socket "
         "takes: about 26 MB a burst when the reader keeps up). The server's answers wait for "
         "whatever else the CPU, and for Ixora the service, is doing: the tail shows how long "
         "one program's burst holds up another's packets. Kernel and Ixora runs alternate "
         f"({args.repeat} each, the run of median p99.9 kept).", "",
         RX_TEXT[RX], "",
         "| bursting program | stack | round trips/s | p50 µs | p99 µs | p99.9 µs | p99.99 µs "
         "| max µs | burst MB/s | runs, p99.9 µs |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for q in results:
        mbs = (f"{q['burst_bytes'] / 1e6 / (args.duration + 3):.0f}" if q["bursting"] else "—")
        L.append(f"| {'yes' if q['bursting'] else 'no'} | {q['stack']} | {q['mps'] / 1000:.1f} k | "
                 f"{q['p50_us']:.1f} | {q['p99_us']:.1f} | {q.get('p999_us', 0):.0f} | "
                 f"{q.get('p9999_us', 0):.0f} | {q.get('max_us', 0):.0f} | {mbs} | "
                 + ", ".join(f"{x:.0f}" for x in q["all_p999"]) + " |")
    L += ["", "| bursting program | metric | kernel | Ixora | ratio |", "|---|---|---:|---:|---:|"]
    for bursting in (False, True):
        k, i = (next((q for q in results if q["stack"] == st and q["bursting"] == bursting), None)
                for st in ("kernel", "ixora"))
        if not (k and i):
            continue
        for key, what in (("p50_us", "median round trip, µs"), ("p99_us", "p99, µs"),
                          ("p999_us", "p99.9, µs"), ("p9999_us", "p99.99, µs"),
                          ("max_us", "longest round trip, µs")):
            if key in k and key in i:
                L.append(f"| {'yes' if bursting else 'no'} | {what} | {k[key]:.0f} | {i[key]:.0f} | "
                         f"**{i[key] / k[key]:.2f}**× |")
    L += ["", "A ratio over 1 is Ixora slower. The service gives one program's transmit rings at "
          "most 256 KiB per engine cycle (`TX_BUDGET`; docs/ARCHITECTURE.md, \"One program's "
          "burst\"); before it, a burst was copied into the stack in one look.", "",
          f"Plot: `{name}.png`.", ""]
    plt = write_md(name, L)
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    keys = [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9"), ("p9999_us", "p99.99"),
            ("max_us", "max")]
    for ax, bursting in zip(axes, (False, True)):
        for n, (stack, lab, col) in enumerate((("kernel", "kernel", "C0"),
                                               ("ixora", "ixora run", "C1"))):
            q = next((q for q in results if q["stack"] == stack and q["bursting"] == bursting), None)
            if q is None:
                continue
            ax.bar([x + n * 0.4 for x in range(len(keys))], [q.get(k, 0) for k, _ in keys], 0.4,
                   color=col, label=lab)
        ax.set_xticks([x + 0.2 for x in range(len(keys))], [lab for _, lab in keys])
        ax.set_yscale("log")
        ax.set_title("with the bursting program" if bursting else "alone")
        ax.set_ylabel("round trip, µs")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


def write_udp(results, args, cmdline):
    """sockets-udp.{json,md,png}."""
    name, meta, command = part_json("udp", results, args, cmdline, duration_s=args.duration, listen_any=LISTEN_ANY)

    def pick(stack, mode, rate=None, size=64):
        return next((q for q in results if q["stack"] == stack and q["mode"] == mode
                     and q["target_mps"] == rate and q.get("size", 64) == size), None)

    L = ["# UDP: sockperf's server on the kernel vs under `ixora run`", "",
         command +
         f"`sockperf server` (one UDP socket, blocking `recvfrom`, `sendto`) pinned to CPU 0 "
         f"(with Ixora: the service on CPU {SERVICE_CPU}); the Linux `sockperf` client on CPU 1: "
         "`ping-pong` (one message in flight; 64 bytes, and longer ones that travel in IPv4 "
         "fragments both ways: 8000 bytes is 6 frames each way, reassembled by the server's stack "
         "and by the client's) and `under-load` (64 bytes) at a fixed rate with every "
         "message answered; round-trip times (`--full-rtt`), ping-pong payloads checked "
         f"(`--data-integrity`), {args.duration} s per run; kernel and Ixora runs alternate "
         f"({args.repeat} each, the run of median p99 kept). Server CPU µs/msg: CPU 0 busy time "
         "(the server, its system calls and softirqs, and for Ixora the service) per answered "
         "message. Dropped: messages never answered (UDP: lost to a full queue somewhere).", "",
         *(["The server binds to any address (`--listen-any`: `-i 0.0.0.0`), not to the server's "
            "address: under `ixora run` its socket then also has a kernel side, bound to the same "
            "port for 127.0.0.1 and the kernel's other addresses, which its receive calls also "
            "watch. Compare with a run without the option.", ""] if LISTEN_ANY else []),
         RX_TEXT[RX], "",
         "| mode | bytes | target msg/s | stack | answered msg/s | avg µs | p50 µs | p99 µs | dropped "
         "| server CPU µs/msg | user-space share |",
         "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for q in results:
        L.append(f"| {q['mode']} | {q.get('size', 64)} | {q['target_mps'] or 'max'} | {q['stack']} | "
                 f"{q['mps'] / 1000:.1f} k | {q.get('avg_us', 0):.0f} | {q['p50_us']:.0f} | "
                 f"{q['p99_us']:.0f} | {q.get('dropped', 0)} | {q['cpu_us_per_msg'] or 0:.1f} | "
                 + (f"{q['user_share'] * 100:.2f}%" if q["user_share"] is not None else "—") + " |")
    L += ["", "| metric | kernel | Ixora | ratio |", "|---|---:|---:|---:|"]
    for size in sorted({q.get("size", 64) for q in results if q["mode"] == "ping-pong"}):
        k, i = pick("kernel", "ping-pong", None, size), pick("ixora", "ping-pong", None, size)
        if not (k and i):
            continue
        what = f"{size} B" + (", in fragments" if size > 1472 else "")
        L.append(f"| ping-pong messages/s ({what}, one in flight) | {k['mps'] / 1000:.1f} k | "
                 f"{i['mps'] / 1000:.1f} k | **{i['mps'] / k['mps']:.2f}×** |")
        L.append(f"| ping-pong median round trip ({what}), µs | {k['p50_us']:.0f} | "
                 f"{i['p50_us']:.0f} | {i['p50_us'] / k['p50_us']:.2f} |")
        if k["cpu_us_per_msg"] and i["cpu_us_per_msg"]:
            L.append(f"| ping-pong server CPU µs per message ({what}) | {k['cpu_us_per_msg']:.1f} | "
                     f"{i['cpu_us_per_msg']:.1f} | {i['cpu_us_per_msg'] / k['cpu_us_per_msg']:.2f} |")

    def best(stack, limit):
        ok = [q["target_mps"] for q in results if q["stack"] == stack and q["mode"] == "under-load"
              and q["p99_us"] <= limit and q.get("dropped", 0) <= 0.001 * q["observations"]]
        return max(ok, default=0)
    for limit in (500, 2000):
        kb, ib = best("kernel", limit), best("ixora", limit)
        L.append(f"| highest rate with p99 ≤ {limit} µs and ≤ 0.1% dropped | {kb / 1000:.0f} k | "
                 f"{ib / 1000:.0f} k | " + (f"**{ib / kb:.2f}×**" if kb else "—") + " |")
    rates = sorted({q["target_mps"] for q in results if q["mode"] == "under-load"})
    if rates:
        top = rates[-1]
        k, i = pick("kernel", "under-load", top), pick("ixora", "under-load", top)
        if k and i and k["cpu_us_per_msg"] and i["cpu_us_per_msg"]:
            L.append(f"| server CPU µs per message at {top / 1000:.0f} k/s | "
                     f"{k['cpu_us_per_msg']:.1f} | {i['cpu_us_per_msg']:.1f} | "
                     f"{i['cpu_us_per_msg'] / k['cpu_us_per_msg']:.2f} |")
    L += ["", f"Plot: `{name}.png`.", ""]
    plt = write_md(name, L)
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for stack, lab, col in (("kernel", "kernel", "C0"), ("ixora", "ixora run", "C1")):
        pts = sorted((q for q in results if q["stack"] == stack and q["mode"] == "under-load"),
                     key=lambda q: q["target_mps"])
        x = [q["mps"] / 1000 for q in pts]
        axes[0].plot(x, [q["p99_us"] for q in pts], marker="o", color=col, label=f"{lab} p99")
        axes[0].plot(x, [q["p50_us"] for q in pts], marker=".", linestyle="--", color=col,
                     label=f"{lab} p50")
        axes[1].plot(x, [q["cpu_us_per_msg"] or 0 for q in pts], marker="o", color=col, label=lab)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("answered k messages/s")
    axes[0].set_ylabel("round trip, µs")
    axes[0].set_title("sockperf under-load: latency")
    axes[0].legend()
    axes[1].set_xlabel("answered k messages/s")
    axes[1].set_ylabel("server CPU µs per message")
    axes[1].set_title("server CPU per message")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{name}.png", dpi=110)


def loadgen_run(net, args, wl, rate):
    """One `ixora loadgen memcached` run against the server of `net`: its
    JSON point, with the user-space share, server CPU and sleeps per
    request added."""
    net.pin_napi()
    full0 = net.stats()
    c0 = cpu0_busy()
    cmd = [str(BIN), "loadgen", "memcached", "--iface", net.b, "--ip", f"{GEN}/24",
           "--server", f"{SRV}:11211", "--workload", wl, "--conns", str(args.conns),
           "--depth", "4", "--rate", str(rate), "--duration", str(args.duration),
           "--warmup", "1", "--cpus", "1", *xdp_args("client")]
    r = subprocess.run(be.pinned(1, *be.in_ns(net.cl, *cmd)), capture_output=True,
                       text=True, timeout=args.duration + 90)
    c1 = cpu0_busy()
    full1 = net.stats()
    q = None
    for line in r.stdout.splitlines():
        if line.strip().startswith("{"):
            try:
                q = json.loads(line)
            except json.JSONDecodeError:
                pass
    if q is None:
        raise RuntimeError(f"loadgen produced nothing:\n{r.stderr[-3000:]}")
    q["user_share"] = share(user_calls(full0), user_calls(full1)) if net.ixora else None
    if net.ixora:
        q["calls"] = call_deltas(full0, full1)
    # Server CPU (CPU 0 busy: memcached, its system calls and softirqs, and
    # for Ixora the service) per request over the whole run (warm-up
    # included, at the achieved rate).
    done = q.get("achieved_rps", 0) * (args.duration + 1)
    q["cpu_us_per_req"] = (c1 - c0) / done * 1e6 if done else None
    if net.ixora and full0 and full1:
        q["sleeps_per_req"] = (waits(full1) - waits(full0)) / done if done else None
    time.sleep(1.2)  # AF_XDP: a queue is busy for ~1 s after its socket closes
    return q


def memcached(args, prog_bar, results):
    """Both stacks set up side by side; at each rate the kernel run and the
    Ixora run follow each other (so drift of the machine hits both), each
    `--repeat` times, keeping the run of median p99."""
    rates = [int(x) for x in args.rates.split(",")]
    argv = ["memcached", "-u", "root", "-p", "11211", "-U", "0", "-t", "1", "-c", "4096",
            "-l", SRV]
    with side_by_side("memcached", lambda _: argv) as nets:
        for wl in ("etc", "usr"):
            pts = {False: [], True: []}
            for rate in rates:
                best = alternate(args.repeat, lambda ixora: loadgen_run(nets[ixora], args, wl, rate),
                                 lambda q: q["latency_us"]["p99"])
                for ixora in (False, True):
                    q = best[ixora]
                    del q["stack"]
                    q["all_p99"] = q.pop("all")
                    pts[ixora].append(q)
                prog_bar.step(f"memcached {wl} {rate // 1000}k\n")
                k99 = best[False]["latency_us"]["p99"]
                print(f"  {wl} {rate // 1000}k: p99 kernel {k99:.0f} us, ixora "
                      f"{best[True]['latency_us']['p99']:.0f} us", flush=True)
                if rate == rates[0] and k99 > NOISY_P99_US and not args.keep_going:
                    # The kernel's own p99 at the lowest rate: if it already
                    # misses the target twice over, the machine (not a
                    # stack) sets the tail, and the sweep would say nothing
                    # of either stack (2026-11-28: 4.2 ms at 20 k while the
                    # stall probe saw 0.2%).
                    slow = "; ".join(f"{c} {v['slow_share'] * 100:.1f}%"
                                     for c, v in (SLOWDOWNS or {}).items())
                    why = (f"the kernel's own p99 at {rate // 1000} k requests/s is {k99:.0f} us "
                           f"(over {NOISY_P99_US} us): this machine cannot measure the p99 <= "
                           "500 us knee now (--keep-going runs the sweep anyway)"
                           + (f"; the CPUs ran at under half speed {slow} of the time" if slow else ""))
                    if args.only == "memcached":
                        raise SystemExit(f"bench_sockets: {why}; stopped, no results written")
                    print(f"  warning: {why}", flush=True)
            refine_knee(args, prog_bar, nets, wl, pts)
            for ixora in (False, True):
                ps = pts[ixora]
                results.append({"server": "memcached", "workload": wl,
                                "stack": "ixora" if ixora else "kernel", "points": ps,
                                "user_share": (sum(q["user_share"] or 0 for q in ps) / len(ps))
                                if ixora else None})
                print(f"  {wl} {'ixora' if ixora else 'kernel':7s} best rate with p99 <= 500 us: "
                      f"{best_rate(ps, 500) / 1000:.1f} k req/s; "
                      f"sustained: {sustained(ps) / 1000:.1f} k req/s", flush=True)


def refine_knee(args, prog_bar, nets, wl, pts):
    """Bisect each stack's p99 <= 500 us knee between its highest passing
    rate of the sweep and the next rate that failed (`--refine` steps, so a
    20 k step ends 2.5 k wide after 3), so that the IX Table 2 ratio is not
    the sweep's grid. At each step both stacks' probes alternate, `--repeat`
    times each, the run of median p99 kept; the probes join `pts` marked
    `refined`."""
    for _ in range(args.refine):
        probes = {}
        for ixora in (False, True):
            ok = [q["target_rps"] for q in pts[ixora] if meets(q)]
            lo = max(ok) if ok else 0
            above = [q["target_rps"] for q in pts[ixora] if q["target_rps"] > lo and not meets(q)]
            if not above:
                continue  # the knee is above the sweep: nothing to refine
            hi = min(above)
            mid = round((lo + hi) / 2 / 500) * 500
            if hi - lo > 1000 and lo < mid < hi:
                probes[ixora] = mid
        if not probes:
            break
        best = alternate(args.repeat, lambda ixora: loadgen_run(nets[ixora], args, wl, probes[ixora]),
                         lambda q: q["latency_us"]["p99"], stacks=tuple(probes))
        for ixora, q in best.items():
            del q["stack"]
            q["all_p99"] = q.pop("all")
            q["refined"] = True
            pts[ixora].append(q)
            pts[ixora].sort(key=lambda q: q["target_rps"])
        prog_bar.step(f"memcached {wl} knee: "
                      + ", ".join(f"{'ixora' if i else 'kernel'} {r / 1000:.1f}k" for i, r in probes.items())
                      + "\n")


def meets(q, limit_us=500, pct="p99"):
    """Whether point `q` kept its `pct` latency within `limit_us`, with no
    errors and the target reached (achieved >= 95% of target)."""
    return (q["latency_us"][pct] <= limit_us and q.get("errors", 0) == 0
            and q["achieved_rps"] >= 0.95 * q["target_rps"])


def best_rate(pts, limit_us=500, pct="p99"):
    """Highest achieved rate among the points that meet `limit_us`."""
    ok = [q["achieved_rps"] for q in pts if meets(q, limit_us, pct)]
    return max(ok) if ok else 0.0


STALL_PROBE = r"""
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
secs = float(sys.argv[2]); t0 = last = time.perf_counter_ns(); gaps = []
while last - t0 < secs * 1e9:
    t = time.perf_counter_ns()
    if t - last > 50_000:
        gaps.append(t - last)
    last = t
print(len(gaps), sum(gaps), max(gaps or [0]))
"""


def cpu_stalls(secs=2.0):
    """How much time a spinning thread loses in gaps > 50 µs on each CPU with
    nothing else of ours running (the hypervisor or host taking the vCPU).
    A request that meets such a gap waits for it: this bounds the tail
    latency any stack can show on this machine."""
    procs = [subprocess.Popen([sys.executable, "-c", STALL_PROBE, str(c), str(secs)],
                              stdout=subprocess.PIPE, text=True) for c in (0, 1)]
    out = {}
    for c, p in enumerate(procs):
        n, tot, mx = (int(x) for x in p.communicate(timeout=secs + 30)[0].split())
        out[f"cpu{c}"] = {"gaps_over_50us": n, "lost_share": tot / (secs * 1e9), "max_gap_us": mx / 1e3}
    return out


# Fixed work in chunks of about 50-100 µs: the chunks that took more than
# twice the median and less than 50 times it (the vCPU ran, slowly: not a
# stall, which the gap probe sees) and the longest run of them.
SLOW_PROBE = r"""
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
secs = float(sys.argv[2]); clock = time.perf_counter_ns
d = []; x = 1; t0 = clock(); end = t0 + int(secs * 1e9)
while t0 < end:
    for _ in range(400):
        x = (x * 1103515245 + 12345) & 0xffffffff
    t1 = clock(); d.append(t1 - t0); t0 = t1
med = sorted(d)[len(d) // 2]
slow = run = longest = 0
for v in d:
    if 2 * med < v < 50 * med:
        slow += v; run += v; longest = max(longest, run)
    else:
        run = 0
print(med, slow, sum(d), longest)
"""


def cpu_slowdowns(secs=3.0):
    """How much of the time each vCPU ran at under half its usual speed,
    both busy at once as in a run (fixed work in chunks; a chunk more than
    twice the median is slow). A shared host slows a vCPU without stopping
    it, for tens of ms at a time, which the gap probe (`cpu_stalls`) does
    not see: on 2026-11-28, with 0.14-0.24% of the time in gaps, the vCPUs
    ran slowly 3-14% of it, in runs of 20-100 ms, and the kernel's memcached
    p99 at 20 k requests/s was 2.6-11 ms."""
    procs = [subprocess.Popen([sys.executable, "-c", SLOW_PROBE, str(c), str(secs)],
                              stdout=subprocess.PIPE, text=True) for c in (0, 1)]
    out = {}
    for c, p in enumerate(procs):
        med, slow, tot, longest = (int(x) for x in p.communicate(timeout=secs + 30)[0].split())
        out[f"cpu{c}"] = {"slow_share": slow / max(tot, 1), "longest_slow_ms": longest / 1e6,
                          "chunk_us": med / 1e3}
    return out


# A process on CPU 1 that asks to be interrupted by the global expedited
# membarrier (which IPIs every CPU running such a process) and spins.
IPI_TARGET = r"""
import ctypes, os, sys, time
os.sched_setaffinity(0, {1})
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "1" and libc.syscall(324, 4, 0, 0) != 0:  # REGISTER_GLOBAL_EXPEDITED
    sys.exit("membarrier: errno %d" % ctypes.get_errno())
print("ready", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    pass
"""


def ipi_cost(n=3000):
    """Round trip of one inter-processor interrupt from CPU 0 to a busy
    CPU 1, in µs: `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` from CPU 0
    interrupts CPU 1 and waits for it; the same call with no registered
    process on CPU 1 (no IPI) is subtracted. RPS hands each veth frame
    burst to the other CPU with one, so on a VM where it is slow both
    stacks spend much of CPU 0 on them. None where membarrier is missing."""
    if platform.machine() != "x86_64" or (os.cpu_count() or 1) < 2:
        return None  # syscall number 324 is x86-64's; CPU 1 is needed
    libc = ctypes.CDLL(None, use_errno=True)
    before = os.sched_getaffinity(0)
    per = {}
    try:
        os.sched_setaffinity(0, {0})
        for register in (True, False):
            p = subprocess.Popen([sys.executable, "-c", IPI_TARGET, "1" if register else "0", "10"],
                                 stdout=subprocess.PIPE, text=True)
            try:
                if p.stdout.readline().strip() != "ready":
                    return None
                t0 = time.perf_counter()
                for _ in range(n):
                    if libc.syscall(324, 2, 0, 0) != 0:  # GLOBAL_EXPEDITED
                        return None
                per[register] = (time.perf_counter() - t0) / n * 1e6
            finally:
                p.kill()
                p.wait()
    finally:
        os.sched_setaffinity(0, before)
    return {"round_trip_us": round(per[True] - per[False], 2),
            "call_without_ipi_us": round(per[False], 2)}


def sustained(pts):
    """Highest rate reached (achieved >= 95% of target) with avg <= 1 ms."""
    ok = [q["achieved_rps"] for q in pts
          if q["achieved_rps"] >= 0.95 * q["target_rps"] and q["latency_us"]["avg"] <= 1000
          and q.get("errors", 0) == 0]
    return max(ok) if ok else 0.0


RX_TEXT = {
    "softirq": "Receive processing (`--rx softirq`): RPS steers each veth end's receive to its "
               "own side's CPU, and Ixora's service and the load generators attach XDP in skb "
               "(generic) mode, which runs after RPS: every receive path — the kernel's TCP, "
               "Ixora's XDP and AF_XDP copy, the generators' — runs in the receiving side's "
               "softirq, as with a NIC whose interrupts go to that side's core. (Generic XDP "
               "costs Ixora an skb per frame that a NIC's native XDP would not.) Other "
               "placements: sockets-napi.md (a NAPI thread per end), sockets-rps.md (native "
               "XDP, on the sending CPU), sockets-no-rps.md (everything on the sending CPU).",
    "napi": "Receive processing (`--rx napi`): each veth end receives in a NAPI thread of its "
            "own (threaded NAPI, GRO on) pinned to its side's CPU, so the whole receive path — "
            "XDP and the AF_XDP copy, or the kernel's TCP receive — runs on the receiving side's "
            "CPU, but in a thread, one more context switch per burst for both stacks. The "
            "default run (sockets.md) receives in softirq instead.",
    "rps": "Receive steering (`--rx rps`): RPS puts the kernel's TCP receive of each veth end on "
           "that side's CPU; native XDP — Ixora's AF_XDP copy and the load generator's — runs "
           "before RPS, on the sending CPU (the client's CPU pays Ixora's receive copy, the "
           "server's pays the generator's). The default run (sockets.md) puts XDP on the "
           "receiving CPU too.",
    "client-native": "Receive placement (`--rx client-native`): the server's end as in the "
                     "default run (RPS to CPU 0; Ixora's service in generic XDP after it), "
                     "but the load generator attaches native XDP, which runs on the sending "
                     "CPU: a response's way into the generator costs CPU 0 the generator's XDP "
                     "and AF_XDP copy, and no IPI to CPU 1, as a NIC's transmit costs the "
                     "server no interrupt on the client's core. For both stacks the server's "
                     "transmit then sends no IPI; the default run (sockets.md) charges each "
                     "side its own receive.",
    "sender": "No receive steering (`--rx sender`, `--no-rps`): a veth receives on the sender's "
              "CPU, so the kernel server's TCP receive runs on the client's CPU (CPU 1) and the "
              "client's TCP receive on the server's (CPU 0), for both stacks. The default run "
              "(sockets.md) puts each side's receive on its own CPU.",
}


def write(results, args, cmdline):
    OUT.mkdir(parents=True, exist_ok=True)
    _, meta, command = part_json(None, results, args, cmdline, clients=list(CLIENTS),
                                 web_conns=WEB_CONNS, listen_any=LISTEN_ANY, idle_conns=IDLE_CONNS)
    L = ["# Sockets benchmark: unmodified servers on the kernel vs under `ixora run`", "",
         command +
         f"Server program pinned to CPU 0, the Ixora service to CPU {SERVICE_CPU}"
         + (" (polling)" if "--poll" in SERVE_EXTRA else "") + ", client to CPU 1. "
         "Both stacks are up side by side; at each point kernel and Ixora runs alternate "
         f"({meta.get('repeat', 1)} each; the median kept). "
         "A shared, noisy machine: read the ratios.", "",
         RX_TEXT[RX], ""]
    if STALLS:
        L += ["CPU stalls measured before the run (a thread spinning alone on each CPU, gaps > 50 µs): "
              + "; ".join(f"{c.upper()} {v['lost_share'] * 100:.2f}% of the time in {v['gaps_over_50us']} gaps, "
                          f"longest {v['max_gap_us'] / 1000:.2f} ms" for c, v in STALLS.items())
              + ". A request that meets a stall on either CPU waits it out, whatever the stack: when stalls "
              "cover more than about 1% of the time, no stack can keep p99 ≤ 500 µs here, and the "
              "p90 and p99 ≤ 2 ms rows say more.", ""]
    if SLOWDOWNS:
        L += ["CPU slowdowns measured before the run (fixed work in chunks on both CPUs at once; a "
              "chunk taking over twice the median ran at under half speed): "
              + "; ".join(f"{c.upper()} slow {v['slow_share'] * 100:.1f}% of the time, longest run "
                          f"{v['longest_slow_ms']:.1f} ms" for c, v in SLOWDOWNS.items())
              + ". A shared host slows a vCPU without stopping it; a server slowed for tens of ms "
              "falls behind its load and its queue takes as long again to drain, for either stack.", ""]
    if IPI:
        L += [f"An inter-processor interrupt from CPU 0 to a busy CPU 1 took {IPI['round_trip_us']:.1f} µs "
              "there and back (membarrier, measured before the run; a few µs on bare metal). RPS hands "
              "each burst of veth frames to the other side's CPU with one, so both stacks spend a large "
              "part of CPU 0 on them at high load (docs/ARCHITECTURE.md, \"Departures\").", ""]
    web_rows = [r for r in results if r["server"] in WEB_SERVERS]
    if web_rows:
        idle = meta.get("idle_conns", 0)
        L += [f"## Web servers, 20 B file, {meta.get('web_conns', 32)} connections"
              + (f", and {idle:,} more held open and idle" if idle else ""), "",
              *([f"Before each run a program on CPU 1 opens {idle:,} more keep-alive "
                 "connections from the client's namespace, has each served once, and holds "
                 "them idle until the run ends: the server keeps them all in its event loop "
                 "(and, under `ixora run`, in its epoll set and the service's socket table) "
                 "while the clients load the others.", ""] if idle else []),
              "Clients: `ixora loadgen http` (its TCP in user space, so it saturates last) and "
              "wrk -t1 (the kernel's TCP). Server CPU µs/req: CPU 0 busy time (the server, its "
              "system calls and softirqs, and for Ixora the service) per request; client CPU: "
              "how busy CPU 1 was (near 100%: the client, not the server, set the pace).", "",
              *(["node: one Node.js process; node-cluster: a primary that accepts each connection and "
                 "hands it to one of two workers over a Unix socket (SCM_RIGHTS), as Node.js's cluster "
                 "module does by default — under `ixora run` the connection moves to the worker through "
                 "the service (PASS and CLAIM, two control round trips per connection); on Linux the "
                 "worker shares the kernel's socket. node-cluster-none: the cluster's other "
                 "scheduling (`NODE_CLUSTER_SCHED_POLICY=none`): the primary hands its bound socket "
                 "to each worker once and the workers accept themselves (on Linux from the one "
                 "shared socket; under `ixora run` each worker's socket is a member of the port's "
                 "group).", ""]
                if any(r["server"].startswith("node") for r in web_rows) else []),
              *(["apache: Apache 2.4's event MPM, one process (as nginx's one worker) of 160 "
                 "worker threads and a listener thread, children as user www-data: a worker "
                 "serves a request and hands the kept-alive connection back to the listener's "
                 "epoll set, which the listener sleeps on (under `ixora run` that epoll_ctl from "
                 "another thread reaches the sleeper through its nudge line).", ""]
                if any(r["server"] == "apache" for r in web_rows) else []),
              *(["nginx-proxy: nginx as a reverse proxy (`proxy_pass`) to a backend nginx on the "
                 "client's side (the kernel's TCP, on CPU 1 with the client), each request opening "
                 "an upstream connection from the proxy (under `ixora run` a connection Ixora "
                 "makes: one control round trip each); nginx-proxy-keepalive: the same with "
                 "upstream keep-alive (`keepalive 32`), the upstream connections reused. wrk is "
                 "their only client: the load generator's XDP program would take the backend's "
                 "frames on the client's interface.", ""]
                if any(r["server"].startswith("nginx-proxy") for r in web_rows) else []),
              *(["varnish: Varnish 7.1, the HTTP cache, with its defaults (two pools of worker "
                 "threads: a thread per connection being served, which waits in `poll` for the "
                 "connection's next request), its backend a kernel nginx on the client's side "
                 "(CPU 1): the file is fetched once and then served from the cache. Its cache "
                 "process runs as user vcache. wrk is its only client, as for the proxies.", ""]
                if any(r["server"] == "varnish" for r in web_rows) else []),
              *(["The servers listen on any address (`--listen-any`: nginx `listen PORT`, lighttpd "
                 "without `server.bind`), not on the server's address: under `ixora run` such a "
                 "listener also listens in the kernel, for 127.0.0.1 and the kernel's other "
                 "addresses, and `accept` asks the kernel whenever Ixora's queue is empty. "
                 "Compare with a run without the option.", ""] if meta.get("listen_any") else []),
              "| client | server | mode | kernel req/s | Ixora req/s | ratio | kernel CPU µs/req "
              "| Ixora CPU µs/req | CPU ratio | client CPU (k/i) | user-space share | errors (k/i) |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for client in ("loadgen", "wrk"):
            for srv in WEB_SERVERS:
                for mode in ("keepalive", "10_per_conn"):
                    def pick(stack):
                        return next((r for r in web_rows if r["server"] == srv and r["mode"] == mode
                                     and r["stack"] == stack
                                     and r.get("client", "wrk") == client), None)
                    k, i = pick("kernel"), pick("ixora")
                    if not k or not i:
                        continue
                    ratio = i["rps"] / k["rps"] if k["rps"] else 0
                    cr = ((i["cpu_us_per_req"] / k["cpu_us_per_req"])
                          if k["cpu_us_per_req"] and i["cpu_us_per_req"] else 0)
                    cc = "/".join(f"{100 * (x.get('client_cpu_busy') or 0):.0f}%" for x in (k, i))
                    name = "ixora loadgen http" if client == "loadgen" else "wrk"
                    L.append(f"| {name} | {srv} | {mode} | {k['rps'] / 1000:.1f} k | "
                             f"{i['rps'] / 1000:.1f} k | **{ratio:.2f}×** | "
                             f"{k['cpu_us_per_req'] or 0:.1f} | {i['cpu_us_per_req'] or 0:.1f} | "
                             f"{cr:.2f} | {cc} | {(i['user_share'] or 0) * 100:.2f}% | "
                             f"{k['errors']}/{i['errors']} |")
        L += ["", "Target (issue 4): ≥ 1.5× requests/s, or ≤ ½ CPU per request where the client saturates first.", ""]
    mc = [r for r in results if r["server"] == "memcached"]
    if mc:
        L += ["## memcached (-t 1), open-loop load from `ixora loadgen memcached`", "",
              "Server CPU µs/req: CPU 0 busy time (the server, its system calls and softirqs, "
              "and for Ixora the service) over the run, per request. Sleeps/req: how often the "
              "server's threads slept in the kernel per request (Ixora). A target marked * is a "
              "probe of the bisection (`--refine`) that narrows each stack's p99 ≤ 500 µs knee "
              "between two rates of the sweep, so that the ratio below is not the sweep's grid.", "",
              "| workload | stack | target | achieved | avg µs | p99 µs | errors | server CPU µs/req "
              "| sleeps/req | user-space share |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

        def opt(v, fmt):
            return format(v, fmt) if v is not None else "—"
        for r in mc:
            for q in r["points"]:
                star = "*" if q.get("refined") else ""
                L.append(f"| {r['workload']} | {r['stack']} | {q['target_rps'] / 1000:g} k{star} | "
                         f"{q['achieved_rps'] / 1000:.1f} k | {q['latency_us']['avg']:.0f} | "
                         f"{q['latency_us']['p99']:.0f} | {q.get('errors', 0)} | "
                         f"{opt(q.get('cpu_us_per_req'), '.1f')} | {opt(q.get('sleeps_per_req'), '.2f')} | "
                         + (f"{q['user_share'] * 100:.2f}% |" if q.get("user_share") is not None else "— |"))
        L += ["", "| workload | metric | kernel | Ixora | ratio |", "|---|---|---:|---:|---:|"]
        for wl in ("etc", "usr"):
            k = next((r for r in mc if r["workload"] == wl and r["stack"] == "kernel"), None)
            i = next((r for r in mc if r["workload"] == wl and r["stack"] == "ixora"), None)
            if not (k and i):
                continue
            lo_k, lo_i = (next(q for q in r["points"] if not q.get("refined")) for r in (k, i))
            L.append(f"| {wl} | median latency at the lowest rate ({lo_k['target_rps'] / 1000:.0f} k/s), µs | "
                     f"{lo_k['latency_us']['p50']:.0f} | {lo_i['latency_us']['p50']:.0f} | "
                     f"{lo_i['latency_us']['p50'] / lo_k['latency_us']['p50']:.2f} |")
            for name, f in (("highest rate with p99 ≤ 500 µs (IX Table 2)", lambda p: best_rate(p, 500)),
                            ("highest rate with p90 ≤ 500 µs", lambda p: best_rate(p, 500, "p90")),
                            ("highest rate with p99 ≤ 2 ms", lambda p: best_rate(p, 2000)),
                            ("highest rate sustained with avg ≤ 1 ms", sustained)):
                bk, bi = f(k["points"]), f(i["points"])
                if bk:
                    ratio = f"**{bi / bk:.2f}×**"
                elif bi:
                    # No ratio: the kernel met it at no rate, down to the
                    # lowest probed (the machine's floor, not a multiple).
                    low = min(q["target_rps"] for q in k["points"])
                    ratio = f"— (kernel: at no rate, {low / 1000:g} k the lowest tried)"
                else:
                    ratio = "—"
                L.append(f"| {wl} | {name} | {bk / 1000:.1f} k | {bi / 1000:.1f} k | {ratio} |")
            L.append(f"| {wl} | Ixora socket calls resolved in user space (mean over rates) | | "
                     f"{(i['user_share'] or 0) * 100:.2f}% | |")
        L += ["", "Target (issue 4): ≥ 2× the kernel's rate at p99 ≤ 500 µs (IX Table 2).", ""]
    L += [f"Plots: `{NAME}.png`.", ""]
    (OUT / f"{NAME}.md").write_text("\n".join(L))
    plots(results)


def plots(results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots", file=sys.stderr)
        return
    mc = [r for r in results if r["server"] == "memcached"]
    web_rows = [r for r in results if r["server"] in WEB_SERVERS]
    # A panel for the web servers if they were measured (`--only memcached`
    # has none), and one per memcached workload.
    panels = (1 if web_rows or not mc else 0) + (2 if mc else 0)
    labels, kv, iv = [], [], []
    for client in ("loadgen", "wrk"):
        for srv in WEB_SERVERS:
            for mode in ("keepalive", "10_per_conn"):
                k, i = (next((r for r in web_rows if r["server"] == srv and r["mode"] == mode
                              and r["stack"] == st and r.get("client", "wrk") == client), None)
                        for st in ("kernel", "ixora"))
                if k and i:
                    name = srv.replace("-", "-\n")  # (node-cluster-none: narrow)
                    labels.append(f"{name}\n{mode.replace('_per_conn', '/conn')}\n{client}")
                    kv.append(k["rps"] / 1000)
                    iv.append(i["rps"] / 1000)
    # (Wide enough for every web bar's three-line label.)
    fig, axes = plt.subplots(1, panels, figsize=(max(9, 0.8 * len(labels)) + 5 * (panels - 1), 4.8))
    axes = list(axes) if panels > 1 else [axes]
    mc_axes = axes[-2:] if mc else []
    if panels > len(mc_axes):
        x = range(len(labels))
        ax = axes[0]
        ax.bar([p - 0.2 for p in x], kv, 0.4, label="kernel")
        ax.bar([p + 0.2 for p in x], iv, 0.4, label="ixora run")
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels)
        ax.set_ylabel("k requests/s")
        ax.set_title(f"20 B file, {WEB_CONNS} connections"
                     + (f" (+{IDLE_CONNS:,} idle)" if IDLE_CONNS else ""))
        ax.legend()
    for ax, wl in zip(mc_axes, ("etc", "usr")):
        for r in mc:
            if r["workload"] != wl:
                continue
            # The bisection's probes come after the sweep: by rate.
            pts = sorted(r["points"], key=lambda q: q["achieved_rps"])
            xs = [q["achieved_rps"] / 1000 for q in pts]
            ax.plot(xs, [q["latency_us"]["p99"] for q in pts], "o-", label=f"{r['stack']} p99")
            ax.plot(xs, [q["latency_us"]["avg"] for q in pts], "x--", label=f"{r['stack']} avg")
        ax.axhline(500, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("achieved k requests/s")
        ax.set_ylabel("latency µs")
        ax.set_title(f"memcached {wl.upper()}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / f"{NAME}.png", dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5, help="seconds per measurement (default 5)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per point: wrk (the median requests/s kept) and loadgen (the "
                         "run of median p99 kept; kernel and Ixora runs alternate)")
    ap.add_argument("--rates", default="20000,40000,60000,80000,100000,120000,150000,200000",
                    help="memcached target rates, requests/s (comma-separated)")
    ap.add_argument("--refine", type=int, default=3,
                    help="bisection steps that narrow each stack's p99 <= 500 us knee between "
                         "two rates of --rates (default 3: a 20 k step ends 2.5 k wide; 0: off)")
    ap.add_argument("--keep-going", action="store_true",
                    help="memcached: run the sweep even when the kernel's own p99 at the lowest "
                         f"rate is over {NOISY_P99_US} us (by default the run stops there: the "
                         "machine, not a stack, sets the tail)")
    ap.add_argument("--conns", type=int, default=16,
                    help="memcached load generator's connections (default 16; another number "
                         "writes files with a -connsN suffix)")
    ap.add_argument("--udp-rates", default="20000,40000,60000,80000,100000,120000",
                    help="sockperf under-load rates, messages/s (comma-separated)")
    ap.add_argument("--udp-sizes", default="64,8000",
                    help="sockperf ping-pong message sizes, bytes (comma-separated; over 1472 "
                         "a message travels in IPv4 fragments, reassembled at each end)")
    ap.add_argument("--only", choices=["web", "memcached", "bulk", "relay", "local", "udp", "node",
                                       "proxy", "pg", "apache", "redis", "ntp", "varnish", "burst",
                                       "path"],
                    help="run one part (web and memcached alone are written to sockets-web.* and "
                         "sockets-memcached.* (with the --rx suffix), leaving the whole "
                         "run's files as they were; "
                         "bulk: iperf3 both ways, written to sockets-bulk.*; "
                         "relay: HAProxy relaying an iperf3 stream each way, by splice and by "
                         "copy, sockets-relay.*; "
                         "local: redis-benchmark to redis-server on one host, sockets-local.*; "
                         "udp: sockperf's UDP server, sockets-udp.*; "
                         "node: a Node.js HTTP server alone and as a two-worker cluster, whose "
                         "primary hands each connection to a worker, sockets-node.*; "
                         "proxy: nginx as a reverse proxy to a backend on the client's side, "
                         "with and without upstream keep-alive, sockets-proxy.*; "
                         "pg: PostgreSQL with pgbench (select-only, TPC-B-like), sockets-pg.*; "
                         "redis: redis-server with redis-benchmark from the client's side "
                         "(kept connections, pipelined, a connection per request), "
                         "sockets-redis.*; "
                         "apache: Apache's event MPM, one process of 160 threads, "
                         "sockets-apache.*; "
                         "varnish: the Varnish HTTP cache, its backend on the client's side, "
                         "sockets-varnish.*; "
                         "ntp: chronyd as an NTP server, measured by a client chronyd: the NTP "
                         "delay, which receive timestamps make (sockets-ntp.*); "
                         "burst: sockperf's TCP ping-pong beside a program writing bursts over "
                         f"{BURST_CONNS} connections, the tail of the round trips "
                         "(sockets-burst.*); "
                         "path: iperf3 each way over a lossy, reordering path that `ixora "
                         "impair` makes in a namespace between server and client (clean, 1%% "
                         "loss, 2%% reordering, both), sockets-path.*)")
    ap.add_argument("--path-delay-us", type=int, default=500,
                    help="path: one-way delay of the impaired path, µs (default 500)")
    ap.add_argument("--path-rate-mbps", type=int, default=500,
                    help="path: rate of each direction of the impaired path, Mbit/s (default "
                         "500; its drop-tail queue holds 256 KiB)")
    ap.add_argument("--spin-us", type=int, default=50,
                    help="ixora run --spin-us: how long a blocking call spins first (default 50)")
    ap.add_argument("--service-cpu", type=int, default=0,
                    help="CPU of `ixora serve` (default 0, with the server). 1 puts it on the "
                         "client's CPU: an experiment on the mechanism, not a fair comparison")
    ap.add_argument("--rx", choices=["softirq", "napi", "rps", "sender", "client-native"],
                    default="softirq",
                    help="where each veth end's receive processing runs. softirq (default): "
                         "RPS to the receiving side's CPU, with XDP attached in skb mode so that "
                         "it runs there too — every receive path (the kernel's TCP, Ixora's "
                         "AF_XDP copy, the load generators') in the receiver's softirq, as with "
                         "a NIC interrupting that side's core. napi: a NAPI thread per end "
                         "pinned to its side's CPU (sockets-napi.*). rps: as softirq but native "
                         "XDP, which runs on the sending CPU (sockets-rps.*). sender: everything "
                         "on the sending CPU, a veth's own way (sockets-no-rps.*). "
                         "client-native: as softirq, but the load generators attach native XDP, "
                         "so the server's transmit sends no IPI to the client's CPU, as with a "
                         "NIC (sockets-client-native.*)")
    ap.add_argument("--web-conns", type=int, default=128,
                    help="connections of the web clients (default 128: enough for the server, "
                         "not the client's round trips, to set the pace)")
    ap.add_argument("--idle-conns", type=int, default=0,
                    help="web: this many more keep-alive connections, each served once, held "
                         "open and idle from the client's namespace during every run (IX's "
                         "connection scalability: does a server with many idle connections "
                         "still serve the busy ones as fast?). The service gets enough "
                         "--slots; results go to files with an -idleN suffix")
    ap.add_argument("--no-rps", action="store_true", help="the same as --rx sender")
    ap.add_argument("--clients", default="loadgen,wrk",
                    help="web clients, comma-separated: loadgen (`ixora loadgen http`, the "
                         "client's TCP in user space) and wrk (the kernel's)")
    ap.add_argument("--servers", default="nginx,lighttpd",
                    help="web servers of the web part, comma-separated: nginx, lighttpd or both")
    ap.add_argument("--rt-priority", type=int, default=None,
                    help="ixora serve --rt-priority (default: the service's own default)")
    ap.add_argument("--ring", type=int, default=None,
                    help="ixora serve --ring: bytes per socket ring (default: the service's "
                         "64 KiB); the receive ring bounds the TCP window. Results get a "
                         "-ringN suffix")
    ap.add_argument("--idle-spin-us", type=int, default=None,
                    help="ixora serve --idle-spin-us: how long an idle service looks again "
                         "(yielding its CPU between looks) before it sleeps (default: the "
                         "service's own, 50). The look is CPU time on the server's CPU even "
                         "when it finds nothing; 0 turns it off. Results get an -idlespinN "
                         "suffix")
    ap.add_argument("--serve-poll", action="store_true",
                    help="run `ixora serve --poll` (the service spins instead of sleeping)")
    ap.add_argument("--listen-any", action="store_true",
                    help="nginx, lighttpd and sockperf's server listen on any address (nginx "
                         "`listen PORT`, sockperf -i 0.0.0.0), not on the server's address: under "
                         "`ixora run` such a socket also has a kernel side, for 127.0.0.1; results "
                         "go to files with a -listen-any suffix")
    args = ap.parse_args()
    global LISTEN_ANY
    LISTEN_ANY = args.listen_any
    global SPIN_US, SERVICE_CPU, SERVE_EXTRA, NAME, RX, CLIENTS, SERVERS, TMP, WEB_CONNS, IDLE_CONNS
    WEB_CONNS = args.web_conns
    IDLE_CONNS = args.idle_conns
    SPIN_US = args.spin_us
    RX = "sender" if args.no_rps else args.rx
    CLIENTS = tuple(c for c in args.clients.split(",") if c)
    if not CLIENTS or any(c not in ("loadgen", "wrk") for c in CLIENTS):
        sys.exit(f"bench_sockets: --clients {args.clients!r}: use loadgen, wrk or both")
    SERVERS = tuple(s for s in args.servers.split(",") if s)
    if not SERVERS or any(s not in ("nginx", "lighttpd") for s in SERVERS):
        sys.exit(f"bench_sockets: --servers {args.servers!r}: use nginx, lighttpd or both")
    SERVICE_CPU = args.service_cpu
    SERVE_EXTRA = ["--poll"] if args.serve_poll else []
    if args.rt_priority is not None:
        SERVE_EXTRA += ["--rt-priority", str(args.rt_priority)]
    if args.ring is not None:
        SERVE_EXTRA += ["--ring", str(args.ring)]
    global PATH, PATH_BASE
    if args.only == "path":
        PATH = True
        PATH_BASE = ["--delay-us", str(args.path_delay_us), "--rate-mbps", str(args.path_rate_mbps)]
        if args.ring is None:
            SERVE_EXTRA += ["--ring", str(PATH_RING)]
    if args.idle_spin_us is not None:
        SERVE_EXTRA += ["--idle-spin-us", str(args.idle_spin_us)]
    if IDLE_CONNS:
        # Room for the idle ones, the clients' and spares (a multiple of 64).
        SERVE_EXTRA += ["--slots", str(max(4096, (IDLE_CONNS + 2 * WEB_CONNS + 1087) // 64 * 64))]
    if SERVICE_CPU != 0 or args.serve_poll:
        # Not the side-by-side comparison: kept apart from sockets.*.
        NAME = f"sockets-service-cpu{SERVICE_CPU}" + ("-poll" if args.serve_poll else "")
    NAME += {"softirq": "", "napi": "-napi", "rps": "-rps", "sender": "-no-rps",
             "client-native": "-client-native"}[RX]
    if args.ring is not None:
        NAME += f"-ring{args.ring}"
    if args.idle_spin_us is not None:
        NAME += f"-idlespin{args.idle_spin_us}"
    if LISTEN_ANY:
        NAME += "-listen-any"
    if args.conns != 16:
        # Another number of memcached connections: files of its own.
        NAME += f"-conns{args.conns}"
    if IDLE_CONNS:
        NAME += f"-idle{IDLE_CONNS}"
    # Some of the web servers or clients: files of their own, so that the
    # whole comparison's are not overwritten by a part of it.
    if SERVERS != ("nginx", "lighttpd"):
        NAME += "-" + "-".join(SERVERS)
    if CLIENTS != ("loadgen", "wrk"):
        NAME += "-" + "-".join(CLIENTS)
    if args.only in ("web", "memcached", "node", "proxy", "apache", "varnish") and SERVICE_CPU == 0 \
            and not args.serve_poll:
        # A part alone does not overwrite the whole comparison's files (the
        # service-placement experiments have files of their own already).
        NAME += f"-{args.only}"
    if os.geteuid() != 0:
        sys.exit("bench_sockets: needs root (network namespaces)")
    for tool in ("nginx", "lighttpd", "memcached", "wrk", "iperf3", "redis-server",
                 "redis-benchmark", "sockperf", *(["node"] if args.only == "node" else []),
                 *(["apache2"] if args.only == "apache" else []),
                 *(["varnishd"] if args.only == "varnish" else []),
                 *(["chronyd"] if args.only == "ntp" else []),
                 *(["haproxy"] if args.only == "relay" else [])):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            if tool == "chronyd":
                # Not in `make deps`: Debian's package starts a system chronyd
                # that talks to public NTP servers.
                sys.exit("bench_sockets: chronyd is not installed: apt-get install chrony "
                         "(then stop the system chronyd it starts, if you do not want it)")
            sys.exit(f"bench_sockets: {tool} is not installed (make deps installs it)")
    signal.signal(signal.SIGINT, be.on_signal)
    signal.signal(signal.SIGTERM, be.on_signal)
    cmdline = "make bench-sockets  (scripts/bench_sockets.py " + " ".join(sys.argv[1:]) + ")"
    tmp = Path(tempfile.mkdtemp(prefix=f"ixb-{PID}-"))
    TMP = str(tmp)
    www = tmp / "www"
    www.mkdir()
    (www / "f20").write_bytes(b"0123456789abcdefghi\n")
    (tmp / "ten.lua").write_text(LUA_10)
    steps = ((4 * len(CLIENTS) if args.only in (None, "web") else 0)
             + (6 * len(CLIENTS) if args.only == "node" else 0)
             + (2 * len(CLIENTS) if args.only == "apache" else 0)
             + (4 if args.only == "proxy" and "wrk" in CLIENTS else 0)
             + (2 if args.only == "varnish" and "wrk" in CLIENTS else 0)
             + (2 * (len(args.rates.split(",")) + args.refine) if args.only in (None, "memcached") else 0)
             + (2 if args.only in (None, "bulk") else 0)
             + (4 if args.only == "relay" else 0)
             + (2 if args.only in (None, "local") else 0)
             + (len(PG_MODES) if args.only == "pg" else 0)
             + (len(REDIS_MODES) if args.only == "redis" else 0)
             + (1 if args.only == "ntp" else 0)
             + (2 if args.only == "burst" else 0)
             + (2 * len(PATH_CONDITIONS) if args.only == "path" else 0)
             + (len(args.udp_sizes.split(",")) + len(args.udp_rates.split(",")) if args.only in (None, "udp") else 0))
    bar = be.Progress(steps)
    results = []
    global STALLS, SLOWDOWNS, IPI
    STALLS = cpu_stalls()
    print("CPU stalls (gaps > 50 µs seen by a lone spinning thread): " + "; ".join(
        f"{c} {v['lost_share'] * 100:.2f}% of the time, longest {v['max_gap_us']:.0f} µs"
        for c, v in STALLS.items()), flush=True)
    SLOWDOWNS = cpu_slowdowns()
    print("CPU slowdowns (under half speed, both CPUs busy): " + "; ".join(
        f"{c} {v['slow_share'] * 100:.1f}% of the time, longest {v['longest_slow_ms']:.1f} ms"
        for c, v in SLOWDOWNS.items()), flush=True)
    IPI = ipi_cost()
    if IPI:
        print(f"IPI round trip CPU 0 -> CPU 1: {IPI['round_trip_us']:.1f} µs", flush=True)
    bulk_results, local_results, udp_results, pg_results, redis_results = [], [], [], [], []
    ntp_results, relay_results, burst_results, path_results = [], [], [], []
    try:
        if args.only in (None, "web"):
            for server in SERVERS:
                web(args, server, www, tmp, bar, results)
        if args.only == "proxy":
            web(args, "nginx-proxy", www, tmp, bar, results)
            web(args, "nginx-proxy-keepalive", www, tmp, bar, results)
        if args.only == "apache":
            web(args, "apache", www, tmp, bar, results)
        if args.only == "varnish":
            web(args, "varnish", www, tmp, bar, results)
        if args.only == "node":
            web(args, "node", www, tmp, bar, results)
            web(args, "node-cluster", www, tmp, bar, results)
            web(args, "node-cluster-none", www, tmp, bar, results)
        if args.only in (None, "memcached"):
            memcached(args, bar, results)
        if args.only in (None, "bulk"):
            bulk_results = bulk(args, bar)
        if args.only == "relay":
            relay_results = relay(args, bar)
        if args.only in (None, "local"):
            local_results = local(args, bar)
        if args.only in (None, "udp"):
            udp_results = udp(args, bar)
        if args.only == "pg":
            pg_results = pg(args, bar)
        if args.only == "redis":
            redis_results = redis(args, bar)
        if args.only == "ntp":
            ntp_results = ntp(args, bar)
        if args.only == "burst":
            burst_results = burst(args, bar)
        if args.only == "path":
            path_results = path(args, bar)
    finally:
        be.cleanup()
        subprocess.run(["rm", "-rf", str(tmp)])
    OUT.mkdir(parents=True, exist_ok=True)
    if results:
        write(results, args, cmdline)
        print(f"wrote {OUT}/{NAME}.json, {NAME}.md, {NAME}.png")
    if bulk_results:
        write_bulk(bulk_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-bulk", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if relay_results:
        write_bulk(relay_results, args, cmdline, "relay")
        b = NAME.replace("sockets", "sockets-relay", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if local_results:
        write_local(local_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-local", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if pg_results:
        write_pg(pg_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-pg", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if redis_results:
        write_redis(redis_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-redis", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if ntp_results:
        write_ntp(ntp_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-ntp", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if burst_results:
        write_burst(burst_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-burst", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if path_results:
        write_path(path_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-path", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")
    if udp_results:
        write_udp(udp_results, args, cmdline)
        b = NAME.replace("sockets", "sockets-udp", 1)
        print(f"wrote {OUT}/{b}.json, {b}.md, {b}.png")


if __name__ == "__main__":
    main()
