#!/usr/bin/env bash
# gateway ctl against a running gateway (configs/lab.toml): flows, drops, workers, interfaces,
# routes and neighbours as the lab and the test's traffic made them, in tables and --json;
# clear flows for one host only.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19131 >"$WORK/gateway.toml"
printf '\n[ctl]\nsocket = "%s"\n' "$WORK/run/ctl.sock" >>"$WORK/gateway.toml"
start_gateway "$WORK/gateway.toml"
METRICS=http://127.0.0.1:19131/metrics
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }

mode=$(stat -c %a "$WORK/run/ctl.sock")
[[ $mode == 600 ]] || fail "ctl.socket has mode $mode: without ctl.group only root may use it"
pass "ctl.socket made in a new directory, mode 600"

# A flow the test knows: an iperf3 session LAN -> WAN through masquerade, listed while it runs.
wan iperf3 -s -1 >/dev/null 2>&1 &
server=$!
poll_until 10 listening gwlab-wan 5201 || fail "the WAN host's iperf3 server did not listen"
lan iperf3 -c 10.0.0.2 -t 4 >/dev/null 2>&1 &
client=$!
sleep 2
ctl show flows --host 192.168.10.2 --port 5201 --json >"$WORK/flows.json"
python3 - "$WORK/flows.json" <<'PY' || fail "show flows: the iperf3 session is not listed as expected: $(head -c 600 "$WORK/flows.json")"
import json, sys
answer = json.load(open(sys.argv[1]))
flows = [f for f in answer["flows"] if f["protocol"] == "tcp"]
assert answer["matched"] >= 2 and answer["listed"] == len(answer["flows"]), answer
for f in flows:
    o, r = f["original"], f["reply"]
    assert (o["src"], o["dst"], o["dst_port"]) == ("192.168.10.2", "10.0.0.2", 5201), f
    # Masqueraded: the replies come back to the WAN address.
    assert (r["src"], r["src_port"], r["dst"]) == ("10.0.0.2", 5201, "10.0.0.1"), f
    assert f["state"] == "established" and f["replied"] and not f["forwarded"], f
    assert f["expires_in_seconds"] > 0, f
PY
pass "show flows: the iperf3 session 192.168.10.2 -> 10.0.0.2:5201, masqueraded to 10.0.0.1, established"
text=$(ctl show flows --host 192.168.10.2 --port 5201)
grep -q "established .*192.168.10.2:[0-9]* -> 10.0.0.2:5201 .*10.0.0.2:5201 -> 10.0.0.1:" <<<"$text" \
    || fail "show flows (table) lacks the iperf3 session: $text"
grep -q "of [0-9]* matching flows listed" <<<"$text" || fail "show flows (table) has no count: $text"
pass "show flows as a table: $(grep -c established <<<"$text") established rows"
wait "$client" || fail "iperf3 through masquerade"
wait "$server" || true

# A second LAN host (another address in the LAN namespace) pings too: its flow must survive
# the first host's clear.
lan ip addr add 192.168.10.3/24 dev eth0
lan ping -c 2 -i 0.2 -W 2 10.0.0.2 >/dev/null || fail "ping from 192.168.10.2"
lan ping -c 2 -i 0.2 -W 2 -I 192.168.10.3 10.0.0.2 >/dev/null || fail "ping from 192.168.10.3"
ctl show flows --protocol icmp --json >"$WORK/icmp.json"
python3 - "$WORK/icmp.json" <<'PY' || fail "show flows --protocol icmp: $(head -c 600 "$WORK/icmp.json")"
import json, sys
flows = json.load(open(sys.argv[1]))["flows"]
sources = sorted(f["original"]["src"] for f in flows)
assert sources == ["192.168.10.2", "192.168.10.3"], sources
assert all(f["protocol"] == "icmp" and f["state"] is None and f["reply"]["dst"] == "10.0.0.1" for f in flows), flows
PY
pass "show flows --protocol icmp: one echo flow per LAN host, masqueraded"

# Drops: an unsolicited WAN connection attempt is a firewall drop.
wan ip route replace 192.168.10.0/24 via 10.0.0.1
wan timeout 3 bash -c 'exec 3<>/dev/tcp/192.168.10.2/22' 2>/dev/null && fail "unsolicited WAN connection got through"
ctl show drops --json >"$WORK/drops.json"
python3 - "$WORK/drops.json" <<'PY' || fail "show drops: $(head -c 600 "$WORK/drops.json")"
import json, sys
drops = json.load(open(sys.argv[1]))["drops"]
assert all(d["packets"] > 0 for d in drops), drops
assert sum(d["packets"] for d in drops if d["reason"] == "firewall_drop") >= 1, drops
PY
drops_table=$(ctl show drops)
grep -q "firewall_drop" <<<"$drops_table" || fail "show drops (table) lacks firewall_drop: $drops_table"
pass "show drops: the unsolicited SYN counted as firewall_drop"

