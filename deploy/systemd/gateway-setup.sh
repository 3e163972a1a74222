#!/usr/bin/env bash
# Prepares the host for the gateway; gateway.service runs it before every start (ExecStartPre).
# Idempotent: it changes only what is not already so.
#   1. hugepages of the kernel's default size (1 GiB pages with default_hugepagesz=1G on the
#      kernel command line, else 2 MiB pages): per NUMA node on a machine with more than one
#      node (GATEWAY_HUGEPAGES_*_NODES), the total otherwise; hugetlbfs mounted.
#   2. vfio-pci loaded, and the ports bound to it with dpdk-devbind.py: those of
#      GATEWAY_PCI_DEVICES that the config (GATEWAY_CONFIG) uses, read with python3's tomllib
#      when it is there; a port the config uses that the list lacks stops the start. The
#      firmware version of a port still on its kernel driver is logged before it is bound.
#   3. the vfio group devices of those ports and the hugetlbfs mount given to the user the
#      gateway runs as (gateway.service: User=gateway, no capabilities), which they grant.
#   4. checks that only warn: each port's PCIe link at its full speed and width, hugepages on
#      each port's NUMA node, and for GATEWAY_WORKER_CPUS: isolated, nohz_full active, SMT
#      siblings isolated too, governor performance; irqbalance not balancing onto them.
# Settings come from the environment (EnvironmentFile=/etc/default/gateway):
#   GATEWAY_PCI_DEVICES   PCI addresses of the ports, space-separated (every shipped config's)
#   GATEWAY_CONFIG        the gateway's config (default /etc/gateway/gateway.toml)
#   GATEWAY_HUGEPAGES_1G_NODES  1 GiB pages per NUMA node, "node:count ..." (default empty)
#   GATEWAY_HUGEPAGES_2M_NODES  2 MiB pages per NUMA node, the same way (default empty)
#   GATEWAY_HUGEPAGES_1G  1 GiB pages to have reserved in total (default 4): one NUMA node, or
#                         an empty *_NODES list
#   GATEWAY_HUGEPAGES_2M  2 MiB pages in total when 1 GiB pages are not the default (2048)
#   GATEWAY_HUGEPAGE_MOUNT  where hugetlbfs is mounted (default /dev/hugepages)
#   GATEWAY_PCI_DRIVER    the driver to bind to (default vfio-pci)
#   GATEWAY_DEVBIND       the dpdk-devbind.py to use (default: from PATH; Debian package `dpdk`)
#   GATEWAY_USER          the user the gateway runs as (default gateway; gateway.sysusers)
#   GATEWAY_WORKER_CPUS   the workers' CPUs as a CPU list ("2-5"), for the checks (default empty)
set -euo pipefail

PAGES_1G=${GATEWAY_HUGEPAGES_1G:-4}
PAGES_2M=${GATEWAY_HUGEPAGES_2M:-2048}
NODES_1G=${GATEWAY_HUGEPAGES_1G_NODES:-}
NODES_2M=${GATEWAY_HUGEPAGES_2M_NODES:-}
MOUNT=${GATEWAY_HUGEPAGE_MOUNT:-/dev/hugepages}
DRIVER=${GATEWAY_PCI_DRIVER:-vfio-pci}
LISTED=${GATEWAY_PCI_DEVICES:-}
CONFIG=${GATEWAY_CONFIG:-/etc/gateway/gateway.toml}
RUN_AS=${GATEWAY_USER:-gateway}
WORKER_CPUS=${GATEWAY_WORKER_CPUS:-}

say() { echo "gateway-setup: $*"; }
warn() { echo "gateway-setup: warning: $*"; }
die() {
    echo "gateway-setup: $*" >&2
    exit 1
}

