/* Non-inline wrappers for DPDK's static-inline hot-path functions, so Rust
 * can call them through FFI. Kept tiny on purpose: each is one call. */
#ifndef BORDER_SHIM_H
#define BORDER_SHIM_H

#include <stddef.h>
#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

uint16_t border_shim_rx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t border_shim_tx_burst(uint16_t port_id, uint16_t queue_id,
                              struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

struct rte_mbuf *border_shim_pktmbuf_alloc(struct rte_mempool *mp);
int border_shim_pktmbuf_alloc_bulk(struct rte_mempool *mp,
                                   struct rte_mbuf **mbufs, unsigned int count);
void border_shim_pktmbuf_free(struct rte_mbuf *m);
char *border_shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *border_shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *border_shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int border_shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
/* Copies the later segments of a chain into the first one's tailroom and
 * frees them; -1, changing nothing, when the tailroom is short. */
int border_shim_pktmbuf_linearize(struct rte_mbuf *m);

void *border_shim_mtod(const struct rte_mbuf *m);
uint16_t border_shim_data_len(const struct rte_mbuf *m);
uint32_t border_shim_pkt_len(const struct rte_mbuf *m);
uint16_t border_shim_headroom(const struct rte_mbuf *m);
uint16_t border_shim_tailroom(const struct rte_mbuf *m);

unsigned int border_shim_lcore_id(void);
uint64_t border_shim_get_tsc_cycles(void);
uint64_t border_shim_get_tsc_hz(void);
int border_shim_errno(void);
void border_shim_set_errno(int value);
void border_shim_pause(void);

/* RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP: macros of RTE_BIT64
 * that bindgen cannot evaluate. */
uint64_t border_shim_rss_hf_ip_tcp_udp(void);

/* C's view of struct rte_mbuf, to check the bindgen layout against. */
struct border_shim_mbuf_layout {
	size_t size;
	size_t align;
	size_t buf_addr;
	size_t data_off;
	size_t refcnt;
	size_t nb_segs;
	size_t port;
	size_t ol_flags;
	size_t packet_type;
	size_t pkt_len;
	size_t data_len;
	size_t vlan_tci;
	size_t hash;
	size_t buf_len;
	size_t pool;
	size_t next;
};
void border_shim_mbuf_layout(struct border_shim_mbuf_layout *out);

/* sizeof of structs Rust hands to DPDK by pointer: a mismatch would mean
 * DPDK writes past a Rust allocation. */
struct border_shim_sizes {
	size_t rte_eth_conf;
	size_t rte_eth_dev_info;
	size_t rte_eth_stats;
	size_t rte_eth_link;
	size_t rte_ether_addr;
	size_t rte_eth_rxconf;
	size_t rte_eth_txconf;
};
void border_shim_sizes(struct border_shim_sizes *out);

#endif
