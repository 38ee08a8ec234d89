// Package logging builds lvsd's logger: text or JSON on a writer, or, when
// stderr is the systemd unit's journal stream, journald's native protocol
// with one upper-case field per attribute (journal.go). It also routes
// what libraries log through logrus into the same logger. Writing to the
// journal is a datagram on a local socket; nothing here touches the kernel's
// networking.
package logging

import (
	"io"
	"log/slog"
	"os"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/sirupsen/logrus"
)

// New builds the agent's logger from its log settings (log.level and
// log.format of the agent file). Under systemd (stderr is the unit's
// journal stream) records go to journald natively, every attribute its own
// field (SERVICE=web OP=add-destination ERR=…), so
// `journalctl -u lvsd SERVICE=web` selects them; should the journal socket
// be missing, records go to w as text and a line there says why. Elsewhere
// records go to w in log.format.
func New(w io.Writer, logLevel, logFormat string) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(logLevel))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if logFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	if w == os.Stderr && stderrIsJournal() {
		h = newJournalHandler(journal.Send, h, level)
	}
	log := slog.New(h)
	routeLogrus(log)
	return log
}

// routeLogrus sends what libraries log through logrus's global logger
// (moby/ipvs) to log at debug level, instead of as text lines on stderr
// that bypass the journal's fields. Debug, because their failures reach
// lvsd as errors anyway, and because moby/ipvs warns at every start that
// modprobe found no modules: under lvsd.service (ProtectKernelModules=yes)
// it cannot see them, and systemd-modules-load has loaded them already.
func routeLogrus(log *slog.Logger) {
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.DebugLevel)
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(logrusHook{log.With("logger", "logrus")})
}

// logrusHook forwards logrus entries to slog.
type logrusHook struct{ log *slog.Logger }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusHook) Fire(e *logrus.Entry) error {
	args := make([]any, 0, 2*len(e.Data))
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.log.Debug(e.Message, args...)
	return nil
}
