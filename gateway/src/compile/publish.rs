//! Handing a compiled router config to the workers.

use std::sync::Arc;

use crate::compile::rule_hits::RuleHitRegistry;
use crate::dataplane::published::Published;

/// Hands the workers a new router config. A QoS change first gives every worker an equal
/// share of the new rates, since workers rebuild their policers from the share assigned to
/// them; demand moves the shares from there.
/// Each firewall rule gets its hit counter first (`crate::compile::rule_hits`).
pub fn publish_router(
    router: &Published<pipeline::RouterConfig>,
    qos: &[[Arc<pipeline::features::qos::QosStats>; 2]],
    (hits, zones): (&RuleHitRegistry, &[String]),
    mut config: Arc<pipeline::RouterConfig>,
) {
    hits.attach(&mut config, zones);
    if config.qos != router.load().0.qos {
        pipeline::features::qos::assign_equal_shares(qos, config.qos.as_ref());
    }
    router.publish(config);
}
