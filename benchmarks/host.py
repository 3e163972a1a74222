#!/usr/bin/env python3
"""The host a benchmark ran on, as benchmarks/history.jsonl records it: the CPU model, its
clock, the number of CPUs online, and cpu0's caches from sysfs. Run alone, prints that
object as one line of JSON (benchmarks/record.sh puts it in each `make bench-record` line);
benchmarks/compare.py imports it."""

import json
import os


def cpu_facts():
    facts = {"cpu_model": "unknown", "cpu_mhz": None, "cpus": os.cpu_count(), "caches": {}}
    with open("/proc/cpuinfo") as info:
        for line in info:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and facts["cpu_model"] == "unknown":
                facts["cpu_model"] = value
            if key == "cpu MHz" and facts["cpu_mhz"] is None:
                facts["cpu_mhz"] = float(value)
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            read = lambda name: open(os.path.join(base, index, name)).read().strip()
            level, kind = read("level"), read("type")
            label = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
            facts["caches"][label] = read("size")
        except OSError:
            pass
    return facts


if __name__ == "__main__":
    print(json.dumps(cpu_facts(), separators=(",", ":")))
