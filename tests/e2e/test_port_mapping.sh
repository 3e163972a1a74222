#!/usr/bin/env bash
# Port mapping (PCP, NAT-PMP, UPnP IGD) for the LAN, with real clients: natpmpc (miniupnp's
# NAT-PMP client) maps a UDP port with a short lifetime, the WAN host reaches the LAN host
# through it, and it expires while another stays; upnpc (miniupnpc) finds the gateway by
# SSDP, adds a mapping the WAN host reaches, lists it and removes it; a PCP client
# (tests/e2e/pcp_client.py) maps a TCP port the WAN host then reaches; refused: another
# host's address (THIRD_PARTY; UPnP's other internal client), a forged client address, a
# static forward's port (with PREFER_FAILURE; without, another port), the 101st mapping of
# a host. The announcements reach the LAN at start; the mapping's create and delete are in
# the NAT log; the PCP mapping outlives a restart.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

TWIN_NS=gwlab-gw
SYSLOG_PID=
cleanup_twins() {
    [[ -n $SYSLOG_PID ]] && kill "$SYSLOG_PID" 2>/dev/null
    if ip netns pids "$TWIN_NS" >/dev/null 2>&1; then
        ip netns pids "$TWIN_NS" | xargs -r kill 2>/dev/null || true
    fi
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
}
trap cleanup_twins EXIT
for tool in natpmpc upnpc; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs it"
done
lab_up_with_twin_netns "$TWIN_NS"

cat >"$WORK/mapping.toml" <<TOML
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
[[interfaces]]
name = "wan"
device = "net_af_packet1,iface=gwl-wan"
address = "10.0.0.1/24"
[[routes]]
destination = "0.0.0.0/0"
via = "10.0.0.2"
[nat]
masquerade = ["wan"]
port_range = "32768-65535"
[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = "30000"
to = "192.168.10.2"
to_port = 8000
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[[firewall.rules]]
name = "pcp-and-nat-pmp-from-lan"
from = "lan"
to = "local"
protocol = "udp"
destination_ports = "5351"
action = "accept"
[[firewall.rules]]
name = "upnp-search-from-lan"
from = "lan"
to = "local"
protocol = "udp"
destination_ports = "1900"
action = "accept"
[[firewall.rules]]
name = "upnp-control-from-lan"
from = "lan"
to = "local"
protocol = "tcp"
destination_ports = "5000"
action = "accept"
[kernel_twins]
netns = "$TWIN_NS"
[port_mapping]
zones = ["lan"]
min_lifetime_s = 2
upnp = true
[nat.log]
syslog_udp = "127.0.0.1:19155"
[state]
directory = "$WORK/state"
[ctl]
socket = "$WORK/run/ctl.sock"
[metrics]
listen = "127.0.0.1:19154"
TOML
with_e2e_workers "$WORK/mapping.toml"
METRICS=http://127.0.0.1:19154/metrics
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
"$GATEWAY" check-config --config "$WORK/mapping.toml" >/dev/null ||
    fail "check-config refuses the test's config"

# The NAT log's syslog receiver.
python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 19155))
with open(sys.argv[1], "a") as out:
    while True:
        print(s.recv(2048).decode(errors="replace"), file=out, flush=True)
' "$WORK/nat.log" &
SYSLOG_PID=$!

# The LAN host listens for the announcements (to all hosts, port 5350) from before the start.
lan python3 -c '
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("224.0.0.1", 5350))
s.settimeout(30)
with open(sys.argv[1], "w") as out:
    for _ in range(2):
        data, peer = s.recvfrom(1100)
        print(peer[0], data[:2].hex(), flush=True, file=out)
' "$WORK/announced" &
announce_listener=$!
sleep 0.3
start_gateway "$WORK/mapping.toml"
wait "$announce_listener" || fail "no announcement reached the LAN host within 30 s"
grep -q '^192.168.10.1 0080$' "$WORK/announced" && grep -q '^192.168.10.1 0280$' "$WORK/announced" ||
    fail "the announcements are not NAT-PMP's and PCP's from 192.168.10.1: $(cat "$WORK/announced")"
pass "the gateway announced itself to the LAN's hosts by NAT-PMP and PCP at start"

# natpmpc: the external address, then UDP 20000 -> the LAN host's 5000 for 8 s, and 20001
# -> its 5002 for 10 minutes (the control: it stays when the first expires).
echo_server=$(udp_echo_server gwlab-lan 5000)
control_server=$(udp_echo_server gwlab-lan 5002)
out=$(lan natpmpc -g 192.168.10.1 -a 20000 5000 udp 8 2>&1) || fail "natpmpc failed: $out"
grep -q "Public IP address : 10.0.0.1" <<<"$out" || fail "natpmpc got no external address: $out"
grep -Eq "Mapped public port 20000 protocol UDP to local port 5000 (lifetime|liftime) 8" <<<"$out" ||
    fail "natpmpc's mapping was not granted as asked: $out"
