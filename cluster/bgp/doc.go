// Package bgp announces an ECMP director's VIPs to its routers: a BGP
// speaker with GoBGP v3 embedded in the process (no gRPC listener, GoBGP's
// logs through slog), so that no announcement can outlive lvsd: when the
// process dies the kernel closes its sessions and the routers withdraw.
//
// The caller gives the complete set of routes it wants announced
// (SetRoutes); the speaker announces what is new, re-announces what
// changed and withdraws what is missing. A Route carries communities,
// large communities, local-pref, MED and an AS-path prepend count; its next
// hop is the session's own address unless set. IPv4 and IPv6 unicast go to
// every peer that carries the family (IPv6 in MP_REACH_NLRI). Withdraw
// withdraws everything and returns once the UPDATEs were written to every
// established session; Close also ends the sessions with a Cease and the
// BFD sessions with AdminDown.
//
// The speaker imports nothing: one policy on GoBGP's RIB, for import and
// export, accepts only the paths lvsd added, so what a router sends is
// counted but never a best path, never passed on, never in the kernel
// (GoBGP's zebra client is never started). A router that sends more than
// its MaxPrefixes is logged once per session and keeps its session; past
// a hundred times as many GoBGP closes it, and the speaker reopens it after
// a minute. Nothing listens unless ListenAddresses (or, as before, a bare
// ListenPort) asks; GoBGP accepts only configured peers there.
//
// A peer with BFD gets a BFD session (cluster/bfd) once its BGP session is
// established; when BFD fails for a second, or the router closes the
// session because its BFD failed, the BGP session is held down until BFD
// is up again. Status reports each peer's session and BFD state, flaps and
// their reasons, and prefix counts. A session that does not come up is
// logged after 10 s with the kernel's TCP-MD5 failure count, the only
// trace a wrong password leaves.
//
// With GracefulRestart every session advertises RFC 4724's capability.
// CloseForRestart then ends the sessions without withdrawing or a
// NOTIFICATION, so routers that help keep the paths as stale while the
// kernel forwards, and a speaker started with Restarting opens its sessions
// as the restarting one once its first routes are in, so its End-of-RIB
// follows them (graceful.go).
//
// Fake is a stateful stand-in for the agent's tests. docs/ecmp.md has the
// measured behaviour against FRR and BIRD and the router configuration.
package bgp
