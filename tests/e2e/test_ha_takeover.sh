#!/usr/bin/env bash
# An HA pair (issue 49): two gateways, A and B, each with its own ports on a shared LAN and a
# shared WAN (Linux bridges), keepalived (VRRPv3) on each one's kernel twins holding the
# virtual addresses 192.168.10.1 (the LAN hosts' default gateway) and 10.0.0.1 (masquerade's
# and the port forward's address), and [ha.sync] streaming A's flows to B.
#
# An iperf3 session through masquerade and one through the port forward run; B holds A's
# flows; A is killed with SIGKILL. B's keepalived must take both virtual addresses within
# 3 s, B must announce them, and both sessions must carry data again within 5 s of the kill,
# with no reconnect (each iperf3 client runs to its end and exits 0), on B's copies of A's
# flows: the same connections, as many as A had.
#
#   gwlab-lan 192.168.10.2 --+-- br-lan --+-- A (192.168.10.3)  twins in gwha-a, keepalived
#                            |            +-- B (192.168.10.4)  twins in gwha-b, keepalived
#   gwlab-wan 10.0.0.2   ----+-- br-wan --+-- A (10.0.0.3), B (10.0.0.4)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
A_PID=
B_PID=
finish() {
    [[ -n $A_PID ]] && kill -KILL "$A_PID" 2>/dev/null
    [[ -n $B_PID ]] && kill -TERM "$B_PID" 2>/dev/null && wait "$B_PID" 2>/dev/null
    two_box_lab_down
    cleanup
}
trap finish EXIT

two_box_lab_up 192.168.10.1 10.0.0.1

