use std::fmt;

/// A DPDK ethdev port number. Only names a port: doing I/O on it takes a [`super::RxQueue`]
/// or [`super::TxQueue`], which only a started [`super::Port`] hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

/// An EAL logical core number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LcoreId(pub u32);

/// An RX queue index on one port. A type of its own so that an RX index cannot be passed
/// where a TX one is meant (their counts differ on some ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RxQueueId(pub u16);

/// A TX queue index on one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxQueueId(pub u16);

/// A NUMA node as DPDK numbers them, or [`SocketId::ANY`] when it is unknown or does not
/// matter (a virtual device, a single-node machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SocketId(pub(crate) i32);

impl SocketId {
    /// `SOCKET_ID_ANY`: let DPDK allocate on any node.
    pub const ANY: SocketId = SocketId(dpdk_sys::SOCKET_ID_ANY);

    /// From a DPDK return value, where a negative number means "unknown".
    pub(crate) fn from_raw(raw: i32) -> SocketId {
        if raw < 0 {
            SocketId::ANY
        } else {
            SocketId(raw)
        }
    }

    /// The node number, or None for `ANY`.
    pub fn node(self) -> Option<u32> {
        u32::try_from(self.0).ok()
    }

    pub(crate) fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "port {}", self.0)
    }
}

impl fmt::Display for LcoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lcore {}", self.0)
    }
}

impl fmt::Display for RxQueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rx queue {}", self.0)
    }
}

impl fmt::Display for TxQueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tx queue {}", self.0)
    }
}

impl fmt::Display for SocketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node() {
            Some(node) => write!(f, "socket {node}"),
            None => f.write_str("any socket"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_socket_from_dpdk_means_any() {
        assert_eq!(SocketId::from_raw(-1), SocketId::ANY);
        assert_eq!(SocketId::from_raw(-1).node(), None);
        assert_eq!(SocketId::from_raw(1).node(), Some(1));
        assert_eq!(SocketId::from_raw(0).to_string(), "socket 0");
    }
}
