#!/usr/bin/env python3
"""`make bench-compare` (issue 47): the gateway side by side with real dataplanes, one harness.

Every device under test (DUT) gets the same two DPDK `net_pcap` ports and one polling core
(lcore 1; its main thread on lcore 0):
  LAN port  rx_pcap=<flows pcap>,infinite_rx=1: 64-byte (or IMIX) UDP from 1,000 LAN hosts,
            one source port each, to N distinct public addresses, replayed for ever. Its TX
            is DPDK's drop mode (no tx stream);
  WAN port  rx_pcap=<one ARP request>: the upstream router asking for the DUT's WAN address,
            read once at start (the gateway learns the next hop from it: it has no static
            neighbours). TX drop mode, so what leaves costs the DUT what a NIC's TX ring
            would, and nothing else.
The DUTs:
  testpmd          dpdk-testpmd --forward-mode=io: DPDK's own I/O floor, no header touched;
  gateway          `gateway run`, NAT44 (masquerade) + the SPI firewall, one worker;
  ovs-ct-snat      Open vSwitch's DPDK datapath (Debian's ovs-vswitchd-dpdk, run from the
                   extracted package with its own database and run directory, so the system's
                   OVS stays as the e2e tests use it): ct(commit,nat(src=...)) then rewrite
                   the MACs, decrement the TTL and output;
  ovs-forward      the same OVS, forwarding with the same rewrite and no conntrack.
Rates come from DPDK's telemetry socket of each DUT (`/ethdev/stats`: packets sent on all
ports), read after a warm-up and again `--seconds` later. Cycles per packet are the polling
core's clock (`cpu MHz` of /proc/cpuinfo: the TSC on the VMs this runs on) over the packet
rate: each DUT busy-polls its core, so every cycle of it is spent on the packets it forwards.
Rounds alternate the DUTs in a rotated order; the table has min, median and max over rounds
and the median's ratio to testpmd's. Afterwards each DUT runs once more with its WAN port
writing to a pcap, and the harness reads the addresses: the gateway and ovs-ct-snat must have
translated every source to the WAN address, testpmd and ovs-forward must not have.
The result is appended to benchmarks/history.jsonl with the host's CPU and cache sizes.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import table  # benchmarks/table.py: the docs' tables from the history
from table import TARGET_RATIO
from host import cpu_facts  # benchmarks/host.py, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HOSTS = 1000
LAN_ADDR, LAN_PREFIX = "192.168.0.1", 16
WAN_ADDR = "100.64.0.1"
UPSTREAM = "100.64.0.2"
UPSTREAM_MAC = bytes([0x02, 0, 0, 0, 0xFF, 0x01])
# net_pcap's ports take 02:70:63:61:70:NN ("pcap") in the order they are created: LAN first.
LAN_PORT_MAC = bytes([0x02, 0x70, 0x63, 0x61, 0x70, 0x00])
WAN_PORT_MAC = bytes([0x02, 0x70, 0x63, 0x61, 0x70, 0x01])
REMOTE_PORT = 443
# Simple IMIX (7:4:1 of 64, 594 and 1518 bytes on the wire, FCS included).
IMIX = [64] * 7 + [594] * 4 + [1518]

DUTS = ["testpmd", "gateway", "ovs-ct-snat", "ovs-forward"]


def ip_bytes(text):
    return socket.inet_aton(text)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def host_addr(host):
    return bytes([192, 168, 1 + host // 250, 1 + host % 250])


def host_mac(host):
    return bytes([0x02, 0, 0, 0x10, host >> 8, host & 0xFF])


def remote_addr(flow):
    # 64.0.0.0/3, a distinct address per flow (an odd multiplier permutes 2^29), spread so
    # that consecutive flows share no route-table line.
    return struct.pack("!I", 0x4000_0000 | (flow * 2_654_435_761) % (1 << 29))


def udp_frame(flow, wire_len):
    host = flow % HOSTS
    src, dst = host_addr(host), remote_addr(flow)
    sport = 40000 + host % 20000
    payload = bytes(wire_len - 4 - 14 - 20 - 8)
    udp_len = 8 + len(payload)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", sport, REMOTE_PORT, udp_len, 0) + payload
    udp_sum = checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", udp_sum) + udp[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, flow & 0xFFFF, 0, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return LAN_PORT_MAC + host_mac(host) + b"\x08\x00" + ip + udp


def arp_request():
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + UPSTREAM_MAC + ip_bytes(UPSTREAM)
    arp += bytes(6) + ip_bytes(WAN_ADDR)
    frame = b"\xff" * 6 + UPSTREAM_MAC + b"\x08\x06" + arp
    return frame + bytes(60 - len(frame))


def write_pcap(path, frames):
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for frame in frames:
            out.write(struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame)


def read_pcap(path, limit=None):
    frames = []
    with open(path, "rb") as data:
        header = data.read(24)
        if len(header) < 24:
            return frames
        order = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        while limit is None or len(frames) < limit:
            record = data.read(16)
            if len(record) < 16:
                break
            caplen = struct.unpack(order + "IIII", record)[2]
            frame = data.read(caplen)
            if len(frame) < caplen:
                break
            frames.append(frame)
    return frames


def flows_pcap(work, flows, imix):
    sizes = IMIX if imix else [64]
    path = os.path.join(work, f"flows-{flows}-{'imix' if imix else '64'}.pcap")
    if not os.path.exists(path):
        write_pcap(path, (udp_frame(f, sizes[f % len(sizes)]) for f in range(flows)))
    return path


class Telemetry:
    """DPDK's telemetry socket (v2) of the DUT's EAL file prefix."""

    def __init__(self, prefix):
        self.path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"

    def query(self, command):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.settimeout(2)
            sock.connect(self.path)
            sock.recv(16384)  # the greeting: version, pid, max output length
            sock.send(command.encode())
            return json.loads(sock.recv(1 << 20).decode())

    def sent_packets(self):
        ports = self.query("/ethdev/list")["/ethdev/list"]
        total = 0
        for port in ports:
            stats = self.query(f"/ethdev/stats,{port}")["/ethdev/stats"]
            total += stats["opackets"]
        return total


def stop(process, sig=signal.SIGTERM, wait=15):
    if process is not None and process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    # A DPDK primary keeps its hugepage files for secondaries that may come: testpmd and OVS
    # get --huge-unlink (the gateway runs --in-memory), and this catches what a crash left.
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[2] == "hugetlbfs":
                for name in os.listdir(fields[1]):
                    if name.startswith("bench-cmp-"):
                        os.unlink(os.path.join(fields[1], name))


def wait_for(what, check, timeout, process=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = open(log).read()[-2000:] if log else ""
            raise RuntimeError(f"{what}: the process exited ({process.returncode})\n{tail}")
        try:
            if check():
                return
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.1)
    tail = open(log).read()[-2000:] if log else ""
    raise RuntimeError(f"{what}: not ready in {timeout} s\n{tail}")


def free_hugepage_mib():
    with open("/proc/meminfo") as info:
        fields = dict(line.split(":", 1) for line in info)
    pages = int(fields["HugePages_Free"].split()[0])
    return pages * int(fields["Hugepagesize"].split()[0]) // 1024


def wait_for_hugepages(mib):
    """The previous DUT's hugepages go back to the pool some time after it exits (seconds,
    under gVisor): a DUT started before would find too few and fall back, or fail."""
    try:
        wait_for(f"{mib} MiB of free hugepages", lambda: free_hugepage_mib() >= mib, 60)
    except RuntimeError as error:
        raise RuntimeError(f"{error} ({free_hugepage_mib()} MiB free; make hugepages)") from None


# What a DUT's failure can raise: the harness's own errors, a process or file missing, a
# tool's refusal, a telemetry answer cut short.
DUT_ERRORS = (RuntimeError, OSError, subprocess.CalledProcessError, KeyError, ValueError)


def lan_device(pcap, infinite=True):
    return f"net_pcap0,rx_pcap={pcap}" + (",infinite_rx=1" if infinite else "")


def wan_device(arp_pcap, out=None):
    return f"net_pcap1,rx_pcap={arp_pcap}" + (f",tx_pcap={out}" if out else "")


class Testpmd:
    name = "testpmd"
    prefix = "bench-cmp-testpmd"

    def __init__(self, args, work):
        self.args, self.work, self.process = args, work, None

    def start(self, pcap, arp_pcap, out=None, infinite=True):
        wait_for_hugepages(self.args.memory_mb)
        self.log = os.path.join(self.work, "testpmd.log")
        command = [
            "dpdk-testpmd", "-l", "0,1", "--no-pci", "--huge-unlink", "--file-prefix", self.prefix,
            "-m", str(self.args.memory_mb),
            "--vdev", lan_device(pcap, infinite), "--vdev", wan_device(arp_pcap, out),
            "--", "--forward-mode=io", "--auto-start", "--nb-cores=1",
            f"--total-num-mbufs={self.args.mbufs}",
        ]
        # Not interactive: it forwards until a line arrives on stdin (kept open here).
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=open(self.log, "w"), stderr=subprocess.STDOUT
        )
        telemetry = Telemetry(self.prefix)
        wait_for("testpmd", lambda: telemetry.sent_packets() > 0, 60, self.process, self.log)
        return telemetry

    def stop(self):
        stop(self.process, signal.SIGINT)


class Gateway:
    name = "gateway"
    prefix = "bench-cmp-gateway"

    def __init__(self, args, work):
        self.args, self.work, self.process = args, work, None

    def config(self, pcap, arp_pcap, out, infinite):
        return f"""
