#!/usr/bin/env bash
# The PPPoE client on a VLAN of the WAN port, against an independent access concentrator:
# tests/e2e/pppoe_isp.py, built on scapy's PPPoE and PPP layers, in its own namespace.
#
#   gwlab-lan 192.168.10.2 -- [gateway] wan port, gwppp-gw == gwppp-trunk (OVS trunk, VLAN 7)
#       OVS access port tag=7: gwppp-isp0 == eth0 [gwppp-isp: pppoe_isp.py, TUN ppp-isp 100.64.0.1]
#       gwppp-isp net0 203.0.113.1 == eth0 [gwppp-net 203.0.113.10, "the internet"]
#
# The kernel has no 802.1Q module, so the switch is Open vSwitch in userspace, as in
# test_vlan.sh: the ISP sees untagged frames, the gateway VLAN 7 tagged ones. The session
# (CHAP, IPCP with 100.64.0.2) gives the gateway its WAN address and default route: the checks
# follow it up, cross it with ping and TCP both ways (masquerade, a port forward), clamp the
# MSS to the 1492-byte link, end it with a PADT and with the ISP's restart under a new session
# id, and lose it to LCP echo timeouts when the ISP dies without a word; an ARP/NS flood from
# the LAN neither ends the session nor costs another LAN host a ping.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

ISP_NS=gwppp-isp
NET_NS=gwppp-net
ISP_PY=/usr/bin/python3 # Debian's python with scapy 2.5 (the python3 on PATH may be a shim)
ISP_LOG=$WORK/isp.log
ISP_PID=
SNIFFER=
METRICS=http://127.0.0.1:19141/metrics
IF='interface="isp"'

teardown() {
    if [[ -n $SNIFFER ]]; then kill "$SNIFFER" 2>/dev/null || true; fi
    if [[ -n $ISP_PID ]]; then kill "$ISP_PID" 2>/dev/null || true; fi
    for ns in "$ISP_NS" "$NET_NS"; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
    done
    stop_ovs || true
    # The userspace bridge's own port is a persistent tap that outlives ovs-vswitchd.
    ip link del gwpppbr 2>/dev/null || true
    for ns in "$ISP_NS" "$NET_NS"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del gwppp-gw 2>/dev/null || true
    ip link del gwppp-isp0 2>/dev/null || true
    cleanup
}
trap teardown EXIT

# pfail WHAT: fail, with the ISP's log and the gateway's PPPoE lines and metrics beside the
# gateway log's tail.
pfail() {
    {
        echo "--- ISP log (last 25 lines) ---"
        tail -n 25 "$ISP_LOG" 2>/dev/null || true
        echo "--- gateway log, pppoe lines (last 20) ---"
        grep -i pppoe "$WORK/gateway.log" 2>/dev/null | tail -n 20 || true
        echo "--- pppoe metrics ---"
        curl -sf "$METRICS" | grep -E '^gateway_pppoe|reason="pppoe' || true
    } >&2
    fail "$@"
}

quiet_offloads() { ethtool -K "$1" tso off gso off gro off tx off rx off rxvlan off txvlan off >/dev/null 2>&1 || true; }
isp() { ip netns exec "$ISP_NS" "$@"; }
net() { ip netns exec "$NET_NS" "$@"; }
m() { metric "$1" || true; }

# wait_metric SECONDS SERIES OP VALUE: polls until the series (summed, see metric) is == or >=
# VALUE.
wait_metric() {
    local secs=$1 series=$2 op=$3 want=$4 got
    for ((i = 0; i < secs * 5; i++)); do
        got=$(m "$series")
        case $op in
            "==") ((got == want)) && return 0 ;;
            ">=") ((got >= want)) && return 0 ;;
            *) fail "wait_metric: no operator $op" ;;
        esac
        sleep 0.2
    done
    return 1
}

