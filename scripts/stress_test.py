#!/usr/bin/env python3
"""Run tests again and again, half the runs with every CPU busy, to bring
out the failures a timing window causes once a week in CI.

Each named test of one of the `ixora` crate's integration suites (the
sockets suite by default) runs alone, --runs times; every other run
(--hog odd) a busy loop is pinned to each CPU, so the test's threads, the
service's and the kernel's softirqs wait for a CPU at any instruction,
as on a loaded or virtualised machine. The output of a failed run is
kept in --keep. Builds the suite first (release).

Found this way (2026-11-28): a read that took a whole ring the service
filled between its look and its copy told the service nothing, and the
program slept for good (one run in 25 under load); and a test that
assumed `kill(SIGSTOP)` had stopped the service when it returned.

Examples:
  scripts/stress_test.py a_program_that_does_not_read_leaves_the_packet_buffers_to_the_others
  scripts/stress_test.py --runs 40 --suite interop tap_interop_with_linux
  scripts/stress_test.py --list
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(suite):
    """Build the suite's test binary; its path."""
    out = subprocess.run(
        ["cargo", "test", "--release", "-p", "ixora", "--test", suite, "--no-run",
         "--message-format=json"],
        cwd=ROOT, stdout=subprocess.PIPE, check=True, text=True)
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and msg["target"]["name"] == suite:
            return msg["executable"]
    sys.exit(f"stress_test: cargo built no test binary for suite {suite!r}")


def hogs():
    """A busy loop pinned to each CPU (their Popen objects)."""
    return [subprocess.Popen(["taskset", "-c", str(c), "sh", "-c", "while :; do :; done"])
            for c in sorted(os.sched_getaffinity(0))]


def run_one(exe, test, env, timeout):
    """Run one test in a process group of its own; (passed, output). One
    that outlives `timeout` is killed with everything it started, and the
    network namespaces it made (`ixora-TAG-PID-N`) are deleted."""
    p = subprocess.Popen([exe, "--exact", test], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode == 0, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        names = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                               text=True).stdout.split()
        for n in names:
            if n.startswith("ixora-") and f"-{p.pid}-" in n:
                subprocess.run(["ip", "netns", "delete", n])
        return False, out + f"\nstress_test: timed out after {timeout} s\n".encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("tests", nargs="*", help="exact test names (see --list)")
    ap.add_argument("--suite", default="sockets",
                    help="the ixora crate's integration suite (crates/cli/tests/SUITE.rs; "
                         "default: sockets)")
    ap.add_argument("--runs", type=int, default=20, help="runs of each test (default 20)")
    ap.add_argument("--hog", choices=["odd", "every", "never"], default="odd",
                    help="which runs have a busy loop on each CPU (default: odd runs)")
    ap.add_argument("--timeout", type=int, default=600,
                    help="seconds a run may take before it is killed and counted failed "
                         "(default 600)")
    ap.add_argument("--keep", default="/tmp/ixora-stress",
                    help="directory for the output of failed runs (default /tmp/ixora-stress)")
    ap.add_argument("--list", action="store_true", help="list the suite's tests and exit")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    exe = build(a.suite)
    if a.list:
        out = subprocess.run([exe, "--list"], stdout=subprocess.PIPE, text=True, check=True)
        for line in out.stdout.splitlines():
            if line.endswith(": test"):
                print(line[:-len(": test")])
        return 0
    if not a.tests:
        ap.error("name at least one test (--list shows them)")
    keep = Path(a.keep)
    keep.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, IXORA_TEST_STRICT="1")
    failed_any = False
    for t in a.tests:
        fails = []
        tty = sys.stdout.isatty()
        lead, tail = ("\r", "") if tty else ("", "\n")
        for i in range(1, a.runs + 1):
            hog = a.hog == "every" or (a.hog == "odd" and i % 2 == 1)
            h = hogs() if hog else []
            t0 = time.monotonic()
            try:
                ok, text = run_one(exe, t, env, a.timeout)
                if ok and b"1 passed" not in text:
                    sys.exit(f"stress_test: no test named {t!r} in suite {a.suite} (--list)")
            finally:
                for p in h:
                    p.kill()
                    p.wait()
            secs = time.monotonic() - t0
            if not ok:
                log = keep / f"{t}-{i}.log"
                log.write_bytes(text)
                fails.append(str(log))
            # One line rewritten on a terminal; a line per run in a log.
            print(f"{lead}{t}: run {i}/{a.runs}{' (hogs)' if hog else ''} {secs:.0f} s, "
                  f"{len(fails)} failed", end=tail, flush=True)
        if tty:
            print()
        for f in fails:
            print(f"  failed: {f}")
        failed_any |= bool(fails)
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
