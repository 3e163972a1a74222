#!/usr/bin/env bash
# Packet capture with DPDK's own tool: with `eal.pdump = true` the gateway serves rte_pdump,
# and dpdk-dumpcap (a secondary process, attached by the file prefix) captures a ping through
# the gateway on the LAN port into pcapng, which tshark reads with both directions; `gateway
# ctl capture` does the same through the ctl socket with a filter, writing only what matches;
# `gateway ctl capture --drops` writes the packets the workers dropped for a reason, and the
# drop log (`[firewall.log] drops`) writes the same drops as JSON lines.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PREFIX=gateway-e2e-pdump
# The runtime files a primary without --in-memory keeps, until the next one with the prefix.
remove_runtime_files() {
    rm -f /dev/hugepages/"$PREFIX"map_* 2>/dev/null || true
    rm -rf "/var/run/dpdk/$PREFIX"
}
trap 'cleanup; remove_runtime_files' EXIT

for tool in dpdk-dumpcap tshark; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs it"
done
"$ROOT/scripts/lab.sh" up >/dev/null
wan ip route replace 192.168.10.0/24 via 10.0.0.1
lab_config 19150 | sed -e "s/^file_prefix = .*/file_prefix = \"$PREFIX\"/" \
    -e 's/^hugepages = .*/hugepages = "required"/' -e 's/^pdump = .*/pdump = true/' >"$WORK/gateway.toml"
grep -q '^pdump = true' "$WORK/gateway.toml" || fail "configs/lab.toml has no eal.pdump line to turn on"
printf '\n[ctl]\nsocket = "%s"\n' "$WORK/run/ctl.sock" >>"$WORK/gateway.toml"
printf '\n[firewall.log]\njson_file = "%s"\ndrops = ["firewall_drop"]\n' "$WORK/firewall.jsonl" \
    >>"$WORK/gateway.toml"
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
start_gateway "$WORK/gateway.toml"
grep -q "rte_pdump up" "$WORK/gateway.log" || fail "the gateway did not log rte_pdump up"

# The ports, as DPDK names them: the LAN's is the first af_packet port.
dpdk-dumpcap --file-prefix="$PREFIX" -D >"$WORK/ports.txt" 2>&1 ||
    fail "dpdk-dumpcap -D could not attach: $(tail -n 5 "$WORK/ports.txt")"
grep -q "net_af_packet0" "$WORK/ports.txt" || fail "dpdk-dumpcap lists no net_af_packet0: $(cat "$WORK/ports.txt")"
pass "dpdk-dumpcap attaches to the running gateway and lists its ports: $(grep -E '^[0-9]+\. ' "$WORK/ports.txt" | tr '\n' ' ')"

dpdk-dumpcap --file-prefix="$PREFIX" -i net_af_packet0 -w "$WORK/lan.pcapng" -a duration:6 -q \
    >"$WORK/dumpcap.log" 2>&1 &
DUMPCAP=$!
# Captures start once dumpcap has enabled rte_pdump on the port: ping until one shows up.
for _ in $(seq 1 20); do
    lan ping -c 1 -W 1 10.0.0.2 >/dev/null 2>&1 || true
    [[ -s $WORK/lan.pcapng ]] && (($(stat -c %s "$WORK/lan.pcapng") > 1024)) && break
    sleep 0.2
done
lan ping -c 3 -i 0.2 -W 1 10.0.0.2 >/dev/null || fail "ping through the gateway during the capture"
wait "$DUMPCAP" || fail "dpdk-dumpcap failed: $(tail -n 5 "$WORK/dumpcap.log")"
tshark -r "$WORK/lan.pcapng" -Y 'icmp and ip.addr == 10.0.0.2' -T fields -e ip.src -e ip.dst -e icmp.type \
    >"$WORK/icmp.txt" 2>"$WORK/tshark.err" || fail "tshark cannot read the capture: $(cat "$WORK/tshark.err")"
requests=$(awk '$1 == "192.168.10.2" && $2 == "10.0.0.2" && $3 == 8' "$WORK/icmp.txt" | wc -l)
replies=$(awk '$1 == "10.0.0.2" && $2 == "192.168.10.2" && $3 == 0' "$WORK/icmp.txt" | wc -l)
((requests >= 3 && replies >= 3)) ||
    fail "the LAN port's capture holds $requests echo requests in and $replies replies out (want 3 each): $(head -n 10 "$WORK/icmp.txt")"
pass "dpdk-dumpcap captured the ping on the LAN port, both directions ($requests requests received, $replies replies sent), read by tshark"

# gateway ctl capture: the same through the ctl socket, with a filter: ICMP only, while the
# LAN host sends UDP beside its pings.
ctl capture --interface lan --filter icmp --count 6 --seconds 8 -w "$WORK/ctl.pcapng" \
    >"$WORK/ctl-capture.log" 2>&1 &
