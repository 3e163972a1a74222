#!/usr/bin/env bash
# The optional features on IPv6 flows (no config field of their own): a LAN host's IPv6
# traffic counts as the IPv4 host with the same MAC in the gateway's neighbour table. So the
# host first talks IPv4 (the gateway learns 192.168.10.2 at its MAC), then joins IPv6 by SLAAC
# as in test_ipv6.sh, and:
# - the traffic meter: iperf3 over IPv6 up and down grows 192.168.10.2's meter counters
#   (gateway_meter_host_bytes_total) by at least the bytes iperf3 moved, and not much more,
#   while the unattributed count (gateway_meter_unattributed_bytes_total) stays put; IPv6
#   from a MAC with no IPv4 neighbour (scapy, a made-up device) is counted as unattributed;
# - keyword block: an AAAA (and an A) query over IPv6 for a blocked name gets NXDOMAIN from
#   the address asked and never reaches the server, an allowed one gets the server's answer;
#   a TLS handshake with a blocked SNI and HTTP requests with a blocked Host over IPv6 are
#   refused and never reach the server, allowed ones complete; all counted as content_blocked;
# - QoS (policer, enabled by a reload): a priority rule naming the host by its IPv4 address
#   classifies its IPv6 UDP stream as priority, and an IPv6 UDP flood at twice the uplink
#   rate is held to the rate (+-3%, as test_qos.sh) with the excess counted as dropped;
# - parental control (reloads): the device paused by its MAC loses its new IPv6 flows (and
#   its IPv4 ones) under parental_blocked; paused by its IPv4 address, likewise for IPv6;
#   unpaused, both families pass again.
#
#   gwlab-lan: eth0 192.168.10.2/24, SLAAC in 2001:db8:10::/64
#       --veth-- gwl-lan [gateway 192.168.10.1/24, 2001:db8:10::1/64]
#   gwlab-wan: eth0 10.0.0.2/24, 2001:db8:ff::2/64 (iperf3, DNS, HTTPS, HTTP)
#       --veth-- gwl-wan [gateway 10.0.0.1/24, 2001:db8:ff::1/64]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
SERVERS=()
stop_servers() { for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap 'stop_servers; cleanup' EXIT
PYTHON=/usr/bin/python3 # Debian's python with scapy (the python3 on PATH may be a shim)

WAN6=2001:db8:ff::2
"$ROOT/scripts/lab.sh" up >/dev/null
HOST_MAC=$(lan cat /sys/class/net/eth0/address)

# The lab with IPv6 on both interfaces (the WAN keeps MTU 1500), the IPv6 default route to
# the WAN host ($WAN6), and a ctl socket for the neighbour table.
lab_config_ipv6 19162 >"$WORK/base.toml"
printf '\n[ctl]\nsocket = "%s"\n' "$WORK/run/ctl.sock" >>"$WORK/base.toml"
[[ $(grep -c '^\[interfaces.ipv6\]' "$WORK/base.toml") == 2 ]] || fail "no [interfaces.ipv6] for both interfaces in the config"

# write_config QOS(on|off) DEVICE-MATCH PAUSED(true|false): the base with the meter, keyword
# block, one parental device (matched by DEVICE-MATCH, a `macs = [...]` or `addresses = [...]`
# line) and, with QOS on, the uplink policer with a priority rule for 192.168.10.2's UDP 5202.
write_config() {
    cat "$WORK/base.toml"
    cat <<TOML

[traffic_meter]
enabled = true
capacity = 1024
top_hosts = 5
named_hosts = ["192.168.10.2"]

[keyword_block]
enabled = true
domains = ["blocked.example"]
keywords = ["casino"]

[parental_control]
enabled = true
utc_offset_minutes = 0
[[parental_control.devices]]
name = "lan-host"
$2
paused = $3
TOML
    [[ $1 == on ]] || return 0
    cat <<'TOML'

[qos]
enabled = true
mode = "policer"
uplink_mbps = 200
downlink_mbps = 200
burst_ms = 20
[[qos.priority]]
host = "192.168.10.2"
protocol = "udp"
ports = "5202"
TOML
}
write_config off "macs = [\"$HOST_MAC\"]" false >"$WORK/gateway.toml"
METRICS=http://127.0.0.1:19162/metrics
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
dropped() { metric "gateway_dropped_packets_total{reason=\"$1\""; }
host_bytes() { metric "gateway_meter_host_bytes_total{direction=\"$1\",host=\"192.168.10.2\"}"; }
unattributed_bytes() { metric "gateway_meter_unattributed_bytes_total{direction=\"$1\"}"; }
qos_bytes() { metric "gateway_qos_bytes_total{class=\"$1\",link=\"uplink\",result=\"$2\"}"; }
reloads() { metric 'gateway_config_reloads_total{result="'"$1"'"}'; }

# reload_with ARGS...: write_config ARGS replaces the config (atomically) and a SIGHUP applies
# it. The file watcher reloads the same file again half a second after the rename; the pause
# lets that land before anything is measured.
reload_with() {
    local before
    before=$(reloads success)
    write_config "$@" >"$WORK/next.toml"
    mv "$WORK/next.toml" "$WORK/gateway.toml"
    kill -HUP "$GATEWAY_PID"
    for _ in $(seq 1 50); do
        (( $(reloads success) > before )) && break
        sleep 0.1
    done
    (( $(reloads success) > before )) ||
        fail "the reload to '$*' was not applied: reloads success=$(reloads success) failure=$(reloads failure)"
    sleep 1
}

# wait_listening t|u PORT: until the WAN host listens on TCP or UDP PORT (5 s).
wait_listening() {
    for _ in $(seq 1 50); do
        wan ss -ln"$1" | grep -q ":$2 " && return 0
        sleep 0.1
    done
    fail "nothing listens on the WAN host's $([[ $1 == t ]] && echo TCP || echo UDP) port $2"
}

start_gateway "$WORK/gateway.toml"

# IPv4 first: the gateway learns the host's MAC at 192.168.10.2, which its IPv6 counts as.
expect_output "the LAN host pings the gateway over IPv4" " 0% packet loss" lan ping -c 2 -i 0.2 -W 1 192.168.10.1
expect_output "the LAN host pings the WAN host over IPv4" " 0% packet loss" lan ping -c 2 -i 0.2 -W 1 10.0.0.2
expect_output "the gateway's neighbour table has 192.168.10.2 at the host's MAC $HOST_MAC" \
    "192\.168\.10\.2 +$HOST_MAC +lan" ctl show neighbors

# IPv6: SLAAC from the gateway's advertisement, as in test_ipv6.sh; the WAN host on the ISP's link.
lan_joins_ipv6 2001:db8:10:
address=$LAN_ADDRESS
wan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0
wan ip -6 addr add "$WAN6/64" dev eth0 nodad
wan ip -6 route add 2001:db8:10::/64 via 2001:db8:ff::1
expect_output "the LAN host ($address) pings the WAN host over IPv6" " 0% packet loss" \
    lan ping -6 -c 2 -i 0.2 -W 2 "$WAN6"

# Servers on the WAN host, on IPv6 (started now that its IPv6 is on): DNS answering every
# query NOERROR with no answers and logging each name it was asked, HTTPS, HTTP.
cat >"$WORK/dns.py" <<'PY'
import socket, sys
log = open(sys.argv[1], "a", buffering=1)
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("::", 53))
while True:
    query, peer = s.recvfrom(512)
    labels, i = [], 12
    while i < len(query) and query[i]:
        labels.append(query[i + 1:i + 1 + query[i]].decode(errors="replace"))
        i += 1 + query[i]
    print(".".join(labels), file=log)
    # Same id and question, QR=1 RD RA, NOERROR, no answers: enough to tell it from NXDOMAIN.
    s.sendto(query[:2] + b"\x81\x80" + query[4:6] + b"\x00\x00\x00\x00\x00\x00" + query[12:], peer)
