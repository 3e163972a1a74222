//! The safe DPDK layer against a real EAL, in-process, on virtual devices: no NIC, no
//! hugepages. One EAL serves every test of this binary (DPDK allows one per process).

use std::sync::{Arc, OnceLock};

use gateway::dpdk::{
    launch, Eal, EalArgs, LcoreId, Mbuf, MbufBatch, MbufRing, Mempool, Port, PortConfig, RxQueueId,
    SocketId, TxQueueId, BURST_SIZE,
};

/// The EAL every test shares. Each test has a vdev of its own: closing a port releases it.
fn eal() -> &'static Eal {
    static STARTED: OnceLock<Eal> = OnceLock::new();
    STARTED.get_or_init(|| {
        let args = EalArgs {
            lcores: vec![LcoreId(0), LcoreId(1)],
            no_huge: true,
            memory_mb: 256,
            in_memory: true,
            no_pci: true,
            vdevs: vec![
                "net_ring0".into(),
                "net_null0".into(),
                "net_ring1".into(),
                "net_null1".into(),
                "net_null2".into(),
                "net_null3".into(),
            ],
            log_level: Some("warning".into()),
            ..Default::default()
        };
        // Tests share the EAL until the process exits; cleanup at exit is the OS's job.
        Eal::init(&args).expect("EAL starts on --no-huge with vdevs")
    })
}

/// Lcore 1 runs one job at a time; tests that launch on it take turns.
fn worker_lcore() -> std::sync::MutexGuard<'static, ()> {
    static LCORE1: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LCORE1.lock().unwrap_or_else(|poison| poison.into_inner())
}

fn stamp(mbuf: &mut Mbuf, seq: u32) {
    mbuf.set_len(64).expect("64 bytes fit an mbuf");
    let data = mbuf.data_mut();
    data.fill(0xab);
    data[..4].copy_from_slice(&seq.to_be_bytes());
}

#[test]
fn packets_loop_through_net_ring_and_every_mbuf_returns_to_its_pool() {
    let eal = eal();
    let pool = Arc::new(Mempool::new(eal, "ring_test_pool", 2047, 0, 2048, SocketId::ANY).unwrap());
    let id = Port::find(eal, "net_ring0").unwrap();
    let mut port = Port::start(eal, id, "net_ring0", &PortConfig::default(), &pool).unwrap();
    let mut rxq = port.take_rx_queue(RxQueueId(0)).unwrap();
    let mut txq = port.take_tx_queue(TxQueueId(0)).unwrap();
    let total: u32 = 12_800;
    let mut sent_seq = 0u32;
    let mut next_expected = 0u32;
    let mut tx = MbufBatch::new();
    let mut rx = MbufBatch::new();
    while next_expected < total {
        while !tx.is_full() && sent_seq < total {
            let mut mbuf = Mbuf::alloc(&pool).expect("pool has room");
            stamp(&mut mbuf, sent_seq);
            tx.push(mbuf).ok().unwrap();
            sent_seq += 1;
        }
        let (sent, dropped) = txq.tx_burst(&mut tx);
        assert_eq!(sent + dropped, BURST_SIZE.min(sent + dropped));
        sent_seq -= dropped as u32; // refused packets were freed; send those numbers again
        assert!(tx.is_empty());
        rxq.rx_burst(&mut rx);
        for mbuf in rx.drain() {
            assert_eq!(mbuf.len(), 64);
            let seq = u32::from_be_bytes(mbuf.data()[..4].try_into().unwrap());
            assert_eq!(seq, next_expected, "packets arrive once and in order");
            assert!(mbuf.data()[4..].iter().all(|&b| b == 0xab));
            next_expected += 1;
        }
    }
    let stats = port.stats().unwrap();
    assert_eq!(stats.rx_packets, u64::from(total));
    assert_eq!(stats.tx_packets, u64::from(total));
    drop((rxq, txq, port));
    assert_eq!(pool.in_use(), 0, "no mbuf leaked");
    assert_eq!(pool.available(), pool.capacity(), "no mbuf freed twice");
}

