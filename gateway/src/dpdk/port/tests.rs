use super::*;

#[test]
fn rx_queues_ask_for_drop_enable_and_keep_the_drivers_defaults() {
    let mut info = dpdk_sys::rte_eth_dev_info::default();
    info.default_rxconf.rx_free_thresh = 32;
    info.default_rxconf.rx_thresh.pthresh = 8;
    let rxconf = rx_queue_conf(&info);
    assert_eq!(rxconf.rx_drop_en, 1);
    assert_eq!(rxconf.rx_free_thresh, 32);
    assert_eq!(rxconf.rx_thresh.pthresh, 8);
}

#[test]
fn counters_are_zipped_field_by_field() {
    let mut total = PortStats::default();
    let mut step = PortStats {
        rx_packets: 3,
        rx_missed: 2,
        ..Default::default()
    };
    step.rx_queue_drops[1] = 5;
    step.tx_queue_packets[15] = 7;
    total.zip_counters_mut(&step, |mine, theirs| *mine += theirs);
    total.zip_counters_mut(&step, |mine, theirs| *mine += theirs);
    assert_eq!((total.rx_packets, total.rx_missed), (6, 4));
    assert_eq!(
        (total.rx_queue_drops[1], total.tx_queue_packets[15]),
        (10, 14)
    );
    assert_eq!(total.tx_bytes, 0);
}
