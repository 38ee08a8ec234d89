package connsync

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The lags are numbers of seconds in JSON, and read back as they were.
func TestStatsJSONSeconds(t *testing.T) {
	for _, c := range []struct {
		last, max time.Duration
		want      string
	}{
		{3 * time.Millisecond, 1500 * time.Millisecond, `"last_lag_seconds":0.003,"max_lag_seconds":1.5`},
		{0, 0, `"last_lag_seconds":0,"max_lag_seconds":0`},
	} {
		in := Stats{Pushes: 4, LastLag: c.last, MaxLag: c.max}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.want) || strings.Contains(string(b), "_ns") || !strings.Contains(string(b), `"pushes":4`) {
			t.Errorf("%s, want %s in it and no _ns", b, c.want)
		}
		var out Stats
		if err := json.Unmarshal(b, &out); err != nil || out != in {
			t.Errorf("read back %+v (%v), want %+v", out, err, in)
		}
	}
}

// The anti-entropy counters are in the stats JSON under stable names.
func TestStatsJSONAntiEntropy(t *testing.T) {
	in := Stats{SummariesSent: 1, SummariesReceived: 2, MissingMessages: 3, RequestsSent: 4, RequestsReceived: 5,
		RequestsRefused: 6, ResentRecords: 7, FallbackReplays: 8}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"summaries_sent":1`, `"summaries_received":2`, `"missing_messages":3`, `"requests_sent":4`,
		`"requests_received":5`, `"requests_refused":6`, `"resent_records":7`, `"fallback_replays":8`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %s", b, want)
		}
	}
	var out Stats
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("read back %+v (%v), want %+v", out, err, in)
	}
}
