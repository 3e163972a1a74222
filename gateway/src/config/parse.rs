//! Reading the file: the TOML text, `GATEWAY__...` environment overrides, and serde's errors
//! explained with the field at fault and the closest valid name.

use super::*;

/// Every key of the file must be a plain name (letters, digits, `_`, `-`). The config crate
/// reads a quoted key such as `"a[-9]"` or `"a[33333333333332]"` as a path with an array
/// subscript and panics or aborts on the allocation (config 0.14; found by fuzzing), which
/// would take a running gateway down on reload. No field of the schema needs another key.
pub(crate) fn check_keys(text: &str) -> Result<(), ConfigError> {
    pub(crate) fn walk(value: &toml::Value, at: &str) -> Result<(), ConfigError> {
        match value {
            toml::Value::Table(table) => {
                for (key, value) in table {
                    let field = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    let plain = !key.is_empty()
                        && key
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !plain {
                        return Err(invalid(
                            field,
                            format!("{key:?} is not a field name (letters, digits, _ and - only)"),
                        ));
                    }
                    walk(value, &field)?;
                }
                Ok(())
            }
            toml::Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| walk(item, &format!("{at}[{i}]"))),
            _ => Ok(()),
        }
    }
    // Not TOML: the config crate's own error says it, with the line.
    match text.parse::<toml::Table>() {
        Ok(table) => walk(&toml::Value::Table(table), ""),
        Err(_) => Ok(()),
    }
}

/// The file's values as written, deserialized without the `config` crate, which would turn
/// `mtu = "1500"` into 1500 and `tcp_loose = "yes"` into true: a value of the wrong type in
/// the file is refused, naming the field and the line. The `GATEWAY__*` environment
/// overrides still go through the crate's parsing, since a variable's value is always text.
pub(crate) fn check_types(path: &Path, text: &str) -> Result<(), ConfigError> {
    // Not TOML: the config crate's own error says it, with the line.
    if text.parse::<toml::Table>().is_err() {
        return Ok(());
    }
    let Err(err) =
        serde_path_to_error::deserialize::<_, GatewayConfig>(toml::Deserializer::new(text))
    else {
        return Ok(());
    };
    let field = err.path().to_string();
    let inner = err.into_inner();
    let (field, reason) = explain(&field, inner.message());
    let line = inner
        .span()
        .and_then(|span| text.get(..span.start))
        .map(|before| before.matches('\n').count() + 1);
    let reason = match line {
        Some(line) => format!("{reason}; line {line} in {}", path.display()),
        None => format!("{reason}; in {}", path.display()),
    };
    Err(ConfigError::Invalid { field, reason })
}

/// A deserialization error as [`explain`] words it.
pub(crate) fn explained(field: &str, message: &str) -> ConfigError {
    let (field, reason) = explain(field, message);
    ConfigError::Invalid { field, reason }
}

/// Serde's words for a value that does not fit, made to name the field (an unknown or missing
/// key is appended to the path), what is allowed (a type's range, not "u16") and what was
/// probably meant (the nearest field or value, a number without its quotes).
pub(crate) fn explain(path: &str, message: &str) -> (String, String) {
    let mut field = if path == "." {
        String::new()
    } else {
        path.to_string()
    };
    let join = |at: &str, key: &str| {
        if at == key || at.ends_with(&format!(".{key}")) {
            at.to_string()
        } else if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    let mut reason = message.to_string();
    for (rust, range) in [
        ("u8", "a whole number 0 to 255"),
        ("u16", "a whole number 0 to 65535"),
        ("u32", "a whole number 0 to 4294967295"),
        ("u64", "a whole number 0 to 18446744073709551615"),
        ("usize", "a whole number 0 to 18446744073709551615"),
        ("i32", "a whole number -2147483648 to 2147483647"),
    ] {
        if let Some(head) = reason.strip_suffix(&format!("expected {rust}")) {
            reason = format!("{head}expected {range}");
            break;
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((key, expected)) = rest.split_once('`') {
            field = join(&field, key);
            if let Some(near) = closest(key, &backticked(expected)) {
                reason = format!("{reason}; did you mean `{near}`?");
            }
        }
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some((key, _)) = rest.split_once('`') {
            field = join(&field, key);
        }
    } else if let Some(rest) = message.strip_prefix("unknown variant `") {
        if let Some((value, expected)) = rest.split_once('`') {
            let choices = backticked(expected);
            if let Some(near) = synonym(value, &choices).or_else(|| closest(value, &choices)) {
                reason = format!("{reason}; did you mean `{near}`?");
            }
        }
    } else if let Some(rest) = message.strip_prefix("invalid type: string \"") {
        if let Some((value, _)) = rest.split_once("\", expected") {
            let bare = value.trim();
            let key = field.rsplit('.').next().unwrap_or_default();
            if bare.parse::<f64>().is_ok() || bare == "true" || bare == "false" {
                reason = format!("{reason}: write it without quotes, {key} = {bare}");
            } else if message.ends_with("expected a boolean") {
                let meant = match bare.to_ascii_lowercase().as_str() {
                    "yes" | "on" | "y" | "1" | "enabled" => "true",
                    "no" | "off" | "n" | "0" | "disabled" => "false",
                    _ => "true or false",
                };
                reason = format!("{reason}: write {key} = {meant}, without quotes");
            }
        }
    }
    let leaf = field.rsplit('.').next().unwrap_or_default();
    let numeric = reason.contains("a whole number") || reason.contains("integer");
    let hint = match leaf {
        "mtu" if numeric => Some(
            "the IP MTU is 576 up to mempool.data_room less 18 bytes of Ethernet framing \
             (2030 with the default data_room of 2048; 1500 is usual)",
        ),
        "vlan" if numeric => Some("a VLAN id is 1 to 4094"),
        "to_port" if numeric => Some("a port is 1 to 65535"),
        _ => None,
    };
    if let Some(hint) = hint {
        reason = format!("{reason}; {hint}");
    }
    (field, reason)
}

/// The names between backticks in serde's "expected one of `a`, `b`".
pub(crate) fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// What an operator writes for one of the firewall's actions.
pub(crate) fn synonym<'a>(value: &str, choices: &[&'a str]) -> Option<&'a str> {
    let meant = match value.to_ascii_lowercase().as_str() {
        "allow" | "permit" | "pass" | "ok" | "yes" => "accept",
        "deny" | "block" | "discard" | "blackhole" => "drop",
        "refuse" | "reset" | "deny-with-reset" => "reject",
        _ => return None,
    };
    choices.iter().copied().find(|choice| *choice == meant)
}

