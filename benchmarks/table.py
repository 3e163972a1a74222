#!/usr/bin/env python3
"""docs/performance.md's tables, generated from benchmarks/history.jsonl.

Each generated block sits between `<!-- table.py: NAME -->` and `<!-- table.py: end -->` in
the page. `--write` regenerates them (`make bench-record` and `make bench-compare` do, after
appending a run); `--check` exits 1 when the page is not what the history gives (make test
runs it, so a table edited by hand or a record appended without the page fails):

- compare: the latest `make bench-compare` run beside the one before it;
- sweep: the latest `gateway bench --sweep` run, row per table size;
- trend: the last runs of `gateway bench` (`make bench-record`), one line each.
"""

import argparse
import json
import os
import sys

from compare import TARGET_RATIO  # issue 47's, beside the harness that measures them

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HISTORY = os.path.join(ROOT, "benchmarks", "history.jsonl")
DOC = os.path.join(ROOT, "docs", "performance.md")
TREND_RUNS = 6


DUTS = {
    "testpmd": "testpmd io",
    "gateway": "**gateway** (NAT44+SPI)",
    "ovs-ct-snat": "OVS-DPDK, conntrack + SNAT",
    "ovs-forward": "OVS-DPDK, forwarding only",
}
TRANSLATES = {"gateway", "ovs-ct-snat"}


def records(path):
    with open(path) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def number(value, digits=1):
    return f"{value:,.{digits}f}"


def host(record):
    """The host as the record names it: its CPU and caches where recorded, its TSC beside."""
    facts = record.get("host")
    tsc = f"TSC {record['tsc_ghz']:.2f} GHz" if record.get("tsc_ghz") else None
    if not facts:
        return ", ".join(part for part in [f"host {record.get('hostname', '?')}", tsc] if part)
    caches = ", ".join(f"{level} {size}" for level, size in facts.get("caches", {}).items()
                       if level != "L1i")
    parts = [facts.get("cpu_model", "unknown"), f"{facts.get('cpus')} CPUs", tsc, caches]
    return ", ".join(part for part in parts if part)


def provenance(record):
    commit = record.get("commit", "unknown")[:7]
    dirty = " with uncommitted changes" if record.get("dirty") else ""
    return f"commit {commit}{dirty}, {record['date']}"


def translated(row):
    if not row.get("capture_ok"):
        return "capture refused"
    done, seen = row["capture_translated"], row["capture_packets"]
    if row["dut"] in TRANSLATES:
        return "all" if done == seen else f"{done} of {seen}"
    return "none, as expected" if done == 0 else f"{done} of {seen}: unexpected"