#[test]
fn null_device_consumes_tx_and_produces_rx_from_our_pool() {
    let eal = eal();
    let pool = Arc::new(Mempool::new(eal, "null_test_pool", 1023, 0, 2048, SocketId::ANY).unwrap());
    let id = Port::find(eal, "net_null0").unwrap();
    let mut port = Port::start(eal, id, "net_null0", &PortConfig::default(), &pool).unwrap();
    let mut rxq = port.take_rx_queue(RxQueueId(0)).unwrap();
    let mut txq = port.take_tx_queue(TxQueueId(0)).unwrap();
    let mut moved = 0;
    let mut batch = MbufBatch::new();
    while moved < 10_000 {
        while !batch.is_full() {
            let mut mbuf = Mbuf::alloc(&pool).unwrap();
            stamp(&mut mbuf, moved as u32);
            batch.push(mbuf).ok().unwrap();
        }
        let (sent, dropped) = txq.tx_burst(&mut batch);
        assert_eq!(
            (sent, dropped),
            (BURST_SIZE, 0),
            "net_null takes every packet"
        );
        let got = rxq.rx_burst(&mut batch);
        assert!(got > 0, "net_null always has packets to give");
        assert!(batch.drain().all(|mbuf| mbuf.segments() == 1));
        moved += sent + got;
    }
    drop((rxq, txq, port));
    assert_eq!(pool.in_use(), 0, "no mbuf leaked");
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn ring_hands_packets_from_a_worker_lcore_to_the_main_thread() {
    let eal = eal();
    let pool =
        Arc::new(Mempool::new(eal, "handoff_test_pool", 4095, 0, 2048, SocketId::ANY).unwrap());
    let (mut producer, mut consumer) =
        MbufRing::create(eal, "handoff_test_ring", 1024, SocketId::ANY).unwrap();
    assert!(producer.is_empty());
    let total: u32 = 10_000;
    let worker_pool = pool.clone();
    let _turn = worker_lcore();
    let worker = launch(eal, LcoreId(1), move || {
        let mut batch = MbufBatch::new();
        let mut seq = 0u32;
        let mut ring_full = 0u64;
        while seq < total || !batch.is_empty() {
            while !batch.is_full() && seq < total {
                let mut mbuf = Mbuf::alloc(&worker_pool).expect("pool has room");
                stamp(&mut mbuf, seq);
                batch.push(mbuf).ok().unwrap();
                seq += 1;
            }
            if producer.enqueue(&mut batch) == 0 {
                ring_full += 1;
                std::hint::spin_loop();
            }
        }
        ring_full
    })
    .unwrap();
    let mut batch = MbufBatch::new();
    let mut expected = 0u32;
    while expected < total {
        consumer.dequeue(&mut batch);
        for mbuf in batch.drain() {
            let seq = u32::from_be_bytes(mbuf.data()[..4].try_into().unwrap());
            assert_eq!(seq, expected);
            expected += 1;
        }
    }
    worker.join().expect("the worker finished cleanly");
    assert!(consumer.is_empty());
    assert_eq!(pool.in_use(), 0, "no mbuf leaked");
}

#[test]
fn a_panicking_worker_is_reported_not_fatal() {
    let eal = eal();
    let _turn = worker_lcore();
    let work = launch(eal, LcoreId(1), || -> u32 { panic!("boom on purpose") }).unwrap();
    let err = work.join().unwrap_err().to_string();
    assert!(
        err.contains("lcore 1") && err.contains("boom on purpose"),
        "{err}"
    );
}

#[test]
fn an_unknown_device_is_named_in_the_error() {
    let eal = eal();
    let err = Port::find(eal, "net_nosuch7,iface=x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("net_nosuch7"), "{err}");
    let err = Port::probe(eal, "net_bogusdriver0,foo=1")
        .unwrap_err()
        .to_string();
    assert!(err.contains("net_bogusdriver0"), "{err}");
}

#[test]
fn a_port_config_beyond_the_device_limits_is_refused_clearly() {
    let eal = eal();
    let pool =
        Arc::new(Mempool::new(eal, "limits_test_pool", 511, 0, 2048, SocketId::ANY).unwrap());
    let id = Port::find(eal, "net_ring1").unwrap();
    let config = PortConfig {
        rx_queues: 200,
        ..Default::default()
    };
    let err = Port::start(eal, id, "net_ring1", &config, &pool)
        .err()
        .expect("200 rx queues exceed net_ring's limit")
        .to_string();
    assert!(err.contains("rx queues") && err.contains("200"), "{err}");
}

#[test]
fn queues_keep_their_port_open_and_the_port_closes_after_the_last() {
    let eal = eal();
    let pool =
        Arc::new(Mempool::new(eal, "owner_test_pool", 1023, 0, 2048, SocketId::ANY).unwrap());
    let id = Port::find(eal, "net_null1").unwrap();
    let config = PortConfig {
        rx_queues: 2,
        tx_queues: 2,
        ..PortConfig::default()
    };
    let mut port = Port::start(eal, id, "net_null1", &config, &pool).unwrap();
    let mut rxq = port.take_rx_queue(RxQueueId(1)).unwrap();
    let mut txq = port.take_tx_queue(TxQueueId(0)).unwrap();
    assert_eq!(
        (rxq.port(), rxq.id(), txq.id()),
        (id, RxQueueId(1), TxQueueId(0))
    );

    let again = port.take_rx_queue(RxQueueId(1)).err().unwrap().to_string();
    assert!(again.contains("already handed out"), "{again}");
    let beyond = port.take_tx_queue(TxQueueId(2)).err().unwrap().to_string();
    assert!(beyond.contains("no tx queue 2"), "{beyond}");
    let twice = Port::start(eal, id, "net_null1", &config, &pool)
        .err()
        .expect("a started port cannot be started a second time")
        .to_string();
    assert!(twice.contains("already started"), "{twice}");

    // The owner goes first; the queues still work, because they hold the port open.
    drop(port);
    let mut batch = MbufBatch::new();
    assert!(rxq.rx_burst(&mut batch) > 0, "net_null1 still receives");
    assert_eq!(txq.tx_burst(&mut batch).1, 0, "and still transmits");
    assert!(
        Port::find(eal, "net_null1").is_ok(),
        "not closed under its queues"
    );

    // The last queue closes it: closing releases a vdev's port, so its name is gone.
    drop(rxq);
    assert!(
        Port::find(eal, "net_null1").is_ok(),
        "one queue still holds it"
    );
    drop(txq);
    assert!(
        Port::find(eal, "net_null1").is_err(),
        "closed with its last queue"
    );
    assert_eq!(
        pool.in_use(),
        0,
        "closing returned the RX descriptors' mbufs"
    );
}

#[test]
fn a_monitor_reads_a_port_the_workers_use() {
    let eal = eal();
    let pool =
        Arc::new(Mempool::new(eal, "monitor_test_pool", 1023, 0, 2048, SocketId::ANY).unwrap());
    let id = Port::find(eal, "net_null2").unwrap();
    let mut port = Port::start(eal, id, "net_null2", &PortConfig::default(), &pool).unwrap();
    assert!(!port.fast_free(), "net_null has no MBUF_FAST_FREE to give");
    let monitor = port.monitor();
    let mut rxq = port.take_rx_queue(RxQueueId(0)).unwrap();
    let mut batch = MbufBatch::new();
    let got = rxq.rx_burst(&mut batch);
    drop(batch);
    let seen = std::thread::spawn(move || monitor.stats().unwrap().rx_packets)
        .join()
        .unwrap();
    assert_eq!(seen, got as u64);
    drop((rxq, port));
    assert!(
        Port::find(eal, "net_null2").is_err(),
        "closed once the monitor and queue went"
    );
}

#[test]
fn the_port_watch_reads_counters_and_xstats_without_a_scrape() {
    use gateway::telemetry::port_watch::{PortWatch, WatchedPort};
    let eal = eal();
    let pool =
        Arc::new(Mempool::new(eal, "watch_test_pool", 1023, 0, 2048, SocketId::ANY).unwrap());
    let id = Port::find(eal, "net_null3").unwrap();
    let mut port = Port::start(eal, id, "net_null3", &PortConfig::default(), &pool).unwrap();
    let watch = PortWatch {
        ports: vec![WatchedPort::new("null", port.monitor(), 1)],
    };
    let watched = &watch.ports[0];
    assert!(
        watched
            .xstat_names
            .iter()
            .any(|name| name == "rx_good_packets"),
        "ethdev's generic xstats: {:?}",
        watched.xstat_names
    );
    assert_eq!(watched.info.driver, "net_null");
    assert_eq!(watched.info.device, "net_null3");
    let mut rxq = port.take_rx_queue(RxQueueId(0)).unwrap();
    let mut received = 0;
    for _ in 0..3 {
        let mut batch = MbufBatch::new();
        received += rxq.rx_burst(&mut batch) as u64;
        // What the control thread does every STATS_INTERVAL, with no metrics anywhere.
        watch.poll_stats();
    }
    let (rx_packets, rx_good) = watched.poll(|totals| {
        let good = watched
            .xstat_names
            .iter()
            .position(|name| name == "rx_good_packets");
        (
            totals.stats.rx_packets,
            good.map(|index| totals.xstats[index]),
        )
    });
    assert_eq!(rx_packets, received);
    assert_eq!(
        rx_good,
        Some(received),
        "xstats accumulate beside the stats"
    );
    watch.sample_links();
    assert!(watched.link().0, "net_null's link is up");
    assert_eq!(watched.link_flaps(), 0);
    drop((rxq, port, watch));
}

/// A frame: broadcast destination, a source MAC, then `ethertype_and_rest`.
fn frame(mbuf: &mut Mbuf, ethertype_and_rest: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0xff; 6];
    bytes.extend_from_slice(&[2, 0, 0, 0, 0, 7]);
    bytes.extend_from_slice(ethertype_and_rest);
    mbuf.set_len(bytes.len()).unwrap();
    mbuf.data_mut().copy_from_slice(&bytes);
    bytes
}

#[test]
fn vlan_tags_go_in_after_the_addresses_and_come_out_again() {
    let eal = eal();
    let pool = Mempool::new(eal, "vlan_tag_pool", 63, 0, 2048, SocketId::ANY).unwrap();
    let mut mbuf = Mbuf::alloc(&pool).unwrap();
    let untagged = frame(&mut mbuf, &[0x08, 0x00, 0x45, 0, 0, 20]);
    assert_eq!(
        mbuf.pop_vlan_tag(),
        None,
        "an untagged frame has no tag to take"
    );
    assert_eq!(mbuf.data(), &untagged[..]);

    assert!(mbuf.push_vlan_tag(0xa014));
    let mut tagged = untagged[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0xa0, 0x14]);
    tagged.extend_from_slice(&untagged[12..]);
    assert_eq!(
        mbuf.data(),
        &tagged[..],
        "TPID and TCI after the MAC addresses"
    );
    assert_eq!(mbuf.pop_vlan_tag(), Some(0xa014));
    assert_eq!(
        mbuf.data(),
        &untagged[..],
        "taking the tag out gives the frame back"
    );

    // A tag announced but cut short is not taken.
    let truncated = frame(&mut mbuf, &[0x81, 0x00, 0x00]);
    assert_eq!(mbuf.pop_vlan_tag(), None);
    assert_eq!(mbuf.data(), &truncated[..]);

    // Tags go in while the headroom lasts, and then refuse without touching the frame.
    let untagged = frame(&mut mbuf, &[0x08, 0x00]);
    let mut pushed = 0;
    while mbuf.push_vlan_tag(7) {
        pushed += 1;
        assert!(pushed <= 1024, "the headroom never ran out");
    }
    assert!(pushed >= 1, "a fresh mbuf has headroom for a tag");
    let full = mbuf.data().to_vec();
    assert!(!mbuf.push_vlan_tag(7));
    assert_eq!(mbuf.data(), &full[..]);
    for _ in 0..pushed {
        assert_eq!(mbuf.pop_vlan_tag(), Some(7));
    }
    assert_eq!(mbuf.data(), &untagged[..]);
}

