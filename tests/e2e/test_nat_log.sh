#!/usr/bin/env bash
# The NAT log ([nat.log]) received by a real syslog server (rsyslog) and a real IPFIX
# collector (nfcapd, read back with nfdump): one create and one delete per mapping of a short
# UDP exchange through masquerade, and none for a second flow that shares the mapping; then, with
# nat.port_block_size, one block line each way for a host's three mappings. The firewall log
# ([firewall.log]) to the same rsyslog and to a JSON lines file: a logged drop rule's decisions,
# one message each, a logged port forward's and a logged zone pair's default's.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
stop_collectors() {
    kill "$(cat "$WORK/rsyslog.pid" 2>/dev/null)" 2>/dev/null || true
    [[ -n ${NFCAPD:-} ]] && kill "$NFCAPD" 2>/dev/null || true
}
trap 'stop_collectors; cleanup' EXIT

# listening_udp PORT: true once something listens on 127.0.0.1:PORT, within 5 s.
listening_udp() {
    local sockets
    for _ in $(seq 1 50); do
        sockets=$(ss -lnu)
        [[ $sockets == *"127.0.0.1:$1 "* ]] && return 0
        sleep 0.1
    done
    return 1
}

# start_nfcapd DIR: an IPFIX collector on IPFIX_PORT writing into DIR (pid in NFCAPD).
start_nfcapd() {
    mkdir -p "$1"
    nfcapd -w "$1" -b 127.0.0.1 -p "$IPFIX_PORT" -t 3600 >"$WORK/nfcapd.log" 2>&1 &
    NFCAPD=$!
    listening_udp "$IPFIX_PORT" || fail "nfcapd is not listening on UDP $IPFIX_PORT: $(cat "$WORK/nfcapd.log")"
}

SYSLOG_PORT=19514
mkdir -p "$WORK/rsyslog"
cat >"$WORK/rsyslog.conf" <<CONF
global(workDirectory="$WORK/rsyslog")
module(load="imudp")
input(type="imudp" address="127.0.0.1" port="$SYSLOG_PORT" ruleset="nat")
template(name="raw" type="string" string="%rawmsg%\n")
ruleset(name="nat") {
    action(type="omfile" file="$WORK/nat.log" template="raw" flushOnTXEnd="on" asyncWriting="off")
}
CONF
rsyslogd -f "$WORK/rsyslog.conf" -i "$WORK/rsyslog.pid" || fail "rsyslogd did not start"
listening_udp "$SYSLOG_PORT" || fail "rsyslogd is not listening on UDP $SYSLOG_PORT"

IPFIX_PORT=19995
start_nfcapd "$WORK/flows"

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19141 >"$WORK/gateway.toml"
# UDP flows time out after 2 s here, so the mapping's delete comes within the test.
sed -i 's/^udp_secs = .*/udp_secs = 2/' "$WORK/gateway.toml"
printf '\n[nat.log]\nsyslog_udp = "127.0.0.1:%s"\nfacility = 17\nipfix_udp = "127.0.0.1:%s"\n' \
    "$SYSLOG_PORT" "$IPFIX_PORT" >>"$WORK/gateway.toml"
# The firewall log to the same rsyslog, a logged drop rule, and the port forward logged.
sed -i '/^to_port = 5201$/a log = true' "$WORK/gateway.toml"
grep -A1 '^to_port = 5201$' "$WORK/gateway.toml" | grep -q '^log = true$' ||
    fail "configs/lab.toml's port forward (to_port = 5201) could not be marked log = true"
# The zone pair wan -> local's default (drop) logged as well.
sed -i 's/{ from = "wan", to = "local", action = "drop" }/{ from = "wan", to = "local", action = "drop", log = true }/' "$WORK/gateway.toml"
grep -qF '{ from = "wan", to = "local", action = "drop", log = true }' "$WORK/gateway.toml" ||
    fail "configs/lab.toml's policy wan -> local could not be marked log = true"
