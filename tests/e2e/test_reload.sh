#!/usr/bin/env bash
# Config reload while traffic flows: established flows cross untouched, a broken file changes
# nothing (and the metrics say so), a port forward added by editing the file works without a
# restart, and so do QoS and the traffic meter switched on and off. A slow in-place rewrite is
# read only once the file is quiet (no failed reload counted while it is half-written), and a
# file left half-written is refused without changing anything; completed in place, it applies.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
CONFIG=$WORK/gateway.toml
lab_config 19103 >"$CONFIG"
cp "$CONFIG" "$WORK/good.toml"
METRICS=http://127.0.0.1:19103/metrics
start_gateway "$CONFIG"

reloads() { metric 'gateway_config_reloads_total{result="'"$1"'"}'; }

# wait_reloads RESULT N [TRIES]: until N reloads with RESULT have been counted (TRIES x 0.1 s, 50).
wait_reloads() {
    for _ in $(seq 1 "${3:-50}"); do
        (( $(reloads "$1") >= $2 )) && return 0
        sleep 0.1
    done
    fail "expected $2 reload(s) with result $1, saw $(reloads "$1")"
}

# 1. A counted stream (1000 pings, 10 ms apart) crosses five reloads without a loss.
lan ping -c 1000 -i 0.01 -W 1 10.0.0.2 >"$WORK/ping.txt" 2>&1 &
PING=$!
for n in 1 2 3 4 5; do
    sleep 1
    # A runtime change each time: the ICMP error budget.
    sed -i "s/^errors_per_sec = .*/errors_per_sec = $((1000 + n))/" "$CONFIG"
    kill -HUP "$GATEWAY_PID"
    wait_reloads success "$n"
done
wait "$PING" || true
grep -q " 0% packet loss" "$WORK/ping.txt" || fail "pings lost across reloads: $(tail -2 "$WORK/ping.txt")"
pass "1000 pings cross 5 reloads without a loss"
[[ $(metric gateway_config_last_reload_success) == 1 ]] || fail "last reload not reported as a success"

# 2. An iperf3 session established before a reload completes after it.
ip netns exec gwlab-wan iperf3 -s -1 -J >"$WORK/server.json" 2>&1 &
SERVER=$!
sleep 0.5
lan timeout 30 iperf3 -c 10.0.0.2 -t 4 -J >"$WORK/client.json" &
CLIENT=$!
sleep 1.5
succeeded=$(reloads success)
kill -HUP "$GATEWAY_PID"
wait_reloads success $((succeeded + 1))
wait "$CLIENT" || fail "iperf3 across a reload failed: $(tail -c 300 "$WORK/client.json")"
wait "$SERVER" || true
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit("error" in r)' "$WORK/client.json" \
    || fail "iperf3 reported an error across the reload"
pass "an iperf3 session established before a reload completes after it"

# 3. A broken file changes nothing, and the metric shows the failure.
printf 'this is [not valid toml\n' >>"$CONFIG"
kill -HUP "$GATEWAY_PID"
wait_reloads failure 1
[[ $(metric gateway_config_last_reload_success) == 0 ]] || fail "a failed reload is not shown as 0"
grep -q "reload refused" "$WORK/gateway.log" || fail "the refusal is not logged"
expect_output "traffic still flows after a refused reload" " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 10.0.0.2
read -r peer _ < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -t 1) || fail "the old port forward stopped working"
pass "the old port forward still works after a refused reload"

# 4. A port forward added by editing the file (no signal: the file watcher) works at once.
if wan timeout 3 bash -c 'exec 3<>/dev/tcp/10.0.0.1/8080' 2>/dev/null; then
    fail "port 8080 is open before the forward exists"
fi
cp "$WORK/good.toml" "$WORK/next.toml"
cat >>"$WORK/next.toml" <<'TOML'

[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 8080
to = "192.168.10.2"
to_port = 5201
TOML
succeeded=$(reloads success)
mv "$WORK/next.toml" "$CONFIG"
wait_reloads success $((succeeded + 1))
[[ $(metric gateway_config_last_reload_success) == 1 ]] || fail "the good file did not reload"
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -p 8080 -t 1) \
    || fail "the forward added by reload does not work"
pass "a port forward added by editing the file works without a restart ($gbps Gbit/s)"

