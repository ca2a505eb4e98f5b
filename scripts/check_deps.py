#!/usr/bin/env python3
"""Enforce the layer dependency direction of docs/ARCHITECTURE.md.

Each workspace crate may depend only on the Ixora crates listed for it
(normal and build dependencies; dev-dependencies may also use lower layers
and test helpers). Exits non-zero naming the offending edge.
"""
import json
import subprocess
import sys

# crate -> Ixora crates it may depend on (transitively closed by hand).
ALLOWED = {
    "ixora-wire": set(),
    "ixora-core": {"ixora-wire"},
    "ixora-channel": set(),
    "ixora-io": {"ixora-wire", "ixora-channel"},
    "ixora-sim": {"ixora-core", "ixora-wire"},
    "ixora": {"ixora-core", "ixora-sim", "ixora-wire", "ixora-io", "ixora-engine",
              "ixora-channel", "ixora-service"},
    "ixora-engine": {"ixora-core", "ixora-io", "ixora-wire", "ixora-channel"},
    "ixora-capi": {"ixora-core", "ixora-io", "ixora-engine", "ixora-wire", "ixora-channel"},
    # The stack service: an application of the engine serving apps over the channel.
    "ixora-service": {"ixora-core", "ixora-io", "ixora-engine", "ixora-wire", "ixora-channel"},
    # The preload shim never links the stack (DESIGN.md): only the channel.
    "ixora-preload": {"ixora-channel"},
}
DEV_EXTRA = {
    "ixora-wire": set(),
    "ixora-core": set(),
    "ixora-sim": set(),
    "ixora": set(),
    "ixora-io": set(),
    "ixora-engine": set(),
    "ixora-capi": set(),
    "ixora-channel": set(),
    "ixora-service": set(),
    "ixora-preload": set(),
}


def main():
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        check=True, capture_output=True, text=True).stdout)
    names = {p["name"] for p in meta["packages"]}
    bad = []
    for p in meta["packages"]:
        name = p["name"]
        if name not in ALLOWED:
            bad.append(f"{name}: a workspace crate with no layer in scripts/check_deps.py")
            continue
        for d in p["dependencies"]:
            dep = d["name"]
            if dep not in names:
                continue
            if dep == name and d.get("kind") == "dev":
                # A crate's tests may turn on its own test features
                # (ixora-service's `testkit`).
                continue
            allowed = ALLOWED[name] | (DEV_EXTRA[name] if d.get("kind") == "dev" else set())
            if dep not in allowed:
                bad.append(f"{name} -> {dep} ({d.get('kind') or 'normal'}) breaks the layer order")
    if bad:
        print("dependency direction violated:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print(f"dependency direction ok ({len(names)} crates: wire <- core <- engine <- ixora; io <- engine; sim for tests)")


if __name__ == "__main__":
    main()
