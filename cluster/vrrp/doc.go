// Package vrrp speaks VRRP version 3 (RFC 5798) for the VIPs of one
// virtual router, so that lvsd and keepalived can run side by side as the
// two directors of a pair while an installation moves from one to the
// other (cluster.mode: vrrp).
//
// A Router elects this director master or backup with the other routers of
// its virtual router ID on the link and implements the agent's
// VIPOwnership: while master it holds every VIP it serves. The agent's
// holder adds the addresses and announces them (gratuitous ARP, unsolicited
// neighbour advertisements); the virtual MAC address of RFC 5798 is not
// used, so the VIPs move with the real MAC of their master.
//
// The protocol is in three parts: packet.go encodes and validates
// advertisements, machine.go is the state machine of RFC 5798 section 6.4
// (pure: it is handed the time and returns what to send), and router.go
// runs one machine on one goroutine over a Conn (raw IP protocol 112).
package vrrp