# 5. QoS and the traffic meter switch on with a reload, and off with the next one.
# udp_flood_mbps: a 300 Mbit/s UDP flood from the LAN host for 3 s; prints the Mbit/s of UDP
# payload the WAN host received.
udp_flood_mbps() {
    ip netns exec gwlab-wan iperf3 -s -1 -J >"$WORK/udp-server.json" 2>&1 &
    local server=$!
    sleep 0.5
    lan iperf3 -c 10.0.0.2 -u -b 300M -l 1400 -t 3 >/dev/null || fail "UDP flood"
    wait "$server" || true
    # iperf3 3.12's UDP server reports no bit rate, but how many of the datagrams arrived.
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["end"]["sum"]
print("%.0f" % ((s["packets"] - s["lost_packets"]) * 1400 * 8 / s["seconds"] / 1e6))' "$WORK/udp-server.json"
}
meter_enabled() { curl -sf http://127.0.0.1:19103/hosts | python3 -c 'import json, sys; print(json.load(sys.stdin)["enabled"])'; }
[[ $(meter_enabled) == False ]] || fail "the traffic meter is on before the reload that enables it"
cp "$CONFIG" "$WORK/plain.toml"
cp "$CONFIG" "$WORK/next.toml"
cat >>"$WORK/next.toml" <<'TOML'

[qos]
enabled = true
uplink_mbps = 100
downlink_mbps = 100

[traffic_meter]
enabled = true
TOML
succeeded=$(reloads success)
mv "$WORK/next.toml" "$CONFIG"
wait_reloads success $((succeeded + 1))
if grep -E "need a restart" "$WORK/gateway.log" | grep -qE "qos|traffic_meter"; then
    fail "the reload asked for a restart to switch QoS or the meter on"
fi
mbps=$(udp_flood_mbps)
(( mbps >= 80 && mbps <= 103 )) || fail "with QoS at 100 Mbit/s switched on by reload, the flood passed $mbps Mbit/s"
[[ $(meter_enabled) == True ]] || fail "/hosts does not show the meter on after the reload"
up=$(curl -sf http://127.0.0.1:19103/hosts \
    | python3 -c 'import json, sys; print(sum(h["up_bytes"] for h in json.load(sys.stdin)["hosts"] if h["host"] == "192.168.10.2"))')
(( up > 3 * 80 * 1000000 / 8 )) || fail "the meter switched on by reload counted $up bytes up from 192.168.10.2"
pass "a reload switched QoS (flood held to $mbps Mbit/s of payload) and the meter ($up bytes up) on"

succeeded=$(reloads success)
cp "$WORK/plain.toml" "$WORK/next.toml"
mv "$WORK/next.toml" "$CONFIG"
wait_reloads success $((succeeded + 1))
mbps=$(udp_flood_mbps)
(( mbps > 200 )) || fail "with QoS switched off by reload, the 300 Mbit/s flood passed only $mbps Mbit/s"
[[ $(meter_enabled) == False ]] || fail "/hosts still shows the meter on"
pass "the next reload switched them off again (flood passed $mbps Mbit/s)"

# 6. A slow in-place rewrite (truncate, then 512-byte chunks 200 ms apart, under the 500 ms the
# file must be quiet) counts nothing while half-written, then applies once. The new file adds
# a forward on port 8081, so the whole file must have been read for it to work.
# rewrite_slowly FILE SOURCE [BYTES]: rewrites FILE in place with SOURCE's first BYTES (all),
# checking after every chunk that no reload was counted; prints the chunks written.
rewrite_slowly() {
    python3 - "$1" "$2" "${3:-}" "$METRICS" <<'PY'
import sys, time, urllib.request
path, source, limit, metrics = sys.argv[1:]
data = open(source, "rb").read()
data = data[: int(limit)] if limit else data
def reloads():
    text = urllib.request.urlopen(metrics, timeout=5).read().decode()
    return sorted(l for l in text.splitlines() if l.startswith("gateway_config_reloads_total"))
before = reloads()
with open(path, "r+b") as f:
    f.truncate(0)
    f.flush()
    chunks = [data[i : i + 512] for i in range(0, len(data), 512)]
    for chunk in chunks:
        time.sleep(0.2)
        f.write(chunk)
        f.flush()
        if reloads() != before:
            sys.exit(f"a reload was counted while the file was half-written: {reloads()} (before: {before})")
print(len(chunks))
PY
}
cp "$CONFIG" "$WORK/before-slow.toml"
cp "$CONFIG" "$WORK/slow.toml"
cat >>"$WORK/slow.toml" <<'TOML'

[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 8081
to = "192.168.10.2"
to_port = 5201
TOML
succeeded=$(reloads success)
failed=$(reloads failure)
chunks=$(rewrite_slowly "$CONFIG" "$WORK/slow.toml") || fail "slow rewrite: $chunks"
wait_reloads success $((succeeded + 1))
sleep 1.5
[[ $(reloads success) == $((succeeded + 1)) ]] || fail "the slow rewrite applied $(( $(reloads success) - succeeded )) times, not once"
[[ $(reloads failure) == "$failed" ]] || fail "the slow rewrite counted $(( $(reloads failure) - failed )) failed reload(s)"
[[ $(metric gateway_config_last_reload_success) == 1 ]] || fail "the slow rewrite is not shown as applied"
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -p 8081 -t 1) \
    || fail "the forward in the slowly rewritten file does not work"
pass "a slow in-place rewrite ($chunks chunks) counted nothing until complete, then applied once"

# 7. A file left half-written (cut inside a quoted value: invalid) is refused once it is
# quiet, and nothing changes: the old forwards still work and the new one (port 8082, in the
# part not yet written) is not there. Completing the file in place then applies it once.
cp "$WORK/slow.toml" "$WORK/whole.toml"
cat >>"$WORK/whole.toml" <<'TOML'

[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 8082
to = "192.168.10.2"
to_port = 5201
TOML
cut=$(python3 -c 'import sys; t = open(sys.argv[1], "rb").read(); print(t.index(b"address = \"") + 14)' "$WORK/whole.toml")
succeeded=$(reloads success)
failed=$(reloads failure)
chunks=$(rewrite_slowly "$CONFIG" "$WORK/whole.toml" "$cut") || fail "half rewrite: $chunks"
wait_reloads failure $((failed + 1))
sleep 1.5
[[ $(reloads failure) == $((failed + 1)) ]] || fail "the half-written file counted $(( $(reloads failure) - failed )) failed reloads, not one"
[[ $(reloads success) == "$succeeded" ]] || fail "a half-written file was applied"
[[ $(metric gateway_config_last_reload_success) == 0 ]] || fail "the refused half-written file is not shown as a failure"
for port in 8080 8081; do
    read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -p "$port" -t 1) \
        || fail "the forward on $port stopped working after a refused half-written file"
done
if wan timeout 3 bash -c 'exec 3<>/dev/tcp/10.0.0.1/8082' 2>/dev/null; then
    fail "port 8082, in the part of the file not yet written, is open"
fi
expect_output "traffic still flows after the refused half-written file" " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 10.0.0.2
pass "a file left half-written ($cut bytes) is refused once, and nothing changed"

# The rest of the file, appended in place: one more reload, which applies the whole file.
python3 -c 'import sys; open(sys.argv[1], "ab").write(open(sys.argv[2], "rb").read()[int(sys.argv[3]):])' \
    "$CONFIG" "$WORK/whole.toml" "$cut"
cmp -s "$CONFIG" "$WORK/whole.toml" || fail "the completed file differs from the whole one"
wait_reloads success $((succeeded + 1))
sleep 1.5
[[ $(reloads success) == $((succeeded + 1)) ]] || fail "the completed file applied $(( $(reloads success) - succeeded )) times, not once"
[[ $(reloads failure) == $((failed + 1)) ]] || fail "the completed file counted another failed reload"
[[ $(metric gateway_config_last_reload_success) == 1 ]] || fail "the completed file is not shown as applied"
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -p 8082 -t 1) \
    || fail "the forward in the completed file does not work"
