#!/usr/bin/env bash
# Two uplinks (issue 48): WAN1 to ISP1 (gwlab-wan, 10.0.0.2) with weight 2, WAN2 to ISP2
# (gwlab-dmz, 172.16.20.2) with weight 1, both masqueraded, each health-checked by ICMP from
# its kernel twin to 198.51.100.1, a host that each ISP's namespace answers for (as each also
# answers for the "internet" server 203.0.113.10, reporting which ISP it is and the source it
# saw). Checks:
# - 100 LAN hosts (one UDP flow each) split within 15% of 2:1, each masqueraded to the
#   address of the uplink it left by; a policy rule keeps 192.168.10.7 on WAN2;
# - ISP1 stops answering the probes: WAN1 is down within interval x down (plus slack), says
#   `ctl show uplinks` and gateway_uplink_health_failed; a host of WAN1's opens its next
#   flow by WAN2; its TCP connection through WAN1 is reset (uplink_down);
# - ISP1 answers again: WAN1 is up, new flows of its hosts return to it, and the flow opened
#   by WAN2 meanwhile stays on WAN2;
# - ISP2 stops answering: the policy's host falls back to WAN1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

TWIN_NS=gwlab-gw
cleanup_uplinks() {
    for ns in "$TWIN_NS" gwlab-wan gwlab-dmz gwlab-lan; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
    done
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
}
trap cleanup_uplinks EXIT
isp1() { ip netns exec gwlab-wan "$@"; }
isp2() { ip netns exec gwlab-dmz "$@"; }

"$ROOT/scripts/lab.sh" up dmz >/dev/null
ip netns del "$TWIN_NS" 2>/dev/null || true
ip netns add "$TWIN_NS"
ip -n "$TWIN_NS" link set lo up
for host in 7 $(seq 100 199); do
    lan ip addr add "192.168.10.$host/24" dev eth0
done

# Each ISP answers for the probe target and the server, and says who it is.
for isp in isp1 isp2; do
    $isp ip addr add 198.51.100.1/32 dev lo
    $isp ip addr add 203.0.113.10/32 dev lo
    $isp python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("203.0.113.10", 7007))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(("%s %s" % (sys.argv[1], peer[0])).encode(), peer)
' "$isp" &
    $isp python3 -c '
import socket, sys, threading
server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("203.0.113.10", 8000))
server.listen(8)
def echo(conn):
    with conn:
        conn.sendall(sys.argv[1].encode() + b"\n")
        while data := conn.recv(1024):
            conn.sendall(data)
while True:
    conn, _ = server.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
' "$isp" &
done

# ask SRC [PORT]: which ISP answers SRC's UDP datagram, and the source it saw: "isp1
# 10.0.0.1". A fixed PORT asks on the same flow again; none, on a new one.
cat >"$WORK/ask.py" <<'PY'
import socket, sys
src, port = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((src, port))
s.settimeout(1)
for attempt in range(4):
    s.sendto(b"who", ("203.0.113.10", 7007))
    try:
        print(s.recvfrom(2048)[0].decode())
        break
    except socket.timeout:
        continue
else:
    print("none")
PY
ask() { lan python3 "$WORK/ask.py" "$@"; }

cat >"$WORK/uplinks.toml" <<TOML
[eal]
hugepages = "auto"
file_prefix = "gateway-e2e"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_af_packet0,iface=gwl-lan"
address = "192.168.10.1/24"
[[interfaces]]
name = "wan1"
zone = "wan"
device = "net_af_packet1,iface=gwl-wan"
address = "10.0.0.1/24"
kernel_twin = true
[[interfaces]]
name = "wan2"
zone = "wan"
device = "net_af_packet2,iface=gwl-dmz"
address = "172.16.20.1/24"
kernel_twin = true
[nat]
masquerade = ["wan1", "wan2"]
[[uplinks]]
interface = "wan1"
via = "10.0.0.2"
weight = 2
[uplinks.health]
targets = ["198.51.100.1"]
interval_ms = 500
timeout_ms = 400
down = 3
up = 2
[[uplinks]]
interface = "wan2"
via = "172.16.20.2"
weight = 1
[uplinks.health]
targets = ["198.51.100.1"]
interval_ms = 500
timeout_ms = 400
down = 3
up = 2
[[routing.policy]]
source = "192.168.10.7/32"
uplink = "wan2"
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[kernel_twins]
netns = "$TWIN_NS"
[metrics]
listen = "127.0.0.1:19151"
[ctl]
socket = "$WORK/run/ctl.sock"
TOML
with_e2e_workers "$WORK/uplinks.toml"
METRICS=http://127.0.0.1:19151/metrics
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
"$GATEWAY" check-config "$WORK/uplinks.toml" >"$WORK/check.txt" 2>&1 ||
    fail "check-config refused two uplinks: $(cat "$WORK/check.txt")"
