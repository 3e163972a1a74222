# Shared by the end-to-end tests: start and stop the gateway, assertions that say what failed.
# Each test sources this, brings the lab up, and registers `cleanup` on EXIT.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}
WORK=$(mktemp -d /tmp/gateway-e2e.XXXXXX)
GATEWAY_PID=
# Each test's gateway keeps its state snapshot (see [state] in configs/lab.toml) in the test's
# own directory, so that no test restores the flows another one left behind.
export GATEWAY__STATE__DIRECTORY=${GATEWAY__STATE__DIRECTORY:-$WORK/state}
# Every curl in a test gives up after 15 s (curl reads $CURL_HOME/.curlrc): a server that
# accepts and never answers fails the test instead of hanging it.
export CURL_HOME=$WORK
printf 'connect-timeout = 5\nmax-time = 15\n' >"$WORK/.curlrc"

fail() {
    echo "FAIL: $*" >&2
    if [[ -f $WORK/gateway.log ]]; then
        echo "--- gateway log (last 30 lines) ---" >&2
        tail -n 30 "$WORK/gateway.log" >&2
    fi
    exit 1
}

pass() { echo "ok: $*"; }

cleanup() {
    if [[ -n $GATEWAY_PID ]] && kill -0 "$GATEWAY_PID" 2>/dev/null; then
        kill -TERM "$GATEWAY_PID" 2>/dev/null
        wait "$GATEWAY_PID" 2>/dev/null || true
    fi
    "$ROOT/scripts/lab.sh" down
    rm -rf "$WORK"
}

# lab_config METRICS_PORT: configs/lab.toml with metrics on 127.0.0.1:METRICS_PORT and the
# e2e tests' DPDK file prefix, on stdout; with E2E_WORKERS=2, on two workers (see below).
lab_config() {
    sed -e "s/^listen = .*/listen = \"127.0.0.1:$1\"/" -e 's/^file_prefix = .*/file_prefix = "gateway-e2e"/' \
        "$ROOT/configs/lab.toml" >"$WORK/lab-config.toml"
    with_e2e_workers "$WORK/lab-config.toml"
    cat "$WORK/lab-config.toml"
}

