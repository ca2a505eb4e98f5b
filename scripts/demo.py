#!/usr/bin/python3
"""`make demo`: Ixora's main job with its default setup, on a private test
network, explained as it goes.

1. Two network namespaces joined by a veth pair (198.18.80.0/24).
2. `ixora echo-server --backend af_xdp --iface <veth> --ip 198.18.80.2/24 --port 7`
   on one end (the issue's command form, AF_XDP being the default backend).
3. From the Linux side: ping, a 10 MB echo checked byte for byte.
4. `ixora echo-client` (Ixora on both ends) and the kernel's epoll echo pair
   on the same kind of link, 2 seconds each: messages per second and RTT.
5. A TCP transfer in the simulated lossy network (the protocol core alone).

Everything is removed at the end, also on failure or Ctrl-C.
"""

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


def main():
    if not b.BIN.exists():
        sys.exit(f"demo: {b.BIN} missing: run `cargo build --release` first")
    if __import__("os").geteuid() != 0:
        sys.exit("demo: needs root (network namespaces, AF_XDP)")
    signal.signal(signal.SIGINT, b.on_signal)
    signal.signal(signal.SIGTERM, b.on_signal)
    ok = True
    try:
        title("1. A private test network: two namespaces, one veth pair")
        ns_ix, ns_lx = b.netns("dix"), b.netns("dlx")
        a, l = b.veth(ns_ix, ns_lx, "d")
        b.sh(*b.in_ns(ns_lx, "ip", "addr", "add", f"{CLI}/24", "dev", l))
        print(f"Ixora's side: {ns_ix}/{a} (no kernel address); Linux's side: {ns_lx}/{l} = {CLI}/24")

        title("2. ixora echo-server on AF_XDP (the default backend)")
        cmd = [str(b.BIN), "echo-server", "--backend", "af_xdp", "--iface", a,
               "--ip", f"{SRV}/24", "--port", "7"]
        print("$ " + " ".join(cmd))
        srv = b.start(b.in_ns(ns_ix, *cmd), f"/tmp/ixora-demo-{b.PID}.log")
        if not b.wait_tcp(ns_lx, SRV, 7):
            print(Path(srv._log).read_text())
            raise RuntimeError("the echo server did not come up")
        print(Path(srv._log).read_text().strip())

        title("3. Linux talks to Ixora")
        r = b.sh(*b.in_ns(ns_lx, "ping", "-c", "3", "-i", "0.2", SRV), check=False)
        print("\n".join(r.stdout.strip().splitlines()[-2:]))
        ok &= r.returncode == 0
        r = linux_echo(ns_lx, 10_000_000)
        print("Linux TCP client: " + (r.stdout.strip() or r.stderr.strip()))
        ok &= r.returncode == 0

        title("4. Echo, 64 B messages, 64 connections x 1024 round trips, 2 s each")
        rows = []
        b.stop_proc(srv)
        # Ixora <-> Ixora on a fresh veth pair, server and client pinned apart.
        ns_s, ns_c = b.netns("dxs"), b.netns("dxc")
        xa, xb = b.veth(ns_s, ns_c, "x")
        srv = b.start(b.in_ns(ns_s, *b.pinned(0, str(b.BIN), "echo-server", "--iface", xa,
                                               "--ip", f"{SRV}/24")),
                      f"/tmp/ixora-demo-{b.PID}-x.log")
        time.sleep(1)
        rep, _, out, _ = b.run_client(b.in_ns(ns_c, *b.pinned(1, str(b.BIN), "echo-client",
                                                             "--iface", xb, "--ip", f"{CLI}/24",
                                                             "--server", f"{SRV}:7", "-c", "64",
                                                             "-n", "1024", "--duration", "2",
                                                             "--warmup", "0.5")), 30)
        rows.append(("Ixora <-> Ixora (AF_XDP, veth)", rep, out))
        b.stop_proc(srv)
        # Linux <-> Linux on the Linux pair.
        ka, kb = b.veth(ns_s, ns_c, "k")
        b.sh(*b.in_ns(ns_s, "ip", "addr", "add", "198.18.81.2/24", "dev", ka))
        b.sh(*b.in_ns(ns_c, "ip", "addr", "add", "198.18.81.1/24", "dev", kb))
        ksrv = b.start(b.in_ns(ns_s, *b.pinned(0, str(b.BIN), "kernel-echo-server",
                                                "--addr", "198.18.81.2:7")),
                       f"/tmp/ixora-demo-{b.PID}-k.log")
        b.wait_tcp(ns_c, "198.18.81.2", 7)
        rep, _, out, _ = b.run_client(b.kernel_client(ns_c, "198.18.81.2:7", 1024, 64, 64, 2, 0.5), 30)
        rows.append(("Linux <-> Linux (epoll, veth)", rep, out))
        b.stop_proc(ksrv)
        print(f"{'':34} {'msg/s':>10} {'RTT p50':>9} {'p99':>9}")
        for name, rep, out in rows:
            if rep is None:
                print(f"{name:34} failed: {out.strip().splitlines()[-1:]}")
                ok = False
                continue
            rt = rep["rtt_us"]
            print(f"{name:34} {rep['msgs_per_sec']:>10,.0f} {rt['p50']:>7.1f}µs {rt['p99']:>7.1f}µs")
        if all(r[1] for r in rows):
            print(f"Ixora / Linux: {rows[0][1]['msgs_per_sec'] / rows[1][1]['msgs_per_sec']:.1f}x "
                  "messages per second (make bench has the full comparison)")
    finally:
        b.cleanup()

    title("5. The protocol core alone: 16 MiB each way over a simulated link, 1% loss")
    r = subprocess.run([str(b.BIN), "sim", "--text", "--bytes", "16MiB", "--loss", "0.01",
                        "--reorder", "0.01", "--seed", "7"], text=True)
    ok &= r.returncode == 0
    print("\n" + ("demo: all steps worked" if ok else "demo: a step FAILED (see above)"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