start_gateway "$WORK/uplinks.toml"

# uplink_state NAME: its state in `ctl show uplinks` (up, failed, ...), and "usable" or
# "unusable" as the router config the workers run says: the state comes from the health
# checks at once, the router config a moment later, once compiled and published.
uplink_state() {
    ctl show uplinks --json | python3 -c '
import json, sys
for uplink in json.load(sys.stdin)["uplinks"]:
    if uplink["interface"] == sys.argv[1]:
        print(uplink["state"], "usable" if uplink["usable"] else "unusable")
' "$1"
}
# wait_state NAME STATE SECONDS: polls every 0.1 s until the checks say STATE and the workers
# run the config that follows from it; prints the seconds it took.
wait_state() {
    local started now usable=unusable
    [[ $2 == up ]] && usable=usable
    started=$(date +%s.%N)
    while true; do
        [[ $(uplink_state "$1") == "$2 $usable" ]] && break
        now=$(date +%s.%N)
        if (($(echo "$now - $started > $3" | bc))); then
            fail "$1 not $2 within $3 s: $(ctl show uplinks)"
        fi
        sleep 0.1
    done
    echo "$(date +%s.%N) - $started" | bc
}
metric() {
    curl -sf "$METRICS" | awk -v name="$1" 'index($0, name) == 1 { print $NF }'
}

# Both uplinks pass their first rounds (the probes cross the dataplane from the twins).
for _ in $(seq 1 50); do
    answered=$(metric 'gateway_uplink_probes_total{result="answered",uplink="wan2"}')
    [[ ${answered:-0} -ge 2 ]] && break
    sleep 0.1
done
[[ ${answered:-0} -ge 2 ]] || fail "WAN2's health probes are not answered: $(ctl show uplinks)"
[[ $(uplink_state wan1) == "up usable" && $(uplink_state wan2) == "up usable" ]] ||
    fail "the uplinks are not both up: $(ctl show uplinks)"
pass "both uplinks up, their probes answered through the dataplane"

# 1. The share, and each flow's address.
: >"$WORK/share.txt"
for host in $(seq 100 199); do
    echo "192.168.10.$host $(ask "192.168.10.$host")" >>"$WORK/share.txt"
done
on_isp1=$(grep -c ' isp1 10\.0\.0\.1$' "$WORK/share.txt" || true)
on_isp2=$(grep -c ' isp2 172\.16\.20\.1$' "$WORK/share.txt" || true)
((on_isp1 + on_isp2 == 100)) ||
    fail "not every host got through masqueraded to its uplink's address: $(grep -v -E ' isp1 10\.0\.0\.1$| isp2 172\.16\.20\.1$' "$WORK/share.txt" | head -5)"
# Within 15% of 2:1: WAN1 takes 57 to 76 of the 100 hosts.
((on_isp1 >= 57 && on_isp1 <= 76)) || fail "2:1 weights gave WAN1 $on_isp1 hosts and WAN2 $on_isp2"
pass "100 hosts split $on_isp1:$on_isp2 over weights 2:1, each masqueraded to its uplink's address"
[[ $(ask 192.168.10.7) == "isp2 172.16.20.1" ]] || fail "the policy's host did not leave by WAN2: $(ask 192.168.10.7)"
pass "the policy rule keeps 192.168.10.7 on WAN2"
# Before any flow is ended: afterwards a server's retransmission toward a flow the failover
# ended is refused as conntrack_invalid (not_syn), as any stray segment is.
assert_no_conntrack_invalid

