// Package connsync relays the kernel's IPVS connection sync between the
// directors, over the cluster instead of multicast on a shared network.
//
// Every director runs both kernel sync daemons on lo: the master sends the
// connections this director forwards to 224.0.0.81:8848, the backup listens
// on 224.0.0.81:8849 and creates what it receives. A Relay sits between
// them and the cluster:
//
//  1. it reads the master's datagrams from a socket joined to the group on
//     lo, and validates them (protocol version 1 of ip_vs_sync.c);
//  2. it caches the latest record of each connection until the record's
//     timeout has passed, bounded by MaxEntries;
//  3. it batches fresh records for at most FlushDelay into relay messages
//     of at most 1,100 bytes (one encrypted memberlist packet) and
//     broadcasts them through a Transport;
//  4. it replays the whole cache to a member that joins: the kernel
//     re-sends a connection only when packets flow, so an idle connection
//     reaches a late member only this way. Messages can be lost too, so
//     the relay numbers its fresh broadcasts, tells every member each
//     ResyncInterval how far it got (a summary), and sends a member that
//     asks for lost messages the current records of their connections
//     (antientropy.go); the whole cache goes to everyone only every
//     FullResyncInterval, as a safety net. Replays and re-sends are paced
//     (MaxRate), because memberlist queues user messages, the cluster's
//     heartbeats among them, in one bounded queue;
//  5. it writes each relay message it is handed (Deliver) as one datagram
//     to the backup daemon, with the configured sync ID, keeping only the
//     records it may apply (below).
//
// The cluster key says only that some director sent a message. The
// backup daemon creates a connection for any record, and a connection
// sends a client's packets where its record says, so a receiver checks
// more (freshness.go, authorize.go):
//
//   - each message names its sender, the incarnation of the sender's relay
//     and a sequence number, and carries its send time, all sealed with
//     the records; a message seen before, older than MaxAge or more than
//     MaxClockSkew in the future is refused whole;
//   - a record is applied only if its service and real server are
//     configured here (SetServices) and its sender holds the VIP in this
//     director's view of the cluster (Authority).
//
// Records received from peers are applied, never cached or relayed again:
// only the local master's records are this director's to replay. A
// director that takes over a VIP does not re-send what it received, since
// its own master re-syncs the connections it forwards. Conversely, the
// cluster calls ReleaseVIP when a VIP leaves this director, so its older
// records are not replayed over the new holder's live ones.
//
// Measured on Linux 6.18 in a fresh network namespace (socket_linux.go has
// the details): lo has no MULTICAST flag, but joining the group by lo's
// ifindex receives what is sent there, and sending needs IP_MULTICAST_IF
// set to lo. IPv6 multicast on lo was not delivered (not even with a route
// and the MULTICAST flag), so the group must be IPv4.
//
// The kernel side must match: the sysctl net.ipv4.vs.sync_ports must be 1
// (with more, the master also sends to the ports after MasterPort, the
// backup's among them); the backup daemon's sync_maxlen must be at least
// 1,100 bytes (the default on lo is 65,507); its sync ID must be 0 or
// Config.SyncID.
package connsync