# lab_config_ipv6 METRICS_PORT [LINE...]: lab_config with IPv6 on both interfaces: the LAN's
# 2001:db8:10::1/64 with Router Advertisements every 30 s (each LINE added to its table), the
# WAN's 2001:db8:ff::1/64, and the IPv6 default route to the WAN host 2001:db8:ff::2. Each
# table must follow every key of its [[interfaces]] entry, so the LAN's goes before the
# second entry and the WAN's before [[routes]].
lab_config_ipv6() {
    local port=$1
    shift
    local extra=
    (($# > 0)) && extra=$(printf '%s\n' "$@")
    lab_config "$port" | awk -v extra="$extra" '
        /^\[\[interfaces\]\]/ && ++entries == 2 {
            print "[interfaces.ipv6]"
            print "addresses = [\"2001:db8:10::1/64\"]"
            print "router_advertisements = true"
            print "ra_interval_secs = 30"
            if (extra != "") print extra
            print ""
        }
        /^\[\[routes\]\]/ && !wan_table++ {
            print "[interfaces.ipv6]"
            print "addresses = [\"2001:db8:ff::1/64\"]"
            print ""
        }
        { print }'
    printf '\n[[ipv6_routes]]\ndestination = "::/0"\nvia = "2001:db8:ff::2"\n'
}

# with_e2e_workers CONFIG: when E2E_WORKERS=2 (run.sh's second pass over the router, NAT and
# firewall tests), edits CONFIG in place to run two workers on af_packet with two queue pairs
# per port, so that the kernel's fanout lands packets on either worker. The main lcore and one
# worker share CPU 0 on a two-CPU box.
with_e2e_workers() {
    [[ ${E2E_WORKERS:-1} == 2 ]] || return 0
    sed -i -e 's/^lcores = \[1\]/lcores = [1, 2]/' \
        -e 's/^\(device = "net_af_packet[^"]*\)"/\1,qpairs=2"/' "$1"
    if grep -q '^cpus = ' "$1"; then
        sed -i 's/^cpus = .*/cpus = [0, 1, 0]/' "$1"
    else
        sed -i 's/^\[eal\]$/[eal]\ncpus = [0, 1, 0]/' "$1"
    fi
    grep -q '^lcores = \[1, 2\]' "$1" || fail "with_e2e_workers: $1 has no 'lcores = [1]' to widen"
}

# start_gateway CONFIG: runs the gateway in the background and waits until it forwards.
start_gateway() {
    # Emptied here, not by the background job's redirection: that runs in the child, which
    # may open the file only after the first check below has read the previous gateway's
    # "gateway running" from it.
    : >"$WORK/gateway.log"
    "$GATEWAY" run --config "$1" >>"$WORK/gateway.log" 2>&1 &
    GATEWAY_PID=$!
    for _ in $(seq 1 100); do
        grep -q "gateway running" "$WORK/gateway.log" && return 0
        kill -0 "$GATEWAY_PID" 2>/dev/null || fail "gateway exited during start"
        sleep 0.2
    done
    fail "gateway did not start within 20 s"
}

# stop_gateway: SIGTERM, and the exit status must be 0.
stop_gateway() {
    kill -TERM "$GATEWAY_PID"
    local status=0
    wait "$GATEWAY_PID" || status=$?
    GATEWAY_PID=
    [[ $status -eq 0 ]] || fail "gateway exited with status $status on SIGTERM"
}

# assert_no_conntrack_invalid: well-behaved traffic must never be refused by the flow tracker,
# however many workers carry it. Needs $METRICS.
assert_no_conntrack_invalid() {
    local invalid
    invalid=$(curl -sf "$METRICS" | awk 'index($0, "gateway_dropped_packets_total{reason=\"conntrack_invalid\"") == 1 { sum += $NF } END { printf "%d\n", sum }')
    if [[ $invalid != 0 ]]; then
        local why
        why=$(curl -sf "$METRICS" | awk '/^gateway_conntrack_invalid_packets_total/ && $NF != 0' | tr '\n' ' ')
        fail "$invalid packets of well-behaved traffic were dropped as conntrack_invalid: $why"
    fi
    local stale
    stale=$(curl -sf "$METRICS" | awk 'index($0, "gateway_conntrack_stale_segments_total{") == 1 { sum += $NF } END { printf "%d\n", sum }')
    pass "no packet was dropped as conntrack_invalid ($stale stale TCP segments passed)"
}

# lab_up_with_twin_netns NS: the namespace lab, and a fresh namespace NS for the gateway's
# kernel twins (its loopback up).
lab_up_with_twin_netns() {
    "$ROOT/scripts/lab.sh" up >/dev/null
    ip netns del "$1" 2>/dev/null || true
    ip netns add "$1"
    ip -n "$1" link set lo up
}

# second_lan_host NS ADDRESS: a second LAN host in a new namespace NS, at ADDRESS/24 with its
# default route via the gateway. The LAN namespace's eth0 becomes a port of a bridge (br0) that
# also reaches NS (by port gst0); the LAN host's own address moves to the bridge. The caller deletes NS on
# exit (`remove_netns NS`).
second_lan_host() {
    local ns=$1 address=$2
    ip netns del "$ns" 2>/dev/null || true
    lan ip link add br0 type bridge forward_delay 0 stp_state 0
    lan ip addr del 192.168.10.2/24 dev eth0
    lan ip link set eth0 master br0
    lan ip link set br0 up
    lan ip addr add 192.168.10.2/24 dev br0
    lan ip route replace default via 192.168.10.1
    lan ethtool -K br0 tso off gso off gro off tx off >/dev/null 2>&1 || true
    ip netns add "$ns"
    lan ip link add gst0 type veth peer name eth0 netns "$ns"
    lan ip link set gst0 master br0
    lan ip link set gst0 up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$address/24" dev eth0
    ip netns exec "$ns" ethtool -K eth0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip route add default via 192.168.10.1
}

# remove_netns NS: kills what runs in namespace NS and deletes it.
remove_netns() {
    if ip netns pids "$1" >/dev/null 2>&1; then
        ip netns pids "$1" | xargs -r kill 2>/dev/null || true
    fi
    ip netns del "$1" 2>/dev/null || true
}

lan() { ip netns exec gwlab-lan "$@"; }
wan() { ip netns exec gwlab-wan "$@"; }

# two_box_lab_up LAN_GATEWAY WAN_GATEWAY: the lab for two gateways, A and B (an HA pair, or
# two boxes scaled out): a LAN and a WAN segment (Linux bridges br-lan and br-wan in the
# namespace gwha-sw), the LAN host gwlab-lan (192.168.10.2/24, its default route via
# LAN_GATEWAY) and the WAN host gwlab-wan (10.0.0.2/24, via WAN_GATEWAY) on them, and each
# box's two ports on them: the root-namespace veth ends gwha-{a,b}-{lan,wan}, for
# net_af_packet. The namespaces gwha-a and gwha-b are there for each box's twins.
two_box_lab_up() {
    "$ROOT/scripts/lab.sh" down
    local ns segment box
    for ns in gwha-a gwha-b gwha-sw; do
        remove_netns "$ns"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
    done
    for segment in lan wan; do
        ip -n gwha-sw link add "br-$segment" type bridge forward_delay 0 stp_state 0
        ip -n gwha-sw link set "br-$segment" up
    done
    two_box_host gwlab-lan lan 192.168.10.2/24 "$1"
    two_box_host gwlab-wan wan 10.0.0.2/24 "$2"
    for box in a b; do
        for segment in lan wan; do
            ip link add "gwha-$box-$segment" type veth peer name "$box-$segment" netns gwha-sw
            ip -n gwha-sw link set "$box-$segment" master "br-$segment" up
            sysctl -qw "net.ipv6.conf.gwha-$box-$segment.disable_ipv6=1"
            ip link set "gwha-$box-$segment" up
            ethtool -K "gwha-$box-$segment" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
        done
    done
}

# two_box_host NS SEGMENT ADDRESS GATEWAY: a host on SEGMENT of two_box_lab_up.
two_box_host() {
    ip netns del "$1" 2>/dev/null || true
    ip netns add "$1"
    ip link add "h-$2" netns gwha-sw type veth peer name eth0 netns "$1"
    ip -n gwha-sw link set "h-$2" master "br-$2" up
    ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip -n "$1" link set lo up
    ip -n "$1" addr add "$3" dev eth0
    ip -n "$1" link set eth0 up
    ip netns exec "$1" ethtool -K eth0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
    ip -n "$1" route add default via "$4"
}

# two_box_lab_down: what two_box_lab_up made, and what runs in it (cleanup removes the hosts).
two_box_lab_down() {
    local ns
    for ns in gwha-a gwha-b gwha-sw; do
        remove_netns "$ns"
    done
}

# lan_joins_ipv6 PREFIX: the LAN host turns IPv6 on as a host joining the link does (DAD, a
# Router Solicitation, SLAAC from the advertisement); waits for its global address in
# PREFIX (e.g. 2001:db8:10:) past its own DAD, and for a default route via a link-local
# router. Sets LAN_ADDRESS and LAN_DEFAULT_ROUTE, or fails.
lan_joins_ipv6() {
    lan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0 \
        net.ipv6.conf.eth0.accept_ra=1 net.ipv6.conf.eth0.autoconf=1 \
        net.ipv6.conf.eth0.accept_dad=1
    LAN_ADDRESS=
    for _ in $(seq 1 50); do
        LAN_ADDRESS=$(lan ip -6 -o addr show dev eth0 scope global | awk '{print $4}' | grep "^$1" || true)
        # Tentative until its own DAD is over.
        if [[ -n $LAN_ADDRESS ]] && ! lan ip -6 -o addr show dev eth0 scope global | grep -q tentative; then
            break
        fi
        sleep 0.2
    done
    [[ -n $LAN_ADDRESS ]] || fail "the LAN host formed no SLAAC address in ${1}:/64 from the gateway's advertisement"
    LAN_DEFAULT_ROUTE=
    for _ in $(seq 1 20); do
        LAN_DEFAULT_ROUTE=$(lan ip -6 route show default)
        [[ -n $LAN_DEFAULT_ROUTE ]] && break
        sleep 0.2
    done
    [[ $LAN_DEFAULT_ROUTE == *"via fe80::"*"dev eth0"* ]] ||
        fail "the host did not take the gateway as its IPv6 default router: '$LAN_DEFAULT_ROUTE'"
}

# expect_output "description" "pattern" command...: the command's output must match.
expect_output() {
    local what=$1 pattern=$2
    shift 2
    local out
    out=$("$@" 2>&1) || true
    grep -Eq "$pattern" <<<"$out" || fail "$what: expected /$pattern/ in: $out"
    pass "$what"
}

# Open vSwitch in userspace (no kernel module), its database and daemons under $WORK/ovs:
# start_ovs starts them, vsctl talks to them, stop_ovs stops them (call it from the EXIT trap).
OVS=$WORK/ovs
vsctl() { ovs-vsctl --db="unix:$OVS/db.sock" "$@"; }
start_ovs() {
    mkdir -p "$OVS"
    export OVS_RUNDIR=$OVS OVS_LOGDIR=$OVS OVS_DBDIR=$OVS OVS_SYSCONFDIR=$OVS
    ovsdb-tool create "$OVS/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server "$OVS/conf.db" --remote="punix:$OVS/db.sock" --pidfile="$OVS/ovsdb-server.pid" \
        --detach --log-file="$OVS/ovsdb-server.log" 2>/dev/null
    vsctl --no-wait init
    ovs-vswitchd "unix:$OVS/db.sock" --disable-system --pidfile="$OVS/ovs-vswitchd.pid" --detach \
        --log-file="$OVS/ovs-vswitchd.log" 2>/dev/null
}
stop_ovs() {
    for daemon in ovs-vswitchd ovsdb-server; do
        [[ -f $OVS/$daemon.pid ]] && kill "$(cat "$OVS/$daemon.pid")" 2>/dev/null || true
    done
}

# dhclient_script FILE: a dhclient script that sets the lease's address and default route only
# (nothing on the host, such as resolv.conf, is touched) and writes "address dns-servers" to
# lease beside FILE.
dhclient_script() {
    cat >"$1" <<'SH'
#!/bin/sh
case "$reason" in
    PREINIT) ip link set dev "$interface" up ;;
    BOUND|RENEW|REBIND|REBOOT)
        ip addr replace "$new_ip_address/$new_subnet_mask" dev "$interface"
        ip route replace default via "${new_routers%% *}"
        echo "$new_ip_address $new_domain_name_servers" >"$(dirname "$0")/lease" ;;
esac
exit 0
SH
    chmod +x "$1"
}

