//! The queues' bursts: rx_burst and tx_burst on one owned queue.

use super::*;

impl RxQueue {
    pub fn port(&self) -> PortId {
        PortId(self.port)
    }

    pub fn id(&self) -> RxQueueId {
        RxQueueId(self.queue)
    }

    /// Receives into the free part of `batch`; returns how many arrived.
    #[inline]
    pub fn rx_burst(&mut self, batch: &mut MbufBatch) -> usize {
        let room = BURST_SIZE - batch.len;
        // SAFETY: the port is started and stays so while this queue lives (it holds the
        // port); &mut self on the one RxQueue of this index makes us its only poller; the
        // driver writes `got` owned mbuf pointers into the batch's free slots.
        let got = unsafe {
            dpdk_sys::shim_rte_eth_rx_burst(
                self.port,
                self.queue,
                batch.ptrs[batch.len..].as_mut_ptr(),
                room as u16,
            )
        } as usize;
        batch.len += got;
        got
    }
}

impl TxQueue {
    pub fn port(&self) -> PortId {
        PortId(self.port)
    }

    /// Whether the NIC inserts 802.1Q tags for this queue's mbufs that ask
    /// ([`Mbuf::request_tx_vlan`](super::Mbuf::request_tx_vlan)).
    pub fn vlan_insert(&self) -> bool {
        self.vlan_insert
    }

    pub fn id(&self) -> TxQueueId {
        TxQueueId(self.queue)
    }

    /// Sends the batch. What the driver accepted now belongs to it and is never touched
    /// again; what it refused is freed here. Returns (sent, dropped); the batch ends empty.
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut MbufBatch) -> (usize, usize) {
        if batch.is_empty() {
            return (0, 0);
        }
        #[cfg(debug_assertions)]
        self.check_fast_free(batch);
        // SAFETY: the port is started and stays so while this queue lives; &mut self on the
        // one TxQueue of this index makes us its only user; the driver takes ownership of the
        // first `sent` mbufs.
        let sent = unsafe {
            dpdk_sys::shim_rte_eth_tx_burst(
                self.port,
                self.queue,
                batch.ptrs.as_mut_ptr(),
                batch.len as u16,
            )
        } as usize;
        batch.consume_front(sent);
        let dropped = batch.free_all();
        (sent, dropped)
    }

    /// A burst of nothing. Bonding in 802.3ad mode sends its pending LACPDUs from inside
    /// tx_burst, so a quiet link still needs calls.
    #[inline]
    pub fn tx_burst_idle(&mut self) {
        let mut none: [*mut dpdk_sys::rte_mbuf; 0] = [];
        // SAFETY: started port, this queue's only user, zero packets handed over.
        unsafe { dpdk_sys::shim_rte_eth_tx_burst(self.port, self.queue, none.as_mut_ptr(), 0) };
    }

    /// Debug builds check what release builds rely on: with MBUF_FAST_FREE, every mbuf sent is
    /// a direct, unshared, single-segment buffer of the port's one pool.
    #[cfg(debug_assertions)]
    fn check_fast_free(&self, batch: &MbufBatch) {
        if self._owner.fast_free.is_none() {
            return;
        }
        let pool = self._owner.pool.as_ptr();
        for &mbuf in &batch.ptrs[..batch.len] {
            // SAFETY: the batch owns these mbufs; the check only reads their headers.
            let ok = unsafe { dpdk_sys::shim_rte_mbuf_fast_free_ok(mbuf, pool) };
            debug_assert!(
                ok != 0,
                "an mbuf unfit for MBUF_FAST_FREE reached a TX queue"
            );
        }
    }
}
