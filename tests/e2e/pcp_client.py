#!/usr/bin/env python3
"""A PCP client (RFC 6887) for the port mapping test: sends MAP requests to the gateway and
prints each answer as "result lifetime external_port". Plain sockets: the bytes are short.

    pcp_client.py GATEWAY map PROTOCOL INTERNAL_PORT SUGGESTED_PORT LIFETIME NONCE
        [--third-party ADDRESS] [--prefer-failure] [--client ADDRESS] [--count N]

--client writes another address than the socket's in the header (a forged request);
--count sends N requests for N consecutive internal ports (from INTERNAL_PORT on), all at
once as a client mapping many ports would, then prints one answer line each, in request
order.
"""
import argparse
import ipaddress
import socket
import struct

parser = argparse.ArgumentParser()
parser.add_argument("gateway")
parser.add_argument("op", choices=["map"])
parser.add_argument("protocol", choices=["tcp", "udp"])
parser.add_argument("internal_port", type=int)
parser.add_argument("suggested_port", type=int)
parser.add_argument("lifetime", type=int)
parser.add_argument("nonce", type=int)
parser.add_argument("--third-party")
parser.add_argument("--prefer-failure", action="store_true")
parser.add_argument("--client")
parser.add_argument("--count", type=int, default=1)
args = parser.parse_args()


def mapped(address):
    return ipaddress.IPv6Address("::ffff:" + address).packed


sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(2)
sock.connect((args.gateway, 5351))
client = args.client or sock.getsockname()[0]
protocol = 6 if args.protocol == "tcp" else 17
nonce = struct.pack(">III", 0, 0, args.nonce)
for i in range(args.count):
    request = struct.pack(">BBHI", 2, 1, 0, args.lifetime) + mapped(client)
    request += nonce + struct.pack(">B3xHH", protocol, args.internal_port + i,
                                   args.suggested_port + i if args.suggested_port else 0)
    request += mapped("0.0.0.0")
    if args.third_party:
        request += struct.pack(">BxH", 1, 16) + mapped(args.third_party)
    if args.prefer_failure:
        request += struct.pack(">BxH", 2, 0)
    sock.send(request)
answers = {}
while len(answers) < args.count:
    answer = sock.recv(1100)
    version, op, result, lifetime = answer[0], answer[1], answer[3], struct.unpack(">I", answer[4:8])[0]
    assert version == 2 and op == 0x81, answer[:4].hex()
    assert answer[24:36] == nonce, "the answer's nonce is not the request's"
    internal_port, external_port = struct.unpack(">HH", answer[40:44])
    answers[internal_port] = (result, lifetime, external_port)
for i in range(args.count):
    print(*answers[args.internal_port + i], flush=True)