# session_up_with SECONDS ID: the gateway's session is up, with session id ID.
session_up_with() {
    local secs=$1 id=$2
    for ((i = 0; i < secs * 5; i++)); do
        if [[ $(m "gateway_pppoe_session_up{$IF}") == 1 && $(m "gateway_pppoe_session_id{$IF}") == "$id" ]]; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# start_isp SESSION_ID: the access concentrator, its log appended to $ISP_LOG.
start_isp() {
    local lines
    lines=$(wc -l <"$ISP_LOG" 2>/dev/null || echo 0)
    ip netns exec "$ISP_NS" "$ISP_PY" "$ROOT/tests/e2e/pppoe_isp.py" --iface eth0 --ac-name gwppp-isp \
        --user gateway --password s3cret --auth chap --local 100.64.0.1 --client 100.64.0.2 \
        --dns 198.51.100.53 198.51.100.54 --mru 1492 --tun ppp-isp --log "$ISP_LOG" \
        --session-id "$1" >>"$WORK/isp.out" 2>&1 &
    ISP_PID=$!
    disown "$ISP_PID" # no "Killed" from the shell when check 6 kills it
    for _ in $(seq 1 50); do
        tail -n +"$((lines + 1))" "$ISP_LOG" 2>/dev/null | grep -q "isp listening" && return 0
        kill -0 "$ISP_PID" 2>/dev/null || pfail "the ISP exited during start: $(tail -n 5 "$WORK/isp.out")"
        sleep 0.2
    done
    pfail "the ISP did not start within 10 s: $(tail -n 5 "$WORK/isp.out")"
}

# stop_isp SIGNAL: signals the ISP and waits for it to exit.
stop_isp() {
    kill "-$1" "$ISP_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$ISP_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$ISP_PID" 2>/dev/null && pfail "the ISP did not exit within 5 s of SIG$1"
    ISP_PID=
}

# iperf_bytes: the bytes the receiver of the last iperf3_run counted.
iperf_bytes() {
    python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"]))' "$WORK/client.json"
}

"$ROOT/scripts/lab.sh" up >/dev/null
# The trunk: the gateway's WAN end, and OVS's.
ip link del gwppp-gw 2>/dev/null || true
ip link add gwppp-gw type veth peer name gwppp-trunk
for end in gwppp-gw gwppp-trunk; do
    sysctl -qw "net.ipv6.conf.$end.disable_ipv6=1"
    quiet_offloads "$end"
    ip link set "$end" up
done
gw_mac=$(cat /sys/class/net/gwppp-gw/address)
# The ISP, on an access port of VLAN 7, and the internet host behind it.
for ns in "$ISP_NS" "$NET_NS"; do
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip -n "$ns" link set lo up
done
ip link del gwppp-isp0 2>/dev/null || true
ip link add gwppp-isp0 type veth peer name eth0 netns "$ISP_NS"
sysctl -qw net.ipv6.conf.gwppp-isp0.disable_ipv6=1
quiet_offloads gwppp-isp0
ip link set gwppp-isp0 up
ip -n "$ISP_NS" link add net0 type veth peer name eth0 netns "$NET_NS"
isp ethtool -K eth0 tso off gso off gro off tx off rx off rxvlan off txvlan off >/dev/null 2>&1 || true
isp ethtool -K net0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
net ethtool -K eth0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
ip -n "$ISP_NS" link set eth0 up
ip -n "$ISP_NS" addr add 203.0.113.1/24 dev net0
ip -n "$ISP_NS" link set net0 up
isp sysctl -qw net.ipv4.ip_forward=1
# A persistent TUN device, so that its addresses and routes outlive the ISP's restarts: the
# session's far end 100.64.0.1, and 100.64.0.2/32 (the client) through it.
ip -n "$ISP_NS" tuntap add dev ppp-isp mode tun
ip -n "$ISP_NS" link set ppp-isp mtu 1492 up
ip -n "$ISP_NS" addr add 100.64.0.1 peer 100.64.0.2/32 dev ppp-isp
ip -n "$NET_NS" addr add 203.0.113.10/24 dev eth0
ip -n "$NET_NS" link set eth0 up
ip -n "$NET_NS" route add default via 203.0.113.1
ip -n "$NET_NS" route add 100.64.0.0/24 via 203.0.113.1

start_ovs
vsctl add-br gwpppbr -- set bridge gwpppbr datapath_type=netdev
vsctl add-port gwpppbr gwppp-trunk -- set port gwppp-trunk vlan_mode=trunk trunks=7
vsctl add-port gwpppbr gwppp-isp0 -- set port gwppp-isp0 tag=7
ip link set gwpppbr up

python3 - "$ROOT/configs/lab.toml" "$WORK/gateway.toml" "$WORK/run/ctl.sock" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = text.replace('device = "net_af_packet1,iface=gwl-wan,', 'device = "net_af_packet1,iface=gwppp-gw,')
text = text.replace('listen = "127.0.0.1:9469"', 'listen = "127.0.0.1:19141"')
text = text.replace('file_prefix = "gateway-lab"', 'file_prefix = "gateway-e2e"')
isp = """[[interfaces]]
name = "isp"
parent = "wan"
vlan = 7
address = "pppoe"
zone = "wan"
[interfaces.pppoe]
username = "gateway"
password = "s3cret"
lcp_echo_interval_secs = 2
lcp_echo_failures = 3
"""
# The session supplies the default route: the static one goes, the PPPoE interface in its place.
text, n = re.subn(r'\[\[routes\]\]\n(?:#[^\n]*\n)*destination = "0\.0\.0\.0/0"\nvia = "10\.0\.0\.2"\n', isp, text, count=1)
assert n == 1, "no default route in lab.toml"
text, n = re.subn(r'masquerade = \["wan"\]', 'masquerade = ["isp"]', text, count=1)
assert n == 1
text, n = re.subn(r'(\[\[nat\.port_forwards\]\]\n(?:#[^\n]*\n)*)interface = "wan"\nprotocol = "tcp"\nport = 5201\n',
                  r'\1interface = "isp"\nprotocol = "tcp"\nport = 5201\n', text, count=1)
assert n == 1
assert "gwppp-gw" in text and "[[routes]]" not in text
text += '\n[ctl]\nsocket = "%s"\n' % sys.argv[3]
open(sys.argv[2], "w").write(text)
PY
with_e2e_workers "$WORK/gateway.toml"
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }

