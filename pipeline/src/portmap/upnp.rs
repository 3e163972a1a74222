//! UPnP IGD's bytes: SSDP search answers (UDP 1900), the device description, and the
//! SOAP actions of the WANIPConnection and WANCommonInterfaceConfig services (IGD v1, which
//! IGD v2 control points speak too). Text in, text out; the gateway's port mapping thread
//! carries it over UDP and HTTP and decides each action with the [`MappingTable`].
//!
//! [`MappingTable`]: super::MappingTable

use std::net::Ipv4Addr;

/// SSDP's group and port (UPnP Device Architecture 1.1, 1.3).
pub const SSDP_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 255, 250);
pub const SSDP_PORT: u16 = 1900;
pub const DEVICE: &str = "urn:schemas-upnp-org:device:InternetGatewayDevice:1";
pub const WAN_DEVICE: &str = "urn:schemas-upnp-org:device:WANDevice:1";
pub const WAN_CONNECTION_DEVICE: &str = "urn:schemas-upnp-org:device:WANConnectionDevice:1";
pub const WAN_IP_CONNECTION: &str = "urn:schemas-upnp-org:service:WANIPConnection:1";
pub const WAN_COMMON: &str = "urn:schemas-upnp-org:service:WANCommonInterfaceConfig:1";
pub const DESCRIPTION_PATH: &str = "/rootDesc.xml";
/// The services' descriptions (SCPD), as the device description names them.
pub const IP_CONNECTION_SCPD_PATH: &str = "/WANIPConn1.xml";
pub const COMMON_SCPD_PATH: &str = "/WANCommonIFC1.xml";
pub const IP_CONNECTION_PATH: &str = "/ctl/IPConn";
pub const COMMON_PATH: &str = "/ctl/CmnIfCfg";
/// The longest request read (headers and body): SOAP actions are a few hundred bytes.
pub const MAX_REQUEST: usize = 8192;

/// The search target to answer an SSDP datagram with, if it is an M-SEARCH for something
/// this gateway is (`ssdp:all` is answered as the root device). `uuid`: the device's.
pub fn search_target<'a>(datagram: &'a str, uuid: &str) -> Option<&'a str> {
    let mut lines = datagram.split("\r\n");
    if lines.next()? != "M-SEARCH * HTTP/1.1" {
        return None;
    }
    let mut target = None;
    let mut discover = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_uppercase().as_str() {
            "ST" => target = Some(value),
            "MAN" => discover = value == "\"ssdp:discover\"",
            _ => {}
        }
    }
    let target = target.filter(|_| discover)?;
    let ours = [
        "ssdp:all",
        "upnp:rootdevice",
        DEVICE,
        WAN_DEVICE,
        WAN_CONNECTION_DEVICE,
        WAN_IP_CONNECTION,
        WAN_COMMON,
    ];
    let is_uuid = target.strip_prefix("uuid:") == Some(uuid);
    (ours.contains(&target) || is_uuid).then_some(target)
}

/// The unicast answer to an M-SEARCH for `target`.
pub fn search_response(target: &str, uuid: &str, location: &str) -> String {
    let target = if target == "ssdp:all" {
        "upnp:rootdevice"
    } else {
        target
    };
    let usn = if target.starts_with("uuid:") {
        target.to_string()
    } else {
        format!("uuid:{uuid}::{target}")
    };
    format!(
        "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nEXT:\r\nLOCATION: {location}\r\n\
         SERVER: Linux UPnP/1.1 gateway/1\r\nST: {target}\r\nUSN: {usn}\r\n\r\n"
    )
}

/// The device description: an InternetGatewayDevice with one WANDevice (the common
/// interface config) holding one WANConnectionDevice (the IP connection).
pub fn description(uuid: &str) -> String {
    let service = |kind: &str, id: &str, scpd: &str, control: &str| {
        format!(
            "<service><serviceType>{kind}</serviceType><serviceId>urn:upnp-org:serviceId:{id}</serviceId>\
             <SCPDURL>{scpd}</SCPDURL><controlURL>{control}</controlURL>\
             <eventSubURL>/evt/{id}</eventSubURL></service>"
        )
    };
    let device = |kind: &str, name: &str, suffix: &str, services: String, devices: String| {
        format!(
            "<device><deviceType>{kind}</deviceType><friendlyName>{name}</friendlyName>\
             <manufacturer>gateway</manufacturer><modelName>gateway</modelName>\
             <UDN>uuid:{uuid}{suffix}</UDN><serviceList>{services}</serviceList>\
             <deviceList>{devices}</deviceList></device>"
        )
    };
    let connection = device(
        WAN_CONNECTION_DEVICE,
        "WAN connection",
        "-2",
        service(
            WAN_IP_CONNECTION,
            "WANIPConn1",
            IP_CONNECTION_SCPD_PATH,
            IP_CONNECTION_PATH,
        ),
        String::new(),
    );
    let wan = device(
        WAN_DEVICE,
        "WAN",
        "-1",
        service(WAN_COMMON, "WANCommonIFC1", COMMON_SCPD_PATH, COMMON_PATH),
        connection,
    );
    let root = device(DEVICE, "gateway", "", String::new(), wan);
    format!(
        "<?xml version=\"1.0\"?>\r\n<root xmlns=\"urn:schemas-upnp-org:device-1-0\">\
         <specVersion><major>1</major><minor>0</minor></specVersion>{root}</root>"
    )
}

