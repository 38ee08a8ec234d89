package health

import (
	"strings"
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	// rounds: + passes, - fails. want: H healthy, U unhealthy after each.
	tests := []struct {
		name       string
		rise, fall int
		startDown  bool
		rounds     string
		want       string
	}{
		{"first pass confirms healthy", 3, 3, false, "+", "H"},
		{"first fail decides at once despite fall 3", 3, 3, false, "-", "U"},
		{"first fail, then rise 2 to come back", 2, 3, false, "-+-++", "UUUUH"},
		{"fall 3 needs three failures in a row", 2, 3, false, "+--+---", "HHHHHHU"},
		{"rise 2 needs two passes in a row", 2, 1, false, "+-+-++", "HUUUUH"},
		{"rise 1 fall 1 follows every round", 1, 1, false, "+-+--+", "HUHUUH"},
		{"failing longer than fall stays unhealthy", 1, 2, false, "+-----", "HHUUUU"},
		{"zero rise/fall behave as 1", 0, 0, false, "+-+", "HUH"},
		{"fall 2 interrupted by a pass", 3, 2, false, "+-+-+--", "HHHHHHU"},
		{"starting down: rise passes, the first included", 2, 3, true, "++-", "UHH"},
		{"starting down: a first failure changes nothing", 2, 3, true, "-++", "UUH"},
		{"starting down with rise 1: the first pass decides", 1, 3, true, "+", "H"},
		{"starting down: an interrupted rise starts over", 3, 1, true, "++-+++", "UUUUUH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := State{Healthy: !tt.startDown, Weight: NoWeight}
			start := time.Unix(1000, 0)
			var got strings.Builder
			for i, r := range tt.rounds {
				now := start.Add(time.Duration(i) * time.Second)
				prev := st
				var flipped bool
				st, flipped = step(st, r == '+', "reason", tt.rise, tt.fall, tt.startDown, now)
				if !st.Known {
					t.Fatalf("round %d: not Known", i)
				}
				if flipped != (prev.Healthy != st.Healthy || !prev.Known && !tt.startDown) {
					t.Errorf("round %d: flipped=%v but %v -> %v", i, flipped, prev.Healthy, st.Healthy)
				}
				if flipped && !st.Since.Equal(now) || !flipped && !st.Since.Equal(prev.Since) {
					t.Errorf("round %d: Since %v, flipped %v", i, st.Since, flipped)
				}
				if r == '+' && (st.Fails != 0 || st.Passes != prev.Passes+1) ||
					r == '-' && (st.Passes != 0 || st.Fails != prev.Fails+1 || st.LastError != "reason") {
					t.Errorf("round %d: counters %+v after %c", i, st, r)
				}
				if st.Healthy {
					got.WriteByte('H')
				} else {
					got.WriteByte('U')
				}
			}
			if got.String() != tt.want {
				t.Errorf("rounds %s: got %s, want %s", tt.rounds, got.String(), tt.want)
			}
		})
	}
}

func TestNextSlot(t *testing.T) {
	t0 := time.Unix(100, 0)
	s := time.Second
	tests := []struct {
		name string
		now  time.Time
		want time.Time
	}{
		{"round was quick", t0.Add(10 * time.Millisecond), t0.Add(s)},
		{"round ended exactly on the next slot", t0.Add(s), t0.Add(2 * s)},
		{"round overran one slot", t0.Add(1500 * time.Millisecond), t0.Add(2 * s)},
		{"round overran three slots", t0.Add(3200 * time.Millisecond), t0.Add(4 * s)},
	}
	for _, tt := range tests {
		if got := nextSlot(t0, s, tt.now); !got.Equal(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got.Sub(t0), tt.want.Sub(t0))
		}
	}
}

func TestVerdictAtLeast(t *testing.T) {
	checks := []Check{{Type: "http", Port: 80}, {Type: "tcp", Port: 81}, {Type: "icmp"}}
	results := []Result{pass, {Reason: "connection refused"}, {Reason: "timed out"}}
	tests := []struct {
		atLeast int
		want    bool
		reason  string
	}{
		{0, false, "tcp :81: connection refused; icmp: timed out; 1 of 3 checks passed, 3 needed"},
		{1, true, ""},
		{2, false, "tcp :81: connection refused; icmp: timed out; 1 of 3 checks passed, 2 needed"},
		{3, false, "1 of 3 checks passed, 3 needed"},
		{7, false, "1 of 3 checks passed, 3 needed"}, // clamped to all
	}
	for _, tt := range tests {
		m := NewMonitor(nil, WithFactory(func(*Target, *Check) Checker { return &script{results: []Result{pass}} }))
		tg := Target{Key: "k", Port: 8080, Checks: checks, AtLeast: tt.atLeast}
		r := m.newRunner(&tg, m.newSpec(&tg), status{})
		ok, reason := r.verdict(results)
		if ok != tt.want || !strings.Contains(reason, tt.reason) {
			t.Errorf("AtLeast %d: got %v %q, want %v %q", tt.atLeast, ok, reason, tt.want, tt.reason)
		}
	}
}

func TestRoundInterval(t *testing.T) {
	m := NewMonitor(nil, WithFactory(func(*Target, *Check) Checker { return &script{results: []Result{pass}} }))
	tg := Target{Key: "k", Checks: []Check{
		{Type: "tcp", Interval: 5 * time.Second}, {Type: "tcp", Interval: 2 * time.Second}, {Type: "tcp", Interval: 3 * time.Second},
	}}
	if s := m.newSpec(&tg); s.interval != 2*time.Second {
		t.Errorf("round interval %v, want the smallest check interval 2s", s.interval)
	}
}

func TestSpecMatches(t *testing.T) {
	base := Target{Key: "a", Port: 80, Rise: 2, Fall: 3, Checks: []Check{{Type: "udp", Send: []byte("x"), Command: nil}}}
	s := NewMonitor(nil).newSpec(&base)
	base.Checks[0].Send[0] = 'z' // the spec owns a copy
	if s.checks[0].Send[0] != 'x' {
		t.Fatal("spec shares the caller's payload")
	}
	base.Checks[0].Send[0] = 'x'
	tests := []struct {
		name  string
		edit  func(*Target)
		match bool
	}{
		{"same", func(*Target) {}, true},
		{"empty and nil alike", func(t *Target) { t.Checks[0].Command = []string{} }, true},
		{"another key, address and port", func(t *Target) { t.Key, t.Port = "b", 81 }, true},
		{"changed payload", func(t *Target) { t.Checks[0].Send[0] = 'y' }, false},
		{"changed fall", func(t *Target) { t.Fall = 4 }, false},
		{"changed group", func(t *Target) { t.Group = "g" }, false},
		{"start down", func(t *Target) { t.StartDown = true }, false},
		{"one more check", func(t *Target) { t.Checks = append(t.Checks, Check{Type: "tcp"}) }, false},
	}
	for _, tt := range tests {
		tg := base
		tg.Checks = cloneChecks(base.Checks)
		tt.edit(&tg)
		if got := s.matches(&tg); got != tt.match {
			t.Errorf("%s: matches %v, want %v", tt.name, got, tt.match)
		}
	}
}
