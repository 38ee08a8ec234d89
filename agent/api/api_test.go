package api

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
