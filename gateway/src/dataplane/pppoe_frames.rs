//! PPPoE client sessions (RFC 2516) on interfaces with `address = "pppoe"`.
//!
//! The control thread runs each interface's client (`pipeline::pppoe::Client`: discovery,
//! LCP, PAP or CHAP, IPCP, IPv6CP) in `crate::control::pppoe_clients`, and gives the session's
//! address, peer and route to the router config. The workers only frame: [`decapsulate`] on
//! receipt turns the session's IPv4 and IPv6 frames into plain ones for the pipeline (from
//! the access concentrator's MAC to ours, as if the link were Ethernet), and [`encapsulate`]
//! on transmit does the reverse. They learn the session from
//! [`SessionStates`], two atomic words per interface (the session and its access
//! concentrator's MAC).
//!
//! A PPPoE interface carries PPPoE alone: any other frame on it (plain IPv4, ARP), either
//! way, is refused, and the session's datagrams are taken only from the access concentrator's MAC, so that
//! another host on the same segment cannot pass as the ISP (issue 44).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pipeline::wire::ethernet::{ethertype, HEADER_LEN as ETHERNET_HEADER_LEN};
use pipeline::wire::pppoe::{self, SessionHeader, OVERHEAD, PPP_IPV4, PPP_IPV6};
use pipeline::DropReason;

use crate::dpdk::Mbuf;

/// Where the EtherType sits in an untagged frame: its last two bytes.
const ETHERTYPE_AT: usize = ETHERNET_HEADER_LEN - 2;

/// The session of one interface as the workers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionState {
    bits: u32,
    /// The access concentrator's MAC in the low 48 bits, [`AC_KNOWN`] set; 0 if unknown.
    access_concentrator: u64,
}

/// Set in [`SessionState::access_concentrator`] once the MAC is known.
const AC_KNOWN: u64 = 1 << 48;

/// A 6-byte MAC as [`SessionState::access_concentrator`] holds it: the low 48 bits, known.
#[inline]
fn known_mac(mac: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[2..].copy_from_slice(mac);
    AC_KNOWN | u64::from_be_bytes(word)
}

/// Bit 16: discovery gave a session (its id in the low 16 bits), so its control frames come
/// in. Bit 17: IPCP is open, so IPv4 datagrams flow; bit 18: IPv6CP too, so IPv6 ones do.
const HAS_SESSION: u32 = 1 << 16;
const IP_UP: u32 = 1 << 17;
const IPV6_UP: u32 = 1 << 18;

impl SessionState {
    pub const DOWN: SessionState = SessionState {
        bits: 0,
        access_concentrator: 0,
    };

    /// A session without its access concentrator's MAC: its datagrams are refused until
    /// [`SessionState::from_access_concentrator`] names it.
    pub fn new(session_id: Option<u16>, ip_up: bool) -> SessionState {
        let bits = match session_id {
            None => 0,
            Some(id) => HAS_SESSION | u32::from(id) | if ip_up { IP_UP } else { 0 },
        };
        SessionState {
            bits,
            access_concentrator: 0,
        }
    }

    /// The same session, carrying IPv6 too while it carries IPv4 and `up`.
    pub fn with_ipv6(self, up: bool) -> SessionState {
        let carries = up && self.ip_up();
        SessionState {
            bits: if carries {
                self.bits | IPV6_UP
            } else {
                self.bits & !IPV6_UP
            },
            ..self
        }
    }

    /// The same session, whose frames come from `mac`.
    pub fn from_access_concentrator(self, mac: [u8; 6]) -> SessionState {
        SessionState {
            access_concentrator: known_mac(&mac),
            ..self
        }
    }

    #[inline]
    pub fn session_id(self) -> Option<u16> {
        (self.bits & HAS_SESSION != 0).then_some(self.bits as u16)
    }

    #[inline]
    pub fn ip_up(self) -> bool {
        self.bits & IP_UP != 0
    }

    #[inline]
    pub fn ipv6_up(self) -> bool {
        self.bits & IPV6_UP != 0
    }

    /// Whether the session carries datagrams of PPP protocol `protocol` now.
    #[inline]
    fn carries(self, protocol: u16) -> bool {
        match protocol {
            PPP_IPV4 => self.ip_up(),
            PPP_IPV6 => self.ipv6_up(),
            _ => false,
        }
    }

    /// The access concentrator's MAC, once known.
    #[inline]
    fn access_concentrator(self) -> Option<[u8; 6]> {
        let [_, _, mac @ ..] = self.access_concentrator.to_be_bytes();
        (self.access_concentrator & AC_KNOWN != 0).then_some(mac)
    }

    /// Whether `mac` is the session's access concentrator (never, while it is unknown).
    #[inline]
    fn is_access_concentrator(self, mac: &[u8]) -> bool {
        self.access_concentrator == known_mac(mac)
    }
}

/// Per interface, its session: written by the control thread, read by every worker on each
/// session frame. A worker may see a change a few packets late, which costs those packets
/// (counted) and nothing else.
#[derive(Debug)]
pub struct SessionStates {
    states: Box<[AtomicU32]>,
    access_concentrators: Box<[AtomicU64]>,
}