/// LAN and WAN ports, and VLAN 20 of the LAN as interface 2.
fn trunk_layout() -> gateway::dataplane::port_layout::PortLayout {
    let config = gateway::config::GatewayConfig::from_text(
        std::path::Path::new("vlans.toml"),
        r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[[interfaces]]
name = "guest"
parent = "lan"
vlan = 20
address = "192.168.20.1/24"
[[routes]]
destination = "0.0.0.0/0"
via = "10.0.0.2"
"#,
    )
    .unwrap();
    gateway::dataplane::port_layout::PortLayout::new(&config)
}

#[test]
fn a_port_with_vlans_hands_each_tagged_frame_to_its_subinterface_untagged() {
    use pipeline::DropReason;
    let layout = trunk_layout();
    let eal = eal();
    let pool = Mempool::new(eal, "vlan_layout_pool", 63, 0, 2048, SocketId::ANY).unwrap();
    let mut mbuf = Mbuf::alloc(&pool).unwrap();
    let ipv4 = [0x08, 0x00, 0x45, 0];
    let untagged = frame(&mut mbuf, &ipv4);
    let port = |ingress: Result<pipeline::Ingress, DropReason>| ingress.map(|i| i.port);
    assert_eq!(
        port(layout.ingress(0, &mut mbuf)),
        Ok(0),
        "untagged: the parent"
    );
    assert!(mbuf.push_vlan_tag(20));
    assert_eq!(port(layout.ingress(0, &mut mbuf)), Ok(2), "VLAN 20: guest");
    assert_eq!(mbuf.data(), &untagged[..], "the pipeline gets it untagged");
    assert!(mbuf.push_vlan_tag(0x6000 | 20));
    assert_eq!(
        port(layout.ingress(0, &mut mbuf)),
        Ok(2),
        "priority bits aside"
    );
    assert!(mbuf.push_vlan_tag(21));
    assert_eq!(
        port(layout.ingress(0, &mut mbuf)),
        Err(DropReason::VlanTagged)
    );
    // The WAN port has no VLANs: a tagged frame there stays tagged for the pipeline to refuse.
    let untagged = frame(&mut mbuf, &ipv4);
    assert!(mbuf.push_vlan_tag(20));
    let tagged = mbuf.data().to_vec();
    assert_eq!(port(layout.ingress(1, &mut mbuf)), Ok(1));
    assert_eq!(mbuf.data(), &tagged[..]);
    assert_ne!(&tagged[..], &untagged[..]);
}

