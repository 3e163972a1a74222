//! Which config runs, and what the last reload did: for `gateway ctl show config`. The
//! running file is identified by a version (1 at start, one more per applied reload) and the
//! SHA-256 of its text; a reload records the settings it changed (leaf paths of the TOML,
//! `firewall.rules[1].action`), those that wait for a restart, or why it was refused; the
//! last [`RELOADS_KEPT`] are kept. Settings given by environment overrides are not in the
//! file, so not in the diff.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A config file's text as it was read: its digest and its parsed tree, to diff the next
/// reload against.
#[derive(Clone, Debug, Default)]
pub struct FileText {
    pub sha256: String,
    /// The text itself, to keep it whole in the state directory and to roll back to it.
    pub text: Arc<str>,
    tree: Option<toml::Value>,
}

impl FileText {
    pub fn new(text: &str) -> Self {
        FileText {
            sha256: sha256_hex(text),
            text: text.into(),
            tree: text.parse::<toml::Value>().ok(),
        }
    }

    /// The leaf settings that differ from `before`, tables' keys in sorted order.
    pub fn changed_since(&self, before: &FileText) -> Vec<String> {
        let mut changed = Vec::new();
        match (&before.tree, &self.tree) {
            (Some(old), Some(new)) => diff("", old, new, &mut changed),
            _ if before.sha256 != self.sha256 => changed.push("(the whole file)".into()),
            _ => {}
        }
        changed
    }
}

/// The SHA-256 of `text`, in lower-case hex.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Appends the paths under `path` where `old` and `new` differ: leaves by value, tables by
/// key (an added or removed key is a change), arrays of tables by index, other arrays whole.
fn diff(path: &str, old: &toml::Value, new: &toml::Value, changed: &mut Vec<String>) {
    use toml::Value::{Array, Table};
    let join = |key: &str| match path {
        "" => key.to_string(),
        _ => format!("{path}.{key}"),
    };
    match (old, new) {
        (Table(old), Table(new)) => {
            for (key, value) in new {
                match old.get(key) {
                    Some(before) => diff(&join(key), before, value, changed),
                    None => changed.push(format!("{} (added)", join(key))),
                }
            }
            for key in old.keys().filter(|key| !new.contains_key(*key)) {
                changed.push(format!("{} (removed)", join(key)));
            }
        }
        (Array(old), Array(new)) if is_table_array(old) && is_table_array(new) => {
            for (index, (before, value)) in old.iter().zip(new).enumerate() {
                diff(&format!("{path}[{index}]"), before, value, changed);
            }
            if old.len() != new.len() {
                changed.push(format!("{path} ({} -> {} entries)", old.len(), new.len()));
            }
        }
        (old, new) if old != new => changed.push(path.to_string()),
        _ => {}
    }
}