# frr_start NAME NS CONFIG: FRR's zebra and bgpd in NS, everything in $FRR_DIR/NAME (a
# directory the frr user can reach, which the test makes and removes). zebra gets
# an empty config (the integrated file is bgpd's, zebra would only complain about it).
frr_start() {
    local dir=$FRR_DIR/$1 ns=$2
    mkdir -p "$dir"
    cp "$3" "$dir/frr.conf"
    : >"$dir/zebra.conf"
    chown -R frr:frr "$dir"
    ip netns exec "$ns" /usr/lib/frr/zebra -d -f "$dir/zebra.conf" -i "$dir/zebra.pid" \
        -z "$dir/zserv.api" --vty_socket "$dir" -P 0 --log "file:$dir/zebra.log" \
        >>"$dir/zebra.log" 2>&1 ||
        fail "zebra ($1) did not start: $(tail -n 5 "$dir/zebra.log" 2>/dev/null)"
    ip netns exec "$ns" /usr/lib/frr/bgpd -d -f "$dir/frr.conf" -i "$dir/bgpd.pid" \
        -z "$dir/zserv.api" --vty_socket "$dir" -P 0 --log "file:$dir/bgpd.log" \
        >>"$dir/bgpd.log" 2>&1 ||
        fail "bgpd ($1) did not start: $(tail -n 5 "$dir/bgpd.log" 2>/dev/null)"
}
vty() { # NAME vtysh-args...
    local name=$1
    shift
    vtysh --vty_socket "$FRR_DIR/$name" "$@"
}
