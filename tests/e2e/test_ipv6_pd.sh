#!/usr/bin/env bash
# IPv6 from the ISP (issue 18): the WAN's address and default route from the ISP's Router
# Advertisement, and a prefix delegated by DHCPv6 announced on the LAN. The ISP is real
# daemons in the WAN namespace: radvd (2001:db8:a::/64, Managed flag) and Kea's
# kea-dhcp6-server delegating /56s of 2001:db8:ff00::/40. dhcpcd runs on the gateway's WAN
# twin with the shipped deploy/dhcpcd/gateway-wan6.conf: its RS and DHCPv6 Solicit leave
# through the dataplane, the ISP's RA and DHCPv6 Reply are punted back to the twin, and
# dhcpcd configures the WAN twin (SLAAC, default route) and the LAN twin (the /64 of the
# delegated prefix). The gateway follows both over netlink:
# - the ISP reaches the gateway at its SLAAC address (the dataplane answers for it);
# - the gateway reports by MLD that it listens for the delegated address's solicitations;
# - a LAN host forms a SLAAC address in the delegated prefix from the gateway's RA, which
#   now offers the gateway as default router, and pings and runs iperf3 to the ISP both ways;
# - when dhcpcd stops (its addresses and routes go), the gateway lets the WAN address go and
#   advertises the delegated prefix with zero lifetimes, which deprecates the host's address.
#
#   gwlab-lan: eth0 (SLAAC in 2001:db8:ff00::/64) --veth-- gwl-lan [gateway, twin lan]
#   gwlab-wan: eth0 2001:db8:a::1/64, radvd, Kea --veth-- gwl-wan [gateway, twin wan]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

TWIN_NS=gwlab-gw
cleanup_pd() {
    for ns in "$TWIN_NS" gwlab-wan; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
    done
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
}
trap cleanup_pd EXIT
gw() { ip netns exec "$TWIN_NS" "$@"; }

for tool in dhcpcd radvd kea-dhcp6; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs it"
done
# The shipped unit that runs dhcpcd for IPv6 on the twin, after the gateway.
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$WORK/systemd"
    cp "$ROOT/deploy/systemd/gateway.service" "$ROOT/deploy/systemd/gateway-dhcpcd6.service" "$WORK/systemd/"
    systemd-analyze verify "$WORK/systemd/gateway-dhcpcd6.service" >"$WORK/verify.txt" 2>&1 ||
        fail "systemd-analyze verify gateway-dhcpcd6.service: $(cat "$WORK/verify.txt")"
    grep -q '^After=gateway.service' "$WORK/systemd/gateway-dhcpcd6.service" ||
        fail "gateway-dhcpcd6.service does not start after the gateway"
    pass "systemd-analyze verify accepts deploy/systemd/gateway-dhcpcd6.service"
fi
lab_up_with_twin_netns "$TWIN_NS"
cat >"$WORK/pd.toml" <<TOML
[eal]
hugepages = "auto"
file_prefix = "gateway-e2e"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_af_packet0,iface=gwl-lan"
address = "192.168.10.1/24"
kernel_twin = true
[interfaces.ipv6]
delegated_prefix = true
router_advertisements = true
ra_interval_secs = 30
[[interfaces]]
name = "wan"
device = "net_af_packet1,iface=gwl-wan"
address = "10.0.0.1/24"
kernel_twin = true
[interfaces.ipv6]
autoconfigure = true
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[kernel_twins]
netns = "$TWIN_NS"
[metrics]
listen = "127.0.0.1:19161"
[ctl]
socket = "$WORK/run/ctl.sock"
TOML
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
with_e2e_workers "$WORK/pd.toml"
METRICS=http://127.0.0.1:19161/metrics
dropped() { metric "gateway_dropped_packets_total{reason=\"$1\""; }

# check-config: the kernel configures an interface only through a twin.
sed '/^kernel_twin = true$/d' "$WORK/pd.toml" >"$WORK/no-twin.toml"
if "$GATEWAY" check-config "$WORK/no-twin.toml" >"$WORK/check.txt" 2>&1; then
    fail "check-config accepted delegated_prefix without a kernel twin"
fi
grep -q 'interfaces\[0\]\.ipv6\.delegated_prefix' "$WORK/check.txt" ||
    fail "check-config did not name interfaces[0].ipv6.delegated_prefix: $(cat "$WORK/check.txt")"
pass "check-config refuses delegated_prefix without a twin, naming the field"

