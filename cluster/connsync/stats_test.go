package connsync

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestWarnRateLimited(t *testing.T) {
	var buf bytes.Buffer
	e, _, _ := testEngine(t, Config{Log: slog.New(slog.NewTextHandler(&buf, nil))})
	for i := range 3 {
		e.deliver([]byte("junk"), t0.Add(time.Duration(i)*time.Second))
	}
	e.deliver([]byte("junk"), t0.Add(warnEvery+time.Second))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "suppressed=0") ||
		!strings.Contains(lines[1], "suppressed=2") {
		t.Fatalf("log:\n%s", buf.String())
	}
	if s := e.st.snapshot(); s.DroppedInvalid != 4 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSummaryOnlyOnNews(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var c counters
	prev, prevSum := c.snapshot(), c.summary()
	c.sentMessages.Add(5) // routine replays: no news
	c.replayedRecords.Add(100)
	logSummary(log, prevSum, prev, c.snapshot(), c.summary())
	if buf.Len() != 0 {
		t.Fatalf("logged replays only:\n%s", buf.String())
	}
	c.masterRecords.Add(3)
	logSummary(log, prevSum, prev, c.snapshot(), c.summary())
	if !strings.Contains(buf.String(), "level=INFO") || !strings.Contains(buf.String(), "master_records=3") {
		t.Fatalf("log:\n%s", buf.String())
	}
	buf.Reset()
	c.droppedOverflow.Add(1)
	logSummary(log, prevSum, prev, c.snapshot(), c.summary())
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "dropped_overflow=1") {
		t.Fatalf("log:\n%s", buf.String())
	}
}
