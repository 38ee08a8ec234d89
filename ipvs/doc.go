// Package ipvs is lvsd's only door to the kernel's IP Virtual Server tables.
//
// It offers the small Interface the agent needs, in lvsd's own types (netip
// addresses, typed flags). Services and timeouts go through
// github.com/moby/ipvs; destinations and sync daemons through lvsd's own
// generic netlink requests, which the library cannot make (a destination's
// tunnel encapsulation, 64-bit counters, the daemon commands). It adds a
// check that the IPVS generic netlink family exists (moby/ipvs silently
// turns every call into a no-op without it) and named scheduler flags.
// The stateful Fake in this package errors like the kernel does, for agent tests.
package ipvs
