package bgp

import (
	"context"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
)

// Announcer is what the director needs from a BGP speaker; Speaker and
// Fake implement it.
type Announcer interface {
	// SetRoutes makes the announced routes exactly routes: new ones are
	// announced, changed ones re-announced, missing ones withdrawn.
	SetRoutes(ctx context.Context, routes []Route) error
	// Withdraw withdraws every route and returns once the withdrawals were
	// written to every established session (or ctx ended).
	Withdraw(ctx context.Context) error
	Status(ctx context.Context) (Status, error)
}

// BFD is what the Speaker needs of BFD: *bfd.Server and *bfd.Fake.
type BFD interface {
	AddPeer(ctx context.Context, p bfd.PeerConfig) error
	RemovePeer(ctx context.Context, peer netip.Addr) error
	Subscribe(fn func(bfd.Change)) (cancel func())
}

// SessionState is the BGP finite state machine's state (RFC 4271 §8).
type SessionState string

// Session states.
const (
	StateUnknown     SessionState = "unknown"
	StateIdle        SessionState = "idle"
	StateConnect     SessionState = "connect"
	StateActive      SessionState = "active"
	StateOpenSent    SessionState = "opensent"
	StateOpenConfirm SessionState = "openconfirm"
	StateEstablished SessionState = "established"
)

// BFDIdle is PeerStatus.BFD of a peer whose BFD session has not started.
const BFDIdle = "idle"

// Status is the speaker's state for lvsd status, --json and /metrics.
type Status struct {
	ASN      uint32
	RouterID netip.Addr
	Peers    []PeerStatus
	Routes   []Route // announced, sorted by prefix
	// Imported counts the routes from routers in the speaker's RIB: the
	// speaker imports nothing, so it stays 0.
	Imported uint64
	// ListenAddresses and ListenPort are where the speaker accepts
	// sessions (configured peers only); none and 0: it only dials out.
	ListenAddresses []netip.Addr `json:",omitempty"`
	ListenPort      uint16       `json:",omitempty"`
	// MD5Failures counts TCP segments the kernel dropped for a wrong or
	// missing TCP-MD5 signature since Start, in this network namespace
	// (TcpExt TCPMD5Failure + TCPMD5NotFound + TCPMD5Unexpected).
	MD5Failures uint64
	// GracefulRestart is the speaker's side of BGP graceful restart; nil
	// while it is off.
	GracefulRestart *GracefulRestartStatus `json:",omitempty"`
}

// GracefulRestartStatus is what the speaker knows of graceful restart
// (RFC 4724).
type GracefulRestartStatus struct {
	// RestartTime is how long a router that helps keeps this director's
	// paths after its sessions closed for a restart.
	RestartTime time.Duration
	// Restarted: this process started after a stop for a restart (a
	// restart hold); the routers that help keep the previous process's
	// paths, marked stale, until this one's session with them is
	// established and has sent its routes and End-of-RIB, at the latest
	// until StaleUntil (the start plus the restart time: the stop was
	// earlier still).
	Restarted  bool      `json:",omitempty"`
	StaleUntil time.Time `json:",omitzero"`
	// OpenBy: restarted, the sessions are opened with the first routes,
	// at OpenBy at the latest; OpenedAt is when they were (zero: not yet).
	OpenBy   time.Time `json:",omitzero"`
	OpenedAt time.Time `json:",omitzero"`
}

// keepsStalePaths says whether, as far as the speaker knows, the router
// of p still keeps the paths of the process before a graceful restart:
// this process restarted, its session with the router has not been
// established yet, and the restart time has not run out. Whether the
// router helps at all is its own configuration.
func (g *GracefulRestartStatus) keepsStalePaths(p PeerStatus, now time.Time) bool {
	return g != nil && g.Restarted && p.State != StateEstablished && p.Flaps == 0 && now.Before(g.StaleUntil)
}

// markStalePaths sets each peer's KeepsStalePaths.
func (st *Status) markStalePaths(now time.Time) {
	for i := range st.Peers {
		st.Peers[i].KeepsStalePaths = st.GracefulRestart.keepsStalePaths(st.Peers[i], now)
	}
}

// PeerStatus is one neighbour.
type PeerStatus struct {
	Address netip.Addr
	ASN     uint32
	State   SessionState
	// Since is when the session entered State; Established is when it
	// last became established (zero if it is not).
	Since, Established time.Time
	// Flaps counts the times it left established; LastFlap and
	// LastFlapReason describe the last one ("hold-timer-expired",
	// "notification-received cease/...", "bfd down", "prefix limit: …").
	Flaps          int
	LastFlap       time.Time
	LastFlapReason string
	// BFD is the BFD session's state: "" without BFD, BFDIdle until the
	// BGP session is established (BFD starts then), else down, init, up
	// or admin-down. HeldDown is set while the BGP session is kept down
	// because BFD is.
	BFD      string
	BFDDiag  string
	HeldDown bool
	// BFDDowns counts the times the BFD session went from up to down,
	// short losses that cost no BGP session included: each one took the
	// director's paths out of the router for a moment.
	BFDDowns int
	// Announced counts the prefixes sent to the peer, Received those the
	// peer sent, Accepted those of them that passed import (none: the
	// speaker imports nothing).
	Announced, Received, Accepted uint64
	// MaxPrefixes is the peer's limit; PrefixBreaches counts the sessions
	// in which the peer sent more (and those closed at the hard limit).
	MaxPrefixes    uint32
	PrefixBreaches int
	// KeepsStalePaths: the router keeps this director's paths from before
	// a graceful restart, as far as the speaker knows
	// (GracefulRestartStatus.Restarted).
	KeepsStalePaths bool `json:",omitempty"`
}
