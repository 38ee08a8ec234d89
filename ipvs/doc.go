// Package ipvs is lvsd's only door to the kernel's IP Virtual Server tables.
//
// It wraps github.com/moby/ipvs behind the small Interface the agent needs,
// in lvsd's own types (netip addresses, typed flags), and adds what the
// library lacks: a check that the IPVS generic netlink family exists (moby/ipvs
// silently turns every call into a no-op without it) and named scheduler flags.
// The stateful Fake in this package errors like the kernel does, for agent tests.
package ipvs
