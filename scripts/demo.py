#!/usr/bin/python3
"""`make demo`: Ixora's main job with its default setup, on a private test
network, explained as it goes.

1. memcached, unmodified, on the Linux kernel stack and then under
   `ixora run` on Ixora's socket service (`ixora serve`, AF_XDP on a veth
   pair), side by side: the same binary, cores and client (`ixora loadgen
   memcached`, ETC workload, open loop) at three rates; latency, achieved
   rate, and the share of socket calls answered without a system call
   (`ixora stats`). Values are checked by a Linux client first.
2. The native dataplane: `ixora echo-server --backend af_xdp --iface <veth>
   --ip 198.18.80.2/24 --port 7` answering ping and a 10 MB echo from Linux,
   checked byte for byte.
3. A TCP transfer in the simulated lossy network (the protocol core alone).

Everything is removed at the end, also on failure or Ctrl-C.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_echo as b  # noqa: E402

SRV, CLI = "198.18.80.2", "198.18.80.1"


def title(t):
    print(f"\n== {t} ==", flush=True)


def linux_echo(ns, total):
    """A Linux client in `ns`: send `total` bytes to SRV:7, check the echo."""
    code = f"""
import socket, threading, sys, time
total = {total}
data = bytes((i * 131 + 7) % 251 for i in range(65536))
s = socket.create_connection(("{SRV}", 7), timeout=10)
t0 = time.time()
def w():
    sent = 0
    while sent < total:
        n = min(len(data), total - sent)
        s.sendall(data[:n]); sent += n
th = threading.Thread(target=w); th.start()
got = 0; ok = True
while got < total:
    chunk = s.recv(1 << 20)
    if not chunk: break
    for k in range(0, len(chunk), 4096):
        part = chunk[k:k + 4096]
        off = (got + k) % 65536
        want = (data + data)[off:off + len(part)]
        ok = ok and part == want
    got += len(chunk)
th.join(); s.close()
dt = time.time() - t0
print(f"{{got}} bytes echoed in {{dt:.2f}} s ({{got * 8 / dt / 1e6:.0f}} Mbit/s each way), "
      f"{{'identical' if ok and got == total else 'MISMATCH'}}")
sys.exit(0 if ok and got == total else 1)
"""
    return subprocess.run(b.in_ns(ns, sys.executable, "-c", code), capture_output=True, text=True)


MC_CHECK = """
import socket, sys
s = socket.create_connection(("%s", 11211), timeout=5)
f = s.makefile("rb")
ok = True
for i in range(50):
    v = bytes((i * 7 + k) %% 94 + 33 for k in range(1 + i * 40))
    s.sendall(b"set demo%%d 0 0 %%d\\r\\n" %% (i, len(v)) + v + b"\\r\\n")
    ok &= f.readline() == b"STORED\\r\\n"
for i in range(50):
    v = bytes((i * 7 + k) %% 94 + 33 for k in range(1 + i * 40))
    s.sendall(b"get demo%%d\\r\\n" %% i)
    ok &= f.readline().startswith(b"VALUE")
    ok &= f.read(len(v) + 2)[:-2] == v
    ok &= f.readline() == b"END\\r\\n"
