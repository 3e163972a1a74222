//! Whether the machine has the hugepages the EAL will ask for: a mounted hugetlbfs, enough
//! free in all, and, where `eal.socket_memory_mb` asks per NUMA node, enough on each of those
//! nodes. The EAL itself fails on a short node only once it starts; asked first, start-up can
//! name the node and the field (or, with `hugepages = "auto"`, say why it runs without).

use std::path::Path;

/// Why the hugepages fall short of `memory_mb` in all and of `per_node_mb[n]` on node n, or
/// None if they do not.
pub fn shortfall(memory_mb: u32, per_node_mb: &[u32]) -> Option<String> {
    shortfall_under(Path::new("/"), memory_mb, per_node_mb)
}

/// Whether this machine has `memory_mb` of free hugepages on a mounted hugetlbfs, from any
/// node.
pub fn available(memory_mb: u32) -> bool {
    shortfall(memory_mb, &[]).is_none()
}

/// [`shortfall`] reading `proc` and `sys` under `root` (tests give a directory of their own).
fn shortfall_under(root: &Path, memory_mb: u32, per_node_mb: &[u32]) -> Option<String> {
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_default();
    let mounted = read("proc/mounts")
        .lines()
        .any(|line| line.split_whitespace().nth(2) == Some("hugetlbfs"));
    if !mounted {
        return Some("no hugetlbfs is mounted".into());
    }
    let meminfo = read("proc/meminfo");
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let free_mb = field("HugePages_Free:") * field("Hugepagesize:") / 1024;
    if free_mb == 0 || free_mb < u64::from(memory_mb) {
        return Some(format!(
            "{free_mb} MiB of hugepages are free, {memory_mb} MiB are needed"
        ));
    }
    per_node_mb
        .iter()
        .enumerate()
        .filter(|&(_, &wanted)| wanted > 0)
        .find_map(|(node, &wanted)| {
            let free = node_free_mb(root, node);
            (free < u64::from(wanted)).then(|| {
                format!(
                    "NUMA node {node} has {free} MiB of free hugepages, eal.socket_memory_mb asks {wanted} MiB of it"
                )
            })
        })
}

/// Free hugepages on NUMA node `node`, every page size together, in MiB (0 if the node has
/// none or does not exist).
fn node_free_mb(root: &Path, node: usize) -> u64 {
    let dir = root.join(format!("sys/devices/system/node/node{node}/hugepages"));
    let Ok(sizes) = std::fs::read_dir(dir) else {
        return 0;
    };
    sizes
        .flatten()
        .filter_map(|size| {
            // hugepages-2048kB/free_hugepages
            let name = size.file_name().into_string().ok()?;
            let kib: u64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let free: u64 = std::fs::read_to_string(size.path().join("free_hugepages"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(free * kib / 1024)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine of two nodes, 2 MiB pages: `free[n]` pages free on node n, all of them in
    /// meminfo's total.
    fn machine(free: [u64; 2], mounted: bool) -> std::path::PathBuf {
        // Tests run in parallel threads: each machine gets a directory of its own.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("gw-hugepages-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        let fs = if mounted { "hugetlbfs" } else { "tmpfs" };
        write("proc/mounts", &format!("none /dev/hugepages {fs} rw 0 0\n"));
        write(
            "proc/meminfo",
            &format!(
                "MemTotal: 1000 kB\nHugePages_Free: {}\nHugepagesize: 2048 kB\n",
                free[0] + free[1]
            ),
        );
        for (node, pages) in free.iter().enumerate() {
            let dir = format!("sys/devices/system/node/node{node}/hugepages");
            write(
                &format!("{dir}/hugepages-2048kB/free_hugepages"),
                &format!("{pages}\n"),
            );
            write(&format!("{dir}/hugepages-1048576kB/free_hugepages"), "0\n");
        }
        root
    }

    #[test]
    fn enough_in_all_and_on_each_node_asked() {
        let root = machine([512, 512], true);
        assert_eq!(shortfall_under(&root, 2048, &[]), None);
        assert_eq!(shortfall_under(&root, 2048, &[1024, 1024]), None);
        assert_eq!(shortfall_under(&root, 1024, &[1024, 0]), None);
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn a_short_node_is_named_though_the_total_suffices() {
        let root = machine([100, 900], true);
        let short = shortfall_under(&root, 1024, &[1024, 0]).unwrap();
        assert!(short.contains("NUMA node 0 has 200 MiB"), "{short}");
        assert!(short.contains("eal.socket_memory_mb"), "{short}");
        assert_eq!(shortfall_under(&root, 1024, &[0, 1024]), None);
        let missing = shortfall_under(&root, 1024, &[0, 0, 512]).unwrap();
        assert!(missing.contains("NUMA node 2 has 0 MiB"), "{missing}");
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn too_few_in_all_or_none_mounted() {
        let root = machine([100, 100], true);
        let short = shortfall_under(&root, 512, &[]).unwrap();
        assert!(short.contains("400 MiB of hugepages are free"), "{short}");
        std::fs::remove_dir_all(&root).ok();
        let root = machine([512, 512], false);
        assert_eq!(
            shortfall_under(&root, 64, &[]).as_deref(),
            Some("no hugetlbfs is mounted")
        );
        std::fs::remove_dir_all(&root).ok();
    }
}
