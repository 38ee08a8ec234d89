// Package planner computes what lvsd wants of a host and the ops that get
// it there, for both roles: the director's data plane (Build, Plan), the
// addresses and routes its VIP holder takes over and releases
// (PlanAddresses), and a real server's VIPs on lo, sysctls and tunnel
// decapsulation (BuildRealServer, PlanRealServer). Every plan is a list of
// the one Op type, and what lvsd made is kept in the one Ownership record,
// written ahead of each change. It is pure: it reads no file, touches no
// kernel and is handed the time; the agents read the host, run the ops and
// save the record.
package planner
