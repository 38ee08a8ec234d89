package policy

import "fmt"

// Persistence is seed 000's "connection persistence on unhealthy backends"
// (健康状况不佳的后端的连接持久性): whether the connections a backend already
// has go on once it is unhealthy while it stays configured.
type Persistence string

// Persistence settings, as lvsd's configuration spells them.
const (
	DefaultForProtocol Persistence = "default-for-protocol" // DEFAULT_FOR_PROTOCOL (the default)
	NeverPersist       Persistence = "never"                // NEVER_PERSIST
	AlwaysPersist      Persistence = "always"               // ALWAYS_PERSIST
)

// Tracking is what the persistence rule reads of a service.
type Tracking struct {
	// Protocol is tcp, udp, sctp or any.
	Protocol string
	// PerSession is seed 000's per-session tracking mode (IPVS persistence);
	// false is per-connection tracking.
	PerSession bool
	// Affinity is the session affinity: none, client-ip, client-ip-proto or
	// client-ip-port-proto.
	Affinity string
}

// Validate rejects the combination the seed's table marks "无法进行配置"
// (cannot be configured): ALWAYS_PERSIST with per-session tracking.
func (p Persistence) Validate(t Tracking) error {
	switch p {
	case DefaultForProtocol, NeverPersist:
		return nil
	case AlwaysPersist:
		if t.PerSession {
			return fmt.Errorf("persistence_on_unhealthy %q cannot be combined with per-session tracking (persistence)", p)
		}
		return nil
	}
	return fmt.Errorf("persistence_on_unhealthy %q is not one of %s, %s, %s", string(p), DefaultForProtocol, NeverPersist, AlwaysPersist)
}

// Persists reports whether the connections of a backend that became
// unhealthy (and so ineligible) go on, following the seed's table:
//
//   - DEFAULT_FOR_PROTOCOL, per-connection tracking: "TCP: connections
//     persist on the unhealthy backend (all session affinities); all other
//     protocols: connections never persist on the unhealthy backend".
//   - DEFAULT_FOR_PROTOCOL, per-session tracking: TCP persists only with
//     session affinity NONE or CLIENT_IP_PORT_PROTO; all other protocols never.
//   - NEVER_PERSIST: "all protocols: connections never persist".
//   - ALWAYS_PERSIST (per-connection only): connections persist.
//
// SCTP is connection-oriented and counts as TCP (GCP's API reference:
// "only for connection-oriented protocols (TCP and SCTP)"). A service of
// protocol any is one IPVS service for every protocol, so one answer must
// serve its TCP and its UDP connections: it follows TCP, since cutting a
// connection that could have been kept is the worse mistake.
func (p Persistence) Persists(t Tracking) bool {
	switch p {
	case NeverPersist:
		return false
	case AlwaysPersist:
		return true
	}
	switch t.Protocol {
	case "tcp", "sctp", "any":
		return !t.PerSession || t.Affinity == "none" || t.Affinity == "client-ip-port-proto"
	}
	return false
}
