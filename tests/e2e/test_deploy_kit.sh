#!/usr/bin/env bash
# The deployment kit (Dockerfile, systemd unit, Prometheus and Grafana files, the X550 config
# and guide) checked with the tools that consume them, without the lab, a NIC or a Docker
# engine:
#   - hadolint lints the Dockerfile (.hadolint.yaml says which rule is waived and why);
#   - the Dockerfile's build stage installs every build package scripts/deps.sh installs, and
#     every other package there is known to be for the lab and tests only, so the two install
#     paths cannot drift; its runtime stage has every DPDK library the binary links (ldd) and
#     the drivers the EAL loads; every COPY source exists; the image build validates every
#     shipped config (a loop over /etc/gateway/*.toml, or each configs/*.toml named); its
#     HEALTHCHECK is `gateway healthcheck` with the CMD's --config (so it follows
#     metrics.listen, wherever that is) and EXPOSE is the default metrics port, 9469;
#   - systemd-analyze verifies the unit (with and without the vdev drop-in) and
#     `systemd-analyze security` rates its exposure at most 2.0 (least privilege: only
#     CAP_NET_ADMIN, for the kernel twins' tap devices, sandboxed); gateway.default's
#     GATEWAY_PCI_DEVICES binds every PCI device (interfaces[].device, bond members) of every
#     shipped config and lists none that no config uses; gateway-setup.sh reserves hugepages
#     per NUMA node and checks nohz_full and the PCIe link;
#   - promtool checks the scrape config and the alert rules, and runs the rules' unit tests;
#     every alert the guide lists exists, has a unit test and a runbook annotation;
#   - the Grafana dashboard is well-formed, has the panels the guide promises, and every query
#     keeps the instance label (no sum/avg/max/min/count/topk/... without `by (..., instance)`),
#     so that with the instance variable on "All" no panel adds two gateways together;
#   - gateway check-config accepts the shipped configs; no config listens on node_exporter's
#     9100 or on 0.0.0.0, and none puts EAL memory options in extra_args; the guide names only
#     files that exist and advises no --socket-mem in eal.extra_args.
# Metric names in the dashboard and alerts are checked against the code by the Rust test
# gateway/tests/deploy_kit.rs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GATEWAY=${GATEWAY:-$ROOT/target/release/gateway}
WORK=$(mktemp -d /tmp/gateway-deploy-kit.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
pass() { echo "ok: $*"; }

# --- Dockerfile: hadolint ----------------------------------------------------------------------
command -v hadolint >/dev/null || fail "hadolint is not installed: run scripts/deps.sh (make deps)"
hadolint --config .hadolint.yaml Dockerfile >"$WORK/hadolint.txt" 2>&1 \
    || fail "hadolint Dockerfile:
$(cat "$WORK/hadolint.txt")"
pass "hadolint accepts the Dockerfile ($(hadolint --version | grep -o '[0-9][0-9.]*' | head -1))"

# --- Dockerfile: packages and structure ----------------------------------------------------------
# The lab and test packages of scripts/deps.sh that an image build does not need. A package
# added to deps.sh must go into the Dockerfile's build stage or onto this list.
# (nftables: the Linux router that make lab-bench compares against; openvswitch-switch: the
# independent LACP partner of the bond test; dnsmasq-base, isc-dhcp-client: the kernel twins' test;
# frr: the BGP test; python3-scapy: the PPPoE test ISP; kea-dhcp6-server, radvd: the IPv6 test
# ISP; keepalived: the HA pair's test, on the host beside the gateway in production; natpmpc,
# miniupnpc: the port mapping test's LAN clients. dhcpcd
# is installed by deps.sh apart from this list, under its release's name.)
LAB_ONLY="dpdk-dev iperf3 iproute2 ethtool procps iputils-ping python3 prometheus nftables openvswitch-switch dnsmasq-base isc-dhcp-client frr rsyslog nfdump python3-scapy kea-dhcp6-server radvd tshark keepalived natpmpc miniupnpc"
# The build packages both paths must install (scripts/deps.sh).
BUILD="libdpdk-dev clang libclang-dev pkg-config build-essential"
ldd_out=
if [[ -x $GATEWAY ]]; then
    ldd_out=$(ldd "$GATEWAY") || fail "ldd $GATEWAY"
fi
LAB_ONLY=$LAB_ONLY BUILD=$BUILD LDD_OUT=$ldd_out python3 - <<'PY' || fail "Dockerfile checks (above)"
import json, os, re, shlex, subprocess, sys

errors = []
def check(ok, message):
    if not ok:
        errors.append(message)

text = open("Dockerfile").read()
# Instructions, with continuation lines joined and comments dropped.
instructions, current = [], ""
for line in text.splitlines():
    if not current and (not line.strip() or line.lstrip().startswith("#")):
        continue
    if current and line.lstrip().startswith("#"):
        continue
    current += line.rstrip()
    if current.endswith("\\"):
        current = current[:-1] + " "
        continue
    instructions.append(current.strip())
    current = ""
stages = []
for ins in instructions:
    word = ins.split()[0].upper()
    if word == "FROM":
        stages.append({"from": ins.split()[1:], "ins": []})
    elif stages:
        stages[-1]["ins"].append((word, ins[len(word):].strip()))
check(len(stages) == 2, f"expected 2 stages (build, runtime), found {len(stages)}")
build, runtime = stages[0], stages[-1]
check(build["from"] == ["debian:bookworm", "AS", "build"], f"build stage: FROM {build['from']}")
check(runtime["from"] == ["debian:bookworm-slim"], f"runtime stage: FROM {runtime['from']}")

def apt_packages(stage):
    pkgs = []
    for word, args in stage["ins"]:
        if word != "RUN" or "apt-get install" not in args:
            continue
        for command in re.split(r"&&|;", args):
            if "apt-get install" in command:
                pkgs += [t for t in shlex.split(command.split("apt-get install", 1)[1])
                         if not t.startswith("-")]
    return pkgs

build_pkgs, runtime_pkgs = apt_packages(build), apt_packages(runtime)

deps = open("scripts/deps.sh").read()
match = re.search(r"^packages=\((.*?)\)", deps, re.S | re.M)
check(match, "scripts/deps.sh: no packages=(...) list")
deps_pkgs = match.group(1).split() if match else []
for pkg in os.environ["BUILD"].split():
    check(pkg in deps_pkgs, f"build package {pkg} is not in scripts/deps.sh any more")
    check(pkg in build_pkgs, f"build package {pkg} (scripts/deps.sh) is missing from the Dockerfile's build stage")
lab_only = os.environ["LAB_ONLY"].split()
for pkg in deps_pkgs:
    check(pkg in build_pkgs or pkg in lab_only,
          f"scripts/deps.sh installs {pkg}: add it to the Dockerfile's build stage, or to LAB_ONLY in tests/e2e/test_deploy_kit.sh if images do not need it")
for pkg in ("curl", "ca-certificates"):
    check(pkg in build_pkgs, f"build stage: {pkg} (for rustup) missing")

# The runtime stage: the drivers the EAL loads from its plugin directory, and iproute2 for the
# kernel twins. The health check is the gateway itself, so no curl.
needed = ["librte-bus-pci23", "librte-bus-vdev23", "librte-mempool-ring23", "librte-net-ixgbe23",
          "librte-net-bond23", "librte-net-af-packet23", "librte-net-af-xdp23", "librte-net-tap23",
          "librte-net-ring23", "librte-net-null23", "iproute2"]
for pkg in needed:
    check(pkg in runtime_pkgs, f"runtime stage: {pkg} missing")
check("curl" not in runtime_pkgs, "runtime stage installs curl, which nothing uses (the HEALTHCHECK is gateway healthcheck)")
check(not any(p.endswith("-dev") for p in runtime_pkgs), f"runtime stage installs -dev packages: {runtime_pkgs}")

# Every DPDK library the built binary links must come from a package the runtime installs.
ldd = os.environ.get("LDD_OUT", "")
if ldd:
    for lib, path in re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M):
        if path == "not":
            errors.append(f"ldd: {lib} not found on this machine")
            continue
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        pkg = owner.stdout.split(":")[0] if owner.returncode == 0 else None
        if pkg and pkg.startswith("librte-"):
            check(pkg in runtime_pkgs, f"the binary links {lib} from {pkg}, which the runtime stage does not install")
    print(f"  ldd: every librte library the release binary links is in the runtime stage")
