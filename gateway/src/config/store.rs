//! The configs the gateway has run, kept whole in the state directory (`state.directory`,
//! under `configs/`) so that `gateway ctl config rollback` can return to one, across restarts
//! too. Each is one file, `<sequence>-<sha256>.toml`, holding exactly the text that loaded;
//! the newest is the one running. The last [`CONFIGS_KEPT`] are kept. Written and read by the
//! `config-load` thread (and listed by the ctl thread), never by a worker.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::config::history::{sha256_hex, FileText};

/// How many configs the state directory keeps.
pub const CONFIGS_KEPT: usize = 10;

/// One kept config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredConfig {
    /// One more than the one before, across restarts.
    pub sequence: u64,
    pub sha256: String,
    pub path: PathBuf,
}

#[derive(Clone, Debug)]
pub struct ConfigStore {
    directory: PathBuf,
}

impl ConfigStore {
    pub fn new(state_directory: &Path) -> Self {
        ConfigStore {
            directory: state_directory.join("configs"),
        }
    }

    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The kept configs, the oldest first. A directory not made yet holds none.
    pub fn entries(&self) -> io::Result<Vec<StoredConfig>> {
        let listing = match fs::read_dir(&self.directory) {
            Ok(listing) => listing,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut entries = Vec::new();
        for entry in listing {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
                continue;
            };
            let Some((sequence, sha256)) = name
                .strip_suffix(".toml")
                .and_then(|stem| stem.split_once('-'))
            else {
                continue;
            };
            let (Ok(sequence), true) = (sequence.parse(), is_sha256(sha256)) else {
                continue;
            };
            entries.push(StoredConfig {
                sequence,
                sha256: sha256.to_string(),
                path: path.clone(),
            });
        }
        entries.sort_by_key(|entry| entry.sequence);
        Ok(entries)
    }

    /// Keeps `file` as the newest config, unless it already is (a restart on the same text);
    /// then forgets all but the last [`CONFIGS_KEPT`]. The file appears whole or not at all.
    pub fn record(&self, file: &FileText) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.directory)?;
        let entries = self.entries()?;
        if entries
            .last()
            .is_some_and(|newest| newest.sha256 == file.sha256)
        {
            return Ok(());
        }
        let sequence = entries.last().map_or(1, |newest| newest.sequence + 1);
        let name = format!("{sequence:08}-{}.toml", file.sha256);
        let partial = self.directory.join(format!(".{name}.partial"));
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)?;
        out.write_all(file.text.as_bytes())?;
        out.sync_all()?;
        fs::rename(&partial, self.directory.join(name))?;
        let entries = self.entries()?;
        for old in &entries[..entries.len().saturating_sub(CONFIGS_KEPT)] {
            fs::remove_file(&old.path)?;
        }
        Ok(())
    }

    /// The config `steps` before the newest (the running one), and its text, checked
    /// against its digest.
    pub fn back(&self, steps: usize) -> Result<(StoredConfig, String), String> {
        let entries = self
            .entries()
            .map_err(|err| format!("reading {}: {err}", self.directory.display()))?;
        let kept = entries.len().saturating_sub(1);
        if steps == 0 || steps > kept {
            return Err(format!(
                "rollback {steps}: {kept} earlier configs are kept in {} (1..={kept})",
                self.directory.display()
            ));
        }
        let entry = entries[entries.len() - 1 - steps].clone();
        let text = fs::read_to_string(&entry.path)
            .map_err(|err| format!("reading {}: {err}", entry.path.display()))?;
        if sha256_hex(&text) != entry.sha256 {
            return Err(format!(
                "{} does not hold the text its name's digest says: not rolling back to it",
                entry.path.display()
            ));
        }
        Ok((entry, text))
    }

    /// The kept configs as `ctl show config` lists them, the newest first, `back` counting
    /// the steps a rollback to each takes.
    pub fn to_json(&self) -> Value {
        match self.entries() {
            Ok(entries) => Value::Array(
                entries
                    .iter()
                    .rev()
                    .enumerate()
                    .map(|(back, entry)| {
                        json!({
                            "back": back,
                            "sequence": entry.sequence,
                            "sha256": entry.sha256,
                            "path": entry.path.display().to_string(),
                        })
                    })
                    .collect(),
            ),
            Err(err) => json!(format!("reading {}: {err}", self.directory.display())),
        }
    }
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gateway-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn configs_are_kept_whole_newest_last_and_rolled_back_to_by_steps() {
        let dir = scratch("keep");
        let store = ConfigStore::new(&dir);
        assert!(store.entries().unwrap().is_empty());
        assert!(store.back(1).unwrap_err().contains("0 earlier configs"));
        for n in 0..(CONFIGS_KEPT + 3) {
            store
                .record(&FileText::new(&format!("# config {n}\n")))
                .unwrap();
        }
        // The same text again (a restart) is not a new entry.
        store
            .record(&FileText::new(&format!("# config {}\n", CONFIGS_KEPT + 2)))
            .unwrap();
        let entries = store.entries().unwrap();
        assert_eq!(entries.len(), CONFIGS_KEPT);
        assert_eq!(entries.last().unwrap().sequence, CONFIGS_KEPT as u64 + 3);
        let (entry, text) = store.back(1).unwrap();
        assert_eq!(text, format!("# config {}\n", CONFIGS_KEPT + 1));
        assert_eq!(entry.sha256, sha256_hex(&text));
        assert!(store.back(CONFIGS_KEPT).is_err());
        assert!(store.back(0).is_err());
        // A kept file changed behind the gateway's back is refused, not loaded.
        fs::write(&store.back(2).unwrap().0.path, "[workers]\n").unwrap();
        assert!(store.back(2).unwrap_err().contains("digest"));
        assert_eq!(store.to_json()[0]["back"], 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