out=$(lan natpmpc -g 192.168.10.1 -a 20001 5002 udp 600 2>&1) || fail "natpmpc failed: $out"
answered=$(udp_exchange gwlab-wan 10.0.0.1 20000 3)
((answered == 3)) || fail "the WAN host got $answered of 3 answers through the NAT-PMP mapping"
ctl show nat --json >"$WORK/nat.json"
python3 - "$WORK/nat.json" <<'PY' || fail "ctl show nat does not list the NAT-PMP mapping: $(cat "$WORK/nat.json")"
import json, sys
mappings = json.load(open(sys.argv[1]))["port_mappings"]
assert any(m["origin"] == "nat-pmp" and m["protocol"] == "udp" and m["internal"] == "192.168.10.2"
           and m["internal_port"] == 5000 and m["external_port"] == 20000
           and 0 < m["expires_in_s"] <= 8 for m in mappings), mappings
PY
(($(metric 'gateway_port_mappings{origin="nat-pmp"}') == 2)) || fail "gateway_port_mappings does not count them"
pass "natpmpc mapped UDP 20000 to 192.168.10.2:5000 for 8 s; the WAN host's datagrams are answered through it"
nat_pmp_mapping_expired() { (($(metric 'gateway_port_mappings{origin="nat-pmp"}') == 1)); }
poll_until 15 nat_pmp_mapping_expired || fail "the NAT-PMP mapping did not expire"
answered=$(udp_exchange gwlab-wan 10.0.0.1 20000 2)
((answered == 0)) || fail "the WAN host still got $answered answers after the mapping expired"
answered=$(udp_exchange gwlab-wan 10.0.0.1 20001 2)
((answered == 2)) || fail "the mapping that did not expire answered $answered of 2"
logged() {
    grep -c 'event="'"$1"'" protocol="udp" inside="192.168.10.2:5000" outside="10.0.0.1:20000"' \
        "$WORK/nat.log" 2>/dev/null
}
both_logged() { [[ $(logged create) == 1 && $(logged delete) == 1 ]]; }
poll_until 5 both_logged ||
    fail "the NAT log has no create and delete of the mapping: $(cat "$WORK/nat.log" 2>/dev/null)"
pass "the mapping expired with its lifetime and no longer admits the WAN host (the other still does); the NAT log has its create and delete"
kill "$echo_server"

