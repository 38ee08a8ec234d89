// Package cluster makes the directors one cluster and decides which of them
// holds each VIP. It is the only package that imports memberlist.
//
// memberlist keeps the membership (who is in the cluster, where), encrypts
// and authenticates every packet with the keyring from the key file, and
// separates clusters by label. Failure detection for VIPs is a heartbeat
// every director sends every other one each HeartbeatInterval (50 ms) as a
// memberlist user message, carrying the VIPs it is configured for and the
// ones it holds; a director not heard for FailureTimeout (250 ms) counts as
// failed. A process that was not scheduled for a while does not hold its
// own lateness against its peers (onCheck). memberlist does not stop a
// captured heartbeat from being sent again, so only a heartbeat newer than
// the last one used from its sender counts, and a sender this process has
// no memory of must echo its incarnation (heartbeatGuard).
//
// Ownership is decided by each director alone from its view (Owners, Next):
// active-standby gives every VIP to the live director with the highest
// priority, active-active gives each VIP to the live director ranked first
// by sha256(name + "#" + vip), as MetalLB ranks. A director takes a VIP only
// when no director it hears claims it, releases every VIP without a quorum
// (directors heard within two failure timeouts), and, when two claim one
// after a partition heals, the lower ranked one lets go. Configured peers are re-joined periodically and as soon as a
// heartbeat arrives from a director memberlist has lost, so a healed
// partition merges.
//
// Node implements the agent's VIPOwnership; the agent adds and removes the
// VIP addresses (through arp.Leased, which gives them a lifetime it renews,
// announces them and reports them back with Node.AddressChanged). Fake is an
// in-memory cluster for agent tests. For connection sync it is the
// transport (SetSync, Broadcast, SendTo) and the authority: MaySend says
// whether a director holds a VIP in this director's view, so that only the
// holder's connection records are applied.
package cluster