# A CPU list ("0-3,8,10-11", as the kernel prints them) one number a line; "(null)" or empty:
# nothing.
cpu_list() {
    local part
    [[ $1 == "(null)" ]] && return 0
    for part in ${1//,/ }; do
        if [[ $part =~ ^([0-9]+)-([0-9]+)$ ]]; then
            seq "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
        elif [[ $part =~ ^[0-9]+$ ]]; then
            echo "$part"
        fi
    done
}
# in_cpu_list CPU LIST: whether CPU is in the CPU list LIST. (grep reads all of it: with -q it
# could stop early and, under pipefail, fail the pipe for a CPU it found.)
in_cpu_list() { cpu_list "$2" | grep -x "$1" >/dev/null; }
# The leading number of a sysfs value ("8.0 GT/s PCIe" -> 8.0, "4" -> 4), empty if none.
leading_number() { [[ $1 =~ ^([0-9]+(\.[0-9]+)?) ]] && echo "${BASH_REMATCH[1]}" || true; }
# A PCI address in the domain:bus:device.function form sysfs uses, or empty if it is none.
pci_full() {
    local dev=${1%%,*}
    dev=${dev,,}
    if [[ $dev =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]]; then
        echo "$dev"
    elif [[ $dev =~ ^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]]; then
        echo "0000:$dev"
    fi
}

[[ $EUID -eq 0 ]] || die "must run as root"

# --- hugepages -------------------------------------------------------------------------------
# The gateway counts free pages of the default size (HugePages_Free in /proc/meminfo), so the
# pages reserved here are always of the kernel's default hugepage size.
default_kb=$(awk '/^Hugepagesize:/ {print $2}' /proc/meminfo)
case ${default_kb:-0} in
    1048576) want=$PAGES_1G per_node=$NODES_1G label="1 GiB" knob=GATEWAY_HUGEPAGES_1G ;;
    2048) want=$PAGES_2M per_node=$NODES_2M label="2 MiB" knob=GATEWAY_HUGEPAGES_2M ;;
    *) die "unexpected default hugepage size ${default_kb:-unknown} kB" ;;
esac
nodes=0
for node_dir in /sys/devices/system/node/node[0-9]*; do
    [[ -d $node_dir ]] && nodes=$((nodes + 1))