CAPTURE=$!
for _ in $(seq 1 20); do
    lan ping -c 1 -W 1 10.0.0.2 >/dev/null 2>&1 || true
    lan python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.0.0.2", 9))'
    kill -0 "$CAPTURE" 2>/dev/null || break
    sleep 0.2
done
wait "$CAPTURE" || fail "gateway ctl capture failed: $(tail -n 5 "$WORK/ctl-capture.log")"
total=$(tshark -r "$WORK/ctl.pcapng" 2>/dev/null | wc -l)
other=$(tshark -r "$WORK/ctl.pcapng" -Y '!icmp' 2>/dev/null | wc -l)
((total == 6 && other == 0)) ||
    fail "gateway ctl capture --filter icmp --count 6 wrote $total packets, $other of them not ICMP"
pass "gateway ctl capture --filter icmp --count 6: 6 packets, all ICMP, while UDP went by"
ctl capture --interface nowhere -w "$WORK/x.pcapng" >"$WORK/ctl-err.log" 2>&1 &&
    fail "gateway ctl capture of an interface that does not exist succeeded"
grep -q 'no interface "nowhere"' "$WORK/ctl-err.log" ||
    fail "gateway ctl capture of an unknown interface does not say so: $(cat "$WORK/ctl-err.log")"
pass "gateway ctl capture names an unknown interface"

# gateway ctl capture --drops: the packets the workers drop for a reason, as they arrived,
# which no port capture can tell from those that pass. The WAN host's UDP to a LAN host
# meets the wan -> lan policy (drop); the LAN host's pings beside it pass and must not show.
ctl capture --drops firewall_drop --count 3 --seconds 8 -w "$WORK/drops.pcapng" \
    >"$WORK/drop-capture.log" 2>&1 &
CAPTURE=$!
for _ in $(seq 1 40); do
    wan python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"drop-me", ("192.168.10.2", 7777))'
    lan ping -c 1 -W 1 10.0.0.2 >/dev/null 2>&1 || true
    kill -0 "$CAPTURE" 2>/dev/null || break
    sleep 0.2
done
wait "$CAPTURE" || fail "gateway ctl capture --drops failed: $(tail -n 5 "$WORK/drop-capture.log")"
tshark -r "$WORK/drops.pcapng" -T fields -E 'separator=;' -e ip.src -e ip.dst -e udp.dstport -e frame.comment \
    >"$WORK/drops.txt" 2>"$WORK/tshark.err" || fail "tshark cannot read the drop capture: $(cat "$WORK/tshark.err")"
total=$(wc -l <"$WORK/drops.txt")
dropped=$(grep -c '^10.0.0.2;192.168.10.2;7777;dropped: firewall_drop (worker ' "$WORK/drops.txt" || true)
((total == 3 && dropped == 3)) ||
    fail "gateway ctl capture --drops firewall_drop --count 3 wrote $total packets, $dropped of them the WAN host's dropped UDP with its reason: $(head -n 5 "$WORK/drops.txt")"
pass "gateway ctl capture --drops firewall_drop: the 3 dropped packets as they arrived, each with its reason, and none of the pings that passed"

# The drop log saw the same drops (each of them: drops_sample = 1, within 10 a second), one
# JSON line each with the reason, the zone and interface they came from, and the flow.
logged=0
for _ in $(seq 1 30); do
    logged=$(grep -c '"reason":"firewall_drop","action":"drop","from":"wan","in":"wan","protocol":"udp","src":"10.0.0.2","src_port":[0-9]*,"dst":"192.168.10.2","dst_port":7777}' \
        "$WORK/firewall.jsonl" 2>/dev/null || true)
    [ "$logged" -ge 3 ] && break
    sleep 0.1
done
[ "$logged" -ge 3 ] ||
    fail "the drop log wrote $logged lines for the WAN host's dropped UDP, not 3 or more: $(head -n 5 "$WORK/firewall.jsonl" 2>/dev/null)"
grep -q '"dst":"10.0.0.2"' "$WORK/firewall.jsonl" &&
    fail "the drop log logged a packet of the pings that passed: $(grep '"dst":"10.0.0.2"' "$WORK/firewall.jsonl" | head -n 2)"
pass "the drop log (firewall.log.drops = [\"firewall_drop\"]) wrote $logged of the dropped datagrams as JSON lines, with reason, zone and flow, and none of the pings"
ctl capture --drops no_such_reason -w "$WORK/x.pcapng" >"$WORK/ctl-err.log" 2>&1 &&
    fail "gateway ctl capture --drops of an unknown reason succeeded"
grep -q 'drops: "no_such_reason" is no drop reason' "$WORK/ctl-err.log" ||
    fail "gateway ctl capture --drops of an unknown reason does not say so: $(cat "$WORK/ctl-err.log")"
pass "gateway ctl capture --drops names an unknown reason"

stop_gateway
pass "the gateway stops cleanly with rte_pdump up"
