# The two commands: `make demo` and `make test`. Both install what is missing (as root),
# reserve hugepages where the machine allows, and build.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
GATEWAY := target/release/gateway

# One step at a time even under `make -j`: the unit tests, the fuzz smoke and the e2e lab share
# two CPUs, hugepages and the lab's namespace names.
.NOTPARALLEL:

.PHONY: all deps hugepages build demo test lint unit e2e bench bench-sweep bench-record bench-compare lab-bench clean fuzz fuzz-smoke instructions stress-workers

all: build

deps:
	@scripts/deps.sh

hugepages:
	@scripts/hugepages.sh

build: deps
	$(CARGO) build --release --workspace

demo: build hugepages
	scripts/demo.sh $(DEMO_ARGS)

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 benchmarks/table.py --check   # the performance tables (docs, README) are the record's

unit: deps hugepages
	$(CARGO) test --workspace

e2e: build hugepages
	tests/e2e/run.sh

test: lint unit fuzz-smoke e2e

# The coverage-guided fuzz targets (fuzz/, cargo-fuzz): each for FUZZ_SECONDS (default 300).
fuzz: deps
	scripts/fuzz.sh run $(FUZZ_TARGETS)

# Each fuzz target for a few seconds from its committed seeds, after replaying old crashes.
fuzz-smoke: deps
	scripts/fuzz.sh smoke $(FUZZ_TARGETS)

bench: build hugepages
	$(GATEWAY) bench

# The sweep: the established rows again at 10k, 1M, 4M and 16M flows, the headline the first
# table the host's L3 cannot hold, then issue 47's targets (BENCH_ARGS adds flags).
bench-sweep: build hugepages
	$(GATEWAY) bench --sweep $(BENCH_ARGS)

# One `gateway bench --json` run (BENCH_ARGS adds flags) appended to benchmarks/history.jsonl
# with its date, commit, TSC GHz and host.
bench-record: build hugepages
	GATEWAY=$(GATEWAY) benchmarks/record.sh $(BENCH_ARGS)

# Issue 47: the gateway beside dpdk-testpmd (io) and Open vSwitch's DPDK datapath (conntrack +
# SNAT, and plain forwarding), each on one polling core fed by net_pcap replaying 64-byte and
# IMIX UDP; one table, appended to benchmarks/history.jsonl. COMPARE_ARGS adds flags
# (benchmarks/compare.py --help); about 10 minutes with the defaults.
bench-compare: build hugepages
	python3 benchmarks/compare.py $(COMPARE_ARGS)

# Pipeline instructions per packet under callgrind: repeatable where cycles are noise.
instructions: deps
	scripts/instructions.sh

# Several workers, many times (not in make test: about 18 minutes here): 10,000 conformance-style
# TCP connections through 2 and 4 workers with every conntrack_invalid counted by reason, then
# the two-worker e2e pass five times in a row. STRESS_WORKERS, STRESS_CONNECTIONS,
# STRESS_CONCURRENCY, STRESS_E2E_ROUNDS.
stress-workers: build hugepages
	scripts/stress-workers.sh

# Issue 7: iperf3 through the port forward per feature mode, against a Linux router (nftables)
# and dpdk-testpmd macfwd in the same lab. LAB_BENCH_RUNS, LAB_BENCH_REF_RUNS, LAB_BENCH_SECONDS,
# LAB_BENCH_JSON.
lab-bench: build hugepages
	scripts/lab-bench.sh

clean:
	scripts/lab.sh down || true
	$(CARGO) clean