fn is_table_array(array: &[toml::Value]) -> bool {
    !array.is_empty() && array.iter().all(toml::Value::is_table)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// One reload and what came of it.
#[derive(Clone, Debug)]
pub struct ReloadRecord {
    pub at_unix: u64,
    /// What asked for it: the file, `ctl config apply`, a rollback (`reload::Source`).
    pub source: String,
    /// The refusal, naming the field; `None`: applied.
    pub refused: Option<String>,
    pub changed: Vec<String>,
    pub restart_required: Vec<String>,
}

#[derive(Debug)]
pub struct ConfigStatus {
    pub path: String,
    pub version: u64,
    pub sha256: String,
    /// When the running version was read.
    pub since_unix: u64,
    /// The latest reloads, the newest last, at most [`RELOADS_KEPT`].
    pub reloads: VecDeque<ReloadRecord>,
    /// An apply that rolls back unless confirmed: its version and the deadline.
    pub awaiting_confirmation: Option<(u64, u64)>,
}

/// How many reloads `show config` remembers.
pub const RELOADS_KEPT: usize = 8;

impl ConfigStatus {
    fn record(&mut self, reload: ReloadRecord) {
        if self.reloads.len() == RELOADS_KEPT {
            self.reloads.pop_front();
        }
        self.reloads.push_back(reload);
    }
}

/// The status, shared by the control thread (which records) and the ctl thread (which shows).
#[derive(Clone)]
pub struct ConfigHistory(Arc<Mutex<ConfigStatus>>);

impl ConfigHistory {
    pub fn start(path: &std::path::Path, file: &FileText) -> Self {
        ConfigHistory(Arc::new(Mutex::new(ConfigStatus {
            path: path.display().to_string(),
            version: 1,
            sha256: file.sha256.clone(),
            since_unix: unix_now(),
            reloads: VecDeque::new(),
            awaiting_confirmation: None,
        })))
    }

    fn with<R>(&self, f: impl FnOnce(&mut ConfigStatus) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records an applied config; returns its version.
    pub fn applied(
        &self,
        source: &str,
        sha256: &str,
        changed: Vec<String>,
        restart_required: Vec<String>,
    ) -> u64 {
        self.with(|status| {
            status.version += 1;
            status.sha256 = sha256.to_string();
            status.since_unix = unix_now();
            let at_unix = status.since_unix;
            status.record(ReloadRecord {
                at_unix,
                source: source.to_string(),
                refused: None,
                changed,
                restart_required,
            });
            status.version
        })
    }

    pub fn refused(&self, source: &str, why: &str) {
        self.with(|status| {
            status.record(ReloadRecord {
                at_unix: unix_now(),
                source: source.to_string(),
                refused: Some(why.to_string()),
                changed: Vec::new(),
                restart_required: Vec::new(),
            });
        });
    }

    /// `version` rolls back unless confirmed `within` from now; `None`: nothing waits.
    pub fn awaiting_confirmation(&self, pending: Option<(u64, std::time::Duration)>) {
        self.with(|status| {
            status.awaiting_confirmation =
                pending.map(|(version, within)| (version, unix_now() + within.as_secs()));
        });
    }

    /// The status as `ctl show config` answers it.
    pub fn to_json(&self) -> Value {
        self.with(|status| {
            json!({
                "path": status.path,
                "version": status.version,
                "sha256": status.sha256,
                "since_unix": status.since_unix,
                "awaiting_confirmation": status.awaiting_confirmation.map(|(version, by)| json!({
                    "version": version,
                    "rolls_back_at_unix": by,
                })),
                "reloads": status.reloads.iter().map(|reload| json!({
                    "at_unix": reload.at_unix,
                    "source": reload.source,
                    "result": if reload.refused.is_some() { "refused" } else { "applied" },
                    "error": reload.refused,
                    "changed": reload.changed,
                    "restart_required": reload.restart_required,
                })).collect::<Vec<Value>>(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"
[icmp]
errors_per_sec = 1000
[[firewall.rules]]
name = "a"
action = "accept"
[[firewall.rules]]
name = "b"
action = "drop"
[nat]
masquerade = ["wan"]
"#;

    #[test]
    fn a_reload_names_the_leaves_it_changed() {
        let after = BEFORE
            .replace("errors_per_sec = 1000", "errors_per_sec = 10\nburst = 5")
            .replace("action = \"drop\"", "action = \"reject\"")
            .replace("[\"wan\"]", "[\"wan\", \"dmz\"]");
        let changed = FileText::new(&after).changed_since(&FileText::new(BEFORE));
        assert_eq!(
            changed,
            [
                "firewall.rules[1].action",
                "icmp.burst (added)",
                "icmp.errors_per_sec",
                "nat.masquerade"
            ]
        );
    }

    #[test]
    fn added_rules_and_removed_sections_are_named_and_comments_are_not() {
        let after = format!(
            "# a comment\n{}\n[[firewall.rules]]\nname = \"c\"\naction = \"accept\"\n",
            BEFORE.replace("[nat]\nmasquerade = [\"wan\"]\n", "")
        );
        let changed = FileText::new(&after).changed_since(&FileText::new(BEFORE));
        assert_eq!(
            changed,
            ["firewall.rules (2 -> 3 entries)", "nat (removed)"]
        );
        let comment_only = format!("# only a comment\n{BEFORE}");
        let unchanged = FileText::new(&comment_only).changed_since(&FileText::new(BEFORE));
        assert!(unchanged.is_empty(), "{unchanged:?}");
        assert_ne!(
            FileText::new(&comment_only).sha256,
            FileText::new(BEFORE).sha256
        );
    }

    #[test]
    fn versions_count_applied_reloads_only() {
        let history = ConfigHistory::start(std::path::Path::new("/x.toml"), &FileText::new(BEFORE));
        let version = history.applied(
            "file",
            "ab",
            vec!["icmp.burst".into()],
            vec!["conntrack".into()],
        );
        assert_eq!(version, 2);
        history.refused(
            "file",
            "firewall.rules[0].action: \"maybe\" is not accept, drop or reject",
        );
        let shown = history.to_json();
        assert_eq!(shown["version"], 2);
        assert_eq!(shown["sha256"], "ab");
        assert_eq!(shown["reloads"][0]["result"], "applied");
        assert_eq!(shown["reloads"][0]["changed"][0], "icmp.burst");
        assert_eq!(shown["reloads"][1]["result"], "refused");
        assert!(shown["reloads"][1]["error"]
            .as_str()
            .unwrap()
            .starts_with("firewall.rules[0]"));
        for _ in 0..RELOADS_KEPT {
            history.refused("file", "again");
        }
        let shown = history.to_json();
        assert_eq!(shown["reloads"].as_array().unwrap().len(), RELOADS_KEPT);
    }
}