start_gateway "$WORK/pd.toml"

# The ISP's link: no duplicate address detection, so that Kea binds its link-local socket
# at once (a tentative address cannot be bound), and forwarding (it routes the delegated
# prefix back to the gateway).
wan sysctl -qw net.ipv6.conf.eth0.accept_dad=0 net.ipv6.conf.all.disable_ipv6=0 \
    net.ipv6.conf.eth0.disable_ipv6=0 net.ipv6.conf.all.forwarding=1
wan ip -6 addr add 2001:db8:a::1/64 dev eth0 nodad
cat >"$WORK/radvd.conf" <<'CONF'
interface eth0 {
    AdvSendAdvert on;
    AdvManagedFlag on;
    AdvOtherConfigFlag on;
    MinRtrAdvInterval 3;
    MaxRtrAdvInterval 4;
    AdvDefaultLifetime 1800;
    prefix 2001:db8:a::/64 { AdvOnLink on; AdvAutonomous on; };
};
CONF
wan radvd -C "$WORK/radvd.conf" -p "$WORK/radvd.pid" -m logfile -l "$WORK/radvd.log"
mkdir -p "$WORK/kea"
cat >"$WORK/kea.json" <<JSON
{ "Dhcp6": {
    "interfaces-config": { "interfaces": [ "eth0" ],
                           "service-sockets-max-retries": 20, "service-sockets-retry-wait-time": 500 },
    "lease-database": { "type": "memfile", "persist": false },
    "data-directory": "$WORK/kea",
    "renew-timer": 1000, "rebind-timer": 2000, "preferred-lifetime": 3000, "valid-lifetime": 4000,
    "subnet6": [ { "id": 1, "subnet": "2001:db8:a::/64", "interface": "eth0", "rapid-commit": true,
        "pd-pools": [ { "prefix": "2001:db8:ff00::", "prefix-len": 40, "delegated-len": 56 } ] } ],
    "loggers": [ { "name": "kea-dhcp6", "severity": "INFO",
                   "output_options": [ { "output": "$WORK/kea/kea.log" } ] } ]
} }
JSON
KEA_PIDFILE_DIR="$WORK/kea" KEA_LOCKFILE_DIR="$WORK/kea" \
    ip netns exec gwlab-wan kea-dhcp6 -c "$WORK/kea.json" >"$WORK/kea/stdout.log" 2>&1 </dev/null &

# What the gateway reports by MLD on the LAN from now on: the groups of each report, one
# line per report, so that the delegated address's solicited-node group can be looked for.
# The records are read from the bytes: scapy 2.5 dissects only a report's first record.
cat >"$WORK/mld_sniff.py" <<'PY'
import ipaddress, sys
from scapy.all import Ether, IPv6, ICMPv6MLReport2, sniff, conf
conf.verb = 0
def show(packet):
    after_ip = bytes(packet[IPv6].payload)
    report = after_ip[(after_ip[1] + 1) * 8:]  # past the hop-by-hop header
    groups, at = [], 8
    for _ in range(int.from_bytes(report[6:8], "big")):
        aux, sources = report[at + 1], int.from_bytes(report[at + 2:at + 4], "big")
        groups.append(str(ipaddress.IPv6Address(report[at + 4:at + 20])))
        at += 20 + 16 * sources + 4 * aux
    print(" ".join(groups), flush=True)
sniff(iface="eth0", prn=show, timeout=float(sys.argv[2]),
      lfilter=lambda p: ICMPv6MLReport2 in p and p[Ether].src == sys.argv[1])
PY
ip netns exec gwlab-lan /usr/bin/python3 "$WORK/mld_sniff.py" "$(cat /sys/class/net/gwl-lan/address)" 20 \
    >"$WORK/mld.txt" 2>&1 &
MLD_SNIFFER=$!
sleep 0.5

# dhcpcd with the shipped config, without its start-up delays (the RS's and the Solicit's
# random waits) and with rapid commit (Solicit and Reply only): a lab has no crowd to
# spread. Its state goes to tmpfs in a mount namespace of its own (see test_netlink.sh).
{
    echo nodelay
    echo "option rapid_commit"
    cat "$ROOT/deploy/dhcpcd/gateway-wan6.conf"
} >"$WORK/dhcpcd6.conf"
printf '#!/bin/sh\necho "$reason $interface" >>"%s"\n' "$WORK/dhcpcd-hook.log" >"$WORK/dhcpcd-hook"
chmod +x "$WORK/dhcpcd-hook"
mkdir -p /run/dhcpcd /var/lib/dhcpcd
ip netns exec "$TWIN_NS" unshare --mount sh -c \
    'mount -t tmpfs tmpfs /run/dhcpcd && mount -t tmpfs tmpfs /var/lib/dhcpcd && exec "$@"' sh \
    dhcpcd -B -6 -f "$WORK/dhcpcd6.conf" -c "$WORK/dhcpcd-hook" wan >>"$WORK/dhcpcd.log" 2>&1 &
