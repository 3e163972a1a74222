#!/usr/bin/env bash
# IPv6 (issue 18): the gateway's own addresses, and forwarding through the stateful firewall.
# The LAN host turns IPv6 on after the gateway has started, so its kernel does what a host
# joining the link does: duplicate address detection, a Router Solicitation, SLAAC from the
# advertisement, and the gateway as its default router (an IPv6 default route leaves by the
# WAN). Then it pings the gateway's global and link-local addresses, a scapy probe reads the
# advertisement's fields (prefix, RDNSS, router lifetime), the host pings and runs iperf3 to
# a WAN host both ways, an oversized packet gets Packet Too Big with the WAN's MTU, a hop
# limit of 1 gets Time Exceeded, the WAN host's unsolicited pings are dropped (RFC 6092) but
# a pinhole lets it reach one TCP service on a LAN host's fixed address, and
# hostile or unroutable IPv6 is dropped under its reason while the gateway keeps answering,
# and a guest's Neighbor Discovery spoofing and atomic and overlapping fragments change
# nothing.
#
#   gwlab-lan: eth0 (SLAAC in 2001:db8:10::/64) --veth-- gwl-lan [gateway 2001:db8:10::1/64]
#   gwlab-wan: eth0 2001:db8:ff::2/64 --veth-- gwl-wan [gateway 2001:db8:ff::1/64, MTU 1400]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT
PYTHON=/usr/bin/python3 # Debian's python with scapy (the python3 on PATH may be a shim)

"$ROOT/scripts/lab.sh" up >/dev/null
# The LAN interface's IPv6 side: a /64 for SLAAC and a DNS server to announce; the WAN's: an
# address on the ISP's link and an MTU of 1400, for Packet Too Big. The IPv6 default route
# goes to the WAN host.
lab_config_ipv6 19160 'dns_servers = ["2001:db8:10::53"]' | awk '
    /^name = "wan"/ { in_wan = 1 }
    in_wan && /^mtu = / { print "mtu = 1400"; next }
    { print }' >"$WORK/gateway.toml"
# A pinhole: the WAN may reach TCP 5201 on the LAN host's fixed address 2001:db8:10::5.
printf '\n[[firewall.pinholes]]\ninterface = "wan"\nprotocol = "tcp"\nport = "5201"\nto = "2001:db8:10::5"\n' \
    >>"$WORK/gateway.toml"
[[ $(grep -c '^\[interfaces.ipv6\]' "$WORK/gateway.toml") == 2 ]] || fail "no [interfaces.ipv6] for both interfaces in the config"
grep -q '^mtu = 1400' "$WORK/gateway.toml" || fail "the WAN's MTU was not lowered in the config"
printf '\n[ctl]\nsocket = "%s"\n' "$WORK/run/ctl.sock" >>"$WORK/gateway.toml"
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
METRICS=http://127.0.0.1:19160/metrics
start_gateway "$WORK/gateway.toml"
dropped() { metric "gateway_dropped_packets_total{reason=\"$1\""; }

# The host joins: link-local with DAD, a solicitation, SLAAC from the advertisement.
lan_joins_ipv6 2001:db8:10:
address=$LAN_ADDRESS
pass "the LAN host formed $address by SLAAC from the gateway's advertisement"
pass "the host's IPv6 default route is the gateway: $LAN_DEFAULT_ROUTE"

expect_output "the host pings the gateway's global address" \
    " 0% packet loss" lan ping -6 -c 3 -i 0.2 -W 2 2001:db8:10::1
