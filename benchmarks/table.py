#!/usr/bin/env python3
"""docs/performance.md's tables and the README's performance tables, generated from
benchmarks/history.jsonl.

Each generated block sits between `<!-- table.py: NAME -->` and `<!-- table.py: end -->` in
its page. `--write` regenerates them (`make bench-record` and `make bench-compare` do, after
appending a run); `--check` exits 1 when the page is not what the history gives (make test
runs it, so a table edited by hand or a record appended without the page fails):

- compare: the latest `make bench-compare` run beside the one before it;
- sweep: the latest `gateway bench --sweep` run, row per table size;
- trend: the last runs of `gateway bench` (`make bench-record`), one line each;
- latest: the latest of those runs' other figures, with their JSON fields;
- readme-compare, readme-scaling (README.md): the latest comparison at 64 bytes, and the
  workers the latest scaling model asks for.
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HISTORY = os.path.join(ROOT, "benchmarks", "history.jsonl")
DOC = os.path.join(ROOT, "docs", "performance.md")
TREND_RUNS = 6

# Issue 47's targets for the gateway, as a multiple of testpmd's cycles per packet (64-byte
# frames, by flows); benchmarks/compare.py prints them too.
TARGET_RATIO = {1000: 3.0, 100000: 4.0}


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


# The latest run's figures beside the rows above, with the JSON field each comes from.
LATEST = [
    ("the I/O floor, cycles a packet", lambda r: number(established(r["rows"], "io_floor")["cycles_per_packet"]), "rows[0]"),
    ("NAT44+SPI above the floor, established", lambda r: number(r["cycles_above_floor"]), "cycles_above_floor"),
    ("every feature on, established", lambda r: f"{r['feature_cycles_established']:+,.1f}", "feature_cycles_established"),
    ("IPv6 through the firewall, above the floor", lambda r: number(r["ipv6_cycles_above_floor"]), "ipv6_cycles_above_floor"),
    ("two uplinks against one, established", lambda r: f"{r['uplinks_established_cycles']:+,.1f}", "uplinks_established_cycles"),
    ("a new flow, one uplink and two", lambda r: f"{r['uplinks_setup_cycles_one']:,} and {r['uplinks_setup_cycles_two']:,} cycles", "uplinks_setup_cycles_*"),
    ("new flows a second, one core", lambda r: f"{r['flow_setups_per_second'] / 1e6:.2f} M", "flow_setups_per_second"),
    ("established flows kept under a SYN flood (median)", lambda r: f"{r['syn_flood_established_ratio_median']:.3f}", "syn_flood_established_ratio_median"),
    ("a handoff to another worker", lambda r: number(r["handoff_cycles_per_packet"]), "handoff_cycles_per_packet"),
    ("QoS as a shaper against the policer", lambda r: f"{r['shaper_cycles_established']:+,.1f}", "shaper_cycles_established"),
    ("802.1Q in software", lambda r: number(r["vlan_software_cycles_per_packet"]), "vlan_software_cycles_per_packet"),
    ("PPPoE framing", lambda r: number(r["pppoe_cycles_per_packet"]), "pppoe_cycles_per_packet"),
    ("drop capture armed, established", lambda r: f"{r['drop_capture_armed_cycles_established']:+,.1f}", "drop_capture_armed_cycles_established"),
    ("dpdk-dumpcap's copy, a captured packet", lambda r: number(r["pdump_copy"]["cycles_per_packet"]), "pdump_copy"),
    ("`ctl show flows` over the whole table", lambda r: f"{r['ctl_walk']['total_ms']} ms for {r['ctl_walk']['flows']:,} slots, the longest slice {r['ctl_walk']['longest_slice_us']} µs", "ctl_walk"),
    ("an unarmed trace, a loop", lambda r: number(r["trace_unarmed"]["cycles_per_loop"], 2), "trace_unarmed"),
    ("bytes a flow", lambda r: str(r["bytes_per_flow"]), "bytes_per_flow"),
    ("new flows refused in the mix rows", lambda r: f"{r['drops']:,}", "drops"),
]


def latest_table(history):
    # A full run: one with the headline figure (not, say, a SYN-flood-only run).
    runs = [r for r in history if r.get("kind") is None and "cycles_above_floor" in r]
    if not runs:
        return "No `make bench-record` run is recorded yet.\n"
    run = runs[-1]
    command = f"gateway bench {run.get('args') or ''}".strip()
    lines = [
        f"The latest recorded run: `{command}`, {provenance(run)}; {host(run)}.",
        "",
        "| figure (cycles a packet unless said) | value | `--json` field |",
        "|---|---:|---|",
    ]
    for label, value, field in LATEST:
        try:
            shown = value(run)
        except (KeyError, TypeError, AttributeError):
            shown = "not in this run"
        lines.append(f"| {label} | {shown} | `{field}` |")
    return "\n".join(lines) + "\n"


def readme_compare_table(history):
    runs = [r for r in history if r.get("kind") == "bench-compare"]
    if not runs:
        return "No `make bench-compare` run is recorded yet.\n"
    run = runs[-1]
    rows = {(r["dut"], r["flows"]): r for r in run["compare"] if r["frames"] == "64"}
    duts = ["testpmd", "gateway", "ovs-ct-snat", "ovs-forward"]
    lines = [
        f"`make bench-compare` at commit {run['commit'][:7]} ({host(run)}), Mpps and, in brackets,",
        "cycles a packet; medians of the rounds:",
        "",
        "| flows | dpdk-testpmd io | gateway NAT44+SPI | OVS-DPDK conntrack + SNAT | OVS-DPDK forwarding only |",
        "|---:|---:|---:|---:|---:|",
    ]
    ratios = []
    for flows in sorted({f for _, f in rows}):
        cells = []
        for dut in duts:
            row = rows.get((dut, flows))
            cells.append(f"{row['mpps_median']:.1f} ({row['cycles_median']:,.0f})" if row else "")
        lines.append(f"| {flows:,} | " + " | ".join(cells) + " |")
        ours, theirs = rows.get(("gateway", flows)), rows.get(("ovs-ct-snat", flows))
        if ours and theirs:
            ratios.append(f"{ours['mpps_median'] / theirs['mpps_median']:.1f}× with {flows:,} flows")
    if ratios:
        lines += ["", "The gateway's packet rate against Open vSwitch's conntrack NAT on the same core: "
                  + ", ".join(ratios) + "."]
    return "\n".join(lines) + "\n"


def readme_scaling_table(history):
    runs = [r for r in history if r.get("scaling_model")]
    if not runs:
        return "No `gateway bench --workers` run is recorded yet.\n"
    run = runs[-1]
    model = run["scaling_model"]
    lines = [
        f"`gateway bench {run.get('args') or ''}`".replace(" `", "`") + f" at commit {run['commit'][:7]}: "
        f"one worker's {number(model['one_worker_cycles_per_packet'])} cycles a packet and "
        f"{number(model['cycles_per_handoff'])} more for a packet RSS delivers to a worker that",
        f"does not own its flow, measured on one core; modelled beyond it at {run['tsc_ghz']:.1f} GHz:",
        "",
        "| load | Mpps | workers, RSS alone | workers, NAT replies steered (flow director) |",
        "|---|---:|---:|---:|",
    ]
    for load in model["loads"]:
        lines.append(f"| {load['load'].replace('x10G', '×10G')} | {load['mpps']:.1f} "
                     f"| {load['workers_rss']} | {load['workers_fdir_replies']} |")
    return "\n".join(lines) + "\n"


SECTIONS = {"compare": compare_table, "sweep": sweep_table, "trend": trend_table, "latest": latest_table}
README = os.path.join(ROOT, "README.md")
README_SECTIONS = {"readme-compare": readme_compare_table, "readme-scaling": readme_scaling_table}
PAGES = {DOC: SECTIONS, README: README_SECTIONS}


def render(text, history, sections=SECTIONS):
    """The page with every generated block replaced by what the history gives."""
    out, rest = [], text
    for name, table in sections.items():
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


def stale_pages(history=HISTORY):
    """The pages whose tables are not what the history gives, with what they should hold."""
    found = {}
    entries = records(history)
    for page, sections in PAGES.items():
        with open(page) as source:
            text = source.read()
        wanted = render(text, entries, sections)
        if wanted != text:
            found[page] = wanted
    return found


def write_tables(history=HISTORY):
    """Regenerates the pages' tables from the history (what `--write` does)."""
    for page, wanted in stale_pages(history).items():
        with open(page, "w") as out:
            out.write(wanted)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if the page is out of step")
    mode.add_argument("--write", action="store_true", help="regenerate the page's tables")
    parser.add_argument("--history", default=HISTORY)
    args = parser.parse_args()
    if args.write:
        write_tables(args.history)
        return 0
    stale = stale_pages(args.history)
    for page in stale:
        print(f"table.py: {os.path.relpath(page, ROOT)}'s tables are not what {args.history} "
              "gives; run `python3 benchmarks/table.py --write` and commit the page", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
