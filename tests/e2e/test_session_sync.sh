#!/usr/bin/env bash
# Session sync (issue 49, `[ha.sync]`): gateway A forwards the lab's traffic and streams its
# flows over loopback to gateway B, a standby with the same config on null ports (no
# traffic), which installs them. An iperf3 session through masquerade and one through the
# port forward must be in B's flow table with A's translation, tuple for tuple; both sides'
# metrics must count them, and B, holding copies only, must send none back. Then a replayed
# message, a forged one and a foreign datagram sent to B must be refused and counted by
# reason, and A's own message sent back to A refused (each direction has its own key).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
B_PID=
finish() {
    [[ -n $B_PID ]] && kill -TERM "$B_PID" 2>/dev/null && wait "$B_PID" 2>/dev/null
    cleanup
}
trap finish EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
A_SYNC=17440
B_SYNC=17441
head -c 32 /dev/urandom | base64 >"$WORK/sync.key"
chmod 600 "$WORK/sync.key"
# sync_section LISTEN PEER CTL: the [ha.sync] and [ctl] tables of one box.
sync_section() {
    printf '\n[ha.sync]\nlisten = "127.0.0.1:%s"\npeer = "127.0.0.1:%s"\nkey_file = "%s"\nrefresh_ms = 500\n' \
        "$1" "$2" "$WORK/sync.key"
    printf '\n[ctl]\nsocket = "%s"\n' "$3"
}
lab_config 19130 >"$WORK/a.toml"
# B: the same addresses, forwards and rules (a flow is installed only where B's config would
# have made it), on null ports, with its own DPDK prefix, metrics port and state directory.
sed -e 's/^device = "net_af_packet0[^"]*"/device = "net_null0,no-rx=1"/' \
    -e 's/^device = "net_af_packet1[^"]*"/device = "net_null1,no-rx=1"/' \
    -e 's/^file_prefix = .*/file_prefix = "gateway-e2e-b"/' \
    -e 's/^listen = .*/listen = "127.0.0.1:19131"/' \
    -e 's/^hugepages = .*/hugepages = "off"/' "$WORK/a.toml" >"$WORK/b.toml"
grep -q 'net_null1,no-rx=1' "$WORK/b.toml" || fail "B's config kept A's ports"
sync_section "$A_SYNC" "$B_SYNC" "$WORK/run/a.sock" >>"$WORK/a.toml"
sync_section "$B_SYNC" "$A_SYNC" "$WORK/run/b.sock" >>"$WORK/b.toml"

GATEWAY__STATE__DIRECTORY=$WORK/state-b "$GATEWAY" run --config "$WORK/b.toml" >"$WORK/b.log" 2>&1 &
B_PID=$!
poll_until 20 grep -q "gateway running" "$WORK/b.log" || {
    tail -n 20 "$WORK/b.log" >&2
    fail "gateway B did not start"
}
start_gateway "$WORK/a.toml"
A_METRICS=http://127.0.0.1:19130/metrics
B_METRICS=http://127.0.0.1:19131/metrics
ctl_a() { "$GATEWAY" ctl --socket "$WORK/run/a.sock" "$@"; }
ctl_b() { "$GATEWAY" ctl --socket "$WORK/run/b.sock" "$@"; }

# Two sessions, each for 20 s at a low rate: LAN -> WAN by masquerade, WAN -> the forward.
wan iperf3 -s -p 5202 -1 >/dev/null 2>&1 &
lan iperf3 -s -p 5201 -1 >/dev/null 2>&1 &
poll_until 10 listening gwlab-wan 5202 && poll_until 10 listening gwlab-lan 5201 ||
    fail "the iperf3 servers did not listen"
lan iperf3 -c 10.0.0.2 -p 5202 -t 20 -b 5M >/dev/null 2>&1 &
wan iperf3 -c 10.0.0.1 -p 5201 -t 20 -b 5M >/dev/null 2>&1 &

