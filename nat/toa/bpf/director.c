// SPDX-License-Identifier: Apache-2.0
/* The director's side of TOA: a tc ingress program on the client-facing
 * interface. For TCP to a VIP:port in toa_services it overwrites with NOPs
 * any TOA option the client sent (so no client can name its own address)
 * and appends to each SYN an option carrying the packet's source address and
 * port, before IPVS rewrites the addresses for FULLNAT. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "toa.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct toa_vip);
	__type(value, __u8);
	__uint(max_entries, 4096);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} toa_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, TOA_DIRECTOR_STATS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} toa_director_stats SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&toa_director_stats, &which);

	if (v)
		*v += 1;
}

/* Where the packet's parts are; offsets from the start of the frame. */
struct segment {
	__u32 l3;       /* IP header */
	__u32 tcp;      /* TCP header */
	__u32 ip_len;   /* IPv4 total length, or IPv6 header + payload length */
	__u32 hdr_len;  /* TCP header with options */
	__u8 v6;
	__u8 ip_options; /* IPv4 header longer than 20 bytes */
	__u8 addr[16];  /* source address, IPv4-mapped for IPv4 */
	__be16 sport;
};

/* The walk over a TCP header's options, one byte per bpf_loop step: the
 * verifier checks the step once, where an open-coded loop over 40 bytes
 * would have it follow every path through every iteration. */
struct option_walk {
	__u8 opts[TCP_MAX_OPTIONS];
	__u32 len;       /* bytes of options, a multiple of 4 */
	__u32 next;      /* where the next option starts */
	__u32 found;
};

static long strip_step(__u32 index, struct option_walk *w)
{
	/* One register for the checks and the uses: clang would otherwise
	 * index with a fresh zero-extension of the argument, whose bounds the
	 * verifier never saw. */
	__u64 j = index;

	barrier_var(j);
	if (j >= w->len || j >= TCP_MAX_OPTIONS)
		return 1;
	if (j != w->next)
		return 0;
	__u8 kind = w->opts[j];
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		w->next = j + 1;
		return 0;
	}
	if (j + 1 >= w->len || j + 1 >= TCP_MAX_OPTIONS)
		return 1;
	__u8 len = w->opts[j + 1];
	if (len < 2)
		return 1;
	w->next = j + len;
	if (kind == TOA_KIND) {
		/* The whole option in this step: kernels before 6.8 verify a
		 * bpf_loop callback once, with the walk as it starts, so a branch
		 * on state a previous step set is taken
		 * for dead code and removed. */
		for (__u64 k = 0; k < TCP_MAX_OPTIONS; k++) {
			__u64 at = j + k;

			if (k >= len || at >= TCP_MAX_OPTIONS)
				break;
			w->opts[at] = TCPOPT_NOP;
		}
		w->found = 1;
	}
	return 0;
}

/* add_toa appends the option to a SYN without payload: the frame grows at
 * its tail, so the TCP header stays where it is and a checksum the NIC or
 * the stack completes later (CHECKSUM_PARTIAL) still starts at the right
 * place. Every checksum is fixed by difference, which keeps a receive
 * checksum (CHECKSUM_COMPLETE) valid too. It returns 0 when the option is
 * in, 1 when the packet is still as it came, -1 when a helper failed halfway
 * and the packet is damaged. */
static __always_inline int add_toa(struct __sk_buff *skb, struct segment *s, struct tcphdr *th)
{
	__u8 opt[TOA_LEN_V6] = {};
	__u32 opt_len = s->v6 ? TOA_LEN_V6 : TOA_LEN_V4;
	__u32 csum_off = s->tcp + offsetof(struct tcphdr, check);
	__u32 old_tcp_len = s->ip_len - (s->tcp - s->l3);
	__u32 new_tcp_len = old_tcp_len + opt_len;
	__u32 end = s->l3 + s->ip_len;

	opt[0] = TOA_KIND;
	opt[1] = opt_len;
	__builtin_memcpy(&opt[2], &s->sport, 2);
	if (s->v6)
		__builtin_memcpy(&opt[4], s->addr, 16);
	else
		__builtin_memcpy(&opt[4], &s->addr[12], 4);

	/* First drop any Ethernet padding after the IP packet, then grow by
	 * zeros: the receive checksum accounts for both. */
	if (skb->len != end && bpf_skb_change_tail(skb, end, 0))
		return 1;
	if (bpf_skb_change_tail(skb, end + opt_len, 0))
		return 1;

	__s64 diff = s->v6 ? bpf_csum_diff(NULL, 0, (__be32 *)opt, TOA_LEN_V6, 0)
			   : bpf_csum_diff(NULL, 0, (__be32 *)opt, TOA_LEN_V4, 0);
	if (diff < 0)
		return -1;
	if (s->v6) {
		if (bpf_skb_store_bytes(skb, s->tcp + s->hdr_len, opt, TOA_LEN_V6, 0))
			return -1;
	} else {
		if (bpf_skb_store_bytes(skb, s->tcp + s->hdr_len, opt, TOA_LEN_V4, 0))
			return -1;
	}
	if (bpf_l4_csum_replace(skb, csum_off, 0, diff, 0))
		return -1;

	/* The data offset shares its 16-bit word with the flags. */
	__be16 old_word, new_word;
	if (bpf_skb_load_bytes(skb, s->tcp + 12, &old_word, 2))
		return -1;
	new_word = bpf_htons((bpf_ntohs(old_word) & 0x0fff) | (((s->hdr_len + opt_len) / 4) << 12));
	if (bpf_skb_store_bytes(skb, s->tcp + 12, &new_word, 2, 0))
		return -1;
	if (bpf_l4_csum_replace(skb, csum_off, old_word, new_word, 2))
		return -1;
	if (bpf_l4_csum_replace(skb, csum_off, bpf_htons(old_tcp_len), bpf_htons(new_tcp_len),
				BPF_F_PSEUDO_HDR | 2))
		return -1;

	if (s->v6) {
		__be16 payload = bpf_htons(new_tcp_len);
		/* IPv6 has no header checksum: let the helper fix the receive checksum. */
		if (bpf_skb_store_bytes(skb, s->l3 + offsetof(struct ipv6hdr, payload_len), &payload, 2,
					BPF_F_RECOMPUTE_CSUM))
			return -1;
	} else {
		__be16 old_total = bpf_htons(s->ip_len), new_total = bpf_htons(s->ip_len + opt_len);
		if (bpf_skb_store_bytes(skb, s->l3 + offsetof(struct iphdr, tot_len), &new_total, 2, 0))
			return -1;
		if (bpf_l3_csum_replace(skb, s->l3 + offsetof(struct iphdr, check), old_total, new_total, 2))
			return -1;
	}
	return 0;
}

