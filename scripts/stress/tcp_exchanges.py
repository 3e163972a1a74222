#!/usr/bin/env python3
"""Conformance-style TCP exchanges for the multi-worker stress run (scripts/stress-workers.sh).

`serve PORT` runs the server side, `run ADDRESS PORT COUNT CONCURRENCY` the clients; each
connection's first byte names its kind, so the server knows what to do:

  r  request/response, the client closes first;
  s  request/response, the server closes first;
  x  the client aborts with a reset after the response (SO_LINGER 0);
  X  the server aborts with a reset after the request;
  c  simultaneous close: both ends send their data and FIN at once, then read to EOF;
  h  half close: the client shuts its side before reading a long response;
  w  window probes: the server sends 256 KiB to a client with a 4 KiB receive buffer that
     reads slowly, so the client's window closes and the server probes it;
  b  bulk both ways: 4 MiB from the client while the server sends 4 MiB back, at full speed
     (bursts that fill the af_packet rings, so that the kernel's fanout rolls packets over
     to another queue and a direction's segments reach the gateway on several workers).

With loss on the hosts (the stress script drops 1% of TCP at each host's input), every kind
also sees retransmissions, SACK blocks and duplicate ACKs. The client prints a JSON summary:
connections completed per kind and the failures (a failure is an exchange that did not end
as its kind says, e.g. a reset where a close was due).
"""

import json
import random
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

REQUEST = 200
RESPONSE = 1800
LONG = 64 * 1024
PROBE_BYTES = 256 * 1024
BULK = 4 * 1024 * 1024
KINDS = "rsxXchwb"
# w is slow (the client reads at a few KiB per 10 ms) and b heavy: small shares of the mix.
WEIGHTS = [30, 25, 10, 10, 15, 8, 2, 1]


def read_exactly(conn, count):
    data = bytearray()
    while len(data) < count:
        chunk = conn.recv(min(65536, count - len(data)))
        if not chunk:
            raise ConnectionError("EOF after %d of %d bytes" % (len(data), count))
        data += chunk
    return bytes(data)


def read_to_eof(conn):
    total = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return total
        total += len(chunk)


def abort(conn):
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def serve_one(conn):
    try:
        conn.settimeout(60)
        kind = read_exactly(conn, 1).decode()
        if kind == "c":
            conn.sendall(b"s" * RESPONSE)
            conn.shutdown(socket.SHUT_WR)
            read_to_eof(conn)
            conn.close()
            return
        if kind == "w":
            read_exactly(conn, REQUEST - 1)
            conn.sendall(b"w" * PROBE_BYTES)
            conn.shutdown(socket.SHUT_WR)
            read_to_eof(conn)
            conn.close()
            return
        if kind == "b":
            sender = threading.Thread(target=conn.sendall, args=(b"b" * BULK,))
            sender.start()
            got = read_to_eof(conn)
            sender.join()
            conn.close()
            if got != BULK - 1:
                raise ConnectionError("bulk: %d bytes" % got)
            return
        if kind == "h":
            read_to_eof(conn)
            conn.sendall(b"h" * LONG)
            conn.close()
            return
        read_exactly(conn, REQUEST - 1)
        if kind == "X":
            abort(conn)
            return
        conn.sendall(b"s" * RESPONSE)
        if kind == "s":
            conn.close()
            return
        # r and x: the client closes (or aborts) first.
        read_to_eof(conn)
        conn.close()
    except (OSError, ConnectionError):
        conn.close()


def serve(port):
    server = socket.create_server(("0.0.0.0", port), backlog=1024, reuse_port=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve_one, args=(conn,), daemon=True).start()


def exchange(address, port, kind):
    if kind == "w":
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.settimeout(60)
        conn.connect((address, port))
    else:
        conn = socket.create_connection((address, port), timeout=60)
    try:
        if kind == "c":
            conn.sendall(b"c")
            conn.shutdown(socket.SHUT_WR)
            got = read_to_eof(conn)
            if got != RESPONSE:
                raise ConnectionError("simultaneous close: %d bytes" % got)
        elif kind == "b":
            def send():
                conn.sendall(b"b" * BULK)
                conn.shutdown(socket.SHUT_WR)
            sender = threading.Thread(target=send)
            sender.start()
            got = read_to_eof(conn)
            sender.join()
            if got != BULK:
                raise ConnectionError("bulk: %d bytes" % got)
        elif kind == "h":
            conn.sendall(b"h" * REQUEST)
            conn.shutdown(socket.SHUT_WR)
            got = read_to_eof(conn)
            if got != LONG:
                raise ConnectionError("half close: %d bytes" % got)
        elif kind == "w":
            conn.sendall(b"w" * REQUEST)
            got = 0
            while True:
                chunk = conn.recv(2048)
                if not chunk:
                    break
                got += len(chunk)
                time.sleep(0.002)
            if got != PROBE_BYTES:
                raise ConnectionError("window probes: %d bytes" % got)
        else:
            conn.sendall(kind.encode() + b"q" * (REQUEST - 1))
            if kind == "X":
                try:
                    data = conn.recv(1)
                    raise ConnectionError("no reset from the server (read %r)" % data)
                except ConnectionResetError:
                    return
            read_exactly(conn, RESPONSE)
            if kind == "x":
                abort(conn)
                return
            if kind == "s" and conn.recv(1):
                raise ConnectionError("data after the response")
        conn.close()
    finally:
        conn.close()


def run(address, port, count, concurrency):
    rng = random.Random(20261205)
    kinds = rng.choices(KINDS, WEIGHTS, k=count)
    done = {kind: 0 for kind in KINDS}
    failures = []
    lock = threading.Lock()

    def one(kind):
        try:
            exchange(address, port, kind)
            with lock:
                done[kind] += 1
        except Exception as error:  # noqa: BLE001 - every failure is reported as it was
            with lock:
                failures.append("%s: %s" % (kind, error))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, kinds))
    print(json.dumps({
        "connections": count,
        "completed": sum(done.values()),
        "per_kind": done,
        "failures": len(failures),
        "first_failures": failures[:10],
        "seconds": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    elif sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit("usage: tcp_exchanges.py serve PORT | run ADDRESS PORT COUNT CONCURRENCY")
