package connsync

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// originsModel is what the origins must behave like: a map of connKey, as
// the origins were before they moved into fixed-size slots.
type originsModel struct {
	m         map[connKey]modelOrigin
	max       int
	nextSweep time.Duration
}

type modelOrigin struct {
	name     string
	deadline time.Duration
}

func (m *originsModel) note(r rec, name string, t time.Duration) {
	if name == "" || !masquerade(r) || peData(r) != nil {
		return
	}
	k := r.key()
	if _, ok := m.m[k]; !ok && len(m.m) >= m.max {
		if t >= m.nextSweep {
			m.sweep(t)
		}
		if len(m.m) >= m.max {
			return
		}
	}
	m.m[k] = modelOrigin{name: name, deadline: time.Duration(deadlineAt(max(0, t+recordTTL(r)))) * time.Second}
}

func (m *originsModel) of(r rec, t time.Duration) string {
	if !masquerade(r) || peData(r) != nil {
		return ""
	}
	e, ok := m.m[r.key()]
	if !ok || e.deadline < t {
		return ""
	}
	return e.name
}

func (m *originsModel) sweep(t time.Duration) {
	m.nextSweep = t + time.Second
	for k, e := range m.m {
		if e.deadline < t {
			delete(m.m, k)
		}
	}
}

// checkOrigins compares o with m for the records of pool, and checks its
// invariants.
func checkOrigins(t *testing.T, o *origins, m *originsModel, pool []rec, now time.Duration) {
	t.Helper()
	if o.len() != len(m.m) {
		t.Fatalf("%d origins, want %d", o.len(), len(m.m))
	}
	for _, r := range pool {
		if got, want := o.of(r, now), m.of(r, now); got != want {
			t.Fatalf("origin of\n% x\nis %q, want %q", r, got, want)
		}
	}
	checkOriginsInvariants(t, o)
}

// checkOriginsInvariants checks the tables' and names' invariants.
func checkOriginsInvariants(t *testing.T, o *origins) {
	t.Helper()
	refs := map[uint8]uint32{}
	checkOriginTable(t, &o.v4, refs)
	checkOriginTable(t, &o.v6, refs)
	for i, name := range o.names.names {
		if o.names.refs[i] != refs[uint8(i)] {
			t.Fatalf("name %d (%q) counts %d origins, %d name it", i, name, o.names.refs[i], refs[uint8(i)])
		}
		if j, ok := o.names.byName[name]; (refs[uint8(i)] != 0) != (ok && j == uint8(i)) {
			t.Fatalf("name %d (%q) is named by %d origins; by name: %d, %v", i, name, refs[uint8(i)], j, ok)
		}
	}
	if len(o.names.byName) > maxNames {
		t.Fatalf("%d names", len(o.names.byName))
	}
}

// checkOriginTable checks that every slot sits where its dist says, that a
// search finds it, and that the count is right; it counts the slots naming
// each name in refs.
func checkOriginTable[K comparable](t *testing.T, tab *originTable[K], refs map[uint8]uint32) {
	t.Helper()
	n := 0
	for i, s := range tab.slots {
		if s.dist == 0 {
			continue
		}
		n++
		refs[s.name]++
		h := tab.hash(s.key)
		if want := (i - tab.home(h) + len(tab.slots)) % len(tab.slots); int(s.dist) != want+1 {
			t.Fatalf("slot at %d: dist %d, %d from home", i, s.dist, want)
		}
		if tab.find(s.key, h) != i {
			t.Fatalf("slot at %d: not found", i)
		}
		if prev := tab.slots[(i+len(tab.slots)-1)%len(tab.slots)]; s.dist > 1 && prev.dist+1 < s.dist {
			t.Fatalf("slot at %d: dist %d after one of %d (not Robin Hood)", i, s.dist, prev.dist)
		}
	}
	if n != tab.count {
		t.Fatalf("%d slots in use, count %d", n, tab.count)
	}
	if len(tab.slots) > minTableLen && tab.count*10 > len(tab.slots)*maxLoad {
		t.Fatalf("%d slots in a table of %d", tab.count, len(tab.slots))
	}
}

// modelOriginRecs are NAT connections of both families and, not tracked,
// DR connections, templates and connections with persistence data.
func modelOriginRecs(n int, rnd *rand.Rand) []rec {
	var out []rec
	for i, c := range modelConns(n) {
		if i%5 != 4 {
			c.flags &^= connFwdMask // NAT
		}
		if i%13 == 0 && c.flags&connFTemplate == 0 {
			c.peName, c.peData = "sip", "x"
		}
		c.timeout = uint32(rnd.IntN(40))
		out = append(out, c.encode())
	}
	return out
}

