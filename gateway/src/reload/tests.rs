use super::*;

fn lab() -> GatewayConfig {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/lab.toml"))
        .unwrap();
    // Tests run in parallel threads: each gets a file of its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gw-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("lab-{n}.toml"));
    std::fs::write(&file, text).unwrap();
    GatewayConfig::load(&file).unwrap()
}

/// A reload that adds an interface (which waits for a restart) and a policy naming its
/// zone: the policy must not resolve to a running zone (it once became `wan -> lan`).
#[test]
fn a_policy_naming_a_zone_that_waits_for_a_restart_refuses_the_reload() {
    let running = lab();
    let lab_text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/lab.toml"))
            .unwrap();
    let wan_local = r#"{ from = "wan", to = "local", action = "drop" },"#;
    assert!(lab_text.contains(wan_local));
    let added = format!(
        "{}\n[[interfaces]]\nname = \"dmz\"\ndevice = \"net_null0\"\n\
             address = \"172.16.30.1/24\"\nzone = \"dmz\"\n",
        lab_text.replace(
            wan_local,
            &format!(r#"{wan_local} {{ from = "wan", to = "dmz", action = "accept" }},"#)
        )
    );
    let dir = std::env::temp_dir().join(format!("gw-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dmz-added.toml");
    std::fs::write(&file, &added).unwrap();
    GatewayConfig::load(&file).expect("the new file is valid alone");
    let loaded = load_for_reload(
        &file,
        &added,
        &running,
        &FileText::new(&lab_text),
        &[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]],
        &KernelView::default(),
    );
    let Loaded::Refused(reason) = loaded else {
        panic!("a policy naming a zone that waits for a restart was applied: {loaded:?}");
    };
    assert!(reason.contains("firewall.policy["), "{reason}");
    assert!(reason.contains("\"dmz\""), "{reason}");
    assert!(reason.contains("interfaces (count)"), "{reason}");
}

/// The file lists the interfaces in another order (which waits for a restart): each
/// running interface takes the zone the file gives its name, never the one at its place.
#[test]
fn a_reordered_interface_list_keeps_each_zone_with_its_interface() {
    let running = lab();
    let mut new = running.clone();
    new.interfaces.swap(0, 1);
    assert_eq!(new.interfaces[1].name, "lan");
    new.interfaces[1].zone = Some("inside".into());
    assert!(restart_required(&running, &new).contains(&"interfaces[0].device/name".into()));
    let merged = merge_for_reload(&running, new);
    assert_eq!(merged.interfaces[0].name, "lan");
    assert_eq!(merged.interfaces[0].zone.as_deref(), Some("inside"));
    assert_eq!(merged.interfaces[1].name, "wan");
    assert_eq!(merged.interfaces[1].zone, running.interfaces[1].zone);
    assert_eq!(merged.interfaces[1].device, running.interfaces[1].device);
}

#[test]
fn restart_only_fields_are_named_and_kept() {
    let running = lab();
    let mut new = running.clone();
    new.eal.memory_mb += 1;
    new.interfaces[0].device = "net_af_packet9,iface=other".into();
    new.icmp.errors_per_sec = 5;
    let fields = restart_required(&running, &new);
    assert_eq!(fields, ["eal", "interfaces[0].device/name"]);
    let merged = merge_for_reload(&running, new);
    assert_eq!(merged.eal, running.eal);
    assert_eq!(merged.interfaces[0].device, running.interfaces[0].device);
    assert_eq!(
        merged.icmp.errors_per_sec, 5,
        "runtime settings still apply"
    );
}

#[test]
fn ipv6_on_an_interface_needs_a_restart_and_its_contents_do_not() {
    use crate::config::{Ipv6Cidr, Ipv6InterfaceConfig};
    let running = lab();
    let mut new = running.clone();
    let table = Ipv6InterfaceConfig {
        addresses: vec![Ipv6Cidr {
            addr: "2001:db8:10::1".parse().unwrap(),
            len: 64,
        }],
        router_advertisements: true,
        dns_servers: Vec::new(),
        ra_interval_secs: 600,
        autoconfigure: false,
        delegated_prefix: false,
    };
    new.interfaces[0].ipv6 = Some(table.clone());
    assert_eq!(restart_required(&running, &new), ["interfaces[0].ipv6"]);
    assert_eq!(
        merge_for_reload(&running, new.clone()).interfaces[0].ipv6,
        None
    );
    // Once running with it, a change of what it says applies.
    let running = new;
    let mut changed = running.clone();
    changed.interfaces[0].ipv6 = Some(Ipv6InterfaceConfig {
        router_advertisements: false,
        ..table
    });
    assert!(restart_required(&running, &changed).is_empty());
    assert_eq!(merge_for_reload(&running, changed.clone()), changed);
    // How the twin takes part is set up at start.
    let mut delegated = running.clone();
    delegated.interfaces[0]
        .ipv6
        .as_mut()
        .unwrap()
        .delegated_prefix = true;
    assert_eq!(
        restart_required(&running, &delegated),
        ["interfaces[0].ipv6.autoconfigure/delegated_prefix"]
    );
    assert_eq!(merge_for_reload(&running, delegated), running);
}

#[test]
fn start_only_settings_of_the_tables_neighbours_and_ports_are_reported_and_kept() {
    let running = lab();
    let mut new = running.clone();
    new.conntrack.udp_secs += 1;
    new.conntrack.tcp_loose = !running.conntrack.tcp_loose;
    new.neighbors.locktime_ms += 1;
    new.interfaces[1].rss_key = Some("6d5a".repeat(20));
    new.interfaces[0].source_validation = Some(crate::config::SourceValidationConfig::Off);
    let fields = restart_required(&running, &new);
    assert_eq!(
        fields,
        [
            "conntrack",
            "neighbors",
            "interfaces[1].bond/rss_key/promiscuous/vlan_offload"
        ]
    );
    let merged = merge_for_reload(&running, new.clone());
    assert_eq!(merged.conntrack, running.conntrack);
    assert_eq!(merged.neighbors, running.neighbors);
    assert_eq!(merged.interfaces[1].rss_key, running.interfaces[1].rss_key);
    assert_eq!(
        merged.interfaces[0].source_validation, new.interfaces[0].source_validation,
        "source validation applies with the router config"
    );
}

#[test]
fn qos_and_the_meter_apply_on_reload_but_the_meter_capacity_needs_a_restart() {
    let running = lab();
    let mut new = running.clone();
    new.qos.enabled = !running.qos.enabled;
    new.qos.uplink_mbps += 1;
    new.traffic_meter.enabled = !running.traffic_meter.enabled;
    new.traffic_meter.top_hosts += 1;
    assert!(restart_required(&running, &new).is_empty());
    let merged = merge_for_reload(&running, new.clone());
    assert_eq!(merged.qos, new.qos);
    assert_eq!(merged.traffic_meter, new.traffic_meter);

    new.traffic_meter.capacity *= 2;
    assert_eq!(restart_required(&running, &new), ["traffic_meter.capacity"]);
    let merged = merge_for_reload(&running, new.clone());
    assert_eq!(
        merged.traffic_meter.capacity,
        running.traffic_meter.capacity
    );
    assert_eq!(merged.traffic_meter.top_hosts, new.traffic_meter.top_hosts);
}

#[test]
fn switching_an_address_to_or_from_dhcp_needs_a_restart() {
    let running = lab();
    let mut new = running.clone();
    new.interfaces[1].address = crate::config::InterfaceAddress::Dhcp;
    assert_eq!(restart_required(&running, &new), ["interfaces[1].address"]);
    let merged = merge_for_reload(&running, new);
    assert_eq!(merged.interfaces[1].address, running.interfaces[1].address);
}

#[test]
fn an_unchanged_file_needs_no_restart() {
    let running = lab();
    assert!(restart_required(&running, &running.clone()).is_empty());
}

/// A reload with a large category list loads on the `config-load` thread: the loop that
/// asks for it (the control thread's, here a 1 ms tick) keeps ticking all along, and the
/// result arrives as an event it publishes.
#[test]
fn a_large_category_list_loads_while_the_control_loop_keeps_ticking() {
    use std::time::Instant;
    let dir = std::env::temp_dir().join(format!("gw-loader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("big.txt");
    let domains: String = (0..10_000)
        .map(|i| format!("0.0.0.0 host{i}.blocked{}.example\n", i % 997))
        .collect();
    std::fs::write(&list, domains).unwrap();
    let running = lab();
    let path = dir.join("gateway.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/lab.toml"))
        .unwrap();
    std::fs::write(
        &path,
        format!(
            "{text}\n[parental_control]\nenabled = true\ncategories = {{ big = {:?} }}\n\
                 [[parental_control.devices]]\nname = \"kid\"\naddresses = [\"192.168.10.20\"]\n\
                 blocked_categories = [\"big\"]\n",
            list.display().to_string()
        ),
    )
    .unwrap();
    let macs: Vec<[u8; 6]> = (0..running.interfaces.len())
        .map(|i| [2, 0, 0, 0, 0, i as u8])
        .collect();
    let (done, loaded) = crossbeam_channel::unbounded();
    let loader = Loader::start(
        LoaderSetup {
            path: path.clone(),
            running,
            running_file: FileText::default(),
            macs,
            kernel: Default::default(),
            store: ConfigStore::new(&dir),
        },
        move |result| {
            let _ = done.send((Instant::now(), result.loaded));
        },
    )
    .unwrap();

    let asked = Instant::now();
    loader.request(LoadRequest::File { reply: None });
    let request_took = asked.elapsed();
    let (mut last_tick, mut ticks, mut longest_gap) = (Instant::now(), 0u32, Duration::ZERO);
    let (finished, result) = loop {
        if let Ok(result) = loaded.try_recv() {
            break result;
        }
        std::thread::sleep(Duration::from_millis(1));
        let now = Instant::now();
        longest_gap = longest_gap.max(now - last_tick);
        last_tick = now;
        ticks += 1;
        assert!(
            asked.elapsed() < Duration::from_secs(120),
            "the load never finished"
        );
    };
    let load_took = finished - asked;
    let Loaded::Ready { config, router, .. } = result else {
        panic!("the reload was refused: {result:?}");
    };
    eprintln!("load {load_took:?}, {ticks} ticks, longest gap {longest_gap:?}");
    assert!(config.parental_control.enabled);
    assert!(
        router.stateful.content.is_some(),
        "the category list was compiled"
    );
    assert!(
        request_took < Duration::from_millis(5),
        "asking for a reload took {request_took:?}"
    );
    // The load must be long enough for a stall to show: 10,000 domains take far longer
    // than the ticks are apart, even in a release build.
    assert!(
        load_took >= Duration::from_millis(50),
        "the load took only {load_took:?}: too quick to tell a stall"
    );
    assert!(
        longest_gap < load_took / 3 && ticks >= 20,
        "the loop stalled: {ticks} ticks, the longest gap {longest_gap:?} while the load \
             took {load_took:?}"
    );
    drop(loader);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through the loader, a restart-only change is reported and kept as it runs on every
/// reload until the restart, while the rest of the file applies.
#[test]
fn the_loader_reports_a_restart_only_change_on_every_reload() {
    let running = lab();
    let dir = std::env::temp_dir().join(format!("gw-loader-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/lab.toml"))
        .unwrap();
    let changed = text
        .replacen("errors_per_sec = 1000", "errors_per_sec = 7", 1)
        .replacen("locktime_ms = 1000", "locktime_ms = 999", 1);
    assert!(
        changed.contains("errors_per_sec = 7") && changed.contains("locktime_ms = 999"),
        "lab.toml sets both"
    );
    std::fs::write(&path, changed).unwrap();
    let macs = vec![[2, 0, 0, 0, 0, 0]; running.interfaces.len()];
    let (done, loaded) = crossbeam_channel::unbounded();
    let loader = Loader::start(
        LoaderSetup {
            path,
            running: running.clone(),
            running_file: FileText::new(&text),
            macs,
            kernel: Default::default(),
            store: ConfigStore::new(&dir),
        },
        move |result| {
            let _ = done.send(result.loaded);
        },
    )
    .unwrap();
    loader.request(LoadRequest::File { reply: None });
    let first = loaded.recv_timeout(Duration::from_secs(10)).unwrap();
    let Loaded::Ready {
        config,
        restart,
        changed,
        ..
    } = first
    else {
        panic!("refused: {first:?}");
    };
    assert_eq!(restart, ["neighbors"]);
    assert_eq!(changed, ["icmp.errors_per_sec", "neighbors.locktime_ms"]);
    assert_eq!(config.icmp.errors_per_sec, 7);
    assert_eq!(config.neighbors, running.neighbors, "kept as it runs");
    loader.request(LoadRequest::File { reply: None });
    let second = loaded.recv_timeout(Duration::from_secs(10)).unwrap();
    let Loaded::Ready {
        restart, changed, ..
    } = second
    else {
        panic!("refused: {second:?}");
    };
    assert_eq!(restart, ["neighbors"], "still differs from what runs");
    assert!(
        changed.is_empty(),
        "the file is as the last reload read it: {changed:?}"
    );
    drop(loader);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ctl config diff` changes nothing; `apply` loads the text it sends and keeps it in
/// the state directory; `rollback 1` returns to the text before, whole; a refused text
/// is answered with its field and leaves the running config as it was.
#[test]
fn the_loader_diffs_applies_and_rolls_back_texts() {
    let running = lab();
    let dir = std::env::temp_dir().join(format!("gw-loader-apply-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/lab.toml"))
        .unwrap();
    let changed = text.replacen("errors_per_sec = 1000", "errors_per_sec = 7", 1);
    let store = ConfigStore::new(&dir);
    let (done, loaded) = crossbeam_channel::unbounded();
    let loader = Loader::start(
        LoaderSetup {
            path: dir.join("gateway.toml"),
            running,
            running_file: FileText::new(&text),
            macs: vec![[2, 0, 0, 0, 0, 0]; 2],
            kernel: Default::default(),
            store: store.clone(),
        },
        move |result| {
            let _ = done.send(result);
        },
    )
    .unwrap();
    let ask = |request: fn(Reply) -> LoadRequest| {
        let (reply, answer) = crossbeam_channel::bounded(1);
        loader.request(request(reply));
        answer
    };
    let label = PathBuf::from("new.toml");
    let (reply, answer) = crossbeam_channel::bounded(1);
    loader.request(LoadRequest::Diff {
        text: changed.clone(),
        label: label.clone(),
        reply,
    });
    let diff = answer
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(diff["changed"][0], "icmp.errors_per_sec");
    assert!(loaded.try_recv().is_err(), "a diff applies nothing");
    loader.request(LoadRequest::Text {
        text: changed.as_str().into(),
        label: label.clone(),
        source: Source::Apply(label.clone()),
        confirm: Some(Duration::from_secs(30)),
        reply: None,
    });
    let applied = loaded.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(applied.confirm, Some(Duration::from_secs(30)));
    assert_eq!(&*applied.previous.text, text.as_str());
    assert!(
        matches!(applied.loaded, Loaded::Ready { ref config, .. } if config.icmp.errors_per_sec == 7)
    );
    assert_eq!(store.entries().unwrap().len(), 2, "the start and the apply");
    let answer = ask(|reply| LoadRequest::Rollback { steps: 5, reply });
    let refused = answer.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(refused.unwrap_err().contains("1 earlier configs"));
    ask(|reply| LoadRequest::Rollback { steps: 1, reply });
    let back = loaded.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(back.source, Source::Rollback(1));
    let Loaded::Ready { config, file, .. } = back.loaded else {
        panic!("the rollback was refused");
    };
    assert_eq!(config.icmp.errors_per_sec, 1000);
    assert_eq!(&*file.text, text.as_str(), "back to the text, whole");
    let bad = text.replacen("action = \"accept\"", "action = \"allow\"", 1);
    loader.request(LoadRequest::Text {
        text: bad.as_str().into(),
        label: label.clone(),
        source: Source::Apply(label),
        confirm: None,
        reply: None,
    });
    let refused = loaded.recv_timeout(Duration::from_secs(10)).unwrap();
    let Loaded::Refused(reason) = refused.loaded else {
        panic!("a bad action was applied");
    };
    assert!(reason.contains("action"), "{reason}");
    assert_eq!(
        store.entries().unwrap().len(),
        3,
        "a refused text is not kept"
    );
    drop(loader);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes as a slow rewrite makes them (truncate, then chunks with pauses shorter than
/// the quiet period) give one reload, after the last write. The pauses are measured, not
/// assumed: a host that stalls the writer past half the quiet period (a loaded CI machine)
/// may see the burst split, and then only "never before the file was quiet" is asserted.
#[test]
fn a_burst_of_writes_gives_one_reload_after_the_last_write() {
    let (writes, written) = crossbeam_channel::unbounded();
    let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let quiet = Duration::from_millis(300);
    let debouncer = std::thread::spawn(move || {
        debounce(&written, quiet, move || {
            recorded.lock().unwrap().push(std::time::Instant::now())
        })
    });
    let count = |calls: &std::sync::Mutex<Vec<std::time::Instant>>| calls.lock().unwrap().len();
    let wait_for = |wanted: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while count(&calls) < wanted && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Any reload more than wanted would come within the quiet period.
        std::thread::sleep(quiet * 2);
    };
    let mut sent = Vec::new();
    for _ in 0..8 {
        sent.push(std::time::Instant::now());
        writes.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let stalled = sent.windows(2).any(|pair| pair[1] - pair[0] >= quiet / 2);
    wait_for(1);
    {
        let calls = calls.lock().unwrap();
        // Every reload comes a quiet period after the write before it.
        for call in calls.iter() {
            let before = sent.iter().rfind(|&&write| write <= *call).unwrap();
            assert!(
                *call >= *before + quiet,
                "reloaded before the file was quiet"
            );
        }
        if !stalled {
            assert_eq!(calls.len(), 1, "one reload per burst");
        }
        assert!(!calls.is_empty(), "no reload after the burst");
    }
    let after_first = count(&calls);
    writes.send(()).unwrap();
    wait_for(after_first + 1);
    assert_eq!(
        count(&calls),
        after_first + 1,
        "the next burst reloads again"
    );
    drop(writes);
    debouncer.join().unwrap();
}

/// The real watcher on a real file: a chunked in-place rewrite is reported once, quiet
/// after its last chunk, and an atomic replacement (`mv`) once too.
#[test]
fn the_watcher_reports_a_chunked_rewrite_once_it_is_quiet() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("gw-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(&path, "a = 1\n").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let quiet = Duration::from_millis(300);
    let watch = watch_file(&path, quiet, move || {
        let _ = tx.send(std::time::Instant::now());
    })
    .unwrap();
    let mut file = std::fs::File::create(&path).unwrap(); // truncates
    for _ in 0..6 {
        file.write_all(&[b'#'; 512]).unwrap();
        file.flush().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let last_write = std::time::Instant::now();
    drop(file);
    let reported = rx.recv_timeout(Duration::from_secs(3)).expect("no reload");
    assert!(reported >= last_write + quiet - Duration::from_millis(120));
    assert!(
        rx.recv_timeout(quiet * 2).is_err(),
        "one rewrite, two reloads"
    );
    let temp = dir.join("gateway.toml.new");
    std::fs::write(&temp, "a = 2\n").unwrap();
    std::fs::rename(&temp, &path).unwrap();
    rx.recv_timeout(Duration::from_secs(3))
        .expect("a rename over the file is a change too");
    drop(watch);
    let _ = std::fs::remove_dir_all(&dir);
}
