//! The address types the sections share: IPv4 and IPv6 prefixes, rule prefixes, an
//! interface's address.

use super::*;

/// An IPv4 address with a prefix length, "192.168.1.1/24".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Ipv4Cidr {
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    pub fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        }
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.network())
    }
}

impl FromStr for Ipv4Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, len) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not an address/prefix-length like 10.0.0.1/24"))?;
        let addr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv4 address"))?;
        let len = len
            .parse::<u8>()
            .ok()
            .filter(|&len| len <= 32)
            .ok_or_else(|| format!("{len:?} is not a prefix length 0..=32"))?;
        Ok(Ipv4Cidr { addr, len })
    }
}

impl<'de> Deserialize<'de> for Ipv4Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A firewall rule's source or destination: "10.0.0.0/8" or "2001:db8:77::/48".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RulePrefix {
    V4(Ipv4Cidr),
    V6(Ipv6Cidr),
}

impl FromStr for RulePrefix {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.contains(':') {
            text.parse().map(RulePrefix::V6)
        } else {
            text.parse().map(RulePrefix::V4)
        }
    }
}

impl<'de> Deserialize<'de> for RulePrefix {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for RulePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RulePrefix::V4(cidr) => cidr.fmt(f),
            RulePrefix::V6(cidr) => cidr.fmt(f),
        }
    }
}

/// An IPv6 address with a prefix length, "2001:db8:1::1/64".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Cidr {
    pub addr: Ipv6Addr,
    pub len: u8,
}

impl FromStr for Ipv6Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, len) = text.split_once('/').ok_or_else(|| {
            format!("{text:?} is not an address/prefix-length like 2001:db8:1::1/64")
        })?;
        let addr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv6 address"))?;
        let len = len
            .parse::<u8>()
            .ok()
            .filter(|&len| len <= 128)
            .ok_or_else(|| format!("{len:?} is not a prefix length 0..=128"))?;
        Ok(Ipv6Cidr { addr, len })
    }
}

impl<'de> Deserialize<'de> for Ipv6Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An interface's address: configured, the one a DHCP client gets on its twin, or the one
/// a PPPoE session's IPCP assigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterfaceAddress {
    Static(Ipv4Cidr),
    /// `"dhcp"`: none until the kernel twin has a lease (`crate::control::netlink`).
    Dhcp,
    /// `"pppoe"`: none until the session is up (`crate::dataplane::pppoe_frames`).
    Pppoe,
}

impl InterfaceAddress {
    /// The configured address; None for "dhcp" and "pppoe".
    pub fn cidr(&self) -> Option<Ipv4Cidr> {
        match self {
            InterfaceAddress::Static(cidr) => Some(*cidr),
            InterfaceAddress::Dhcp | InterfaceAddress::Pppoe => None,
        }
    }

    pub fn is_dhcp(&self) -> bool {
        *self == InterfaceAddress::Dhcp
    }

    pub fn is_pppoe(&self) -> bool {
        *self == InterfaceAddress::Pppoe
    }
}

impl FromStr for InterfaceAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "dhcp" => return Ok(InterfaceAddress::Dhcp),
            "pppoe" => return Ok(InterfaceAddress::Pppoe),
            _ => {}
        }
        text.parse()
            .map(InterfaceAddress::Static)
            .map_err(|err| format!("{err}, \"dhcp\" or \"pppoe\""))
    }
}

impl<'de> Deserialize<'de> for InterfaceAddress {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for InterfaceAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterfaceAddress::Static(cidr) => cidr.fmt(f),
            InterfaceAddress::Dhcp => f.write_str("dhcp"),
            InterfaceAddress::Pppoe => f.write_str("pppoe"),
        }
    }
}