// TestOriginsModel drives the origins through random notes, expiries and
// sweeps and compares them with the model.
func TestOriginsModel(t *testing.T) {
	for _, tt := range []struct {
		name             string
		max, conns, ops  int
		checkEvery, seed int
	}{
		{"small, full", 40, 120, 4000, 1, 1},
		{"small, not full", 200, 120, 4000, 1, 2},
		{"large, growing and shrinking", 4000, 5000, 30_000, 499, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(tt.seed), 0))
			o := newOrigins(tt.max)
			m := &originsModel{m: map[connKey]modelOrigin{}, max: tt.max}
			pool := modelOriginRecs(tt.conns, rnd)
			now := time.Duration(0)
			for op := range tt.ops {
				switch k := rnd.IntN(1000); {
				case k < 940:
					r := pool[rnd.IntN(len(pool))]
					name := []string{"", "director-a", "director-b", "director-c"}[rnd.IntN(4)]
					o.note(r, name, now)
					m.note(r, name, now)
				case k < 990:
					now += time.Duration(rnd.IntN(3000)) * time.Millisecond
				default:
					o.sweep(now)
					m.sweep(now)
				}
				if op%tt.checkEvery == 0 || op == tt.ops-1 {
					checkOrigins(t, o, m, pool, now)
				}
			}
		})
	}
}

// At most maxNames names are in use: an origin naming another is not
// noted, and one noted before is forgotten rather than left misnamed; a
// name no origin names any more makes room.
func TestOriginNamesAreBounded(t *testing.T) {
	o := newOrigins(1000)
	recs := make([]rec, maxNames+1)
	for i := range recs {
		recs[i] = masq4(fmt.Sprintf("198.51.%d.%d", 100+i/250, i%250+1), 1).encode()
	}
	for i, r := range recs[:maxNames] {
		o.note(r, fmt.Sprint("director-", i), 0)
	}
	o.note(recs[maxNames], "another", 0)
	if got := o.of(recs[maxNames], 0); got != "" || o.len() != maxNames {
		t.Fatalf("a name past %d: origin %q, %d origins", maxNames, got, o.len())
	}
	o.note(recs[0], "another", 0)
	if got := o.of(recs[0], 0); got != "" || o.len() != maxNames-1 {
		t.Fatalf("renamed past %d: origin %q, %d origins", maxNames, got, o.len())
	}
	o.note(recs[maxNames], "another", 0) // director-0's name is free
	if got := o.of(recs[maxNames], 0); got != "another" {
		t.Fatalf("after a name was freed: origin %q", got)
	}
	o.note(recs[1], "another", 0)
	if got := o.of(recs[1], 0); got != "another" || o.len() != maxNames {
		t.Fatalf("renamed to a name in use: origin %q, %d origins", got, o.len())
	}
	checkOriginsInvariants(t, o)
}

// FuzzOrigins notes the origins of any valid datagram's records, several
// times and in turn, in small origins and compares them with the model;
// records of one connection must be one origin's.
func FuzzOrigins(f *testing.F) {
	v4, v6 := masq4("198.51.100.7", 40000), masq4("198.51.100.8", 40001)
	v6 = tcp6("2001:db8::7", 40001)
	v6.flags = 0
	v4.seq = true
	pe := v6
	pe.peData, pe.peName = "id", "sip"
	f.Add(datagram(1, v4.encode(), v6.encode(), pe.encode(), masq4("198.51.100.7", 40000).encode()))
	f.Add(datagram(1, withOrigin(v4.encode(), "director-b"), v4.encode(), withOpts(v4, optFParam|0x20, 1, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, recs, err := parseDatagram(b)
		if err != nil {
			if !errors.Is(err, errInvalid) {
				t.Fatal(err)
			}
			return
		}
		o := newOrigins(3)
		m := &originsModel{m: map[connKey]modelOrigin{}, max: 3}
		for i := range 3 * len(recs) {
			r := recs[(i*7)%len(recs)]
			now := time.Duration(i) * 300 * time.Millisecond
			name := recordOrigin(r, fmt.Sprint("peer-", i%2))
			o.note(r, name, now)
			m.note(r, name, now)
			checkOrigins(t, o, m, recs, now)
		}
		for _, a := range recs {
			for _, b := range recs {
				if !tracked(a) || !tracked(b) || a.v6() != b.v6() {
					continue
				}
				same := a.key() == b.key()
				if a.v6() && (originKey6Of(a) == originKey6Of(b)) != same ||
					!a.v6() && (originKey4Of(a) == originKey4Of(b)) != same {
					t.Fatalf("records\n% x\n% x\nare one connection: %v; their origin keys say otherwise", a, b, same)
				}
			}
		}
	})
}
