//! Mappings (PCP, NAT-PMP) act as port forwards of one port each, after the operator's.

use std::net::Ipv4Addr;

use pipeline::pipeline::config::{PortForward, PortMappings, Stateful};
use pipeline::wire::EthernetAddress;
use pipeline::Interface;

const TCP: u8 = 6;
const UDP: u8 = 17;
const WAN_ADDRESS: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

fn interfaces() -> Vec<Interface> {
    [(Ipv4Addr::new(192, 168, 10, 1), 24), (WAN_ADDRESS, 24)]
        .into_iter()
        .map(|(addr, prefix_len)| Interface {
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            addr,
            prefix_len,
            mtu: 1500,
            virtual_addr: None,
        })
        .collect()
}

fn forward(protocol: u8, ports: std::ops::RangeInclusive<u16>, host: u8) -> PortForward {
    PortForward {
        interface: 1,
        protocol,
        to_port: *ports.start(),
        ports,
        to: Ipv4Addr::new(192, 168, 10, host),
    }
}

#[test]
fn mappings_forward_their_port_after_the_operators_forwards() {
    let interfaces = interfaces();
    let mut stateful = Stateful::open(2);
    stateful.port_forwards = vec![forward(TCP, 8000..=8010, 5)];
    stateful.port_mappings = PortMappings::new(
        (0..200u16)
            .map(|i| {
                let port = 20000 + i;
                forward(if i % 2 == 0 { UDP } else { TCP }, port..=port, 2)
            })
            .chain([forward(TCP, 8005..=8005, 9), forward(UDP, 1..=3, 9)])
            .collect(),
    );
    // Ranges are not mappings: the UDP 1-3 one is left out.
    assert_eq!(stateful.port_mappings.forwards().len(), 201);
    let at = |protocol, port| {
        stateful
            .port_forward(&interfaces, protocol, WAN_ADDRESS, port)
            .map(|f| (f.to, f.translate(port)))
    };
    assert_eq!(
        at(TCP, 20001),
        Some((Ipv4Addr::new(192, 168, 10, 2), 20001))
    );
    assert_eq!(
        at(UDP, 20198),
        Some((Ipv4Addr::new(192, 168, 10, 2), 20198))
    );
    assert_eq!(at(UDP, 20001), None);
    assert_eq!(at(UDP, 2), None);
    // The operator's forward wins over a mapping of one of its ports.
    assert_eq!(at(TCP, 8005), Some((Ipv4Addr::new(192, 168, 10, 5), 8005)));
    // Only on the interface's own address.
    let lan = Ipv4Addr::new(192, 168, 10, 1);
    assert!(stateful
        .port_forward(&interfaces, TCP, lan, 20001)
        .is_none());
    // Indexed after the operator's forwards; the index finds the same forward again.
    let index = stateful
        .port_forward_index(&interfaces, TCP, WAN_ADDRESS, 20001)
        .unwrap();
    assert!(index >= stateful.port_forwards.len());
    assert_eq!(stateful.forward_at(index).unwrap().ports, 20001..=20001);
    assert!(stateful.forwards_port(TCP, 20001) && stateful.forwards_port(TCP, 8010));
    assert!(!stateful.forwards_port(TCP, 20000));
    assert_eq!(stateful.all_port_forwards().count(), 202);
}
