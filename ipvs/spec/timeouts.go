package spec

import (
	"fmt"
	"strings"
	"time"
)

// Timeouts are IPVS's idle timeouts: how long a connection entry lives
// after the last packet it saw. They are per network namespace, not per
// service: every IPVS service of the namespace (lvsd's and anyone else's)
// shares them. Only three of the kernel's timeouts can be set
// (IPVS_CMD_SET_CONFIG, ip_vs_set_timeout in ip_vs_ctl.c); TCP's other
// states keep theirs (TIME_WAIT 120 s, CLOSE 10 s, CLOSE_WAIT 60 s,
// LAST_ACK 30 s, SYN_RECV 60 s).
type Timeouts struct {
	// TCP is the ESTABLISHED timeout (kernel default 900 s).
	TCP time.Duration
	// TCPFin is the FIN_WAIT timeout (kernel default 120 s): a director
	// that sees only the client's packets (DR, tunnel) keeps a connection
	// the client closed in FIN_WAIT.
	TCPFin time.Duration
	// UDP is the timeout of a UDP flow (kernel default 300 s).
	UDP time.Duration
}

// DefaultTimeouts are the kernel's own (tcp_timeouts and udp_timeouts in
// ip_vs_proto_tcp.c and ip_vs_proto_udp.c).
var DefaultTimeouts = Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}

// MaxTimeout is the longest timeout lvsd sets. The kernel refuses more
// than INT_MAX/HZ seconds with EINVAL, and HZ is 100 to 1000 depending on
// its build (Debian's is 250): INT_MAX/1000 s, about 24.8 days, is
// accepted by every build.
const MaxTimeout = 2147483 * time.Second

// IsZero reports whether t sets nothing.
func (t Timeouts) IsZero() bool { return t == Timeouts{} }

// Validate refuses what the kernel would refuse or silently change: a
// timeout that is negative, not whole seconds (the kernel takes seconds)
// or above MaxTimeout. Zero fields are valid: they mean "unchanged".
func (t Timeouts) Validate() error {
	for _, f := range t.fields() {
		if err := ValidateTimeout(f.value); err != nil {
			return fmt.Errorf("IPVS %s timeout: %w", f.name, err)
		}
	}
	return nil
}

// ValidateTimeout checks one timeout as Validate does.
func ValidateTimeout(d time.Duration) error {
	switch {
	case d < 0 || d > MaxTimeout:
		return fmt.Errorf("%s is not in 1s-%s", d, MaxTimeout)
	case d%time.Second != 0:
		return fmt.Errorf("%s is not a whole number of seconds (the kernel counts seconds)", d)
	}
	return nil
}

// Over returns t with the non-zero fields of o: what the kernel holds
// after SetTimeouts(o) when it held t.
func (t Timeouts) Over(o Timeouts) Timeouts {
	return t.combine(o, func(have, set time.Duration) time.Duration {
		if set != 0 {
			return set
		}
		return have
	})
}

// Differs returns the fields of want that are set and differ from t; zero
// when t already has every timeout want sets.
func (t Timeouts) Differs(want Timeouts) Timeouts {
	return t.combine(want, func(have, w time.Duration) time.Duration {
		if w != 0 && w != have {
			return w
		}
		return 0
	})
}

// Only returns the fields of t that are set in mask: what t held of the
// timeouts mask sets.
func (t Timeouts) Only(mask Timeouts) Timeouts {
	return t.combine(mask, func(have, m time.Duration) time.Duration {
		if m != 0 {
			return have
		}
		return 0
	})
}

// combine applies f to each timeout of t and the same one of o.
func (t Timeouts) combine(o Timeouts, f func(mine, other time.Duration) time.Duration) Timeouts {
	return Timeouts{TCP: f(t.TCP, o.TCP), TCPFin: f(t.TCPFin, o.TCPFin), UDP: f(t.UDP, o.UDP)}
}

// String lists the set fields as "tcp=60s tcp_fin=60s udp=60s", the names
// of lvsd's configuration; "none" when nothing is set.
func (t Timeouts) String() string {
	var parts []string
	for _, f := range t.fields() {
		if f.value != 0 {
			parts = append(parts, f.name+"="+f.value.String())
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

type timeoutField struct {
	name  string
	value time.Duration
}

func (t Timeouts) fields() []timeoutField {
	return []timeoutField{{"tcp", t.TCP}, {"tcp_fin", t.TCPFin}, {"udp", t.UDP}}
}