print("50 values of 1 B to 2 kB set and read back: " + ("identical" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
"""


def memcached_story(rates, secs):
    """Kernel vs Ixora memcached; returns (ok, rows)."""
    ok = True
    rows = {}
    for stack in ("kernel", "ixora"):
        ns_s, ns_c = b.netns(f"dm{stack[0]}"), b.netns(f"dc{stack[0]}")
        sa, cb = b.veth(ns_s, ns_c, f"m{stack[0]}")
        for ns, dev in ((ns_s, sa), (ns_c, cb)):
            b.sh(*b.in_ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off"), check=False)
        # Each end's receive work on its own side's CPU, where a NIC's
        # interrupts would put it (the benchmark's default placement, `make
        # bench-sockets --rx softirq`): RPS, and generic XDP for the service
        # and the load generator, which runs after RPS. Left as a veth has
        # it, the kernel server's TCP receive would run on the client's CPU.
        b.rps(ns_s, sa, 0)
        b.rps(ns_c, cb, 1)
        sock = f"/tmp/ixora-demo-{b.PID}.sock"
        serve = None
        mc_cmd = ["memcached", "-u", "root", "-p", "11211", "-U", "0", "-t", "1", "-l", SRV]
        if stack == "kernel":
            b.sh(*b.in_ns(ns_s, "ip", "addr", "add", f"{SRV}/24", "dev", sa))
            print(f"$ {' '.join(mc_cmd)}        # on the kernel stack")
        else:
            scmd = [str(b.BIN), "serve", "--iface", sa, "--ip", f"{SRV}/24", "--socket", sock,
                    "--xdp-mode", "skb"]
            print("$ " + " ".join(scmd) + " &")
            serve = b.start(b.pinned(0, *b.in_ns(ns_s, *scmd)), f"/tmp/ixora-demo-{b.PID}-serve.log")
            t = time.time()
            while not Path(sock).exists() and time.time() - t < 10:
                time.sleep(0.05)
            mc_cmd = [str(b.BIN), "run", "--socket", sock, "--", *mc_cmd]
            print(f"$ ixora run --socket {sock} -- memcached ...   # the same binary on Ixora")
        mc = b.start(b.pinned(0, *b.in_ns(ns_s, *mc_cmd)), f"/tmp/ixora-demo-{b.PID}-mc.log")
        # A Linux client checks values (with its own address on the client side).
        b.sh(*b.in_ns(ns_c, "ip", "addr", "add", f"{CLI}/24", "dev", cb))
        if not b.wait_tcp(ns_c, SRV, 11211):
            print(b.stop_proc(mc))
            raise RuntimeError("memcached did not come up")
        r = subprocess.run(b.in_ns(ns_c, sys.executable, "-c", MC_CHECK % SRV),
                           capture_output=True, text=True)
        print(f"  [{stack}] Linux client: " + (r.stdout.strip() or r.stderr.strip()[-300:]))
        ok &= r.returncode == 0
        b.sh(*b.in_ns(ns_c, "ip", "addr", "del", f"{CLI}/24", "dev", cb))
        pts = []
        for rate in rates:
            cmd = [str(b.BIN), "loadgen", "memcached", "--iface", cb, "--ip", "198.18.80.3/24",
                   "--server", f"{SRV}:11211", "--workload", "etc", "--rate", str(rate),
                   "--duration", str(secs), "--warmup", "0.5", "--conns", "16", "--cpus", "1",
                   "--xdp-mode", "skb"]
            r = subprocess.run(b.pinned(1, *b.in_ns(ns_c, *cmd)), capture_output=True, text=True,
                               timeout=secs + 60)
            rep = next((json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")), None)
            if rep is None:
                print(f"  [{stack}] loadgen at {rate}: failed: {r.stderr.strip()[-300:]}")
                ok = False
            pts.append(rep)
            time.sleep(1.2)  # AF_XDP: the queue is busy for ~1 s after its socket closes
        share = None
        if serve is not None:
            st = subprocess.run([str(b.BIN), "stats", "--json", "--socket", sock],
                                capture_output=True, text=True)
            try:
                apps = json.loads(st.stdout)["apps"]
                u = sum(a["user_calls"] for a in apps)
                k = sum(a["kernel_calls"] for a in apps)
                share = u / (u + k) if u + k else None
            except (json.JSONDecodeError, KeyError):
                pass
        rows[stack] = (pts, share)
        b.stop_proc(mc)
        if serve is not None:
            b.stop_proc(serve)
            Path(sock).unlink(missing_ok=True)
        b.cleanup()
    return ok, rows


def main():
    if not b.BIN.exists():
        sys.exit(f"demo: {b.BIN} missing: run `cargo build --release` first")
    if __import__("os").geteuid() != 0:
        sys.exit("demo: needs root (network namespaces, AF_XDP)")
    signal.signal(signal.SIGINT, b.on_signal)
    signal.signal(signal.SIGTERM, b.on_signal)
    ok = True
    try:
        title("1. memcached on the Linux kernel, then unmodified under `ixora run`")
        rates, secs = (20000, 60000, 100000), 3
        mok, rows = memcached_story(rates, secs)
        ok &= mok
        print(f"\nETC workload (75% GET), open loop, 16 connections x 4-deep pipelines, {secs} s per rate;")
        print("server side (memcached -t 1, and the Ixora service) on CPU 0, load generator on CPU 1;")
        print("each side's receive processing on its own CPU (RPS, generic XDP), as a NIC's interrupts would.")
        print(f"{'target':>8} | {'kernel: achieved':>16} {'avg':>8} {'p99':>8} | "
              f"{'Ixora: achieved':>15} {'avg':>8} {'p99':>8}")
        for j, rate in enumerate(rates):
            cells = []
            for stack in ("kernel", "ixora"):
                q = rows.get(stack, ([None] * len(rates), None))[0][j]
                if q is None:
                    cells.append(f"{'failed':>16} {'':>8} {'':>8}")
                else:
                    lat = q["latency_us"]
                    cells.append(f"{q['achieved_rps']:>16,.0f} {lat['avg']:>6.0f}us {lat['p99']:>6.0f}us")
            print(f"{rate:>8,} | {cells[0]} | {cells[1]}")
        share = rows.get("ixora", (None, None))[1]
        if share is not None:
            print(f"Socket calls memcached made on Ixora answered in user space (no system call): {share * 100:.1f}%")
        print("(make bench-sockets runs the full comparison: docs/bench/sockets.md)")

        title("2. The native dataplane: ixora echo-server on AF_XDP (the default backend)")
        ns_ix, ns_lx = b.netns("dix"), b.netns("dlx")
        a, l = b.veth(ns_ix, ns_lx, "d")
        b.sh(*b.in_ns(ns_lx, "ip", "addr", "add", f"{CLI}/24", "dev", l))
        cmd = [str(b.BIN), "echo-server", "--backend", "af_xdp", "--iface", a,
               "--ip", f"{SRV}/24", "--port", "7"]
        print("$ " + " ".join(cmd))
        srv = b.start(b.in_ns(ns_ix, *cmd), f"/tmp/ixora-demo-{b.PID}.log")
        if not b.wait_tcp(ns_lx, SRV, 7):
            print(Path(srv._log).read_text())
            raise RuntimeError("the echo server did not come up")
        r = b.sh(*b.in_ns(ns_lx, "ping", "-c", "3", "-i", "0.2", SRV), check=False)
        print("\n".join(r.stdout.strip().splitlines()[-2:]))
        ok &= r.returncode == 0
        r = linux_echo(ns_lx, 10_000_000)
        print("Linux TCP client: " + (r.stdout.strip() or r.stderr.strip()))
        ok &= r.returncode == 0
        b.stop_proc(srv)
    finally:
        b.cleanup()

    title("3. The protocol core alone: 16 MiB each way over a simulated link, 1% loss")
    r = subprocess.run([str(b.BIN), "sim", "--text", "--bytes", "16MiB", "--loss", "0.01",
                        "--reorder", "0.01", "--seed", "7"], text=True)
    ok &= r.returncode == 0
    print("\n" + ("demo: all steps worked" if ok else "demo: a step FAILED (see above)"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
