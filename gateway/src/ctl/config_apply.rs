//! What `gateway ctl config` asks of the running gateway, on the control thread's side: loads
//! (diff, apply, rollback, reload) go to the `config-load` thread (`crate::reload::Loader`),
//! whose verdict the control thread answers once it has published; a confirmation is
//! answered here. Commit-confirm, as VyOS's `commit-confirm` and LuCI's apply: an apply with
//! a confirmation time is rolled back to the config that ran before it unless `ctl config
//! confirm` comes in time, so a change that cuts the operator off undoes itself.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::history::{ConfigHistory, FileText};
use crate::ctl::{ConfigRequest, Request};
use crate::reload::{LoadRequest, Loader, Source};

/// An applied config that rolls back at `deadline` unless confirmed.
#[derive(Debug)]
pub struct AwaitingConfirmation {
    pub version: u64,
    pub deadline: Instant,
    /// What ran before the first unconfirmed apply: what a rollback returns to.
    pub before: FileText,
}

/// Hands a ctl config request to the loader, or answers a confirmation.
pub fn route(
    ConfigRequest { request, reply }: ConfigRequest,
    loader: &Loader,
    awaiting: &mut Option<AwaitingConfirmation>,
    history: &ConfigHistory,
) {
    let load = match request {
        Request::ConfigDiff { path, text } => LoadRequest::Diff {
            text,
            label: path,
            reply,
        },
        Request::ConfigApply {
            path,
            text,
            confirm_secs,
        } => LoadRequest::Text {
            text: text.into(),
            label: path.clone(),
            source: Source::Apply(path),
            confirm: confirm_secs.map(Duration::from_secs),
            reply: Some(reply),
        },
        Request::ConfigRollback { steps } => LoadRequest::Rollback { steps, reply },
        Request::ConfigReload => LoadRequest::File { reply: Some(reply) },
        Request::ConfigConfirm => {
            let answer = match awaiting.take() {
                Some(confirmed) => {
                    history.awaiting_confirmation(None);
                    tracing::info!("config version {} confirmed", confirmed.version);
                    Ok(json!({ "version": confirmed.version }))
                }
                None => Err("nothing waits for a confirmation".to_string()),
            };
            let _ = reply.send(answer);
            return;
        }
        other => {
            let _ = reply.send(Err(format!("not a config request: {other:?}")));
            return;
        }
    };
    loader.request(load);
}

/// After `version` applied (asked for by `source`): an apply with a confirmation time now
/// waits for it; a rollback, the automatic one or the operator's, ends any wait (what it
/// returned to is what runs; an apply queued before it does not wait on after it). Otherwise
/// the rollback at the deadline returns to what ran before the first apply still
/// unconfirmed, whatever applied since.
pub fn applied(
    awaiting: &mut Option<AwaitingConfirmation>,
    history: &ConfigHistory,
    (version, source): (u64, &Source),
    confirm: Option<Duration>,
    previous: FileText,
) {
    if matches!(source, Source::NotConfirmed(_) | Source::Rollback(_)) {
        if awaiting.take().is_some() {
            history.awaiting_confirmation(None);
        }
        return;
    }
    let Some(within) = confirm else { return };
    let before = awaiting.take().map_or(previous, |earlier| earlier.before);
    *awaiting = Some(AwaitingConfirmation {
        version,
        deadline: Instant::now() + within,
        before,
    });
    history.awaiting_confirmation(Some((version, within)));
}

/// Once the confirmation time has passed, asks the loader for the config before.
pub fn expire(
    awaiting: &mut Option<AwaitingConfirmation>,
    loader: &Loader,
    history: &ConfigHistory,
    now: Instant,
) {
    if awaiting
        .as_ref()
        .is_none_or(|waiting| now < waiting.deadline)
    {
        return;
    }
    let Some(expired) = awaiting.take() else {
        return;
    };
    history.awaiting_confirmation(None);
    tracing::warn!(
        "config version {} was not confirmed in time: rolling back to the config before it",
        expired.version
    );
    loader.request(LoadRequest::Text {
        text: expired.before.text.clone(),
        label: "(the config before the unconfirmed apply)".into(),
        source: Source::NotConfirmed(expired.version),
        confirm: None,
        reply: None,
    });
}