: >"$ISP_LOG"
start_isp 4660
start_gateway "$WORK/gateway.toml"

# 1. The session comes up: discovery, LCP, CHAP, IPCP.
wait_metric 20 "gateway_pppoe_session_up{$IF}" == 1 ||
    pfail "no PPPoE session within 20 s of the start (state: $(curl -sf "$METRICS" | grep '^gateway_pppoe_state' | awk '$NF == 1' | tr '\n' ' '))"
[[ $(m "gateway_pppoe_session_id{$IF}") == 4660 ]] ||
    pfail "the session is up with id $(m "gateway_pppoe_session_id{$IF}"), the ISP granted 4660"
[[ $(m "gateway_pppoe_state{$IF,state=\"up\"}") == 1 ]] || pfail "session_up is 1 but state up is not"
(($(m "gateway_pppoe_sessions_total{$IF}") >= 1)) || pfail "sessions_total did not count the session"
grep -q "chap success: user gateway" "$ISP_LOG" || pfail "the ISP logged no CHAP success for user gateway"
up_line=$(grep "session up 4660 client" "$ISP_LOG" | tail -n 1)
[[ $up_line == *"address 100.64.0.2"* ]] || pfail "the ISP logged no session 4660 up with 100.64.0.2"
[[ $up_line == *"client $gw_mac "* ]] || echo "note: the ISP's client is not gwppp-gw's $gw_mac: $up_line"
interfaces=$(ctl show interfaces 2>&1 || true)
if grep -q "100.64.0.2" <<<"$interfaces"; then
    shown="ctl shows 100.64.0.2"
