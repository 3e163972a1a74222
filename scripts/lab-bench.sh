#!/usr/bin/env bash
# make lab-bench (issue 7): the structure of a router review's summary table, in the namespace
# lab. iperf3 TCP (default settings) through the port forward 10.0.0.1:5201 -> 192.168.10.2:5201
# of configs/lab.toml: the server on the LAN host, the client on the WAN host.
#   downlink = WAN -> LAN (the client sends)      uplink = LAN -> WAN (iperf3 -R)
# One row per mode: Default, QoS, Traffic Meter, Keyword Block, Parental Control, All on. A mode
# whose config section the gateway does not know yet says "not implemented"; it is measured as
# soon as `gateway check-config` accepts its snippet (see FEATURE SNIPPETS below).
# Two references in the same topology and run:
#   Linux router    gwl-lan/gwl-wan moved into namespace gwlab-linux: ip_forward, offloads off as
#                   in the lab, nftables masquerade + DNAT tcp 5201 + a stateful forward chain.
#   dpdk-testpmd    --forward-mode=mac on the same two net_af_packet vdevs and the same lcores
#                   (0 main, 1 forwarding) as the gateway: the DPDK af_packet I/O floor. It does
#                   no NAT, so each host routes the other subnet via a fake next hop with a static
#                   ARP entry and the WAN host connects to 192.168.10.2 directly.
# Measuring a few percent on a small shared machine, where one 5 s TCP run varies by 10-20%:
#   - rounds: every mode runs once per round, in an order rotated each round, so drift in the
#     machine's load falls on all modes alike; each figure is the mean over the rounds;
#   - Default, which every ratio divides by, runs twice per round: its noise would otherwise
#     move all the ratios together;
#   - iperf3 (client and server) is pinned to the main lcore's CPU, away from the busy-polling
#     forwarding lcore, and its first second (slow start) is omitted;
#   - each ratio to Default is paired by round and comes with a bootstrap 90% interval over
#     the rounds, so the table says how precise it is. The verdict is whether each mode keeps
#     at least 95% of Default's throughput (ratio >= 0.95): a feature can only cost, and a
#     ratio above 1 is noise (or af_packet batching better behind a busier worker), not a
#     failure.
# Environment:
#   LAB_BENCH_SECONDS  measured seconds per iperf3 run, after a 1 s warm-up (default 5)
#   LAB_BENCH_RUNS     rounds of the gateway's modes (default 12)
#   LAB_BENCH_REF_RUNS runs of each reference (default 4)
#   LAB_BENCH_JSON     the JSON result (default target/lab-bench.json)
# Exits 1 if a measurement failed or a landed feature rejects its snippet (after the table).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lablib.sh"
LAB=$ROOT/scripts/lab.sh
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}
SECS=${LAB_BENCH_SECONDS:-5}
RUNS=${LAB_BENCH_RUNS:-12}
REF_RUNS=${LAB_BENCH_REF_RUNS:-4}
JSON_OUT=${LAB_BENCH_JSON:-$ROOT/target/lab-bench.json}
LINUX_NS=gwlab-linux
GATEWAY_PREFIX=gateway-lab-bench
TESTPMD_PREFIX=lab-bench-testpmd
METRICS_LISTEN=127.0.0.1:19107

[[ $EUID -eq 0 ]] || { echo "lab-bench: run as root (namespaces, DPDK)" >&2; exit 1; }
[[ -x $GATEWAY ]] || { echo "lab-bench: $GATEWAY missing; make build" >&2; exit 1; }
[[ $SECS =~ ^[1-9][0-9]*$ ]] || { echo "lab-bench: LAB_BENCH_SECONDS=$SECS is not a positive integer" >&2; exit 1; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "lab-bench: LAB_BENCH_RUNS=$RUNS is not a positive integer" >&2; exit 1; }
[[ $REF_RUNS =~ ^[1-9][0-9]*$ ]] || { echo "lab-bench: LAB_BENCH_REF_RUNS=$REF_RUNS is not a positive integer" >&2; exit 1; }
if ip netns list | grep -qE "^(gwlab-lan|gwlab-wan|$LINUX_NS)\b" || ip link show gwl-lan >/dev/null 2>&1; then
    echo "lab-bench: the lab is already up (a demo or test running?); stop it or run scripts/lab.sh down" >&2
    exit 1
fi

# Other work on the machine skews the numbers (2 cores are typical here): keep the load at start.
LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
WORK=$(mktemp -d /tmp/gateway-lab-bench.XXXXXX)
RESULTS=$WORK/results.tsv
: >"$RESULTS"
GATEWAY_PID=
TESTPMD_PID=

