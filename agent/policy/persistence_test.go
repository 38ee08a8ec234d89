package policy

import "testing"

// Each case quotes the cell of seed 000's table "健康状况不佳的后端的连接持久性"
// (connection persistence on unhealthy backends) that it checks.
func TestPersists(t *testing.T) {
	conn := func(proto, affinity string) Tracking { return Tracking{Protocol: proto, Affinity: affinity} }
	session := func(proto, affinity string) Tracking {
		return Tracking{Protocol: proto, PerSession: true, Affinity: affinity}
	}
	cases := []struct {
		name string
		p    Persistence
		t    Tracking
		want bool
	}{
		// DEFAULT_FOR_PROTOCOL × PER_CONNECTION: "TCP：连接持续存在于运行状况不佳的后端上（所有会话亲和性）"
		{"default, per-connection, TCP, affinity none: persists", DefaultForProtocol, conn("tcp", "none"), true},
		{"default, per-connection, TCP, affinity client-ip: persists", DefaultForProtocol, conn("tcp", "client-ip"), true},
		{"default, per-connection, TCP, affinity client-ip-proto: persists", DefaultForProtocol, conn("tcp", "client-ip-proto"), true},
		// "所有其他协议：连接始终不持续存在于运行状况不佳的后端上"
		{"default, per-connection, UDP: never persists", DefaultForProtocol, conn("udp", "none"), false},
		{"default, per-connection, UDP, affinity client-ip: never persists", DefaultForProtocol, conn("udp", "client-ip"), false},
		// SCTP is connection-oriented: as TCP (GCP API: "TCP and SCTP").
		{"default, per-connection, SCTP: persists as TCP", DefaultForProtocol, conn("sctp", "none"), true},
		// One IPVS service carries TCP and UDP: keep what can be kept.
		{"default, per-connection, any: follows TCP", DefaultForProtocol, conn("any", "none"), true},
		// DEFAULT_FOR_PROTOCOL × PER_SESSION: "TCP：如果会话亲和性为 NONE 或 CLIENT_IP_PORT_PROTO"
		{"default, per-session, TCP, affinity none: persists", DefaultForProtocol, session("tcp", "none"), true},
		{"default, per-session, TCP, affinity client-ip-port-proto: persists", DefaultForProtocol, session("tcp", "client-ip-port-proto"), true},
		{"default, per-session, TCP, affinity client-ip: never persists", DefaultForProtocol, session("tcp", "client-ip"), false},
		{"default, per-session, TCP, affinity client-ip-proto: never persists", DefaultForProtocol, session("tcp", "client-ip-proto"), false},
		// "所有其他协议：连接始终不持续存在于运行状况不佳的后端上"
		{"default, per-session, UDP: never persists", DefaultForProtocol, session("udp", "none"), false},
		// NEVER_PERSIST: "所有协议：连接始终不持续存在于运行状况不佳的后端上"
		{"never, per-connection, TCP: never persists", NeverPersist, conn("tcp", "none"), false},
		{"never, per-session, TCP: never persists", NeverPersist, session("tcp", "client-ip-port-proto"), false},
		{"never, per-connection, UDP: never persists", NeverPersist, conn("udp", "client-ip"), false},
		// ALWAYS_PERSIST × PER_CONNECTION: connections persist (TCP: all session affinities).
		{"always, per-connection, TCP: persists", AlwaysPersist, conn("tcp", "client-ip"), true},
		{"always, per-connection, UDP: persists", AlwaysPersist, conn("udp", "client-ip"), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.p.Validate(c.t); err != nil {
				t.Fatal(err)
			}
			if got := c.p.Persists(c.t); got != c.want {
				t.Errorf("Persists = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPersistenceValidate(t *testing.T) {
	// ALWAYS_PERSIST × PER_SESSION: "无法进行配置" (cannot be configured).
	if err := AlwaysPersist.Validate(Tracking{Protocol: "tcp", PerSession: true, Affinity: "client-ip"}); err == nil {
		t.Error("always with per-session tracking accepted")
	}
	if err := Persistence("sometimes").Validate(Tracking{Protocol: "tcp"}); err == nil {
		t.Error("an unknown setting accepted")
	}
}

func TestPool(t *testing.T) {
	cases := []struct {
		backends, eligible string
		want               Pool
	}{
		{"P+ P+ F+", "110", PoolPrimary},
		{"P- P- F+", "001", PoolFailover},
		{"P- P- F-", "000", PoolNone},
		{"P+ F+", "11", PoolFailover}, // no failover policy: mixed sets count as failover
	}
	for _, c := range cases {
		var r Result
		for _, ch := range c.eligible {
			r.Eligible = append(r.Eligible, ch == '1')
		}
		if got := r.Pool(backends(t, c.backends)); got != c.want {
			t.Errorf("%s eligible %s: pool %v, want %v", c.backends, c.eligible, got, c.want)
		}
	}
}
