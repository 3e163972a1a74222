#!/usr/bin/python3
"""A PPPoE access concentrator for the end-to-end tests: the gateway's PPPoE client talks to it.

Independent of the gateway's code: every discovery and PPP control packet is encoded and decoded
by scapy's layers (PPPoED, PPPoED_Tags, PPPoE, PPP, PPP_LCP*, PPP_CHAP*, PPP_PAP*, PPP_IPCP*;
IPv6, ICMPv6ND_*, DHCP6*), except IPv6CP, which scapy 2.5 lacks: that is packed with struct.
Run it with Debian's /usr/bin/python3 (scapy 2.5), as root, in a namespace, on one interface:

  pppoe_isp.py --iface eth0 --user gateway --password s3cret --local 100.64.0.1 \\
      --client 100.64.0.2 --dns 198.51.100.53 198.51.100.54 --tun ppp-tun --log isp.log

- Discovery (RFC 2516): PADI -> PADO (AC-Name, Service-Name, AC-Cookie, Host-Uniq and
  Relay-Session-Id echoed); PADR with the right cookie -> PADS with the session id; PADT from
  the client ends the session.
- PPP-Max-Payload (RFC 4638, tag 0x0120), only with --max-payload N (> 1492): a PADI/PADR that
  carries the tag gets it echoed in the PADO/PADS with min(its value, N), "ppp-max-payload N"
  logged; that value replaces --mru as the session's LCP MRU limit, and the TUN's MTU is set to
  it. Without --max-payload the tag is ignored.
- LCP (RFC 1661): its own Configure-Request (MRU, authentication protocol, magic number); the
  client's MRU <= --mru and magic number acked, a larger MRU Naked, other options Rejected.
  Echo-Requests answered; its own Echo-Requests sent every --echo-interval seconds, the replies
  logged.
- CHAP-MD5 (RFC 1994: MD5(id || secret || challenge)) or PAP (RFC 1334). A failure is answered,
  logged, and the link terminated.
- IPCP (RFC 1332, RFC 1877): its own Configure-Request with --local; the client's IP-Address
  Naked with --client, its DNS options (129, 131) Naked with --dns, acked when they match.
  "session up <id> client <mac> address <client>" is logged when IPCP is open both ways.
- IPv6 (only with --ipv6-prefix; without it IPv6CP and IPv6 get an LCP Protocol-Reject):
  - IPv6CP (RFC 5072), started with IPCP after authentication: its own Configure-Request with
    the Interface-Identifier --ipv6-iid (link-local fe80::<iid>); the client's identifier acked
    when nonzero and not ours, else Naked with a random one; other options Rejected. "ipv6cp up:
    local fe80::<iid> client fe80::<client's iid>" is logged when it is open both ways.
  - Router Advertisements (RFC 4861) from fe80::<iid> to ff02::1: M and O set, the /64
    --ipv6-prefix (on-link, autonomous) and an MTU option with the client's MRU; no source
    link-layer option (PPP has no link-layer address). One when IPv6CP opens, then every 3 s, and
    one at once for each Router Solicitation; "ra sent solicited|unsolicited prefix P" logged for
    the first and the solicited ones. A Neighbor Solicitation for fe80::<iid> is answered (R, S
    and O set); other ICMPv6 to link-local or multicast addresses (MLD, the client's DAD) is
    counted, not answered.
  - DHCPv6 (RFC 8415) to ff02::1:2 port 547: Solicit -> Advertise (Reply with Rapid Commit when
    asked for), Request/Renew/Rebind/Information-Request -> Reply, Release -> Reply (Success).
    Each IA_PD gets --ipv6-delegate (T1 1000, T2 2000, preferred 3000, valid 4000), an IA_NA a
    NoAddrsAvail status, --ipv6-dns the DNS option (23). One line per exchange: "dhcpv6
    <message> from <client> -> <advertise|reply> prefix <delegated prefix, or - without IA_PD>".
- Relay: IPv4 from the session (PPP protocol 0x0021) is written to the TUN device --tun; what the
  kernel routes to the TUN device goes to the client in the session. Every relayed TCP SYN is
  logged with its MSS option, every ICMP echo with its addresses. Session frames of another
  session id or MAC are ignored and logged. With --ipv6-prefix, IPv6 (0x0057) likewise while
  IPv6CP is open, except what is addressed to link-local or multicast addresses (the ISP's own
  traffic above, or the ISP kernel's ND/MLD on the TUN); ICMPv6 echoes are logged as "relay icmp6
  <direction> <src> > <dst> echo-request|echo-reply id N seq M".
- SIGUSR1: a PADT for the current session, which is forgotten (the client must rediscover; the
  next session gets the next id). SIGTERM or SIGINT: a PADT, and exit 0.

Frames it sends are padded to Ethernet's 60-byte minimum, as a NIC would, so that the client
must trust the PPPoE length field rather than the frame's.
"""

import argparse
import fcntl
import hashlib
import hmac
import ipaddress
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time

from scapy.config import conf
from scapy.compat import raw
from scapy.layers.dhcp6 import (
    DHCP6,
    DHCP6_Advertise,
    DHCP6_Reply,
    DHCP6OptClientId,
    DHCP6OptDNSServers,
    DHCP6OptIA_NA,
    DHCP6OptIA_PD,
    DHCP6OptIAPrefix,
    DHCP6OptRapidCommit,
    DHCP6OptServerId,
    DHCP6OptStatusCode,
    DUID_LL,
)
from scapy.layers.inet import IP, TCP, UDP, ICMP
from scapy.layers.inet6 import (
    IPv6,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
)
from scapy.layers.l2 import Ether
from scapy.layers.ppp import (
    PPP,
    PPPoE,
    PPPoED,
    PPPoED_Tags,
    PPPoETag,
    PPP_CHAP,
    PPP_CHAP_ChallengeResponse,
    PPP_IPCP,
    PPP_IPCP_Option_DNS1,
    PPP_IPCP_Option_DNS2,
    PPP_IPCP_Option_IPAddress,
    PPP_LCP,
    PPP_LCP_Auth_Protocol_Option,
    PPP_LCP_Configure,
    PPP_LCP_Echo,
    PPP_LCP_Magic_Number_Option,
    PPP_LCP_MRU_Option,
    PPP_LCP_Protocol_Reject,
    PPP_LCP_Terminate,
    PPP_LCP_Code_Reject,
    PPP_PAP_Response,
)
from scapy.packet import Raw

ETH_P_PPPOE_DISC = 0x8863
ETH_P_PPPOE_SESS = 0x8864
BROADCAST = b"\xff" * 6

PADI, PADO, PADR, PADS, PADT = 0x09, 0x07, 0x19, 0x65, 0xA7
DISCOVERY_NAMES = {PADI: "PADI", PADO: "PADO", PADR: "PADR", PADS: "PADS", PADT: "PADT"}
TAG_END, TAG_SERVICE_NAME, TAG_AC_NAME, TAG_HOST_UNIQ, TAG_AC_COOKIE = 0x0000, 0x0101, 0x0102, 0x0103, 0x0104
TAG_RELAY_SESSION_ID, TAG_SERVICE_NAME_ERROR, TAG_GENERIC_ERROR = 0x0110, 0x0201, 0x0203
TAG_PPP_MAX_PAYLOAD = 0x0120

PROTO_IP, PROTO_LCP, PROTO_PAP, PROTO_CHAP, PROTO_IPCP = 0x0021, 0xC021, 0xC023, 0xC223, 0x8021
CONF_REQ, CONF_ACK, CONF_NAK, CONF_REJ, TERM_REQ, TERM_ACK, CODE_REJ, PROTO_REJ = range(1, 9)
ECHO_REQ, ECHO_REP, DISCARD_REQ = 9, 10, 11
LCP_MRU, LCP_AUTH, LCP_MAGIC = 1, 3, 5
IPCP_ADDRESS, IPCP_DNS1, IPCP_DNS2 = 3, 129, 131
PROTO_IPV6, PROTO_IPV6CP = 0x0057, 0x8057
IPV6CP_IID = 1

