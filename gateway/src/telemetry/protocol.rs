//! The names the logs and `ctl` give IP protocols, and the numbers `ctl` filters take.

pub const PROTOCOL_TCP: u8 = 6;

/// The protocol a filter names (`tcp`, `udp`, `icmp` or a number).
pub fn protocol_number(name: &str) -> Option<u8> {
    match name.to_ascii_lowercase().as_str() {
        "tcp" => Some(PROTOCOL_TCP),
        "udp" => Some(17),
        "icmp" => Some(1),
        number => number.parse().ok(),
    }
}

/// The protocol's name where it has one the filter takes, its number otherwise.
pub fn protocol_name(number: u8) -> String {
    match number {
        PROTOCOL_TCP => "tcp".into(),
        17 => "udp".into(),
        1 => "icmp".into(),
        other => other.to_string(),
    }
}