DHCPCD_PID=$!

# global_address NS_FN DEV PREFIX: the device's global address in PREFIX once usable.
global_address() {
    "$1" ip -6 -o addr show dev "$2" scope global | grep -v tentative |
        awk '{print $4}' | grep "^$3" | head -n 1 || true
}
wan_address= lan_address=
for _ in $(seq 1 75); do
    wan_address=$(global_address gw wan 2001:db8:a:)
    lan_address=$(global_address gw lan 2001:db8:ff)
    [[ -n $wan_address && -n $lan_address ]] && break
    kill -0 "$DHCPCD_PID" 2>/dev/null || break
    sleep 0.2
done
[[ -n $wan_address ]] ||
    fail "the WAN twin got no SLAAC address from the ISP's RA: $(tail -n 8 "$WORK/dhcpcd.log"); radvd: $(tail -n 3 "$WORK/radvd.log")"
[[ -n $lan_address ]] ||
    fail "the LAN twin got no address from a delegated prefix: $(tail -n 8 "$WORK/dhcpcd.log"); Kea: $(tail -n 5 "$WORK/kea/kea.log")"
pass "dhcpcd on the twins: WAN $wan_address (SLAAC), LAN $lan_address (delegated)"
gw ip -6 route show default | grep -q "via fe80::.* dev wan" ||
    fail "no default route from the ISP's RA on the WAN twin: $(gw ip -6 route)"