SEC("tc")
int toa_director(struct __sk_buff *skb)
{
	struct segment s = { .l3 = ETH_HLEN };
	struct toa_vip key = {};
	struct tcphdr th;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, s.l3, &ip, sizeof(ip)))
			return TC_ACT_OK;
		if (ip.protocol != IPPROTO_TCP || ip.ihl < 5)
			return TC_ACT_OK;
		if (ip.frag_off & bpf_htons(0x3fff)) /* a fragment: its TCP header may be elsewhere */
			return TC_ACT_OK;
		key.addr[10] = 0xff;
		key.addr[11] = 0xff;
		__builtin_memcpy(&key.addr[12], &ip.daddr, 4);
		s.addr[10] = 0xff;
		s.addr[11] = 0xff;
		__builtin_memcpy(&s.addr[12], &ip.saddr, 4);
		s.tcp = s.l3 + ip.ihl * 4;
		s.ip_len = bpf_ntohs(ip.tot_len);
		s.ip_options = ip.ihl != 5;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, s.l3, &ip6, sizeof(ip6)))
			return TC_ACT_OK;
		/* Extension headers are not followed: such packets pass as they are. */
		if (ip6.nexthdr != IPPROTO_TCP)
			return TC_ACT_OK;
		__builtin_memcpy(key.addr, &ip6.daddr, 16);
		__builtin_memcpy(s.addr, &ip6.saddr, 16);
		s.tcp = s.l3 + sizeof(ip6);
		s.ip_len = sizeof(ip6) + bpf_ntohs(ip6.payload_len);
		s.v6 = 1;
	} else {
		return TC_ACT_OK;
	}

	if (bpf_skb_load_bytes(skb, s.tcp, &th, sizeof(th)))
		return TC_ACT_OK;
	key.port = th.dest;
	if (!bpf_map_lookup_elem(&toa_services, &key))
		return TC_ACT_OK;
	s.sport = th.source;
	s.hdr_len = th.doff * 4;
	if (s.hdr_len < sizeof(th) || s.tcp - s.l3 + s.hdr_len > s.ip_len)
		return TC_ACT_OK; /* malformed: the stack drops it */

	__u64 opt_len = (s.hdr_len - sizeof(th)) & 0x3f; /* 64-bit: 6.1 does not carry 32-bit bounds over */
	/* Kept in one register and checked there: the 6.1 verifier loses a
	 * bound checked on a copy, and refuses a length that may be zero. */
	barrier_var(opt_len);
	if (opt_len > TCP_MAX_OPTIONS)
		return TC_ACT_OK;
	if (opt_len >= 4) { /* not "!= 0": 6.1 learns no lower bound from that */
		struct option_walk w = { .len = opt_len };
		__u8 orig[TCP_MAX_OPTIONS] = {};

		if (bpf_skb_load_bytes(skb, s.tcp + sizeof(th), w.opts, opt_len))
			return TC_ACT_OK;
		__builtin_memcpy(orig, w.opts, sizeof(orig));
		bpf_loop(TCP_MAX_OPTIONS, strip_step, &w, 0);
		if (w.found) {
			__s64 diff = bpf_csum_diff((__be32 *)orig, opt_len, (__be32 *)w.opts, opt_len, 0);

			if (diff < 0 || bpf_skb_store_bytes(skb, s.tcp + sizeof(th), w.opts, opt_len, 0) ||
			    bpf_l4_csum_replace(skb, s.tcp + offsetof(struct tcphdr, check), 0, diff, 0))
				return TC_ACT_SHOT; /* a forged option must not get through */
			count(TOA_STAT_STRIPPED);
		}
	}

	if (!th.syn || th.ack)
		return TC_ACT_OK;
	if (s.hdr_len + (s.v6 ? TOA_LEN_V6 : TOA_LEN_V4) > 60) {
		count(TOA_STAT_NO_ROOM);
		return TC_ACT_OK;
	}
	/* Data in a SYN (TCP Fast Open) would have to move; IPv4 options would
	 * put the TCP header off the place the helpers assume. */
	if (s.ip_options || s.tcp - s.l3 + s.hdr_len != s.ip_len) {
		count(TOA_STAT_UNSUPPORTED);
		return TC_ACT_OK;
	}
	int err = add_toa(skb, &s, &th);
	if (err) {
		count(TOA_STAT_UNSUPPORTED);
		/* The client retransmits a dropped SYN; a damaged one would only
		 * be dropped further on. */
		return err < 0 ? TC_ACT_SHOT : TC_ACT_OK;
	}
	count(TOA_STAT_ADDED);
	return TC_ACT_OK;
}

/* No GPL-only helper is used, so the project's own license will do. */
char __license[] SEC("license") = "Apache-2.0";
