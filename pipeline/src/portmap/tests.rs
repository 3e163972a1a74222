use std::net::Ipv4Addr;

use super::*;

const HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 3);

fn table(per_host: usize, total: usize) -> MappingTable {
    MappingTable::new(Limits {
        per_host,
        total,
        lifetime: 10..=3600,
        external_ports: 1024..=65535,
    })
}

fn ask(internal: Ipv4Addr, internal_port: u16, suggested_port: u16) -> Ask {
    Ask {
        protocol: UDP,
        internal,
        internal_port,
        suggested_port,
        lifetime: 60,
        origin: Origin::NatPmp,
        nonce: [0; 12],
        prefer_failure: false,
    }
}

fn nothing_kept(_: u8, _: u16) -> bool {
    false
}

#[test]
fn the_suggested_port_is_granted_and_a_repeat_renews_the_same_mapping() {
    let mut table = table(10, 100);
    let granted = table
        .map(&ask(HOST, 5000, 6000), 100, nothing_kept)
        .unwrap();
    assert_eq!(granted.external_port, 6000);
    assert_eq!(granted.lifetime, 60);
    // Renewed: the same external port even when another is suggested, a later expiry.
    let again = table
        .map(&ask(HOST, 5000, 7000), 130, nothing_kept)
        .unwrap();
    assert_eq!(again.external_port, 6000);
    assert_eq!((again.created, again.replaced), (None, None));
    assert_eq!(table.mappings().len(), 1);
    assert_eq!(table.mappings()[0].expires_at, 190);
}

#[test]
fn a_taken_or_kept_port_is_replaced_unless_the_client_prefers_failure() {
    let mut table = table(10, 100);
    table.map(&ask(HOST, 5000, 6000), 0, nothing_kept).unwrap();
    let kept = |protocol: u8, port: u16| protocol == UDP && port == 6001;
    // Taken by another host's mapping: the next free port after it (6001 is kept).
    let other = table.map(&ask(OTHER, 5000, 6000), 0, kept).unwrap();
    assert_eq!(other.external_port, 6002);
    let strict = Ask {
        prefer_failure: true,
        ..ask(OTHER, 5001, 6001)
    };
    assert_eq!(table.map(&strict, 0, kept), Err(Refusal::PortUnavailable));
    // Below the external range: moved into it.
    let low = table.map(&ask(OTHER, 22, 22), 0, kept).unwrap();
    assert_eq!(low.external_port, 1024);
}

#[test]
fn quotas_per_host_and_in_all_refuse_the_next_mapping() {
    let mut table = table(2, 3);
    table.map(&ask(HOST, 1, 0), 0, nothing_kept).unwrap();
    table.map(&ask(HOST, 2, 0), 0, nothing_kept).unwrap();
    assert_eq!(
        table.map(&ask(HOST, 3, 0), 0, nothing_kept),
        Err(Refusal::HostQuota)
    );
    table.map(&ask(OTHER, 1, 0), 0, nothing_kept).unwrap();
    assert_eq!(
        table.map(&ask(OTHER, 2, 0), 0, nothing_kept),
        Err(Refusal::TableFull)
    );
    // Renewing an existing mapping is no new one.
    assert!(table.map(&ask(HOST, 2, 0), 5, nothing_kept).is_ok());
}

#[test]
fn lifetimes_are_clamped_and_mappings_expire() {
    let mut table = table(10, 100);
    let long = Ask {
        lifetime: 1_000_000,
        ..ask(HOST, 1, 0)
    };
    assert_eq!(table.map(&long, 0, nothing_kept).unwrap().lifetime, 3600);
    let short = Ask {
        lifetime: 1,
        ..ask(HOST, 2, 0)
    };
    assert_eq!(table.map(&short, 0, nothing_kept).unwrap().lifetime, 10);
    assert!(table.expire(9).is_empty());
    let gone = table.expire(10);
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].internal_port, 2);
    // Its port is free again.
    let reuse = table.map(&ask(OTHER, 9, gone[0].external_port), 10, nothing_kept);
    assert_eq!(reuse.unwrap().external_port, gone[0].external_port);
}

