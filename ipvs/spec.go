package ipvs

import (
	"time"

	"github.com/lvsd/lvsd/ipvs/spec"
)

// The values of IPVS's tables live in package spec, which links no kernel
// library; these names keep ipvs's callers as they were.

type (
	Flags          = spec.Flags
	Forwarding     = spec.Forwarding
	ServiceKey     = spec.ServiceKey
	Service        = spec.Service
	DestinationKey = spec.DestinationKey
	Destination    = spec.Destination
	Stats          = spec.Stats
	Rates          = spec.Rates
	TunnelType     = spec.TunnelType
	TunnelFlags    = spec.TunnelFlags
	TunnelOptions  = spec.TunnelOptions
	SyncSysctls    = spec.SyncSysctls
	Timeouts       = spec.Timeouts
	DaemonState    = spec.DaemonState
	Daemon         = spec.Daemon
	DaemonAction   = spec.DaemonAction
	Expiring       = spec.Expiring
	Connection     = spec.Connection
)

const (
	FlagPersistent = spec.FlagPersistent
	FlagOnePacket  = spec.FlagOnePacket
	FlagMHFallback = spec.FlagMHFallback
	FlagMHPort     = spec.FlagMHPort

	Masquerade  = spec.Masquerade
	Tunnel      = spec.Tunnel
	DirectRoute = spec.DirectRoute

	TunnelIPIP           = spec.TunnelIPIP
	TunnelGUE            = spec.TunnelGUE
	TunnelGRE            = spec.TunnelGRE
	TunnelChecksum       = spec.TunnelChecksum
	TunnelRemoteChecksum = spec.TunnelRemoteChecksum

	SysctlPrefix     = spec.SysctlPrefix
	ExpireNodestConn = spec.ExpireNodestConn
	MaxTimeout       = spec.MaxTimeout

	DaemonMaster    = spec.DaemonMaster
	DaemonBackup    = spec.DaemonBackup
	DefaultSyncPort = spec.DefaultSyncPort
	DaemonUnchanged = spec.DaemonUnchanged
	DaemonStarted   = spec.DaemonStarted
	DaemonRestarted = spec.DaemonRestarted
)

var (
	DefaultTimeouts  = spec.DefaultTimeouts
	DefaultSyncGroup = spec.DefaultSyncGroup
)

// RecommendedSyncSysctls is spec.RecommendedSyncSysctls.
func RecommendedSyncSysctls() SyncSysctls { return spec.RecommendedSyncSysctls() }

// ValidateTimeout is spec.ValidateTimeout.
func ValidateTimeout(d time.Duration) error { return spec.ValidateTimeout(d) }

// ConnectionExpirySysctls is spec.ConnectionExpirySysctls.
func ConnectionExpirySysctls() map[string]string { return spec.ConnectionExpirySysctls() }
