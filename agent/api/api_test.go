package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestSocketIsPrivateAndServes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "lvsd.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Fatalf("socket mode %o, want 600", mode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, map[string]string{"pong": "yes"}) })
	go func() { done <- Serve(ctx, l, mux) }()

	var out map[string]string
	if err := NewClient(path).Do(ctx, "GET", "/v1/ping", &out); err != nil || out["pong"] != "yes" {
		t.Fatalf("ping: %v %v", out, err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another lvsd seems to be running") {
		t.Fatalf("second Listen on a live socket: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A socket file left by a killed agent (nobody answers) is replaced.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	l2, err := Listen(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
	if err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Do(context.Background(), "GET", "/v1/ping", nil); err == nil || !strings.Contains(err.Error(), "is it running") {
		t.Fatalf("client error for a missing agent: %v", err)
	}
}

// The read-only socket is mode 0660 with the configured group, answers
// what reads and refuses every change with 403.
func TestReadOnlySocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "lvsd-ro.sock")
	gid := os.Getgid()
	if os.Geteuid() == 0 {
		gid = 4242 // root may give it any group: prove it is not its own
	}
	l, err := ListenGroup(path, gid)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o660 {
		t.Errorf("socket mode %o, want 660", mode)
	}
	if got := int(fi.Sys().(*syscall.Stat_t).Gid); got != gid {
		t.Errorf("socket group %d, want %d", got, gid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var changed atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, map[string]string{"ok": "yes"}) })
	for _, route := range []string{"POST /v1/drain", "PUT /v1/drain", "DELETE /v1/drain", "POST /v1/backends/drain"} {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) { changed.Store(true) })
	}
	go func() { done <- Serve(ctx, l, ReadOnly(mux)) }()

	c := NewClient(path)
	var out map[string]string
	if err := c.Do(ctx, "GET", "/v1/status", &out); err != nil || out["ok"] != "yes" {
		t.Errorf("GET on the read-only socket: %v %v", out, err)
	}
	for _, m := range []struct{ method, route string }{
		{"POST", "/v1/drain"}, {"PUT", "/v1/drain"}, {"DELETE", "/v1/drain"}, {"POST", "/v1/backends/drain?service=web&backend=10.0.0.11"},
	} {
		err := c.Do(ctx, m.method, m.route, nil)
		if err == nil || !strings.Contains(err.Error(), "this socket is read-only") {
			t.Errorf("%s %s on the read-only socket: %v, want a refusal", m.method, m.route, err)
		}
	}
	if changed.Load() {
		t.Error("a change reached the handler through the read-only socket")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReadOnlyAnswers403(t *testing.T) {
	h := ReadOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, c := range []struct {
		method string
		want   int
	}{{"GET", 204}, {"HEAD", 204}, {"POST", 403}, {"PUT", 403}, {"PATCH", 403}, {"DELETE", 403}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, "/v1/backends/drain", nil))
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.method, w.Code, c.want)
		}
	}
}

func TestWithProfiling(t *testing.T) {
	h := WithProfiling(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "agent "+r.URL.Path) }))
	for _, c := range []struct {
		path, want string
	}{
		{"/v1/status", "agent /v1/status"},
		{"/debug/pprof/heap?debug=1", "heap profile:"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile:"},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, c.path, nil))
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), c.want) {
			t.Errorf("GET %s: %d %.40q, want 200 %q…", c.path, w.Code, w.Body.String(), c.want)
		}
	}
}

// A list written one element at a time is the same JSON as the whole
// answer encoded at once.
func TestWriteCompactJSONList(t *testing.T) {
	type item struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	type answer struct {
		Schema   int     `json:"schema"`
		Services []item  `json:"services"`
		Note     string  `json:"note,omitempty"`
		Others   []item  `json:"others"`
		Ptr      *answer `json:"ptr,omitempty"`
	}
	for _, items := range [][]item{nil, {}, {{"a", 1}}, {{"a", 1}, {"b\"services\":null", 2}, {"c", 3}}} {
		full := answer{Schema: 1, Services: items, Note: `"services":null`, Others: []item{{"x", 9}}}
		want, _ := json.Marshal(full)
		head := full
		head.Services = nil
		w := httptest.NewRecorder()
		WriteCompactJSONList(w, head, "services", items)
		var got bytes.Buffer
		if err := json.Compact(&got, w.Body.Bytes()); err != nil {
			t.Fatalf("%d items: not JSON: %v\n%s", len(items), err, w.Body.String())
		}
		if len(items) == 0 {
			want = bytes.Replace(want, []byte(`"services":null`), []byte(`"services":[]`), 1)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%d items:\n got %s\nwant %s", len(items), got.Bytes(), want)
		}
	}
}

