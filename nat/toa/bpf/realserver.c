// SPDX-License-Identifier: Apache-2.0
/* The real server's side of TOA, attached to the cgroup that holds the
 * applications. sockops asks every listener to keep its SYNs
 * (TCP_SAVE_SYN) and, when a connection to a VIP:port in toa_vips from an
 * address in toa_directors is established, copies the SYN's TOA option into
 * the socket's storage; cgroup/getpeername4 and 6 then return that address
 * and port to getpeername() and accept(). */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/socket.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "toa.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#define SOL_TCP 6
#define TCP_SAVE_SYN 27

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct toa_vip);
	__type(value, __u8);
	__uint(max_entries, 4096);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} toa_vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct toa_addr);
	__type(value, __u8);
	__uint(max_entries, 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} toa_directors SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct toa_peer);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} toa_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, TOA_REALSERVER_STATS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} toa_realserver_stats SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&toa_realserver_stats, &which);

	if (v)
		*v += 1;
}

static __always_inline __u32 ctx_u32(const __u32 *field)
{
	return *(const volatile __u32 *)field;
}

static __always_inline void map4(__u8 *dst, __u32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(&dst[12], &addr, 4);
}

static __always_inline int is_v4_mapped(const __u8 *a)
{
	for (int i = 0; i < 10; i++)
		if (a[i])
			return 0;
	return a[10] == 0xff && a[11] == 0xff;
}

/* The search of a saved SYN's TCP header for the option, one byte per
 * bpf_loop step so that the verifier checks the step once. */
struct option_search {
	__u8 hdr[60];
	__u32 len;  /* TCP header with options */
	__u32 next; /* where the next option starts */
	__u32 want; /* the option's length for the connection's family */
	__s32 at;   /* where the option is, -1 until found */
};

static long search_step(__u32 index, struct option_search *s)
{
	/* One register for the checks and the uses: clang would otherwise
	 * index with a fresh zero-extension of the argument, whose bounds the
	 * verifier never saw. */
	__u64 j = index;

	barrier_var(j);
	if (j >= s->len || j >= 60)
		return 1;
	if (j != s->next)
		return 0;
	__u8 kind = s->hdr[j];
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		s->next = j + 1;
		return 0;
	}
	if (j + 1 >= s->len || j + 1 >= 60)
		return 1;
	__u8 len = s->hdr[j + 1];
	if (len < 2)
		return 1;
	if (kind == TOA_KIND && len == s->want && j + len <= s->len) {
		s->at = j;
		return 1;
	}
	s->next = j + len;
	return 0;
}

static __always_inline void remember(struct bpf_sock_ops *skops)
{
	struct toa_vip local = {};
	struct toa_addr remote = {};

	if (skops->family == AF_INET) {
		map4(local.addr, skops->local_ip4);
		map4(remote.addr, skops->remote_ip4);
	} else if (skops->family == AF_INET6) {
		/* One 4-byte load per field: the context allows no wider ones,
		 * which clang would merge adjacent reads into. */
		__u32 l[4] = { ctx_u32(&skops->local_ip6[0]), ctx_u32(&skops->local_ip6[1]),
			       ctx_u32(&skops->local_ip6[2]), ctx_u32(&skops->local_ip6[3]) };
		__u32 r[4] = { ctx_u32(&skops->remote_ip6[0]), ctx_u32(&skops->remote_ip6[1]),
			       ctx_u32(&skops->remote_ip6[2]), ctx_u32(&skops->remote_ip6[3]) };

		__builtin_memcpy(local.addr, l, 16);
		__builtin_memcpy(remote.addr, r, 16);
	} else {
		return;
	}
	local.port = bpf_htons((__u16)skops->local_port);
	if (!bpf_map_lookup_elem(&toa_vips, &local))
		return;
	if (!bpf_map_lookup_elem(&toa_directors, &remote)) {
		count(TOA_STAT_NOT_DIRECTOR);
		return;
	}

	struct option_search search = { .next = 20, .at = -1 };
	long n = bpf_getsockopt(skops, SOL_TCP, TCP_BPF_SYN, search.hdr, sizeof(search.hdr));
	if (n < 20 || n > 60) {
		count(TOA_STAT_NO_SYN);
		return;
	}
	int v4 = is_v4_mapped(remote.addr);
	search.len = n;
	search.want = v4 ? TOA_LEN_V4 : TOA_LEN_V6;
	bpf_loop(60, search_step, &search, 0);
	int at = search.at;
	if (at < 20 || at > 60 - (v4 ? TOA_LEN_V4 : TOA_LEN_V6)) {
		count(TOA_STAT_NO_OPTION);
		return;
	}

	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return;
	struct toa_peer *peer = bpf_sk_storage_get(&toa_peers, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!peer)
		return;
	__builtin_memcpy(&peer->port, &search.hdr[at + 2], 2);
	if (v4) {
		map4(peer->addr, 0);
		__builtin_memcpy(&peer->addr[12], &search.hdr[at + 4], 4);
		peer->family = 4;
	} else {
		__builtin_memcpy(peer->addr, &search.hdr[at + 4], 16);
		peer->family = 6;
	}
	count(TOA_STAT_STORED);
}

SEC("sockops")
int toa_sockops(struct bpf_sock_ops *skops)
{
	int one = 1;

	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_LISTEN_CB:
		/* The SYN is only readable at establishment if the listener kept it. */
		bpf_setsockopt(skops, SOL_TCP, TCP_SAVE_SYN, &one, sizeof(one));
		break;
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		remember(skops);
		break;
	}
	return 1;
}

SEC("cgroup/getpeername4")
int toa_getpeername4(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;

	if (!sk)
		return 1;
	struct toa_peer *peer = bpf_sk_storage_get(&toa_peers, sk, 0, 0);
	if (!peer || peer->family != 4)
		return 1;
	__u32 addr;
	__builtin_memcpy(&addr, &peer->addr[12], 4);
	ctx->user_ip4 = addr;
	ctx->user_port = peer->port;
	return 1;
}

SEC("cgroup/getpeername6")
int toa_getpeername6(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;

	if (!sk)
		return 1;
	struct toa_peer *peer = bpf_sk_storage_get(&toa_peers, sk, 0, 0);
	if (!peer)
		return 1;
	/* An IPv4 connection on an IPv6 socket has an IPv4-mapped peer: the
	 * stored address is in that form already. */
	__u32 a[4];
	__builtin_memcpy(a, peer->addr, 16);
	ctx->user_ip6[0] = a[0];
	ctx->user_ip6[1] = a[1];
	ctx->user_ip6[2] = a[2];
	ctx->user_ip6[3] = a[3];
	ctx->user_port = peer->port;
	return 1;
}

/* No GPL-only helper is used, so the project's own license will do. */
char __license[] SEC("license") = "Apache-2.0";