impl SessionStates {
    pub fn new(interfaces: usize) -> SessionStates {
        SessionStates {
            states: (0..interfaces).map(|_| AtomicU32::new(0)).collect(),
            access_concentrators: (0..interfaces).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The two words are stored apart: a worker that reads them between the stores sees a
    /// new session with the old MAC (or the reverse) and refuses a datagram or two, which a
    /// session change costs anyway.
    pub fn set(&self, iface: u16, state: SessionState) {
        let index = usize::from(iface);
        if let (Some(slot), Some(ac)) =
            (self.states.get(index), self.access_concentrators.get(index))
        {
            ac.store(state.access_concentrator, Ordering::Release);
            slot.store(state.bits, Ordering::Release);
        }
    }

    #[inline]
    pub fn get(&self, iface: u16) -> SessionState {
        let index = usize::from(iface);
        match (self.states.get(index), self.access_concentrators.get(index)) {
            (Some(slot), Some(ac)) => SessionState {
                bits: slot.load(Ordering::Acquire),
                access_concentrator: ac.load(Ordering::Acquire),
            },
            _ => SessionState::DOWN,
        }
    }
}

/// On receipt on a PPPoE interface: a frame of the live session carrying IPv4 (or IPv6, once
/// IPv6CP is open) becomes a plain IPv4 (IPv6) frame, the 8 bytes of PPPoE and PPP taken out
/// and the padding after the datagram cut. Discovery frames and PPP control frames pass
/// unchanged (the pipeline sends them to the control thread, whose client checks their
/// source); a bad header, a datagram of another session or from another MAC than the access
/// concentrator's, or a frame that is not PPPoE at all, is refused.
#[inline]
pub fn decapsulate(state: SessionState, mbuf: &mut Mbuf) -> Result<(), DropReason> {
    let frame = mbuf.data();
    let Some(ethertype) = frame.get(ETHERTYPE_AT..ETHERNET_HEADER_LEN) else {
        return Err(DropReason::TruncatedFrame);
    };
    if ethertype == ethertype::PPPOE_DISCOVERY.to_be_bytes() {
        return Ok(());
    }
    if ethertype != ethertype::PPPOE_SESSION.to_be_bytes() {
        return Err(DropReason::PppoeNotPppoe);
    }
    let SessionHeader {
        session_id,
        protocol,
        payload_len,
    } = pppoe::parse_session(&frame[ETHERNET_HEADER_LEN..])
        .map_err(|_| DropReason::PppoeMalformed)?;
    // PPP's control protocols go to the client whatever their session: the first LCP
    // request follows the PADS so closely that a worker may see it before the control
    // thread has published the new session. The client counts what is not its own.
    let inner = match protocol {
        PPP_IPV4 => ethertype::IPV4,
        PPP_IPV6 => ethertype::IPV6,
        _ => return Ok(()),
    };
    if state.session_id() != Some(session_id) {
        return Err(DropReason::PppoeSession);
    }
    if !state.carries(protocol) {
        return Err(DropReason::PppoeDown);
    }
    if !state.is_access_concentrator(&frame[6..12]) {
        return Err(DropReason::PppoeForeignSource);
    }
    // The PPP protocol's two bytes become the EtherType: 8 bytes before them go.
    if !mbuf.remove_after_addresses(OVERHEAD) {
        return Err(DropReason::PppoeMalformed);
    }
    let frame = mbuf.data_mut();
    frame[ETHERTYPE_AT..ETHERNET_HEADER_LEN].copy_from_slice(&inner.to_be_bytes());
    let datagram_end = ETHERNET_HEADER_LEN + payload_len;
    if mbuf.len() > datagram_end {
        // Shorter than it was, so it fits.
        let _ = mbuf.set_len(datagram_end);
    }
    Ok(())
}

/// On transmit by a PPPoE interface: an IPv4 (IPv6) frame becomes a frame of the live session
/// addressed to its access concentrator, whatever Ethernet destination it had (an IPv6
/// multicast's, from a kernel twin); the client's own frames (discovery, PPP control) leave as
/// they are. A datagram the session does not carry now is refused, and so is anything else
/// (a twin's ARP): a PPPoE link carries PPPoE alone.
#[inline]
pub fn encapsulate(state: SessionState, mbuf: &mut Mbuf) -> Result<(), DropReason> {
    let frame = mbuf.data();
    let Some(ethertype) = frame.get(ETHERTYPE_AT..ETHERNET_HEADER_LEN) else {
        return Err(DropReason::TruncatedFrame);
    };
    let protocol = if ethertype == ethertype::IPV4.to_be_bytes() {
        PPP_IPV4
    } else if ethertype == ethertype::IPV6.to_be_bytes() {
        PPP_IPV6
    } else if ethertype == ethertype::PPPOE_SESSION.to_be_bytes()
        || ethertype == ethertype::PPPOE_DISCOVERY.to_be_bytes()
    {
        return Ok(());
    } else {
        return Err(DropReason::PppoeNotPppoe);
    };
    // Without the access concentrator's MAC (a session changing) there is no one to send to.
    let (Some(session_id), true, Some(access_concentrator)) = (
        state.session_id(),
        state.carries(protocol),
        state.access_concentrator(),
    ) else {
        return Err(DropReason::PppoeDown);
    };
    let datagram_len = (frame.len() - ETHERNET_HEADER_LEN) as u16;
    let Some(opened) = mbuf.insert_after_addresses(OVERHEAD) else {
        return Err(DropReason::NoBuffer);
    };
    // The 8 new bytes plus the old EtherType's 2 become EtherType, PPPoE header and protocol.
    opened[..2].copy_from_slice(&ethertype::PPPOE_SESSION.to_be_bytes());
    let mut header = [0; OVERHEAD];
    pppoe::write_session(&mut header, session_id, protocol, datagram_len);
    let frame = mbuf.data_mut();
    frame[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + OVERHEAD].copy_from_slice(&header);
    frame[..6].copy_from_slice(&access_concentrator);
    Ok(())
}
