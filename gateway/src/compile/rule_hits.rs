//! The firewall rules' hit counters across reloads (`gateway_firewall_rule_hits_total`): one
//! [`RuleHits`] per rule name, given to every rule set the control thread publishes, so a
//! reload (or a kernel update, which compiles the rules again) keeps each rule's count and a
//! new rule starts at 0; a rule a reload removes loses its count. A second rule of the same
//! name counts as `name#2`, a third as `name#3`. The zone pairs' defaults and the port
//! forwards (what each decided with no rule matching) are kept the same way, by their zones'
//! names and by what a forward forwards (`tcp 8080 -> 192.168.10.5:80`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use pipeline::pipeline::config::PortForward;
use pipeline::state::firewall::{PairHits, Policy, Rule, ZoneId};
use pipeline::state::rule_hits::RuleHits;
use pipeline::RouterConfig;

/// A zone pair's counter's key: from and to zone names, the pair's default action.
type PairKey = (String, String, &'static str);

pub struct RuleHitRegistry {
    workers: usize,
    by_name: Mutex<HashMap<String, Arc<RuleHits>>>,
    /// The zone pairs' default-decision counters, by (from, to) zone name and action.
    by_pair: Mutex<HashMap<PairKey, Arc<RuleHits>>>,
    /// The port forwards' counters, by [`forward_names`].
    by_forward: Mutex<HashMap<String, Arc<RuleHits>>>,
}

impl RuleHitRegistry {
    pub fn new(workers: usize) -> Self {
        RuleHitRegistry {
            workers,
            by_name: Mutex::new(HashMap::new()),
            by_pair: Mutex::new(HashMap::new()),
            by_forward: Mutex::new(HashMap::new()),
        }
    }

    /// Gives each rule of `router`, about to be published, its counter, each pair of its
    /// zones (`zones`: their names by id, `local` added) the counter of its default's
    /// decisions, and each port forward its own, kept by name across reloads. A router config already shared (none is: each
    /// is compiled fresh) keeps them uncounted.
    pub fn attach(&self, router: &mut Arc<RouterConfig>, zones: &[String]) {
        let Some(router) = Arc::get_mut(router) else {
            // The bench republishes one config it keeps; the gateway compiles each afresh.
            tracing::debug!("firewall rule counters not attached: the rule set is shared");
            return;
        };
        let hits = self.kept(
            &self.by_name,
            counter_names(router.stateful.firewall.rules()),
        );
        router.stateful.firewall.attach_hits(hits);
        let pairs = self.pair_hits(zones, router.stateful.firewall.policy());
        router.stateful.firewall.attach_pair_hits(pairs);
        let forwards = self.kept(
            &self.by_forward,
            forward_names(&router.stateful.port_forwards),
        );
        router.stateful.firewall.attach_forward_hits(forwards);
    }

    /// The counters of `names` in `by_name`, made where new; the others are forgotten.
    fn kept(
        &self,
        by_name: &Mutex<HashMap<String, Arc<RuleHits>>>,
        names: Vec<String>,
    ) -> Vec<Arc<RuleHits>> {
        let mut by_name = by_name.lock().unwrap_or_else(PoisonError::into_inner);
        let hits = names
            .iter()
            .map(|name| {
                by_name
                    .entry(name.clone())
                    .or_insert_with(|| Arc::new(RuleHits::new(self.workers)))
                    .clone()
            })
            .collect();
        let current: std::collections::HashSet<&String> = names.iter().collect();
        by_name.retain(|name, _| current.contains(name));
        hits
    }

    /// Every ordered pair of `zones` and `local` (not `local` to itself), with its counter,
    /// kept by the zones' names and the pair's default action: a reload that changes the
    /// action starts a new count rather than label the old one with it.
    fn pair_hits(&self, zones: &[String], policy: &Policy) -> Vec<PairHits> {
        let named: Vec<(ZoneId, Arc<str>)> = zones
            .iter()
            .enumerate()
            .filter_map(|(id, name)| {
                Some((ZoneId(u8::try_from(id).ok()?), Arc::from(name.as_str())))
            })
            .chain(std::iter::once((ZoneId::LOCAL, Arc::from("local"))))
            .collect();
        let mut by_pair = self.by_pair.lock().unwrap_or_else(PoisonError::into_inner);
        let mut pairs = Vec::new();
        for from in &named {
            for to in named
                .iter()
                .filter(|to| !(from.0 == ZoneId::LOCAL && to.0 == ZoneId::LOCAL))
            {
                let action = policy.default_for(from.0, to.0).name();
                let key = (from.1.to_string(), to.1.to_string(), action);
                let hits = by_pair
                    .entry(key)
                    .or_insert_with(|| Arc::new(RuleHits::new(self.workers)))
                    .clone();
                pairs.push(PairHits {
                    from: from.clone(),
                    to: to.clone(),
                    hits,
                });
            }
        }
        let current: std::collections::HashSet<PairKey> = pairs
            .iter()
            .map(|pair| {
                let action = policy.default_for(pair.from.0, pair.to.0).name();
                (pair.from.1.to_string(), pair.to.1.to_string(), action)
            })
            .collect();
        by_pair.retain(|key, _| current.contains(key));
        pairs
    }
}

/// Each rule's name as its counter is labelled, in rule order: the name, or `name#n` for its
/// n-th use.
pub fn counter_names(rules: &[Rule]) -> Vec<String> {
    numbered(rules.iter().map(|rule| rule.name.clone()))
}

/// Each port forward's counter label, in forward order: what it forwards, `tcp 8080-8081 ->
/// 192.168.10.5:80` (`#n` for its n-th use: the same on two interfaces).
pub fn forward_names(forwards: &[PortForward]) -> Vec<String> {
    numbered(forwards.iter().map(|forward| {
        let protocol = match forward.protocol {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            other => other.to_string(),
        };
        let (first, last) = (forward.ports.start(), forward.ports.end());
        let ports = if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        };
        format!("{protocol} {ports} -> {}:{}", forward.to, forward.to_port)
    }))
}

