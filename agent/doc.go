// Package agent is the director's runtime. Its reconciler (Agent.Run)
// reads the configuration, has agent/planner compute the desired state and
// the ops that bring the kernel to it (Build, Plan), and runs them through
// the small interfaces of the kernel packages (Kernel) with the ownership
// record written ahead (agent/apply); its VIP holder (Holder) does the same
// for the VIP addresses on a takeover or a release (PlanAddresses). One
// goroutine owns each piece of mutable state: the reconciler its
// configuration, desired state and kernel view, the holder its addresses.
// The views above it (agent/views: status, local API, metrics) read the
// Snapshot the reconciler publishes after each pass (published.go).
package agent
