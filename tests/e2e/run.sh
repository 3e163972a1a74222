#!/usr/bin/env bash
# Runs every end-to-end test (tests/e2e/test_*.sh) against the release binary. Needs root:
# the tests create network namespaces and veth pairs, and remove them again.
set -uo pipefail
cd "$(dirname "$0")"
GATEWAY=${GATEWAY:-$(cd ../.. && pwd)/target/release/gateway}
if [[ $EUID -ne 0 ]]; then
    echo "e2e: needs root (network namespaces); run make test as root" >&2
    exit 1
fi
failed=()
# Each test's wall time, for keeping make test within its budget.
took() { echo "-- $1: $((SECONDS - $2)) s"; }
# A test that hangs fails instead of holding make test past CI's limit: after
# E2E_TEST_TIMEOUT seconds (the slowest test takes about 80) its process group gets SIGTERM
# (the gateway stops, the test's EXIT trap cleans up), 20 s later SIGKILL. Whatever the
# trap left is then taken down, so that the next test starts on a clean machine.
E2E_TEST_TIMEOUT=${E2E_TEST_TIMEOUT:-300}
run_one() {
    local status=0
    timeout --kill-after=20 "$E2E_TEST_TIMEOUT" "$@" || status=$?
    if ((status == 124 || status == 137)); then
        echo "FAIL: $* did not finish within $E2E_TEST_TIMEOUT s" >&2
        pkill -TERM -f "^$GATEWAY run " 2>/dev/null || true
        sleep 1
        ../../scripts/lab.sh down >/dev/null 2>&1 || true
    fi
    return "$status"
}
for test in test_*.sh; do
    echo "== $test"
    started=$SECONDS
    if ! run_one bash "$test"; then
        failed+=("$test")
    fi
    took "$test" "$started"
done
# The router, NAT, firewall and kernel twin checks, sessions across a restart, addresses
# and routes from the kernel (DHCP, BGP), VLAN subinterfaces, the PPPoE uplink (whose
# downstream all lands on one queue) and the SYN proxy, again on two workers (see with_e2e_workers in lib.sh).
# test_netlink.sh runs dhcpcd on the WAN twin in the first pass, dhclient in this one.
for test in test_router.sh test_nat.sh test_ctl.sh test_kernel_twins.sh test_snapshot.sh test_netlink.sh \
    test_frr_bgp.sh test_vlan.sh test_pppoe.sh test_syn_proxy.sh; do
    echo "== $test on two workers"
    started=$SECONDS
    if ! E2E_WORKERS=2 DHCP_CLIENT=dhclient run_one bash "$test"; then
        failed+=("$test (two workers)")
    fi
    took "$test on two workers" "$started"
done
if ((${#failed[@]})); then
    echo "e2e: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "e2e: all passed in $SECONDS s"
