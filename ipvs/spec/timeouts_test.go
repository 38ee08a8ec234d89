package spec

import (
	"strings"
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
