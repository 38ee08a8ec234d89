// Package realserver is the agent of a DR real server (role realserver). It
// keeps the configured VIPs on lo (IPv4 /32, IPv6 /128 without duplicate
// address detection) and the sysctls that stop the host from answering ARP
// for them, adopts what it finds at start, records what it added
// (state_dir/realserver.json) and removes exactly that when a VIP leaves the
// configuration or `lvsd cleanup` runs. It also serves the weight endpoint
// the directors probe (X-Load-Balancing-Endpoint-Weight, 0 while drained)
// and the drain/undrain/status handlers of the local API socket.
//
// Its desired state and plan are the planner's (planner.BuildRealServer,
// planner.PlanRealServer), in the ops and the ownership record the director
// uses too; the host is reached only through arp.Addresses, arp.Tunnels,
// sysctl.Interface (arp/sysctl) and nat.Interface, so everything here is
// tested against their fakes. One goroutine (Agent.Run)
// owns the mutable state; the HTTP handlers read a published snapshot and
// send drain requests to it.
//
// Run assembles the role: it opens the sockets, runs the Agent and tells
// the service manager about it. cmd/lvsd builds the real Host (arp, nat)
// and calls Run; Run owns the goroutines it starts and joins them.
package realserver
