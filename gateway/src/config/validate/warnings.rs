//! `GatewayConfig::warnings`: settings that load but are probably not what was meant.

use super::*;

impl GatewayConfig {
    /// What starts but is probably not meant: `check-config` prints them (the file still
    /// passes) and the gateway logs them at start and on every reload.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self.metrics_exposure_warning().into_iter().collect();
        warnings.extend(self.zones_nothing_lets_out());
        warnings.extend(twins::route_allow_warning(self));
        warnings
    }

    /// The metrics served on every address of the host.
    pub(crate) fn metrics_exposure_warning(&self) -> Option<String> {
        let listen = self.metrics.listen;
        if !listen.ip().is_unspecified() {
            return None;
        }
        let exposure = if self.metrics.web_config.is_some() {
            "behind metrics.web_config's TLS and basic auth"
        } else {
            "as plain HTTP without auth"
        };
        Some(format!(
            "metrics.listen: {listen} serves the metrics on every address of this host, \
             WAN included, {exposure}; bind a management or loopback address (\
             \"192.168.100.1:{port}\", \"127.0.0.1:{port}\") and/or give metrics.web_config \
             (TLS and basic auth)",
            port = listen.port()
        ))
    }

    /// With the default closed between zones, an inside zone that no policy or rule lets out
    /// reaches only itself and the gateway (a guest VLAN without its `guest -> wan accept`).
    pub(crate) fn zones_nothing_lets_out(&self) -> Vec<String> {
        let zones = self.zone_names();
        let leads_out =
            |from: &str, to: Option<&str>| to.is_none_or(|to| to != from && to != "local");
        let lets_out = |zone: &str| {
            self.firewall.policy.iter().any(|policy| {
                policy.from == zone
                    && policy.action == FirewallAction::Accept
                    && leads_out(zone, Some(&policy.to))
            }) || self.firewall.rules.iter().any(|rule| {
                rule.from.as_deref().is_none_or(|from| from == zone)
                    && rule.action == FirewallAction::Accept
                    && leads_out(zone, rule.to.as_deref())
            })
        };
        if zones.len() < 2 {
            return Vec::new();
        }
        zones
            .iter()
            .filter(|zone| !self.is_outside_zone(zone) && !lets_out(zone))
            .map(|zone| {
                format!(
                    "firewall.policy: no policy or rule lets zone {zone:?} out: between zones \
                     the default is drop, so its hosts reach only {zone:?} and the gateway \
                     (add e.g. {{ from = {zone:?}, to = \"wan\", action = \"accept\" }})"
                )
            })
            .collect()
    }
}
