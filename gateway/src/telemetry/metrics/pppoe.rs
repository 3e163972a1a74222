//! The PPPoE sessions' metrics: their families, and their sync from `PppoeStatus`.

use super::*;

impl PppoeMetrics {
    pub(crate) fn new(registry: &Registry) -> Self {
        PppoeMetrics {
            up: gauge_vec(
                registry,
                "pppoe_session_up",
                "1 while the interface's PPPoE session is up (IPCP open), else 0.",
                &["interface"],
            ),
            session_id: gauge_vec(
                registry,
                "pppoe_session_id",
                "The PPPoE session id discovery gave (0: none).",
                &["interface"],
            ),
            state: gauge_vec(
                registry,
                "pppoe_state",
                "1 for the PPPoE client's current state: discovery, requesting, lcp, authenticating, ipcp, up, backoff, stopped.",
                &["interface", "state"],
            ),
            mtu: gauge_vec(
                registry,
                "pppoe_mtu",
                "The session's negotiated MTU (0 while down).",
                &["interface"],
            ),
            sessions: counter_vec(
                registry,
                "pppoe_sessions_total",
                "PPPoE sessions brought up.",
                &["interface"],
            ),
            ends: counter_vec(
                registry,
                "pppoe_session_ends_total",
                "PPPoE sessions ended (or attempts given up), by reason: padt, lcp_terminate, echo_timeout, negotiation_timeout, auth_failed, stopped.",
                &["interface", "reason"],
            ),
            control: counter_vec(
                registry,
                "pppoe_control_packets_total",
                "PPPoE discovery and PPP control packets, by direction (sent, received).",
                &["interface", "direction"],
            ),
            refused: counter_vec(
                registry,
                "pppoe_refused_control_packets_total",
                "PPPoE control packets the client refused: malformed, or ignored (not for it, or not in its state).",
                &["interface", "why"],
            ),
            echoes: counter_vec(
                registry,
                "pppoe_lcp_echoes_total",
                "LCP echoes: requests_sent, replies_received.",
                &["interface", "kind"],
            ),
            ipv6_up: gauge_vec(
                registry,
                "pppoe_ipv6_up",
                "1 while the interface's PPPoE session carries IPv6 (IPv6CP open), else 0.",
                &["interface"],
            ),
            ipv6cp: counter_vec(
                registry,
                "pppoe_ipv6cp_total",
                "IPv6CP outcomes: opened, or failed (the peer refused it, wanted another interface identifier, or never answered; the session then carries IPv4 alone).",
                &["interface", "result"],
            ),
        }
    }

    pub(crate) fn sync(&self, status: &crate::control::pppoe_clients::PppoeStatus) {
        for link in status.links() {
            let name = link.interface.as_str();
            self.up
                .with_label_values(&[name])
                .set(i64::from(link.local.is_some()));
            self.session_id
                .with_label_values(&[name])
                .set(i64::from(link.session_id.unwrap_or(0)));
            self.mtu
                .with_label_values(&[name])
                .set(i64::from(link.mtu.unwrap_or(0)));
            for state in pipeline::pppoe::State::ALL {
                self.state
                    .with_label_values(&[name, state.name()])
                    .set(i64::from(state.name() == link.state));
            }
            sync_counter(&self.sessions, &[name], link.sessions_up);
            for (reason, count) in &link.ends {
                sync_counter(&self.ends, &[name, reason], *count);
            }
            sync_counter(&self.control, &[name, "sent"], link.control_sent);
            sync_counter(&self.control, &[name, "received"], link.control_received);
            sync_counter(&self.refused, &[name, "malformed"], link.malformed);
            sync_counter(&self.refused, &[name, "ignored"], link.ignored);
            sync_counter(
                &self.echoes,
                &[name, "requests_sent"],
                link.echo_requests_sent,
            );
            sync_counter(
                &self.echoes,
                &[name, "replies_received"],
                link.echo_replies_received,
            );
            self.ipv6_up
                .with_label_values(&[name])
                .set(i64::from(link.ipv6_peer.is_some()));
            sync_counter(&self.ipv6cp, &[name, "opened"], link.ipv6_opened);
            sync_counter(&self.ipv6cp, &[name, "failed"], link.ipv6_failures);
        }
    }
}
