//! `gateway healthcheck`: whether the gateway a config describes is serving, for a container's
//! HEALTHCHECK or a service manager's watchdog. It asks where the config says the metrics are
//! (`metrics.listen`), so it follows the operator's address instead of a hard-coded one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::config::MetricsConfig;

/// How long the whole check may take: a healthy gateway answers a scrape in milliseconds.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The largest answer read: the check needs only the start of the exposition.
const READ_LIMIT: u64 = 1 << 20;

/// The gateway at `metrics.listen` is not serving (or something else answers there).
#[derive(Debug, thiserror::Error)]
pub enum HealthcheckError {
    #[error("metrics.listen {address}: no connection")]
    Connect {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("metrics.listen {address}: sending the request")]
    Send {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("metrics.listen {address}: reading the answer")]
    Read {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("metrics.listen {address}: answered {status:?}, not 200")]
    Status { address: SocketAddr, status: String },
    #[error("metrics.listen {address}: the answer has no gateway_build_info; another server?")]
    NotGateway { address: SocketAddr },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Checks the gateway whose metrics `config` describes. Plain HTTP: GET /metrics must answer 200 with
/// `gateway_build_info`. With `metrics.web_config` (TLS, perhaps client certificates) the
/// check cannot speak for a client, so a TCP connection accepted on the address must do.
pub fn check(config: &MetricsConfig) -> Result<(), HealthcheckError> {
    let address = probe_address(config.listen);
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT)
        .map_err(|source| HealthcheckError::Connect { address, source })?;
    if config.web_config.is_some() {
        return Ok(());
    }
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|source| HealthcheckError::Send { address, source })?;
    let mut answer = Vec::new();
    stream
        .take(READ_LIMIT)
        .read_to_end(&mut answer)
        .map_err(|source| HealthcheckError::Read { address, source })?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(HealthcheckError::Status {
            address,
            status: status.to_string(),
        });
    }
    if !answer.contains("gateway_build_info") {
        return Err(HealthcheckError::NotGateway { address });
    }
    Ok(())
}

/// Where to connect for `listen`: an unspecified address (0.0.0.0, ::) is reached on loopback.
fn probe_address(listen: SocketAddr) -> SocketAddr {
    match listen {
        SocketAddr::V4(v4) if v4.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], v4.port()))
        }
        SocketAddr::V6(v6) if v6.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, v6.port()))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn config_listening_on(listen: SocketAddr) -> MetricsConfig {
        MetricsConfig {
            listen,
            ..MetricsConfig::default()
        }
    }

    /// Serves one connection with `answer`.
    fn answer_once(answer: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            // The whole request first: closing with some of it unread would reset the
            // connection under the client.
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                request.push(byte[0]);
            }
            let _ = stream.write_all(answer.as_bytes());
        });
        address
    }

    #[test]
    fn a_gateway_answering_its_metrics_is_healthy() {
        let address = answer_once(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\ngateway_build_info{version=\"0\"} 1\n",
        );
        check(&config_listening_on(address)).unwrap();
    }

    #[test]
    fn another_server_or_an_error_status_is_not() {
        let address = answer_once("HTTP/1.1 200 OK\r\n\r\nnode_cpu_seconds_total 1\n");
        let err = check(&config_listening_on(address))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no gateway_build_info"), "{err}");
        let address = answer_once("HTTP/1.1 503 Service Unavailable\r\n\r\n");
        let err = check(&config_listening_on(address))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not 200"), "{err}");
    }

    #[test]
    fn nothing_listening_names_the_field() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let err = check(&config_listening_on(address))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("metrics.listen"), "{err}");
    }

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        let probe = probe_address("0.0.0.0:9469".parse().unwrap());
        assert_eq!(probe, "127.0.0.1:9469".parse().unwrap());
    }
}
