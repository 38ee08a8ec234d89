// Package settings holds the defaults of the cluster's tunables, as plain
// values apart from the code they tune: the configuration reads the
// `cluster:` block against them without linking memberlist (cluster) or the
// relay's sockets (cluster/connsync), and those packages name the same
// values (cluster.DefaultPort, connsync.DefaultResyncInterval, ...), so each
// default is written down once.
package settings

import "time"

// Defaults of the cluster's membership and failure detection (cluster.Config).
const (
	DefaultPort              = 7946 // memberlist's, UDP and TCP
	DefaultHeartbeatInterval = 50 * time.Millisecond
	DefaultFailureTimeout    = 250 * time.Millisecond
	DefaultRejoinInterval    = 10 * time.Second
)

// DefaultResyncInterval is how often connection sync tells every member how
// far its messages got, so lost ones are asked for again
// (connsync.Config.ResyncInterval).
const DefaultResyncInterval = 10 * time.Second
