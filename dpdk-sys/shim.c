#include <rte_ethdev.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_prefetch.h>
#include <stddef.h>
#include "shim.h"

#define SHIM_CHECK_MBUF_FIELD(field, FIELD)                                                  \
	_Static_assert(offsetof(struct rte_mbuf, field) == SHIM_MBUF_##FIELD##_OFFSET,       \
		       "rte_mbuf." #field " moved: gateway/src/dpdk/mbuf.rs reads it directly"); \
	_Static_assert(sizeof(((struct rte_mbuf *)0)->field) == SHIM_MBUF_##FIELD##_SIZE,    \
		       "rte_mbuf." #field " changed size: gateway/src/dpdk/mbuf.rs reads it directly")

_Static_assert(sizeof(struct rte_mbuf) == SHIM_MBUF_SIZE, "rte_mbuf changed size");
SHIM_CHECK_MBUF_FIELD(buf_addr, BUF_ADDR);
SHIM_CHECK_MBUF_FIELD(data_off, DATA_OFF);
SHIM_CHECK_MBUF_FIELD(nb_segs, NB_SEGS);
SHIM_CHECK_MBUF_FIELD(port, PORT);
SHIM_CHECK_MBUF_FIELD(ol_flags, OL_FLAGS);
SHIM_CHECK_MBUF_FIELD(pkt_len, PKT_LEN);
SHIM_CHECK_MBUF_FIELD(data_len, DATA_LEN);
SHIM_CHECK_MBUF_FIELD(vlan_tci, VLAN_TCI);
SHIM_CHECK_MBUF_FIELD(buf_len, BUF_LEN);

uint16_t shim_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t shim_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *shim_rte_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int shim_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void shim_rte_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void *shim_rte_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
uint16_t shim_rte_pktmbuf_data_len(const struct rte_mbuf *m) { return rte_pktmbuf_data_len(m); }
uint32_t shim_rte_pktmbuf_pkt_len(const struct rte_mbuf *m) { return rte_pktmbuf_pkt_len(m); }
uint16_t shim_rte_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t shim_rte_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }

int shim_rte_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	if (m->nb_segs != 1 || (uint32_t)m->data_off + len > m->buf_len)
		return -1;
	m->data_len = len;
	m->pkt_len = len;
	return 0;
}

uint32_t shim_rte_mbuf_rss_hash(const struct rte_mbuf *m) { return m->hash.rss; }
uint16_t shim_rte_mbuf_port(const struct rte_mbuf *m) { return m->port; }
void shim_rte_mbuf_set_port(struct rte_mbuf *m, uint16_t port) { m->port = port; }
uint16_t shim_rte_mbuf_nb_segs(const struct rte_mbuf *m) { return m->nb_segs; }

int shim_rte_mbuf_fast_free_ok(const struct rte_mbuf *m, const struct rte_mempool *pool)
{
	return m->pool == pool && rte_mbuf_refcnt_read(m) == 1 && RTE_MBUF_DIRECT(m) &&
	       m->nb_segs == 1 && m->next == NULL;
}

unsigned int shim_rte_mempool_size(const struct rte_mempool *mp) { return mp->size; }

unsigned int shim_rte_ring_sp_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n, unsigned int *free_space)
{
	return rte_ring_sp_enqueue_burst(r, obj_table, n, free_space);
}

unsigned int shim_rte_ring_sc_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n, unsigned int *available)
{
	return rte_ring_sc_dequeue_burst(r, obj_table, n, available);
}

unsigned int shim_rte_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }
unsigned int shim_rte_lcore_id(void) { return rte_lcore_id(); }
int shim_rte_errno(void) { return rte_errno; }
uint64_t shim_rte_rdtsc(void) { return rte_rdtsc(); }
void shim_rte_prefetch0(const void *p) { rte_prefetch0(p); }