pass "completing the half-written file in place applied it once (the forward on 8082 works)"

# Atomic replacement, as docs/operations.md recommends (Reload), applies in one reload.
succeeded=$(reloads success)
cp "$WORK/before-slow.toml" "$WORK/next.toml"
mv "$WORK/next.toml" "$CONFIG"
wait_reloads success $((succeeded + 1))


# 8. A large category list (200,000 domains: about 2 s to read and compile in a release build)
# loads on the config-load thread, not the control thread: pings to the gateway's own address,
# which the control thread answers (as it answers ARP), keep coming back meanwhile, none lost
# and none delayed by more than a small part of the load (on the control thread, a ping would
# wait for the whole load, and with -W 1 a load over a second loses some). The bound is loose
# (250 ms) because this 2-vCPU machine is shared: one slow ping of ~110 ms was seen under
# other builds, against a 5 s load.
python3 -c 'import sys
with open(sys.argv[1], "w") as f:
    for i in range(200000):
        f.write(f"0.0.0.0 host{i}.blocked{i % 997}.example\n")' "$WORK/big.txt"
cp "$WORK/before-slow.toml" "$WORK/next.toml"
cat >>"$WORK/next.toml" <<TOML

[parental_control]
enabled = true
categories = { big = "$WORK/big.txt" }
[[parental_control.devices]]
name = "kid"
addresses = ["192.168.10.20"]
blocked_categories = ["big"]
TOML
"$GATEWAY" check-config "$WORK/next.toml" >/dev/null || fail "the big-category config does not check"
lan ping -c 600 -i 0.02 -W 1 192.168.10.1 >"$WORK/ping-load.txt" 2>&1 &
PING=$!
sleep 1
succeeded=$(reloads success)
asked=$(date +%s%N)
mv "$WORK/next.toml" "$CONFIG"
wait_reloads success $((succeeded + 1)) 200
loaded_ms=$(( ($(date +%s%N) - asked) / 1000000 - 500 ))
wait "$PING" || true
grep -q " 0% packet loss" "$WORK/ping-load.txt" || fail "pings to the gateway lost while the category list loaded: $(tail -2 "$WORK/ping-load.txt")"
max_ms=$(grep -oP 'rtt min/avg/max/mdev = [0-9.]+/[0-9.]+/\K[0-9.]+' "$WORK/ping-load.txt")
[[ -n $max_ms ]] || fail "no ping summary: $(tail -2 "$WORK/ping-load.txt")"
(( loaded_ms >= 300 )) || fail "the category list loaded in ${loaded_ms} ms: too quick to show a stall"
python3 -c 'import sys; sys.exit(not float(sys.argv[1]) < min(250, int(sys.argv[2]) / 4))' "$max_ms" "$loaded_ms" \
    || fail "a ping to the gateway took ${max_ms} ms while the category list loaded (${loaded_ms} ms)"