else:
    print("  ldd: no release binary; runtime libraries not cross-checked against it")

# The package names must exist in this Debian (bookworm) where apt knows DPDK 22.11.
known = subprocess.run(["apt-cache", "policy", "librte-eal23"], capture_output=True, text=True)
if known.returncode == 0 and "Candidate: 22.11" in known.stdout:
    policy = subprocess.run(["apt-cache", "policy"] + build_pkgs + runtime_pkgs,
                            capture_output=True, text=True).stdout
    candidates = dict(re.findall(r"^(\S+?)(?::\S+)?:\n\s+Installed: .*\n\s+Candidate: (.*)$", policy, re.M))
    for pkg in build_pkgs + runtime_pkgs:
        check(candidates.get(pkg, "(none)") != "(none)", f"apt knows no package {pkg}")
    print(f"  apt: all {len(build_pkgs) + len(runtime_pkgs)} package names exist here")
else:
    print("  apt: this machine's apt does not list DPDK 22.11; package names not looked up")

# Structure docs/deployment.md and the guide rely on.
def stage_has(stage, word, pattern):
    return any(w == word and re.search(pattern, a) for w, a in stage["ins"])
check(stage_has(build, "RUN", r"rustup|sh\.rustup\.rs"), "build stage: Rust is not installed with rustup")
check(stage_has(build, "RUN", r"--profile minimal"), "build stage: rustup without --profile minimal")
toolchain = re.search(r"ARG RUST_TOOLCHAIN=(\d+)\.(\d+)\.(\d+)", text)
check(toolchain, "build stage: the Rust toolchain is not pinned (ARG RUST_TOOLCHAIN=x.y.z)")
rust_version = re.search(r'rust-version = "(\d+)\.(\d+)"', open("Cargo.toml").read())
if toolchain and rust_version:
    check(tuple(map(int, toolchain.groups()[:2])) >= tuple(map(int, rust_version.groups())),
          "the pinned toolchain is older than the workspace's rust-version")
check(stage_has(build, "RUN", r"cargo build --release (--locked )?-p gateway"), "build stage: no cargo build --release -p gateway")
# The dependency layer: every workspace member's manifest is there before the first build.
members = re.search(r"members\s*=\s*\[(.*?)\]", open("Cargo.toml").read(), re.S).group(1)
first_build = next(i for i, (w, a) in enumerate(build["ins"]) if w == "RUN" and "cargo build" in a)
copied = " ".join(a for w, a in build["ins"][:first_build] if w == "COPY")
for member in re.findall(r'"([^"]+)"', members):
    check(f"{member}/Cargo.toml" in copied or re.search(rf"(^|\s){member}/\s", copied + " "),
          f"dependency layer: workspace member {member} has no Cargo.toml copied before the first cargo build")
