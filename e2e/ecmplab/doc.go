// Package ecmplab runs BGP speakers on the directors of an e2e/topo
// topology against FRR as the upstream router, for the engine-level VM
// tests of cluster/bgp and cluster/bfd and for e2e/ecmpbench, which
// compares lvsd's embedded speaker with FRR on the directors.
//
// A GoBGP speaker dials from whatever goroutine it likes, so it cannot
// share a process with other namespaces: each Speaker is the calling
// binary itself, re-executed inside the director's namespace in helper
// mode (RunHelperIfRequested, called first in TestMain or main) and driven
// over its stdin and stdout with one JSON object per line. Its log (slog
// text) goes to stderr, kept for assertions.
package ecmplab