GATEWAY_MAC=$(cat /sys/class/net/gwl-lan/address)
LINK_LOCAL=$($PYTHON -c "
import sys
mac = [int(b, 16) for b in sys.argv[1].split(':')]
mac[0] ^= 2
eui = mac[:3] + [0xff, 0xfe] + mac[3:]
print('fe80::' + ':'.join('%x' % (eui[i] << 8 | eui[i + 1]) for i in range(0, 8, 2)))
" "$GATEWAY_MAC")
expect_output "the host pings the gateway's link-local address $LINK_LOCAL" \
    " 0% packet loss" lan ping -6 -c 3 -i 0.2 -W 2 "$LINK_LOCAL%eth0"
neighbors=$(metric 'gateway_ipv6_neighbors{worker="control"}')
[[ $neighbors -ge 1 ]] || fail "the gateway learnt no IPv6 neighbour from the host's solicitations (gateway_ipv6_neighbors $neighbors)"
pass "the gateway knows $neighbors IPv6 neighbour(s) from the host's solicitations"
HOST_MAC=$(lan cat /sys/class/net/eth0/address)
expect_output "gateway ctl show neighbors lists the host's IPv6 address" \
    "\"address\": *\"${address%/*}\"" ctl show neighbors --json
expect_output "... at its MAC, on lan" "${address%/*} +$HOST_MAC +lan" ctl show neighbors
expect_output "the host resolved the gateway by Neighbor Discovery, flagged a router" \
    "2001:db8:10::1 lladdr $GATEWAY_MAC router (REACHABLE|STALE|DELAY|PROBE)" lan ip -6 neigh show dev eth0

# The advertisement, read field by field: a solicitation from scapy and its answer.
cat >"$WORK/ra.py" <<'PY'
import sys
from scapy.all import (Ether, IPv6, ICMPv6ND_RS, ICMPv6ND_RA, ICMPv6NDOptSrcLLAddr,
                       ICMPv6NDOptPrefixInfo, ICMPv6NDOptRDNSS, AsyncSniffer, sendp,
                       get_if_hwaddr, conf)
conf.verb = 0
mac = get_if_hwaddr("eth0")
sniffer = AsyncSniffer(iface="eth0", lfilter=lambda p: ICMPv6ND_RA in p and p[Ether].dst == mac, count=1, timeout=5)
sniffer.start()
import time; time.sleep(0.5)
sendp(Ether(src=mac, dst="33:33:00:00:00:02") / IPv6(src=sys.argv[1], dst="ff02::2", hlim=255)
      / ICMPv6ND_RS() / ICMPv6NDOptSrcLLAddr(lladdr=mac), iface="eth0")
sniffer.join()
if not sniffer.results:
    print("no advertisement")
    sys.exit(1)
ra = sniffer.results[0]
print("router_lifetime", ra[ICMPv6ND_RA].routerlifetime)
print("hop_limit", ra[IPv6].hlim)
print("source", ra[IPv6].src)
prefix = ra[ICMPv6NDOptPrefixInfo]
print("prefix %s/%d L=%d A=%d" % (prefix.prefix, prefix.prefixlen, prefix.L, prefix.A))
print("rdnss", " ".join(ra[ICMPv6NDOptRDNSS].dns))
PY
host_link_local=$(lan ip -6 -o addr show dev eth0 scope link | awk '{print $4}' | cut -d/ -f1)
ra=$(lan "$PYTHON" "$WORK/ra.py" "$host_link_local" 2>&1) || fail "no Router Advertisement answered a solicitation: $ra"
for expected in "router_lifetime 90" "hop_limit 255" "source $LINK_LOCAL" \
    "prefix 2001:db8:10::/64 L=1 A=1" "rdnss 2001:db8:10::53"; do
    grep -qx "$expected" <<<"$ra" || fail "the advertisement lacks '$expected': $ra"
done
pass "a solicited advertisement from $LINK_LOCAL: prefix 2001:db8:10::/64 (on-link, SLAAC), RDNSS, router lifetime 90 s (three intervals)"
# A switch's MLD query (from a link-local address, hop limit 1, router alert): the gateway
# reports the groups it listens to, its solicited-node groups among them, so that snooping
# switches forward solicitations to it.
cat >"$WORK/mld.py" <<'PY'
import sys
from scapy.all import (Ether, IPv6, IPv6ExtHdrHopByHop, RouterAlert, ICMPv6MLQuery2,
                       ICMPv6MLReport2, ICMPv6MLDMultAddrRec, AsyncSniffer, sendp,
                       get_if_hwaddr, conf)
conf.verb = 0
gateway_mac = sys.argv[2]
sniffer = AsyncSniffer(iface="eth0", lfilter=lambda p: ICMPv6MLReport2 in p and p[Ether].src == gateway_mac, count=1, timeout=5)
sniffer.start()
import time; time.sleep(0.5)
mac = get_if_hwaddr("eth0")
sendp(Ether(src=mac, dst="33:33:00:00:00:01") / IPv6(src=sys.argv[1], dst="ff02::1", hlim=1)
      / IPv6ExtHdrHopByHop(options=[RouterAlert()]) / ICMPv6MLQuery2(), iface="eth0")
sniffer.join()
if not sniffer.results:
    print("no report")
    sys.exit(1)
report = sniffer.results[0]
print("hop_limit", report[IPv6].hlim)
# scapy chains a report's records as layers, each the payload of the one before.
index = 1
while (record := report.getlayer(ICMPv6MLDMultAddrRec, index)) is not None:
    print("group", record.dst)
    index += 1
PY
mld=$(lan "$PYTHON" "$WORK/mld.py" "$host_link_local" "$GATEWAY_MAC" 2>&1) || fail "no MLD report answered a query: $mld"
for expected in "hop_limit 1" "group ff02::1:ff00:1" "group ff02::2"; do
    grep -qx "$expected" <<<"$mld" || fail "the MLD report lacks '$expected': $mld"
done
pass "an MLD query is answered with the gateway's groups: $(grep -c '^group' <<<"$mld") groups, ff02::1:ff00:1 among them"
adverts=$(metric gateway_worker_ipv6_router_adverts_total)
[[ ${adverts%.*} -ge 2 ]] || fail "gateway_worker_ipv6_router_adverts_total is $adverts, expected the host's and scapy's"
pass "$adverts Router Advertisements counted"

# Forwarding: the WAN host on the ISP's link, with a route back to the LAN's prefix.
wan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0
wan ip -6 addr add 2001:db8:ff::2/64 dev eth0 nodad
wan ip -6 route add 2001:db8:10::/64 via 2001:db8:ff::1
expect_output "the LAN host pings the WAN host through the gateway" \
    " 0% packet loss" lan ping -6 -c 3 -i 0.2 -W 2 2001:db8:ff::2
flows=$(metric gateway_conntrack_ipv6_entries)
[[ ${flows%.*} -ge 1 ]] || fail "the worker tracks no IPv6 flow after the ping (gateway_conntrack_ipv6_entries $flows)"
pass "the ping is a tracked IPv6 flow ($flows in the worker's IPv6 table)"
# Before any TCP, whose first full-sized segment would teach the host the path MTU.
expect_output "an oversized packet gets Packet Too Big with the WAN's MTU" \
    "Packet too big: mtu=1400" lan ping -6 -c 1 -W 2 -s 1400 -M do 2001:db8:ff::2
[[ $(dropped packet_too_big) -ge 1 ]] || fail "packet_too_big was not counted"
read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 2001:db8:ff::2 -t 1) || fail "iperf3 over IPv6, LAN -> WAN"
[[ $peer == "${address%/*}" ]] || fail "the WAN host saw $peer, not the LAN host's own address (IPv6 is not translated)"
pass "iperf3 over IPv6 LAN -> WAN: $gbps Gbit/s, the WAN host sees the LAN host's address"
read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 2001:db8:ff::2 -t 1 -R) || fail "iperf3 over IPv6, WAN -> LAN (reverse)"
pass "iperf3 over IPv6 WAN -> LAN on the LAN host's connection: $gbps Gbit/s"
expect_output "a hop limit of 1 gets Time Exceeded from the gateway" \
    "From 2001:db8:10::1 .*Time exceeded: Hop limit" lan ping -6 -c 1 -W 2 -t 1 2001:db8:ff::2