cat >>"$WORK/gateway.toml" <<TOML

[firewall.log]
syslog_udp = "127.0.0.1:$SYSLOG_PORT"
json_file = "$WORK/firewall.jsonl"
facility = 18

[[firewall.rules]]
name = "no-discard-service"
from = "lan"
to = "wan"
protocol = "tcp"
destination_ports = "9"
action = "drop"
log = true
TOML
start_gateway "$WORK/gateway.toml"
METRICS=http://127.0.0.1:19141/metrics

# A UDP server on the WAN host answers each datagram; the LAN host sends from port 5300 to two
# of its ports: two flows, one mapping (endpoint-independent).
wan python3 - <<'PY' &
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.0.0.2", 9999))
t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t.bind(("10.0.0.2", 9998))
s.settimeout(10)
t.settimeout(10)
for sock in (s, t):
    data, peer = sock.recvfrom(100)
    sock.sendto(data, peer)
PY
echo_server=$!
sleep 0.5
lan python3 - <<'PY' || fail "the UDP exchange through masquerade failed"
import socket
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.bind(("192.168.10.2", 5300))
c.settimeout(3)
for port in (9999, 9998):
    c.sendto(b"nat log", ("10.0.0.2", port))
    assert c.recvfrom(100)[0] == b"nat log"
PY
wait "$echo_server" || true
pass "UDP from 192.168.10.2:5300 to two ports of the WAN host and back through masquerade"

# Both flows expire (2 s, then the sweep), the mapping goes, and its delete is sent.
for _ in $(seq 1 80); do
    grep -q 'event="delete"' "$WORK/nat.log" 2>/dev/null && break
    sleep 0.1
done
grep -q 'event="delete"' "$WORK/nat.log" 2>/dev/null || fail "no delete message within 8 s: $(cat "$WORK/nat.log" 2>/dev/null)"
sleep 0.3
python3 - "$WORK/nat.log" <<'PY' || fail "the NAT log is not one create and one delete for 192.168.10.2:5300: $(cat "$WORK/nat.log")"
import re, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if "192.168.10.2:5300" in l]
assert len(lines) == 2, lines
pattern = re.compile(
    r'^<142>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ gateway \d+ NAT '
    r'\[nat@32473 event="(create|delete)" protocol="udp" inside="192\.168\.10\.2:5300" '
    r'outside="10\.0\.0\.1:(\d+)"\] NAT mapping (create|delete) udp 192\.168\.10\.2:5300 -> 10\.0\.0\.1:(\d+)$')
matches = [pattern.match(l) for l in lines]
assert all(matches), lines
assert [m.group(1) for m in matches] == ["create", "delete"], lines
assert len({m.group(2) for m in matches}) == 1, "the same external port in both"
PY
pass "rsyslog got one create and one delete (RFC 5424, facility local1) for the mapping 192.168.10.2:5300 -> 10.0.0.1"
sent=$(metric 'gateway_nat_log_events_total{result="sent"')
lost=$(metric 'gateway_nat_log_events_total{result="lost"')
(( sent >= 4 && lost == 0 )) || fail "nat_log_events_total: sent $sent (2 events to 2 destinations), lost $lost"
pass "metrics: $sent NAT log events sent (syslog and IPFIX), none lost"

# The logged drop rule: two attempts from the LAN host to the WAN host's port 9 (a SYN and
# its retransmission, each a first packet the rule decides), each one message.
lan python3 -c '
import socket
s = socket.socket()
s.settimeout(1.5)
s.bind(("192.168.10.2", 40009))
assert s.connect_ex(("10.0.0.2", 9)) != 0' || fail "the LAN host reached 10.0.0.2:9 past the drop rule"
for _ in $(seq 1 30); do
    grep -q 'FIREWALL' "$WORK/nat.log" 2>/dev/null && break
    sleep 0.1