// Listen replaces only a socket a dead agent left: it refuses a live one,
// and leaves whatever else is at the path where it is.
func TestListenReplacesOnlyAStaleSocket(t *testing.T) {
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, path string)
		want    string // in the error; "" when Listen must succeed
		kept    bool   // what was at path must still be there
	}{
		{"nothing", func(*testing.T, string) {}, "", false},
		{"stale socket", func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}, "", false},
		{"live socket", func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, "another lvsd seems to be running", true},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "exists and is not a socket (a regular file)", true},
		{"empty directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "exists and is not a socket (a directory)", true},
		{"symbolic link to a stale socket", func(t *testing.T, path string) {
			target := path + ".target"
			l, err := net.Listen("unix", target)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "exists and is not a socket (a symbolic link)", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lvsd.sock")
			c.prepare(t, path)
			before, _ := os.Lstat(path)
			l, err := Listen(path)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Listen: %v", err)
				}
				l.Close()
				return
			}
			if err == nil {
				l.Close()
				t.Fatalf("Listen succeeded, want an error saying %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q, want the path and %q", err, c.want)
			}
			after, err := os.Lstat(path)
			if err != nil || !os.SameFile(before, after) {
				t.Errorf("%s was replaced or removed (%v)", path, err)
			}
			if c.name == "regular file" {
				if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
					t.Errorf("the file now holds %q (%v)", b, err)
				}
			}
		})
	}
}

// served serves h on a fresh socket with lim until the test ends and
// returns the socket's path.
func served(t *testing.T, h http.Handler, lim limits) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lvsd.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, l, h, lim) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return path
}

func ping(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, map[string]string{"pong": "yes"}) }

// A client that connects and never finishes its request's header is cut
// off after the header timeout; the others are served meanwhile.
func TestSlowClientIsCutOff(t *testing.T) {
	path := served(t, http.HandlerFunc(ping), limits{readHeader: 200 * time.Millisecond, read: time.Second,
		write: 10 * time.Second, idle: time.Second, conns: 4})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/ping HTTP/1.1\r\nHost: lvsd\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := NewClient(path).Do(context.Background(), "GET", "/v1/ping", nil); err != nil {
		t.Errorf("another client while one stalls: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a liveness bound, not a timing assertion
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Errorf("the stalled connection: read %q, %v; want it closed without an answer", b, err)
	}
}

// The read timeout bounds reading the request, not answering it: a handler
// that takes longer still answers, its request's context alive.
func TestSlowHandlerOutlivesReadTimeout(t *testing.T) {
	path := served(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			http.Error(w, "request cancelled", http.StatusInternalServerError)
			return
		}
		ping(w, r)
	}), limits{readHeader: 100 * time.Millisecond, read: 100 * time.Millisecond, write: time.Minute, idle: time.Second, conns: 4})
	var out map[string]string
	if err := NewClient(path).Do(context.Background(), "GET", "/v1/ping", &out); err != nil || out["pong"] != "yes" {
		t.Fatalf("slow answer: %v %v", out, err)
	}
}

// The write timeout outlasts every client's wait and the documented CPU
// profile of 60 s (pprof refuses one as long as the write timeout).
func TestDefaultLimitsAllowTheLongestRequest(t *testing.T) {
	if defaultLimits.write <= LongestWait || defaultLimits.write <= 60*time.Second {
		t.Errorf("write timeout %s, want more than %s and 60s", defaultLimits.write, LongestWait)
	}
	if defaultLimits.readHeader <= 0 || defaultLimits.read <= 0 || defaultLimits.idle <= 0 || defaultLimits.conns <= 0 {
		t.Errorf("unbounded: %+v", defaultLimits)
	}
}

// Beyond the cap, a connection waits to be accepted until one closes.
func TestConnectionCap(t *testing.T) {
	const limit = 2
	path := served(t, http.HandlerFunc(ping), limits{readHeader: time.Minute, read: time.Minute, write: time.Minute,
		idle: time.Minute, conns: limit})
	var held []net.Conn
	for range limit {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	answered := make(chan error, 1)
	go func() { answered <- NewClient(path).Do(context.Background(), "GET", "/v1/ping", nil) }()
	select {
	case err := <-answered:
		t.Fatalf("answered beyond the cap of %d connections (%v)", limit, err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a liveness bound, not a timing assertion
		t.Fatal("not answered a minute after a connection closed")
	}
}
