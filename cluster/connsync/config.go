package connsync

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
	"github.com/lvsd/lvsd/cluster/settings"
)

// Defaults for the zero values of Config.
const (
	DefaultInterface      = "lo"
	DefaultMasterPort     = 8848
	DefaultBackupPort     = 8849
	DefaultResyncInterval = settings.DefaultResyncInterval // the configuration's default too
	// DefaultFullResyncInterval: a full replay of a million connections
	// costs 37 MB per member (docs/ecmp.md), lost messages are sent again
	// within seconds without it (antientropy.go).
	DefaultFullResyncInterval = 10 * time.Minute
	DefaultMaxEntries         = 1 << 20
	DefaultFlushDelay         = 5 * time.Millisecond
	DefaultMaxRate            = 4000
	DefaultLogInterval        = time.Minute
	DefaultPushDelay          = 20 * time.Millisecond
	DefaultMaxAge             = 10 * time.Second
	DefaultMaxClockSkew       = 2 * time.Second
	// DefaultCatchUpLimit bounds how long a starting director waits for
	// the others' replays: at DefaultMaxRate, about 1.7 million
	// connections.
	DefaultCatchUpLimit = 15 * time.Second

	// defaultTimeout is how long a record with timeout 0 is kept: the
	// kernel's own fallback for such records (ip_vs_proc_conn).
	defaultTimeout = 3 * time.Minute
	// deliveryQueue bounds the relay messages waiting for Run.
	deliveryQueue = 2048
)

// DefaultGroup is the kernel's sync group, IP_VS_SYNC_GROUP.
var DefaultGroup = netip.AddrFrom4([4]byte{224, 0, 0, 81})