/// A service's description (SCPD): the actions the gateway answers, their arguments, and
/// the state variables those relate to. Some control points (Windows', GUPnP) read it
/// before they act.
pub fn scpd(service: &str) -> String {
    // (action, [(argument, in?, state variable)]).
    type Actions<'a> = &'a [(&'a str, &'a [(&'a str, bool, &'a str)])];
    const MAPPING_OUT: [(&str, bool, &str); 5] = [
        ("NewInternalPort", false, "InternalPort"),
        ("NewInternalClient", false, "InternalClient"),
        ("NewEnabled", false, "PortMappingEnabled"),
        ("NewPortMappingDescription", false, "PortMappingDescription"),
        ("NewLeaseDuration", false, "PortMappingLeaseDuration"),
    ];
    const KEY_IN: [(&str, bool, &str); 3] = [
        ("NewRemoteHost", true, "RemoteHost"),
        ("NewExternalPort", true, "ExternalPort"),
        ("NewProtocol", true, "PortMappingProtocol"),
    ];
    let specific: Vec<_> = KEY_IN.iter().chain(&MAPPING_OUT).copied().collect();
    let generic: Vec<_> = [("NewPortMappingIndex", true, "PortMappingNumberOfEntries")]
        .iter()
        .chain(
            KEY_IN
                .iter()
                .map(|(n, _, v)| (*n, false, *v))
                .collect::<Vec<_>>()
                .iter(),
        )
        .chain(&MAPPING_OUT)
        .copied()
        .collect();
    let add: Vec<_> = KEY_IN
        .iter()
        .copied()
        .chain([
            ("NewInternalPort", true, "InternalPort"),
            ("NewInternalClient", true, "InternalClient"),
            ("NewEnabled", true, "PortMappingEnabled"),
            ("NewPortMappingDescription", true, "PortMappingDescription"),
            ("NewLeaseDuration", true, "PortMappingLeaseDuration"),
        ])
        .collect();
    let ip_actions: Actions = &[
        (
            "GetExternalIPAddress",
            &[("NewExternalIPAddress", false, "ExternalIPAddress")],
        ),
        (
            "GetStatusInfo",
            &[
                ("NewConnectionStatus", false, "ConnectionStatus"),
                ("NewLastConnectionError", false, "LastConnectionError"),
                ("NewUptime", false, "Uptime"),
            ],
        ),
        (
            "GetConnectionTypeInfo",
            &[
                ("NewConnectionType", false, "ConnectionType"),
                (
                    "NewPossibleConnectionTypes",
                    false,
                    "PossibleConnectionTypes",
                ),
            ],
        ),
        ("AddPortMapping", &add),
        ("DeletePortMapping", &KEY_IN),
        ("GetSpecificPortMappingEntry", &specific),
        ("GetGenericPortMappingEntry", &generic),
    ];
    let ip_variables: &[(&str, &str)] = &[
        ("ConnectionType", "string"),
        ("PossibleConnectionTypes", "string"),
        ("ConnectionStatus", "string"),
        ("Uptime", "ui4"),
        ("LastConnectionError", "string"),
        ("ExternalIPAddress", "string"),
        ("RemoteHost", "string"),
        ("ExternalPort", "ui2"),
        ("PortMappingProtocol", "string"),
        ("InternalPort", "ui2"),
        ("InternalClient", "string"),
        ("PortMappingEnabled", "boolean"),
        ("PortMappingDescription", "string"),
        ("PortMappingLeaseDuration", "ui4"),
        ("PortMappingNumberOfEntries", "ui2"),
    ];
    let common_actions: Actions = &[(
        "GetCommonLinkProperties",
        &[
            ("NewWANAccessType", false, "WANAccessType"),
            (
                "NewLayer1UpstreamMaxBitRate",
                false,
                "Layer1UpstreamMaxBitRate",
            ),
            (
                "NewLayer1DownstreamMaxBitRate",
                false,
                "Layer1DownstreamMaxBitRate",
            ),
            ("NewPhysicalLinkStatus", false, "PhysicalLinkStatus"),
        ],
    )];
    let common_variables: &[(&str, &str)] = &[
        ("WANAccessType", "string"),
        ("Layer1UpstreamMaxBitRate", "ui4"),
        ("Layer1DownstreamMaxBitRate", "ui4"),
        ("PhysicalLinkStatus", "string"),
    ];
    let (actions, variables) = if service == WAN_COMMON {
        (common_actions, common_variables)
    } else {
        (ip_actions, ip_variables)
    };
    let actions: String = actions
        .iter()
        .map(|(name, arguments)| {
            let arguments: String = arguments
                .iter()
                .map(|(argument, input, variable)| {
                    let direction = if *input { "in" } else { "out" };
                    format!(
                        "<argument><name>{argument}</name><direction>{direction}</direction>\
                         <relatedStateVariable>{variable}</relatedStateVariable></argument>"
                    )
                })
                .collect();
            format!("<action><name>{name}</name><argumentList>{arguments}</argumentList></action>")
        })
        .collect();
    let variables: String = variables
        .iter()
        .map(|(name, kind)| {
            format!(
                "<stateVariable sendEvents=\"no\"><name>{name}</name><dataType>{kind}</dataType></stateVariable>"
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\"?>\r\n<scpd xmlns=\"urn:schemas-upnp-org:service-1-0\">\
         <specVersion><major>1</major><minor>0</minor></specVersion>\
         <actionList>{actions}</actionList><serviceStateTable>{variables}</serviceStateTable></scpd>"
    )
}

/// A SOAP fault's UPnP error (UPnP Device Architecture 3.2.2; IGD's WANIPConnection 2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub code: u16,
    pub description: &'static str,
}

pub const INVALID_ACTION: Fault = Fault {
    code: 401,
    description: "Invalid Action",
};
pub const INVALID_ARGS: Fault = Fault {
    code: 402,
    description: "Invalid Args",
};
pub const NOT_AUTHORIZED: Fault = Fault {
    code: 606,
    description: "Action not authorized",
};
pub const INVALID_INDEX: Fault = Fault {
    code: 713,
    description: "SpecifiedArrayIndexInvalid",
};
pub const NO_SUCH_ENTRY: Fault = Fault {
    code: 714,
    description: "NoSuchEntryInArray",
};
pub const CONFLICT: Fault = Fault {
    code: 718,
    description: "ConflictInMappingEntry",
};
pub const WILDCARD_REMOTE_HOST_ONLY: Fault = Fault {
    code: 726,
    description: "RemoteHostOnlySupportsWildcard",
};
pub const NO_PORT_MAPS_AVAILABLE: Fault = Fault {
    code: 728,
    description: "NoPortMapsAvailable",
};

/// AddPortMapping's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddPortMapping {
    pub external_port: u16,
    pub protocol: u8,
    pub internal_port: u16,
    pub internal_client: Ipv4Addr,
    /// Seconds; 0 asks for a permanent mapping, which the gateway caps.
    pub lease: u32,
}