wan_address=${wan_address%/*}
lan_address=${lan_address%/*}
delegated=${lan_address%::1}::

# The gateway joins the new address's solicited-node group (RFC 4291 2.7.1) and says so, so
# that switches that snoop MLD forward the LAN hosts' solicitations for it.
group=$(/usr/bin/python3 -c '
import ipaddress, sys
low = int(ipaddress.IPv6Address(sys.argv[1])) & 0xffffff
print(ipaddress.IPv6Address(int(ipaddress.IPv6Address("ff02::1:ff00:0")) | low))' "$lan_address")
# The twin's kernel reports its own groups from the same MAC; the gateway's reports are
# the ones that name all routers (ff02::2) too.
gateway_report() { grep -w "$group" "$WORK/mld.txt" | grep -qw "ff02::2"; }
for _ in $(seq 1 30); do
    gateway_report && break
    sleep 0.1
done
kill "$MLD_SNIFFER" 2>/dev/null || true
gateway_report ||
    fail "no MLD report of the gateway's names $group (the delegated address's group): $(cat "$WORK/mld.txt")"
pass "the gateway reported joining $group, the delegated address's solicited-node group, by MLD"

# What the operator sees: the delegated and SLAAC addresses on their interfaces, the ISP's
# default route.
for _ in $(seq 1 20); do
    [[ $(ctl show interfaces) == *"$lan_address/64"* ]] && break
    sleep 0.1
done
expect_output "gateway ctl show interfaces lists the delegated LAN address" \
    "^ +$lan_address/64" ctl show interfaces
expect_output "... and the WAN's SLAAC address" "^ +$wan_address/64" ctl show interfaces
expect_output "gateway ctl show routes lists the ISP's default route" \
    "^::/0 +wan +fe80::" ctl show routes

# The gateway answers at the WAN address the kernel took (the dataplane, not the twin: echo
# for the gateway's addresses is the dataplane's).
for _ in $(seq 1 20); do
    wan ping -6 -c 1 -W 1 "$wan_address" >/dev/null 2>&1 && break
    sleep 0.2
done
expect_output "the ISP pings the gateway at its SLAAC address $wan_address" \
    " 0% packet loss" wan ping -6 -c 3 -i 0.2 -W 2 "$wan_address"

# The ISP routes the delegated prefix to the gateway (Kea installs no route itself).
wan ip -6 route add "${delegated}/56" via "$wan_address"
# A LAN host joins: SLAAC in the delegated /64 from the gateway's advertisement.
lan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0 \
    net.ipv6.conf.eth0.accept_ra=1 net.ipv6.conf.eth0.autoconf=1 net.ipv6.conf.eth0.accept_dad=1
host_address=
for _ in $(seq 1 50); do
    host_address=$(global_address lan eth0 "${delegated%::}")
    [[ -n $host_address ]] && break
    sleep 0.2
done
[[ -n $host_address ]] ||
    fail "the LAN host formed no address in the delegated ${delegated}/64: $(lan ip -6 addr show dev eth0)"
pass "the LAN host formed ${host_address} from the delegated prefix the gateway announced"
# The advertisement promised no more than the lease (Kea: 4000 s valid, 3000 s preferred)
# and RFC 9096's limits (5400 and 2700 s): not RFC 4861's 30 and 7 days.
lifetimes=$(lan ip -6 -o addr show dev eth0 | grep -F "$host_address" | grep -o 'valid_lft [0-9]*sec preferred_lft [0-9]*sec' || true)
read -r valid preferred < <(sed -E 's/valid_lft ([0-9]+)sec preferred_lft ([0-9]+)sec/\1 \2/' <<<"$lifetimes")
[[ -n ${valid:-} ]] || fail "no lifetimes on the host's ${host_address}: '$(lan ip -6 addr show dev eth0)'"
(( valid > 3000 && valid <= 4000 && preferred > 2000 && preferred <= 2700 )) ||
    fail "the host's ${host_address} has valid ${valid} s and preferred ${preferred} s: expected the lease's at most 4000 s and RFC 9096's 2700 s"
pass "the delegated prefix is announced for what is left of the lease: valid ${valid} s, preferred ${preferred} s"
for _ in $(seq 1 20); do
    [[ -n $(lan ip -6 route show default) ]] && break
    sleep 0.2
done
[[ $(lan ip -6 route show default) == *"via fe80::"*"dev eth0"* ]] ||
    fail "the gateway is not the LAN host's default router: $(lan ip -6 route)"
pass "the gateway is the LAN host's default router (a default route leaves by the WAN)"

expect_output "the LAN host pings the ISP (2001:db8:a::1) from the delegated prefix" \
    " 0% packet loss" lan ping -6 -c 3 -i 0.2 -W 2 2001:db8:a::1
read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 2001:db8:a::1 -t 1) ||
    fail "iperf3 over IPv6, LAN -> ISP"
[[ $peer == "${host_address%/*}" ]] || fail "the ISP saw $peer, not the host's own address"
pass "iperf3 LAN -> ISP over the delegated prefix: $gbps Gbit/s, no NAT (the ISP saw $peer)"
read -r _ gbps < <(iperf3_run gwlab-wan gwlab-lan 2001:db8:a::1 -t 1 -R) ||
    fail "iperf3 over IPv6, ISP -> LAN (reverse)"
pass "iperf3 ISP -> LAN: $gbps Gbit/s"
invalid=$(dropped conntrack_invalid)
[[ $invalid -eq 0 ]] || fail "$invalid packets dropped as conntrack_invalid"
pass "no conntrack_invalid drop"

# dhcpcd stops (SIGTERM: it removes what it configured): the gateway lets the address go.
kill -TERM "$DHCPCD_PID"
for _ in $(seq 1 50); do
    [[ -z $(global_address gw wan 2001:db8:a:) ]] && break
    sleep 0.2
done
[[ -z $(global_address gw wan 2001:db8:a:) ]] || fail "dhcpcd left the WAN twin's address behind"
gone=false
for _ in $(seq 1 10); do
    if ! wan ping -6 -c 1 -W 1 "$wan_address" >/dev/null 2>&1; then
        gone=true
        break
    fi
    sleep 0.2
done
$gone || fail "the gateway still answers at $wan_address after the kernel removed it"
pass "once dhcpcd removed the WAN address, the gateway no longer answers at it"
# The delegated prefix went with it: the gateway's next advertisements carry it with zero
# lifetimes (RFC 7084 L-13), so the host stops choosing its address for new connections.
deprecated=false
for _ in $(seq 1 30); do
    if lan ip -6 -o addr show dev eth0 | grep -q "$host_address .*deprecated"; then
        deprecated=true
        break
    fi
    sleep 0.1
done
$deprecated || fail "the LAN host's address in the withdrawn prefix is not deprecated: $(lan ip -6 -o addr show dev eth0)"
pass "the withdrawn prefix was advertised with zero lifetimes: the host's ${host_address} is deprecated"