#[test]
fn pcp_mappings_answer_only_to_their_nonce() {
    let mut table = table(10, 100);
    let pcp = Ask {
        origin: Origin::Pcp,
        nonce: [7; 12],
        ..ask(HOST, 5000, 5000)
    };
    table.map(&pcp, 0, nothing_kept).unwrap();
    let forged = Ask {
        nonce: [8; 12],
        ..pcp
    };
    assert_eq!(table.map(&forged, 0, nothing_kept), Err(Refusal::NotOwner));
    assert_eq!(
        table.unmap(UDP, HOST, 5000, Some([8; 12])),
        Err(Refusal::NotOwner)
    );
    assert_eq!(table.unmap(UDP, HOST, 5000, None), Err(Refusal::NotOwner));
    let deleted = table.unmap(UDP, HOST, 5000, Some([7; 12])).unwrap();
    assert_eq!(deleted.map(|m| m.external_port), Some(5000));
    assert_eq!(table.unmap(UDP, HOST, 5000, Some([7; 12])), Ok(None));
}

#[test]
fn a_hosts_nat_pmp_mappings_go_together_and_only_its_own() {
    let mut table = table(10, 100);
    table.map(&ask(HOST, 1, 0), 0, nothing_kept).unwrap();
    table.map(&ask(HOST, 2, 0), 0, nothing_kept).unwrap();
    table.map(&ask(OTHER, 1, 0), 0, nothing_kept).unwrap();
    let tcp = Ask {
        protocol: TCP,
        ..ask(HOST, 1, 0)
    };
    table.map(&tcp, 0, nothing_kept).unwrap();
    let gone = table.unmap_where(|m| m.protocol == UDP && m.internal == HOST);
    assert_eq!(gone.len(), 2);
    assert_eq!(table.mappings().len(), 2);
}

#[test]
fn upnp_deletes_by_external_port_only_the_requesters_own() {
    let mut table = table(10, 100);
    let upnp = Ask {
        origin: Origin::Upnp,
        ..ask(HOST, 5000, 6000)
    };
    table.map(&upnp, 0, nothing_kept).unwrap();
    let pcp = Ask {
        origin: Origin::Pcp,
        nonce: [1; 12],
        ..ask(HOST, 5001, 6001)
    };
    table.map(&pcp, 0, nothing_kept).unwrap();
    assert_eq!(table.by_external(UDP, 6000).unwrap().internal_port, 5000);
    assert_eq!(
        table.by_internal(UDP, HOST, 5001).unwrap().external_port,
        6001
    );
    assert_eq!(
        table.unmap_external(UDP, 6000, OTHER),
        Err(Refusal::NotOwner)
    );
    assert_eq!(
        table.unmap_external(UDP, 6001, HOST),
        Err(Refusal::NotOwner)
    );
    assert_eq!(table.unmap_external(TCP, 6000, HOST), Ok(None));
    assert!(table.unmap_external(UDP, 6000, HOST).unwrap().is_some());
    assert!(table.by_external(UDP, 6000).is_none());
}

#[test]
fn a_mapping_whose_port_a_static_forward_took_moves_on_renewal() {
    let mut table = table(10, 100);
    table.map(&ask(HOST, 5000, 6000), 0, nothing_kept).unwrap();
    let kept = |_: u8, port: u16| port == 6000;
    let renewed = table.map(&ask(HOST, 5000, 6000), 1, kept).unwrap();
    assert_eq!(renewed.external_port, 6001);
    assert_eq!(renewed.replaced.map(|m| m.external_port), Some(6000));
    assert_eq!(renewed.created.map(|m| m.external_port), Some(6001));
    assert_eq!(table.mappings().len(), 1);
}

#[test]
fn restored_mappings_are_checked_again() {
    let mut source = table(10, 100);
    for port in 1..=4 {
        source
            .map(&ask(HOST, port, 2000 + port), 0, nothing_kept)
            .unwrap();
    }
    let mut saved = source.mappings().to_vec();
    saved[0].expires_at = 5; // expired by the restart
    saved[1].external_port = 80; // out of the new range
    let mut restored = table(1, 100);
    let kept = |_: u8, port: u16| port == 2003;
    // One expired, one out of range, one kept, and the host's quota is now one.
    assert_eq!(restored.restore(saved.clone(), 10, kept), 3);
    assert_eq!(restored.mappings().len(), 1);
    assert_eq!(restored.mappings()[0].external_port, 2004);
    assert_eq!(restored.restore(saved, 10, kept), 4);
}

