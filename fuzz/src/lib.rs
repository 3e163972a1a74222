//! What the fuzz targets share: a byte reader that turns the fuzzer's input into choices, and
//! a frame builder and checker written independently of the pipeline's own wire code, so a
//! checksum the pipeline patches wrongly is not checked by the same mistake.

use std::net::Ipv4Addr;

/// Reads choices from the fuzz input; past its end every read is 0, so any input decodes.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&byte, rest)) => {
                self.data = rest;
                byte
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// One of `options`, chosen by the next byte.
    pub fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[usize::from(self.u8()) % options.len()]
    }

    /// Up to `max` bytes, length first.
    pub fn slice(&mut self, max: usize) -> &'a [u8] {
        let len = usize::from(self.u16()).min(max).min(self.data.len());
        let (taken, rest) = self.data.split_at(len);
        self.data = rest;
        taken
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

pub const ETH_LEN: usize = 14;
pub const IP_LEN: usize = 20;
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const GRE: u8 = 47;

/// The Internet checksum (RFC 1071) of `data`, plus `initial` (a pseudo header's sum).
pub fn checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = initial;
    let mut chunks = data.chunks_exact(2);
    for pair in &mut chunks {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The TCP/UDP pseudo header's sum.
pub fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: usize) -> u32 {
    let (s, d) = (src.octets(), dst.octets());
    [
        u16::from_be_bytes([s[0], s[1]]),
        u16::from_be_bytes([s[2], s[3]]),
        u16::from_be_bytes([d[0], d[1]]),
        u16::from_be_bytes([d[2], d[3]]),
        u16::from(protocol),
        len as u16,
    ]
    .iter()
    .map(|&word| u32::from(word))
    .sum()
}

/// An IPv4 header and what follows, to be written after an Ethernet header.
#[derive(Clone, Copy, Debug)]
pub struct Ip {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// In 8-byte units.
    pub frag_offset: u16,
}

impl Ip {
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8) -> Self {
        Ip {
            src,
            dst,
            protocol,
            ttl: 64,
            ident: 0x1234,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
        }
    }
}

/// Transport header fields; which ones count depends on the protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct L4 {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    /// TCP: a window scale option on SYNs.
    pub window_scale: Option<u8>,
    /// TCP: an MSS option: after the window scale if there is one (an even offset), else
    /// after a NOP (an odd one).
    pub mss: Option<u16>,
    /// ICMP: type and code (echo request 8/0, reply 0/0, errors 3 and 11).
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// ICMP: the 4 bytes after the checksum (ident and sequence for queries, MTU for frag-needed).
    pub icmp_rest: u32,
}