def compare_table(history):
    runs = [r for r in history if r.get("kind") == "bench-compare"]
    if not runs:
        return "No `make bench-compare` run is recorded yet.\n"
    latest, before = runs[-1], (runs[-2] if len(runs) > 1 else None)
    earlier = {(r["dut"], r["flows"], r["frames"]): r for r in before["compare"]} if before else {}
    lines = [
        f"Latest run: {provenance(latest)}, {latest['rounds']} rounds of {latest['seconds']:g} s; "
        f"{host(latest)}.",
    ]
    if before:
        lines.append(f"The run before: {provenance(before)}.")
    lines += [
        "",
        "| flows | frames | DUT | Mpps | cycles/packet (range) | × testpmd | the run before: cycles, × testpmd | target | translated |",
        "|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for row in latest["compare"]:
        frames = "64 B" if row["frames"] == "64" else row["frames"].upper()
        mpps = number(row["mpps_median"], 2)
        if row["frames"] != "64":
            mpps += f" ({number(row['gbps_median'])} Gbit/s on the wire)"
        cycles = (f"{number(row['cycles_median'])} ({number(row['cycles_min'])}-"
                  f"{number(row['cycles_max'])})")
        old = earlier.get((row["dut"], row["flows"], row["frames"]))
        then = f"{number(old['cycles_median'])}, {old['ratio_to_testpmd']:.2f}" if old else ""
        goal = TARGET_RATIO.get(row["flows"]) if row["dut"] == "gateway" and row["frames"] == "64" else None
        target = ""
        if goal:
            target = f"≤ {goal:g}: {'met' if row['ratio_to_testpmd'] <= goal else 'missed'}"
        lines.append(
            f"| {row['flows']:,} | {frames} | {DUTS.get(row['dut'], row['dut'])} | {mpps} | {cycles} "
            f"| {row['ratio_to_testpmd']:.2f} | {then} | {target} | {translated(row)} |")
    return "\n".join(lines) + "\n"


def established(rows, prefix):
    return next((r for r in rows if r["name"].startswith(prefix)), None)


def sweep_table(history):
    runs = [r for r in history if len(r.get("sweep") or []) > 1]
    if not runs:
        return "No `gateway bench --sweep` run is recorded yet.\n"
    run = runs[-1]
    floor = established(run["rows"], "io_floor")
    headline = run.get("sweep_headline_flows")
    lines = [
        f"Recorded run: `gateway bench {run.get('args', '')}`, {provenance(run)}; {host(run)}; "
        f"the I/O floor {number(floor['cycles_per_packet'])} cycles a packet.",
        "",
        "| flows | M new flows/s | cycles/packet | above the I/O floor | Mpps | + every feature | features' Mpps ratio | peak RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in run["sweep"]:
        plain = established(size["rows"], "nat44+spi, established")
        featured = established(size["rows"], "+ all features, established")
        flows = f"{size['flows']:,}"
        if size["flows"] == headline:
            flows = f"**{flows}** (headline)"
        lines.append(
            f"| {flows} | {size['flow_setups_per_second'] / 1e6:.2f} | {number(plain['cycles_per_packet'])} "
            f"| {number(size['cycles_above_floor'])} | {plain['mpps']:.2f} "
            f"| {number(featured['cycles_per_packet'])} | {size['features_mpps_ratio']:.3f} "
            f"| {size['peak_rss_mib']:,} MiB |")
    return "\n".join(lines) + "\n"


def trend_table(history):
    runs = [r for r in history if r.get("kind") is None and "rows" in r][-TREND_RUNS:]
    if not runs:
        return "No `make bench-record` run is recorded yet.\n"
    lines = [
        "| date (UTC) | commit | arguments | flows | NAT44+SPI above the floor | + every feature | M new flows/s | bytes/flow | host |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        commit = run.get("commit", "unknown")[:7] + (" (changed)" if run.get("dirty") else "")
        args = f"`{run['args']}`" if run.get("args") else "(none)"
        lines.append(
            f"| {run['date'][:16].replace('T', ' ')} | {commit} | {args} | {run['flows']:,} "
            f"| {number(run['cycles_above_floor'])} | {run['feature_cycles_established']:+,.1f} "
            f"| {run['flow_setups_per_second'] / 1e6:.2f} | {run['bytes_per_flow']} | {host(run)} |")
    return "\n".join(lines) + "\n"


SECTIONS = {"compare": compare_table, "sweep": sweep_table, "trend": trend_table}


def render(text, history):
    """The page with every generated block replaced by what the history gives."""
    out, rest = [], text
    for name, table in SECTIONS.items():
        begin = f"<!-- table.py: {name} -->\n"
        start = rest.find(begin)
        if start < 0:
            sys.exit(f"table.py: the page has no `{begin.strip()}` block")
        end = rest.find("<!-- table.py: end -->", start)
        if end < 0:
            sys.exit(f"table.py: the `{name}` block in the page has no end marker")
        out.append(rest[:start] + begin + table(history))
        rest = rest[end:]
    return "".join(out) + rest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if the page is out of step")
    mode.add_argument("--write", action="store_true", help="regenerate the page's tables")
    parser.add_argument("--history", default=HISTORY)
    parser.add_argument("--doc", default=DOC)
    args = parser.parse_args()
    with open(args.doc) as page:
        text = page.read()
    wanted = render(text, records(args.history))
    if args.write:
        if wanted != text:
            with open(args.doc, "w") as page:
                page.write(wanted)
        return 0
    if wanted != text:
        print(f"table.py: {args.doc}'s tables are not what {args.history} gives; "
              "run `python3 benchmarks/table.py --write` and commit the page", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
