#!/usr/bin/env python3
"""Benchmark the sans-I/O core's cost per segment and put the Linux kernel
stack beside it, in one run; write docs/bench/core.{json,md,png}.

    python3 scripts/bench_core.py            # what `make bench-core` runs

Ixora side: the criterion benchmark `cargo bench -p ixora-core --bench
segment` (receive and transmit path per segment, 1448 B and 64 B writes,
software checksums, no I/O).  Kernel side, for context: one TCP connection
over the loopback device of a private network namespace (address
198.18.99.1), the same message sizes with TCP_NODELAY, CPU time of sender and
receiver together per message (`ixora bench-kernel`).  The kernel figure
includes system calls and the loopback device; the Ixora figure is protocol
processing only — the dataplane comparison over veth is `make bench` (IX
face).  Needs root for the namespace; without it the kernel column is
skipped.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "bench"
SIZES = [1448, 64]
KERNEL_MESSAGES = 400_000
KERNEL_RUNS = 3


def log(msg):
    print(f"[bench-core] {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def criterion_estimates():
    res = {}
    for path in ("rx", "tx"):
        for size in SIZES:
            f = ROOT / "target" / "criterion" / "segment" / path / str(size) / "new" / "estimates.json"
            e = json.loads(f.read_text())
            res[(path, size)] = {
                "mean_ns": e["mean"]["point_estimate"],
                "ci95_ns": [e["mean"]["confidence_interval"]["lower_bound"],
                            e["mean"]["confidence_interval"]["upper_bound"]],
                "median_ns": e["median"]["point_estimate"],
            }
    return res


def kernel(binary):
    if os.geteuid() != 0:
        log("not root: skipping the kernel reference (needs a network namespace)")
        return None
    ns = f"ixora-bench-{os.getpid()}"
    out = {}
    try:
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "-n", ns, "addr", "add", "198.18.99.1/32", "dev", "lo"])
        for size in SIZES:
            samples = []
            for i in range(KERNEL_RUNS):
                log(f"kernel loopback, {size} B messages, run {i + 1}/{KERNEL_RUNS}")
                p = run(["ip", "netns", "exec", ns, str(binary), "bench-kernel",
                         "--addr", f"198.18.99.1:{5201 + i}", "--size", str(size),
                         "--count", str(KERNEL_MESSAGES)], capture_output=True, text=True)
                samples.append(json.loads(p.stdout))
            out[size] = {
                "cpu_ns_per_msg": statistics.median(s["cpu_ns_per_msg"] for s in samples),
                "msgs_per_s": statistics.median(s["msgs_per_s"] for s in samples),
                "runs": samples,
            }
    finally:
        subprocess.run(["ip", "netns", "del", ns], cwd=ROOT)
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    run(["cargo", "build", "--release", "-p", "ixora"])
    binary = ROOT / "target" / "release" / "ixora"
    run(["cargo", "bench", "-p", "ixora-core", "--bench", "segment"])
    est = criterion_estimates()
    k = kernel(binary)
    info = json.loads(subprocess.run([str(binary), "info", "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    rows = []
    for size in SIZES:
        rx, tx = est[("rx", size)], est[("tx", size)]
        both = rx["mean_ns"] + tx["mean_ns"]
        row = {
            "message_bytes": size,
            "ixora_rx_ns_per_segment": rx,
            "ixora_tx_ns_per_segment": tx,
            "ixora_both_ends_ns": both,
        }
        if k:
            row["kernel_loopback_cpu_ns_per_msg"] = k[size]["cpu_ns_per_msg"]
            row["kernel_over_ixora"] = k[size]["cpu_ns_per_msg"] / both
        rows.append(row)
    result = {
        "benchmark": "core cost per segment",
        "command": "make bench-core  (python3 scripts/bench_core.py)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "cpu": cpu_model()},
        "connection_state_bytes": info["connection_state_bytes"],
        "results": rows,
        "kernel_runs": k,
        "notes": "Ixora: protocol processing only (sans-I/O core, software checksums, frames "
                 "from a recycled pool). Kernel: loopback TCP in a private netns, CPU of both "
                 "ends per write (system calls included). Context, not a dataplane comparison.",
    }
    (OUT / "core.json").write_text(json.dumps(result, indent=2) + "\n")
    write_md(result)
    plot(result)
    log(f"wrote {OUT / 'core.json'}, core.md, core.png")


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_md(r):
    lines = [
        "# Core cost per segment",
        "",
        f"Measured {r['date']} on {r['machine']['cpus']} vCPU ({r['machine']['cpu']}), "
        f"Linux {r['machine']['kernel']}.",
        "",
        f"Reproduce: `{r['command']}`",
        "",
        f"Per-connection state: **{r['connection_state_bytes']} bytes** (goal: at most 512), "
        "data buffers excluded.",
        "",
        "| message | Ixora receive path (ns/segment) | Ixora transmit path (ns/segment) "
        "| Ixora both ends | Linux loopback, both ends (CPU ns/message) | Linux / Ixora |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["results"]:
        rx = row["ixora_rx_ns_per_segment"]
        tx = row["ixora_tx_ns_per_segment"]
        kern = row.get("kernel_loopback_cpu_ns_per_msg")
        ratio = row.get("kernel_over_ixora")
        lines.append(
            f"| {row['message_bytes']} B | {rx['mean_ns']:.0f} "
            f"({rx['ci95_ns'][0]:.0f}–{rx['ci95_ns'][1]:.0f}) | {tx['mean_ns']:.0f} "
            f"({tx['ci95_ns'][0]:.0f}–{tx['ci95_ns'][1]:.0f}) | {row['ixora_both_ends_ns']:.0f} | "
            + (f"{kern:.0f} | {ratio:.1f}× |" if kern else "— | — |"))
    lines += [
        "",
        "Receive path: frame parse (Ethernet, IPv4, TCP with checksum verification), "
        "connection lookup, TCP input, zero-copy queueing of the payload, the `Recv` "
        "event, the application's `recv_done`, and the ACK owed (one per two segments). "
        "Transmit path: one `tcp_send`, building the segment (headers, payload copy, "
        "checksum), and processing the returning ACK. Means with 95% confidence "
        "intervals from criterion.",
        "",
        r["notes"],
        "",
        "![core cost per segment](core.png)",
        "",
    ]
    (OUT / "core.md").write_text("\n".join(lines))


def plot(r):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no PNG (apt install python3-matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{row['message_bytes']} B" for row in r["results"]]
    x = range(len(labels))
    rx = [row["ixora_rx_ns_per_segment"]["mean_ns"] for row in r["results"]]
    tx = [row["ixora_tx_ns_per_segment"]["mean_ns"] for row in r["results"]]
    w = 0.27
    ax.bar([i - w for i in x], rx, w, label="Ixora receive path")
    ax.bar(list(x), tx, w, label="Ixora transmit path")
    if all("kernel_loopback_cpu_ns_per_msg" in row for row in r["results"]):
        kern = [row["kernel_loopback_cpu_ns_per_msg"] for row in r["results"]]
        ax.bar([i + w for i in x], kern, w, label="Linux loopback (both ends, CPU)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_ylabel("nanoseconds per segment / message")
    ax.set_title("Core cost per segment (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "core.png", dpi=120)


if __name__ == "__main__":
    main()