/// Writes Ethernet + IPv4 + transport + `payload` into `out`; returns the frame length, or 0
/// if it does not fit. Checksums are all valid. A non-initial fragment (offset > 0) carries
/// `payload` right after the IP header.
pub fn write_frame(
    out: &mut [u8],
    eth: ([u8; 6], [u8; 6]),
    ip: &Ip,
    l4: &L4,
    payload: &[u8],
) -> usize {
    let l4_header = if ip.frag_offset != 0 {
        0
    } else {
        match ip.protocol {
            TCP => {
                20 + match (l4.window_scale, l4.mss) {
                    (None, None) => 0,
                    (Some(_), None) => 4,
                    (_, Some(_)) => 8,
                }
            }
            UDP => 8,
            ICMP => 8,
            _ => 0,
        }
    };
    let total = ETH_LEN + IP_LEN + l4_header + payload.len();
    if total > out.len() || IP_LEN + l4_header + payload.len() > 0xffff {
        return 0;
    }
    let frame = &mut out[..total];
    frame[0..6].copy_from_slice(&eth.0);
    frame[6..12].copy_from_slice(&eth.1);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let l4_start = ETH_LEN + IP_LEN;
    let l4_len = l4_header + payload.len();
    frame[l4_start + l4_header..].copy_from_slice(payload);
    let segment = &mut frame[l4_start..];
    match (ip.frag_offset, ip.protocol) {
        (0, TCP) => {
            segment[0..2].copy_from_slice(&l4.src_port.to_be_bytes());
            segment[2..4].copy_from_slice(&l4.dst_port.to_be_bytes());
            segment[4..8].copy_from_slice(&l4.seq.to_be_bytes());
            segment[8..12].copy_from_slice(&l4.ack.to_be_bytes());
            segment[12] = ((l4_header / 4) as u8) << 4;
            segment[13] = l4.flags;
            segment[14..16].copy_from_slice(&l4.window.to_be_bytes());
            segment[16..20].fill(0);
            match (l4.window_scale, l4.mss.map(u16::to_be_bytes)) {
                (None, None) => {}
                (Some(scale), None) => segment[20..24].copy_from_slice(&[1, 3, 3, scale]),
                (Some(scale), Some([high, low])) => {
                    segment[20..28].copy_from_slice(&[1, 3, 3, scale, 2, 4, high, low])
                }
                (None, Some([high, low])) => {
                    segment[20..28].copy_from_slice(&[1, 2, 4, high, low, 1, 1, 1])
                }
            }
            let sum = checksum(segment, pseudo_header(ip.src, ip.dst, TCP, l4_len));
            segment[16..18].copy_from_slice(&sum.to_be_bytes());
        }
        (0, UDP) => {
            segment[0..2].copy_from_slice(&l4.src_port.to_be_bytes());
            segment[2..4].copy_from_slice(&l4.dst_port.to_be_bytes());
            segment[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            segment[6..8].fill(0);
            let sum = match checksum(segment, pseudo_header(ip.src, ip.dst, UDP, l4_len)) {
                0 => 0xffff,
                sum => sum,
            };
            segment[6..8].copy_from_slice(&sum.to_be_bytes());
        }
        (0, ICMP) => {
            segment[0] = l4.icmp_type;
            segment[1] = l4.icmp_code;
            segment[2..4].fill(0);
            segment[4..8].copy_from_slice(&l4.icmp_rest.to_be_bytes());
            let sum = checksum(segment, 0);
            segment[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        _ => {}
    }
    let header = &mut frame[ETH_LEN..l4_start];
    header[0] = 0x45;
    header[1] = 0;
    header[2..4].copy_from_slice(&((IP_LEN + l4_len) as u16).to_be_bytes());
    header[4..6].copy_from_slice(&ip.ident.to_be_bytes());
    let flags = (u16::from(ip.dont_frag) << 14) | (u16::from(ip.more_frags) << 13);
    header[6..8].copy_from_slice(&(flags | (ip.frag_offset & 0x1fff)).to_be_bytes());
    header[8] = ip.ttl;
    header[9] = ip.protocol;
    header[10..12].fill(0);
    header[12..16].copy_from_slice(&ip.src.octets());
    header[16..20].copy_from_slice(&ip.dst.octets());
    let sum = checksum(header, 0);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    total
}

/// A parsed view of an IPv4 datagram (header without options assumed only where noted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuple {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

impl Tuple {
    pub fn reversed(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            protocol: self.protocol,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }
}

fn addr(bytes: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])
}

/// The IP header length, if `ip` starts with a plausible IPv4 header.
pub fn ip_header_len(ip: &[u8]) -> Option<usize> {
    let first = *ip.first()?;
    let len = usize::from(first & 0x0f) * 4;
    (first >> 4 == 4 && len >= IP_LEN && ip.len() >= len).then_some(len)
}

/// The tuple of an IPv4 datagram (no Ethernet header): ports for TCP/UDP, the identifier
/// for ICMP queries (both ports), 0 otherwise or for fragments past the first.
pub fn tuple(ip: &[u8]) -> Option<Tuple> {
    let header_len = ip_header_len(ip)?;
    let protocol = ip[9];
    let frag_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    let l4 = &ip[header_len..];
    let (src_port, dst_port) = match protocol {
        _ if frag_offset != 0 => (0, 0),
        TCP | UDP if l4.len() >= 4 => (
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        ),
        ICMP if l4.len() >= 8 && is_icmp_query(l4[0]) => {
            let ident = u16::from_be_bytes([l4[4], l4[5]]);
            (ident, ident)
        }
        TCP | UDP | ICMP => return None,
        _ => (0, 0),
    };
    Some(Tuple {
        src: addr(&ip[12..16]),
        dst: addr(&ip[16..20]),
        protocol,
        src_port,
        dst_port,
    })
}

pub fn is_icmp_query(msg_type: u8) -> bool {
    matches!(msg_type, 0 | 8 | 13 | 14 | 15 | 16)
}

pub fn is_icmp_error(msg_type: u8) -> bool {
    matches!(msg_type, 3 | 4 | 5 | 11 | 12)
}

/// Checks what a gateway must never send: a wrong IP header checksum, a total length that
/// disagrees with the frame, or (for an unfragmented TCP, UDP or ICMP datagram) a wrong
/// transport checksum. For an ICMP error, the quoted IP header's checksum too. `Err` says what.
pub fn check_datagram(frame: &[u8]) -> Result<(), String> {
    let ip = frame.get(ETH_LEN..).ok_or("no IP header")?;
    let header_len = ip_header_len(ip).ok_or("bad IP header")?;
    if checksum(&ip[..header_len], 0) != 0 {
        return Err("IP header checksum".into());
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total != ip.len() {
        return Err(format!(
            "total length {total} in a datagram of {}",
            ip.len()
        ));
    }
    let flags_offset = u16::from_be_bytes([ip[6], ip[7]]);
    if flags_offset & 0x3fff != 0 {
        // A fragment: its transport checksum covers bytes elsewhere.
        return Ok(());
    }
    let (src, dst, protocol) = (addr(&ip[12..16]), addr(&ip[16..20]), ip[9]);
    let l4 = &ip[header_len..];
    match protocol {
        TCP if checksum(l4, pseudo_header(src, dst, TCP, l4.len())) != 0 => {
            return Err("TCP checksum".into());
        }
        // A UDP checksum of 0 is none.
        UDP if l4.len() >= 8
            && l4[6..8] != [0, 0]
            && checksum(l4, pseudo_header(src, dst, UDP, l4.len())) != 0 =>
        {
            return Err("UDP checksum".into());
        }
        ICMP => {
            if checksum(l4, 0) != 0 {
                return Err("ICMP checksum".into());
            }
            if l4.len() > 8 && is_icmp_error(l4[0]) {
                let quote = &l4[8..];
                if let Some(len) = ip_header_len(quote) {
                    if checksum(&quote[..len], 0) != 0 {
                        return Err("quoted IP header checksum".into());
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// An ICMP error's quoted datagram: its tuple (as it travelled) and, when the whole quoted
/// transport header is there and the quote is the complete datagram, whether its checksum
/// still holds.
pub fn quoted_tuple(frame: &[u8]) -> Option<Tuple> {
    let ip = frame.get(ETH_LEN..)?;
    let header_len = ip_header_len(ip)?;
    let icmp = ip.get(header_len..)?;
    if icmp.len() < 8 || ip[9] != ICMP || !is_icmp_error(icmp[0]) {
        return None;
    }
    tuple(&icmp[8..])
}
