/*
 * Real, linkable functions for DPDK's static-inline fast path, so Rust can call them.
 * Each one is a one-line forward; the compiler inlines DPDK's body into it.
 */
#ifndef GATEWAY_DPDK_SHIM_H
#define GATEWAY_DPDK_SHIM_H

#include <stdint.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

/*
 * The rte_mbuf layout the Rust side reads and writes directly (gateway/src/dpdk/mbuf.rs), as
 * DPDK 22.11 lays it out on x86_64. shim.c checks these against the C header with
 * _Static_assert; mbuf.rs checks them against bindgen's struct with const assertions. A DPDK
 * whose layout differs fails the build on one side or the other instead of corrupting packets.
 */
#define SHIM_MBUF_SIZE 128
#define SHIM_MBUF_BUF_ADDR_OFFSET 0
#define SHIM_MBUF_BUF_ADDR_SIZE 8
#define SHIM_MBUF_DATA_OFF_OFFSET 16
#define SHIM_MBUF_DATA_OFF_SIZE 2
#define SHIM_MBUF_NB_SEGS_OFFSET 20
#define SHIM_MBUF_NB_SEGS_SIZE 2
#define SHIM_MBUF_PORT_OFFSET 22
#define SHIM_MBUF_PORT_SIZE 2
#define SHIM_MBUF_OL_FLAGS_OFFSET 24
#define SHIM_MBUF_OL_FLAGS_SIZE 8
#define SHIM_MBUF_PKT_LEN_OFFSET 36
#define SHIM_MBUF_PKT_LEN_SIZE 4
#define SHIM_MBUF_DATA_LEN_OFFSET 40
#define SHIM_MBUF_DATA_LEN_SIZE 2
#define SHIM_MBUF_VLAN_TCI_OFFSET 42
#define SHIM_MBUF_VLAN_TCI_SIZE 2
#define SHIM_MBUF_BUF_LEN_OFFSET 54
#define SHIM_MBUF_BUF_LEN_SIZE 2

uint16_t shim_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t shim_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

struct rte_mbuf *shim_rte_pktmbuf_alloc(struct rte_mempool *mp);
int shim_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count);
void shim_rte_pktmbuf_free(struct rte_mbuf *m);
void *shim_rte_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t shim_rte_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t shim_rte_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t shim_rte_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t shim_rte_pktmbuf_tailroom(const struct rte_mbuf *m);
/* Sets data_len and pkt_len of a single-segment mbuf; fails (-1) past the data room. */
int shim_rte_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
uint32_t shim_rte_mbuf_rss_hash(const struct rte_mbuf *m);
uint16_t shim_rte_mbuf_port(const struct rte_mbuf *m);
void shim_rte_mbuf_set_port(struct rte_mbuf *m, uint16_t port);
uint16_t shim_rte_mbuf_nb_segs(const struct rte_mbuf *m);
/*
 * 1 when `m` may be transmitted on a queue with RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE whose
 * mbufs all come from `pool`: from that pool, reference count 1, direct (no indirect or
 * external buffer), one segment. The safe layer checks it in debug builds.
 */
int shim_rte_mbuf_fast_free_ok(const struct rte_mbuf *m, const struct rte_mempool *pool);
unsigned int shim_rte_mempool_size(const struct rte_mempool *mp);

unsigned int shim_rte_ring_sp_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n, unsigned int *free_space);
unsigned int shim_rte_ring_sc_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n, unsigned int *available);
unsigned int shim_rte_ring_count(const struct rte_ring *r);

unsigned int shim_rte_lcore_id(void);
int shim_rte_errno(void);
uint64_t shim_rte_rdtsc(void);
void shim_rte_prefetch0(const void *p);

#endif
