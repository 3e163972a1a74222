//! `gateway ctl capture --drops REASON,...`: the packets the workers drop for those reasons,
//! as they arrived, into a pcapng file. The gateway's end ([`capture`]) arms every worker's
//! drop tap (`crate::dataplane::drop_tap`) and collects what they send back; the client's
//! ([`write_pcapng`]) writes the answer as pcapng, one interface block per interface the
//! drops arrived on, each packet's drop reason in its comment (`frame.comment` in tshark).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use pipeline::verdict::ReasonSet;
use serde_json::{json, Value};

use crate::dataplane::armed::arm_and_collect;
use crate::dataplane::drop_tap::{DropCaptureRequest, DropCaptureSender, DroppedPacket, SNAPLEN};

/// The most packets one drop capture takes (about 4 MB of answer), and the longest it waits.
pub const MAX_PACKETS: usize = 1000;
pub const MAX_TIMEOUT_MS: u64 = 60_000;

/// The reasons `labels` name (as `gateway ctl show drops` and the metrics' `reason` label
/// write them), or what is wrong with them.
pub fn reasons(labels: &[String]) -> Result<ReasonSet, String> {
    let set =
        ReasonSet::from_labels(labels.iter().map(String::as_str)).map_err(|(label, outside)| {
            let refusal = crate::config::drop_label_refusal(label, outside);
            format!("drops: {refusal}")
        })?;
    if set.is_empty() {
        return Err("drops: name at least one drop reason".into());
    }
    Ok(set)
}

/// The gateway's end: the next `count` packets any worker drops for one of `labels`' reasons,
/// waiting at most `timeout_ms`; `interface_names` name the interfaces by index.
pub fn capture(
    labels: &[String],
    count: usize,
    timeout_ms: u64,
    workers: &[DropCaptureSender],
    interface_names: &[String],
) -> Result<Value, String> {
    let reasons = reasons(labels)?;
    let count = count.clamp(1, MAX_PACKETS);
    let timeout = Duration::from_millis(timeout_ms.min(MAX_TIMEOUT_MS));
    let make = |arming| DropCaptureRequest { reasons, arming };
    let dropped = arm_and_collect(workers, count, timeout, "capturing drops", make)?;
    let packets: Vec<Value> = dropped
        .iter()
        .map(|record| packet_json(record, interface_names))
        .collect();
    Ok(json!({ "asked": count, "captured": packets.len(), "packets": packets }))
}

/// One dropped packet for the client: where and why it was dropped, when the ctl thread
/// received it (the worker sends it at once), and its frame in hex.
fn packet_json(record: &DroppedPacket, interface_names: &[String]) -> Value {
    let interface = interface_names
        .get(usize::from(record.ingress.port))
        .cloned()
        .unwrap_or_else(|| format!("port{}", record.ingress.port));
    let unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    let mut frame = String::with_capacity(2 * record.frame().len());
    for byte in record.frame() {
        let _ = write!(frame, "{byte:02x}");
    }
    json!({
        "worker": record.worker,
        "interface": interface,
        "handed_off": record.ingress.handed_off,
        "reason": record.reason.label(),
        "length": record.len,
        "unix_ns": unix_ns,
        "frame": frame,
    })
}