/// Double-tagged frames on a trunk (VLAN hopping): whether the NIC stripped the outer tag or
/// left it (or put it back, as af_packet does), a second tag is refused, never delivered
/// into the inner tag's VLAN or, with an inner tag 0, the native LAN.
#[test]
fn double_tagged_frames_are_refused_whoever_stripped_the_outer_tag() {
    use pipeline::DropReason;
    let pool = Mempool::new(eal(), "vlan_double_pool", 63, 0, 2048, SocketId::ANY).unwrap();
    let layout = trunk_layout();
    let mut mbuf = Mbuf::alloc(&pool).unwrap();
    let ipv4 = [0x08, 0x00, 0x45, 0];
    let port = |ingress: Result<pipeline::Ingress, DropReason>| ingress.map(|i| i.port);
    for inner in [20, 0, 21] {
        for outer in [20, 0, 21] {
            // The outer tag left in the frame.
            frame(&mut mbuf, &ipv4);
            assert!(mbuf.push_vlan_tag(inner) && mbuf.push_vlan_tag(outer));
            assert_eq!(
                port(layout.ingress(0, &mut mbuf)),
                Err(DropReason::VlanDoubleTagged),
                "outer {outer} / inner {inner} in the frame"
            );
            // The outer tag stripped by the NIC (an X550 with VLAN stripping).
            let mut stripped = Mbuf::alloc(&pool).unwrap();
            frame(&mut stripped, &ipv4);
            assert!(stripped.push_vlan_tag(inner));
            stripped.mark_rx_stripped_vlan(outer);
            // The same id twice is indistinguishable from a PMD that put the stripped tag
            // back: the frame stays in that VLAN (or is refused there).
            let expected = if inner == outer {
                layout.interface(0, Some(outer))
            } else {
                Err(DropReason::VlanDoubleTagged)
            };
            assert_eq!(
                port(layout.ingress(0, &mut stripped)),
                expected,
                "outer {outer} stripped / inner {inner} in the frame"
            );
        }
    }
    // Stripped and put back (af_packet without stripping): one tag, one VLAN.
    frame(&mut mbuf, &ipv4);
    assert!(mbuf.push_vlan_tag(20));
    mbuf.mark_rx_stripped_vlan(20);
    assert_eq!(port(layout.ingress(0, &mut mbuf)), Ok(2));
    let mut stripped_only = Mbuf::alloc(&pool).unwrap();
    let untagged = frame(&mut stripped_only, &ipv4);
    stripped_only.mark_rx_stripped_vlan(20);
    assert_eq!(port(layout.ingress(0, &mut stripped_only)), Ok(2));
    assert_eq!(stripped_only.data(), &untagged[..]);
}

