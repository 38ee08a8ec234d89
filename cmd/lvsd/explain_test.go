package main

import (
	"bytes"
	"testing"

	"github.com/lvsd/lvsd/agent/views"
)

// The verdict comes first and says what decided; the destinations follow
// in the kernel's order with their slots.
func TestWriteExplanation(t *testing.T) {
	dests := []views.ExplainedBackend{
		{DestinationStatus: views.DestinationStatus{Address: "10.0.0.12:80", Weight: 0, Health: "unhealthy", HealthError: "http: status 503"},
			SlotWeight: 2, Slots: 1365},
		{DestinationStatus: views.DestinationStatus{Address: "10.0.0.11:80", Weight: 4, Health: "healthy"}, SlotWeight: 4, Slots: 2728},
	}
	base := views.Explanation{Client: "192.0.2.7:51000", Service: "web", IPVSService: "tcp:10.0.0.50:80", Scheduler: "mh",
		Flags: "mh-fallback,mh-port", HashesPort: true, Destinations: dests}
	for _, tc := range []struct {
		name string
		edit func(*views.Explanation)
		want string
	}{
		{"maglev, rehashed", func(x *views.Explanation) {
			x.Decided, x.Backend, x.Slot, x.SlotOwner, x.Rehashed = "maglev", "10.0.0.11:80", 17, "10.0.0.12:80", 2
		}, `service web (tcp:10.0.0.50:80, scheduler mh mh-fallback,mh-port)
192.0.2.7:51000 -> 10.0.0.11:80: Maglev slot 17 of 4093, from the client's address and source port
the slot's holder 10.0.0.12:80 takes no new connections: mh-fallback looked 2 more times
destinations in the kernel's order (the Maglev table depends on it):
  10.0.0.12:80           weight 0, slot weight 2, 1365 slots; weight 0: no new connections, unhealthy (http: status 503)
  10.0.0.11:80           weight 4, slot weight 4, 2728 slots; takes new connections, healthy
`},
		{"connection", func(x *views.Explanation) {
			x.Decided, x.Backend = "connection", "10.0.0.12:80"
			x.Connection = &views.ExplainedConn{Backend: "10.0.0.12:80", State: "ESTABLISHED", Expires: 899}
		}, `service web (tcp:10.0.0.50:80, scheduler mh mh-fallback,mh-port)
192.0.2.7:51000 -> 10.0.0.12:80: an existing connection entry (ESTABLISHED, expires in 899s) decides, whatever the scheduler would choose
destinations in the kernel's order (the Maglev table depends on it):
  10.0.0.12:80           weight 0, slot weight 2, 1365 slots; weight 0: no new connections, unhealthy (http: status 503)
  10.0.0.11:80           weight 4, slot weight 4, 2728 slots; takes new connections, healthy
`},
		{"client address", func(x *views.Explanation) {
			x.Decided, x.Backend, x.Slot = "maglev", "10.0.0.11:80", 17
			x.ClientAddress = "the real server's applications see 192.0.2.7:51000: the director's TOA program on eth0 adds it"
		}, `service web (tcp:10.0.0.50:80, scheduler mh mh-fallback,mh-port)
192.0.2.7:51000 -> 10.0.0.11:80: Maglev slot 17 of 4093, from the client's address and source port
client address: the real server's applications see 192.0.2.7:51000: the director's TOA program on eth0 adds it
destinations in the kernel's order (the Maglev table depends on it):
  10.0.0.12:80           weight 0, slot weight 2, 1365 slots; weight 0: no new connections, unhealthy (http: status 503)
  10.0.0.11:80           weight 4, slot weight 4, 2728 slots; takes new connections, healthy
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := base
			tc.edit(&x)
			var b bytes.Buffer
			if err := writeExplanation(&b, x); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
}
