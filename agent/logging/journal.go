package logging

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// stderrIsJournal: systemd sets JOURNAL_STREAM to the device and inode of
// the stream it connected to stdout/stderr (an unset or mismatching value
// means stderr was redirected, e.g. by the operator).
func stderrIsJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return ok && err == nil
}

// journalSend is journal.Send's signature: message, priority, fields.
type journalSend func(msg string, p journal.Priority, fields map[string]string) error

// journalHandler is a slog.Handler writing to journald's native socket. It
// exists because the journal drops fields whose names are not upper case
// (`^[A-Z_][A-Z0-9_]*$`) while lvsd's keys are lower case, and because a
// journal handler that cannot reach the socket must not lose records
// silently: each record that cannot be sent goes to the fallback handler
// (stderr), with one notice when that starts and one when it ends.
type journalHandler struct {
	send     journalSend
	fallback slog.Handler // same attrs and groups as this handler
	level    slog.Leveler
	fields   []field // from WithAttrs, already named
	prefix   string  // field name prefix from WithGroup: "GROUP_"
	failing  *atomic.Bool
}

type field struct{ name, value string }

// syslogIdentifier is what `journalctl -t lvsd` selects on.
const syslogIdentifier = "lvsd"

func newJournalHandler(send journalSend, fallback slog.Handler, level slog.Leveler) *journalHandler {
	return &journalHandler{send: send, fallback: fallback, level: level, failing: new(atomic.Bool)}
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *journalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.fields = appendFields(append([]field(nil), h.fields...), h.prefix, attrs)
	c.fallback = h.fallback.WithAttrs(attrs)
	return &c
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "_"
	c.fallback = h.fallback.WithGroup(name)
	return &c
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	fields := map[string]string{"SYSLOG_IDENTIFIER": syslogIdentifier}
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		fields["CODE_FILE"], fields["CODE_LINE"], fields["CODE_FUNC"] = f.File, strconv.Itoa(f.Line), f.Function
	}
	for _, f := range h.fields {
		fields[f.name] = f.value
	}
	var attrs []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	for _, f := range appendFields(nil, h.prefix, attrs) {
		fields[f.name] = f.value
	}
	err := h.send(r.Message, priority(r.Level), fields)
	if err == nil {
		if h.failing.CompareAndSwap(true, false) {
			h.notice(ctx, slog.LevelInfo, "the journal is reachable again; logging there")
		}
		return nil
	}
	if !h.failing.Swap(true) {
		h.notice(ctx, slog.LevelWarn, "cannot write to the journal; logging to stderr until it is back", "err", err)
	}
	return h.fallback.Handle(ctx, r)
}

// notice writes a record about the journal itself to the fallback.
func (h *journalHandler) notice(ctx context.Context, l slog.Level, msg string, args ...any) {
	r := slog.NewRecord(time.Now(), l, msg, 0)
	r.Add(args...)
	_ = h.fallback.Handle(ctx, r)
}

// priority maps slog levels to syslog priorities (journalctl -p).
func priority(l slog.Level) journal.Priority {
	switch {
	case l < slog.LevelInfo:
		return journal.PriDebug
	case l < slog.LevelWarn:
		return journal.PriInfo
	case l < slog.LevelError:
		return journal.PriWarning
	}
	return journal.PriErr
}

// appendFields renders attrs as journal fields; a group's attributes are
// named GROUP_KEY.
func appendFields(dst []field, prefix string, attrs []slog.Attr) []field {
	for _, a := range attrs {
		v := a.Value.Resolve()
		if v.Kind() == slog.KindGroup {
			p := prefix
			if a.Key != "" {
				p += a.Key + "_"
			}
			dst = appendFields(dst, p, v.Group())
			continue
		}
		if a.Key == "" {
			continue
		}
		var s string
		switch v.Kind() {
		case slog.KindTime:
			s = v.Time().Format(time.RFC3339Nano)
		default:
			s = v.String()
		}
		dst = append(dst, field{fieldName(prefix + a.Key), s})
	}
	return dst
}

// reserved are fields the handler or journald set themselves; an attribute
// of the same name gets the prefix LVSD_ instead of overwriting them.
var reserved = map[string]bool{"MESSAGE": true, "PRIORITY": true, "SYSLOG_IDENTIFIER": true,
	"CODE_FILE": true, "CODE_LINE": true, "CODE_FUNC": true}

// fieldName turns a slog key into a journal field name journald accepts:
// upper case letters, digits and '_', not starting with '_' (journald
// reserves those for the fields it sets) or a digit, at most 64 bytes.
func fieldName(key string) string {
	var b strings.Builder
	for _, c := range key {
		switch {
		case c >= 'a' && c <= 'z':
			b.WriteRune(c - 'a' + 'A')
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	name := strings.TrimLeft(b.String(), "_")
	if name == "" || name[0] >= '0' && name[0] <= '9' || reserved[name] {
		name = "LVSD_" + name
	}
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}