stop_pid() { # pid signal: signal, wait up to 10 s, then SIGKILL
    local pid=$1 sig=$2
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

stop_gateway() { [[ -z $GATEWAY_PID ]] || stop_pid "$GATEWAY_PID" TERM; GATEWAY_PID=; }
stop_testpmd() { [[ -z $TESTPMD_PID ]] || stop_pid "$TESTPMD_PID" INT; TESTPMD_PID=; }

remove_linux_router() {
    if ip netns list | grep -qE "^$LINUX_NS\b"; then
        ip netns pids "$LINUX_NS" | xargs -r kill 2>/dev/null || true
        # Deleting the namespace destroys the veth ends in it and the nftables tables with it.
        ip netns del "$LINUX_NS"
    fi
}

teardown() {
    stop_gateway
    stop_testpmd
    remove_linux_router
    "$LAB" down
    local prefix mnt
    for prefix in "$GATEWAY_PREFIX" "$TESTPMD_PREFIX"; do
        rm -rf "/var/run/dpdk/$prefix"
        for mnt in $(awk '$3 == "hugetlbfs" { print $2 }' /proc/mounts); do
            rm -f "$mnt/${prefix}map_"*
        done
    done
    rm -rf "$WORK"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- FEATURE SNIPPETS ---------------------------------------------------------------------------
# Best guesses written before the features exist. Each must match the feature's config schema
# when it lands (update it with the feature): until `gateway check-config` accepts the base config
# plus the snippet, the mode's row says "not implemented" (the gateway rejects unknown fields).
# Each enables the feature without limiting or blocking the benchmark's own flow, as a review
# does: QoS rates above what the lab carries, keywords and parental rules that iperf3 never hits.
feature_section() {
    case $1 in
        qos) echo qos ;;
        meter) echo traffic_meter ;;
        keyword) echo keyword_block ;;
        parental) echo parental_control ;;
    esac
}

feature_snippet() {
    case $1 in
        qos) cat <<'TOML' ;;
[qos]
# Policing of the WAN links with a priority class; rates far above what the lab carries, so
# the row measures the policer's cost, not its limit.
enabled = true
mode = "policer"
uplink_mbps = 100000
downlink_mbps = 100000
burst_ms = 20
[[qos.priority]]
protocol = "udp"
ports = "5060-5061"
TOML
        meter) cat <<'TOML' ;;
[traffic_meter]
# Per-LAN-host byte and packet counters on every packet; /hosts lists them.
enabled = true
capacity = 4096
top_hosts = 10
TOML
        keyword) cat <<'TOML' ;;
[keyword_block]
# Block DNS names, TLS SNI and HTTP Host/URL on these lists; the benchmark never hits them.
enabled = true
domains = ["blocked-by-lab-bench.example"]
keywords = ["casino"]
TOML
        parental) cat <<'TOML' ;;
[parental_control]
# Per-device hours; this device is not one of the lab hosts, so the benchmark flows pass.
enabled = true
[[parental_control.devices]]
name = "kids-tablet"
addresses = ["192.168.10.50"]
allowed = ["mon-fri 07:00-21:00", "sat,sun 08:00-22:00"]
TOML
    esac
}

# The base config: configs/lab.toml with this run's metrics port and DPDK file prefix.
BASE_CONFIG=$WORK/base.toml
sed -e "s/^listen = .*/listen = \"$METRICS_LISTEN\"/" -e "s/^file_prefix = .*/file_prefix = \"$GATEWAY_PREFIX\"/" \
    "$ROOT/configs/lab.toml" >"$BASE_CONFIG"

# mode_config MODE: the config file for a mode (default: the base; all: every snippet).
mode_config() {
    local mode=$1 cfg=$WORK/mode-$1.toml feature
    {
        cat "$BASE_CONFIG"
        case $mode in
            default) ;;
            all) for feature in qos meter keyword parental; do echo; feature_snippet "$feature"; done ;;
            *) echo; feature_snippet "$mode" ;;
        esac
    } >"$cfg"
    echo "$cfg"
}

