package toa

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

// TestVerifierAccepts loads each program without pinning and, when the
// kernel refuses one, prints the verifier's whole log (the loaders' errors
// carry its last lines only).
func TestVerifierAccepts(t *testing.T) {
	requireRoot(t)
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"director": loadDirector, "realserver": loadRealServer} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
		c, err := ebpf.NewCollection(spec)
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Errorf("%s: %+v", name, ve)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.Close()
	}
}