use proptest::strategy::Strategy;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

    /// Any bytes on the trunk, tagged or not, long or cut short: the frame goes to the
    /// interface its tag names with the tag taken out, stays as it was for the port's own
    /// interface, or is refused as `vlan_tagged` (an id no subinterface has) or
    /// `vlan_double_tagged` (another tag behind the first); never a panic. The model is the
    /// bytes alone.
    #[test]
    fn any_frame_on_a_trunk_is_mapped_as_its_bytes_say(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        // A third of the tags name VLAN 20, a third are priority tags (id 0), with any
        // priority bits; the others any id.
        tci in proptest::option::of(proptest::prop_oneof![
            proptest::prelude::any::<u16>(),
            (0_u16..16).prop_map(|priority| (priority << 12) | 20),
            (0_u16..16).prop_map(|priority| priority << 12),
        ]),
    ) {
        use std::sync::OnceLock;
        use pipeline::DropReason;
        static LAYOUT: OnceLock<gateway::dataplane::port_layout::PortLayout> = OnceLock::new();
        static POOL: OnceLock<Mempool> = OnceLock::new();
        let layout = LAYOUT.get_or_init(trunk_layout);
        let pool = POOL.get_or_init(|| {
            Mempool::new(eal(), "vlan_fuzz_pool", 63, 0, 2048, SocketId::ANY).unwrap()
        });
        let mut mbuf = Mbuf::alloc(pool).unwrap();
        mbuf.set_len(bytes.len()).unwrap();
        mbuf.data_mut().copy_from_slice(&bytes);
        if let Some(tci) = tci {
            // Frames without their addresses take no tag.
            proptest::prop_assert_eq!(mbuf.push_vlan_tag(tci), bytes.len() >= 12);
        }
        let frame = mbuf.data().to_vec();
        let tagged = frame.len() >= 18 && frame[12..14] == [0x81, 0x00];
        let untagged: Vec<u8> = frame[..frame.len().min(12)]
            .iter()
            .chain(frame.get(16..).unwrap_or(&[]))
            .copied()
            .collect();
        // A tag of any kind behind the one taken: double-tagged, whatever the ids.
        let double = untagged.len() >= 14
            && [[0x81, 0x00], [0x88, 0xa8], [0x91, 0x00]].contains(&[untagged[12], untagged[13]]);
        let result = layout.ingress(0, &mut mbuf).map(|ingress| ingress.port);
        if tagged && double {
            proptest::prop_assert_eq!(result, Err(DropReason::VlanDoubleTagged));
        } else if !tagged {
            proptest::prop_assert_eq!(result, Ok(0));
            proptest::prop_assert_eq!(mbuf.data(), &frame[..]);
        } else if u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff == 20 {
            proptest::prop_assert_eq!(result, Ok(2));
            proptest::prop_assert_eq!(mbuf.data(), &untagged[..]);
        } else if u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff == 0 {
            // A priority tag: the LAN's own frame.
            proptest::prop_assert_eq!(result, Ok(0));
            proptest::prop_assert_eq!(mbuf.data(), &untagged[..]);
        } else {
            proptest::prop_assert_eq!(result, Err(DropReason::VlanTagged));
        }
    }
}