# feature_available NAME: true once the gateway's config schema accepts NAME's snippet.
# Otherwise FEATURE_STATUS is "not implemented" (the section is unknown) or "snippet rejected"
# (the section exists but the snippet above no longer matches it), and FEATURE_ERROR says why.
FEATURE_STATUS=
FEATURE_ERROR=
feature_available() {
    local name=$1 cfg
    cfg=$(mode_config "$name")
    if FEATURE_ERROR=$("$GATEWAY" check-config "$cfg" 2>&1 >/dev/null); then
        FEATURE_STATUS=available
        return 0
    fi
    FEATURE_ERROR=$(head -n 1 <<<"$FEATURE_ERROR" | tr '\t' ' ')
    FEATURE_ERROR=${FEATURE_ERROR#"error: $cfg: "}
    if [[ $FEATURE_ERROR == *"unknown field \`$(feature_section "$name")\`"* ]]; then
        FEATURE_STATUS="not implemented"
    else
        FEATURE_STATUS="snippet rejected"
    fi
    return 1
}

# record KIND KEY LABEL STATUS ROUND DIRECTION GBPS PEER NOTE (one TSV row; "-" when empty).
# A measured mode or reference has one row per run; a mode that was not measured has one row.
record() {
    local out=() field
    for field in "$@"; do out+=("${field:--}"); done
    (IFS=$'\t'; echo "${out[*]}") >>"$RESULTS"
}

# iperf3 runs on the main lcore's CPU (0 in the lab config and for testpmd), never on the
# forwarding lcore, which polls without pause: -A pins the client and, through it, the server.
IPERF3_CPU=0

# measure_once KIND KEY LABEL ROUND SERVER_NS CLIENT_NS ADDRESS: one downlink and one uplink run.
measure_once() {
    local kind=$1 key=$2 label=$3 round=$4 server_ns=$5 client_ns=$6 address=$7
    local direction flag out peer gbps failed=0 summary=()
    for direction in down up; do
        flag=()
        [[ $direction == up ]] && flag=(-R)
        if out=$(iperf3_run "$server_ns" "$client_ns" "$address" -t "$SECS" -O 1 \
            -A "$IPERF3_CPU,$IPERF3_CPU" "${flag[@]}" 2>"$WORK/iperf3.err"); then
            read -r peer gbps <<<"$out"
            record "$kind" "$key" "$label" measured "$round" "$direction" "$gbps" "$peer" ""
            summary+=("$direction $gbps")
        else
            record "$kind" "$key" "$label" failed "$round" "$direction" "" "" \
                "${direction}link iperf3 failed: $(tail -n 1 "$WORK/iperf3.err" | tr '\t' ' ' | cut -c1-200)"
            summary+=("$direction FAILED")
            failed=1
        fi
    done
    echo "   round $round: ${summary[*]} Gbit/s"
    return "$failed"
}

start_gateway() { # config
    "$GATEWAY" run --config "$1" >"$WORK/gateway.log" 2>&1 &
    GATEWAY_PID=$!
    for _ in $(seq 1 100); do
        grep -q "gateway running" "$WORK/gateway.log" && return 0
        kill -0 "$GATEWAY_PID" 2>/dev/null || break
        sleep 0.2
    done
    echo "   gateway did not start:" >&2
    tail -n 15 "$WORK/gateway.log" >&2
    stop_gateway
    return 1
}

mac_of() { ip netns exec "$1" cat /sys/class/net/eth0/address; }

# --- the gateway, mode by mode ------------------------------------------------------------------
"$LAB" up >/dev/null
MODES=(default qos meter keyword parental all)
declare -A LABEL=([default]="Default" [qos]="QoS" [meter]="Traffic Meter" [keyword]="Keyword Block"
                  [parental]="Parental Control" [all]="All on")
declare -A AVAILABLE=()
MEASURED=()
for mode in "${MODES[@]}"; do
    label=${LABEL[$mode]}
    status=measured error=
    case $mode in
        default) ;;
        all)
            for feature in qos meter keyword parental; do
                [[ ${AVAILABLE[$feature]} == 1 ]] || { status="not implemented"; break; }
            done
            if [[ $status == measured ]] && ! "$GATEWAY" check-config "$(mode_config all)" >/dev/null 2>&1; then
                status="snippet rejected"
                error=$("$GATEWAY" check-config "$(mode_config all)" 2>&1 >/dev/null | head -n 1 | tr '\t' ' ' || true)
            fi
            ;;
        *)
            AVAILABLE[$mode]=0
            if feature_available "$mode"; then
                AVAILABLE[$mode]=1
            else
                status=$FEATURE_STATUS error=$FEATURE_ERROR
            fi
            ;;
    esac
    if [[ $status == measured ]]; then
        MEASURED+=("$mode")
    else
        echo "== $label: $status"
        record mode "$mode" "$label" "$status" "" "" "" "" "$error"
    fi
done

