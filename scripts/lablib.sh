# Shared by the demo, the lab benchmark and the end-to-end tests. Source it; it needs $WORK
# (a scratch directory) and, for `metric`, $METRICS (the /metrics URL).

# iperf3_run SERVER_NS CLIENT_NS ADDRESS [iperf3 client args...]: one TCP run (3 s unless -t
# is given). Prints the client address the server saw and the receiver's Gbit/s.
iperf3_run() {
    local server_ns=$1 client_ns=$2 address=$3
    shift 3
    local args=("$@")
    [[ " ${args[*]} " == *" -t "* ]] || args+=(-t 3)
    local seconds=3 i
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
        if [[ ${args[i]} == -t ]]; then seconds=${args[i + 1]%.*}; fi
    done
    # Bounded like the client: a server whose client never came must not hold the caller.
    ip netns exec "$server_ns" timeout $((seconds + 60)) iperf3 -s -1 -J >"$WORK/server.json" 2>&1 &
    local server=$!
    # Until it listens (a slow host takes longer than any fixed sleep would assume).
    poll_until 10 listening "$server_ns" 5201 ||
        { echo "iperf3 server in $server_ns did not listen within 10 s: $(tail -c 300 "$WORK/server.json")" >&2; kill "$server" 2>/dev/null; return 1; }
    if ! ip netns exec "$client_ns" timeout $((seconds + 60)) iperf3 -c "$address" -J "${args[@]}" >"$WORK/client.json"; then
        kill "$server" 2>/dev/null
        echo "iperf3 $client_ns -> $address ${args[*]} failed: $(tail -c 300 "$WORK/client.json")" >&2
        return 1
    fi
    wait "$server" || true
    python3 - "$WORK/server.json" "$WORK/client.json" <<'PY'
import json, sys
server = json.load(open(sys.argv[1]))
client = json.load(open(sys.argv[2]))
peer = server["start"]["connected"][0]["remote_host"]
gbps = client["end"]["sum_received"]["bits_per_second"] / 1e9
print(peer, "%.2f" % gbps)
PY
}

# listening NS PORT [tcp|udp]: whether a socket listens on PORT (TCP unless told) in namespace
# NS. With poll_until, the wait for a server to start.
listening() {
    local flags=-Hltn
    [[ ${3:-tcp} == udp ]] && flags=-Hlun
    ip netns exec "$1" ss "$flags" "sport = :$2" | grep -q .
}

# metric PREFIX: the sum of every series whose line starts with PREFIX.
metric() {
    curl -sf --max-time 15 "$METRICS" | awk -v m="$1" 'index($0, m) == 1 { sum += $NF } END { printf "%d\n", sum }'
}

# metric_max PREFIX: the largest of the series whose line starts with PREFIX (one worker's
# figure, where `metric` sums the workers').
metric_max() {
    curl -sf --max-time 15 "$METRICS" | awk -v m="$1" 'index($0, m) == 1 && $NF > max { max = $NF } END { printf "%d\n", max }'
}

# poll_until SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds (status 0) or
# SECONDS have passed (status 1). For waits on a condition, instead of a sleep that assumes a
# fast host.
poll_until() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# udp_echo_server NS PORT: a UDP echo server in namespace NS, in the background; prints its pid.
udp_echo_server() {
    ip netns exec "$1" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(data, peer)
' "$2" >/dev/null 2>&1 &
    echo $!
}

# udp_exchange NS ADDRESS PORT COUNT: COUNT request/answer exchanges from NS, each from a new
# socket (a new source port, so a new flow); prints how many were answered within a second.
udp_exchange() {
    ip netns exec "$1" python3 -c '
import socket, sys
address, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
answered = 0
for i in range(count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    message = b"exchange %d" % i
    s.sendto(message, (address, port))
    try:
        data, _ = s.recvfrom(2048)
        answered += data == message
    except socket.timeout:
        pass
    s.close()
print(answered)
' "$2" "$3" "$4"
}