done
python3 - "$WORK/nat.log" <<'PY' || fail "the firewall log is not the rule's drops of 192.168.10.2:40009 -> 10.0.0.2:9: $(grep FIREWALL "$WORK/nat.log")"
import re, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if " FIREWALL " in l]
assert lines, "no FIREWALL message"
pattern = re.compile(
    r'^<148>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ gateway \d+ FIREWALL '
    r'\[fw@32473 rule="no-discard-service" action="drop" from="lan" to="wan" in="lan" out="wan" protocol="tcp" '
    r'src="192\.168\.10\.2:40009" dst="10\.0\.0\.2:9"\] firewall drop by no-discard-service: '
    r'tcp 192\.168\.10\.2:40009 -> 10\.0\.0\.2:9$')
assert all(pattern.match(l) for l in lines), lines
PY
# One message per decision: the counts agree once rsyslog has written what was sent (sent
# counts each decision once per destination: rsyslog and the JSON lines file).
for _ in $(seq 1 30); do
    logged=$(grep -c ' FIREWALL ' "$WORK/nat.log")
    fw_sent=$(metric 'gateway_firewall_log_events_total{result="sent"')
    hits=$(metric 'gateway_firewall_rule_hits_total{action="drop",rule="no-discard-service"}')
    ((fw_sent == 2 * logged && hits == logged)) && break
    sleep 0.1
done
((logged > 0 && fw_sent == 2 * logged && hits == logged)) ||
    fail "firewall_log_events_total sent $fw_sent, rule hits $hits, rsyslog lines $logged: not one message (and one JSON line) per decision"
pass "rsyslog got $logged firewall log messages (RFC 5424, facility local2, warning) for the logged drop rule, one per decision it counted"
python3 - "$WORK/firewall.jsonl" "$logged" <<'PY' || fail "the JSON lines file is not the rule's drops: $(cat "$WORK/firewall.jsonl")"
import json, sys
entries = [json.loads(line) for line in open(sys.argv[1]).read().splitlines()]
assert len(entries) == int(sys.argv[2]), entries
for entry in entries:
    time = entry.pop("time")
    assert time.endswith("Z") and len(time) == 24, time
    assert entry == {"rule": "no-discard-service", "action": "drop", "from": "lan", "to": "wan",
                     "in": "lan", "out": "wan", "protocol": "tcp", "src": "192.168.10.2",
                     "src_port": 40009, "dst": "10.0.0.2", "dst_port": 9}, entry
PY
pass "the JSON lines file got the same $logged decisions, one object a line"

# The logged port forward: the WAN host's connection to the forwarded port (no rule matches
# it) is the forward's decision, logged under the forward's name with where it went.
wan python3 -c '
import socket
s = socket.socket()
s.settimeout(1.5)
s.bind(("10.0.0.2", 40010))
s.connect_ex(("10.0.0.1", 5201))' || true
forward_line='FIREWALL [fw@32473 rule="forward tcp 5201 -> 192.168.10.2:5201" action="accept" from="wan" to="lan" in="wan" out="lan" protocol="tcp" src="10.0.0.2:40010" dst="10.0.0.1:5201" forwarded_to="192.168.10.2:5201"]'
for _ in $(seq 1 30); do
    grep -qF "$forward_line" "$WORK/nat.log" 2>/dev/null && break
    sleep 0.1
done
grep -qF "$forward_line" "$WORK/nat.log" ||
    fail "no firewall log message for the logged forward's connection: $(grep FIREWALL "$WORK/nat.log" | tail -n 3)"
pass "the logged port forward's decision reached rsyslog under the forward's name, with where it sent the connection"

# The logged zone pair: the WAN host's connection to a port of the gateway that no rule opens
# is the pair wan -> local's default's decision (drop), logged under the pair's name.
wan python3 -c '
import socket
s = socket.socket()
s.settimeout(1.5)
s.bind(("10.0.0.2", 40011))
assert s.connect_ex(("10.0.0.1", 40012)) != 0' || fail "the WAN host reached 10.0.0.1:40012 past the pair's drop"
policy_line='FIREWALL [fw@32473 rule="policy wan->local" action="drop" from="wan" to="local" in="wan" out="local" protocol="tcp" src="10.0.0.2:40011" dst="10.0.0.1:40012"]'
for _ in $(seq 1 30); do
    grep -qF "$policy_line" "$WORK/nat.log" 2>/dev/null && break
    sleep 0.1