else
    shown="ctl show interfaces does not show 100.64.0.2"
    echo "note: $shown: $interfaces"
fi
pass "the PPPoE session is up on VLAN 7: session 4660, CHAP, IPCP gave 100.64.0.2, mtu $(m "gateway_pppoe_mtu{$IF}") ($shown)"

# 2. Ping through the session, masqueraded to the session's address.
ok=
for _ in 1 2 3; do
    lan ping -c 2 -W 2 203.0.113.10 >/dev/null && { ok=1; break; }
done
[[ -n $ok ]] || pfail "the LAN host cannot ping 203.0.113.10 through the session"
grep -q "relay icmp client->net 100.64.0.2 > 203.0.113.10 echo-request" "$ISP_LOG" ||
    pfail "the ISP relayed no echo request from 100.64.0.2: $(grep 'relay icmp' "$ISP_LOG" | tail -n 3)"
grep -q "relay icmp client->net 192.168." "$ISP_LOG" && pfail "a LAN address reached the ISP unmasqueraded"
pass "the LAN host pings 203.0.113.10 through the session, masqueraded to 100.64.0.2"

# 3 and 4. TCP both ways; the MSS on the SYNs that leave by the session at most 1452 (1492 - 40),
# while the LAN host's own SYN says 1460.
rm -f "$WORK/lan-syn.txt" "$WORK/sniffer-ready"
lan timeout 30 "$ISP_PY" -c '
import sys
from scapy.all import sniff
from scapy.layers.inet import IP, TCP
out = open(sys.argv[1], "w")
def show(p):
    mss = dict(o for o in p[TCP].options if isinstance(o, tuple) and len(o) == 2).get("MSS")
    out.write("%s:%d > %s:%d mss %s\n" % (p[IP].src, p[TCP].sport, p[IP].dst, p[TCP].dport, mss))
    out.flush()
sniff(iface="eth0", count=2, timeout=25, prn=show, store=False,
      lfilter=lambda p: TCP in p and p[TCP].flags == "S" and p[IP].dst == "203.0.113.10",
      started_callback=lambda: open(sys.argv[2], "w").close())
' "$WORK/lan-syn.txt" "$WORK/sniffer-ready" &
SNIFFER=$!
for _ in $(seq 1 50); do
    [[ -f $WORK/sniffer-ready ]] && break
    sleep 0.2
done
[[ -f $WORK/sniffer-ready ]] || pfail "the SYN sniffer on the LAN host did not start"
read -r peer gbps < <(iperf3_run "$NET_NS" gwlab-lan 203.0.113.10 -t 2) || pfail "iperf3 from the LAN host to 203.0.113.10"
out_bytes=$(iperf_bytes)
[[ $peer == 100.64.0.2 ]] || pfail "203.0.113.10 saw the LAN host's TCP from $peer, not the masquerade 100.64.0.2"
((out_bytes > 100000)) || pfail "LAN -> internet TCP moved only $out_bytes bytes"
wait "$SNIFFER" 2>/dev/null || true
SNIFFER=
read -r peer gbps_in < <(iperf3_run gwlab-lan "$NET_NS" 100.64.0.2 -t 2) || pfail "iperf3 from the internet host to 100.64.0.2:5201 (the port forward)"
in_bytes=$(iperf_bytes)
[[ $peer == 203.0.113.10 ]] || pfail "the LAN host saw the forwarded TCP from $peer, not 203.0.113.10"
((in_bytes > 100000)) || pfail "internet -> LAN TCP moved only $in_bytes bytes"
pass "TCP through the session: LAN -> internet $out_bytes bytes ($gbps Gbit/s) from 100.64.0.2, internet -> LAN by the port forward $in_bytes bytes ($gbps_in Gbit/s)"