mod wire {
    use std::net::Ipv4Addr;

    use crate::portmap::{natpmp, pcp, TCP, UDP};

    #[test]
    fn nat_pmp_requests_and_responses() {
        assert_eq!(natpmp::parse(&[0, 0]), Ok(natpmp::Request::ExternalAddress));
        let map = [0, 2, 0, 0, 0x13, 0x88, 0x17, 0x70, 0, 0, 0x0e, 0x10];
        assert_eq!(
            natpmp::parse(&map),
            Ok(natpmp::Request::Map {
                protocol: TCP,
                internal_port: 5000,
                suggested_port: 6000,
                lifetime: 3600
            })
        );
        assert_eq!(natpmp::parse(&map[..11]), Err(natpmp::Unanswered::Ignore));
        // Responses are never answered; unknown opcodes are.
        assert_eq!(natpmp::parse(&[0, 129]), Err(natpmp::Unanswered::Ignore));
        assert_eq!(
            natpmp::parse(&[0, 3]),
            Err(natpmp::Unanswered::UnsupportedOpcode(3))
        );
        let mut out = [0; natpmp::MAX_RESPONSE_LEN];
        let len = natpmp::write_map_response(&mut out, UDP, 0, 77, (5000, 6000, 60));
        assert_eq!(
            &out[..len],
            &[0, 129, 0, 0, 0, 0, 0, 77, 0x13, 0x88, 0x17, 0x70, 0, 0, 0, 60]
        );
        let len = natpmp::write_address_response(&mut out, 0, 5, Ipv4Addr::new(203, 0, 113, 1));
        assert_eq!(&out[..len], &[0, 128, 0, 0, 0, 0, 0, 5, 203, 0, 113, 1]);
    }

    fn pcp_map(options: &[u8]) -> Vec<u8> {
        let mut request = vec![2, 1, 0, 0, 0, 0, 0, 120];
        request.extend(pcp::mapped(Ipv4Addr::new(192, 168, 10, 2)).octets());
        request.extend([9; 12]);
        request.extend([UDP, 0, 0, 0, 0x13, 0x88, 0x17, 0x70]);
        request.extend(pcp::mapped(Ipv4Addr::UNSPECIFIED).octets());
        request.extend(options);
        request
    }

    #[test]
    fn pcp_map_with_its_options() {
        let request = pcp::parse(&pcp_map(&[])).unwrap();
        assert_eq!(request.opcode, pcp::opcode::MAP);
        assert_eq!(request.lifetime, 120);
        let map = request.map.unwrap();
        assert_eq!(
            (map.protocol, map.internal_port, map.suggested_port),
            (UDP, 5000, 6000)
        );
        assert!(pcp::is_any(map.suggested_address));
        assert_eq!(map.nonce, [9; 12]);
        let mut third_party = vec![1, 0, 0, 16];
        third_party.extend(pcp::mapped(Ipv4Addr::new(192, 168, 10, 3)).octets());
        third_party.extend([2, 0, 0, 0]);
        let map = pcp::parse(&pcp_map(&third_party)).unwrap().map.unwrap();
        assert_eq!(
            map.third_party,
            Some(pcp::mapped(Ipv4Addr::new(192, 168, 10, 3)))
        );
        assert!(map.prefer_failure);
        // FILTER is refused, an unknown optional option skipped, a cut option malformed.
        let filter = [3, 0, 0, 20]
            .into_iter()
            .chain([0; 20])
            .collect::<Vec<u8>>();
        let refused = |bytes: &[u8]| match pcp::parse(bytes) {
            Err(pcp::Unanswered::Error { result, .. }) => result,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(&pcp_map(&filter)), pcp::result::UNSUPP_OPTION);
        assert!(pcp::parse(&pcp_map(&[200, 0, 0, 0])).is_ok());
        assert_eq!(
            refused(&pcp_map(&[1, 0, 0, 16])),
            pcp::result::MALFORMED_OPTION
        );
        assert_eq!(
            refused(&pcp_map(&[2, 0, 0, 0, 2, 0, 0, 0])),
            pcp::result::MALFORMED_OPTION
        );
        // Version, length and opcode.
        let mut v1 = pcp_map(&[]);
        v1[0] = 1;
        assert_eq!(refused(&v1), pcp::result::UNSUPP_VERSION);
        assert_eq!(refused(&pcp_map(&[])[..40]), pcp::result::MALFORMED_REQUEST);
        assert_eq!(refused(&pcp_map(&[0, 0])), pcp::result::MALFORMED_REQUEST);
        let mut peer = pcp_map(&[0; 20]);
        peer[1] = pcp::opcode::PEER;
        assert_eq!(refused(&peer), pcp::result::UNSUPP_OPCODE);
        let mut response = pcp_map(&[]);
        response[1] |= 0x80;
        assert_eq!(pcp::parse(&response), Err(pcp::Unanswered::Ignore));
        assert_eq!(pcp::parse(&[2]), Err(pcp::Unanswered::Ignore));
    }

