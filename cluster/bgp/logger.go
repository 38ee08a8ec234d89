package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// gobgpLogger adapts GoBGP's logger to slog. GoBGP's Info is chatty
// (every configuration step), so it becomes Debug; the Speaker logs
// session changes itself. "Peer Down" carries the reason of a flap, which
// GoBGP's API does not expose: it is passed to onPeerDown.
type gobgpLogger struct {
	log        *slog.Logger
	onPeerDown func(peer, reason string)
}

func (l *gobgpLogger) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	if msg == "Peer Down" && l.onPeerDown != nil {
		key, _ := fields["Key"].(string)
		reason, _ := fields["Reason"].(string)
		l.onPeerDown(key, reason)
	}
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		v := fields[k]
		switch {
		case k == "Key" && fields["Topic"] == "Peer":
			k = "peer"
		case k == "Error" || k == "Err":
			k = "err"
		default:
			k = strings.ToLower(k)
		}
		if s, ok := v.(fmt.Stringer); ok {
			v = s.String()
		}
		attrs = append(attrs, k, v)
	}
	l.log.Log(context.Background(), level, "gobgp: "+msg, attrs...)
}

func (l *gobgpLogger) Panic(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelError, msg, fields)
	panic("gobgp: " + msg)
}

// Fatal would exit the process in GoBGP's own logger; a panic keeps the
// stack and still ends lvsd (systemd restarts it).
func (l *gobgpLogger) Fatal(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelError, msg, fields)
	panic("gobgp: " + msg)
}

func (l *gobgpLogger) Error(msg string, fields gobgplog.Fields) { l.emit(slog.LevelError, msg, fields) }
func (l *gobgpLogger) Warn(msg string, fields gobgplog.Fields)  { l.emit(slog.LevelWarn, msg, fields) }
func (l *gobgpLogger) Info(msg string, fields gobgplog.Fields)  { l.emit(slog.LevelDebug, msg, fields) }
func (l *gobgpLogger) Debug(msg string, fields gobgplog.Fields) {
	l.emit(slog.LevelDebug-4, msg, fields)
}

// SetLevel is ignored: the slog handler filters.
func (l *gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel tells GoBGP which messages to build at all.
func (l *gobgpLogger) GetLevel() gobgplog.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug-4) {
		return gobgplog.DebugLevel
	}
	return gobgplog.InfoLevel
}
