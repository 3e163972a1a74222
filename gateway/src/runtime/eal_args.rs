//! The EAL's arguments from `[eal]`, `[workers]` and the interfaces' devices, with or without
//! hugepages as `eal.hugepages` and the machine allow.

use super::*;

pub fn eal_args(config: &GatewayConfig) -> anyhow::Result<EalArgs> {
    let shortfall =
        || hugetlbfs::shortfall(config.eal.total_memory_mb(), &config.eal.socket_memory_mb);
    let no_huge = match config.eal.hugepages {
        HugepageMode::Off => true,
        HugepageMode::Required => match shortfall() {
            Some(why) => bail!(
                "eal.hugepages = \"required\" but the hugepages fall short: {why} (see `make hugepages`)"
            ),
            None => false,
        },
        HugepageMode::Auto => match shortfall() {
            Some(why) if config.eal.pdump => bail!(
                "eal.pdump needs hugepages, and they fall short: {why} (see `make hugepages`)"
            ),
            Some(why) => {
                tracing::warn!(
                    "hugepages fall short ({why}); running with --no-huge (slower, fine for labs)"
                );
                true
            }
            None => false,
        },
    };
    Ok(eal_args_with(config, no_huge))
}

/// The EAL's arguments once it is known whether hugepages are used.
pub fn eal_args_with(config: &GatewayConfig, no_huge: bool) -> EalArgs {
    let mut lcores = vec![LcoreId(config.eal.main_lcore)];
    lcores.extend(config.workers.lcores.iter().map(|&l| LcoreId(l)));
    let (pci, vdevs): (Vec<_>, Vec<_>) = config
        .interfaces
        .iter()
        .flat_map(|iface| iface.eal_devices())
        .partition(|device| is_pci_address(device));
    EalArgs {
        lcores,
        cpus: config.eal.cpus.clone(),
        no_huge,
        memory_mb: config.eal.total_memory_mb(),
        socket_memory_mb: config.eal.socket_memory_mb.clone(),
        // The capture tools attach to the runtime files `--in-memory` would leave out.
        in_memory: !config.eal.pdump,
        file_prefix: Some(config.eal.file_prefix.clone()),
        no_pci: pci.is_empty(),
        pci_allow: pci,
        vdevs,
        log_level: Some(config.eal.log_level.clone()),
        extra: config.eal.extra_args.clone(),
    }
}