    #[test]
    fn pcp_responses() {
        let mut out = [0; pcp::MAX_RESPONSE_LEN];
        let answer = pcp::MapAnswer {
            nonce: [9; 12],
            protocol: UDP,
            internal_port: 5000,
            external_port: 6000,
            external_address: pcp::mapped(Ipv4Addr::new(203, 0, 113, 1)),
        };
        let len = pcp::write_response(&mut out, pcp::opcode::MAP, (0, 120, 42), Some(&answer));
        assert_eq!(len, 60);
        assert_eq!(&out[..4], &[2, 0x81, 0, 0]);
        assert_eq!(&out[4..12], &[0, 0, 0, 120, 0, 0, 0, 42]);
        assert_eq!(&out[24..36], &[9; 12]);
        assert_eq!(&out[42..44], &6000u16.to_be_bytes());
        assert_eq!(&out[56..60], &[203, 0, 113, 1]);
        let len = pcp::write_announcement(&mut out, 3);
        assert_eq!(
            &out[..len.min(12)],
            &[2, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]
        );
        assert_eq!(len, 24);
    }
}

mod upnp_wire {
    use std::net::Ipv4Addr;

    use crate::portmap::upnp::{self, Action, AddPortMapping};
    use crate::portmap::{TCP, UDP};

    const UUID: &str = "0a1b2c3d-0000-4000-8000-000000000001";

    #[test]
    fn ssdp_searches_for_what_the_gateway_is_are_answered() {
        let search = |target: &str| {
            format!("M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 2\r\nST: {target}\r\n\r\n")
        };
        for target in [
            upnp::DEVICE,
            upnp::WAN_IP_CONNECTION,
            "ssdp:all",
            "upnp:rootdevice",
        ] {
            let text = search(target);
            assert_eq!(upnp::search_target(&text, UUID), Some(target));
        }
        assert_eq!(
            upnp::search_target(&search(&format!("uuid:{UUID}")), UUID),
            Some(format!("uuid:{UUID}").as_str())
        );
        assert_eq!(
            upnp::search_target(&search("urn:schemas-upnp-org:device:MediaRenderer:1"), UUID),
            None
        );
        let notify = search(upnp::DEVICE).replace("M-SEARCH", "NOTIFY");
        assert_eq!(upnp::search_target(&notify, UUID), None);
        let no_man = search(upnp::DEVICE).replace("MAN: \"ssdp:discover\"\r\n", "");
        assert_eq!(upnp::search_target(&no_man, UUID), None);
        let answer =
            upnp::search_response(upnp::DEVICE, UUID, "http://192.168.10.1:5000/rootDesc.xml");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(answer.contains("\r\nLOCATION: http://192.168.10.1:5000/rootDesc.xml\r\n"));
        assert!(answer.contains(&format!("\r\nUSN: uuid:{UUID}::{}\r\n", upnp::DEVICE)));
        assert!(answer.ends_with("\r\n\r\n"));
        for (service, action) in [
            (upnp::WAN_IP_CONNECTION, "<name>AddPortMapping</name>"),
            (upnp::WAN_COMMON, "<name>GetCommonLinkProperties</name>"),
        ] {
            let scpd = upnp::scpd(service);
            assert!(scpd.contains(action), "{scpd}");
            // Every argument's state variable is declared.
            for variable in scpd.split("<relatedStateVariable>").skip(1) {
                let name = variable.split('<').next().unwrap();
                assert!(
                    scpd.contains(&format!(
                        "<stateVariable sendEvents=\"no\"><name>{name}</name>"
                    )),
                    "{name}"
                );
            }
        }
        let description = upnp::description(UUID);
        for needed in [
            upnp::DEVICE,
            upnp::WAN_IP_CONNECTION,
            upnp::WAN_COMMON,
            upnp::IP_CONNECTION_PATH,
            upnp::IP_CONNECTION_SCPD_PATH,
            upnp::COMMON_SCPD_PATH,
        ] {
            assert!(description.contains(needed), "{needed}");
        }
    }

