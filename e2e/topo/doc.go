// Package topo builds throw-away network topologies for lvsd end-to-end
// tests: one network namespace per host, each with a veth ("eth0") plugged
// into a Linux bridge in the namespace the test process started in.
//
// The address plan of a topology (all hosts share 10.0.0.0/24 and fd00::/64):
//
//	client     10.0.0.1    fd00::1   + extra sources 10.0.0.100.. / fd00::100..
//	director   10.0.0.2    fd00::2   (director2 10.0.0.3, … up to director8 10.0.0.9)
//	router     10.0.0.10   fd00::10  (WithRouter: ECMP tests, FRR in it via StartFRR)
//	rs1, rs2…  10.0.0.11…  fd00::11… (up to rs89 10.0.0.99)
//
// The v6 host part repeats the v4 last octet's decimal digits (rs1 is
// 10.0.0.11 and fd00::11) so packet traces read alike in both families.
// More than 155 client sources continue at 10.1.0.1… and fd01::1… (the v6
// twin of 10.1.15.101 is fd01::15:101); these are held by local routes on
// the client, not interface addresses, and routed via the client's primary
// address on every other host.
//
// A Segment (AddSegment) is a second bridge behind a router host: its hosts
// share no L2 with the topology's, e.g. real servers in another subnet than
// the director for tunnel forwarding. Its address plan is the caller's;
// the tunnel tests use router 10.0.0.254 / fd00::254 and a segment at
// 10.0.2.0/24 / fd02::/64.
//
// AddLAN makes a segment without a router: hosts of the topology join it
// with a second interface (Segment.Plug, e.g. directors' eth1 facing real
// servers of a two-armed NAT), and hosts made on it get no default route.
// Host.AddVLAN adds an 802.1Q interface (eth0.20) on a host's link; the
// bridges carry the tagged frames between the hosts that have one.
//
// Every host has lo up, IPv6 DAD off (accept_dad=0, addresses added with
// NODAD), rp_filter 0 (otherwise inherited from the machine), and the MAC
// 02:00:<v4 address> on its Link. New and AddHost return only once the
// kernel has finished the asynchronous parts of the setup (bridge port
// forwarding, IPv6 local routes and solicited-node groups), so the first
// packet of a test is not lost to a 1 s retransmit.
//
// NAT tests: all hosts share one subnet, so a real server reaches the
// client's addresses on-link (or, beyond 155 sources, via the client)
// whatever its default route; route the client's addresses via the
// director explicitly (Host.AddRoute replaces a route with the same
// destination).
//
// Everything is done in-process through netlink and per-thread setns because
// the tests run under qemu/TCG, where every exec of a binary costs 0.1–0.35 s.
//
// Thread discipline: goroutines of this package only switch namespaces on an
// OS thread locked for that purpose, and hand the thread back to the Go
// scheduler only after it was switched back to the original namespace;
// otherwise the thread stays locked and dies with its goroutine. Hence every
// unlocked thread of the process stays in the original namespace.
package topo
