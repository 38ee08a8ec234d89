// Package arp decides who answers for an IP address: it puts VIPs on
// interfaces (the director's uplink, a real server's lo) and removes them.
// Gratuitous ARP, unsolicited neighbour advertisements and the ARP sysctls of
// real servers live here too as they are added. The stateful Fake mirrors the
// kernel's address list for agent tests.
package arp
