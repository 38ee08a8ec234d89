package program

import (
	"bytes"
	"strings"
	"sync"
)

// DefaultPath is the PATH of a program when lvsd has none.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env is what a program inherits of lvsd's environment: PATH (DefaultPath
// if lvsd has none), the locale and the time zone, and with account also
// HOME, USER and LOGNAME (leave them out for a program run as another
// user, which gets that user's). Nothing else: under systemd lvsd's
// environment holds NOTIFY_SOCKET, the credentials directory, the journal
// stream, and whatever an operator put there for lvsd alone.
func Env(environ []string, account bool) []string {
	var env []string
	path := DefaultPath
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH":
			path = kv
		case name == "LANG" || name == "TZ" || strings.HasPrefix(name, "LC_"):
			env = append(env, kv)
		case account && (name == "HOME" || name == "USER" || name == "LOGNAME"):
			env = append(env, kv)
		}
	}
	return append(env, path)
}

// Output keeps the first Max bytes written to it: a program's stdout and
// stderr share one. Safe for concurrent writes.
type Output struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *Output) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.Max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Line is what was kept, on one line (runs of white space become one
// space).
func (w *Output) Line() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(strings.Fields(w.buf.String()), " ")
}
