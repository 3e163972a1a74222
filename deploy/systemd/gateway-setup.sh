#!/usr/bin/env bash
# Prepares the host for the gateway; gateway.service runs it before every start (ExecStartPre).
# Idempotent: it changes only what is not already so.
#   1. hugepages: 1 GiB pages where the kernel's default hugepage size is 1 GiB
#      (default_hugepagesz=1G on the kernel command line), else 2 MiB pages; hugetlbfs mounted.
#   2. vfio-pci loaded, and GATEWAY_PCI_DEVICES bound to it with dpdk-devbind.py.
#   3. the vfio group devices of those ports and the hugetlbfs mount given to the user the
#      gateway runs as (gateway.service: User=gateway, no capabilities), which they grant.
# Settings come from the environment (EnvironmentFile=/etc/default/gateway):
#   GATEWAY_PCI_DEVICES   PCI addresses of the ports in the config, space-separated
#   GATEWAY_HUGEPAGES_1G  1 GiB pages to have reserved (default 4)
#   GATEWAY_HUGEPAGES_2M  2 MiB pages to reserve when 1 GiB pages are not the default (2048)
#   GATEWAY_HUGEPAGE_MOUNT  where hugetlbfs is mounted (default /dev/hugepages)
#   GATEWAY_PCI_DRIVER    the driver to bind to (default vfio-pci)
#   GATEWAY_DEVBIND       the dpdk-devbind.py to use (default: from PATH; Debian package `dpdk`)
#   GATEWAY_USER          the user the gateway runs as (default gateway; gateway.sysusers)
set -euo pipefail

PAGES_1G=${GATEWAY_HUGEPAGES_1G:-4}
PAGES_2M=${GATEWAY_HUGEPAGES_2M:-2048}
MOUNT=${GATEWAY_HUGEPAGE_MOUNT:-/dev/hugepages}
DRIVER=${GATEWAY_PCI_DRIVER:-vfio-pci}
DEVICES=${GATEWAY_PCI_DEVICES:-}
RUN_AS=${GATEWAY_USER:-gateway}

say() { echo "gateway-setup: $*"; }
die() {
    echo "gateway-setup: $*" >&2
    exit 1
}

[[ $EUID -eq 0 ]] || die "must run as root"

# --- hugepages -------------------------------------------------------------------------------
# The gateway counts free pages of the default size (HugePages_Free in /proc/meminfo), so the
# pages reserved here are always of the kernel's default hugepage size.
default_kb=$(awk '/^Hugepagesize:/ {print $2}' /proc/meminfo)
case ${default_kb:-0} in
    1048576) want=$PAGES_1G label="1 GiB" ;;
    2048) want=$PAGES_2M label="2 MiB" ;;
    *) die "unexpected default hugepage size ${default_kb:-unknown} kB" ;;
esac
sysfs=/sys/kernel/mm/hugepages/hugepages-${default_kb}kB/nr_hugepages
have=$(cat "$sysfs")
if ((have < want)); then
    # 1 GiB pages rarely come free after boot (memory fragments): reserve them on the kernel
    # command line (hugepages=N) and this is a no-op.
    echo "$want" >"$sysfs" || true
    have=$(cat "$sysfs")
fi
((have > 0)) || die "no ${label} hugepages could be reserved (wanted $want); reserve them at boot"
((have >= want)) || say "only $have of $want ${label} hugepages reserved; reserve them at boot"

if ! awk -v m="$MOUNT" '$2 == m && $3 == "hugetlbfs" {found=1} END {exit !found}' /proc/mounts; then
    mkdir -p "$MOUNT"
    mount -t hugetlbfs -o "pagesize=${default_kb}K" nodev "$MOUNT"
fi
say "$have x ${label} hugepages, hugetlbfs on $MOUNT"
# The gateway (an unprivileged user) may put page files there; nobody else may.
if id -u "$RUN_AS" >/dev/null 2>&1; then
    chown "root:$(id -gn "$RUN_AS")" "$MOUNT"
    chmod 1770 "$MOUNT"
fi

# --- vfio-pci and the ports ------------------------------------------------------------------
if [[ -z $DEVICES ]]; then
    say "GATEWAY_PCI_DEVICES is empty: no PCI device to bind (vdev-only config)"
    exit 0
fi
for dev in $DEVICES; do
    [[ -e /sys/bus/pci/devices/$dev ]] || die "PCI device $dev does not exist (lspci -D lists them)"
done
if [[ ! -d /sys/bus/pci/drivers/$DRIVER ]]; then
    command -v modprobe >/dev/null || die "$DRIVER is not loaded and modprobe is missing (apt-get install kmod)"
    modprobe "$DRIVER"
fi
if [[ $DRIVER == vfio-pci && ! -e /sys/kernel/iommu_groups/0 ]]; then
    say "warning: no IOMMU groups; enable VT-d in the BIOS and boot with intel_iommu=on iommu=pt"
fi
DEVBIND=${GATEWAY_DEVBIND:-$(command -v dpdk-devbind.py || true)}
[[ -n $DEVBIND ]] || die "dpdk-devbind.py not found: apt-get install dpdk"
for dev in $DEVICES; do
    current=
    if [[ -e /sys/bus/pci/devices/$dev/driver ]]; then
        current=$(basename "$(readlink -f "/sys/bus/pci/devices/$dev/driver")")
    fi
    if [[ $current == "$DRIVER" ]]; then
        say "$dev already on $DRIVER"
        continue
    fi
    # dpdk-devbind.py refuses a port whose kernel interface is up with routes: take it out of
    # the host's network configuration first.
    "$DEVBIND" --bind="$DRIVER" "$dev"
    say "$dev bound to $DRIVER (was ${current:-no driver}), NUMA node $(cat "/sys/bus/pci/devices/$dev/numa_node")"
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
    say "warning: no user $RUN_AS (install gateway.sysusers and run systemd-sysusers)"
fi