check("Cargo.lock" in copied, "dependency layer: Cargo.lock not copied before the first cargo build")
check(stage_has(runtime, "COPY", r"--from=build \S+ /usr/local/bin/gateway$"), "runtime: the binary is not copied to /usr/local/bin/gateway")
check(stage_has(runtime, "COPY", r"^configs/ /etc/gateway/$"), "runtime: configs/ not copied to /etc/gateway/")
check(stage_has(runtime, "ENTRYPOINT", r'^\["gateway"\]$'), 'runtime: ENTRYPOINT ["gateway"] missing')
check(stage_has(runtime, "CMD", r'^\["run", "--config", "/etc/gateway/gateway.toml"\]$'), "runtime: CMD is not run --config /etc/gateway/gateway.toml")

# EXPOSE is the gateway's default metrics port (MetricsConfig's default in gateway/src/config/mod.rs),
# 9469: not node_exporter's 9100, which the gateway cannot bind where node_exporter runs.
DEFAULT_PORT = 9469
config_rs = open("gateway/src/config/mod.rs").read()
default_impl = re.search(r"impl Default for MetricsConfig\b.*?\n}\n", config_rs, re.S)
code_port = None
if default_impl:
    port = re.search(r"\[127, 0, 0, 1\],\s*(\w+)\s*\)", default_impl.group(0))
    if port and port.group(1).isdigit():
        code_port = int(port.group(1))
    elif port:  # a named constant
        const = re.search(rf"const {port.group(1)}: u16 = (\d+)", config_rs)
        code_port = int(const.group(1)) if const else None
check(code_port == DEFAULT_PORT,
      f"gateway/src/config/mod.rs: MetricsConfig's default port is {code_port or '(not found)'}, not {DEFAULT_PORT}")
exposed = [a for w, a in runtime["ins"] if w == "EXPOSE"]
check(exposed == [str(DEFAULT_PORT)], f"runtime: EXPOSE {exposed}, want [{DEFAULT_PORT}] (the default metrics port)")
# The HEALTHCHECK is `gateway healthcheck --config <the CMD's config>`: it reads metrics.listen
# from the config the gateway runs with, so moving the metrics to a management address (as the
# X550 configs do) needs no edit here. A hard-coded address or port would not follow it.
def json_list(args):
    try:
        value = json.loads(args)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None
health = [a for w, a in runtime["ins"] if w == "HEALTHCHECK"]
check(len(health) == 1, f"runtime: {len(health)} HEALTHCHECK instructions, want 1")
cmd = next((json_list(a) for w, a in runtime["ins"] if w == "CMD"), None) or []
run_config = cmd[cmd.index("--config") + 1] if "--config" in cmd[:-1] else None
if health:
    match = re.search(r"(?:^|\s)CMD\s+(\[.*\])\s*$", health[0])
    probe = json_list(match.group(1)) if match else None
    check(probe is not None, f"runtime: HEALTHCHECK is not in exec form (CMD [...]): {health[0]}")
    if probe is not None:
        check(probe[:2] == ["gateway", "healthcheck"],
              f"runtime: HEALTHCHECK runs {probe[:2]}, not gateway healthcheck")
        probe_config = probe[probe.index("--config") + 1] if "--config" in probe[:-1] else None
        check(run_config is not None and probe_config == run_config,
              f"runtime: HEALTHCHECK --config {probe_config}, CMD --config {run_config}: they must be the same file")
    check(not re.search(r"https?://|127\.0\.0\.1|:9100\b|:9469\b", health[0]),
          f"runtime: HEALTHCHECK hard-codes an address: {health[0]}")

# The image build validates every shipped config: a loop over /etc/gateway/*.toml (configs/ is
# copied there) that runs check-config on each, or each file of configs/ named.
shipped = sorted(os.path.basename(p) for p in os.listdir("configs") if p.endswith(".toml"))
runs = " ".join(a for w, a in runtime["ins"] if w == "RUN")
loop = re.search(r"for (\w+) in /etc/gateway/\*\.toml\s*;\s*do\b(.*?)\bdone\b", runs)
looped = bool(loop and re.search(r"check-config\s+\"?\$\{?" + loop.group(1) + r"\b", loop.group(2)))
named = set(re.findall(r"check-config\s+/etc/gateway/(\S+\.toml)", runs))
check(looped or set(shipped) <= named,
      f"runtime: the image build does not validate every shipped config ({', '.join(shipped)}): "
      f"loop over /etc/gateway/*.toml with gateway check-config, or name each; named: {sorted(named)}")
# Every file the build context must provide exists, and every config the image checks is shipped.
for stage in stages:
    for word, args in stage["ins"]:
        if word == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                check(os.path.exists(source), f"COPY {source}: no such file in the repository")
for config in re.findall(r"check-config /etc/gateway/(\S+)", text):
    check(os.path.exists(f"configs/{config}"), f"the image checks /etc/gateway/{config}, which configs/ lacks")
