package connsync

import (
	"testing"
	"time"
)

// The first director of each applied connection: the sender of a record
// of its own, the name a synced record carries, unknown otherwise (or
// when the name is not one).
func TestAppliedConnsNameTheirOrigin(t *testing.T) {
	var got []Conn
	e, _, _ := testEngine(t, Config{Applied: func(cs []Conn) { got = append(got, cs...) }})
	own, synced, named, bad := tcp4("198.51.100.1", 1), tcp4("198.51.100.2", 1), tcp4("198.51.100.3", 1), tcp4("198.51.100.4", 1)
	synced.flags |= connFSync
	named.flags |= connFSync
	bad.flags |= connFSync
	e.deliver(peerB().message(0, t0, own.encode(), synced.encode(), withOrigin(named.encode(), "a"), withOrigin(bad.encode(), "a\nb")), t0)
	want := []string{"b", "", "a", ""}
	if len(got) != len(want) {
		t.Fatalf("applied %d connections, want %d", len(got), len(want))
	}
	for i, c := range got {
		if c.Origin != want[i] {
			t.Errorf("connection %d from %v: origin %q, want %q", i, c.Client, c.Origin, want[i])
		}
	}
}

// masq4 is tcp4 forwarded by NAT (IP_VS_CONN_F_MASQ, 0), as FULLNAT is.
func masq4(client string, cport uint16) testConn {
	c := tcp4(client, cport)
	c.flags = 0
	return c
}

// A NAT connection this director forwards after getting it through sync
// goes out naming its first director, which the relay noted when it
// applied the connection; a connection of its own, one whose first
// director is unknown, and a DR connection (its source address is no
// director's) go out as the kernel wrote them. Without Config.Applied
// nothing is noted or added.
func TestMasterRecordsNameTheirOrigin(t *testing.T) {
	for _, tracked := range []bool{true, false} {
		cfg := Config{}
		if tracked {
			cfg.Applied = func([]Conn) {}
		}
		e, tr, _ := testEngine(t, cfg)
		moved, unknown, own, dr := masq4("198.51.100.1", 1), masq4("198.51.100.2", 1), masq4("198.51.100.3", 1), tcp4("198.51.100.4", 1)
		e.deliver(peerB().message(0, t0, moved.encode(), dr.encode()), t0) // b's own connections
		moved.flags |= connFSync                                           // … forwarded here now
		dr.flags |= connFSync
		unknown.flags |= connFSync
		e.fromMaster(datagram(1, moved.encode(), unknown.encode(), own.encode(), dr.encode()), t0.Add(time.Second))
		run(e, t0.Add(time.Second))
		msgs := tr.messages()
		if len(msgs) != 1 {
			t.Fatalf("tracked %v: %d messages, want one", tracked, len(msgs))
		}
		m, err := decodeMessage(msgs[0].msg)
		if err != nil || len(m.recs) != 4 {
			t.Fatalf("tracked %v: message %+v, err %v", tracked, m, err)
		}
		wantMoved := ""
		if tracked {
			wantMoved = "b"
		}
		for i, want := range []string{wantMoved, "", "", ""} {
			if o := m.recs[i].option(optOrigin); o != want {
				t.Errorf("tracked %v: record %d names origin %q, want %q", tracked, i, o, want)
			}
			if err := checkRecord(m.recs[i]); err != nil {
				t.Errorf("tracked %v: record %d: %v", tracked, i, err)
			}
		}
		if got := recordOrigin(m.recs[0], "self"); tracked && got != "b" {
			t.Errorf("a receiver takes %q for the moved connection's origin, want b", got)
		}
	}
}

// Origins are kept until the record's timeout and bounded; a full table
// makes room from expired entries only.
func TestOriginsExpireAndAreBounded(t *testing.T) {
	o := newOrigins(2)
	a, b, c := rec(masq4("198.51.100.1", 1).encode()), rec(masq4("198.51.100.2", 1).encode()), rec(masq4("198.51.100.3", 1).encode())
	o.note(a, "x", 0)
	o.note(b, "y", 0)
	o.note(c, "z", time.Second) // full, nothing expired
	if o.of(c, time.Second) != "" || o.of(a, time.Second) != "x" {
		t.Fatalf("full table: %d origins", o.len())
	}
	ttl := 900 * time.Second // masq4's timeout
	if o.of(a, ttl+time.Second) != "" {
		t.Error("an origin outlived its record")
	}
	o.note(c, "z", ttl+time.Second) // a and b have expired: room
	if o.of(c, ttl+time.Second) != "z" || o.len() != 1 {
		t.Errorf("after the sweep: %d origins", o.len())
	}
}
