/* The TOA option and the map keys the director's and the real server's
 * programs share with the Go loaders (nat/toa). Values in network byte order
 * are marked __be; the Go side writes them with binary.BigEndian. */
#ifndef LVSD_TOA_H
#define LVSD_TOA_H

#include <linux/types.h>

/* Kind 254 is the one Alibaba's LVS and DPVS use for TOA, so real servers that
 * already run one of their toa modules understand lvsd's directors too. The
 * layout after kind and length is the client's port, then its address: 8
 * bytes for IPv4, 20 for IPv6 (DPVS's IPv6 layout); the length tells them
 * apart. */
#define TOA_KIND 254
#define TOA_LEN_V4 8
#define TOA_LEN_V6 20

#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCP_MAX_OPTIONS 40

/* A VIP and port as both programs look them up: IPv4 addresses are
 * IPv4-mapped IPv6 (::ffff:a.b.c.d), as Go's netip.Addr.As16 returns them. */
struct toa_vip {
	__u8 addr[16];
	__be16 port;
	__u16 pad;
};

/* An address alone (a director's source address), mapped the same way. */
struct toa_addr {
	__u8 addr[16];
};

/* What a real-server socket remembers of its SYN's option. */
struct toa_peer {
	__u8 addr[16];
	__be16 port;
	__u8 family; /* 4 or 6 */
	__u8 pad;
};

/* Indexes of the director's per-CPU counters. */
enum toa_director_stat {
	TOA_STAT_ADDED = 0,    /* SYNs that now carry the client's address */
	TOA_STAT_NO_ROOM,      /* SYNs whose options left no room: passed without */
	TOA_STAT_STRIPPED,     /* packets whose own TOA option was overwritten */
	TOA_STAT_UNSUPPORTED,  /* SYNs passed without: IPv4 options, data in the SYN, a helper failed */
	TOA_DIRECTOR_STATS,
};

/* Indexes of the real server's per-CPU counters. */
enum toa_realserver_stat {
	TOA_STAT_STORED = 0,   /* connections whose peer name is now the client's */
	TOA_STAT_NOT_DIRECTOR, /* connections to a VIP from an address not in the directors map */
	TOA_STAT_NO_OPTION,    /* SYNs from a director without a usable option */
	TOA_STAT_NO_SYN,       /* the SYN was not saved (listener older than the programs) */
	TOA_REALSERVER_STATS,
};

#endif