PY
: >"$WORK/dns-queries.txt"
wan python3 "$WORK/dns.py" "$WORK/dns-queries.txt" >/dev/null 2>&1 &
SERVERS+=($!)
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
    -days 1 -subj "/CN=lab" >/dev/null 2>&1
wan openssl s_server -6 -accept 443 -cert "$WORK/cert.pem" -key "$WORK/key.pem" -www >/dev/null 2>&1 &
SERVERS+=($!)
mkdir -p "$WORK/www" && echo "hello from the WAN" >"$WORK/www/index.html"
# http.server logs each request it answers to stderr, one line each.
wan python3 -m http.server 80 --bind :: --directory "$WORK/www" >/dev/null 2>"$WORK/http.log" &
SERVERS+=($!)

# 1. The meter: IPv6 bytes count for 192.168.10.2. iperf3 counts TCP payload (what the
# receiver got), the meter Ethernet frames: IPv6, TCP and Ethernet headers add about 6% at
# 1500 bytes, retransmissions a little more.
# meter_grew DIRECTION PAYLOAD BEFORE AFTER
meter_grew() {
    python3 - "$@" <<'PY' || fail "192.168.10.2's meter ($1) did not count the IPv6 transfer: $2 payload bytes, the counter went from $3 to $4"
import sys
direction, payload, before, after = sys.argv[1], *map(int, sys.argv[2:])
metered = after - before
ratio = metered / payload if payload else 0
print(f"ok: meter {direction} for 192.168.10.2 grew by {metered} bytes for {payload} bytes of IPv6 payload ({ratio:.3f})")
assert payload > 0 and 1.0 <= ratio < 1.15, f"{direction}: {metered} metered for {payload} moved ({ratio:.3f})"
PY
}
unattributed_before=$(($(unattributed_bytes up) + $(unattributed_bytes down)))
up_before=$(host_bytes up)
read -r _ gbps < <(iperf3_run gwlab-wan gwlab-lan "$WAN6" -t 2) || fail "iperf3 over IPv6, LAN -> WAN"
received=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"])' "$WORK/client.json")
meter_grew up "$received" "$up_before" "$(host_bytes up)"
moved=$received
down_before=$(host_bytes down)
read -r _ gbps < <(iperf3_run gwlab-wan gwlab-lan "$WAN6" -t 2 -R) || fail "iperf3 over IPv6, WAN -> LAN (reverse)"
received=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"])' "$WORK/client.json")
meter_grew down "$received" "$down_before" "$(host_bytes down)"
moved=$((moved + received))
unattributed=$(($(unattributed_bytes up) + $(unattributed_bytes down) - unattributed_before))
(( unattributed * 100 < moved )) ||
    fail "$unattributed of the $moved bytes moved over IPv6 were counted as unattributed, not as 192.168.10.2"