/// A drop capture's answer that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DropCaptureError {
    #[error("creating {path}")]
    Create {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing pcapng")]
    Pcapng(#[source] pcap_file::PcapError),
    #[error("the gateway's answer holds a frame that is not hex")]
    NotHex,
}

/// The client's end: writes `reply` (the gateway's answer to `CaptureDrops`) to `path` as
/// pcapng. Returns how many packets it wrote.
pub fn write_pcapng(reply: &Value, path: &Path) -> Result<usize, DropCaptureError> {
    let file = std::fs::File::create(path).map_err(|source| DropCaptureError::Create {
        path: path.display().to_string(),
        source,
    })?;
    let mut writer =
        PcapNgWriter::new(std::io::BufWriter::new(file)).map_err(DropCaptureError::Pcapng)?;
    let mut interfaces: HashMap<String, u32> = HashMap::new();
    let packets = reply["packets"].as_array().map_or(&[][..], Vec::as_slice);
    for packet in packets {
        let interface = packet["interface"].as_str().unwrap_or("?").to_string();
        let next_id = interfaces.len() as u32;
        let id = match interfaces.get(&interface) {
            Some(&id) => id,
            None => {
                let block = InterfaceDescriptionBlock {
                    linktype: DataLink::ETHERNET,
                    snaplen: SNAPLEN as u32,
                    options: vec![InterfaceDescriptionOption::IfName(interface.clone().into())],
                };
                writer
                    .write_pcapng_block(block)
                    .map_err(DropCaptureError::Pcapng)?;
                interfaces.insert(interface.clone(), next_id);
                next_id
            }
        };
        let frame = decode_hex(packet["frame"].as_str().unwrap_or_default())
            .ok_or(DropCaptureError::NotHex)?;
        let comment = format!(
            "dropped: {} (worker {}{})",
            packet["reason"].as_str().unwrap_or("?"),
            packet["worker"],
            if packet["handed_off"].as_bool() == Some(true) {
                ", handed off by another worker"
            } else {
                ""
            }
        );
        let block = EnhancedPacketBlock {
            interface_id: id,
            timestamp: Duration::from_nanos(packet["unix_ns"].as_u64().unwrap_or(0)),
            original_len: packet["length"].as_u64().unwrap_or(frame.len() as u64) as u32,
            data: frame.into(),
            options: vec![EnhancedPacketOption::Comment(comment.into())],
        };
        writer
            .write_pcapng_block(block)
            .map_err(DropCaptureError::Pcapng)?;
    }
    use std::io::Write as _;
    writer
        .into_inner()
        .flush()
        .map_err(|source| DropCaptureError::Write {
            path: path.display().to_string(),
            source,
        })?;
    Ok(packets.len())
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::DropReason;

    #[test]
    fn reasons_are_named_by_their_metric_labels_and_an_unknown_one_is_refused() {
        let set = reasons(&["conntrack_invalid".into(), "firewall_drop".into()]).unwrap();
        assert!(set.contains(DropReason::ConntrackInvalid));
        assert!(set.contains(DropReason::FirewallDrop));
        assert!(!set.contains(DropReason::L4Checksum));
        let error = reasons(&["conntrack_invalidd".into()]).unwrap_err();
        assert!(
            error.starts_with("drops: \"conntrack_invalidd\" is no drop reason"),
            "{error}"
        );
        assert!(reasons(&[]).is_err());
    }

    #[test]
    fn the_answer_becomes_a_pcapng_file_with_the_reason_in_each_packet_comment() {
        let reply = json!({
            "packets": [
                {"worker": 1, "interface": "lan", "handed_off": false,
                 "reason": "firewall_drop", "length": 64, "unix_ns": 1_700_000_000_000_000_000u64,
                 "frame": "00112233445566778899aabb0800"},
                {"worker": 0, "interface": "wan", "handed_off": true,
                 "reason": "conntrack_invalid", "length": 14, "unix_ns": 1_700_000_000_000_000_001u64,
                 "frame": "ffffffffffff0011223344550806"},
            ]
        });
        let dir = std::env::temp_dir().join(format!("drop-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("drops.pcapng");
        assert_eq!(write_pcapng(&reply, &path).unwrap(), 2);

        let bytes = std::fs::read(&path).unwrap();
        let mut reader = pcap_file::pcapng::PcapNgReader::new(&bytes[..]).unwrap();
        let mut interface_blocks = 0;
        let mut packets = Vec::new();
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                pcap_file::pcapng::Block::InterfaceDescription(_) => interface_blocks += 1,
                pcap_file::pcapng::Block::EnhancedPacket(epb) => packets.push(epb.into_owned()),
                _ => {}
            }
        }
        assert_eq!(interface_blocks, 2, "one interface block per interface");
        assert_eq!(packets[0].interface_id, 0);
        assert_eq!(packets[1].interface_id, 1);
        assert_eq!(packets[0].original_len, 64);
        assert_eq!(packets[0].data.len(), 14, "what was kept of the frame");
        assert_eq!(
            packets[1].options,
            [EnhancedPacketOption::Comment(
                "dropped: conntrack_invalid (worker 0, handed off by another worker)".into()
            )]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
