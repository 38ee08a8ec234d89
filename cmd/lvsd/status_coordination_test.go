package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
)

func TestWriteHeldChange(t *testing.T) {
	now := time.Unix(1012, 0)
	for _, tc := range []struct {
		name string
		held *agent.HeldChange
		want string
	}{
		{name: "none"},
		{name: "two services, one director of an earlier release",
			held: &agent.HeldChange{Since: time.Unix(1000, 0), Wait: "30s",
				Lagging: map[string][]string{"web": {"director2", "director3"}, "api": nil}, Unknown: []string{"old"}},
			want: "configuration change HELD until every live director has it (12s of at most 30s):\n" +
				"  api: new definition waits for directors not compared yet (12s)\n" +
				"  web: new definition waits for director2, director3 (12s)\n" +
				"  not waited for (no comparable digest, an earlier release): old\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeHeldChange(&b, tc.held, now)
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}