firewall_drops=$(dropped firewall_drop)
expect_output "the WAN host's unsolicited pings to the LAN host are dropped (RFC 6092)" \
    "100% packet loss" wan ping -6 -c 3 -i 0.2 -W 1 "${address%/*}"
[[ $(($(dropped firewall_drop) - ${firewall_drops:-0})) -ge 3 ]] ||
    fail "the unsolicited pings were not counted as firewall_drop ($firewall_drops, then $(dropped firewall_drop))"
pass "the unsolicited pings were counted as firewall_drop"
# The pinhole: iperf3 from the WAN to the LAN host's fixed address on TCP 5201 goes in; the
# same host on another port stays closed.
lan ip -6 addr add 2001:db8:10::5/64 dev eth0 nodad
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 2001:db8:10::5 -t 1) ||
    fail "iperf3 from the WAN through the pinhole to [2001:db8:10::5]:5201"
[[ $peer == 2001:db8:ff::2 ]] || fail "the LAN host saw $peer, not the WAN host's own address"
pass "the pinhole lets the WAN host reach [2001:db8:10::5]:5201: $gbps Gbit/s, from its own address"
lan timeout 8 iperf3 -s -1 -p 5202 >/dev/null 2>&1 &
closed_server=$!
sleep 0.5
if wan timeout 5 iperf3 -c 2001:db8:10::5 -p 5202 -t 1 --connect-timeout 2000 >/dev/null 2>&1; then
    fail "the WAN host reached port 5202, which no pinhole opens"