[eal]
main_lcore = 0
hugepages = "auto"
memory_mb = {self.args.memory_mb}
file_prefix = "{self.prefix}"
extra_args = ["--no-pci"]
[mempool]
mbufs = {self.args.mbufs - 1}
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "{lan_device(pcap, infinite)}"
address = "{LAN_ADDR}/{LAN_PREFIX}"
zone = "lan"
[[interfaces]]
name = "wan"
device = "{wan_device(arp_pcap, out)}"
address = "{WAN_ADDR}/24"
zone = "wan"
[[routes]]
destination = "0.0.0.0/0"
via = "{UPSTREAM}"
[conntrack]
capacity = {max(262144, 4 * self.args.max_flows)}
[nat]
masquerade = ["wan"]
binding_capacity = 65536
[firewall]
policy = [
    {{ from = "lan", to = "wan", action = "accept" }},
    {{ from = "wan", to = "lan", action = "drop" }},
]
[state]
directory = "{self.work}/state"
snapshot = false
[metrics]
listen = "127.0.0.1:19471"
[ctl]
socket = "{self.work}/ctl.sock"
"""

    def start(self, pcap, arp_pcap, out=None, infinite=True):
        wait_for_hugepages(self.args.memory_mb)
        self.log = os.path.join(self.work, "gateway.log")
        path = os.path.join(self.work, "gateway.toml")
        with open(path, "w") as config:
            config.write(self.config(pcap, arp_pcap, out, infinite))
        self.process = subprocess.Popen(
            [self.args.gateway, "run", "-c", path],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
        )
        telemetry = Telemetry(self.prefix)
        wait_for("gateway", lambda: telemetry.sent_packets() > 0, 60, self.process, self.log)
        if "--no-huge" in open(self.log).read():
            raise RuntimeError("gateway: started without hugepages, unlike the other DUTs")
        return telemetry

    def stop(self):
        stop(self.process, signal.SIGTERM)


class Ovs:
    """ovs-vswitchd-dpdk from Debian's openvswitch-switch-dpdk, extracted (not installed: the
    package would switch the system's ovs-vswitchd alternative, which the e2e tests use)."""

    prefix = "bench-cmp-ovs"

    def __init__(self, args, work, conntrack):
        self.args, self.work, self.conntrack = args, work, conntrack
        self.name = "ovs-ct-snat" if conntrack else "ovs-forward"
        self.db = self.vswitchd = None
        self.run = os.path.join(work, "ovs")

    def vsctl(self, *args):
        subprocess.run(
            ["ovs-vsctl", "--no-wait", f"--db=unix:{self.run}/db.sock", "--timeout=30", *args],
            check=True, capture_output=True, text=True,
        )

    def ofctl(self, *args):
        subprocess.run(
            ["ovs-ofctl", "-O", "OpenFlow13", *args], check=True, capture_output=True, text=True,
            env=self.env,
        )

    def start(self, pcap, arp_pcap, out=None, infinite=True):
        wait_for_hugepages(self.args.memory_mb)
        shutil.rmtree(self.run, ignore_errors=True)
        os.makedirs(self.run)
        self.env = dict(os.environ, OVS_RUNDIR=self.run, OVS_LOGDIR=self.run, OVS_DBDIR=self.run)
        self.log = os.path.join(self.run, "ovs-vswitchd.log")
        db = os.path.join(self.run, "conf.db")
        subprocess.run(["ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema"],
                       check=True, capture_output=True)
        self.db = subprocess.Popen(
            ["ovsdb-server", db, f"--remote=punix:{self.run}/db.sock",
             f"--pidfile={self.run}/ovsdb-server.pid", f"--log-file={self.run}/ovsdb-server.log"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for("ovsdb-server", lambda: os.path.exists(f"{self.run}/db.sock"), 20, self.db)
        self.vsctl("--", "init", "--", "set", "Open_vSwitch", ".",
                   "other_config:dpdk-init=true", "other_config:dpdk-lcore-mask=0x1",
                   "other_config:pmd-cpu-mask=0x2",
                   f"other_config:dpdk-socket-mem={self.args.memory_mb}",
                   f'other_config:dpdk-extra=--file-prefix={self.prefix} --no-pci --huge-unlink')
        self.vswitchd = subprocess.Popen(
            [self.args.ovs_vswitchd, f"unix:{self.run}/db.sock",
             f"--pidfile={self.run}/ovs-vswitchd.pid", f"--log-file={self.log}"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for("ovs-vswitchd", lambda: os.path.exists(f"{self.run}/br-bench.mgmt")
                 or os.path.exists(f"{self.run}/ovs-vswitchd.pid"), 60, self.vswitchd, self.log)
        self.vsctl("add-br", "br-bench", "--", "set", "bridge", "br-bench", "datapath_type=netdev",
                   "fail_mode=secure")
        self.vsctl("add-port", "br-bench", "lan", "--", "set", "Interface", "lan", "type=dpdk",
                   f"options:dpdk-devargs={lan_device(pcap, infinite)}", "ofport_request=1")
        self.vsctl("add-port", "br-bench", "wan", "--", "set", "Interface", "wan", "type=dpdk",
                   f"options:dpdk-devargs={wan_device(arp_pcap, out)}", "ofport_request=2")
        bridge = f"{self.run}/br-bench.mgmt"
        wait_for("ovs bridge", lambda: os.path.exists(bridge), 30, self.vswitchd, self.log)
        mac = lambda raw: ":".join(f"{b:02x}" for b in raw)
        rewrite = f"mod_dl_src:{mac(WAN_PORT_MAC)},mod_dl_dst:{mac(UPSTREAM_MAC)},dec_ttl,output:2"
        if self.conntrack:
            flows = [
                f"table=0,priority=10,in_port=1,ip,actions=ct(commit,zone=1,"
                f"nat(src={WAN_ADDR}:1024-65535),table=1)",
                f"table=1,priority=10,in_port=1,ip,actions={rewrite}",
            ]
        else:
            flows = [f"table=0,priority=10,in_port=1,ip,actions={rewrite}"]
        for flow in flows:
            self.ofctl("add-flow", bridge, flow)
        telemetry = Telemetry(self.prefix)
        wait_for("ovs forwarding", lambda: telemetry.sent_packets() > 0, 60, self.vswitchd, self.log)
        return telemetry

    def stop(self):
        stop(self.vswitchd, signal.SIGTERM, 30)
        stop(self.db, signal.SIGTERM)
        self.vswitchd = self.db = None


def measure(dut, pcap, arp_pcap, warmup, seconds):
    try:
        telemetry = dut.start(pcap, arp_pcap)
        time.sleep(warmup)
        before, start = telemetry.sent_packets(), time.monotonic()
        time.sleep(seconds)
        after, end = telemetry.sent_packets(), time.monotonic()
    finally:
        dut.stop()
    return (after - before) / (end - start)


def is_flow_packet(frame):
    """One of the replayed flows' packets as it leaves: IPv4 UDP to port 443 of an address in
    64.0.0.0/3 (whatever its source became)."""
    return (
        len(frame) >= 42 and frame[12:14] == b"\x08\x00" and frame[23] == 17
        and frame[30] & 0xE0 == 0x40 and frame[14 + 20 + 2:14 + 20 + 4] == struct.pack("!H", REMOTE_PORT)
    )


def translation_check(dut, pcap, arp_pcap, work):
    """Runs the DUT with its WAN port writing to a pcap until some thousands of packets went
    out; returns (the flows' packets read, those whose source is the WAN address)."""
    out = os.path.join(work, f"out-{dut.name}.pcap")
    if os.path.exists(out):
        os.unlink(out)
    try:
        dut.start(pcap, arp_pcap, out=out)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            not os.path.exists(out) or os.path.getsize(out) < 1 << 20
        ):
            time.sleep(0.05)
    finally:
        dut.stop()
    if not os.path.exists(out):
        return 0, 0
    frames = [f for f in read_pcap(out, 20000) if is_flow_packet(f)]
    wan = ip_bytes(WAN_ADDR)
    translated = sum(1 for f in frames if f[26:30] == wan)
    os.unlink(out)
    return len(frames), translated


def ovs_vswitchd(work_root):
    """The extracted ovs-vswitchd-dpdk, fetched with apt-get download on first use."""
    target = os.path.join(work_root, "ovs-dpdk")
    binary = os.path.join(target, "usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk")
    if os.path.exists(binary):
        return binary
    os.makedirs(target, exist_ok=True)
    subprocess.run(["apt-get", "download", "openvswitch-switch-dpdk"], cwd=target, check=True,
                   capture_output=True, text=True)
    deb = next(f for f in os.listdir(target) if f.endswith(".deb"))
    subprocess.run(["dpkg", "-x", deb, "."], cwd=target, check=True)
    return binary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", default="1000,100000", help="flow counts, comma-separated")
    parser.add_argument("--imix-flows", default="1000", help="flow counts also run at IMIX ('' none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--duts", default=",".join(DUTS))
    parser.add_argument("--gateway", default=os.path.join(ROOT, "target/release/gateway"))
    parser.add_argument("--memory-mb", type=int, default=900)
    parser.add_argument("--mbufs", type=int, default=262144)
    parser.add_argument("--history", default=os.path.join(ROOT, "benchmarks/history.jsonl"))
    parser.add_argument("--no-record", action="store_true", help="do not append to the history")
    args = parser.parse_args()
    flow_counts = [int(n) for n in args.flows.split(",") if n]
    imix_counts = [int(n) for n in args.imix_flows.split(",") if n]
    args.max_flows = max(flow_counts + imix_counts)
    if args.max_flows > args.mbufs * 3 // 4:
        sys.exit(f"bench-compare: {args.max_flows} flows need more than --mbufs {args.mbufs} "
                 "(infinite_rx holds the whole pcap in mbufs)")
    if os.geteuid() != 0:
        sys.exit("bench-compare: run as root (DPDK, hugepages)")
    work_root = os.path.join(ROOT, "target/bench-compare")
    os.makedirs(work_root, exist_ok=True)
    names = [n for n in args.duts.split(",") if n]
    unknown = set(names) - set(DUTS)
    if unknown:
        sys.exit(f"bench-compare: unknown DUTs {sorted(unknown)}; known: {DUTS}")
    if any(n.startswith("ovs") for n in names):
        try:
            args.ovs_vswitchd = ovs_vswitchd(work_root)
        except (subprocess.CalledProcessError, StopIteration, OSError) as error:
            detail = getattr(error, "stderr", "") or error
            sys.exit(f"bench-compare: cannot fetch openvswitch-switch-dpdk: {detail}")
    work = tempfile.mkdtemp(prefix="run-", dir=work_root)
    duts = {
        "testpmd": Testpmd(args, work),
        "gateway": Gateway(args, work),
        "ovs-ct-snat": Ovs(args, work, True),
        "ovs-forward": Ovs(args, work, False),
    }
    facts = cpu_facts()
    hz = facts["cpu_mhz"] * 1e6
    arp_pcap = os.path.join(work, "arp.pcap")
    write_pcap(arp_pcap, [arp_request()])
    cases = [(n, False) for n in flow_counts] + [(n, True) for n in imix_counts]
    try:
        results, failed = run_cases(cases, names, duts, args, work, arp_pcap, hz)
    finally:
        for dut in duts.values():
            dut.stop()
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, facts, args)
    if failed:
        # A failed run appends nothing, as with `make bench-record`.
        sys.exit("bench-compare: a DUT failed or a capture was wrong (above); nothing recorded")
    if not args.no_record:
        record(args.history, results, facts, args)


def run_cases(cases, names, duts, args, work, arp_pcap, hz):
    results = []
    failed = False
    for flows, imix in cases:
        pcap = flows_pcap(work, flows, imix)
        sizes = IMIX if imix else [64]
        mean_bits = 8 * (sum(sizes) / len(sizes) + 20)  # preamble and gap: a 10G line's 20 B
        rates = {n: [] for n in names}
        for round_index in range(args.rounds):
            order = names[round_index % len(names):] + names[: round_index % len(names)]
            for name in order:
                try:
                    pps = measure(duts[name], pcap, arp_pcap, args.warmup, args.seconds)
                except DUT_ERRORS as error:
                    print(f"bench-compare: {name} failed: {error}", file=sys.stderr)
                    failed = True
                    continue
                rates[name].append(pps)
                print(f"  {flows} flows {'IMIX' if imix else '64 B'} round {round_index + 1}: "
                      f"{name} {pps / 1e6:.3f} Mpps", file=sys.stderr, flush=True)
        checks = {}
        for name in names:
            try:
                checks[name] = translation_check(duts[name], pcap, arp_pcap, work)
            except DUT_ERRORS as error:
                print(f"bench-compare: {name}'s capture failed: {error}", file=sys.stderr)
                checks[name] = (0, 0)
        floor = statistics.median([hz / r for r in rates["testpmd"]]) if rates.get("testpmd") else None
        # At least a thousand of the flows' packets (all of them with fewer flows) must have
        # left in the capture's first MiB.
        enough = min(flows, 1000)
        for name in names:
            if not rates[name]:
                continue
            cycles = sorted(hz / r for r in rates[name])
            median_pps = statistics.median(rates[name])
            read, translated = checks[name]
            should_translate = name in ("gateway", "ovs-ct-snat")
            ok = read >= enough and translated == (read if should_translate else 0)
            failed |= not ok
            results.append({
                "dut": name, "flows": flows, "frames": "imix" if imix else "64",
                "rounds": len(rates[name]), "mpps_median": round(median_pps / 1e6, 3),
                "gbps_median": round(median_pps * mean_bits / 1e9, 2),
                "cycles_min": round(cycles[0], 1),
                "cycles_median": round(statistics.median(cycles), 1),
                "cycles_max": round(cycles[-1], 1),
                "ratio_to_testpmd": round(statistics.median(cycles) / floor, 2) if floor else None,
                "capture_packets": read, "capture_translated": translated, "capture_ok": ok,
            })
    return results, failed


def print_table(results, facts, args):
    caches = " ".join(f"{k} {v}" for k, v in facts["caches"].items())
    print(f"bench-compare: {facts['cpu_model']}, {facts['cpus']} CPUs, {facts['cpu_mhz']:.0f} MHz, "
          f"{caches}; one polling core per DUT; {args.rounds} rounds of {args.seconds:g} s")
    print(f"{'flows':>7} {'frames':>6} {'DUT':<12} {'Mpps':>7} {'wire Gb/s':>9} "
          f"{'cyc min':>8} {'median':>8} {'max':>8} {'x testpmd':>9} {'target':>11}  capture")
    for row in results:
        target = TARGET_RATIO.get(row["flows"]) if row["dut"] == "gateway" and row["frames"] == "64" else None
        verdict = ""
        if target is not None and row["ratio_to_testpmd"] is not None:
            verdict = f"<={target:g} {'met' if row['ratio_to_testpmd'] <= target else 'missed'}"
        expected = "all" if row["dut"] in ("gateway", "ovs-ct-snat") else "none"
        capture = (f"{row['capture_translated']}/{row['capture_packets']} from {WAN_ADDR} "
                   f"(expected {expected}) {'ok' if row['capture_ok'] else 'WRONG'}")
        ratio = "-" if row["ratio_to_testpmd"] is None else f"{row['ratio_to_testpmd']:.2f}"
        print(f"{row['flows']:>7} {row['frames']:>6} {row['dut']:<12} {row['mpps_median']:>7.3f} "
              f"{row['gbps_median']:>9.2f} {row['cycles_min']:>8.1f} {row['cycles_median']:>8.1f} "
              f"{row['cycles_max']:>8.1f} {ratio:>9} {verdict:>11}  {capture}")


def record(history, results, facts, args):
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    except OSError:
        commit, dirty = "unknown", False
    line = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit, "dirty": dirty, "kind": "bench-compare", "args": " ".join(sys.argv[1:]),
        "hostname": socket.gethostname(), "host": facts,
        "rounds": args.rounds, "seconds": args.seconds, "compare": results,
    }
    with open(history, "a") as out:
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
    print(f"bench-compare: appended to {history}", file=sys.stderr)
    # The published tables come from the project's own history only.
    if os.path.realpath(history) == os.path.realpath(table.HISTORY):
        table.write_tables()


if __name__ == "__main__":
    main()
