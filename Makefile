# Ixora — the two commands of the README, and a few more.
#
#   make demo        install what is needed, build (release), run the main job
#   make test        install what is needed, build, run every test and check
#
#   make bench       echo: Ixora vs the Linux kernel stack -> docs/bench/echo.*
#   make bench-core  core cost per segment vs. the Linux kernel -> docs/bench/
#   make fuzz        run every fuzz target for FUZZ_SECONDS (default 60) each
#   make rfc-report  which RFC sections have code and tests -> docs/rfc-coverage.md

SHELL   := /bin/bash
CARGO   ?= cargo
PYTHON  ?= /usr/bin/python3
FUZZ_SECONDS ?= 60
BENCH_ARGS ?= --repeat 3
APT_PACKAGES := build-essential pkg-config python3 python3-matplotlib python3-scapy iproute2 \
                iputils-ping iputils-arping ethtool socat nftables curl \
                memcached libmemcached-tools redis-server nginx-light lighttpd haproxy wrk iperf3 sockperf nodejs \
                postgresql apache2 openssh-server openssh-client dnsmasq-base \
                openjdk-17-jdk-headless varnish mosquitto mosquitto-clients squid vsftpd
FUZZ_TARGETS := wire_ethernet wire_arp wire_ipv4 wire_icmpv4 wire_udp wire_tcp \
                wire_tcp_options engine_ops engine_frames service_app preload_netlink

export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: all deps build demo test lint check-deps unit bench bench-core fuzz fuzz-build rfc-report clean bench-sockets

all: build

## Install system packages (Debian, as root or with sudo) and check for cargo.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install stable Rust (https://rustup.rs) and re-run"; exit 1; }
	@$(CARGO) --version

build: deps
	$(CARGO) build --release --workspace

## The main job with its default setup: the AF_XDP echo server on a private
## veth link, Linux talking to it, Ixora vs the kernel, and the core in the
## simulated network (scripts/demo.py; needs root).
demo: build
	$(PYTHON) scripts/demo.py

## Issue 3's side-by-side echo benchmark -> docs/bench/echo.{json,md,png}.
bench: build
	$(PYTHON) scripts/bench_echo.py $(BENCH_ARGS)

test: deps lint check-deps unit

## The fuzz targets live outside the workspace (fuzz/): `cargo check`
## them here so that an API change that breaks one fails `make test`, not
## a later `make fuzz`.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	cd fuzz && $(CARGO) check --bins --quiet

check-deps:
	$(PYTHON) scripts/check_deps.py

## Release mode: the interop tests move 100 MB per backend, direction and
## loss rate through the real dataplane.
## `cargo build` first: `cargo test` does not build the preload cdylib that
## the sockets tests load beside the binary.
## IXORA_TEST_STRICT: a test whose tool or privilege is missing fails
## instead of skipping (everything is installed by then).
unit:
	$(CARGO) build --release --workspace
	IXORA_TEST_STRICT=1 $(CARGO) test --workspace --release
	./target/release/ixora sim --bytes 4MiB --loss 0.05 --reorder 0.05 --seed 7 >/dev/null
	./target/release/ixora sim --bytes 4MiB --loss 0.05 --reorder 0.05 --seed 7 --cc newreno >/dev/null
	$(PYTHON) scripts/rfc_report.py --check

bench-core: deps
	$(PYTHON) scripts/bench_core.py

## Issue 4's benchmark: unmodified servers on the kernel vs under `ixora run`.
bench-sockets: build
	$(PYTHON) scripts/bench_sockets.py $(BENCH_SOCKETS_ARGS)

fuzz-build: deps
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	cd fuzz && $(CARGO) fuzz build -s none

fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz $$t for $(FUZZ_SECONDS) s =="; \
	  (cd fuzz && $(CARGO) fuzz run -s none $$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 2>&1 | tail -n 3); \
	done

rfc-report:
	$(PYTHON) scripts/rfc_report.py

clean:
	$(CARGO) clean
