#!/usr/bin/env python3
"""Captures the lab's frames and turns them into seed inputs for the fuzz targets (fuzz/).

  fuzz-seeds.py capture OUT.pcap IFACE...   writes every frame on the interfaces (AF_PACKET,
                                            both directions) to OUT.pcap.IFACE until SIGTERM;
                                            run it in the lab hosts' namespaces (the gateway's
                                            af_packet TX bypasses taps on its own veths)
  fuzz-seeds.py convert SEEDS_DIR PCAP...   writes SEEDS_DIR/<target>/<name> for the frame
                                            targets: pipeline_flows, icmp_error, content,
                                            control_builders
  fuzz-seeds.py pppoe SEEDS_DIR             writes SEEDS_DIR/pppoe_client/pppoe-<name>: scripted
                                            access concentrator exchanges (no capture needed)

No dependencies beyond Python 3. Each seed is laid out the way its target's harness reads its
input (see the `Bytes` reads in fuzz/fuzz_targets/*.rs), so it starts the fuzzer on real
traffic: whole captured flows for pipeline_flows, the ICMP errors for icmp_error, the first
payloads (HTTP, TLS ClientHello, DNS) for content, and ARP, echo requests and large datagrams
for control_builders. The pppoe_client seeds are written, not captured: an access concentrator's
side of whole sessions (PAP, CHAP, no authentication) up to State::Up and how they end, in the
target's step format, its patch bit filling in the client's Host-Uniq and identifiers.
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


# pppoe_client: the steps of fuzz/fuzz_targets/pppoe_client.rs. A frame step is the step byte
# (kind 0; 4: session ethertype, 8: patch, 16: broadcast, source in bits 5-6), a u16 length
# and the PPPoE header and payload; a poll is kind 1 and a u16 of milliseconds; stop 2, start 3.
# Every frame here is patched (8), so the harness puts in the client's Host-Uniq, session id
# and request identifiers, which these seeds cannot know.
PPPOE_SESSION_ID = 0x1234
PADO, PADS, PADT = 0x07, 0x65, 0xA7
TAG_SERVICE_NAME, TAG_AC_NAME, TAG_AC_COOKIE = 0x0101, 0x0102, 0x0104
PPP_LCP, PPP_PAP, PPP_CHAP, PPP_IPCP, PPP_IPV6CP = 0xC021, 0xC023, 0xC223, 0x8021, 0x8057
CONF_REQ, CONF_ACK, CONF_NAK, TERM_REQ, ECHO_REQ, ECHO_REPLY = 1, 2, 3, 5, 9, 10
AC_MAGIC = struct.pack(">I", 0x0BADCAFE)


def pppoe_step(code, payload, session_id=PPPOE_SESSION_ID, session=False, patch=True, broadcast=False, source=0):
    step = (4 if session else 0) | (8 if patch else 0) | (16 if broadcast else 0) | (source << 5)
    pppoe = bytes([0x11, code]) + struct.pack(">HH", session_id, len(payload))
    return bytes([step]) + u16(len(pppoe) + len(payload)) + pppoe + payload


def pado(tags):
    return pppoe_step(PADO, tags, session_id=0)


def poll(ms):
    return b"\x01" + u16(ms)


def tag(kind, value):
    return struct.pack(">HH", kind, len(value)) + value


def option(kind, value):
    return bytes([kind, 2 + len(value)]) + value


def ppp(protocol, code, identifier, data=b"", **kw):
    packet = bytes([code, identifier]) + u16(4 + len(data)) + data
    return pppoe_step(0, struct.pack(">H", protocol) + packet, session=True, **kw)


def ip(a, b, c, d):
    return bytes([a, b, c, d])


def pppoe_up(auth):
    """Discovery, LCP (the AC asking for `auth`), authentication and IPCP with a Nak, to Up."""
    steps = pado(tag(TAG_AC_NAME, b"test-ac") + tag(TAG_SERVICE_NAME, b"") + tag(TAG_SERVICE_NAME, b"isp") + tag(TAG_AC_COOKIE, b"cookie-123"))
    steps += pppoe_step(PADS, tag(TAG_SERVICE_NAME, b""))
    auth_option = {"pap": option(3, b"\xc0\x23"), "chap": option(3, b"\xc2\x23\x05"), "none": b""}[auth]
    steps += ppp(PPP_LCP, CONF_REQ, 1, option(1, u16(1492)) + auth_option + option(5, AC_MAGIC))
    # Patched: the client's request identifier and options.
    steps += ppp(PPP_LCP, CONF_ACK, 0)
    if auth == "pap":
        steps += ppp(PPP_PAP, 2, 0, b"\x00")
    elif auth == "chap":
        steps += ppp(PPP_CHAP, 1, 0x31, bytes([16]) + b"\x5a" * 16 + b"test-ac")
        steps += ppp(PPP_CHAP, 3, 0x31, b"ok")
    steps += ppp(PPP_IPCP, CONF_REQ, 0x71, option(3, ip(100, 64, 0, 1)))
    steps += ppp(PPP_IPCP, CONF_NAK, 0, option(3, ip(100, 64, 0, 10)) + option(129, ip(9, 9, 9, 9)) + option(131, ip(1, 1, 1, 1)))
    steps += ppp(PPP_IPCP, CONF_ACK, 0)
    return steps


def pppoe_echo():
    """The client's echo after 10 s, answered; the AC's echo, which the client answers."""
    return poll(10000) + ppp(PPP_LCP, ECHO_REPLY, 1, AC_MAGIC) + ppp(PPP_LCP, ECHO_REQ, 7, AC_MAGIC + b"ping")


def pppoe_seeds():
    return {
        # PAP up, an echo each way, a PADT, the backoff, a new discovery.
        "pap-echo-padt": pppoe_up("pap") + pppoe_echo() + pppoe_step(PADT, b"") + poll(1000),
        # CHAP up, an echo, a re-challenge, LCP Terminate-Request.
        "chap-echo-terminate": pppoe_up("chap") + pppoe_echo()
        + ppp(PPP_CHAP, 1, 0x32, bytes([8]) + bytes(range(1, 9)) + b"test-ac")
        + ppp(PPP_LCP, TERM_REQ, 0x42, b"bye"),
        # No authentication, IPv6CP (Protocol-Reject), IPCP renegotiated to another address
        # (a Nak with the address only: up again without DNS), IPCP Terminate.
        "none-ipv6cp-ipcp-terminate": pppoe_up("none")
        + ppp(PPP_IPV6CP, CONF_REQ, 3, option(1, b"\x00" * 8))
        + ppp(PPP_IPCP, CONF_REQ, 0x72, option(3, ip(100, 64, 0, 1)))
        + ppp(PPP_IPCP, CONF_NAK, 0, option(3, ip(100, 64, 0, 11)))
        + ppp(PPP_IPCP, CONF_ACK, 0)
        + ppp(PPP_IPCP, TERM_REQ, 9),
        # PAP up, LCP renegotiation while up, then stop and start again.
        "pap-renegotiate-stop-start": pppoe_up("pap")
        + ppp(PPP_LCP, CONF_REQ, 2, option(1, u16(1400)) + option(3, b"\xc0\x23") + option(5, AC_MAGIC))
        + ppp(PPP_LCP, CONF_ACK, 0) + ppp(PPP_PAP, 2, 0, b"\x00")
        + b"\x02\x03" + pppoe_up("pap"),
        # CHAP up, then three unanswered echoes end it; back up after the backoff.
        "chap-echo-timeout": pppoe_up("chap") + poll(10000) + poll(10000) + poll(10000) + poll(10000)
        + poll(1000) + pppoe_up("chap"),
        # Discovery retransmits, a PADO, the PADRs time out, PAP refused.
        "discovery-timeouts-pap-nak": poll(1000) + poll(2000) + pado(tag(TAG_SERVICE_NAME, b""))
        + poll(3000) + poll(3000) + poll(3000) + poll(3000) + poll(3000)
        + pado(tag(TAG_SERVICE_NAME, b"")) + pppoe_step(PADS, tag(TAG_SERVICE_NAME, b""))
        + ppp(PPP_LCP, CONF_REQ, 1, option(3, b"\xc0\x23")) + ppp(PPP_LCP, CONF_ACK, 0)
        + ppp(PPP_PAP, 3, 0, b"\x00"),
    }


def pppoe(root):
    d = os.path.join(root, "pppoe_client")
    os.makedirs(d, exist_ok=True)
    for name, data in sorted(pppoe_seeds().items()):
        with open(os.path.join(d, f"pppoe-{name}"), "wb") as f:
            f.write(data)
    print(f"fuzz-seeds: pppoe_client: {len(pppoe_seeds())} seeds")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "capture":
        capture(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "convert":
        convert(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "pppoe":
        pppoe(sys.argv[2])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