    fn add(body_args: &str) -> Result<Action, upnp::Fault> {
        let body = format!(
            "<?xml version=\"1.0\"?><s:Envelope><s:Body><u:AddPortMapping xmlns:u=\"{}\">{body_args}</u:AddPortMapping></s:Body></s:Envelope>",
            upnp::WAN_IP_CONNECTION
        );
        upnp::parse_action(
            &format!("\"{}#AddPortMapping\"", upnp::WAN_IP_CONNECTION),
            &body,
        )
    }

    #[test]
    fn soap_actions_are_read_with_their_arguments() {
        let args =
            "<NewRemoteHost></NewRemoteHost><NewExternalPort dt:dt=\"ui2\">41000</NewExternalPort>\
                    <NewProtocol>UDP</NewProtocol><NewInternalPort>5001</NewInternalPort>\
                    <NewInternalClient>192.168.10.2</NewInternalClient><NewEnabled>1</NewEnabled>\
                    <NewPortMappingDescription>x &lt;y&gt;</NewPortMappingDescription>\
                    <NewLeaseDuration>60</NewLeaseDuration>";
        assert_eq!(
            add(args),
            Ok(Action::AddPortMapping(AddPortMapping {
                external_port: 41000,
                protocol: UDP,
                internal_port: 5001,
                internal_client: Ipv4Addr::new(192, 168, 10, 2),
                lease: 60,
            }))
        );
        let remote = args.replace(
            "<NewRemoteHost></NewRemoteHost>",
            "<NewRemoteHost>1.2.3.4</NewRemoteHost>",
        );
        assert_eq!(add(&remote), Err(upnp::WILDCARD_REMOTE_HOST_ONLY));
        assert_eq!(add(&args.replace("UDP", "SCTP")), Err(upnp::INVALID_ARGS));
        assert_eq!(
            add(&args.replace(">41000<", ">0<")),
            Err(upnp::INVALID_ARGS)
        );
        assert_eq!(
            add(&args.replace(">41000<", ">70000<")),
            Err(upnp::INVALID_ARGS)
        );
        assert_eq!(
            add(&args.replace("192.168.10.2", "lan-host")),
            Err(upnp::INVALID_ARGS)
        );
        let delete = "<u:DeletePortMapping><NewRemoteHost/><NewExternalPort>41000</NewExternalPort><NewProtocol>TCP</NewProtocol></u:DeletePortMapping>";
        let action = format!("{}#DeletePortMapping", upnp::WAN_IP_CONNECTION);
        assert_eq!(
            upnp::parse_action(&action, delete),
            Ok(Action::DeletePortMapping {
                protocol: TCP,
                external_port: 41000
            })
        );
        let generic = "<NewPortMappingIndex>3</NewPortMappingIndex>";
        let action = format!("{}#GetGenericPortMappingEntry", upnp::WAN_IP_CONNECTION);
        assert_eq!(
            upnp::parse_action(&action, generic),
            Ok(Action::GetGenericPortMappingEntry { index: 3 })
        );
        let unknown = format!("{}#ForceTermination", upnp::WAN_IP_CONNECTION);
        assert_eq!(upnp::parse_action(&unknown, ""), Err(upnp::INVALID_ACTION));
        assert_eq!(upnp::parse_action("no-hash", ""), Err(upnp::INVALID_ACTION));
        let response = upnp::response(
            &Action::GetExternalIPAddress,
            &[("NewExternalIPAddress", "10.0.0.1".into())],
        );
        assert!(response.contains("<u:GetExternalIPAddressResponse xmlns:u=\"urn:schemas-upnp-org:service:WANIPConnection:1\"><NewExternalIPAddress>10.0.0.1</NewExternalIPAddress>"));
        let fault = upnp::fault(upnp::CONFLICT);
        assert!(fault.contains("<errorCode>718</errorCode>"));
    }
}