# A round: the measured modes with Default once more halfway. Round r starts from the r-th
# entry, so no mode always follows the same one.
SCHEDULE=("${MEASURED[@]}")
if ((${#MEASURED[@]} > 2)); then
    half=$((${#MEASURED[@]} / 2))
    SCHEDULE=("${MEASURED[@]:0:half}" default "${MEASURED[@]:half}")
fi
for round in $(seq 1 "$RUNS"); do
    count=${#SCHEDULE[@]}
    for i in $(seq 0 $((count - 1))); do
        mode=${SCHEDULE[$(((i + round - 1) % count))]}
        label=${LABEL[$mode]}
        echo "== round $round/$RUNS, $label: gateway with $(basename "$(mode_config "$mode")"), iperf3 ${SECS} s each way"
        if ! start_gateway "$(mode_config "$mode")"; then
            record mode "$mode" "$label" failed "$round" "" "" "" "gateway did not start"
            continue
        fi
        measure_once mode "$mode" "$label" "$round" gwlab-lan gwlab-wan 10.0.0.1 || true
        stop_gateway
    done
done

# --- reference: dpdk-testpmd macfwd on the same vdevs and lcores ---------------------------------
TESTPMD_MEMORY=
testpmd_reference() {
    local label="dpdk-testpmd macfwd (DPDK I/O floor)"
    echo "== $label, $REF_RUNS runs of iperf3 ${SECS} s each way"
    if ! command -v dpdk-testpmd >/dev/null; then
        record ref testpmd "$label" failed "" "" "" "" "dpdk-testpmd not found (package dpdk-dev)"
        return
    fi
    local lan_mac wan_mac mem=() free_kb page_kb
    lan_mac=$(mac_of gwlab-lan)
    wan_mac=$(mac_of gwlab-wan)
    free_kb=$(awk '/^HugePages_Free:/ { f = $2 } /^Hugepagesize:/ { s = $2 } END { print f * s }' /proc/meminfo)
    if awk '$3 == "hugetlbfs"' /proc/mounts | grep -q . && ((free_kb >= 512 * 1024)); then
        mem=(-m 512 --huge-unlink)
        TESTPMD_MEMORY=hugepages
    else
        mem=(--no-huge -m 512)
        TESTPMD_MEMORY=no-huge
    fi
    # Non-interactive: forwarding starts on init and --stats-period keeps testpmd running (instead
    # of waiting for Enter on stdin) until SIGINT.
    stdbuf -oL -eL dpdk-testpmd -l 0,1 --no-pci --file-prefix="$TESTPMD_PREFIX" "${mem[@]}" \
        --vdev=net_af_packet0,iface=gwl-lan --vdev=net_af_packet1,iface=gwl-wan -- \
        --forward-mode=mac --eth-peer=0,"$lan_mac" --eth-peer=1,"$wan_mac" --nb-cores=1 \
        --auto-start --stats-period=1 </dev/null >"$WORK/testpmd.log" 2>&1 &
    TESTPMD_PID=$!
    local started=0
    for _ in $(seq 1 100); do
        grep -q "packet forwarding - ports=" "$WORK/testpmd.log" && { started=1; break; }
        kill -0 "$TESTPMD_PID" 2>/dev/null || break
        sleep 0.2
    done
    if ((!started)); then
        echo "   dpdk-testpmd did not start:" >&2
        tail -n 15 "$WORK/testpmd.log" >&2
        stop_testpmd
        record ref testpmd "$label" failed "" "" "" "" "dpdk-testpmd did not start: $(grep -m1 -iE 'error|fail|cannot' "$WORK/testpmd.log" | tr '\t' ' ' | cut -c1-200)"
        return
    fi
    # --eth-peer=N names the host on port N's wire: check the vdevs became ports in this order.
    local port0
    port0=$(sed -n 's/^Port 0: \([0-9A-Fa-f:]*\).*/\1/p' "$WORK/testpmd.log" | head -n 1)
    if [[ ${port0,,} != "$(cat /sys/class/net/gwl-lan/address)" ]]; then
        stop_testpmd
        record ref testpmd "$label" failed "" "" "" "" "testpmd port 0 is $port0, not gwl-lan"
        return
    fi
    # No NAT here: each host reaches the other subnet via a fake next hop whose ARP entry is the
    # peer host's MAC; testpmd rewrites the MACs (dst = --eth-peer, src = its port) anyway.
    ip -n gwlab-wan neigh replace 10.0.0.254 lladdr "$lan_mac" dev eth0 nud permanent
    ip -n gwlab-wan route replace 192.168.10.0/24 via 10.0.0.254
    ip -n gwlab-lan neigh replace 192.168.10.254 lladdr "$wan_mac" dev eth0 nud permanent
    ip -n gwlab-lan route replace 10.0.0.0/24 via 192.168.10.254
    for round in $(seq 1 "$REF_RUNS"); do
        measure_once ref testpmd "$label" "$round" gwlab-lan gwlab-wan 192.168.10.2 || true
    done
    stop_testpmd
    ip -n gwlab-wan route del 192.168.10.0/24 via 10.0.0.254 2>/dev/null || true
    ip -n gwlab-lan route del 10.0.0.0/24 via 192.168.10.254 2>/dev/null || true
}
testpmd_reference

# --- reference: a Linux router with nftables -----------------------------------------------------
# linux_router_up: gwl-lan/gwl-wan moved into namespace gwlab-linux, routing with the nftables
# NAT and stateful forward chain. False (and nothing to undo but the namespace) if nft failed.
linux_router_up() {
    "$LAB" up >/dev/null # fresh hosts and ARP caches
    ip netns add "$LINUX_NS"
    ip -n "$LINUX_NS" link set lo up
    ip netns exec "$LINUX_NS" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    local spec ifname addr
    for spec in gwl-lan:192.168.10.1/24 gwl-wan:10.0.0.1/24; do
        ifname=${spec%%:*} addr=${spec#*:}
        ip link set "$ifname" netns "$LINUX_NS"
        ip -n "$LINUX_NS" addr add "$addr" dev "$ifname"
        ip -n "$LINUX_NS" link set "$ifname" up
        # As the lab does for the gateway's ports: no TSO/GSO/GRO, no checksum offload.
        ip netns exec "$LINUX_NS" ethtool -K "$ifname" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
    done
    ip netns exec "$LINUX_NS" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$LINUX_NS" nft -f - <<'NFT'
table ip gwlab_bench {
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
        iifname "gwl-wan" ip daddr 10.0.0.1 tcp dport 5201 dnat to 192.168.10.2:5201
    }
    chain postrouting {
        type nat hook postrouting priority srcnat; policy accept;
        oifname "gwl-wan" masquerade
    }
    chain forward {
        type filter hook forward priority filter; policy drop;
        ct state established,related accept
        iifname "gwl-lan" accept
        ct status dnat accept
    }
}
NFT
}

linux_reference() {
    local label="Linux router (nftables NAT + SPI)"
    echo "== $label, $REF_RUNS runs of iperf3 ${SECS} s each way"
    if ! command -v nft >/dev/null; then
        record ref linux "$label" failed "" "" "" "" "nft not found (package nftables)"
        return
    fi
    if ! linux_router_up; then
        record ref linux "$label" failed "" "" "" "" "nft could not load the ruleset"
        remove_linux_router
        return
    fi
    for round in $(seq 1 "$REF_RUNS"); do
        measure_once ref linux "$label" "$round" gwlab-lan gwlab-wan 10.0.0.1 || true
    done
    remove_linux_router
    "$LAB" down
}
linux_reference

# --- QoS at 200 Mbit/s (issue 20): the shaper, the policer and Linux's htb ----------------------
# The same port forward, the link held to SHAPING_MBPS each way: by the gateway's shaper, by its
# policer, and by htb on both ports of the Linux router above (no fq_codel or CAKE in this
# kernel: htb's default FIFO). Per run and direction: iperf3's rate, its retransmitted
# segments, and a ping from the LAN host to the WAN host beside the load (its p95 against an
# idle one measured first). REF_RUNS runs each.
SHAPING_MBPS=200
SHAPING=$WORK/shaping.tsv
: >"$SHAPING"

# shaped_once KEY LABEL ROUND: one run each way; rows "key label round direction mbps
# retransmits segments ping_p95_ms idle_p95_ms" in $SHAPING.
shaped_once() {
    local key=$1 label=$2 round=$3 direction flag idle
    idle=$(ip netns exec gwlab-lan ping -c 20 -i 0.1 10.0.0.2 2>/dev/null | p95_of_ping) || idle=-
    for direction in down up; do
        flag=()
        [[ $direction == up ]] && flag=(-R)
        ip netns exec gwlab-lan timeout $((SECS + 60)) iperf3 -s -1 -J >"$WORK/shaped-server.json" 2>&1 &
        local server=$!
        sleep 0.5
        ip netns exec gwlab-lan ping -c $((SECS * 10)) -i 0.1 10.0.0.2 >"$WORK/shaped-ping.txt" 2>&1 &
        local ping=$!
        if ip netns exec gwlab-wan timeout $((SECS + 60)) iperf3 -c 10.0.0.1 -t "$SECS" -J \
            -A "$IPERF3_CPU,$IPERF3_CPU" "${flag[@]}" >"$WORK/shaped-client.json" 2>/dev/null; then
            python3 - "$WORK/shaped-client.json" "$key" "$label" "$round" "$direction" \
                "$(p95_of_ping <"$WORK/shaped-ping.txt" || echo -)" "$idle" >>"$SHAPING" <<'PY'
import json, sys
end = json.load(open(sys.argv[1]))["end"]
sent = end["sum_sent"]
mbps = end["sum_received"]["bits_per_second"] / 1e6
print("\t".join(sys.argv[2:6] + ["%.1f" % mbps, str(sent.get("retransmits", 0)),
                                  "%.0f" % (sent["bytes"] / 1448)] + sys.argv[6:8]))
PY
            echo "   round $round, ${direction}link: $(tail -n 1 "$SHAPING" | cut -f5-)"
        else
            kill "$server" 2>/dev/null || true
            printf '%s\t%s\t%s\t%s\tfailed\t-\t-\t-\t-\n' "$key" "$label" "$round" "$direction" >>"$SHAPING"
        fi
        wait "$server" 2>/dev/null || true
        wait "$ping" 2>/dev/null || true
    done
}

# p95_of_ping: the 95th percentile of the ping times on stdin, ms.
p95_of_ping() {
    python3 -c '
import re, sys
rtts = sorted(float(m) for m in re.findall(r"time=([0-9.]+) ms", sys.stdin.read()))
if len(rtts) < 5: sys.exit(1)
print("%.2f" % rtts[int(len(rtts) * 0.95) - 1])'
}

shaping_config() { # mode
    local cfg=$WORK/shaping-$1.toml
    {
        cat "$BASE_CONFIG"
        printf '\n[qos]\nenabled = true\nmode = "%s"\nuplink_mbps = %s\ndownlink_mbps = %s\n' \
            "$1" "$SHAPING_MBPS" "$SHAPING_MBPS"
    } >"$cfg"
    echo "$cfg"
}

"$LAB" up >/dev/null
for mode in shaper policer; do
    echo "== QoS at $SHAPING_MBPS Mbit/s: the gateway's $mode, $REF_RUNS runs of iperf3 ${SECS} s each way"
    for round in $(seq 1 "$REF_RUNS"); do
        start_gateway "$(shaping_config "$mode")" || continue
        shaped_once "$mode" "gateway, $mode" "$round"
        stop_gateway
    done
done
"$LAB" down
echo "== QoS at $SHAPING_MBPS Mbit/s: Linux router with htb, $REF_RUNS runs of iperf3 ${SECS} s each way"
if command -v nft >/dev/null && linux_router_up; then
    for ifname in gwl-lan gwl-wan; do
        ip netns exec "$LINUX_NS" tc qdisc add dev "$ifname" root handle 1: htb default 1
        ip netns exec "$LINUX_NS" tc class add dev "$ifname" parent 1: classid 1:1 htb rate "${SHAPING_MBPS}mbit"
    done
    for round in $(seq 1 "$REF_RUNS"); do
        shaped_once htb "Linux router, htb" "$round"
    done
else
    printf 'htb\tLinux router, htb\t-\t-\tfailed\t-\t-\t-\t-\n' >>"$SHAPING"
fi
remove_linux_router
"$LAB" down

# --- the table and the JSON ----------------------------------------------------------------------
mkdir -p "$(dirname "$JSON_OUT")"
export LB_DATE LB_KERNEL LB_CPU LB_CPUS LB_IPERF3 LB_DPDK LB_SECS=$SECS LB_RUNS=$RUNS LB_REF_RUNS=$REF_RUNS LB_TESTPMD_MEMORY=$TESTPMD_MEMORY
export LB_LOAD_START=$LOADAVG_START LB_LOAD_END LB_SHAPING_MBPS=$SHAPING_MBPS
LB_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
LB_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LB_KERNEL=$(uname -r)
LB_CPU=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
LB_CPUS=$(nproc)
LB_IPERF3=$(iperf3 --version 2>/dev/null | head -n 1)
LB_DPDK=$(pkg-config --modversion libdpdk 2>/dev/null || echo unknown)
python3 - "$RESULTS" "$JSON_OUT" <<'PY'
import json, os, random, statistics, sys

TOLERANCE = 0.05
# Fixed seed: the same runs always give the same interval.
rng = random.Random(7)

# key -> dict(kind, label, status, notes, peer, runs={"down": [Gbit/s...], "up": [...]},
#             by_round={"down": {round: [Gbit/s...]}, "up": {...}})
entries = {}
order = []
for line in open(sys.argv[1]):
    kind, key, label, status, rnd, direction, gbps, peer, note = line.rstrip("\n").split("\t")
    if key not in entries:
        entries[key] = dict(kind=kind, key=key, label=label, status=status, notes=[], peer=None,
                            runs={"down": [], "up": []}, by_round={"down": {}, "up": {}})
        order.append(key)
    e = entries[key]
    if status == "measured":
        e["runs"][direction].append(float(gbps))
        e["by_round"][direction].setdefault(rnd, []).append(float(gbps))
        e["peer"] = e["peer"] or (None if peer == "-" else peer)
    else:
        if e["status"] == "measured" or status != "failed":
            e["status"] = status
        if note != "-":
            e["notes"].append(("round %s: " % rnd if rnd != "-" else "") + note)

def mean(values):
    return statistics.fmean(values) if values else None

def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b

def paired_ratio(mode_rounds, base_rounds, draws=4000):
    """A mode's throughput relative to Default's in the same rounds (the sum over rounds of the
    mode's runs over the sum of Default's, each round's Default being the mean of its runs),
    and the bootstrap 90% interval of that ratio. The bootstrap resamples whole rounds: drift
    of the machine between rounds moves a round's Default and mode runs together, so it
    cancels instead of widening the interval."""
    rounds = sorted(set(mode_rounds) & set(base_rounds))
    pairs = [(statistics.fmean(mode_rounds[r]), statistics.fmean(base_rounds[r])) for r in rounds]
    if not pairs:
        return None, None
    def of(sample):
        return sum(m for m, _ in sample) / sum(b for _, b in sample)
    if len(pairs) < 2:
        return of(pairs), None
    boot = sorted(of(rng.choices(pairs, k=len(pairs))) for _ in range(draws))
    return of(pairs), (boot[int(0.05 * draws)], boot[int(0.95 * draws) - 1])

def fmt(v, spec="%.2f"):
    return "-" if v is None else spec % v

def fmt_interval(iv):
    return "-" if iv is None else "%.2f-%.2f" % iv

env = os.environ
modes = [entries[k] for k in order if entries[k]["kind"] == "mode"]
refs = [entries[k] for k in order if entries[k]["kind"] == "ref"]
default = entries.get("default")
base = default["by_round"] if default else {"down": {}, "up": {}}

out = []
out.append("gateway lab benchmark (issue 7): iperf3 TCP, default settings; each figure is the mean of %s rounds"
           % env["LB_RUNS"])
out.append("(modes interleaved, Default twice per round; references: %s runs) of %s s after a 1 s warm-up; iperf3 on CPU 0, worker on CPU 1"
           % (env["LB_REF_RUNS"], env["LB_SECS"]))
out.append("port forward 10.0.0.1:5201 -> 192.168.10.2:5201 (server on the LAN host, client on the WAN host)")
out.append("downlink = WAN -> LAN (the client sends), uplink = LAN -> WAN (iperf3 -R)")
out.append("date %s | kernel %s | CPU %s (%s CPUs) | DPDK %s | %s"
           % (env["LB_DATE"], env["LB_KERNEL"], env["LB_CPU"], env["LB_CPUS"], env["LB_DPDK"], env["LB_IPERF3"]))
out.append("load average at start %s, at end %s (the benchmark itself keeps about 2 CPUs busy)"
           % (env["LB_LOAD_START"], env["LB_LOAD_END"]))
out.append("")
head = "%-18s %9s %9s %8s %8s %11s %11s %8s" % (
    "mode", "down Gb/s", "up Gb/s", "down/Def", "up/Def", "down 90%", "up 90%", ">=0.95")
out.append(head)
out.append("-" * len(head))
json_modes = []
all_keep = True
for e in modes:
    d, u = mean(e["runs"]["down"]), mean(e["runs"]["up"])
    row = dict(mode=e["label"], key=e["key"], status=e["status"], downlink_gbps=d, uplink_gbps=u,
               downlink_runs=e["runs"]["down"], uplink_runs=e["runs"]["up"],
               lan_host_saw_client_as=e["peer"], note="; ".join(e["notes"]))
    if d is None and u is None:
        out.append("%-18s %9s%s" % (e["label"], e["status"],
                                    "  (%s)" % row["note"] if row["note"] else ""))
        all_keep = False
        json_modes.append(row)
        continue
    dr = ur = 1.0
    di = ur_i = None
    keeps = None
    if e["key"] != "default":
        dr, di = paired_ratio(e["by_round"]["down"], base["down"])
        ur, ur_i = paired_ratio(e["by_round"]["up"], base["up"])
        keeps = all(r is not None and r >= 1 - TOLERANCE for r in (dr, ur))
        all_keep = all_keep and keeps
    line = "%-18s %9s %9s %8s %8s %11s %11s %8s" % (
        e["label"], fmt(d), fmt(u), fmt(dr), fmt(ur), fmt_interval(di), fmt_interval(ur_i),
        "-" if keeps is None else ("yes" if keeps else "NO"))
    if e["status"] != "measured":
        line += "  (%s: %s)" % (e["status"], row["note"])
        all_keep = False
    out.append(line)
    row.update(downlink_ratio_to_default=dr, uplink_ratio_to_default=ur,
               downlink_ratio_90pct_interval=di, uplink_ratio_90pct_interval=ur_i,
               keeps_throughput=keeps)
    json_modes.append(row)
out.append("")
out.append("every mode keeps at least 95%% of Default's throughput in both directions: %s"
           % ("yes" if all_keep else "NO"))
out.append("")
head = "%-40s %10s %10s" % ("reference", "down Gb/s", "up Gb/s")
out.append(head)
out.append("-" * len(head))
json_refs = []
for e in refs:
    d, u = mean(e["runs"]["down"]), mean(e["runs"]["up"])
    line = "%-40s %10s %10s" % (e["label"], fmt(d), fmt(u))
    if e["status"] != "measured":
        line += "  (%s: %s)" % (e["status"], "; ".join(e["notes"]))
    out.append(line)
    gw = {}
    for gkey in ("default", "all"):
        g = entries.get(gkey)
        if g and g["runs"]["down"] and g["runs"]["up"]:
            gw[gkey] = dict(downlink=ratio(mean(g["runs"]["down"]), d),
                            uplink=ratio(mean(g["runs"]["up"]), u))
    json_refs.append(dict(reference=e["label"], key=e["key"], status=e["status"],
                          downlink_gbps=d, uplink_gbps=u,
                          downlink_runs=e["runs"]["down"], uplink_runs=e["runs"]["up"],
                          gateway_default_ratio=gw.get("default"), gateway_all_on_ratio=gw.get("all"),
                          lan_host_saw_client_as=e["peer"], note="; ".join(e["notes"])))
out.append("")
head = "%-40s %10s %10s" % ("gateway vs reference", "down", "up")
out.append(head)
out.append("-" * len(head))
for r in json_refs:
    for gkey, glabel in (("default", "Default"), ("all", "All on")):
        g = (r["gateway_default_ratio"] if gkey == "default" else r["gateway_all_on_ratio"])
        if g:
            out.append("%-40s %10s %10s" % ("%s / %s" % (glabel, r["reference"].split(" (")[0]),
                                            fmt(g["downlink"]), fmt(g["uplink"])))
out.append("")
out.append("runs (Gbit/s, in round order):")
for e in modes + refs:
    if e["runs"]["down"] or e["runs"]["up"]:
        out.append("  %-38s down %s | up %s" % (e["label"], " ".join("%.2f" % v for v in e["runs"]["down"]),
                                                " ".join("%.2f" % v for v in e["runs"]["up"])))
for e in modes:
    if e["status"] == "snippet rejected":
        out.append("")
        out.append("%s: the gateway knows the section but rejects the lab-bench snippet; update it in "
                   "scripts/lab-bench.sh: %s" % (e["label"], "; ".join(e["notes"])))
shaping = []
shaping_rows = {}
for line in open(sys.argv[1].replace("results.tsv", "shaping.tsv")):
    key, label, rnd, direction, mbps, retransmits, segments, p95, idle = line.rstrip("\n").split("\t")
    row = shaping_rows.setdefault(key, dict(key=key, label=label, runs=[]))
    if mbps == "failed":
        row["runs"].append(dict(round=rnd, direction=direction, failed=True))
        continue
    row["runs"].append(dict(round=rnd, direction=direction, mbps=float(mbps),
                            retransmit_percent=100.0 * int(retransmits) / max(1, int(segments)),
                            ping_p95_ms=None if p95 == "-" else float(p95),
                            idle_p95_ms=None if idle == "-" else float(idle)))
out.append("")
out.append("QoS at %s Mbit/s each way (issue 20): iperf3 TCP through the port forward, a ping LAN -> WAN beside it"
           % env["LB_SHAPING_MBPS"])
head = "%-22s %-9s %9s %14s %13s %11s" % ("shaped by", "direction", "Mbit/s", "retransmitted", "ping p95 ms", "idle p95 ms")
out.append(head)
out.append("-" * len(head))
for row in shaping_rows.values():
    for direction in ("down", "up"):
        runs = [r for r in row["runs"] if r["direction"] == direction and not r.get("failed")]
        if not runs:
            out.append("%-22s %-9s %9s" % (row["label"], direction, "failed"))
            continue
        pings = [r["ping_p95_ms"] for r in runs if r["ping_p95_ms"] is not None]
        idles = [r["idle_p95_ms"] for r in runs if r["idle_p95_ms"] is not None]
        summary = dict(mbps=mean([r["mbps"] for r in runs]),
                       retransmit_percent=mean([r["retransmit_percent"] for r in runs]),
                       ping_p95_ms=mean(pings), idle_p95_ms=mean(idles))
        row.setdefault("means", {})[direction] = summary
        out.append("%-22s %-9s %9s %13s%% %13s %11s" % (
            row["label"], direction, fmt(summary["mbps"], "%.1f"),
            fmt(summary["retransmit_percent"], "%.3f"), fmt(summary["ping_p95_ms"]),
            fmt(summary["idle_p95_ms"])))
    shaping.append(row)
print("\n".join(out))

doc = dict(benchmark="lab-bench", issue=7, date=env["LB_DATE"], kernel=env["LB_KERNEL"],
           cpu=env["LB_CPU"], cpus=int(env["LB_CPUS"]), dpdk=env["LB_DPDK"], iperf3=env["LB_IPERF3"],
           seconds_per_run=int(env["LB_SECS"]), warmup_seconds=1, rounds=int(env["LB_RUNS"]),
           reference_runs=int(env["LB_REF_RUNS"]), statistic="mean over runs",
           protocol="tcp", min_ratio_to_default=1 - TOLERANCE, every_mode_keeps_throughput=all_keep,
           loadavg_start=env["LB_LOAD_START"], loadavg_end=env["LB_LOAD_END"],
           topology=dict(server="gwlab-lan 192.168.10.2:5201", client="gwlab-wan 10.0.0.2",
                         target="10.0.0.1:5201 (port forward; 192.168.10.2 directly for testpmd)",
                         downlink="WAN -> LAN (client sends)", uplink="LAN -> WAN (iperf3 -R)",
                         lcores="0 main/control and iperf3, 1 forwarding (gateway worker, testpmd fwd core)",
                         testpmd_memory=env.get("LB_TESTPMD_MEMORY") or None),
           modes=json_modes, references=json_refs,
           shaping=dict(rate_mbps=int(env["LB_SHAPING_MBPS"]), rows=shaping))
with open(sys.argv[2], "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
PY
echo
echo "JSON: $JSON_OUT"
if grep -qP '^[^\t]*\t[^\t]*\t[^\t]*\t(failed|snippet rejected)\t' "$RESULTS" \
    || grep -qP '^([^\t]*\t){4}failed\t' "$SHAPING"; then
    exit 1
fi