/// An action the gateway answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    GetExternalIPAddress,
    GetStatusInfo,
    GetConnectionTypeInfo,
    AddPortMapping(AddPortMapping),
    DeletePortMapping { protocol: u8, external_port: u16 },
    GetSpecificPortMappingEntry { protocol: u8, external_port: u16 },
    GetGenericPortMappingEntry { index: usize },
    GetCommonLinkProperties,
}

impl Action {
    /// Its name, as the response's element is named after it.
    pub fn name(&self) -> &'static str {
        match self {
            Action::GetExternalIPAddress => "GetExternalIPAddress",
            Action::GetStatusInfo => "GetStatusInfo",
            Action::GetConnectionTypeInfo => "GetConnectionTypeInfo",
            Action::AddPortMapping(_) => "AddPortMapping",
            Action::DeletePortMapping { .. } => "DeletePortMapping",
            Action::GetSpecificPortMappingEntry { .. } => "GetSpecificPortMappingEntry",
            Action::GetGenericPortMappingEntry { .. } => "GetGenericPortMappingEntry",
            Action::GetCommonLinkProperties => "GetCommonLinkProperties",
        }
    }
}

/// The text of the element `name` in `body` (`<name>text</name>`, an `<ns:name>` too), if
/// present.
fn argument<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = body;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let end = rest.find('>')?;
        // The element's name, without its attributes or namespace prefix.
        let tag = rest[..end].split_whitespace().next().unwrap_or_default();
        let local = tag.rsplit(':').next().unwrap_or(tag);
        if local == name {
            let text = &rest[end + 1..];
            let close = text.find("</")?;
            return Some(text[..close].trim());
        }
    }
    None
}