# A host of WAN1's, with a TCP connection through it that sends every 100 ms.
victim=$(awk '$2 == "isp1" { print $1; exit }' "$WORK/share.txt")
lan python3 -c '
import socket, sys, time
s = socket.create_connection(("203.0.113.10", 8000), timeout=5, source_address=(sys.argv[1], 0))
f = s.makefile("rb")
print(f.readline().decode().strip(), flush=True)
try:
    while True:
        s.sendall(b"ping\n")
        f.readline()
        time.sleep(0.1)
except OSError as err:
    print(type(err).__name__, flush=True)
' "$victim" >"$WORK/tcp.txt" 2>&1 &
for _ in $(seq 1 30); do
    [[ -s $WORK/tcp.txt ]] && break
    sleep 0.1
done
[[ $(head -1 "$WORK/tcp.txt") == isp1 ]] || fail "the TCP connection did not open through WAN1: $(cat "$WORK/tcp.txt")"

# 2. ISP1 stops answering the probes (its namespace does not forward: the echo dies there).
isp1 ip addr del 198.51.100.1/32 dev lo
took=$(wait_state wan1 failed 8)
pass "WAN1 down $took s after its probes stopped being answered (interval 0.5 s x down 3)"
[[ $(metric 'gateway_uplink_health_failed{uplink="wan1"}') == 1 ]] || fail "gateway_uplink_health_failed{uplink=\"wan1\"} is not 1"
[[ $(metric 'gateway_uplink_usable{uplink="wan1"}') == 0 ]] || fail "gateway_uplink_usable{uplink=\"wan1\"} is not 0"
pass "gateway_uplink_health_failed and gateway_uplink_usable say so"
[[ $(ask "$victim") == "isp2 172.16.20.1" ]] || fail "$victim's new flow did not leave by WAN2: $(ask "$victim")"
pass "$victim's next flow leaves by WAN2"
for _ in $(seq 1 30); do
    [[ $(wc -l <"$WORK/tcp.txt") -ge 2 ]] && break
    sleep 0.1
done
[[ $(sed -n 2p "$WORK/tcp.txt") == ConnectionResetError ]] ||
    fail "the TCP connection through WAN1 was not reset: $(cat "$WORK/tcp.txt")"
[[ $(metric 'gateway_dropped_packets_total{reason="uplink_down"' | awk '{ s += $1 } END { print s + 0 }') -ge 1 ]] ||
    fail "no packet counted as uplink_down"
pass "its TCP connection through WAN1 was reset (uplink_down)"
# A flow opened by WAN2 while WAN1 is down, asked again later on the same port.
[[ $(ask "$victim" 45000) == "isp2 172.16.20.1" ]] || fail "the kept flow did not open by WAN2"

# 3. ISP1 answers again.
isp1 ip addr add 198.51.100.1/32 dev lo
took=$(wait_state wan1 up 8)
pass "WAN1 up again $took s after its probes were answered (up 2)"
[[ $(ask "$victim") == "isp1 10.0.0.1" ]] || fail "$victim's new flow did not return to WAN1: $(ask "$victim")"
[[ $(ask "$victim" 45000) == "isp2 172.16.20.1" ]] || fail "the flow opened by WAN2 moved: $(ask "$victim" 45000)"
pass "new flows return to WAN1, the flow opened by WAN2 stays there"

# 4. ISP2 stops answering: the policy's host falls back to WAN1.
isp2 ip addr del 198.51.100.1/32 dev lo
wait_state wan2 failed 8 >/dev/null
[[ $(ask 192.168.10.7) == "isp1 10.0.0.1" ]] || fail "the policy's host did not fall back to WAN1: $(ask 192.168.10.7)"
pass "with WAN2 down, the policy's host falls back to WAN1"
stop_gateway
