#!/usr/bin/env bash
# The SYN proxy: a flood of spoofed SYNs at a port forward fills the worker's half-open table
# (half_open = 8 here), after which the gateway answers SYNs toward forwards itself with SYN
# cookies. Real clients from the WAN then still get through: iperf3 both ways (the client
# speaks first) and a server that speaks first (its banner needs the ACK the proxy sends it),
# each connection opened by a returned cookie and spliced.
#
# Every flow toward a forward is owned by the worker that owns the forward's LAN host, so on
# two workers the flood fills that one worker's table: the test reads the owner's figures
# (the largest worker's), never the sum, and before each connection that must meet the proxy
# it waits until the owner's table is full again (a proxied connection frees the place of
# the half-open flow it replaced, which the flood then takes back).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19131 >"$WORK/gateway.toml"
grep -q '^# half_open = ' "$WORK/gateway.toml" || fail "configs/lab.toml has no '# half_open = ' line to set"
sed -i 's/^# half_open = .*/half_open = 8/' "$WORK/gateway.toml"
cat >>"$WORK/gateway.toml" <<'EOF'

[[nat.port_forwards]]
# A server that speaks first, for the SYN proxy test.
interface = "wan"
protocol = "tcp"
port = 2222
to = "192.168.10.2"
to_port = 2222
EOF
start_gateway "$WORK/gateway.toml"
METRICS=http://127.0.0.1:19131/metrics

# The LAN host answers each spoofed SYN once: the SYN-ACKs it would send again for the flows a
# proxied connection evicts from the half-open table would be dropped as conntrack_invalid,
# which this test requires none of.
lan sysctl -qw net.ipv4.tcp_synack_retries=0
# The server that speaks first: a banner, then it echoes one line back.
lan timeout 120 python3 -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 2222))
s.listen(64)
while True:
    c, _ = s.accept()
    c.sendall(b"banner from the LAN server\n")
    c.sendall(c.recv(100))
    c.close()
' &
poll_until 10 listening gwlab-lan 2222 || fail "the LAN server did not listen on 2222"

# Spoofed SYNs at the forward from random sources that never answer: the LAN server answers
# each, so every flow stays half-open (240 s). Kept up, slowly, for the whole test.
flood() {
    # Debian's python, which has scapy (the python3 on PATH may be a shim without it).
    wan timeout "$1" /usr/bin/python3 -c '
import random, sys, time
from scapy.all import IP, TCP, conf, send
conf.verb = 0
count, gap = int(sys.argv[1]), float(sys.argv[2])
for _ in range(count):
    src = "11.%d.%d.%d" % (random.randrange(256), random.randrange(256), random.randrange(1, 255))
    send(IP(src=src, dst="10.0.0.1") / TCP(sport=random.randrange(1024, 65535), dport=2222, flags="S", seq=random.getrandbits(32)))
    time.sleep(gap)
' "$2" "$3"
}
flood 60 40 0
half_open=$(metric_max 'gateway_conntrack_half_open')
(( half_open >= 8 )) || fail "the flood left $half_open half-open flows on the forward's owner, not the 8 of the limit"
sent=$(metric 'gateway_worker_syn_cookies_sent_total')
(( sent >= 1 )) || fail "no SYN answered with a cookie after the half-open table filled"
pass "40 spoofed SYNs filled the half-open table ($half_open of 8) and the rest were answered with cookies ($sent)"
flood 100 2000 0.05 &
FLOOD=$!
owner_table_full() { (( $(metric_max 'gateway_conntrack_half_open') >= 8 )); }
await_full_table() {
    poll_until 30 owner_table_full ||
        fail "the flood did not fill the owner's half-open table again within 30 s ($(metric_max 'gateway_conntrack_half_open') of 8)"
}
await_full_table

reply=$(wan timeout 10 bash -c 'exec 3<>/dev/tcp/10.0.0.1/2222; read -r banner <&3; echo "hello through the proxy" >&3; read -r echoed <&3; echo "$banner|$echoed"') ||
    fail "the server that speaks first was not reached through the SYN proxy"
[[ $reply == "banner from the LAN server|hello through the proxy" ]] || fail "through the SYN proxy: '$reply'"
accepted=$(metric 'gateway_worker_syn_cookies_accepted_total')
(( accepted == 1 )) || fail "the banner connection was not opened by a returned cookie ($accepted)"
pass "a server that speaks first, through the SYN proxy: its banner, and the line echoed back"

# iperf3's first connection (control) meets a full half-open table and goes through the
# proxy; its data connection may find the place the first one left (half-open no longer).
for direction in "" -R; do
    await_full_table
    before=$(metric 'gateway_worker_syn_cookies_accepted_total')
    read -r _ gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -t 2 $direction) ||
        fail "iperf3 $direction through the SYN proxy"
    after=$(metric 'gateway_worker_syn_cookies_accepted_total')
    (( after > before )) || fail "iperf3 $direction: no connection was opened by a returned cookie"
    pass "iperf3 $direction through the forward under the flood, by the proxy: $gbps Gbit/s"
done

accepted=$(metric 'gateway_worker_syn_cookies_accepted_total')
lost=$(metric 'gateway_worker_syn_proxy_updates_lost_total')
(( lost == 0 )) || fail "$lost window updates to proxied clients were lost"
pending=$(metric 'gateway_dropped_packets_total{reason="syn_proxy_pending"')
sent=$(metric 'gateway_worker_syn_cookies_sent_total')
pass "$accepted connections opened by a returned cookie, of $sent cookies sent; $pending client segments waited for the server"
assert_no_conntrack_invalid
kill "$FLOOD" 2>/dev/null || true
wait "$FLOOD" 2>/dev/null || true

stop_gateway
pass "gateway stops cleanly"