fi
kill "$closed_server" 2>/dev/null || true
wait "$closed_server" 2>/dev/null || true
pass "port 5202 on the same host stays closed"
# The flows above were all well-behaved (on two workers too: E2E_WORKERS=2).
assert_no_conntrack_invalid

# Hostile or unroutable IPv6: each dropped under its reason, and the gateway still answers.
cat >"$WORK/hostile.py" <<'PY'
import sys
from scapy.all import (Ether, IPv6, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, ICMPv6ND_NS,
                       ICMPv6ND_NA, ICMPv6NDOptSrcLLAddr, ICMPv6NDOptDstLLAddr, ICMPv6EchoRequest,
                       UDP, sendp, get_if_hwaddr, conf)
conf.verb = 0
gateway_mac, src = sys.argv[1], sys.argv[2]
mac = get_if_hwaddr("eth0")
eth = Ether(src=mac, dst=gateway_mac)
frames = [
    # Neighbor solicitation from beyond a router (hop limit 64): malformed_ndisc.
    eth / IPv6(src=src, dst="2001:db8:10::1", hlim=64) / ICMPv6ND_NS(tgt="2001:db8:10::1")
        / ICMPv6NDOptSrcLLAddr(lladdr=mac),
    # A Type 0 routing header to the gateway (RFC 5095): ipv6_extension_headers.
    eth / IPv6(src=src, dst="2001:db8:10::1") / IPv6ExtHdrRouting(type=0, addresses=["2001:db8:10::99"], segleft=1)
        / ICMPv6EchoRequest(),
    # Nine destination options headers: ipv6_extension_headers.
    eth / IPv6(src=src, dst="2001:db8:10::1") / (IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrDestOpt() / IPv6ExtHdrDestOpt()) / ICMPv6EchoRequest(),
    # UDP to a link-local address that is not the gateway's: ipv6_not_forwarded.
    eth / IPv6(src=src, dst="fe80::99") / UDP(sport=1234, dport=53),
    # A payload length past the frame: malformed_ipv6.
    eth / IPv6(src=src, dst="2001:db8:10::1", plen=400) / ICMPv6EchoRequest(),
    # An unsolicited advertisement moving the host's own address to another MAC (override
    # set): the confirmed binding stays (ndisc_locked or ndisc_mac_change_unconfirmed).
    Ether(src="02:66:66:66:66:66", dst="33:33:00:00:00:01") / IPv6(src=src, dst="ff02::1", hlim=255)
        / ICMPv6ND_NA(tgt=src, R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr="02:66:66:66:66:66"),
]
for _ in range(5):
    sendp(frames, iface="eth0")
PY
lan "$PYTHON" "$WORK/hostile.py" "$GATEWAY_MAC" "${address%/*}"
sleep 0.5
for reason in malformed_ndisc ipv6_extension_headers ipv6_not_forwarded malformed_ipv6; do
    count=$(dropped "$reason")
    [[ ${count%.*} -ge 5 ]] || fail "$reason counted ${count:-nothing} of the hostile frames, expected at least 5"
done
pass "hostile IPv6 dropped and counted: $(for r in malformed_ndisc ipv6_extension_headers ipv6_not_forwarded malformed_ipv6; do printf '%s=%s ' "$r" "$(dropped "$r")"; done)"
refused=$(($(dropped ndisc_locked) + $(dropped ndisc_mac_change_unconfirmed)))
[[ $refused -ge 5 ]] || fail "the advertisements moving the host to another MAC were refused $refused times, expected 5"
pass "unsolicited advertisements moving the host to another MAC refused: ndisc_locked=$(dropped ndisc_locked) ndisc_mac_change_unconfirmed=$(dropped ndisc_mac_change_unconfirmed)"
expect_output "the gateway still answers after them" \
    " 0% packet loss" lan ping -6 -c 2 -i 0.2 -W 2 2001:db8:10::1

