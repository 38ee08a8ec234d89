package bgp

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"

	"github.com/lvsd/lvsd/cluster/bfd"
)

func TestBFDAction(t *testing.T) {
	cases := []struct {
		name     string
		heldDown bool
		c        bfd.Change
		want     bfdCoupling
	}{
		{"detection expired", false, bfd.Change{Old: bfd.Up, State: bfd.Down, Diag: bfd.DiagDetectionExpired, RemoteState: bfd.Up}, bfdHoldDown},
		{"neighbour said down", false, bfd.Change{Old: bfd.Up, State: bfd.Down, Diag: bfd.DiagNeighborDown, RemoteState: bfd.Down}, bfdHoldDown},
		{"neighbour admin down is no failure", false, bfd.Change{Old: bfd.Up, State: bfd.Down, Diag: bfd.DiagNeighborDown, RemoteState: bfd.AdminDown}, bfdNothing},
		{"our own admin down", false, bfd.Change{Old: bfd.Up, State: bfd.AdminDown}, bfdNothing},
		{"never up: BGP does not wait", false, bfd.Change{Old: bfd.Down, State: bfd.Init}, bfdNothing},
		{"init to down", false, bfd.Change{Old: bfd.Init, State: bfd.Down}, bfdNothing},
		{"already held", true, bfd.Change{Old: bfd.Up, State: bfd.Down, RemoteState: bfd.Up}, bfdNothing},
		{"up again releases", true, bfd.Change{Old: bfd.Init, State: bfd.Up}, bfdRelease},
		{"up without hold", false, bfd.Change{Old: bfd.Init, State: bfd.Up}, bfdNothing},
	}
	for _, tc := range cases {
		if got := bfdAction(tc.heldDown, tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRouterBFDDown(t *testing.T) {
	for reason, want := range map[string]bool{
		"notification-received code 6(cease) subcode 10(undefined)":                 true,
		"notification-received code 6(cease) subcode 10(bfd down)":                  true,
		"notification-sent code 6(cease) subcode 10(undefined)":                     false,
		"notification-received code 6(cease) subcode 3(peer deconfigured)":          false,
		"notification-received code 6(cease) subcode 1(maximum number of prefixes)": false,
		"hold-timer-expired": false,
		"read-failed":        false,
	} {
		if got := routerBFDDown(reason); got != want {
			t.Errorf("routerBFDDown(%q) = %v", reason, got)
		}
	}
}

func TestMD5Counters(t *testing.T) {
	n, err := md5Failures(func() ([]byte, error) { return os.ReadFile("testdata/netstat") })
	if err != nil || n != 7 {
		t.Fatalf("md5Failures = %d, %v; want 7", n, err)
	}
	for _, bad := range []string{"", "TcpExt: A B\nTcpExt: 1\n", "TcpExt: A\nTcpExt: x\n"} {
		if _, err := parseNetstat([]byte(bad)); err == nil {
			t.Errorf("parseNetstat(%q) accepted", bad)
		}
	}
	if _, err := md5Failures(readNetstat); err != nil {
		t.Errorf("this machine's netstat: %v", err)
	}
}

// logRecorder is a slog handler that keeps messages with their attributes.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) find(sub string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func TestGoBGPLoggerAdapter(t *testing.T) {
	rec := &logRecorder{}
	var peer, reason string
	l := &gobgpLogger{log: slog.New(rec), onPeerDown: func(p, r string) { peer, reason = p, r }}
	l.Info("Peer Down", gobgplog.Fields{"Topic": "Peer", "Key": "10.0.0.10", "State": "BGP_FSM_ESTABLISHED",
		"Reason": "hold-timer-expired"})
	if peer != "10.0.0.10" || reason != "hold-timer-expired" {
		t.Errorf("onPeerDown got %q %q", peer, reason)
	}
	if got := rec.find("gobgp: Peer Down"); !strings.HasPrefix(got, "DEBUG") || !strings.Contains(got, "peer=10.0.0.10") ||
		!strings.Contains(got, "reason=hold-timer-expired") {
		t.Errorf("logged %q", got)
	}
	l.Warn("failed to send", gobgplog.Fields{"Topic": "Peer", "Key": "10.0.0.10", "Error": "broken pipe"})
	if got := rec.find("failed to send"); !strings.HasPrefix(got, "WARN") || !strings.Contains(got, "err=broken pipe") {
		t.Errorf("logged %q", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Fatal did not panic")
			}
		}()
		l.Fatal("boom", nil)
	}()
}
