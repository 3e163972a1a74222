#!/usr/bin/env python3
"""Captures the lab's frames and turns them into seed inputs for the fuzz targets (fuzz/).

  fuzz-seeds.py capture OUT.pcap IFACE...   writes every frame on the interfaces (AF_PACKET,
                                            both directions) to OUT.pcap.IFACE until SIGTERM;
                                            run it in the lab hosts' namespaces (the gateway's
                                            af_packet TX bypasses taps on its own veths)
  fuzz-seeds.py convert SEEDS_DIR PCAP...   writes SEEDS_DIR/<target>/<name> for the frame
                                            targets: pipeline_flows, icmp_error, content,
                                            control_builders

No dependencies beyond Python 3. Each seed is laid out the way its target's harness reads its
input (see the `Bytes` reads in fuzz/fuzz_targets/*.rs), so it starts the fuzzer on real
traffic: whole captured flows for pipeline_flows, the ICMP errors for icmp_error, the first
payloads (HTTP, TLS ClientHello, DNS) for content, and ARP, echo requests and large datagrams
for control_builders.
"""

import hashlib
import os
import select
import signal
import socket
import struct
import sys

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
# One classic pcap per interface (OUT.pcap.IFACE), Ethernet link type. The timestamp holds
# the frame's number (seconds) and direction (microseconds: 1 sent from the interface, which
# for a lab host's eth0 means toward the gateway, 0 received).
PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def capture(out, ifaces):
    socks = []
    for name in ifaces:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((name, 0))
        socks.append((s, name))
    files = {}
    for _, name in socks:
        f = open(f"{out}.{name}", "wb")
        f.write(PCAP_HEADER)
        files[name] = f
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    counts = {name: 0 for name in files}
    # iperf3 moves gigabytes: keep the first frames of the session and every small one.
    limit = 20000
    while not stop:
        try:
            ready, _, _ = select.select([s for s, _ in socks], [], [], 0.5)
        except InterruptedError:
            continue
        for s, name in socks:
            if s not in ready:
                continue
            try:
                frame, addr = s.recvfrom(65535)
            except OSError:
                # The test took the lab down.
                stop.append(1)
                break
            if counts[name] >= limit and len(frame) > 200:
                continue
            counts[name] += 1
            # The direction goes in the timestamp's microseconds: 1 sent, 0 received.
            sent = 1 if addr[2] == PACKET_OUTGOING else 0
            f = files[name]
            f.write(struct.pack("<IIII", counts[name], sent, len(frame), len(frame)))
            f.write(frame)
    for f in files.values():
        f.close()


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 24
    while at + 16 <= len(data):
        _, from_gateway, caplen, _ = struct.unpack_from("<IIII", data, at)
        at += 16
        yield bool(from_gateway), data[at : at + caplen]
        at += caplen