done
# reserve SYSFS WANT: raises the nr_hugepages at SYSFS to WANT (never lowers it); prints the
# count it has then. 1 GiB pages rarely come free after boot (memory fragments): reserve them
# on the kernel command line and this is a no-op.
reserve() {
    local have
    have=$(cat "$1")
    if ((have < $2)); then
        echo "$2" >"$1" 2>/dev/null || true
        have=$(cat "$1")
    fi
    echo "$have"
}
if ((nodes > 1)) && [[ -n $per_node ]]; then
    # Boot-time hugepages=N splits the pages evenly over the nodes, so the node the NIC and the
    # workers are on may hold too few of them: reserve each node's own.
    want=0 have=0
    for pair in ${per_node//,/ }; do
        [[ $pair =~ ^([0-9]+):([0-9]+)$ ]] || die "${knob}_NODES: '$pair' is not node:count"
        node=${BASH_REMATCH[1]} count=${BASH_REMATCH[2]}
        sysfs=/sys/devices/system/node/node$node/hugepages/hugepages-${default_kb}kB/nr_hugepages
        [[ -e $sysfs ]] || die "${knob}_NODES: this machine has no NUMA node $node ($sysfs)"
        got=$(reserve "$sysfs" "$count")
        ((got >= count)) \
            || warn "only $got of $count ${label} hugepages on node $node; reserve them at boot (hugepagesz=... hugepages=$node:$count)"
        want=$((want + count)) have=$((have + got))
    done
    where="on nodes ${per_node}"
else
    ((nodes > 1)) && warn "${knob}_NODES is empty: $want x ${label} hugepages in total, spread over the nodes by the kernel"
    have=$(reserve "/sys/kernel/mm/hugepages/hugepages-${default_kb}kB/nr_hugepages" "$want")
    ((have >= want)) || warn "only $have of $want ${label} hugepages reserved; reserve them at boot"
    where="in total"
fi
total=$(cat "/sys/kernel/mm/hugepages/hugepages-${default_kb}kB/nr_hugepages")
((total > 0)) || die "no ${label} hugepages could be reserved (wanted $want); reserve them at boot"

if ! awk -v m="$MOUNT" '$2 == m && $3 == "hugetlbfs" {found=1} END {exit !found}' /proc/mounts; then
    mkdir -p "$MOUNT"
    mount -t hugetlbfs -o "pagesize=${default_kb}K" nodev "$MOUNT"
fi
say "$total x ${label} hugepages (wanted $want $where), hugetlbfs on $MOUNT"
# The gateway (an unprivileged user) may put page files there; nobody else may.
if id -u "$RUN_AS" >/dev/null 2>&1; then
    chown "root:$(id -gn "$RUN_AS")" "$MOUNT"
    chmod 1770 "$MOUNT"
fi

# --- which ports -----------------------------------------------------------------------------
# The config's PCI devices (interfaces[].device and bond members), when python3 with tomllib
# (3.11+, Debian 12) can read it; dpdk-devbind.py is python3 too.
used=
config_read=no
if [[ -r $CONFIG ]] && command -v python3 >/dev/null \
    && used=$(python3 - "$CONFIG" 2>/dev/null <<'PY'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)
devices = []
for iface in config.get("interfaces", []):
    devices.append(iface.get("device", ""))
    devices += (iface.get("bond") or {}).get("members", [])
for device in devices:
    name = device.split(",")[0].strip().lower()
    if re.fullmatch(r"([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name):
        print(name if name.count(":") == 2 else "0000:" + name)
PY
    ); then
    config_read=yes
fi
listed=
for dev in $LISTED; do
    full=$(pci_full "$dev")
    [[ -n $full ]] || die "GATEWAY_PCI_DEVICES: '$dev' is not a PCI address (domain:bus:device.function)"
    listed+=" $full"
done
DEVICES=
if [[ $config_read == yes ]]; then
    for dev in $used; do
        [[ " $listed " == *" $dev "* ]] \
            || die "$CONFIG uses PCI device $dev, which GATEWAY_PCI_DEVICES (/etc/default/gateway) does not list: add it"
        [[ -e /sys/bus/pci/devices/$dev ]] || die "$CONFIG uses PCI device $dev, which does not exist (lspci -D lists them)"
        [[ " $DEVICES " == *" $dev "* ]] || DEVICES+=" $dev"
    done
    for dev in $listed; do
        [[ " $DEVICES " == *" $dev "* ]] || say "$dev (GATEWAY_PCI_DEVICES) is not used by $CONFIG: left to its driver"
    done
else
    say "could not read the PCI devices of $CONFIG (python3 3.11+ for tomllib): binding every listed one"
    for dev in $listed; do
        if [[ -e /sys/bus/pci/devices/$dev ]]; then
            DEVICES+=" $dev"
        else
            warn "$dev (GATEWAY_PCI_DEVICES) does not exist: skipped (if the config uses it, the gateway will not start)"
        fi
    done
fi

# --- worker CPUs (checks only) -------------------------------------------------------------------
if [[ -n $WORKER_CPUS ]]; then
    cpu=/sys/devices/system/cpu
    isolated=$(cat "$cpu/isolated" 2>/dev/null || true)
    nohz_full=$(cat "$cpu/nohz_full" 2>/dev/null || true)
    [[ -e $cpu/nohz_full ]] || warn "the kernel has no nohz_full (CONFIG_NO_HZ_FULL): the tick keeps interrupting the workers"
    for c in $(cpu_list "$WORKER_CPUS"); do
        [[ -d $cpu/cpu$c ]] || {
            warn "worker CPU $c (GATEWAY_WORKER_CPUS) does not exist"
            continue
        }
        in_cpu_list "$c" "$isolated" || warn "worker CPU $c is not isolated (isolcpus=managed_irq,domain,...; $cpu/isolated: '${isolated}')"
        if [[ -e $cpu/nohz_full ]] && ! in_cpu_list "$c" "$nohz_full"; then
            warn "nohz_full is not active on worker CPU $c ($cpu/nohz_full: '${nohz_full}')"
        fi
        siblings=$(cat "$cpu/cpu$c/topology/thread_siblings_list" 2>/dev/null || echo "$c")
        for s in $(cpu_list "$siblings"); do
            [[ $s == "$c" ]] && continue
            in_cpu_list "$s" "$isolated" || in_cpu_list "$s" "$WORKER_CPUS" \
                || warn "CPU $s, the SMT sibling of worker CPU $c, is not isolated: tasks there share the worker's core"
        done
        governor=$(cat "$cpu/cpu$c/cpufreq/scaling_governor" 2>/dev/null || true)
        [[ -z $governor || $governor == performance ]] \
            || warn "worker CPU $c runs the cpufreq governor '$governor', not performance"
    done
    if command -v pgrep >/dev/null && pgrep -x irqbalance >/dev/null; then
        grep -qsE '^IRQBALANCE_BANNED_(CPULIST|CPUS)=' /etc/default/irqbalance \
            || warn "irqbalance runs and /etc/default/irqbalance bans no CPU: ban the workers and their siblings there (IRQBALANCE_BANNED_CPULIST), or stop it"
    fi
fi

# --- vfio-pci and the ports ------------------------------------------------------------------
if [[ -z $DEVICES ]]; then
    say "no PCI device to bind (GATEWAY_PCI_DEVICES empty, or a vdev-only config)"
    exit 0
fi
if [[ ! -d /sys/bus/pci/drivers/$DRIVER ]]; then
    command -v modprobe >/dev/null || die "$DRIVER is not loaded and modprobe is missing (apt-get install kmod)"
    modprobe "$DRIVER"
fi
if [[ $DRIVER == vfio-pci && ! -e /sys/kernel/iommu_groups/0 ]]; then
    warn "no IOMMU groups; enable VT-d in the BIOS and boot with intel_iommu=on iommu=pt"
fi
DEVBIND=${GATEWAY_DEVBIND:-$(command -v dpdk-devbind.py || true)}
[[ -n $DEVBIND ]] || die "dpdk-devbind.py not found: apt-get install dpdk"
driver_of() {
    if [[ -e /sys/bus/pci/devices/$1/driver ]]; then
        basename "$(readlink -f "/sys/bus/pci/devices/$1/driver")"
    fi
}
for dev in $DEVICES; do
    sys=/sys/bus/pci/devices/$dev
    current=$(driver_of "$dev")
    if [[ $current == "$DRIVER" ]]; then
        say "$dev already on $DRIVER"
    else
        # Note the firmware while the kernel driver still answers for it (the gateway exports
        # it too, as gateway_port_info{firmware}).
        for net in "$sys"/net/*; do
            [[ -e $net ]] && command -v ethtool >/dev/null || continue
            say "$dev ($(basename "$net")) before binding: $(ethtool -i "$(basename "$net")" 2>/dev/null \
                | grep -E '^(driver|version|firmware-version):' | tr '\n' ' ')"
        done
        # dpdk-devbind.py refuses a port whose kernel interface is up with routes (it only warns
        # and goes on): take it out of the host's network configuration first.
        "$DEVBIND" --bind="$DRIVER" "$dev"
        [[ $(driver_of "$dev") == "$DRIVER" ]] \
            || die "$dev is still on ${current:-no driver}, not $DRIVER: is its kernel interface up with routes? (dpdk-devbind.py --status-dev net)"
        say "$dev bound to $DRIVER (was ${current:-no driver})"
    fi
    # The PCIe link: an X550 wants 8 GT/s x4 (PCIe 3.0 x4); fewer lanes or a 5 GT/s (2.0) slot
    # cannot carry two 10G ports at line rate.
    speed=$(leading_number "$(cat "$sys/current_link_speed" 2>/dev/null || true)")
    width=$(leading_number "$(cat "$sys/current_link_width" 2>/dev/null || true)")
    max_speed=$(leading_number "$(cat "$sys/max_link_speed" 2>/dev/null || true)")
    max_width=$(leading_number "$(cat "$sys/max_link_width" 2>/dev/null || true)")
    link="PCIe ${speed:-?} GT/s x${width:-?}"
    if [[ -n $speed && -n $max_speed ]] && awk -v a="$speed" -v b="$max_speed" 'BEGIN {exit !(a < b)}'; then
        warn "$dev: PCIe link at $speed GT/s, the device can do $max_speed: a slower slot, or one wired through the chipset (lspci -vv -s $dev: LnkSta)"
    fi
    if [[ -n $width && -n $max_width ]] && ((width < max_width)); then
        warn "$dev: PCIe link x$width, the device can do x$max_width: a narrower slot (lspci -vv -s $dev: LnkSta)"
    fi
    # Hugepages on the port's NUMA node: its mempool is created there.
    node=$(cat "$sys/numa_node" 2>/dev/null || echo -1)
    node_pages=/sys/devices/system/node/node$node/hugepages/hugepages-${default_kb}kB/nr_hugepages
    if ((nodes > 1 && node >= 0)) && [[ -e $node_pages ]]; then
        if (($(cat "$node_pages") == 0)); then
            warn "$dev is on NUMA node $node, which has no ${label} hugepages (${knob}_NODES=\"$node:...\")"
        elif [[ -n $per_node && ! " ${per_node//,/ } " =~ \ $node:[1-9] ]]; then
            warn "$dev is on NUMA node $node, for which ${knob}_NODES (\"$per_node\") reserves nothing"
        fi
    fi
    say "$dev: NUMA node $node, $link"
done
# The gateway runs without capabilities: owning its ports' vfio group devices is its whole
# grant to them (/dev/vfio/vfio, the container, is open to all by the kernel's default).
if id -u "$RUN_AS" >/dev/null 2>&1; then
    for dev in $DEVICES; do
        [[ $DRIVER == vfio-pci ]] || continue
        group=$(basename "$(readlink -f "/sys/bus/pci/devices/$dev/iommu_group")")
        [[ -e /dev/vfio/$group ]] || die "$dev: no /dev/vfio/$group (is the IOMMU on?)"
        chown "$RUN_AS" "/dev/vfio/$group"
        say "$dev: /dev/vfio/$group belongs to $RUN_AS"
    done
else
    warn "no user $RUN_AS (install gateway.sysusers and run systemd-sysusers)"
fi
