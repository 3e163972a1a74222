#!/usr/bin/env bash
# The deployment kit (Dockerfile, systemd unit, Prometheus and Grafana files, the X550 config
# and guide) checked with the tools that consume them, without the lab, a NIC or a Docker
# engine:
#   - hadolint lints the Dockerfile (.hadolint.yaml says which rule is waived and why);
#   - the Dockerfile's build stage installs every build package scripts/deps.sh installs, and
#     every other package there is known to be for the lab and tests only, so the two install
#     paths cannot drift; its runtime stage has every DPDK library the binary links (ldd) and
#     the drivers the EAL loads; every COPY source exists;
#   - systemd-analyze verifies the unit (with and without the vdev drop-in) and
#     `systemd-analyze security` rates its exposure at most 2.0 (least privilege: only
#     CAP_NET_ADMIN, for the kernel twins' tap devices, sandboxed); its PCI devices match
#     configs/x550.toml;
#   - promtool checks the scrape config and the alert rules, and runs the rules' unit tests;
#   - the Grafana dashboard is well-formed and has the panels the guide promises;
#   - gateway check-config accepts the shipped configs; the guide names only files that exist.
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
# frr: the BGP test. dhcpcd is installed by deps.sh apart from this list, under its release's name.)
LAB_ONLY="dpdk-dev iperf3 iproute2 ethtool procps iputils-ping python3 prometheus nftables openvswitch-switch dnsmasq-base isc-dhcp-client frr rsyslog nfdump"
# The build packages both paths must install (README: Requirements).
BUILD="libdpdk-dev clang libclang-dev pkg-config build-essential"
ldd_out=
if [[ -x $GATEWAY ]]; then
    ldd_out=$(ldd "$GATEWAY") || fail "ldd $GATEWAY"
fi
LAB_ONLY=$LAB_ONLY BUILD=$BUILD LDD_OUT=$ldd_out python3 - <<'PY' || fail "Dockerfile checks (above)"
import os, re, shlex, subprocess, sys

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

# The runtime stage: the drivers the EAL loads from its plugin directory, and curl for the
# health check.
needed = ["librte-bus-pci23", "librte-bus-vdev23", "librte-mempool-ring23", "librte-net-ixgbe23",
          "librte-net-bond23", "librte-net-af-packet23", "librte-net-af-xdp23", "librte-net-tap23",
          "librte-net-ring23", "librte-net-null23", "ca-certificates", "curl"]
for pkg in needed:
    check(pkg in runtime_pkgs, f"runtime stage: {pkg} missing")
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

# Structure the README and the guide rely on.
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
check(stage_has(runtime, "EXPOSE", r"^9100$"), "runtime: EXPOSE 9100 missing")
check(stage_has(runtime, "HEALTHCHECK", r"curl .*http://127\.0\.0\.1:9100/metrics"), "runtime: HEALTHCHECK does not curl http://127.0.0.1:9100/metrics")
check(stage_has(runtime, "ENTRYPOINT", r'^\["gateway"\]$'), 'runtime: ENTRYPOINT ["gateway"] missing')
check(stage_has(runtime, "CMD", r'^\["run", "--config", "/etc/gateway/gateway.toml"\]$'), "runtime: CMD is not run --config /etc/gateway/gateway.toml")
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
    'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'LimitMEMLOCK=infinity' \
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
else
    pass "$unit has its key lines (systemd-analyze not installed: not verified)"
fi
# The example /etc/default/gateway binds exactly the PCI devices configs/x550.toml uses.
defaults_devices=$(bash -c 'source deploy/systemd/gateway.default && echo $GATEWAY_PCI_DEVICES')
config_devices=$(grep -oE '^device = "[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"' configs/x550.toml \
    | cut -d'"' -f2 | xargs)
[[ -n $config_devices && $defaults_devices == "$config_devices" ]] \
    || fail "gateway.default binds '$defaults_devices' but configs/x550.toml uses '$config_devices'"
pass "gateway.default binds the PCI devices of configs/x550.toml ($config_devices)"

# --- Prometheus ---------------------------------------------------------------------------------
command -v promtool >/dev/null || fail "promtool is not installed (Debian package prometheus; make deps)"
promtool check config deploy/prometheus/prometheus.yml >"$WORK/promtool.txt" 2>&1 \
    || fail "promtool check config: $(cat "$WORK/promtool.txt")"
pass "promtool check config accepts deploy/prometheus/prometheus.yml"
promtool check rules deploy/prometheus/gateway-alerts.yml >"$WORK/promtool.txt" 2>&1 \
    || fail "promtool check rules: $(cat "$WORK/promtool.txt")"
pass "promtool check rules: $(grep -o '[0-9]* rules found' "$WORK/promtool.txt")"
for alert in GatewayConntrackNearlyFull GatewayNatPortsNearlyExhausted GatewayRxMissed \
    GatewayWorkerBusy GatewayWorkerStalled GatewayConfigReloadFailed GatewayBondMemberDown; do
    grep -q "alert: $alert\$" deploy/prometheus/gateway-alerts.yml || fail "alert $alert missing"
    grep -q "alertname: $alert\$" deploy/prometheus/gateway-alerts.test.yml \
        || fail "alert $alert has no unit test in gateway-alerts.test.yml"
done
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
missing=
for path in $(grep -oP '(?<![\w./-])(deploy|configs|scripts|docs|tests|gateway)/[\w./-]*\w' docs/deploy-x550.md | sort -u); do
    [[ -e $path ]] || missing+=" $path"
done
[[ -z $missing ]] || fail "docs/deploy-x550.md names files that do not exist:$missing"
pass "docs/deploy-x550.md names only files that exist"
