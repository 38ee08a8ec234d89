package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
)

func TestWriteHeldChange(t *testing.T) {
	loaded := time.Date(2026, 12, 5, 11, 45, 0, 0, time.UTC)
	now := loaded.Add(12 * time.Second)
	for _, tc := range []struct {
		name string
		held *agent.HeldChange
		want string
	}{
		{name: "none"},
		{name: "one service, with its deadline",
			held: &agent.HeldChange{Since: loaded, Wait: "30s", Until: loaded.Add(30 * time.Second),
				Lagging: map[string][]string{"web": {"director2"}}},
			want: "configuration change HELD until every live director has it (12s of at most 30s, in force at the latest at 2026-12-05 11:45:30):\n" +
				"  web: new definition waits for director2 (12s)\n"},
		{name: "two services, one director of an earlier release; an agent that does not say until when",
			held: &agent.HeldChange{Since: loaded, Wait: "30s",
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
