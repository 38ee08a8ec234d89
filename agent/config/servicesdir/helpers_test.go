package servicesdir

import (
	"os"
	"path/filepath"
	"testing"
)

// The service files and the key below are config's test values too.

const (
	svcHead = "service: web\nvip: 10.0.0.50\nports: [80]\n"
	svcOne  = "backends: [{address: 10.0.0.11}]\n"
	svcGood = svcHead + svcOne
)

// withWeight is a service whose one backend has weight w, on line 5 at
// column 34.
func withWeight(w string) string {
	return svcHead + "backends:\n  - {address: 10.0.0.11, weight: " + w + "}\n"
}

const testKey = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=" // 32 bytes of 7

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