# UPnP IGD: upnpc finds the gateway by SSDP, maps UDP 21000 to the host's 5003, lists it,
# and removes it; another host's address is refused. -i: miniupnpc takes an IGD whose
# external address is a private one (the lab's WAN, 10.0.0.1) for "not connected".
# After the first search, -u names the description, as a client that remembers it does.
upnp() { lan timeout 20 upnpc -i "$@" 2>&1; }
known() { upnp -u http://192.168.10.1:5000/rootDesc.xml "$@"; }
upnp_server=$(udp_echo_server gwlab-lan 5003)
out=$(upnp -a 192.168.10.2 5003 21000 UDP 600) || fail "upnpc -a failed: $out"
grep -q "desc: http://192.168.10.1:5000/rootDesc.xml" <<<"$out" ||
    fail "upnpc did not find the gateway by SSDP: $out"
grep -q "ExternalIPAddress = 10.0.0.1" <<<"$out" || fail "upnpc got no external address: $out"
grep -Eq "external 10.0.0.1:21000 UDP is redirected to internal 192.168.10.2:5003" <<<"$out" ||
    fail "upnpc's mapping was not made: $out"
answered=$(udp_exchange gwlab-wan 10.0.0.1 21000 2)
((answered == 2)) || fail "the WAN host got $answered of 2 answers through the UPnP mapping"
out=$(known -l) || fail "upnpc -l failed: $out"
grep -Eq "UDP +21000->192.168.10.2:5003" <<<"$out" || fail "upnpc -l does not list the mapping: $out"
out=$(known -a 192.168.10.3 5003 21001 UDP 600) || true
grep -q "failed with code 606" <<<"$out" || fail "a mapping for another host's address was not refused with 606: $out"
out=$(known -d 21000 UDP) || fail "upnpc -d failed: $out"
out=$(known -l) || fail "upnpc -l failed: $out"
grep -q "21000->" <<<"$out" && fail "upnpc -l still lists the removed mapping: $out"
answered=$(udp_exchange gwlab-wan 10.0.0.1 21000 2)
((answered == 0)) || fail "the WAN host got $answered answers after the UPnP mapping was removed"
answered=$(udp_exchange gwlab-wan 10.0.0.1 20001 2)
((answered == 2)) || fail "the NAT-PMP mapping answered $answered of 2 after the UPnP one was removed"
(($(metric 'gateway_port_mapping_requests_total{origin="upnp",result="third_party"}') == 1)) ||
    fail "the refused UPnP mapping is not counted as third_party"
pass "upnpc found the gateway by SSDP, mapped UDP 21000 the WAN host reached, listed and removed it; another host's address refused (606)"
kill "$control_server" "$upnp_server"

# PCP: TCP 8000 on the LAN host, asked as external 18000, for 10 minutes.
pcp() { lan python3 "$ROOT/tests/e2e/pcp_client.py" 192.168.10.1 map "$@"; }
mkdir -p "$WORK/www" && echo "mapped by PCP" >"$WORK/www/index.html"
lan python3 -m http.server 8000 --bind 0.0.0.0 --directory "$WORK/www" >/dev/null 2>&1 &
poll_until 10 listening gwlab-lan 8000 || fail "the LAN host's web server did not listen"
read -r result lifetime port <<<"$(pcp tcp 8000 28000 600 1)"
[[ $result == 0 && $lifetime == 600 && $port == 28000 ]] ||
    fail "PCP MAP answered result $result lifetime $lifetime port $port"
expect_output "the WAN host reaches the LAN host's web server by the PCP mapping" \
    "mapped by PCP" wan curl -sf --max-time 5 http://10.0.0.1:28000/
read -r result _ _ <<<"$(pcp tcp 8001 0 600 1 --third-party 192.168.10.3)"
[[ $result == 2 ]] || fail "a mapping for another host's address answered $result, not NOT_AUTHORIZED (2)"
read -r result _ _ <<<"$(pcp tcp 8001 0 600 1 --client 192.168.10.3)"
[[ $result == 12 ]] || fail "a forged client address answered $result, not ADDRESS_MISMATCH (12)"
read -r result _ _ <<<"$(pcp tcp 8002 30000 600 2 --prefer-failure)"
[[ $result == 11 ]] || fail "the static forward's port with PREFER_FAILURE answered $result, not CANNOT_PROVIDE_EXTERNAL (11)"
read -r result _ port <<<"$(pcp tcp 8002 30000 600 2)"
[[ $result == 0 && $port != 30000 ]] || fail "the static forward's port was mapped ($result, port $port)"
pass "refused: another host's address, a forged client address, a static forward's port (granted $port instead)"
held=$(metric gateway_port_mappings)
pcp udp 30000 0 600 3 --count $((100 - held + 1)) >"$WORK/quota.txt" || fail "the quota requests were not all answered"
granted=$(awk '$1 == 0' "$WORK/quota.txt" | wc -l)
last=$(tail -n 1 "$WORK/quota.txt" | awk '{ print $1 }')
((granted == 100 - held)) && [[ $last == 10 ]] ||
    fail "of $((100 - held + 1)) more mappings ($held held) $granted were granted and the last answered $last, not USER_EX_QUOTA (10)"
(($(metric 'gateway_port_mapping_requests_total{origin="pcp",result="host_quota"}') == 1)) ||
    fail "the refusal is not counted as host_quota"
pass "the host's 101st mapping is refused with USER_EX_QUOTA and counted"

# A restart: the mappings come back from the state directory.
held=$(metric gateway_port_mappings)
stop_gateway
[[ -s $WORK/state/port-mappings.json ]] || fail "no port-mappings.json in the state directory"
start_gateway "$WORK/mapping.toml"
grep -q "port mappings restored.*restored=$held " "$WORK/gateway.log" ||
    fail "the $held mappings were not restored: $(grep -i 'port mappings restored' "$WORK/gateway.log")"
expect_output "after a restart the WAN host reaches the LAN host by the same PCP mapping" \
    "mapped by PCP" wan curl -sf --max-time 5 http://10.0.0.1:28000/
read -r result lifetime port <<<"$(pcp tcp 8000 0 600 1)"
[[ $result == 0 && $port == 28000 ]] || fail "renewing after the restart answered $result, port $port"
read -r result _ _ <<<"$(pcp tcp 8000 0 600 9)"
[[ $result == 2 ]] || fail "renewing under another nonce answered $result, not NOT_AUTHORIZED (2)"
read -r result lifetime _ <<<"$(pcp tcp 8000 0 0 1)"
[[ $result == 0 && $lifetime == 0 ]] || fail "deleting the mapping answered $result"
if wan curl -sf --max-time 2 http://10.0.0.1:28000/ >/dev/null 2>&1; then
    fail "the WAN host still reached the LAN host after the mapping was deleted"
fi
expect_output "the static forward to the same web server still carries the WAN host" \
    "mapped by PCP" wan curl -sf --max-time 5 http://10.0.0.1:30000/
pass "the restored mapping renews under its nonce only, and once deleted admits nobody"
stop_gateway