fn protocol(body: &str) -> Result<u8, Fault> {
    match argument(body, "NewProtocol") {
        Some("TCP") => Ok(super::TCP),
        Some("UDP") => Ok(super::UDP),
        _ => Err(INVALID_ARGS),
    }
}

fn number<T: std::str::FromStr>(body: &str, name: &str) -> Result<T, Fault> {
    argument(body, name)
        .and_then(|text| text.parse().ok())
        .ok_or(INVALID_ARGS)
}

/// A port argument: 1-65535.
fn port(body: &str, name: &str) -> Result<u16, Fault> {
    number::<u16>(body, name).and_then(|port| {
        if port == 0 {
            Err(INVALID_ARGS)
        } else {
            Ok(port)
        }
    })
}

/// Reads a SOAP request from its SOAPAction header (`"urn:...:service:X:1#Action"`, quotes
/// optional) and its body. Only the wildcard remote host is supported.
pub fn parse_action(soap_action: &str, body: &str) -> Result<Action, Fault> {
    let soap_action = soap_action.trim().trim_matches('"');
    let (service, name) = soap_action.split_once('#').ok_or(INVALID_ACTION)?;
    let remote_host_empty = || argument(body, "NewRemoteHost").is_none_or(str::is_empty);
    let action = match (service, name) {
        (WAN_IP_CONNECTION, "GetExternalIPAddress") => Action::GetExternalIPAddress,
        (WAN_IP_CONNECTION, "GetStatusInfo") => Action::GetStatusInfo,
        (WAN_IP_CONNECTION, "GetConnectionTypeInfo") => Action::GetConnectionTypeInfo,
        (WAN_IP_CONNECTION, "AddPortMapping") => {
            if !remote_host_empty() {
                return Err(WILDCARD_REMOTE_HOST_ONLY);
            }
            Action::AddPortMapping(AddPortMapping {
                external_port: port(body, "NewExternalPort")?,
                protocol: protocol(body)?,
                internal_port: port(body, "NewInternalPort")?,
                internal_client: number(body, "NewInternalClient")?,
                lease: number(body, "NewLeaseDuration")?,
            })
        }
        (WAN_IP_CONNECTION, "DeletePortMapping") => {
            if !remote_host_empty() {
                return Err(NO_SUCH_ENTRY);
            }
            Action::DeletePortMapping {
                protocol: protocol(body)?,
                external_port: port(body, "NewExternalPort")?,
            }
        }
        (WAN_IP_CONNECTION, "GetSpecificPortMappingEntry") => {
            if !remote_host_empty() {
                return Err(NO_SUCH_ENTRY);
            }
            Action::GetSpecificPortMappingEntry {
                protocol: protocol(body)?,
                external_port: port(body, "NewExternalPort")?,
            }
        }
        (WAN_IP_CONNECTION, "GetGenericPortMappingEntry") => Action::GetGenericPortMappingEntry {
            index: number(body, "NewPortMappingIndex")?,
        },
        (WAN_COMMON, "GetCommonLinkProperties") => Action::GetCommonLinkProperties,
        _ => return Err(INVALID_ACTION),
    };
    Ok(action)
}

/// The service an action belongs to.
pub fn service_of(action: &Action) -> &'static str {
    match action {
        Action::GetCommonLinkProperties => WAN_COMMON,
        _ => WAN_IP_CONNECTION,
    }
}

const ENVELOPE_OPEN: &str = "<?xml version=\"1.0\"?>\r\n<s:Envelope \
     xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\" \
     s:encodingStyle=\"http://schemas.xmlsoap.org/soap/encoding/\"><s:Body>";
const ENVELOPE_CLOSE: &str = "</s:Body></s:Envelope>";

/// A successful action's response, with its output arguments in order.
pub fn response(action: &Action, outputs: &[(&str, String)]) -> String {
    let name = action.name();
    let service = service_of(action);
    let arguments: String = outputs
        .iter()
        .map(|(argument, value)| format!("<{argument}>{}</{argument}>", escape(value)))
        .collect();
    format!("{ENVELOPE_OPEN}<u:{name}Response xmlns:u=\"{service}\">{arguments}</u:{name}Response>{ENVELOPE_CLOSE}")
}

/// A fault's body (sent with HTTP status 500).
pub fn fault(fault: Fault) -> String {
    format!(
        "{ENVELOPE_OPEN}<s:Fault><faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring>\
         <detail><UPnPError xmlns=\"urn:schemas-upnp-org:control-1-0\"><errorCode>{}</errorCode>\
         <errorDescription>{}</errorDescription></UPnPError></detail></s:Fault>{ENVELOPE_CLOSE}",
        fault.code, fault.description
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What UPnP names a protocol.
pub fn protocol_name(protocol: u8) -> &'static str {
    if protocol == super::TCP {
        "TCP"
    } else {
        "UDP"
    }
}
