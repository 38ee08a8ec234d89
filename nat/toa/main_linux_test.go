package toa

import (
	"os"
	"testing"
)

// TestMain runs the binary as the datapath tests' server when they start
// it so.
func TestMain(m *testing.M) {
	if spec := os.Getenv(serverEnv); spec != "" {
		os.Exit(serve(spec))
	}
	os.Exit(m.Run())
}
