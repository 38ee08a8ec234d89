package connsync

import (
	"encoding/binary"
	"time"
)

// Which director a connection started on. A director that forwards a
// connection it got through sync (the routers moved the flow to it) has
// the kernel's IP_VS_CONN_F_SYNC on it, and its master sends that flag
// along (ip_vs_sync_conn sends every flag but HASHED; ip_vs_proc_sync_conn
// sets SYNC on what it creates and never on an existing connection). A
// record without it therefore comes from the connection's first director;
// one with it does not say whose the connection is. FULLNAT under ECMP
// needs to know (the first director's source addresses are the
// connection's), also on a director that joins after the first one was
// lost: so the relay notes the first director of every connection it
// applies, and when its own master sends a synced connection it adds the
// first director's name to the record as an option the kernel skips
// (optOrigin, with IPVS_OPT_F_PARAM: ip_vs_proc_sync_conn ignores unknown
// options with that bit).

const (
	connFSync = 0x0020           // IP_VS_CONN_F_SYNC
	optOrigin = optFParam | 0x10 // lvsd's: the name of the connection's first director
	maxOrigin = maxNameLen       // a node name
	originTTL = 5 * time.Minute  // of a record without a timeout (the kernel's default is 3 min)
	maxNames  = 256              // directors' names kept once each (a cluster has a handful)
)

// origins remembers the first director of the NAT connections applied
// here (only their source addresses depend on it), until their records'
// timeouts pass; at most max.
type origins struct {
	m     map[connKey]originEntry
	max   int
	names map[string]string // one copy of each director's name
}

type originEntry struct {
	name    string
	expires time.Duration // on the engine's clock
}

func newOrigins(max int) *origins {
	return &origins{m: map[connKey]originEntry{}, max: max, names: map[string]string{}}
}

// masquerade reports whether r is a NAT (or FULLNAT) connection's.
func masquerade(r rec) bool {
	return r.flags()&connFwdMask == connFMasq && r.flags()&connFTemplate == 0
}

// note remembers name as the first director of r's connection, seen at t.
func (o *origins) note(r rec, name string, t time.Duration) {
	if name == "" || !masquerade(r) {
		return
	}
	if n, ok := o.names[name]; ok {
		name = n
	} else if len(o.names) < maxNames {
		o.names[name] = name
	}
	k := r.key()
	if _, ok := o.m[k]; !ok && len(o.m) >= o.max {
		o.sweep(t)
		if len(o.m) >= o.max {
			return // the connections' sender still names itself or the origin
		}
	}
	o.m[k] = originEntry{name: name, expires: t + recordTTL(r)}
}

// of returns the first director of r's connection, "" if unknown.
func (o *origins) of(r rec, t time.Duration) string {
	if !masquerade(r) {
		return ""
	}
	e, ok := o.m[r.key()]
	if !ok || e.expires < t {
		return ""
	}
	return e.name
}

// sweep forgets the expired entries.
func (o *origins) sweep(t time.Duration) {
	for k, e := range o.m {
		if e.expires < t {
			delete(o.m, k)
		}
	}
}

func recordTTL(r rec) time.Duration {
	if s := r.timeout(); s != 0 {
		return time.Duration(s) * time.Second
	}
	return originTTL
}

// recordOrigin is the first director of r's connection, which sender
// sent: its origin option, else sender unless the connection came to
// sender through sync, else "" (unknown).
func recordOrigin(r rec, sender string) string {
	if name := r.option(optOrigin); name != "" {
		if checkName(name) != nil {
			return ""
		}
		return name
	}
	if r.flags()&connFSync == 0 {
		return sender
	}
	return ""
}

// option returns the value of r's option typ, "" if it has none.
func (r rec) option(typ byte) string {
	base := recLenV4
	if r.v6() {
		base = recLenV6
	}
	for p := base; p+2 <= len(r); p += 2 + int(r[p+1]) {
		if r[p] == typ {
			return string(r[p+2 : p+2+int(r[p+1])])
		}
	}
	return ""
}

// withOrigin returns a copy of r naming name as its first director, if it
// fits in a relay message; r otherwise.
func withOrigin(r rec, name string) rec {
	if len(name) == 0 || len(name) > maxOrigin || len(r)+2+len(name) > maxRecordLen || r.option(optOrigin) != "" {
		return r
	}
	out := make(rec, 0, len(r)+2+len(name))
	out = append(out, r...)
	out = append(out, optOrigin, byte(len(name)))
	out = append(out, name...)
	vs := binary.BigEndian.Uint16(out[offVerSize:])
	binary.BigEndian.PutUint16(out[offVerSize:], vs&^sverMask|uint16(len(out)))
	return out
}

func (o *origins) len() int { return len(o.m) }