head -c 32 /dev/urandom | base64 >"$WORK/sync.key"
chmod 600 "$WORK/sync.key"
# box_config BOX HOST_OCTET METRICS_PORT SYNC_PORT PEER_SYNC_PORT: one box's config. Both
# run without huge pages (a killed process leaves none behind), each with its own DPDK
# prefix, twins' namespace, metrics port and ctl socket.
box_config() {
    local box=$1 octet=$2
    cat <<TOML
[eal]
main_lcore = 0
hugepages = "off"
memory_mb = 256
file_prefix = "gateway-e2e-ha-$box"

[mempool]
mbufs = 8191

[workers]
lcores = [1]

[[interfaces]]
name = "lan"
device = "net_af_packet$((octet * 2)),iface=gwha-$box-lan,framecnt=2048"
address = "192.168.10.$octet/24"
virtual_address = "192.168.10.1"
kernel_twin = true

[[interfaces]]
name = "wan"
device = "net_af_packet$((octet * 2 + 1)),iface=gwha-$box-wan,framecnt=2048"
address = "10.0.0.$octet/24"
virtual_address = "10.0.0.1"
kernel_twin = true

[[routes]]
destination = "0.0.0.0/0"
via = "10.0.0.2"

[nat]
masquerade = ["wan"]

[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 5201
to = "192.168.10.2"
to_port = 5201

[firewall]
policy = [
    { from = "lan", to = "wan", action = "accept" },
    { from = "lan", to = "local", action = "accept" },
    { from = "wan", to = "lan", action = "drop" },
    { from = "wan", to = "local", action = "drop" },
]

# keepalived's adverts from the peer's twins (a policy to local never admits them).
[[firewall.rules]]
name = "vrrp-from-the-peer-on-the-lan"
from = "lan"
to = "local"
protocol = "vrrp"
source = "192.168.10.$((7 - octet))/32"
action = "accept"

[[firewall.rules]]
name = "vrrp-from-the-peer-on-the-wan"
from = "wan"
to = "local"
protocol = "vrrp"
source = "10.0.0.$((7 - octet))/32"
action = "accept"

[kernel_twins]
netns = "gwha-$box"

[metrics]
listen = "127.0.0.1:$3"

[ctl]
socket = "$WORK/run/$box.sock"

[ha.sync]
listen = "127.0.0.1:$4"
peer = "127.0.0.1:$5"
key_file = "$WORK/sync.key"
refresh_ms = 500
# Far shorter than the 30 s the sessions run after the kill: the idle control connections
# live on only because the takeover renews the copies.
lease_ms = 8000
TOML
}
box_config a 3 19150 17450 17451 >"$WORK/a.toml"
box_config b 4 19151 17451 17450 >"$WORK/b.toml"
# In run.sh's two-worker pass, both run two workers (a pair must run as many workers as
# each other: a masqueraded flow's owner follows its external port's class): each copy goes
# to the worker B's ownership gives it, as B's traffic does after the takeover.
with_e2e_workers "$WORK/a.toml"
with_e2e_workers "$WORK/b.toml"
"$GATEWAY" check-config --config "$WORK/a.toml" >/dev/null || fail "A's config: $("$GATEWAY" check-config --config "$WORK/a.toml" 2>&1)"

# keepalived_config PRIORITY: VRRPv3 every 0.5 s, so a backup declares the master dead after
# 3 x 0.5 s and its skew (about 1.8 s); the two addresses move together (a sync group).
keepalived_config() {
    cat <<CONF
global_defs {
    vrrp_version 3
    script_user root
}
vrrp_sync_group gateway {
    group {
        lan
        wan
    }
}
vrrp_instance lan {
    state BACKUP
    interface lan
    virtual_router_id 51
    priority $1
    advert_int 0.5
    virtual_ipaddress {
        192.168.10.1/24
    }
}
vrrp_instance wan {
    state BACKUP
    interface wan
    virtual_router_id 52
    priority $1
    advert_int 0.5
    virtual_ipaddress {
        10.0.0.1/24
    }
}
CONF
}
keepalived_config 150 >"$WORK/keepalived-a.conf"
keepalived_config 100 >"$WORK/keepalived-b.conf"
# start_box BOX: the gateway (its PID in BOX_PID), then keepalived on its twins.
start_box() {
    local box=$1
    : >"$WORK/$box.log"
    GATEWAY__STATE__DIRECTORY=$WORK/state-$box "$GATEWAY" run --config "$WORK/$box.toml" >"$WORK/$box.log" 2>&1 &
    local pid=$!
    poll_until 20 grep -q "gateway running" "$WORK/$box.log" || {
        tail -n 20 "$WORK/$box.log" >&2
        fail "gateway $box did not start"
    }
    ip netns exec "gwha-$box" keepalived --dont-fork --log-console --log-detail --vrrp \
        --use-file="$WORK/keepalived-$box.conf" --pid="$WORK/keepalived-$box.pid" \
        --vrrp_pid="$WORK/keepalived-vrrp-$box.pid" >"$WORK/keepalived-$box.log" 2>&1 &
    eval "${box^^}_PID=$pid"
}
# holds BOX: whether BOX's twins hold both virtual addresses.
holds() {
    ip -n "gwha-$1" -4 addr show dev lan 2>/dev/null | grep -q "inet 192.168.10.1/" &&
        ip -n "gwha-$1" -4 addr show dev wan 2>/dev/null | grep -q "inet 10.0.0.1/"
}
holds_none() {
    ! ip -n "gwha-$1" -4 addr show 2>/dev/null | grep -qE "inet (192.168.10.1|10.0.0.1)/"
}

start_box a
poll_until 10 holds a || fail "A's keepalived did not take the virtual addresses: $(tail -n 5 "$WORK/keepalived-a.log")"
start_box b
# B hears A's adverts (punted to its twins by the VRRP rule) and stays backup.
sleep 2
holds_none b || fail "B took a virtual address while A is master: $(tail -n 5 "$WORK/keepalived-b.log")"
poll_until 5 grep -q "HA: this box holds the virtual address now" "$WORK/a.log" ||
    fail "A's gateway did not follow its keepalived: $(grep HA "$WORK/a.log")"
held_metric() { # BOX: the sum of BOX's gateway_ha_virtual_address_held series
    local port=19150
    [[ $1 == b ]] && port=19151
    METRICS=http://127.0.0.1:$port/metrics metric gateway_ha_virtual_address_held
}
[[ $(held_metric a) == 2 && $(held_metric b) == 0 ]] ||
    fail "gateway_ha_virtual_address_held: A $(held_metric a), B $(held_metric b) (want 2 and 0)"
pass "A is VRRP master (its twins hold 192.168.10.1 and 10.0.0.1), B stays backup on A's adverts"

# The LAN host reaches its gateway's virtual address; the answer comes from A's MAC.
expect_output "the LAN host pings the virtual address" "1 received" lan ping -c 1 -W 2 192.168.10.1
a_mac=$(cat /sys/class/net/gwha-a-lan/address)
lan ip neigh show 192.168.10.1 | grep -qi "$a_mac" ||
    fail "the LAN host has $(lan ip neigh show 192.168.10.1) for the virtual address, not A's $a_mac"
pass "A answers ARP for the virtual address (the LAN host has A's MAC for it)"

# Two sessions at a low rate, each server reporting what it got every second (epoch-stamped):
# LAN -> WAN by masquerade to 10.0.0.1, and WAN -> 10.0.0.1:5201 forwarded to the LAN host.
wan iperf3 -s -p 5202 -1 -i 1 --forceflush --timestamps='%s ' >"$WORK/masquerade.log" 2>&1 &
lan iperf3 -s -p 5201 -1 -i 1 --forceflush --timestamps='%s ' >"$WORK/forward.log" 2>&1 &
poll_until 10 listening gwlab-wan 5202 && poll_until 10 listening gwlab-lan 5201 ||
    fail "the iperf3 servers did not listen"
lan iperf3 -c 10.0.0.2 -p 5202 -t 40 -b 4M >"$WORK/masquerade-client.log" 2>&1 &
MASQUERADE_CLIENT=$!
wan iperf3 -c 10.0.0.1 -p 5201 -t 40 -b 4M >"$WORK/forward-client.log" 2>&1 &
FORWARD_CLIENT=$!

ctl() { "$GATEWAY" ctl --socket "$WORK/run/$1.sock" show flows --protocol tcp --json; }
# sessions BOX: the two sessions' TCP flows on BOX, one line each (original and reply tuples).
sessions() {
    ctl "$1" | python3 -c '
import json, sys
for f in json.load(sys.stdin)["flows"]:
    o, r = f["original"], f["reply"]
    if 5201 in (o["dst_port"], r["src_port"]) or 5202 in (o["dst_port"], r["src_port"]):
        print(json.dumps(o, sort_keys=True), json.dumps(r, sort_keys=True))' | sort
}
# b_has_a: B holds a copy of each of A's session flows, and both sessions have theirs.
b_has_a() {
    sessions a >"$WORK/a.flows" 2>/dev/null && sessions b >"$WORK/b.flows" 2>/dev/null || return 1
    [[ $(grep -c '"dst_port": 5202' "$WORK/a.flows") -ge 2 && $(grep -c '"dst_port": 5201' "$WORK/a.flows") -ge 2 ]] &&
        [[ -z $(comm -23 "$WORK/a.flows" "$WORK/b.flows") ]]
}
poll_until 15 b_has_a || fail "B does not hold A's sessions: A $(cat "$WORK/a.flows"); B $(cat "$WORK/b.flows")"
a_flows=$(wc -l <"$WORK/a.flows")
pass "B holds copies of A's $a_flows session flows (control and data connections of both sessions)"

sleep 2
# B must have stayed backup all along (a missed advert under load would have made it master
# before the kill, and the takeover below would prove nothing).
if grep -q "Entering MASTER STATE" "$WORK/keepalived-b.log"; then
    fail "B's keepalived became master while A was alive: $(grep -i state "$WORK/keepalived-b.log" | tail -n 5)"
fi
killed_at=$(date +%s.%N)
kill -KILL "$A_PID"
wait "$A_PID" 2>/dev/null || true
A_PID=
poll_until 5 holds b || fail "B did not take the virtual addresses: $(tail -n 5 "$WORK/keepalived-b.log")"
took=$(python3 -c "import time; print(f'{time.time() - $killed_at:.1f}')")
python3 -c "import sys; sys.exit(0 if $took <= 3.0 else 1)" || fail "B took the virtual addresses $took s after the kill (more than 3 s)"
poll_until 5 grep -q "HA: this box holds the virtual address now" "$WORK/b.log" ||
    fail "B's gateway did not follow its keepalived: $(grep HA "$WORK/b.log")"
METRICS=http://127.0.0.1:19151/metrics
poll_until 5 test "$(metric gateway_session_sync_takeovers_total)" -ge 1 ||
    fail "B counted no takeover (gateway_session_sync_takeovers_total)"
[[ $(held_metric b) == 2 ]] || fail "B's gateway_ha_virtual_address_held: $(held_metric b) (want 2)"
pass "A killed (SIGKILL): B's keepalived took both virtual addresses within $took s, and B's gateway answers for them"

# resumed LOG: the first second after the kill, counted from the end of a one-second interval
# wholly after it, in which the server received data; nothing if none yet.
resumed() {
    python3 - "$1" "$killed_at" <<'PY'
import re, sys
killed = float(sys.argv[2])
for line in open(sys.argv[1]):
    m = re.match(r"(\d+) \[\s*\d+\]\s+\S+-\S+\s+sec\s+(\S+) (\S?)Bytes", line)
    if m and int(m.group(1)) >= killed + 1 and float(m.group(2)) > 0:
        print(int(m.group(1)) - killed)
        sys.exit(0)
sys.exit(1)
PY
}
for session in masquerade forward; do
    poll_until 10 resumed "$WORK/$session.log" >/dev/null ||
        fail "the $session session carried nothing after the kill: $(tail -n 8 "$WORK/$session.log")"
    after=$(resumed "$WORK/$session.log")
    python3 -c "import sys; sys.exit(0 if $after <= 5.0 else 1)" ||
        fail "the $session session carried data again only $after s after the kill (more than 5 s)"
    pass "the $session session carries data again through B, $(printf '%.1f' "$after") s after the kill"
done

# While the sessions still run (a closed connection's flow soon ends).
sessions b >"$WORK/b-after.flows" || fail "B's flows could not be read"
[[ -z $(comm -23 "$WORK/a.flows" "$WORK/b-after.flows") ]] ||
    fail "B lost some of A's session flows: $(comm -23 "$WORK/a.flows" "$WORK/b-after.flows")"
[[ $(wc -l <"$WORK/b-after.flows") == "$a_flows" ]] ||
    fail "B has $(wc -l <"$WORK/b-after.flows") session flows where A had $a_flows: $(cat "$WORK/b-after.flows")"
pass "B, the new master, carries the sessions on the $a_flows flows A had, tuple for tuple"

# The clients end 40 s after they started, well within these 45 s.
for client in "$MASQUERADE_CLIENT:masquerade" "$FORWARD_CLIENT:forward"; do
    poll_until 45 bash -c "! kill -0 ${client%%:*} 2>/dev/null" ||
        fail "the ${client#*:} session's client did not end: $(tail -n 5 "$WORK/${client#*:}-client.log"); server: $(tail -n 5 "$WORK/${client#*:}.log"); B's drops: $(curl -sf http://127.0.0.1:19151/metrics | grep '^gateway_dropped_packets_total' | grep -v ' 0$' | tr '\n' ' ')"
    wait "${client%%:*}" || fail "the ${client#*:} session's client failed: $(tail -n 5 "$WORK/${client#*:}-client.log")"
done
pass "both iperf3 sessions ran to their end without a reconnect"
