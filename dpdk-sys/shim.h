/*
 * Real, linkable functions for DPDK's static-inline fast path, so Rust can call them.
 * Each one is a one-line forward; the compiler inlines DPDK's body into it.
 */
#ifndef GATEWAY_DPDK_SHIM_H
#define GATEWAY_DPDK_SHIM_H

#include <stdint.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

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

unsigned int shim_rte_ring_sp_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n, unsigned int *free_space);
unsigned int shim_rte_ring_sc_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n, unsigned int *available);
unsigned int shim_rte_ring_count(const struct rte_ring *r);

unsigned int shim_rte_lcore_id(void);
int shim_rte_errno(void);
uint64_t shim_rte_rdtsc(void);
void shim_rte_prefetch0(const void *p);

#endif
