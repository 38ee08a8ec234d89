package health

import (
	"context"
	"net"
	"net/netip"
	"reflect"
	"time"

	"github.com/lvsd/lvsd/agent/histogram"
)

// WeightHeader is the response header through which a backend asks for a
// weight (0..1000) when its check has WeightHeader set.
const WeightHeader = "X-Load-Balancing-Endpoint-Weight"

// MaxWeight is the largest weight a backend may ask for.
const MaxWeight = 1000

// NoWeight is State.Weight when the target does not report a weight.
const NoWeight = -1

// Limits on what is read from the network.
const (
	maxHeaderBytes = 64 << 10 // HTTP status line and headers
	maxBodyBytes   = 64 << 10 // HTTP body searched for ExpectBody
	maxOutputBytes = 256      // exec output kept for the reason
)

// Check is one probe of a target, already validated by the config layer.
type Check struct {
	Type     string        // tcp | http | https | udp | icmp | dns | exec
	Port     uint16        // 0: the target's port
	Interval time.Duration // > 0
	Timeout  time.Duration // > 0, <= Interval

	// http and https. Method defaults to GET, Path to "/", and the Host
	// header to the target's address (with the port unless it is the
	// scheme's default).
	Method, Path, Host string
	ExpectStatus       [2]int // inclusive range; {0, 0}: {200, 399}
	ExpectBody         string // substring of the first 64 KiB of the body; "": any
	WeightHeader       bool   // read WeightHeader from responses that pass the status check
	// InsecureTLS skips certificate verification for https. When false
	// the certificate must be valid for Host (or for the target's IP when
	// Host is empty) and signed by a system root. A health check proves
	// liveness, not identity, and backend certificates rarely name the
	// backend's own address, so the config layer should default this to
	// true (as keepalived's SSL_GET and ldirectord do).
	InsecureTLS bool
	// TLSServerName, when set, is the name the certificate must be valid
	// for and the SNI sent, instead of Host. TLSRootCAs, when set, are the
	// PEM certificates trusted instead of the system's roots.
	TLSServerName string
	TLSRootCAs    []byte

	// udp: Send is sent as one datagram; a reply must arrive within the
	// timeout and contain ExpectData (empty: any reply). An ICMP port
	// unreachable fails the check at once.
	Send, ExpectData []byte

	// dns: a query over UDP for Query of type QueryType ("A" or "AAAA";
	// empty: AAAA when ExpectAnswer is IPv6, else A). It passes when the
	// reply's RCODE is ExpectRcode (0, NOERROR, by default; 3 is NXDOMAIN)
	// and, if ExpectAnswer is valid, its answer section holds that address.
	Query        string
	QueryType    string
	ExpectRcode  int
	ExpectAnswer netip.Addr

	// exec: Command[0] is run with the arguments Command[1:] (no shell),
	// a filtered environment (execEnv: PATH, locale and time zone, the
	// user's HOME, USER and LOGNAME, LVSD_TARGET_ADDR, LVSD_TARGET_PORT and
	// LVSD_TARGET_KEY), stdin from /dev/null, in its own process group,
	// which is killed when the timeout expires. Exit status 0 passes.
	// ExecUser, when set, is the account it runs as (lvsd's own if nil).
	// Each run opens the program, checks the opened file and runs it
	// (program.Open): with LaxModes (strict_modes: false) whoever may
	// write it or its directories, else only when root alone may.
	Command  []string
	ExecUser *ExecUser
	LaxModes bool
}

// ExecUser is an account an exec check runs as.
type ExecUser struct {
	Name     string
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	Home     string
}

// Target is one thing to check: a backend of a service. Key is unique, e.g.
// "web/10.0.0.11:80".
type Target struct {
	Key string
	// Group is what Monitor.Update replaces the target with (the agent: its
	// service's name).
	Group   string
	Addr    netip.Addr
	Port    uint16
	Checks  []Check
	AtLeast int // healthy needs at least this many passing checks; 0 = all (none: always healthy)
	Rise    int // consecutive passing rounds to become healthy (>= 1)
	Fall    int // consecutive failing rounds to become unhealthy (>= 1)
	// StartDown: the target starts unhealthy and needs Rise passing rounds
	// in a row, the first included; otherwise it starts healthy and its
	// first round decides at once.
	StartDown bool
}

// State is what is known of a target.
type State struct {
	Healthy       bool      // targets start healthy; see Known
	Known         bool      // at least one round finished
	Weight        int       // from the weight header; NoWeight when not reported
	Since         time.Time // of the last transition (or of the first round)
	LastError     string    // reason of the last failing round
	Passes, Fails int       // consecutive passing / failing rounds

	// Rounds and FailedRounds count the rounds since the target was
	// added, LastDuration is the last one's wall time (a round runs its
	// checks at once, so the slowest check's). Transitions counts the
	// changes of Healthy after the first round.
	Rounds, FailedRounds, Transitions uint64
	LastDuration                      time.Duration
	// Durations are the wall times of the rounds of every target of the
	// target's group (Target.Group; the agent's: its service), since the
	// group has had targets: the same for all of them, kept once per
	// group rather than once per target.
	Durations histogram.Durations
}

// Result is the outcome of one run of one check.
type Result struct {
	OK     bool
	Reason string // why it failed; empty when it passed
	// HasWeight is set by checks with WeightHeader whose response passed
	// the status check. Weight is then the value of the header, or
	// NoWeight when the header was absent; BadWeight is the raw value
	// when the header was present but invalid (and Weight must be
	// ignored).
	HasWeight bool
	Weight    int
	BadWeight string
	// Local: the check could not run on this host (no file descriptor
	// left, EMFILE): the round says nothing of the target and is not
	// counted.
	Local bool
}

// A Checker runs one check of one target once. ctx carries the check's
// timeout and is cancelled when the target stops. Check must not keep
// anything open once it returns. A Checker is only used by one goroutine at
// a time.
type Checker interface {
	Check(ctx context.Context) Result
}

// CheckerFunc lets a function be a Checker.
type CheckerFunc func(ctx context.Context) Result

// Check calls f.
func (f CheckerFunc) Check(ctx context.Context) Result { return f(ctx) }

// A Factory builds the Checker for check c of target t.
type Factory func(t *Target, c *Check) Checker

// Dialer opens connections for the tcp, http, https, udp and dns checks;
// *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Clock is the Monitor's source of time.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// failed is a failed Result.
func failed(reason string) Result { return Result{Reason: reason} }

// equalCheck compares checks field by field (reflect.DeepEqual, so that a
// field added later is compared too), treating nil and empty slices alike.
func equalCheck(a, b Check) bool {
	return reflect.DeepEqual(a.normal(), b.normal())
}

func (c Check) normal() Check {
	if len(c.Send) == 0 {
		c.Send = nil
	}
	if len(c.ExpectData) == 0 {
		c.ExpectData = nil
	}
	if len(c.Command) == 0 {
		c.Command = nil
	}
	if len(c.TLSRootCAs) == 0 {
		c.TLSRootCAs = nil
	}
	return c
}

// dst is where check c of target t goes.
func (t *Target) dst(c *Check) netip.AddrPort {
	port := t.Port
	if c.Port != 0 {
		port = c.Port
	}
	return netip.AddrPortFrom(t.Addr.Unmap(), port)
}
