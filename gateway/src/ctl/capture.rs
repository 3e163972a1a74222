//! `gateway ctl capture`: packets of one interface into a pcapng file, for operators who do
//! not run DPDK's tools themselves. The gateway says where the interface is (its DPDK port,
//! VLAN tag and EAL file prefix: `Request::CaptureTarget`); the client then runs DPDK's own
//! `dpdk-dumpcap` against it (`rte_pdump`, `eal.pdump = true`), which compiles the libpcap
//! filter to BPF and copies only while it runs, bounded in packets, time and bytes.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The most packets, seconds and KiB one capture may take.
pub const MAX_PACKETS: u64 = 10_000_000;
pub const MAX_SECONDS: u64 = 3600;
pub const MAX_KIB: u64 = 4 * 1024 * 1024;

/// A capture that cannot be taken, or that failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("--count: {0} is not between 1 and {MAX_PACKETS}")]
    Count(u64),
    #[error("--seconds: {0} is not between 1 and {MAX_SECONDS}")]
    Seconds(u64),
    #[error("--max-kib: {0} is not between 1 and {MAX_KIB}")]
    MaxKib(u64),
    #[error("the gateway named no file prefix")]
    NoFilePrefix,
    #[error("the gateway named no port")]
    NoPort,
    #[error("running dpdk-dumpcap (Debian package dpdk-dev)")]
    Spawn(#[source] std::io::Error),
    #[error("dpdk-dumpcap failed ({0})")]
    Failed(std::process::ExitStatus),
}

/// What the operator asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct Capture {
    /// A libpcap filter (`host 192.168.10.5 and tcp port 443`); None: everything.
    pub filter: Option<String>,
    pub count: u64,
    pub seconds: u64,
    /// The file's size limit, in KiB.
    pub max_kib: u64,
    pub output: PathBuf,
}

/// The `dpdk-dumpcap` command that takes `capture` of the interface `target` describes
/// (`CaptureTarget`'s answer). A VLAN subinterface is captured on its port, filtered to
/// its tag.
pub fn dumpcap_command(target: &Value, capture: &Capture) -> Result<Command, CaptureError> {
    if !(1..=MAX_PACKETS).contains(&capture.count) {
        return Err(CaptureError::Count(capture.count));
    }
    if !(1..=MAX_SECONDS).contains(&capture.seconds) {
        return Err(CaptureError::Seconds(capture.seconds));
    }
    if !(1..=MAX_KIB).contains(&capture.max_kib) {
        return Err(CaptureError::MaxKib(capture.max_kib));
    }
    let prefix = target["file_prefix"]
        .as_str()
        .ok_or(CaptureError::NoFilePrefix)?;
    let port = target["port_id"].as_u64().ok_or(CaptureError::NoPort)?;
    let filter = match (target["vlan"].as_u64(), capture.filter.as_deref()) {
        (Some(vlan), Some(filter)) => Some(format!("vlan {vlan} and ({filter})")),
        (Some(vlan), None) => Some(format!("vlan {vlan}")),
        (None, filter) => filter.map(str::to_string),
    };
    let mut command = Command::new("dpdk-dumpcap");
    command
        .arg(format!("--file-prefix={prefix}"))
        .args(["-i", &port.to_string()])
        .args(["-c", &capture.count.to_string()])
        .args(["-a", &format!("duration:{}", capture.seconds)])
        .args(["-a", &format!("filesize:{}", capture.max_kib)])
        .arg("-w")
        .arg(&capture.output);
    if let Some(filter) = filter {
        command.args(["-f", &filter]);
    }
    Ok(command)
}

/// Runs the capture; `dpdk-dumpcap` reports what it captured on stderr.
pub fn run(target: &Value, capture: &Capture) -> Result<(), CaptureError> {
    let mut command = dumpcap_command(target, capture)?;
    if let Some(vlan) = target["vlan"].as_u64() {
        // rte_pdump filters the frame as the driver handed it over, before the tag is put
        // back for the file: where the NIC strips tags (`vlan_offload`), `vlan N` matches
        // nothing.
        eprintln!(
            "note: VLAN {vlan} is captured on its port with the filter `vlan {vlan}`; on a NIC \
             that strips tags (vlan_offload) it matches nothing: capture the parent \
             interface with an address filter instead"
        );
    }
    let status = command.status().map_err(CaptureError::Spawn)?;
    if !status.success() {
        return Err(CaptureError::Failed(status));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(target: &Value, filter: Option<&str>) -> Vec<String> {
        let capture = Capture {
            filter: filter.map(str::to_string),
            count: 100,
            seconds: 10,
            max_kib: 1024,
            output: "/tmp/x.pcapng".into(),
        };
        let command = dumpcap_command(target, &capture).unwrap();
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_port_is_captured_by_id_and_a_vlan_by_its_tag_on_the_port() {
        let port = json!({"file_prefix": "gw", "port_id": 3, "vlan": null});
        assert_eq!(
            args(&port, Some("icmp")),
            [
                "--file-prefix=gw",
                "-i",
                "3",
                "-c",
                "100",
                "-a",
                "duration:10",
                "-a",
                "filesize:1024",
                "-w",
                "/tmp/x.pcapng",
                "-f",
                "icmp"
            ]
        );
        let vlan = json!({"file_prefix": "gw", "port_id": 0, "vlan": 20});
        assert_eq!(
            args(&vlan, Some("tcp port 443")).last().unwrap(),
            "vlan 20 and (tcp port 443)"
        );
        assert_eq!(args(&vlan, None).last().unwrap(), "vlan 20");
    }

    #[test]
    fn bounds_are_refused_by_option() {
        let target = json!({"file_prefix": "gw", "port_id": 0, "vlan": null});
        let mut capture = Capture {
            filter: None,
            count: 0,
            seconds: 10,
            max_kib: 1,
            output: "x".into(),
        };
        let err = dumpcap_command(&target, &capture).unwrap_err().to_string();
        assert!(err.starts_with("--count:"), "{err}");
        capture.count = 1;
        capture.seconds = MAX_SECONDS + 1;
        let err = dumpcap_command(&target, &capture).unwrap_err().to_string();
        assert!(err.starts_with("--seconds:"), "{err}");
    }
}