lan_mss=$(awk '{ print $NF }' "$WORK/lan-syn.txt" 2>/dev/null | sort -u | tr '\n' ' ')
[[ $lan_mss == "1460 " ]] || pfail "the LAN host's own SYNs carried MSS '$lan_mss', expected 1460: $(cat "$WORK/lan-syn.txt" 2>/dev/null)"
syns=$(grep -E 'relay syn client->net 100\.64\.0\.2:[0-9]+ > 203\.0\.113\.10:5201 flags S mss' "$ISP_LOG" | awk '{ print $NF }' | tr '\n' ' ')
[[ -n $syns ]] || pfail "the ISP relayed no SYN from 100.64.0.2 to 203.0.113.10:5201"
synacks=$(grep -E 'relay syn client->net 100\.64\.0\.2:5201 > 203\.0\.113\.10:[0-9]+ flags SA mss' "$ISP_LOG" | awk '{ print $NF }' | tr '\n' ' ')
[[ -n $synacks ]] || pfail "the ISP relayed no SYN-ACK from the forwarded 100.64.0.2:5201"
for mss in $syns $synacks; do
    if ! [[ $mss =~ ^[0-9]+$ ]] || ((mss > 1452)); then
        pfail "a segment left by the session with MSS $mss (SYNs: $syns, SYN-ACKs: $synacks), above 1452"
    fi
done
pass "MSS clamped to the 1492-byte session: the LAN host's SYNs say 1460, the ISP received SYNs with ${syns% } and SYN-ACKs with ${synacks% }"

# 5. A PADT from the ISP, which keeps serving: the gateway rediscovers (the ISP's next id,
# 4661). Then the ISP stops (SIGTERM: a PADT) and a new one grants 4242.
padt_before=$(m "gateway_pppoe_session_ends_total{$IF,reason=\"padt\"}")
sessions_before=$(m "gateway_pppoe_sessions_total{$IF}")
kill -USR1 "$ISP_PID"
wait_metric 10 "gateway_pppoe_session_ends_total{$IF,reason=\"padt\"}" '>=' $((padt_before + 1)) ||
    pfail "the ISP's PADT (SIGUSR1) was not counted as a session end with reason padt within 10 s"
session_up_with 30 4661 || pfail "no new session (id 4661) within 30 s of the ISP's PADT"
stop_isp TERM
grep -q "sigterm: exiting" "$ISP_LOG" || pfail "the ISP did not exit on SIGTERM"
start_isp 4242
session_up_with 30 4242 || pfail "no session with the restarted ISP's id 4242 within 30 s"
padts=$(m "gateway_pppoe_session_ends_total{$IF,reason=\"padt\"}")
((padts >= padt_before + 2)) || pfail "two PADTs (SIGUSR1, SIGTERM), $((padts - padt_before)) counted as session ends (padt)"
sessions=$(m "gateway_pppoe_sessions_total{$IF}")
((sessions >= sessions_before + 2)) || pfail "sessions_total went from $sessions_before to $sessions over two new sessions"
ok=
for _ in 1 2 3; do
    lan ping -c 2 -W 2 203.0.113.10 >/dev/null && { ok=1; break; }
done
[[ -n $ok ]] || pfail "the LAN host cannot ping 203.0.113.10 in the new session 4242"
read -r peer gbps < <(iperf3_run "$NET_NS" gwlab-lan 203.0.113.10 -t 2) || pfail "iperf3 from the LAN host in the new session"
[[ $peer == 100.64.0.2 ]] || pfail "in the new session 203.0.113.10 saw the LAN host's TCP from $peer"
pass "PADTs end the session ($((padts - padt_before)) counted): rediscovered as 4661, then 4242 with the restarted ISP; ping and TCP ($(iperf_bytes) bytes) work again"

