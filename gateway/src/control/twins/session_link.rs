//! A PPPoE interface's twin follows its session's IPv6. The twin exists for the IPv6 the ISP
//! configures over the session (its Router Advertisements, DHCPv6 and a delegated prefix, by
//! dhcpcd), so it is up exactly while the session carries IPv6: down (the kernel then drops
//! its addresses and routes, dhcpcd its leases, and the gateway follows both) when IPv6CP
//! closes or the session ends, and up again, with the link-local address and MTU IPv6CP and
//! LCP agreed, when it opens, so that dhcpcd solicits at once on the new session instead of
//! holding a stale lease until its timers run out.
//!
//! The `ip` commands run on a thread of their own, in order: the control thread, which sees
//! the session change, never waits on a process.

use std::net::Ipv6Addr;
use std::process::Command;
use std::sync::mpsc::{channel, Sender};

use crate::config::twins::twin_names;
use crate::config::GatewayConfig;
use crate::control::pppoe_clients::PppoeView;

/// What a session's twin should be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinkState {
    Down,
    Up { link_local: Ipv6Addr, mtu: u16 },
}

struct SessionTwin {
    iface: u16,
    name: String,
    applied: LinkState,
}

/// The PPPoE interfaces' twins, owned by the control thread.
#[derive(Default)]
pub struct SessionTwins {
    twins: Vec<SessionTwin>,
    commands: Option<Sender<(String, LinkState)>>,
}

impl SessionTwins {
    /// The PPPoE interfaces of `config` that have a twin (down since `Twins::start`), and the
    /// thread that sets them; none, and no thread, if there are none.
    pub fn start(config: &GatewayConfig) -> SessionTwins {
        let twins: Vec<SessionTwin> = twin_names(config)
            .into_iter()
            .enumerate()
            .filter(|(index, _)| config.interfaces[*index].address.is_pppoe())
            .filter_map(|(index, name)| {
                Some(SessionTwin {
                    iface: index as u16,
                    name: name?,
                    applied: LinkState::Down,
                })
            })
            .collect();
        if twins.is_empty() {
            return SessionTwins::default();
        }
        let netns = config.kernel_twins.netns.clone();
        let (sender, receiver) = channel::<(String, LinkState)>();
        let spawned = std::thread::Builder::new()
            .name("session-twins".into())
            .spawn(move || {
                // Ends when the control thread drops its sender.
                for (name, state) in receiver {
                    set_link(&name, state, netns.as_deref());
                }
            });
        match spawned {
            Ok(_) => SessionTwins {
                twins,
                commands: Some(sender),
            },
            Err(err) => {
                tracing::error!(
                    "PPPoE twins: no thread to set them ({err}): they stay down, without IPv6 from the ISP"
                );
                SessionTwins::default()
            }
        }
    }

    /// Takes up a changed PPPoE view: each twin whose session's IPv6 came, went or changed
    /// is set anew.
    pub fn follow(&mut self, view: &PppoeView) {
        let Some(commands) = &self.commands else {
            return;
        };
        for twin in &mut self.twins {
            let wanted = view
                .ipv6
                .iter()
                .find(|session| session.iface == twin.iface)
                .map_or(LinkState::Down, |session| LinkState::Up {
                    link_local: session.local,
                    mtu: session.mtu,
                });
            if wanted != twin.applied {
                twin.applied = wanted;
                // A thread that died has logged why; the twin keeps its last state.
                let _ = commands.send((twin.name.clone(), wanted));
            }
        }
    }
}

/// Sets twin `name` as `state` says: down, or taken down and brought up again (so that its
/// DHCPv6 client starts over) with the session's MTU and link-local address. The address
/// goes on while the twin is down (taking it down flushed the old one): dhcpcd, finding
/// none when the link comes up, would add one of its own from the MAC. The address
/// goes on while the twin is down (taking it down flushed the old one): dhcpcd, finding
/// none when the link comes up, would add one of its own from the MAC.
fn set_link(name: &str, state: LinkState, netns: Option<&str>) {
    let ip = |args: &[&str]| {
        let mut command = Command::new("ip");
        if let Some(netns) = netns {
            command.args(["-n", netns]);
        }
        command.args(args);
        match command.output() {
            Ok(output) if output.status.success() => Ok(()),
            Ok(output) => Err(String::from_utf8_lossy(&output.stderr).trim().to_string()),
            Err(err) => Err(err.to_string()),
        }
    };
    let result = match state {
        LinkState::Down => ip(&["link", "set", "dev", name, "down"]),
        LinkState::Up { link_local, mtu } => {
            let address = format!("{link_local}/64");
            let add = [
                "-6", "addr", "replace", &address, "dev", name, "scope", "link",
            ];
            ip(&["link", "set", "dev", name, "down"]).and_then(|()| {
                // A refused MTU leaves the configured one: the twin still comes up.
                if let Err(err) = ip(&["link", "set", "dev", name, "mtu", &mtu.to_string()]) {
                    tracing::warn!(twin = name, mtu, "PPPoE twin: setting its MTU: {err}");
                }
                ip(&add).and_then(|()| ip(&["link", "set", "dev", name, "up"]))
            })
        }
    };
    match (result, state) {
        (Ok(()), LinkState::Down) => {
            tracing::info!(twin = name, "PPPoE twin down: the session carries no IPv6")
        }
        (Ok(()), LinkState::Up { link_local, mtu }) => tracing::info!(
            twin = name,
            %link_local,
            mtu,
            "PPPoE twin up: the session carries IPv6"
        ),
        (Err(err), _) => tracing::warn!(twin = name, "PPPoE twin: setting it {state:?}: {err}"),
    }
}