RA_INTERVAL_SECS = 3.0
DHCP6_NAMES = {1: "solicit", 3: "request", 5: "renew", 6: "rebind", 8: "release", 11: "information-request"}
DHCP6_OPT_CLIENTID, DHCP6_OPT_SERVERID, DHCP6_OPT_IA_NA, DHCP6_OPT_RAPID_COMMIT, DHCP6_OPT_IA_PD = 1, 2, 3, 14, 25
DHCP6_NO_ADDRS_AVAIL = 2

RETRANSMIT_SECS = 3.0
MAX_TRANSMITS = 10

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def mac_str(mac):
    return ":".join("%02x" % b for b in mac)


def mac_bytes(text):
    return bytes(int(part, 16) for part in text.split(":"))


def pad60(frame):
    return frame + b"\x00" * (60 - len(frame)) if len(frame) < 60 else frame


def iid_str(iid):
    return ":".join("%02x" % b for b in iid)


def link_local(iid):
    return ipaddress.IPv6Address(b"\xfe\x80" + b"\x00" * 6 + iid)


def is_link_local_or_multicast(address):
    """address: the 16 raw bytes. fe80::/10 or ff00::/8: for the link, never relayed."""
    return address[0] == 0xFF or (address[0] == 0xFE and address[1] & 0xC0 == 0x80)


def ncp_packet(code, ident, options):
    """An IPv6CP packet (RFC 1661 section 5 layout): code, id, length, options [(type, data)]."""
    body = b"".join(struct.pack("!BB", kind, len(data) + 2) + data for kind, data in options)
    return struct.pack("!BBH", code, ident, 4 + len(body)) + body


def ncp_parse(packet):
    """(code, id, [(type, data)], data after the header), or None when malformed."""
    if len(packet) < 4:
        return None
    code, ident, length = struct.unpack("!BBH", packet[:4])
    if length < 4 or length > len(packet):
        return None
    body = packet[4:length]
    options = []
    if code in (CONF_REQ, CONF_ACK, CONF_NAK, CONF_REJ):
        at = 0
        while at < len(body):
            if at + 2 > len(body) or body[at + 1] < 2 or at + body[at + 1] > len(body):
                return None
            options.append((body[at], body[at + 2:at + body[at + 1]]))
            at += body[at + 1]
    return code, ident, options, body


class Log:
    def __init__(self, path):
        self.out = open(path, "a", buffering=1) if path else sys.stderr

    def __call__(self, message):
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + ".%03d" % int(now % 1 * 1000)
        self.out.write("%s %s\n" % (stamp, message))
        self.out.flush()


class Session:
    """One PPPoE session and its PPP state: phase lcp -> auth -> ipcp -> up; IPv6CP's beside it."""

    def __init__(self, sid, mac, our_magic, mru_limit):
        self.sid = sid
        self.mac = mac
        self.phase = "lcp"
        self.mru_limit = mru_limit  # --mru, or what PPP-Max-Payload granted (RFC 4638)
        self.max_payload = None  # the PPP-Max-Payload granted in the PADS, if any
        self.our_magic = our_magic
        self.peer_magic = None
        self.peer_mru = 1492
        self.our_mru = None
        self.lcp_ack_sent = False
        self.lcp_ack_rcvd = False
        self.lcp_rejected = set()  # option types the client rejected in our Configure-Request
        self.ipcp_ack_sent = False
        self.ipcp_ack_rcvd = False
        self.ipv6_ignored = 0  # ICMPv6 to link-local/multicast addresses left unanswered (MLD, DAD)
        self.ipv6_dropped = 0
        self.ipv6cp_naks = 0
        self.ns_answered = 0
        self.ras_sent = 0
        self.auth_done = False
        self.chap_id = None
        self.challenge = None
        self.success_id = None
        self.next_id = random.randint(1, 200)
        self.pending = {}  # key -> [(proto, payload bytes), last sent, transmits]
        self.echo_id = 0
        self.echo_outstanding = 0
        self.next_echo = 0.0
        self.terminating = False
        self.relayed_in = 0
        self.relayed_out = 0
        self.oversized = 0
        self.started = time.time()
        self.host_uniq = None
        self.reset_ipv6()

    def new_id(self):
        self.next_id = (self.next_id + 1) & 0xFF
        return self.next_id

    def reset_ipv6(self):
        """IPv6CP down (Initial): wherever IPCP's state is reset, and on an IPv6CP Terminate."""
        self.ipv6cp_ack_sent = False
        self.ipv6cp_ack_rcvd = False
        self.ipv6cp_req_id = None
        self.peer_iid = None
        self.ipv6_up = False
        self.ra_logged = False  # the first unsolicited RA since IPv6CP opened is logged, not the rest
        self.next_ra = 0.0
        self.pending.pop("ipv6cp", None)


