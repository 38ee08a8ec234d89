package statefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTripMissingAndCorrupt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	var v map[string]int
	if err := Load(dir, "r.json", &v); err != nil || v != nil {
		t.Fatalf("missing file: %v %v", v, err)
	}
	if err := Save(dir, "r.json", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if err := Load(dir, "r.json", &v); err != nil || v["a"] != 1 {
		t.Fatalf("round trip: %v %v", v, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	os.WriteFile(filepath.Join(dir, "r.json"), []byte("{"), 0o600)
	if err := Load(dir, "r.json", &v); err == nil || !strings.Contains(err.Error(), "r.json") {
		t.Fatalf("corrupt file: %v", err)
	}
}
