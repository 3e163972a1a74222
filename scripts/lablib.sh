# Shared by the demo, the lab benchmark and the end-to-end tests. Source it; it needs $WORK
# (a scratch directory) and, for `metric`, $METRICS (the /metrics URL).

# iperf3_run SERVER_NS CLIENT_NS ADDRESS [iperf3 client args...]: one TCP run (3 s unless -t
# is given). Prints the client address the server saw and the receiver's Gbit/s.
iperf3_run() {
    local server_ns=$1 client_ns=$2 address=$3
    shift 3
    local args=("$@")
    [[ " ${args[*]} " == *" -t "* ]] || args+=(-t 3)
    ip netns exec "$server_ns" iperf3 -s -1 -J >"$WORK/server.json" 2>&1 &
    local server=$!
    sleep 0.5
    if ! ip netns exec "$client_ns" timeout 60 iperf3 -c "$address" -J "${args[@]}" >"$WORK/client.json"; then
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

# metric PREFIX: the sum of every series whose line starts with PREFIX.
metric() {
    curl -sf "$METRICS" | awk -v m="$1" 'index($0, m) == 1 { sum += $NF } END { printf "%d\n", sum }'
}