# Trace: an unsolicited WAN probe, refused by the zone policy, and a LAN host's ping,
# masqueraded on its way out.
# Two packets each: on two workers the first may be the receiving worker's handoff to the owner.
ctl trace 2 --host 10.0.0.2 --port 22 --timeout 10 --json >"$WORK/trace-probe.json" &
tracer=$!
sleep 0.5
wan timeout 3 bash -c 'exec 3<>/dev/tcp/192.168.10.2/22' 2>/dev/null && fail "unsolicited WAN connection got through"
wait "$tracer" || fail "ctl trace (probe) failed: $(cat "$WORK/trace-probe.json")"
python3 - "$WORK/trace-probe.json" <<'PY' || fail "trace of the WAN probe: $(cat "$WORK/trace-probe.json")"
import json, sys
answer = json.load(open(sys.argv[1]))
assert answer["traced"] == 2, answer
decided = [p for p in answer["packets"] if p["verdict"]["kind"] != "handoff"]
assert decided and all(p["handed_off"] or len(decided) == 2 for p in decided), answer
packet = decided[0]
assert packet["ingress"] == "wan" and packet["received"]["src"] == "10.0.0.2", packet
assert packet["received"]["dst"] == "192.168.10.2" and packet["received"]["dst_port"] == 22, packet
flow = packet["flow"]
assert flow["match"] == "new" and flow["firewall"]["action"] == "drop" and flow["firewall"]["rule"] is None, flow
assert (flow["firewall"]["from"], flow["firewall"]["to"]) == ("wan", "lan"), flow
assert packet["verdict"] == {"kind": "drop", "reason": "firewall_drop"}, packet
PY
ctl trace 2 --host 192.168.10.2 --protocol icmp --timeout 10 >"$WORK/trace-ping.txt" &
tracer=$!
sleep 0.5
lan ping -c 2 -i 0.2 -W 2 10.0.0.2 >/dev/null || fail "ping during the trace"
wait "$tracer" || fail "ctl trace (ping) failed: $(cat "$WORK/trace-ping.txt")"
grep -q "^  nat         192.168.10.2:[0-9]* -> 10.0.0.2:[0-9]* -> 10.0.0.1:[0-9]* -> 10.0.0.2:" "$WORK/trace-ping.txt" \
    && grep -q "^  verdict     transmit on wan" "$WORK/trace-ping.txt" \
    || fail "trace of the ping: $(cat "$WORK/trace-ping.txt")"
pass "ctl trace: the WAN probe dropped by the zone policy (firewall_drop), the ping masqueraded to 10.0.0.1 and sent on wan"

workers=$(grep -c '' < <(sed -n 's/^lcores = \[\(.*\)\]/\1/p' "$WORK/gateway.toml" | tr ',' '\n'))
ctl show workers --json >"$WORK/workers.json"
entries=$(metric 'gateway_conntrack_entries')
python3 - "$WORK/workers.json" "$workers" "$entries" <<'PY' || fail "show workers: $(head -c 600 "$WORK/workers.json")"
import json, sys
workers = json.load(open(sys.argv[1]))["workers"]
assert len(workers) == int(sys.argv[2]), workers
assert sum(w["rx_packets"] for w in workers) > 1000, workers
assert all(0 <= w["busy_share"] <= 1 and w["flow_capacity"] > 0 for w in workers), workers
assert abs(sum(w["flows"] for w in workers) - int(sys.argv[3])) <= 2, (workers, sys.argv[3])
PY
pass "show workers: $workers worker(s), their packets and flows agree with the metrics"

# NAT: who holds the ports. Both LAN hosts hold bindings on the WAN address; the iperf3
# session's two TCP connections and a ping gave 192.168.10.2 three.
ctl show nat --json >"$WORK/nat.json"
python3 - "$WORK/nat.json" <<'PY' || fail "show nat: $(head -c 1500 "$WORK/nat.json")"
import json, sys
answer = json.load(open(sys.argv[1]))
hosts = {h["host"]: h["bindings"] for h in answer["hosts"]}
assert hosts.get("192.168.10.2", 0) >= 3 and hosts.get("192.168.10.3") == 1, hosts
assert answer["matched"] == sum(hosts.values()) == answer["listed"], answer
assert all(b["outside"].startswith("10.0.0.1:") and b["flows"] >= 1 for b in answer["bindings"]), answer
assert answer["ports_in_use"] >= answer["matched"], answer
icmp = [b for b in answer["bindings"] if b["inside"].startswith("192.168.10.3:")]
assert [b["protocol"] for b in icmp] == ["icmp"], icmp
PY
nat_table=$(ctl show nat)
grep -q "^192.168.10.2 " <<<"$nat_table" || fail "show nat (table): $nat_table"
pass "show nat: 192.168.10.2 and 192.168.10.3 hold their bindings on 10.0.0.1"

