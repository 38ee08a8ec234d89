package connsync

import (
	"encoding/binary"
	"hash/maphash"
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
	maxNames  = 256              // directors' names in use at a time (a cluster has a handful)
)

// origins remembers the first director of the NAT connections applied
// here (only their source addresses depend on it), until their records'
// timeouts pass; at most max (origins_table.go).
type origins struct {
	v4    originTable[originKey4]
	v6    originTable[originKey6]
	max   int
	names originNames
	// nextSweep is when a full table may be swept again: a sweep walks
	// every slot, so records arriving at a full table of live origins
	// cause one a second at most.
	nextSweep time.Duration
}

func newOrigins(max int) *origins {
	seed := maphash.MakeSeed()
	return &origins{
		v4: originTable[originKey4]{seed: seed}, v6: originTable[originKey6]{seed: seed},
		max: max, names: originNames{byName: map[string]uint8{}},
	}
}

func (o *origins) len() int { return o.v4.count + o.v6.count }

// masquerade reports whether r is a NAT (or FULLNAT) connection's.
func masquerade(r rec) bool {
	return r.flags()&connFwdMask == connFMasq && r.flags()&connFTemplate == 0
}

// tracked reports whether r's origin is one to remember: a NAT
// connection's without persistence data (see originKey4).
func tracked(r rec) bool { return masquerade(r) && peData(r) == nil }

// note remembers name as the first director of r's connection, seen at t.
func (o *origins) note(r rec, name string, t time.Duration) {
	if name == "" || !tracked(r) {
		return
	}
	deadline := deadlineAt(max(0, t+recordTTL(r)))
	if r.v6() {
		noteIn(o, &o.v6, originKey6Of(r), name, deadline, t)
	} else {
		noteIn(o, &o.v4, originKey4Of(r), name, deadline, t)
	}
}

func noteIn[K comparable](o *origins, tab *originTable[K], k K, name string, deadline uint32, t time.Duration) {
	h := tab.hash(k)
	i := tab.find(k, h)
	if i < 0 && o.len() >= o.max {
		o.sweepFull(t)
		if o.len() >= o.max {
			return // the connections' sender still names itself or the origin
		}
	}
	n, ok := o.names.acquire(name)
	switch {
	case !ok && i >= 0: // no room for another name: forget rather than misname
		o.names.release(tab.slots[i].name)
		tab.removeAt(i)
	case !ok:
	case i >= 0:
		s := &tab.slots[i]
		o.names.release(s.name)
		s.name, s.deadline = n, deadline
	default:
		tab.add(originSlot[K]{key: k, name: n, deadline: deadline}, h, o.max)
	}
}

// of returns the first director of r's connection, "" if unknown.
func (o *origins) of(r rec, t time.Duration) string {
	if !tracked(r) {
		return ""
	}
	if r.v6() {
		return originIn(o, &o.v6, originKey6Of(r), t)
	}
	return originIn(o, &o.v4, originKey4Of(r), t)
}

func originIn[K comparable](o *origins, tab *originTable[K], k K, t time.Duration) string {
	i := tab.find(k, tab.hash(k))
	if i < 0 || time.Duration(tab.slots[i].deadline)*time.Second < t {
		return ""
	}
	return o.names.names[tab.slots[i].name]
}

// sweep forgets the expired entries.
func (o *origins) sweep(t time.Duration) {
	o.nextSweep = t + time.Second
	sweepTable(o, &o.v4, t)
	sweepTable(o, &o.v6, t)
}

// sweepFull sweeps a full table unless it was swept in the last second.
func (o *origins) sweepFull(t time.Duration) {
	if t >= o.nextSweep {
		o.sweep(t)
	}
}

func sweepTable[K comparable](o *origins, tab *originTable[K], t time.Duration) {
	tab.removeIf(func(s *originSlot[K]) bool {
		if time.Duration(s.deadline)*time.Second >= t {
			return false
		}
		o.names.release(s.name)
		return true
	})
}

// originNames holds each director's name once, for as long as an origin
// names it; at most maxNames at a time (a cluster has a handful).
type originNames struct {
	names  [maxNames]string
	refs   [maxNames]uint32 // origins naming each; "" and 0: free
	byName map[string]uint8
}

// acquire returns name's index, counting one more origin naming it, and
// false if it is new and maxNames names are in use.
func (n *originNames) acquire(name string) (uint8, bool) {
	i, ok := n.byName[name]
	if !ok {
		if len(n.byName) >= maxNames {
			return 0, false
		}
		for n.refs[i] != 0 {
			i++
		}
		n.names[i], n.byName[name] = name, i
	}
	n.refs[i]++
	return i, true
}

// release counts one origin fewer naming the name at i.
func (n *originNames) release(i uint8) {
	if n.refs[i]--; n.refs[i] == 0 {
		delete(n.byName, n.names[i])
		n.names[i] = ""
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