// Config configures a Relay. Zero values take the defaults above.
type Config struct {
	// Interface is where both sync daemons run (mcast_ifn); "lo" keeps
	// the kernel's traffic on this host.
	Interface string
	// Group is the daemons' multicast group: IPv4 only, since IPv6
	// multicast is not delivered on lo.
	Group netip.Addr
	// MasterPort is where the local master daemon sends; BackupPort is
	// where the local backup daemon listens. They must differ, and with
	// the sysctl sync_ports above 1 the master also uses the ports after
	// MasterPort, which this relay does not read.
	MasterPort, BackupPort uint16
	// SyncID is written into the datagrams for the backup daemon, which
	// drops other IDs unless its own is 0.
	SyncID uint8
	// ResyncInterval is how often every member is sent a summary of this
	// director's messages, which shows a member that lost the last ones
	// (antientropy.go); lost messages are found and sent again without
	// replaying the cache.
	ResyncInterval time.Duration
	// FullResyncInterval is how often the whole cache is replayed to every
	// member anyway, a safety net for what the summaries cannot show (a
	// lost re-send); negative: never.
	FullResyncInterval time.Duration
	// MaxEntries bounds the cache; the least recently updated entry is
	// evicted first.
	MaxEntries int
	// FlushDelay is how long records from the master may wait for more to
	// share their message.
	FlushDelay time.Duration
	// MaxRate is how many relay messages per second replays may send, a
	// broadcast counting once. Records fresh from the master are never
	// held back but use up the rate.
	MaxRate int
	// LogInterval is how often a summary is logged, when there is news.
	LogInterval time.Duration
	// Pusher, when set, is a UDP IPVS service on this host that the relay
	// sends one datagram to (from a new port: a new connection, so a new
	// record) PushDelay after the master's records stop coming. The master
	// sends a buffered record only when the next one needs the room or after
	// its 2 s flush time; that new record pushes the last one out (measured:
	// within 24-36 ms instead of 2.0-2.5 s). Records of the Pusher service
	// are neither cached nor relayed.
	Pusher    netip.AddrPort
	PushDelay time.Duration
	// MaxAge is the oldest relay message taken, by this director's clock
	// (the sender's clock may be behind by up to that much, less transit);
	// MaxClockSkew is how far ahead of this director's clock a sender's
	// may be. Older and later messages are refused: they are replays, or
	// the clocks disagree (docs/cluster.md, threat model).
	MaxAge, MaxClockSkew time.Duration
	// CatchUpLimit is how long a starting director waits at most for the
	// directors it hears to replay their connections to it (CaughtUp).
	CatchUpLimit time.Duration
	// Incarnation tells this relay's messages from an earlier process's;
	// it must grow with every start whatever the clock does, and the
	// caller keeps it across restarts (the cluster node's serves). A
	// receiver takes a lower one than it has seen from this director only
	// once that one has been silent for MaxAge (freshness.go). Zero: the
	// start time in Unix nanoseconds, which does not grow if the clock went
	// back.
	Incarnation uint64
	// Transport is required. Its Name is the sender name of this relay's
	// messages, which must be the name the cluster knows it by.
	Transport Transport
	// Identity signs this relay's messages and, with Directors set, says
	// whose messages to believe: a message must be signed by a key listed
	// under the sender it names (cluster/identity). nil: unsigned, and
	// every key holder believed.
	Identity *identity.Keys
	// Authority says which director may send records of which VIP; nil:
	// the Transport, if it implements Authority (the cluster node does),
	// else every received record is refused.
	Authority Authority
	// Kernel, when set, is checked before and after writing: relay
	// messages wait until the backup daemon runs, and a starting
	// director's catch-up ends only once the kernel's connection table
	// holds the replayed records (confirm.go). nil: every write is taken
	// for applied.
	Kernel Kernel
	// Applied, when set, is handed the connections of every datagram
	// written to the backup daemon, each with the director it started on
	// (origins.go): a FULLNAT director under ECMP creates their conntrack
	// entries from them (agent/peerflows.go). It is called from Run's
	// goroutine and must not block; conns is not used after it returns.
	Applied func(conns []Conn)
	// Log defaults to discarding.
	Log *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	if !c.Group.IsValid() {
		c.Group = DefaultGroup
	}
	if c.MasterPort == 0 {
		c.MasterPort = DefaultMasterPort
	}
	if c.BackupPort == 0 {
		c.BackupPort = DefaultBackupPort
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.ResyncInterval, DefaultResyncInterval}, {&c.FullResyncInterval, DefaultFullResyncInterval}, {&c.FlushDelay, DefaultFlushDelay}, {&c.LogInterval, DefaultLogInterval},
		{&c.PushDelay, DefaultPushDelay}, {&c.MaxAge, DefaultMaxAge}, {&c.MaxClockSkew, DefaultMaxClockSkew},
		{&c.CatchUpLimit, DefaultCatchUpLimit}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxRate == 0 {
		c.MaxRate = DefaultMaxRate
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if !c.Group.Is4() || !c.Group.IsMulticast() {
		errs = append(errs, fmt.Errorf("group %s is not an IPv4 multicast address", c.Group))
	}
	if c.MasterPort == c.BackupPort {
		errs = append(errs, fmt.Errorf("master and backup port are both %d: the backup daemon would read its own master", c.MasterPort))
	}
	if c.Pusher.IsValid() && (!c.Pusher.Addr().Is4() || c.Pusher.Port() == 0) {
		errs = append(errs, fmt.Errorf("pusher %s is not an IPv4 address and port", c.Pusher))
	}
	if c.ResyncInterval < 0 || c.FlushDelay < 0 || c.LogInterval < 0 || c.PushDelay < 0 || c.MaxAge < 0 || c.MaxClockSkew < 0 || c.CatchUpLimit < 0 {
		errs = append(errs, errors.New("intervals must not be negative"))
	}
	if c.MaxEntries < 0 || c.MaxRate < 0 {
		errs = append(errs, errors.New("max entries and max rate must not be negative"))
	}
	if c.Transport == nil {
		errs = append(errs, errors.New("no transport"))
	} else if err := checkName(c.Transport.Name()); err != nil {
		errs = append(errs, fmt.Errorf("this director's name: %w", err))
	}
	if a, ok := c.Transport.(Authority); ok && c.Authority == nil {
		c.Authority = a
	}
	return errors.Join(errs...)
}
