package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestTimeoutsValidate(t *testing.T) {
	cases := []struct {
		name string
		in   Timeouts
		err  string // "" = valid
	}{
		{"nothing set", Timeouts{}, ""},
		{"seed 000", Timeouts{TCP: time.Minute, TCPFin: time.Minute, UDP: time.Minute}, ""},
		{"one second", Timeouts{TCP: time.Second}, ""},
		{"the maximum", Timeouts{UDP: MaxTimeout}, ""},
		{"above the maximum", Timeouts{UDP: MaxTimeout + time.Second}, "udp timeout: 596h31m24s is not in 1s-596h31m23s"},
		{"negative", Timeouts{TCPFin: -time.Second}, "tcp_fin timeout: -1s is not in"},
		{"fraction", Timeouts{TCP: 1500 * time.Millisecond}, "tcp timeout: 1.5s is not a whole number of seconds"},
	}
	for _, c := range cases {
		err := c.in.Validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
}

func TestTimeoutsOverAndDiffers(t *testing.T) {
	cases := []struct {
		name            string
		have, want      Timeouts
		after, differs  Timeouts
		wantDescription string
	}{
		{"nothing wanted", DefaultTimeouts, Timeouts{}, DefaultTimeouts, Timeouts{}, "none"},
		{"tcp only", DefaultTimeouts, Timeouts{TCP: 3 * time.Second},
			Timeouts{TCP: 3 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second},
			Timeouts{TCP: 3 * time.Second}, "tcp=3s"},
		{"already there", Timeouts{TCP: time.Minute, TCPFin: time.Minute, UDP: time.Minute}, Timeouts{TCP: time.Minute, UDP: time.Minute},
			Timeouts{TCP: time.Minute, TCPFin: time.Minute, UDP: time.Minute}, Timeouts{}, "tcp=1m0s udp=1m0s"},
		{"one of two differs", Timeouts{TCP: time.Minute, TCPFin: 120 * time.Second, UDP: time.Minute}, Timeouts{TCPFin: time.Minute, UDP: time.Minute},
			Timeouts{TCP: time.Minute, TCPFin: time.Minute, UDP: time.Minute}, Timeouts{TCPFin: time.Minute}, "tcp_fin=1m0s udp=1m0s"},
	}
	for _, c := range cases {
		if got := c.have.Over(c.want); got != c.after {
			t.Errorf("%s: Over = %+v, want %+v", c.name, got, c.after)
		}
		if got := c.have.Differs(c.want); got != c.differs {
			t.Errorf("%s: Differs = %+v, want %+v", c.name, got, c.differs)
		}
		if got := c.want.String(); got != c.wantDescription {
			t.Errorf("%s: String = %q, want %q", c.name, got, c.wantDescription)
		}
	}
}

// The Fake starts at the kernel's defaults, changes only what is set and
// refuses what the kernel refuses without changing anything.
func TestFakeTimeouts(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if got, _ := f.Timeouts(ctx); got != DefaultTimeouts {
		t.Fatalf("fresh fake: %+v, want the kernel's defaults %+v", got, DefaultTimeouts)
	}
	if err := f.SetTimeouts(ctx, Timeouts{TCP: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTimeouts(ctx, Timeouts{UDP: 2 * time.Second, TCP: MaxTimeout + time.Second}); err == nil {
		t.Fatal("a timeout above MaxTimeout was accepted")
	}
	want := Timeouts{TCP: 3 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}
	if got, _ := f.Timeouts(ctx); got != want {
		t.Errorf("after one good and one refused set: %+v, want %+v", got, want)
	}
	if ops := f.Ops(); !slices.Equal(ops, []string{"set-timeouts tcp=3s"}) {
		t.Errorf("ops %q", ops)
	}
}

// The Fake refuses a lower threshold above the upper one, as the kernel
// does with ERANGE, and keeps the thresholds an update sets.
func TestFakeThresholds(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	svc := Service{ServiceKey: ServiceKey{Protocol: TCP, Addr: netip.MustParseAddr("192.0.2.1"), Port: 80}, Scheduler: "mh"}
	if err := f.AddService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	dst := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80}, Weight: 1, Forwarding: DirectRoute}
	for _, bad := range []Destination{{LowerThreshold: 1}, {UpperThreshold: 2, LowerThreshold: 3}} {
		d := dst
		d.UpperThreshold, d.LowerThreshold = bad.UpperThreshold, bad.LowerThreshold
		if err := f.AddDestination(ctx, svc.ServiceKey, d); !errors.Is(err, syscall.ERANGE) {
			t.Errorf("adding %s: error %v, want ERANGE", d.Thresholds(), err)
		}
	}
	dst.UpperThreshold, dst.LowerThreshold = 2, 1
	if err := f.AddDestination(ctx, svc.ServiceKey, dst); err != nil {
		t.Fatal(err)
	}
	dst.UpperThreshold, dst.LowerThreshold = 5, 5
	if err := f.UpdateDestination(ctx, svc.ServiceKey, dst); err != nil {
		t.Fatal(err)
	}
	got, _ := f.Destinations(ctx, svc.ServiceKey)
	if len(got) != 1 || !got[0].SameOptions(dst) {
		t.Errorf("after the update: %+v, want thresholds 5/5", got)
	}
	want := []string{"add-destination tcp:192.0.2.1:80 10.0.0.1:80 weight=1 route upper 2 lower 1",
		"update-destination tcp:192.0.2.1:80 10.0.0.1:80 weight=1 route upper 5 lower 5"}
	if ops := f.Ops()[1:]; !slices.Equal(ops, want) {
		t.Errorf("ops %q, want %q", ops, want)
	}
}
