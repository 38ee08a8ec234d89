package director

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lvsd/lvsd/agent/configsync"
	"github.com/lvsd/lvsd/cluster/identity"
)

type noPeers struct{}

func (noPeers) ConfigPeers() []string                 { return nil }
func (noPeers) SendConfig(string, []byte) error       { return nil }
func (noPeers) SendConfigPacket(string, []byte) error { return nil }

func TestServeConfigSync(t *testing.T) {
	other := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	if h := serveConfigSync(other, nil, "lb1"); h == nil {
		t.Fatal("no handler without config sync")
	}
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	s, err := configsync.New(configsync.Config{Node: "lb1", Dir: t.TempDir(), Sources: []string{"lb1"}, Transport: noPeers{},
		Keys: &identity.Keys{Private: key, Directors: map[string][]ed25519.PublicKey{"lb1": {identity.Public(key)}}}})
	if err != nil {
		t.Fatal(err)
	}
	h := serveConfigSync(other, s, "lb1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, RouteConfigSync, nil))
	var st ConfigSyncStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusOK || st.Node != "lb1" || st.Schema == 0 {
		t.Errorf("GET %s: %d %s (%v)", RouteConfigSync, rec.Code, rec.Body, err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("the other routes are not the API's any more: %d", rec.Code)
	}
}