done
grep -qF "$policy_line" "$WORK/nat.log" ||
    fail "no firewall log message for the logged pair's drop: $(grep FIREWALL "$WORK/nat.log" | tail -n 3)"
grep -qF '"rule":"policy wan->local","action":"drop","from":"wan","to":"local"' "$WORK/firewall.jsonl" ||
    fail "no JSON line for the logged pair's drop: $(tail -n 3 "$WORK/firewall.jsonl")"
pass "the logged zone pair's default decision reached rsyslog and the JSON lines file under the pair's name"

# nfcapd writes its file out when it stops; nfdump reads the NAT events back.
kill -TERM "$NFCAPD"
wait "$NFCAPD" 2>/dev/null || true
NFCAPD=
nfdump -R "$WORK/flows" -o raw >"$WORK/ipfix.txt" 2>&1 || fail "nfdump could not read nfcapd's files: $(cat "$WORK/ipfix.txt")"
python3 - "$WORK/ipfix.txt" <<'PY' || fail "IPFIX: not one create and one delete for 192.168.10.2:5300 -> 10.0.0.1: $(head -c 3000 "$WORK/ipfix.txt")"
import re, sys
text = open(sys.argv[1]).read()
records = [r for r in re.split(r"\n(?=Flow Record:)", text) if "192.168.10.2" in r]
assert len(records) == 2, records
events, ports = [], set()
for record in records:
    fields = dict(re.findall(r"^\s*([A-Za-z][A-Za-z ]*?)\s*=\s*(.*?)\s*$", record, re.M))
    assert fields["src addr"] == "192.168.10.2" and fields["src port"] == "5300", fields
    assert fields["src xlt ip"] == "10.0.0.1", fields
    assert fields["proto"].split()[0] == "17", fields
    assert int(fields["Event time"].split()[0]) > 0, fields
    ports.add(fields["src xlt port"])
    # RFC 8158 natEvent: 8 NAT44 BIB create, 9 NAT44 BIB delete (6 and 7 are NAT64 sessions).
    events.append(re.match(r"\d+", fields["nat event"].strip()).group())
assert events == ["8", "9"], events
assert len(ports) == 1, ports
PY
pass "nfcapd got the same create and delete as IPFIX NAT44 BIB records ($(grep -c 'Flow Record' "$WORK/ipfix.txt") records)"

stop_gateway
pass "gateway stops cleanly"

# Port-block allocation: the same host's mappings from three source ports share one block of
# 256 ports, logged once when it is taken and once when the last mapping goes.
start_nfcapd "$WORK/flows-blocks"
sed -i 's/^host_ports = .*/host_ports = 4096\nport_block_size = 256/' "$WORK/gateway.toml"
grep -q '^port_block_size = 256' "$WORK/gateway.toml" || fail "the lab config has no nat.host_ports line to add port_block_size beside"
start_gateway "$WORK/gateway.toml"
wan python3 - >"$WORK/peer_ports.txt" <<'PY' &
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.0.0.2", 9999))
s.settimeout(10)
for _ in range(3):
    data, peer = s.recvfrom(100)
    print(peer[1], flush=True)
    s.sendto(data, peer)
PY
echo_server=$!
sleep 0.5
lan python3 - <<'PY' || fail "the UDP exchanges through masquerade by port blocks failed"
import socket
for port in (5400, 5401, 5402):
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.bind(("192.168.10.2", port))
    c.settimeout(3)
    c.sendto(b"blocks", ("10.0.0.2", 9999))
    assert c.recvfrom(100)[0] == b"blocks"