def ipv4(frame):
    """(header_len, protocol, src, dst, payload) of an untagged IPv4 frame, else None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[14] >> 4 != 4:
        return None
    ihl = (frame[14] & 15) * 4
    total = struct.unpack_from(">H", frame, 16)[0]
    ip = frame[14 : 14 + total]
    if ihl < 20 or len(ip) < ihl:
        return None
    return ihl, ip[9], ip[12:16], ip[16:20], ip[ihl:], ip


def flow_key(frame):
    parsed = ipv4(frame)
    if not parsed:
        return None
    _, proto, src, dst, l4, _ = parsed
    ports = l4[0:4] if proto in (6, 17) and len(l4) >= 4 else b""
    a, b = (src + ports[0:2], dst + ports[2:4])
    return (proto,) + tuple(sorted((a, b)))


def u16(n):
    return struct.pack(">H", min(n, 0xFFFF))


class Seeds:
    def __init__(self, root):
        self.root = root
        self.written = {}

    def add(self, target, data, limit):
        d = os.path.join(self.root, target)
        os.makedirs(d, exist_ok=True)
        # The limits are on what the directory holds, over runs.
        if len(os.listdir(d)) >= limit:
            return
        name = hashlib.sha1(data).hexdigest()[:16]
        path = os.path.join(d, f"e2e-{name}")
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(data)
            self.written[target] = self.written.get(target, 0) + 1


def convert(root, pcaps):
    seeds = Seeds(root)
    # (port, from_gateway, frame); port 0: LAN, 1: WAN. Captured on the hosts, so what a host
    # sent went to the gateway.
    frames = []
    for path in pcaps:
        port = 1 if "wan" in os.path.basename(path) else 0
        frames += [(port, not sent, f) for sent, f in read_pcap(path)]

    # pipeline_flows: each flow's frames as the gateway received them, as raw-frame ops
    # (op 5, control byte = port, worker 0, MAC made ours; u16 length; the frame).
    flows = {}
    for port, from_gateway, frame in frames:
        if from_gateway:
            continue
        key = ("arp",) if frame[12:14] == b"\x08\x06" else flow_key(frame)
        if key is None:
            continue
        flows.setdefault(key, []).append((port, frame))
    for key, packets in sorted(flows.items(), key=lambda kv: -len(kv[1]))[:40]:
        program = b""
        for port, frame in packets[:10]:
            frame = frame[:1024]
            program += bytes([5, port]) + u16(len(frame)) + frame
            if len(program) > 1000:
                break
        seeds.add("pipeline_flows", program, 40)

    for port, from_gateway, frame in frames:
        parsed = ipv4(frame)
        if frame[12:14] == b"\x08\x06" and not from_gateway:
            # control_builders, ARP (op 0), raw (< 40), then room and target for a request.
            seeds.add("control_builders", b"\x00\x00\x00" + u16(len(frame)) + frame + b"\x64\x0a\x00\x00\x02\x01", 12)
        if not parsed:
            continue
        ihl, proto, src, dst, l4, ip = parsed
        if proto == 1 and len(l4) >= 8 and l4[0] in (3, 11):
            # icmp_error raw mode (first byte < 24): the IP datagram, then the rewrites.
            seeds.add("icmp_error", b"\x00" + u16(len(ip)) + ip + b"\x0f\x01\x02\x00\x01\x00\x03\x01\x50", 16)
        if proto == 1 and len(l4) >= 8 and l4[0] == 8 and not from_gateway:
            # control_builders, echo (op 1), raw.
            seeds.add("control_builders", b"\x01\x00" + u16(len(frame)) + frame, 24)
        if len(ip) > 600 and not from_gateway:
            # control_builders, fragments (op 2), raw, then the MTU choices.
            seeds.add("control_builders", b"\x02\x00" + u16(len(frame)) + frame + b"\x02\x00\x00", 36)
        if proto == 6 and len(l4) >= 20 and not from_gateway:
            data_off = (l4[12] >> 4) * 4
            payload = l4[data_off:]
            dport = struct.unpack_from(">H", l4, 2)[0]
            if payload and dport in (80, 443, 53, 22, 8080):
                # content raw flight (kind 5, name byte, the flight, server port index), a
                # device, the ISN and one segment op per 700 bytes, no other flows, no DNS.
                port_index = [80, 443, 53, 22, 8080].index(dport)
                ops = b"".join(b"\x00\x02\xbb" for _ in range(len(payload) // 700 + 1))
                seed = b"\x05\x00" + u16(len(payload)) + payload + bytes([port_index])
                seed += b"\x00\x00" + b"\x00\x00\x03\xe8" + ops + b"\x00\x00"
                seeds.add("content", seed, 24)
        if proto == 17 and len(l4) >= 8 and struct.unpack_from(">H", l4, 2)[0] == 53 and not from_gateway:
            # content, a DNS query over UDP: an empty flight, then the query raw.
            query = l4[8:]
            # Kind 5, name 0, flight length 0, port 0; device 0, 0; ISN; a pure ACK op (0x13);
            # no other flows; DNS raw (0) and the query.
            seed = b"\x05\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x13"
            seed += b"\x00\x00" + u16(len(query)) + query
            seeds.add("content", seed, 32)
    for target in sorted(seeds.written):
        print(f"fuzz-seeds: {target}: {seeds.written[target]} new seeds")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "capture":
        capture(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "convert":
        convert(sys.argv[2], sys.argv[3:])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