/// The choice nearest `text` by edit distance (a swap of two neighbours is one edit), if it
/// is a likely typo: one edit in a word of up to four letters, two in a longer one.
pub(crate) fn closest<'a>(text: &str, choices: &[&'a str]) -> Option<&'a str> {
    pub(crate) fn distance(a: &[char], b: &[char]) -> usize {
        // Optimal string alignment: three rows of the table.
        let mut before: Vec<usize> = Vec::new();
        let mut above: Vec<usize> = (0..=b.len()).collect();
        for i in 1..=a.len() {
            let mut row = vec![i; b.len() + 1];
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                row[j] = (above[j - 1] + cost).min(above[j] + 1).min(row[j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    row[j] = row[j].min(before[j - 2] + 1);
                }
            }
            before = std::mem::replace(&mut above, row);
        }
        above[b.len()]
    }
    let text: Vec<char> = text.to_ascii_lowercase().chars().collect();
    let allowed = if text.len() <= 4 { 1 } else { 2 };
    choices
        .iter()
        .map(|choice| {
            let chars: Vec<char> = choice.chars().collect();
            (distance(&text, &chars), *choice)
        })
        .filter(|&(d, _)| d <= allowed)
        .min_by_key(|&(d, _)| d)
        .map(|(_, choice)| choice)
}

/// A config file's text as a source of the `config` crate, named by the file's path: every
/// value carries the path as its origin, so a type error says which file it is in, as it did
/// when `config::File` read the file itself.
#[derive(Clone, Debug)]
struct NamedToml {
    path: String,
    text: String,
}

impl config::Source for NamedToml {
    fn clone_into_box(&self) -> Box<dyn config::Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<config::Map<String, config::Value>, config::ConfigError> {
        use config::Format;
        config::FileFormat::Toml
            .parse(Some(&self.path), &self.text)
            .map_err(|cause| config::ConfigError::FileParse {
                uri: Some(self.path.clone()),
                cause,
            })
    }
}

/// The config file's text, for [`GatewayConfig::from_text`]; the error names the file.
pub fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|err| ConfigError::Load {
        path: path.display().to_string(),
        cause: config::ConfigError::Foreign(Box::new(err)),
    })
}

impl GatewayConfig {
    /// Reads, applies `GATEWAY__*` environment overrides, and validates.
    pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
        Self::from_text(path, &read_config_file(path)?)
    }

    /// As [`load`](Self::load), from the text of the file at `path`, read once by the caller:
    /// whoever keeps the text's digest (start-up and reload, for `gateway ctl show config`)
    /// then describes exactly what was loaded, even if the file changes meanwhile. `path`
    /// names the file in errors.
    pub fn from_text(path: &Path, text: &str) -> Result<GatewayConfig, ConfigError> {
        Self::from_text_and_environment(path, text, None)
    }

    /// As [`from_text`](Self::from_text), with the `GATEWAY__*` overrides taken from
    /// `environment` instead of the process's where given (tests).
    pub(crate) fn from_text_and_environment(
        path: &Path,
        text: &str,
        environment: Option<config::Map<String, String>>,
    ) -> Result<GatewayConfig, ConfigError> {
        let load_error = |cause| ConfigError::Load {
            path: path.display().to_string(),
            cause,
        };
        check_keys(text)?;
        check_types(path, text)?;
        let source = config::Config::builder()
            .add_source(NamedToml {
                path: path.display().to_string(),
                text: text.to_string(),
            })
            .add_source(
                config::Environment::with_prefix("GATEWAY")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .source(environment),
            )
            .build()
            .map_err(load_error)?;
        // The path to a value that fails to deserialize (a range that runs backwards, an
        // unknown mode) names the field, as every other error here does.
        let config: GatewayConfig = serde_path_to_error::deserialize(source).map_err(|err| {
            let field = err.path().to_string();
            explained(&field, &err.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }
}
