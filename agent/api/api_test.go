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
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another lvsd is running") {
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