# A guest's Neighbor Discovery spoofing, and fragments through forwarding. A guest (another
# MAC on the LAN) advertises the gateway's own address and the WAN host's (not on this link)
# as its own; an atomic fragment (a fragment header, offset 0, no more: RFC 6946) of an echo
# request crosses to the WAN host and its reply comes back; two overlapping fragments cross
# (a router does not reassemble: the WAN host's kernel discards them, RFC 5722).
cat >"$WORK/guest.py" <<'PY'
import sys, time
from scapy.all import (Ether, IPv6, IPv6ExtHdrFragment, ICMPv6ND_NA, ICMPv6NDOptDstLLAddr,
                       ICMPv6EchoRequest, ICMPv6EchoReply, AsyncSniffer, sendp, get_if_hwaddr, conf)
conf.verb = 0
gateway_mac, src, wan_host = sys.argv[1], sys.argv[2], sys.argv[3]
guest = "02:77:77:77:77:77"
claims = [Ether(src=guest, dst="33:33:00:00:00:01") / IPv6(src="fe80::77", dst="ff02::1", hlim=255)
          / ICMPv6ND_NA(tgt=target, R=0, S=0, O=1) / ICMPv6NDOptDstLLAddr(lladdr=guest)
          for target in ("2001:db8:10::1", wan_host)]
for _ in range(5):
    sendp(claims, iface="eth0")
mac = get_if_hwaddr("eth0")
eth = Ether(src=mac, dst=gateway_mac)
sniffer = AsyncSniffer(iface="eth0", count=1, timeout=3,
                       lfilter=lambda p: ICMPv6EchoReply in p and p[ICMPv6EchoReply].id == 0x6946)
sniffer.start()
time.sleep(0.3)
sendp(eth / IPv6(src=src, dst=wan_host) / IPv6ExtHdrFragment(offset=0, m=0, id=0x6946)
      / ICMPv6EchoRequest(id=0x6946, seq=1, data=b"atomic" * 4), iface="eth0")
sniffer.join()
print("atomic_reply", "yes" if sniffer.results else "no")
echo = bytes(ICMPv6EchoRequest(id=0x5722, seq=1, data=b"x" * 32))
first = IPv6(src=src, dst=wan_host) / IPv6ExtHdrFragment(offset=0, m=1, id=0x5722, nh=58) / echo[:24]
overlapping = IPv6(src=src, dst=wan_host) / IPv6ExtHdrFragment(offset=2, m=0, id=0x5722, nh=58) / echo[16:]
sendp([eth / first, eth / overlapping], iface="eth0")
PY
lan "$PYTHON" "$WORK/guest.py" "$GATEWAY_MAC" "${address%/*}" 2001:db8:ff::2 >"$WORK/guest.txt" 2>&1 ||
    fail "the guest's frames: $(cat "$WORK/guest.txt")"
sleep 0.3
claims=$(dropped ndisc_claims_our_address)
[[ $claims -ge 5 ]] || fail "a guest's advertisements of the gateway's address counted $claims times, expected 5"
pass "a guest advertising the gateway's own address: refused and counted (ndisc_claims_our_address=$claims)"
grep -qx "atomic_reply yes" "$WORK/guest.txt" ||
    fail "an atomic fragment's echo request got no reply through the gateway: $(cat "$WORK/guest.txt")"
pass "an atomic fragment (RFC 6946) crosses and its reply comes back"
expect_output "the host still reaches the WAN host the guest claimed to be, after the overlapping fragments" \
    " 0% packet loss" lan ping -6 -c 2 -i 0.2 -W 2 2001:db8:ff::2
neighbours=$(ctl show neighbors)
grep -qi "02:77:77:77:77:77" <<<"$neighbours" && fail "the gateway took the guest's claims: $neighbours"
pass "the guest's MAC is bound to no address in the gateway's neighbour table"
# IPv4 is untouched.
expect_output "IPv4 still forwards" " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 10.0.0.2

stop_gateway
pass "IPv6 on the gateway's interface"