# Interfaces, routes and neighbours as the lab made them.
lan_mac=$(lan cat /sys/class/net/eth0/address)
ctl show interfaces --json >"$WORK/interfaces.json"
ctl show routes --json >"$WORK/routes.json"
ctl show neighbors --json >"$WORK/neighbors.json"
python3 - "$WORK" "$lan_mac" <<'PY' || fail "show interfaces/routes/neighbors: $(cat "$WORK/interfaces.json" "$WORK/routes.json" "$WORK/neighbors.json" | head -c 1500)"
import json, sys
work, lan_mac = sys.argv[1], sys.argv[2]
interfaces = {i["name"]: i for i in json.load(open(f"{work}/interfaces.json"))["interfaces"]}
assert interfaces["lan"]["address"] == "192.168.10.1/24" and interfaces["wan"]["address"] == "10.0.0.1/24", interfaces
assert all(i["link_up"] and i["rx_packets"] > 100 and i["tx_packets"] > 100 for i in interfaces.values()), interfaces
routes = {(r["prefix"], r["interface"], r["via"]) for r in json.load(open(f"{work}/routes.json"))["routes"]}
for route in [("192.168.10.0/24", "lan", None), ("10.0.0.0/24", "wan", None), ("0.0.0.0/0", "wan", "10.0.0.2")]:
    assert route in routes, (route, routes)
neighbors = {n["address"]: n for n in json.load(open(f"{work}/neighbors.json"))["neighbors"]}
assert neighbors["192.168.10.2"]["mac"] == lan_mac and neighbors["192.168.10.2"]["interface"] == "lan", neighbors
assert neighbors["10.0.0.2"]["interface"] == "wan", neighbors
PY
routes_table=$(ctl show routes)
grep -q "^0.0.0.0/0 *wan *10.0.0.2" <<<"$routes_table" || fail "show routes (table): $routes_table"
pass "show interfaces, routes and neighbors: both ports up with their addresses, the default route via 10.0.0.2, the LAN host at $lan_mac"

