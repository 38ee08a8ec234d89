// Package api is lvsd's local control socket: HTTP over a unix socket that
// only root may open (mode 0600). The running agent serves it; the CLI
// (`lvsd status`, `lvsd drain`, …) is its client. An optional second
// socket, mode 0660 with a configured group, answers only what reads
// (ReadOnly), for monitoring tools. Nothing here listens on the network.
package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
)

// SchemaVersion is the "schema" of every JSON object the local API answers
// (and `lvsd ... --json` prints). It goes up when a field is removed or
// renamed, or changes its meaning or unit; adding a field does not change
// it, so readers must ignore fields they do not know. Durations are numbers
// of seconds in fields named *_seconds; times are RFC 3339.
const SchemaVersion = 1

// Listen creates the socket at path with mode 0600, replacing a stale socket
// left by a dead agent but refusing to take over one a live agent answers on,
// or to remove anything that is not a socket.
func Listen(path string) (net.Listener, error) { return listen(path, -1) }

// ListenGroup creates the socket at path as Listen does, then hands it to
// group gid with mode 0660: the group's members may connect. Serve it with
// a ReadOnly handler.
func ListenGroup(path string, gid int) (net.Listener, error) { return listen(path, gid) }

// listen creates the socket at path, mode 0600, or 0660 owned by group gid
// (gid >= 0).
func listen(path string, gid int) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// The umask makes the socket 0600 from its creation: no window in which
	// another user could connect.
	old := umask(0o177)
	l, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, err
	}
	// Created 0600 and given to the group before it opens: at no time may
	// anyone else connect.
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, err
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// removeStale removes the socket at path if a dead agent left it there.
// Anything else stays: a file that is not a socket is someone's (a
// mistyped api.socket must not cost a file), and a socket that answers, or
// that cannot be told from one that does, belongs to a running agent.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket (%s): not replacing it; remove it or choose another path", path, describeType(fi.Mode()))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: another lvsd seems to be running: something answers on this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: another lvsd may be running: the socket exists and cannot be probed (%w)", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// describeType names a file's type for an error message.
func describeType(m fs.FileMode) string {
	switch t := m.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "type " + t.String()
	}
}

// ReadOnly serves only the GET (and HEAD) requests of h; anything else is
// answered 403: a change needs the control socket.
func ReadOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, fmt.Sprintf("%s %s: this socket is read-only; changes need the control socket (api.socket, root)",
				r.Method, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// LongestWait is the longest a client waits for an answer: the full status
// of 10,000 services, or a table of millions of connections, takes seconds
// to gather and tens of MB to send.
const LongestWait = time.Minute

// limits bound what one client may hold of the server. A local client
// sends a request of a few hundred bytes at once and reads the answer as it
// comes: one that does not is stuck or hostile, and is cut off rather
// than left holding a connection, a goroutine and its buffers.
type limits struct {
	readHeader time.Duration // the request's header
	read       time.Duration // the whole request (no request has a body)
	// write bounds the handler and the answer, from the end of the
	// request: twice LongestWait, so it outlasts every client's own
	// timeout, and a CPU profile of 60 s (docs/operations.md) fits.
	write time.Duration
	idle  time.Duration // a kept-alive connection between requests
	conns int           // connections served at once; more wait to be accepted
}

var defaultLimits = limits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 2 * LongestWait,
	idle: 30 * time.Second, conns: 64}

// Serve answers requests on l with h until ctx ends, then removes the socket.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	return serve(ctx, l, h, defaultLimits)
}

func serve(ctx context.Context, l net.Listener, h http.Handler, lim limits) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read,
		WriteTimeout: lim.write, IdleTimeout: lim.idle}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	err := srv.Serve(netutil.LimitListener(l, lim.conns))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ErrNotRunning is Do's error when no agent answers on the socket (the CLI
// exits 3 then, as LSB status does for a service that is not running).
var ErrNotRunning = errors.New("no lvsd agent is answering")

// Client talks to an agent's socket.
type Client struct {
	Path string
	// MaxAnswer is the largest answer read (default 16 MiB): the full
	// status of 10,000 services is about 30 MB.
	MaxAnswer int64
	// Timeout bounds a request and the reading of its answer (default 10 s).
	Timeout time.Duration
	http    *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	return &Client{Path: path, MaxAnswer: 16 << 20, Timeout: 10 * time.Second, http: &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
}

// Do sends a request to the agent and decodes a JSON answer into out (if
// non-nil). Errors say whether the agent is not running.
func (c *Client) Do(ctx context.Context, method, route string, out any) error {
	body, err := c.Fetch(ctx, method, route)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(body, out)
}

// Fetch sends a request to the agent and returns its answer as sent.
func (c *Client) Fetch(ctx context.Context, method, route string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://lvsd"+route, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && (errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "connection refused")) {
			return nil, fmt.Errorf("%w on %s (is it running?)", ErrNotRunning, c.Path)
		}
		return nil, fmt.Errorf("talking to the agent on %s: %w", c.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxAnswer+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("agent: %s", strings.TrimSpace(string(body)))
	}
	if int64(len(body)) > c.MaxAnswer {
		return nil, fmt.Errorf("agent: the answer is larger than %d MiB", c.MaxAnswer>>20)
	}
	return body, nil
}

// WriteJSON answers with v as indented JSON.
func WriteJSON(w http.ResponseWriter, v any) {
	writeJSON(w, v, "  ")
}

// WriteCompactJSON answers with v as JSON without indentation: for large
// answers, where indenting costs more than encoding (the client indents
// what it prints).
func WriteCompactJSON(w http.ResponseWriter, v any) {
	writeJSON(w, v, "")
}

// WriteCompactJSONList answers like WriteCompactJSON with head, whose
// field key (a list, nil in head so that it encodes as null) is written
// from items one element at a time. The encoder would otherwise hold the
// whole answer in one buffer, and keep it in its pool: 64 MiB for `lvsd
// status --all` at 10,000 services, half again the agent's live heap.
func WriteCompactJSONList[T any](w http.ResponseWriter, head any, key string, items []T) {
	b, err := json.Marshal(head)
	marker := []byte(`"` + key + `":null`)
	i := bytes.Index(b, marker)
	if err != nil || i < 0 {
		http.Error(w, fmt.Sprintf("encoding the answer: no %q in it (%v)", key, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(b[:i+len(marker)-len("null")])
	bw.WriteByte('[')
	enc := json.NewEncoder(bw)
	for j, it := range items {
		if j > 0 {
			bw.WriteByte(',')
		}
		enc.Encode(it) // its newline is JSON whitespace
	}
	bw.WriteByte(']')
	bw.Write(b[i+len(marker):])
	bw.WriteByte('\n')
	bw.Flush()
}

func writeJSON(w http.ResponseWriter, v any, indent string) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", indent)
	enc.Encode(v)
}

// WithProfiling adds Go's runtime profiles under /debug/pprof/ to h (`curl
// --unix-socket SOCKET http://lvsd/debug/pprof/heap`): where a director's
// memory and CPU go, measured on the running agent. Only for the control
// socket: a profile shows the agent's internals and costs CPU to take.
func WithProfiling(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs, … by name
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