# synced: whether every TCP flow of the two sessions on A is on B with the same tuples.
synced() {
    ctl_a show flows --protocol tcp --json >"$WORK/a.json" 2>/dev/null || return 1
    ctl_b show flows --protocol tcp --json >"$WORK/b.json" 2>/dev/null || return 1
    python3 - "$WORK/a.json" "$WORK/b.json" <<'PY'
import json, sys
def tuples(path):
    flows = json.load(open(path))["flows"]
    return {(json.dumps(f["original"], sort_keys=True), json.dumps(f["reply"], sort_keys=True)): f
            for f in flows if 5201 in (f["original"]["dst_port"], f["reply"]["src_port"])
            or 5202 in (f["original"]["dst_port"], f["reply"]["src_port"])}
a, b = tuples(sys.argv[1]), tuples(sys.argv[2])
masquerade = [f for f in a.values() if f["original"]["dst_port"] == 5202]
forward = [f for f in a.values() if f["forwarded"]]
sys.exit(0 if masquerade and forward and set(a) <= set(b) else 1)
PY
}
poll_until 15 synced || fail "B does not hold A's sessions: A $(head -c 800 "$WORK/a.json"); B $(head -c 800 "$WORK/b.json")"
python3 - "$WORK/b.json" <<'PY' || fail "B's copies are not A's translation: $(head -c 800 "$WORK/b.json")"
import json, sys
flows = json.load(open(sys.argv[1]))["flows"]
out = [f for f in flows if f["original"]["dst_port"] == 5202]
fwd = [f for f in flows if f["forwarded"]]
# Masqueraded to A's WAN address; forwarded from A's WAN address to the LAN host.
assert all(f["reply"]["dst"] == "10.0.0.1" and f["original"]["src"] == "192.168.10.2" for f in out), out
assert all(f["original"]["dst"] == "10.0.0.1" and f["reply"]["src"] == "192.168.10.2" for f in fwd), fwd
assert any(f["state"] == "established" for f in out + fwd), flows
PY
pass "B holds A's sessions (masquerade and port forward), tuple for tuple, with A's translation"

METRICS=$A_METRICS
sent=$(metric 'gateway_session_sync_flows_total{event="sent"}')
((sent >= 2)) || fail "A sent $sent flows"
METRICS=$B_METRICS
installed=$(metric 'gateway_session_sync_flows_total{event="installed"}')
received=$(metric 'gateway_session_sync_messages_total{direction="received"}')
((installed >= 2 && received >= 1)) || fail "B installed $installed flows from $received messages"
refused=$(metric 'gateway_session_sync_refused_messages_total')
((refused == 0)) || fail "B refused $refused of A's messages"
# B holds copies only, and sends no copy back.
echoed=$(metric 'gateway_session_sync_flows_total{event="sent"}')
((echoed == 0)) || fail "B sent $echoed flows back to A"
pass "A sent $sent flows; B took $received messages and installed $installed flows, refusing none and sending none back"

# A message of A's as it crossed the loopback, sent again (replayed), with a byte of its
# payload changed (forged), a datagram that is no sync message (foreign), and the message
# sent back to A itself (which A's key for B's messages does not verify).
tshark -i lo -f "udp dst port $B_SYNC" -c 1 -w "$WORK/sync.pcap" -a duration:10 >/dev/null 2>&1 ||
    fail "no sync message crossed the loopback"
# Debian's python, with scapy (the python3 on PATH may be a shim).
/usr/bin/python3 - "$WORK/sync.pcap" "$B_SYNC" "$A_SYNC" <<'PY'
import socket, sys
from scapy.all import rdpcap, UDP
captured = rdpcap(sys.argv[1])
if not captured:
    sys.exit("no sync message was captured")
message = bytes(captured[0][UDP].payload)
peer = ("127.0.0.1", int(sys.argv[2]))
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
out.sendto(message, peer)
forged = bytearray(message)
forged[40] ^= 0x01
out.sendto(bytes(forged), peer)
out.sendto(b"not a sync message, but long enough to be read as one" * 2, peer)
out.sendto(message, ("127.0.0.1", int(sys.argv[3])))
PY
counted() {
    local reason
    for reason in replayed bad_tag foreign; do
        (($(metric "gateway_session_sync_refused_messages_total{reason=\"$reason\"}") >= 1)) || return 1
    done
}
poll_until 10 counted || fail "B did not count the replayed, forged and foreign messages: $(curl -sf "$B_METRICS" | grep session_sync_refused)"
pass "B refused a replayed, a forged and a foreign message, each counted by its reason"
METRICS=$A_METRICS
poll_until 10 test "$(metric 'gateway_session_sync_refused_messages_total{reason="bad_tag"}')" -ge 1 ||
    fail "A did not refuse its own message sent back to it: $(curl -sf "$A_METRICS" | grep session_sync_refused)"
pass "A refused its own message sent back to it (bad_tag: each direction has its own key)"
assert_no_conntrack_invalid