# Rates over the control thread's 10-s windows: 10 pings a second for 13 s show on the LAN
# port. Whatever the windows' phase, one of them holds at least 6.5 s of the pings.
lan ping -q -c 130 -i 0.1 -W 1 10.0.0.2 >/dev/null 2>&1 &
pinger=$!
lan_rate() { ctl show interfaces --json | python3 -c '
import json, sys
lan = {i["name"]: i for i in json.load(sys.stdin)["interfaces"]}["lan"]
r = lan["rates"]
print("%.0f %.0f %.1f" % (r["rx_packets_per_sec"], r["rx_bits_per_sec"], r["over_secs"]))'; }
rate_ok=
for _ in $(seq 1 60); do
    read -r pps bps over <<<"$(lan_rate)"
    if (( pps >= 5 && pps <= 20 )); then rate_ok=1; break; fi
    sleep 0.5
done
wait "$pinger" || true
[[ -n $rate_ok ]] || fail "show interfaces: lan rx rate $pps packets/s over $over s with 10 pings/s"
(( bps * 10 >= pps * 98 * 8 * 9 )) || fail "show interfaces: lan rx $bps bit/s for $pps packets/s of 98 bytes"
interfaces_table=$(ctl show interfaces)
grep -q "rx Mbit/s" <<<"$interfaces_table" || fail "show interfaces (table) has no rate columns: $interfaces_table"
pass "show interfaces: lan rx $pps packets/s, $bps bit/s over the last $over s window during 10 pings/s"

# DPDK's own telemetry socket answers DPDK's own client.
printf '/ethdev/list\n/ethdev/stats,1\n' | dpdk-telemetry.py -f gateway-e2e >"$WORK/telemetry.txt" 2>&1 \
    || fail "dpdk-telemetry.py: $(cat "$WORK/telemetry.txt")"
python3 - "$WORK/telemetry.txt" <<'PY' || fail "dpdk-telemetry.py answers: $(head -c 1500 "$WORK/telemetry.txt")"
import json, sys
text = open(sys.argv[1]).read()
replies = {}
for line in text.splitlines():
    if line.startswith("{"):
        replies.update(json.loads(line))
assert replies["/ethdev/list"] == [0, 1], replies
assert replies["/ethdev/stats"]["ipackets"] > 100, replies
PY
pass "dpdk-telemetry.py -f gateway-e2e: both ports listed, the WAN port's counters read"

# Clear: one host's flows end, the other's stay, and the metrics agree.
before=$(ctl show flows --host 192.168.10.3 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["matched"])')
cleared=$(ctl clear flows --host 192.168.10.2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cleared"])')
(( cleared >= 3 )) || fail "clear flows --host 192.168.10.2 cleared $cleared flows (iperf3's two and a ping)"
left=$(ctl show flows --host 192.168.10.2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["matched"])')
(( left == 0 )) || fail "$left flows of 192.168.10.2 left after clear"
after=$(ctl show flows --host 192.168.10.3 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["matched"])')
(( before >= 1 && after == before )) || fail "the other host's flows went from $before to $after"
bindings=$(ctl show nat --host 192.168.10.2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["matched"])')
(( bindings == 0 )) || fail "192.168.10.2 still holds $bindings NAT bindings after its flows were cleared"
sleep 1.5
entries_after=$(metric 'gateway_conntrack_entries')
(( entries_after <= entries - cleared + 2 )) || fail "conntrack_entries $entries -> $entries_after after clearing $cleared"
pass "clear flows --host 192.168.10.2: $cleared flows ended and their NAT bindings freed, 192.168.10.3 keeps its $after, conntrack_entries $entries -> $entries_after"

# show config: the running file's version and digest, then what a reload changed and why
# a bad one was refused, as the file watcher reloads them.
config_field() { ctl show config --json | python3 -c "import json,sys; a=json.load(sys.stdin); print($1)"; }
[[ $(config_field 'a["version"]') == 1 ]] || fail "show config: version $(config_field 'a["version"]') at start"
[[ $(config_field 'a["sha256"]') == "$(sha256sum "$WORK/gateway.toml" | cut -d' ' -f1)" ]] \
    || fail "show config: the digest is not the file's"
sed -i 's/^errors_per_sec = .*/errors_per_sec = 77/' "$WORK/gateway.toml"
for _ in $(seq 1 40); do
    [[ $(config_field 'a["version"]') == 2 ]] && break
    sleep 0.25
done
[[ $(config_field 'a["version"]') == 2 ]] || fail "show config: no version 2 after an edit: $(ctl show config)"
[[ $(config_field '",".join(a["reloads"][-1]["changed"])') == icmp.errors_per_sec ]] \
    || fail "show config: the reload changed $(config_field 'a["reloads"][-1]["changed"]')"
[[ $(config_field 'a["sha256"]') == "$(sha256sum "$WORK/gateway.toml" | cut -d' ' -f1)" ]] \
    || fail "show config: the digest did not follow the reload"
sed -i 's/^errors_per_sec = .*/errors_per_sec = "many"/' "$WORK/gateway.toml"
for _ in $(seq 1 40); do
    [[ $(config_field 'a["reloads"][-1]["result"]') == refused ]] && break
    sleep 0.25
done
[[ $(config_field 'a["reloads"][-1]["result"]') == refused ]] || fail "show config: the bad file was not refused: $(ctl show config)"
config_field 'a["reloads"][-1]["error"]' | grep -q "icmp.errors_per_sec" \
    || fail "show config: the refusal does not name the field: $(config_field 'a["reloads"][-1]["error"]')"
[[ $(config_field 'a["version"]') == 2 ]] || fail "show config: a refused reload changed the version"
ctl show config >"$WORK/config.txt"
grep -q "applied: changed icmp.errors_per_sec" "$WORK/config.txt" && grep -q "refused: icmp.errors_per_sec" "$WORK/config.txt" \
    || fail "show config's table: $(cat "$WORK/config.txt")"
pass "show config: version 1 with the file's sha256, version 2 naming icmp.errors_per_sec after an edit, a bad edit refused naming the field"
cat "$WORK/config.txt"

# Operator mistakes get an error naming what is wrong, never a cleared table.
if out=$(ctl clear flows 2>&1); then fail "clear flows without a filter ran: $out"; fi
grep -q -- "--all" <<<"$out" || fail "clear flows without a filter: $out"
if out=$(ctl show flows --state open 2>&1); then fail "show flows --state open ran: $out"; fi
grep -q "state: \"open\" is not one of" <<<"$out" || fail "a bad state: $out"
reply=$(python3 - "$WORK/run/ctl.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"drop table flows\n")
print(s.makefile().readline().strip())
PY
)
grep -q '"error":"not a ctl request' <<<"$reply" || fail "a garbage request: $reply"
pass "a clear without a filter, a bad state and a garbage request get errors naming the problem"

stop_gateway
[[ ! -e $WORK/run/ctl.sock ]] || fail "ctl.socket left behind after stop"
pass "gateway stops cleanly and removes ctl.socket"