PY
wait "$echo_server" || true
pass "UDP from three ports of 192.168.10.2 through masquerade by port blocks"
blocks=$(metric 'gateway_nat_port_blocks{')
(( blocks > 0 )) || fail "gateway_nat_port_blocks is $blocks with nat.port_block_size = 256"
for _ in $(seq 1 80); do
    grep -q 'event="block-delete"' "$WORK/nat.log" 2>/dev/null && break
    sleep 0.1
done
grep -q 'event="block-delete"' "$WORK/nat.log" 2>/dev/null || fail "no block-delete message within 8 s: $(tail -5 "$WORK/nat.log" 2>/dev/null)"
sleep 0.3
python3 - "$WORK/nat.log" "$WORK/peer_ports.txt" <<'PY' || fail "the NAT log is not one block create and one block delete holding the three mappings: $(tail -8 "$WORK/nat.log")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
peer_ports = [int(p) for p in open(sys.argv[2]).read().split()]
assert len(peer_ports) == 3, peer_ports
assert not [l for l in lines if ":540" in l and 'event="create"' in l], "no per-mapping lines by blocks"
blocks = [l for l in lines if 'event="block-' in l]
assert len(blocks) == 2, blocks
pattern = re.compile(
    r'^<142>1 \S+ \S+ gateway \d+ NAT \[nat@32473 event="block-(create|delete)" '
    r'inside="192\.168\.10\.2" outside="10\.0\.0\.1" ports="(\d+)-(\d+)" step="(\d+)" '
    r'count="(\d+)"\] NAT port block (create|delete) 192\.168\.10\.2 -> 10\.0\.0\.1:(\d+)-(\d+)$')
matches = [pattern.match(l) for l in blocks]
assert all(matches), blocks
assert [m.group(1) for m in matches] == ["create", "delete"], blocks
assert len({m.groups()[1:5] for m in matches}) == 1, "the same block in both"
first, last, step, count = (int(g) for g in matches[0].groups()[1:5])
assert count == 256 and last == first + step * (count - 1), (first, last, step, count)
for port in peer_ports:
    assert first <= port <= last and (port - first) % step == 0, (port, first, last, step)
PY
pass "rsyslog got one block create and one block delete, and the three mappings' ports are in the block"
kill -TERM "$NFCAPD"
wait "$NFCAPD" 2>/dev/null || true
NFCAPD=
nfdump -R "$WORK/flows-blocks" -o raw >"$WORK/ipfix-blocks.txt" 2>&1 || fail "nfdump could not read nfcapd's files: $(cat "$WORK/ipfix-blocks.txt")"
python3 - "$WORK/ipfix-blocks.txt" <<'PY' || fail "IPFIX: not one port block allocation and de-allocation for 192.168.10.2: $(head -c 3000 "$WORK/ipfix-blocks.txt")"
import re, sys
text = open(sys.argv[1]).read()
records = [r for r in re.split(r"\n(?=Flow Record:)", text) if "192.168.10.2" in r]
assert len(records) == 2, records
events = []
for record in records:
    fields = dict(re.findall(r"^\s*([A-Za-z][A-Za-z ]*?)\s*=\s*(.*?)\s*$", record, re.M))
    assert fields["src addr"] == "192.168.10.2" and fields["src xlt ip"] == "10.0.0.1", fields
    assert int(fields["Event time"].split()[0]) > 0, fields
    # RFC 8158 natEvent: 16 port block allocation, 17 de-allocation.
    events.append(re.match(r"\d+", fields["nat event"].strip()).group())
assert events == ["16", "17"], events
PY
# nfdump 1.7.1 decodes the port block events but not the port range elements (361-364) of
# IPFIX; the exporter's unit test decodes those (gateway/src/telemetry/nat_log/ipfix.rs).
pass "nfcapd got the block as RFC 8158 port block allocation and de-allocation records (natEvent 16 and 17)"
stop_gateway
pass "gateway stops cleanly after port blocks"