/// `names`, each one's second use as `name#2`, its third as `name#3`.
fn numbered(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    names
        .map(|name| {
            let uses = seen.entry(name.clone()).or_default();
            *uses += 1;
            match *uses {
                1 => name,
                n => format!("{name}#{n}"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::router::router_config;
    use crate::config::GatewayConfig;

    fn compiled(rules: &[(&str, &str)]) -> Arc<RouterConfig> {
        let mut text = String::from(
            "[workers]\nlcores = [1]\n[[interfaces]]\nname = \"lan\"\ndevice = \"net_null0\"\n\
             address = \"192.168.10.1/24\"\n[[interfaces]]\nname = \"wan\"\n\
             device = \"net_null1\"\naddress = \"10.0.0.1/24\"\n[nat]\nmasquerade = [\"wan\"]\n",
        );
        for (name, port) in rules {
            text += &format!(
                "[[firewall.rules]]\nname = \"{name}\"\nfrom = \"lan\"\nprotocol = \"tcp\"\n\
                 destination_ports = \"{port}\"\naction = \"drop\"\n"
            );
        }
        let config = GatewayConfig::from_text(std::path::Path::new("hits.toml"), &text).unwrap();
        Arc::new(router_config(&config, &[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]]).unwrap())
    }

    #[test]
    fn a_reload_keeps_each_rules_count_by_name_and_a_new_rule_starts_at_zero() {
        let registry = RuleHitRegistry::new(2);
        let mut first = compiled(&[("ssh", "22"), ("web", "80"), ("web", "443")]);
        registry.attach(&mut first, &[]);
        let firewall = &first.stateful.firewall;
        firewall.count_hit(Some(0), 0, 1);
        firewall.count_hit(Some(2), 1, 1);
        firewall.count_hit(None, 1, 1);
        // Reordered, one removed, one added: counts follow the names.
        let mut second = compiled(&[("telnet", "23"), ("web", "443"), ("ssh", "22")]);
        registry.attach(&mut second, &[]);
        let totals: Vec<u64> = second
            .stateful
            .firewall
            .hits()
            .iter()
            .map(|hits| hits.total())
            .collect();
        // "web" is now the first "web" (port 443 was "web#2"): names, not ports, carry counts.
        assert_eq!(totals, [0, 0, 1]);
        assert_eq!(
            counter_names(second.stateful.firewall.rules()),
            ["telnet", "web", "ssh"]
        );
        assert_eq!(
            counter_names(first.stateful.firewall.rules()),
            ["ssh", "web", "web#2"]
        );
        // The old rule set, still in some worker's hands for a moment, counts into the same.
        first.stateful.firewall.count_hit(Some(0), 1, 1);
        assert_eq!(second.stateful.firewall.hits()[2].total(), 2);
    }

    #[test]
    fn port_forwards_are_counted_by_what_they_forward_across_reloads() {
        let forwards = |ports: &[(&str, u16)]| {
            let mut text = String::from(
                "[workers]\nlcores = [1]\n[[interfaces]]\nname = \"lan\"\n\
                 device = \"net_null0\"\naddress = \"192.168.10.1/24\"\n[[interfaces]]\n\
                 name = \"wan\"\ndevice = \"net_null1\"\naddress = \"10.0.0.1/24\"\n\
                 [nat]\nmasquerade = [\"wan\"]\n",
            );
            for (port, to_port) in ports {
                text += &format!(
                    "[[nat.port_forwards]]\ninterface = \"wan\"\nprotocol = \"tcp\"\n\
                     port = \"{port}\"\nto = \"192.168.10.5\"\nto_port = {to_port}\n"
                );
            }
            let config = GatewayConfig::from_text(std::path::Path::new("fwd.toml"), &text).unwrap();
            Arc::new(router_config(&config, &[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]]).unwrap())
        };
        let registry = RuleHitRegistry::new(2);
        let mut first = forwards(&[("8080", 80), ("2222-2223", 22)]);
        registry.attach(&mut first, &[]);
        assert_eq!(
            forward_names(&first.stateful.port_forwards),
            [
                "tcp 8080 -> 192.168.10.5:80",
                "tcp 2222-2223 -> 192.168.10.5:22"
            ]
        );
        first.stateful.firewall.count_forward(1, (0, 1_700_000_000));
        first.stateful.firewall.count_forward(1, (1, 1_700_000_005));
        // Reordered, one removed: the count follows what the forward forwards.
        let mut second = forwards(&[("2222-2223", 22), ("9090", 90)]);
        registry.attach(&mut second, &[]);
        let hits = second.stateful.firewall.forward_hits();
        assert_eq!(hits[0].total(), 2);
        assert_eq!(hits[0].last_matched(), Some(1_700_000_005));
        assert_eq!(hits[1].total(), 0);
    }
}
