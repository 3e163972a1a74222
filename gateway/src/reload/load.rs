//! Reading, parsing, validating and compiling a file for start-up or a reload.

use super::*;

/// What a reload came to, ready for the control thread to publish or report.
#[derive(Debug)]
pub enum Loaded {
    /// The config now in force (restart-only settings kept as they run) and its compiled
    /// router config; `restart` names the changed settings that wait for a restart.
    Ready {
        config: Box<GatewayConfig>,
        router: Arc<RouterConfig>,
        restart: Vec<String>,
        /// The file as read, and the settings in it that differ from the one before.
        file: FileText,
        changed: Vec<String>,
    },
    /// The file did not load, validate or compile; nothing changes. The reason names the field.
    Refused(String),
}

/// Reads the config file once, and loads and digests that one text: the digest (`gateway ctl
/// show config`) is of what loaded, whatever is written to the file meanwhile.
pub fn load_file(path: &Path) -> Result<(GatewayConfig, FileText), ConfigError> {
    let text = read_config_file(path)?;
    Ok((GatewayConfig::from_text(path, &text)?, FileText::new(&text)))
}

/// Validates and compiles `text` (named `label` in messages) as a reload of `running`, read
/// from `running_file`. `kernel` is what the twins' kernel side says (addresses from DHCP,
/// routes): the reload compiles with it, as the control thread does when it changes.
pub fn load_for_reload(
    label: &Path,
    text: &str,
    running: &GatewayConfig,
    running_file: &FileText,
    macs: &[[u8; 6]],
    kernel: &KernelView,
) -> Loaded {
    let new = match GatewayConfig::from_text(label, text) {
        Ok(new) => new,
        Err(err) => return Loaded::Refused(err.to_string()),
    };
    let file = FileText::new(text);
    let restart = restart_required(running, &new);
    let merged = merge_for_reload(running, new);
    // The file was valid alone; what would run is the file with its restart-only settings
    // kept as they run, which must be valid as a whole too: a policy, rule or forward that
    // names an interface or zone the restart has yet to bring is refused, never resolved to
    // another one.
    if let Err(err) = merged.validate() {
        let waiting = if restart.is_empty() {
            String::new()
        } else {
            format!(
                " (kept as they run until a restart: {}; reload the rest without what \
                 depends on them, or restart)",
                restart.join(", ")
            )
        };
        return Loaded::Refused(format!(
            "the file with its restart-only settings kept as they run: {err}{waiting}"
        ));
    }
    match router_config_with_kernel(&merged, macs, kernel) {
        Ok(router) => Loaded::Ready {
            config: Box::new(merged),
            router: Arc::new(router),
            restart,
            changed: file.changed_since(running_file),
            file,
        },
        Err(err) => Loaded::Refused(crate::dpdk::ErrorChain(&err).to_string()),
    }
}
