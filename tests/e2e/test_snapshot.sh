#!/usr/bin/env bash
# Sessions survive a restart: a TCP connection through masquerade (LAN -> WAN) and one
# through the port forward (WAN 10.0.0.1:5201 -> 192.168.10.2:5201) exchange a line every
# 0.2 s; the gateway is stopped with SIGTERM (it saves its flows to the state snapshot) and
# started afresh (it restores them), and both connections must carry data again without a
# reset: the kernels' retransmissions cover the gap. Then a corrupt snapshot must be refused
# with one log line and the gateway must start with empty tables.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
CLIENTS=()
finish() {
    for pid in "${CLIENTS[@]}"; do kill "$pid" 2>/dev/null || true; done
    cleanup
}
trap finish EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19116 >"$WORK/gateway.toml"
METRICS=http://127.0.0.1:19116/metrics
SNAPSHOT=$GATEWAY__STATE__DIRECTORY/conntrack.snapshot
start_gateway "$WORK/gateway.toml"

# echo_server NS PORT: echoes every line of one connection, in the background.
echo_server() {
    ip netns exec "$1" python3 -c '
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(1)
conn, _ = server.accept()
while True:
    data = conn.recv(4096)
    if not data:
        break
    conn.sendall(data)
' "$2" >/dev/null 2>&1 &
    CLIENTS+=($!)
}

# talker NS ADDRESS PORT NAME: one connection sending a line every 0.2 s and reading its
# echo; $WORK/NAME.count holds the lines echoed so far. Exits non-zero if the connection
# fails (a reset, or 60 s without an answer).
talker() {
    ip netns exec "$1" python3 -c '
import os, socket, sys, time
address, port, count_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
conn = socket.create_connection((address, port), timeout=5)
conn.settimeout(60)
echoed, pending = 0, b""
while True:
    conn.sendall(b"x" * 100 + b"\n")
    while b"\n" not in pending:
        data = conn.recv(4096)
        if not data:
            sys.exit("closed by the peer")
        pending += data
    pending = pending[pending.index(b"\n") + 1:]
    echoed += 1
    with open(count_file + ".tmp", "w") as out:
        out.write("%d\n" % echoed)
    os.replace(count_file + ".tmp", count_file)
    time.sleep(0.2)
' "$2" "$3" "$WORK/$4.count" 2>"$WORK/$4.err" &
    CLIENTS+=($!)
    eval "${4}_PID=$!"
}

echoed() { cat "$WORK/$1.count" 2>/dev/null || echo 0; }

echo_server gwlab-wan 7000
echo_server gwlab-lan 5201
poll_until 10 listening gwlab-wan 7000 && poll_until 10 listening gwlab-lan 5201 ||
    fail "the echo servers did not listen"
talker gwlab-lan 10.0.0.2 7000 masquerade
talker gwlab-wan 10.0.0.1 5201 forward
# Two workers on two shared CPUs are slow to start: wait for a few exchanges each.
for _ in $(seq 1 50); do
    (( $(echoed masquerade) >= 5 && $(echoed forward) >= 5 )) && break
    sleep 0.2
done
for name in masquerade forward; do
    (( $(echoed $name) >= 5 )) || fail "$name: only $(echoed $name) lines echoed before the restart: $(cat "$WORK/$name.err")"
done
pass "both connections carry data: masquerade $(echoed masquerade), forward $(echoed forward) lines echoed"

stop_gateway
grep -q "state snapshot: [0-9]* flows saved to $SNAPSHOT" "$WORK/gateway.log" \
    || fail "no 'flows saved' line in the log at SIGTERM"
[[ -s $SNAPSHOT ]] || fail "SIGTERM left no snapshot at $SNAPSHOT"
saved=$(grep -o 'state snapshot: [0-9]* flows saved' "$WORK/gateway.log" | grep -o '[0-9]*')
(( saved >= 2 )) || fail "only $saved flows saved"
pass "SIGTERM saved $saved flows to $SNAPSHOT"
before=(masquerade:$(echoed masquerade) forward:$(echoed forward))
sleep 1

cp "$WORK/gateway.log" "$WORK/gateway-first.log"
start_gateway "$WORK/gateway.toml"
grep -Eq "state snapshot: restored [0-9]+ of $saved flows" "$WORK/gateway.log" \
    || fail "no restore line at start: $(grep -i snapshot "$WORK/gateway.log")"
restored=$(metric 'gateway_snapshot_restored_flows')
(( restored >= 2 )) || fail "gateway_snapshot_restored_flows is $restored"
[[ ! -e $SNAPSHOT ]] || fail "the snapshot was not consumed at start"
pass "the new gateway restored $restored flows ($(grep -o 'restored [0-9]* of [0-9]* flows.*' "$WORK/gateway.log"))"

# The kernels retransmit with backoff: give them a few seconds to find the path again.
for _ in $(seq 1 50); do
    moved=0
    for entry in "${before[@]}"; do
        name=${entry%%:*}
        (( $(echoed "$name") >= ${entry##*:} + 10 )) && moved=$((moved + 1))
    done
    (( moved == 2 )) && break
    sleep 0.3
done
for entry in "${before[@]}"; do
    name=${entry%%:*}
    pid_var=${name}_PID
    kill -0 "${!pid_var}" 2>/dev/null || fail "$name: the connection died across the restart: $(cat "$WORK/$name.err")"
    (( $(echoed "$name") >= ${entry##*:} + 10 )) \
        || fail "$name: $(echoed "$name") lines echoed, only ${entry##*:} before the restart"
    pass "$name: the connection carries data after the restart (${entry##*:} -> $(echoed "$name") lines echoed)"
done
setups=$(metric 'gateway_conntrack_flow_setups_total')
(( setups == 0 )) || fail "the restored connections made $setups new flows instead of using the restored ones"
assert_no_conntrack_invalid

# A corrupt snapshot: refused in one line, nothing loaded, the gateway forwards all the same.
for pid in "${CLIENTS[@]}"; do kill "$pid" 2>/dev/null || true; done
CLIENTS=()
stop_gateway
[[ -s $SNAPSHOT ]] || fail "the second SIGTERM left no snapshot"
truncate -s -7 "$SNAPSHOT"
start_gateway "$WORK/gateway.toml"
refusals=$(grep -c "state snapshot .* refused" "$WORK/gateway.log" || true)
[[ $refusals == 1 ]] || fail "expected one refusal line, found $refusals: $(grep -i snapshot "$WORK/gateway.log")"
(( $(metric 'gateway_snapshot_refused') == 1 )) || fail "gateway_snapshot_refused is not 1"
(( $(metric 'gateway_snapshot_restored_flows') == 0 )) || fail "a refused snapshot restored flows"
(( $(metric 'gateway_conntrack_entries') == 0 )) || fail "flows were loaded from a refused snapshot"
[[ -e $SNAPSHOT.refused && ! -e $SNAPSHOT ]] || fail "the refused snapshot was not put aside"
pass "a truncated snapshot is refused: $(grep -o 'state snapshot .* refused ([^)]*)' "$WORK/gateway.log")"
expect_output "ping through masquerade after a refused snapshot" " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 10.0.0.2
stop_gateway
pass "gateway stops cleanly"