pass "the host's IPv6 traffic is metered as 192.168.10.2, up and down ($unattributed bytes unattributed meanwhile)"

# A MAC the gateway has no IPv4 neighbour for (an IPv6-only device): its IPv6 counts as
# unattributed, not as 192.168.10.2. Twenty UDP datagrams of 1000 bytes from a made-up MAC
# and address in the LAN's prefix to the WAN host's discard port.
GATEWAY_MAC=$(cat /sys/class/net/gwl-lan/address)
unattributed_before=$(unattributed_bytes up)
up_before=$(host_bytes up)
lan "$PYTHON" - "$GATEWAY_MAC" "$WAN6" <<'PY' || fail "scapy could not send the IPv6-only device's datagrams"
import sys
from scapy.all import Ether, IPv6, UDP, Raw, sendp, conf
conf.verb = 0
frame = (Ether(src="02:00:00:00:06:06", dst=sys.argv[1]) / IPv6(src="2001:db8:10::606", dst=sys.argv[2])
         / UDP(sport=40606, dport=9) / Raw(b"x" * 1000))
sendp([frame] * 20, iface="eth0")
PY
sleep 0.3
unattributed=$(($(unattributed_bytes up) - unattributed_before))
attributed=$(($(host_bytes up) - up_before))
(( unattributed >= 20 * 1062 )) ||
    fail "20 IPv6 frames of 1062 bytes from a MAC with no IPv4 neighbour: gateway_meter_unattributed_bytes_total{direction=\"up\"} grew by $unattributed, expected at least $((20 * 1062))"
(( attributed < 20 * 1062 )) || fail "the IPv6-only device's $((20 * 1062)) bytes were counted as 192.168.10.2 (+$attributed)"
pass "an IPv6-only MAC's traffic is metered as unattributed (+$unattributed bytes), not as 192.168.10.2 (+$attributed)"