pass "while 200,000 category domains loaded (~${loaded_ms} ms), 600 pings to the gateway came back, the slowest in ${max_ms} ms"
succeeded=$(reloads success)
cp "$WORK/before-slow.toml" "$WORK/next.toml"
mv "$WORK/next.toml" "$CONFIG"
wait_reloads success $((succeeded + 1))

# 8. A reload that adds an interface (which waits for a restart) and a policy for its zone
# (`wan -> dmz accept`) is refused whole, naming the policy and the restart: the policy once
# resolved to the first zone and opened the LAN to the WAN (issue 43).
wan ip route replace 192.168.10.0/24 via 10.0.0.1
lan timeout 60 python3 -c '
import socket
s = socket.create_server(("0.0.0.0", 8088))
while True:
    c, _ = s.accept()
    c.close()
' &
LAN_SERVER=$!
poll_until 10 listening gwlab-lan 8088 || fail "the LAN host's TCP server did not listen"
# wan_opens: of five TCP connections from the WAN host to the LAN host, how many opened.
wan_opens() {
    wan python3 -c '
import socket
opened = 0
for _ in range(5):
    try:
        socket.create_connection(("192.168.10.2", 8088), timeout=1).close()
        opened += 1
    except OSError:
        pass
print(opened)'
}
[[ $(wan_opens) == 0 ]] || fail "the WAN host reached the LAN host before the reload"
cp "$CONFIG" "$WORK/before-dmz.toml"
wan_local='{ from = "wan", to = "local", action = "drop" },'
grep -qF "$wan_local" "$CONFIG" || fail "configs/lab.toml has no '$wan_local' policy to extend"
sed -i "s/$wan_local/$wan_local { from = \"wan\", to = \"dmz\", action = \"accept\" },/" "$CONFIG"
cat >>"$CONFIG" <<'TOML'

[[interfaces]]
name = "dmz"
device = "net_null0"
address = "172.16.30.1/24"
zone = "dmz"
TOML
"$GATEWAY" check-config "$CONFIG" >/dev/null || fail "the file with the dmz interface does not check alone"
failed=$(reloads failure)
kill -HUP "$GATEWAY_PID"
wait_reloads failure $((failed + 1))
grep -q 'firewall\.policy\[[0-9]*\]\.to: no zone named .*dmz' "$WORK/gateway.log" ||
    fail "the refusal does not name the policy and its zone: $(grep -i 'reload' "$WORK/gateway.log" | tail -n 2)"
grep -q 'interfaces (count)' "$WORK/gateway.log" || fail "the refusal does not say the new interface waits for a restart"
opened=$(wan_opens)
[[ $opened == 0 ]] || fail "after the refused reload the WAN host opened $opened of 5 TCP connections to the LAN host"
pass "a reload adding an interface and a 'wan -> dmz accept' policy is refused (the policy and the restart named); WAN -> LAN stays closed (0 of 5)"
kill "$LAN_SERVER" 2>/dev/null || true
wait "$LAN_SERVER" 2>/dev/null || true
cp "$WORK/before-dmz.toml" "$CONFIG"
succeeded=$(reloads success)
kill -HUP "$GATEWAY_PID"
wait_reloads success $((succeeded + 1))

stop_gateway
