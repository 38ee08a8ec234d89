// Package bfd is Bidirectional Forwarding Detection for an ECMP director
// and its routers: RFC 5880 asynchronous mode over single-hop IPv4 and IPv6
// (RFC 5881), so that a router removes a director whose host died or whose
// link was cut within a few hundred milliseconds (100 ms × 3 by default),
// where a BGP hold timer takes seconds.
//
// Session is the state machine (AdminDown, Down, Init, Up), pure and driven
// by the times the caller passes: the three-way handshake, the detection
// time from the remote's multiplier and the slower of the two rates, timer
// negotiation with the Poll/Final sequence when an interval changes (a
// longer interval takes effect only once the remote confirmed it), the
// slow rate of at least one second while not Up, and the transmit jitter
// of §6.8.7. ParsePacket validates received packets as §6.8.6 requires
// (FuzzParsePacket checks it); authentication, the echo function and
// demand mode are not supported, as in FRR's bfdd.
//
// Server runs sessions: one goroutine owns them all, reads what the
// transport delivered, runs the timers and sends. The UDP transport sends
// from a port of its own per session in 49152–65535 to port 3784 with TTL
// (hop limit) 255 and the network-control traffic class, and the Server
// drops received packets whose TTL is not 255 (GTSM, RFC 5082). Sessions
// are matched by the discriminator the remote echoes, or by its address
// before it knows ours. State changes go to subscribers (Subscribe), which
// cluster/bgp uses to take a BGP session down with its BFD session. Close
// signals AdminDown, which RFC 5882 says the remote must not count as a
// failure. Fake stands in for Server in tests of its users.
//
// Interoperability was measured against FRR 8.4's bfdd and BIRD 2.0.12
// (e2e/ecmplab, docs/ecmp.md).
package bfd