# 6. The ISP dies without a PADT: LCP echoes go unanswered (2 s x 3), the session ends.
echo_before=$(m "gateway_pppoe_session_ends_total{$IF,reason=\"echo_timeout\"}")
stop_isp KILL
started=$SECONDS
wait_metric 15 "gateway_pppoe_session_up{$IF}" == 0 || pfail "the session is still up 15 s after the ISP died"
wait_metric 5 "gateway_pppoe_session_ends_total{$IF,reason=\"echo_timeout\"}" '>=' $((echo_before + 1)) ||
    pfail "the session went down without an echo_timeout counted (ends: $(curl -sf "$METRICS" | grep '^gateway_pppoe_session_ends_total' | tr '\n' ' '))"
down_after=$((SECONDS - started))
lan ping -c 2 -W 1 203.0.113.10 >/dev/null && pfail "the LAN host reached 203.0.113.10 with the session down"
dropped_down=$(m 'gateway_dropped_packets_total{reason="pppoe_down"')
start_isp 4343
session_up_with 30 4343 || pfail "no session with the ISP restarted after its death (id 4343) within 30 s"
ok=
for _ in 1 2 3; do
    lan ping -c 2 -W 2 203.0.113.10 >/dev/null && { ok=1; break; }
done
[[ -n $ok ]] || pfail "the LAN host cannot ping 203.0.113.10 in session 4343"
pass "a dead ISP is noticed by LCP echo within ${down_after} s (echo_timeout counted, $dropped_down pppoe_down drops); the restarted ISP's session 4343 carries ping again"

# 7. Reloads: one that leaves the PPPoE settings alone keeps the session; new credentials
# apply only by reconnecting (a wrong password: the session ends as stopped and CHAP fails;
# the right one again: a new session).
reloads() { m 'gateway_config_reloads_total{result="success"}'; }
reload_with() {
    local before
    before=$(reloads)
    sed -i "$1" "$WORK/gateway.toml"
    kill -HUP "$GATEWAY_PID"
    wait_metric 10 'gateway_config_reloads_total{result="success"}' '>=' $((before + 1)) ||
        pfail "the reload ($1) was not applied within 10 s"
}
sessions_before=$(m "gateway_pppoe_sessions_total{$IF}")
reload_with 's/^errors_per_sec = .*/errors_per_sec = 1001/'
sleep 1
[[ $(m "gateway_pppoe_session_up{$IF}") == 1 && $(m "gateway_pppoe_session_id{$IF}") == 4343 &&
    $(m "gateway_pppoe_sessions_total{$IF}") == "$sessions_before" ]] ||
    pfail "a reload that changed no PPPoE setting touched the session (id $(m "gateway_pppoe_session_id{$IF}"), sessions $sessions_before -> $(m "gateway_pppoe_sessions_total{$IF}"))"
stopped_before=$(m "gateway_pppoe_session_ends_total{$IF,reason=\"stopped\"}")
auth_before=$(m "gateway_pppoe_session_ends_total{$IF,reason=\"auth_failed\"}")
reload_with 's/^password = "s3cret"/password = "wrong"/'
wait_metric 10 "gateway_pppoe_session_ends_total{$IF,reason=\"auth_failed\"}" '>=' $((auth_before + 1)) ||
    pfail "with a wrong password after the reload, no auth_failed end was counted within 10 s"
(($(m "gateway_pppoe_session_ends_total{$IF,reason=\"stopped\"}") >= stopped_before + 1)) ||
    pfail "the reload with new credentials did not end the old session (stopped not counted)"
[[ $(m "gateway_pppoe_session_up{$IF}") == 0 ]] || pfail "the session is up with a wrong password"
grep -q "chap failure" "$ISP_LOG" || echo "note: the ISP logged no chap failure: $(grep -i chap "$ISP_LOG" | tail -n 2)"
reload_with 's/^password = "wrong"/password = "s3cret"/'
wait_metric 20 "gateway_pppoe_session_up{$IF}" == 1 || pfail "no session within 20 s of the reload that restored the password"
(($(m "gateway_pppoe_sessions_total{$IF}") == sessions_before + 1)) ||
    pfail "sessions went from $sessions_before to $(m "gateway_pppoe_sessions_total{$IF}") over one reconnect"
