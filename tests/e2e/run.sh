#!/usr/bin/env bash
# Runs every end-to-end test (tests/e2e/test_*.sh) against the release binary. Needs root:
# the tests create network namespaces and veth pairs, and remove them again.
#
# Knobs, for hunting a flake (no test is ever retried: a failure is reported as it happened):
#   E2E_ONLY="test_a.sh test_b.sh"  only these tests (in whichever passes they belong to);
#   E2E_PASS=one|two|both           the one-worker pass, the two-worker pass, or both (default);
#   E2E_REPEAT=N                    the whole selection N times in a row (default 1);
#   E2E_TEST_TIMEOUT=SECONDS        the most one test may take (default 300).
# After each test, any process it started that is still alive (a daemon in one of its
# namespaces, a gateway, a DHCP client, a peer) and any namespace it left are a failure of
# that test; they are reported and removed so that the next test starts on a clean machine.
set -uo pipefail
cd "$(dirname "$0")"
GATEWAY=${GATEWAY:-$(cd ../.. && pwd)/target/release/gateway}
if [[ $EUID -ne 0 ]]; then
    echo "e2e: needs root (network namespaces); run make test as root" >&2
    exit 1
fi
E2E_PASS=${E2E_PASS:-both}
E2E_REPEAT=${E2E_REPEAT:-1}
E2E_ONLY=${E2E_ONLY:-}
[[ $E2E_PASS == one || $E2E_PASS == two || $E2E_PASS == both ]] ||
    { echo "e2e: E2E_PASS=$E2E_PASS: one, two or both" >&2; exit 2; }
[[ $E2E_REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "e2e: E2E_REPEAT=$E2E_REPEAT: a positive count" >&2; exit 2; }
for only in ${E2E_ONLY//,/ }; do
    [[ -f $only ]] || { echo "e2e: E2E_ONLY names $only, which is not a test here" >&2; exit 2; }
done

# A test that hangs fails instead of holding make test past CI's limit: after
# E2E_TEST_TIMEOUT seconds (the slowest test takes about 80) its process group gets SIGTERM
# (the gateway stops, the test's EXIT trap cleans up), 20 s later SIGKILL. Whatever the
# trap left is then taken down by the leftover check below.
E2E_TEST_TIMEOUT=${E2E_TEST_TIMEOUT:-300}

# The processes and namespaces that exist before a test, so that only the test's own count.
OUR_NETNS=$(readlink /proc/self/ns/net)
# Daemons and peers the tests start in this namespace (the rest run inside the tests' own
# namespaces, which the netns comparison catches).
LEFTOVER_NAMES='^(gateway|dhclient|dhcpcd|dnsmasq|iperf3|kea-dhcp4|kea-dhcp6|radvd|zebra|bgpd|mgmtd|staticd|watchfrr|keepalived|conntrackd|ovsdb-server|ovs-vswitchd|tcpdump|tshark|dumpcap|hping3|irtt|nfcapd|rsyslogd)$'
snapshot_pids() { ls /proc | grep -E '^[0-9]+$' | sort; }
snapshot_netns() { ip netns list 2>/dev/null | awk '{ print $1 }' | sort; }

# alive PID: whether the process exists and is not a zombie (exited, waiting to be reaped).
alive() {
    local state
    state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z && $state != X ]]
}

