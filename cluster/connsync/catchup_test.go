package connsync

import (
	"log/slog"
	"testing"
	"time"
)

// TestCatchUp: a starting director has caught up once every director it
// heard has ended its replay (or left), or the limit has passed; then it
// stays caught up whatever joins later.
func TestCatchUp(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name  string
		steps func(c *catchUp)
		at    time.Duration
		want  bool
	}{
		{"nobody heard", func(c *catchUp) {}, 0, true},
		{"a heard, no replay yet", func(c *catchUp) { c.joined("a") }, time.Second, false},
		{"a replayed", func(c *catchUp) { c.joined("a"); c.ended("a") }, time.Second, true},
		{"a's end marker came, its records not yet in the kernel", func(c *catchUp) { c.joined("a"); c.markerCame("a") }, time.Second, false},
		{"a replayed before it was heard", func(c *catchUp) { c.ended("a"); c.joined("a") }, time.Second, true},
		{"a replayed, b not", func(c *catchUp) { c.joined("a"); c.joined("b"); c.ended("a") }, time.Second, false},
		{"b left", func(c *catchUp) { c.joined("a"); c.joined("b"); c.ended("a"); c.left("b") }, time.Second, true},
		{"limit passed", func(c *catchUp) { c.joined("a") }, 15 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCatchUp(start, 15*time.Second, slog.New(slog.DiscardHandler))
			tt.steps(c)
			if got := c.caughtUp(start.Add(tt.at)); got != tt.want {
				t.Fatalf("caught up %v, want %v", got, tt.want)
			}
			c.joined("late")
			if tt.want && !c.caughtUp(start.Add(tt.at)) {
				t.Fatal("a director heard after catching up made it wait again")
			}
		})
	}
}

// TestRelayCatchUp: b starts while a has connections. b waits for a's
// replay; once a's end marker arrives, a's records are in b's backup
// daemon and b has caught up.
func TestRelayCatchUp(t *testing.T) {
	a := startNode(t, "a", Config{})
	a.socks.master <- datagram(1, tcp4("198.51.100.7", 40000).encode())
	waitFor(t, func() bool { return a.Stats().CacheSize == 1 })

	b := startNode(t, "b", Config{})
	b.MemberJoined("a") // b hears a
	if b.CaughtUp() {
		t.Fatal("b caught up before a replayed anything")
	}
	connect(a, b)
	a.MemberJoined("b") // a hears b: replays its cache, then the end marker
	waitFor(t, b.CaughtUp)
	got := b.socks.waitWritten(t, 0)
	if len(got) == 0 {
		t.Fatal("b caught up before a's record reached its backup daemon")
	}

}