# The capabilities comment: least privilege, every capability dropped but the one vfio-pci
# needs, the lab vdevs' two named, and the ones not needed said why.
check(re.search(r"^#.*--cap-drop ALL --cap-add SYS_NICE\b", text, re.M), "the capabilities comment lacks --cap-drop ALL --cap-add SYS_NICE")
check(re.search(r"^#.*--cap-add NET_RAW --cap-add NET_ADMIN\b", text, re.M), "the capabilities comment lacks the vdev labs' --cap-add NET_RAW --cap-add NET_ADMIN")
for cap in ("SYS_ADMIN", "SYS_RAWIO", "IPC_LOCK"):
    check(re.search(rf"^#   {cap} ", text, re.M), f"the capabilities comment does not say why {cap} is not needed")
    check(not re.search(rf"^#.*--cap-add {cap}\b", text, re.M), f"the capabilities comment still adds {cap}")
check("--privileged" in text, "the capabilities comment does not mention --privileged")

for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
pass "Dockerfile: build stage installs the build packages of scripts/deps.sh; runtime stage has the DPDK libraries and drivers"

# --- systemd -------------------------------------------------------------------------------------
unit=deploy/systemd/gateway.service
for line in 'ExecStart=/usr/local/bin/gateway run --config /etc/gateway/gateway.toml' \
    'ExecReload=/usr/local/bin/gateway ctl config reload' 'Restart=on-failure' 'LimitMEMLOCK=infinity' \
    'EnvironmentFile=-/etc/default/gateway' 'ExecStartPre=+/usr/local/sbin/gateway-setup.sh' \
    'User=gateway' 'CapabilityBoundingSet=CAP_NET_ADMIN' 'AmbientCapabilities=CAP_NET_ADMIN' \
    'NoNewPrivileges=yes' 'StateDirectory=gateway' 'ProtectSystem=strict' 'DevicePolicy=closed' \
    'DeviceAllow=char-vfio rw' 'DeviceAllow=/dev/net/tun rw' 'SystemCallFilter=@system-service'; do
    grep -qxF "$line" "$unit" || fail "$unit lacks the line: $line"
done
# Every sandboxing line says why (a comment right above it, or above its group).
python3 - "$unit" <<'PY' || fail "$unit: a setting of [Service] without a comment saying why (above)"
import sys
lines = open(sys.argv[1]).read().splitlines()
service = lines.index("[Service]")
bare, commented = [], False
for line in lines[service + 1:]:
    if line.startswith("["):
        break
    if line.startswith("#"):
        commented = True
    elif not line.strip():
        commented = False
    elif not commented:
        bare.append(line)
for line in bare:
    print("  " + line, file=sys.stderr)
sys.exit(1 if bare else 0)
PY
grep -qx 'u gateway - "DPDK gateway" /var/lib/gateway' deploy/systemd/gateway.sysusers \
    || fail "deploy/systemd/gateway.sysusers does not create the gateway user"
bash -n deploy/systemd/gateway-setup.sh || fail "gateway-setup.sh: syntax"
[[ -x deploy/systemd/gateway-setup.sh ]] || fail "gateway-setup.sh is not executable"
grep -q 'dpdk-devbind.py' deploy/systemd/gateway-setup.sh || fail "gateway-setup.sh does not bind with dpdk-devbind.py"
grep -q 'mount -t hugetlbfs' deploy/systemd/gateway-setup.sh || fail "gateway-setup.sh does not mount hugetlbfs"
grep -q 'chown "$RUN_AS" "/dev/vfio/$group"' deploy/systemd/gateway-setup.sh \
    || fail "gateway-setup.sh does not give the vfio group devices to the gateway user"
# Boot-time hugepages=N splits the pages evenly over the NUMA nodes: the script reserves them
# per node, and it checks what the guide asks to check (nohz_full active, the PCIe link).
grep -qF '/sys/devices/system/node/node$node/hugepages/' deploy/systemd/gateway-setup.sh \
    || fail "gateway-setup.sh does not reserve hugepages per NUMA node"
grep -q '^GATEWAY_HUGEPAGES_1G_NODES=' deploy/systemd/gateway.default \
    || fail "gateway.default does not set the per-node hugepages (GATEWAY_HUGEPAGES_1G_NODES)"
grep -q 'nohz_full' deploy/systemd/gateway-setup.sh \
    || fail "gateway-setup.sh does not check that nohz_full is active on the worker CPUs"
grep -q 'current_link_speed' deploy/systemd/gateway-setup.sh && grep -q 'current_link_width' deploy/systemd/gateway-setup.sh \
    || fail "gateway-setup.sh does not check the ports' PCIe link speed and width"
