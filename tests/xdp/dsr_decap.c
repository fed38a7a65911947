// SPDX-License-Identifier: GPL-2.0
//
// The DSR test backends' decapsulation (tests/e2e_dsr.rs): this kernel has
// no ipip, fou or ip6_tunnel module, so an XDP program strips what border
// put in front of the client's packet and passes the inner packet up the
// stack. Outer IPv4 (no options) or IPv6 (no extension headers), carrying
// IPIP (protocol 4), IPv6 (41), or UDP to the GUE port with a GUE variant 0
// header without options; anything else passes untouched.
//
// Built by the test with clang -O2 -target bpf; loaded with
// `ip link set dev IF xdp obj dsr_decap.o sec xdp`.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define GUE_PORT 6080

SEC("xdp")
int dsr_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ethhdr copy;
	__u32 outer;
	__u8 proto;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl != 5)
			return XDP_PASS;
		outer = sizeof(*ip);
		proto = ip->protocol;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		outer = sizeof(*ip6);
		proto = ip6->nexthdr;
	} else {
		return XDP_PASS;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = (void *)(eth + 1) + outer;
		__u8 *gue = (void *)(udp + 1);

		if ((void *)(gue + 4) > end || udp->dest != bpf_htons(GUE_PORT))
			return XDP_PASS;
		// Version 0, not a control message, no optional fields.
		if (gue[0] != 0)
			return XDP_PASS;
		proto = gue[1];
		outer += sizeof(*udp) + 4;
	}
	copy = *eth;
	if (proto == IPPROTO_IPIP)
		copy.h_proto = bpf_htons(ETH_P_IP);
	else if (proto == IPPROTO_IPV6)
		copy.h_proto = bpf_htons(ETH_P_IPV6);
	else
		return XDP_PASS;
	if (bpf_xdp_adjust_head(ctx, outer))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	*eth = copy;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