# 2. Keyword block over IPv6.
wait_listening u 53
wait_listening t 443
wait_listening t 80
# dns6 NAME QTYPE: one query from a new socket to the WAN host over IPv6; prints the answer's
# RCODE, the address it came from and whether it answers this query (id, QR), or "none".
dns6() {
    lan python3 - "$1" "$2" "$WAN6" <<'PY'
import socket, struct, sys
name, qtype, server = sys.argv[1], int(sys.argv[2]), sys.argv[3]
query = struct.pack(">HHHHHH", 0x6a6a, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
query += struct.pack(">HH", qtype, 1)
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(query, (server, 53))
try:
    answer, peer = s.recvfrom(512)
    matches = answer[:2] == query[:2] and answer[2] & 0x80
    print(answer[3] & 0x0F, peer[0], "answer" if matches else "not-an-answer")
except socket.timeout:
    print("none")
PY
}
content_before=$(dropped content_blocked)
for query in "www.blocked.example 28" "casino.example 28" "www.blocked.example 1"; do
    read -r name qtype <<<"$query"
    got=$(dns6 "$name" "$qtype")
    [[ $got == "3 $WAN6 answer" ]] ||
        fail "a type $qtype query over IPv6 for the blocked $name: expected NXDOMAIN from $WAN6 ('3 $WAN6 answer'), got '$got'"
done
got=$(dns6 www.allowed.example 28)
[[ $got == "0 $WAN6 answer" ]] ||
    fail "an AAAA query over IPv6 for www.allowed.example: expected the server's NOERROR ('0 $WAN6 answer'), got '$got'"
grep -qx www.allowed.example "$WORK/dns-queries.txt" ||
    fail "the server never logged www.allowed.example: $(tr '\n' ' ' <"$WORK/dns-queries.txt")"
if grep -Eq 'blocked|casino' "$WORK/dns-queries.txt"; then
    fail "blocked names reached the DNS server over IPv6: $(tr '\n' ' ' <"$WORK/dns-queries.txt")"
fi
dns_blocked=$(($(dropped content_blocked) - content_before))
(( dns_blocked >= 3 )) || fail "3 blocked DNS queries over IPv6 counted $dns_blocked as content_blocked"
pass "DNS over IPv6: AAAA and A queries for blocked names get NXDOMAIN from $WAN6 (content_blocked +$dns_blocked), an allowed AAAA query reaches the server"

tls6() { lan timeout 5 openssl s_client -connect "[$WAN6]:443" -servername "$1" </dev/null 2>&1 || true; }
content_before=$(dropped content_blocked)
tls6 www.allowed.example | grep -q "Server certificate" ||
    fail "a TLS handshake over IPv6 with the allowed SNI www.allowed.example did not complete: $(tls6 www.allowed.example | tail -3 | tr '\n' ' ')"
if tls6 www.blocked.example | grep -q "Server certificate"; then
    fail "a TLS handshake over IPv6 with the blocked SNI www.blocked.example completed"
fi
tls_blocked=$(($(dropped content_blocked) - content_before))
(( tls_blocked >= 1 )) || fail "the blocked TLS handshake over IPv6 was not counted as content_blocked (+$tls_blocked)"
pass "TLS over IPv6: SNI www.blocked.example is refused (content_blocked +$tls_blocked), www.allowed.example completes"

http6() { lan curl -6 -g -s -m 3 -o /dev/null -w '%{http_code}' -H "Host: $1" "http://[$WAN6]/" || true; }
content_before=$(dropped content_blocked)
code=$(http6 www.allowed.example)
[[ $code == 200 ]] || fail "an HTTP request over IPv6 with the allowed Host www.allowed.example: expected 200, got $code"
for name in www.blocked.example casino.example; do
    code=$(http6 "$name")
    [[ $code != 200 ]] || fail "an HTTP request over IPv6 with the blocked Host $name got 200"
done
http_blocked=$(($(dropped content_blocked) - content_before))
(( http_blocked >= 2 )) || fail "2 blocked HTTP requests over IPv6 counted $http_blocked as content_blocked"
requests=$(grep -c '"GET ' "$WORK/http.log" || true)
[[ $requests == 1 ]] ||
    fail "the HTTP server answered $requests requests, expected only the allowed one: $(tail -3 "$WORK/http.log" | tr '\n' ' ')"
pass "HTTP over IPv6: Hosts www.blocked.example and casino.example are refused before the server (content_blocked +$http_blocked), the allowed one gets 200"

# 3. QoS: the uplink policer at 200 Mbit/s, by a reload.
reload_with on "macs = [\"$HOST_MAC\"]" false
# The priority rule names the host by its IPv4 address; its IPv6 stream to UDP 5202 is priority.
wan timeout 20 iperf3 -s -1 -p 5202 >/dev/null 2>&1 &
server=$!
SERVERS+=("$server")
sleep 0.5
priority_before=$(qos_bytes priority passed)
lan timeout 20 iperf3 -6 -c "$WAN6" -p 5202 -u -b 20M -l 1200 -t 1 -J >"$WORK/priority.json" ||
    fail "the IPv6 UDP stream to port 5202: $(tail -c 300 "$WORK/priority.json")"
wait "$server" || true
priority_passed=$(($(qos_bytes priority passed) - priority_before))
sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum"]["bytes"])' "$WORK/priority.json")
(( sent > 0 && priority_passed >= sent )) ||
    fail "the host's IPv6 UDP stream to 5202 ($sent payload bytes) passed as priority only $priority_passed bytes: the rule for 192.168.10.2 did not classify it"
pass "a priority rule for host 192.168.10.2 classifies its IPv6 stream: $priority_passed bytes passed as priority for $sent sent"

# An IPv6 UDP flood at 400 Mbit/s for 3 s: what passes holds the 200 Mbit/s rate.
wan timeout 30 iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
server=$!
SERVERS+=("$server")
sleep 0.5
passed_before=$(qos_bytes bulk passed)
dropped_before=$(qos_bytes bulk dropped)
lan timeout 30 iperf3 -6 -c "$WAN6" -p 5201 -u -b 400M -l 1400 -t 3 >/dev/null || fail "the IPv6 UDP flood"
wait "$server" || true
passed_after=$(qos_bytes bulk passed)
python3 - "$passed_before" "$passed_after" <<'PY' || fail "the uplink rate was not held for IPv6 ($passed_before -> $passed_after bulk bytes passed)"
import sys
before, after = map(int, sys.argv[1:])
rate = (after - before) * 8 / 3.0 / 1e6
print(f"ok: IPv6 UDP flood at 400 Mbit/s held to {rate:.1f} Mbit/s (configured 200)")
assert 194 <= rate <= 206, f"{rate:.1f} Mbit/s is not within 3% of 200"
PY
qos_dropped=$(($(qos_bytes bulk dropped) - dropped_before))
(( qos_dropped > 0 )) || fail "the IPv6 flood at twice the uplink rate dropped nothing (bulk uplink dropped bytes +$qos_dropped)"
pass "the policer holds the host's IPv6 upload to the uplink rate and drops the excess ($qos_dropped bytes)"

# 4. Parental control: the device paused, by its MAC, then by its IPv4 address.
# blocked_ping FAMILY-FLAG ADDRESS WHAT: a new ping flow must fail and count under
# parental_blocked, and under gateway_ipv6_dropped_packets_total's exactly when it is IPv6.
ipv6_dropped() { metric "gateway_ipv6_dropped_packets_total{reason=\"$1\""; }
blocked_ping() {
    local before before6
    before=$(dropped parental_blocked)
    before6=$(ipv6_dropped parental_blocked)
    if lan ping "$1" -c 2 -i 0.3 -W 1 "$2" >/dev/null 2>&1; then
        fail "$3: a ping to $2 got through"
    fi
    local counted=$(($(dropped parental_blocked) - before))
    local counted6=$(($(ipv6_dropped parental_blocked) - before6))
    (( counted >= 2 )) || fail "$3: 2 refused echo requests to $2 counted $counted as parental_blocked"
    if [[ $1 == -6 ]]; then
        (( counted6 == counted )) || fail "$3: $counted parental_blocked drops, $counted6 of them marked IPv6"
    else
        (( counted6 == 0 )) || fail "$3: IPv4 pings counted $counted6 as IPv6 drops"
    fi
    pass "$3: a new ping to $2 is refused (parental_blocked +$counted, of which IPv6 +$counted6)"
}
reload_with on "macs = [\"$HOST_MAC\"]" true
blocked_ping -6 "$WAN6" "paused by its MAC, over IPv6"
blocked_ping -4 10.0.0.2 "paused by its MAC, over IPv4"
reload_with on 'addresses = ["192.168.10.2"]' true
blocked_ping -6 "$WAN6" "paused by its IPv4 address 192.168.10.2, over IPv6"
reload_with on 'addresses = ["192.168.10.2"]' false
expect_output "unpaused, the device reaches the WAN host over IPv6 again" " 0% packet loss" \
    lan ping -6 -c 2 -i 0.2 -W 2 "$WAN6"
expect_output "... and over IPv4" " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 10.0.0.2

stop_gateway
pass "QoS, the traffic meter, keyword block and parental control on IPv6 flows"
