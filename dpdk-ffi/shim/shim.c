#include <rte_config.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_pause.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>

#include "shim.h"

uint16_t border_shim_rx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t border_shim_tx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *border_shim_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int border_shim_pktmbuf_alloc_bulk(struct rte_mempool *mp,
                                   struct rte_mbuf **mbufs, unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void border_shim_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

char *border_shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_prepend(m, len);
}

char *border_shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

char *border_shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
}

int border_shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

int border_shim_pktmbuf_linearize(struct rte_mbuf *m)
{
	return rte_pktmbuf_linearize(m);
}

void *border_shim_mtod(const struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

uint16_t border_shim_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t border_shim_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

uint16_t border_shim_headroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_headroom(m);
}

uint16_t border_shim_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

unsigned int border_shim_lcore_id(void)
{
	return rte_lcore_id();
}

uint64_t border_shim_get_tsc_cycles(void)
{
	return rte_get_tsc_cycles();
}

uint64_t border_shim_get_tsc_hz(void)
{
	return rte_get_tsc_hz();
}

/* rte_errno is a thread-local; Rust cannot name a C TLS variable portably. */
int border_shim_errno(void)
{
	return rte_errno;
}

void border_shim_set_errno(int value)
{
	rte_errno = value;
}

void border_shim_pause(void)
{
	rte_pause();
}

uint64_t border_shim_rss_hf_ip_tcp_udp(void)
{
	return RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP;
}

void border_shim_mbuf_layout(struct border_shim_mbuf_layout *out)
{
	out->size = sizeof(struct rte_mbuf);
	out->align = _Alignof(struct rte_mbuf);
	out->buf_addr = offsetof(struct rte_mbuf, buf_addr);
	out->data_off = offsetof(struct rte_mbuf, data_off);
	out->refcnt = offsetof(struct rte_mbuf, refcnt);
	out->nb_segs = offsetof(struct rte_mbuf, nb_segs);
	out->port = offsetof(struct rte_mbuf, port);
	out->ol_flags = offsetof(struct rte_mbuf, ol_flags);
	out->packet_type = offsetof(struct rte_mbuf, packet_type);
	out->pkt_len = offsetof(struct rte_mbuf, pkt_len);
	out->data_len = offsetof(struct rte_mbuf, data_len);
	out->vlan_tci = offsetof(struct rte_mbuf, vlan_tci);
	out->hash = offsetof(struct rte_mbuf, hash);
	out->buf_len = offsetof(struct rte_mbuf, buf_len);
	out->pool = offsetof(struct rte_mbuf, pool);
	out->next = offsetof(struct rte_mbuf, next);
}

void border_shim_sizes(struct border_shim_sizes *out)
{
	out->rte_eth_conf = sizeof(struct rte_eth_conf);
	out->rte_eth_dev_info = sizeof(struct rte_eth_dev_info);
	out->rte_eth_stats = sizeof(struct rte_eth_stats);
	out->rte_eth_link = sizeof(struct rte_eth_link);
	out->rte_ether_addr = sizeof(struct rte_ether_addr);
	out->rte_eth_rxconf = sizeof(struct rte_eth_rxconf);
	out->rte_eth_txconf = sizeof(struct rte_eth_txconf);
}
