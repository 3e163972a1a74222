#!/usr/bin/env bash
# Reserves 2 MiB hugepages and mounts hugetlbfs. Where that cannot be done, says so in one
# line: the gateway then runs with --no-huge (config: eal.hugepages = "auto").
set -uo pipefail
PAGES=${HUGEPAGES:-512}
MNT=/dev/hugepages

have=$(awk '/^HugePages_Total/ {print $2}' /proc/meminfo)
if [[ ${have:-0} -lt $PAGES && $EUID -eq 0 ]]; then
    echo "$PAGES" > /proc/sys/vm/nr_hugepages 2>/dev/null
    have=$(awk '/^HugePages_Total/ {print $2}' /proc/meminfo)
fi
if ! grep -qs " $MNT hugetlbfs " /proc/mounts && [[ $EUID -eq 0 ]]; then
    mkdir -p "$MNT" && mount -t hugetlbfs nodev "$MNT" 2>/dev/null
fi
if [[ ${have:-0} -gt 0 ]] && grep -qs " hugetlbfs " /proc/mounts; then
    echo "hugepages: ${have} x 2 MiB reserved, hugetlbfs on $(awk '$3=="hugetlbfs"{print $2; exit}' /proc/mounts)"
else
    echo "hugepages: none available here; the gateway falls back to --no-huge"
fi
