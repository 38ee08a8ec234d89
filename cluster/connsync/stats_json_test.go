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
