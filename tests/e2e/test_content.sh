#!/usr/bin/env bash
# Keyword block and parental control against real clients and servers: a DNS query, a TLS
# handshake (openssl s_client -servername against openssl s_server) and an HTTP request to a
# blocked name are refused while others pass; a device outside its allowed hours is blocked,
# and a reload that opens its hours lets it through.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
SERVERS=()
stop_servers() { for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap 'stop_servers; cleanup' EXIT

"$ROOT/scripts/lab.sh" up >/dev/null

# Servers on the WAN host: DNS answering every query (NOERROR), HTTPS, HTTP.
cat >"$WORK/dns.py" <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 53))
while True:
    query, peer = s.recvfrom(512)
    # Same id and question, QR=1 RD RA, NOERROR, no answers: enough to tell it from NXDOMAIN.
    s.sendto(query[:2] + b"\x81\x80" + query[4:6] + b"\x00\x00\x00\x00\x00\x00" + query[12:], peer)
PY
wan python3 "$WORK/dns.py" >/dev/null 2>&1 &
SERVERS+=($!)
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
    -days 1 -subj "/CN=lab" >/dev/null 2>&1
wan openssl s_server -accept 443 -cert "$WORK/cert.pem" -key "$WORK/key.pem" -www >/dev/null 2>&1 &
SERVERS+=($!)
mkdir -p "$WORK/www" && echo "hello from the WAN" >"$WORK/www/index.html"
wan python3 -m http.server 80 --directory "$WORK/www" >/dev/null 2>&1 &
SERVERS+=($!)

echo "games.example" >"$WORK/games.txt"
write_config() { # allowed-hours line for 192.168.10.2
    lab_config 19110
    cat <<TOML

[keyword_block]
enabled = true
domains = ["blocked.example"]
keywords = ["casino"]

[parental_control]
enabled = true
utc_offset_minutes = 0
categories = { games = "$WORK/games.txt" }
[[parental_control.devices]]
name = "lan-host"
addresses = ["192.168.10.2"]
blocked_categories = ["games"]
allowed = [$1]
TOML
}
write_config "" >"$WORK/gateway.toml"
METRICS=http://127.0.0.1:19110/metrics
start_gateway "$WORK/gateway.toml"
sleep 1

# dns_rcode NAME: the RCODE of the answer to an A query for NAME, or "none".
dns_rcode() {
    lan python3 - "$1" <<'PY'
import socket, struct, sys
name = sys.argv[1]
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
query += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(query, ("10.0.0.2", 53))
try:
    answer = s.recv(512)
    print(answer[3] & 0x0F)
except socket.timeout:
    print("none")
PY
}
[[ $(dns_rcode www.blocked.example) == 3 ]] || fail "a blocked name's DNS query was not answered NXDOMAIN"
[[ $(dns_rcode www.allowed.example) == 0 ]] || fail "an allowed name's DNS query did not reach the server"
pass "DNS: www.blocked.example gets NXDOMAIN from the gateway, www.allowed.example reaches the server"
# Two queries from one socket (one 5-tuple, one flow): the second, for a blocked name, is
# checked too.
same_socket=$(lan python3 - <<'PY'
import socket, struct
def query(name):
    q = struct.pack(">HHHHHH", 0x4321, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return q + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
codes = []
for name in ("www.allowed.example", "www.blocked.example"):
    s.sendto(query(name), ("10.0.0.2", 53))
    try:
        codes.append(str(s.recv(512)[3] & 0x0F))
    except socket.timeout:
        codes.append("none")
print(" ".join(codes))
PY
)
[[ $same_socket == "0 3" ]] || fail "two queries on one socket: rcodes $same_socket, not 0 then 3"
pass "DNS: a blocked name asked on an established DNS flow gets NXDOMAIN too"

tls() { lan timeout 10 openssl s_client -connect 10.0.0.2:443 -servername "$1" </dev/null 2>&1; }
tls www.allowed.example | grep -q "BEGIN CERTIFICATE\|Server certificate" \
    || fail "a TLS handshake with an allowed name failed"
if tls www.blocked.example | grep -q "Server certificate"; then
    fail "a TLS handshake with a blocked SNI completed"
fi
pass "TLS: SNI www.blocked.example is reset, www.allowed.example completes the handshake"

http() { lan curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Host: $1" "http://10.0.0.2/${2:-}" || true; }
code=$(http www.allowed.example)
[[ $code == 200 ]] || fail "an allowed HTTP request failed ($code)"
[[ $(http casino.example) != 200 ]] || fail "an HTTP request with a blocked keyword in the Host passed"
[[ $(http www.allowed.example "casino/index.html") != 200 ]] || fail "a blocked keyword in the URL passed"
[[ $(http games.example) != 200 ]] || fail "the device's blocked category passed"
pass "HTTP: hosts and URLs with blocked keywords, domains or the device's category are reset"
blocked=$(metric 'gateway_dropped_packets_total{reason="content_blocked"')
(( blocked >= 5 )) || fail "content_blocked counted $blocked"
pass "content_blocked counted $blocked packets"

# Parental hours: a window that ends a minute before now (UTC) keeps the device offline.
read -r start end < <(python3 -c '
import time
m = (int(time.time()) // 60) % 1440
print("%02d:%02d %02d:%02d" % (((m + 5) % 1440) // 60, ((m + 5) % 1440) % 60, ((m + 1439) % 1440) // 60, ((m + 1439) % 1440) % 60))')
write_config "\"daily $start-$end\"" >"$WORK/next.toml"
mv "$WORK/next.toml" "$WORK/gateway.toml"
kill -HUP "$GATEWAY_PID"
sleep 1
if lan ping -c 2 -i 0.3 -W 1 10.0.0.2 >/dev/null 2>&1; then
    fail "the device reached the WAN outside its allowed hours"
fi
(( $(metric 'gateway_dropped_packets_total{reason="parental_blocked"') > 0 )) || fail "parental_blocked not counted"
pass "outside its allowed hours ($start-$end UTC) the device is blocked and counted"
write_config "\"daily 00:00-24:00\"" >"$WORK/next.toml"
mv "$WORK/next.toml" "$WORK/gateway.toml"
kill -HUP "$GATEWAY_PID"
sleep 1
expect_output "a reload that opens its hours lets the device through" " 0% packet loss" \
    lan ping -c 2 -i 0.3 -W 1 10.0.0.2
stop_gateway