class Isp:
    def __init__(self, args):
        self.args = args
        self.log = Log(args.log)
        self.secret = os.urandom(16)
        self.mac = mac_bytes(open("/sys/class/net/%s/address" % args.iface).read().strip())
        self.password = args.password.encode()
        self.user = args.user.encode()
        self.dns = list(args.dns or [])
        self.client_raw = socket.inet_aton(args.client)
        self.sess = None
        self.next_sid = args.session_id if args.session_id else random.randint(1, 65534)
        self.ignored = {}
        self.usr1 = False
        self.term = False
        # scapy's packet socket: with PACKET_AUXDATA it puts a stripped 802.1Q tag back in the
        # frame, so that tagged frames (which must not reach an access port) are seen as such.
        self.sock = conf.L2socket(iface=args.iface)
        self.sock.ins.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.ins.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.tun = self.open_tun(args.tun) if args.tun else None
        self.tun_mtu = args.mru
        self.ipv6 = args.ipv6_prefix is not None
        if self.ipv6:
            self.prefix = ipaddress.IPv6Network(args.ipv6_prefix)
            self.delegate = ipaddress.IPv6Network(args.ipv6_delegate)
            self.iid = ipaddress.IPv6Address(args.ipv6_iid or "::1").packed[8:]
            self.ll = link_local(self.iid)
            self.dns6 = [str(ipaddress.IPv6Address(a)) for a in args.ipv6_dns]
            self.duid = DUID_LL(hwtype=1, lladdr=mac_str(self.mac))
        self.log(
            "isp listening on %s (%s) ac-name %s service-name %r auth %s user %s local %s client %s dns %s "
            "mru %d first session id %d tun %s"
            % (args.iface, mac_str(self.mac), args.ac_name, args.service_name, args.auth, args.user,
               args.local, args.client, " ".join(self.dns) or "-", args.mru, self.next_sid, args.tun or "-")
        )
        # Separate lines, so that the one above reads the same without the IPv6/RFC 4638 options.
        if self.ipv6:
            self.log("ipv6: link-local %s prefix %s delegate %s dns %s"
                     % (self.ll, self.prefix, self.delegate, " ".join(self.dns6) or "-"))
        if args.max_payload:
            iface_mtu = int(open("/sys/class/net/%s/mtu" % args.iface).read())
            self.log("ppp-max-payload up to %d granted to clients that ask%s" % (
                args.max_payload, "" if iface_mtu >= args.max_payload + 8 else
                " (but %s's mtu %d is below %d, PPPoE's 8 bytes counted)" % (args.iface, iface_mtu, args.max_payload + 8)))

    # --- plumbing -------------------------------------------------------------------------

    def open_tun(self, name):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
        # Idempotent: the test may have created the (persistent) device with its addresses.
        subprocess.run(["ip", "link", "set", "dev", name, "mtu", str(self.args.mru), "up"], check=True)
        if self.args.local and self.args.client:
            subprocess.run(["ip", "addr", "replace", self.args.local, "peer", self.args.client + "/32",
                            "dev", name], check=True)
        return fd

    def send_frame(self, frame):
        try:
            self.sock.outs.send(pad60(frame))
        except OSError as error:
            self.log("send failed: %s" % error)

    def send_discovery(self, dst, code, sid, tags):
        frame = raw(Ether(dst=mac_str(dst), src=mac_str(self.mac), type=ETH_P_PPPOE_DISC)
                    / PPPoED(code=code, sessionid=sid)
                    / PPPoED_Tags(tag_list=[PPPoETag(tag_type=t, tag_value=v) for t, v in tags]))
        self.send_frame(frame)

    def send_ppp(self, proto, payload):
        s = self.sess
        frame = raw(Ether(dst=mac_str(s.mac), src=mac_str(self.mac), type=ETH_P_PPPOE_SESS)
                    / PPPoE(sessionid=s.sid) / PPP(proto=proto) / Raw(raw(payload)))
        self.send_frame(frame)

    def send_ipv6(self, packet):
        """An IPv6 datagram (bytes) in the session, PPP protocol 0x0057: framed as from_tun does."""
        s = self.sess
        header = s.mac + self.mac + struct.pack("!HBBHHH", ETH_P_PPPOE_SESS, 0x11, 0, s.sid, len(packet) + 2, PROTO_IPV6)
        self.send_frame(header + packet)

    def set_tun_mtu(self, mtu):
        # The kernel then routes datagrams of up to the session's MRU to the TUN (RFC 4638).
        if self.tun is None or mtu == self.tun_mtu:
            return
        subprocess.run(["ip", "link", "set", "dev", self.args.tun, "mtu", str(mtu)], check=True)
        self.tun_mtu = mtu
        self.log("tun %s mtu %d" % (self.args.tun, mtu))

    def send_pending(self, key, proto, payload):
        payload = raw(payload)
        self.sess.pending[key] = [(proto, payload), time.time(), 1]
        self.send_ppp(proto, payload)

    def cookie(self, mac):
        return hmac.new(self.secret, mac, hashlib.sha256).digest()[:16]

    # --- the loop -------------------------------------------------------------------------

    def run(self):
        fds = [self.sock.ins.fileno()] + ([self.tun] if self.tun is not None else [])
        while True:
            if self.term:
                self.end_session("sigterm", padt=True)
                self.log("sigterm: exiting")
                return 0
            if self.usr1:
                self.usr1 = False
                if self.sess:
                    self.end_session("sigusr1", padt=True)
                else:
                    self.log("sigusr1: no session to end")
            try:
                readable, _, _ = select.select(fds, [], [], 0.25)
            except InterruptedError:
                readable = []
            if self.sock.ins.fileno() in readable:
                for _ in range(64):
                    try:
                        _, frame, _ = self.sock.recv_raw(65536)
                    except (BlockingIOError, OSError):
                        break
                    if frame:
                        self.on_frame(frame)
                    r, _, _ = select.select([self.sock.ins], [], [], 0)
                    if not r:
                        break
            if self.tun is not None and self.tun in readable:
                for _ in range(64):
                    try:
                        packet = os.read(self.tun, 65536)
                    except BlockingIOError:
                        break
                    self.from_tun(packet)
            self.tick()

    def tick(self):
        s = self.sess
        if s is None:
            return
        now = time.time()
        for key, entry in list(s.pending.items()):
            (proto, payload), last, transmits = entry
            if now - last < RETRANSMIT_SECS:
                continue
            if transmits >= (2 if s.terminating else MAX_TRANSMITS):
                self.log("%s: no answer after %d transmissions, session %d given up" % (key, transmits, s.sid))
                self.end_session(s.terminating or "negotiation timeout", padt=True)
                return
            entry[1], entry[2] = now, transmits + 1
            self.log("%s: retransmission %d" % (key, transmits))
            self.send_ppp(proto, payload)
        if s.phase != "lcp" and self.args.echo_interval > 0 and now >= s.next_echo:
            s.next_echo = now + self.args.echo_interval
            s.echo_id = (s.echo_id + 1) & 0xFF
            s.echo_outstanding += 1
            if s.echo_outstanding > 1:
                self.log("lcp echo: %d requests unanswered" % (s.echo_outstanding - 1))
            self.log("lcp echo-request id %d sent" % s.echo_id)
            self.send_ppp(PROTO_LCP, PPP_LCP_Echo(code=ECHO_REQ, id=s.echo_id, magic_number=s.our_magic))
        if s.ipv6_up and now >= s.next_ra:
            self.send_ra(solicited=False)

    def end_session(self, reason, padt):
        s = self.sess
        if s is None:
            return
        if padt:
            self.send_discovery(s.mac, PADT, s.sid, [(TAG_GENERIC_ERROR, reason.encode())])
        self.log("session %d ended (%s%s) after %.1f s, relayed %d packets client->net, %d net->client"
                 % (s.sid, reason, ", padt sent" if padt else "", time.time() - s.started,
                    s.relayed_in, s.relayed_out))
        if self.ipv6:
            self.log("session %d ipv6: %d router advertisements and %d neighbor advertisements sent, %d datagrams "
                     "to link-local or multicast addresses ignored, %d dropped before ipv6cp was open"
                     % (s.sid, s.ras_sent, s.ns_answered, s.ipv6_ignored, s.ipv6_dropped))
        self.sess = None

    def on_frame(self, frame):
        if len(frame) < 14:
            return
        dst, src = frame[0:6], frame[6:12]
        (ethertype,) = struct.unpack("!H", frame[12:14])
        if src == self.mac or (dst != self.mac and dst != BROADCAST):
            return
        if ethertype == 0x8100:
            (inner,) = struct.unpack("!H", frame[16:18])
            if inner in (ETH_P_PPPOE_DISC, ETH_P_PPPOE_SESS):
                self.log("ignored an 802.1Q-tagged (vlan %d) PPPoE frame from %s: the access port must "
                         "untag" % (struct.unpack("!H", frame[14:16])[0] & 0xFFF, mac_str(src)))
            return
        if ethertype == ETH_P_PPPOE_DISC:
            self.on_discovery(frame, src)
        elif ethertype == ETH_P_PPPOE_SESS:
            self.on_session(frame, src)

    # --- discovery ------------------------------------------------------------------------

    def on_discovery(self, frame, src):
        pkt = Ether(frame)
        disc = pkt[PPPoED]
        code, sid = disc.code, disc.sessionid
        name = DISCOVERY_NAMES.get(code, "code 0x%02x" % code)
        tags = []
        if disc.haslayer(PPPoED_Tags):
            tags = [(t.tag_type, t.tag_value or b"") for t in disc[PPPoED_Tags].tag_list]
        if disc.len + 20 > len(frame):
            self.log("%s from %s: PPPoE length %d beyond the frame (%d bytes)" % (name, mac_str(src), disc.len, len(frame)))
            return
        tag = {}
        for t, v in tags:
            tag.setdefault(t, v)
        service = tag.get(TAG_SERVICE_NAME)
        self.log("%s from %s session 0x%04x tags %s" % (
            name, mac_str(src), sid,
            ", ".join("0x%04x=%r" % (t, v) for t, v in tags) or "none"))
        echoed = [(t, tag[t]) for t in (TAG_HOST_UNIQ, TAG_RELAY_SESSION_ID) if t in tag]
        ours = self.args.service_name.encode()
        if code in (PADI, PADR):
            if service is None:
                self.log("%s without a Service-Name tag: ignored (RFC 2516 requires one)" % name)
                return
            if ours and service not in (b"", ours):
                self.log("%s asks for service %r, not %r: %s" % (name, service, ours,
                         "no PADO" if code == PADI else "PADS with Service-Name-Error"))
                if code == PADR:
                    self.send_discovery(src, PADS, 0, [(TAG_SERVICE_NAME_ERROR, b"")] + echoed)
                return
            offered = service if service or not ours else ours
            granted = self.max_payload(name, tag)
            granted_tags = [(TAG_PPP_MAX_PAYLOAD, struct.pack("!H", granted))] if granted else []
        if code == PADI:
            if sid != 0:
                self.log("PADI with session id 0x%04x (must be 0)" % sid)
            tags_out = [(TAG_AC_NAME, self.args.ac_name.encode()), (TAG_SERVICE_NAME, offered),
                        (TAG_AC_COOKIE, self.cookie(src))] + echoed + granted_tags
            self.send_discovery(src, PADO, 0, tags_out)
            self.log("PADO to %s ac-name %s service-name %r" % (mac_str(src), self.args.ac_name, offered))
            if granted:
                self.log("ppp-max-payload %d" % granted)
        elif code == PADR:
            if pkt.dst != mac_str(self.mac):
                self.log("PADR not unicast to us: ignored")
                return
            if tag.get(TAG_AC_COOKIE) != self.cookie(src):
                self.log("PADR with a wrong or missing AC-Cookie: PADS with Generic-Error")
                self.send_discovery(src, PADS, 0, [(TAG_GENERIC_ERROR, b"bad cookie")] + echoed)
                return
            s = self.sess
            if (s and s.mac == src and s.phase == "lcp" and s.host_uniq == tag.get(TAG_HOST_UNIQ)
                    and time.time() - s.started < 10):
                # A retransmitted PADR (our PADS lost or late): the same answer, not a new session.
                self.log("PADR again from %s: PADS again for session %d" % (mac_str(src), s.sid))
                again = [(TAG_PPP_MAX_PAYLOAD, struct.pack("!H", s.max_payload))] if s.max_payload else []
                self.send_discovery(src, PADS, s.sid, [(TAG_SERVICE_NAME, offered)] + echoed + again)
                return
            if self.sess:
                if self.sess.mac == src:
                    self.log("PADR from %s while its session %d is up: replacing it" % (mac_str(src), self.sess.sid))
                    self.end_session("replaced by a new PADR", padt=False)
                else:
                    self.log("PADR from %s while %s holds session %d: refused" % (mac_str(src), mac_str(self.sess.mac), self.sess.sid))
                    self.send_discovery(src, PADS, 0, [(TAG_GENERIC_ERROR, b"busy")] + echoed)
                    return
            sid = self.next_sid
            self.next_sid = sid % 65534 + 1
            self.send_discovery(src, PADS, sid, [(TAG_SERVICE_NAME, offered)] + echoed + granted_tags)
            self.log("PADS to %s session %d service-name %r" % (mac_str(src), sid, offered))
            if granted:
                self.log("ppp-max-payload %d" % granted)
            self.sess = Session(sid, src, random.randint(1, 0xFFFFFFFF), granted or self.args.mru)
            self.sess.host_uniq = tag.get(TAG_HOST_UNIQ)
            self.sess.max_payload = granted
            if self.args.max_payload:
                self.set_tun_mtu(granted or self.args.mru)
            self.send_lcp_request()
        elif code == PADT:
            s = self.sess
            if s and s.sid == sid and s.mac == src:
                self.log("PADT from client %s for session %d" % (mac_str(src), sid))
                self.end_session("padt from the client", padt=False)
            else:
                self.log("PADT from %s for session 0x%04x, not ours: ignored" % (mac_str(src), sid))

    def max_payload(self, name, tag):
        """RFC 4638: the PPP-Max-Payload to echo in the PADO/PADS, or None (as without the tag)."""
        value = tag.get(TAG_PPP_MAX_PAYLOAD)
        if not self.args.max_payload or value is None:
            return None
        if len(value) != 2:
            self.log("%s with a %d-byte PPP-Max-Payload tag: ignored" % (name, len(value)))
            return None
        (asked,) = struct.unpack("!H", value)
        if asked < 1492:
            # The tag only ever raises PPPoE's 1492 bytes (RFC 4638): a smaller value is an error.
            self.log("%s with PPP-Max-Payload %d (below 1492): ignored" % (name, asked))
            return None
        return min(asked, self.args.max_payload)

    # --- session stage --------------------------------------------------------------------

    def on_session(self, frame, src):
        ver_type, code, sid, length = struct.unpack("!BBHH", frame[14:20])
        s = self.sess
        if s is None or sid != s.sid or src != s.mac:
            key = (sid, src)
            count = self.ignored[key] = self.ignored.get(key, 0) + 1
            if count <= 5 or count % 100 == 0:
                self.log("ignored session frame %d of session 0x%04x from %s (current: %s)" % (
                    count, sid, mac_str(src), "session %d of %s" % (s.sid, mac_str(s.mac)) if s else "none"))
            return
        if ver_type != 0x11 or code != 0:
            self.log("session frame with version/type 0x%02x code 0x%02x: dropped" % (ver_type, code))
            return
        if length > len(frame) - 20 or length < 2:
            self.log("session frame with PPPoE length %d, frame payload %d: dropped" % (length, len(frame) - 20))
            return
        payload = frame[20:20 + length]
        (proto,) = struct.unpack("!H", payload[:2])
        if proto == PROTO_IP:
            self.from_client(payload[2:])
            return
        if proto == PROTO_IPV6 and self.ipv6:
            self.from_client6(payload[2:])
            return
        # scapy dispatches each code to its own subclass (PPP_LCP_Configure, PPP_LCP_Echo,
        # PPP_CHAP_ChallengeResponse, PPP_PAP_Request...): the payload, not ppp[PPP_LCP].
        control = PPP(payload).payload
        if s.terminating and not (proto == PROTO_LCP and control.code in (TERM_REQ, TERM_ACK)):
            self.log("protocol 0x%04x code %s while terminating: ignored" % (proto, getattr(control, "code", "?")))
            return
        if proto == PROTO_LCP and isinstance(control, PPP_LCP):
            self.on_lcp(control)
        elif proto == PROTO_CHAP and self.args.auth == "chap" and isinstance(control, PPP_CHAP):
            self.on_chap(control)
        elif proto == PROTO_PAP and self.args.auth == "pap":
            self.on_pap(control)
        elif proto == PROTO_IPCP and isinstance(control, PPP_IPCP):
            self.on_ipcp(control)
        elif proto == PROTO_IPV6CP and self.ipv6:
            self.on_ipv6cp(payload[2:])
        else:
            self.log("protocol 0x%04x from the client: Protocol-Reject" % proto)
            if s.phase != "lcp":
                self.send_ppp(PROTO_LCP, PPP_LCP_Protocol_Reject(
                    id=s.new_id(), rejected_protocol=proto, rejected_information=Raw(payload[2:2 + 64])))

    # --- LCP ------------------------------------------------------------------------------

    def send_lcp_request(self):
        s = self.sess
        if s.our_mru is None:
            s.our_mru = s.mru_limit
        options = []
        if LCP_MRU not in s.lcp_rejected:
            options.append(PPP_LCP_MRU_Option(max_recv_unit=s.our_mru))
        if self.args.auth == "chap":
            options.append(PPP_LCP_Auth_Protocol_Option(auth_protocol=PROTO_CHAP, algorithm=5))
        else:
            options.append(PPP_LCP_Auth_Protocol_Option(auth_protocol=PROTO_PAP))
        if LCP_MAGIC not in s.lcp_rejected:
            options.append(PPP_LCP_Magic_Number_Option(magic_number=s.our_magic))
        req = PPP_LCP_Configure(code=CONF_REQ, id=s.new_id(), options=options)
        s.lcp_req_id = req.id
        self.log("lcp configure-request id %d sent: mru %d auth %s magic 0x%08x"
                 % (req.id, s.our_mru, self.args.auth, s.our_magic))
        self.send_pending("lcp", PROTO_LCP, req)

    def lcp_down(self):
        s = self.sess
        s.phase = "lcp"
        s.lcp_ack_sent = s.lcp_ack_rcvd = False
        s.ipcp_ack_sent = s.ipcp_ack_rcvd = False
        s.reset_ipv6()
        s.auth_done = False
        s.pending.clear()
        s.echo_outstanding = 0

    def on_lcp(self, lcp):
        s = self.sess
        code = lcp.code
        if code == CONF_REQ:
            if s.phase != "lcp":
                self.log("lcp configure-request while %s: renegotiating" % s.phase)
                self.lcp_down()
                self.send_lcp_request()
            naks, rejects, seen = [], [], []
            for opt in lcp.options:
                kind = getattr(opt, "type", None)
                if kind == LCP_MRU and isinstance(opt, PPP_LCP_MRU_Option):
                    seen.append("mru %d" % opt.max_recv_unit)
                    if opt.max_recv_unit > s.mru_limit:
                        naks.append(PPP_LCP_MRU_Option(max_recv_unit=s.mru_limit))
                    elif opt.max_recv_unit < 576:
                        naks.append(PPP_LCP_MRU_Option(max_recv_unit=s.mru_limit))
                    else:
                        s.peer_mru = opt.max_recv_unit
                elif kind == LCP_MAGIC and isinstance(opt, PPP_LCP_Magic_Number_Option):
                    seen.append("magic 0x%08x" % opt.magic_number)
                    if opt.magic_number in (0, s.our_magic):
                        naks.append(PPP_LCP_Magic_Number_Option(magic_number=random.randint(1, 0xFFFFFFFF)))
                    else:
                        s.peer_magic = opt.magic_number
                else:
                    seen.append("option %s" % kind)
                    rejects.append(opt)
            if rejects:
                verdict = "reject"
                self.send_ppp(PROTO_LCP, PPP_LCP_Configure(code=CONF_REJ, id=lcp.id, options=rejects))
            elif naks:
                verdict = "nak"
                self.send_ppp(PROTO_LCP, PPP_LCP_Configure(code=CONF_NAK, id=lcp.id, options=naks))
            else:
                verdict = "ack"
                self.send_ppp(PROTO_LCP, PPP_LCP_Configure(code=CONF_ACK, id=lcp.id, options=lcp.options))
                s.lcp_ack_sent = True
            self.log("lcp configure-request id %d from the client: %s -> %s"
                     % (lcp.id, ", ".join(seen) or "no options", verdict))
        elif code == CONF_ACK:
            if lcp.id != getattr(s, "lcp_req_id", None) or s.phase != "lcp":
                self.log("lcp configure-ack id %d unexpected: ignored" % lcp.id)
                return
            s.lcp_ack_rcvd = True
            s.pending.pop("lcp", None)
            self.log("lcp configure-ack id %d from the client" % lcp.id)
        elif code in (CONF_NAK, CONF_REJ):
            if lcp.id != getattr(s, "lcp_req_id", None) or s.phase != "lcp":
                self.log("lcp configure-%s id %d unexpected: ignored" % ("nak" if code == CONF_NAK else "reject", lcp.id))
                return
            s.pending.pop("lcp", None)
            kinds = [getattr(o, "type", None) for o in lcp.options]
            if code == CONF_NAK:
                self.log("lcp configure-nak from the client: %s" % lcp.options)
                for opt in lcp.options:
                    if isinstance(opt, PPP_LCP_MRU_Option) and opt.max_recv_unit <= s.mru_limit:
                        s.our_mru = opt.max_recv_unit
                    elif isinstance(opt, PPP_LCP_Magic_Number_Option):
                        s.our_magic = random.randint(1, 0xFFFFFFFF)
                    # A Nak of the authentication protocol: we insist on ours.
            else:
                self.log("lcp configure-reject from the client: options %s" % kinds)
                if LCP_AUTH in kinds:
                    self.log("the client rejects authentication: terminating")
                    self.terminate_lcp("authentication rejected")
                    return
                s.lcp_rejected.update(kinds)
            self.send_lcp_request()
        elif code == TERM_REQ:
            self.log("lcp terminate-request id %d from the client (%r): terminate-ack" % (lcp.id, lcp.data))
            self.send_ppp(PROTO_LCP, PPP_LCP_Terminate(code=TERM_ACK, id=lcp.id))
            self.end_session("lcp terminate-request from the client", padt=False)
        elif code == TERM_ACK:
            self.log("lcp terminate-ack id %d from the client" % lcp.id)
            if s.terminating:
                self.end_session(s.terminating, padt=True)
        elif code == ECHO_REQ:
            if s.phase == "lcp":
                self.log("lcp echo-request id %d before lcp is open: discarded" % lcp.id)
                return
            note = "" if lcp.magic_number == s.peer_magic else " (magic 0x%08x, negotiated 0x%08x)" % (
                lcp.magic_number, s.peer_magic or 0)
            self.log("lcp echo-request id %d from the client%s: echo-reply" % (lcp.id, note))
            self.send_ppp(PROTO_LCP, PPP_LCP_Echo(code=ECHO_REP, id=lcp.id, magic_number=s.our_magic, data=lcp.data))
        elif code == ECHO_REP:
            s.echo_outstanding = 0
            note = "" if lcp.magic_number == s.peer_magic else " (magic 0x%08x, negotiated 0x%08x)" % (
                lcp.magic_number, s.peer_magic or 0)
            self.log("lcp echo-reply id %d from the client%s" % (lcp.id, note))
        elif code in (CODE_REJ, PROTO_REJ, DISCARD_REQ):
            self.log("lcp code %d from the client: %r" % (code, raw(lcp)))
        else:
            self.log("lcp code %d from the client: code-reject" % code)
            self.send_ppp(PROTO_LCP, PPP_LCP_Code_Reject(id=s.new_id(), rejected_packet=lcp))
        if s is self.sess and s.phase == "lcp" and s.lcp_ack_sent and s.lcp_ack_rcvd:
            s.phase = "auth"
            s.next_echo = time.time() + self.args.echo_interval
            self.log("lcp open: session %d mru %d (client's %d) magic 0x%08x (client's 0x%08x)"
                     % (s.sid, s.our_mru, s.peer_mru, s.our_magic, s.peer_magic or 0))
            if self.args.auth == "chap":
                s.chap_id = s.new_id()
                s.challenge = os.urandom(16)
                self.log("chap challenge id %d sent" % s.chap_id)
                self.send_pending("chap", PROTO_CHAP, PPP_CHAP_ChallengeResponse(
                    code=1, id=s.chap_id, value=s.challenge, optional_name=self.args.ac_name.encode()))
            else:
                self.log("waiting for a pap authenticate-request")

    def terminate_lcp(self, reason):
        s = self.sess
        s.terminating = reason
        s.pending.clear()
        s.phase = "terminating"
        s.reset_ipv6()  # no more RAs or IPv6 relay: every NCP is down with LCP
        self.send_pending("lcp terminate", PROTO_LCP, PPP_LCP_Terminate(code=TERM_REQ, id=s.new_id(), data=reason.encode()))

    # --- authentication -------------------------------------------------------------------

    def on_chap(self, chap):
        s = self.sess
        if chap.code != 2:
            self.log("chap code %d from the client: ignored" % chap.code)
            return
        if s.phase not in ("auth", "ipcp", "up"):
            self.log("chap response while %s: ignored" % s.phase)
            return
        if s.auth_done:
            if chap.id == s.success_id:
                self.log("chap response id %d again: success again" % chap.id)
                self.send_ppp(PROTO_CHAP, PPP_CHAP(code=3, id=chap.id, data=b"Welcome"))
            return
        if chap.id != s.chap_id:
            self.log("chap response id %d, challenge was %d: ignored" % (chap.id, s.chap_id))
            return
        s.pending.pop("chap", None)
        name = chap.optional_name or b""
        expected = hashlib.md5(bytes([s.chap_id]) + self.password + s.challenge).digest()
        if name == self.user and chap.value == expected:
            s.auth_done = True
            s.success_id = chap.id
            self.send_ppp(PROTO_CHAP, PPP_CHAP(code=3, id=chap.id, data=b"Welcome"))
            self.log("chap success: user %s" % name.decode(errors="replace"))
            self.start_ipcp()
            self.start_ipv6cp()
        else:
            why = "unknown user" if name != self.user else "wrong response (password)"
            self.send_ppp(PROTO_CHAP, PPP_CHAP(code=4, id=chap.id, data=b"Authentication failed"))
            self.log("chap failure: user %r, %s" % (name, why))
            self.terminate_lcp("authentication failed")

    def on_pap(self, pap):
        s = self.sess
        if pap.code != 1:
            self.log("pap code %d from the client: ignored" % pap.code)
            return
        if s.phase not in ("auth", "ipcp", "up"):
            self.log("pap request while %s: ignored" % s.phase)
            return
        if s.auth_done:
            self.send_ppp(PROTO_PAP, PPP_PAP_Response(code=2, id=pap.id, message=b"Login ok"))
            return
        user, password = pap.username or b"", pap.password or b""
        if user == self.user and password == self.password:
            s.auth_done = True
            self.send_ppp(PROTO_PAP, PPP_PAP_Response(code=2, id=pap.id, message=b"Login ok"))
            self.log("pap success: user %s" % user.decode(errors="replace"))
            self.start_ipcp()
            self.start_ipv6cp()
        else:
            self.send_ppp(PROTO_PAP, PPP_PAP_Response(code=3, id=pap.id, message=b"Login incorrect"))
            self.log("pap failure: user %r" % user)
            self.terminate_lcp("authentication failed")

    # --- IPCP -----------------------------------------------------------------------------

    def start_ipcp(self):
        s = self.sess
        s.phase = "ipcp"
        s.ipcp_ack_sent = s.ipcp_ack_rcvd = False
        req = PPP_IPCP(code=CONF_REQ, id=s.new_id(), options=[PPP_IPCP_Option_IPAddress(data=self.args.local)])
        s.ipcp_req_id = req.id
        self.log("ipcp configure-request id %d sent: address %s" % (req.id, self.args.local))
        self.send_pending("ipcp", PROTO_IPCP, req)

    def on_ipcp(self, ipcp):
        s = self.sess
        if s.phase not in ("ipcp", "up"):
            self.log("ipcp code %d while %s: discarded" % (ipcp.code, s.phase))
            return
        code = ipcp.code
        if code == CONF_REQ:
            if s.phase == "up":
                self.log("ipcp configure-request while up: renegotiating")
                self.start_ipcp()
            naks, rejects, seen = [], [], []
            wanted = {IPCP_ADDRESS: self.args.client}
            if self.dns:
                wanted[IPCP_DNS1] = self.dns[0]
                wanted[IPCP_DNS2] = self.dns[1] if len(self.dns) > 1 else self.dns[0]
            cls = {IPCP_ADDRESS: PPP_IPCP_Option_IPAddress, IPCP_DNS1: PPP_IPCP_Option_DNS1,
                   IPCP_DNS2: PPP_IPCP_Option_DNS2}
            for opt in ipcp.options:
                kind = opt.type
                if kind in wanted and isinstance(opt, PPP_IPCP_Option_IPAddress):
                    seen.append("%s %s" % ({3: "address", 129: "dns1", 131: "dns2"}[kind], opt.data))
                    if opt.data != wanted[kind]:
                        naks.append(cls[kind](data=wanted[kind]))
                else:
                    seen.append("option %d" % kind)
                    rejects.append(opt)
            if IPCP_ADDRESS not in [o.type for o in ipcp.options]:
                # RFC 1332: the peer may be told an address it did not ask about.
                naks.append(PPP_IPCP_Option_IPAddress(data=self.args.client))
            if rejects:
                verdict = "reject"
                self.send_ppp(PROTO_IPCP, PPP_IPCP(code=CONF_REJ, id=ipcp.id, options=rejects))
            elif naks:
                verdict = "nak with " + ", ".join("%d=%s" % (o.type, o.data) for o in naks)
                self.send_ppp(PROTO_IPCP, PPP_IPCP(code=CONF_NAK, id=ipcp.id, options=naks))
            else:
                verdict = "ack"
                self.send_ppp(PROTO_IPCP, PPP_IPCP(code=CONF_ACK, id=ipcp.id, options=ipcp.options))
                s.ipcp_ack_sent = True
            self.log("ipcp configure-request id %d from the client: %s -> %s" % (ipcp.id, ", ".join(seen) or "no options", verdict))
        elif code == CONF_ACK:
            if ipcp.id != getattr(s, "ipcp_req_id", None):
                self.log("ipcp configure-ack id %d unexpected: ignored" % ipcp.id)
                return
            s.pending.pop("ipcp", None)
            s.ipcp_ack_rcvd = True
            self.log("ipcp configure-ack id %d from the client" % ipcp.id)
        elif code in (CONF_NAK, CONF_REJ):
            self.log("ipcp configure-%s from the client: %s; insisting on %s"
                     % ("nak" if code == CONF_NAK else "reject", ipcp.options, self.args.local))
            if ipcp.id == getattr(s, "ipcp_req_id", None):
                s.pending.pop("ipcp", None)
                req = PPP_IPCP(code=CONF_REQ, id=s.new_id(), options=[PPP_IPCP_Option_IPAddress(data=self.args.local)])
                s.ipcp_req_id = req.id
                self.send_pending("ipcp", PROTO_IPCP, req)
        elif code == TERM_REQ:
            self.log("ipcp terminate-request from the client: terminate-ack, ipcp down")
            self.send_ppp(PROTO_IPCP, PPP_IPCP(code=TERM_ACK, id=ipcp.id))
            s.phase = "ipcp"
            s.ipcp_ack_sent = s.ipcp_ack_rcvd = False
            return
        else:
            self.log("ipcp code %d from the client: ignored" % code)
        if s.phase == "ipcp" and s.ipcp_ack_sent and s.ipcp_ack_rcvd:
            s.phase = "up"
            self.log("ipcp up: local %s client %s dns %s" % (self.args.local, self.args.client, " ".join(self.dns) or "-"))
            self.log("session up %d client %s address %s" % (s.sid, mac_str(s.mac), self.args.client))

    # --- IPv6CP ---------------------------------------------------------------------------

    def start_ipv6cp(self):
        """After authentication, beside IPCP (RFC 5072): only with --ipv6-prefix."""
        if not self.ipv6:
            return
        self.sess.reset_ipv6()
        self.sess.ipv6cp_naks = 0
        self.send_ipv6cp_request()

    def send_ipv6cp_request(self):
        s = self.sess
        s.ipv6cp_req_id = s.new_id()
        self.log("ipv6cp configure-request id %d sent: interface-id %s" % (s.ipv6cp_req_id, iid_str(self.iid)))
        self.send_pending("ipv6cp", PROTO_IPV6CP, ncp_packet(CONF_REQ, s.ipv6cp_req_id, [(IPV6CP_IID, self.iid)]))

    def suggest_iid(self):
        while True:
            # The universal/local bit cleared: a locally made identifier (RFC 4291 appendix A).
            iid = bytes([random.randint(0, 255) & 0xFD]) + os.urandom(7)
            if iid != bytes(8) and iid != self.iid:
                return iid

    def on_ipv6cp(self, packet):
        s = self.sess
        parsed = ncp_parse(packet)
        if parsed is None:
            self.log("malformed ipv6cp packet from the client (%d bytes): dropped" % len(packet))
            return
        code, ident, options, _ = parsed
        if not s.auth_done or s.phase not in ("ipcp", "up"):
            self.log("ipv6cp code %d while %s: discarded" % (code, s.phase))
            return
        if code == CONF_REQ:
            if s.ipv6_up:
                self.log("ipv6cp configure-request while up: renegotiating")
                s.reset_ipv6()
                self.send_ipv6cp_request()
            elif not s.ipv6cp_ack_rcvd and "ipv6cp" not in s.pending:
                # Stopped (after a Terminate-Request, or given up): RFC 1661 answers a
                # Configure-Request with one of its own as well.
                self.send_ipv6cp_request()
            naks, rejects, seen, peer = [], [], [], None
            for kind, value in options:
                if kind == IPV6CP_IID and len(value) == 8:
                    seen.append("interface-id %s" % iid_str(value))
                    if value in (bytes(8), self.iid):
                        naks.append((IPV6CP_IID, self.suggest_iid()))
                    else:
                        peer = value
                else:
                    seen.append("option %d" % kind)
                    rejects.append((kind, value))
            if IPV6CP_IID not in [kind for kind, _ in options]:
                # A Nak may suggest an option the request lacks (RFC 1661 section 5.3): without an
                # identifier the client's link-local address would be unknown.
                naks.append((IPV6CP_IID, self.suggest_iid()))
            if rejects:
                verdict = "reject"
                self.send_ppp(PROTO_IPV6CP, ncp_packet(CONF_REJ, ident, rejects))
                s.ipv6cp_ack_sent = False
            elif naks:
                verdict = "nak with interface-id " + iid_str(naks[0][1])
                self.send_ppp(PROTO_IPV6CP, ncp_packet(CONF_NAK, ident, naks))
                s.ipv6cp_ack_sent = False
            else:
                verdict = "ack"
                self.send_ppp(PROTO_IPV6CP, ncp_packet(CONF_ACK, ident, options))
                s.ipv6cp_ack_sent = True
                s.peer_iid = peer
            self.log("ipv6cp configure-request id %d from the client: %s -> %s" % (ident, ", ".join(seen) or "no options", verdict))
        elif code == CONF_ACK:
            if ident != s.ipv6cp_req_id or s.ipv6_up:
                self.log("ipv6cp configure-ack id %d unexpected: ignored" % ident)
                return
            s.pending.pop("ipv6cp", None)
            s.ipv6cp_ack_rcvd = True
            self.log("ipv6cp configure-ack id %d from the client" % ident)
        elif code in (CONF_NAK, CONF_REJ):
            self.log("ipv6cp configure-%s from the client: %s; insisting on interface-id %s"
                     % ("nak" if code == CONF_NAK else "reject",
                        ", ".join("option %d %s" % (kind, value.hex()) for kind, value in options) or "no options",
                        iid_str(self.iid)))
            if ident == s.ipv6cp_req_id and "ipv6cp" in s.pending:
                s.pending.pop("ipv6cp", None)
                s.ipv6cp_naks += 1
                # Insisting must end (RFC 1661's Max-Failure): a client that never takes our
                # identifier would otherwise ping-pong with us as fast as the link goes.
                if s.ipv6cp_naks >= 10:
                    self.log("ipv6cp: %d naks or rejects of our request: ipv6 given up for now" % s.ipv6cp_naks)
                    return
                self.send_ipv6cp_request()
        elif code == TERM_REQ:
            self.log("ipv6cp terminate-request from the client: terminate-ack, ipv6cp down")
            self.send_ppp(PROTO_IPV6CP, ncp_packet(TERM_ACK, ident, []))
            s.reset_ipv6()
            return
        elif code == TERM_ACK:
            self.log("ipv6cp terminate-ack id %d from the client" % ident)
        else:
            self.log("ipv6cp code %d from the client: ignored" % code)
        if not s.ipv6_up and s.ipv6cp_ack_sent and s.ipv6cp_ack_rcvd:
            s.ipv6_up = True
            self.log("ipv6cp up: local %s client %s" % (self.ll, link_local(s.peer_iid)))
            self.send_ra(solicited=False)

    # --- the ISP's own IPv6: router advertisements, neighbor discovery, DHCPv6 -------------

    def send_ra(self, solicited):
        s = self.sess
        # No source link-layer address option: PPP has no link-layer addresses to tell.
        ra = (IPv6(src=str(self.ll), dst="ff02::1", hlim=255)
              / ICMPv6ND_RA(chlim=64, M=1, O=1, prf=0, routerlifetime=1800)
              / ICMPv6NDOptPrefixInfo(prefixlen=64, L=1, A=1, validlifetime=86400, preferredlifetime=14400,
                                      prefix=str(self.prefix.network_address))
              / ICMPv6NDOptMTU(mtu=s.peer_mru))
        self.send_ipv6(raw(ra))
        s.ras_sent += 1
        if not solicited:
            s.next_ra = time.time() + RA_INTERVAL_SECS
        # Every 3 s would drown the log: the first unsolicited one and the solicited ones only.
        if solicited or not s.ra_logged:
            s.ra_logged = s.ra_logged or not solicited
            self.log("ra sent %s prefix %s" % ("solicited" if solicited else "unsolicited", self.prefix))

    def for_isp6(self, packet):
        """IPv6 from the client to a link-local or multicast address: the ISP's, never relayed."""
        s = self.sess
        ip = IPv6(packet)
        if ICMPv6ND_RS in ip:
            self.send_ra(solicited=True)
        elif ICMPv6ND_NS in ip and ipaddress.IPv6Address(ip[ICMPv6ND_NS].tgt) == self.ll:
            # From :: (duplicate address detection of our address): to all nodes, not solicited.
            dad = ipaddress.IPv6Address(ip.src).is_unspecified
            na = (IPv6(src=str(self.ll), dst="ff02::1" if dad else ip.src, hlim=255)
                  / ICMPv6ND_NA(R=1, S=0 if dad else 1, O=1, tgt=str(self.ll)))
            self.send_ipv6(raw(na))
            s.ns_answered += 1
            if s.ns_answered <= 5 or s.ns_answered % 100 == 0:
                self.log("neighbor solicitation for %s from %s: advertisement sent (%d so far)"
                         % (self.ll, ipaddress.IPv6Address(ip.src), s.ns_answered))
        elif (UDP in ip and ip[UDP].dport == 547 and isinstance(ip[UDP].payload, DHCP6)
              and ipaddress.IPv6Address(ip.dst) in (ipaddress.IPv6Address("ff02::1:2"), self.ll)):
            self.on_dhcpv6(ip)
        else:
            # MLD reports, the client's own DAD, anything else on the link: nothing to answer.
            s.ipv6_ignored += 1

    def on_dhcpv6(self, ip):
        message = ip[UDP].payload
        kind = DHCP6_NAMES.get(message.msgtype)
        client = ipaddress.IPv6Address(ip.src)
        if kind is None:
            self.log("dhcpv6 message type %d from %s: ignored" % (message.msgtype, client))
            return
        options = []
        option = message.payload
        while hasattr(option, "optcode"):
            options.append(option)
            option = option.payload
        # An option's own bytes: raw() of a dissected option also holds the options after it.
        own = dict((o.optcode, raw(o)[:4 + o.optlen]) for o in reversed(options))
        if DHCP6_OPT_CLIENTID not in own and kind != "information-request":
            self.log("dhcpv6 %s from %s without a client identifier: ignored" % (kind, client))
            return
        if DHCP6_OPT_SERVERID in own and own[DHCP6_OPT_SERVERID][4:] != raw(self.duid):
            self.log("dhcpv6 %s from %s for server %s, not us: ignored" % (kind, client, own[DHCP6_OPT_SERVERID][4:].hex()))
            return
        rapid = kind == "solicit" and DHCP6_OPT_RAPID_COMMIT in own
        advertise = kind == "solicit" and not rapid
        answer = (DHCP6_Advertise if advertise else DHCP6_Reply)(trid=message.trid)
        if DHCP6_OPT_CLIENTID in own:
            answer /= DHCP6OptClientId(own[DHCP6_OPT_CLIENTID])
        answer /= DHCP6OptServerId(duid=self.duid)
        if rapid:
            answer /= DHCP6OptRapidCommit()
        delegated = False
        if kind == "release":
            # RFC 8415 section 18.3.7: Success, and no IA options for what it had delegated.
            answer /= DHCP6OptStatusCode(statuscode=0, statusmsg="released")
        for option in options:
            if option.optcode == DHCP6_OPT_IA_PD:
                delegated = True
                if kind != "release":
                    answer /= DHCP6OptIA_PD(iaid=option.iaid, T1=1000, T2=2000, iapdopt=[DHCP6OptIAPrefix(
                        preflft=3000, validlft=4000, plen=self.delegate.prefixlen,
                        prefix=str(self.delegate.network_address))])
            elif option.optcode == DHCP6_OPT_IA_NA and kind != "release":
                answer /= DHCP6OptIA_NA(iaid=option.iaid, ianaopts=[DHCP6OptStatusCode(
                    statuscode=DHCP6_NO_ADDRS_AVAIL, statusmsg="prefix delegation only")])
        if self.dns6 and kind != "release":
            answer /= DHCP6OptDNSServers(dnsservers=self.dns6)
        self.send_ipv6(raw(IPv6(src=str(self.ll), dst=ip.src) / UDP(sport=547, dport=546) / answer))
        self.log("dhcpv6 %s from %s -> %s prefix %s" % (kind, client, "advertise" if advertise else "reply",
                                                         self.delegate if delegated else "-"))

    # --- relay ----------------------------------------------------------------------------

    def describe(self, packet, direction):
        """Logs relayed TCP SYNs with their MSS and ICMP echoes (the checks' evidence)."""
        if len(packet) < 20 or packet[0] >> 4 != 4:
            return
        proto = packet[9]
        ihl = (packet[0] & 15) * 4
        if proto == 6 and len(packet) >= ihl + 14 and packet[ihl + 13] & 0x02:
            ip = IP(packet)
            tcp = ip[TCP]
            mss = dict((k, v) for k, v in tcp.options if isinstance(k, str)).get("MSS")
            self.log("relay syn %s %s:%d > %s:%d flags %s mss %s" % (
                direction, ip.src, tcp.sport, ip.dst, tcp.dport, tcp.flags, mss if mss is not None else "none"))
        elif proto == 1 and len(packet) >= ihl + 8 and packet[ihl] in (0, 8):
            ip = IP(packet)
            icmp = ip[ICMP]
            self.log("relay icmp %s %s > %s %s id %d seq %d" % (
                direction, ip.src, ip.dst, "echo-request" if icmp.type == 8 else "echo-reply", icmp.id, icmp.seq))

    def describe6(self, packet, direction):
        """describe() for IPv6 without extension headers: TCP SYNs ("relay syn6") and ICMPv6 echoes."""
        if len(packet) < 48:
            return
        src, dst = ipaddress.IPv6Address(packet[8:24]), ipaddress.IPv6Address(packet[24:40])
        if packet[6] == 6 and len(packet) >= 60 and packet[53] & 0x02:
            tcp = IPv6(packet)[TCP]
            mss = dict((k, v) for k, v in tcp.options if isinstance(k, str)).get("MSS")
            self.log("relay syn6 %s [%s]:%d > [%s]:%d flags %s mss %s" % (
                direction, src, tcp.sport, dst, tcp.dport, tcp.flags, mss if mss is not None else "none"))
        elif packet[6] == 58 and packet[40] in (128, 129):
            ident, seq = struct.unpack("!HH", packet[44:48])
            self.log("relay icmp6 %s %s > %s %s id %d seq %d" % (
                direction, src, dst, "echo-request" if packet[40] == 128 else "echo-reply", ident, seq))

    def from_client(self, packet):
        s = self.sess
        if s.phase != "up":
            self.log("ipv4 from the client while %s: dropped" % s.phase)
            return
        if len(packet) < 20 or packet[0] >> 4 != 4:
            self.log("malformed ipv4 from the client (%d bytes): dropped" % len(packet))
            return
        (total,) = struct.unpack("!H", packet[2:4])
        if total > len(packet) or total < 20:
            self.log("ipv4 total length %d, %d bytes in the frame: dropped" % (total, len(packet)))
            return
        if total > s.our_mru:
            s.oversized += 1
            if s.oversized <= 5 or s.oversized % 100 == 0:
                self.log("ipv4 of %d bytes from the client exceeds our mru %d (%d so far)" % (total, s.our_mru, s.oversized))
        packet = packet[:total]
        if packet[12:16] != self.client_raw and s.relayed_in < 100:
            self.log("ipv4 from the client with source %s, not %s" % (socket.inet_ntoa(packet[12:16]), self.args.client))
        self.describe(packet, "client->net")
        s.relayed_in += 1
        if self.tun is not None:
            try:
                os.write(self.tun, packet)
            except OSError as error:
                self.log("tun write failed: %s" % error)

    def from_client6(self, packet):
        s = self.sess
        if len(packet) < 40 or packet[0] >> 4 != 6:
            self.log("malformed ipv6 from the client (%d bytes): dropped" % len(packet))
            return
        (plen,) = struct.unpack("!H", packet[4:6])
        total = 40 + plen
        if total > len(packet):
            self.log("ipv6 payload length %d, %d bytes in the frame: dropped" % (plen, len(packet)))
            return
        packet = packet[:total]
        if not s.ipv6_up:
            s.ipv6_dropped += 1
            if s.ipv6_dropped <= 5 or s.ipv6_dropped % 100 == 0:
                self.log("ipv6 from the client while ipv6cp is not open: dropped (%d so far)" % s.ipv6_dropped)
            return
        if total > s.our_mru:
            s.oversized += 1
            if s.oversized <= 5 or s.oversized % 100 == 0:
                self.log("ipv6 of %d bytes from the client exceeds our mru %d (%d so far)" % (total, s.our_mru, s.oversized))
        if is_link_local_or_multicast(packet[24:40]):
            self.for_isp6(packet)
            return
        self.describe6(packet, "client->net")
        s.relayed_in += 1
        if self.tun is not None:
            try:
                os.write(self.tun, packet)
            except OSError as error:
                self.log("tun write failed: %s" % error)

    def from_tun6(self, packet):
        s = self.sess
        if s is None or not s.ipv6_up or len(packet) < 40:
            return
        if is_link_local_or_multicast(packet[24:40]):
            return  # the ISP kernel's own ND, MLD and RS on the TUN: not the client's business
        if len(packet) > s.peer_mru:
            s.oversized += 1
            if s.oversized <= 5 or s.oversized % 100 == 0:
                self.log("%d bytes from the tun exceed the client's mru %d: dropped (%d so far)"
                         % (len(packet), s.peer_mru, s.oversized))
            return
        self.describe6(packet, "net->client")
        s.relayed_out += 1
        self.send_ipv6(packet)

    def from_tun(self, packet):
        s = self.sess
        # The TUN has no packet information header: the version nibble tells IPv6 from IPv4.
        if self.ipv6 and packet and packet[0] >> 4 == 6:
            self.from_tun6(packet)
            return
        if s is None or s.phase != "up":
            return
        # The MRU bounds the PPP information field, the protocol number not counted.
        if len(packet) > s.peer_mru:
            s.oversized += 1
            if s.oversized <= 5 or s.oversized % 100 == 0:
                self.log("%d bytes from the tun exceed the client's mru %d: dropped (%d so far)"
                         % (len(packet), s.peer_mru, s.oversized))
            return
        self.describe(packet, "net->client")
        s.relayed_out += 1
        header = s.mac + self.mac + struct.pack("!HBBHHH", ETH_P_PPPOE_SESS, 0x11, 0, s.sid, len(packet) + 2, PROTO_IP)
        self.send_frame(header + packet)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iface", required=True, help="the interface facing the clients")
    parser.add_argument("--ac-name", default="gwppp-isp")
    parser.add_argument("--service-name", default="", help="the service offered; empty: any asked for")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--auth", choices=["chap", "pap"], default="chap")
    parser.add_argument("--local", required=True, help="the ISP's PPP address")
    parser.add_argument("--client", required=True, help="the address IPCP assigns to the client")
    parser.add_argument("--dns", nargs="*", default=[], help="up to two DNS servers (RFC 1877)")
    parser.add_argument("--mru", type=int, default=1492)
    parser.add_argument("--tun", help="TUN device for the relay (created if missing)")
    parser.add_argument("--log", help="log file (default stderr)")
    parser.add_argument("--session-id", type=int, default=0, help="the first session id (default random)")
    parser.add_argument("--echo-interval", type=float, default=3.0, help="seconds between its LCP echo requests; 0: none")
    parser.add_argument("--max-payload", type=int,
                        help="RFC 4638: grant a client's PPP-Max-Payload tag up to this many bytes (> 1492), "
                             "the session's MRU then; without it the tag is ignored")
    parser.add_argument("--ipv6-prefix", metavar="PREFIX/64",
                        help="enables IPv6CP, router advertisements of this /64, DHCPv6 prefix delegation and the "
                             "IPv6 relay; without it IPv6CP is Protocol-Rejected")
    parser.add_argument("--ipv6-delegate", metavar="PREFIX/LEN",
                        help="the prefix DHCPv6 delegates in each IA_PD (required with --ipv6-prefix)")
    parser.add_argument("--ipv6-iid", metavar="IID",
                        help="the ISP's IPv6CP interface identifier, as an address (default ::1: link-local fe80::1)")
    parser.add_argument("--ipv6-dns", nargs="*", default=[], metavar="ADDRESS",
                        help="IPv6 DNS servers for DHCPv6 (option 23)")
    args = parser.parse_args()
    if not 0 <= args.session_id <= 65534:
        parser.error("--session-id must be 1..65534")
    if len(args.dns) > 2:
        parser.error("--dns takes at most two addresses")
    if args.max_payload is not None and not 1492 < args.max_payload <= 65535:
        parser.error("--max-payload must be 1493..65535")
    if args.ipv6_prefix is None:
        if args.ipv6_delegate or args.ipv6_iid or args.ipv6_dns:
            parser.error("--ipv6-delegate, --ipv6-iid and --ipv6-dns need --ipv6-prefix")
    else:
        try:
            prefix = ipaddress.IPv6Network(args.ipv6_prefix)
            if prefix.prefixlen != 64:
                parser.error("--ipv6-prefix must be a /64 (for SLAAC), not /%d" % prefix.prefixlen)
            if not args.ipv6_delegate:
                parser.error("--ipv6-delegate is required with --ipv6-prefix")
            ipaddress.IPv6Network(args.ipv6_delegate)
            iid = int(ipaddress.IPv6Address(args.ipv6_iid or "::1"))
            if iid == 0 or iid >> 64:
                parser.error("--ipv6-iid must be nonzero and within the low 64 bits, like ::1")
            for address in args.ipv6_dns:
                ipaddress.IPv6Address(address)
        except ValueError as error:
            parser.error("IPv6 options: %s" % error)
    isp = Isp(args)

    def on_usr1(signum, frame):
        isp.usr1 = True

    def on_term(signum, frame):
        isp.term = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    return isp.run()


if __name__ == "__main__":
    sys.exit(main())
