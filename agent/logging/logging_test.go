package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestLogrusRouted: moby/ipvs's logrus warnings become slog debug records.
func TestLogrusRouted(t *testing.T) {
	var b bytes.Buffer
	routeLogrus(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	logrus.WithField("module", "ip_vs").Warn("Running modprobe ip_vs failed")
	if want := `level=DEBUG msg="Running modprobe ip_vs failed" logger=logrus module=ip_vs`; !strings.Contains(b.String(), want) {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