if command -v systemd-analyze >/dev/null; then
    # verify insists that the executables exist: point the unit at stand-ins in $WORK.
    mkdir -p "$WORK/systemd"
    printf '#!/bin/sh\n' >"$WORK/systemd/gateway"
    cp deploy/systemd/gateway-setup.sh "$WORK/systemd/gateway-setup.sh"
    chmod +x "$WORK/systemd/gateway" "$WORK/systemd/gateway-setup.sh"
    sed -e "s#/usr/local/bin/gateway#$WORK/systemd/gateway#g" \
        -e "s#/usr/local/sbin/gateway-setup.sh#$WORK/systemd/gateway-setup.sh#g" \
        "$unit" >"$WORK/systemd/gateway.service"
    systemd-analyze verify "$WORK/systemd/gateway.service" >"$WORK/verify.txt" 2>&1 \
        || fail "systemd-analyze verify $unit: $(cat "$WORK/verify.txt")"
    # It only warns about unknown keys and sections: any output is a failure here.
    [[ ! -s $WORK/verify.txt ]] || fail "systemd-analyze verify $unit: $(cat "$WORK/verify.txt")"
    pass "systemd-analyze verify accepts $unit"
    # Exposure 0.0 (locked down) to 10.0 (unprotected); --threshold is in tenths. The unit
    # before the sandboxing (root, every capability) rated 9.6; with it, 1.6, and 1.8 with
    # CAP_NET_ADMIN for the kernel twins. What remains is what a dataplane needs: devices
    # (vfio, tun), the host's network, netlink and UNIX sockets.
    systemd-analyze security --offline=yes --threshold=20 "$WORK/systemd/gateway.service" \
        >"$WORK/security.txt" 2>&1 \
        || fail "systemd-analyze security rates $unit above 2.0: $(grep -E '✗|Overall' "$WORK/security.txt")"
    exposure=$(grep -oE 'Overall exposure level for gateway.service: [0-9.]+' "$WORK/security.txt" | grep -oE '[0-9.]+$')
    [[ -n $exposure ]] || fail "systemd-analyze security printed no exposure: $(cat "$WORK/security.txt")"
    grep -qE '✓ CapabilityBoundingSet=~CAP_SYS_ADMIN' "$WORK/security.txt" \
        || fail "systemd-analyze security: $unit keeps CAP_SYS_ADMIN"
    grep -qE '✓ CapabilityBoundingSet=~CAP_NET_.*RAW' "$WORK/security.txt" \
        || fail "systemd-analyze security: $unit keeps CAP_NET_RAW"
    pass "systemd-analyze security rates $unit at $exposure (at most 2.0)"
    # The vdev drop-in (af_packet, af_xdp, tap labs) is valid too, and adds only what it says.
    mkdir -p "$WORK/systemd/gateway.service.d"
    cp deploy/systemd/gateway-vdev.conf "$WORK/systemd/gateway.service.d/vdev.conf"
    systemd-analyze verify "$WORK/systemd/gateway.service" >"$WORK/verify.txt" 2>&1 \
        || fail "systemd-analyze verify with gateway-vdev.conf: $(cat "$WORK/verify.txt")"
    [[ ! -s $WORK/verify.txt ]] || fail "systemd-analyze verify with gateway-vdev.conf: $(cat "$WORK/verify.txt")"
    systemd-analyze security --offline=yes --threshold=30 "$WORK/systemd/gateway.service" \
        >"$WORK/security.txt" 2>&1 \
        || fail "with gateway-vdev.conf, exposure above 3.0: $(grep -E '✗|Overall' "$WORK/security.txt")"
    grep -qE '✗ CapabilityBoundingSet=~CAP_NET_ADMIN' "$WORK/security.txt" \
        || fail "gateway-vdev.conf does not grant CAP_NET_ADMIN"
    grep -qE '✓ CapabilityBoundingSet=~CAP_SYS_ADMIN' "$WORK/security.txt" \
        || fail "gateway-vdev.conf grants CAP_SYS_ADMIN"
    pass "the vdev drop-in verifies and grants only CAP_NET_RAW and CAP_NET_ADMIN"
    rm -r "$WORK/systemd/gateway.service.d"
    # Each feature the shipped configs use or suggest, against what it needs of the sandbox
    # (this machine has no systemd as PID 1 to run the unit): the unit's system call filter,
    # namespace filter, capabilities and devices are evaluated as systemd composes them
    # (allow list, then removals and additions in order; drop-ins after the unit), with
    # systemd-analyze's own group lists.
    python3 - "$unit" deploy/systemd/gateway-netns.conf configs/*.toml <<'PY' ||
import functools, re, subprocess, sys
unit, netns_dropin, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
@functools.cache
def expand(group):
    """A system call group's calls, its nested groups expanded (systemd-analyze's lists)."""
    listing = subprocess.run(["systemd-analyze", "syscall-filter", group],
                             capture_output=True, text=True, check=True).stdout
    calls = set()
    for line in listing.splitlines()[1:]:
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        calls |= expand(item) if item.startswith("@") else {item}
    return frozenset(calls)
def properties(*files):
    props = {}
    for path in files:
        section = None
        for line in open(path).read().splitlines():
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                props.setdefault(key, []).append(value)
    return props
def syscalls(props):
    allowed = None
    for value in props.get("SystemCallFilter", []):
        deny = value.startswith("~")
        names = set()
        for item in value.lstrip("~").split():
            names |= expand(item) if item.startswith("@") else {item}
        if allowed is None:
            allowed = set() if deny else names
            if deny:
                raise SystemExit("a deny-list filter is not what the unit uses")
        elif deny:
            allowed -= names
        else:
            allowed |= names
    return allowed
def namespaces(props):
    values = props.get("RestrictNamespaces", [])
    allowed = set()
    for value in values:
        allowed = set() if value == "yes" else allowed | set(value.split())
    return allowed if values else {"net", "mnt", "user", "pid", "ipc", "uts", "cgroup"}
def capabilities(props):
    return set(props.get("AmbientCapabilities", [""])[-1].split()) & set(props.get("CapabilityBoundingSet", [""])[-1].split())
text = "\n".join(open(c).read() for c in configs)
features = {
    # ctl.group: chown(socket, -1, group)
    "ctl.group": (re.search(r'\bgroup = "', text), [unit],
                  lambda p: {"chown", "fchownat"} <= syscalls(p)),
    # kernel twins: tap devices and their addresses
    "kernel twins": (re.search(r"^\[kernel_twins\]", text, re.M), [unit],
                     lambda p: "CAP_NET_ADMIN" in capabilities(p) and "/dev/net/tun rw" in p.get("DeviceAllow", [])),
    # kernel_twins.netns: setns into the twins' namespace (ip -n, the netlink thread)
    "kernel_twins.netns": (re.search(r"^#? *netns = ", text, re.M), [unit, netns_dropin],
                           lambda p: "setns" in syscalls(p) and "net" in namespaces(p) and "CAP_SYS_ADMIN" in capabilities(p)),
}
failed = []
for name, (used, files, granted) in features.items():
    if not used:
        failed.append(f"{name}: no shipped config uses or suggests it any more; drop it from this map")
    elif not granted(properties(*files)):
        failed.append(f"{name}: {' + '.join(files)} forbid what it needs")
    else:
        print(f"  {name}: granted by {' + '.join(files)}")
for line in failed:
    print("  " + line, file=sys.stderr)
sys.exit(1 if failed else 0)
PY
        fail "a feature of the shipped configs is forbidden by the unit's sandbox (above)"
    pass "the unit (and gateway-netns.conf for kernel_twins.netns) allows what each feature of the shipped configs needs"
else
    pass "$unit has its key lines (systemd-analyze not installed: not verified)"
fi
# The example /etc/default/gateway binds every PCI device of every shipped config (the devices
# of interfaces[].device and the members of bonds), so that each config starts with it as is,
# and lists none that no shipped config uses (a stray address could take a host NIC away).
# Its GATEWAY_CONFIG is the config the unit runs, which gateway-setup.sh reads.
defaults_devices=$(bash -c 'source deploy/systemd/gateway.default && echo "$GATEWAY_PCI_DEVICES"')
defaults_config=$(bash -c 'source deploy/systemd/gateway.default && echo "$GATEWAY_CONFIG"')
DEVICES=$defaults_devices python3 - configs/*.toml <<'PY' || fail "gateway.default's GATEWAY_PCI_DEVICES (above)"
import os, re, sys
try:
    import tomllib
except ImportError:
    sys.exit("  python3 has no tomllib (3.11 or later is needed to read the configs)")
pci = re.compile(r"([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
def full(device):
    name = device.split(",")[0].strip().lower()
    if not pci.fullmatch(name):
        return None
    return name if name.count(":") == 2 else "0000:" + name
errors, used = [], {}
listed = set()
for dev in os.environ["DEVICES"].split():
    if full(dev) is None:
        errors.append(f"GATEWAY_PCI_DEVICES: {dev!r} is not a PCI address")
    else:
        listed.add(full(dev))
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        config = tomllib.load(f)
    for iface in config.get("interfaces", []):
        for device in [iface.get("device", "")] + (iface.get("bond") or {}).get("members", []):
            dev = full(device)
            if dev is None:
                continue
            used.setdefault(dev, []).append(f"{path} ({iface.get('name')})")
            if dev not in listed:
                errors.append(f"{path} uses {dev} (interface {iface.get('name')}), which GATEWAY_PCI_DEVICES does not bind")
for dev in sorted(listed - set(used)):
    errors.append(f"GATEWAY_PCI_DEVICES binds {dev}, which no shipped config uses")
if not used:
    errors.append("no shipped config uses a PCI device: the check checked nothing")
for e in errors:
    print("  " + e, file=sys.stderr)
for dev, where in sorted(used.items()):
    print(f"  {dev}: {', '.join(where)}")
sys.exit(1 if errors else 0)
PY
grep -qxF "ExecStart=/usr/local/bin/gateway run --config $defaults_config" "$unit" \
    || fail "gateway.default's GATEWAY_CONFIG ($defaults_config) is not the config gateway.service runs"
pass "gateway.default binds every PCI device of every shipped config ($defaults_devices)"

# --- Prometheus ---------------------------------------------------------------------------------
command -v promtool >/dev/null || fail "promtool is not installed (Debian package prometheus; make deps)"
promtool check config deploy/prometheus/prometheus.yml >"$WORK/promtool.txt" 2>&1 \
    || fail "promtool check config: $(cat "$WORK/promtool.txt")"
pass "promtool check config accepts deploy/prometheus/prometheus.yml"
promtool check rules deploy/prometheus/gateway-alerts.yml >"$WORK/promtool.txt" 2>&1 \
    || fail "promtool check rules: $(cat "$WORK/promtool.txt")"
pass "promtool check rules: $(grep -o '[0-9]* rules found' "$WORK/promtool.txt")"
# The alerts docs/deployment.md lists: each exists, has a unit test and a runbook annotation,
# and the guide says what it means.
ALERTS="GatewayDown GatewayTargetMissing GatewayRxMissed GatewayRxQueueDrops GatewayRxNoMbuf
    GatewayWorkerNearCapacity GatewayWorkerStalled GatewayPortLinkDown GatewayPortLinkFlapping
    GatewayPortSpeedLow GatewayBondMemberDown GatewayBondMemberSpeedMismatch
    GatewayConntrackNearlyFull GatewayConntrackFull GatewayNatPortsNearlyExhausted
    GatewayNatPortsExhausted GatewayTxQueueFull GatewayMempoolNearlyEmpty GatewayConfigReloadFailed"
for alert in $ALERTS; do
    grep -q "alert: $alert\$" deploy/prometheus/gateway-alerts.yml || fail "alert $alert missing"
    grep -q "alertname: $alert\$" deploy/prometheus/gateway-alerts.test.yml \
        || fail "alert $alert has no unit test in gateway-alerts.test.yml"
    grep -qw "$alert" docs/deployment.md || fail "docs/deployment.md does not describe alert $alert"
done
python3 - <<'PY' || fail "deploy/prometheus/gateway-alerts.yml: an alert without a runbook annotation (above)"
import re, sys
text = open("deploy/prometheus/gateway-alerts.yml").read()
rules = re.split(r"^\s*- alert: ", text, flags=re.M)[1:]
bare = [rule.split()[0] for rule in rules if not re.search(r"^\s+runbook:", rule, re.M)]
for name in bare:
    print(f"  {name}", file=sys.stderr)
sys.exit(1 if bare else 0)
PY
(cd deploy/prometheus && promtool test rules gateway-alerts.test.yml) >"$WORK/promtool.txt" 2>&1 \
    || fail "promtool test rules: $(cat "$WORK/promtool.txt")"
pass "promtool test rules: every alert fires on its condition and not on healthy series"

# --- Grafana --------------------------------------------------------------------------------------
python3 - <<'PY' || fail "deploy/grafana/gateway-dashboard.json (above)"
import json, sys
errors = []
d = json.load(open("deploy/grafana/gateway-dashboard.json"))
if not 36 <= d.get("schemaVersion", 0) <= 41:
    errors.append(f"schemaVersion {d.get('schemaVersion')} (want about 39)")
variables = {v["name"]: v for v in d["templating"]["list"]}
ds = variables.get("datasource", {})
if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    errors.append("no Prometheus datasource variable named datasource")
ids, titles, exprs = set(), set(), 0
for p in d["panels"]:
    if p["id"] in ids:
        errors.append(f"panel id {p['id']} used twice")
    ids.add(p["id"])
    g = p["gridPos"]
    if g["x"] + g["w"] > 24:
        errors.append(f"panel {p['title']!r} is wider than the grid")
    if p["type"] == "row":
        continue
    titles.add(p["title"])
    if p.get("datasource", {}).get("uid") != "${datasource}":
        errors.append(f"panel {p['title']!r} does not use the datasource variable")
    if not p.get("targets"):
        errors.append(f"panel {p['title']!r} has no query")
    for t in p.get("targets", []):
        exprs += 1
        if not t.get("expr") or t.get("datasource", {}).get("uid") != "${datasource}":
            errors.append(f"panel {p['title']!r}: a target without expr or datasource variable")
for title in ["Throughput", "Packets per second", "Drops by reason", "Worker busy ratio",
              "Conntrack fill", "NAT ports", "Config reload", "LACP state"]:
    if title not in titles:
        errors.append(f"no panel {title!r}")
for e in errors:
    print("  " + e, file=sys.stderr)
print(f"  {len(titles)} panels, {exprs} queries")
sys.exit(1 if errors else 0)
PY
pass "the Grafana dashboard is well-formed and has the promised panels"
# Every dashboard query keeps the instance label: an aggregation (sum, avg, max, ..., topk)
# without `by (..., instance)` (or with `without (..., instance)`) adds the gateways together
# when the instance variable is on "All". A text check of the PromQL, not a parser: strings are
# blanked first, so a label value cannot pass for an aggregation.
python3 - <<'PY' || fail "deploy/grafana/gateway-dashboard.json: queries that aggregate instance away (above)"
import json, re, sys
AGG = re.compile(r"\b(sum|avg|min|max|count|count_values|group|stddev|stdvar|topk|bottomk|"
                 r"quantile|limitk|limit_ratio)\b")
def blank_strings(expr):
    out, i = [], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < len(expr) and expr[j] != c:
                j += 2 if expr[j] == "\\" else 1
            out.append(c + "_" * (min(j, len(expr)) - i - 1) + (c if j < len(expr) else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)
def skip_space(s, i):
    while i < len(s) and s[i].isspace():
        i += 1
    return i
def group_end(s, i):  # s[i] == "(": the index after its closing parenthesis
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j + 1
    return len(s)
def clause(s, i):  # `by (...)` or `without (...)` at i: (kind, labels, end), or None
    m = re.match(r"(by|without)\s*\(([^)]*)\)", s[i:])
    if not m:
        return None
    return m.group(1), {l.strip() for l in m.group(2).split(",") if l.strip()}, i + m.end()
def problems(expr):
    s = blank_strings(expr)
    found = []
    for m in AGG.finditer(s):
        i = skip_space(s, m.end())
        modifier = clause(s, i)
        if modifier:
            i = skip_space(s, modifier[2])
        if i >= len(s) or s[i] != "(":
            continue  # not an aggregation: a label name, a word in a comment
        end = group_end(s, i)
        if modifier is None:
            modifier = clause(s, skip_space(s, end))
        kind, labels = (modifier or ("none", set()))[:2]
        keeps = (kind == "by" and "instance" in labels) or (kind == "without" and "instance" not in labels)
        if not keeps:
            what = f"{kind} ({', '.join(sorted(labels))})" if modifier else "no by (...)"
            found.append(f"{m.group(1)} with {what}: {expr[m.start():end][:100]}")
    return found
def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))
d = json.load(open("deploy/grafana/gateway-dashboard.json"))
errors, exprs = [], 0
for p in panels(d["panels"]):
    for target in p.get("targets", []):
        if target.get("expr"):
            exprs += 1
            errors += [f"panel {p.get('title')!r}: {e}" for e in problems(target["expr"])]
for e in errors:
    print("  " + e, file=sys.stderr)
print(f"  {exprs} queries checked")
sys.exit(1 if errors else 0)
PY
pass "every dashboard query keeps the instance label"

# --- configs and the guide ------------------------------------------------------------------------
if [[ -x $GATEWAY ]]; then
    for config in configs/*.toml; do
        "$GATEWAY" check-config "$config" >"$WORK/check.txt" 2>&1 \
            || fail "gateway check-config $config: $(cat "$WORK/check.txt")"
    done
    pass "gateway check-config accepts $(echo configs/*.toml)"
else
    pass "no release binary: configs checked by the Rust test only (gateway/tests/deploy_kit.rs)"
fi
grep -q '^hugepages = "required"$' configs/x550.toml || fail "configs/x550.toml: hugepages is not required"
# The EAL's memory options come from eal.socket_memory_mb, eal.memory_mb and eal.hugepages: DPDK
# 22.11 refuses -m beside --socket-mem, and the gateway passes -m whenever socket_memory_mb is
# empty, so --socket-mem in extra_args (the old advice) stops the gateway from starting. No
# shipped config puts them there, and neither the configs' comments nor the guide advise it (a
# quoted "--socket-mem..." is a list item to paste into extra_args). No config listens on
# node_exporter's 9100 or on every interface, and the guide mounts the config directory into
# the container, not the file (a rename-write leaves a file mount on the old inode).
python3 - configs/*.toml <<'PY' || fail "configs and docs/deployment.md (above)"
import re, sys, tomllib
errors = []
memory_option = re.compile(r"^(-m\d*|--socket-mem|--socket-limit|--no-huge)(=.*)?$")
quoted_memory_option = re.compile(r"[\"'](--socket-mem|--socket-limit)\b")
for path in sys.argv[1:]:
    text = open(path).read()
    config = tomllib.loads(text)
    for arg in config.get("eal", {}).get("extra_args", []):
        if memory_option.match(arg):
            errors.append(f"{path}: eal.extra_args has {arg!r}: use eal.socket_memory_mb or eal.memory_mb")
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#") and quoted_memory_option.search(line):
            errors.append(f"{path}:{number}: a comment suggests {quoted_memory_option.search(line).group(1)} for extra_args")
    listen = config.get("metrics", {}).get("listen")
    if listen:
        host, _, port = listen.rpartition(":")
        if port == "9100":
            errors.append(f"{path}: metrics.listen {listen}: 9100 is node_exporter's port (the default is 9469)")
        if host in ("0.0.0.0", "[::]", ""):
            errors.append(f"{path}: metrics.listen {listen} serves every interface")
guide = open("docs/deployment.md").read()
if re.search(r"extra_args\s*=\s*\[[^\]]*--socket-(mem|limit)", guide, re.S) or quoted_memory_option.search(guide):
    errors.append("docs/deployment.md advises --socket-mem (or --socket-limit) in eal.extra_args")
for path, text in (("docs/deployment.md", guide), ("Dockerfile", open("Dockerfile").read())):
    for m in re.finditer(r"-v\s+\S*gateway\.toml:\S*", text):
        errors.append(f"{path}: {m.group(0)}: mount the config directory (-v /etc/gateway:/etc/gateway:ro)")
    if "-v /etc/gateway:/etc/gateway:ro" not in text:
        errors.append(f"{path}: no -v /etc/gateway:/etc/gateway:ro (the config directory) in the docker run line")
for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
pass "no shipped config or the guide puts EAL memory options in extra_args; metrics off 9100; the container mounts the config directory"
missing=
for path in $(grep -oP '(?<![\w./-])(deploy|configs|scripts|docs|tests|gateway)/[\w./-]*\w' docs/deployment.md | sort -u); do
    [[ -e $path ]] || missing+=" $path"
done
[[ -z $missing ]] || fail "docs/deployment.md names files that do not exist:$missing"
pass "docs/deployment.md names only files that exist"

# The HA pair's keepalived: its config passes keepalived's own check where the twins it names
# exist (a namespace of two stand-ins), and its unit passes systemd's.
if command -v keepalived >/dev/null; then
    kit_ns=gwkit-twins
    ip netns del "$kit_ns" 2>/dev/null || true
    ip netns add "$kit_ns"
    ip -n "$kit_ns" link add lan type veth peer name wan
    ip netns exec "$kit_ns" keepalived --config-test --use-file=deploy/keepalived/gateway-pair.conf \
        >"$WORK/keepalived.txt" 2>&1 || {
        ip netns del "$kit_ns"
        fail "keepalived --config-test refuses deploy/keepalived/gateway-pair.conf: $(cat "$WORK/keepalived.txt")"
    }
    ip netns del "$kit_ns"
    grep -q 'virtual_address' deploy/keepalived/gateway-pair.conf ||
        fail "deploy/keepalived/gateway-pair.conf does not say which config field its addresses are"
    pass "keepalived accepts deploy/keepalived/gateway-pair.conf"
else
    fail "keepalived is not installed (make deps installs it)"
fi
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify deploy/systemd/gateway-keepalived.service >"$WORK/verify.txt" 2>&1 ||
        fail "systemd-analyze verify gateway-keepalived.service: $(cat "$WORK/verify.txt")"
    # gateway.service, which it requires, is not installed here: that is all it may say.
    if grep -v 'gateway.service' "$WORK/verify.txt" | grep -q .; then
        fail "systemd-analyze verify gateway-keepalived.service: $(cat "$WORK/verify.txt")"
    fi
    pass "systemd-analyze verify accepts deploy/systemd/gateway-keepalived.service"
fi