lan ping -c 2 -W 2 203.0.113.10 >/dev/null || pfail "the LAN host cannot ping 203.0.113.10 after the credentials came back"
pass "reloads: other settings keep session 4343; a new password reconnects (CHAP refused it), the right one again brings session $(m "gateway_pppoe_session_id{$IF}")"

# 8. A LAN host floods broadcast ARP (requests for the gateway from made-up senders all over the
# subnet, each with a MAC of its own) and IPv6 Neighbor Solicitations, as fast as a raw
# socket sends them, for longer than LCP's echo tolerance (2 s x 3): the session stays up
# (the same id: no echo lost to the control ring) and another host on the LAN (the
# namespace's own 192.168.10.2) loses no ping through the session.
rx_lan() { m 'gateway_interface_packets_total{direction="rx",interface="lan"}'; }
session_id=$(m "gateway_pppoe_session_id{$IF}")
sessions_before=$(m "gateway_pppoe_sessions_total{$IF}")
rx_before=$(rx_lan)
shed() { m 'gateway_dropped_packets_total{reason="slow_path_policed"'; }
shed_before=$(shed)
lan "$ISP_PY" - <<'PY' >"$WORK/flood.out" 2>&1 &
import random, socket, time
from scapy.all import ARP, Ether, IPv6, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, raw
random.seed(44)
frames = []
for i in range(4000):
    mac = "02:%02x:%02x:%02x:%02x:%02x" % tuple(random.randrange(256) for _ in range(5))
    if i % 2:
        frames.append(raw(Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") /
                          ARP(op=1, hwsrc=mac, psrc="192.168.10.%d" % random.randrange(100, 250),
                              pdst="192.168.10.1")))
    else:
        target = "fe80::%x" % random.randrange(1, 1 << 16)
        frames.append(raw(Ether(src=mac, dst="33:33:ff:00:00:01") /
                          IPv6(src="fe80::%x" % random.randrange(1, 1 << 16), dst="ff02::1:ff00:1") /
                          ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=mac)))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
sent, end = 0, time.time() + 8
while time.time() < end:
    for frame in frames:
        try:
            s.send(frame)
            sent += 1
        except OSError:  # the veth's queue is full for a moment
            pass
print(sent)
PY
FLOOD=$!
lan ping -c 40 -i 0.2 -W 2 203.0.113.10 >"$WORK/flood-ping.txt" 2>&1 || true
wait "$FLOOD" || pfail "the flood script failed: $(tail -n 3 "$WORK/flood.out")"
flooded=$(tail -n 1 "$WORK/flood.out")
received=$(($(rx_lan) - rx_before))
((received >= flooded / 2)) ||
    pfail "the gateway received $received frames on the LAN of the $flooded the flood sent: not a flood test"
grep -q ' 0% packet loss' "$WORK/flood-ping.txt" ||
    pfail "the other LAN host lost pings during the flood: $(grep 'packet loss' "$WORK/flood-ping.txt")"
[[ $(m "gateway_pppoe_session_up{$IF}") == 1 && $(m "gateway_pppoe_session_id{$IF}") == "$session_id" &&
    $(m "gateway_pppoe_sessions_total{$IF}") == "$sessions_before" ]] ||
    pfail "the session did not survive the ARP/NS flood (id $session_id -> $(m "gateway_pppoe_session_id{$IF}"), sessions $sessions_before -> $(m "gateway_pppoe_sessions_total{$IF}"))"
pass "an 8 s ARP/NS flood from the LAN ($flooded frames sent, $received received, $(($(shed) - shed_before)) shed as slow_path_policed): session $session_id stays up, the other LAN host's 40 pings all answered"

# 9.
assert_no_conntrack_invalid
stop_gateway
