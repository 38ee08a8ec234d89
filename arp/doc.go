// Package arp decides who answers for an IP address: it puts VIPs on
// interfaces (the director's uplink, a real server's lo) and removes them.
// Gratuitous ARP and unsolicited neighbour advertisements live here too;
// arp/sysctl writes the sysctls, ARP's and the others'. The stateful Fake
// mirrors the kernel's address list for agent tests.
package arp
