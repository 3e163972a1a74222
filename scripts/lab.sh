#!/usr/bin/env bash
# The lab: network namespaces as hosts, veth pairs as cables, the gateway's DPDK ports on the
# root-namespace ends (net_af_packet). Idempotent: `up` twice or `down` twice is harmless.
#
#   gwlab-lan (192.168.10.2/24) --veth-- gwl-lan [gateway] gwl-wan --veth-- gwlab-wan (10.0.0.2/24)
#
# `up dmz` adds a third host, a routed DMZ: gwlab-dmz (172.16.20.2/24) --veth-- gwl-dmz.
#
# Usage: scripts/lab.sh up [dmz]|down|status
set -euo pipefail

LAN_NS=gwlab-lan
WAN_NS=gwlab-wan
DMZ_NS=gwlab-dmz

quiet_offloads() {
    # af_packet sees what the kernel hands it; with offloads on it would get 64 KiB GSO
    # frames and unfinished checksums.
    ethtool -K "$1" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
}

host() { # ns gw-side-if host-ip/len gateway-ip
    local ns=$1 ifname=$2 addr=$3 gw=$4
    ip netns add "$ns"
    ip link add "$ifname" type veth peer name eth0 netns "$ns"
    sysctl -qw "net.ipv6.conf.$ifname.disable_ipv6=1"
    ip link set "$ifname" up
    quiet_offloads "$ifname"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr" dev eth0
    ip -n "$ns" link set eth0 up
    ip netns exec "$ns" ethtool -K eth0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
    ip -n "$ns" route add default via "$gw"
}

up() {
    down
    host "$LAN_NS" gwl-lan 192.168.10.2/24 192.168.10.1
    host "$WAN_NS" gwl-wan 10.0.0.2/24 10.0.0.1
    echo "lab up: $LAN_NS 192.168.10.2 <-> gwl-lan [gateway] gwl-wan <-> $WAN_NS 10.0.0.2"
    if [[ ${1:-} == dmz ]]; then
        host "$DMZ_NS" gwl-dmz 172.16.20.2/24 172.16.20.1
        echo "lab up: $DMZ_NS 172.16.20.2 <-> gwl-dmz [gateway]"
    fi
}

down() {
    for ns in "$LAN_NS" "$WAN_NS" "$DMZ_NS"; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
    done
    for ifname in gwl-lan gwl-wan gwl-dmz; do
        ip link del "$ifname" 2>/dev/null || true
    done
}

status() {
    ip netns list | grep -E "^($LAN_NS|$WAN_NS|$DMZ_NS)\b" || echo "no lab namespaces"
    ip -br link show | grep -E '^gwl-' || echo "no lab veths"
}

case "${1:-}" in
    up) up "${2:-}" ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