# leftovers BEFORE_PIDS BEFORE_NETNS: prints what the test left (one line each) and removes it.
# A process the test's trap signalled may still be exiting when the test returns: what is
# gone within 3 s is not a leftover; what lives on is.
leftovers() {
    local before_pids=$1 before_netns=$2 pid ns name found=() suspects=() living
    for pid in $(comm -13 <(echo "$before_pids") <(snapshot_pids)); do
        [[ -d /proc/$pid ]] || continue
        name=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
        ns=$(readlink "/proc/$pid/ns/net" 2>/dev/null) || continue
        # Threads of this script's own pipelines are not leftovers.
        ((pid == $$ || pid == BASHPID)) && continue
        if [[ $ns != "$OUR_NETNS" || $name =~ $LEFTOVER_NAMES ]]; then
            suspects+=("$pid")
        fi
    done
    for _ in $(seq 1 30); do
        living=()
        for pid in "${suspects[@]}"; do
            alive "$pid" && living+=("$pid")
        done
        suspects=("${living[@]}")
        ((${#suspects[@]} == 0)) && break
        sleep 0.1
    done
    for pid in "${suspects[@]}"; do
        name=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
        found+=("process $pid ($name): $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)")
        kill -KILL "$pid" 2>/dev/null || true
    done
    for ns in $(comm -13 <(echo "$before_netns") <(snapshot_netns)); do
        found+=("namespace $ns")
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    ((${#found[@]})) && printf '%s\n' "${found[@]}"
    return 0
}

# run_one NAME COMMAND...: runs one test; fails it when it fails, times out or leaves anything.
run_one() {
    local name=$1 status=0 before_pids before_netns left
    shift
    before_pids=$(snapshot_pids)
    before_netns=$(snapshot_netns)
    timeout --kill-after=20 "$E2E_TEST_TIMEOUT" "$@" || status=$?
    if ((status == 124 || status == 137)); then
        echo "FAIL: $name did not finish within $E2E_TEST_TIMEOUT s" >&2
        pkill -TERM -f "^$GATEWAY run " 2>/dev/null || true
        sleep 1
        ../../scripts/lab.sh down >/dev/null 2>&1 || true
    fi
    left=$(leftovers "$before_pids" "$before_netns")
    if [[ -n $left ]]; then
        echo "FAIL: $name left behind (now removed):" >&2
        sed 's/^/    /' <<<"$left" >&2
        ((status == 0)) && status=1
    fi
    return "$status"
}

selected() {
    [[ -z $E2E_ONLY ]] && return 0
    [[ " ${E2E_ONLY//,/ } " == *" $1 "* ]]
}

# The router, NAT, firewall and kernel twin checks, sessions across a restart, addresses
# and routes from the kernel (DHCP, BGP), VLAN subinterfaces, the PPPoE uplink (whose
# downstream all lands on one queue), the SYN proxy, two uplinks and session sync (whose
# standby derives each flow's owner for its own workers), the HA pair's takeover and the
# scale-out (both boxes on two workers), port mapping (a mapping's flows owned by its host)
# and IPv6 over PPPoE, again on two workers (see with_e2e_workers in lib.sh). test_netlink.sh runs
# dhcpcd on the WAN twin in the first pass, dhclient in this one.
TWO_WORKER_TESTS=(test_router.sh test_nat.sh test_ctl.sh test_kernel_twins.sh test_snapshot.sh
    test_netlink.sh test_frr_bgp.sh test_vlan.sh test_pppoe.sh test_syn_proxy.sh test_uplinks.sh
    test_session_sync.sh test_ha_takeover.sh test_ecmp_scale_out.sh test_port_mapping.sh
    test_pppoe_ipv6.sh)

failed=()
# Each test's wall time, for keeping make test within its budget.
took() { echo "-- $1: $((SECONDS - $2)) s"; }
for ((round = 1; round <= E2E_REPEAT; round++)); do
    ((E2E_REPEAT > 1)) && echo "=== round $round of $E2E_REPEAT"
    suffix=
    ((E2E_REPEAT > 1)) && suffix=" [round $round]"
    if [[ $E2E_PASS != two ]]; then
        for test in test_*.sh; do
            selected "$test" || continue
            echo "== $test"
            started=$SECONDS
            run_one "$test" bash "$test" || failed+=("$test$suffix")
            took "$test" "$started"
        done
    fi
    if [[ $E2E_PASS != one ]]; then
        for test in "${TWO_WORKER_TESTS[@]}"; do
            selected "$test" || continue
            echo "== $test on two workers"
            started=$SECONDS
            E2E_WORKERS=2 DHCP_CLIENT=dhclient run_one "$test (two workers)" bash "$test" ||
                failed+=("$test (two workers)$suffix")
            took "$test on two workers" "$started"
        done
    fi
done
if ((${#failed[@]})); then
    echo "e2e: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "e2e: all passed in $SECONDS s"