/// LAN and a PPPoE uplink on VLAN 7 of the WAN port (interface 2), session 0x1234 up with
/// IPv4 and IPv6.
fn pppoe_layout() -> gateway::dataplane::port_layout::PortLayout {
    let config = gateway::config::GatewayConfig::from_text(
        std::path::Path::new("pppoe.toml"),
        r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[[interfaces]]
name = "isp"
parent = "wan"
vlan = 7
address = "pppoe"
[interfaces.pppoe]
username = "u"
password = "p"
"#,
    )
    .unwrap();
    let layout = gateway::dataplane::port_layout::PortLayout::new(&config);
    // The access concentrator's MAC is the source `frame` writes.
    layout.sessions().set(
        2,
        gateway::dataplane::pppoe_frames::SessionState::new(Some(PPPOE_SESSION), true)
            .with_ipv6(true)
            .from_access_concentrator([2, 0, 0, 0, 0, 7]),
    );
    layout
}

const PPPOE_SESSION: u16 = 0x1234;

/// A PPPoE session frame: EtherType, header (version/type, code, session, length), PPP
/// protocol, payload, then `padding` bytes of Ethernet padding.
fn pppoe_frame(
    session: u16,
    length: u16,
    protocol: u16,
    payload: &[u8],
    padding: usize,
) -> Vec<u8> {
    let mut bytes = vec![0x88, 0x64, 0x11, 0x00];
    bytes.extend_from_slice(&session.to_be_bytes());
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(&protocol.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes.extend(std::iter::repeat_n(0, padding));
    bytes
}

#[test]
fn a_pppoe_session_frame_comes_off_as_ipv4_and_goes_back_on() {
    use gateway::dataplane::pppoe_frames::{encapsulate, SessionState};
    use pipeline::DropReason;
    let layout = pppoe_layout();
    let eal = eal();
    let pool = Mempool::new(eal, "pppoe_pool", 63, 0, 2048, SocketId::ANY).unwrap();
    let mut mbuf = Mbuf::alloc(&pool).unwrap();
    let datagram = [
        0x45, 0, 0, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    ];
    let mut ipv4 = vec![0x08, 0x00];
    ipv4.extend_from_slice(&datagram);
    let port = |ingress: Result<pipeline::Ingress, DropReason>| ingress.map(|i| i.port);
    let receive = |bytes: &[u8], mbuf: &mut Mbuf| {
        let sent = frame(mbuf, bytes);
        assert!(mbuf.push_vlan_tag(7));
        let result = port(layout.ingress(1, mbuf));
        (result, sent)
    };

    // The session's IPv4, padded to Ethernet's minimum: plain IPv4, padding cut.
    let (result, _) = receive(
        &pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 18),
        &mut mbuf,
    );
    assert_eq!(result, Ok(2));
    let mut plain = mbuf.data()[..12].to_vec();
    plain.extend_from_slice(&ipv4);
    assert_eq!(mbuf.data(), &plain[..]);
    // And back: the same session frame, without the padding, to the access concentrator;
    // not while its MAC is unknown (a session changing).
    let up = SessionState::new(Some(PPPOE_SESSION), true);
    let before = mbuf.data().to_vec();
    assert_eq!(encapsulate(up, &mut mbuf), Err(DropReason::PppoeDown));
    assert_eq!(mbuf.data(), &before[..]);
    let ac = [2, 0, 0, 0, 0, 0x0b];
    assert_eq!(
        encapsulate(up.from_access_concentrator(ac), &mut mbuf),
        Ok(())
    );
    let mut framed = ac.to_vec();
    framed.extend_from_slice(&[2, 0, 0, 0, 0, 7]);
    framed.extend_from_slice(&pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 0));
    assert_eq!(mbuf.data(), &framed[..]);

    // LCP of the session and discovery pass as they are, for the control thread.
    let (result, sent) = receive(
        &pppoe_frame(PPPOE_SESSION, 6, 0xc021, &[9, 1, 0, 4], 0),
        &mut mbuf,
    );
    assert_eq!((result, mbuf.data()), (Ok(2), &sent[..]));
    let (result, sent) = receive(&[0x88, 0x63, 0x11, 0x07, 0, 0, 0, 0], &mut mbuf);
    assert_eq!((result, mbuf.data()), (Ok(2), &sent[..]));
    // Even another session's: the client may not have published a new session yet.
    let (result, sent) = receive(&pppoe_frame(9, 6, 0xc021, &[1, 1, 0, 4], 0), &mut mbuf);
    assert_eq!((result, mbuf.data()), (Ok(2), &sent[..]));

    // Counted drops: a length past the frame, one too short for the protocol, a bad
    // version, another session, IPv4 before IPCP is up.
    let refused = [
        (
            pppoe_frame(PPPOE_SESSION, 60, 0x0021, &datagram, 0),
            DropReason::PppoeMalformed,
        ),
        (
            pppoe_frame(PPPOE_SESSION, 1, 0x0021, &datagram, 0),
            DropReason::PppoeMalformed,
        ),
        (
            {
                let mut bad = pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 0);
                bad[2] = 0x21;
                bad
            },
            DropReason::PppoeMalformed,
        ),
        (vec![0x88, 0x64, 0x11], DropReason::PppoeMalformed),
        (
            pppoe_frame(PPPOE_SESSION + 1, 22, 0x0021, &datagram, 0),
            DropReason::PppoeSession,
        ),
    ];
    for (bytes, reason) in refused {
        assert_eq!(receive(&bytes, &mut mbuf).0, Err(reason), "{bytes:02x?}");
    }
    // The link carries PPPoE alone: plain IPv4 and ARP on it are refused.
    assert_eq!(receive(&ipv4, &mut mbuf).0, Err(DropReason::PppoeNotPppoe));
    let arp = [0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1];
    assert_eq!(receive(&arp, &mut mbuf).0, Err(DropReason::PppoeNotPppoe));
    // The session's IPv4 from another MAC than the access concentrator's: another host on
    // the segment, refused.
    frame(
        &mut mbuf,
        &pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 0),
    );
    mbuf.data_mut()[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 8]);
    assert!(mbuf.push_vlan_tag(7));
    assert_eq!(
        port(layout.ingress(1, &mut mbuf)),
        Err(DropReason::PppoeForeignSource)
    );
    layout
        .sessions()
        .set(2, SessionState::new(Some(PPPOE_SESSION), false));
    let (result, _) = receive(
        &pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 0),
        &mut mbuf,
    );
    assert_eq!(result, Err(DropReason::PppoeDown));
    layout.sessions().set(2, SessionState::DOWN);
    let (result, _) = receive(
        &pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 0),
        &mut mbuf,
    );
    assert_eq!(result, Err(DropReason::PppoeSession));
    // IPv6 comes off and goes on the same way once IPv6CP is open, and goes to the access
    // concentrator whatever Ethernet destination it had (a twin's multicast).
    let datagram6 = {
        let mut bytes = vec![0x60, 0, 0, 0, 0, 0, 59, 64];
        bytes.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        bytes.extend_from_slice(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        bytes
    };
    let from_ac = |state: SessionState| state.from_access_concentrator([2, 0, 0, 0, 0, 7]);
    layout.sessions().set(2, from_ac(up.with_ipv6(true)));
    let (result, _) = receive(
        &pppoe_frame(PPPOE_SESSION, 42, 0x0057, &datagram6, 0),
        &mut mbuf,
    );
    assert_eq!(result, Ok(2));
    assert_eq!(mbuf.data()[12..14], [0x86, 0xdd]);
    assert_eq!(mbuf.data()[14..], datagram6[..]);
    let ac = [2, 0, 0, 0, 0, 0x0a];
    let with_ipv6 = SessionState::new(Some(PPPOE_SESSION), true)
        .with_ipv6(true)
        .from_access_concentrator(ac);
    mbuf.data_mut()[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 2]);
    assert_eq!(encapsulate(with_ipv6, &mut mbuf), Ok(()));
    let mut framed = ac.to_vec();
    framed.extend_from_slice(&[2, 0, 0, 0, 0, 7]);
    framed.extend_from_slice(&pppoe_frame(PPPOE_SESSION, 42, 0x0057, &datagram6, 0));
    assert_eq!(mbuf.data(), &framed[..]);
    // Not before IPv6CP is open, either way; and a twin's ARP never goes out on the link.
    let mut ipv6 = vec![0x86, 0xdd];
    ipv6.extend_from_slice(&datagram6);
    frame(&mut mbuf, &ipv6);
    assert_eq!(encapsulate(up, &mut mbuf), Err(DropReason::PppoeDown));
    frame(&mut mbuf, &arp);
    assert_eq!(
        encapsulate(with_ipv6, &mut mbuf),
        Err(DropReason::PppoeNotPppoe)
    );
    layout.sessions().set(2, from_ac(up));
    let (result, _) = receive(
        &pppoe_frame(PPPOE_SESSION, 42, 0x0057, &datagram6, 0),
        &mut mbuf,
    );
    assert_eq!(result, Err(DropReason::PppoeDown));
    layout.sessions().set(2, SessionState::DOWN);

    // Nothing leaves without a session, and the WAN port's own frames are not PPPoE's.
    frame(&mut mbuf, &ipv4);
    assert_eq!(
        encapsulate(SessionState::DOWN, &mut mbuf),
        Err(DropReason::PppoeDown)
    );
    let untagged = frame(
        &mut mbuf,
        &pppoe_frame(PPPOE_SESSION, 22, 0x0021, &datagram, 0),
    );
    assert_eq!(port(layout.ingress(1, &mut mbuf)), Ok(1));
    assert_eq!(mbuf.data(), &untagged[..]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

    /// Any bytes after the addresses of a frame on the PPPoE VLAN: taken off as the session
    /// header says, passed on (discovery, PPP control), or refused under a PPPoE reason
    /// (anything but PPPoE as `pppoe_not_pppoe`); never a panic, and what comes off as IPv4 is
    /// exactly the payload the header's length gives.
    #[test]
    fn any_frame_on_a_pppoe_link_is_framed_as_its_bytes_say(
        rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
        session_frame in proptest::prelude::any::<bool>(),
        our_session in proptest::prelude::any::<bool>(),
        length in 0_u16..48,
    ) {
        use std::sync::OnceLock;
        use pipeline::DropReason;
        static LAYOUT: OnceLock<gateway::dataplane::port_layout::PortLayout> = OnceLock::new();
        static POOL: OnceLock<Mempool> = OnceLock::new();
        let layout = LAYOUT.get_or_init(pppoe_layout);
        let pool = POOL.get_or_init(|| {
            Mempool::new(eal(), "pppoe_fuzz_pool", 63, 0, 2048, SocketId::ANY).unwrap()
        });
        let mut bytes = rest.clone();
        if session_frame && bytes.len() >= 8 {
            // Mostly well-formed headers, so the checks past the first are reached.
            bytes[..4].copy_from_slice(&[0x88, 0x64, 0x11, 0x00]);
            let session = if our_session { PPPOE_SESSION } else { 7 };
            bytes[4..6].copy_from_slice(&session.to_be_bytes());
            bytes[6..8].copy_from_slice(&length.to_be_bytes());
        }
        let mut mbuf = Mbuf::alloc(pool).unwrap();
        let sent = frame(&mut mbuf, &bytes);
        proptest::prop_assert!(mbuf.push_vlan_tag(7));
        let result = layout.ingress(1, &mut mbuf).map(|ingress| ingress.port);
        let is_session = bytes.len() >= 2 && bytes[..2] == [0x88, 0x64];
        let is_discovery = bytes.len() >= 2 && bytes[..2] == [0x88, 0x63];
        // A second tag (802.1Q, 802.1ad) behind the PPPoE VLAN's: refused before PPPoE.
        let double_tagged =
            bytes.len() >= 2 && (bytes[..2] == [0x81, 0x00] || bytes[..2] == [0x88, 0xa8]);
        match result {
            Err(DropReason::VlanDoubleTagged) => proptest::prop_assert!(double_tagged),
            // A tag needs two bytes after it to be taken for one.
            Ok(1) if bytes.len() < 2 => {}
            // The link carries PPPoE alone.
            Err(DropReason::PppoeNotPppoe) => {
                proptest::prop_assert!(!is_session && !is_discovery);
            }
            Ok(port) => {
                proptest::prop_assert!(is_session || is_discovery);
                proptest::prop_assert_eq!(port, 2);
                let protocol = bytes.get(8..10);
                let inner = match protocol {
                    Some([0x00, 0x21]) => Some([0x08, 0x00]),
                    Some([0x00, 0x57]) => Some([0x86, 0xdd]),
                    _ => None,
                };
                if let (true, Some(inner)) = (is_session, inner) {
                    let length = usize::from(u16::from_be_bytes([bytes[6], bytes[7]]));
                    let mut plain = sent[..12].to_vec();
                    plain.extend_from_slice(&inner);
                    plain.extend_from_slice(&bytes[10..8 + length]);
                    proptest::prop_assert_eq!(mbuf.data(), &plain[..]);
                } else {
                    proptest::prop_assert_eq!(mbuf.data(), &sent[..]);
                }
            }
            Err(reason) => {
                proptest::prop_assert!(is_session);
                proptest::prop_assert!(matches!(
                    reason,
                    DropReason::PppoeMalformed | DropReason::PppoeSession
                ));
            }
        }
    }
}
